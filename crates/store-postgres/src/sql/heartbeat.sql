-- Heartbeat a batch of running jobs in one statement, fenced: only a job still running under
-- the presented fencing token with an unexpired lease (database clock) is extended; the caller
-- answers every other item LeaseLost. A meta or progress given replaces the stored one.
--
-- $1 id uuid[], $2 token bigint[], $3 meta jsonb[] (NULL: keep), $4 progress jsonb[]
-- (NULL: keep), $5 lease_us bigint.
UPDATE drover.jobs j
SET lease_expires_at = now() + $5 * interval '1 microsecond',
    meta = COALESCE(i.meta, j.meta),
    progress = COALESCE(i.progress, j.progress)
FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[], $4::jsonb[]) AS i(id, token, meta, progress)
WHERE j.id = i.id
  AND j.state = 'running'
  AND j.fencing_token = i.token
  AND j.lease_expires_at > now()
RETURNING j.id, j.fencing_token, j.cancel_requested, j.lease_expires_at

-- Heartbeat a batch of running jobs in one statement, fenced: only a job still running under
-- the presented fencing token with an unexpired lease (database clock) is extended; the caller
-- answers every other item LeaseLost. A meta or progress given replaces the stored one. A job
-- claimed ahead whose handler started `started_us` ago gets started_at = now() - started_us,
-- never before its claim, unless a start is recorded already (core's Started event).
--
-- $1 id uuid[], $2 token bigint[], $3 meta jsonb[] (NULL: keep), $4 progress jsonb[]
-- (NULL: keep), $5 lease_us bigint, $6 started_us bigint[] (NULL: no start to record).
UPDATE drover.jobs j
SET lease_expires_at = now() + $5 * interval '1 microsecond',
    meta = COALESCE(i.meta, j.meta),
    progress = COALESCE(i.progress, j.progress),
    started_at = CASE
        WHEN j.started_at IS NULL AND i.started_us IS NOT NULL
            THEN GREATEST(j.attempted_at, now() - i.started_us * interval '1 microsecond')
        ELSE j.started_at
    END
FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[], $4::jsonb[], $6::bigint[])
     AS i(id, token, meta, progress, started_us)
WHERE j.id = i.id
  AND j.fencing_token = i.token
  -- Fenced: running under the presented token with an unexpired lease. The state test sits
  -- inside a CASE on purpose: written plainly it lets the planner drive the join from the
  -- partial jobs_running_lease_idx (every running job) and, once the statement's plan is
  -- cached as a generic plan, rescan the whole input for each of them (time proportional to
  -- running jobs x batch). Hidden, the only path is a primary-key lookup per input row.
  AND CASE WHEN j.state = 'running' THEN j.lease_expires_at > now() ELSE false END
RETURNING j.id, j.fencing_token, j.cancel_requested, j.lease_expires_at

-- Record a batch of successful runs in one statement: finish.sql's `succeeded` branch alone,
-- for the common batch where every item succeeded and no id repeats (the caller checks both).
-- Fenced like finish.sql: a job is changed only while running under the presented token with
-- an unexpired lease; the caller answers every other item LeaseLost. The transition is core's
-- `state::apply` for complete (DESIGN.md section 3): succeeded, result stored, lease cleared,
-- finished_at set; attempt, run_at, errors and cancel_requested unchanged (a success is
-- recorded even when a cancel was requested, DESIGN.md section 9). Nothing becomes ready, so
-- nothing is notified. Simpler than finish.sql, so it is cheaper to plan and to run.
--
-- $1 id uuid[], $2 token bigint[], $3 result jsonb[].
UPDATE drover.jobs j
SET state = 'succeeded',
    result = i.result,
    finished_at = now(),
    lease_owner = NULL,
    lease_expires_at = NULL
FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[]) AS i(id, token, result)
WHERE j.id = i.id
  AND j.state = 'running'
  AND j.fencing_token = i.token
  AND j.lease_expires_at > now()
RETURNING j.id

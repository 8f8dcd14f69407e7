-- Heartbeat a batch of running jobs in one statement, fenced: only a job still running under
-- the presented fencing token with an unexpired lease (database clock) is extended. A meta or
-- progress given replaces the stored one. A job claimed ahead whose handler started
-- `started_us` ago gets started_at = now() - started_us, never before its claim, unless a start
-- is recorded already (core's Started event).
--
-- A job whose row another transaction holds (its own finish still propagating through a long
-- workflow, an operator's cancel) is skipped, not waited for (SKIP LOCKED): one long write must
-- not hold up the leases of the worker's other jobs. One row per job that exists: `busy` for a
-- skipped one (answered Deferred), the new lease for an extended one, NULLs for the rest
-- (answered LeaseLost, as is a job that does not exist).
--
-- $1 id uuid[], $2 token bigint[], $3 meta jsonb[] (NULL: keep), $4 progress jsonb[]
-- (NULL: keep), $5 lease_us bigint, $6 started_us bigint[] (NULL: no start to record).
WITH locked AS (
    SELECT j.id
    FROM drover.jobs j
    WHERE j.id = ANY($1::uuid[])
    ORDER BY j.id
    -- The lock the UPDATE below takes; it does not conflict with the key-share lock of a
    -- foreign key check (an enqueue naming the job as parent or dependency).
    FOR NO KEY UPDATE SKIP LOCKED
),
updated AS (
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
    JOIN locked l ON l.id = i.id
    WHERE j.id = i.id
      AND j.fencing_token = i.token
      -- Fenced: running under the presented token with an unexpired lease. The state test
      -- sits inside a CASE on purpose: written plainly it lets the planner drive the join from
      -- the partial jobs_running_lease_idx (every running job) and, once the statement's plan
      -- is cached as a generic plan, rescan the whole input for each of them (time
      -- proportional to running jobs x batch). Hidden, the only path is a primary-key lookup
      -- per input row.
      AND CASE WHEN j.state = 'running' THEN j.lease_expires_at > now() ELSE false END
    RETURNING j.id, j.fencing_token, j.cancel_requested, j.lease_expires_at
)
SELECT j.id, l.id IS NULL AS busy, u.fencing_token, u.cancel_requested, u.lease_expires_at
FROM drover.jobs j
LEFT JOIN locked l ON l.id = j.id
LEFT JOIN updated u ON u.id = j.id
WHERE j.id = ANY($1::uuid[])

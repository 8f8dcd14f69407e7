-- Record a batch of finished runs in one statement, fenced like heartbeat.sql: a job is
-- changed only while running under the presented token with an unexpired lease; the caller
-- answers every other item LeaseLost. Of repeated ids only the first item counts.
--
-- The transitions are core's `state::apply` table (docs/design.md section 3), pinned by the
-- contract suite:
--   succeeded -> succeeded, result stored;
--   failed    -> error appended; cancelled if a cancel was requested; else queued at
--                now + delay when a delay is given and attempt < max_attempts; else failed;
--   snoozed   -> cancelled if a cancel was requested; else queued at now + delay, attempt
--                given back;
--   released  -> cancelled if a cancel was requested; else queued now, attempt given back;
--   cancelled -> error appended, cancelled.
-- Every outcome clears the lease; terminal outcomes set finished_at. A job claimed ahead whose
-- handler started `started_us` ago records its start first, as heartbeat.sql does. The error list keeps the
-- newest $7 entries. Jobs that became ready again wake idle workers (NOTIFY with the queue);
-- a job under a max_running bound answers whom to wake (freed_queue: its queue, or '*'), which
-- the store wakes after commit.
--
-- $1 id uuid[], $2 token bigint[], $3 outcome text[], $4 result jsonb[], $5 message text[],
-- $6 delay_us bigint[] (failed: NULL means do not retry), $7 errors kept integer,
-- $8 started_us bigint[] (NULL: no start to record), $9 parents uuid[] (the hint of
-- FinishItem::parent).
WITH parents_first AS (
    -- The parents the caller names (FinishItem::parent), locked before any child and in id
    -- order, the order a parent's cancel takes (parents_lock.sql), so the two never deadlock.
    -- Only a hint: the children are counted for the parents stored (finish_parents.sql).
    SELECT p.id
    FROM drover.jobs p
    WHERE p.id = ANY($9::uuid[])
    ORDER BY p.id
    FOR UPDATE OF p
),
input AS (
    SELECT DISTINCT ON (i.id) i.*
    FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::jsonb[], $5::text[], $6::bigint[],
                $8::bigint[])
         WITH ORDINALITY AS i(id, token, outcome, result, message, delay_us, started_us, ord)
    ORDER BY i.id, i.ord
),
updated AS (
    UPDATE drover.jobs j
    SET state = CASE
            WHEN i.outcome = 'succeeded' THEN 'succeeded'
            WHEN i.outcome = 'cancelled' OR j.cancel_requested THEN 'cancelled'
            WHEN i.outcome IN ('snoozed', 'released') THEN 'queued'
            WHEN i.delay_us IS NOT NULL AND j.attempt < j.max_attempts THEN 'queued'
            ELSE 'failed'
        END,
        attempt = CASE
            WHEN i.outcome IN ('snoozed', 'released') AND NOT j.cancel_requested
                THEN GREATEST(j.attempt - 1, 0)
            ELSE j.attempt
        END,
        run_at = CASE
            WHEN i.outcome IN ('succeeded', 'cancelled') OR j.cancel_requested THEN j.run_at
            WHEN i.outcome = 'released' THEN now()
            WHEN i.outcome = 'snoozed'
                THEN now() + COALESCE(i.delay_us, 0) * interval '1 microsecond'
            WHEN i.delay_us IS NOT NULL AND j.attempt < j.max_attempts
                THEN now() + i.delay_us * interval '1 microsecond'
            ELSE j.run_at
        END,
        finished_at = CASE
            WHEN i.outcome IN ('succeeded', 'cancelled') OR j.cancel_requested THEN now()
            WHEN i.outcome IN ('snoozed', 'released') THEN NULL
            WHEN i.delay_us IS NOT NULL AND j.attempt < j.max_attempts THEN NULL
            ELSE now()
        END,
        result = CASE WHEN i.outcome = 'succeeded' THEN i.result ELSE j.result END,
        errors = CASE
            WHEN i.outcome IN ('failed', 'cancelled') THEN (
                SELECT COALESCE(jsonb_agg(e.value ORDER BY e.n), '[]'::jsonb)
                FROM jsonb_array_elements(
                         j.errors || jsonb_build_array(jsonb_build_object(
                             'attempt', j.attempt, 'at', now(), 'message', i.message)))
                     WITH ORDINALITY AS e(value, n)
                WHERE e.n > jsonb_array_length(j.errors) + 1 - $7
            )
            ELSE j.errors
        END,
        started_at = CASE
            WHEN j.started_at IS NULL AND i.started_us IS NOT NULL
                THEN GREATEST(j.attempted_at, now() - i.started_us * interval '1 microsecond')
            -- A heartbeat that took the row lock first may have recorded a start after this
            -- statement's now(): a job never finishes before it started.
            WHEN j.started_at > now() THEN now()
            ELSE j.started_at
        END,
        lease_owner = NULL,
        lease_expires_at = NULL
    FROM input i
    WHERE j.id = i.id
      AND j.fencing_token = i.token
      -- Run once, before the first row: lock the named parents first.
      AND (SELECT count(*) FROM parents_first) >= 0
      -- Fenced: running under the presented token with an unexpired lease. The state test sits
      -- inside a CASE on purpose: written plainly it lets the planner drive the join from the
      -- partial jobs_running_lease_idx (every running job) and, once the statement's plan is
      -- cached as a generic plan, rescan the whole input for each of them (time proportional to
      -- running jobs x batch). Hidden, the only path is a primary-key lookup per input row.
      -- A job with dependents or live children propagates its end: outcome.rs records it in
      -- a transaction instead (docs/design.md section 10); a child's parent is counted below
      -- (finish_parents.sql). PostgreSQL re-checks the whole condition on the latest row
      -- version after waiting for a row lock, so a dependent or child stored concurrently is
      -- never missed. Inside the CASE too, for the same reason: written plainly, their guessed
      -- selectivity (a new table has no statistics) makes the planner drive the join from a
      -- scan of the whole table.
      AND CASE
              WHEN j.state = 'running'
                  THEN j.lease_expires_at > now() AND NOT j.has_dependents AND j.live_children = 0
              ELSE false
          END
    RETURNING j.id, j.state, j.queue, j.run_at, j.parent_id,
        -- freed_queue: sql/freed_queue.sql, appended here by sql.rs.

-- Record a batch of successful runs in one statement: finish.sql's `succeeded` branch alone,
-- for the common batch where every item succeeded and no id repeats (the caller checks both).
-- Fenced like finish.sql: a job is changed only while running under the presented token with
-- an unexpired lease; the caller answers every other item LeaseLost. The transition is core's
-- `state::apply` for complete (docs/design.md section 3): succeeded, result stored, lease cleared,
-- finished_at set; attempt, run_at, errors and cancel_requested unchanged (a success is
-- recorded even when a cancel was requested, docs/design.md section 9). A job under a
-- max_running bound answers whom to wake (freed_queue); a parent whose last child this was
-- becomes ready and is notified (finish_parents.sql, finish_succeeded_end.sql).
-- A job claimed ahead whose handler started `started_us` ago records its start too, as
-- heartbeat.sql does. Simpler than finish.sql, so it is cheaper to plan and to run.
--
-- $1 id uuid[], $2 token bigint[], $3 result jsonb[], $4 started_us bigint[] (NULL: no start
-- to record), $5 parents uuid[] (the hint of FinishItem::parent).
WITH parents_first AS (
    -- The parents the caller names (FinishItem::parent), locked before any child and in id
    -- order, the order a parent's cancel takes (parents_lock.sql), so the two never deadlock.
    -- Only a hint: the children are counted for the parents stored (finish_parents.sql).
    SELECT p.id
    FROM drover.jobs p
    WHERE p.id = ANY($5::uuid[])
    ORDER BY p.id
    FOR UPDATE OF p
),
updated AS (
UPDATE drover.jobs j
SET state = 'succeeded',
    result = i.result,
    finished_at = now(),
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
FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[], $4::bigint[])
     AS i(id, token, result, started_us)
WHERE j.id = i.id
  AND j.fencing_token = i.token
  -- Run once, before the first row: lock the named parents first.
  AND (SELECT count(*) FROM parents_first) >= 0
  -- Fenced: running under the presented token with an unexpired lease. The state test sits
  -- inside a CASE on purpose: written plainly it lets the planner drive the join from the
  -- partial jobs_running_lease_idx (every running job) and, once the statement's plan is
  -- cached as a generic plan, rescan the whole input for each of them (time proportional to
  -- running jobs x batch). Hidden, the only path is a primary-key lookup per input row.
  -- A job with dependents or live children propagates its end: outcome.rs records it in a
  -- transaction instead (docs/design.md section 10); a child's parent is counted below
  -- (finish_parents.sql). PostgreSQL re-checks the whole condition on the latest row version
  -- after waiting for a row lock, so a dependent or child stored concurrently is never missed.
  -- Inside the CASE too, for the same reason: written plainly, their guessed selectivity (a
  -- new table has no statistics) makes the planner drive the join from a scan of the whole
  -- table.
  AND CASE
          WHEN j.state = 'running'
              THEN j.lease_expires_at > now() AND NOT j.has_dependents AND j.live_children = 0
          ELSE false
      END
RETURNING j.id, j.state, j.parent_id,
    -- freed_queue: sql/freed_queue.sql, appended here by sql.rs.

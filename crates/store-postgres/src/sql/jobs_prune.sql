-- Delete at most $2 terminal jobs that finished more than $1 ago (database clock), oldest
-- first; rows another pruner is deleting are skipped, so concurrent pruners share the work.
-- Kept for now (docs/design.md section 10): a job that a job not yet terminal depends on (it
-- may read its result), a parent with live children, and a child whose parent is not
-- terminal. The edges of the deleted jobs go with them, and so do a deleted child's link to
-- its parent and a deleted parent's links to its children (0009_job_children.sql), as an
-- operator delete does (job_delete.sql).
--
-- The end of the statement is deleted_relations.sql, which sql.rs appends.
--
-- $1 older_than_us bigint, $2 limit integer.
WITH doomed AS (
    SELECT j.id
    FROM drover.jobs j
    WHERE j.state IN ('succeeded', 'failed', 'cancelled')
      AND j.finished_at < now() - $1 * interval '1 microsecond'
      AND j.live_children = 0
      -- The parent's and the dependents' states are read by primary key per candidate (scalar
      -- subqueries): as joins the planner would scan every live job of the table once.
      AND (j.parent_id IS NULL
           OR COALESCE((SELECT p.state FROM drover.jobs p WHERE p.id = j.parent_id)
                       IN ('succeeded', 'failed', 'cancelled'), true))
      AND (SELECT true
           FROM drover.job_dependencies d
           WHERE d.depends_on_id = j.id
             AND (SELECT w.state FROM drover.jobs w WHERE w.id = d.job_id)
                 IN ('waiting', 'queued', 'running', 'reconciling')
           LIMIT 1) IS NULL
    ORDER BY j.finished_at
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
),
deleted AS (
    DELETE FROM drover.jobs j
    USING doomed d
    WHERE j.id = d.id
    RETURNING j.id, j.parent_id
),

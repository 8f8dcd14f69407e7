-- Delete at most $2 terminal jobs that finished more than $1 ago (database clock), oldest
-- first; rows another pruner is deleting are skipped, so concurrent pruners share the work.
-- Kept for now (docs/design.md section 10): a job that a job not yet terminal depends on (it
-- may read its result), a parent with live children, and a child whose parent is not
-- terminal. The edges of the deleted jobs go with them.
--
-- $1 older_than_us bigint, $2 limit integer.
WITH doomed AS (
    SELECT j.id
    FROM drover.jobs j
    WHERE j.state IN ('succeeded', 'failed', 'cancelled')
      AND j.finished_at < now() - $1 * interval '1 microsecond'
      AND j.live_children = 0
      AND (j.parent_id IS NULL OR NOT EXISTS (
          SELECT 1 FROM drover.jobs p
          WHERE p.id = j.parent_id AND p.state IN ('waiting', 'queued', 'running', 'reconciling')))
      AND NOT EXISTS (
          SELECT 1
          FROM drover.job_dependencies d
          JOIN drover.jobs w ON w.id = d.job_id
          WHERE d.depends_on_id = j.id
            AND w.state IN ('waiting', 'queued', 'running', 'reconciling'))
    ORDER BY j.finished_at
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
),
deleted AS (
    DELETE FROM drover.jobs j
    USING doomed d
    WHERE j.id = d.id
    RETURNING j.id
),
edges AS (
    DELETE FROM drover.job_dependencies e
    USING deleted d
    WHERE e.depends_on_id = d.id OR e.job_id = d.id
)
SELECT count(*) AS pruned FROM deleted

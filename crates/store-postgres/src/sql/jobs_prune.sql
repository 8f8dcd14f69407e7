-- Delete at most $2 terminal jobs that finished more than $1 ago (database clock), oldest
-- first; rows another pruner is deleting are skipped, so concurrent pruners share the work.
--
-- $1 older_than_us bigint, $2 limit integer.
WITH doomed AS (
    SELECT j.id
    FROM drover.jobs j
    WHERE j.state IN ('succeeded', 'failed', 'cancelled')
      AND j.finished_at < now() - $1 * interval '1 microsecond'
    ORDER BY j.finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM drover.jobs j
USING doomed d
WHERE j.id = d.id

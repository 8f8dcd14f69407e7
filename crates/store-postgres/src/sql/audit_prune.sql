-- Deletes at most $2 audit records older than $1 (database clock), oldest first.
--
-- $1 older_than_us bigint, $2 limit integer.
WITH doomed AS (
    SELECT id
    FROM drover.audit_log
    WHERE at < now() - $1 * interval '1 microsecond'
    ORDER BY at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM drover.audit_log a
    USING doomed d
    WHERE a.id = d.id
    RETURNING a.id
)
SELECT count(*) AS pruned FROM deleted

-- The end of finish_succeeded.sql, after the freed_queue column and the parents' CTEs sql.rs
-- puts between them (freed_queue.sql, finish_parents.sql): parents whose last child this was
-- wake idle workers, once per queue.
,
notified AS (
    SELECT pg_notify('drover_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM parents WHERE woken) AS q
)
SELECT updated.id, updated.freed_queue, (SELECT count(*) FROM notified) AS notified_queues
FROM updated

-- The end of finish.sql, after the freed_queue column sql.rs puts between them (freed_queue.sql).
),
notified AS (
    SELECT pg_notify('drover_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM updated WHERE state = 'queued' AND run_at <= now()) AS q
)
SELECT updated.id, updated.state, updated.freed_queue,
       (SELECT count(*) FROM notified) AS notified_queues
FROM updated

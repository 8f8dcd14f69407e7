    -- enqueue_insert.sql, continued: in input order, skipping taken keys.
    ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING id, queue, run_at, created_at
),
notified AS (
    SELECT pg_notify('drover_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE $18::boolean AND run_at <= now()) AS q
)
SELECT inserted.id, inserted.run_at, inserted.created_at, inserted.run_at <= now() AS ready,
       (SELECT count(*) FROM notified) AS notified_queues,
       CASE WHEN $15::boolean THEN (SELECT n FROM pending) END AS pending_before,
       CASE WHEN $16::boolean THEN (SELECT counts FROM tenant_pending) END AS tenant_pending_before
FROM inserted

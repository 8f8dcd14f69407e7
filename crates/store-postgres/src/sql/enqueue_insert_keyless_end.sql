    -- enqueue_insert_keyless.sql, continued.
    RETURNING id, queue, run_at, created_at
),
notified AS (
    SELECT pg_notify('drover_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE $18::boolean AND run_at <= now()) AS q
)
-- Answers: a batch's jobs mostly run at once (run_at = created_at = now()), so rather than a
-- row per job (a tuplestore, a message and a decode each) one row sums the statement up (id
-- NULL, run_at and created_at = now(), the counts, and how many jobs were inserted), and a row
-- follows only for each job whose run_at is not now() (delayed, or dated: in the past too);
-- the caller answers the others with now() (enqueue.rs, expand_keyless). UNION ALL promises
-- no order: the caller finds the summary by its NULL id.
SELECT NULL::uuid AS id, now() AS run_at, now() AS created_at, true AS ready,
       (SELECT count(*) FROM notified) AS notified_queues,
       CASE WHEN $15::boolean THEN (SELECT n FROM pending) END AS pending_before,
       CASE WHEN $16::boolean THEN (SELECT counts FROM tenant_pending) END AS tenant_pending_before,
       (SELECT count(*) FROM inserted) AS inserted
UNION ALL
SELECT inserted.id, inserted.run_at, inserted.created_at, inserted.run_at <= now(),
       NULL, NULL, NULL, NULL
FROM inserted
WHERE inserted.run_at <> inserted.created_at

-- Resume a queue and wake idle workers with a NOTIFY carrying the queue name. A queue's row
-- exists only to store a pause, so resuming removes it: a queue resumed by mistake (a typo, a
-- queue that never had jobs) leaves nothing behind in the queue list.
--
-- $1 name text.
WITH resumed AS (
    DELETE FROM drover.queues WHERE name = $1
),
notified AS (
    SELECT pg_notify('drover_jobs', $1)
)
SELECT $1::text AS name, false AS paused, NULL::timestamptz AS paused_at,
       (SELECT count(*) FROM notified) AS notified_queues

-- Resume a queue and wake idle workers with a NOTIFY carrying the queue name. A queue's row
-- exists only to store a pause, so resuming removes it: a queue resumed by mistake (a typo, a
-- queue that never had jobs) leaves nothing behind in the queue list. `changed`: this
-- statement removed a pause (of deletes racing on one row, the first deletes it and the others
-- find it gone, so exactly one answers true).
--
-- $1 name text.
WITH resumed AS (
    DELETE FROM drover.queues WHERE name = $1
    RETURNING paused
),
notified AS (
    SELECT pg_notify('drover_jobs', $1)
)
SELECT EXISTS (SELECT 1 FROM resumed WHERE paused) AS changed
FROM (SELECT count(*) FROM notified) AS n

-- Resume a queue (storing its unpaused state, like a pause stores its paused one) and wake
-- idle workers with a NOTIFY carrying the queue name.
--
-- $1 name text.
WITH resumed AS (
    INSERT INTO drover.queues AS q (name, paused, paused_at)
    VALUES ($1, false, NULL)
    ON CONFLICT (name) DO UPDATE
    SET paused = false, paused_at = NULL
    RETURNING q.name, q.paused, q.paused_at
),
notified AS (
    SELECT pg_notify('drover_jobs', $1)
)
SELECT resumed.name, resumed.paused, resumed.paused_at,
       (SELECT count(*) FROM notified) AS notified_queues
FROM resumed

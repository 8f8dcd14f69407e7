-- Pause a queue cluster-wide, creating its row if needed. Answers a row only when this
-- statement paused the queue: the insert, or the update of a row that was not paused. The
-- update's condition is checked under the row's lock against its latest version (ON CONFLICT),
-- so of pauses racing on one queue exactly one answers. A paused queue is left as it is (it
-- keeps the time it was first paused) and no row is answered; the caller reads it back
-- (queue_get.sql).
--
-- $1 name text.
INSERT INTO drover.queues AS q (name, paused, paused_at)
VALUES ($1, true, now())
ON CONFLICT (name) DO UPDATE
SET paused = true,
    paused_at = now()
WHERE NOT q.paused
RETURNING q.name, q.paused, q.paused_at

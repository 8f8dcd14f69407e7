-- Pause a queue cluster-wide, creating its row if needed; pausing a paused queue keeps the time
-- it was first paused.
--
-- $1 name text.
INSERT INTO drover.queues AS q (name, paused, paused_at)
VALUES ($1, true, now())
ON CONFLICT (name) DO UPDATE
SET paused = true,
    paused_at = CASE WHEN q.paused THEN q.paused_at ELSE now() END
RETURNING q.name, q.paused, q.paused_at

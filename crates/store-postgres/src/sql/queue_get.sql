-- One queue's stored pause, if any (a queue's row exists only while it is paused).
--
-- $1 name text.
SELECT name, paused, paused_at
FROM drover.queues
WHERE name = $1

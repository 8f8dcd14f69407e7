-- Remove a schedule.
--
-- $1 name text.
DELETE FROM drover.schedules WHERE name = $1

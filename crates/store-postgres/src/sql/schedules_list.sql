-- Schedules by name.
SELECT s.* FROM drover.schedules s ORDER BY s.name

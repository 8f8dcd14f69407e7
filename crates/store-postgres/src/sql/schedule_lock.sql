-- Lock a schedule for an upsert decided by core's `Schedule::upsert`: firing it waits until the
-- upsert commits, and then finds the row as the upsert left it.
--
-- $1 name text.
SELECT s.* FROM drover.schedules s WHERE s.name = $1 FOR UPDATE

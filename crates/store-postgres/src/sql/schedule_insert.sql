-- Create a schedule no row had the name of when the upsert looked (schedule_lock.sql). Nothing
-- is written, and no row answered, when a concurrent upsert created it first: the caller then
-- locks that row and decides again.
--
-- $1 name, $2 cron, $3 timezone, $4 kind, $5 args jsonb, $6 queue, $7 priority smallint,
-- $8 max_attempts integer, $9 created_at timestamptz.
INSERT INTO drover.schedules AS s
    (name, cron, timezone, kind, args, queue, priority, max_attempts, created_at, last_tick_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL)
ON CONFLICT (name) DO NOTHING
RETURNING s.*

-- Replace the definition of a schedule the caller locked (schedule_lock.sql), as core's
-- `Schedule::upsert` decided: `created_at` moves only when the timing changed, and the last
-- tick is never written here (only schedule_fire.sql moves it, forward).
--
-- $1 name, $2 cron, $3 timezone, $4 kind, $5 args jsonb, $6 queue, $7 priority smallint,
-- $8 max_attempts integer, $9 created_at timestamptz.
UPDATE drover.schedules s
SET cron = $2,
    timezone = $3,
    kind = $4,
    args = $5,
    queue = $6,
    priority = $7,
    max_attempts = $8,
    created_at = $9
WHERE s.name = $1
RETURNING s.*

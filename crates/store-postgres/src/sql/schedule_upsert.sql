-- Create or replace a schedule; a replaced one restarts from now (no catch-up of ticks before).
--
-- $1 name, $2 cron, $3 timezone, $4 kind, $5 args jsonb, $6 queue, $7 priority smallint,
-- $8 max_attempts integer.
INSERT INTO drover.schedules AS s
    (name, cron, timezone, kind, args, queue, priority, max_attempts, created_at, last_tick_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), NULL)
ON CONFLICT (name) DO UPDATE
SET cron = EXCLUDED.cron,
    timezone = EXCLUDED.timezone,
    kind = EXCLUDED.kind,
    args = EXCLUDED.args,
    queue = EXCLUDED.queue,
    priority = EXCLUDED.priority,
    max_attempts = EXCLUDED.max_attempts,
    created_at = EXCLUDED.created_at,
    last_tick_at = NULL
RETURNING s.*

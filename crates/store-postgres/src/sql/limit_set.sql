-- Create or replace a limit policy; a replaced policy keeps its GCRA state (rate_tat).
--
-- $1 key text, $2 max_running integer, $3 rate_count integer, $4 rate_period_ms bigint.
INSERT INTO drover.limits AS l (key, max_running, rate_count, rate_period_ms)
VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO UPDATE
SET max_running = EXCLUDED.max_running,
    rate_count = EXCLUDED.rate_count,
    rate_period_ms = EXCLUDED.rate_period_ms
RETURNING l.key, l.max_running, l.rate_count, l.rate_period_ms, l.rate_tat

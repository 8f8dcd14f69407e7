-- Limit policies by key, with the database clock for their rate availability.
SELECT l.key, l.max_running, l.rate_count, l.rate_period_ms, l.rate_tat, now() AS db_now
FROM drover.limits l
ORDER BY l.key

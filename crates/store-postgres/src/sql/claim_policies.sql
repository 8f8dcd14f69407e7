-- Slow-path claim, step 1: lock every limit policy (in key order, so claimers never deadlock)
-- for the rest of the transaction and read its GCRA state. Claimers with policies serialize
-- here, which is what keeps max_running and rates exact. The admission's clock is read later,
-- with the running counts (limits_running.sql).
SELECT l.key, l.max_running, l.rate_count, l.rate_period_ms, l.rate_tat
FROM drover.limits l
ORDER BY l.key
FOR UPDATE

-- Create or replace a limit policy. A replaced policy keeps its GCRA state (rate_tat), moved
-- so that the next claim comes one new interval after the last counted one when the rate
-- changes (the rule of drover_core::Rate::replacing, which the memory store runs: the last
-- claim is rate_tat less the old interval; without an old rate the time is cut to now() + the
-- new interval). An interval is period / count rounded up to whole microseconds
-- (Rate::emission_interval). A policy without a rate keeps rate_tat as it is.
--
-- Wakes every worker (NOTIFY drover_jobs '*', StoreEvent::LimitsChanged): jobs the old policy
-- held may be claimable now. Sent in this statement's transaction: a rare operator change.
--
-- $1 key text, $2 max_running integer, $3 rate_count integer, $4 rate_period_ms bigint.
WITH policy AS (
INSERT INTO drover.limits AS l (key, max_running, rate_count, rate_period_ms)
VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO UPDATE
SET max_running = EXCLUDED.max_running,
    rate_count = EXCLUDED.rate_count,
    rate_period_ms = EXCLUDED.rate_period_ms,
    rate_tat = CASE
        WHEN l.rate_tat IS NULL OR EXCLUDED.rate_count IS NULL THEN l.rate_tat
        WHEN l.rate_count IS NULL THEN LEAST(
            l.rate_tat,
            now() + ((EXCLUDED.rate_period_ms * 1000 + EXCLUDED.rate_count - 1)
                     / EXCLUDED.rate_count) * interval '1 microsecond')
        ELSE l.rate_tat
            - ((l.rate_period_ms * 1000 + l.rate_count - 1) / l.rate_count)
              * interval '1 microsecond'
            + ((EXCLUDED.rate_period_ms * 1000 + EXCLUDED.rate_count - 1)
               / EXCLUDED.rate_count) * interval '1 microsecond'
    END
RETURNING l.key, l.max_running, l.rate_count, l.rate_period_ms, l.rate_tat
)
SELECT policy.*, pg_notify('drover_jobs', '*')::text AS wake
FROM policy

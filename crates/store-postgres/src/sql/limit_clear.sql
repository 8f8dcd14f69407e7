-- Remove a limit policy; answers its key, or no row when none had it. Wakes every worker
-- (NOTIFY drover_jobs '*', StoreEvent::LimitsChanged) when a policy was removed: the jobs it
-- held are claimable now.
--
-- $1 key text.
WITH gone AS (
    DELETE FROM drover.limits WHERE key = $1 RETURNING key
)
SELECT gone.key, pg_notify('drover_jobs', '*')::text AS wake
FROM gone

-- Pending (queued, running, reconciling) jobs, in total (tenant NULL, when $1) and per tenant
-- of $2. Run after taking the quota locks, so the snapshot includes every committed enqueue.
--
-- $1 count the global total boolean, $2 tenants text[].
SELECT NULL::text AS tenant, count(*)::bigint AS pending
FROM drover.jobs
WHERE $1::boolean AND state IN ('queued', 'running', 'reconciling')
UNION ALL
SELECT tenant, count(*)::bigint AS pending
FROM drover.jobs
WHERE tenant = ANY($2::text[]) AND state IN ('queued', 'running', 'reconciling')
GROUP BY tenant

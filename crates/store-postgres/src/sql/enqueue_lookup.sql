-- The stored jobs that made enqueue_insert.sql skip jobs: holders of the idempotency keys
-- (any state) and live (waiting, queued, running, reconciling) holders of the unique keys. Runs as its
-- own statement so it sees rows committed by concurrent enqueues after the insert's snapshot.
--
-- $1 tenant text[], $2 idempotency_key text[], $3 tenant text[], $4 unique_key text[].
SELECT j.*
FROM unnest($1::text[], $2::text[]) AS k(tenant, key)
JOIN drover.jobs j ON j.tenant = k.tenant AND j.idempotency_key = k.key
UNION ALL
SELECT j.*
FROM unnest($3::text[], $4::text[]) AS k(tenant, key)
JOIN drover.jobs j ON j.tenant = k.tenant AND j.unique_key = k.key
WHERE j.state IN ('waiting', 'queued', 'running', 'reconciling')

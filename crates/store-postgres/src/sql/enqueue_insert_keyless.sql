-- Enqueue a batch in which no job has an idempotency or unique key: enqueue_insert.sql (read its
-- notes; same parameters; the answers are summed up, see the end) without ON CONFLICT DO
-- NOTHING. With no key nothing can conflict (ids are fresh UUIDs), and ON CONFLICT costs every row a check of each unique index
-- and a speculative insertion (about a tenth of the statement's time on a 1,000-job batch); the
-- insertion order no longer matters either, so the input is not sorted and the arrays are
-- unnested in the select list (a ProjectSet node streams the rows; `unnest(...) WITH
-- ORDINALITY` in FROM first copies them all into a tuplestore: about 6 % of a 1,000-job
-- batch's time). Keep the two statements in step.
--
-- $1 id uuid[], $2 kind text[], $3 queue text[], $4 tenant text[], $5 args jsonb[],
-- $6 meta jsonb[] (NULL: {}), $7 priority smallint[], $8 run_at timestamptz[] (NULL: use the delay),
-- $9 delay_us bigint[] (NULL: ready now), $10 max_attempts integer[],
-- $11 idempotency_key text[], $12 request_hash text[], $13 unique_key text[],
-- $14 limit_keys text[] (each comma-joined; '' for none), $15 count pending jobs in total
-- boolean, $16 count pending jobs of the batch's tenants boolean, $17 the batch's distinct
-- tenants text[], $18 notify inside this transaction boolean.
--
-- Quotas: when asked ($15, $16; the caller holds the quota advisory locks, taken by an earlier
-- statement, so this statement's snapshot holds every committed enqueue), the summary row
-- (see the end) carries the pending (queued, running, reconciling) counts before this statement, in
-- total and per tenant as a JSON object (NULL when not asked), from scans of
-- jobs_waiting_idx and jobs_running_lease_idx (all of them for the total, the batch's tenants
-- only otherwise). The caller
-- adds its new jobs and rolls back when a quota would be passed.
WITH input AS (
    SELECT unnest($1::uuid[]) AS id, unnest($2::text[]) AS kind, unnest($3::text[]) AS queue,
           unnest($4::text[]) AS tenant, unnest($5::jsonb[]) AS args,
           unnest($6::jsonb[]) AS meta, unnest($7::smallint[]) AS priority,
           unnest($8::timestamptz[]) AS run_at, unnest($9::bigint[]) AS delay_us,
           unnest($10::integer[]) AS max_attempts, unnest($11::text[]) AS idempotency_key,
           unnest($12::text[]) AS request_hash, unnest($13::text[]) AS unique_key,
           unnest($14::text[]) AS limit_keys
),
inserted AS (
    INSERT INTO drover.jobs (id, kind, queue, tenant, args, meta, priority, run_at, state,
                             max_attempts, idempotency_key, request_hash, unique_key,
                             limit_keys, created_at)
    SELECT id, kind, queue, tenant, args, COALESCE(meta, '{}'::jsonb), priority,
           COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
           'queued', max_attempts, idempotency_key, request_hash, unique_key,
           CASE WHEN limit_keys = '' THEN '{}'::text[] ELSE string_to_array(limit_keys, ',') END,
           now()
    FROM input
    RETURNING id, queue, run_at, created_at
),
notified AS (
    SELECT pg_notify('drover_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE $18::boolean AND run_at <= now()) AS q
),
pending_by_tenant AS (
    -- Pending = waiting (queued, reconciling: jobs_waiting_idx) + running
    -- (jobs_running_lease_idx); two scans, each matching one partial index.
    SELECT p.tenant, sum(p.n)::bigint AS n
    FROM (
        SELECT tenant, count(*)::bigint AS n
        FROM drover.jobs
        WHERE ($15::boolean OR ($16::boolean AND tenant = ANY($17::text[])))
          AND state IN ('queued', 'reconciling')
        GROUP BY tenant
        UNION ALL
        SELECT tenant, count(*)::bigint AS n
        FROM drover.jobs
        WHERE ($15::boolean OR ($16::boolean AND tenant = ANY($17::text[])))
          AND state = 'running'
        GROUP BY tenant
    ) AS p
    GROUP BY p.tenant
),
pending AS (
    SELECT COALESCE(sum(n), 0)::bigint AS n FROM pending_by_tenant WHERE $15::boolean
),
tenant_pending AS (
    SELECT COALESCE(jsonb_object_agg(p.tenant, p.n), '{}'::jsonb) AS counts
    FROM pending_by_tenant p
    WHERE $16::boolean AND p.tenant = ANY($17::text[])
)
-- Answers: a batch's jobs mostly run at once (run_at = created_at = now()), so rather than a
-- row per job (a tuplestore, a message and a decode each) one row sums the statement up (id
-- NULL, run_at and created_at = now(), the counts, and how many jobs were inserted), and a row
-- follows only for each job whose run_at is not now() (delayed, or dated: in the past too);
-- the caller answers the others with now() (enqueue.rs, expand_keyless). UNION ALL promises
-- no order: the caller finds the summary by its NULL id.
SELECT NULL::uuid AS id, now() AS run_at, now() AS created_at, true AS ready,
       (SELECT count(*) FROM notified) AS notified_queues,
       CASE WHEN $15::boolean THEN (SELECT n FROM pending) END AS pending_before,
       CASE WHEN $16::boolean THEN (SELECT counts FROM tenant_pending) END AS tenant_pending_before,
       (SELECT count(*) FROM inserted) AS inserted
UNION ALL
SELECT inserted.id, inserted.run_at, inserted.created_at, inserted.run_at <= now(),
       NULL, NULL, NULL, NULL
FROM inserted
WHERE inserted.run_at <> inserted.created_at

-- The part both batch statements share (enqueue_insert.sql and enqueue_insert_keyless.sql
-- come before it and name the input; their _end.sql files follow). The jobs arrive as
-- parallel arrays (one bind per column, so 10,000 jobs never approach the 65,535-parameter
-- limit). Only the id and the two instants the database chose come back: the caller builds
-- the rest of each job from its input (jsonb normalisation cannot change a value's JSON
-- meaning), which saves sending and parsing every job's args again; `ready` says whether the
-- job is ready at once. With $18 (the caller's own transaction, `enqueue_in`), ready jobs
-- wake idle workers with one small NOTIFY per queue (the payload is the queue name, never
-- args; delivered only if the transaction commits); otherwise the store notifies after its
-- commit (notify.rs: a NOTIFY here would serialise concurrent commits).
--
-- $1 id uuid[], $2 kind text[], $3 queue text[], $4 tenant text[], $5 args jsonb[],
-- $6 meta jsonb[] (NULL: {}), $7 priority smallint[], $8 run_at timestamptz[] (NULL: use the delay),
-- $9 delay_us bigint[] (NULL: ready now), $10 max_attempts integer[],
-- $11 idempotency_key text[], $12 request_hash text[], $13 unique_key text[],
-- $14 limit_keys text[] (each comma-joined; '' for none), $15 count pending jobs in total
-- boolean, $16 count pending jobs of the batch's tenants boolean, $17 the batch's distinct
-- tenants text[], $18 notify inside this transaction boolean, $19 workflow_id uuid and $20
-- parent_id uuid of every job (NULL: none; workflow.rs), $21 trace_context jsonb[] (NULL:
-- none).
--
-- Quotas: when asked ($15, $16; the caller holds the quota advisory locks, taken by an earlier
-- statement, so this statement's snapshot holds every committed enqueue), the answer also
-- carries the pending (waiting, queued, running, reconciling) counts before this statement, in
-- total and per tenant as a JSON object (NULL when not asked), from scans of jobs_blocked_idx,
-- jobs_waiting_idx and jobs_running_lease_idx (all of them for the total, the batch's tenants
-- only otherwise); every
-- part of a statement reads the same snapshot, so these counts come first. The caller adds its
-- new jobs and rolls back when a quota would be passed.
pending_by_tenant AS (
    -- Pending = waiting for other jobs (jobs_blocked_idx) + waiting for a worker (queued,
    -- reconciling: jobs_waiting_idx) + running (jobs_running_lease_idx); three scans, each
    -- matching one partial index.
    SELECT p.tenant, sum(p.n)::bigint AS n
    FROM (
        SELECT tenant, count(*)::bigint AS n
        FROM drover.jobs
        WHERE ($15::boolean OR ($16::boolean AND tenant = ANY($17::text[])))
          AND state = 'waiting'
        GROUP BY tenant
        UNION ALL
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
),
inserted AS (
    INSERT INTO drover.jobs (id, kind, queue, tenant, args, meta, priority, run_at, state,
                             max_attempts, idempotency_key, request_hash, unique_key,
                             limit_keys, created_at, workflow_id, parent_id, trace_context)
    SELECT id, kind, queue, tenant, args, COALESCE(meta, '{}'::jsonb), priority,
           COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
           'queued', max_attempts, idempotency_key, request_hash, unique_key,
           CASE WHEN limit_keys = '' THEN '{}'::text[] ELSE string_to_array(limit_keys, ',') END,
           now(), $19::uuid, $20::uuid, trace_context
    FROM input

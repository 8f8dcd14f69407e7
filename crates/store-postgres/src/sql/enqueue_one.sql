-- Enqueue ONE job without quota counts: enqueue_insert.sql for a batch of one, as a plain
-- INSERT ... VALUES. Its plan does not depend on the values, so PostgreSQL soon reuses one
-- generic plan instead of planning every call (planning the unnest statement cost about as much
-- as the insert itself); one-job enqueues are the hot path of applications.
--
-- Same semantics as enqueue_insert.sql: ON CONFLICT DO NOTHING skips the job when its
-- idempotency key or live unique key is taken (the caller then looks the holder up with
-- enqueue_lookup.sql); only the values the database chose come back, with `ready` (the job is
-- ready at once). With $15 (the caller's own transaction, `enqueue_in`) a ready job wakes idle
-- workers with a NOTIFY carrying the queue name, delivered only if that transaction commits;
-- otherwise the store notifies after its commit (notify.rs).
--
-- $1 id uuid, $2 kind text, $3 queue text, $4 tenant text, $5 args jsonb, $6 meta jsonb,
-- $7 priority smallint, $8 run_at timestamptz (NULL: use the delay), $9 delay_us bigint
-- (NULL: ready now), $10 max_attempts integer, $11 idempotency_key text, $12 request_hash
-- text, $13 unique_key text, $14 limit_keys text[], $15 notify inside this transaction
-- boolean, $16 workflow_id uuid, $17 parent_id uuid (NULL: none; workflow.rs), $18
-- trace_context jsonb (NULL: none).
WITH inserted AS (
    INSERT INTO drover.jobs (id, kind, queue, tenant, args, meta, priority, run_at, state,
                             max_attempts, idempotency_key, request_hash, unique_key,
                             limit_keys, created_at, workflow_id, parent_id, trace_context)
    VALUES ($1, $2, $3, $4, $5, $6, $7,
            COALESCE($8, now() + COALESCE($9::bigint, 0) * interval '1 microsecond'),
            'queued', $10, $11, $12, $13, $14, now(), $16::uuid, $17::uuid, $18::jsonb)
    ON CONFLICT DO NOTHING
    RETURNING id, queue, run_at, created_at
),
notified AS (
    SELECT pg_notify('drover_jobs', inserted.queue)
    FROM inserted
    WHERE $15::boolean AND inserted.run_at <= now()
)
SELECT inserted.id, inserted.run_at, inserted.created_at, inserted.run_at <= now() AS ready,
       (SELECT count(*) FROM notified) AS notified_queues,
       NULL::bigint AS pending_before, NULL::jsonb AS tenant_pending_before
FROM inserted

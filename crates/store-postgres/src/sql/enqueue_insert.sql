-- Enqueue a batch in one statement: this file, then enqueue_insert_rows.sql (the parameters,
-- the quota counts and the INSERT both batch statements share), then enqueue_insert_end.sql
-- (sql.rs joins them at compile time). ON CONFLICT DO NOTHING skips a job whose idempotency
-- key or live unique key is taken (by a stored job or an earlier job of the same batch), so
-- the jobs are inserted in input order; the caller resolves skipped jobs with
-- enqueue_lookup.sql. Every created job answers a row.
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[],
                $7::smallint[], $8::timestamptz[], $9::bigint[], $10::integer[], $11::text[],
                $12::text[], $13::text[], $14::text[], $21::jsonb[])
         WITH ORDINALITY AS i(id, kind, queue, tenant, args, meta, priority, run_at, delay_us,
                              max_attempts, idempotency_key, request_hash, unique_key,
                              limit_keys, trace_context, ord)
),

-- Enqueue a batch in which no job has an idempotency or unique key: this file, then
-- enqueue_insert_rows.sql (the parameters, the quota counts and the INSERT both batch
-- statements share), then enqueue_insert_keyless_end.sql (sql.rs joins them at compile time).
-- enqueue_insert.sql without ON CONFLICT DO NOTHING: with no key nothing can conflict (ids are
-- fresh UUIDs), and ON CONFLICT costs every row a check of each unique index and a
-- speculative insertion (about a tenth of the statement's time on a 1,000-job batch); the
-- insertion order no longer matters either, so the input is not sorted and the arrays are
-- unnested in the select list (a ProjectSet node streams the rows; `unnest(...) WITH
-- ORDINALITY` in FROM first copies them all into a tuplestore: about 6 % of a 1,000-job
-- batch's time).
WITH input AS (
    SELECT unnest($1::uuid[]) AS id, unnest($2::text[]) AS kind, unnest($3::text[]) AS queue,
           unnest($4::text[]) AS tenant, unnest($5::jsonb[]) AS args,
           unnest($6::jsonb[]) AS meta, unnest($7::smallint[]) AS priority,
           unnest($8::timestamptz[]) AS run_at, unnest($9::bigint[]) AS delay_us,
           unnest($10::integer[]) AS max_attempts, unnest($11::text[]) AS idempotency_key,
           unnest($12::text[]) AS request_hash, unnest($13::text[]) AS unique_key,
           unnest($14::text[]) AS limit_keys, unnest($21::jsonb[]) AS trace_context
),

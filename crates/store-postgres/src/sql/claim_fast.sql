-- Claim in one statement (this file, then claim_start.sql, then claim_fast_end.sql; sql.rs
-- joins them at compile time): lock up to $3 ready jobs of the open (unpaused) queues and registered
-- kinds in claim order (priority, run_at, id), skipping rows other claimers hold, and start
-- them: attempt + 1, a new fencing token, the lease from the database clock. One index scan per
-- queue (jobs_claim_idx) feeds the merge. The first $6 claimed jobs in claim order start at
-- once (started_at set), the rest are claimed ahead (started_at NULL): as in
-- claim_queue.sql, rows before the ($6 + 1)-th candidate start (the claimed jobs are a prefix
-- of the candidates in claim order).
--
-- Limits: a candidate subject to a limit policy (one of its effective keys, explicit
-- limit_keys, kind:<kind> and queue:<queue>, has a policy) must be admitted atomically with the
-- policy check, which this statement does not do. So it claims only the candidates before the
-- first such job (order is kept) and reports `blocked`; the caller then claims the rest through
-- the slow path (claim_policies.sql ...). Always returns at least one row: when nothing was
-- claimed, a row whose job columns are NULL carries `blocked`.
--
-- $1 queues text[], $2 kinds text[], $3 limit integer, $4 worker text, $5 lease_us bigint,
-- $6 start integer (0..=$3).
WITH open_queues AS (
    SELECT q.name
    FROM unnest($1::text[]) AS q(name)
    WHERE NOT EXISTS (SELECT 1 FROM drover.queues p WHERE p.name = q.name AND p.paused)
),
candidates AS (
    SELECT c.id, c.priority, c.run_at, c.limited
    FROM open_queues oq
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at,
               EXISTS (
                   SELECT 1
                   FROM drover.limits l
                   WHERE l.key = ANY (j.limit_keys || ARRAY['kind:' || j.kind, 'queue:' || j.queue])
               ) AS limited
        FROM drover.jobs j
        WHERE j.state = 'queued'
          AND j.queue = oq.name
          AND j.run_at <= now()
          AND j.kind = ANY($2::text[])
        ORDER BY j.priority, j.run_at, j.id
        LIMIT $3
        FOR UPDATE OF j SKIP LOCKED
    ) AS c
    ORDER BY c.priority, c.run_at, c.id
    LIMIT $3
),
first_limited AS (
    SELECT c.priority, c.run_at, c.id
    FROM candidates c
    WHERE c.limited
    ORDER BY c.priority, c.run_at, c.id
    LIMIT 1
),

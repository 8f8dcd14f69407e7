-- Claim in one statement: lock up to $3 ready jobs of the open (unpaused) queues and registered
-- kinds in claim order (priority, run_at, id), skipping rows other claimers hold, and start
-- them: attempt + 1, a new fencing token, the lease from the database clock. One index scan per
-- queue (jobs_claim_idx) feeds the merge. The first $6 claimed jobs in claim order start at
-- once (started_at set), the rest are claimed ahead (started_at NULL): as in
-- claim_queue.sql, rows before the ($6 + 1)-th candidate start (the claimed jobs are a prefix
-- of the candidates in claim order).
-- The claim's time (attempted_at, started_at, the lease's start) is read from the clock once,
-- while the statement runs, after its snapshot: `now()` is the transaction's start and can
-- precede a change the claim saw.
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
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS at),
open_queues AS (
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
ahead AS (
    SELECT c.priority, c.run_at, c.id
    FROM candidates c
    ORDER BY c.priority, c.run_at, c.id
    OFFSET $6
    LIMIT 1
),
claimed AS (
    UPDATE drover.jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        fencing_token = j.fencing_token + 1,
        lease_owner = $4,
        lease_expires_at = (SELECT at FROM clock) + $5 * interval '1 microsecond',
        attempted_at = (SELECT at FROM clock),
        started_at = CASE
            WHEN NOT EXISTS (SELECT 1 FROM ahead)
                 OR (c.priority, c.run_at, c.id) < (SELECT a.priority, a.run_at, a.id FROM ahead a)
                THEN (SELECT at FROM clock)
        END,
        cancel_requested = false
    FROM candidates c
    WHERE j.id = c.id
      AND NOT c.limited
      AND NOT EXISTS (
          SELECT 1 FROM first_limited f
          WHERE (f.priority, f.run_at, f.id) < (c.priority, c.run_at, c.id)
      )
    RETURNING j.*
)
SELECT EXISTS (SELECT 1 FROM first_limited) AS blocked, claimed.*
FROM (SELECT 1) AS one
LEFT JOIN claimed ON true

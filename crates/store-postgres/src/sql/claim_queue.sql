-- Claim from ONE queue while no limit policy exists (the runner's claim: one claim loop per
-- queue): claim_fast.sql without the per-queue lateral join and the per-candidate policy
-- checks, so it is cheaper to plan and to run. Locks up to $3 ready jobs of the queue (unless
-- it is paused) and of the registered kinds in claim order (priority, run_at, id), skipping
-- rows other claimers hold, and starts them: attempt + 1, a new fencing token, the lease from
-- the database clock.
--
-- The update finds the locked candidates by primary key (`id = ANY(ARRAY(...))`): joined
-- with the candidates instead, a large claim is planned as a hash join over a sequential scan
-- of the whole table.
--
-- When any limit policy exists it claims nothing and reports `blocked`: the caller then claims
-- with claim_fast.sql, which admits jobs against the policies. Policies are read in this
-- statement's snapshot, like claim_fast.sql reads them. Always returns at least one row: when
-- nothing was claimed, a row whose job columns are NULL carries `blocked`.
--
-- $1 queue text, $2 kinds text[], $3 limit integer, $4 worker text, $5 lease_us bigint.
WITH candidates AS (
    SELECT j.id
    FROM drover.jobs j
    WHERE j.state = 'queued'
      AND j.queue = $1
      AND j.run_at <= now()
      AND j.kind = ANY($2::text[])
      AND NOT EXISTS (SELECT 1 FROM drover.limits)
      AND NOT EXISTS (SELECT 1 FROM drover.queues p WHERE p.name = $1 AND p.paused)
    ORDER BY j.priority, j.run_at, j.id
    LIMIT $3
    FOR UPDATE OF j SKIP LOCKED
),
claimed AS (
    UPDATE drover.jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        fencing_token = j.fencing_token + 1,
        lease_owner = $4,
        lease_expires_at = now() + $5 * interval '1 microsecond',
        attempted_at = now(),
        cancel_requested = false
    WHERE j.id = ANY (ARRAY(SELECT c.id FROM candidates c))
    RETURNING j.*
)
SELECT EXISTS (SELECT 1 FROM drover.limits) AS blocked, claimed.*
FROM (SELECT 1) AS one
LEFT JOIN claimed ON true

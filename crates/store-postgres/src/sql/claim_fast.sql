-- Claim without limit policies, in one statement: lock up to $3 ready jobs of the open
-- (unpaused) queues and registered kinds in claim order (priority, run_at, id), skipping rows
-- other claimers hold, and start them: attempt + 1, a new fencing token, the lease from the
-- database clock. One index scan per queue (jobs_claim_idx) feeds the merge.
--
-- Claims nothing while any limit policy exists: then jobs_claim takes the slow path, which
-- checks policies atomically with the claim (claim_candidates.sql).
--
-- $1 queues text[], $2 kinds text[], $3 limit integer, $4 worker text, $5 lease_us bigint.
WITH open_queues AS (
    SELECT q.name
    FROM unnest($1::text[]) AS q(name)
    WHERE NOT EXISTS (SELECT 1 FROM drover.queues p WHERE p.name = q.name AND p.paused)
      AND NOT EXISTS (SELECT 1 FROM drover.limits)
),
candidates AS (
    SELECT c.id
    FROM open_queues oq
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at
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
)
UPDATE drover.jobs j
SET state = 'running',
    attempt = j.attempt + 1,
    fencing_token = j.fencing_token + 1,
    lease_owner = $4,
    lease_expires_at = now() + $5 * interval '1 microsecond',
    attempted_at = now(),
    cancel_requested = false
FROM candidates c
WHERE j.id = c.id
RETURNING j.*

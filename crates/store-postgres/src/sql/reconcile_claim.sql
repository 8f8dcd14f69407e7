-- Take up to $3 reconciling jobs of the reconciler kinds $2 whose reconcile lease is free
-- (none, or expired by the database clock) under a new lease and fencing token (core's
-- ReconcileClaim), skipping jobs another sweeper is taking.
--
-- $1 worker text, $2 kinds text[], $3 limit integer, $4 lease_us bigint.
WITH candidates AS (
    SELECT j.id
    FROM drover.jobs j
    WHERE j.state = 'reconciling'
      AND j.kind = ANY($2::text[])
      AND (j.lease_expires_at IS NULL OR j.lease_expires_at <= now())
    ORDER BY j.id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE drover.jobs j
SET fencing_token = j.fencing_token + 1,
    lease_owner = $1,
    lease_expires_at = now() + $4 * interval '1 microsecond'
FROM candidates c
WHERE j.id = c.id
RETURNING j.*

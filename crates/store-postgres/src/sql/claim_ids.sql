-- Slow-path claim, step 3: claim the admitted jobs (locked by claim_candidates.sql) and store
-- the policies' new GCRA times, in one statement. The jobs are dated by the admission's clock
-- ($6, read after the running counts), not by the transaction's start. The jobs of $7 start
-- at once (started_at = $6); the others are claimed ahead (started_at NULL).
--
-- $1 ids uuid[], $2 worker text, $3 lease_us bigint, $4 policy keys text[],
-- $5 new rate_tat timestamptz[], $6 admission time timestamptz, $7 ids that start uuid[].
WITH tats AS (
    UPDATE drover.limits l
    SET rate_tat = u.tat
    FROM unnest($4::text[], $5::timestamptz[]) AS u(key, tat)
    WHERE l.key = u.key
)
UPDATE drover.jobs j
SET state = 'running',
    attempt = j.attempt + 1,
    fencing_token = j.fencing_token + 1,
    lease_owner = $2,
    lease_expires_at = $6::timestamptz + $3 * interval '1 microsecond',
    attempted_at = $6::timestamptz,
    started_at = CASE WHEN j.id = ANY($7::uuid[]) THEN $6::timestamptz END,
    cancel_requested = false
WHERE j.id = ANY($1::uuid[]) AND j.state = 'queued'
RETURNING j.*

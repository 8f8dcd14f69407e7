-- The part both one-statement claims share (claim_queue.sql and claim_fast.sql come before it
-- and name the `candidates` in claim order; their _end.sql files say which of them to update):
-- claim the candidates' jobs.
-- The claim's time (attempted_at, started_at, the lease's start) is read from the clock once,
-- while the statement runs, after its snapshot: `now()` is the transaction's start and can
-- precede a change the claim saw.
clock AS MATERIALIZED (SELECT clock_timestamp() AS at),
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
                 OR (j.priority, j.run_at, j.id) < (SELECT a.priority, a.run_at, a.id FROM ahead a)
                THEN (SELECT at FROM clock)
        END,
        cancel_requested = false

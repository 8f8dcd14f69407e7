-- Slow-path claim, step 2: the next page of ready jobs in claim order after the keyset cursor
-- ($4, $5, $6) = (priority, run_at, id), locked FOR UPDATE SKIP LOCKED; the caller admits them
-- in order with core's Admission and claims the admitted ones (claim_ids.sql). Jobs it skips
-- are only locked until the transaction ends: they keep their place and spend nothing.
--
-- Ready means ready at the admission time $7 (read after the running counts), so a claimed
-- job's attempted_at is never before its run_at.
--
-- $1 queues text[], $2 kinds text[], $3 page size integer, $4 priority smallint (NULL: from the
-- start), $5 run_at timestamptz, $6 id uuid, $7 admission time timestamptz.
WITH open_queues AS (
    SELECT q.name
    FROM unnest($1::text[]) AS q(name)
    WHERE NOT EXISTS (SELECT 1 FROM drover.queues p WHERE p.name = q.name AND p.paused)
)
SELECT c.id, c.kind, c.queue, c.limit_keys, c.priority, c.run_at
FROM open_queues oq
CROSS JOIN LATERAL (
    SELECT j.id, j.kind, j.queue, j.limit_keys, j.priority, j.run_at
    FROM drover.jobs j
    WHERE j.state = 'queued'
      AND j.queue = oq.name
      AND j.run_at <= $7::timestamptz
      AND j.kind = ANY($2::text[])
      AND ($4::smallint IS NULL OR (j.priority, j.run_at, j.id) > ($4, $5::timestamptz, $6::uuid))
    ORDER BY j.priority, j.run_at, j.id
    LIMIT $3
    FOR UPDATE OF j SKIP LOCKED
) AS c
ORDER BY c.priority, c.run_at, c.id
LIMIT $3

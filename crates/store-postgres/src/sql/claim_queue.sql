-- Claim from ONE queue while no limit policy exists (this file, then claim_start.sql, then
-- claim_queue_end.sql; sql.rs joins them at compile time; the runner's claim: one claim loop
-- per queue): claim_fast.sql without the per-queue lateral join and the per-candidate policy
-- checks, so it is cheaper to plan and to run. Locks up to $3 ready jobs of the queue (unless
-- it is paused) and of the registered kinds in claim order (priority, run_at, id), skipping
-- rows other claimers hold, and claims them: attempt + 1, a new fencing token, the lease from
-- the database clock. The first $6 of them in claim order start at once (started_at set);
-- the rest are claimed ahead (started_at NULL): the first one that does not start is found
-- among the candidates (`ahead`, one row or none), and only rows before it in claim order
-- start.
--
-- The update finds the locked candidates by their tuple address (`ctid = ANY(ARRAY(...))`, a
-- TID scan). Joined with the candidates instead, a large claim is planned as a hash join over
-- a sequential scan of the whole table; found by primary key, every job costs one more B-tree
-- descent (about 10 % of the statement for 288 jobs: BENCHMARKS.md, the 2026-12-03 17:05 run,
-- "The runner's claim by tuple address").
-- Each address is that of a row this statement holds locked, so nothing else can update or
-- remove it first. (A queued job is never updated while it stays queued; if one were, between
-- this statement's snapshot and its lock, the update would skip it: it stays queued for a
-- later claim and is never claimed twice.)
--
-- When any limit policy exists it claims nothing and reports `blocked`: the caller then claims
-- with claim_fast.sql, which admits jobs against the policies. Policies are read in this
-- statement's snapshot, like claim_fast.sql reads them. Always returns at least one row: when
-- nothing was claimed, a row whose job columns are NULL carries `blocked`.
--
-- $1 queue text, $2 kinds text[], $3 limit integer, $4 worker text, $5 lease_us bigint,
-- $6 start integer (0..=$3).
WITH candidates AS (
    SELECT j.ctid, j.priority, j.run_at, j.id
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

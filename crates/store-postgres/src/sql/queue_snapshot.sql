-- Counts per queue and state, running jobs waiting for a slot (claimed ahead: started_at
-- NULL), ready jobs (queued with run_at <= now) and how long the longest-waiting ready job
-- has been ready in milliseconds (since greatest(run_at, created_at)), for every queue with
-- jobs or a stored pause state, at one instant of the database clock.
--
-- Every part is bounded, whatever the table's size (docs/design.md, "Counts"):
-- - counts: the maintained totals plus their changes not yet folded (0010_job_counts.sql);
--   the fold runs first, in this statement, and this statement's snapshot sees the tables
--   as they were before it, so the sum is exact either way;
-- - ready: per queue and priority (a loose scan of jobs_claim_idx), the ready jobs and the
--   scheduled ones (run_at > now), each counted up to 10,001. A queue's ready count is exact
--   when every priority has at most 10,000 ready jobs (their sum) or at most 10,000
--   scheduled (queued minus scheduled); otherwise it is the lower bound the counted rows
--   give, and ready_at_least says so;
-- - lag: the oldest of the first 10,001 ready jobs of each priority, in claim order (exact
--   unless a priority has more ready jobs than that and one of the later ones has a run_at
--   before its created_at);
-- - claimed ahead: running jobs only (jobs_running_lease_idx).
WITH RECURSIVE fold AS (
    SELECT drover.job_counts_fold() AS folded
),

-- Drover schema, version 12: statistics on queue and state together (docs/design.md,
-- "Lists").
--
-- A jobs list filtered by queue reads each terminal state newest first (jobs_list.sql). The
-- planner chose between jobs_done_state_idx, filtering on the queue, and jobs_done_queue_idx
-- from statistics that take queue and state as independent: a queue whose jobs are all
-- queued (a backlog) looked as if a fifth of the succeeded jobs were its own, so the list
-- walked every succeeded job to find none of them (360 ms at 1,000,000 jobs). The most common
-- (queue, state) pairs, kept by ANALYZE and autovacuum, give it the real figures. Nothing is
-- written on a job's path.
--
-- CREATE STATISTICS and ANALYZE take a lock that lets claims, finishes and lists go on.

-- drover:step locking
CREATE STATISTICS IF NOT EXISTS drover.jobs_queue_state_stats (mcv)
    ON queue, state FROM drover.jobs;

ANALYZE drover.jobs (queue, state);

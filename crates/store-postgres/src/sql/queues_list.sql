-- Queues that have jobs or a stored pause state, by name. The queues with jobs are those with
-- a count in the maintained job counts (0010_job_counts.sql): totals plus changes not yet
-- folded, summed in this statement's snapshot, so it costs the same at any table size.
WITH counted AS (
    SELECT queue
    FROM (SELECT queue, state, n FROM drover.job_counts
          UNION ALL
          SELECT queue, state, n FROM drover.job_count_changes) c
    GROUP BY queue, state
    HAVING sum(n) <> 0
),
names AS (
    SELECT queue AS name FROM counted
    UNION
    SELECT name FROM drover.queues
)
SELECT n.name, COALESCE(p.paused, false) AS paused, p.paused_at
FROM names n
LEFT JOIN drover.queues p ON p.name = n.name
ORDER BY n.name

-- Queues that have jobs or a stored pause state, by name. The queue names of jobs are found
-- with a loose index scan (one index probe per distinct queue), not a table scan.
WITH RECURSIVE job_queues AS (
    (SELECT j.queue FROM drover.jobs j ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM drover.jobs j WHERE j.queue > jq.queue ORDER BY j.queue LIMIT 1)
    FROM job_queues jq
    WHERE jq.queue IS NOT NULL
),
names AS (
    SELECT queue AS name FROM job_queues WHERE queue IS NOT NULL
    UNION
    SELECT name FROM drover.queues
)
SELECT n.name, COALESCE(p.paused, false) AS paused, p.paused_at
FROM names n
LEFT JOIN drover.queues p ON p.name = n.name
ORDER BY n.name

-- Queues that have jobs or a stored pause state, by name. Queues of terminal jobs are found with
-- a loose index scan of jobs_done_queue_idx (one probe per distinct queue, not a table scan);
-- queues of live jobs (few) through jobs_blocked_idx, jobs_waiting_idx and
-- jobs_running_lease_idx.
WITH RECURSIVE done_queues AS (
    (SELECT j.queue
     FROM drover.jobs j
     WHERE j.state IN ('succeeded', 'failed', 'cancelled')
     ORDER BY j.queue
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue
            FROM drover.jobs j
            WHERE j.state IN ('succeeded', 'failed', 'cancelled') AND j.queue > d.queue
            ORDER BY j.queue
            LIMIT 1)
    FROM done_queues d
    WHERE d.queue IS NOT NULL
),
names AS (
    SELECT queue AS name FROM done_queues WHERE queue IS NOT NULL
    UNION
    SELECT queue FROM drover.jobs WHERE state = 'waiting'
    UNION
    SELECT queue FROM drover.jobs WHERE state IN ('queued', 'reconciling')
    UNION
    SELECT queue FROM drover.jobs WHERE state = 'running'
    UNION
    SELECT name FROM drover.queues
)
SELECT n.name, COALESCE(p.paused, false) AS paused, p.paused_at
FROM names n
LEFT JOIN drover.queues p ON p.name = n.name
ORDER BY n.name

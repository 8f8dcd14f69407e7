-- Counts per queue and state, running jobs waiting for a slot (claimed ahead: started_at
-- NULL), ready jobs (queued with run_at <= now) and how long the
-- longest-waiting ready job has been ready in milliseconds (since greatest(run_at,
-- created_at)), for every queue with jobs or a stored pause state, at one instant of the
-- database clock. Live jobs are counted through jobs_blocked_idx, jobs_waiting_idx and
-- jobs_running_lease_idx,
-- terminal ones with an index-only scan of jobs_done_queue_idx.
WITH counts AS (
    SELECT queue, state, count(*)::bigint AS n
    FROM drover.jobs
    WHERE state = 'waiting'
    GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*)::bigint AS n
    FROM drover.jobs
    WHERE state IN ('queued', 'reconciling')
    GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*)::bigint AS n
    FROM drover.jobs
    WHERE state = 'running'
    GROUP BY queue, state
    UNION ALL
    SELECT queue, state, count(*)::bigint AS n
    FROM drover.jobs
    WHERE state IN ('succeeded', 'failed', 'cancelled')
    GROUP BY queue, state
),
ready AS (
    -- A job cannot have waited from before it existed: a run_at in the past counts from
    -- created_at, so it does not inflate the lag.
    SELECT queue, count(*)::bigint AS n, min(greatest(run_at, created_at)) AS oldest
    FROM drover.jobs
    WHERE state = 'queued' AND run_at <= now()
    GROUP BY queue
),
waiting AS (
    SELECT queue, count(*)::bigint AS n
    FROM drover.jobs
    WHERE state = 'running' AND started_at IS NULL
    GROUP BY queue
),
names AS (
    SELECT queue AS name FROM counts
    UNION
    SELECT name FROM drover.queues
)
SELECT n.name AS queue,
       COALESCE(p.paused, false) AS paused,
       COALESCE((SELECT jsonb_object_agg(c.state, c.n) FROM counts c WHERE c.queue = n.name),
                '{}'::jsonb) AS counts,
       COALESCE(r.n, 0)::bigint AS ready,
       COALESCE(w.n, 0)::bigint AS claimed,
       floor(EXTRACT(EPOCH FROM (now() - r.oldest)) * 1000)::bigint AS oldest_ready_age_ms,
       now() AS taken_at
FROM names n
LEFT JOIN drover.queues p ON p.name = n.name
LEFT JOIN ready r ON r.queue = n.name
LEFT JOIN waiting w ON w.queue = n.name
ORDER BY n.name

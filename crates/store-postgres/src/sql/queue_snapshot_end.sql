-- The rest of queue_snapshot.sql, after job_counts_current.sql.
priorities (queue, priority) AS (
    SELECT c.queue,
           (SELECT j.priority FROM drover.jobs j
            WHERE j.state = 'queued' AND j.queue = c.queue
            ORDER BY j.priority LIMIT 1)
    FROM counts c
    WHERE c.state = 'queued'
    UNION ALL
    SELECT p.queue,
           (SELECT j.priority FROM drover.jobs j
            WHERE j.state = 'queued' AND j.queue = p.queue AND j.priority > p.priority
            ORDER BY j.priority LIMIT 1)
    FROM priorities p
    WHERE p.priority IS NOT NULL
),
by_priority AS (
    SELECT p.queue, r.n AS ready, r.oldest, s.n AS scheduled
    FROM priorities p
    CROSS JOIN LATERAL (
        SELECT count(*)::bigint AS n, min(greatest(f.run_at, f.created_at)) AS oldest
        FROM (SELECT j.run_at, j.created_at FROM drover.jobs j
              WHERE j.state = 'queued' AND j.queue = p.queue AND j.priority = p.priority
                AND j.run_at <= now()
              ORDER BY j.run_at, j.id
              LIMIT 10001) f
    ) r
    CROSS JOIN LATERAL (
        SELECT count(*)::bigint AS n
        FROM (SELECT 1 FROM drover.jobs j
              WHERE j.state = 'queued' AND j.queue = p.queue AND j.priority = p.priority
                AND j.run_at > now()
              LIMIT 10001) f
    ) s
    WHERE p.priority IS NOT NULL
),
ready AS (
    SELECT b.queue,
           CASE WHEN max(b.ready) <= 10000 THEN sum(b.ready)
                WHEN max(b.scheduled) <= 10000
                    THEN (SELECT c.n FROM counts c WHERE c.queue = b.queue AND c.state = 'queued')
                         - sum(b.scheduled)
                ELSE sum(b.ready)
           END::bigint AS n,
           max(b.ready) > 10000 AND max(b.scheduled) > 10000 AS at_least,
           min(b.oldest) AS oldest
    FROM by_priority b
    GROUP BY b.queue
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
       COALESCE(r.at_least, false) AS ready_at_least,
       COALESCE(w.n, 0)::bigint AS claimed,
       floor(EXTRACT(EPOCH FROM (now() - r.oldest)) * 1000)::bigint AS oldest_ready_age_ms,
       now() AS taken_at
FROM names n
CROSS JOIN fold
LEFT JOIN drover.queues p ON p.name = n.name
LEFT JOIN ready r ON r.queue = n.name
LEFT JOIN waiting w ON w.queue = n.name
ORDER BY n.name

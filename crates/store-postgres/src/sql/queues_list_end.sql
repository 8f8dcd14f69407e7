-- The rest of queues_list.sql, after job_counts_current.sql.
names AS (
    SELECT queue AS name FROM counts
    UNION
    SELECT name FROM drover.queues
)
SELECT n.name, COALESCE(p.paused, false) AS paused, p.paused_at
FROM names n
LEFT JOIN drover.queues p ON p.name = n.name
ORDER BY n.name

-- The part the queue snapshot and the queue list share (queue_snapshot.sql and
-- queues_list.sql come before it, with their own WITH): `counts`, the jobs per queue and state
-- now, the maintained totals plus their changes not yet folded (0010_job_counts.sql), summed
-- in the statement's snapshot; states without jobs left out. A comma follows, and the rest of
-- the statement (queue_snapshot_end.sql, queues_list_end.sql).
counts AS (
    SELECT queue, state, sum(n)::bigint AS n
    FROM (SELECT queue, state, n FROM drover.job_counts
          UNION ALL
          SELECT queue, state, n FROM drover.job_count_changes) c
    GROUP BY queue, state
    HAVING sum(n) <> 0
),

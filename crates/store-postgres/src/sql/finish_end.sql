-- The end of finish.sql, after the freed_queue column and the parents' CTEs sql.rs puts between
-- them (freed_queue.sql, finish_parents.sql): jobs that became ready again and parents whose
-- last child this was wake idle workers, once per queue.
,
notified AS (
    SELECT pg_notify('drover_jobs', q.queue)
    FROM (SELECT queue FROM updated WHERE state = 'queued' AND run_at <= now()
          UNION
          SELECT queue FROM parents WHERE woken) AS q
)
SELECT updated.id, updated.state, updated.freed_queue,
       (SELECT count(*) FROM notified) AS notified_queues
FROM updated

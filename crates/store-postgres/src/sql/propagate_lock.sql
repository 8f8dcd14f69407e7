-- One round of propagation, second read: lock the jobs it changes, in id order: the dependents
-- and parents named in $1, and the live children of the jobs in $2 (cancelled, or with a cancel
-- requested: their children are cancelled too), found through drover.job_children. A child is
-- locked with its latest version, so one that ended meanwhile is seen terminal and left alone.
--
-- $1 ids uuid[], $2 parent ids uuid[].
SELECT j.*, now() AS db_now
FROM drover.jobs j
WHERE j.id IN (SELECT unnest($1::uuid[])
               UNION
               SELECT c.child_id FROM drover.job_children c WHERE c.parent_id = ANY($2::uuid[]))
  AND (j.id = ANY($1::uuid[]) OR j.state IN ('waiting', 'queued', 'running', 'reconciling'))
ORDER BY j.id
FOR UPDATE OF j

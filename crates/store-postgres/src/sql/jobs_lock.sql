-- Lock jobs for changes computed by core's `state::apply` (workflow paths: a finish that
-- propagates, dependencies of a new job, a workflow's jobs), in id order so that two such
-- transactions take their common rows in the same order, with the database clock the changes
-- must use. Ids of no job are left out.
--
-- $1 id uuid[].
SELECT j.*, now() AS db_now
FROM drover.jobs j
WHERE j.id = ANY($1::uuid[])
ORDER BY j.id
FOR UPDATE

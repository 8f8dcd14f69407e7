-- Lock every job of a workflow in id order (a workflow-wide cancel or retry), with the database
-- clock the changes must use.
--
-- $1 workflow uuid.
SELECT j.*, now() AS db_now
FROM drover.jobs j
WHERE j.workflow_id = $1
ORDER BY j.id
FOR UPDATE

-- Every job of a workflow, children included, in creation (id) order, through
-- jobs_workflow_idx.
--
-- $1 workflow uuid.
SELECT j.* FROM drover.jobs j WHERE j.workflow_id = $1 ORDER BY j.id

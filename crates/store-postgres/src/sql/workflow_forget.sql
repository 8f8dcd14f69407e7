-- Remove a workflow row that got no job of its own, in the enqueue's transaction (workflow.rs,
-- `workflow_enqueue`: every job answered a replay or a duplicate, which keep their workflow).
--
-- $1 id uuid.
DELETE FROM drover.workflows WHERE id = $1

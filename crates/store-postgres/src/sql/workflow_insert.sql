-- Store a new workflow (workflow.rs, `workflow_enqueue`), dated by the database clock.
--
-- $1 id uuid, $2 tenant text.
INSERT INTO drover.workflows (id, tenant, created_at)
VALUES ($1, $2, now())
RETURNING created_at

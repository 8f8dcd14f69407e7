-- Drover schema, version 6: workflows (docs/design.md section 10; ADR 0004).
--
-- A job may wait for other jobs (its dependencies) or for the children it enqueued: the new
-- state 'waiting' (never claimed, no lease, counted by quotas as pending). The columns:
--   workflow_id, name      the workflow a job belongs to and its name there (NULL for most jobs);
--   parent_id              the job that enqueued this one as its child;
--   depends_on             the dependencies as given at enqueue (NULL for most jobs);
--   run_regardless         run even when a dependency failed or was cancelled;
--   pending_dependencies   dependencies not yet resolved;
--   live_children          children not yet terminal, kept exact by every transition;
--   has_dependents         some job was enqueued depending on this one: a finish of a job
--                          without dependents and without parent stays one statement.
-- Edges live in drover.job_dependencies, each resolved exactly once; drover.workflows holds
-- one row per enqueued graph.
--
-- Adding a column with a constant default (or none) changes the catalog only (PostgreSQL 11+):
-- no table rewrite, an ACCESS EXCLUSIVE lock held for an instant. The state check is replaced
-- NOT VALID (reads no row) and validated in an online step. The new indexes are built
-- concurrently; the unique key index is built again to cover waiting jobs (they hold their key
-- like any live job), then the old one is dropped concurrently.

-- drover:step locking
ALTER TABLE drover.jobs
    ADD COLUMN IF NOT EXISTS workflow_id uuid,
    ADD COLUMN IF NOT EXISTS name text,
    ADD COLUMN IF NOT EXISTS parent_id uuid,
    ADD COLUMN IF NOT EXISTS depends_on uuid[],
    ADD COLUMN IF NOT EXISTS run_regardless boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS pending_dependencies integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS live_children integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS has_dependents boolean NOT NULL DEFAULT false;

DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'drover.jobs'::regclass AND conname = 'jobs_state_check'
          AND pg_get_constraintdef(oid) LIKE '%waiting%'
    ) THEN
        ALTER TABLE drover.jobs DROP CONSTRAINT IF EXISTS jobs_state_check;
        ALTER TABLE drover.jobs ADD CONSTRAINT jobs_state_check CHECK (
            state IN ('waiting', 'queued', 'running', 'reconciling', 'succeeded', 'failed',
                      'cancelled')
        ) NOT VALID;
    END IF;
END
$$;

-- Edge "job_id waits for depends_on_id". A finish finds the edges of the job that ended by
-- the primary key; a workflow retry and retention find a job's own edges by job_id.
CREATE TABLE IF NOT EXISTS drover.job_dependencies (
    depends_on_id  uuid    NOT NULL,
    job_id         uuid    NOT NULL,
    resolved       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (depends_on_id, job_id)
);

CREATE INDEX IF NOT EXISTS job_dependencies_job_idx ON drover.job_dependencies (job_id);

CREATE TABLE IF NOT EXISTS drover.workflows (
    id          uuid        PRIMARY KEY,
    tenant      text        NOT NULL,
    created_at  timestamptz NOT NULL
);

-- Lists of one tenant's workflows, newest first.
CREATE INDEX IF NOT EXISTS workflows_tenant_idx ON drover.workflows (tenant, id);

-- drover:step online
ALTER TABLE drover.jobs VALIDATE CONSTRAINT jobs_state_check;

-- drover:step online
-- Waiting jobs per tenant: the quota counts (pending = waiting, queued, running, reconciling),
-- lists and the snapshot read them here, beside jobs_waiting_idx (queued, reconciling) and
-- jobs_running_lease_idx. Plain jobs never enter it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_blocked_idx
    ON drover.jobs (tenant, id)
    WHERE state = 'waiting';

-- drover:step online
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_workflow_idx
    ON drover.jobs (workflow_id, id)
    WHERE workflow_id IS NOT NULL;

-- drover:step online
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_parent_idx
    ON drover.jobs (parent_id, id)
    WHERE parent_id IS NOT NULL;

-- drover:step online
-- Unique keys: one live (waiting, queued, running, reconciling) job per (tenant, key).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_live_unique_key_uidx
    ON drover.jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('waiting', 'queued', 'running', 'reconciling');

-- drover:step online
DROP INDEX CONCURRENTLY IF EXISTS drover.jobs_unique_key_uidx;

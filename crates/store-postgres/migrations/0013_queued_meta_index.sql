-- Drover schema, version 13: the meta containment index of queued jobs (docs/design.md,
-- "Lists"; ADR 0017).
--
-- A jobs list filtered by meta alone reads the queued jobs too (jobs_list.sql). Terminal jobs
-- with meta have their GIN index (jobs_done_meta_set_idx, migration 2); queued ones had none,
-- so a backlog was read in full, newest first, to find the few whose meta matched (more than
-- half a second at 5,000,000 jobs). This index holds the queued and reconciling jobs that have
-- meta: a job pays for the entry when it is enqueued with meta (or returns to the queue with
-- it, on a retry), never when it is claimed, runs or finishes, and a job without meta never.
--
-- Built without blocking job traffic; a build cut short leaves an invalid index, which the next
-- run drops and builds again.

-- drover:step online
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_queued_meta_set_idx
    ON drover.jobs USING gin (meta jsonb_path_ops)
    WHERE state IN ('queued', 'reconciling') AND meta <> '{}'::jsonb;

-- Drover schema, version 3: fewer index entries written per job.
--
-- A job's state changes rule out HOT updates, so each claim and each finish writes a new entry
-- into every index whose predicate the new row version matches (0001_initial.sql). This
-- version takes three B-tree entries out of every job's life (one GIN entry, much cheaper,
-- comes in) without losing an access path:
--
-- * Claim: the pending index (tenant, id) covered queued, running and reconciling jobs, so a
--   claim wrote it a second time. It now holds the jobs waiting for a worker (queued and
--   reconciling): jobs_waiting_idx. Running jobs are reached through jobs_running_lease_idx,
--   which every claim writes anyway. Statements that count or list live jobs read the two
--   (quota checks in enqueue_insert.sql, enqueue_insert_keyless.sql and retry_check.sql,
--   jobs_list.sql, queue_snapshot.sql, queues_list.sql).
--
-- * Finish: terminal jobs had four B-tree list indexes (state / queue / kind / tenant, each
--   followed by id). The state and queue ones stay (lists in id order, the loose scan of
--   queues_list.sql, the per-queue counts of queue_snapshot.sql); the kind and tenant ones are
--   replaced by one GIN index over the job's facets, ARRAY['k:<kind>', 't:<tenant>']. A GIN
--   insert appends to the index's pending list (merged in bulk by vacuum, or by the insert
--   that finds the list over gin_pending_list_limit), so a finished job costs it about one
--   cheap write instead of two B-tree descents. A kind or tenant filter becomes a containment
--   test on the facets (jobs_list.sql): a rare value is found through this index (a bitmap,
--   then sorted by id), a common one by walking a state index newest first. The planner
--   chooses from statistics on the facets expression, jobs_facets_stats (it takes none from
--   the expression of a partial index).
--
-- Order: the statistics first (ANALYZE holds only a lock that lets claims, finishes and lists
-- go on), then the indexes (CREATE INDEX blocks writes until this migration commits), then
-- the drops (quick, but they block reads until commit).
--
-- Large existing tables: build the new indexes beforehand with
--   CREATE INDEX CONCURRENTLY jobs_waiting_idx ON drover.jobs (tenant, id)
--       WHERE state IN ('queued', 'reconciling');
--   CREATE INDEX CONCURRENTLY jobs_done_facets_idx ON drover.jobs
--       USING gin ((ARRAY['k:' || kind, 't:' || tenant]))
--       WHERE state IN ('succeeded', 'failed', 'cancelled');
-- and this migration skips building them (dropping the old ones is quick). A concurrent build
-- that failed leaves an INVALID index under that name; this migration then stops with an error
-- instead of dropping the old index (drop the invalid one and build it again).

-- Statistics on the facets expression (see above). ANALYZE fills them now: until it runs the
-- planner assumes every kind and tenant rare and would answer a common one with a bitmap of
-- most of the table. It samples a bounded number of rows (300 x default_statistics_target)
-- and only the columns the expression reads; autovacuum keeps them current afterwards.
CREATE STATISTICS IF NOT EXISTS drover.jobs_facets_stats
    ON (ARRAY['k:' || kind, 't:' || tenant]) FROM drover.jobs;

ANALYZE drover.jobs (kind, tenant);

CREATE INDEX IF NOT EXISTS jobs_waiting_idx
    ON drover.jobs (tenant, id)
    WHERE state IN ('queued', 'reconciling');

CREATE INDEX IF NOT EXISTS jobs_done_facets_idx
    ON drover.jobs USING gin ((ARRAY['k:' || kind, 't:' || tenant]))
    WHERE state IN ('succeeded', 'failed', 'cancelled');

DO $$
DECLARE
    invalid text;
BEGIN
    SELECT string_agg(c.relname, ', ' ORDER BY c.relname) INTO invalid
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'drover'
      AND c.relname IN ('jobs_waiting_idx', 'jobs_done_facets_idx')
      AND NOT i.indisvalid;
    IF invalid IS NOT NULL THEN
        RAISE EXCEPTION 'index % of drover.jobs is invalid (a CREATE INDEX CONCURRENTLY that failed?): drop it and build it again, or let this migration build it', invalid;
    END IF;
END
$$;

DROP INDEX IF EXISTS drover.jobs_pending_idx;
DROP INDEX IF EXISTS drover.jobs_done_kind_idx;
DROP INDEX IF EXISTS drover.jobs_done_tenant_idx;

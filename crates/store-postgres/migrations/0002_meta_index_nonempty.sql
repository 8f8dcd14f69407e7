-- Drover schema, version 2: the meta containment index holds only terminal jobs that have meta.
--
-- Most jobs carry no meta ('{}'), yet every one of them cost the GIN index an entry when it
-- finished (GIN records an "empty item" for a value without keys): about a tenth of the work of
-- recording a finished job. A containment filter with at least one key can only match a job
-- whose meta is not empty, so the list statement (jobs_list.sql) states `meta <> '{}'` beside
-- such a filter, and the planner proves this partial index applies; an empty filter matches
-- every job and needs no index.
--
-- Large existing tables: build the new index beforehand with
--   CREATE INDEX CONCURRENTLY jobs_done_meta_set_idx ON drover.jobs USING gin (meta jsonb_path_ops)
--       WHERE state IN ('succeeded', 'failed', 'cancelled') AND meta <> '{}'::jsonb;
-- and this migration skips building it (dropping the old index is quick).

CREATE INDEX IF NOT EXISTS jobs_done_meta_set_idx
    ON drover.jobs USING gin (meta jsonb_path_ops)
    WHERE state IN ('succeeded', 'failed', 'cancelled') AND meta <> '{}'::jsonb;

DROP INDEX IF EXISTS drover.jobs_done_meta_idx;

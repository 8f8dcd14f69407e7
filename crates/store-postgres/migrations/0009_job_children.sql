-- Drover schema, version 9: the parent-child link in its own table (ADR 0004, decision 5).
--
-- A child's row keeps `parent_id`, which its finish reads to count down its parent. The
-- lookups the other way, a parent's children (its cancel cascade, `drover jobs children`),
-- move from the index jobs_parent_idx to drover.job_children, written once when the children
-- are enqueued and deleted with the child by retention. The index took a new entry on every
-- update of a child's row (its claim, its finish: a state change is never a HOT update,
-- 0003_fewer_index_writes.sql); the link table costs one row per child, once.
--
-- The table is new and empty, so it is created with its primary key in a locking step; the
-- existing links are copied in an online step (while jobs_parent_idx still serves the read,
-- and again without harm if the step runs twice), then the index is dropped concurrently.
-- Children enqueued by workers of an earlier version after this migration are not linked
-- (docs/operating.md, "Upgrading").

-- drover:step locking
-- Children of one parent in id order (keyset pages newest first read it backwards).
CREATE TABLE IF NOT EXISTS drover.job_children (
    parent_id  uuid NOT NULL,
    child_id   uuid NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);

-- drover:step online
INSERT INTO drover.job_children (parent_id, child_id)
SELECT j.parent_id, j.id
FROM drover.jobs j
WHERE j.parent_id IS NOT NULL
ON CONFLICT DO NOTHING;

-- drover:step online
DROP INDEX CONCURRENTLY IF EXISTS drover.jobs_parent_idx;

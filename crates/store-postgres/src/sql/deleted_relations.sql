-- Fragment, not a statement: the end of a delete of jobs (job_delete.sql, jobs_prune.sql),
-- written after its `deleted` CTE, which returns `id` and `parent_id` of every job it deleted.
-- sql.rs appends it to both, so an operator delete and retention drop the same relations: the
-- dependency edges both ways, a deleted child's link to its parent and a deleted parent's
-- links to its children (0009_job_children.sql). Answers how many jobs were deleted.
edges AS (
    DELETE FROM drover.job_dependencies e
    USING deleted d
    WHERE e.depends_on_id = d.id OR e.job_id = d.id
),
links AS (
    DELETE FROM drover.job_children l
    USING deleted d
    WHERE (l.parent_id = d.parent_id AND l.child_id = d.id) OR l.parent_id = d.id
)
SELECT count(*) AS deleted FROM deleted

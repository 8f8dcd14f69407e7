-- Delete one job that `drover_core::check_delete` allowed (locked by job_lock.sql), with its
-- dependency edges both ways, its link to its parent and its links to its children (which
-- stay, unlisted under it), as retention does (jobs_prune.sql) and as the memory store does.
--
-- $1 id uuid.
WITH deleted AS (
    DELETE FROM drover.jobs j
    WHERE j.id = $1
    RETURNING j.id, j.parent_id
),
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

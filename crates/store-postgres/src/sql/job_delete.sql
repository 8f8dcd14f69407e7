-- Delete one job that `drover_core::check_delete` allowed (locked by job_lock.sql), with its
-- dependency edges both ways, its link to its parent and its links to its children (which
-- stay, unlisted under it), as retention does (jobs_prune.sql) and as the memory store does.
--
-- The end of the statement is deleted_relations.sql, which sql.rs appends.
--
-- $1 id uuid.
WITH deleted AS (
    DELETE FROM drover.jobs j
    WHERE j.id = $1
    RETURNING j.id, j.parent_id
),

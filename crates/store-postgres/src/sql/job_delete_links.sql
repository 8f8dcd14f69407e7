-- What an operator delete must know of a job's relations (`drover_core::check_delete`), read
-- after the job is locked (job_lock.sql): its parent's state, when the parent is stored, and
-- the dependent not terminal of smallest id (the one the memory store names too). An enqueue
-- naming the job as a dependency locks its row first (workflow.rs), so no new dependent
-- appears meanwhile.
--
-- $1 id uuid, $2 parent_id uuid (NULL: none).
SELECT
    (SELECT p.state FROM drover.jobs p WHERE p.id = $2) AS parent_state,
    (SELECT d.job_id
     FROM drover.job_dependencies d
     JOIN drover.jobs w ON w.id = d.job_id
     WHERE d.depends_on_id = $1
       AND w.state IN ('waiting', 'queued', 'running', 'reconciling')
     ORDER BY d.job_id
     LIMIT 1) AS live_dependent

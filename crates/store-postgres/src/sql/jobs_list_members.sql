-- A page of the jobs of one workflow ($12) or the children of one job ($13), newest first,
-- with the filters of jobs_list.sql (NULL: no filter) and its keyset cursor. Such a family is
-- small (at most 10,000 jobs of a graph plus their children, 10,000 live children per
-- parent), so it is read through jobs_workflow_idx (0006_workflows.sql) or drover.job_children
-- (0009_job_children.sql) and filtered there, whatever the state. Large fields as jobs_list.sql: sent only when asked for.
--
-- $1 queue text, $2 state text, $3 kind text, $4 tenant text, $5 meta jsonb (containment),
-- $6 before uuid, $7 limit bigint, $8 args, $9 result, $10 errors, $11 progress boolean
-- (send the field),
-- $12 workflow uuid, $13 parent uuid (one of them, or both, not NULL).
SELECT page.id, page.kind, page.queue, page.tenant,
       CASE WHEN $8::boolean THEN page.args ELSE 'null'::jsonb END AS args,
       page.meta, page.priority, page.run_at, page.state, page.attempt, page.max_attempts,
       page.fencing_token, page.lease_owner, page.lease_expires_at, page.cancel_requested,
       CASE WHEN $9::boolean THEN page.result END AS result,
       CASE WHEN $10::boolean THEN page.errors ELSE '[]'::jsonb END AS errors,
       CASE WHEN $11::boolean THEN page.progress END AS progress,
       page.idempotency_key, page.request_hash, page.unique_key, page.limit_keys,
       page.created_at, page.attempted_at, page.started_at, page.finished_at,
       page.workflow_id, page.name, page.parent_id, page.depends_on, page.run_regardless,
       page.pending_dependencies, page.live_children, page.trace_context
FROM (
    (SELECT j.*
     FROM drover.jobs j
     WHERE $12::uuid IS NOT NULL AND j.workflow_id = $12
       AND ($13::uuid IS NULL OR j.parent_id = $13)
       AND ($2::text IS NULL OR j.state = $2)
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR j.meta @> $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.job_children c
     JOIN drover.jobs j ON j.id = c.child_id
     WHERE $12::uuid IS NULL AND c.parent_id = $13
       AND ($2::text IS NULL OR j.state = $2)
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR j.meta @> $5)
       AND ($6::uuid IS NULL OR c.child_id < $6)
     ORDER BY c.child_id DESC
     LIMIT $7)
) AS page
ORDER BY page.id DESC
LIMIT $7

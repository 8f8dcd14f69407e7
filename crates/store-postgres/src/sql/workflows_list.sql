-- A page of workflows, newest first (keyset on the id, a UUID v7), with the count of their
-- jobs per state as a JSON object: the page's rows first, then one grouped count over the jobs
-- of the page's workflows (jobs_workflow_idx).
--
-- $1 tenant text (NULL: every tenant), $2 before uuid (NULL: from the newest), $3 limit bigint.
WITH page AS (
    SELECT w.id, w.tenant, w.created_at
    FROM drover.workflows w
    WHERE ($1::text IS NULL OR w.tenant = $1)
      AND ($2::uuid IS NULL OR w.id < $2)
    ORDER BY w.id DESC
    LIMIT $3
),
counts AS (
    SELECT j.workflow_id, j.state, count(*)::bigint AS n
    FROM drover.jobs j
    WHERE j.workflow_id IN (SELECT id FROM page)
    GROUP BY j.workflow_id, j.state
)
SELECT p.id, p.tenant, p.created_at,
       COALESCE((SELECT jsonb_object_agg(c.state, c.n) FROM counts c WHERE c.workflow_id = p.id),
                '{}'::jsonb) AS counts
FROM page p
ORDER BY p.id DESC

-- Store the edges of new jobs with dependencies: unresolved for a dependency not yet terminal,
-- resolved for one settled at enqueue (kept for a workflow retry and for retention).
--
-- $1 depends_on_id uuid[], $2 job_id uuid[], $3 resolved boolean[].
INSERT INTO drover.job_dependencies (depends_on_id, job_id, resolved)
SELECT e.depends_on_id, e.job_id, e.resolved
FROM unnest($1::uuid[], $2::uuid[], $3::boolean[]) AS e(depends_on_id, job_id, resolved)
ON CONFLICT (depends_on_id, job_id) DO UPDATE SET resolved = EXCLUDED.resolved

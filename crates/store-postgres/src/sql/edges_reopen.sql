-- A workflow retry: these edges wait again (their dependency runs again), so each resolves once
-- more when it ends.
--
-- $1 depends_on_id uuid[], $2 job_id uuid[].
UPDATE drover.job_dependencies d
SET resolved = false
FROM unnest($1::uuid[], $2::uuid[]) AS e(depends_on_id, job_id)
WHERE d.depends_on_id = e.depends_on_id AND d.job_id = e.job_id

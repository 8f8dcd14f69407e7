-- Mark edges resolved: each edge is applied exactly once (docs/design.md section 10), in the
-- transaction that applied it.
--
-- $1 depends_on_id uuid[], $2 job_id uuid[].
UPDATE drover.job_dependencies d
SET resolved = true
FROM unnest($1::uuid[], $2::uuid[]) AS e(depends_on_id, job_id)
WHERE d.depends_on_id = e.depends_on_id AND d.job_id = e.job_id AND NOT d.resolved

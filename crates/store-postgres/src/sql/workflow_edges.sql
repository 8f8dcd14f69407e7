-- The stored edges of these jobs (a workflow retry), through job_dependencies_job_idx.
--
-- $1 job ids uuid[].
SELECT d.depends_on_id, d.job_id, d.resolved
FROM drover.job_dependencies d
WHERE d.job_id = ANY($1::uuid[])

-- One round of propagation (core's `workflow::propagate`), first read: the unresolved edges of
-- the jobs that ended (docs/design.md section 10), by the primary key of
-- drover.job_dependencies. The caller holds the rows of those jobs locked, so no edge to them
-- is added meanwhile (an enqueue locks its dependencies first).
--
-- $1 ended job ids uuid[].
SELECT d.depends_on_id, d.job_id
FROM drover.job_dependencies d
WHERE d.depends_on_id = ANY($1::uuid[]) AND NOT d.resolved
ORDER BY d.depends_on_id, d.job_id

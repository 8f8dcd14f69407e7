-- Records one operator write, in the write's transaction, dated by its clock; answers its id
-- (a bulk action raises its count in each later step: audit_add_jobs.sql).
--
-- $1 actor text, $2 tenant text (NULL: every tenant), $3 action text, $4 target jsonb,
-- $5 jobs bigint, $6 source text.
INSERT INTO drover.audit_log (actor, tenant, action, target, jobs, source)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id

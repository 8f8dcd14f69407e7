-- A page of audit records newest first, below the keyset cursor; a NULL filter is no filter.
-- The primary key serves the order and the cursor; a tenant's page uses (tenant, id).
--
-- $1 before bigint, $2 action text, $3 source text, $4 actor text, $5 tenant text,
-- $6 limit integer (the page size plus one, to tell whether a next page exists).
SELECT id, at, actor, tenant, action, target, jobs, source
FROM drover.audit_log
WHERE ($1::bigint IS NULL OR id < $1)
  AND ($2::text IS NULL OR action = $2)
  AND ($3::text IS NULL OR source = $3)
  AND ($4::text IS NULL OR actor = $4)
  AND ($5::text IS NULL OR tenant = $5)
ORDER BY id DESC
LIMIT $6

-- One workflow's row.
--
-- $1 id uuid.
SELECT w.id, w.tenant, w.created_at FROM drover.workflows w WHERE w.id = $1

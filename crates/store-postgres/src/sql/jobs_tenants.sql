-- The tenants of the stored jobs among $1 (a bulk action's slice of ids, at most 500), so it
-- acts only on the jobs of its scope without reading their large fields.
--
-- $1 ids uuid[].
SELECT j.id, j.tenant FROM drover.jobs j WHERE j.id = ANY($1)

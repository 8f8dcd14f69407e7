-- The tenants of the stored jobs among $1 (all of a bulk action's ids, at most 1,000, for its
-- record's tenant; or a step's slice of them, so it acts only on the jobs of its scope),
-- without reading their large fields.
--
-- $1 ids uuid[].
SELECT j.id, j.tenant FROM drover.jobs j WHERE j.id = ANY($1)

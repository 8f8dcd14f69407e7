-- Jobs by id (`jobs_get`, at most 1,000); the caller answers in the order asked.
--
-- $1 id uuid[].
SELECT j.* FROM drover.jobs j WHERE j.id = ANY($1::uuid[])

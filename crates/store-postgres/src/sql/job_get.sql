-- One job by id.
--
-- $1 id uuid.
SELECT j.* FROM drover.jobs j WHERE j.id = $1

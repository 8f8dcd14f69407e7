-- Lock one job for a change computed by core's `state::apply`, with the database clock the
-- change must use.
--
-- $1 id uuid.
SELECT j.*, now() AS db_now FROM drover.jobs j WHERE j.id = $1 FOR UPDATE

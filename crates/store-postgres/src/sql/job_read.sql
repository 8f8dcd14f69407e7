-- One job, unlocked, with the database clock of its transaction: the checks that precede a
-- lock taken later in the same transaction (children_in).
--
-- $1 id uuid.
SELECT j.*, now() AS db_now FROM drover.jobs j WHERE j.id = $1

-- Remove a worker's registration.
--
-- $1 id text.
DELETE FROM drover.workers WHERE id = $1

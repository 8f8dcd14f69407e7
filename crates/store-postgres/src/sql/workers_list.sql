-- Registered workers, by id.
SELECT w.* FROM drover.workers w ORDER BY w.id

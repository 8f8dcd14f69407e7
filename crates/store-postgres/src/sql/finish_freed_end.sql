-- The end of finish_freed.sql, after the freed_queue column sql.rs puts between them.
FROM drover.jobs j
WHERE j.id = ANY($1::uuid[])

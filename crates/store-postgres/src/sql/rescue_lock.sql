-- Lock up to $1 running jobs whose lease expired by the database clock, oldest expiry first.
-- SKIP LOCKED plus the re-checked condition make each expired lease rescued exactly once,
-- however many rescuers race; the caller applies core's LeaseExpired and writes back with
-- jobs_write.sql in the same transaction.
--
-- $1 limit integer.
SELECT j.*, now() AS db_now
FROM drover.jobs j
WHERE j.state = 'running' AND j.lease_expires_at <= now()
ORDER BY j.lease_expires_at
LIMIT $1
FOR UPDATE SKIP LOCKED

-- Remove workers whose last heartbeat is older than $1 (database clock).
--
-- $1 older_than_us bigint.
DELETE FROM drover.workers WHERE last_heartbeat_at < now() - $1 * interval '1 microsecond'

-- Record a worker heartbeat; no row means the worker is not registered.
--
-- $1 id text.
UPDATE drover.workers SET last_heartbeat_at = now() WHERE id = $1

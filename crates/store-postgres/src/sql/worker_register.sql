-- Register (or re-register) a worker: started and last heartbeat are now (database clock).
--
-- $1 id text, $2 host text, $3 pid bigint, $4 queues text[].
INSERT INTO drover.workers AS w (id, host, pid, queues, started_at, last_heartbeat_at)
VALUES ($1, $2, $3, $4, now(), now())
ON CONFLICT (id) DO UPDATE
SET host = EXCLUDED.host,
    pid = EXCLUDED.pid,
    queues = EXCLUDED.queues,
    started_at = EXCLUDED.started_at,
    last_heartbeat_at = EXCLUDED.last_heartbeat_at
RETURNING w.*

-- Write back jobs that the caller changed with core's `state::apply` inside its transaction
-- (after locking them FOR UPDATE): every column a transition may change, as parallel arrays.
-- Jobs that became ready wake idle workers (NOTIFY with the queue); running jobs with a cancel
-- request fire their handler's cancellation (NOTIFY drover_cancel with the job id) when $15.
--
-- $1 id uuid[], $2 state text[], $3 attempt integer[], $4 fencing_token bigint[],
-- $5 lease_owner text[], $6 lease_expires_at timestamptz[], $7 cancel_requested boolean[],
-- $8 result jsonb[], $9 errors jsonb[], $10 progress jsonb[], $11 run_at timestamptz[],
-- $12 finished_at timestamptz[], $13 meta jsonb[], $14 attempted_at timestamptz[],
-- $15 notify cancel requests boolean, $16 started_at timestamptz[],
-- $17 pending_dependencies integer[], $18 live_children integer[].
WITH updated AS (
    UPDATE drover.jobs j
    SET state = u.state,
        attempt = u.attempt,
        fencing_token = u.fencing_token,
        lease_owner = u.lease_owner,
        lease_expires_at = u.lease_expires_at,
        cancel_requested = u.cancel_requested,
        result = u.result,
        errors = u.errors,
        progress = u.progress,
        run_at = u.run_at,
        finished_at = u.finished_at,
        meta = u.meta,
        attempted_at = u.attempted_at,
        started_at = u.started_at,
        pending_dependencies = u.pending_dependencies,
        live_children = u.live_children
    FROM unnest($1::uuid[], $2::text[], $3::integer[], $4::bigint[], $5::text[],
                $6::timestamptz[], $7::boolean[], $8::jsonb[], $9::jsonb[], $10::jsonb[],
                $11::timestamptz[], $12::timestamptz[], $13::jsonb[], $14::timestamptz[],
                $16::timestamptz[], $17::integer[], $18::integer[])
         AS u(id, state, attempt, fencing_token, lease_owner, lease_expires_at,
              cancel_requested, result, errors, progress, run_at, finished_at, meta,
              attempted_at, started_at, pending_dependencies, live_children)
    WHERE j.id = u.id
    RETURNING j.*
),
ready AS (
    SELECT pg_notify('drover_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM updated WHERE state = 'queued' AND run_at <= now()) AS q
),
cancels AS (
    SELECT pg_notify('drover_cancel', updated.id::text)
    FROM updated
    WHERE $15::boolean AND updated.state = 'running' AND updated.cancel_requested
)
SELECT updated.*,
       (SELECT count(*) FROM ready) AS notified_queues,
       (SELECT count(*) FROM cancels) AS notified_cancels
FROM updated

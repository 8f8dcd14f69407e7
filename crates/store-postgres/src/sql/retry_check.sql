-- Operator retry checks, after the quota locks: pending jobs in total and of the tenant, and
-- the live job (other than $3) holding the retried job's unique key, if any.
--
-- $1 tenant text, $2 unique_key text (NULL: none), $3 id uuid.
--
-- Pending = waiting for other jobs (jobs_blocked_idx) + waiting for a worker (queued,
-- reconciling: jobs_waiting_idx) + running (jobs_running_lease_idx), counted apart so that
-- each count matches one partial index.
SELECT
    ((SELECT count(*) FROM drover.jobs WHERE state = 'waiting')
     + (SELECT count(*) FROM drover.jobs WHERE state IN ('queued', 'reconciling'))
     + (SELECT count(*) FROM drover.jobs WHERE state = 'running'))::bigint AS global_pending,
    ((SELECT count(*) FROM drover.jobs WHERE tenant = $1 AND state = 'waiting')
     + (SELECT count(*) FROM drover.jobs
      WHERE tenant = $1 AND state IN ('queued', 'reconciling'))
     + (SELECT count(*) FROM drover.jobs
        WHERE tenant = $1 AND state = 'running'))::bigint AS tenant_pending,
    (SELECT j.id FROM drover.jobs j
     WHERE $2::text IS NOT NULL AND j.tenant = $1 AND j.unique_key = $2 AND j.id <> $3
       AND j.state IN ('waiting', 'queued', 'running', 'reconciling')
     LIMIT 1) AS unique_holder

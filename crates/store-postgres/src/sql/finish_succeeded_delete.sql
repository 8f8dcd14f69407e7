-- Record a batch of successful runs by deleting the jobs (StoreConfig::succeeded_jobs =
-- SucceededJobs::Delete: the store keeps no succeeded jobs, as if retention pruned each at
-- once). Distinct ids only (the caller checks). Fenced like finish_succeeded.sql: a job is
-- deleted only while running under the presented token with an unexpired lease; the caller
-- answers every other item LeaseLost. A DELETE writes no new row version and no index entry
-- (vacuum removes the dead row and its entries later), where the UPDATE of
-- finish_succeeded.sql writes a row version and the entries of every finished-job index.
-- Nothing becomes ready, so nothing is notified here; a job under a max_running bound answers
-- whom to wake (freed_queue).
--
-- $1 id uuid[], $2 token bigint[].
DELETE FROM drover.jobs j
USING unnest($1::uuid[], $2::bigint[]) AS i(id, token)
WHERE j.id = i.id
  AND j.fencing_token = i.token
  -- Fenced: running under the presented token with an unexpired lease (inside a CASE for the
  -- reason finish_succeeded.sql gives: a primary-key lookup per input row is the only path).
  AND CASE WHEN j.state = 'running' THEN j.lease_expires_at > now() ELSE false END
RETURNING j.id,
    -- Whom the finish wakes when the job ran under a limit policy with a max_running bound,
    -- whose place it frees (the store sends it after commit through its notifier, not as a
    -- NOTIFY here, which would serialise commits: notify.rs): the job's queue when only the
    -- policy queue:<queue> bounds it (only that queue's jobs can wait for the place); '*',
    -- every claim loop (StoreEvent::LimitsChanged), when a kind:<kind> or explicit key's
    -- policy does (jobs of any queue may wait for those); NULL otherwise. The first test is
    -- an InitPlan, run once per statement: without such policies no row looks further.
    CASE
        WHEN NOT (SELECT EXISTS (SELECT 1 FROM drover.limits WHERE max_running IS NOT NULL))
            THEN NULL
        WHEN EXISTS (
            SELECT 1
            FROM drover.limits l
            WHERE l.max_running IS NOT NULL
              AND l.key = ANY (j.limit_keys || ('kind:' || j.kind))
              AND l.key <> 'queue:' || j.queue
        ) THEN '*'
        WHEN EXISTS (
            SELECT 1
            FROM drover.limits l
            WHERE l.max_running IS NOT NULL AND l.key = 'queue:' || j.queue
        ) THEN j.queue
    END AS freed_queue

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
  -- A job with dependents, a parent or live children propagates its end: outcome.rs records
  -- it in a transaction instead (docs/design.md section 10). PostgreSQL re-checks the whole
  -- condition on the latest row version after waiting for a row lock, so a dependent or
  -- child stored concurrently is never missed. Inside the CASE too, for the same reason:
  -- written plainly, their guessed selectivity (a new table has no statistics) makes the
  -- planner drive the join from a scan of the whole table.
  AND CASE
          WHEN j.state = 'running'
              THEN j.lease_expires_at > now()
                   AND NOT j.has_dependents AND j.parent_id IS NULL AND j.live_children = 0
          ELSE false
      END
RETURNING j.id,
    -- freed_queue: sql/freed_queue.sql, appended here by sql.rs.

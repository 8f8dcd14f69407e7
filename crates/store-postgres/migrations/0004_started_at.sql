-- Drover schema, version 4: when a job's handler started.
--
-- A worker may claim jobs ahead of its free slots; they are leased (state 'running') but wait
-- in its backlog until a slot frees. started_at tells the two apart: the claim sets it for the
-- jobs that start at once and leaves it NULL for the others, whose start the worker reports
-- with its next heartbeat or finish. A running job with NULL started_at waits for a slot, and
-- an expired lease of such a job gives its attempt back (core's state::apply).
--
-- A nullable column without a default is a change of the catalog only: no table rewrite, and
-- the ACCESS EXCLUSIVE lock it takes is held for an instant (its own step, so the update
-- below runs without it).

-- drover:step locking
ALTER TABLE drover.jobs ADD COLUMN IF NOT EXISTS started_at timestamptz;

-- drover:step locking
-- Jobs leased when this runs were claimed by workers that did not record starts: count them
-- as started (an expired lease spends their attempt, as it did), not as waiting. Only running
-- jobs, found through jobs_running_lease_idx: as many as the workers' slots and claim-ahead.
UPDATE drover.jobs
SET started_at = attempted_at
WHERE state = 'running' AND started_at IS NULL;

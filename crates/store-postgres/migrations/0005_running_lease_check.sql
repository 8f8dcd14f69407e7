-- Drover schema, version 5: a running job always has a lease owner and a lease expiry.
--
-- A running row without them could never be finished (every worker write presents an
-- unexpired lease) nor rescued (the rescuer looks for expired leases): it would stay running
-- for good. The constraint makes such a row impossible. A reconciling job has a lease while a
-- reconcile sweep holds it and none while it waits for one, so there the owner and the expiry
-- only come together. Queued and finished jobs are left free: every transition clears their
-- lease, and checking them would make validation refuse old rows for no gain.
--
-- Steps (migrate.rs): adding the constraint NOT VALID takes a brief ACCESS EXCLUSIVE lock and
-- reads no row; rows written before it that break it are repaired; VALIDATE then reads the
-- table under a lock that lets job reads and writes go on. Each step may run again.

-- drover:step locking
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'drover.jobs'::regclass AND conname = 'jobs_lease_check'
    ) THEN
        ALTER TABLE drover.jobs ADD CONSTRAINT jobs_lease_check CHECK (
            CASE state
                WHEN 'running' THEN lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL
                WHEN 'reconciling' THEN (lease_owner IS NULL) = (lease_expires_at IS NULL)
                ELSE true
            END
        ) NOT VALID;
    END IF;
END
$$;

-- drover:step locking
-- A running job without a lease gets an expired one, so the next rescue pass treats it as the
-- job of a worker that stopped heartbeating; a reconciling job with half a lease is freed
-- for the next sweep. Running and reconciling jobs are few and indexed, so this reads little.
UPDATE drover.jobs
SET lease_owner = COALESCE(lease_owner, 'unknown'),
    lease_expires_at = COALESCE(lease_expires_at, now())
WHERE state = 'running' AND (lease_owner IS NULL OR lease_expires_at IS NULL);

UPDATE drover.jobs
SET lease_owner = NULL,
    lease_expires_at = NULL
WHERE state = 'reconciling' AND (lease_owner IS NULL) <> (lease_expires_at IS NULL);

-- drover:step online
ALTER TABLE drover.jobs VALIDATE CONSTRAINT jobs_lease_check;

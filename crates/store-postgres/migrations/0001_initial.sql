-- Drover schema, version 1: jobs, queues, workers, limit policies and cron schedules.
--
-- Everything lives in schema `drover` (created by the migrator together with
-- `drover.schema_migrations` before this file runs). Forward-only: never edit this file once
-- released; add a new numbered file instead (the migrator refuses a changed checksum).
--
-- Large existing tables: `CREATE INDEX IF NOT EXISTS` lets an operator build an index
-- beforehand with `CREATE INDEX CONCURRENTLY` under the same name (the GIN index on meta,
-- jobs_done_meta_idx, is the slow one); this migration then skips it.

CREATE TABLE IF NOT EXISTS drover.jobs (
    id                uuid        PRIMARY KEY,
    kind              text        NOT NULL,
    queue             text        NOT NULL,
    tenant            text        NOT NULL,
    args              jsonb       NOT NULL,
    meta              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    priority          smallint    NOT NULL DEFAULT 0,
    run_at            timestamptz NOT NULL,
    state             text        NOT NULL,
    attempt           integer     NOT NULL DEFAULT 0,
    max_attempts      integer     NOT NULL,
    fencing_token     bigint      NOT NULL DEFAULT 0,
    lease_owner       text,
    lease_expires_at  timestamptz,
    cancel_requested  boolean     NOT NULL DEFAULT false,
    result            jsonb,
    -- Failed attempts, newest last, at most ERRORS_KEPT: [{"attempt", "at", "message"}].
    errors            jsonb       NOT NULL DEFAULT '[]'::jsonb,
    progress          jsonb,
    idempotency_key   text,
    -- SHA-256 of the canonical request; NULL on legacy rows (a replay of those is a conflict).
    request_hash      text,
    unique_key        text,
    limit_keys        text[]      NOT NULL DEFAULT '{}',
    created_at        timestamptz NOT NULL DEFAULT now(),
    attempted_at      timestamptz,
    finished_at       timestamptz,
    CONSTRAINT jobs_state_check CHECK (
        state IN ('queued', 'running', 'reconciling', 'succeeded', 'failed', 'cancelled')
    ),
    CONSTRAINT jobs_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT jobs_attempt_check CHECK (attempt >= 0),
    CONSTRAINT jobs_fencing_token_check CHECK (fencing_token >= 0),
    CONSTRAINT jobs_errors_check CHECK (jsonb_typeof(errors) = 'array'),
    CONSTRAINT jobs_finished_check CHECK (
        (finished_at IS NOT NULL) = (state IN ('succeeded', 'failed', 'cancelled'))
    )
);

-- A queue table churns: every job leaves two or three dead row versions behind. Vacuum it
-- after 2 % of its rows changed (PostgreSQL's default is 20 %), so claim and lease index scans
-- do not wade through dead entries on large tables.
ALTER TABLE drover.jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

-- Index design: every update of a job writes a new row version into every index whose
-- predicate it matches (state changes rule out HOT updates), so most indexes are partial on the
-- states they serve. A job's queued and running versions touch only the primary key, the claim
-- or lease index and the pending index; the list and meta indexes hold terminal versions only
-- (live jobs are few, bounded by the quotas, and lists reach them through the pending index).

-- Claim: ready jobs of a queue in claim order (priority, run_at, id).
CREATE INDEX IF NOT EXISTS jobs_claim_idx
    ON drover.jobs (queue, priority, run_at, id)
    WHERE state = 'queued';

-- Idempotency keys: one job per (tenant, key) while the job is kept.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency_key_uidx
    ON drover.jobs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Unique keys: one live (queued, running, reconciling) job per (tenant, key).
CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique_key_uidx
    ON drover.jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running', 'reconciling');

-- Rescue of expired leases, and the running jobs counted by limits.
CREATE INDEX IF NOT EXISTS jobs_running_lease_idx
    ON drover.jobs (lease_expires_at)
    WHERE state = 'running';

-- Reconcile sweeps.
CREATE INDEX IF NOT EXISTS jobs_reconciling_idx
    ON drover.jobs (kind, id)
    WHERE state = 'reconciling';

-- Live jobs: quota counts (pending = queued, running, reconciling) per tenant and in total,
-- and the live part of lists and the snapshot.
CREATE INDEX IF NOT EXISTS jobs_pending_idx
    ON drover.jobs (tenant, id)
    WHERE state IN ('queued', 'running', 'reconciling');

-- Retention: terminal jobs by finish time.
CREATE INDEX IF NOT EXISTS jobs_finished_idx
    ON drover.jobs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');

-- Lists of terminal jobs, newest first (keyset on id), per state and by queue, kind or tenant;
-- the queue index also serves the snapshot's counts and the list of queues.
CREATE INDEX IF NOT EXISTS jobs_done_state_idx
    ON drover.jobs (state, id)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX IF NOT EXISTS jobs_done_queue_idx
    ON drover.jobs (queue, state, id)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX IF NOT EXISTS jobs_done_kind_idx
    ON drover.jobs (kind, state, id)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX IF NOT EXISTS jobs_done_tenant_idx
    ON drover.jobs (tenant, state, id)
    WHERE state IN ('succeeded', 'failed', 'cancelled');

-- Meta containment filters (`meta @> $1`) over terminal jobs.
CREATE INDEX IF NOT EXISTS jobs_done_meta_idx
    ON drover.jobs USING gin (meta jsonb_path_ops)
    WHERE state IN ('succeeded', 'failed', 'cancelled');

-- Queues with a stored pause state; queues that only have jobs have no row.
CREATE TABLE IF NOT EXISTS drover.queues (
    name       text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    paused_at  timestamptz
);

-- Registered worker processes.
CREATE TABLE IF NOT EXISTS drover.workers (
    id                 text        PRIMARY KEY,
    host               text        NOT NULL,
    pid                bigint      NOT NULL,
    queues             text[]      NOT NULL DEFAULT '{}',
    started_at         timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS workers_heartbeat_idx ON drover.workers (last_heartbeat_at);

-- Limit policies (DESIGN.md section 4, Limits) and their GCRA state.
CREATE TABLE IF NOT EXISTS drover.limits (
    key             text        PRIMARY KEY,
    max_running     integer,
    rate_count      integer,
    rate_period_ms  bigint,
    -- GCRA theoretical arrival time; NULL until a claim is counted.
    rate_tat        timestamptz,
    CONSTRAINT limits_bound_check CHECK (max_running IS NOT NULL OR rate_count IS NOT NULL),
    CONSTRAINT limits_rate_check CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL))
);

-- Cron schedules; `last_tick_at` makes each tick fire exactly once across workers.
CREATE TABLE IF NOT EXISTS drover.schedules (
    name          text        PRIMARY KEY,
    cron          text        NOT NULL,
    timezone      text        NOT NULL,
    kind          text        NOT NULL,
    args          jsonb       NOT NULL,
    queue         text        NOT NULL,
    priority      smallint    NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_tick_at  timestamptz
);

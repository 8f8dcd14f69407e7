//! The command line grammar (clap derive). Every command's `--help` ends with an example.
//! Only this crate reads environment variables (`DROVER_*`); see [`crate::env`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgGroup, ArgMatches, Args, Parser, Subcommand, ValueEnum};
use drover_core::limits::MAX_RUNNING_MAX;
use drover_core::store::LIST_LIMIT_MAX;
use drover_core::{
    AuditAction, AuditSource, BulkAction, JobDetails, JobId, JobKind, JobState, LimitKey,
    QueueName, Rate, ScheduleName, SucceededJobs, TenantId, WorkflowId,
};
use drover_runner::{PoolConfig, PREFETCH_MAX, PRUNE_LIMIT_MAX, SLOTS_MAX};

/// Largest `--db-connections`: a bound far above what one PostgreSQL server accepts
/// (`max_connections` is 100 by default), so that a typo cannot size a pool beyond reason.
pub const DB_CONNECTIONS_MAX: u32 = 10_000;

/// Largest `--max-concurrent` (and `DROVER_MAX_CONCURRENT`): the runner's own bound.
pub const MAX_CONCURRENT_MAX: usize = drover_runner::MAX_CONCURRENT_MAX;

/// The parser of a whole-number flag whose rule is `min..=max`: anything else (`abc`, `1e3`,
/// `2.5`, an empty value, a number out of range) is refused with the rule, "must be an integer
/// between MIN and MAX", which clap prints after the flag and the value given (exit code 2).
/// Clap's own integer parsers answer "invalid digit found in string" for `abc`, which names
/// no rule.
///
/// # Errors
/// The rule, for clap to print.
fn integer_in<T>(
    min: i128,
    max: i128,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<i128>,
{
    move |value: &str| {
        value
            .parse::<i128>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| format!("must be an integer between {min} and {max}"))
    }
}

/// Parses `--max-concurrent`, which clap also fills from `DROVER_MAX_CONCURRENT`: a whole number
/// in 1..=[`MAX_CONCURRENT_MAX`]. The error names the variable too, since clap's own names only
/// the flag, which a user who set the variable never typed.
///
/// # Errors
/// The rule, for clap to print (exit code 2).
fn max_concurrent(value: &str) -> Result<usize, String> {
    integer_in::<usize>(1, MAX_CONCURRENT_MAX as i128)(value).map_err(|rule| {
        format!("{rule} (set by --max-concurrent, or by DROVER_MAX_CONCURRENT in the environment)")
    })
}

/// Smallest `serve --max-body-bytes`: 1 KiB, room for any single enqueue request's envelope
/// (a smaller bound answers 413 to every request with a body).
pub const MAX_BODY_BYTES_MIN: usize = 1024;
/// Largest `serve --max-body-bytes`: 1 GiB (a body is held in memory while it is read).
pub const MAX_BODY_BYTES_MAX: usize = 1 << 30;

/// Largest `enqueue --batch-size`.
pub const BATCH_SIZE_MAX: usize = 10_000;

/// Largest `prune --batch`.
pub const PRUNE_BATCH_MAX: u32 = 100_000;

/// Drover: durable background jobs on PostgreSQL.
#[derive(Debug, Parser)]
#[command(
    name = "drover",
    version,
    about = "Durable background jobs on PostgreSQL: workers, operator commands, HTTP API",
    after_help = "Examples:\n  drover dev --jobs examples/jobs.jsonl\n  drover --database-url postgres://app@db/app migrate\n  drover worker --queue default --queue mail --slots 8\n  drover jobs list --state failed --json"
)]
pub struct Cli {
    /// PostgreSQL URL, e.g. postgres://user@host:5432/db (or DROVER_DATABASE_URL).
    #[arg(
        long,
        global = true,
        env = "DROVER_DATABASE_URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,

    /// Print machine-readable JSON instead of tables (worker and serve: write their log on
    /// stderr as one JSON object a line).
    #[arg(long, global = true)]
    pub json: bool,

    /// Log filter for diagnostics on stderr (e.g. info, drover_runner=debug; or RUST_LOG;
    /// default warn). A --log filter that does not parse is refused (exit 2), not ignored; a
    /// RUST_LOG that does not parse is passed over with a warning.
    #[arg(long, global = true, value_name = "FILTER", value_parser = log_filter)]
    pub log: Option<String>,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply pending database migrations (run before starting new workers); job traffic
    /// keeps flowing meanwhile.
    #[command(
        after_help = "Examples:\n  drover --database-url postgres://app@db/app migrate\n  drover migrate --lock-timeout 200ms --lock-budget 30m"
    )]
    Migrate(MigrateArgs),
    /// Inspect database migrations.
    #[command(subcommand)]
    Migrations(MigrationsCommand),
    /// Run a worker: claim and run jobs until SIGTERM or Ctrl-C.
    #[command(
        after_help = "Examples:\n  drover worker --queue default --queue mail --slots 8\n  drover worker --queue default --slots 4 --pool long:reports:1:report.build\n  drover worker --allow-exec /usr/bin/convert"
    )]
    Worker(WorkerArgs),
    /// Enqueue one job, or many from a JSON Lines file.
    #[command(
        after_help = "Examples:\n  drover enqueue email.send --args '{\"to\":\"a@example.com\"}' --queue mail\n  drover enqueue report.build --delay 10m --unique-key report:2026-11\n  drover enqueue --file jobs.jsonl\n  drover enqueue --workflow nightly.json"
    )]
    Enqueue(EnqueueArgs),
    /// List, inspect, cancel, retry and requeue jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// List, inspect, cancel and retry workflows (graphs of jobs enqueued as one unit).
    #[command(subcommand)]
    Workflows(WorkflowsCommand),
    /// List, pause and resume queues.
    #[command(subcommand)]
    Queues(QueuesCommand),
    /// Inspect worker processes.
    #[command(subcommand)]
    Workers(WorkersCommand),
    /// Manage limit policies (max running and rate per key).
    #[command(subcommand)]
    Limits(LimitsCommand),
    /// Manage cron schedules.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// The audit log of operator actions: who paused, cancelled, retried, pruned what, when
    /// and from where.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Counts per queue and state, ready and running jobs, and lag; what keeps vacuum from
    /// cleaning the jobs table (oldest open transaction, replication slot, dead rows).
    #[command(after_help = "Example:\n  drover snapshot --json")]
    Snapshot,
    /// Print Prometheus metrics (OpenMetrics text).
    #[command(after_help = "Example:\n  drover metrics > /var/lib/node_exporter/drover.prom")]
    Metrics,
    /// Delete finished jobs older than the retention, batch after batch until none is left.
    #[command(after_help = "Example:\n  drover prune --older-than 30d")]
    Prune(PruneArgs),
    /// Serve the HTTP API (optionally with a worker in the same process).
    #[command(
        after_help = "Examples:\n  DROVER_API_TOKENS=$TOKENS drover serve --listen 0.0.0.0:8080\n  drover serve --listen 127.0.0.1:8080 --tokens /etc/drover/tokens --worker --queue default"
    )]
    Serve(ServeArgs),
    /// Development mode on the in-memory store: enqueue jobs, work them, report outcomes.
    #[command(
        after_help = "Examples:\n  drover dev --jobs examples/jobs.jsonl\n  drover dev --json\n  drover dev --listen 127.0.0.1:8080"
    )]
    Dev(DevArgs),
    /// Print shell completions.
    #[command(after_help = "Example:\n  drover completions bash > /etc/bash_completion.d/drover")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `drover migrate` settings.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// Longest wait of one try of a step that needs a lock job writes would queue behind,
    /// 1ms..=60s (default 300ms): the step is rolled back and tried again, so job writes never
    /// wait much longer than this.
    #[arg(long, value_name = "DURATION", value_parser = lock_timeout)]
    pub lock_timeout: Option<Duration>,

    /// How long each step keeps trying to get its locks (retries, or an online index build's
    /// wait) before migrate gives up naming the sessions in the way (default 5m; 0s: one try).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lock_budget: Option<Duration>,
}

/// `drover migrations ...`
#[derive(Debug, Subcommand)]
pub enum MigrationsCommand {
    /// List applied and pending migrations.
    #[command(after_help = "Example:\n  drover migrations list --json")]
    List,
}

/// Worker settings shared by `worker`, `serve --worker` and `dev`.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// A queue to serve (repeatable; default: `default` unless --pool is given; `dev` serves
    /// the queues of its jobs and `default`).
    #[arg(long = "queue", value_name = "QUEUE", value_parser = queue_name)]
    pub queues: Vec<QueueName>,

    /// Slots per queue, 1..=10000: `--slots 8 --queue a --queue b` runs up to 16 jobs.
    #[arg(
        long,
        default_value_t = 8,
        value_name = "N",
        value_parser = integer_in::<usize>(1, SLOTS_MAX as i128)
    )]
    pub slots: usize,

    /// Claim-ahead per queue, 0..=10000: while a queue's jobs are short (under 50 ms), a claim
    /// may take up to N jobs beyond the free slots; they wait leased for a slot (shown as
    /// claimed, not running, until they start) and are released at once on shutdown (default:
    /// 8 per slot, at most 1,000; 0 turns it off). Applies to every pool.
    #[arg(
        long,
        value_name = "N",
        value_parser = integer_in::<usize>(0, PREFETCH_MAX as i128)
    )]
    pub prefetch: Option<usize>,

    /// An extra pool NAME:QUEUE[,QUEUE...]:SLOTS[:KIND[,KIND...]] (repeatable; SLOTS 1..=10000),
    /// e.g. `long:reports:1:report.build` reserves one slot for a long-running kind; pools
    /// without KIND (--queue) then leave that kind in those queues to it. With --pool and no
    /// --queue the worker serves only its pools (--slots applies to --queue).
    #[arg(long = "pool", value_name = "SPEC", value_parser = parse_pool)]
    pub pools: Vec<PoolConfig>,

    /// Cap on concurrent executions of this process over all pools, 1..=1000000 (or
    /// DROVER_MAX_CONCURRENT; default: no cap beyond the slots).
    #[arg(
        long,
        env = "DROVER_MAX_CONCURRENT",
        value_name = "N",
        value_parser = max_concurrent
    )]
    pub max_concurrent: Option<usize>,

    /// Enable the `exec` kind for this program (repeatable): the path of an executable file,
    /// absolute or relative like ./scripts/report.sh, never a bare name or a directory (checked
    /// at start). A job must give exactly this path (symlinks
    /// are not followed, so another path to the same file is refused); it runs as given, never
    /// through a shell.
    #[arg(long = "allow-exec", value_name = "PROGRAM", value_parser = crate::builtin::parse_allow_exec)]
    pub allow_exec: Vec<PathBuf>,

    /// Lease length, 100ms..=24h, at least three heartbeat intervals (default 60s).
    #[arg(long, value_parser = lease_duration, value_name = "DURATION")]
    pub lease: Option<Duration>,

    /// Heartbeat interval, longer than zero and at most a third of the lease, so one late
    /// heartbeat never lets a running job's lease expire, and shorter than 2m, after which a
    /// worker leaves the worker list (default 15s).
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub heartbeat: Option<Duration>,

    /// How often this worker looks for expired leases to rescue (default 15s, or the lease
    /// when --lease is shorter, so a crashed worker's jobs come back soon after it expires).
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub rescue_interval: Option<Duration>,

    /// Shutdown grace period: how long running jobs may take to finish after SIGTERM (e.g. 30s;
    /// default 30s). Then they are cancelled and released; a handler that ignores its
    /// cancellation is abandoned 5 s later (the cancel grace), so a stop can take this plus 5 s.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_grace: Option<Duration>,

    /// Retention of finished jobs, longer than zero (default 7d).
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub retention: Option<Duration>,

    /// Retention of audit records of operator actions, longer than zero (default 90d).
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub audit_retention: Option<Duration>,

    /// Delete each job as its handler's success is recorded, instead of keeping it succeeded
    /// until --retention prunes it (failed and cancelled jobs are kept as always). Less
    /// database work per job; `jobs get` then answers "not found" for a job that succeeded,
    /// and its idempotency key is free again at once.
    #[arg(long)]
    pub delete_succeeded: bool,

    /// Most finished jobs deleted per retention pass, 1..=100000 (default 1000).
    #[arg(
        long,
        value_name = "N",
        value_parser = integer_in::<u32>(1, i128::from(PRUNE_LIMIT_MAX))
    )]
    pub prune_limit: Option<u32>,

    /// Poll interval when no wake-up arrives, longer than zero (default 1s, 50ms under `dev`;
    /// PgBouncer transaction mode relies on it).
    #[arg(long, value_parser = positive_duration, value_name = "DURATION")]
    pub poll_interval: Option<Duration>,

    /// Serve /metrics and /v1/ready on this address.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

    /// Connections in the database pool, 1..=10000 (default: the slots of all queues and pools,
    /// capped by --max-concurrent, + 4; `serve` adds 8 for its API; at most 10000). Below
    /// slots + 2 jobs may wait for a connection, and the worker warns at start. `dev` refuses
    /// it: it has no database.
    #[arg(
        long,
        value_name = "N",
        value_parser = integer_in::<u32>(1, i128::from(DB_CONNECTIONS_MAX))
    )]
    pub db_connections: Option<u32>,

    /// Turn off prepared-statement caching and LISTEN, for PgBouncer in transaction mode
    /// (`dev` refuses it).
    #[arg(long)]
    pub pgbouncer: bool,

    /// Warn when the database's oldest open transaction is older than this: vacuum cannot
    /// clean the jobs table behind it and claims slow down (default 5m; 0s: never). Checked
    /// every minute; a warning that still holds is repeated every 10 minutes. `dev` refuses it.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub warn_transaction_age: Option<Duration>,

    /// Warn when dead row versions are more than this fraction of the jobs table's rows (and
    /// at least 10000): vacuum is not keeping up (0..=1, default 0.5; 0: never). `dev` refuses
    /// it.
    #[arg(long, value_name = "FRACTION", value_parser = dead_rows_fraction)]
    pub warn_dead_rows: Option<f64>,

    /// Export traces and metrics over OTLP/HTTP (`on` or `off`; also DROVER_OTLP). Default:
    /// on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. The
    /// standard OTEL_* variables configure the export (docs/opentelemetry.md).
    #[arg(long, value_name = "on|off", env = "DROVER_OTLP", value_parser = on_off)]
    pub otlp: Option<bool>,

    /// How a job's attempts after the first relate to the trace of its enqueue: `link` (a
    /// trace of their own, linked; the default) or `parent` (children in the same trace).
    #[arg(
        long,
        value_name = "link|parent",
        env = "DROVER_TRACE_LATER_ATTEMPTS",
        default_value = "link",
        value_parser = later_attempts
    )]
    pub trace_later_attempts: drover_runner::telemetry::LaterAttempts,
}

impl WorkerArgs {
    /// What the worker's store does with a job whose handler succeeded (`--delete-succeeded`).
    pub fn succeeded_jobs(&self) -> SucceededJobs {
        SucceededJobs::delete_if(self.delete_succeeded)
    }
}

/// `drover enqueue ...`
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The job's kind (omit with --file or --workflow).
    #[arg(
        required_unless_present_any = ["file", "workflow"],
        conflicts_with_all = ["file", "workflow"]
    )]
    pub kind: Option<String>,
    /// Args as any JSON value: an object, an array, a string, a number... (default {}).
    #[arg(long, value_name = "JSON", conflicts_with = "file")]
    pub args: Option<String>,
    /// Queue (default `default`).
    #[arg(long, conflicts_with = "file")]
    pub queue: Option<String>,
    /// Priority, -32768..=32767; smaller runs first (default 0).
    #[arg(
        long,
        allow_negative_numbers = true,
        conflicts_with = "file",
        value_parser = integer_in::<i64>(i128::from(i16::MIN), i128::from(i16::MAX))
    )]
    pub priority: Option<i64>,
    /// Absolute ready time, RFC 3339 (e.g. 2026-12-01T10:00:00Z).
    #[arg(long, value_name = "TIME", conflicts_with_all = ["delay", "file"])]
    pub run_at: Option<String>,
    /// Ready after this delay from the database clock (e.g. 30s, 10m).
    #[arg(long, value_parser = parse_delay, value_name = "DURATION", conflicts_with = "file")]
    pub delay: Option<Duration>,
    /// Attempt budget, 1..=1000 (default 3).
    #[arg(
        long,
        allow_negative_numbers = true,
        conflicts_with = "file",
        value_parser = integer_in::<i64>(
            i128::from(drover_core::job::MAX_ATTEMPTS_MIN),
            i128::from(drover_core::job::MAX_ATTEMPTS_MAX)
        )
    )]
    pub max_attempts: Option<i64>,
    /// Idempotency key: the same key with the same request returns the stored job.
    #[arg(long, conflicts_with = "file")]
    pub idempotency_key: Option<String>,
    /// Unique key among the tenant's live jobs.
    #[arg(long, conflicts_with = "file")]
    pub unique_key: Option<String>,
    /// Tenant (default `default`).
    #[arg(long, conflicts_with = "file")]
    pub tenant: Option<String>,
    /// Metadata as a JSON object (unlike args, it must be an object: lists filter on it).
    #[arg(long, value_name = "JSON", conflicts_with = "file")]
    pub meta: Option<String>,
    /// A limit key the job is subject to (repeatable).
    #[arg(long = "limit-key", value_name = "KEY", conflicts_with = "file")]
    pub limit_keys: Vec<String>,
    /// A job that must be terminal before this one runs (repeatable): the job waits
    /// meanwhile, and is cancelled if one fails or is cancelled (see --run-regardless).
    #[arg(long = "depends-on", value_name = "ID", value_parser = job_id, conflicts_with = "file")]
    pub depends_on: Vec<JobId>,
    /// Run even when a dependency failed or was cancelled.
    #[arg(long, requires = "depends_on")]
    pub run_regardless: bool,
    /// Enqueue a workflow from a JSON file, `-` for standard input: the body of `POST
    /// /v1/workflows`, `{"jobs": [{"name": "a", "kind": "k", ...}, {"name": "b", "kind": "k",
    /// "depends_on": ["a"]}]}`, every job with the fields of an enqueue request and a name
    /// unique in the workflow; `depends_on` names jobs of the workflow. All or nothing.
    #[arg(long, value_name = "FILE", conflicts_with = "file")]
    pub workflow: Option<PathBuf>,
    /// Enqueue every line of a JSON Lines file, `-` for standard input (one job object per
    /// line, with the fields of the HTTP API's enqueue request); the per-job flags above do
    /// not apply to it. Bad lines
    /// are reported by number and the rest are loaded; the exit code is 1 when any line was
    /// rejected.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Jobs per batch with --file (1..=10000).
    #[arg(
        long,
        default_value_t = 1000,
        value_name = "N",
        value_parser = integer_in::<usize>(1, BATCH_SIZE_MAX as i128)
    )]
    pub batch_size: usize,
    /// With --file: when a pending quota (DROVER_MAX_PENDING, DROVER_MAX_TENANT_PENDING) is
    /// full, wait for room as workers finish jobs and load the rest in file order, instead of
    /// rejecting those lines. A stop signal (Ctrl-C) ends the load before the next line,
    /// saying where to resume.
    #[arg(long, requires = "file")]
    pub wait_for_room: bool,
    /// Export the enqueue's span over OTLP/HTTP (`on` or `off`; also DROVER_OTLP), as the
    /// worker does: default on when OTEL_EXPORTER_OTLP_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. TRACEPARENT and TRACESTATE, when set, are
    /// the caller's trace the jobs join (docs/opentelemetry.md).
    #[arg(long, value_name = "on|off", env = "DROVER_OTLP", value_parser = on_off)]
    pub otlp: Option<bool>,
}

/// `drover jobs ...`
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs, newest first.
    #[command(
        after_help = "Examples:\n  drover jobs list --state failed\n  drover jobs list --queue mail --meta '{\"customer\":\"acme\"}' --json"
    )]
    List(ListArgs),
    /// Show one job with its args, result and errors.
    #[command(after_help = "Example:\n  drover jobs get 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79")]
    Get {
        /// Job id.
        #[arg(value_parser = job_id)]
        id: JobId,
    },
    /// Cancel a job (a running job's handler is asked to stop).
    #[command(after_help = "Example:\n  drover jobs cancel 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79")]
    Cancel {
        /// Job id.
        #[arg(value_parser = job_id)]
        id: JobId,
    },
    /// Retry a finished job: same id and args, attempts reset.
    #[command(after_help = "Example:\n  drover jobs retry 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79")]
    Retry {
        /// Job id.
        #[arg(value_parser = job_id)]
        id: JobId,
    },
    /// Run a queued job now: a scheduled one, or one waiting for a retry's backoff or a
    /// snooze, becomes ready at once (attempts kept); a ready one is left as it is.
    #[command(after_help = "Example:\n  drover jobs requeue 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79")]
    Requeue {
        /// Job id.
        #[arg(value_parser = job_id)]
        id: JobId,
    },
    /// Delete a job that is not running or reconciling (cancel a running one first); a job
    /// live jobs still need (a dependency of one, a parent with live children, a child of a
    /// parent not finished) is refused.
    #[command(after_help = "Example:\n  drover jobs delete 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79")]
    Delete {
        /// Job id.
        #[arg(value_parser = job_id)]
        id: JobId,
    },
    /// Cancel, retry or delete many jobs: those given with --id (at most 1,000), or every job
    /// the filters match (none: every job). Each job goes through its own command's rules; one
    /// it does not apply to is skipped. A filter action needs --yes; without it the command
    /// prints how many jobs match and changes nothing.
    #[command(
        after_help = "Examples:\n  drover jobs bulk retry --state failed --queue mail --preview\n  drover jobs bulk retry --state failed --queue mail --yes\n  drover jobs bulk cancel --id 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79 --id 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a7a"
    )]
    Bulk(BulkArgs),
}

/// What `drover jobs bulk` acts on.
#[derive(Debug, Args)]
pub struct BulkArgs {
    /// cancel, retry or delete.
    #[arg(value_parser = bulk_action)]
    pub action: BulkAction,
    /// A job to act on (repeatable, at most 1,000); instead of the filters.
    #[arg(
        long = "id",
        value_name = "ID",
        value_parser = job_id,
        conflicts_with_all = ["queue", "state", "kind", "tenant", "meta", "args", "workflow", "parent"]
    )]
    pub ids: Vec<JobId>,
    /// Only this queue.
    #[arg(long, value_parser = queue_name)]
    pub queue: Option<QueueName>,
    /// Only this state (waiting, queued, running, reconciling, succeeded, failed, cancelled).
    #[arg(long, value_parser = job_state)]
    pub state: Option<JobState>,
    /// Only this kind.
    #[arg(long, value_parser = job_kind)]
    pub kind: Option<JobKind>,
    /// Only this tenant.
    #[arg(long, value_parser = tenant_id)]
    pub tenant: Option<TenantId>,
    /// Only jobs whose meta contains this JSON object.
    #[arg(long, value_name = "JSON")]
    pub meta: Option<String>,
    /// Only jobs whose args contain this JSON object (no index covers args: the action reads
    /// every job the other filters select, 10,000 at a time).
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,
    /// Only jobs of this workflow.
    #[arg(long, value_name = "ID", value_parser = workflow_id)]
    pub workflow: Option<WorkflowId>,
    /// Only children of this job.
    #[arg(long, value_name = "ID", value_parser = job_id)]
    pub parent: Option<JobId>,
    /// Count the jobs the action would act on (at least, past 10,000) and change nothing.
    #[arg(long)]
    pub preview: bool,
    /// Act on every job the filters match (a filter action without it only counts them).
    #[arg(long, conflicts_with = "preview")]
    pub yes: bool,
}

/// Filters of `drover jobs list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this queue.
    #[arg(long, value_parser = queue_name)]
    pub queue: Option<QueueName>,
    /// Only this state (waiting, queued, running, reconciling, succeeded, failed, cancelled).
    #[arg(long, value_parser = job_state)]
    pub state: Option<JobState>,
    /// Only this kind.
    #[arg(long, value_parser = job_kind)]
    pub kind: Option<JobKind>,
    /// Only this tenant.
    #[arg(long, value_parser = tenant_id)]
    pub tenant: Option<TenantId>,
    /// Only jobs whose meta contains this JSON object.
    #[arg(long, value_name = "JSON")]
    pub meta: Option<String>,
    /// Only jobs whose args contain this JSON object (a page reads at most 10,000 jobs, so
    /// it may show fewer than --limit; its next cursor searches on).
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,
    /// Only jobs of this workflow.
    #[arg(long, value_name = "ID", value_parser = workflow_id)]
    pub workflow: Option<WorkflowId>,
    /// Only children of this job.
    #[arg(long, value_name = "ID", value_parser = job_id)]
    pub parent: Option<JobId>,
    /// Page size (1..=1000).
    #[arg(
        long,
        default_value_t = 50,
        value_parser = integer_in::<u32>(1, i128::from(LIST_LIMIT_MAX))
    )]
    pub limit: u32,
    /// Continue after this job id (the `next` of a previous page).
    #[arg(long, value_name = "ID", value_parser = job_id)]
    pub before: Option<JobId>,
    /// With --json: the large fields each job carries, comma-separated: args, result, errors,
    /// progress, or all (default: none, summaries; `jobs get` shows a whole job).
    #[arg(long, value_name = "FIELDS", value_parser = job_details)]
    pub include: Option<JobDetails>,
}

/// `drover workflows ...`
#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    /// List workflows, newest first, with their state and counts per state.
    #[command(
        after_help = "Examples:\n  drover workflows list\n  drover workflows list --tenant acme --json"
    )]
    List(WorkflowListArgs),
    /// Show a workflow as a tree: each job with its state, under the job it waits for (or
    /// its parent).
    #[command(
        after_help = "Example:\n  drover workflows get 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79"
    )]
    Get {
        /// Workflow id.
        #[arg(value_parser = workflow_id)]
        id: WorkflowId,
    },
    /// Cancel every job of a workflow that is not finished.
    #[command(
        after_help = "Example:\n  drover workflows cancel 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79"
    )]
    Cancel {
        /// Workflow id.
        #[arg(value_parser = workflow_id)]
        id: WorkflowId,
    },
    /// Run every failed or cancelled job of a workflow again.
    #[command(
        after_help = "Example:\n  drover workflows retry 0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79"
    )]
    Retry {
        /// Workflow id.
        #[arg(value_parser = workflow_id)]
        id: WorkflowId,
    },
}

/// Filters of `drover workflows list`.
#[derive(Debug, Args)]
pub struct WorkflowListArgs {
    /// Only this tenant.
    #[arg(long, value_parser = tenant_id)]
    pub tenant: Option<TenantId>,
    /// Page size (1..=1000).
    #[arg(
        long,
        default_value_t = 50,
        value_parser = integer_in::<u32>(1, i128::from(LIST_LIMIT_MAX))
    )]
    pub limit: u32,
    /// Continue after this workflow id (the `next` of a previous page).
    #[arg(long, value_name = "ID", value_parser = workflow_id)]
    pub before: Option<WorkflowId>,
}

/// `drover queues ...`
#[derive(Debug, Subcommand)]
pub enum QueuesCommand {
    /// Queues with pause state and counts.
    #[command(after_help = "Example:\n  drover queues list")]
    List,
    /// Pause a queue cluster-wide: no claims; running jobs finish.
    #[command(after_help = "Example:\n  drover queues pause mail")]
    Pause {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        name: QueueName,
    },
    /// Resume a paused queue.
    #[command(after_help = "Example:\n  drover queues resume mail")]
    Resume {
        /// Queue name.
        #[arg(value_parser = queue_name)]
        name: QueueName,
    },
}

/// `drover audit ...`
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Audit records, newest first: time, actor, source, tenant, action, target, jobs.
    #[command(
        after_help = "Examples:\n  drover audit list\n  drover audit list --action job.cancel --source api --json"
    )]
    List(AuditListArgs),
}

/// Filters of `drover audit list`.
#[derive(Debug, Args)]
pub struct AuditListArgs {
    /// Only this action (job.cancel, job.retry, job.requeue, job.delete, queue.pause,
    /// queue.resume, workflow.cancel, workflow.retry, limit.set, limit.clear, schedule.upsert,
    /// schedule.remove, jobs.prune, jobs.cancel, jobs.retry, jobs.delete).
    #[arg(long, value_parser = audit_action)]
    pub action: Option<AuditAction>,
    /// Only from this source (dashboard, api, cli, library).
    #[arg(long, value_parser = audit_source)]
    pub source: Option<AuditSource>,
    /// Only by this actor (a token fingerprint such as token:0a1b2c3d, or a user name).
    #[arg(long)]
    pub actor: Option<String>,
    /// Only this tenant's records.
    #[arg(long, value_parser = tenant_id)]
    pub tenant: Option<TenantId>,
    /// Page size (1..=1000).
    #[arg(
        long,
        default_value_t = 50,
        value_parser = integer_in::<u32>(1, i128::from(LIST_LIMIT_MAX))
    )]
    pub limit: u32,
    /// Continue below this record id (the `next` of a previous page).
    #[arg(long, value_name = "ID", value_parser = integer_in::<i64>(1, i128::from(i64::MAX)))]
    pub before: Option<i64>,
}

/// `drover workers ...`
#[derive(Debug, Subcommand)]
pub enum WorkersCommand {
    /// Registered workers: id, host, pid, queues, start, last heartbeat.
    #[command(after_help = "Example:\n  drover workers list --json")]
    List,
}

/// `drover limits ...`
#[derive(Debug, Subcommand)]
pub enum LimitsCommand {
    /// Limit policies with current usage.
    #[command(after_help = "Example:\n  drover limits list")]
    List,
    /// Create or replace a policy.
    #[command(
        after_help = "Examples:\n  drover limits set kind:email.send --max-running 5\n  drover limits set customer:42 --rate 100/1m",
        group(ArgGroup::new("policy").args(["max_running", "rate"]).required(true).multiple(true))
    )]
    Set {
        /// Key: kind:<kind>, queue:<queue>, or any key jobs name in limit_keys.
        #[arg(value_parser = limit_key)]
        key: LimitKey,
        /// Most jobs with the key running at once, cluster-wide (0..=1000000; 0 holds every
        /// job with the key queued until the policy is changed or cleared).
        #[arg(
            long,
            value_name = "N",
            value_parser = integer_in::<u32>(0, i128::from(MAX_RUNNING_MAX))
        )]
        max_running: Option<u32>,
        /// At most N claims in any window of one period: N/PERIOD (10/s, 100/1m, 5/30s,
        /// 1000/h); claims are spaced at least PERIOD/N apart (no bursts).
        #[arg(long, value_name = "N/PERIOD", value_parser = rate)]
        rate: Option<Rate>,
    },
    /// Remove a policy (held jobs become claimable).
    #[command(after_help = "Example:\n  drover limits clear kind:email.send")]
    Clear {
        /// Key.
        #[arg(value_parser = limit_key)]
        key: LimitKey,
    },
}

/// `drover schedules ...`
#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Schedules with their next tick.
    #[command(after_help = "Example:\n  drover schedules list")]
    List,
    /// Create or replace a schedule.
    ///
    /// Each tick enqueues one job, whichever worker fires it. Ticks missed by up to 10 s (a
    /// late scheduler pass, a short fault) fire one by one; after longer downtime the missed
    /// ticks collapse into one catch-up job. Adding a schedule exactly as stored changes
    /// nothing (its missed ticks still fire), so a start-up script may add it at every start;
    /// a new job (kind, args, queue, priority, attempts) keeps its ticks going; a new --cron
    /// or --timezone fires the new timing's ticks from now on, none missed before. No change
    /// makes a tick fire twice.
    #[command(
        after_help = "Example:\n  drover schedules add nightly-report --cron '0 2 * * *' --timezone Europe/Berlin --kind report.build --args '{\"scope\":\"all\"}'"
    )]
    Add {
        /// Schedule name.
        #[arg(value_parser = schedule_name)]
        name: ScheduleName,
        /// Cron expression: 5 fields (min hour day month weekday) or 6 with seconds first.
        #[arg(long)]
        cron: String,
        /// Kind of the jobs it enqueues.
        #[arg(long, value_parser = job_kind)]
        kind: JobKind,
        /// Args of each job it enqueues, as any JSON value (default {}).
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// Queue (default `default`).
        #[arg(long, value_parser = queue_name)]
        queue: Option<QueueName>,
        /// IANA time zone the expression is read in (default UTC).
        #[arg(long, default_value = "UTC")]
        timezone: String,
        /// Priority of the jobs, -32768..=32767; smaller runs first (default 0).
        #[arg(
            long,
            allow_negative_numbers = true,
            value_parser = integer_in::<i16>(i128::from(i16::MIN), i128::from(i16::MAX))
        )]
        priority: Option<i16>,
        /// Attempt budget of the jobs, 1..=1000 (default 3).
        #[arg(
            long,
            allow_negative_numbers = true,
            value_parser = integer_in::<i32>(
                i128::from(drover_core::job::MAX_ATTEMPTS_MIN),
                i128::from(drover_core::job::MAX_ATTEMPTS_MAX)
            )
        )]
        max_attempts: Option<i32>,
    },
    /// Remove a schedule.
    #[command(after_help = "Example:\n  drover schedules remove nightly-report")]
    Remove {
        /// Schedule name.
        #[arg(value_parser = schedule_name)]
        name: ScheduleName,
    },
}

/// `drover prune`
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Delete finished jobs older than this (default 7d).
    #[arg(long, value_parser = parse_duration, default_value = "7d", value_name = "DURATION")]
    pub older_than: Duration,
    /// Rows deleted per batch (one statement each), 1..=100000; batches repeat until none is
    /// left.
    #[arg(
        long,
        default_value_t = 1000,
        value_name = "N",
        value_parser = integer_in::<u32>(1, i128::from(PRUNE_BATCH_MAX))
    )]
    pub batch: u32,
}

/// `drover serve`
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// File of API tokens, one `token:tenant:role` per line (else DROVER_API_TOKENS); a token
    /// cannot contain `:`.
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// Serve without authentication (development only; every caller is an operator).
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Largest request body in bytes, 1024..=1073741824 (default 1 MiB); larger ones get 413.
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = drover_http::MAX_BODY_BYTES_DEFAULT,
        value_parser = integer_in::<usize>(MAX_BODY_BYTES_MIN as i128, MAX_BODY_BYTES_MAX as i128)
    )]
    pub max_body_bytes: usize,
    /// Also run a worker in this process, with the worker options below; without --worker
    /// they are refused (except --db-connections and --pgbouncer, which size the API's pool,
    /// and --otlp and --trace-later-attempts).
    #[arg(long)]
    pub worker: bool,
    /// Worker options (with --worker).
    #[command(flatten)]
    pub worker_args: WorkerArgs,
}

/// Output format of `drover dev`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum DevOutput {
    /// A table.
    Table,
    /// One JSON object.
    Json,
}

/// `drover dev`
#[derive(Debug, Args)]
pub struct DevArgs {
    /// JSON Lines file of jobs, `-` for standard input (default: a built-in demo set of 240
    /// jobs).
    #[arg(long, value_name = "FILE")]
    pub jobs: Option<PathBuf>,
    /// Also serve the HTTP API here (no auth unless DROVER_API_TOKENS is set) and keep running
    /// after the jobs are done, until Ctrl-C.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Give up waiting for unfinished jobs after this long.
    #[arg(long, value_parser = parse_duration, default_value = "5m", value_name = "DURATION")]
    pub max_wait: Duration,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Worker options.
    #[command(flatten)]
    pub worker_args: WorkerArgs,
}

/// Worker flags that `drover serve` uses without `--worker` too: they set up its database pool
/// and its telemetry.
const SERVE_STORE_FLAGS: [&str; 4] = [
    "db_connections",
    "pgbouncer",
    "otlp",
    "trace_later_attempts",
];

/// Worker flags that `drover dev` cannot use: it runs on the in-memory store.
const DEV_DATABASE_FLAGS: [&str; 4] = [
    "db_connections",
    "pgbouncer",
    "warn_transaction_age",
    "warn_dead_rows",
];

/// A message when the command line gives a flag its command would not use, which a user
/// would otherwise believe in effect: a worker flag of `drover serve` without `--worker`,
/// a database flag of `drover dev`, `--json` on `metrics` or `completions`, `jobs list --include`
/// without `--json`. Only flags given on the command line count; a value from
/// the environment (`DROVER_MAX_CONCURRENT`) is a setting for whatever runs there.
pub fn inapplicable(matches: &ArgMatches) -> Option<String> {
    // The worker flags of `m` given on the command line whose ids `pick` selects.
    let given = |m: &ArgMatches, pick: &dyn Fn(&str) -> bool| -> Vec<String> {
        WorkerArgs::augment_args(clap::Command::new("worker"))
            .get_arguments()
            .filter(|arg| pick(arg.get_id().as_str()))
            .filter(|arg| m.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
            .filter_map(|arg| Some(format!("--{}", arg.get_long()?)))
            .collect()
    };
    let listed = |flags: &[String]| (flags.join(", "), flags.len() == 1);
    // `--json` is global; a command whose output has one fixed format refuses it.
    let json_given = |m: &ArgMatches| m.value_source("json") == Some(ValueSource::CommandLine);
    match matches.subcommand() {
        Some((command @ ("metrics" | "completions"), m))
            if json_given(matches) || json_given(m) =>
        {
            let format = if command == "metrics" {
                "Prometheus text (the exposition format scrapers read)"
            } else {
                "a shell script"
            };
            return Some(format!(
                "--json does not apply to {command}: it prints {format}"
            ));
        }
        _ => {}
    }
    if let Some(("jobs", jobs)) = matches.subcommand() {
        if let Some(("list", list)) = jobs.subcommand() {
            let include = list.value_source("include") == Some(ValueSource::CommandLine);
            if include && !list.get_flag("json") {
                return Some(
                    "--include applies to --json output: the table shows no args, result, errors or progress (`drover jobs get ID` shows a whole job)"
                        .to_owned(),
                );
            }
        }
    }
    match matches.subcommand() {
        Some(("serve", m)) if !m.get_flag("worker") => {
            let flags = given(m, &|id| !SERVE_STORE_FLAGS.contains(&id));
            let (names, one) = listed(&flags);
            (!flags.is_empty()).then(|| {
                format!(
                    "{names} {}: add --worker to run a worker in this process (without it, serve runs only the HTTP API and would ignore {})",
                    if one { "is a worker option" } else { "are worker options" },
                    if one { "it" } else { "them" },
                )
            })
        }
        Some(("dev", m)) => {
            let flags = given(m, &|id| DEV_DATABASE_FLAGS.contains(&id));
            let (names, one) = listed(&flags);
            (!flags.is_empty()).then(|| {
                format!(
                    "{names} {} not apply to dev: it runs on the in-memory store, without a database",
                    if one { "does" } else { "do" },
                )
            })
        }
        _ => None,
    }
}

/// Parses `on` or `off` (also `true`/`false`, `1`/`0`).
///
/// # Errors
/// A message naming the accepted values.
pub fn on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        other => Err(format!("must be on or off, got {other:?}")),
    }
}

/// Parses `link` or `parent`.
///
/// # Errors
/// A message naming the accepted values.
pub fn later_attempts(s: &str) -> Result<drover_runner::telemetry::LaterAttempts, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("must be link or parent, got {:?}", s.trim()))
}

/// Parses `30s`, `10m`, `1h30m`, `7d`, `500ms` (humantime).
///
/// # Errors
/// A message naming the accepted forms.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let duration = parse_delay(s)?;
    if duration > DURATION_MAX {
        return Err(format!(
            "a duration must be at most 100 years (36500d), got {}",
            s.trim()
        ));
    }
    Ok(duration)
}

/// A duration as [`parse_duration`] reads it, without its bound: `--delay`, whose bound
/// (`drover_core::job::DELAY_MAX`, the same 36,500 days) the job's own check states in days.
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    const FORMS: &str = "use forms like 500ms, 30s, 10m, 1h30m, 7d";
    if s.trim_start().starts_with('-') {
        return Err(format!("a duration cannot be negative; {FORMS}"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{e}; {FORMS}"))
}

/// Longest duration any flag but `--delay` takes: 100 years (36,500 days). Beyond it a value is a typo, and
/// printed back it would read like `584542046090years` (found with `prune --older-than`).
pub const DURATION_MAX: Duration = Duration::from_secs(36_500 * 86_400);

/// Checks a `--log` filter with tracing's own parser (`EnvFilter` directive syntax); keeps the
/// text as given.
fn log_filter(filter: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(filter)
        .map(|_| filter.to_owned())
        .map_err(|error| format!("not a log filter ({error}); e.g. info or drover_runner=debug"))
}

/// The rule a `drover_core` error states, for clap to print after the flag it names.
fn rule(e: drover_core::Error) -> String {
    crate::usage::rule(&e)
}

/// A queue name (`--queue`, `queues pause NAME`, ...).
fn queue_name(value: &str) -> Result<QueueName, String> {
    QueueName::parse(value).map_err(rule)
}

/// A job kind.
fn job_kind(value: &str) -> Result<JobKind, String> {
    JobKind::parse(value).map_err(rule)
}

/// A tenant.
fn tenant_id(value: &str) -> Result<TenantId, String> {
    TenantId::parse(value).map_err(rule)
}

/// An audit action.
fn audit_action(value: &str) -> Result<AuditAction, String> {
    value.parse().map_err(rule)
}

/// An audit source.
fn audit_source(value: &str) -> Result<AuditSource, String> {
    value.parse().map_err(rule)
}

/// A bulk action.
fn bulk_action(value: &str) -> Result<BulkAction, String> {
    value.parse().map_err(rule)
}

/// A job state.
fn job_state(value: &str) -> Result<JobState, String> {
    value.parse().map_err(rule)
}

/// The large fields `jobs list --include` names.
fn job_details(value: &str) -> Result<JobDetails, String> {
    JobDetails::parse_list("include", value).map_err(rule)
}

/// A job id, in any common UUID form.
fn job_id(value: &str) -> Result<JobId, String> {
    value.parse().map_err(rule)
}

/// A workflow id, in any common UUID form.
fn workflow_id(value: &str) -> Result<WorkflowId, String> {
    value.parse().map_err(rule)
}

/// A limit key.
fn limit_key(value: &str) -> Result<LimitKey, String> {
    LimitKey::parse(value).map_err(rule)
}

/// A rate `N/PERIOD`.
fn rate(value: &str) -> Result<Rate, String> {
    value.parse().map_err(rule)
}

/// A schedule name.
fn schedule_name(value: &str) -> Result<ScheduleName, String> {
    ScheduleName::parse(value).map_err(rule)
}

/// Parses `NAME:QUEUE[,QUEUE...]:SLOTS[:KIND[,KIND...]]` (SLOTS 1..=10,000): the value parser
/// of `--pool`, so clap names the flag and the value in front of the message.
///
/// # Errors
/// The rule the bad part breaks.
pub fn parse_pool(spec: &str) -> Result<PoolConfig, String> {
    let parts: Vec<&str> = spec.split(':').collect();
    if !(3..=4).contains(&parts.len()) {
        return Err(
            "use NAME:QUEUE[,QUEUE...]:SLOTS[:KIND[,KIND...]], e.g. long:reports:1:report.build"
                .to_owned(),
        );
    }
    if parts[0].trim().is_empty() {
        return Err(
            "the pool NAME must not be empty (NAME:QUEUE[,QUEUE...]:SLOTS[:KIND[,KIND...]])"
                .to_owned(),
        );
    }
    let bad = |e: drover_core::Error| e.to_string();
    let queues = parts[1]
        .split(',')
        .map(|q| QueueName::parse(q).map_err(bad))
        .collect::<Result<Vec<_>, _>>()?;
    let slots: usize = parts[2]
        .parse()
        .ok()
        .filter(|slots| (1..=SLOTS_MAX).contains(slots))
        .ok_or_else(|| format!("SLOTS must be between 1 and {SLOTS_MAX}"))?;
    let mut pool = PoolConfig::new(parts[0], queues, slots);
    if let Some(kinds) = parts.get(3) {
        let kinds = kinds
            .split(',')
            .map(|k| JobKind::parse(k).map_err(bad))
            .collect::<Result<Vec<_>, _>>()?;
        pool = pool.with_kinds(kinds);
    }
    Ok(pool)
}

/// `migrate --lock-timeout`: 1 ms..=60 s (PostgreSQL reads 0 as "wait forever").
fn lock_timeout(value: &str) -> Result<Duration, String> {
    let d = parse_duration(value)?;
    let (min, max) = (
        drover_store_postgres::migrate::LOCK_TIMEOUT_MIN,
        drover_store_postgres::migrate::LOCK_TIMEOUT_MAX,
    );
    if d < min || d > max {
        return Err(format!(
            "must be between {} ms and {} s",
            min.as_millis(),
            max.as_secs()
        ));
    }
    Ok(d)
}

/// `--warn-dead-rows`: a fraction from 0 to 1.
fn dead_rows_fraction(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!(
            "must be a number from 0 to 1, e.g. 0.5 (0 turns the warning off), got {}",
            value.trim()
        )),
    }
}

/// A duration longer than zero (an interval: zero would spin).
fn positive_duration(value: &str) -> Result<Duration, String> {
    let d = parse_duration(value)?;
    if d.is_zero() {
        return Err("must be longer than zero".to_owned());
    }
    Ok(d)
}

/// A lease length within the runner's bounds (100 ms..=24 h).
fn lease_duration(value: &str) -> Result<Duration, String> {
    let d = parse_duration(value)?;
    drover_core::lease::check_lease(d).map_err(rule)?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::{CommandFactory, Parser};

    use super::*;

    /// Every whole-number flag, with a command line that reaches it and its rule.
    fn integer_flags() -> Vec<(Vec<&'static str>, &'static str, i128, i128)> {
        let max_attempts = (
            i128::from(drover_core::job::MAX_ATTEMPTS_MIN),
            i128::from(drover_core::job::MAX_ATTEMPTS_MAX),
        );
        let priority = (i128::from(i16::MIN), i128::from(i16::MAX));
        let schedule = vec![
            "schedules",
            "add",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--kind",
            "k",
        ];
        vec![
            (vec!["worker"], "--slots", 1, SLOTS_MAX as i128),
            (vec!["worker"], "--prefetch", 0, PREFETCH_MAX as i128),
            (
                vec!["worker"],
                "--prune-limit",
                1,
                i128::from(PRUNE_LIMIT_MAX),
            ),
            (
                vec!["worker"],
                "--db-connections",
                1,
                i128::from(DB_CONNECTIONS_MAX),
            ),
            (
                vec!["worker"],
                "--max-concurrent",
                1,
                MAX_CONCURRENT_MAX as i128,
            ),
            (vec!["enqueue", "k"], "--priority", priority.0, priority.1),
            (
                vec!["enqueue", "k"],
                "--max-attempts",
                max_attempts.0,
                max_attempts.1,
            ),
            (
                vec!["enqueue", "--file", "jobs.jsonl"],
                "--batch-size",
                1,
                BATCH_SIZE_MAX as i128,
            ),
            (
                vec!["jobs", "list"],
                "--limit",
                1,
                i128::from(LIST_LIMIT_MAX),
            ),
            (
                vec!["limits", "set", "kind:k"],
                "--max-running",
                0,
                i128::from(MAX_RUNNING_MAX),
            ),
            (schedule.clone(), "--priority", priority.0, priority.1),
            (schedule, "--max-attempts", max_attempts.0, max_attempts.1),
            (vec!["prune"], "--batch", 1, i128::from(PRUNE_BATCH_MAX)),
            (
                vec!["serve", "--insecure-no-auth"],
                "--max-body-bytes",
                MAX_BODY_BYTES_MIN as i128,
                MAX_BODY_BYTES_MAX as i128,
            ),
        ]
    }

    fn parse(command: &[&str], flag: &str, value: &str) -> Result<Cli, clap::Error> {
        let mut argv = vec!["drover".to_owned()];
        argv.extend(command.iter().map(|word| (*word).to_owned()));
        argv.push(format!("{flag}={value}"));
        Cli::try_parse_from(argv)
    }

    #[test]
    fn a_bad_whole_number_is_refused_with_its_flag_and_rule() {
        for (command, flag, min, max) in integer_flags() {
            let rule = format!("must be an integer between {min} and {max}");
            let below = (min - 1).to_string();
            let above = (max + 1).to_string();
            for bad in ["abc", "1e3", "2.5", "", " 5", "0x10", &below, &above] {
                let error = parse(&command, flag, bad)
                    .map(|_| ())
                    .expect_err(&format!("{flag}={bad:?} was accepted"));
                assert_eq!(
                    error.kind(),
                    ErrorKind::ValueValidation,
                    "{flag}={bad:?}: {error}"
                );
                assert_eq!(error.exit_code(), 2);
                let message = error.to_string();
                assert!(
                    message.contains(&format!("'{flag} <")),
                    "{flag}={bad:?}: {message}"
                );
                assert!(message.contains(&rule), "{flag}={bad:?}: {message}");
            }
            for good in [min, max] {
                parse(&command, flag, &good.to_string())
                    .unwrap_or_else(|e| panic!("{flag}={good} was refused: {e}"));
            }
        }
    }

    #[test]
    fn a_negative_duration_is_refused_as_negative() {
        for value in ["-5s", "-1ms", " -2m"] {
            let error = parse_duration(value).expect_err(value);
            assert!(
                error.starts_with("a duration cannot be negative"),
                "{error}"
            );
        }
        let error = parse(&["enqueue", "k"], "--delay", "-5s")
            .map(|_| ())
            .expect_err("--delay=-5s was accepted");
        assert!(error.to_string().contains("cannot be negative"), "{error}");
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn a_duration_over_100_years_is_refused_with_the_bound() {
        assert_eq!(parse_duration("36500d"), Ok(DURATION_MAX));
        for value in ["36500d 1s", "101years", "584542046090years"] {
            let error = parse_duration(value).expect_err(value);
            assert!(
                error.starts_with("a duration must be at most 100 years (36500d)"),
                "{value}: {error}"
            );
        }
        for (command, flag) in [
            (vec!["prune"], "--older-than"),
            (vec!["dev"], "--max-wait"),
            (vec!["worker"], "--shutdown-grace"),
        ] {
            let error = parse(&command, flag, "200years")
                .map(|_| ())
                .expect_err("200 years was accepted");
            let text = error.to_string();
            assert!(
                text.contains(flag) && text.contains("at most 100 years"),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_pool_specs_name_the_problem() {
        for (spec, needle) in [
            ("long", "NAME:QUEUE"),
            (":reports:1", "NAME must not be empty"),
            ("long:reports:x", "SLOTS"),
            ("long:reports:0", "SLOTS must be between 1 and 10000"),
            (
                "long:reports:10000000000",
                "SLOTS must be between 1 and 10000",
            ),
            ("long:bad queue:1", "invalid queue"),
            ("long:reports:1:bad kind", "invalid kind"),
        ] {
            let err = parse_pool(spec).unwrap_err();
            assert!(err.contains(needle), "{spec}: {err}");
            // The value parser of --pool: a usage error (exit code 2) naming the flag.
            let err = Cli::try_parse_from(["drover", "worker", "--pool", spec]).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
            let text = err.to_string();
            assert!(text.contains("--pool") && text.contains(needle), "{text}");
        }
    }

    #[test]
    fn telemetry_flags_name_their_values_and_apply_to_serve_without_a_worker() {
        let parsed = Cli::try_parse_from([
            "drover",
            "worker",
            "--otlp",
            "off",
            "--trace-later-attempts",
            "parent",
        ])
        .unwrap();
        let Command::Worker(flags) = parsed.command else {
            panic!("a worker command");
        };
        assert_eq!(flags.otlp, Some(false));
        assert_eq!(
            flags.trace_later_attempts,
            drover_runner::telemetry::LaterAttempts::Parent
        );
        for (flag, value, rule) in [
            ("--otlp", "maybe", "must be on or off"),
            ("--trace-later-attempts", "child", "must be link or parent"),
        ] {
            let err = Cli::try_parse_from(["drover", "worker", flag, value]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{flag}");
            assert!(err.to_string().contains(rule), "{flag}: {err}");
        }
        let matches = Cli::command()
            .try_get_matches_from(["drover", "serve", "--otlp", "on"])
            .unwrap();
        assert_eq!(
            inapplicable(&matches),
            None,
            "serve exports without --worker"
        );
        let parsed = Cli::try_parse_from(["drover", "enqueue", "noop", "--otlp", "on"]).unwrap();
        let Command::Enqueue(flags) = parsed.command else {
            panic!("an enqueue command");
        };
        assert_eq!(flags.otlp, Some(true), "enqueue exports its spans");
    }
}

//! `drover-test-worker`: the whole `drover` command line (built-in kinds included) plus two
//! kinds: `traced` (see [`traced`]) and `record`, whose side effect is a row in the database.
//! The reliability tests (`tests/reliability_*.rs`, RELIABILITY.md) run it as real worker processes
//! and compare the side effects with the jobs' recorded states: a side effect that started
//! after its job's final state was recorded, or a job whose side effects count other than once
//! in a healthy run, is a bug they catch.
//!
//! `record` with args `{"ms": N, "before_ms": B, "fenced": F}` (all optional: 0, 0, false):
//! 1. waits B milliseconds WITHOUT looking at its cancellation token, as a handler busy with
//!    other work would (so a test can stall the process before the side effect);
//! 2. inserts `(job_id, attempt, fencing_token, pid)` into the table `side_effects` of the
//!    worker's own database (`DROVER_DATABASE_URL`), stamped with the database clock
//!    (`clock_timestamp()`), through a pool of its own (`application_name`
//!    `drover-test-side-effects`, so tests that cut the worker's connections can tell them
//!    apart); a failed insert makes the attempt a retryable failure after 200 ms. With
//!    `fenced` the insert is the pattern RELIABILITY.md recommends: it happens only while the
//!    job is running under this run's fencing token with an unexpired lease (the job row
//!    share-locked in the same statement), else nothing is inserted and the run is discarded;
//! 3. waits N milliseconds, stopping early (outcome cancelled) when its cancellation token fires;
//! 4. succeeds with the result `{"token": <fencing token>, "pid": <process id>}`, so the stored
//!    result says which claim's run recorded it.
//!
//! The test creates the table (`reliability_support::SIDE_EFFECTS_DDL`). Environment:
//! `DROVER_TEST_SIDE_EFFECTS_ASYNC=1` turns `synchronous_commit` off for the side-effect pool
//! only (the exactly-once run, where no database crash happens and the per-job commit would
//! otherwise dominate); `DROVER_TEST_SIDE_EFFECT_CONNECTIONS` sizes that pool (default 4).

use std::process::ExitCode;
use std::time::Duration;

use drover_cli::{run_with, Extensions};
use drover_core::{JobKind, NewJob};
use drover_runner::{JobContext, Outcome, Registry};
use drover_store_postgres::sqlx::postgres::PgPoolOptions;
use drover_store_postgres::sqlx::{self, PgPool};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::OnceCell;
use tracing::Instrument;

/// Args of `record`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordArgs {
    /// Milliseconds to wait after recording the side effect.
    #[serde(default)]
    ms: u64,
    /// Milliseconds to wait before it, ignoring cancellation.
    #[serde(default)]
    before_ms: u64,
    /// Insert only while this run's fencing token and lease are current.
    #[serde(default)]
    fenced: bool,
}

/// The unfenced side effect.
const RECORD: &str = "INSERT INTO side_effects (job_id, attempt, fencing_token, pid, started_at) \
     VALUES ($1, $2, $3, $4, clock_timestamp())";

/// The fenced side effect: only while the job runs under this token with a live lease.
const RECORD_FENCED: &str = "WITH lease AS ( \
         SELECT id FROM drover.jobs \
         WHERE id = $1 AND fencing_token = $3 AND state = 'running' AND lease_expires_at > now() \
         FOR SHARE) \
     INSERT INTO side_effects (job_id, attempt, fencing_token, pid, started_at) \
     SELECT $1, $2, $3, $4, clock_timestamp() FROM lease";

/// The side-effect pool, opened on first use.
static SIDE_EFFECTS: OnceCell<Result<PgPool, String>> = OnceCell::const_new();

async fn side_effect_pool() -> Result<&'static PgPool, String> {
    SIDE_EFFECTS
        .get_or_init(|| async {
            let url = std::env::var("DROVER_DATABASE_URL")
                .map_err(|_| "DROVER_DATABASE_URL is not set".to_owned())?;
            let mut options = drover_store_postgres::connect_options(&url)
                .map_err(|e| format!("bad DROVER_DATABASE_URL: {e}"))?
                .application_name("drover-test-side-effects");
            if std::env::var_os("DROVER_TEST_SIDE_EFFECTS_ASYNC").is_some() {
                options = options.options([("synchronous_commit", "off")]);
            }
            let connections = std::env::var("DROVER_TEST_SIDE_EFFECT_CONNECTIONS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(4);
            Ok(PgPoolOptions::new()
                .max_connections(connections)
                .acquire_timeout(Duration::from_secs(2))
                .connect_lazy_with(options))
        })
        .await
        .as_ref()
        .map_err(Clone::clone)
}

async fn record(ctx: JobContext, args: RecordArgs) -> Outcome {
    let pool = match side_effect_pool().await {
        Ok(pool) => pool,
        Err(message) => return Outcome::discard(message),
    };
    if args.before_ms > 0 {
        tokio::time::sleep(Duration::from_millis(args.before_ms)).await;
    }
    let job = ctx.job();
    let token = ctx.fencing_token().0;
    let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let inserted = sqlx::query(if args.fenced { RECORD_FENCED } else { RECORD })
        .bind(job.id.as_uuid())
        .bind(job.attempt)
        .bind(token)
        .bind(pid)
        .execute(pool)
        .await;
    match inserted {
        Err(error) => {
            return Outcome::retry_after(
                format!("recording the side effect failed: {error}"),
                Duration::from_millis(200),
            );
        }
        Ok(done) if done.rows_affected() == 0 => {
            return Outcome::discard("side effect refused: this run's fencing token is stale");
        }
        Ok(_) => {}
    }
    if args.ms > 0 {
        let cancel = ctx.cancellation();
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(args.ms)) => {}
            () = cancel.cancelled() => return Outcome::cancelled("record interrupted by cancellation"),
        }
    }
    Outcome::success_with(json!({"token": token, "pid": pid}))
}

/// `traced`: logs a line, logs another inside a span of its own, and enqueues a `noop` child,
/// as handler code does (`tests/e2e_opentelemetry.rs` finds all three in its attempt's trace).
async fn traced(ctx: JobContext) -> Outcome {
    tracing::info!("traced handler says hello");
    async { tracing::info!("traced handler inside its own span") }
        .instrument(tracing::info_span!("traced step"))
        .await;
    let child = match JobKind::parse("noop") {
        Ok(kind) => NewJob::new(kind, json!({})),
        Err(error) => return Outcome::discard(error.to_string()),
    };
    match ctx.enqueue_children(vec![child]).await {
        Ok(_) => Outcome::success(),
        Err(error) => Outcome::retry(error.to_string()),
    }
}

fn main() -> ExitCode {
    let mut registry = Registry::new();
    let (Ok(record_kind), Ok(traced_kind)) = (JobKind::parse("record"), JobKind::parse("traced"))
    else {
        eprintln!("drover-test-worker: a test kind's name is not valid");
        return ExitCode::FAILURE;
    };
    registry.register_typed(record_kind, record);
    registry.register_fn(traced_kind, traced);
    run_with(
        Extensions {
            registry,
            builtin_kinds: true,
        },
        std::env::args_os(),
    )
}

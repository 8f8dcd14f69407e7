//! Support for the reliability tests (`tests/reliability_*.rs`, RELIABILITY.md): PostgreSQL servers
//! (the shared test server, or a private instance from [`private_pg`]), one database per test
//! instrumented to record side effects and every job transition, real worker processes of the
//! `drover-test-worker` binary, and [`audit`], which checks what the tests promise: no job lost,
//! none stuck, none run after its final state was recorded, no stale writer winning.
//!
//! - [`shared_server`]: the server of `DROVER_TEST_DATABASE_URL`. Without it a test skips
//!   (printing `SKIPPED ...`), unless `DROVER_REQUIRE_POSTGRES` is set, when it fails (the
//!   kit's rule, `drover_tests::postgres::skip_or_fail`).
//! - [`Db`]: a migrated database of the kit (`drover_tests::postgres`), plus the tables `side_effects` (written by the `record`
//!   kind of the test worker) and `job_transitions` (written by a trigger on `drover.jobs` for
//!   every insert and every change of state or fencing token, stamped with
//!   `clock_timestamp()`). Dropped `WITH (FORCE)` when the value is dropped, panic or not.
//! - [`WorkerProcess`]: a spawned `drover-test-worker` (usually `worker`), the kit's
//!   `drover_tests::process::Process`: stderr collected line by line, SIGKILLed on drop;
//!   signals, exit, and its resident memory from `/proc`.
//! - [`wait_until`]: polls a condition every 25 ms until a deadline (used where no event can be
//!   awaited: states in the database).

#![allow(dead_code)]

pub mod history;
pub mod netns;
pub mod private_pg;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use drover_core::{JobKind, JobStore, NewJob, QueueName, Quotas, StoreConfig};
use drover_store_postgres::sqlx::types::Uuid;
use drover_store_postgres::sqlx::{self, PgPool};
use drover_store_postgres::{PgOptions, PgStore};
pub use drover_tests::postgres::Server;
use drover_tests::postgres::{Schema, TestDatabase, URL_VAR};
pub use drover_tests::process::{wait_until, Process as WorkerProcess};
use serde_json::json;

/// Worker flags of the fault tests: a short lease, so a killed or frozen worker's jobs come back
/// within seconds, and a rescuer that looks every 500 ms.
pub const SHORT_LEASE: [&str; 6] = [
    "--lease",
    "2s",
    "--heartbeat",
    "500ms",
    "--rescue-interval",
    "500ms",
];

/// The job states after which nothing may run (docs/design.md section 3: terminal states absorb).
pub const TERMINAL: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// Skips reliability test `test` because of `why` (returning `None` after printing
/// `SKIPPED ...`), or fails when `DROVER_REQUIRE_POSTGRES` is set: the kit's rule.
pub fn skip_or_fail<T>(test: &str, why: &str) -> Option<T> {
    drover_tests::postgres::skip_or_fail(&format!("reliability test {test}"), why)
}

/// The shared server of `DROVER_TEST_DATABASE_URL`, or `None` after printing why the test
/// skips.
///
/// # Panics
/// When the variable is unset and `DROVER_REQUIRE_POSTGRES` is set.
pub fn shared_server(test: &str) -> Option<Server> {
    Server::from_env().or_else(|| skip_or_fail(test, &format!("{URL_VAR} is not set")))
}

/// The `drover-test-worker` binary cargo built for these tests.
///
/// # Panics
/// When it is missing, with the command that builds it.
pub fn test_worker_bin() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_drover-test-worker"));
    assert!(
        path.is_file(),
        "the drover-test-worker binary is missing at {}: run `cargo build -p drover-tests --bin drover-test-worker` (cargo test builds it before these tests)",
        path.display()
    );
    path
}

/// The instrumentation every test database gets: the side effects of the `record` kind, and
/// every transition of every job, recorded by a trigger in the job's own transaction.
pub const INSTRUMENTATION_DDL: &str = r#"
CREATE TABLE public.side_effects (
    id            bigserial   PRIMARY KEY,
    job_id        uuid        NOT NULL,
    attempt       integer     NOT NULL,
    fencing_token bigint      NOT NULL,
    pid           integer     NOT NULL,
    started_at    timestamptz NOT NULL
);
CREATE INDEX side_effects_job_idx ON public.side_effects (job_id);
CREATE TABLE public.job_transitions (
    id            bigserial   PRIMARY KEY,
    job_id        uuid        NOT NULL,
    from_state    text,
    to_state      text        NOT NULL,
    fencing_token bigint      NOT NULL,
    attempt       integer     NOT NULL,
    lease_owner   text,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX job_transitions_job_idx ON public.job_transitions (job_id, id);
CREATE FUNCTION public.record_job_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO public.job_transitions (job_id, from_state, to_state, fencing_token, attempt, lease_owner)
        VALUES (NEW.id, NULL, NEW.state, NEW.fencing_token, NEW.attempt, NEW.lease_owner);
    ELSIF NEW.state IS DISTINCT FROM OLD.state OR NEW.fencing_token IS DISTINCT FROM OLD.fencing_token THEN
        INSERT INTO public.job_transitions (job_id, from_state, to_state, fencing_token, attempt, lease_owner)
        VALUES (NEW.id, OLD.state, NEW.state, NEW.fencing_token, NEW.attempt, NEW.lease_owner);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER record_job_transition AFTER INSERT OR UPDATE ON drover.jobs
    FOR EACH ROW EXECUTE FUNCTION public.record_job_transition();
"#;

/// What a test database holds besides the migrated Drover schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instrument {
    /// `side_effects` and the `job_transitions` trigger.
    Full,
    /// [`Instrument::Full`] plus the `job_history` trigger of [`history`]: the store's side
    /// of a history for the simulator's checker.
    History,
    /// `side_effects` only (the exactly-once run: 100,000 jobs without the trigger's writes).
    SideEffectsOnly,
    /// Nothing: a migrated database.
    None,
}

/// A migrated, instrumented database of one test; dropped `WITH (FORCE)` on drop.
pub struct Db {
    /// The test's name, for messages.
    pub test: String,
    /// The database's name.
    pub name: String,
    /// Its URL, handed to workers as `DROVER_DATABASE_URL`.
    pub url: String,
    pool: PgPool,
    /// Declared last: dropped after the pool, taking the database with it.
    database: TestDatabase,
}

impl Db {
    /// Creates the database on `server` (a copy of the kit's migrated template) and installs
    /// `instrument`.
    pub async fn create(server: &Server, test: &str, instrument: Instrument) -> Db {
        let database = server.database(Schema::Migrated).await;
        let db = Db {
            test: test.to_owned(),
            name: database.name.clone(),
            url: database.url.clone(),
            pool: database.pool(3).await,
            database,
        };
        let ddl = match instrument {
            Instrument::Full => INSTRUMENTATION_DDL.to_owned(),
            Instrument::History => format!("{INSTRUMENTATION_DDL}{}", history::HISTORY_DDL),
            Instrument::SideEffectsOnly => INSTRUMENTATION_DDL
                .split("CREATE TABLE public.job_transitions")
                .next()
                .unwrap_or_default()
                .to_owned(),
            Instrument::None => String::new(),
        };
        if !ddl.is_empty() {
            sqlx::raw_sql(&ddl)
                .execute(&db.pool)
                .await
                .expect("install the test instrumentation");
        }
        db
    }

    /// A pool on the database, for checks by SQL.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A store on the database without quotas (the producer of the tests).
    pub async fn store(&self) -> PgStore {
        self.store_with(StoreConfig {
            quotas: Quotas::unbounded(),
            ..StoreConfig::default()
        })
        .await
    }

    /// A store on the database with `config`.
    pub async fn store_with(&self, config: StoreConfig) -> PgStore {
        PgStore::connect(
            &self.url,
            PgOptions {
                max_connections: 4,
                acquire_timeout: Duration::from_secs(30),
                config,
                ..PgOptions::default()
            },
        )
        .await
        .expect("connect a store to the test database")
    }

    /// Enqueues `count` jobs of kind `record` with args `{"ms": ms}` and `max_attempts`, in
    /// batches of 5,000; returns their ids in order.
    pub async fn enqueue_records(&self, count: usize, ms: u64, max_attempts: i32) -> Vec<Uuid> {
        self.enqueue_record_args(count, json!({"ms": ms}), max_attempts)
            .await
    }

    /// Enqueues `count` jobs of kind `record` with `args` and `max_attempts`, in batches of
    /// 5,000; returns their ids in order.
    pub async fn enqueue_record_args(
        &self,
        count: usize,
        args: serde_json::Value,
        max_attempts: i32,
    ) -> Vec<Uuid> {
        let store = self.store().await;
        let kind = JobKind::parse("record").expect("valid kind");
        let mut ids = Vec::with_capacity(count);
        let mut left = count;
        while left > 0 {
            let n = left.min(5_000);
            let batch: Vec<NewJob> = (0..n)
                .map(|_| {
                    NewJob::new(kind.clone(), args.clone())
                        .with_queue(QueueName::default_queue())
                        .with_max_attempts(max_attempts)
                })
                .collect();
            let answers = store
                .jobs_enqueue(batch)
                .await
                .expect("enqueue record jobs");
            ids.extend(answers.into_iter().map(|a| a.job.id.as_uuid()));
            left -= n;
        }
        store.close().await;
        ids
    }

    /// Jobs per state.
    pub async fn states(&self) -> BTreeMap<String, i64> {
        sqlx::query_as::<_, (String, i64)>(
            "SELECT state, count(*) FROM drover.jobs GROUP BY state ORDER BY state",
        )
        .fetch_all(&self.pool)
        .await
        .expect("count jobs per state")
        .into_iter()
        .collect()
    }

    /// Jobs in `state`.
    pub async fn count(&self, state: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE state = $1")
            .bind(state)
            .fetch_one(&self.pool)
            .await
            .expect("count jobs")
    }

    /// Jobs not in a terminal state.
    pub async fn live(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM drover.jobs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')",
        )
        .fetch_one(&self.pool)
        .await
        .expect("count live jobs")
    }

    /// Waits until no job is queued, running or reconciling.
    pub async fn wait_all_terminal(&self, timeout: Duration) {
        let what = format!("every job of {} to reach a terminal state", self.test);
        wait_until(&what, timeout, || async {
            (self.live().await == 0).then_some(())
        })
        .await;
    }

    /// Jobs running under `owner`.
    pub async fn running_under(&self, owner: &str) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM drover.jobs WHERE state = 'running' AND lease_owner = $1",
        )
        .bind(owner)
        .fetch_one(&self.pool)
        .await
        .expect("count running jobs")
    }

    /// Side effects recorded by process `pid`.
    pub async fn side_effects_of(&self, pid: u32) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM side_effects WHERE pid = $1")
            .bind(pid as i32)
            .fetch_one(&self.pool)
            .await
            .expect("count side effects")
    }

    /// Terminates every connection of the Drover store's pools on this database (the
    /// `application_name` `drover`, which every worker's store uses); returns how many.
    pub async fn terminate_worker_connections(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND application_name = 'drover' AND pid <> pg_backend_pid()) t",
        )
        .bind(&self.name)
        .fetch_one(&self.pool)
        .await
        .expect("terminate the workers' connections")
    }

    /// A `drover-test-worker` command on this database.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(test_worker_bin());
        command
            .args(args)
            .env("DROVER_DATABASE_URL", &self.url)
            .env_remove("RUST_LOG")
            // Workers enqueue only for cron schedules; quotas there would hold ticks back
            // while the tests keep thousands of jobs pending.
            .env("DROVER_MAX_PENDING", "0")
            .env("DROVER_MAX_TENANT_PENDING", "0")
            .env_remove("DROVER_MAX_CONCURRENT")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Spawns `drover-test-worker worker SHORT_LEASE EXTRA...`.
    pub fn spawn_worker(&self, extra: &[&str]) -> WorkerProcess {
        let mut args = vec!["worker"];
        args.extend_from_slice(&SHORT_LEASE);
        args.extend_from_slice(extra);
        WorkerProcess::spawn(self.command(&args), &args)
    }

    /// Spawns `drover-test-worker worker EXTRA...` (default lease) with extra environment.
    pub fn spawn_worker_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> WorkerProcess {
        let mut args = vec!["worker"];
        args.extend_from_slice(extra);
        let mut command = self.command(&args);
        for (name, value) in env {
            command.env(name, value);
        }
        WorkerProcess::spawn(command, &args)
    }

    /// Spawns `drover-test-worker ARGS` as given.
    pub fn spawn(&self, args: &[&str]) -> WorkerProcess {
        WorkerProcess::spawn(self.command(args), args)
    }
}

/// What [`audit`] found.
#[derive(Debug, Default)]
pub struct Audit {
    /// Jobs per state.
    pub states: BTreeMap<String, i64>,
    /// Side effects recorded.
    pub side_effects: i64,
    /// Jobs that ran more than once (allowed after faults: at-least-once).
    pub jobs_run_more_than_once: i64,
    /// Broken promises, each a sentence with examples; empty when all held.
    pub violations: Vec<String>,
}

impl Audit {
    /// Panics with every violation, and the counts, when any promise was broken.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "reliability violations:\n- {}\nstates {:?}, side effects {}",
            self.violations.join("\n- "),
            self.states,
            self.side_effects
        );
    }

    /// Jobs in `state`.
    pub fn count(&self, state: &str) -> i64 {
        self.states.get(state).copied().unwrap_or(0)
    }
}

/// One check: `sql` selects rows that break a promise (as text); none may exist. `$1`, where
/// used, is the enqueued ids.
async fn check(pool: &PgPool, audit: &mut Audit, promise: &str, sql: &str, ids: &[Uuid]) {
    let mut query = sqlx::query_scalar(sql);
    if sql.contains("$1") {
        query = query.bind(ids);
    }
    let rows: Vec<String> = query
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("audit query for {promise:?} failed: {e}\n{sql}"));
    if !rows.is_empty() {
        audit.violations.push(format!(
            "{promise}: {} case(s), e.g. {}",
            rows.len(),
            rows.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
        ));
    }
}

/// Checks the promises of RELIABILITY.md against the database of a test that enqueued `ids`:
///
/// - none lost: every id is a stored job, and no other job exists;
/// - no job ran after its final state was recorded: no side effect started after the job's
///   first transition into a terminal state, and no job left a terminal state;
/// - every run belongs to a claim: each side effect's fencing token is one the store issued
///   to a claim of that job, never above the job's current token;
/// - fencing tokens strictly increase with every claim;
/// - no stale writer won: a succeeded `record` job's result names the fencing token of its
///   latest claim, and that claim's run left its side effect;
/// - attempts never exceed `max_attempts`.
///
/// Whether jobs may still be queued or running is the caller's to assert (from `states`).
/// With [`Instrument::SideEffectsOnly`] the transition checks are skipped.
pub async fn audit(db: &Db, ids: &[Uuid]) -> Audit {
    let pool = db.pool();
    let mut audit = Audit {
        states: db.states().await,
        ..Audit::default()
    };
    audit.side_effects = sqlx::query_scalar("SELECT count(*) FROM side_effects")
        .fetch_one(pool)
        .await
        .expect("count side effects");
    audit.jobs_run_more_than_once = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT job_id FROM side_effects GROUP BY job_id HAVING count(*) > 1) t",
    )
    .fetch_one(pool)
    .await
    .expect("count repeated runs");
    let transitions: bool =
        sqlx::query_scalar("SELECT to_regclass('public.job_transitions') IS NOT NULL")
            .fetch_one(pool)
            .await
            .expect("look for the transition table");

    check(
        pool,
        &mut audit,
        "enqueued job lost",
        "SELECT e.id::text FROM unnest($1::uuid[]) AS e(id) \
         WHERE NOT EXISTS (SELECT 1 FROM drover.jobs j WHERE j.id = e.id)",
        ids,
    )
    .await;
    check(
        pool,
        &mut audit,
        "job that nobody enqueued",
        "SELECT j.id::text FROM drover.jobs j WHERE NOT (j.id = ANY($1::uuid[]))",
        ids,
    )
    .await;
    check(
        pool,
        &mut audit,
        "attempts above max_attempts",
        "SELECT id::text || ' attempt ' || attempt || ' of ' || max_attempts FROM drover.jobs \
         WHERE attempt > max_attempts",
        ids,
    )
    .await;
    check(
        pool,
        &mut audit,
        "side effect of a run under a fencing token above the job's current one",
        "SELECT s.job_id::text || ' token ' || s.fencing_token || ' > ' || j.fencing_token \
         FROM side_effects s JOIN drover.jobs j ON j.id = s.job_id \
         WHERE s.fencing_token > j.fencing_token",
        ids,
    )
    .await;
    check(
        pool,
        &mut audit,
        "succeeded job whose result was written by a stale claim (no stale writer may win)",
        "SELECT id::text || ' result token ' || coalesce(result->>'token', 'none') || ', job token ' || fencing_token \
         FROM drover.jobs WHERE kind = 'record' AND state = 'succeeded' \
         AND (result->>'token') IS DISTINCT FROM fencing_token::text",
        ids,
    )
    .await;
    check(
        pool,
        &mut audit,
        "succeeded job without a side effect of its latest claim",
        "SELECT j.id::text || ' token ' || j.fencing_token FROM drover.jobs j \
         WHERE j.kind = 'record' AND j.state = 'succeeded' AND NOT EXISTS \
         (SELECT 1 FROM side_effects s WHERE s.job_id = j.id AND s.fencing_token = j.fencing_token) \
        ",
        ids,
    )
    .await;
    if transitions {
        check(
            pool,
            &mut audit,
            "job ran after its final state was recorded",
            "WITH final AS (SELECT job_id, min(at) AS at FROM job_transitions \
                 WHERE to_state IN ('succeeded', 'failed', 'cancelled') GROUP BY job_id) \
             SELECT s.job_id::text || ' run with token ' || s.fencing_token || ' (pid ' || s.pid || ') started at ' \
                 || s.started_at || ', final state recorded at ' || f.at \
             FROM side_effects s JOIN final f ON f.job_id = s.job_id \
             WHERE s.started_at > f.at",
            ids,
        )
        .await;
        check(
            pool,
            &mut audit,
            "job left a terminal state",
            "SELECT job_id::text || ' ' || from_state || ' -> ' || to_state || ' at ' || at FROM job_transitions \
             WHERE from_state IN ('succeeded', 'failed', 'cancelled')",
            ids,
        )
        .await;
        check(
            pool,
            &mut audit,
            "claim whose fencing token did not increase",
            "SELECT job_id::text || ' token ' || fencing_token || ' after ' || previous FROM ( \
                 SELECT job_id, to_state, fencing_token, \
                     max(fencing_token) OVER (PARTITION BY job_id ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous \
                 FROM job_transitions) t \
             WHERE to_state = 'running' AND fencing_token <= coalesce(previous, 0) \
            ",
            ids,
        )
        .await;
        check(
            pool,
            &mut audit,
            "side effect of a run that no claim issued",
            "SELECT s.job_id::text || ' token ' || s.fencing_token FROM side_effects s \
             WHERE NOT EXISTS (SELECT 1 FROM job_transitions t WHERE t.job_id = s.job_id \
                 AND t.to_state = 'running' AND t.fencing_token = s.fencing_token) \
            ",
            ids,
        )
        .await;
    }
    audit
}

/// The number after `name ` in a worker's `worker stopped: ...` line.
pub fn counter(stopped: &str, name: &str) -> u64 {
    let pattern = format!("{name} ");
    let at = stopped
        .find(&pattern)
        .unwrap_or_else(|| panic!("no {name} in {stopped}"));
    stopped[at + pattern.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {name} in {stopped}"))
}

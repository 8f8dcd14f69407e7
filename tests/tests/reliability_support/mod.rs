//! Support for the reliability tests of issue #8 (`tests/reliability_*.rs`): PostgreSQL servers
//! (the shared test server, or a private instance from [`private_pg`]), one database per test
//! instrumented to record side effects and every job transition, real worker processes of the
//! `drover-test-worker` binary, and [`audit`], which checks what the tests promise: no job lost,
//! none stuck, none run after its final state was recorded, no stale writer winning.
//!
//! - [`Server::shared`]: the server of `DROVER_TEST_DATABASE_URL`. Without it a test skips
//!   (printing `SKIPPED ...`), unless `DROVER_REQUIRE_POSTGRES` is set, when it fails.
//! - [`Db`]: `CREATE DATABASE drover_r_<uuid v7 simple>`, migrated with
//!   `drover_store_postgres::migrate`, plus the tables `side_effects` (written by the `record`
//!   kind of the test worker) and `job_transitions` (written by a trigger on `drover.jobs` for
//!   every insert and every change of state or fencing token, stamped with
//!   `clock_timestamp()`). Dropped `WITH (FORCE)` when the value is dropped, panic or not.
//! - [`WorkerProcess`]: a spawned `drover-test-worker` (usually `worker`), stderr collected line
//!   by line, SIGKILLed on drop; signals, exit, and its resident memory from `/proc`.
//! - [`wait_until`]: polls a condition every 25 ms until a deadline (used where no event can be
//!   awaited: states in the database).

#![allow(dead_code)]

pub mod private_pg;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_core::{JobKind, JobStore, NewJob, QueueName, Quotas, StoreConfig};
use drover_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use drover_store_postgres::sqlx::types::Uuid;
use drover_store_postgres::sqlx::{self, Connection, PgPool};
use drover_store_postgres::{PgOptions, PgStore};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

/// Environment variable naming the shared PostgreSQL server the tests may use.
pub const URL_VAR: &str = "DROVER_TEST_DATABASE_URL";
/// Set (by CI) to make a test that would skip fail instead.
pub const REQUIRE_VAR: &str = "DROVER_REQUIRE_POSTGRES";
/// Prefix of the databases these tests create.
const DB_PREFIX: &str = "drover_r_";
/// How often [`wait_until`] checks its condition.
const POLL: Duration = Duration::from_millis(25);

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

/// The job states after which nothing may run (DESIGN.md section 3: terminal states absorb).
pub const TERMINAL: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// Skips (returning `None` after printing why) or fails, by the rule of
/// `drover_tests::run_case`: fail when `DROVER_REQUIRE_POSTGRES` is set.
pub fn skip_or_fail<T>(test: &str, why: &str) -> Option<T> {
    if std::env::var_os(REQUIRE_VAR).is_some() {
        panic!("reliability test {test} cannot run: {why}, and {REQUIRE_VAR} forbids skipping");
    }
    eprintln!("SKIPPED reliability test {test}: {why}");
    None
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

/// Polls `check` every 25 ms until it answers `Some`, and returns that.
///
/// # Panics
/// When `timeout` passes first, naming `what`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// A PostgreSQL server the tests create databases on.
#[derive(Clone)]
pub struct Server {
    /// Connect options of an administrative database on it.
    pub admin: PgConnectOptions,
    /// `postgres://user@host:port` (plus password and query, if any) without a database.
    url_base: String,
    url_query: String,
}

impl Server {
    /// The shared server of `DROVER_TEST_DATABASE_URL`, or `None` after printing why the test
    /// skips.
    ///
    /// # Panics
    /// When the variable is unset and `DROVER_REQUIRE_POSTGRES` is set.
    pub fn shared(test: &str) -> Option<Server> {
        let Some(url) = std::env::var(URL_VAR).ok().filter(|u| !u.is_empty()) else {
            return skip_or_fail(test, &format!("{URL_VAR} is not set"));
        };
        Some(Server::from_url(&url))
    }

    /// A server from the URL of any database on it.
    pub fn from_url(url: &str) -> Server {
        let admin = PgConnectOptions::from_str(url)
            .unwrap_or_else(|e| panic!("the test database URL does not parse: {e}"));
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (url, String::new()),
        };
        let authority = base.find("://").map_or(0, |i| i + 3);
        let path = base[authority..]
            .find('/')
            .map_or(base.len(), |i| i + authority);
        Server {
            admin,
            url_base: base[..path].to_owned(),
            url_query: query,
        }
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}{}", self.url_base, self.url_query)
    }
}

/// One statement on a fresh admin connection, retrying "database is being accessed by other
/// users" (a concurrent `CREATE DATABASE` from the same template) a few times.
async fn admin_exec(admin: &PgConnectOptions, statement: &str) -> Result<(), sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect_with(admin).await?;
    let mut tries = 0;
    let result = loop {
        match sqlx::query(statement).execute(&mut conn).await {
            Ok(_) => break Ok(()),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55006") && tries < 20 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50 * tries)).await;
            }
            Err(e) => break Err(e),
        }
    };
    let _ = conn.close().await;
    result
}

/// Drops databases of killed runs (their uuid v7 name carries their creation time), once per
/// test process.
async fn sweep_leftovers(admin: &PgConnectOptions) {
    static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    SWEPT
        .get_or_init(|| async {
            let Ok(mut conn) = sqlx::PgConnection::connect_with(admin).await else {
                return;
            };
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT datname FROM pg_database WHERE datname LIKE 'drover\\_r\\_%'",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
            for name in names {
                if drover_tests::leftovers::is_leftover(&name, DB_PREFIX) {
                    let _ =
                        sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                            .execute(&mut conn)
                            .await;
                }
            }
            let _ = conn.close().await;
        })
        .await;
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
    admin: PgConnectOptions,
    pool: PgPool,
}

impl Db {
    /// Creates the database on `server`, migrates it and installs `instrument`.
    pub async fn create(server: &Server, test: &str, instrument: Instrument) -> Db {
        sweep_leftovers(&server.admin).await;
        let name = format!("{DB_PREFIX}{}", uuid::Uuid::now_v7().simple());
        admin_exec(&server.admin, &format!("CREATE DATABASE \"{name}\""))
            .await
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        let url = server.url(&name);
        let pool = PgPoolOptions::new()
            .max_connections(3)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(server.admin.clone().database(&name))
            .await
            .expect("connect to the test database");
        let db = Db {
            test: test.to_owned(),
            name,
            url,
            admin: server.admin.clone(),
            pool,
        };
        drover_store_postgres::migrate(&db.pool)
            .await
            .expect("migrate the test database");
        let ddl = match instrument {
            Instrument::Full => INSTRUMENTATION_DDL.to_owned(),
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

impl Drop for Db {
    fn drop(&mut self) {
        let pool = self.pool.clone();
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Drop runs in async tests and while unwinding: drop the database on a thread of its
        // own with a small runtime, and wait for it. A private server may already be gone.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the test database");
            runtime.block_on(async move {
                pool.close().await;
                let statement = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                let _ =
                    tokio::time::timeout(Duration::from_secs(30), admin_exec(&admin, &statement))
                        .await;
            });
        })
        .join();
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

/// Checks the promises of issue #8 against the database of a test that enqueued `ids`:
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

/// Collected stderr lines of a process, and a wake-up for each new one.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    closed: Mutex<bool>,
    changed: Notify,
}

/// A spawned `drover-test-worker`; SIGKILLed when dropped.
pub struct WorkerProcess {
    child: tokio::process::Child,
    /// Its process id.
    pub pid: u32,
    what: String,
    stderr: Arc<Lines>,
}

impl WorkerProcess {
    fn spawn(mut command: tokio::process::Command, args: &[&str]) -> WorkerProcess {
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn drover-test-worker");
        let pid = child.id().expect("a running child has a pid");
        let lines = Arc::new(Lines::default());
        let stderr = child.stderr.take().expect("piped stderr");
        let collected = Arc::clone(&lines);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                collected.lines.lock().unwrap().push(line);
                collected.changed.notify_waiters();
            }
            *collected.closed.lock().unwrap() = true;
            collected.changed.notify_waiters();
        });
        WorkerProcess {
            child,
            pid,
            what: format!("drover-test-worker {}", args.join(" ")),
            stderr: lines,
        }
    }

    /// Everything it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lines.lock().unwrap().join("\n")
    }

    /// How many stderr lines so far contain `needle`.
    pub fn count_lines(&self, needle: &str) -> usize {
        self.stderr
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// The stderr lines so far that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.stderr
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }

    /// Waits for a stderr line containing `needle` and returns it.
    ///
    /// # Panics
    /// When stderr closes or `timeout` passes first.
    pub async fn wait_for_line(&self, needle: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.stderr.changed.notified();
            if let Some(line) = self
                .stderr
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return line.clone();
            }
            assert!(
                !*self.stderr.closed.lock().unwrap(),
                "{} ended without printing {needle:?}; stderr:\n{}",
                self.what,
                self.stderr()
            );
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!(
                    "{} did not print {needle:?} within {timeout:?}; stderr:\n{}",
                    self.what,
                    self.stderr()
                );
            }
        }
    }

    /// Waits for the worker's `drover: worker ID started ...` line and returns the id.
    pub async fn worker_started(&self) -> String {
        let line = self
            .wait_for_line(" started on ", Duration::from_secs(60))
            .await;
        line.strip_prefix("drover: worker ")
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("unexpected start line: {line}"))
            .to_owned()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid as i32).expect("a positive pid");
        rustix::process::kill_process(pid, signal).expect("send a signal");
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its resident memory in KiB (`VmRSS` of `/proc/<pid>/status`), `None` once it exited.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// Waits for the process to exit, then for its stderr to be read to the end.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} did not exit within {timeout:?}; stderr:\n{}",
                    self.what,
                    self.stderr()
                )
            })
            .expect("wait for drover-test-worker");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let changed = self.stderr.changed.notified();
            if *self.stderr.closed.lock().unwrap() {
                break;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
        status
    }

    /// SIGTERM, then waits for a clean exit (code 0) and returns the `worker stopped:` line.
    ///
    /// # Panics
    /// When it does not exit cleanly within `timeout`.
    pub async fn stop(&mut self, timeout: Duration) -> String {
        self.signal(rustix::process::Signal::TERM);
        let status = self.wait_exit(timeout).await;
        assert!(
            status.success(),
            "{} did not stop cleanly on SIGTERM: {status}; stderr:\n{}",
            self.what,
            self.stderr()
        );
        self.wait_for_line("drover: worker stopped: ", timeout)
            .await
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        // A stopped (SIGSTOP) process must be continued to die of SIGKILL promptly; SIGKILL
        // works on stopped processes, but continue it anyway so nothing lingers.
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
        }
        let _ = self.child.start_kill();
    }
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

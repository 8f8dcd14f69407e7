//! Support for the tests that run the real `drover` binary (issue #5): where the binary is, a
//! database of its own per test, running commands and worker processes, signals, and waiting
//! for observable events with a deadline.
//!
//! - [`drover_bin`]: `target/<profile>/drover`, found beside this test executable's `deps/`
//!   folder. `cargo test --workspace` builds it (the cli crate's own integration tests make
//!   cargo build its binary); a clear panic says how to build it when it is missing.
//! - [`TestDb`]: `CREATE DATABASE drover_e_<uuid v7 simple>` on the server of
//!   `DROVER_TEST_DATABASE_URL`, dropped `WITH (FORCE)` when the value is dropped (also when the
//!   test panics), so tests run in parallel. Without the variable a test skips (printing
//!   `SKIPPED ...`), unless `DROVER_REQUIRE_POSTGRES` is set, when it fails: the same rule as
//!   `drover_tests::run_case`. Databases of killed runs are swept when older than an hour.
//! - [`Process`]: a spawned `drover` (usually `worker`) whose stderr is collected line by line;
//!   it is SIGKILLed when dropped, so no child outlives its test.
//! - [`wait_until`]: polls a condition every 25 ms until a deadline; used only where no event
//!   can be awaited (the database state of a job).

#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use drover_store_postgres::sqlx::{self, Connection, PgPool};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

/// Environment variable naming the PostgreSQL server (any database on it) the tests may use.
pub const URL_VAR: &str = "DROVER_TEST_DATABASE_URL";
/// Prefix of the databases these tests create.
const DB_PREFIX: &str = "drover_e_";
/// How often [`wait_until`] checks its condition.
const POLL: Duration = Duration::from_millis(25);
/// Deadline of a one-shot command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The `drover` binary built by this cargo invocation (`target/<profile>/drover`).
///
/// # Panics
/// When it is missing, with the command that builds it.
pub fn drover_bin() -> PathBuf {
    built_binary("drover", "cargo build -p drover-cli")
}

/// A binary of this workspace in the profile folder that holds this test executable.
fn built_binary(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/<name>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps");
    let path = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the {name} binary is missing at {}: run `{build}` (or `cargo test --workspace`, which builds it) first",
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

/// A file in the temporary folder, removed on drop.
pub struct TempFile {
    /// Its path.
    pub path: PathBuf,
}

impl TempFile {
    /// Writes `contents` to a new file named after `name`.
    pub fn new(name: &str, contents: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!(
            "drover-e2e-{}-{name}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::write(&path, contents).expect("write a temporary file");
        TempFile { path }
    }

    /// The path as text, for a command line.
    pub fn arg(&self) -> &str {
        self.path.to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The server of `DROVER_TEST_DATABASE_URL`, or `None` after printing why the test skips.
///
/// # Panics
/// When the variable is unset and `DROVER_REQUIRE_POSTGRES` is set (CI must not skip).
fn server(test: &str) -> Option<PgConnectOptions> {
    let Ok(url) = std::env::var(URL_VAR) else {
        if std::env::var_os("DROVER_REQUIRE_POSTGRES").is_some() {
            panic!(
                "postgres test {test} cannot run: {URL_VAR} is not set and DROVER_REQUIRE_POSTGRES forbids skipping"
            );
        }
        eprintln!("SKIPPED postgres test {test}: set {URL_VAR} to run it");
        return None;
    };
    Some(PgConnectOptions::from_str(&url).unwrap_or_else(|e| panic!("{URL_VAR} is not a URL: {e}")))
}

/// One statement on a fresh admin connection, retrying "database is being accessed by other
/// users" (a concurrent `CREATE DATABASE` from the same template) a few times.
async fn admin_exec(admin: &PgConnectOptions, statement: &str) {
    let mut conn = sqlx::PgConnection::connect_with(admin)
        .await
        .expect("connect to the test server");
    let mut tries = 0;
    loop {
        match sqlx::query(statement).execute(&mut conn).await {
            Ok(_) => break,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55006") && tries < 20 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50 * tries)).await;
            }
            Err(e) => panic!("{statement}: {e}"),
        }
    }
    let _ = conn.close().await;
}

/// Drops databases of killed runs (their uuid v7 name carries their creation time).
async fn sweep_leftovers(admin: &PgConnectOptions) {
    static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    SWEPT
        .get_or_init(|| async {
            let Ok(mut conn) = sqlx::PgConnection::connect_with(admin).await else {
                return;
            };
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT datname FROM pg_database WHERE datname LIKE 'drover\\_e\\_%'",
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

/// A database of one test, dropped `WITH (FORCE)` on drop.
pub struct TestDb {
    /// The test's name, for messages.
    pub test: String,
    /// The database's name.
    pub name: String,
    /// Its URL, handed to `drover` as `DROVER_DATABASE_URL`.
    pub url: String,
    admin: PgConnectOptions,
    pool: PgPool,
}

impl TestDb {
    /// A new empty database (no Drover schema), or `None` when the test skips.
    pub async fn empty(test: &str) -> Option<TestDb> {
        let admin = server(test)?;
        sweep_leftovers(&admin).await;
        let name = format!("{DB_PREFIX}{}", uuid::Uuid::now_v7().simple());
        admin_exec(&admin, &format!("CREATE DATABASE \"{name}\"")).await;
        let options = admin.clone().database(&name);
        let url = with_database(&std::env::var(URL_VAR).unwrap_or_default(), &name);
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .expect("connect to the test database");
        Some(TestDb {
            test: test.to_owned(),
            name,
            url,
            admin,
            pool,
        })
    }

    /// A new database migrated by `drover migrate`, or `None` when the test skips.
    pub async fn migrated(test: &str) -> Option<TestDb> {
        let db = TestDb::empty(test).await?;
        db.ok(&["migrate"]).await;
        Some(db)
    }

    /// A pool on the test database, for checks by SQL.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A `drover` command with `DROVER_DATABASE_URL` set to this database.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(drover_bin());
        command
            .args(args)
            .env("DROVER_DATABASE_URL", &self.url)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Runs `drover ARGS` to its end.
    pub async fn run(&self, args: &[&str]) -> Output {
        let mut command = self.command(args);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        tokio::time::timeout(COMMAND_TIMEOUT, command.output())
            .await
            .unwrap_or_else(|_| panic!("drover {args:?} did not finish within {COMMAND_TIMEOUT:?}"))
            .expect("run drover")
    }

    /// Runs `drover ARGS`, asserts it succeeded without a panic, returns its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "drover {args:?} failed ({}): {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "drover {args:?}: {stderr}");
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    /// Runs `drover --json ARGS` and parses its stdout as one JSON document.
    pub async fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all).await;
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("drover {all:?} printed no JSON document ({e}): {text}"))
    }

    /// Runs `drover ARGS` expecting failure; returns its stderr, checked to be one line.
    pub async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert_eq!(
            out.status.code(),
            Some(1),
            "drover {args:?} should fail with exit code 1; stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        one_line_error(&out.stderr)
    }

    /// Runs `drover ARGS` expecting a usage error: exit code 2 (as clap's own), nothing on
    /// stdout, no panic, and nothing done (it is found before connecting). Returns stderr.
    pub async fn usage_error(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(2),
            "drover {args:?} should be a usage error (exit code 2): {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "drover {args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(!stderr.contains("panicked"), "drover {args:?}: {stderr}");
        stderr
    }

    /// Spawns a long-running `drover ARGS` (a worker).
    pub fn spawn(&self, args: &[&str]) -> Process {
        Process::spawn(self.command(args), args)
    }

    /// Enqueues one job with `drover enqueue --json KIND --args ARGS EXTRA...`; returns its id.
    pub async fn enqueue(&self, kind: &str, args: &str, extra: &[&str]) -> String {
        let mut all = vec!["enqueue", kind, "--args", args];
        all.extend_from_slice(extra);
        let answer = self.json(&all).await;
        assert_eq!(answer["status"], "created", "{answer}");
        answer["job"]["id"].as_str().expect("job id").to_owned()
    }

    /// State, attempt and lease owner of a job, read by SQL.
    pub async fn job_row(&self, id: &str) -> JobRow {
        let (state, attempt, lease_owner): (String, i32, Option<String>) = sqlx::query_as(
            "SELECT state, attempt, lease_owner FROM drover.jobs WHERE id = $1::uuid",
        )
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .unwrap_or_else(|e| panic!("read job {id}: {e}"));
        JobRow {
            state,
            attempt,
            lease_owner,
        }
    }

    /// Waits until every job of `ids` is in `state` (and, with an owner, leased by it).
    pub async fn wait_jobs<S: AsRef<str> + std::fmt::Debug>(
        &self,
        ids: &[S],
        state: &str,
        owner: Option<&str>,
        timeout: Duration,
    ) {
        let what = format!("jobs {ids:?} to be {state} (owner {owner:?})");
        wait_until(&what, timeout, || async {
            for id in ids {
                let row = self.job_row(id.as_ref()).await;
                if row.state != state || (owner.is_some() && row.lease_owner.as_deref() != owner) {
                    return None;
                }
            }
            Some(())
        })
        .await;
    }

    /// Counts jobs in `state` by SQL.
    pub async fn count(&self, state: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE state = $1")
            .bind(state)
            .fetch_one(&self.pool)
            .await
            .expect("count jobs")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let pool = self.pool.clone();
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Drop runs in async tests and while unwinding: drop the database on a thread of its
        // own with a small runtime, and wait for it.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the test database");
            runtime.block_on(async move {
                pool.close().await;
                admin_exec(
                    &admin,
                    &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
                )
                .await;
            });
        })
        .join();
        if dropped.is_err() && !std::thread::panicking() {
            panic!("dropping test database {} failed", self.name);
        }
    }
}

/// `url` with its database replaced by `name` (user, password, host and query kept).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| i + authority);
    format!("{}/{name}{query}", &base[..path])
}

/// A job's row, as far as these tests look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// State.
    pub state: String,
    /// Attempt.
    pub attempt: i32,
    /// Lease owner (worker id), while running.
    pub lease_owner: Option<String>,
}

/// Checks that a failed command printed exactly one line `drover: ...` on stderr and no
/// panic, and returns it.
pub fn one_line_error(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {text}");
    assert!(lines[0].starts_with("drover: "), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    lines[0].to_owned()
}

/// Collected stderr lines of a process, and a wake-up for each new one.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    closed: Mutex<bool>,
    changed: Notify,
}

/// A spawned `drover` process; SIGKILLed when dropped.
pub struct Process {
    child: tokio::process::Child,
    /// Its process id.
    pub pid: u32,
    what: String,
    stderr: Arc<Lines>,
}

impl Process {
    /// Spawns `command` (made by [`TestDb::command`]; `args` name it in messages).
    pub fn spawn(mut command: tokio::process::Command, args: &[&str]) -> Process {
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn drover");
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
        Process {
            child,
            pid,
            what: format!("drover {}", args.join(" ")),
            stderr: lines,
        }
    }

    /// Everything it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lines.lock().unwrap().join("\n")
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
            .wait_for_line(" started on ", Duration::from_secs(30))
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
            .expect("wait for drover");
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
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

//! Support for the tests that run the real `drover` binary: where the binary is, a
//! database of its own per test, and running commands and worker processes. The database, the
//! skip rule and the process helpers are the kit's (`drover_tests::postgres`,
//! `drover_tests::process`); this module adds what is about the `drover` command line.
//!
//! - [`drover_bin`]: `target/<profile>/drover`, found beside this test executable's `deps/`
//!   folder. `cargo test --workspace` builds it (the cli crate's own integration tests make
//!   cargo build its binary); a clear panic says how to build it when it is missing.
//! - [`TestDb`]: a database of one test (empty, or a copy of the kit's migrated template),
//!   dropped when the value is dropped (also when the test panics), so tests run in parallel.
//!   Without `DROVER_TEST_DATABASE_URL` a test skips (printing `SKIPPED ...`), unless
//!   `DROVER_REQUIRE_POSTGRES` is set, when it fails.
//! - [`Process`]: a spawned `drover` (usually `worker`) whose stderr is collected line by line;
//!   it is SIGKILLed when dropped, so no child outlives its test.
//! - [`wait_until`]: polls a condition every 25 ms until a deadline; used only where no event
//!   can be awaited (the database state of a job).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use drover_store_postgres::sqlx::{self, PgPool};
use drover_tests::postgres::{Schema, Server, TestDatabase};
pub use drover_tests::process::{wait_until, Process};
use serde_json::Value;

/// Deadline of a one-shot command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The `drover` binary built by this cargo invocation (`target/<profile>/drover`).
///
/// # Panics
/// When it is missing, with the command that builds it.
pub fn drover_bin() -> PathBuf {
    drover_tests::process::built_binary("drover", "cargo build -p drover-cli")
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

/// A database of one test, dropped `WITH (FORCE)` on drop.
pub struct TestDb {
    /// The test's name, for messages.
    pub test: String,
    /// The database's name.
    pub name: String,
    /// Its URL, handed to `drover` as `DROVER_DATABASE_URL`.
    pub url: String,
    pool: PgPool,
    /// Declared last: dropped after the pool, taking the database with it.
    database: TestDatabase,
}

impl TestDb {
    /// A new empty database (no Drover schema), or `None` when the test skips.
    pub async fn empty(test: &str) -> Option<TestDb> {
        TestDb::create(test, Schema::Empty).await
    }

    /// A new migrated database, or `None` when the test skips.
    pub async fn migrated(test: &str) -> Option<TestDb> {
        TestDb::create(test, Schema::Migrated).await
    }

    async fn create(test: &str, schema: Schema) -> Option<TestDb> {
        let database = Server::for_test(test)?.database(schema).await;
        Some(TestDb {
            test: test.to_owned(),
            name: database.name.clone(),
            url: database.url.clone(),
            pool: database.pool(2).await,
            database,
        })
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

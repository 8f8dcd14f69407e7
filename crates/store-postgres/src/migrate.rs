//! Drover's own migrator (docs/design.md section 5): numbered, forward-only SQL files from
//! `crates/store-postgres/migrations/`, compiled into the binary, applied in order, with the
//! bookkeeping table `drover.schema_migrations` (sqlx's built-in migrator keeps its table in
//! `public`, which Drover never touches).
//!
//! Job traffic keeps flowing while it runs. A file is split into steps by marker lines
//! ([`StepKind`]); a file without markers is one locking step:
//!
//! - `-- drover:step locking`: statements that take a lock job reads or writes would queue
//!   behind (`ALTER TABLE ... ADD`, `CREATE INDEX` on a small table). They run in one
//!   transaction with a short `lock_timeout` ([`LOCK_TIMEOUT_DEFAULT`]): a lock not granted in
//!   time (a long transaction holds the table) rolls the step back, so the job writes queued
//!   behind its request go on, and the step is tried again with backoff until the lock budget
//!   ([`LOCK_BUDGET_DEFAULT`]) is spent; then it fails with a message naming the sessions that
//!   held the oldest transactions.
//! - `-- drover:step online`: one statement whose locks let job reads and writes go on
//!   (`CREATE INDEX CONCURRENTLY`, `ALTER TABLE ... VALIDATE CONSTRAINT`), run outside a
//!   transaction block; it may wait for its locks up to the lock budget. An index build that
//!   failed half way leaves an INVALID index: the next run drops it and builds it again.
//!
//! Every step is idempotent (`IF NOT EXISTS`, guarded `DO` blocks), because a migration is
//! recorded only after its last step: a run cut short between steps repeats the done ones.
//! The record goes in the last step's transaction when that step is a locking one.
//!
//! Safety under concurrency: a call holds the session-level advisory lock
//! [`MIGRATION_LOCK_KEY`] on a connection of its own for its whole run (a transaction-level
//! lock cannot cover statements that run outside a transaction), so any number of processes may
//! run `migrate` at once; each migration is applied exactly once. The connection is closed at
//! the end, and a dropped one releases the lock with its session.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::{Connection, Executor, PgConnection, PgPool};

use crate::error::{SqlxResultExt, NOT_MIGRATED};
use drover_core::Error;

mod blockers;
mod steps;

use blockers::{blockers, describe, remedy};
pub use steps::{Migration, Step, StepKind};

/// Advisory lock key serializing migrations: the ASCII bytes of `drovermg`.
pub const MIGRATION_LOCK_KEY: i64 = 0x6472_6f76_6572_6d67;

/// Default longest wait of a locking step for its locks before it is rolled back and tried
/// again: job writes that queue behind the step's lock request wait at most about this long.
pub const LOCK_TIMEOUT_DEFAULT: Duration = Duration::from_millis(300);
/// Default time a step keeps trying to get its locks (locking steps: retries; online steps:
/// one wait) before the migration fails.
pub const LOCK_BUDGET_DEFAULT: Duration = Duration::from_secs(300);
/// Shortest lock timeout (PostgreSQL reads 0 as "wait forever").
pub const LOCK_TIMEOUT_MIN: Duration = Duration::from_millis(1);
/// Longest lock timeout the CLI takes: job writes may wait this long behind a step.
pub const LOCK_TIMEOUT_MAX: Duration = Duration::from_secs(60);
/// First pause between tries of a locking step; it doubles up to [`RETRY_DELAY_MAX`].
const RETRY_DELAY_FIRST: Duration = Duration::from_millis(100);
/// Longest pause between tries of a locking step.
const RETRY_DELAY_MAX: Duration = Duration::from_secs(5);

/// A migration recorded in `drover.schema_migrations`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AppliedMigration {
    /// Its number.
    pub version: i64,
    /// Its name.
    pub name: String,
    /// When it was applied (database clock).
    pub applied_at: DateTime<Utc>,
    /// SHA-256 (lowercase hex) of the SQL text that was applied.
    pub checksum: String,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "meta_index_nonempty",
        sql: include_str!("../migrations/0002_meta_index_nonempty.sql"),
    },
    Migration {
        version: 3,
        name: "fewer_index_writes",
        sql: include_str!("../migrations/0003_fewer_index_writes.sql"),
    },
    Migration {
        version: 4,
        name: "started_at",
        sql: include_str!("../migrations/0004_started_at.sql"),
    },
    Migration {
        version: 5,
        name: "running_lease_check",
        sql: include_str!("../migrations/0005_running_lease_check.sql"),
    },
    Migration {
        version: 6,
        name: "workflows",
        sql: include_str!("../migrations/0006_workflows.sql"),
    },
    Migration {
        version: 7,
        name: "trace_context",
        sql: include_str!("../migrations/0007_trace_context.sql"),
    },
    Migration {
        version: 8,
        name: "audit",
        sql: include_str!("../migrations/0008_audit.sql"),
    },
    Migration {
        version: 9,
        name: "job_children",
        sql: include_str!("../migrations/0009_job_children.sql"),
    },
    Migration {
        version: 10,
        name: "job_counts",
        sql: include_str!("../migrations/0010_job_counts.sql"),
    },
    Migration {
        version: 11,
        name: "activity",
        sql: include_str!("../migrations/0011_activity.sql"),
    },
    Migration {
        version: 12,
        name: "queue_state_statistics",
        sql: include_str!("../migrations/0012_queue_state_statistics.sql"),
    },
    Migration {
        version: 13,
        name: "queued_meta_index",
        sql: include_str!("../migrations/0013_queued_meta_index.sql"),
    },
];

const BOOTSTRAP: &str = include_str!("sql/migrations_bootstrap.sql");

/// Every migration this binary knows, by version.
pub fn migrations() -> &'static [Migration] {
    MIGRATIONS
}

/// The newest schema version this binary knows.
pub fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Applies every pending migration with the default lock timeout and budget; see
/// [`Migrator::run`].
///
/// # Errors
/// As [`Migrator::run`].
pub async fn migrate(pool: &PgPool) -> Result<Vec<i64>, Error> {
    Migrator::new().run(pool).await
}

/// Applies migrations: this binary's ([`Migrator::new`]) or a given list, with a lock timeout
/// and budget.
#[derive(Debug, Clone)]
pub struct Migrator<'m> {
    migrations: &'m [Migration],
    lock_timeout: Duration,
    lock_budget: Duration,
    up_to: Option<i64>,
}

impl Default for Migrator<'static> {
    fn default() -> Self {
        Migrator::new()
    }
}

impl Migrator<'static> {
    /// This binary's migrations, [`LOCK_TIMEOUT_DEFAULT`], [`LOCK_BUDGET_DEFAULT`].
    pub fn new() -> Self {
        Migrator::with_migrations(MIGRATIONS)
    }
}

impl<'m> Migrator<'m> {
    /// Another list of migrations (in version order), with the default settings.
    pub fn with_migrations(migrations: &'m [Migration]) -> Self {
        Migrator {
            migrations,
            lock_timeout: LOCK_TIMEOUT_DEFAULT,
            lock_budget: LOCK_BUDGET_DEFAULT,
            up_to: None,
        }
    }

    /// Longest wait of one try of a locking step for its locks (at least
    /// [`LOCK_TIMEOUT_MIN`]).
    pub fn lock_timeout(mut self, lock_timeout: Duration) -> Self {
        self.lock_timeout = lock_timeout;
        self
    }

    /// How long a step keeps trying to get its locks before the migration fails (zero: one
    /// try).
    pub fn lock_budget(mut self, lock_budget: Duration) -> Self {
        self.lock_budget = lock_budget;
        self
    }

    /// Applies the migrations up to `version` only.
    pub fn up_to(mut self, version: i64) -> Self {
        self.up_to = Some(version);
        self
    }

    /// Applies every pending migration in version order, step by step (see the module
    /// documentation), under the migration advisory lock on a connection of its own; returns
    /// the versions this call applied (empty when the schema was current). Idempotent, and
    /// safe when several processes run it at once.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a lock timeout under [`LOCK_TIMEOUT_MIN`];
    /// [`Error::Unavailable`] when the database cannot be reached; [`Error::Fatal`] when an
    /// applied migration's checksum differs from its file (the file was edited after
    /// release), a file is malformed, a step fails (its transaction is rolled back; earlier
    /// migrations and steps stay applied), or a step could not get its locks within the
    /// budget (the message names the sessions holding the oldest transactions).
    pub async fn run(&self, pool: &PgPool) -> Result<Vec<i64>, Error> {
        if self.lock_timeout < LOCK_TIMEOUT_MIN {
            return Err(Error::invalid("lock_timeout", "must be at least 1 ms"));
        }
        let mut conn = PgConnection::connect_with(&pool.connect_options())
            .await
            .store_err()?;
        let result = self.run_on(&mut conn).await;
        // Closing the session releases the migration lock.
        if let Err(error) = conn.close().await {
            tracing::debug!(%error, "closing the migration connection failed");
        }
        result
    }

    async fn run_on(&self, conn: &mut PgConnection) -> Result<Vec<i64>, Error> {
        set_lock_timeout(conn, Duration::ZERO, false).await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(MIGRATION_LOCK_KEY)
            .fetch_one(&mut *conn)
            .await
            .store_err()?;
        if !locked {
            tracing::info!("another `drover migrate` is running; waiting for it to finish");
            // Polled, not waited for with pg_advisory_lock: a statement waiting for the lock
            // keeps a snapshot open, and the holder's CREATE INDEX CONCURRENTLY waits for every
            // such snapshot to end, so the two would wait for each other (PostgreSQL reports
            // the deadlock and fails the waiter). Each try ends at once instead.
            let mut pause = Duration::from_millis(20);
            loop {
                tokio::time::sleep(pause).await;
                let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(MIGRATION_LOCK_KEY)
                    .fetch_one(&mut *conn)
                    .await
                    .store_err()?;
                if locked {
                    break;
                }
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
        (&mut *conn).execute(BOOTSTRAP).await.store_err()?;
        let applied: Vec<(i64, String)> =
            sqlx::query_as("SELECT version, checksum FROM drover.schema_migrations")
                .fetch_all(&mut *conn)
                .await
                .store_err()?;
        let mut applied_now = Vec::new();
        for migration in self.migrations {
            if self.up_to.is_some_and(|last| migration.version > last) {
                break;
            }
            match applied
                .iter()
                .find(|(version, _)| *version == migration.version)
            {
                Some((_, stored)) if *stored == migration.checksum() => continue,
                Some(_) => return Err(changed_after_release(migration)),
                None => {}
            }
            self.apply(conn, migration).await?;
            tracing::info!(
                version = migration.version,
                name = migration.name,
                "applied migration"
            );
            applied_now.push(migration.version);
        }
        Ok(applied_now)
    }

    /// Runs every step of `migration` and records it.
    async fn apply(&self, conn: &mut PgConnection, migration: &Migration) -> Result<(), Error> {
        let steps = migration.steps()?;
        let count = steps.len();
        for (index, step) in steps.iter().enumerate() {
            let place = Place {
                migration,
                step: index + 1,
                steps: count,
            };
            let last = index + 1 == count;
            match step.kind {
                StepKind::Locking => self.locking_step(conn, &place, step, last).await?,
                StepKind::Online => self.online_step(conn, &place, step).await?,
            }
        }
        if steps.last().is_some_and(|s| s.kind == StepKind::Online) {
            let place = Place {
                migration,
                step: count,
                steps: count,
            };
            let record = Step {
                kind: StepKind::Locking,
                sql: "SELECT 1",
            };
            self.locking_step(conn, &place, &record, true).await?;
        }
        Ok(())
    }

    /// A locking step: tries until it commits or the budget is spent.
    async fn locking_step(
        &self,
        conn: &mut PgConnection,
        place: &Place<'_>,
        step: &Step,
        record: bool,
    ) -> Result<(), Error> {
        let started = Instant::now();
        let mut delay = RETRY_DELAY_FIRST;
        let mut tries = 0u32;
        loop {
            tries += 1;
            let error = match self.try_locking_step(conn, place, step, record).await {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            if !waited_for_a_lock(&error) {
                return Err(place.failed(error));
            }
            let elapsed = started.elapsed();
            if elapsed + delay > self.lock_budget {
                let blockers = blockers(conn, self.lock_timeout).await;
                return Err(Error::fatal(format!(
                    "{place} could not get its locks within the lock timeout ({} ms) in {tries} tries over {:.1} s (each try waits at most the lock timeout, so job writes keep flowing); {}. {}; this step changed nothing, and `drover migrate` goes on from here when run again",
                    self.lock_timeout.as_millis(),
                    elapsed.as_secs_f64(),
                    describe(&blockers),
                    remedy(&blockers),
                )));
            }
            if tries == 1 {
                let blockers = blockers(conn, self.lock_timeout).await;
                tracing::warn!(
                    migration = place.migration.version,
                    step = place.step,
                    blockers = %describe(&blockers),
                    "a migration step is waiting for a lock; trying again (job writes keep flowing)"
                );
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(RETRY_DELAY_MAX);
        }
    }

    /// One try of a locking step, in one transaction.
    async fn try_locking_step(
        &self,
        conn: &mut PgConnection,
        place: &Place<'_>,
        step: &Step,
        record: bool,
    ) -> Result<(), sqlx::Error> {
        let mut tx = conn.begin().await?;
        let result = async {
            set_lock_timeout_raw(&mut tx, self.lock_timeout, true).await?;
            (&mut *tx).execute(step.sql).await?;
            if record {
                let migration = place.migration;
                sqlx::query(
                    "INSERT INTO drover.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                )
                .bind(migration.version)
                .bind(migration.name)
                .bind(migration.checksum())
                .execute(&mut *tx)
                .await?;
            }
            Ok::<(), sqlx::Error>(())
        }
        .await;
        match result {
            Ok(()) => tx.commit().await,
            Err(error) => {
                if let Err(rollback) = tx.rollback().await {
                    tracing::debug!(error = %rollback, "rollback of a migration step failed");
                }
                Err(error)
            }
        }
    }

    /// An online step: one statement outside a transaction block, waiting up to the budget.
    async fn online_step(
        &self,
        conn: &mut PgConnection,
        place: &Place<'_>,
        step: &Step,
    ) -> Result<(), Error> {
        let index = step.index_built();
        let wait = self.lock_budget.max(self.lock_timeout);
        let mut result = Ok(());
        if let Some(index) = &index {
            if index_valid(conn, index).await? == Some(false) {
                tracing::warn!(
                    migration = place.migration.version,
                    index = %index,
                    "dropping an invalid index (an interrupted build) to build it again"
                );
                result = self.drop_index(conn, index, wait).await;
            }
        }
        if result.is_ok() {
            set_lock_timeout(conn, wait, false).await?;
            result = conn.execute(step.sql).await.map(|_| ());
            set_lock_timeout(conn, Duration::ZERO, false).await?;
        }
        match result {
            Ok(_) => {}
            Err(error) if waited_for_a_lock(&error) => {
                let left_invalid = match &index {
                    Some(index) => !self.drop_invalid_leftover(conn, index).await,
                    None => false,
                };
                let blockers = blockers(conn, self.lock_timeout).await;
                let leftover = match (&index, left_invalid) {
                    (Some(index), true) => format!(
                        "; the interrupted build left index drover.{index} INVALID (writes still maintain it): the next `drover migrate` drops and builds it again"
                    ),
                    _ => String::new(),
                };
                return Err(Error::fatal(format!(
                    "{place} waited {:.1} s (the lock budget) for its locks; job reads and writes went on meanwhile; {}. {}{leftover}",
                    wait.as_secs_f64(),
                    describe(&blockers),
                    remedy(&blockers),
                )));
            }
            Err(error) => return Err(place.failed(error)),
        }
        if let Some(index) = &index {
            if index_valid(conn, index).await? != Some(true) {
                return Err(Error::fatal(format!(
                    "{place} did not leave a valid index drover.{index}"
                )));
            }
        }
        Ok(())
    }

    /// Drops `drover.<index>` without blocking job writes, waiting at most `wait` for it.
    async fn drop_index(
        &self,
        conn: &mut PgConnection,
        index: &str,
        wait: Duration,
    ) -> Result<(), sqlx::Error> {
        set_lock_timeout_raw(conn, wait, false).await?;
        // The one statement built from text: DROP INDEX takes no bind parameters. The name
        // comes from a migration file compiled into this binary and is checked to be a plain
        // lowercase identifier (Step::index_built).
        let result = conn
            .execute(format!("DROP INDEX CONCURRENTLY IF EXISTS drover.\"{index}\"").as_str())
            .await;
        set_lock_timeout_raw(conn, Duration::ZERO, false).await?;
        result.map(|_| ())
    }

    /// After an interrupted build: drops the invalid index if that takes no long wait;
    /// returns whether none is left.
    async fn drop_invalid_leftover(&self, conn: &mut PgConnection, index: &str) -> bool {
        match index_valid(conn, index).await {
            Ok(Some(false)) => {}
            Ok(_) => return true,
            Err(_) => return false,
        }
        self.drop_index(conn, index, self.lock_timeout)
            .await
            .is_ok()
    }
}

/// The error for an applied migration whose file differs from what was applied.
fn changed_after_release(migration: &Migration) -> Error {
    Error::fatal(format!(
        "migration {} ({}) was changed after it was applied; restore the released file",
        migration.version, migration.name
    ))
}

/// Where in a migration a step is, for messages.
struct Place<'a> {
    migration: &'a Migration,
    step: usize,
    steps: usize,
}

impl Place<'_> {
    /// A step that failed for another reason than a lock wait.
    fn failed(&self, error: sqlx::Error) -> Error {
        let inner = crate::error::map_sqlx_error(error);
        if inner.is_transient() {
            inner
        } else {
            Error::Fatal {
                message: format!("{self} failed"),
                source: Some(Box::new(inner)),
            }
        }
    }
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "migration {} ({})",
            self.migration.version, self.migration.name
        )?;
        if self.steps > 1 {
            write!(f, " step {} of {}", self.step, self.steps)?;
        }
        Ok(())
    }
}

/// Whether `error` is a lock not granted in time (55P03) or a deadlock (40P01): the step
/// changed nothing and may be tried again.
fn waited_for_a_lock(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("55P03" | "40P01")),
        _ => false,
    }
}

/// Sets `lock_timeout` for the session or (`local`) the transaction; zero waits forever.
async fn set_lock_timeout(
    conn: &mut PgConnection,
    timeout: Duration,
    local: bool,
) -> Result<(), Error> {
    set_lock_timeout_raw(conn, timeout, local).await.store_err()
}

async fn set_lock_timeout_raw(
    conn: &mut PgConnection,
    timeout: Duration,
    local: bool,
) -> Result<(), sqlx::Error> {
    let millis = u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .min(i32::MAX as u64);
    sqlx::query("SELECT set_config('lock_timeout', $1, $2)")
        .bind(format!("{millis}ms"))
        .bind(local)
        .execute(&mut *conn)
        .await
        .map(|_| ())
}

/// Whether index `drover.<name>` is valid; `None` when there is none.
async fn index_valid(conn: &mut PgConnection, name: &str) -> Result<Option<bool>, Error> {
    sqlx::query_scalar(
        "SELECT i.indisvalid FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'drover' AND c.relname = $1",
    )
    .bind(name)
    .fetch_optional(&mut *conn)
    .await
    .store_err()
}

/// The migrations recorded in `drover.schema_migrations`, by version; empty when the database
/// was never migrated.
///
/// # Errors
/// [`Error::Unavailable`] when the database cannot be reached.
pub async fn applied_versions(pool: &PgPool) -> Result<Vec<AppliedMigration>, Error> {
    let exists: bool =
        sqlx::query_scalar("SELECT to_regclass('drover.schema_migrations') IS NOT NULL")
            .fetch_one(pool)
            .await
            .store_err()?;
    if !exists {
        return Ok(Vec::new());
    }
    sqlx::query_as::<_, AppliedMigration>(
        "SELECT version, name, applied_at, checksum FROM drover.schema_migrations ORDER BY version",
    )
    .fetch_all(pool)
    .await
    .store_err()
}

/// Checks that every migration this binary knows is applied.
///
/// # Errors
/// [`Error::Fatal`] "database schema is not migrated (run `drover migrate`)" when the bookkeeping
/// table is missing or a known version is not applied; [`Error::Unavailable`] when the
/// database cannot be reached.
pub(crate) async fn check_current(pool: &PgPool) -> Result<(), Error> {
    let newest: Option<i64> = sqlx::query_scalar(
        "SELECT CASE WHEN to_regclass('drover.schema_migrations') IS NULL THEN NULL \
         ELSE (SELECT max(version) FROM drover.schema_migrations) END",
    )
    .fetch_one(pool)
    .await
    .store_err()?;
    match newest {
        Some(v) if v >= latest_version() => Ok(()),
        _ => Err(Error::fatal(NOT_MIGRATED)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_increase_and_checksums_are_stable() {
        let versions: Vec<i64> = migrations().iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(latest_version(), *versions.last().unwrap());
        assert_eq!(migrations()[0].checksum(), migrations()[0].checksum());
        assert_eq!(migrations()[0].checksum().len(), 64);
    }

    /// The released files are stored with these checksums in deployed databases: never edit
    /// them.
    #[test]
    fn released_migrations_keep_their_checksums() {
        let released = [
            (
                1,
                "1364ef6a5e53c957acb6e8eee10a3368e2c615377e9a04b1570a61534e988dcb",
            ),
            (
                2,
                "a227a8817de1a5174a41c5cfde5639bf84d7d22787bfc98de7061afffb88778c",
            ),
            (
                3,
                "d784dc3afa1ff81935a90af69e6fa0d76f90fbdc379276b25325063319ab98b0",
            ),
        ];
        for (version, checksum) in released {
            let migration = migrations().iter().find(|m| m.version == version).unwrap();
            assert_eq!(migration.checksum(), checksum, "migration {version}");
        }
    }

    #[test]
    fn every_compiled_migration_parses_into_steps() {
        for migration in migrations() {
            let steps = migration.steps().unwrap();
            assert!(!steps.is_empty());
        }
    }
}

#[cfg(test)]
mod send_tests {
    fn assert_send<T: Send>(_: T) {}

    #[allow(dead_code)]
    fn futures_are_send(pool: &sqlx::PgPool) {
        assert_send(super::migrate(pool));
        assert_send(super::applied_versions(pool));
        assert_send(super::check_current(pool));
    }
}

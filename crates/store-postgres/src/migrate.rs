//! Drover's own migrator (DESIGN.md section 5): numbered, forward-only SQL files from
//! `crates/store-postgres/migrations/`, compiled into the binary, applied in order, with the
//! bookkeeping table `drover.schema_migrations` (sqlx's built-in migrator keeps its table in
//! `public`, which Drover never touches).
//!
//! Safety under concurrency: every step runs in its own transaction that first takes
//! `pg_advisory_xact_lock(MIGRATION_LOCK_KEY)` and re-reads what is applied, so any number of
//! processes may run `migrate` at once; each migration is applied exactly once. The lock is
//! transaction-scoped (released by commit or rollback, never left behind by a dropped
//! connection), and all steps of one call run on one connection.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::{Connection, Executor, PgConnection, PgPool};

use crate::error::{SqlxResultExt, NOT_MIGRATED};
use drover_core::Error;

/// Advisory lock key serializing migrations: the ASCII bytes of `drovermg`.
pub const MIGRATION_LOCK_KEY: i64 = 0x6472_6f76_6572_6d67;

/// One migration compiled into this binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its number (the `NNNN` of `NNNN_name.sql`), strictly increasing.
    pub version: i64,
    /// Its name (the file name without number and extension).
    pub name: &'static str,
    /// The SQL text.
    pub sql: &'static str,
}

impl Migration {
    /// SHA-256 (lowercase hex) of the SQL text, stored when applied and checked afterwards.
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }
}

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

/// Applies every pending migration, each in its own transaction under the migration advisory
/// lock; returns the versions this call applied (empty when the schema was current).
/// Idempotent, and safe when several processes run it at once.
///
/// # Errors
/// [`Error::Unavailable`] when the database cannot be reached; [`Error::Fatal`] when an applied
/// migration's checksum differs from this binary's file (the file was edited after release) or
/// a migration fails (its transaction is rolled back; earlier ones stay applied).
pub async fn migrate(pool: &PgPool) -> Result<Vec<i64>, Error> {
    let mut conn = pool.acquire().await.store_err()?;
    let mut applied_now = Vec::new();
    for migration in MIGRATIONS {
        if apply_one(&mut conn, migration).await? {
            tracing::info!(
                version = migration.version,
                name = migration.name,
                "applied migration"
            );
            applied_now.push(migration.version);
        }
    }
    Ok(applied_now)
}

/// Applies `migration` unless already applied, in one transaction under the migration lock;
/// returns whether this call applied it.
async fn apply_one(conn: &mut PgConnection, migration: &'static Migration) -> Result<bool, Error> {
    let mut tx = conn.begin().await.store_err()?;
    let result = apply_in(&mut tx, migration).await;
    crate::transaction::settle(tx, result).await
}

/// The body of [`apply_one`], inside its transaction.
async fn apply_in(conn: &mut PgConnection, migration: &'static Migration) -> Result<bool, Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *conn)
        .await
        .store_err()?;
    (&mut *conn).execute(BOOTSTRAP).await.store_err()?;
    let stored: Option<String> =
        sqlx::query_scalar("SELECT checksum FROM drover.schema_migrations WHERE version = $1")
            .bind(migration.version)
            .fetch_optional(&mut *conn)
            .await
            .store_err()?;
    let checksum = migration.checksum();
    match stored {
        Some(stored) if stored == checksum => return Ok(false),
        Some(_) => {
            return Err(Error::fatal(format!(
                "migration {} ({}) was changed after it was applied; restore the released file",
                migration.version, migration.name
            )));
        }
        None => {}
    }
    if let Err(e) = (&mut *conn).execute(migration.sql).await {
        let inner = crate::error::map_sqlx_error(e);
        return Err(if inner.is_transient() {
            inner
        } else {
            Error::Fatal {
                message: format!(
                    "migration {} ({}) failed",
                    migration.version, migration.name
                ),
                source: Some(Box::new(inner)),
            }
        });
    }
    sqlx::query(
        "INSERT INTO drover.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
    )
    .bind(migration.version)
    .bind(migration.name)
    .bind(&checksum)
    .execute(&mut *conn)
    .await
    .store_err()?;
    Ok(true)
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

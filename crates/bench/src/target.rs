//! What a measurement runs against: a fresh PostgreSQL database (dropped, recreated, migrated
//! and checkpointed before every measurement, so runs start from tables in the same state) or
//! a new memory store; both with quotas off.
//!
//! This is the only module of the bench that sends its own SQL: database administration
//! (`DROP/CREATE DATABASE`, `CHECKPOINT`) and reading `version()` and `pg_settings`. Job
//! counts go through the `JobStore` trait (`queue_snapshot`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Error, JobState, JobStore, QueueName, Quotas, StoreConfig, SucceededJobs};
use drover_store_memory::MemoryStore;
use drover_store_postgres::sqlx::postgres::PgConnectOptions;
use drover_store_postgres::sqlx::{self, ConnectOptions, Connection, PgConnection};
use drover_store_postgres::{PgOptions, PgStore};
use serde::Serialize;

use crate::options::QUEUE;

/// PostgreSQL settings the bench records: the durability settings of BENCHMARKS.md's method,
/// those the peer scripts record, and two that change a queue table's figures without touching
/// durability: `autovacuum`, which clears the dead index entries claims walk over, and `jit`.
pub const RECORDED_SETTINGS: [&str; 12] = [
    "fsync",
    "synchronous_commit",
    "shared_buffers",
    "max_connections",
    "wal_level",
    "checkpoint_timeout",
    "full_page_writes",
    "wal_sync_method",
    "commit_delay",
    "max_wal_size",
    "autovacuum",
    "jit",
];

/// The store configuration of every benchmark: quotas off, default size bounds, succeeded jobs
/// kept or deleted as `succeeded_jobs` says (`--delete-succeeded`).
pub fn bench_store_config(succeeded_jobs: SucceededJobs) -> StoreConfig {
    StoreConfig {
        quotas: Quotas::unbounded(),
        succeeded_jobs,
        ..StoreConfig::default()
    }
}

/// A new memory store with quotas off that keeps succeeded jobs.
#[cfg(test)]
pub fn memory_store() -> Arc<dyn JobStore> {
    memory_store_with(SucceededJobs::Keep)
}

/// A new memory store with quotas off that keeps or deletes succeeded jobs.
pub fn memory_store_with(succeeded_jobs: SucceededJobs) -> Arc<dyn JobStore> {
    Arc::new(MemoryStore::new(bench_store_config(succeeded_jobs)))
}

/// The PostgreSQL server and the benchmark database on it.
#[derive(Debug, Clone)]
pub struct PgTarget {
    /// The URL as given (passed to worker children through the environment, never printed).
    url: String,
    /// Connect options of the benchmark database.
    database: PgConnectOptions,
    /// Connect options of the maintenance database `postgres`, for DROP/CREATE DATABASE.
    admin: PgConnectOptions,
    /// The benchmark database's name.
    name: String,
    /// What its stores do with succeeded jobs.
    succeeded_jobs: SucceededJobs,
}

/// What the bench records about the server.
#[derive(Debug, Clone, Serialize)]
pub struct PgInfo {
    /// `SELECT version()`.
    pub version: String,
    /// Host and port (never the password).
    pub server: String,
    /// The benchmark database.
    pub database: String,
    /// [`RECORDED_SETTINGS`] as `current_setting` shows them (with units).
    pub settings: BTreeMap<String, String>,
}

impl PgInfo {
    /// True when `fsync` and `synchronous_commit` are both on (PostgreSQL's default
    /// durability, which the benchmarks must use).
    pub fn durable(&self) -> bool {
        self.settings.get("fsync").map(String::as_str) == Some("on")
            && self.settings.get("synchronous_commit").map(String::as_str) == Some("on")
    }
}

impl PgTarget {
    /// Parses `url`; its database name must contain `bench` (it is dropped and recreated) and
    /// consist of lowercase letters, digits and `_`.
    ///
    /// # Errors
    /// `InvalidInput` naming `database-url`.
    pub fn parse(url: &str) -> Result<PgTarget, Error> {
        let database = drover_store_postgres::connect_options(url)
            .map_err(|_| Error::invalid("database-url", "not a postgres:// URL"))?
            .application_name("drover-bench");
        let name = database
            .get_database()
            .ok_or_else(|| Error::invalid("database-url", "names no database"))?
            .to_owned();
        if !name.contains("bench")
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(Error::invalid(
                "database-url",
                format!(
                    "database {name:?} would be dropped: use a name of lowercase letters, digits and _ containing `bench`"
                ),
            ));
        }
        let admin = database.clone().database("postgres");
        Ok(PgTarget {
            url: url.to_owned(),
            database,
            admin,
            name,
            succeeded_jobs: SucceededJobs::Keep,
        })
    }

    /// The URL as given, for worker children (through the environment).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Drops and recreates the benchmark database, applies Drover's migrations and runs a
    /// CHECKPOINT (so no checkpoint of earlier work lands inside the measurement).
    ///
    /// # Errors
    /// `Unavailable` when the server cannot be reached; `Fatal` when a statement fails.
    pub async fn fresh(&self) -> Result<(), Error> {
        let mut admin = self.admin_connection().await?;
        // The name was checked in `parse`: only [a-z0-9_], so quoting it is enough.
        let drop = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let create = format!("CREATE DATABASE \"{}\"", self.name);
        sqlx::raw_sql(&drop)
            .execute(&mut admin)
            .await
            .map_err(sql_error("drop the benchmark database"))?;
        sqlx::raw_sql(&create)
            .execute(&mut admin)
            .await
            .map_err(sql_error("create the benchmark database"))?;
        let store = self.store(2).await?;
        store.migrate().await?;
        store.close().await;
        if let Err(error) = sqlx::raw_sql("CHECKPOINT").execute(&mut admin).await {
            tracing::warn!(%error, "CHECKPOINT failed; continuing without it");
        }
        admin.close().await.ok();
        Ok(())
    }

    /// The same target whose stores keep or delete succeeded jobs as `succeeded_jobs` says.
    pub fn with_succeeded_jobs(mut self, succeeded_jobs: SucceededJobs) -> PgTarget {
        self.succeeded_jobs = succeeded_jobs;
        self
    }

    /// What its stores do with succeeded jobs.
    pub fn succeeded_jobs(&self) -> SucceededJobs {
        self.succeeded_jobs
    }

    /// A store on the benchmark database with quotas off and a pool of at most
    /// `max_connections` (opened lazily).
    ///
    /// # Errors
    /// `Unavailable` when the database cannot be reached.
    pub async fn store(&self, max_connections: u32) -> Result<PgStore, Error> {
        PgStore::connect_with(
            self.database.clone(),
            PgOptions {
                max_connections,
                config: bench_store_config(self.succeeded_jobs),
                ..PgOptions::default()
            },
        )
        .await
    }

    /// Server version and settings.
    ///
    /// # Errors
    /// `Unavailable` when the server cannot be reached; `Fatal` when a query fails.
    pub async fn info(&self) -> Result<PgInfo, Error> {
        let mut admin = self.admin_connection().await?;
        let version: String = sqlx::query_scalar("SELECT version()")
            .fetch_one(&mut admin)
            .await
            .map_err(sql_error("read the server version"))?;
        let names: Vec<String> = RECORDED_SETTINGS.iter().map(|s| (*s).to_owned()).collect();
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY($1) ORDER BY name",
        )
        .bind(names)
        .fetch_all(&mut admin)
        .await
        .map_err(sql_error("read pg_settings"))?;
        admin.close().await.ok();
        Ok(PgInfo {
            version,
            server: format!("{}:{}", self.database.get_host(), self.database.get_port()),
            database: self.name.clone(),
            settings: rows.into_iter().collect(),
        })
    }

    async fn admin_connection(&self) -> Result<PgConnection, Error> {
        self.admin
            .connect()
            .await
            .map_err(|error| Error::Unavailable {
                message: format!(
                    "cannot connect to PostgreSQL at {}:{}",
                    self.admin.get_host(),
                    self.admin.get_port()
                ),
                source: Some(Box::new(error)),
            })
    }
}

/// Wraps a failed administrative statement.
fn sql_error(what: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |error| Error::Fatal {
        message: format!("could not {what}"),
        source: Some(Box::new(error)),
    }
}

/// Jobs of the `bench` queue in state succeeded, by the store's own count.
///
/// # Errors
/// Those of `queue_snapshot`.
pub async fn succeeded(store: &dyn JobStore) -> Result<u64, Error> {
    let queue = QueueName::parse(QUEUE)?;
    let snapshot = store.queue_snapshot().await?;
    Ok(snapshot
        .queues
        .iter()
        .find(|q| q.queue == queue)
        .map_or(0, |q| q.count(JobState::Succeeded)))
}

/// Of `n` jobs enqueued on the `bench` queue, how many are done: recorded succeeded, or, when
/// the store deletes succeeded jobs, gone (`n` minus the jobs left in any state).
///
/// # Errors
/// Those of `queue_snapshot`.
pub async fn done(
    store: &dyn JobStore,
    n: u64,
    succeeded_jobs: SucceededJobs,
) -> Result<u64, Error> {
    if succeeded_jobs == SucceededJobs::Keep {
        return succeeded(store).await;
    }
    let queue = QueueName::parse(QUEUE)?;
    let snapshot = store.queue_snapshot().await?;
    let left: u64 = snapshot
        .queues
        .iter()
        .filter(|q| q.queue == queue)
        .flat_map(|q| q.counts.values())
        .sum();
    Ok(n.saturating_sub(left))
}

/// Waits until `expected` jobs of the `bench` queue are done ([`done`]), checking every
/// `interval`; returns the instant it first saw them all.
///
/// # Errors
/// `Fatal` when they are not all there within `deadline`; those of `queue_snapshot`.
pub async fn wait_succeeded(
    store: &dyn JobStore,
    expected: u64,
    succeeded_jobs: SucceededJobs,
    interval: Duration,
    deadline: Duration,
) -> Result<Instant, Error> {
    let started = Instant::now();
    loop {
        let count = done(store, expected, succeeded_jobs).await?;
        if count >= expected {
            return Ok(Instant::now());
        }
        if started.elapsed() > deadline {
            return Err(Error::fatal(format!(
                "only {count} of {expected} jobs succeeded within {} s",
                deadline.as_secs()
            )));
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use drover_core::{ClaimJobs, Finish, FinishItem, JobKind, NewJob, WorkerId};

    use super::*;
    use crate::options::KIND;

    #[test]
    fn only_bench_databases_may_be_dropped() {
        let target = PgTarget::parse("postgres://postgres@127.0.0.1:5432/drover_bench").unwrap();
        assert_eq!(target.name, "drover_bench");
        assert_eq!(target.admin.get_database(), Some("postgres"));
        for bad in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgres://postgres@127.0.0.1:5432/Bench\"x",
            "postgres://postgres@127.0.0.1:5432",
            "not a url",
        ] {
            let error = PgTarget::parse(bad).unwrap_err();
            assert!(error.to_string().contains("database-url"), "{bad}: {error}");
        }
    }

    #[test]
    fn durability_needs_both_settings_on() {
        let mut info = PgInfo {
            version: String::new(),
            server: String::new(),
            database: String::new(),
            settings: BTreeMap::new(),
        };
        assert!(!info.durable());
        info.settings.insert("fsync".into(), "on".into());
        info.settings
            .insert("synchronous_commit".into(), "on".into());
        assert!(info.durable());
        info.settings
            .insert("synchronous_commit".into(), "off".into());
        assert!(!info.durable());
    }

    /// Enqueues three noop jobs on the `bench` queue.
    async fn enqueue_three(store: &dyn JobStore) {
        let jobs = (0..3)
            .map(|_| {
                NewJob::new(JobKind::parse(KIND).unwrap(), serde_json::json!({}))
                    .with_queue(QueueName::parse(QUEUE).unwrap())
            })
            .collect();
        store.jobs_enqueue(jobs).await.unwrap();
    }

    /// Claims two jobs of the `bench` queue and records their success.
    async fn succeed_two(store: &dyn JobStore) {
        let claimed = store
            .jobs_claim(ClaimJobs {
                worker: WorkerId::parse("w").unwrap(),
                queues: vec![QueueName::parse(QUEUE).unwrap()],
                kinds: vec![JobKind::parse(KIND).unwrap()],
                limit: 2,
                start: 2,
                lease: Duration::from_secs(60),
            })
            .await
            .unwrap()
            .jobs;
        let items = claimed
            .iter()
            .map(|job| FinishItem {
                parent: job.parent_id,
                started: None,
                id: job.id,
                token: job.fencing_token,
                finish: Finish::Succeeded { result: None },
            })
            .collect();
        store.jobs_finish(items).await.unwrap();
    }

    /// A store that deletes succeeded jobs counts as done the jobs that are gone: 2 of 3
    /// finished leaves one queued job, so 2 are done (and none is counted succeeded).
    #[tokio::test]
    async fn done_counts_deleted_jobs_of_a_store_that_keeps_none() {
        let store = memory_store_with(SucceededJobs::Delete);
        enqueue_three(store.as_ref()).await;
        assert_eq!(
            done(store.as_ref(), 3, SucceededJobs::Delete)
                .await
                .unwrap(),
            0
        );
        succeed_two(store.as_ref()).await;
        assert_eq!(succeeded(store.as_ref()).await.unwrap(), 0);
        assert_eq!(
            done(store.as_ref(), 3, SucceededJobs::Delete)
                .await
                .unwrap(),
            2
        );
    }

    #[tokio::test]
    async fn succeeded_counts_the_bench_queue_of_a_memory_store() {
        let store = memory_store();
        enqueue_three(store.as_ref()).await;
        assert_eq!(succeeded(store.as_ref()).await.unwrap(), 0);
        succeed_two(store.as_ref()).await;
        assert_eq!(succeeded(store.as_ref()).await.unwrap(), 2);
        assert_eq!(
            done(store.as_ref(), 3, SucceededJobs::Keep).await.unwrap(),
            2
        );
        let error = wait_succeeded(
            store.as_ref(),
            3,
            SucceededJobs::Keep,
            Duration::from_millis(1),
            Duration::from_millis(5),
        )
        .await
        .unwrap_err();
        assert!(error.to_string().contains("only 2 of 3"), "{error}");
    }
}

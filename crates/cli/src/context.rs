//! Opening stores for commands, and turning store errors into one line that says what to do.

use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, Result};
use drover_core::{Actor, AuditSource, Error, JobStore, SucceededJobs};
use drover_runner::Client;
use drover_store_postgres::{PgOptions, PgStore};
use sqlx::postgres::PgConnectOptions;

use crate::env;
use crate::usage::{flag_error, usage};

/// What every command gets: the database URL (if any) and the output format.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// `--database-url` or `DROVER_DATABASE_URL`.
    pub database_url: Option<String>,
    /// `--json`.
    pub json: bool,
    /// Stores opened by [`Ctx::store`], closed by [`Ctx::close`] when the command ends.
    opened: Arc<Mutex<Vec<PgStore>>>,
}

/// Host, port and database of a URL, without user or password, for messages.
pub fn describe_url(url: &str) -> String {
    match PgConnectOptions::from_str(url) {
        Ok(o) => format!(
            "{}:{}/{}",
            o.get_host(),
            o.get_port(),
            o.get_database().unwrap_or("")
        ),
        Err(_) => "the given URL".to_owned(),
    }
}

impl Ctx {
    /// A context for a command line's database URL and `--json`.
    pub fn new(database_url: Option<String>, json: bool) -> Self {
        Ctx {
            database_url,
            json,
            opened: Arc::default(),
        }
    }

    /// Closes every store [`Ctx::store`] opened: first sends the wake-ups their enqueues,
    /// retries and resumes left pending (the store sends them after the commit, from a task:
    /// a process that exited without this lost them, and idle workers found the jobs only at
    /// their next poll, up to `--poll-interval` later), then closes the connections. The
    /// dispatcher calls it once the command has returned, whether it succeeded or not.
    pub async fn close(&self) {
        let stores =
            std::mem::take(&mut *self.opened.lock().unwrap_or_else(PoisonError::into_inner));
        for store in stores {
            store.close().await;
        }
    }

    /// The database URL, or a usage error saying how to give one.
    pub fn url(&self) -> Result<&str> {
        self.database_url.as_deref().ok_or_else(|| {
            usage(
                "no database given: pass --database-url or set DROVER_DATABASE_URL (to try Drover without PostgreSQL, run `drover dev`)"
            )
        })
    }

    /// Connects to PostgreSQL with `connections` pooled connections and checks that it answers.
    ///
    /// # Errors
    /// Usage errors: no URL; a URL that is not a PostgreSQL URL (not quoted: it may hold a
    /// password). Others: the database unreachable (one line saying what to check).
    pub async fn postgres(&self, connections: u32, pgbouncer: bool) -> Result<PgStore> {
        self.postgres_with(connections, pgbouncer, SucceededJobs::Keep)
            .await
    }

    /// As [`Ctx::postgres`], for a worker: its store deletes or keeps the jobs its handlers
    /// complete as `succeeded_jobs` says (`--delete-succeeded`).
    ///
    /// # Errors
    /// As [`Ctx::postgres`].
    pub async fn postgres_with(
        &self,
        connections: u32,
        pgbouncer: bool,
        succeeded_jobs: SucceededJobs,
    ) -> Result<PgStore> {
        let url = self.url()?;
        drover_store_postgres::connect_options(url).map_err(|e| {
            flag_error(
                e,
                &[("database_url", "--database-url (or DROVER_DATABASE_URL)")],
            )
        })?;
        let mut options = PgOptions {
            config: env::store_config_with(succeeded_jobs)?,
            ..PgOptions::default()
        };
        options.max_connections = connections;
        options.acquire_timeout = Duration::from_secs(5);
        if pgbouncer {
            options.statement_cache = false;
            options.listen = false;
        }
        probe(url).await.map_err(|e| self.explain(e))?;
        let store = PgStore::connect(url, options)
            .await
            .map_err(|e| self.explain(e))?;
        store.now().await.map_err(|e| self.explain(e))?;
        Ok(store)
    }

    /// Connects for a one-shot operator command and checks that the schema is migrated.
    ///
    /// # Errors
    /// As [`Ctx::postgres`], plus a missing schema ("run `drover migrate`").
    pub async fn store(&self) -> Result<Arc<dyn JobStore>> {
        let store = self.postgres(4, false).await?;
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(store.clone());
        store.check_ready().await.map_err(|e| self.explain(e))?;
        Ok(Arc::new(store))
    }

    /// [`Ctx::store`] behind the operator façade, through which commands enqueue, read and
    /// change jobs and queues.
    ///
    /// # Errors
    /// As [`Ctx::store`], plus a usage error for a `DROVER_ACTOR` that is no actor name.
    pub async fn client(&self) -> Result<Client> {
        let actor = Actor::new(env::actor_name()?, AuditSource::Cli);
        Ok(Client::new(self.store().await?).with_actor(actor))
    }

    /// Rewrites a store error as one line that says what to do.
    pub fn explain(&self, e: Error) -> anyhow::Error {
        let place = self.database_url.as_deref().map_or_else(
            || "the database".to_owned(),
            |u| format!("the database at {}", describe_url(u)),
        );
        match e {
            Error::Unavailable { message, .. } => anyhow!(
                "cannot reach {place}: {message}; check --database-url (or DROVER_DATABASE_URL) and that PostgreSQL is running"
            ),
            Error::Fatal { message, .. } => anyhow!("{message}"),
            other => anyhow!("{other}"),
        }
    }
}

/// Opens and closes one connection, so an unreachable database is reported with the driver's
/// own reason (refused, unknown host, authentication) within 5 seconds rather than as a pool
/// timeout.
async fn probe(url: &str) -> Result<(), Error> {
    use sqlx::ConnectOptions;
    let options = drover_store_postgres::connect_options(url)?;
    match tokio::time::timeout(Duration::from_secs(5), options.connect()).await {
        Err(_) => Err(Error::unavailable("no answer within 5 s")),
        Ok(Err(e)) => Err(Error::unavailable(connect_reason(&e))),
        Ok(Ok(conn)) => {
            let _ = sqlx::Connection::close(conn).await;
            Ok(())
        }
    }
}

/// The reason of a failed connection attempt, without the URL or password.
fn connect_reason(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::Database(db) => db.message().to_owned(),
        sqlx::Error::Tls(_) => "TLS negotiation failed".to_owned(),
        sqlx::Error::Configuration(_) => "the URL is not a valid PostgreSQL URL".to_owned(),
        other => other.to_string(),
    }
}

/// Runs a store call, explaining its error.
pub async fn call<T>(
    ctx: &Ctx,
    fut: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T> {
    fut.await.map_err(|e| ctx.explain(e))
}

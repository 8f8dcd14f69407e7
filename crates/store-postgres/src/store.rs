//! [`PgStore`]: the `JobStore` on PostgreSQL, its options and constructors. The operations
//! themselves live by area in `enqueue`, `claim`, `outcome`, `lifecycle` and `admin`; this file
//! only wires them to the trait.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::activity::{ActivityMinute, ListActivity};
use drover_core::workflow::{
    EnqueueChildren, EnqueuedWorkflow, ListWorkflows, NewWorkflow, Workflow, WorkflowChange,
    WorkflowPage,
};
use drover_core::{Actor, AuditPage, ListAudit, Operated, Operation, PruneAudit};
use drover_core::{
    CancelOutcome, ClaimJobs, ClaimReconciling, Claimed, Enqueued, Error, EventStream,
    FencingToken, FinishItem, FinishReply, FireSchedule, HeartbeatJobs, HeartbeatReply, Job, JobId,
    JobPage, JobStore, LimitKey, LimitPolicy, LimitStatus, ListJobs, NewJob, NewSchedule,
    PruneJobs, QueueChange, QueueInfo, QueueName, RequeueOutcome, RescueExpired, Rescued,
    Resolution, Schedule, ScheduleName, ScheduleUpsert, Snapshot, StoreConfig, Transition,
    VacuumStatus, WorkerId, WorkerInfo, WorkerRegistration, WorkflowId,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use sqlx::{Connection, PgConnection, PgPool};

use crate::connections::Connections;
pub use crate::connections::IDLE_CHECK_AFTER;
use crate::enqueue::{self, Batch, Combiner, Wake};
use crate::error::{connection_lost_recently, SqlxResultExt};
use crate::notify::Notifier;
use crate::transaction::settle;
use crate::{admin, audit, claim, lifecycle, listen, migrate, outcome, sql, workflow};

/// The `application_name` the store's connections report (`pg_stat_activity`) unless the
/// connect options name one.
pub const APPLICATION_NAME: &str = "drover";
/// Default largest pool size.
pub const MAX_CONNECTIONS_DEFAULT: u32 = 10;
/// Default time to wait for a pooled connection before `Unavailable`.
pub const ACQUIRE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// How [`PgStore::connect`] builds its pool, and the store's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PgOptions {
    /// Largest number of pooled connections (default 10). A worker needs at least its slots + 2
    /// (docs/design.md section 5); a subscription uses one more connection of its own.
    pub max_connections: u32,
    /// Connections kept open while idle (default 0).
    pub min_connections: u32,
    /// How long an operation waits for a pooled connection before failing with `Unavailable`
    /// (default 10 s).
    pub acquire_timeout: Duration,
    /// Cache prepared statements per connection (default true). Set false behind PgBouncer in
    /// transaction mode: statements are then prepared unnamed for each use
    /// (`statement_cache_capacity(0)`). Only [`PgStore::connect`] applies it; with
    /// [`PgStore::from_pool`] configure the pool's connect options yourself.
    pub statement_cache: bool,
    /// Use LISTEN/NOTIFY for wake-ups (default true). Set false where LISTEN cannot work
    /// (PgBouncer in transaction mode): `subscribe` then returns a stream that never yields and
    /// workers rely on polling.
    pub listen: bool,
    /// Quotas and size bounds.
    pub config: StoreConfig,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            max_connections: MAX_CONNECTIONS_DEFAULT,
            min_connections: 0,
            acquire_timeout: ACQUIRE_TIMEOUT_DEFAULT,
            statement_cache: true,
            listen: true,
            config: StoreConfig::default(),
        }
    }
}

/// The PostgreSQL job store: a connection pool plus the store configuration. Cheap to clone
/// (the pool is shared).
///
/// Every method uses the database clock (`now()`), never the caller's (docs/design.md section 9),
/// and needs the schema applied by [`migrate`](crate::migrate()) (`drover migrate`); without it
/// methods fail with `Fatal` saying so.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    options: PgOptions,
    /// Sends the wake-ups of this store's committed enqueues (shared by clones).
    notifier: Arc<Notifier>,
    /// The pool plus connections kept for reuse between calls (shared by clones).
    connections: Arc<Connections>,
    /// Groups concurrent one-job enqueues into one statement (shared by clones).
    combiner: Arc<Combiner>,
}

/// Parses a PostgreSQL URL (`postgres://user@host:port/database?...` or `postgresql://...`).
/// The scheme is checked first: the driver's parser would read `mysql://host/db` as a
/// PostgreSQL address. The URL is never echoed in errors (it may hold a password).
///
/// TLS follows the URL's `sslmode` (`disable`, `prefer`, `require`, `verify-ca`,
/// `verify-full`; `sslrootcert` names a CA file), else `PGSSLMODE`; with neither, connections
/// are not encrypted (libpq would `prefer` TLS): a job's round trips are the hot path, and TLS
/// is asked for where the network needs it (docs/operating.md, "What to deploy").
///
/// # Errors
/// `InvalidInput` on `database_url` for another scheme or a URL the driver cannot parse.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, Error> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !scheme
        .is_some_and(|s| s.eq_ignore_ascii_case("postgres") || s.eq_ignore_ascii_case("postgresql"))
    {
        return Err(Error::invalid(
            "database_url",
            "must start with postgres:// or postgresql:// (postgres://user@host:port/database)",
        ));
    }
    let options = PgConnectOptions::from_str(url).map_err(|e| {
        Error::invalid(
            "database_url",
            format!(
                "is not a PostgreSQL URL: {}",
                e.to_string().replace(url, "<url>")
            ),
        )
    })?;
    let asks_for_tls_mode = url.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| {
            pair.split('=')
                .next()
                .is_some_and(|key| key.eq_ignore_ascii_case("sslmode"))
        })
    }) || std::env::var_os("PGSSLMODE").is_some();
    Ok(if asks_for_tls_mode {
        options
    } else {
        options.ssl_mode(PgSslMode::Disable)
    })
}

impl PgStore {
    /// Connects to `url` (`postgres://user@host:port/database?...`) with a new pool built from
    /// `options`, opening one connection to check that the database answers.
    ///
    /// # Errors
    /// `Fatal` for a malformed URL (the URL itself is never echoed, it may hold a password);
    /// `Unavailable` when the database cannot be reached.
    pub async fn connect(url: &str, options: PgOptions) -> Result<PgStore, Error> {
        let connect = connect_options(url).map_err(|e| match e {
            Error::InvalidInput { reason, .. } => {
                Error::fatal(format!("invalid database URL: {reason}"))
            }
            other => other,
        })?;
        PgStore::connect_with(connect, options).await
    }

    /// Like [`PgStore::connect`] with already parsed connect options (host, database, TLS,
    /// ...). Connections report `application_name` [`APPLICATION_NAME`] unless the options set
    /// one.
    ///
    /// # Errors
    /// `Unavailable` when the database cannot be reached.
    pub async fn connect_with(
        mut connect: PgConnectOptions,
        options: PgOptions,
    ) -> Result<PgStore, Error> {
        if connect.get_application_name().is_none() {
            connect = connect.application_name(APPLICATION_NAME);
        }
        if !options.statement_cache {
            connect = connect.statement_cache_capacity(0);
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .min_connections(options.min_connections)
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= IDLE_CHECK_AFTER || connection_lost_recently() {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect)
            .await
            .store_err()?;
        Ok(PgStore::from_pool(pool, options))
    }

    /// Wraps an existing pool (its connect options are used as they are; see
    /// [`PgOptions::statement_cache`]).
    pub fn from_pool(pool: PgPool, options: PgOptions) -> PgStore {
        let connections = Connections::new(pool.clone());
        let notifier = Arc::new(Notifier::new(Arc::downgrade(&connections)));
        let combiner = Arc::new(Combiner::new(
            Arc::downgrade(&connections),
            Arc::clone(&notifier),
            options.config,
        ));
        PgStore {
            pool,
            options,
            notifier,
            connections,
            combiner,
        }
    }

    /// The pool, for the application's own queries and transactions (see
    /// [`PgStore::enqueue_in`]). Between calls the store keeps up to half of the pool's
    /// connections checked out for its next calls (connections.rs: sqlx pings every connection
    /// it takes back, a second round trip per call); one idle for [`IDLE_CHECK_AFTER`] goes back
    /// to the pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The options the store was built with.
    pub fn options(&self) -> &PgOptions {
        &self.options
    }

    /// Sends the wake-up notifications still pending, then closes the pool, waiting for
    /// connections in use to be returned. Later calls fail with `Fatal` ("the store was
    /// closed"); subscriptions end.
    pub async fn close(&self) {
        self.notifier.close().await;
        self.connections.release_all();
        self.pool.close().await;
    }

    /// Enqueues `jobs` inside the caller's own transaction (docs/design.md section 5, transactional
    /// enqueue): pass `&mut *tx` of a `sqlx::Transaction`. The jobs become visible, and idle
    /// workers are notified, only if that transaction commits; a rollback leaves no trace.
    /// Answers and errors as [`JobStore::jobs_enqueue`]. After `InvalidInput`, `Conflict` or
    /// `QuotaExceeded` nothing of the batch is left and the caller's transaction stays usable (a
    /// batch that may need undoing runs in a savepoint); after `Unavailable` or `Fatal` the
    /// caller's transaction is in an unknown state and must be rolled back.
    ///
    /// With quotas configured the quota advisory locks are held until the caller's transaction
    /// ends, serializing other enqueuers of the same quota meanwhile: keep such transactions
    /// short.
    ///
    /// # Errors
    /// As [`JobStore::jobs_enqueue`].
    pub async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<Enqueued>, Error> {
        let linked = workflow::linked(&jobs);
        let batch = Batch::prepare(jobs, &self.options.config)?;
        if linked {
            return workflow::enqueue_in(conn, &self.options.config, batch).await;
        }
        enqueue::enqueue(conn, &self.options.config, batch, Wake::InTransaction)
            .await
            .map(|enqueue| enqueue.answers)
    }

    /// Applies pending migrations to this store's database; see [`migrate`](crate::migrate()).
    ///
    /// # Errors
    /// As [`migrate`](crate::migrate()).
    pub async fn migrate(&self) -> Result<Vec<i64>, Error> {
        migrate::migrate(&self.pool).await
    }
}

#[async_trait]
impl JobStore for PgStore {
    async fn jobs_enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>, Error> {
        enqueue::jobs_enqueue(
            &self.connections,
            &self.combiner,
            &self.notifier,
            &self.options.config,
            jobs,
        )
        .await
    }

    async fn workflow_enqueue(&self, new: NewWorkflow) -> Result<EnqueuedWorkflow, Error> {
        workflow::workflow_enqueue(&self.connections, &self.notifier, &self.options.config, new)
            .await
    }

    async fn children_enqueue(&self, children: EnqueueChildren) -> Result<Vec<Enqueued>, Error> {
        workflow::children_enqueue(
            &self.connections,
            &self.notifier,
            &self.options.config,
            children,
        )
        .await
    }

    async fn jobs_tenants(
        &self,
        ids: Vec<JobId>,
    ) -> Result<Vec<(JobId, drover_core::TenantId)>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = audit::jobs_tenants(&mut conn, &ids).await;
        conn.done(result)
    }

    async fn jobs_get(&self, ids: Vec<JobId>) -> Result<Vec<Job>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = workflow::jobs_get(&mut conn, ids).await;
        conn.done(result)
    }

    async fn workflow_get(&self, id: WorkflowId) -> Result<Workflow, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = workflow::workflow_get(&mut conn, id).await;
        conn.done(result)
    }

    async fn workflows_list(&self, query: ListWorkflows) -> Result<WorkflowPage, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = workflow::workflows_list(&mut conn, query).await;
        conn.done(result)
    }

    async fn workflow_cancel(&self, id: WorkflowId) -> Result<WorkflowChange, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = workflow::workflow_cancel(&mut conn, id).await;
        conn.done(result)
    }

    async fn workflow_retry(&self, id: WorkflowId) -> Result<WorkflowChange, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = workflow::workflow_retry(&mut conn, &self.options.config, id).await;
        conn.done(result)
    }

    async fn job_get(&self, id: JobId) -> Result<Job, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::job_get(&mut conn, id).await;
        conn.done(result)
    }

    async fn jobs_list(&self, query: ListJobs) -> Result<JobPage, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::jobs_list(&mut conn, query).await;
        conn.done(result)
    }

    async fn jobs_claim(&self, claim: ClaimJobs) -> Result<Claimed, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = claim::claim(&mut conn, claim).await;
        conn.done(result)
    }

    async fn jobs_heartbeat(&self, heartbeat: HeartbeatJobs) -> Result<Vec<HeartbeatReply>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = outcome::heartbeat(&mut conn, &self.options.config, heartbeat).await;
        conn.done(result)
    }

    async fn jobs_finish(&self, items: Vec<FinishItem>) -> Result<Vec<FinishReply>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = outcome::finish(&mut conn, &self.options.config, items).await;
        let finished = conn.done(result)?;
        if !finished.freed_queues.is_empty() {
            // Jobs a max_running bound held may be claimable now (finish.sql, freed_queue).
            self.notifier
                .notify(finished.freed_queues.iter().map(String::as_str));
        }
        Ok(finished.replies)
    }

    async fn job_cancel(&self, id: JobId) -> Result<CancelOutcome, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = lifecycle::cancel(&mut conn, id).await;
        conn.done(result)
    }

    async fn job_retry(&self, id: JobId) -> Result<Job, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = lifecycle::retry(&mut conn, &self.options.config, id).await;
        conn.done(result)
    }

    async fn job_requeue(&self, id: JobId) -> Result<RequeueOutcome, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = lifecycle::requeue(&mut conn, id).await;
        conn.done(result)
    }

    async fn job_delete(&self, id: JobId) -> Result<Job, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = lifecycle::delete(&mut conn, id).await;
        conn.done(result)
    }

    async fn jobs_rescue_expired(&self, rescue: RescueExpired) -> Result<Vec<Rescued>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = lifecycle::rescue(&mut conn, rescue).await;
        conn.done(result)
    }

    async fn jobs_claim_reconciling(&self, claim: ClaimReconciling) -> Result<Vec<Job>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = lifecycle::claim_reconciling(&mut conn, claim).await;
        conn.done(result)
    }

    async fn job_reconcile(
        &self,
        id: JobId,
        token: FencingToken,
        resolution: Resolution,
    ) -> Result<Transition, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = lifecycle::reconcile(&mut conn, id, token, resolution).await;
        conn.done(result)
    }

    async fn jobs_prune(&self, prune: PruneJobs) -> Result<u64, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = lifecycle::prune(&mut conn, prune).await;
        conn.done(result)
    }

    async fn queue_pause(&self, queue: QueueName) -> Result<QueueChange, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::queue_pause(&mut conn, queue).await;
        conn.done(result)
    }

    async fn queue_resume(&self, queue: QueueName) -> Result<QueueChange, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::queue_resume(&mut conn, queue).await;
        conn.done(result)
    }

    async fn queues_list(&self) -> Result<Vec<QueueInfo>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::queues_list(&mut conn).await;
        conn.done(result)
    }

    async fn queue_snapshot(&self) -> Result<Snapshot, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::snapshot(&mut conn).await;
        conn.done(result)
    }

    async fn vacuum_status(&self) -> Result<Option<VacuumStatus>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::vacuum_status(&mut conn).await.map(Some);
        conn.done(result)
    }

    async fn worker_register(&self, worker: WorkerRegistration) -> Result<WorkerInfo, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::worker_register(&mut conn, worker).await;
        conn.done(result)
    }

    async fn worker_heartbeat(&self, id: WorkerId) -> Result<(), Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::worker_heartbeat(&mut conn, id).await;
        conn.done(result)
    }

    async fn activity_record(&self, activity: Vec<ActivityMinute>) -> Result<(), Error> {
        ActivityMinute::validate_all(&activity)?;
        if activity.is_empty() {
            return Ok(());
        }
        let mut conn = self.connections.acquire().await?;
        let result = admin::activity_record(&mut conn, activity).await;
        conn.done(result)
    }

    async fn activity_list(&self, query: ListActivity) -> Result<Vec<ActivityMinute>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::activity_list(&mut conn, query).await;
        conn.done(result)
    }

    async fn worker_deregister(&self, id: WorkerId) -> Result<(), Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::worker_deregister(&mut conn, id).await;
        conn.done(result)
    }

    async fn workers_list(&self) -> Result<Vec<WorkerInfo>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::workers_list(&mut conn).await;
        conn.done(result)
    }

    async fn workers_prune(&self, older_than: Duration) -> Result<u64, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::workers_prune(&mut conn, older_than).await;
        conn.done(result)
    }

    async fn limits_list(&self) -> Result<Vec<LimitStatus>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::limits_list(&mut conn).await;
        conn.done(result)
    }

    async fn limit_set(&self, policy: LimitPolicy) -> Result<LimitPolicy, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::limit_set(&mut conn, policy).await;
        conn.done(result)
    }

    async fn limit_clear(&self, key: LimitKey) -> Result<(), Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::limit_clear(&mut conn, key).await;
        conn.done(result)
    }

    async fn schedules_list(&self) -> Result<Vec<Schedule>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::schedules_list(&mut conn).await;
        conn.done(result)
    }

    async fn schedule_upsert(&self, schedule: NewSchedule) -> Result<ScheduleUpsert, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::schedule_upsert(&mut conn, &self.options.config, schedule).await;
        conn.done(result)
    }

    async fn schedule_remove(&self, name: ScheduleName) -> Result<(), Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::schedule_remove(&mut conn, name).await;
        conn.done(result)
    }

    /// One transaction: consume the tick (schedule_fire.sql), then enqueue the job on the same
    /// connection; an enqueue error rolls back, so the tick is not consumed.
    async fn schedule_fire(&self, fire: FireSchedule) -> Result<Option<Enqueued>, Error> {
        let config = &self.options.config;
        let FireSchedule {
            name,
            created_at,
            tick,
            job,
        } = fire;
        let batch = Batch::prepare(vec![job], config)?;
        let mut conn = self.connections.acquire().await?;
        let result = match Connection::begin(&mut *conn).await.store_err() {
            Ok(mut tx) => {
                let result = fire_in(&mut tx, config, &name, created_at, tick, batch).await;
                settle(tx, result).await
            }
            Err(error) => Err(error),
        };
        let fired = conn.done(result)?;
        Ok(fired.map(|(answer, ready_queues)| {
            self.notifier
                .notify(ready_queues.iter().map(String::as_str));
            answer
        }))
    }

    async fn operate(&self, operation: Operation, actor: Actor) -> Result<Operated, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = audit::operate(&mut conn, &self.options.config, operation, actor).await;
        conn.done(result)
    }

    async fn audit_list(&self, query: ListAudit) -> Result<AuditPage, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = audit::audit_list(&mut conn, query).await;
        conn.done(result)
    }

    async fn audit_prune(&self, prune: PruneAudit) -> Result<u64, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = audit::audit_prune(&mut conn, prune).await;
        conn.done(result)
    }

    async fn now(&self) -> Result<DateTime<Utc>, Error> {
        let mut conn = self.connections.acquire().await?;
        let result = admin::now(&mut conn).await;
        conn.done(result)
    }

    async fn check_ready(&self) -> Result<(), Error> {
        migrate::check_current(&self.pool).await
    }

    async fn subscribe(&self) -> Result<EventStream, Error> {
        if !self.options.listen {
            return Ok(Box::pin(futures::stream::pending()));
        }
        listen::subscribe(&self.pool).await
    }

    fn config(&self) -> StoreConfig {
        self.options.config
    }
}

/// Consumes the tick and enqueues its job on `conn` (inside the caller's transaction); returns
/// the answer and the queues to notify once committed. A tick that was already consumed, or of
/// a timing changed since `created_at` (or a missing schedule), is reported as an error-free
/// `None` (or `NotFound`) after nothing was written.
async fn fire_in(
    conn: &mut PgConnection,
    config: &StoreConfig,
    name: &ScheduleName,
    created_at: DateTime<Utc>,
    tick: DateTime<Utc>,
    batch: Batch,
) -> Result<Option<(Enqueued, Vec<String>)>, Error> {
    let (exists, fired): (bool, bool) = sqlx::query_as(sql::SCHEDULE_FIRE)
        .bind(name.as_str())
        .bind(drover_core::clock::stored_instant(tick))
        .bind(drover_core::clock::stored_instant(created_at))
        .fetch_one(&mut *conn)
        .await
        .store_err()?;
    if !fired {
        if !exists {
            return Err(Error::NotFound {
                entity: drover_core::error::Entity::Schedule,
                id: name.to_string(),
            });
        }
        return Ok(None);
    }
    let mut enqueue = enqueue::enqueue(conn, config, batch, Wake::AfterCommit).await?;
    let answer = enqueue
        .answers
        .pop()
        .ok_or_else(|| Error::fatal("store answered an enqueue with no job"))?;
    Ok(Some((answer, enqueue.ready_queues)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: T) {}

    /// The public async functions are `Send` for every lifetime, so they work inside
    /// `tokio::spawn` and `async_trait` methods.
    #[allow(dead_code)]
    fn futures_are_send(store: &PgStore, conn: &mut PgConnection) {
        assert_send(PgStore::connect("postgres://x", PgOptions::default()));
        assert_send(store.enqueue_in(conn, Vec::new()));
        assert_send(store.migrate());
        assert_send(store.close());
    }
}

//! The runner suite (docs/design.md section 6): the worker runtime of `drover-runner` driven end to end against
//! every store, one `pub async fn runner_<behaviour>(&dyn StoreFactory)` per behaviour, stamped
//! per store by [`crate::runner_suite!`] like the contract suite.
//!
//! Each case opens a fresh store, runs real [`Worker`]s on it and asserts what the store shows.
//! A worker gets its store from [`Harness::another_store`], as a separate worker process would
//! (PostgreSQL: its own connection pool and LISTEN connection); the case itself enqueues and
//! reads through [`Harness::store`], like the application. Time moves only through
//! [`Harness::advance`] (or [`Harness::advance_to`] for cron ticks); nothing sleeps to
//! synchronise: cases await channels and notifications, or poll the store for an observable
//! state with a deadline ([`WAIT`]). Times are compared as differences of stored instants or
//! bracketed by the store's `now()`, because PostgreSQL's clock keeps running.
//!
//! Memory-only behaviours that need absolute wall-clock dates (cron across daylight-saving
//! changes) stay in `crates/runner/tests/memory_store.rs`.

mod lease;
mod maintenance;
mod outcomes;
mod pools;
mod prefetch;
mod run;
mod shutdown;
mod workflows;

pub use lease::*;
pub use maintenance::*;
pub use outcomes::*;
pub use pools::*;
pub use prefetch::*;
pub use run::*;
pub use shutdown::*;
pub use workflows::*;

use std::sync::Arc;
use std::time::Duration;

use drover_core::{Backoff, Error, Job, JobId, JobState, JobStore, ListJobs, NewJob, WorkerId};
use drover_runner::{Client, KindConfig, Registry, Worker, WorkerConfig, WorkerReport};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cases::unbounded;
use crate::{Harness, StoreFactory};

/// How long a case waits for an event or an observable state before it fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// How often a case polls the store while waiting for a state.
const POLL: Duration = Duration::from_millis(5);

/// One store under test with the helpers the runner cases share.
pub struct Rig {
    /// The harness of the store.
    pub h: Box<dyn Harness>,
    /// The application's handle on the store (workers get their own).
    pub store: Arc<dyn JobStore>,
}

impl Rig {
    /// A fresh store with quotas off.
    pub async fn open(f: &dyn StoreFactory) -> Rig {
        let h = f.open(unbounded()).await;
        let store = h.store();
        Rig { h, store }
    }

    /// A client on the application's handle.
    pub fn client(&self) -> Client {
        Client::new(Arc::clone(&self.store))
    }

    /// Enqueues `job` through a [`Client`]; returns its id.
    pub async fn enqueue(&self, job: NewJob) -> JobId {
        self.client().enqueue(job).await.expect("enqueue").job.id
    }

    /// The job as stored now.
    pub async fn job(&self, id: JobId) -> Job {
        self.store.job_get(id).await.expect("get job")
    }

    /// The store's clock.
    pub async fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.store.now().await.expect("store clock")
    }

    /// Jobs matching `query` (one page).
    pub async fn list(&self, query: ListJobs) -> Vec<Job> {
        self.store.jobs_list(query).await.expect("list").jobs
    }

    /// Reads with `read` until `done` holds for its answer (no event exists for "the store now
    /// shows X"); fails after [`WAIT`] naming `what` and showing the last answer.
    async fn poll<T: std::fmt::Debug, F: std::future::Future<Output = T>>(
        &self,
        what: &str,
        mut read: impl FnMut() -> F,
        done: impl Fn(&T) -> bool,
    ) -> T {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let answer = read().await;
            if done(&answer) {
                return answer;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: timed out waiting for {what}; the store answers {answer:#?}",
                self.h.store_name()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls the job until `done` holds; fails after [`WAIT`] naming `what`.
    pub async fn wait_job(&self, id: JobId, what: &str, done: impl Fn(&Job) -> bool) -> Job {
        self.poll(what, || self.job(id), done).await
    }

    /// Polls the job until it is in `state`.
    pub async fn wait_state(&self, id: JobId, state: JobState) -> Job {
        self.wait_job(id, state.as_str(), |job| job.state == state)
            .await
    }

    /// Polls until `done` holds for the jobs `query` lists; returns them.
    pub async fn wait_list(
        &self,
        query: ListJobs,
        what: &str,
        done: impl Fn(&[Job]) -> bool,
    ) -> Vec<Job> {
        self.poll(what, || self.list(query.clone()), |jobs| done(jobs))
            .await
    }

    /// Polls the activity of the minutes from `since` on until `done` holds for it; returns
    /// it.
    pub async fn wait_activity(
        &self,
        since: chrono::DateTime<chrono::Utc>,
        what: &str,
        done: impl Fn(&[drover_core::ActivityMinute]) -> bool,
    ) -> Vec<drover_core::ActivityMinute> {
        let read = || async {
            self.store
                .activity_list(drover_core::ListActivity { since })
                .await
                .expect("activity")
        };
        self.poll(what, read, |activity| done(activity)).await
    }

    /// A worker on its own handle on the store (another process, for PostgreSQL).
    pub async fn worker(&self, registry: Registry, config: WorkerConfig) -> Worker {
        Worker::new(self.h.another_store().await, Arc::new(registry), config)
            .expect("valid worker configuration")
    }

    /// Builds a worker like [`Rig::worker`] and starts it.
    pub async fn start(&self, registry: Registry, config: WorkerConfig) -> Running {
        Running::spawn(self.worker(registry, config).await)
    }
}

/// A worker running on a task.
pub struct Running {
    shutdown: CancellationToken,
    handle: JoinHandle<Result<WorkerReport, Error>>,
}

impl Running {
    /// Starts `worker`.
    pub fn spawn(worker: Worker) -> Running {
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(worker.run(shutdown.clone()));
        Running { shutdown, handle }
    }

    /// Shuts the worker down gracefully and returns its report; fails after [`WAIT`].
    pub async fn stop(self) -> WorkerReport {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.handle)
            .await
            .expect("worker stops in time")
            .expect("worker task")
            .expect("worker run")
    }
}

/// The worker configuration of the cases: worker id `id`, one pool of 8 slots on queue
/// `default`, lease 30 s with heartbeats every 50 ms, a 10 ms poll (time moved by `advance`
/// sends no event, so a job made ready that way is found by the poll), maintenance every hour
/// (a case that needs a service shortens its interval; with no start delay each service also
/// runs once at start),
/// shutdown grace 10 s, cancel grace 5 s.
pub fn config(id: &str) -> WorkerConfig {
    let mut config = WorkerConfig::default();
    config.worker_id = WorkerId::parse(id).expect("valid worker id");
    config.heartbeat_interval = Duration::from_millis(50);
    config.lease = Duration::from_secs(30);
    config.poll_interval = Duration::from_millis(10);
    config.rescue_interval = Duration::from_secs(3600);
    config.reconcile_interval = Duration::from_secs(3600);
    config.schedule_interval = Duration::from_secs(3600);
    config.prune_interval = Duration::from_secs(3600);
    config.maintenance_start_delay = Duration::ZERO;
    config.shutdown_grace = Duration::from_secs(10);
    config.cancel_grace = Duration::from_secs(5);
    config.store_retry_min = Duration::from_millis(5);
    config.store_retry_max = Duration::from_millis(50);
    config
}

/// Exponential backoff from `base_secs` without jitter, so retry times are exact.
pub fn no_jitter(base_secs: u64) -> KindConfig {
    KindConfig::default().with_backoff(Backoff {
        base: Duration::from_secs(base_secs),
        cap: Duration::from_secs(3600),
        jitter: 0.0,
    })
}

/// How long after its latest recorded error a queued job becomes ready (the retry delay:
/// both instants come from one reading of the store's clock).
pub fn delay_after_last_error(job: &Job) -> chrono::Duration {
    let error = job.errors.last().expect("the job has an error");
    job.run_at - error.at
}

/// Awaits `future` for at most [`WAIT`], failing with `what`.
pub async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(WAIT, future).await {
        Ok(out) => out,
        Err(_) => panic!("timed out: {what}"),
    }
}

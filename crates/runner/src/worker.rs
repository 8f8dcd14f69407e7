//! [`Worker`]: builds the services of one worker process from a validated [`WorkerConfig`]
//! and runs them until shutdown (docs/design.md section 6).
//!
//! `run` registers the worker, then starts the completer, the heartbeat loop, the event
//! dispatcher, one claim loop per queue of each pool and the maintenance services. When the
//! shutdown token fires it stops claiming at once, lets running jobs finish within the grace
//! period, then fires the tokens of the rest (they are released without spending an attempt
//! unless the handler still succeeds; a handler that ignores its token is aborted after the
//! cancel grace), waits for every outcome to be written, deregisters and returns. A fatal
//! store error takes the same path without the grace period and is returned.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use drover_core::{Error, JobStore, QueueName, WorkerId};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backlog::Backlog;
use crate::completer::run_completer;
use crate::config::WorkerConfig;
use crate::config::VACUUM_CHECK_INTERVAL;
use crate::executor::Starter;
use crate::health::{classify, ErrorClass, RetryDelay};
use crate::heartbeat::run_heartbeat;
use crate::maintenance::{cleaner, periodic, reconcile, rescuer, scheduler, vacuum};
use crate::metrics::{Metrics, NoopMetrics, TransitionEvent, TransitionHook};
use crate::producer::{run_claim_loop, run_events, ClaimLoop};
use crate::registry::Registry;
use crate::running::CancelReason;
use crate::runtime::{Runtime, WorkerReport};

/// A worker process: pools of slots claiming and running jobs, plus maintenance.
pub struct Worker {
    store: Arc<dyn JobStore>,
    registry: Arc<Registry>,
    config: WorkerConfig,
    metrics: Arc<dyn Metrics>,
    hook: Option<TransitionHook>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker on `store` running the handlers of `registry`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] from [`WorkerConfig::validate`].
    pub fn new(
        store: Arc<dyn JobStore>,
        registry: Arc<Registry>,
        config: WorkerConfig,
    ) -> Result<Self, Error> {
        config.validate(&registry)?;
        Ok(Worker {
            store,
            registry,
            config,
            metrics: Arc::new(NoopMetrics),
            hook: None,
        })
    }

    /// Reports to `metrics` (default: [`NoopMetrics`]).
    pub fn metrics(mut self, metrics: Arc<dyn Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Calls `hook` for every transition this worker causes or observes (claim, finish,
    /// rescue, reconcile). It runs on the worker's tasks: keep it quick and non-blocking.
    pub fn on_transition(
        mut self,
        hook: impl Fn(&TransitionEvent) + Send + Sync + 'static,
    ) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// This worker's id (the lease owner of its jobs).
    pub fn id(&self) -> &WorkerId {
        &self.config.worker_id
    }

    /// The configuration.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Runs until `shutdown` fires, then shuts down gracefully (see the module doc) and
    /// returns what the worker did. The caller closes the store after this returns.
    ///
    /// # Errors
    /// The first [`Error::Fatal`] from the store (e.g. schema missing: its message says what
    /// to do), or another error that makes claiming impossible; the worker has stopped and
    /// written what it could when this returns.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport, Error> {
        let rt = Arc::new(Runtime::new(
            self.store,
            self.registry,
            self.config,
            self.metrics,
            self.hook,
        ));
        if !register(&rt, &shutdown).await? {
            return Ok(rt.report());
        }
        tracing::info!(
            worker_id = %rt.config.worker_id,
            pools = rt.config.pools.len(),
            max_running = rt.config.max_running(),
            "worker started"
        );

        let stop_claims = CancellationToken::new();
        let stop_maintenance = CancellationToken::new();
        let stop_background = CancellationToken::new();
        let tracker = TaskTracker::new();
        let (completer_tx, completer_rx) = tokio::sync::mpsc::unbounded_channel();
        let completer = tokio::spawn(run_completer(Arc::clone(&rt), completer_rx));
        let heartbeat = tokio::spawn(run_heartbeat(Arc::clone(&rt), stop_background.clone()));

        // Kept until the jobs still waiting for a slot at shutdown are released.
        let release_sender = completer_tx.clone();
        let starter = Starter {
            tracker: tracker.clone(),
            completer: completer_tx,
            stop_claims: Arc::new(stop_claims.clone()),
        };
        let global = rt
            .config
            .max_concurrent
            .map(|cap| Arc::new(Semaphore::new(cap)));
        let mut wakers: BTreeMap<QueueName, Vec<Arc<Notify>>> = BTreeMap::new();
        let mut claim_loops = Vec::new();
        let mut backlogs = Vec::new();
        let registered = rt.registry.kinds();
        for pool in &rt.config.pools {
            let prefetch = pool.prefetch_per_queue();
            for queue in &pool.queues {
                let kinds = rt.config.kinds_to_claim(pool, queue, &registered);
                let wake = Arc::new(Notify::new());
                wakers
                    .entry(queue.clone())
                    .or_default()
                    .push(Arc::clone(&wake));
                let slots = Arc::new(Semaphore::new(pool.slots_per_queue));
                let last_run_us = Arc::new(AtomicU64::new(u64::MAX));
                let ahead = (prefetch > 0).then(|| {
                    let backlog =
                        Arc::new(Backlog::new(Arc::clone(&slots), Arc::clone(&last_run_us)));
                    backlogs.push(Arc::clone(&backlog));
                    (Arc::new(Semaphore::new(prefetch)), backlog)
                });
                let spec = ClaimLoop {
                    pool: pool.name.clone(),
                    queue: queue.clone(),
                    kinds,
                    slots,
                    max_batch: pool.slots_per_queue,
                    ahead,
                    prefetch,
                    last_run_us,
                    wake,
                };
                claim_loops.push(tokio::spawn(run_claim_loop(
                    Arc::clone(&rt),
                    spec,
                    global.clone(),
                    starter.clone(),
                    stop_claims.clone(),
                )));
            }
        }
        rt.backlogs.set(backlogs, &release_sender);
        drop(starter);
        let events = tokio::spawn(run_events(Arc::clone(&rt), wakers, stop_background.clone()));
        let maintenance = spawn_maintenance(&rt, &stop_maintenance);

        let fatal = tokio::select! {
            () = shutdown.cancelled() => false,
            () = rt.fatal.fired() => true,
        };
        tracing::info!(
            running = rt.running.len(),
            fatal,
            "worker stopping: no new claims"
        );
        stop_claims.cancel();
        // No claims follow, so the bound on unwritten outcomes has done its work: runs that
        // wait for room hand their outcome over at once (with the store down, waiting would
        // hold the shutdown until it returned, and the flush timeout would never start).
        rt.unwritten_room.close();
        // No job starts any more: those waiting for a slot are released at once, without
        // spending an attempt (a claim still in flight releases its own, and tasks whose job
        // finishes from now on release any they find).
        rt.backlogs.release_all(&rt, &release_sender);
        drop(release_sender);
        stop_maintenance.cancel();
        join_all("claim loop", claim_loops).await;

        tracker.close();
        let grace = if fatal {
            std::time::Duration::ZERO
        } else {
            rt.config.shutdown_grace
        };
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            tracing::info!(
                running = tracker.len(),
                "grace period over: cancelling the remaining jobs; they are released without spending an attempt"
            );
            rt.running.cancel_all(CancelReason::Shutdown);
            tracker.wait().await;
        }
        // Every handler has stopped: outcomes the store keeps refusing transiently are given
        // up after the flush timeout from here.
        rt.begin_flush_deadline();
        if let Err(error) = completer.await {
            tracing::error!(error = %error, "completer task failed");
        }
        join_all("maintenance", maintenance).await;
        stop_background.cancel();
        join_all("background", vec![heartbeat, events]).await;
        // The last runs' activity, which no heartbeat will carry now.
        let limit = rt.config.heartbeat_interval;
        let _ = tokio::time::timeout(limit, rt.activity.send(&*rt.store)).await;
        deregister(&rt).await;
        tracing::info!(worker_id = %rt.config.worker_id, "worker stopped");
        match rt.fatal.take() {
            Some(error) => Err(error),
            None => Ok(rt.report()),
        }
    }
}

/// Registers the worker, retrying transient errors until `shutdown` fires. `Ok(false)` when
/// shutdown fired first.
async fn register(rt: &Runtime, shutdown: &CancellationToken) -> Result<bool, Error> {
    let mut retry = RetryDelay::new(rt.config.store_retry_min, rt.config.store_retry_max);
    loop {
        match rt.store.worker_register(rt.registration()).await {
            Ok(_) => return Ok(true),
            Err(error) => match classify(&error) {
                ErrorClass::Transient => {
                    let delay = retry.next_delay();
                    tracing::warn!(error = %error, retry_in_ms = delay.as_millis() as u64, "registering the worker failed; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return Ok(false),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                _ => return Err(error),
            },
        }
    }
}

/// Removes the worker's registration, best effort (one retry on a transient error).
async fn deregister(rt: &Runtime) {
    for attempt in 0..2 {
        match rt
            .store
            .worker_deregister(rt.config.worker_id.clone())
            .await
        {
            Ok(()) => return,
            Err(error) if attempt == 0 && error.is_transient() => {
                tokio::time::sleep(rt.config.store_retry_min).await;
            }
            Err(error) => {
                tracing::warn!(error = %error, "deregistering the worker failed; it will be pruned as stale");
                return;
            }
        }
    }
}

fn spawn_maintenance(rt: &Arc<Runtime>, stop: &CancellationToken) -> Vec<JoinHandle<()>> {
    let config = &rt.config;
    let mut tasks = vec![
        tokio::spawn(periodic(
            Arc::clone(rt),
            "rescuer",
            config.rescue_interval,
            stop.clone(),
            rescuer::rescue_pass,
        )),
        tokio::spawn(periodic(
            Arc::clone(rt),
            "scheduler",
            config.schedule_interval,
            stop.clone(),
            scheduler::schedule_pass,
        )),
        tokio::spawn(periodic(
            Arc::clone(rt),
            "cleaner",
            config.prune_interval,
            stop.clone(),
            cleaner::clean_pass,
        )),
    ];
    if config.transaction_age_warning.is_some() || config.dead_rows_warning.is_some() {
        let watch = Arc::new(parking_lot::Mutex::new(vacuum::VacuumWatch::default()));
        tasks.push(tokio::spawn(periodic(
            Arc::clone(rt),
            "vacuum watch",
            VACUUM_CHECK_INTERVAL,
            stop.clone(),
            move |rt, stop| vacuum::vacuum_pass(rt, Arc::clone(&watch), stop),
        )));
    }
    if !rt.registry.reconciler_kinds().is_empty() {
        tasks.push(tokio::spawn(periodic(
            Arc::clone(rt),
            "reconcile",
            config.reconcile_interval,
            stop.clone(),
            reconcile::reconcile_pass,
        )));
    }
    tasks
}

async fn join_all(what: &str, tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        if let Err(error) = task.await {
            tracing::error!(error = %error, "{what} task failed");
        }
    }
}

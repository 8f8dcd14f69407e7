//! The state one running [`crate::Worker`] shares between its tasks: the store, registry and
//! configuration, observability hooks, the running-jobs map, store health, the fatal-error
//! slot and the counters behind [`WorkerReport`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use drover_core::{Job, JobKind, JobState, JobStore, QueueName, WorkerId, WorkerRegistration};

use crate::activity::ActivityTally;
use crate::backlog::Backlogs;
use crate::config::WorkerConfig;
use crate::context::Links;
use crate::health::{FatalSlot, Health};
use crate::metrics::{JobOutcome, Metrics, TransitionEvent, TransitionHook};
use crate::registry::Registry;
use crate::running::{HeartbeatNudge, RunningJobs};

/// What a worker did between `run` and its return.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// The worker's id.
    pub worker_id: WorkerId,
    /// Jobs claimed.
    pub claimed: u64,
    /// Runs recorded as succeeded.
    pub succeeded: u64,
    /// Runs recorded as failed with attempts left (queued again).
    pub retried: u64,
    /// Runs recorded as failed for good.
    pub failed: u64,
    /// Runs recorded as cancelled.
    pub cancelled: u64,
    /// Runs recorded as snoozed.
    pub snoozed: u64,
    /// Runs given back at shutdown without spending an attempt.
    pub released: u64,
    /// Runs that ended waiting for their children (no attempt spent).
    pub waiting: u64,
    /// Runs whose lease was lost: nothing written (heartbeat or write answered `LeaseLost`).
    pub lease_lost: u64,
    /// Outcomes that could not be written (store down past the flush timeout, or refused);
    /// their leases expire and the jobs are rescued.
    pub unwritten: u64,
    /// Expired leases rescued by this worker's rescuer.
    pub rescued: u64,
    /// Reconciling jobs resolved (succeeded or failed) by this worker's reconcile sweep.
    pub reconciled: u64,
    /// Cron ticks this worker fired (jobs enqueued by schedules).
    pub schedules_fired: u64,
    /// Terminal jobs deleted by this worker's retention pruning.
    pub pruned: u64,
}

impl std::fmt::Display for WorkerReport {
    /// One line for people: `worker w1: claimed 10, succeeded 8, retried 1, ...`; counters
    /// of maintenance work are shown only when not zero.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "worker {}: claimed {}, succeeded {}, retried {}, failed {}, cancelled {}, snoozed {}, released {}, lease lost {}",
            self.worker_id,
            self.claimed,
            self.succeeded,
            self.retried,
            self.failed,
            self.cancelled,
            self.snoozed,
            self.released,
            self.lease_lost
        )?;
        for (name, value) in [
            ("waiting for children", self.waiting),
            ("unwritten", self.unwritten),
            ("rescued", self.rescued),
            ("reconciled", self.reconciled),
            ("schedule ticks fired", self.schedules_fired),
            ("pruned", self.pruned),
        ] {
            if value > 0 {
                write!(f, ", {name} {value}")?;
            }
        }
        Ok(())
    }
}

/// Counters behind [`WorkerReport`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) claimed: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) snoozed: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) waiting: AtomicU64,
    pub(crate) lease_lost: AtomicU64,
    pub(crate) unwritten: AtomicU64,
    pub(crate) rescued: AtomicU64,
    pub(crate) reconciled: AtomicU64,
    pub(crate) schedules_fired: AtomicU64,
    pub(crate) pruned: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Everything the tasks of one worker share.
pub(crate) struct Runtime {
    pub(crate) store: Arc<dyn JobStore>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) config: WorkerConfig,
    pub(crate) metrics: Arc<dyn Metrics>,
    pub(crate) hook: Option<TransitionHook>,
    pub(crate) running: RunningJobs,
    pub(crate) health: Health,
    pub(crate) fatal: FatalSlot,
    pub(crate) nudge: Arc<HeartbeatNudge>,
    pub(crate) counters: Counters,
    /// The runs ended since the last registration heartbeat, per minute and queue.
    pub(crate) activity: ActivityTally,
    /// The jobs claimed ahead, waiting for a slot (set when the claim loops are built).
    pub(crate) backlogs: Backlogs,
    /// The store's meta size bound, in bytes.
    pub(crate) max_meta_bytes: usize,
    /// The store's result size bound, in bytes.
    pub(crate) max_result_bytes: usize,
    /// What every job context reaches: the store and the metrics.
    pub(crate) links: Arc<Links>,
    /// Room for outcomes handed to the completer and not yet recorded
    /// ([`WorkerConfig::unwritten_max`]): a run whose outcome finds none waits, holding its
    /// slot, so a store that writes slower than handlers finish slows the claims instead of
    /// piling up runs whose leases must all be kept.
    pub(crate) unwritten_room: Arc<tokio::sync::Semaphore>,
    /// Set when shutdown begins: the completer gives up transient retries after it.
    flush_deadline: OnceLock<Instant>,
}

impl Runtime {
    pub(crate) fn new(
        store: Arc<dyn JobStore>,
        registry: Arc<Registry>,
        config: WorkerConfig,
        metrics: Arc<dyn Metrics>,
        hook: Option<TransitionHook>,
    ) -> Self {
        let sizes = store.config().sizes;
        let links = Arc::new(Links {
            store: Arc::clone(&store),
            metrics: Arc::clone(&metrics),
        });
        let unwritten_room = Arc::new(tokio::sync::Semaphore::new(config.unwritten_max()));
        Runtime {
            links,
            unwritten_room,
            store,
            registry,
            config,
            metrics,
            hook,
            running: RunningJobs::default(),
            health: Health::new(),
            fatal: FatalSlot::default(),
            nudge: Arc::new(HeartbeatNudge::new()),
            counters: Counters::default(),
            activity: ActivityTally::default(),
            backlogs: Backlogs::default(),
            max_meta_bytes: sizes.max_meta_bytes,
            max_result_bytes: sizes.max_result_bytes,
            flush_deadline: OnceLock::new(),
        }
    }

    /// The worker's registration in the worker registry.
    pub(crate) fn registration(&self) -> WorkerRegistration {
        WorkerRegistration {
            id: self.config.worker_id.clone(),
            host: crate::config::host_name(),
            pid: std::process::id(),
            queues: self.config.queues(),
        }
    }

    /// Calls the `on_transition` hook, if any.
    pub(crate) fn transition(&self, job: &Job, from: JobState, to: JobState) {
        self.transition_of(job.id, &job.kind, &job.queue, from, to);
    }

    /// Calls the `on_transition` hook, if any, for a job known by id, kind and queue.
    pub(crate) fn transition_of(
        &self,
        job_id: drover_core::JobId,
        kind: &JobKind,
        queue: &QueueName,
        from: JobState,
        to: JobState,
    ) {
        if let Some(hook) = &self.hook {
            hook(&TransitionEvent {
                job_id,
                kind: kind.clone(),
                queue: queue.clone(),
                from,
                to,
            });
        }
    }

    /// Counts and reports a finished run.
    pub(crate) fn finished(&self, job: &Job, outcome: JobOutcome, duration: Duration) {
        let counter = match outcome {
            JobOutcome::Succeeded => &self.counters.succeeded,
            JobOutcome::Retried => &self.counters.retried,
            JobOutcome::Failed => &self.counters.failed,
            JobOutcome::Cancelled => &self.counters.cancelled,
            JobOutcome::Snoozed => &self.counters.snoozed,
            JobOutcome::Released => &self.counters.released,
            JobOutcome::Waiting => &self.counters.waiting,
            JobOutcome::LeaseLost => &self.counters.lease_lost,
        };
        bump(counter, 1);
        self.metrics
            .job_finished(&job.kind, &job.queue, outcome, duration);
    }

    /// Starts the flush deadline (shutdown began).
    pub(crate) fn begin_flush_deadline(&self) {
        let _ = self
            .flush_deadline
            .set(Instant::now() + self.config.flush_timeout);
    }

    /// True when shutdown began and the flush timeout has passed.
    pub(crate) fn flush_deadline_passed(&self) -> bool {
        self.flush_deadline
            .get()
            .is_some_and(|deadline| Instant::now() >= *deadline)
    }

    /// The report of the counters so far.
    pub(crate) fn report(&self) -> WorkerReport {
        let c = &self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        WorkerReport {
            worker_id: self.config.worker_id.clone(),
            claimed: get(&c.claimed),
            succeeded: get(&c.succeeded),
            retried: get(&c.retried),
            failed: get(&c.failed),
            cancelled: get(&c.cancelled),
            snoozed: get(&c.snoozed),
            released: get(&c.released),
            waiting: get(&c.waiting),
            lease_lost: get(&c.lease_lost),
            unwritten: get(&c.unwritten),
            rescued: get(&c.rescued),
            reconciled: get(&c.reconciled),
            schedules_fired: get(&c.schedules_fired),
            pruned: get(&c.pruned),
        }
    }
}

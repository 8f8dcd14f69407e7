//! Observability hooks (docs/design.md sections 6 and 7): the [`Metrics`] trait with no-op
//! defaults, and [`TransitionEvent`]s delivered to an `on_transition` hook for every state
//! change the runner causes or observes (claim, finish, rescue, reconcile).
//!
//! Labels are kinds, queues, states and outcome names only: never args, results or tenant
//! secrets.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobId, JobKind, JobState, QueueName};

/// How a run of a job ended, as counted by [`Metrics::job_finished`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobOutcome {
    /// Recorded as succeeded.
    Succeeded,
    /// Recorded as a failure with attempts left: queued again after the backoff.
    Retried,
    /// Recorded as failed (attempts spent, or discarded).
    Failed,
    /// Recorded as cancelled.
    Cancelled,
    /// Recorded as snoozed: queued again without spending an attempt.
    Snoozed,
    /// Given back at shutdown without spending an attempt.
    Released,
    /// Waiting for its children without a lease or a slot, no attempt spent
    /// ([`crate::Outcome::WaitForChildren`]): neither a success nor a failure.
    Waiting,
    /// The lease was lost: nothing was written for this run.
    LeaseLost,
}

impl JobOutcome {
    /// Every outcome, in declaration order (a new outcome goes here and in
    /// [`JobOutcome::index`], whose match the compiler checks).
    pub const ALL: [JobOutcome; 8] = [
        JobOutcome::Succeeded,
        JobOutcome::Retried,
        JobOutcome::Failed,
        JobOutcome::Cancelled,
        JobOutcome::Snoozed,
        JobOutcome::Released,
        JobOutcome::Waiting,
        JobOutcome::LeaseLost,
    ];

    /// The outcome's position in [`JobOutcome::ALL`].
    pub fn index(self) -> usize {
        match self {
            JobOutcome::Succeeded => 0,
            JobOutcome::Retried => 1,
            JobOutcome::Failed => 2,
            JobOutcome::Cancelled => 3,
            JobOutcome::Snoozed => 4,
            JobOutcome::Released => 5,
            JobOutcome::Waiting => 6,
            JobOutcome::LeaseLost => 7,
        }
    }

    /// A lowercase label: `succeeded`, `retried`, `failed`, `cancelled`, `snoozed`,
    /// `released`, `waiting`, `lease_lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobOutcome::Succeeded => "succeeded",
            JobOutcome::Retried => "retried",
            JobOutcome::Failed => "failed",
            JobOutcome::Cancelled => "cancelled",
            JobOutcome::Snoozed => "snoozed",
            JobOutcome::Released => "released",
            JobOutcome::Waiting => "waiting",
            JobOutcome::LeaseLost => "lease_lost",
        }
    }
}

impl fmt::Display for JobOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counters and timings of the runner. Every method has a no-op default; implementations must
/// be cheap and non-blocking (they are called on the hot path) and safe for concurrent use.
///
/// Kinds and queues come from whoever enqueued the job (and a rescue reports other workers'
/// kinds): an implementation that turns them into metric labels should bound them, as
/// `drover_http::ProcessMetrics` does (kinds this process registers, the rest as one value).
pub trait Metrics: Send + Sync + 'static {
    /// A job was enqueued (a new job stored, not a replay or duplicate) through
    /// [`crate::Client`] or by a cron schedule.
    fn job_enqueued(&self, kind: &JobKind, queue: &QueueName) {
        let _ = (kind, queue);
    }

    /// A claimed job's handler started.
    fn job_started(&self, kind: &JobKind, queue: &QueueName) {
        let _ = (kind, queue);
    }

    /// A claimed job's handler started `wait` after the job became runnable: its `run_at`, or
    /// its enqueue when that came later, to its claim (store clock; a job claimed ahead also
    /// waited in the worker's backlog, which is not counted).
    fn job_queue_wait(&self, kind: &JobKind, queue: &QueueName, wait: Duration) {
        let _ = (kind, queue, wait);
    }

    /// A run ended; `duration` is the handler's run time (claim-to-write time is not included).
    fn job_finished(
        &self,
        kind: &JobKind,
        queue: &QueueName,
        outcome: JobOutcome,
        duration: Duration,
    ) {
        let _ = (kind, queue, outcome, duration);
    }

    /// A job whose lease expired was rescued to `to` (queued, failed, reconciling or
    /// cancelled) by this process's rescuer.
    fn job_rescued(&self, kind: &JobKind, queue: &QueueName, to: JobState) {
        let _ = (kind, queue, to);
    }

    /// A parent of `kind` observed a child that ended `failed` or `cancelled` when it ran
    /// again after waiting for its children: once per such child and run of the parent
    /// (docs/design.md section 10).
    fn child_failed(&self, kind: &JobKind) {
        let _ = kind;
    }

    /// The rollback hook of `kind` ran instead of its handler because a child failed
    /// ([`crate::Registry::register_rollback`]).
    fn rollback(&self, kind: &JobKind) {
        let _ = kind;
    }
}

/// Metrics that record nothing (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetrics;

impl Metrics for NoopMetrics {}

/// One state change the runner caused or observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionEvent {
    /// The job.
    pub job_id: JobId,
    /// Its kind.
    pub kind: JobKind,
    /// Its queue.
    pub queue: QueueName,
    /// State before.
    pub from: JobState,
    /// State after.
    pub to: JobState,
}

/// The `on_transition` hook: called synchronously on the runner's tasks, so it must be quick
/// and must not block (hand work to a channel if it is slow).
pub type TransitionHook = Arc<dyn Fn(&TransitionEvent) + Send + Sync + 'static>;

/// Reports every call to each of its metrics in turn (the process's Prometheus counters and
/// its OpenTelemetry instruments, say).
pub struct MetricsFanOut(pub Vec<Arc<dyn Metrics>>);

impl fmt::Debug for MetricsFanOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MetricsFanOut({} metrics)", self.0.len())
    }
}

impl Metrics for MetricsFanOut {
    fn job_enqueued(&self, kind: &JobKind, queue: &QueueName) {
        self.0.iter().for_each(|m| m.job_enqueued(kind, queue));
    }

    fn job_started(&self, kind: &JobKind, queue: &QueueName) {
        self.0.iter().for_each(|m| m.job_started(kind, queue));
    }

    fn job_queue_wait(&self, kind: &JobKind, queue: &QueueName, wait: Duration) {
        self.0
            .iter()
            .for_each(|m| m.job_queue_wait(kind, queue, wait));
    }

    fn job_finished(
        &self,
        kind: &JobKind,
        queue: &QueueName,
        outcome: JobOutcome,
        duration: Duration,
    ) {
        self.0
            .iter()
            .for_each(|m| m.job_finished(kind, queue, outcome, duration));
    }

    fn job_rescued(&self, kind: &JobKind, queue: &QueueName, to: JobState) {
        self.0.iter().for_each(|m| m.job_rescued(kind, queue, to));
    }

    fn child_failed(&self, kind: &JobKind) {
        self.0.iter().for_each(|m| m.child_failed(kind));
    }

    fn rollback(&self, kind: &JobKind) {
        self.0.iter().for_each(|m| m.rollback(kind));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_sits_at_its_index_once() {
        for (at, outcome) in JobOutcome::ALL.iter().enumerate() {
            assert_eq!(outcome.index(), at, "{outcome}");
        }
        let mut labels: Vec<&str> = JobOutcome::ALL.iter().map(|o| o.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), JobOutcome::ALL.len());
    }
}

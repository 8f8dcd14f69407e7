//! [`Client`]: the application's handle for enqueueing jobs and looking at them, wrapping the
//! store and reporting [`Metrics::job_enqueued`] for every new job; for pausing and resuming
//! queues with an answer that says what changed ([`QueueChange`]), which the CLI and the HTTP
//! API both give; and for declaring cron schedules at start-up ([`Client::schedule_upsert`]).

use std::fmt;
use std::sync::Arc;

use drover_core::{
    CancelOutcome, EnqueueStatus, Enqueued, Entity, Error, Job, JobId, JobKind, JobStore, NewJob,
    NewSchedule, QueueChange, QueueName, RequeueOutcome, Schedule, ScheduleName, ScheduleUpsert,
};
use serde::Serialize;

use crate::metrics::{Metrics, NoopMetrics};

/// Enqueues and inspects jobs. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    store: Arc<dyn JobStore>,
    metrics: Arc<dyn Metrics>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// A client on `store` with no-op metrics.
    pub fn new(store: Arc<dyn JobStore>) -> Self {
        Client {
            store,
            metrics: Arc::new(NoopMetrics),
        }
    }

    /// Reports enqueues to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Enqueues one job; see [`JobStore::jobs_enqueue`] for idempotency and unique keys.
    ///
    /// # Errors
    /// Those of [`JobStore::jobs_enqueue`]: `InvalidInput`, `Conflict`, `QuotaExceeded`,
    /// `Unavailable`, `Fatal`.
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued, Error> {
        let enqueued = self.store.job_enqueue(job).await?;
        self.report(std::slice::from_ref(&enqueued));
        Ok(enqueued)
    }

    /// Enqueues a job of `kind` with `args` serialized to JSON and every other field at its
    /// default (queue `default`, 3 attempts, ready at once).
    ///
    /// # Errors
    /// `InvalidInput` with field `args` when they do not serialize to JSON; then those of
    /// [`Client::enqueue`].
    pub async fn enqueue_args(
        &self,
        kind: JobKind,
        args: &impl Serialize,
    ) -> Result<Enqueued, Error> {
        let args = serde_json::to_value(args).map_err(|error| {
            Error::invalid("args", format!("could not be serialized to JSON: {error}"))
        })?;
        self.enqueue(NewJob::new(kind, args)).await
    }

    /// Enqueues a batch atomically (all or nothing); answers per job in input order.
    ///
    /// # Errors
    /// Those of [`JobStore::jobs_enqueue`]; on any error nothing is stored.
    pub async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>, Error> {
        let enqueued = self.store.jobs_enqueue(jobs).await?;
        self.report(&enqueued);
        Ok(enqueued)
    }

    /// Fetches a job.
    ///
    /// # Errors
    /// `NotFound`.
    pub async fn get(&self, id: JobId) -> Result<Job, Error> {
        self.store.job_get(id).await
    }

    /// Cancels a job: queued or reconciling ones end cancelled at once; a running one has its
    /// handler's cancellation token fired (DESIGN.md section 9).
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a finished job.
    pub async fn cancel(&self, id: JobId) -> Result<CancelOutcome, Error> {
        self.store.job_cancel(id).await
    }

    /// Makes a queued job ready now: one scheduled for later, or waiting for a retry's backoff
    /// or a snooze, runs at the next claim (attempts kept) and its queue's workers are woken;
    /// a ready one is left as it is (`changed: false`).
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a running, reconciling or finished job (retry a
    /// finished one).
    pub async fn requeue(&self, id: JobId) -> Result<RequeueOutcome, Error> {
        self.store.job_requeue(id).await
    }

    /// Pauses `queue` cluster-wide (no worker claims from it; running jobs finish), creating
    /// its record if needed, so a queue may be paused before its first job. Pausing a paused
    /// queue changes nothing (it keeps the time it was first paused) and says so.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn queue_pause(&self, queue: QueueName) -> Result<QueueChange, Error> {
        self.store.queue_pause(queue).await
    }

    /// Resumes `queue`. Resuming is idempotent at the store, so a typo would "succeed" and leave
    /// the real queue paused: a queue that is not paused changes nothing and says so, and a
    /// queue nobody has heard of (no jobs, no stored pause) is refused.
    ///
    /// # Errors
    /// `NotFound` (entity queue) for a queue with no jobs that is not paused; `Unavailable`,
    /// `Fatal`.
    pub async fn queue_resume(&self, queue: QueueName) -> Result<QueueChange, Error> {
        let known = self
            .store
            .queues_list()
            .await?
            .into_iter()
            .find(|q| q.name == queue);
        if known.is_none()
            && !self
                .store
                .queue_snapshot()
                .await?
                .queues
                .iter()
                .any(|q| q.queue == queue)
        {
            return Err(Error::NotFound {
                entity: Entity::Queue,
                id: queue.to_string(),
            });
        }
        self.store.queue_resume(queue).await
    }

    /// Creates or replaces a cron schedule, as an application does at every start for the
    /// schedules its code declares: writing the stored schedule again changes nothing (ticks
    /// missed while the application was down still fire), a new job keeps its ticks going, a
    /// new cron expression or zone fires its ticks after now; the answer says which
    /// ([`ScheduleChange`](drover_core::ScheduleChange)). No upsert makes a tick fire twice.
    ///
    /// # Errors
    /// Those of [`JobStore::schedule_upsert`]: `InvalidInput` naming the field.
    pub async fn schedule_upsert(&self, schedule: NewSchedule) -> Result<ScheduleUpsert, Error> {
        self.store.schedule_upsert(schedule).await
    }

    /// Schedules by name.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn schedules_list(&self) -> Result<Vec<Schedule>, Error> {
        self.store.schedules_list().await
    }

    /// Removes a schedule.
    ///
    /// # Errors
    /// `NotFound` when no schedule has the name.
    pub async fn schedule_remove(&self, name: ScheduleName) -> Result<(), Error> {
        self.store.schedule_remove(name).await
    }

    fn report(&self, enqueued: &[Enqueued]) {
        for answer in enqueued {
            if answer.status == EnqueueStatus::Created {
                self.metrics
                    .job_enqueued(&answer.job.kind, &answer.job.queue);
            }
        }
    }
}

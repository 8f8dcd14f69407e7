//! [`Client`]: the application's handle for enqueueing jobs and looking at them, wrapping the
//! store and reporting [`Metrics::job_enqueued`] for every new job.

use std::fmt;
use std::sync::Arc;

use drover_core::{
    CancelOutcome, EnqueueStatus, Enqueued, Error, Job, JobId, JobKind, JobStore, NewJob,
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

    fn report(&self, enqueued: &[Enqueued]) {
        for answer in enqueued {
            if answer.status == EnqueueStatus::Created {
                self.metrics
                    .job_enqueued(&answer.job.kind, &answer.job.queue);
            }
        }
    }
}

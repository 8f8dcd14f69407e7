//! [`Client`]: the one operator façade. The HTTP API, the CLI and embedding applications
//! enqueue (one job or a batch), list, get, cancel, retry, requeue and delete jobs, pause and resume
//! queues (with an answer that says what changed, [`QueueChange`]) and read the queue view
//! ([`QueueOverview`]) through it, and declare cron schedules at start-up
//! ([`Client::schedule_upsert`]). It reports [`Metrics::job_enqueued`] for every new job, once,
//! whoever enqueued it.
//!
//! Workflows (docs/design.md section 10) go through it too: enqueue a graph as one unit
//! ([`Client::enqueue_workflow`]), read one or a page of them, cancel or retry one as a whole.
//! Like the job operations, these take ids and answer whatever the store holds; a caller that
//! serves one tenant (the HTTP API's tenant-scoped tokens) checks the answer's tenant, or
//! names its tenant in [`ListWorkflows::tenant`], as it does for jobs.
//!
//! Every operator write (cancel, retry, requeue, delete, bulk actions, pause, resume, workflow cancel and retry,
//! limit and schedule changes, prune) goes to the store as an [`Operation`] by the client's
//! [`Actor`] ([`Client::with_actor`]; an embedding application's default is
//! [`Client::LIBRARY_ACTOR`] from source `library`), and the store records it in the audit log
//! in the same step ([`JobStore::operate`], docs/audit.md). The operator reads (workers, limits,
//! schedules, the snapshot, the audit log) go through it too, so the HTTP API, the CLI and the
//! dashboard have one way to the store.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use drover_core::bounds::{BULK_PREVIEW_MAX, LIST_LIMIT_MAX};
use drover_core::{ActivityMinute, ListActivity};
use drover_core::{
    Actor, AuditPage, AuditSource, CancelOutcome, EnqueueStatus, Enqueued, Entity, Error, Job,
    JobId, JobKind, JobPage, JobState, JobStore, LimitKey, LimitPolicy, LimitStatus, ListAudit,
    ListJobs, NewJob, NewSchedule, Operated, Operation, PruneJobs, QueueChange, QueueInfo,
    QueueName, QueueSnapshot, RequeueOutcome, Schedule, ScheduleName, ScheduleUpsert, Snapshot,
    StoreConfig, VacuumStatus, WorkerInfo,
};
use drover_core::{BulkJobs, BulkOutcome, Selection};
use drover_core::{
    EnqueuedWorkflow, ListWorkflows, NewWorkflow, Workflow, WorkflowChange, WorkflowId,
    WorkflowPage,
};
use serde::Serialize;
use tracing::Instrument;

use crate::metrics::{Metrics, NoopMetrics};
use crate::telemetry;

/// Enqueues and inspects jobs. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    store: Arc<dyn JobStore>,
    metrics: Arc<dyn Metrics>,
    actor: Actor,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// The actor name of a client whose embedding application named none.
    pub const LIBRARY_ACTOR: &'static str = "application";

    /// A client on `store` with no-op metrics, acting as [`Client::LIBRARY_ACTOR`] from source
    /// `library` for every tenant.
    pub fn new(store: Arc<dyn JobStore>) -> Self {
        Client {
            store,
            metrics: Arc::new(NoopMetrics),
            actor: Actor::new(Self::LIBRARY_ACTOR, AuditSource::Library),
        }
    }

    /// Acts as `actor`: the who, tenant and source of the audit records of its writes. The
    /// HTTP API makes one per request from the caller's token, the CLI one per command.
    pub fn with_actor(mut self, actor: Actor) -> Self {
        self.actor = actor;
        self
    }

    /// Who this client acts as.
    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// Reports enqueues to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The store's configuration (its size limits, among others).
    pub fn config(&self) -> StoreConfig {
        self.store.config()
    }

    /// Readiness: the store answers and its schema is current ([`JobStore::check_ready`]).
    ///
    /// # Errors
    /// `Unavailable`; `Fatal` when the schema is missing or old.
    pub async fn check_ready(&self) -> Result<(), Error> {
        self.store.check_ready().await
    }

    /// The store's clock.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn now(&self) -> Result<DateTime<Utc>, Error> {
        self.store.now().await
    }

    /// Runs an operator write by this client's actor, recorded in the audit log in the same
    /// step.
    async fn operate(&self, operation: Operation) -> Result<Operated, Error> {
        self.store.operate(operation, self.actor.clone()).await
    }

    /// Enqueues one job; see [`JobStore::jobs_enqueue`] for idempotency and unique keys.
    ///
    /// # Errors
    /// Those of [`JobStore::jobs_enqueue`]: `InvalidInput`, `Conflict`, `QuotaExceeded`,
    /// `Unavailable`, `Fatal`.
    pub async fn enqueue(&self, mut job: NewJob) -> Result<Enqueued, Error> {
        let enqueued = match telemetry::spans() {
            Some(_) => {
                let span = telemetry::publish_one(&mut job);
                self.store.job_enqueue(job).instrument(span).await?
            }
            None => self.store.job_enqueue(job).await?,
        };
        self.enqueued(std::slice::from_ref(&enqueued));
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
    pub async fn enqueue_many(&self, mut jobs: Vec<NewJob>) -> Result<Vec<Enqueued>, Error> {
        let enqueued = match telemetry::spans() {
            Some(_) => {
                let span = telemetry::publish_batch(&mut jobs);
                self.store.jobs_enqueue(jobs).instrument(span).await?
            }
            None => self.store.jobs_enqueue(jobs).await?,
        };
        self.enqueued(&enqueued);
        Ok(enqueued)
    }

    /// Enqueues a workflow graph as one unit, all or nothing: every job gets the new workflow
    /// id and its local name, dependencies by name become dependencies on the new ids
    /// ([`JobStore::workflow_enqueue`]). Answers per job in input order.
    ///
    /// # Errors
    /// `InvalidInput` naming `jobs` or `jobs[i].<field>` (a cycle, a dangling name, a repeated
    /// name, another tenant, an invalid job); `Conflict`; `QuotaExceeded`. On any error nothing
    /// is stored.
    pub async fn enqueue_workflow(
        &self,
        mut workflow: NewWorkflow,
    ) -> Result<EnqueuedWorkflow, Error> {
        let enqueued = match telemetry::spans() {
            Some(_) => {
                let span = telemetry::publish_workflow(&mut workflow);
                self.store
                    .workflow_enqueue(workflow)
                    .instrument(span)
                    .await?
            }
            None => self.store.workflow_enqueue(workflow).await?,
        };
        self.enqueued(&enqueued.jobs);
        Ok(enqueued)
    }

    /// Fetches a workflow with all its jobs, children included.
    ///
    /// # Errors
    /// `NotFound` (entity workflow).
    pub async fn workflow(&self, id: WorkflowId) -> Result<Workflow, Error> {
        self.store.workflow_get(id).await
    }

    /// Lists workflows newest first with their counts per state, a page at a time.
    ///
    /// # Errors
    /// `InvalidInput` naming `limit`.
    pub async fn workflows(&self, query: ListWorkflows) -> Result<WorkflowPage, Error> {
        query.validate()?;
        self.store.workflows_list(query).await
    }

    /// Cancels every job of a workflow that is not terminal, as [`Client::cancel`] does for
    /// each, in one atomic step.
    ///
    /// # Errors
    /// `NotFound`.
    pub async fn cancel_workflow(&self, id: WorkflowId) -> Result<WorkflowChange, Error> {
        match self.operate(Operation::WorkflowCancel(id)).await? {
            Operated::WorkflowCancel(change) => Ok(change),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs every failed or cancelled job of a workflow again, in one atomic step; each waits
    /// again for those of its dependencies that run again.
    ///
    /// # Errors
    /// `NotFound`; `QuotaExceeded`; `Conflict` when a live job now holds a retried job's
    /// unique key.
    pub async fn retry_workflow(&self, id: WorkflowId) -> Result<WorkflowChange, Error> {
        match self.operate(Operation::WorkflowRetry(id)).await? {
            Operated::WorkflowRetry(change) => Ok(change),
            other => Err(unexpected(&other)),
        }
    }

    /// Lists jobs newest first, a page at a time; see [`JobStore::jobs_list`]
    /// ([`ListJobs::workflow`] and [`ListJobs::parent`] select a workflow's jobs or a parent's
    /// children).
    ///
    /// # Errors
    /// `InvalidInput` naming the field ([`ListJobs::validate`]); `Unavailable`, `Fatal`.
    pub async fn list(&self, query: ListJobs) -> Result<JobPage, Error> {
        self.store.jobs_list(query).await
    }

    /// Fetches a job.
    ///
    /// # Errors
    /// `NotFound`.
    pub async fn get(&self, id: JobId) -> Result<Job, Error> {
        self.store.job_get(id).await
    }

    /// Cancels a job: queued or reconciling ones end cancelled at once; a running one has its
    /// handler's cancellation token fired (docs/design.md section 9).
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a finished job.
    pub async fn cancel(&self, id: JobId) -> Result<CancelOutcome, Error> {
        match self.operate(Operation::JobCancel(id)).await? {
            Operated::JobCancel(outcome) => Ok(outcome),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs a finished job again: same id and args, attempt budget reset, ready at once,
    /// quotas checked again, unique key kept.
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a waiting, queued, running or reconciling job;
    /// `QuotaExceeded`; `Conflict` when another live job of the tenant now holds its unique key.
    pub async fn retry(&self, id: JobId) -> Result<Job, Error> {
        match self.operate(Operation::JobRetry(id)).await? {
            Operated::JobRetry(job) => Ok(job),
            other => Err(unexpected(&other)),
        }
    }

    /// Makes a queued job ready now: one scheduled for later, or waiting for a retry's backoff
    /// or a snooze, runs at the next claim (attempts kept) and its queue's workers are woken;
    /// a ready one is left as it is (`changed: false`).
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a running, reconciling or finished job (retry a
    /// finished one).
    pub async fn requeue(&self, id: JobId) -> Result<RequeueOutcome, Error> {
        match self.operate(Operation::JobRequeue(id)).await? {
            Operated::JobRequeue(outcome) => Ok(outcome),
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes a job that is not running or reconciling (cancel a running one first); a job
    /// that retention keeps for live jobs (a live dependent, live children, a parent not
    /// finished) is refused ([`drover_core::check_delete`]). Answers the job as it was.
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a running or reconciling job; `Conflict` naming
    /// the job in the way.
    pub async fn delete(&self, id: JobId) -> Result<Job, Error> {
        match self.operate(Operation::JobDelete(id)).await? {
            Operated::JobDelete(job) => Ok(job),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs a bulk action ([`drover_core::bulk`]): cancel, retry or delete every job of a
    /// list of ids or of a jobs-list filter, each by its own operation, in steps of
    /// [`BulkAction::step`](drover_core::BulkAction::step) jobs; a job the action does not
    /// apply to is skipped. An actor of one tenant acts on its tenant's jobs only. One audit
    /// record (`jobs.cancel`, `jobs.retry`, `jobs.delete`) counts the jobs changed.
    ///
    /// # Errors
    /// `InvalidInput` naming `ids` or `filter.<field>` ([`BulkJobs::scoped`]);
    /// `Unavailable`, `Fatal`: the jobs changed before stay changed. On PostgreSQL the record
    /// is written with each step, so it counts the steps committed; the memory store writes
    /// the record only when the action ends, so a failed action leaves none there.
    pub async fn bulk(&self, bulk: BulkJobs) -> Result<BulkOutcome, Error> {
        match self.operate(Operation::JobsBulk(bulk)).await? {
            Operated::JobsBulk(outcome) => Ok(outcome),
            other => Err(unexpected(&other)),
        }
    }

    /// Counts the jobs a bulk action would act on, changing nothing: the ids of jobs in the
    /// actor's scope, or the jobs the filter matches, counted up to
    /// [`BULK_PREVIEW_MAX`](drover_core::bounds::BULK_PREVIEW_MAX) (then `more`), a bounded
    /// page at a time.
    ///
    /// # Errors
    /// As [`Client::bulk`].
    pub async fn bulk_preview(&self, bulk: BulkJobs) -> Result<BulkPreview, Error> {
        let bulk = bulk.scoped(&self.actor)?;
        let mut matched = 0u64;
        match &bulk.selection {
            Selection::Ids(ids) => {
                for chunk in ids.chunks(LIST_LIMIT_MAX as usize) {
                    let found = self.store.jobs_tenants(chunk.to_vec()).await?;
                    matched += found
                        .iter()
                        .filter(|(_, tenant)| bulk.in_scope_tenant(tenant))
                        .count() as u64;
                }
                Ok(BulkPreview {
                    matched,
                    more: false,
                })
            }
            Selection::Filter(_) => {
                let mut before = None;
                while let Some(query) = bulk.page(before) {
                    let query = ListJobs {
                        limit: LIST_LIMIT_MAX,
                        ..query
                    };
                    let page = self.store.jobs_list(query).await?;
                    matched += page.jobs.len() as u64;
                    match page.next {
                        Some(_) if matched >= BULK_PREVIEW_MAX => {
                            return Ok(BulkPreview {
                                matched,
                                more: true,
                            })
                        }
                        Some(next) => before = Some(next),
                        None => break,
                    }
                }
                Ok(BulkPreview {
                    matched,
                    more: false,
                })
            }
        }
    }

    /// Pauses `queue` cluster-wide (no worker claims from it; running jobs finish), creating
    /// its record if needed, so a queue may be paused before its first job. Pausing a paused
    /// queue changes nothing (it keeps the time it was first paused) and says so.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn queue_pause(&self, queue: QueueName) -> Result<QueueChange, Error> {
        match self.operate(Operation::QueuePause(queue)).await? {
            Operated::QueuePause(change) => Ok(change),
            other => Err(unexpected(&other)),
        }
    }

    /// Resumes `queue`. Resuming is idempotent at the store, so a typo would "succeed" and leave
    /// the real queue paused: a queue that is not paused changes nothing and says so, and a
    /// queue nobody has heard of (no jobs, no stored pause) is refused.
    ///
    /// # Errors
    /// `NotFound` (entity queue) for a queue with no jobs that is not paused; `Unavailable`,
    /// `Fatal`.
    pub async fn queue_resume(&self, queue: QueueName) -> Result<QueueChange, Error> {
        if !self.queue_known(&queue).await? {
            return Err(Error::NotFound {
                entity: Entity::Queue,
                id: queue.to_string(),
            });
        }
        match self.operate(Operation::QueueResume(queue)).await? {
            Operated::QueueResume(change) => Ok(change),
            other => Err(unexpected(&other)),
        }
    }

    /// True when `queue` has jobs or a stored pause state: a name an operator pausing or
    /// resuming it most likely did not mistype.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn queue_known(&self, queue: &QueueName) -> Result<bool, Error> {
        if self
            .store
            .queues_list()
            .await?
            .iter()
            .any(|q| q.name == *queue)
        {
            return Ok(true);
        }
        Ok(self
            .store
            .queue_snapshot()
            .await?
            .queues
            .iter()
            .any(|q| q.queue == *queue))
    }

    /// The queue view: every queue that has jobs or a stored pause state, by name, its pause
    /// state joined with its counts, and what keeps the database from cleaning the jobs table.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn queue_overview(&self) -> Result<QueueOverview, Error> {
        let infos = self.store.queues_list().await?;
        let snapshot = self.store.queue_snapshot().await?;
        Ok(QueueOverview::new(infos, snapshot.queues, snapshot.vacuum))
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
        match self.operate(Operation::ScheduleUpsert(schedule)).await? {
            Operated::ScheduleUpsert(upsert) => Ok(upsert),
            other => Err(unexpected(&other)),
        }
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
        self.operate(Operation::ScheduleRemove(name))
            .await
            .map(drop)
    }

    /// Creates or replaces a limit policy, keeping its rate state.
    ///
    /// # Errors
    /// `InvalidInput` naming the field ([`LimitPolicy::validated`]).
    pub async fn limit_set(&self, policy: LimitPolicy) -> Result<LimitPolicy, Error> {
        match self.operate(Operation::LimitSet(policy)).await? {
            Operated::LimitSet(policy) => Ok(policy),
            other => Err(unexpected(&other)),
        }
    }

    /// Removes a limit policy: jobs it held are claimable again.
    ///
    /// # Errors
    /// `NotFound` (entity limit) when no policy has the key.
    pub async fn limit_clear(&self, key: LimitKey) -> Result<(), Error> {
        self.operate(Operation::LimitClear(key)).await.map(drop)
    }

    /// Limit policies by key with their running counts and rate state.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn limits(&self) -> Result<Vec<LimitStatus>, Error> {
        self.store.limits_list().await
    }

    /// Registered workers by id.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>, Error> {
        self.store.workers_list().await
    }

    /// Counts per queue and state at one instant, with the vacuum status.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn snapshot(&self) -> Result<Snapshot, Error> {
        self.store.queue_snapshot().await
    }

    /// What the workers did per minute and queue, from the minute of `since` on
    /// (docs/design.md, "Activity"): the runs that ended by outcome, their queue waits and run
    /// times. Workers send it with their registration heartbeats, so the last heartbeat
    /// interval may not be in yet.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn activity(&self, since: DateTime<Utc>) -> Result<Vec<ActivityMinute>, Error> {
        self.store
            .activity_list(ListActivity {
                since: drover_core::activity::minute_of(since),
            })
            .await
    }

    /// Deletes one batch of finished jobs past `prune.older_than` (at most `prune.limit`),
    /// recorded in the audit log; answers how many. Call again until it answers fewer than
    /// the limit to delete them all.
    ///
    /// # Errors
    /// `InvalidInput` naming `limit`.
    pub async fn prune(&self, prune: PruneJobs) -> Result<u64, Error> {
        match self.operate(Operation::JobsPrune(prune)).await? {
            Operated::JobsPrune(deleted) => Ok(deleted),
            other => Err(unexpected(&other)),
        }
    }

    /// The audit log newest first, a page at a time (docs/audit.md).
    ///
    /// # Errors
    /// `InvalidInput` naming `limit`.
    pub async fn audit(&self, query: ListAudit) -> Result<AuditPage, Error> {
        query.validate()?;
        self.store.audit_list(query).await
    }

    /// Counts the new jobs among `enqueued` (not replays or duplicates).
    fn enqueued(&self, enqueued: &[Enqueued]) {
        for answer in enqueued {
            if answer.status == EnqueueStatus::Created {
                self.metrics
                    .job_enqueued(&answer.job.kind, &answer.job.queue);
            }
        }
    }
}

/// How many jobs a bulk action would act on ([`Client::bulk_preview`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BulkPreview {
    /// Jobs matched (at least this many when `more`).
    pub matched: u64,
    /// True when counting stopped at
    /// [`BULK_PREVIEW_MAX`](drover_core::bounds::BULK_PREVIEW_MAX) with more to count.
    pub more: bool,
}

/// A store that answered an operation with another operation's answer (never the job in it:
/// its args stay out of error messages).
fn unexpected(_operated: &Operated) -> Error {
    Error::fatal("the store answered an operator write with another write's answer")
}

/// The queue view operators read (`GET /v1/queues`, `drover queues list`): one
/// [`QueueSummary`] per queue, by name, and the vacuum status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOverview {
    /// Every queue that has jobs or a stored pause state, sorted by name, each once.
    pub queues: Vec<QueueSummary>,
    /// What keeps the database from cleaning the jobs table; `None` for a store without
    /// vacuum (the in-memory store).
    pub vacuum: Option<VacuumStatus>,
}

impl QueueOverview {
    /// Joins the stored queues with the snapshot's: a queue in either appears once, paused as
    /// its stored record says (else as the snapshot says), with the snapshot's counts (zero
    /// without one).
    pub fn new(
        infos: Vec<QueueInfo>,
        snapshots: Vec<QueueSnapshot>,
        vacuum: Option<VacuumStatus>,
    ) -> Self {
        let mut joined: BTreeMap<QueueName, (Option<QueueInfo>, Option<QueueSnapshot>)> =
            BTreeMap::new();
        for info in infos {
            let entry = joined.entry(info.name.clone()).or_default();
            entry.0 = Some(info);
        }
        for snapshot in snapshots {
            let entry = joined.entry(snapshot.queue.clone()).or_default();
            entry.1 = Some(snapshot);
        }
        let queues = joined
            .into_iter()
            .map(|(name, (info, snapshot))| QueueSummary::new(name, info, snapshot))
            .collect();
        QueueOverview { queues, vacuum }
    }
}

/// One queue of the [`QueueOverview`]: its pause state and its counts at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSummary {
    /// Name.
    pub name: QueueName,
    /// Paused cluster-wide: no worker claims from it.
    pub paused: bool,
    /// When it was paused, while paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// Jobs per state; states without jobs are absent.
    pub counts: BTreeMap<JobState, u64>,
    /// Queued jobs that are ready now.
    pub ready: u64,
    /// `ready` is a lower bound: the store counted ready jobs only so far
    /// ([`QueueSnapshot::ready_at_least`]).
    pub ready_at_least: bool,
    /// Running jobs whose handler started.
    pub running: u64,
    /// Jobs claimed ahead by a worker, waiting in its backlog for a slot (leased, so counted
    /// in `counts[running]`, but not started).
    pub claimed: u64,
    /// Age of the oldest ready job, in milliseconds (`None` when none is ready).
    pub oldest_ready_age_ms: Option<u64>,
}

impl QueueSummary {
    fn new(name: QueueName, info: Option<QueueInfo>, snapshot: Option<QueueSnapshot>) -> Self {
        let paused = info
            .as_ref()
            .map(|i| i.paused)
            .or(snapshot.as_ref().map(|s| s.paused))
            .unwrap_or(false);
        let paused_at = info.and_then(|i| i.paused_at);
        match snapshot {
            Some(s) => QueueSummary {
                name,
                paused,
                paused_at,
                counts: s.counts,
                ready: s.ready,
                ready_at_least: s.ready_at_least,
                running: s.running,
                claimed: s.claimed,
                oldest_ready_age_ms: s.oldest_ready_age_ms,
            },
            None => QueueSummary {
                name,
                paused,
                paused_at,
                counts: BTreeMap::new(),
                ready: 0,
                ready_at_least: false,
                running: 0,
                claimed: 0,
                oldest_ready_age_ms: None,
            },
        }
    }

    /// Jobs in `state`.
    pub fn count(&self, state: JobState) -> u64 {
        self.counts.get(&state).copied().unwrap_or(0)
    }

    /// The lag (age of the oldest ready job) in seconds.
    pub fn lag_seconds(&self) -> Option<f64> {
        self.oldest_ready_age_ms.map(|ms| ms as f64 / 1000.0)
    }

    /// The ready count as a person reads it: `10001+` when it is a lower bound.
    pub fn ready_text(&self) -> String {
        drover_core::queue::ready_text(self.ready, self.ready_at_least)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use drover_core::{CancelEffect, StoreConfig};
    use drover_store_memory::MemoryStore;
    use serde_json::json;

    use super::*;

    /// Counts `job_enqueued` calls by kind.
    #[derive(Default)]
    struct Enqueues(Mutex<Vec<String>>);

    impl Metrics for Enqueues {
        fn job_enqueued(&self, kind: &JobKind, _queue: &QueueName) {
            self.0.lock().unwrap().push(kind.to_string());
        }
    }

    fn queue(name: &str) -> QueueName {
        QueueName::parse(name).unwrap()
    }

    #[tokio::test]
    async fn new_jobs_are_counted_once_and_a_cancelled_job_is_retried() {
        let metrics = Arc::new(Enqueues::default());
        let client = Client::new(Arc::new(MemoryStore::new(StoreConfig::default())))
            .with_metrics(Arc::clone(&metrics) as Arc<dyn Metrics>);
        let mut job = NewJob::new(JobKind::parse("email.send").unwrap(), json!({}));
        job.idempotency_key = Some("once".to_owned());
        let first = client.enqueue(job.clone()).await.unwrap();
        let replay = client.enqueue(job).await.unwrap();
        assert_eq!(
            (first.status, replay.status),
            (EnqueueStatus::Created, EnqueueStatus::Replayed)
        );
        let batch = client
            .enqueue_many(vec![
                NewJob::new(JobKind::parse("report.build").unwrap(), json!({})),
                NewJob::new(JobKind::parse("email.send").unwrap(), json!({})),
            ])
            .await
            .unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(
            *metrics.0.lock().unwrap(),
            ["email.send", "report.build", "email.send"],
            "a replay is not a new job"
        );

        let id = first.job.id;
        let cancelled = client.cancel(id).await.unwrap();
        assert_eq!(cancelled.effect, CancelEffect::Cancelled);
        let retried = client.retry(id).await.unwrap();
        assert_eq!((retried.id, retried.state), (id, JobState::Queued));
        assert_eq!(client.get(id).await.unwrap().state, JobState::Queued);
        let page = client.list(ListJobs::default()).await.unwrap();
        assert_eq!(page.jobs.len(), 3);
        assert_eq!(
            metrics.0.lock().unwrap().len(),
            3,
            "a retry enqueues nothing"
        );
    }

    #[tokio::test]
    async fn the_queue_view_joins_stored_queues_with_the_snapshot() {
        let client = Client::new(Arc::new(MemoryStore::new(StoreConfig::default())));
        let mut job = NewJob::new(JobKind::parse("email.send").unwrap(), json!({}));
        job.queue = queue("mail");
        client.enqueue(job.clone()).await.unwrap();
        client.enqueue(job).await.unwrap();
        // Paused before its first job: a stored queue the snapshot may not list.
        client.queue_pause(queue("later")).await.unwrap();
        let overview = client.queue_overview().await.unwrap();
        let names: Vec<&str> = overview.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["later", "mail"]);
        let later = &overview.queues[0];
        assert!(later.paused && later.paused_at.is_some(), "{later:?}");
        assert_eq!(later.count(JobState::Queued), 0);
        let mail = &overview.queues[1];
        assert!(!mail.paused, "{mail:?}");
        assert_eq!((mail.count(JobState::Queued), mail.ready), (2, 2));
        assert_eq!(overview.vacuum, None, "the memory store has no vacuum");
    }

    #[test]
    fn a_queue_in_either_list_appears_once_paused_as_its_record_says() {
        let snapshot = |name: &str, paused: bool| QueueSnapshot {
            queue: queue(name),
            paused,
            counts: BTreeMap::from([(JobState::Running, 3)]),
            ready: 0,
            ready_at_least: false,
            running: 2,
            claimed: 1,
            oldest_ready_age_ms: Some(1_500),
        };
        let overview = QueueOverview::new(
            vec![
                QueueInfo::unpaused(queue("b")),
                QueueInfo {
                    name: queue("a"),
                    paused: true,
                    paused_at: Some(Utc::now()),
                },
            ],
            vec![snapshot("c", true), snapshot("b", true)],
            None,
        );
        let rows: Vec<(&str, bool, u64)> = overview
            .queues
            .iter()
            .map(|q| (q.name.as_str(), q.paused, q.count(JobState::Running)))
            .collect();
        assert_eq!(rows, [("a", true, 0), ("b", false, 3), ("c", true, 3)]);
        assert_eq!(overview.queues[2].lag_seconds(), Some(1.5));
        assert_eq!(overview.queues[0].lag_seconds(), None);
    }
}

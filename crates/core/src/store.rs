//! The [`JobStore`] trait: the contract every store implements and the contract suite in
//! `tests/` proves (docs/design.md section 4), with one params struct per operation so that adding a
//! field never breaks a caller.
//!
//! Atomicity: each method is one atomic step of the store. Batch methods apply all or nothing
//! unless their doc says the answer is per item.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_core::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::activity::{ActivityMinute, ListActivity};
use crate::audit::{Actor, AuditPage, ListAudit, Operated, Operation, PruneAudit};
use crate::bounds::check_range;
use crate::error::{Error, Result};
use crate::job::{Enqueued, Job, JobId, NewJob, SizeLimits, WorkflowId};
use crate::lease::{check_lease, FencingToken};
use crate::limits::{LimitPolicy, LimitStatus};
use crate::names::{JobKind, LimitKey, QueueName, ScheduleName, TenantId, WorkerId};
use crate::queue::{
    QueueChange, QueueInfo, Snapshot, VacuumStatus, WorkerInfo, WorkerRegistration,
};
pub use crate::schedule::FireSchedule;
use crate::schedule::{NewSchedule, Schedule, ScheduleUpsert};
use crate::state::{JobState, Resolution, Retry, Transition};
use crate::workflow::{
    EnqueueChildren, EnqueuedWorkflow, ListWorkflows, NewWorkflow, Workflow, WorkflowChange,
    WorkflowPage,
};

/// Default quota on pending jobs of the cluster (docs/design.md section 4, Limits and quotas).
pub const MAX_PENDING_DEFAULT: u64 = 10_000;
/// Default quota on pending jobs of one tenant (docs/design.md section 4, Limits and quotas).
pub const MAX_TENANT_PENDING_DEFAULT: u64 = 1_000;
pub use crate::bounds::{
    CLAIM_LIMIT_MAX, ENQUEUE_BATCH_MAX, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, PRUNE_LIMIT_DEFAULT,
    PRUNE_LIMIT_MAX, RETENTION_DEFAULT,
};

/// Quotas on pending (waiting, queued, running and reconciling) jobs; `None` means unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    /// Bound on pending jobs of the cluster (`DROVER_MAX_PENDING`, default 10,000).
    pub max_pending: Option<u64>,
    /// Bound on pending jobs of each tenant (`DROVER_MAX_TENANT_PENDING`, default 1,000).
    pub max_tenant_pending: Option<u64>,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            max_pending: Some(MAX_PENDING_DEFAULT),
            max_tenant_pending: Some(MAX_TENANT_PENDING_DEFAULT),
        }
    }
}

impl Quotas {
    /// No quotas at all.
    pub fn unbounded() -> Self {
        Quotas {
            max_pending: None,
            max_tenant_pending: None,
        }
    }

    /// True when neither quota is set: enqueues count nothing.
    pub fn is_unbounded(&self) -> bool {
        self.max_pending.is_none() && self.max_tenant_pending.is_none()
    }
}

/// Settings every store takes at construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StoreConfig {
    /// Pending-job quotas checked at enqueue and operator retry.
    pub quotas: Quotas,
    /// Size bounds on args, meta and results.
    pub sizes: SizeLimits,
    /// What becomes of a job whose handler succeeded: kept (the default) or deleted at once.
    #[serde(default)]
    pub succeeded_jobs: SucceededJobs,
}

/// What a store does with a job when it records the job's success through
/// [`JobStore::jobs_finish`] (a handler completed it; docs/design.md section 3, complete).
///
/// Failed and cancelled jobs are always kept until retention prunes them, and so are jobs a
/// reconcile resolves; only a handler's success can skip the kept `succeeded` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SucceededJobs {
    /// The job becomes `succeeded` with its result and is kept until retention prunes it
    /// (default 7 days, docs/design.md section 1): `jobs get` shows it, lists and counts include
    /// it, and its idempotency key answers replays meanwhile.
    #[default]
    Keep,
    /// The job is deleted as its success is recorded, as if retention pruned it at once: the
    /// finish still answers `Recorded` with state `succeeded` (outcome counters and hooks see
    /// the success), but the result is not stored, `jobs get` answers `NotFound`, and a replay
    /// of its idempotency key enqueues a new job. The choice of queues that keep no finished
    /// jobs (graphile-worker deletes every completed job; Solid Queue's
    /// `preserve_finished_jobs = false`): a finish then writes no new row version and no
    /// index entry, so PostgreSQL does about a quarter less work per job.
    Delete,
}

impl SucceededJobs {
    /// [`SucceededJobs::Delete`] when `delete` (a `--delete-succeeded` flag), else
    /// [`SucceededJobs::Keep`].
    pub fn delete_if(delete: bool) -> SucceededJobs {
        if delete {
            SucceededJobs::Delete
        } else {
            SucceededJobs::Keep
        }
    }
}

/// Claim a batch of ready jobs (docs/design.md section 3, claim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimJobs {
    /// The claiming worker: becomes the lease owner.
    pub worker: WorkerId,
    /// Queues to claim from; paused queues are skipped.
    pub queues: Vec<QueueName>,
    /// Kinds the worker has handlers for; jobs of other kinds stay queued, untouched.
    pub kinds: Vec<JobKind>,
    /// Most jobs to claim, 1..=10,000 (the worker's free capacity).
    pub limit: u32,
    /// How many of the claimed jobs start at once, 0..=`limit` (the worker's free slots): the
    /// first `start` in claim order get `started_at` = the claim's time; the rest are claimed
    /// ahead and wait for a slot (`started_at` stays `None` until the worker reports their
    /// start with [`HeartbeatItem::started`] or [`FinishItem::started`]).
    pub start: u32,
    /// Lease length (100 ms..=24 h).
    pub lease: Duration,
}

impl ClaimJobs {
    /// Checks `limit` (1..=10,000), `start` (at most `limit`) and the lease
    /// ([`crate::lease::check_lease`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `limit`, `start` or `lease`.
    pub fn validate(&self) -> Result<()> {
        check_range("limit", self.limit, 1, CLAIM_LIMIT_MAX)?;
        if self.start > self.limit {
            return Err(Error::invalid(
                "start",
                format!(
                    "must be at most the limit ({}), got {}",
                    self.limit, self.start
                ),
            ));
        }
        check_lease(self.lease)
    }
}

/// The answer to a claim ([`JobStore::jobs_claim`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Claimed {
    /// The claimed jobs, running under the claim's lease, in claim order.
    pub jobs: Vec<Job>,
    /// When rate limits held back ready jobs this claim could have taken: how long from the
    /// store's now until the earliest of them is admissible by its rates
    /// ([`crate::Admission::retry_after`]), so a claim loop can claim again then rather than
    /// guess (a held job sends no event). `None` when no job was held back by a rate alone; a
    /// job a full `max_running` holds is not counted (it waits for a running job to finish).
    /// Measured on the store's clock: a caller should treat it as a hint, not sleep past its
    /// own next claim for it.
    pub retry_after: Option<Duration>,
}

impl Claimed {
    /// Just these jobs, nothing held back.
    pub fn jobs(jobs: Vec<Job>) -> Self {
        Claimed {
            jobs,
            retry_after: None,
        }
    }
}

/// One running job's heartbeat.
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatItem {
    /// The job.
    pub id: JobId,
    /// Its fencing token.
    pub token: FencingToken,
    /// Replacement meta object, when the handler changed it.
    pub meta: Option<Value>,
    /// Latest progress, when the handler reported any.
    pub progress: Option<Value>,
    /// For a job claimed ahead whose handler has started and whose start the store has not
    /// recorded: how long ago it started, by the worker's clock ([`crate::Event::Started`]);
    /// `None` otherwise.
    pub started: Option<Duration>,
}

/// Extend the leases of a worker's running jobs in one call.
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatJobs {
    /// New lease length from the store's now.
    pub lease: Duration,
    /// The jobs.
    pub jobs: Vec<HeartbeatItem>,
}

impl HeartbeatItem {
    /// Checks the item's meta (a JSON object) and progress against the meta bound
    /// ([`crate::json::check_value`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `meta` or `progress`.
    pub fn validate(&self, sizes: &SizeLimits) -> Result<()> {
        if let Some(meta) = &self.meta {
            if !meta.is_object() {
                return Err(Error::invalid("meta", "must be a JSON object"));
            }
            crate::json::check_value("meta", meta, sizes.max_meta_bytes)?;
        }
        if let Some(progress) = &self.progress {
            crate::json::check_value("progress", progress, sizes.max_meta_bytes)?;
        }
        Ok(())
    }
}

impl HeartbeatJobs {
    /// Checks the lease ([`crate::lease::check_lease`]) and every item
    /// ([`HeartbeatItem::validate`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `lease`, or the first bad item's field, prefixed
    /// `jobs[i].` when the batch holds more than one item.
    pub fn validate(&self, sizes: &SizeLimits) -> Result<()> {
        check_lease(self.lease)?;
        let len = self.jobs.len();
        for (i, item) in self.jobs.iter().enumerate() {
            item.validate(sizes).map_err(|e| e.in_batch_item(i, len))?;
        }
        Ok(())
    }
}

/// The answer to one heartbeat item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum HeartbeatReply {
    /// The lease was extended.
    Extended {
        /// The job.
        id: JobId,
        /// A cancel was requested: fire the handler's cancellation token.
        cancel_requested: bool,
        /// The new lease end.
        lease_expires_at: DateTime<Utc>,
    },
    /// The token is stale or the lease expired: stop the handler, write nothing for it.
    LeaseLost {
        /// The job.
        id: JobId,
    },
    /// The job was busy with another write that holds it (its own finish still being recorded,
    /// an operator's cancel): nothing changed, the lease stands as it was, and the next
    /// heartbeat tries again. A store that locks rows answers this instead of waiting, so one
    /// long write never holds up the heartbeats of a worker's other jobs.
    Deferred {
        /// The job.
        id: JobId,
    },
}

/// How a worker finishes a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Finish {
    /// Success, with an optional result.
    Succeeded {
        /// The handler's result.
        result: Option<Value>,
    },
    /// Failure; retried after the delay if attempts remain (see [`Retry`]).
    Failed {
        /// What went wrong.
        message: String,
        /// Whether and when to retry.
        retry: Retry,
    },
    /// Run again after `delay` without spending an attempt.
    Snoozed {
        /// How long to wait.
        #[serde(with = "crate::job::duration_ms", rename = "delay_ms")]
        delay: Duration,
    },
    /// Give the job back (graceful shutdown): attempt not spent, ready at once.
    Released,
    /// The handler stopped on its cancellation token.
    Cancelled {
        /// Why.
        message: String,
    },
    /// Wait for the job's children without a lease or a slot, attempt not spent; the job runs
    /// again when every child is terminal, at once when none is live
    /// ([`crate::Event::WaitForChildren`]).
    WaitForChildren,
}

impl Finish {
    /// The state-machine event this outcome is, for the lease of `token`.
    pub fn into_event(self, token: FencingToken) -> crate::Event {
        use crate::Event;
        match self {
            Finish::Succeeded { result } => Event::Complete { token, result },
            Finish::Failed { message, retry } => Event::Fail {
                token,
                message,
                retry,
            },
            Finish::Snoozed { delay } => Event::Snooze { token, delay },
            Finish::Released => Event::Release { token },
            Finish::Cancelled { message } => Event::Cancelled { token, message },
            Finish::WaitForChildren => Event::WaitForChildren { token },
        }
    }
}

/// One finished run to record.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishItem {
    /// The job.
    pub id: JobId,
    /// Its fencing token.
    pub token: FencingToken,
    /// The outcome.
    pub finish: Finish,
    /// For a job claimed ahead whose handler started and whose start the store has not
    /// recorded: how long ago it started, by the worker's clock; recorded before the outcome
    /// ([`crate::Event::Started`]). `None` otherwise (also for a job that never started).
    pub started: Option<Duration>,
    /// The job's parent as claimed ([`Job::parent_id`]), or `None`. Only a hint for the order of
    /// locks: a store may lock the parent before the child, the order a parent's cancel takes,
    /// so the two never deadlock. The store counts the child for the parent it has stored,
    /// whatever the hint says.
    pub parent: Option<JobId>,
}

impl FinishItem {
    /// Checks the item's result against the result bound ([`crate::json::check_value`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `result`.
    pub fn validate(&self, sizes: &SizeLimits) -> Result<()> {
        if let Finish::Succeeded {
            result: Some(result),
        } = &self.finish
        {
            crate::json::check_value("result", result, sizes.max_result_bytes)?;
        }
        Ok(())
    }

    /// Checks every item of a `jobs_finish` batch ([`FinishItem::validate`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the first bad item's field, prefixed `jobs[i].` when the
    /// batch holds more than one item.
    pub fn validate_batch(items: &[FinishItem], sizes: &SizeLimits) -> Result<()> {
        for (i, item) in items.iter().enumerate() {
            item.validate(sizes)
                .map_err(|e| e.in_batch_item(i, items.len()))?;
        }
        Ok(())
    }
}

/// The answer to one [`FinishItem`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum FinishReply {
    /// Recorded: the job moved from running to `to`.
    Recorded {
        /// The job.
        id: JobId,
        /// Its new state.
        to: JobState,
    },
    /// Not recorded: stale token or expired lease (another worker may own the job now).
    LeaseLost {
        /// The job.
        id: JobId,
    },
}

impl HeartbeatReply {
    /// The job this reply is about.
    pub fn id(&self) -> JobId {
        match self {
            HeartbeatReply::Extended { id, .. }
            | HeartbeatReply::LeaseLost { id }
            | HeartbeatReply::Deferred { id } => *id,
        }
    }
}

impl FinishReply {
    /// The job this reply is about.
    pub fn id(&self) -> JobId {
        match self {
            FinishReply::Recorded { id, .. } | FinishReply::LeaseLost { id } => *id,
        }
    }
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelEffect {
    /// The job was queued or reconciling and is now cancelled.
    Cancelled,
    /// The job is running: its handler's cancellation token fires; it ends cancelled if the
    /// handler stops or fails, but succeeded if the handler completes anyway (docs/design.md 9).
    Requested,
}

/// The answer to a cancel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelOutcome {
    /// What happened.
    pub effect: CancelEffect,
    /// The job after the cancel.
    pub job: Job,
    /// Other jobs the cancel reached (docs/design.md section 10): children cancelled or
    /// signalled, dependents cancelled, round after round.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cascaded: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The answer to a requeue ([`JobStore::job_requeue`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequeueOutcome {
    /// The job after the requeue.
    pub job: Job,
    /// True when the job was waiting for its `run_at` and is ready now; false when it was
    /// ready already, so nothing changed.
    pub changed: bool,
}

/// Which of a job's large fields (args, result, errors, progress) a list reads and returns.
/// A list for a page of summaries (a dashboard, `drover jobs list`) leaves them out, so the
/// store does not read them; a field left out comes back empty: `args` null, `result` and
/// `progress` `None`, `errors` empty. [`JobStore::job_get`] always returns every field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDetails {
    /// The handler's input.
    pub args: bool,
    /// The handler's result.
    pub result: bool,
    /// The failed attempts' errors.
    pub errors: bool,
    /// The latest progress.
    pub progress: bool,
}

impl JobDetails {
    /// Every field: whole jobs.
    pub const ALL: JobDetails = JobDetails {
        args: true,
        result: true,
        errors: true,
        progress: true,
    };
    /// None of them: summaries.
    pub const NONE: JobDetails = JobDetails {
        args: false,
        result: false,
        errors: false,
        progress: false,
    };
    /// The names a list of details takes, in the order of the fields.
    pub const NAMES: [&'static str; 4] = ["args", "result", "errors", "progress"];

    /// Parses a comma-separated list of [`JobDetails::NAMES`] (spaces around a name allowed,
    /// repeats harmless), or `all`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `field` for an empty list or an unknown name.
    pub fn parse_list(field: &str, text: &str) -> Result<JobDetails> {
        let rule = || {
            format!(
                "must be a comma-separated list of {} (or all)",
                JobDetails::NAMES.join(", ")
            )
        };
        if text.trim() == "all" {
            return Ok(JobDetails::ALL);
        }
        let mut details = JobDetails::NONE;
        for name in text.split(',').map(str::trim) {
            match name {
                "args" => details.args = true,
                "result" => details.result = true,
                "errors" => details.errors = true,
                "progress" => details.progress = true,
                "" => return Err(Error::invalid(field, rule())),
                _ => return Err(Error::invalid(field, format!("{}; got {name:?}", rule()))),
            }
        }
        Ok(details)
    }

    /// The names of the fields included, in the order of [`JobDetails::NAMES`].
    pub fn names(self) -> Vec<&'static str> {
        let included = [self.args, self.result, self.errors, self.progress];
        JobDetails::NAMES
            .into_iter()
            .zip(included)
            .filter_map(|(name, on)| on.then_some(name))
            .collect()
    }

    /// Empties the fields of `job` not included (see the type's doc).
    pub fn strip(self, job: &mut Job) {
        if !self.args {
            job.args = Value::Null;
        }
        if !self.result {
            job.result = None;
        }
        if !self.errors {
            job.errors = Vec::new();
        }
        if !self.progress {
            job.progress = None;
        }
    }
}

impl Default for JobDetails {
    /// Whole jobs, so a list answers what [`JobStore::job_get`] does unless asked otherwise.
    fn default() -> Self {
        JobDetails::ALL
    }
}

/// Filters and page of `jobs_list`; every filter is optional and they combine with AND.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ListJobs {
    /// Only this queue.
    pub queue: Option<QueueName>,
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<JobKind>,
    /// Only this tenant.
    pub tenant: Option<TenantId>,
    /// Only jobs whose meta contains this object (jsonb `@>` semantics).
    pub meta: Option<Value>,
    /// Only jobs whose args contain this object (jsonb `@>` semantics). No index covers args:
    /// one call reads at most [`crate::search::ARGS_SEARCH_WINDOW`] jobs of those the other
    /// filters select, so a page may hold fewer jobs than asked, even none, with a `next`
    /// that goes on searching ([`crate::search`]).
    #[serde(default)]
    pub args: Option<Value>,
    /// Only jobs of this workflow.
    #[serde(default)]
    pub workflow: Option<WorkflowId>,
    /// Only children of this job.
    #[serde(default)]
    pub parent: Option<JobId>,
    /// Keyset cursor: only jobs with an id smaller than this (the previous page's `next`).
    pub before: Option<JobId>,
    /// Page size, 1..=1,000 (default 50 when 0).
    pub limit: u32,
    /// The large fields the listed jobs carry (default: all; [`JobDetails::NONE`] for
    /// summaries, which the store answers without reading those fields).
    #[serde(default)]
    pub details: JobDetails,
}

impl ListJobs {
    /// Checks the filter.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `meta` or `args` (not an object, NUL, too large) or
    /// `limit` (above 1,000).
    pub fn validate(&self) -> Result<()> {
        if let Some(meta) = &self.meta {
            crate::json::check_meta_filter(meta)?;
        }
        if let Some(args) = &self.args {
            crate::json::check_args_filter(args)?;
        }
        // 0 asks for the default page size.
        if self.limit != 0 {
            check_range("limit", self.limit, 1, LIST_LIMIT_MAX)?;
        }
        Ok(())
    }

    /// The effective page size.
    pub fn page_size(&self) -> u32 {
        if self.limit == 0 {
            LIST_LIMIT_DEFAULT
        } else {
            self.limit.min(LIST_LIMIT_MAX)
        }
    }
}

/// One page of jobs, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    /// The jobs, by id descending.
    pub jobs: Vec<Job>,
    /// Cursor for the next page (`ListJobs::before`), `None` on the last page.
    pub next: Option<JobId>,
}

/// Rescue running jobs whose lease expired by the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RescueExpired {
    /// Kinds with a registered reconciler: their jobs go to reconciling.
    pub reconciler_kinds: Vec<JobKind>,
    /// Most jobs to rescue in this call.
    pub limit: u32,
}

/// One rescued job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rescued {
    /// The job.
    pub id: JobId,
    /// Its kind.
    pub kind: JobKind,
    /// Its queue.
    pub queue: QueueName,
    /// Its new state: queued, failed, reconciling or cancelled.
    pub to: JobState,
    /// False when the rescue gave the attempt back because the job's handler never started
    /// (it waited for a slot in a worker that stopped; see [`crate::Event::LeaseExpired`]).
    pub attempt_spent: bool,
}

/// Take reconciling jobs under a short lease for a reconcile sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimReconciling {
    /// The sweeping worker.
    pub worker: WorkerId,
    /// Kinds it has reconcilers for.
    pub kinds: Vec<JobKind>,
    /// Most jobs to take.
    pub limit: u32,
    /// Lease length.
    pub lease: Duration,
}

impl ClaimReconciling {
    /// Checks the lease ([`crate::lease::check_lease`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `lease`.
    pub fn validate(&self) -> Result<()> {
        check_lease(self.lease)
    }
}

/// Delete terminal jobs finished more than `older_than` ago (store clock), at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneJobs {
    /// Retention.
    pub older_than: Duration,
    /// Most rows to delete in this call (1..=100,000).
    pub limit: u32,
}

impl PruneJobs {
    /// Checks `limit` (1..=[`PRUNE_LIMIT_MAX`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `limit`.
    pub fn validate(&self) -> Result<()> {
        check_range("limit", self.limit, 1, PRUNE_LIMIT_MAX)
    }
}

/// A stream of store events; see [`JobStore::subscribe`].
pub type EventStream = Pin<Box<dyn Stream<Item = StoreEvent> + Send + 'static>>;

/// Something a worker may want to react to at once instead of at its next poll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum StoreEvent {
    /// Jobs became ready in this queue (enqueue, retry, requeue, release, resume), or a job of this queue
    /// that ran under the queue's own `max_running` bound (policy `queue:<queue>`) finished,
    /// freeing a place only this queue's jobs can wait for.
    JobsAvailable {
        /// The queue.
        queue: QueueName,
    },
    /// A cancel was requested for this running job.
    CancelRequested {
        /// The job.
        id: JobId,
    },
    /// Events may have been missed (reconnect, lagging subscriber): poll everything once.
    Resync,
    /// A limit policy was set or cleared, or a job that ran under a `max_running` bound of a
    /// kind's or an explicit key's policy finished: jobs held back may be claimable now (a
    /// cleared policy, a faster rate, a higher `max_running`, a freed place) in any queue, so
    /// every claim loop claims once instead of waiting for its next re-claim pause or poll.
    LimitsChanged,
}

/// The store contract (docs/design.md section 4). Implementations: `drover-store-memory`,
/// `drover-store-postgres`. Used as `Arc<dyn JobStore>`.
///
/// Time: every method uses the store's clock, never the caller's (docs/design.md section 9).
/// Errors: every method may return [`Error::Unavailable`] (transient) or [`Error::Fatal`]
/// (schema missing and the like) besides the errors listed on it.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait JobStore: Send + Sync + 'static {
    /// Enqueues a batch atomically; answers per job in input order.
    ///
    /// Per job, in order: validation ([`NewJob::validate`]); idempotency key (scoped to the
    /// tenant): same request -> the stored job with status `Replayed`, different request or a
    /// stored key without request hash -> `Conflict`; unique key (scoped to the tenant, among
    /// non-terminal jobs): a live holder -> that job with status `Duplicate`; then the quotas
    /// for all new jobs together. Repeats of a key inside one batch resolve to the first; an
    /// idempotency key repeated inside one batch with a different request is refused before
    /// anything is looked up ([`crate::job::check_batch_idempotency`]).
    ///
    /// A job with `depends_on` is settled against its stored dependencies
    /// ([`crate::workflow::settle_new`]): `waiting`, `queued` or `cancelled`, in the same
    /// atomic step; a dependency cannot end unseen meanwhile.
    ///
    /// # Errors
    /// `InvalidInput` (field prefixed `jobs[i].` for batches of more than one; an in-batch
    /// idempotency repeat names `jobs[i].idempotency_key`; a dependency that names no job of
    /// the tenant names `jobs[i].depends_on`), `Conflict`, `QuotaExceeded`. On any error
    /// nothing is stored.
    async fn jobs_enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>>;

    /// Enqueues a workflow graph as one unit, all or nothing: checks it
    /// ([`NewWorkflow::plan`]), then stores every job with a new workflow id, its name, and its
    /// dependencies (local names resolved to the new ids, plus any stored ids it names), as
    /// `jobs_enqueue` would in one batch (idempotency and unique keys, quotas for all of them
    /// together). Answers per job in input order.
    ///
    /// # Errors
    /// `InvalidInput` naming `jobs` or `jobs[i].<field>`; `Conflict`; `QuotaExceeded`. On any
    /// error nothing is stored.
    async fn workflow_enqueue(&self, workflow: NewWorkflow) -> Result<EnqueuedWorkflow>;

    /// Stores children of a running parent in one atomic step with a fenced write of the
    /// parent: the parent must be running under `token` with an unexpired lease; each child
    /// gets `parent_id`, the parent's workflow id, and is enqueued as by `jobs_enqueue` (keys,
    /// quotas, dependencies); the parent counts them as live children (replayed and duplicate
    /// answers are not new children). The parent's tenant is every child's tenant.
    ///
    /// # Errors
    /// `LeaseLost` for a stale or expired parent lease (nothing stored); `NotFound` for an
    /// unknown parent; `InvalidInput` as `jobs_enqueue`, `jobs[i].tenant` for a child of another
    /// tenant, `jobs` when the parent would have more than [`crate::job::CHILDREN_MAX`] live
    /// children; `Conflict`; `QuotaExceeded`.
    async fn children_enqueue(&self, children: EnqueueChildren) -> Result<Vec<Enqueued>>;

    /// Fetches the jobs with these ids (at most 1,000), in the order asked; ids of no stored
    /// job are left out.
    ///
    /// # Errors
    /// `InvalidInput` naming `ids` for more than 1,000.
    async fn jobs_get(&self, ids: Vec<JobId>) -> Result<Vec<Job>>;

    /// The tenants of the stored jobs among `ids` (at most 1,000), in no particular order;
    /// ids of no stored job are left out. A store reads no large field for it (a bulk action's
    /// scope and preview); by default it is read through [`JobStore::jobs_get`].
    ///
    /// # Errors
    /// As [`JobStore::jobs_get`].
    async fn jobs_tenants(&self, ids: Vec<JobId>) -> Result<Vec<(JobId, TenantId)>> {
        Ok(self
            .jobs_get(ids)
            .await?
            .into_iter()
            .map(|job| (job.id, job.tenant))
            .collect())
    }

    /// Fetches a workflow with all its jobs (children included).
    ///
    /// # Errors
    /// `NotFound` (entity workflow).
    async fn workflow_get(&self, id: WorkflowId) -> Result<Workflow>;

    /// Lists workflows newest first, each with its counts per state.
    ///
    /// # Errors
    /// `InvalidInput` from [`ListWorkflows::validate`].
    async fn workflows_list(&self, query: ListWorkflows) -> Result<WorkflowPage>;

    /// Cancels every job of a workflow that is not terminal, as `job_cancel` does for each
    /// (waiting and queued jobs cancelled, running ones signalled), in one atomic step.
    ///
    /// # Errors
    /// `NotFound`.
    async fn workflow_cancel(&self, id: WorkflowId) -> Result<WorkflowChange>;

    /// Retries every failed or cancelled job of a workflow in one atomic step
    /// ([`crate::workflow::plan_retry`]): each waits again for its dependencies that run again,
    /// the others are queued; quotas re-checked for them all.
    ///
    /// # Errors
    /// `NotFound`; `QuotaExceeded`; `Conflict` when a live job now holds a retried job's
    /// unique key.
    async fn workflow_retry(&self, id: WorkflowId) -> Result<WorkflowChange>;

    /// Fetches one job.
    ///
    /// # Errors
    /// `NotFound`.
    async fn job_get(&self, id: JobId) -> Result<Job>;

    /// Lists jobs newest first with filters and keyset pagination; the jobs carry the large
    /// fields `query.details` names (the others empty, and not read).
    ///
    /// # Errors
    /// `InvalidInput` from [`ListJobs::validate`].
    async fn jobs_list(&self, query: ListJobs) -> Result<JobPage>;

    /// Claims up to `limit` ready jobs, in order of priority (smaller first), then `run_at`,
    /// then id, from unpaused queues, of registered kinds, that every applicable limit policy
    /// admits. Jobs skipped for limits keep their place and spend nothing. Each claimed job is
    /// returned running, with attempt + 1, a new fencing token and the lease; the first
    /// `start` of them in claim order with `started_at` = the claim's time, the others
    /// (claimed ahead) without. When rates held back jobs the claim had room for, the answer
    /// says how long until the earliest of them is admissible ([`Claimed::retry_after`]).
    ///
    /// # Errors
    /// `InvalidInput` for a limit of 0 or above 10,000, a `start` above the limit, or a bad
    /// lease.
    async fn jobs_claim(&self, claim: ClaimJobs) -> Result<Claimed>;

    /// Extends leases and saves meta/progress, and records the start of jobs claimed ahead
    /// ([`HeartbeatItem::started`]); answers per item in input order.
    ///
    /// # Errors
    /// `InvalidInput` for a bad lease, a meta that is not an object, or a meta or progress
    /// larger than the meta bound (`SizeLimits::max_meta_bytes`) or holding a NUL character
    /// (`jobs[i].meta`, `jobs[i].progress` in batches of more than one).
    async fn jobs_heartbeat(&self, heartbeat: HeartbeatJobs) -> Result<Vec<HeartbeatReply>>;

    /// Records finished runs (and first the start of a job claimed ahead,
    /// [`FinishItem::started`]); answers per item in input order. An item with a stale token or
    /// an expired lease is answered `LeaseLost` and changes nothing. Of repeated ids only the
    /// first item counts (the others are answered `LeaseLost`). With
    /// [`SucceededJobs::Delete`] a recorded success deletes the job, unless a job depends on it
    /// or it is a child (its result is kept for them; retention prunes it later).
    ///
    /// In the same atomic step a job that ended propagates ([`crate::workflow::propagate`]):
    /// its dependents resolve, its parent counts one live child less (a waiting parent with
    /// none left is queued), a cancelled job's children are cancelled.
    ///
    /// # Errors
    /// `InvalidInput` when a result is larger than the size bound (nothing is recorded).
    async fn jobs_finish(&self, items: Vec<FinishItem>) -> Result<Vec<FinishReply>>;

    /// Cancels a job: waiting, queued or reconciling -> cancelled; running ->
    /// `cancel_requested` and a [`StoreEvent::CancelRequested`]. In the same atomic step the
    /// cancel propagates ([`crate::workflow::propagate`]): the job's live children are cancelled
    /// or signalled, and when the job ended cancelled its dependents are cancelled (unless they
    /// run regardless), round after round.
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a finished job.
    async fn job_cancel(&self, id: JobId) -> Result<CancelOutcome>;

    /// Operator retry of a finished job: same id and args, attempt 0, ready at once, quotas
    /// re-checked, unique key kept.
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a waiting, queued, running or reconciling job;
    /// `QuotaExceeded`; `Conflict` when another live job of the tenant now holds its unique key.
    async fn job_retry(&self, id: JobId) -> Result<Job>;

    /// Operator requeue of a queued job: one waiting for its `run_at` (scheduled, a retry's
    /// backoff, a snooze) becomes ready now (`run_at` = the store's now; attempts, errors and
    /// keys unchanged) and wakes its queue's workers ([`StoreEvent::JobsAvailable`]); a ready
    /// one is left as it is (`changed: false`). A paused queue or a limit policy still holds
    /// it back.
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a running, reconciling or finished job (a finished
    /// job runs again with [`JobStore::job_retry`]).
    async fn job_requeue(&self, id: JobId) -> Result<RequeueOutcome>;

    /// Operator delete of a job that is not running or reconciling, decided by
    /// [`crate::delete::check_delete`] on the job and its relations read under the same lock:
    /// a job that retention would keep for live jobs (a job not terminal depends on it, it has
    /// live children, its parent is not terminal or still counts it) is refused. The job goes
    /// with its idempotency key, its dependency edges and its link to its parent, in one
    /// atomic step; answers the job as it was.
    ///
    /// # Errors
    /// `NotFound`; `InvalidTransition` for a running or reconciling job; `Conflict` for a job
    /// the workflow rules keep, naming the job in the way.
    async fn job_delete(&self, id: JobId) -> Result<Job>;

    /// Rescues up to `limit` running jobs whose lease expired: to queued, or failed when
    /// attempts are spent, or reconciling for reconciler kinds, or cancelled when a cancel was
    /// requested; a job whose handler never started goes back to queued with its attempt given
    /// back ([`crate::Event::LeaseExpired`]). Each expired lease is rescued exactly once,
    /// however many callers race.
    async fn jobs_rescue_expired(&self, rescue: RescueExpired) -> Result<Vec<Rescued>>;

    /// Takes up to `limit` reconciling jobs of `kinds` whose reconcile lease is free, under a
    /// new lease and fencing token.
    ///
    /// # Errors
    /// `InvalidInput` for a bad lease.
    async fn jobs_claim_reconciling(&self, claim: ClaimReconciling) -> Result<Vec<Job>>;

    /// Records a reconciler's verdict.
    ///
    /// # Errors
    /// `NotFound`; `LeaseLost` when the reconcile lease is stale or expired.
    async fn job_reconcile(
        &self,
        id: JobId,
        token: FencingToken,
        resolution: Resolution,
    ) -> Result<Transition>;

    /// Deletes terminal jobs finished before `now - older_than`, at most `limit`; returns how
    /// many. Never touches waiting, queued, running or reconciling jobs, a job that a job not
    /// yet terminal depends on, a parent with live children, or a child whose parent is not
    /// terminal (docs/design.md section 10).
    ///
    /// # Errors
    /// `InvalidInput` for a limit of 0 or above 100,000.
    async fn jobs_prune(&self, prune: PruneJobs) -> Result<u64>;

    /// Pauses a queue cluster-wide (creating its record if needed). Idempotent: pausing a
    /// paused queue keeps the time it was first paused and answers `changed: false`. Of
    /// concurrent pauses of one unpaused queue exactly one answers `changed: true`.
    async fn queue_pause(&self, queue: QueueName) -> Result<QueueChange>;

    /// Resumes a queue (its stored pause is removed). Idempotent: resuming a queue that is not
    /// paused answers `changed: false`; of concurrent resumes of one paused queue exactly one
    /// answers `changed: true`. Emits [`StoreEvent::JobsAvailable`] either way.
    async fn queue_resume(&self, queue: QueueName) -> Result<QueueChange>;

    /// Queues that have jobs or a stored pause state, by name.
    async fn queues_list(&self) -> Result<Vec<QueueInfo>>;

    /// Counts per queue and state, ready jobs, running jobs and lag, and the vacuum status
    /// ([`JobStore::vacuum_status`]).
    async fn queue_snapshot(&self) -> Result<Snapshot>;

    /// What keeps the database from cleaning the jobs table: the oldest open transaction,
    /// the replication slot holding the oldest horizon, dead and live row estimates, the last
    /// vacuum. `None` for a store without vacuum (memory). One cheap read of statistics, for
    /// operators and a worker's periodic check, never the claim path.
    async fn vacuum_status(&self) -> Result<Option<VacuumStatus>>;

    /// Registers (or re-registers) a worker; its heartbeat time is now.
    async fn worker_register(&self, worker: WorkerRegistration) -> Result<WorkerInfo>;

    /// Records a worker heartbeat.
    ///
    /// # Errors
    /// `NotFound` when the worker is not registered (pruned as stale): re-register.
    async fn worker_heartbeat(&self, id: WorkerId) -> Result<()>;

    /// Adds what a worker sends ([`crate::activity`]) to the activity stored for each of its
    /// minutes and queues, and forgets minutes older than [`crate::ACTIVITY_RETENTION`] by
    /// the store's clock (a minute sent that old is not kept).
    ///
    /// # Errors
    /// `InvalidInput` naming `activity[i]` and the field ([`ActivityMinute::validate_all`]).
    async fn activity_record(&self, activity: Vec<ActivityMinute>) -> Result<()>;

    /// The activity of the minutes from `query.since` on, one entry per minute and queue that
    /// has any, by minute and queue.
    async fn activity_list(&self, query: ListActivity) -> Result<Vec<ActivityMinute>>;

    /// Removes a worker's registration. Idempotent.
    async fn worker_deregister(&self, id: WorkerId) -> Result<()>;

    /// Registered workers, by id.
    async fn workers_list(&self) -> Result<Vec<WorkerInfo>>;

    /// Removes workers whose last heartbeat is older than `older_than`; returns how many.
    async fn workers_prune(&self, older_than: Duration) -> Result<u64>;

    /// Limit policies with their current usage, by key.
    async fn limits_list(&self) -> Result<Vec<LimitStatus>>;

    /// Creates or replaces a limit policy. A replaced rate keeps its state, the next claim
    /// coming one new interval after the last one ([`crate::Rate::replacing`]). Emits
    /// [`StoreEvent::LimitsChanged`].
    async fn limit_set(&self, policy: LimitPolicy) -> Result<LimitPolicy>;

    /// Removes a limit policy; jobs it held become claimable. Emits
    /// [`StoreEvent::LimitsChanged`].
    ///
    /// # Errors
    /// `NotFound` when no policy has the key.
    async fn limit_clear(&self, key: LimitKey) -> Result<()>;

    /// Schedules by name.
    async fn schedules_list(&self) -> Result<Vec<Schedule>>;

    /// Creates or replaces a schedule by the rule of [`Schedule::upsert`], decided under the
    /// store's lock on the schedule: writing the stored definition again changes nothing (its
    /// missed ticks still fire); a new job keeps the ticks going; a new timing (cron, zone)
    /// fires its ticks after now only. The last fired tick is always kept, so no upsert makes a
    /// tick fire twice, whatever fires concurrently.
    ///
    /// # Errors
    /// `InvalidInput` from [`NewSchedule::validate`].
    async fn schedule_upsert(&self, schedule: NewSchedule) -> Result<ScheduleUpsert>;

    /// Removes a schedule.
    ///
    /// # Errors
    /// `NotFound`.
    async fn schedule_remove(&self, name: ScheduleName) -> Result<()>;

    /// Fires a tick: if the schedule exists with the `created_at` of `fire`, `tick` is after
    /// it, and its last tick is before `tick`, sets its last tick to `tick` and enqueues `job`,
    /// atomically; returns the enqueue answer. Returns `None` when another caller already
    /// fired this tick or a later one, or the schedule's timing changed since it was read (or
    /// it was removed and added again), so each tick enqueues exactly once across all workers
    /// and writes.
    ///
    /// # Errors
    /// Those of `jobs_enqueue` (then the tick is not consumed); `NotFound`.
    async fn schedule_fire(&self, fire: FireSchedule) -> Result<Option<Enqueued>>;

    /// Runs an operator write ([`Operation`]) by `actor` and stores its audit record
    /// ([`crate::audit::NewAuditEntry::new`], dated by the store's clock) in the same atomic step: both are
    /// stored or neither is (docs/audit.md). The write behaves exactly as its own method
    /// (`job_cancel`, `queue_pause`, ...); a refused one stores no record.
    ///
    /// # Errors
    /// `InvalidInput` naming `actor` ([`Actor::validate`]); then those of the write's method.
    async fn operate(&self, operation: Operation, actor: Actor) -> Result<Operated>;

    /// Lists audit records newest first, a page at a time.
    ///
    /// # Errors
    /// `InvalidInput` naming `limit` ([`ListAudit::validate`]).
    async fn audit_list(&self, query: ListAudit) -> Result<AuditPage>;

    /// Deletes at most `limit` audit records older than `older_than` (store clock); answers
    /// how many.
    ///
    /// # Errors
    /// `InvalidInput` naming `limit` ([`PruneAudit::validate`]).
    async fn audit_prune(&self, prune: PruneAudit) -> Result<u64>;

    /// The store's clock.
    async fn now(&self) -> Result<DateTime<Utc>>;

    /// Readiness: the store answers and its schema is current.
    ///
    /// # Errors
    /// `Unavailable` when it does not answer; `Fatal` when the schema is missing or old.
    async fn check_ready(&self) -> Result<()>;

    /// Subscribes to wake-up events (enqueues, resumes, cancels). A store that cannot push
    /// events returns a stream that never yields; workers poll as a fallback either way.
    async fn subscribe(&self) -> Result<EventStream>;

    /// The store's configuration.
    fn config(&self) -> StoreConfig;

    /// Enqueues one job; see [`JobStore::jobs_enqueue`].
    async fn job_enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let mut answers = self.jobs_enqueue(vec![job]).await?;
        answers
            .pop()
            .ok_or_else(|| Error::fatal("store answered an enqueue with no job"))
    }

    /// Records one finished run of a job whose start the store knows; `LeaseLost` as an
    /// error.
    async fn job_finish(&self, id: JobId, token: FencingToken, finish: Finish) -> Result<JobState> {
        let reply = self
            .jobs_finish(vec![FinishItem {
                parent: None,
                id,
                token,
                finish,
                started: None,
            }])
            .await?
            .pop()
            .ok_or_else(|| Error::fatal("store answered a finish with no reply"))?;
        match reply {
            FinishReply::Recorded { to, .. } => Ok(to),
            FinishReply::LeaseLost { id } => Err(Error::LeaseLost { job_id: id }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_details_parse_from_a_list_of_names_or_all() {
        let parse = |text: &str| JobDetails::parse_list("include", text);
        assert_eq!(parse("all").unwrap(), JobDetails::ALL);
        assert_eq!(
            parse(" args , errors,args").unwrap(),
            JobDetails {
                args: true,
                errors: true,
                ..JobDetails::NONE
            }
        );
        assert_eq!(
            parse("args,result,errors,progress").unwrap(),
            JobDetails::ALL
        );
        for bad in ["", "args,", "meta", "args,all"] {
            match parse(bad) {
                Err(Error::InvalidInput { field, reason }) => {
                    assert_eq!(field, "include");
                    assert!(
                        reason.starts_with(
                            "must be a comma-separated list of args, result, errors, progress (or all)"
                        ),
                        "{bad:?}: {reason}"
                    );
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(JobDetails::ALL.names(), JobDetails::NAMES);
        assert!(JobDetails::NONE.names().is_empty());
        assert_eq!(ListJobs::default().details, JobDetails::ALL);
    }

    #[test]
    fn params_check_their_bounds_and_name_the_field() {
        let field_of = |result: Result<()>| match result {
            Err(Error::InvalidInput { field, .. }) => field,
            other => panic!("expected InvalidInput, got {other:?}"),
        };
        let claim = ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: Vec::new(),
            kinds: Vec::new(),
            limit: CLAIM_LIMIT_MAX,
            start: CLAIM_LIMIT_MAX,
            lease: Duration::from_secs(30),
        };
        claim.validate().unwrap();
        let over = ClaimJobs {
            limit: CLAIM_LIMIT_MAX + 1,
            ..claim.clone()
        };
        assert_eq!(field_of(over.validate()), "limit");
        let start = ClaimJobs {
            limit: 2,
            start: 3,
            ..claim.clone()
        };
        assert_eq!(field_of(start.validate()), "start");
        let lease = ClaimJobs {
            lease: Duration::ZERO,
            ..claim
        };
        assert_eq!(field_of(lease.validate()), "lease");
        let prune = |limit| PruneJobs {
            older_than: Duration::ZERO,
            limit,
        };
        prune(PRUNE_LIMIT_MAX).validate().unwrap();
        assert_eq!(field_of(prune(0).validate()), "limit");
        assert_eq!(field_of(prune(PRUNE_LIMIT_MAX + 1).validate()), "limit");
        let list = |limit| ListJobs {
            limit,
            ..ListJobs::default()
        };
        list(0).validate().unwrap();
        list(LIST_LIMIT_MAX).validate().unwrap();
        assert_eq!(field_of(list(LIST_LIMIT_MAX + 1).validate()), "limit");
        let item = |meta| HeartbeatItem {
            id: JobId::new_v7(),
            token: FencingToken(1),
            meta,
            progress: None,
            started: None,
        };
        let heartbeat = HeartbeatJobs {
            lease: Duration::from_secs(30),
            jobs: vec![item(Some(serde_json::json!({}))), item(Some(Value::Null))],
        };
        let sizes = SizeLimits::default();
        assert_eq!(field_of(heartbeat.validate(&sizes)), "jobs[1].meta");
    }

    #[test]
    fn stripped_jobs_keep_only_the_details_asked_for() {
        let mut job = NewJob::new(
            crate::JobKind::parse("k").unwrap(),
            serde_json::json!({"big": "input"}),
        )
        .into_job(JobId::new_v7(), chrono::Utc::now());
        job.result = Some(serde_json::json!(1));
        job.progress = Some(serde_json::json!({"step": 2}));
        job.errors.push(crate::AttemptError {
            attempt: 1,
            at: job.created_at,
            message: "boom".into(),
        });
        let whole = job.clone();
        JobDetails::ALL.strip(&mut job);
        assert_eq!(job, whole);
        JobDetails {
            errors: true,
            ..JobDetails::NONE
        }
        .strip(&mut job);
        assert_eq!(
            (&job.args, &job.result, job.errors.len(), &job.progress),
            (&Value::Null, &None, 1, &None)
        );
        assert_eq!((job.id, &job.meta), (whole.id, &whole.meta));
    }
}

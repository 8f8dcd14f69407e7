//! The audit log of operator actions (docs/audit.md).
//!
//! Every operator write (pause, resume, cancel, retry, requeue, delete, bulk actions, workflow cancel and retry,
//! limit and schedule changes, prune) is an [`Operation`] run by
//! [`JobStore::operate`](crate::JobStore::operate), which stores the action and its
//! [`AuditEntry`] together: in one transaction (PostgreSQL) or one step under the store's lock
//! (memory), so an action without its record, or a record without its action, is never stored.
//! What a record says is decided here, once, by [`NewAuditEntry::new`] from the operation and
//! its answer ([`Operated`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::bounds::{check_range, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, PRUNE_LIMIT_MAX};
use crate::bulk::{BulkAction, BulkJobs, BulkOutcome};
use crate::error::{Error, Result};
use crate::job::{Job, JobId, WorkflowId};
use crate::limits::LimitPolicy;
use crate::names::{LimitKey, QueueName, ScheduleName, TenantId};
use crate::queue::QueueChange;
use crate::schedule::{NewSchedule, ScheduleUpsert};
use crate::store::{CancelOutcome, JobStore, PruneJobs, RequeueOutcome};
use crate::workflow::WorkflowChange;

/// Default retention of audit entries: 90 days, longer than the jobs they name (7 days), so an
/// action can be traced after its jobs are gone.
pub const AUDIT_RETENTION_DEFAULT: Duration = Duration::from_secs(90 * 24 * 3600);

/// Longest actor name stored, in bytes.
pub const ACTOR_NAME_MAX: usize = 200;

/// Where an operator action came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditSource {
    /// The web dashboard.
    Dashboard,
    /// The HTTP API (`/v1`).
    Api,
    /// The `drover` command line.
    Cli,
    /// An embedding application calling the runner's `Client`.
    Library,
}

impl AuditSource {
    /// Every source, in order.
    pub const ALL: [AuditSource; 4] = [
        AuditSource::Dashboard,
        AuditSource::Api,
        AuditSource::Cli,
        AuditSource::Library,
    ];

    /// `dashboard`, `api`, `cli` or `library`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditSource::Dashboard => "dashboard",
            AuditSource::Api => "api",
            AuditSource::Cli => "cli",
            AuditSource::Library => "library",
        }
    }
}

impl fmt::Display for AuditSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AuditSource {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        AuditSource::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| Error::invalid("source", "must be dashboard, api, cli or library"))
    }
}

/// What an operator did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AuditAction {
    /// A job cancelled (or its cancel requested).
    #[serde(rename = "job.cancel")]
    JobCancel,
    /// A finished job run again.
    #[serde(rename = "job.retry")]
    JobRetry,
    /// A queued job made ready now.
    #[serde(rename = "job.requeue")]
    JobRequeue,
    /// A job deleted.
    #[serde(rename = "job.delete")]
    JobDelete,
    /// A queue paused.
    #[serde(rename = "queue.pause")]
    QueuePause,
    /// A queue resumed.
    #[serde(rename = "queue.resume")]
    QueueResume,
    /// A workflow's live jobs cancelled.
    #[serde(rename = "workflow.cancel")]
    WorkflowCancel,
    /// A workflow's failed and cancelled jobs run again.
    #[serde(rename = "workflow.retry")]
    WorkflowRetry,
    /// A limit policy set.
    #[serde(rename = "limit.set")]
    LimitSet,
    /// A limit policy removed.
    #[serde(rename = "limit.clear")]
    LimitClear,
    /// A schedule created or replaced.
    #[serde(rename = "schedule.upsert")]
    ScheduleUpsert,
    /// A schedule removed.
    #[serde(rename = "schedule.remove")]
    ScheduleRemove,
    /// Finished jobs past a retention deleted (one batch).
    #[serde(rename = "jobs.prune")]
    JobsPrune,
    /// A bulk cancel: the jobs of a list of ids or of a filter.
    #[serde(rename = "jobs.cancel")]
    JobsCancel,
    /// A bulk retry.
    #[serde(rename = "jobs.retry")]
    JobsRetry,
    /// A bulk delete.
    #[serde(rename = "jobs.delete")]
    JobsDelete,
}

impl AuditAction {
    /// Every action, in order.
    pub const ALL: [AuditAction; 16] = [
        AuditAction::JobCancel,
        AuditAction::JobRetry,
        AuditAction::JobRequeue,
        AuditAction::JobDelete,
        AuditAction::QueuePause,
        AuditAction::QueueResume,
        AuditAction::WorkflowCancel,
        AuditAction::WorkflowRetry,
        AuditAction::LimitSet,
        AuditAction::LimitClear,
        AuditAction::ScheduleUpsert,
        AuditAction::ScheduleRemove,
        AuditAction::JobsPrune,
        AuditAction::JobsCancel,
        AuditAction::JobsRetry,
        AuditAction::JobsDelete,
    ];

    /// The stored name: `noun.verb`, such as `job.cancel`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::JobCancel => "job.cancel",
            AuditAction::JobRetry => "job.retry",
            AuditAction::JobRequeue => "job.requeue",
            AuditAction::JobDelete => "job.delete",
            AuditAction::QueuePause => "queue.pause",
            AuditAction::QueueResume => "queue.resume",
            AuditAction::WorkflowCancel => "workflow.cancel",
            AuditAction::WorkflowRetry => "workflow.retry",
            AuditAction::LimitSet => "limit.set",
            AuditAction::LimitClear => "limit.clear",
            AuditAction::ScheduleUpsert => "schedule.upsert",
            AuditAction::ScheduleRemove => "schedule.remove",
            AuditAction::JobsPrune => "jobs.prune",
            AuditAction::JobsCancel => "jobs.cancel",
            AuditAction::JobsRetry => "jobs.retry",
            AuditAction::JobsDelete => "jobs.delete",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AuditAction {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        AuditAction::ALL
            .into_iter()
            .find(|a| a.as_str() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
                Error::invalid("action", format!("must be one of {}", names.join(", ")))
            })
    }
}

/// Who acts, for whom, from where: the context every [`Operation`] runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// Who: an API token's name or short fingerprint (never the token), a user name for the
    /// command line, or what an embedding application chose. 1..=200 bytes, no control
    /// characters.
    pub name: String,
    /// The tenant the actor is limited to; `None` for every tenant.
    pub tenant: Option<TenantId>,
    /// From where.
    pub source: AuditSource,
}

impl Actor {
    /// An actor of every tenant.
    pub fn new(name: impl Into<String>, source: AuditSource) -> Self {
        Actor {
            name: name.into(),
            tenant: None,
            source,
        }
    }

    /// Limited to `tenant`.
    pub fn for_tenant(mut self, tenant: TenantId) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// Checks `name` (1..=200 bytes, no control characters).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `actor`.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty() || self.name.len() > ACTOR_NAME_MAX {
            return Err(Error::invalid(
                "actor",
                format!("must be 1 to {ACTOR_NAME_MAX} bytes"),
            ));
        }
        if self.name.chars().any(char::is_control) {
            return Err(Error::invalid(
                "actor",
                "must not contain control characters",
            ));
        }
        Ok(())
    }
}

/// An operator write, run with its audit record by
/// [`JobStore::operate`](crate::JobStore::operate).
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// [`JobStore::job_cancel`](crate::JobStore::job_cancel).
    JobCancel(JobId),
    /// [`JobStore::job_retry`](crate::JobStore::job_retry).
    JobRetry(JobId),
    /// [`JobStore::job_requeue`](crate::JobStore::job_requeue).
    JobRequeue(JobId),
    /// [`JobStore::job_delete`](crate::JobStore::job_delete).
    JobDelete(JobId),
    /// [`JobStore::queue_pause`](crate::JobStore::queue_pause).
    QueuePause(QueueName),
    /// [`JobStore::queue_resume`](crate::JobStore::queue_resume).
    QueueResume(QueueName),
    /// [`JobStore::workflow_cancel`](crate::JobStore::workflow_cancel).
    WorkflowCancel(WorkflowId),
    /// [`JobStore::workflow_retry`](crate::JobStore::workflow_retry).
    WorkflowRetry(WorkflowId),
    /// [`JobStore::limit_set`](crate::JobStore::limit_set).
    LimitSet(LimitPolicy),
    /// [`JobStore::limit_clear`](crate::JobStore::limit_clear).
    LimitClear(LimitKey),
    /// [`JobStore::schedule_upsert`](crate::JobStore::schedule_upsert).
    ScheduleUpsert(NewSchedule),
    /// [`JobStore::schedule_remove`](crate::JobStore::schedule_remove).
    ScheduleRemove(ScheduleName),
    /// [`JobStore::jobs_prune`](crate::JobStore::jobs_prune): one batch.
    JobsPrune(PruneJobs),
    /// A bulk action ([`crate::bulk`]): the job operation of its action on every job of its
    /// selection, in steps; one record.
    JobsBulk(BulkJobs),
}

impl Operation {
    /// Runs the operation by the store's own method for it, without a record: for a store
    /// whose action and record cannot be one transaction (the memory store records right
    /// after) and for views that pass operations on to the methods of another store.
    ///
    /// # Errors
    /// Those of the method.
    pub async fn run_unrecorded(self, store: &dyn JobStore) -> Result<Operated> {
        Ok(match self {
            Operation::JobCancel(id) => Operated::JobCancel(store.job_cancel(id).await?),
            Operation::JobRetry(id) => Operated::JobRetry(store.job_retry(id).await?),
            Operation::JobRequeue(id) => Operated::JobRequeue(store.job_requeue(id).await?),
            Operation::JobDelete(id) => Operated::JobDelete(store.job_delete(id).await?),
            Operation::QueuePause(queue) => Operated::QueuePause(store.queue_pause(queue).await?),
            Operation::QueueResume(queue) => {
                Operated::QueueResume(store.queue_resume(queue).await?)
            }
            Operation::WorkflowCancel(id) => {
                Operated::WorkflowCancel(store.workflow_cancel(id).await?)
            }
            Operation::WorkflowRetry(id) => {
                Operated::WorkflowRetry(store.workflow_retry(id).await?)
            }
            Operation::LimitSet(policy) => Operated::LimitSet(store.limit_set(policy).await?),
            Operation::LimitClear(key) => {
                store.limit_clear(key).await?;
                Operated::LimitClear
            }
            Operation::ScheduleUpsert(schedule) => {
                Operated::ScheduleUpsert(store.schedule_upsert(schedule).await?)
            }
            Operation::ScheduleRemove(name) => {
                store.schedule_remove(name).await?;
                Operated::ScheduleRemove
            }
            Operation::JobsPrune(prune) => Operated::JobsPrune(store.jobs_prune(prune).await?),
            Operation::JobsBulk(bulk) => Operated::JobsBulk(crate::bulk::run(store, &bulk).await?),
        })
    }

    /// The operation as `actor` may run it, checked: a bulk action limited to the actor's
    /// tenant ([`BulkJobs::scoped`]); every other operation as it is (its own method checks
    /// it). Both stores call it before anything else.
    ///
    /// # Errors
    /// Those of [`BulkJobs::scoped`].
    pub fn scoped(self, actor: &Actor) -> Result<Operation> {
        match self {
            Operation::JobsBulk(bulk) => Ok(Operation::JobsBulk(bulk.scoped(actor)?)),
            other => Ok(other),
        }
    }

    /// The action recorded for it.
    pub fn action(&self) -> AuditAction {
        match self {
            Operation::JobCancel(_) => AuditAction::JobCancel,
            Operation::JobRetry(_) => AuditAction::JobRetry,
            Operation::JobRequeue(_) => AuditAction::JobRequeue,
            Operation::JobDelete(_) => AuditAction::JobDelete,
            Operation::QueuePause(_) => AuditAction::QueuePause,
            Operation::QueueResume(_) => AuditAction::QueueResume,
            Operation::WorkflowCancel(_) => AuditAction::WorkflowCancel,
            Operation::WorkflowRetry(_) => AuditAction::WorkflowRetry,
            Operation::LimitSet(_) => AuditAction::LimitSet,
            Operation::LimitClear(_) => AuditAction::LimitClear,
            Operation::ScheduleUpsert(_) => AuditAction::ScheduleUpsert,
            Operation::ScheduleRemove(_) => AuditAction::ScheduleRemove,
            Operation::JobsPrune(_) => AuditAction::JobsPrune,
            Operation::JobsBulk(bulk) => match bulk.action {
                BulkAction::Cancel => AuditAction::JobsCancel,
                BulkAction::Retry => AuditAction::JobsRetry,
                BulkAction::Delete => AuditAction::JobsDelete,
            },
        }
    }

    /// What it acts on, as JSON: ids and names, a policy, a schedule's timing (never its
    /// args), a prune's retention and batch size.
    pub fn target(&self) -> Value {
        match self {
            Operation::JobCancel(id)
            | Operation::JobRetry(id)
            | Operation::JobRequeue(id)
            | Operation::JobDelete(id) => {
                json!({ "job": id.to_string() })
            }
            Operation::QueuePause(queue) | Operation::QueueResume(queue) => {
                json!({ "queue": queue.as_str() })
            }
            Operation::WorkflowCancel(id) | Operation::WorkflowRetry(id) => {
                json!({ "workflow": id.to_string() })
            }
            Operation::LimitSet(policy) => json!({
                "limit": policy.key.as_str(),
                "max_running": policy.max_running,
                "rate": policy.rate.map(|r| json!({
                    "count": r.count,
                    "period_ms": u64::try_from(r.period.as_millis()).unwrap_or(u64::MAX),
                })),
            }),
            Operation::LimitClear(key) => json!({ "limit": key.as_str() }),
            Operation::ScheduleUpsert(schedule) => json!({
                "schedule": schedule.name.as_str(),
                "cron": schedule.cron,
                "timezone": schedule.timezone,
                "kind": schedule.kind.as_str(),
                "queue": schedule.queue.as_str(),
            }),
            Operation::ScheduleRemove(name) => json!({ "schedule": name.as_str() }),
            Operation::JobsPrune(prune) => json!({
                "older_than_ms": u64::try_from(prune.older_than.as_millis()).unwrap_or(u64::MAX),
                "limit": prune.limit,
            }),
            Operation::JobsBulk(bulk) => bulk.target(),
        }
    }
}

/// The store's answer to an [`Operation`], one variant per operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Operated {
    /// Answer of [`Operation::JobCancel`].
    JobCancel(CancelOutcome),
    /// Answer of [`Operation::JobRetry`].
    JobRetry(Job),
    /// Answer of [`Operation::JobRequeue`].
    JobRequeue(RequeueOutcome),
    /// Answer of [`Operation::JobDelete`]: the job as it was when deleted.
    JobDelete(Job),
    /// Answer of [`Operation::QueuePause`].
    QueuePause(QueueChange),
    /// Answer of [`Operation::QueueResume`].
    QueueResume(QueueChange),
    /// Answer of [`Operation::WorkflowCancel`].
    WorkflowCancel(WorkflowChange),
    /// Answer of [`Operation::WorkflowRetry`].
    WorkflowRetry(WorkflowChange),
    /// Answer of [`Operation::LimitSet`].
    LimitSet(LimitPolicy),
    /// Answer of [`Operation::LimitClear`].
    LimitClear,
    /// Answer of [`Operation::ScheduleUpsert`].
    ScheduleUpsert(ScheduleUpsert),
    /// Answer of [`Operation::ScheduleRemove`].
    ScheduleRemove,
    /// Answer of [`Operation::JobsPrune`]: jobs deleted.
    JobsPrune(u64),
    /// Answer of [`Operation::JobsBulk`].
    JobsBulk(BulkOutcome),
}

impl Operated {
    /// How many jobs the operation touched: the job and the jobs its cancel reached, a
    /// workflow's changed jobs, the jobs pruned; 0 for queue, limit and schedule changes and
    /// for a call that changed nothing.
    pub fn jobs(&self) -> u64 {
        match self {
            Operated::JobCancel(outcome) => 1 + outcome.cascaded,
            Operated::JobRetry(_) | Operated::JobDelete(_) => 1,
            Operated::JobRequeue(outcome) => u64::from(outcome.changed),
            Operated::WorkflowCancel(change) | Operated::WorkflowRetry(change) => change.jobs,
            Operated::JobsPrune(deleted) => *deleted,
            Operated::JobsBulk(outcome) => outcome.jobs(),
            Operated::QueuePause(_)
            | Operated::QueueResume(_)
            | Operated::LimitSet(_)
            | Operated::LimitClear
            | Operated::ScheduleUpsert(_)
            | Operated::ScheduleRemove => 0,
        }
    }

    /// The tenant of the job acted on, for job operations.
    fn job_tenant(&self) -> Option<&TenantId> {
        match self {
            Operated::JobCancel(outcome) => Some(&outcome.job.tenant),
            Operated::JobRetry(job) | Operated::JobDelete(job) => Some(&job.tenant),
            Operated::JobRequeue(outcome) => Some(&outcome.job.tenant),
            _ => None,
        }
    }
}

/// An audit record to store beside its action; the store adds the id and the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditEntry {
    /// Who ([`Actor::name`]).
    pub actor: String,
    /// The actor's tenant, else the tenant of the job acted on, else for a bulk action the
    /// tenant its filter names or all its ids' jobs share ([`BulkJobs::record_tenant`]);
    /// `None` for an actor of every tenant acting on no one tenant (a queue, a workflow, a
    /// limit, a schedule, a prune, a bulk action across tenants).
    pub tenant: Option<TenantId>,
    /// What.
    pub action: AuditAction,
    /// On what ([`Operation::target`]).
    pub target: Value,
    /// How many jobs it touched ([`Operated::jobs`]).
    pub jobs: u64,
    /// From where.
    pub source: AuditSource,
}

impl NewAuditEntry {
    /// The record of `operation`, answered by `operated`, done by `actor`: the one rule for
    /// what a record says, used by both stores.
    pub fn new(actor: &Actor, operation: &Operation, operated: &Operated) -> Self {
        NewAuditEntry {
            actor: actor.name.clone(),
            tenant: actor
                .tenant
                .clone()
                .or_else(|| operated.job_tenant().cloned())
                .or_else(|| match operation {
                    Operation::JobsBulk(bulk) => bulk.record_tenant(),
                    _ => None,
                }),
            action: operation.action(),
            target: operation.target(),
            jobs: operated.jobs(),
            source: actor.source,
        }
    }
}

/// A stored audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Increasing with every record; the keyset cursor of [`ListAudit::before`].
    pub id: i64,
    /// When, by the store's clock.
    pub at: DateTime<Utc>,
    /// Who.
    pub actor: String,
    /// For which tenant ([`NewAuditEntry::tenant`]).
    pub tenant: Option<TenantId>,
    /// What.
    pub action: AuditAction,
    /// On what.
    pub target: Value,
    /// How many jobs it touched.
    pub jobs: u64,
    /// From where.
    pub source: AuditSource,
}

impl AuditEntry {
    /// The stored form of `entry`.
    pub fn stored(id: i64, at: DateTime<Utc>, entry: NewAuditEntry) -> Self {
        AuditEntry {
            id,
            at,
            actor: entry.actor,
            tenant: entry.tenant,
            action: entry.action,
            target: entry.target,
            jobs: entry.jobs,
            source: entry.source,
        }
    }

    /// True when the entry passes every filter of `query` (the cursor aside).
    pub fn matches(&self, query: &ListAudit) -> bool {
        query.action.is_none_or(|a| a == self.action)
            && query.source.is_none_or(|s| s == self.source)
            && query.actor.as_ref().is_none_or(|a| *a == self.actor)
            && query
                .tenant
                .as_ref()
                .is_none_or(|t| self.tenant.as_ref() == Some(t))
    }
}

/// Filters and page of [`JobStore::audit_list`](crate::JobStore::audit_list), newest first;
/// filters combine with AND.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ListAudit {
    /// Only this action.
    pub action: Option<AuditAction>,
    /// Only from this source.
    pub source: Option<AuditSource>,
    /// Only by this actor.
    pub actor: Option<String>,
    /// Only records of this tenant.
    pub tenant: Option<TenantId>,
    /// Keyset cursor: only records with an id smaller than this (the previous page's `next`).
    pub before: Option<i64>,
    /// Page size, 1..=1,000 (default 50 when 0).
    pub limit: u32,
}

impl ListAudit {
    /// Checks the page size.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `limit` (above 1,000).
    pub fn validate(&self) -> Result<()> {
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

/// One page of audit records, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    /// The records, by id descending.
    pub entries: Vec<AuditEntry>,
    /// Cursor for the next page ([`ListAudit::before`]), `None` on the last page.
    pub next: Option<i64>,
}

/// Delete audit records older than a retention
/// ([`JobStore::audit_prune`](crate::JobStore::audit_prune)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneAudit {
    /// Retention.
    pub older_than: Duration,
    /// Most records to delete in this call (1..=100,000).
    pub limit: u32,
}

impl PruneAudit {
    /// Checks `limit` (1..=[`PRUNE_LIMIT_MAX`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `limit`.
    pub fn validate(&self) -> Result<()> {
        check_range("limit", self.limit, 1, PRUNE_LIMIT_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_bad_ones_name_the_field() {
        for action in AuditAction::ALL {
            assert_eq!(action.as_str().parse::<AuditAction>().unwrap(), action);
            assert_eq!(
                serde_json::to_value(action).unwrap(),
                json!(action.as_str())
            );
        }
        for source in AuditSource::ALL {
            assert_eq!(source.as_str().parse::<AuditSource>().unwrap(), source);
        }
        let err = "job.remove".parse::<AuditAction>().unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput { field, .. } if field == "action"),
            "{err}"
        );
        let err = "web".parse::<AuditSource>().unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput { field, .. } if field == "source"),
            "{err}"
        );
    }

    #[test]
    fn an_actor_name_is_bounded_and_printable() {
        assert!(Actor::new("ops", AuditSource::Cli).validate().is_ok());
        for bad in [String::new(), "a\nb".to_owned(), "x".repeat(201)] {
            let err = Actor::new(bad, AuditSource::Cli).validate().unwrap_err();
            assert!(
                matches!(&err, Error::InvalidInput { field, .. } if field == "actor"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_record_names_the_target_and_counts_the_jobs() {
        let actor = Actor::new("token:0a1b2c3d", AuditSource::Api)
            .for_tenant(TenantId::parse("acme").unwrap());
        let id = WorkflowId(uuid::Uuid::nil());
        let operation = Operation::WorkflowCancel(id);
        let entry = NewAuditEntry::new(
            &actor,
            &operation,
            &Operated::WorkflowCancel(WorkflowChange { id, jobs: 4 }),
        );
        assert_eq!(entry.action, AuditAction::WorkflowCancel);
        assert_eq!(entry.target, json!({ "workflow": id.to_string() }));
        assert_eq!(entry.jobs, 4);
        assert_eq!(entry.tenant, Some(TenantId::parse("acme").unwrap()));
        assert_eq!(entry.source, AuditSource::Api);
        let prune = Operation::JobsPrune(PruneJobs {
            older_than: Duration::from_secs(60),
            limit: 10,
        });
        let entry = NewAuditEntry::new(
            &Actor::new("ops", AuditSource::Cli),
            &prune,
            &Operated::JobsPrune(7),
        );
        assert_eq!(
            entry.target,
            json!({ "older_than_ms": 60_000, "limit": 10 })
        );
        assert_eq!((entry.jobs, entry.tenant), (7, None));
    }

    #[test]
    fn the_page_size_is_bounded() {
        assert_eq!(ListAudit::default().page_size(), LIST_LIMIT_DEFAULT);
        let err = ListAudit {
            limit: 1_001,
            ..ListAudit::default()
        }
        .validate()
        .unwrap_err();
        assert!(matches!(&err, Error::InvalidInput { field, .. } if field == "limit"));
    }
}

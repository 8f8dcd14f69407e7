//! Drover's pure core: the job model, the state machine, the [`JobStore`] contract and its one
//! error type.
//!
//! Nothing here does I/O, reads the system clock in its logic, or knows a database: stores
//! implement [`JobStore`], the runner drives it, and every rule that must hold the same way in
//! every store (transitions, validation, backoff, limit admission, cron ticks, JSON
//! containment) lives here once. See ARCHITECTURE.md and docs/design.md.

pub mod activity;
pub mod audit;
pub mod bounds;
pub mod bulk;
pub mod clock;
pub mod delete;
pub mod error;
pub mod job;
pub mod json;
pub mod lease;
pub mod limits;
pub mod names;
pub mod queue;
pub mod retry;
pub mod schedule;
pub mod search;
pub mod state;
pub mod store;
pub mod trace;
pub mod workflow;

pub use activity::{ActivityMinute, Histogram, ListActivity, ACTIVITY_RETENTION};
pub use audit::{
    Actor, AuditAction, AuditEntry, AuditPage, AuditSource, ListAudit, NewAuditEntry, Operated,
    Operation, PruneAudit, AUDIT_RETENTION_DEFAULT,
};
pub use bulk::{BulkAction, BulkJobs, BulkOutcome, Selection};
pub use clock::{Clock, ManualClock, SystemClock};
pub use delete::{check_delete, DeleteLinks};
pub use error::{BoxError, Entity, Error, EventName, Quota, Result};
pub use job::{
    AttemptError, EnqueueStatus, Enqueued, Job, JobId, NewJob, RunAt, SizeLimits, WorkflowId,
};
pub use lease::FencingToken;
pub use limits::{Admission, LimitPolicy, LimitState, LimitStatus, Rate};
pub use names::{JobKind, LimitKey, QueueName, ScheduleName, TenantId, WorkerId};
pub use queue::{
    QueueChange, QueueInfo, QueueSnapshot, Snapshot, VacuumStatus, WorkerInfo, WorkerRegistration,
};
pub use retry::Backoff;
pub use schedule::{CronSpec, NewSchedule, Schedule, ScheduleChange, ScheduleUpsert};
pub use state::{apply, Event, JobState, Resolution, Retry, Transition};
#[cfg(feature = "mock")]
pub use store::MockJobStore;
pub use store::{
    CancelEffect, CancelOutcome, ClaimJobs, ClaimReconciling, Claimed, EventStream, Finish,
    FinishItem, FinishReply, FireSchedule, HeartbeatItem, HeartbeatJobs, HeartbeatReply,
    JobDetails, JobPage, JobStore, ListJobs, PruneJobs, Quotas, RequeueOutcome, RescueExpired,
    Rescued, StoreConfig, StoreEvent, SucceededJobs,
};
pub use trace::TraceContext;
pub use workflow::{
    Dependency, EnqueueChildren, EnqueuedWorkflow, ListWorkflows, NewWorkflow, Workflow,
    WorkflowChange, WorkflowJob, WorkflowPage, WorkflowSummary,
};

//! The one error type of the store contract (docs/design.md section 4).
//!
//! Every store maps its driver errors into [`Error`] in exactly one place, so callers (runner, HTTP,
//! CLI) decide what to do from the variant alone: retry with backoff on [`Error::Unavailable`],
//! stop on [`Error::Fatal`], report the rest to the user.

use std::fmt;

use crate::job::JobId;
use crate::state::JobState;

/// A boxed error used as the `source` of transient and fatal store errors.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Shorthand for results whose error is the contract's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The errors a [`JobStore`](crate::JobStore) (and therefore the runner, the CLI and the HTTP API)
/// can return. Messages are short, lowercase and never contain job args, results or secrets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The named entity does not exist (or is not visible to the caller).
    #[error("{entity} {id} not found")]
    NotFound {
        /// What was looked up.
        entity: Entity,
        /// Its id or name as the caller gave it.
        id: String,
    },

    /// The request contradicts stored state: an idempotency key reused with a different request,
    /// an idempotency key stored without a request hash (legacy row), or a unique key held by
    /// another live job when an operator retries. Build them with [`Error::idempotency_reused`],
    /// [`Error::idempotency_unverifiable`] and [`Error::unique_key_held`], so every store says
    /// the same.
    #[error("conflict: {reason}")]
    Conflict {
        /// Why, in words an operator can act on. In a batch of more than one job it starts with
        /// the item (`jobs[3]: ...`), see [`Error::in_field`].
        reason: String,
        /// The job that holds the key, when there is one.
        existing: Option<JobId>,
        /// The request field whose value conflicts (`idempotency_key`, `unique_key`; in a batch
        /// of more than one job `jobs[3].idempotency_key`), when the store knows it.
        field: Option<String>,
    },

    /// An enqueue (or operator retry) would push pending jobs (waiting, queued, running or
    /// reconciling) past a quota. Nothing was stored.
    #[error(
        "quota exceeded: {quota} allows {max} pending jobs and {current} are pending, so the \
         jobs this request would queue (new ones, or one queued again by a retry) would pass it \
         (room for {} more)",
        .max.saturating_sub(*.current)
    )]
    QuotaExceeded {
        /// Which quota refused the request.
        quota: Quota,
        /// Pending jobs counted against that quota before this request.
        current: u64,
        /// The quota's bound.
        max: u64,
    },

    /// A worker write presented a fencing token that is stale, or the lease had expired. The
    /// write was not applied; the worker must stop working on the job.
    #[error("lease lost for job {job_id}")]
    LeaseLost {
        /// The job whose lease the caller no longer holds.
        job_id: JobId,
    },

    /// The event is not allowed from the job's current state (docs/design.md section 3).
    #[error(
        "cannot {event} a job that is {from} (allowed only for {}){}",
        .event.applies_to(),
        .event.hint(*.from)
    )]
    InvalidTransition {
        /// The job's state when the event arrived.
        from: JobState,
        /// The refused event.
        event: EventName,
    },

    /// A field of the request breaks a rule. Nothing was stored.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The field, as the caller named it (`kind`, `args`, `jobs[3].queue`, ...).
        field: String,
        /// The rule it breaks.
        reason: String,
    },

    /// A transient failure (connection lost, database restarting, deadlock, serialization
    /// failure). The operation may be retried with backoff; it was not applied, or was applied
    /// atomically and the caller cannot tell (writes are idempotent under fencing).
    #[error("store unavailable: {message}")]
    Unavailable {
        /// Short description.
        message: String,
        /// The driver error.
        #[source]
        source: Option<BoxError>,
    },

    /// A non-transient failure that retrying will not fix, such as a missing schema. The message
    /// says what to do.
    #[error("{message}")]
    Fatal {
        /// What went wrong and what to do about it.
        message: String,
        /// The driver error.
        #[source]
        source: Option<BoxError>,
    },
}

impl Error {
    /// Builds an [`Error::InvalidInput`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The [`Error::Conflict`] of an idempotency key already stored with another request
    /// (`existing` is the job it created), on field `idempotency_key`.
    pub fn idempotency_reused(existing: JobId) -> Self {
        Error::Conflict {
            reason: "idempotency key was already used with a different request".to_owned(),
            existing: Some(existing),
            field: Some("idempotency_key".to_owned()),
        }
    }

    /// The [`Error::Conflict`] of an idempotency key stored without a request hash (a row
    /// written before hashes were kept), whose replay cannot be verified; on field
    /// `idempotency_key`.
    pub fn idempotency_unverifiable(existing: JobId) -> Self {
        Error::Conflict {
            reason: "idempotency key was stored without a request hash, so a replay cannot be \
                     verified; use a new key"
                .to_owned(),
            existing: Some(existing),
            field: Some("idempotency_key".to_owned()),
        }
    }

    /// The [`Error::Conflict`] of an operator retry whose job's unique key is held by the live
    /// job `holder` of the same tenant; on field `unique_key`.
    pub fn unique_key_held(holder: JobId) -> Self {
        Error::Conflict {
            reason: format!("unique key is held by live job {holder}; cancel or finish it first"),
            existing: Some(holder),
            field: Some("unique_key".to_owned()),
        }
    }

    /// Builds an [`Error::NotFound`] for a job.
    pub fn job_not_found(id: JobId) -> Self {
        Error::NotFound {
            entity: Entity::Job,
            id: id.to_string(),
        }
    }

    /// Builds an [`Error::Unavailable`] without a source.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// Builds an [`Error::Fatal`] without a source.
    pub fn fatal(message: impl Into<String>) -> Self {
        Error::Fatal {
            message: message.into(),
            source: None,
        }
    }

    /// True for errors worth retrying with backoff ([`Error::Unavailable`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }

    /// Names the part of a request the error is about: the field of an
    /// [`Error::InvalidInput`] gets the prefix (`kind` becomes `jobs[3].kind`), and so does the
    /// field of an [`Error::Conflict`] (`idempotency_key` becomes `jobs[3].idempotency_key`,
    /// none becomes `jobs[3]`), whose reason then starts with `jobs[3]: `. Other variants are
    /// returned unchanged.
    pub fn in_field(self, prefix: &str) -> Self {
        match self {
            Error::InvalidInput { field, reason } => Error::InvalidInput {
                field: format!("{prefix}.{field}"),
                reason,
            },
            Error::Conflict {
                reason,
                existing,
                field,
            } => Error::Conflict {
                reason: format!("{prefix}: {reason}"),
                existing,
                field: Some(match field {
                    Some(field) => format!("{prefix}.{field}"),
                    None => prefix.to_owned(),
                }),
            },
            other => other,
        }
    }

    /// [`Error::in_field`] with `jobs[index]` when the batch holds more than one job
    /// (`batch_len > 1`); the error unchanged for a batch of one, which is answered like a
    /// single request.
    pub fn in_batch_item(self, index: usize, batch_len: usize) -> Self {
        if batch_len > 1 {
            self.in_field(&format!("jobs[{index}]"))
        } else {
            self
        }
    }

    /// A stable snake_case code for the variant, used in HTTP error bodies and `--json` output.
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::Conflict { .. } => "conflict",
            Error::QuotaExceeded { .. } => "quota_exceeded",
            Error::LeaseLost { .. } => "lease_lost",
            Error::InvalidTransition { .. } => "invalid_transition",
            Error::InvalidInput { .. } => "invalid_input",
            Error::Unavailable { .. } => "unavailable",
            Error::Fatal { .. } => "fatal",
        }
    }
}

/// What an [`Error::NotFound`] was looking for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Entity {
    /// A job, by id.
    Job,
    /// A queue, by name.
    Queue,
    /// A limit policy, by key.
    Limit,
    /// A cron schedule, by name.
    Schedule,
    /// A worker, by id.
    Worker,
    /// A workflow, by id.
    Workflow,
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Entity::Job => "job",
            Entity::Queue => "queue",
            Entity::Limit => "limit",
            Entity::Schedule => "schedule",
            Entity::Worker => "worker",
            Entity::Workflow => "workflow",
        })
    }
}

/// Which quota refused a request (docs/design.md section 7, Quotas).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quota {
    /// All pending jobs of the cluster (`DROVER_MAX_PENDING`).
    Global,
    /// Pending jobs of one tenant (`DROVER_MAX_TENANT_PENDING`).
    Tenant(String),
}

impl Quota {
    /// The quota's setting name: `max_pending` or `max_tenant_pending`.
    pub fn setting(&self) -> &'static str {
        match self {
            Quota::Global => "max_pending",
            Quota::Tenant(_) => "max_tenant_pending",
        }
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Quota::Global => f.write_str("max_pending"),
            Quota::Tenant(t) => write!(f, "max_tenant_pending of tenant {t}"),
        }
    }
}

/// The events of the state machine, named for error messages (docs/design.md section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventName {
    /// A worker claims a queued job.
    Claim,
    /// A worker records that the handler of a job claimed ahead started.
    Started,
    /// A worker extends its lease.
    Heartbeat,
    /// A worker records success.
    Complete,
    /// A worker records a failure.
    Fail,
    /// A worker asks to run the job again later without spending an attempt.
    Snooze,
    /// A worker gives the job back during shutdown.
    Release,
    /// A worker records that the handler stopped on cancellation.
    Cancelled,
    /// The rescuer found the lease expired.
    Rescue,
    /// A reconcile sweep takes a reconciling job.
    ReconcileClaim,
    /// A reconciler resolved (or could not resolve) a job.
    Reconcile,
    /// An operator or client cancels.
    Cancel,
    /// An operator retries a finished job.
    Retry,
    /// An operator makes a queued job ready now.
    Requeue,
    /// An operator deletes a job that is not running or reconciling.
    Delete,
    /// A waiting job's dependency ended.
    DependencyResolved,
    /// A parent's children were stored.
    ChildrenAdded,
    /// One of a parent's children ended.
    ChildFinished,
    /// A worker records that the handler waits for its children.
    WaitForChildren,
}

impl EventName {
    /// The jobs this event applies to, as a phrase for messages: `"failed, cancelled or
    /// succeeded jobs"` for [`EventName::Retry`] (the "from" column of docs/design.md section 3).
    /// Every state named is spelled as `JobState` displays it.
    #[must_use]
    pub fn applies_to(self) -> &'static str {
        match self {
            EventName::Claim => "queued jobs that are ready",
            EventName::Started
            | EventName::Heartbeat
            | EventName::Complete
            | EventName::Fail
            | EventName::Snooze
            | EventName::Release
            | EventName::Cancelled
            | EventName::ChildrenAdded
            | EventName::WaitForChildren => "running jobs",
            EventName::DependencyResolved => "waiting jobs",
            EventName::ChildFinished => "jobs",
            EventName::Rescue => "running jobs whose lease expired",
            EventName::ReconcileClaim | EventName::Reconcile => "reconciling jobs",
            EventName::Cancel => "waiting, queued, running or reconciling jobs",
            EventName::Retry => "failed, cancelled or succeeded jobs",
            EventName::Requeue => "queued jobs",
            EventName::Delete => "waiting, queued, succeeded, failed or cancelled jobs",
        }
    }

    /// What to do instead, for the operator events that have a sibling for jobs in `from`:
    /// a finished job runs again with retry, a queued one runs now with requeue. Empty
    /// otherwise; else starts with `"; "`, to follow [`EventName::applies_to`].
    #[must_use]
    pub fn hint(self, from: JobState) -> &'static str {
        match (self, from) {
            (EventName::Requeue, from) if from.is_terminal() => {
                "; to run a finished job again, retry it"
            }
            (EventName::Retry, JobState::Queued) => "; to run a queued job now, requeue it",
            (EventName::Delete, JobState::Running | JobState::Reconciling) => {
                "; cancel it first, then delete it once it ended"
            }
            _ => "",
        }
    }
}

impl fmt::Display for EventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventName::Claim => "claim",
            EventName::Started => "record the start of",
            EventName::Heartbeat => "heartbeat",
            EventName::Complete => "complete",
            EventName::Fail => "fail",
            EventName::Snooze => "snooze",
            EventName::Release => "release",
            EventName::Cancelled => "record cancellation of",
            EventName::Rescue => "rescue",
            EventName::ReconcileClaim => "reconcile-claim",
            EventName::Reconcile => "reconcile",
            EventName::Cancel => "cancel",
            EventName::Retry => "retry",
            EventName::Requeue => "requeue",
            EventName::Delete => "delete",
            EventName::DependencyResolved => "resolve a dependency of",
            EventName::ChildrenAdded => "add children to",
            EventName::ChildFinished => "finish a child of",
            EventName::WaitForChildren => "wait for the children of",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_transition_says_which_jobs_the_event_applies_to() {
        let refused = Error::InvalidTransition {
            from: JobState::Queued,
            event: EventName::Retry,
        };
        assert_eq!(
            refused.to_string(),
            "cannot retry a job that is queued (allowed only for failed, cancelled or succeeded jobs); to run a queued job now, requeue it"
        );
        let refused = Error::InvalidTransition {
            from: JobState::Running,
            event: EventName::Retry,
        };
        assert_eq!(
            refused.to_string(),
            "cannot retry a job that is running (allowed only for failed, cancelled or succeeded jobs)"
        );
        let refused = Error::InvalidTransition {
            from: JobState::Succeeded,
            event: EventName::Requeue,
        };
        assert_eq!(
            refused.to_string(),
            "cannot requeue a job that is succeeded (allowed only for queued jobs); to run a finished job again, retry it"
        );
        let refused = Error::InvalidTransition {
            from: JobState::Running,
            event: EventName::Requeue,
        };
        assert_eq!(
            refused.to_string(),
            "cannot requeue a job that is running (allowed only for queued jobs)"
        );
        let refused = Error::InvalidTransition {
            from: JobState::Succeeded,
            event: EventName::Cancel,
        };
        assert_eq!(
            refused.to_string(),
            "cannot cancel a job that is succeeded (allowed only for waiting, queued, running or reconciling jobs)"
        );
        let refused = Error::InvalidTransition {
            from: JobState::Running,
            event: EventName::Delete,
        };
        assert_eq!(
            refused.to_string(),
            "cannot delete a job that is running (allowed only for waiting, queued, succeeded, failed or cancelled jobs); cancel it first, then delete it once it ended"
        );
    }

    #[test]
    fn batch_items_are_named_in_invalid_input_and_conflicts() {
        let id = JobId(uuid::Uuid::nil());
        match Error::idempotency_reused(id).in_batch_item(3, 5) {
            Error::Conflict {
                reason,
                existing,
                field,
            } => {
                assert_eq!(
                    reason,
                    "jobs[3]: idempotency key was already used with a different request"
                );
                assert_eq!(existing, Some(id));
                assert_eq!(field.as_deref(), Some("jobs[3].idempotency_key"));
            }
            other => panic!("{other:?}"),
        }
        let single = Error::idempotency_reused(id).in_batch_item(0, 1);
        assert_eq!(
            single.to_string(),
            "conflict: idempotency key was already used with a different request"
        );
        let bare = Error::Conflict {
            reason: "taken".to_owned(),
            existing: None,
            field: None,
        };
        assert!(matches!(
            bare.in_field("jobs[1]"),
            Error::Conflict { field: Some(f), reason, .. } if f == "jobs[1]" && reason == "jobs[1]: taken"
        ));
        assert!(matches!(
            Error::invalid("kind", "bad").in_batch_item(2, 3),
            Error::InvalidInput { field, .. } if field == "jobs[2].kind"
        ));
    }

    #[test]
    fn quota_message_says_how_much_room_is_left() {
        let batch = Error::QuotaExceeded {
            quota: Quota::Tenant("acme".to_owned()),
            current: 13,
            max: 1000,
        };
        let text = batch.to_string();
        assert!(
            text.contains("allows 1000 pending jobs and 13 are pending"),
            "{text}"
        );
        assert!(text.contains("room for 987 more"), "{text}");
        let full = Error::QuotaExceeded {
            quota: Quota::Global,
            current: 5,
            max: 3,
        };
        assert!(full.to_string().contains("room for 0 more"), "{full}");
    }
}

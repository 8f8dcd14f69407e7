//! The rule of an operator delete (docs/design.md section 10, "delete"), decided here once for
//! both stores: a job that is running or reconciling is refused (cancel it first), and so is a
//! job that retention would keep for the jobs that still need it:
//!
//! | the job | refused because |
//! |---|---|
//! | running or reconciling | a worker or a reconciler holds it (`InvalidTransition`) |
//! | has live children | its children count down into it (`Conflict`, existing: none) |
//! | a job not terminal depends on it | the dependent waits for it and reads its result (`Conflict`, existing: the dependent) |
//! | its parent is stored and not terminal | the parent reads its children's outcomes (`Conflict`, existing: the parent) |
//! | not terminal, and its parent is stored | the parent counts it among its live children (`Conflict`, existing: the parent) |
//!
//! A job that passes is deleted with its idempotency key, its own dependency edges and its
//! link to its parent; a waiting job's pending edges go with it, so nothing waits for it.

use crate::error::{Error, EventName, Result};
use crate::job::{Job, JobId};
use crate::state::JobState;

/// What the store read of a job's relations, under the same lock as the job, for
/// [`check_delete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeleteLinks {
    /// The state of the job's parent, when it has one still stored.
    pub parent: Option<JobState>,
    /// A job not terminal (waiting, queued, running, reconciling) that depends on it, if any.
    pub live_dependent: Option<JobId>,
}

/// Decides whether the operator may delete `job`, given its relations (the module's table).
///
/// # Errors
/// `InvalidTransition` (event `delete`) for a running or reconciling job; `Conflict` naming
/// the rule, with the job in the way as `existing`, for one the workflow rules keep.
pub fn check_delete(job: &Job, links: DeleteLinks) -> Result<()> {
    if matches!(job.state, JobState::Running | JobState::Reconciling) {
        return Err(Error::InvalidTransition {
            from: job.state,
            event: EventName::Delete,
        });
    }
    let kept = |reason: String, existing: Option<JobId>| Error::Conflict {
        reason: format!("{reason}; retention keeps it too"),
        existing,
        field: None,
    };
    if job.live_children > 0 {
        return Err(kept(
            format!(
                "cannot delete a parent with {} live children; cancel it or wait for them to end",
                job.live_children
            ),
            None,
        ));
    }
    if let Some(dependent) = links.live_dependent {
        return Err(kept(
            format!(
                "cannot delete a job that job {dependent} depends on while that job is not \
                 finished; cancel or finish it first"
            ),
            Some(dependent),
        ));
    }
    if let (Some(parent), Some(parent_state)) = (job.parent_id, links.parent) {
        if !parent_state.is_terminal() {
            return Err(kept(
                format!(
                    "cannot delete a child of job {parent} while that parent is {parent_state}; \
                     wait for it to end"
                ),
                Some(parent),
            ));
        }
        if !job.state.is_terminal() {
            return Err(kept(
                format!(
                    "cannot delete a {} child of job {parent}, which counts it as live; cancel \
                     it first",
                    job.state
                ),
                Some(parent),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::job::NewJob;
    use crate::names::JobKind;

    fn job_in(state: JobState) -> Job {
        let new = NewJob::new(JobKind::parse("k").unwrap(), json!({}));
        let mut job = new.into_job(JobId(uuid::Uuid::now_v7()), chrono::DateTime::UNIX_EPOCH);
        job.state = state;
        job
    }

    #[test]
    fn running_and_reconciling_jobs_are_refused_and_told_to_cancel() {
        for state in [JobState::Running, JobState::Reconciling] {
            let err = check_delete(&job_in(state), DeleteLinks::default()).unwrap_err();
            assert!(
                matches!(err, Error::InvalidTransition { from, event: EventName::Delete } if from == state)
            );
            assert!(err.to_string().contains("cancel it first"), "{err}");
        }
        for state in [
            JobState::Waiting,
            JobState::Queued,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Cancelled,
        ] {
            check_delete(&job_in(state), DeleteLinks::default()).unwrap();
        }
    }

    #[test]
    fn retention_exceptions_are_refused_naming_the_job_in_the_way() {
        let conflict = |result: Result<()>| match result {
            Err(Error::Conflict {
                reason, existing, ..
            }) => (reason, existing),
            other => panic!("expected a conflict, got {other:?}"),
        };
        let mut parent = job_in(JobState::Waiting);
        parent.live_children = 2;
        let (reason, _) = conflict(check_delete(&parent, DeleteLinks::default()));
        assert!(reason.contains("2 live children"), "{reason}");

        let dependent = JobId(uuid::Uuid::now_v7());
        let links = DeleteLinks {
            parent: None,
            live_dependent: Some(dependent),
        };
        let (reason, existing) = conflict(check_delete(&job_in(JobState::Succeeded), links));
        assert_eq!(existing, Some(dependent));
        assert!(reason.contains("depends on"), "{reason}");

        let mut child = job_in(JobState::Failed);
        let parent_id = JobId(uuid::Uuid::now_v7());
        child.parent_id = Some(parent_id);
        let live_parent = DeleteLinks {
            parent: Some(JobState::Waiting),
            live_dependent: None,
        };
        let (_, existing) = conflict(check_delete(&child, live_parent));
        assert_eq!(existing, Some(parent_id));
        let ended_parent = DeleteLinks {
            parent: Some(JobState::Succeeded),
            live_dependent: None,
        };
        check_delete(&child, ended_parent).unwrap();
        child.state = JobState::Queued;
        let (reason, existing) = conflict(check_delete(&child, ended_parent));
        assert_eq!(existing, Some(parent_id));
        assert!(reason.contains("cancel it first"), "{reason}");
        // A child whose parent is gone (pruned) is a plain job.
        check_delete(&child, DeleteLinks::default()).unwrap();
    }
}

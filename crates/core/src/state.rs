//! Job states and the one transition function (docs/design.md section 3).
//!
//! [`apply`] is the whole state machine: every store calls it (the memory store directly; the
//! PostgreSQL store's SQL is pinned to the same table by the contract suite), and the property
//! tests in `crates/core/tests/` drive it with random event sequences. It is pure: time comes in
//! as `now`, and on error the job is left unchanged.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock;
use crate::error::{Error, EventName};
use crate::job::{truncate_message, AttemptError, Job, ERRORS_KEPT};
use crate::lease::FencingToken;
use crate::names::WorkerId;

/// The states of a job. `Succeeded`, `Failed` and `Cancelled` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for other jobs: its dependencies, or the children it enqueued (docs/design.md
    /// section 10). Not claimable, no lease, counted by quotas as pending.
    Waiting,
    /// Ready when `run_at <= now`.
    Queued,
    /// Claimed by a worker under a lease.
    Running,
    /// Interrupted by a crash; its kind's reconciler will drive it to a terminal state.
    Reconciling,
    /// Finished successfully (terminal).
    Succeeded,
    /// Finished unsuccessfully: attempts spent, discarded, or resolved as failed (terminal).
    Failed,
    /// Cancelled by a client or operator (terminal).
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 7] = [
        JobState::Waiting,
        JobState::Queued,
        JobState::Running,
        JobState::Reconciling,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The terminal states.
    pub const TERMINAL: [JobState; 3] =
        [JobState::Succeeded, JobState::Failed, JobState::Cancelled];

    /// The states counted as pending by quotas: waiting, queued, running and reconciling.
    pub const PENDING: [JobState; 4] = [
        JobState::Waiting,
        JobState::Queued,
        JobState::Running,
        JobState::Reconciling,
    ];

    /// The state's name as stored and shown: `queued`, `running`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Reconciling => "reconciling",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// True for `succeeded`, `failed` and `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = Error;

    /// Parses a state name.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] with field `state` for anything but the seven state names.
    fn from_str(s: &str) -> Result<Self, Error> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "state",
                    "must be one of waiting, queued, running, reconciling, succeeded, failed, cancelled",
                )
            })
    }
}

/// Whether a failed attempt may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Retry {
    /// Retry after this delay if attempts remain (the runner computes it with
    /// [`Backoff`](crate::Backoff)).
    After(#[serde(with = "crate::job::duration_ms")] Duration),
    /// Do not retry: the job fails now whatever attempts remain (bad args, a handler's discard).
    Never,
}

/// How a reconciler resolved a reconciling job (docs/design.md section 6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "resolution")]
pub enum Resolution {
    /// The interrupted work completed: the job ends succeeded.
    Succeeded,
    /// The interrupted work did not complete: the job ends failed with this operator-facing
    /// message.
    Failed {
        /// What the operator should know.
        message: String,
    },
    /// The reconciler could not tell (e.g. a host was unreachable): the job stays reconciling
    /// for the next sweep.
    Inconclusive,
}

/// An event that may move a job between states (docs/design.md section 3).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A worker claims a ready queued job.
    Claim {
        /// The claiming worker.
        worker: WorkerId,
        /// Lease length from `now`.
        lease: Duration,
        /// The job starts at once on a free slot (`started_at = now`); false for a job claimed
        /// ahead, which waits for a slot (`started_at` stays `None` until [`Event::Started`]).
        start: bool,
    },
    /// The lease holder reports that the handler of a job claimed ahead started `elapsed` ago
    /// (measured by the worker; the store's clock decides the instant). Records
    /// `started_at = now - elapsed`, but never before the claim (`attempted_at`); a job whose
    /// start is recorded already keeps it.
    Started {
        /// The token from the claim.
        token: FencingToken,
        /// Time since the handler started, by the worker's clock.
        elapsed: Duration,
    },
    /// The lease holder extends its lease and saves meta/progress.
    Heartbeat {
        /// The token from the claim.
        token: FencingToken,
        /// New lease length from `now`.
        lease: Duration,
        /// Replacement meta object, when the handler changed it.
        meta: Option<Value>,
        /// Latest progress, when the handler reported any.
        progress: Option<Value>,
    },
    /// The handler succeeded.
    Complete {
        /// The token from the claim.
        token: FencingToken,
        /// The handler's result.
        result: Option<Value>,
    },
    /// The handler failed.
    Fail {
        /// The token from the claim.
        token: FencingToken,
        /// What went wrong.
        message: String,
        /// Whether and when to retry.
        retry: Retry,
    },
    /// The handler asked to run again after `delay` without spending an attempt.
    Snooze {
        /// The token from the claim.
        token: FencingToken,
        /// How long to wait.
        delay: Duration,
    },
    /// The worker gives the job back (graceful shutdown): attempt not spent, ready at once.
    Release {
        /// The token from the claim.
        token: FencingToken,
    },
    /// The handler stopped because its cancellation token fired.
    Cancelled {
        /// The token from the claim.
        token: FencingToken,
        /// Why, as the handler or runner reported it.
        message: String,
    },
    /// The rescuer found the lease expired (by the store's clock). A job whose handler never
    /// started (claimed ahead, still waiting for a slot) gets its attempt back, at most
    /// [`UNSTARTED_RESCUES_MAX`] times in a row for the same attempt.
    LeaseExpired {
        /// The job's kind has a reconciler registered by the rescuing worker.
        reconciler: bool,
    },
    /// A reconcile sweep takes a reconciling job under a lease.
    ReconcileClaim {
        /// The sweeping worker.
        worker: WorkerId,
        /// Lease length from `now`.
        lease: Duration,
    },
    /// A reconciler's verdict.
    Reconciled {
        /// The token from the reconcile claim.
        token: FencingToken,
        /// The verdict.
        resolution: Resolution,
    },
    /// A client or operator cancels.
    Cancel,
    /// An operator retries a finished job.
    Retry,
    /// An operator makes a queued job ready now: a job waiting for its `run_at` (scheduled, a
    /// retry's backoff, a snooze) gets `run_at = now`, attempts unchanged; a ready one is left
    /// as it is.
    Requeue,
    /// One of a waiting job's dependencies reached the terminal state `state`. A failed or
    /// cancelled dependency cancels the job, naming the dependency, unless it runs regardless
    /// ([`Job::run_regardless`]); otherwise one fewer dependency is pending, and the job is
    /// queued (ready at once, or at its own later `run_at`) when none is.
    DependencyResolved {
        /// The dependency.
        dependency: crate::JobId,
        /// Its terminal state.
        state: JobState,
    },
    /// The lease holder stored `count` children of the job (fenced: `token` is `Some`), or an
    /// operator retried `count` of its finished children (`None`): that many more live children.
    ChildrenAdded {
        /// The token of the parent's claim; `None` for an operator's retry of a child.
        token: Option<FencingToken>,
        /// How many children became live.
        count: u32,
    },
    /// One of the job's children reached a terminal state: one fewer live child. A parent
    /// waiting for its children is queued, ready at once, when none is left. Allowed in every
    /// state (a parent may still be running when a child finishes).
    ChildFinished,
    /// The handler returned "wait for my children": the lease is released and the attempt
    /// given back (as a snooze does); the job waits while it has live children and is queued,
    /// ready at once, when it has none (an empty fan-out resumes at once). A requested cancel
    /// ends it cancelled instead.
    WaitForChildren {
        /// The token from the claim.
        token: FencingToken,
    },
}

impl Event {
    /// The event's name for errors.
    pub fn name(&self) -> EventName {
        match self {
            Event::Claim { .. } => EventName::Claim,
            Event::Started { .. } => EventName::Started,
            Event::Heartbeat { .. } => EventName::Heartbeat,
            Event::Complete { .. } => EventName::Complete,
            Event::Fail { .. } => EventName::Fail,
            Event::Snooze { .. } => EventName::Snooze,
            Event::Release { .. } => EventName::Release,
            Event::Cancelled { .. } => EventName::Cancelled,
            Event::LeaseExpired { .. } => EventName::Rescue,
            Event::ReconcileClaim { .. } => EventName::ReconcileClaim,
            Event::Reconciled { .. } => EventName::Reconcile,
            Event::Cancel => EventName::Cancel,
            Event::Retry => EventName::Retry,
            Event::Requeue => EventName::Requeue,
            Event::DependencyResolved { .. } => EventName::DependencyResolved,
            Event::ChildrenAdded { .. } => EventName::ChildrenAdded,
            Event::ChildFinished => EventName::ChildFinished,
            Event::WaitForChildren { .. } => EventName::WaitForChildren,
        }
    }
}

/// The result of a successful [`apply`]: the state before and after. Equal states mean the job
/// changed in place (heartbeat, cancel of a running job, inconclusive reconcile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// State before the event.
    pub from: JobState,
    /// State after the event.
    pub to: JobState,
}

/// The message a job cancelled by its dependency's end records.
pub fn dependency_failed_message(dependency: crate::JobId, state: JobState) -> String {
    format!("dependency {dependency} ended {state}: this job does not run (enqueue it with run_regardless to run it anyway)")
}

/// The message recorded when a lease expires.
pub fn lease_expired_message(attempt: i32, max_attempts: i32) -> String {
    format!(
        "lease expired during attempt {attempt} of {max_attempts}: the worker stopped heartbeating (crash, kill or lost connection)"
    )
}

/// How many times in a row an expired lease may give back the same attempt of a job whose
/// handler never started. The bound is for a job that kills its worker right after it left
/// the backlog, before the worker recorded its start: it is rescued as never started, so
/// without a bound it could crash workers forever without spending an attempt. With it such
/// a job costs at most `UNSTARTED_RESCUES_MAX + 1` crashes per attempt.
pub const UNSTARTED_RESCUES_MAX: usize = 3;

/// How the message of [`lease_expired_unstarted_message`] begins.
const UNSTARTED_PREFIX: &str = "lease expired before the handler started";

/// The message recorded when a lease expires before the job's handler started (it waited for
/// a slot in a worker that stopped): the attempt is given back.
pub fn lease_expired_unstarted_message(attempt: i32) -> String {
    format!(
        "{UNSTARTED_PREFIX} (the job waited for a slot in a worker that stopped heartbeating): attempt {attempt} not spent"
    )
}

/// How many times in a row the latest errors of `job` record an expired lease that gave
/// back its current attempt before the handler started.
fn unstarted_rescues(job: &Job) -> usize {
    job.errors
        .iter()
        .rev()
        .take_while(|e| e.attempt == job.attempt && e.message.starts_with(UNSTARTED_PREFIX))
        .count()
}

/// Applies `event` to `job` at instant `now`, per the table of docs/design.md section 3.
///
/// Worker writes (heartbeat, complete, fail, snooze, release, cancelled) require the job to be
/// running under `token` with `lease_expires_at > now`; otherwise [`Error::LeaseLost`]. A job
/// with `cancel_requested` that fails, snoozes, is released or has its lease expire ends
/// `cancelled` (docs/design.md section 9); one that completes ends `succeeded`. An expired lease
/// of a job whose handler never started (`started_at` is `None`: it waited for a slot) gives
/// the attempt back and queues the job again, as a release would, noting it in `errors`; after
/// [`UNSTARTED_RESCUES_MAX`] such rescues of the same attempt it is rescued as a started job.
///
/// # Errors
/// [`Error::LeaseLost`] for a worker write without a valid lease; [`Error::InvalidTransition`]
/// when the event is not allowed from the job's state (claim of a non-ready job, cancel of a
/// finished job, retry of a live job, requeue of a job that is not queued, rescue of an
/// unexpired lease). On error `job` is unchanged.
pub fn apply(job: &mut Job, event: Event, now: DateTime<Utc>) -> Result<Transition, Error> {
    let from = job.state;
    let refuse = |name: EventName| Error::InvalidTransition { from, event: name };
    let name = event.name();
    match event {
        Event::Claim {
            worker,
            lease,
            start,
        } => {
            if from != JobState::Queued || job.run_at > now {
                return Err(refuse(name));
            }
            job.state = JobState::Running;
            job.attempt = job.attempt.saturating_add(1);
            job.fencing_token = job.fencing_token.next();
            job.lease_owner = Some(worker);
            job.lease_expires_at = Some(clock::add(now, lease));
            job.attempted_at = Some(now);
            job.started_at = start.then_some(now);
            job.cancel_requested = false;
        }
        Event::Started { token, elapsed } => {
            check_lease(job, token, now)?;
            if job.started_at.is_none() {
                let at = clock::sub(now, elapsed);
                job.started_at = Some(job.attempted_at.map_or(at, |claimed| at.max(claimed)));
            }
        }
        Event::Heartbeat {
            token,
            lease,
            meta,
            progress,
        } => {
            check_lease(job, token, now)?;
            job.lease_expires_at = Some(clock::add(now, lease));
            if let Some(meta) = meta {
                job.meta = meta;
            }
            if progress.is_some() {
                job.progress = progress;
            }
        }
        Event::Complete { token, result } => {
            check_lease(job, token, now)?;
            job.result = result;
            finish(job, JobState::Succeeded, now);
        }
        Event::Fail {
            token,
            message,
            retry,
        } => {
            check_lease(job, token, now)?;
            push_error(job, &message, now);
            if job.cancel_requested {
                finish(job, JobState::Cancelled, now);
            } else {
                match retry {
                    Retry::After(delay) if job.attempt < job.max_attempts => {
                        requeue(job, clock::add(now, delay));
                    }
                    _ => finish(job, JobState::Failed, now),
                }
            }
        }
        Event::Snooze { token, delay } => {
            check_lease(job, token, now)?;
            if job.cancel_requested {
                finish(job, JobState::Cancelled, now);
            } else {
                job.attempt = job.attempt.saturating_sub(1).max(0);
                requeue(job, clock::add(now, delay));
            }
        }
        Event::Release { token } => {
            check_lease(job, token, now)?;
            if job.cancel_requested {
                finish(job, JobState::Cancelled, now);
            } else {
                job.attempt = job.attempt.saturating_sub(1).max(0);
                requeue(job, now);
            }
        }
        Event::Cancelled { token, message } => {
            check_lease(job, token, now)?;
            push_error(job, &message, now);
            finish(job, JobState::Cancelled, now);
        }
        Event::LeaseExpired { reconciler } => {
            let expired = job.lease_expires_at.is_some_and(|at| at <= now);
            if from != JobState::Running || !expired {
                return Err(refuse(name));
            }
            let unstarted = job.started_at.is_none() && !job.cancel_requested;
            if unstarted && unstarted_rescues(job) < UNSTARTED_RESCUES_MAX {
                let message = lease_expired_unstarted_message(job.attempt);
                push_error(job, &message, now);
                job.attempt = job.attempt.saturating_sub(1).max(0);
                requeue(job, now);
                return Ok(Transition {
                    from,
                    to: job.state,
                });
            }
            let message = lease_expired_message(job.attempt, job.max_attempts);
            push_error(job, &message, now);
            if job.cancel_requested {
                finish(job, JobState::Cancelled, now);
            } else if reconciler {
                clear_lease(job);
                job.state = JobState::Reconciling;
            } else if job.attempt >= job.max_attempts {
                finish(job, JobState::Failed, now);
            } else {
                requeue(job, now);
            }
        }
        Event::ReconcileClaim { worker, lease } => {
            let free = job.lease_expires_at.is_none_or(|at| at <= now);
            if from != JobState::Reconciling || !free {
                return Err(refuse(name));
            }
            job.fencing_token = job.fencing_token.next();
            job.lease_owner = Some(worker);
            job.lease_expires_at = Some(clock::add(now, lease));
        }
        Event::Reconciled { token, resolution } => {
            let held = from == JobState::Reconciling
                && job.fencing_token == token
                && job.lease_expires_at.is_some_and(|at| at > now);
            if !held {
                return Err(Error::LeaseLost { job_id: job.id });
            }
            match resolution {
                Resolution::Succeeded => finish(job, JobState::Succeeded, now),
                Resolution::Failed { message } => {
                    push_error(job, &message, now);
                    finish(job, JobState::Failed, now);
                }
                Resolution::Inconclusive => clear_lease(job),
            }
        }
        Event::Cancel => match from {
            JobState::Waiting | JobState::Queued | JobState::Reconciling => {
                finish(job, JobState::Cancelled, now);
            }
            JobState::Running => job.cancel_requested = true,
            _ => return Err(refuse(name)),
        },
        Event::Retry => {
            if !from.is_terminal() {
                return Err(refuse(name));
            }
            job.attempt = 0;
            job.result = None;
            job.cancel_requested = false;
            job.finished_at = None;
            job.progress = None;
            requeue(job, now);
            if job.pending_dependencies > 0 || job.live_children > 0 {
                job.state = JobState::Waiting;
            }
        }
        Event::Requeue => {
            if from != JobState::Queued {
                return Err(refuse(name));
            }
            job.run_at = job.run_at.min(now);
        }
        Event::DependencyResolved { dependency, state } => {
            if from != JobState::Waiting || job.pending_dependencies <= 0 || !state.is_terminal() {
                return Err(refuse(name));
            }
            job.pending_dependencies -= 1;
            let failed = matches!(state, JobState::Failed | JobState::Cancelled);
            if failed && !job.run_regardless {
                push_error(job, &dependency_failed_message(dependency, state), now);
                job.pending_dependencies = 0;
                finish(job, JobState::Cancelled, now);
            } else if job.pending_dependencies == 0 && job.live_children == 0 {
                requeue(job, job.run_at.max(now));
            }
        }
        Event::ChildrenAdded { token, count } => {
            if let Some(token) = token {
                check_lease(job, token, now)?;
            }
            job.live_children = job
                .live_children
                .saturating_add(i32::try_from(count).unwrap_or(i32::MAX));
        }
        Event::ChildFinished => {
            job.live_children = job.live_children.saturating_sub(1).max(0);
            if from == JobState::Waiting && job.live_children == 0 && job.pending_dependencies == 0
            {
                requeue(job, now);
            }
        }
        Event::WaitForChildren { token } => {
            check_lease(job, token, now)?;
            if job.cancel_requested {
                finish(job, JobState::Cancelled, now);
            } else {
                job.attempt = job.attempt.saturating_sub(1).max(0);
                requeue(job, now);
                if job.live_children > 0 {
                    job.state = JobState::Waiting;
                }
            }
        }
    }
    Ok(Transition {
        from,
        to: job.state,
    })
}

/// Checks that a worker write holds the job's lease: running, same token, not expired.
///
/// # Errors
/// [`Error::LeaseLost`] otherwise.
pub fn check_lease(job: &Job, token: FencingToken, now: DateTime<Utc>) -> Result<(), Error> {
    let held = job.state == JobState::Running
        && job.fencing_token == token
        && job.lease_expires_at.is_some_and(|at| at > now);
    if held {
        Ok(())
    } else {
        Err(Error::LeaseLost { job_id: job.id })
    }
}

fn clear_lease(job: &mut Job) {
    job.lease_owner = None;
    job.lease_expires_at = None;
}

fn requeue(job: &mut Job, run_at: DateTime<Utc>) {
    clear_lease(job);
    job.state = JobState::Queued;
    job.run_at = run_at;
}

fn finish(job: &mut Job, state: JobState, now: DateTime<Utc>) {
    clear_lease(job);
    job.state = state;
    job.finished_at = Some(now);
    // A start recorded by a write that took the job's lock before this one, with a later clock
    // reading, is no later than the finish: a job never finishes before it started.
    job.started_at = job.started_at.map(|started| started.min(now));
}

fn push_error(job: &mut Job, message: &str, now: DateTime<Utc>) {
    job.errors.push(AttemptError {
        attempt: job.attempt,
        at: now,
        message: truncate_message(message),
    });
    if job.errors.len() > ERRORS_KEPT {
        let excess = job.errors.len() - ERRORS_KEPT;
        job.errors.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::NewJob;
    use crate::names::JobKind;
    use crate::JobId;
    use chrono::TimeZone;
    use serde_json::json;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
    }

    fn queued(max_attempts: i32) -> Job {
        NewJob::new(JobKind::parse("k").unwrap(), json!({}))
            .with_max_attempts(max_attempts)
            .into_job(JobId::new_v7(), t(0))
    }

    fn claim(job: &mut Job, now: DateTime<Utc>) -> FencingToken {
        let worker = WorkerId::parse("w1").unwrap();
        apply(
            job,
            Event::Claim {
                worker,
                lease: Duration::from_secs(60),
                start: true,
            },
            now,
        )
        .unwrap();
        job.fencing_token
    }

    /// Claims `job` ahead of a free slot at `now` (lease 60 s): its handler has not started.
    fn claim_ahead(job: &mut Job, now: DateTime<Utc>) -> FencingToken {
        let worker = WorkerId::parse("w1").unwrap();
        apply(
            job,
            Event::Claim {
                worker,
                lease: Duration::from_secs(60),
                start: false,
            },
            now,
        )
        .unwrap();
        job.fencing_token
    }

    /// A start recorded with a later clock reading than the finish (a heartbeat that took the
    /// job's lock first) never leaves the job finished before it started.
    #[test]
    fn a_finish_never_precedes_the_recorded_start() {
        let mut job = queued(3);
        let token = claim(&mut job, t(1));
        job.started_at = Some(t(5));
        apply(
            &mut job,
            Event::Complete {
                token,
                result: None,
            },
            t(3),
        )
        .unwrap();
        assert_eq!(job.finished_at, Some(t(3)));
        assert_eq!(job.started_at, Some(t(3)));
    }

    #[test]
    fn claim_then_complete() {
        let mut job = queued(3);
        let token = claim(&mut job, t(1));
        assert_eq!(
            (job.state, job.attempt, token),
            (JobState::Running, 1, FencingToken(1))
        );
        let tr = apply(
            &mut job,
            Event::Complete {
                token,
                result: Some(json!(1)),
            },
            t(2),
        )
        .unwrap();
        assert_eq!((tr.from, tr.to), (JobState::Running, JobState::Succeeded));
        assert_eq!(job.finished_at, Some(t(2)));
        assert!(job.lease_owner.is_none());
    }

    #[test]
    fn fail_retries_until_budget_spent() {
        let mut job = queued(2);
        let token = claim(&mut job, t(1));
        let fail = |token| Event::Fail {
            token,
            message: "boom".into(),
            retry: Retry::After(Duration::from_secs(10)),
        };
        apply(&mut job, fail(token), t(2)).unwrap();
        assert_eq!((job.state, job.run_at), (JobState::Queued, t(12)));
        assert!(apply(
            &mut job,
            Event::Claim {
                worker: WorkerId::parse("w").unwrap(),
                lease: Duration::from_secs(5),
                start: true,
            },
            t(11)
        )
        .is_err());
        let token = claim(&mut job, t(12));
        apply(&mut job, fail(token), t(13)).unwrap();
        assert_eq!(job.state, JobState::Failed);
        assert_eq!(job.errors.len(), 2);
    }

    #[test]
    fn stale_and_expired_tokens_are_rejected() {
        let mut job = queued(3);
        let token = claim(&mut job, t(1));
        let stale = FencingToken(token.0 - 1);
        assert!(matches!(
            apply(
                &mut job,
                Event::Complete {
                    token: stale,
                    result: None
                },
                t(2)
            ),
            Err(Error::LeaseLost { .. })
        ));
        assert!(matches!(
            apply(
                &mut job,
                Event::Complete {
                    token,
                    result: None
                },
                t(61)
            ),
            Err(Error::LeaseLost { .. })
        ));
        assert_eq!(job.state, JobState::Running);
    }

    #[test]
    fn release_and_snooze_give_the_attempt_back() {
        let mut job = queued(1);
        let token = claim(&mut job, t(1));
        apply(&mut job, Event::Release { token }, t(2)).unwrap();
        assert_eq!(
            (job.state, job.attempt, job.run_at),
            (JobState::Queued, 0, t(2))
        );
        let token = claim(&mut job, t(3));
        apply(
            &mut job,
            Event::Snooze {
                token,
                delay: Duration::from_secs(30),
            },
            t(4),
        )
        .unwrap();
        assert_eq!(
            (job.state, job.attempt, job.run_at),
            (JobState::Queued, 0, t(34))
        );
    }

    #[test]
    fn rescue_spends_the_attempt_and_fails_when_spent() {
        let mut job = queued(2);
        claim(&mut job, t(0));
        assert!(apply(&mut job, Event::LeaseExpired { reconciler: false }, t(30)).is_err());
        apply(&mut job, Event::LeaseExpired { reconciler: false }, t(60)).unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Queued, 1));
        claim(&mut job, t(61));
        apply(&mut job, Event::LeaseExpired { reconciler: false }, t(200)).unwrap();
        assert_eq!(job.state, JobState::Failed);
        assert!(job.errors.last().unwrap().message.contains("lease expired"));
    }

    #[test]
    fn a_claim_ahead_starts_later_and_never_before_the_claim() {
        let mut job = queued(3);
        claim(&mut job, t(1));
        assert_eq!(job.started_at, Some(t(1)), "started at once");
        let mut job = queued(3);
        let token = claim_ahead(&mut job, t(10));
        assert!(job.is_waiting_for_slot());
        assert!(job.started_at.is_none());
        let stale = FencingToken(token.0 - 1);
        let started = |token, elapsed| Event::Started {
            token,
            elapsed: Duration::from_secs(elapsed),
        };
        assert!(matches!(
            apply(&mut job, started(stale, 1), t(12)),
            Err(Error::LeaseLost { .. })
        ));
        apply(&mut job, started(token, 2), t(15)).unwrap();
        assert_eq!(job.started_at, Some(t(13)), "now - elapsed");
        assert!(!job.is_waiting_for_slot());
        apply(&mut job, started(token, 0), t(20)).unwrap();
        assert_eq!(
            job.started_at,
            Some(t(13)),
            "the first start recorded stays"
        );
        // A worker whose clock ran ahead cannot date the start before the claim.
        let mut job = queued(3);
        let token = claim_ahead(&mut job, t(10));
        apply(&mut job, started(token, 60), t(11)).unwrap();
        assert_eq!(job.started_at, Some(t(10)));
    }

    #[test]
    fn an_expired_lease_of_a_job_that_never_started_gives_the_attempt_back() {
        let mut job = queued(1);
        claim_ahead(&mut job, t(0));
        apply(&mut job, Event::LeaseExpired { reconciler: true }, t(60)).unwrap();
        assert_eq!(
            (job.state, job.attempt, job.run_at),
            (JobState::Queued, 0, t(60)),
            "queued again, attempt not spent, no reconcile (nothing ran)"
        );
        let note = job.errors.last().unwrap();
        assert_eq!(note.attempt, 1);
        assert_eq!(note.message, lease_expired_unstarted_message(1));
        assert!(note.message.contains("not spent"));
        // Started, the same job spends its only attempt.
        let token = claim_ahead(&mut job, t(61));
        apply(
            &mut job,
            Event::Started {
                token,
                elapsed: Duration::ZERO,
            },
            t(62),
        )
        .unwrap();
        apply(&mut job, Event::LeaseExpired { reconciler: false }, t(200)).unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Failed, 1));
        // A cancel requested while it waited ends it cancelled.
        let mut job = queued(1);
        claim_ahead(&mut job, t(0));
        apply(&mut job, Event::Cancel, t(1)).unwrap();
        apply(&mut job, Event::LeaseExpired { reconciler: false }, t(60)).unwrap();
        assert_eq!(job.state, JobState::Cancelled);
    }

    #[test]
    fn an_attempt_is_given_back_at_most_unstarted_rescues_max_times_in_a_row() {
        let mut job = queued(2);
        let mut now = 0;
        for _ in 0..UNSTARTED_RESCUES_MAX {
            claim_ahead(&mut job, t(now));
            now += 60;
            apply(&mut job, Event::LeaseExpired { reconciler: false }, t(now)).unwrap();
            assert_eq!((job.state, job.attempt), (JobState::Queued, 0));
        }
        claim_ahead(&mut job, t(now));
        now += 60;
        apply(&mut job, Event::LeaseExpired { reconciler: false }, t(now)).unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Queued, 1), "spent");
        assert!(job
            .errors
            .last()
            .unwrap()
            .message
            .starts_with("lease expired during"));
        // The next attempt starts a new count.
        claim_ahead(&mut job, t(now));
        now += 60;
        apply(&mut job, Event::LeaseExpired { reconciler: false }, t(now)).unwrap();
        assert_eq!(
            (job.state, job.attempt),
            (JobState::Queued, 1),
            "given back"
        );
    }

    #[test]
    fn rescue_with_reconciler_then_resolve() {
        let mut job = queued(3);
        claim(&mut job, t(0));
        apply(&mut job, Event::LeaseExpired { reconciler: true }, t(61)).unwrap();
        assert_eq!(job.state, JobState::Reconciling);
        let worker = WorkerId::parse("w2").unwrap();
        apply(
            &mut job,
            Event::ReconcileClaim {
                worker,
                lease: Duration::from_secs(10),
            },
            t(62),
        )
        .unwrap();
        let token = job.fencing_token;
        apply(
            &mut job,
            Event::Reconciled {
                token,
                resolution: Resolution::Inconclusive,
            },
            t(63),
        )
        .unwrap();
        assert_eq!(job.state, JobState::Reconciling);
        let worker = WorkerId::parse("w2").unwrap();
        apply(
            &mut job,
            Event::ReconcileClaim {
                worker,
                lease: Duration::from_secs(10),
            },
            t(64),
        )
        .unwrap();
        let token = job.fencing_token;
        let message = "volume copy was incomplete".to_owned();
        apply(
            &mut job,
            Event::Reconciled {
                token,
                resolution: Resolution::Failed { message },
            },
            t(65),
        )
        .unwrap();
        assert_eq!(job.state, JobState::Failed);
    }

    #[test]
    fn cancel_running_then_fail_ends_cancelled_but_success_wins() {
        let mut job = queued(3);
        let token = claim(&mut job, t(0));
        let tr = apply(&mut job, Event::Cancel, t(1)).unwrap();
        assert_eq!(
            (tr.from, tr.to, job.cancel_requested),
            (JobState::Running, JobState::Running, true)
        );
        let mut other = job.clone();
        apply(
            &mut job,
            Event::Fail {
                token,
                message: "stopped".into(),
                retry: Retry::After(Duration::ZERO),
            },
            t(2),
        )
        .unwrap();
        assert_eq!(job.state, JobState::Cancelled);
        apply(
            &mut other,
            Event::Complete {
                token,
                result: None,
            },
            t(2),
        )
        .unwrap();
        assert_eq!(other.state, JobState::Succeeded);
    }

    #[test]
    fn retry_only_from_terminal() {
        let mut job = queued(1);
        assert!(matches!(
            apply(&mut job, Event::Retry, t(0)),
            Err(Error::InvalidTransition { .. })
        ));
        apply(&mut job, Event::Cancel, t(1)).unwrap();
        assert!(apply(&mut job, Event::Cancel, t(1)).is_err());
        apply(&mut job, Event::Retry, t(2)).unwrap();
        assert_eq!(
            (job.state, job.attempt, job.finished_at),
            (JobState::Queued, 0, None)
        );
    }

    #[test]
    fn requeue_makes_a_waiting_job_ready_now_and_leaves_others() {
        // Scheduled an hour ahead: ready now, attempts unchanged.
        let mut job = queued(3);
        job.run_at = t(3600);
        let tr = apply(&mut job, Event::Requeue, t(10)).unwrap();
        assert_eq!((tr.from, tr.to), (JobState::Queued, JobState::Queued));
        assert_eq!((job.run_at, job.attempt), (t(10), 0));
        // Already ready: unchanged.
        let before = job.clone();
        apply(&mut job, Event::Requeue, t(20)).unwrap();
        assert_eq!(job, before);
        // Waiting for a retry's backoff: ready now, the spent attempt and its error kept.
        let token = claim(&mut job, t(30));
        apply(
            &mut job,
            Event::Fail {
                token,
                message: "boom".into(),
                retry: Retry::After(Duration::from_secs(600)),
            },
            t(31),
        )
        .unwrap();
        apply(&mut job, Event::Requeue, t(32)).unwrap();
        assert_eq!(
            (job.state, job.run_at, job.attempt, job.errors.len()),
            (JobState::Queued, t(32), 1, 1)
        );
        // Running and finished jobs are refused, naming their state.
        claim(&mut job, t(33));
        let refused = apply(&mut job, Event::Requeue, t(34)).unwrap_err();
        assert!(matches!(
            refused,
            Error::InvalidTransition {
                from: JobState::Running,
                event: EventName::Requeue
            }
        ));
        let mut done = queued(1);
        apply(&mut done, Event::Cancel, t(1)).unwrap();
        let before = done.clone();
        assert!(apply(&mut done, Event::Requeue, t(2)).is_err());
        assert_eq!(done, before);
    }

    #[test]
    fn states_parse_and_print() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>().unwrap(), s);
        }
        assert!("done".parse::<JobState>().is_err());
    }
}

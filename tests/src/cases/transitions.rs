//! The transition table: for every state a job can be driven into through the store's public
//! API and every operation that applies an event to one job, the store accepts exactly what
//! `drover_core::apply` accepts from that job at the store's now, and leaves the job in the
//! state `apply` gives.

use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::{
    apply, ClaimReconciling, Event, Finish, FinishItem, FinishReply, HeartbeatItem, HeartbeatJobs,
    HeartbeatReply, Job, JobState, JobStore, RescueExpired, Resolution, Retry, RunAt,
};
use serde_json::json;

use super::{claim_params, enqueue, finish, job, kind, start, unbounded, worker, LEASE};
use crate::{Harness, StoreFactory};

/// The states a job is driven into, each with what sets it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// Waiting for a dependency (a queued job).
    Waiting,
    /// Queued and ready.
    Ready,
    /// Queued, waiting for its `run_at` an hour ahead.
    Scheduled,
    /// Running, its handler started.
    Running,
    /// Running, claimed ahead: its handler has not started.
    ClaimedAhead,
    /// Running with a cancel requested.
    CancelRequested,
    /// Running, its lease expired.
    Expired,
    /// Reconciling, its reconcile lease free.
    Reconciling,
    /// Reconciling under a sweep's lease.
    ReconcileHeld,
    /// Succeeded.
    Succeeded,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// The setups by the store they share: a store's clock moves for all of its jobs, and a rescue
/// takes every expired lease, so jobs whose lease expires have stores of their own.
const WORLDS: [&[Setup]; 3] = [
    &[
        Setup::Waiting,
        Setup::Ready,
        Setup::Scheduled,
        Setup::Running,
        Setup::ClaimedAhead,
        Setup::CancelRequested,
        Setup::Succeeded,
        Setup::Failed,
        Setup::Cancelled,
    ],
    &[Setup::Expired],
    &[Setup::Reconciling, Setup::ReconcileHeld],
];

/// The operations, one per event of `apply`. Rescue comes last: it rescues every expired
/// lease of the store, not only its own job's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Claim,
    Started,
    Heartbeat,
    Complete,
    Fail,
    Snooze,
    Release,
    Cancelled,
    WaitForChildren,
    ReconcileClaim,
    Reconciled,
    Cancel,
    Retry,
    Requeue,
    Rescue,
}

const OPERATIONS: [Operation; 15] = [
    Operation::Claim,
    Operation::Started,
    Operation::Heartbeat,
    Operation::Complete,
    Operation::Fail,
    Operation::Snooze,
    Operation::Release,
    Operation::Cancelled,
    Operation::WaitForChildren,
    Operation::ReconcileClaim,
    Operation::Reconciled,
    Operation::Cancel,
    Operation::Retry,
    Operation::Requeue,
    Operation::Rescue,
];

/// The event `apply` is given for `operation` on `job` (the token the job holds).
fn event(operation: Operation, job: &Job) -> Event {
    let token = job.fencing_token;
    match operation {
        Operation::Claim => Event::Claim {
            worker: worker("w1"),
            lease: LEASE,
            start: true,
        },
        Operation::Started => Event::Started {
            token,
            elapsed: Duration::ZERO,
        },
        Operation::Heartbeat => Event::Heartbeat {
            token,
            lease: LEASE,
            meta: None,
            progress: None,
        },
        Operation::Complete => Event::Complete {
            token,
            result: None,
        },
        Operation::Fail => Event::Fail {
            token,
            message: "boom".into(),
            retry: Retry::After(Duration::ZERO),
        },
        Operation::Snooze => Event::Snooze {
            token,
            delay: Duration::from_secs(1),
        },
        Operation::Release => Event::Release { token },
        Operation::Cancelled => Event::Cancelled {
            token,
            message: "stopped".into(),
        },
        Operation::WaitForChildren => Event::WaitForChildren { token },
        Operation::ReconcileClaim => Event::ReconcileClaim {
            worker: worker("sweeper"),
            lease: LEASE,
        },
        Operation::Reconciled => Event::Reconciled {
            token,
            resolution: Resolution::Inconclusive,
        },
        Operation::Cancel => Event::Cancel,
        Operation::Retry => Event::Retry,
        Operation::Requeue => Event::Requeue,
        Operation::Rescue => Event::LeaseExpired { reconciler: false },
    }
}

/// A finish of `job` with `outcome`, under the token it holds: recorded or not.
async fn finish_item(store: &dyn JobStore, job: &Job, outcome: Finish) -> bool {
    let replies = store
        .jobs_finish(vec![FinishItem {
            parent: None,
            id: job.id,
            token: job.fencing_token,
            finish: outcome,
            started: None,
        }])
        .await
        .expect("finish call");
    matches!(replies.as_slice(), [FinishReply::Recorded { .. }])
}

/// A heartbeat of `job` under the token it holds (with a start to record for `started`):
/// extended or not.
async fn heartbeat(store: &dyn JobStore, job: &Job, started: bool) -> bool {
    let replies = store
        .jobs_heartbeat(HeartbeatJobs {
            lease: LEASE,
            jobs: vec![HeartbeatItem {
                id: job.id,
                token: job.fencing_token,
                meta: None,
                progress: None,
                started: started.then_some(Duration::ZERO),
            }],
        })
        .await
        .expect("heartbeat call");
    matches!(replies.as_slice(), [HeartbeatReply::Extended { .. }])
}

/// Runs `operation` on `job` through the store's public API; true when the store accepted it
/// for this job.
async fn perform(store: &dyn JobStore, operation: Operation, job: &Job) -> bool {
    match operation {
        Operation::Claim => store
            .jobs_claim(claim_params(&[job.kind.as_str()], 1))
            .await
            .expect("claim call")
            .jobs
            .iter()
            .any(|claimed| claimed.id == job.id),
        Operation::Started => heartbeat(store, job, true).await,
        Operation::Heartbeat => heartbeat(store, job, false).await,
        Operation::Complete => finish_item(store, job, Finish::Succeeded { result: None }).await,
        Operation::Fail => {
            let failed = Finish::Failed {
                message: "boom".into(),
                retry: Retry::After(Duration::ZERO),
            };
            finish_item(store, job, failed).await
        }
        Operation::Snooze => {
            let delay = Duration::from_secs(1);
            finish_item(store, job, Finish::Snoozed { delay }).await
        }
        Operation::Release => finish_item(store, job, Finish::Released).await,
        Operation::Cancelled => {
            let message = "stopped".into();
            finish_item(store, job, Finish::Cancelled { message }).await
        }
        Operation::WaitForChildren => finish_item(store, job, Finish::WaitForChildren).await,
        Operation::ReconcileClaim => store
            .jobs_claim_reconciling(ClaimReconciling {
                worker: worker("sweeper"),
                kinds: vec![job.kind.clone()],
                limit: 10,
                lease: LEASE,
            })
            .await
            .expect("reconcile claim call")
            .iter()
            .any(|claimed| claimed.id == job.id),
        Operation::Reconciled => store
            .job_reconcile(job.id, job.fencing_token, Resolution::Inconclusive)
            .await
            .is_ok(),
        Operation::Cancel => store.job_cancel(job.id).await.is_ok(),
        Operation::Retry => store.job_retry(job.id).await.is_ok(),
        Operation::Requeue => store.job_requeue(job.id).await.is_ok(),
        Operation::Rescue => store
            .jobs_rescue_expired(RescueExpired {
                reconciler_kinds: Vec::new(),
                limit: 1_000,
            })
            .await
            .expect("rescue call")
            .iter()
            .any(|rescued| rescued.id == job.id),
    }
}

/// Rescues every expired lease, sending jobs of `kinds` to reconciling.
async fn rescue_to_reconciling(store: &dyn JobStore, kinds: &[String]) {
    store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: kinds.iter().map(|name| kind(name)).collect(),
            limit: 1_000,
        })
        .await
        .expect("rescue");
}

/// Drives a new job of kind `name` toward `setup`, as far as it goes without moving the clock.
async fn drive(store: &dyn JobStore, setup: Setup, name: &str) -> Job {
    let new = job(name, json!({"kind": name}));
    match setup {
        Setup::Waiting => {
            let blocker = enqueue(store, job(&format!("{name}-blocker"), json!(1))).await;
            enqueue(store, new.with_dependency(blocker.id)).await
        }
        Setup::Ready => enqueue(store, new).await,
        Setup::Scheduled => {
            let later = RunAt::After(Duration::from_secs(3600));
            enqueue(store, new.with_run_at(later)).await
        }
        Setup::Running | Setup::Expired | Setup::Reconciling | Setup::ReconcileHeld => {
            start(store, new).await
        }
        Setup::ClaimedAhead => {
            let created = enqueue(store, new).await;
            let mut params = claim_params(&[name], 1);
            params.start = 0;
            let claimed = store.jobs_claim(params).await.expect("claim").jobs;
            assert_eq!(claimed.len(), 1, "the new job is claimed ahead");
            assert_eq!(claimed[0].id, created.id);
            claimed.into_iter().next().expect("one job")
        }
        Setup::CancelRequested => {
            let running = start(store, new).await;
            store.job_cancel(running.id).await.expect("cancel request");
            running
        }
        Setup::Succeeded => {
            let running = start(store, new).await;
            finish(store, &running, Finish::Succeeded { result: None }).await;
            running
        }
        Setup::Failed => {
            let running = start(store, new.with_max_attempts(1)).await;
            let failed = Finish::Failed {
                message: "boom".into(),
                retry: Retry::Never,
            };
            finish(store, &running, failed).await;
            running
        }
        Setup::Cancelled => {
            let created = enqueue(store, new).await;
            store.job_cancel(created.id).await.expect("cancel");
            created
        }
    }
}

/// The state every job of `setup` must be in once set up (a check of the setup itself).
fn state_of(setup: Setup) -> JobState {
    match setup {
        Setup::Waiting => JobState::Waiting,
        Setup::Ready | Setup::Scheduled => JobState::Queued,
        Setup::Running | Setup::ClaimedAhead | Setup::CancelRequested | Setup::Expired => {
            JobState::Running
        }
        Setup::Reconciling | Setup::ReconcileHeld => JobState::Reconciling,
        Setup::Succeeded => JobState::Succeeded,
        Setup::Failed => JobState::Failed,
        Setup::Cancelled => JobState::Cancelled,
    }
}

/// The kind of the job of `setup` that `operation` is tried on: each job has its own.
fn kind_name(setup: Setup, operation: Operation) -> String {
    format!("{setup:?}-{operation:?}").to_lowercase()
}

/// For each setup of `world`, one job per operation in its state, in [`OPERATIONS`] order.
async fn jobs_in(h: &dyn Harness, store: &dyn JobStore, world: &[Setup]) -> Vec<Vec<Job>> {
    let mut ids = Vec::with_capacity(world.len());
    for &setup in world {
        let mut of_setup = Vec::with_capacity(OPERATIONS.len());
        for operation in OPERATIONS {
            of_setup.push(drive(store, setup, &kind_name(setup, operation)).await.id);
        }
        ids.push(of_setup);
    }
    let expiring = |setup: &Setup| {
        matches!(
            setup,
            Setup::Expired | Setup::Reconciling | Setup::ReconcileHeld
        )
    };
    if world.iter().any(expiring) {
        h.advance(LEASE + Duration::from_secs(1)).await;
    }
    let names_of = |wanted: &[Setup]| -> Vec<String> {
        world
            .iter()
            .filter(|setup| wanted.contains(setup))
            .flat_map(|&setup| OPERATIONS.map(|operation| kind_name(setup, operation)))
            .collect()
    };
    let reconciling = names_of(&[Setup::Reconciling, Setup::ReconcileHeld]);
    if !reconciling.is_empty() {
        rescue_to_reconciling(store, &reconciling).await;
    }
    let held = names_of(&[Setup::ReconcileHeld]);
    if !held.is_empty() {
        let taken = store
            .jobs_claim_reconciling(ClaimReconciling {
                worker: worker("sweeper"),
                kinds: held.iter().map(|name| kind(name)).collect(),
                limit: 1_000,
                lease: LEASE,
            })
            .await
            .expect("reconcile claim");
        assert_eq!(taken.len(), held.len(), "every job is taken by the sweep");
    }
    let mut jobs = Vec::with_capacity(ids.len());
    for (&setup, of_setup) in world.iter().zip(ids) {
        let mut stored = Vec::with_capacity(of_setup.len());
        for id in of_setup {
            let job = store.job_get(id).await.expect("get");
            assert_eq!(job.state, state_of(setup), "{setup:?}: the setup's state");
            stored.push(job);
        }
        jobs.push(stored);
    }
    jobs
}

/// What happened to one job: accepted or refused, and its state afterwards (`None`: gone).
type Answer = (bool, Option<JobState>);

/// For every state a job reaches through the store's public API and every operation on one
/// job, the store accepts it exactly when `apply` accepts its event from the job as stored,
/// at the store's clock read just before the call, and the job ends in the state `apply`
/// gives it. A store that accepts a transition the table forbids (or refuses one it allows)
/// fails here, whichever path (SQL or `apply`) it takes.
pub async fn transitions_every_state_and_event_match_apply(f: &dyn StoreFactory) {
    let mut mismatches = Vec::new();
    let mut pairs = 0;
    for world in WORLDS {
        let h = f.open(unbounded()).await;
        let store = h.store();
        let jobs = jobs_in(&*h, &*store, world).await;
        for (&setup, of_setup) in world.iter().zip(jobs) {
            for (operation, set_up) in OPERATIONS.into_iter().zip(of_setup) {
                // Read again: an earlier operation of the same store may have moved it.
                let job = store.job_get(set_up.id).await.expect("get");
                let now: DateTime<Utc> = store.now().await.expect("now");
                let mut applied = job.clone();
                let expected: Answer = match apply(&mut applied, event(operation, &job), now) {
                    Ok(transition) => (true, Some(transition.to)),
                    Err(_) => (false, Some(job.state)),
                };
                let accepted = perform(&*store, operation, &job).await;
                let after = store.job_get(job.id).await.ok().map(|stored| stored.state);
                let got: Answer = (accepted, after);
                if got != expected {
                    mismatches.push(format!(
                        "{setup:?} ({}) + {operation:?}: store {got:?}, apply {expected:?}",
                        job.state
                    ));
                }
                pairs += 1;
            }
        }
    }
    assert_eq!(
        pairs,
        12 * OPERATIONS.len(),
        "every setup meets every operation"
    );
    assert!(
        mismatches.is_empty(),
        "the store disagrees with apply:\n{}",
        mismatches.join("\n")
    );
}

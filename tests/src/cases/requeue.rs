//! Operator requeue: a queued job waiting for its `run_at` (scheduled, a retry's backoff, a
//! snooze) becomes ready now with its attempts kept; a ready job is left as it is; running,
//! reconciling and finished jobs are refused.

use std::time::Duration;

use drover_core::{Error, EventName, Finish, JobState, RescueExpired, Retry, RunAt};
use serde_json::json;

use super::{
    all_jobs, claim, enqueue, expect_invalid_transition, expect_not_found, failed_job, finish, job,
    kind, start, unbounded, LEASE,
};
use crate::StoreFactory;

/// A job scheduled an hour ahead is not claimable; requeued, it is ready at the store's now
/// (bracketed by the clock before and after the call), keeps its attempts, and is claimed.
pub async fn requeue_makes_a_scheduled_job_ready_now(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let scheduled = enqueue(
        &*store,
        job("later", json!({"n": 1})).with_run_at(RunAt::After(Duration::from_secs(3600))),
    )
    .await;
    assert!(claim(&*store, &["later"], 1).await.is_empty());
    let lower = store.now().await.unwrap();
    let outcome = store.job_requeue(scheduled.id).await.unwrap();
    let upper = store.now().await.unwrap();
    assert!(outcome.changed);
    let requeued = outcome.job;
    assert_eq!((requeued.state, requeued.attempt), (JobState::Queued, 0));
    assert!(
        (lower..=upper).contains(&requeued.run_at),
        "ready at the store's now: {}",
        requeued.run_at
    );
    assert_eq!(store.job_get(scheduled.id).await.unwrap(), requeued);
    let claimed = claim(&*store, &["later"], 1).await;
    assert_eq!(claimed.len(), 1, "claimable at once");
    assert_eq!((claimed[0].id, claimed[0].attempt), (scheduled.id, 1));
    assert_eq!(all_jobs(&*store).await.len(), 1, "no copy");
}

/// A job waiting for its retry's backoff, or after a snooze, runs at once when requeued: its
/// spent attempt and its error are kept (a snooze spent none).
pub async fn requeue_of_a_job_waiting_for_a_retry_or_snooze_keeps_its_attempts(
    f: &dyn StoreFactory,
) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("flaky", json!(1)).with_max_attempts(3)).await;
    let to = finish(
        &*store,
        &running,
        Finish::Failed {
            message: "boom".into(),
            retry: Retry::After(Duration::from_secs(600)),
        },
    )
    .await;
    assert_eq!(to, JobState::Queued);
    assert!(
        claim(&*store, &["flaky"], 1).await.is_empty(),
        "backing off"
    );
    let outcome = store.job_requeue(running.id).await.unwrap();
    assert!(outcome.changed);
    assert_eq!(
        (outcome.job.attempt, outcome.job.errors.len()),
        (1, 1),
        "the spent attempt and its error are kept"
    );
    let again = claim(&*store, &["flaky"], 1).await;
    assert_eq!((again[0].id, again[0].attempt), (running.id, 2));

    let to = finish(
        &*store,
        &again[0],
        Finish::Snoozed {
            delay: Duration::from_secs(600),
        },
    )
    .await;
    assert_eq!(to, JobState::Queued);
    let outcome = store.job_requeue(running.id).await.unwrap();
    assert!(outcome.changed);
    assert_eq!(outcome.job.attempt, 1, "a snooze spent no attempt");
    assert_eq!(claim(&*store, &["flaky"], 1).await.len(), 1);
}

/// Requeuing a job that is ready already changes nothing and says so.
pub async fn requeue_of_a_ready_job_changes_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let ready = enqueue(&*store, job("now", json!(1))).await;
    h.advance(Duration::from_secs(5)).await;
    let before = store.job_get(ready.id).await.unwrap();
    let outcome = store.job_requeue(ready.id).await.unwrap();
    assert!(!outcome.changed);
    assert_eq!(outcome.job, before);
    assert_eq!(store.job_get(ready.id).await.unwrap(), before);
}

/// Requeuing a running, reconciling or finished job is refused naming its state (a finished
/// one pointing to retry), an unknown job is not found, and nothing changes.
pub async fn requeue_of_a_job_that_is_not_queued_is_invalid_transition(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("r", json!(1))).await;
    expect_invalid_transition(store.job_requeue(running.id).await, JobState::Running);
    let failed = failed_job(&*store, job("f", json!(1))).await;
    let cancelled = enqueue(&*store, job("c", json!(1))).await;
    store.job_cancel(cancelled.id).await.unwrap();
    let succeeded = start(&*store, job("s", json!(1))).await;
    finish(&*store, &succeeded, Finish::Succeeded { result: None }).await;
    for (id, state) in [
        (failed.id, JobState::Failed),
        (cancelled.id, JobState::Cancelled),
        (succeeded.id, JobState::Succeeded),
    ] {
        let before = store.job_get(id).await.unwrap();
        match store.job_requeue(id).await {
            Err(
                error @ Error::InvalidTransition {
                    from,
                    event: EventName::Requeue,
                },
            ) => {
                assert_eq!(from, state);
                assert!(error.to_string().contains("retry it"), "{error}");
            }
            other => panic!("requeue of a {state} job: {other:?}"),
        }
        assert_eq!(store.job_get(id).await.unwrap(), before);
    }
    h.advance(LEASE + Duration::from_secs(1)).await;
    store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: vec![kind("r")],
            limit: 10,
        })
        .await
        .unwrap();
    expect_invalid_transition(store.job_requeue(running.id).await, JobState::Reconciling);
    expect_not_found(store.job_requeue(drover_core::JobId::new_v7()).await);
    assert_eq!(all_jobs(&*store).await.len(), 4);
}

//! Cancel: queued and reconciling jobs end cancelled at once; running jobs get a cancel
//! request that decides how their outcome is recorded (docs/design.md section 9).

use std::time::Duration;

use drover_core::{CancelEffect, Finish, JobId, JobState, RescueExpired, Retry};
use serde_json::json;

use super::{
    claim, enqueue, expect_invalid_transition, expect_not_found, finish, job, kind, start,
    unbounded, LEASE,
};
use crate::StoreFactory;

/// A queued job is cancelled at once and never claimed.
pub async fn cancel_queued_job(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let queued = enqueue(&*store, job("k", json!(1))).await;
    let outcome = store.job_cancel(queued.id).await.unwrap();
    assert_eq!(outcome.effect, CancelEffect::Cancelled);
    assert_eq!(outcome.job.state, JobState::Cancelled);
    assert!(outcome.job.finished_at.is_some());
    assert_eq!(store.job_get(queued.id).await.unwrap(), outcome.job);
    assert!(claim(&*store, &["k"], 10).await.is_empty());
}

/// Cancelling a running job requests it; a failure afterwards ends `cancelled`, not retried.
pub async fn cancel_running_then_fail_ends_cancelled(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_max_attempts(5)).await;
    let outcome = store.job_cancel(running.id).await.unwrap();
    assert_eq!(outcome.effect, CancelEffect::Requested);
    assert_eq!(outcome.job.state, JobState::Running);
    assert!(outcome.job.cancel_requested);
    let to = finish(
        &*store,
        &running,
        Finish::Failed {
            message: "interrupted".into(),
            retry: Retry::After(Duration::ZERO),
        },
    )
    .await;
    assert_eq!(to, JobState::Cancelled);
    assert!(claim(&*store, &["k"], 10).await.is_empty());
}

/// A running job whose handler completes despite the cancel request ends `succeeded`.
pub async fn cancel_running_then_complete_ends_succeeded(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    store.job_cancel(running.id).await.unwrap();
    let to = finish(
        &*store,
        &running,
        Finish::Succeeded {
            result: Some(json!("done")),
        },
    )
    .await;
    assert_eq!(to, JobState::Succeeded);
}

/// A running job with a cancel request that is released or snoozed ends `cancelled`.
pub async fn cancel_running_then_release_ends_cancelled(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = start(&*store, job("a", json!(1))).await;
    let b = start(&*store, job("b", json!(1))).await;
    store.job_cancel(a.id).await.unwrap();
    store.job_cancel(b.id).await.unwrap();
    assert_eq!(
        finish(&*store, &a, Finish::Released).await,
        JobState::Cancelled
    );
    assert_eq!(
        finish(
            &*store,
            &b,
            Finish::Snoozed {
                delay: Duration::from_secs(5)
            }
        )
        .await,
        JobState::Cancelled
    );
}

/// A reconciling job is cancelled at once.
pub async fn cancel_reconciling_job(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("recon", json!(1))).await;
    h.advance(LEASE + Duration::from_secs(1)).await;
    store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: vec![kind("recon")],
            limit: 10,
        })
        .await
        .unwrap();
    let outcome = store.job_cancel(running.id).await.unwrap();
    assert_eq!(outcome.effect, CancelEffect::Cancelled);
    assert_eq!(outcome.job.state, JobState::Cancelled);
}

/// A finished job cannot be cancelled.
pub async fn cancel_finished_job_is_invalid_transition(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    super::complete(&*store, &running).await;
    expect_invalid_transition(store.job_cancel(running.id).await, JobState::Succeeded);
    let queued = enqueue(&*store, job("k", json!(2))).await;
    store.job_cancel(queued.id).await.unwrap();
    expect_invalid_transition(store.job_cancel(queued.id).await, JobState::Cancelled);
}

/// Cancelling an unknown job is `NotFound`.
pub async fn cancel_unknown_is_not_found(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_not_found(store.job_cancel(JobId::new_v7()).await);
}

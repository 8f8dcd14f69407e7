//! Operator retry: finished jobs go back to queued with the same id and args and a fresh
//! attempt budget; live jobs are refused; quotas and unique keys are re-checked.

use std::time::Duration;

use drover_core::{EnqueueStatus, Error, JobId, JobState, Quota, RescueExpired};
use serde_json::json;

use super::{
    all_jobs, claim, complete, enqueue, expect_conflict, expect_invalid_transition,
    expect_not_found, expect_quota_exceeded, failed_job, job, kind, start, tenant, unbounded,
    with_quotas, LEASE,
};
use crate::StoreFactory;

/// A succeeded, failed or cancelled job is retried in place: same id and args, attempt 0,
/// result cleared, ready at once.
pub async fn retry_from_each_terminal_state(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let succeeded = start(&*store, job("s", json!({"n": 1}))).await;
    store
        .job_finish(
            succeeded.id,
            succeeded.fencing_token,
            drover_core::Finish::Succeeded {
                result: Some(json!(1)),
            },
        )
        .await
        .unwrap();
    let failed = failed_job(&*store, job("f", json!({"n": 2}))).await;
    let cancelled = enqueue(&*store, job("c", json!({"n": 3}))).await;
    store.job_cancel(cancelled.id).await.unwrap();
    for (id, name) in [(succeeded.id, "s"), (failed.id, "f"), (cancelled.id, "c")] {
        let retried = store.job_retry(id).await.unwrap();
        assert_eq!(retried.id, id);
        assert_eq!((retried.state, retried.attempt), (JobState::Queued, 0));
        assert!(retried.result.is_none() && retried.finished_at.is_none());
        assert!(!retried.cancel_requested);
        assert_eq!(store.job_get(id).await.unwrap(), retried);
        let claimed = claim(&*store, &[name], 1).await;
        assert_eq!(claimed.len(), 1, "ready at once");
        assert_eq!((claimed[0].id, claimed[0].attempt), (id, 1));
        assert_eq!(claimed[0].args, store.job_get(id).await.unwrap().args);
    }
    assert_eq!(all_jobs(&*store).await.len(), 3, "no copies");
}

/// Retrying a waiting, queued, running or reconciling job is refused and creates no copy.
pub async fn retry_of_live_job_is_invalid_transition(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let queued = enqueue(&*store, job("q", json!(1))).await;
    expect_invalid_transition(store.job_retry(queued.id).await, JobState::Queued);
    let running = start(&*store, job("r", json!(1))).await;
    expect_invalid_transition(store.job_retry(running.id).await, JobState::Running);
    h.advance(LEASE + Duration::from_secs(1)).await;
    store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: vec![kind("r")],
            limit: 10,
        })
        .await
        .unwrap();
    expect_invalid_transition(store.job_retry(running.id).await, JobState::Reconciling);
    let waiting = enqueue(&*store, job("w", json!(1)).with_dependency(queued.id)).await;
    expect_invalid_transition(store.job_retry(waiting.id).await, JobState::Waiting);
    assert_eq!(all_jobs(&*store).await.len(), 3);
}

/// A retry counts against the pending quotas again.
pub async fn retry_rechecks_quota(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(1), None)).await;
    let store = h.store();
    let failed = failed_job(&*store, job("k", json!(1))).await;
    let blocker = enqueue(&*store, job("k", json!(2))).await;
    match store.job_retry(failed.id).await {
        Err(Error::QuotaExceeded {
            current: 1, max: 1, ..
        }) => {}
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
    assert_eq!(
        store.job_get(failed.id).await.unwrap().state,
        JobState::Failed
    );
    store.job_cancel(blocker.id).await.unwrap();
    store.job_retry(failed.id).await.unwrap();
}

/// Running jobs count against both pending quotas of a retry (docs/design.md: quotas bound
/// queued + running jobs): a running job of the tenant fills a tenant quota of 1, a running job
/// of another tenant a global quota of 1; once it finished the retry passes.
pub async fn retry_quota_counts_running_jobs(f: &dyn StoreFactory) {
    for (quotas, runner_tenant, expected) in [
        (
            with_quotas(None, Some(1)),
            "default",
            Quota::Tenant("default".into()),
        ),
        (with_quotas(Some(1), None), "other", Quota::Global),
    ] {
        let h = f.open(quotas).await;
        let store = h.store();
        let failed = failed_job(&*store, job("k", json!(1))).await;
        let running = start(
            &*store,
            job("k", json!(2)).with_tenant(tenant(runner_tenant)),
        )
        .await;
        expect_quota_exceeded(store.job_retry(failed.id).await, expected, 1, 1);
        complete(&*store, &running).await;
        store.job_retry(failed.id).await.unwrap();
        assert_eq!(
            store.job_get(failed.id).await.unwrap().state,
            JobState::Queued
        );
    }
}

/// A retry is refused with `Conflict` when another live job of the tenant now holds its
/// unique key; every store names the holder and says what to do, in the same words.
pub async fn retry_conflicts_with_live_unique_holder(f: &dyn StoreFactory) {
    for quotas in [unbounded(), with_quotas(Some(100), Some(100))] {
        let h = f.open(quotas).await;
        let store = h.store();
        let old = start(&*store, job("k", json!(1)).with_unique_key("u")).await;
        complete(&*store, &old).await;
        let holder = enqueue(&*store, job("k", json!(2)).with_unique_key("u")).await;
        expect_conflict(
            store.job_retry(old.id).await,
            &format!(
                "unique key is held by live job {}; cancel or finish it first",
                holder.id
            ),
            Some("unique_key"),
            Some(holder.id),
        );
        assert_eq!(
            store.job_get(old.id).await.unwrap().state,
            JobState::Succeeded
        );
    }
}

/// A retried job keeps its unique key and never conflicts with itself.
pub async fn retry_keeps_its_own_unique_key(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let failed = failed_job(&*store, job("k", json!(1)).with_unique_key("u")).await;
    let retried = store.job_retry(failed.id).await.unwrap();
    assert_eq!(retried.unique_key.as_deref(), Some("u"));
    let dup = store
        .job_enqueue(job("k", json!(9)).with_unique_key("u"))
        .await
        .unwrap();
    assert_eq!(
        (dup.status, dup.job.id),
        (EnqueueStatus::Duplicate, failed.id)
    );
}

/// Retrying an unknown job is `NotFound`.
pub async fn retry_unknown_is_not_found(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_not_found(store.job_retry(JobId::new_v7()).await);
}

//! Rescue of expired leases: to queued with the attempt spent, to failed when attempts are
//! spent, to reconciling for reconciler kinds, to cancelled after a cancel request; exactly
//! once under concurrency; and the late writes of the worker that lost the lease.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use drover_core::{
    Finish, HeartbeatItem, HeartbeatJobs, HeartbeatReply, JobState, JobStore, RescueExpired,
};
use serde_json::json;

use super::{claim, complete, expect_lease_lost, job, kind, start, unbounded, within, LEASE};
use crate::StoreFactory;

fn rescue(reconciler_kinds: &[&str], limit: u32) -> RescueExpired {
    RescueExpired {
        reconciler_kinds: reconciler_kinds.iter().map(|k| kind(k)).collect(),
        limit,
    }
}

/// An expired lease goes back to queued, ready at once, with its attempt spent and an error
/// saying the lease expired.
pub async fn rescue_expired_requeues_with_attempt_spent(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_max_attempts(3)).await;
    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store.jobs_rescue_expired(rescue(&[], 10)).await.unwrap();
    assert_eq!(rescued.len(), 1);
    assert_eq!(
        (rescued[0].id, rescued[0].to),
        (running.id, JobState::Queued)
    );
    assert_eq!(
        (rescued[0].kind.as_str(), rescued[0].queue.as_str()),
        ("k", "default")
    );
    let queued = store.job_get(running.id).await.unwrap();
    assert_eq!((queued.state, queued.attempt), (JobState::Queued, 1));
    assert!(queued.lease_owner.is_none());
    assert!(queued
        .errors
        .last()
        .unwrap()
        .message
        .contains("lease expired"));
    let again = claim(&*store, &["k"], 1).await.remove(0);
    assert_eq!(again.attempt, 2);
    assert!(store
        .jobs_rescue_expired(rescue(&[], 10))
        .await
        .unwrap()
        .is_empty());
}

/// A job whose attempts are spent by crashes ends failed with a "lease expired" error.
pub async fn rescue_spent_attempts_fail(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_max_attempts(1)).await;
    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store.jobs_rescue_expired(rescue(&[], 10)).await.unwrap();
    assert_eq!(rescued[0].to, JobState::Failed);
    let failed = store.job_get(running.id).await.unwrap();
    assert_eq!(failed.state, JobState::Failed);
    assert!(failed.finished_at.is_some());
    assert!(failed
        .errors
        .last()
        .unwrap()
        .message
        .contains("lease expired"));
}

/// A job of a kind with a reconciler goes to reconciling instead of a blind re-run.
pub async fn rescue_reconciler_kind_goes_reconciling(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("deploy", json!(1))).await;
    let plain = start(&*store, job("plain", json!(1))).await;
    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store
        .jobs_rescue_expired(rescue(&["deploy"], 10))
        .await
        .unwrap();
    let to = |id| rescued.iter().find(|r| r.id == id).map(|r| r.to);
    assert_eq!(to(running.id), Some(JobState::Reconciling));
    assert_eq!(to(plain.id), Some(JobState::Queued));
    let reconciling = store.job_get(running.id).await.unwrap();
    assert_eq!(reconciling.state, JobState::Reconciling);
    assert!(reconciling.lease_owner.is_none());
}

/// A running job with a cancel request whose lease expires ends cancelled.
pub async fn rescue_cancel_requested_goes_cancelled(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    store.job_cancel(running.id).await.unwrap();
    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store.jobs_rescue_expired(rescue(&["k"], 10)).await.unwrap();
    assert_eq!(rescued[0].to, JobState::Cancelled);
    assert_eq!(
        store.job_get(running.id).await.unwrap().state,
        JobState::Cancelled
    );
}

/// Unexpired leases are left alone.
pub async fn rescue_leaves_unexpired_leases(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    h.advance(Duration::from_secs(10)).await;
    assert!(store
        .jobs_rescue_expired(rescue(&[], 10))
        .await
        .unwrap()
        .is_empty());
    // Compared field by field: on PostgreSQL, advancing shifts stored timestamps back.
    let still = store.job_get(running.id).await.unwrap();
    assert_eq!(still.state, JobState::Running);
    assert_eq!(
        (still.attempt, still.fencing_token),
        (running.attempt, running.fencing_token)
    );
    assert_eq!(still.lease_owner, running.lease_owner);
    assert!(still.errors.is_empty());
    complete(&*store, &running).await;
}

/// A rescue pass takes at most `limit` jobs.
pub async fn rescue_respects_limit(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store
        .jobs_enqueue((0..3).map(|n| job("k", json!(n))).collect())
        .await
        .unwrap();
    assert_eq!(claim(&*store, &["k"], 10).await.len(), 3);
    h.advance(LEASE + Duration::from_secs(1)).await;
    assert_eq!(
        store
            .jobs_rescue_expired(rescue(&[], 2))
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        store
            .jobs_rescue_expired(rescue(&[], 2))
            .await
            .unwrap()
            .len(),
        1
    );
}

/// 8 tasks (half on another store handle) rescuing at once rescue each lease exactly once.
pub async fn rescue_is_exactly_once_under_concurrency(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let stores: Vec<Arc<dyn JobStore>> = vec![h.store(), h.another_store().await];
    stores[0]
        .jobs_enqueue((0..40).map(|n| job("k", json!(n))).collect())
        .await
        .unwrap();
    assert_eq!(claim(&*stores[0], &["k"], 100).await.len(), 40);
    h.advance(LEASE + Duration::from_secs(1)).await;
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let got = store
                        .jobs_rescue_expired(rescue(&[], 3))
                        .await
                        .expect("rescue");
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|r| r.id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(within("concurrent rescuers", task).await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(
        (all.len(), distinct.len()),
        (40, 40),
        "each lease rescued exactly once"
    );
    for j in super::all_jobs(&*stores[0]).await {
        assert_eq!(
            (j.state, j.attempt, j.errors.len()),
            (JobState::Queued, 1, 1)
        );
    }
}

/// The worker that lost its lease can no longer write: after rescue and after another
/// worker re-claims, its completes and heartbeats are `LeaseLost` and never overwrite.
pub async fn rescue_late_write_of_old_worker_is_lease_lost(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let old = start(&*store, job("k", json!(1))).await;
    let old_beat = |meta| HeartbeatJobs {
        lease: LEASE,
        jobs: vec![HeartbeatItem {
            started: None,
            id: old.id,
            token: old.fencing_token,
            meta,
            progress: None,
        }],
    };
    h.advance(LEASE + Duration::from_secs(1)).await;
    store.jobs_rescue_expired(rescue(&[], 10)).await.unwrap();

    let late = Finish::Succeeded {
        result: Some(json!("stale")),
    };
    expect_lease_lost(
        store
            .job_finish(old.id, old.fencing_token, late.clone())
            .await,
    );
    let replies = store
        .jobs_heartbeat(old_beat(Some(json!({"old": true}))))
        .await
        .unwrap();
    assert!(matches!(replies[0], HeartbeatReply::LeaseLost { .. }));
    let queued = store.job_get(old.id).await.unwrap();
    assert_eq!(
        (queued.state, queued.result.clone()),
        (JobState::Queued, None)
    );

    let new = claim(&*store, &["k"], 1).await.remove(0);
    assert!(new.fencing_token > old.fencing_token);
    expect_lease_lost(store.job_finish(old.id, old.fencing_token, late).await);
    let replies = store
        .jobs_heartbeat(old_beat(Some(json!({"old": true}))))
        .await
        .unwrap();
    assert!(matches!(replies[0], HeartbeatReply::LeaseLost { .. }));
    assert_eq!(
        store.job_get(old.id).await.unwrap(),
        new,
        "the new run is untouched"
    );
    complete(&*store, &new).await;
    let done = store.job_get(old.id).await.unwrap();
    assert_eq!(
        (done.state, done.result, done.meta),
        (JobState::Succeeded, None, json!({}))
    );
}

//! Reconcile: sweeps take reconciling jobs under a lease and fencing token, and record a
//! reconciler's verdict.

use std::time::Duration;

use drover_core::{
    ClaimReconciling, Error, FencingToken, Job, JobId, JobState, JobStore, RescueExpired,
    Resolution, Transition,
};
use serde_json::json;

use super::{
    expect_invalid, expect_lease_lost, expect_not_found, job, kind, start, unbounded, worker, LEASE,
};
use crate::{Harness, StoreFactory};

fn sweep(kinds: &[&str], lease: Duration) -> ClaimReconciling {
    ClaimReconciling {
        worker: worker("sweeper"),
        kinds: kinds.iter().map(|k| kind(k)).collect(),
        limit: 10,
        lease,
    }
}

/// A job of `kind_name` moved to reconciling by a crash (expired lease + rescue).
async fn reconciling(h: &dyn Harness, store: &dyn JobStore, kind_name: &str) -> Job {
    let running = start(store, job(kind_name, json!({"deploy": 7}))).await;
    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: vec![kind(kind_name)],
            limit: 10,
        })
        .await
        .unwrap();
    assert!(rescued
        .iter()
        .any(|r| r.id == running.id && r.to == JobState::Reconciling));
    store.job_get(running.id).await.unwrap()
}

/// A sweep takes reconciling jobs of its kinds under a lease and a new fencing token.
pub async fn reconcile_claim_sets_lease_and_token(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let job_a = reconciling(&*h, &*store, "deploy").await;
    let other = reconciling(&*h, &*store, "other").await;
    let taken = store
        .jobs_claim_reconciling(sweep(&["deploy"], Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    let t = &taken[0];
    assert_eq!((t.id, t.state), (job_a.id, JobState::Reconciling));
    assert!(t.fencing_token > job_a.fencing_token);
    assert_eq!(t.lease_owner, Some(worker("sweeper")));
    assert!(t.lease_expires_at.is_some());
    assert_eq!(
        store.job_get(other.id).await.unwrap().lease_owner,
        None,
        "other kinds untouched"
    );
    assert!(
        store
            .jobs_claim_reconciling(sweep(&["deploy"], LEASE))
            .await
            .unwrap()
            .is_empty(),
        "held"
    );
}

/// Resolved as succeeded: the job ends succeeded.
pub async fn reconcile_resolve_succeeded(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    reconciling(&*h, &*store, "deploy").await;
    let t = store
        .jobs_claim_reconciling(sweep(&["deploy"], LEASE))
        .await
        .unwrap()
        .remove(0);
    let tr = store
        .job_reconcile(t.id, t.fencing_token, Resolution::Succeeded)
        .await
        .unwrap();
    assert_eq!(
        tr,
        Transition {
            from: JobState::Reconciling,
            to: JobState::Succeeded
        }
    );
    let done = store.job_get(t.id).await.unwrap();
    assert_eq!(done.state, JobState::Succeeded);
    assert!(done.finished_at.is_some() && done.lease_owner.is_none());
}

/// Resolved as failed: the job ends failed with the operator-facing message.
pub async fn reconcile_resolve_failed_stores_message(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    reconciling(&*h, &*store, "deploy").await;
    let t = store
        .jobs_claim_reconciling(sweep(&["deploy"], LEASE))
        .await
        .unwrap()
        .remove(0);
    let verdict = Resolution::Failed {
        message: "host db-3 never received the release".into(),
    };
    let tr = store
        .job_reconcile(t.id, t.fencing_token, verdict)
        .await
        .unwrap();
    assert_eq!(tr.to, JobState::Failed);
    let failed = store.job_get(t.id).await.unwrap();
    assert_eq!(
        failed.errors.last().unwrap().message,
        "host db-3 never received the release"
    );
}

/// Inconclusive: the job stays reconciling, its lease is freed, and the next sweep takes it.
pub async fn reconcile_inconclusive_stays_reconciling(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    reconciling(&*h, &*store, "deploy").await;
    let t = store
        .jobs_claim_reconciling(sweep(&["deploy"], LEASE))
        .await
        .unwrap()
        .remove(0);
    let tr = store
        .job_reconcile(t.id, t.fencing_token, Resolution::Inconclusive)
        .await
        .unwrap();
    assert_eq!(
        tr,
        Transition {
            from: JobState::Reconciling,
            to: JobState::Reconciling
        }
    );
    let again = store
        .jobs_claim_reconciling(sweep(&["deploy"], LEASE))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert!(again[0].fencing_token > t.fencing_token);
}

/// A verdict with a stale token is `LeaseLost` and changes nothing.
pub async fn reconcile_stale_token_is_lease_lost(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    reconciling(&*h, &*store, "deploy").await;
    let t = store
        .jobs_claim_reconciling(sweep(&["deploy"], LEASE))
        .await
        .unwrap()
        .remove(0);
    let stale = FencingToken(t.fencing_token.0 - 1);
    expect_lease_lost(
        store
            .job_reconcile(t.id, stale, Resolution::Succeeded)
            .await,
    );
    assert_eq!(store.job_get(t.id).await.unwrap(), t);
}

/// An expired reconcile lease lets another sweep take the job; the first sweep's verdict is
/// then `LeaseLost`.
pub async fn reconcile_expired_lease_lets_another_sweep_take_it(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    reconciling(&*h, &*store, "deploy").await;
    let first = store
        .jobs_claim_reconciling(sweep(&["deploy"], Duration::from_secs(10)))
        .await
        .unwrap()
        .remove(0);
    h.advance(Duration::from_secs(11)).await;
    expect_lease_lost(
        store
            .job_reconcile(first.id, first.fencing_token, Resolution::Succeeded)
            .await,
    );
    let second = store
        .jobs_claim_reconciling(sweep(&["deploy"], LEASE))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(second.id, first.id);
    assert!(second.fencing_token > first.fencing_token);
    expect_lease_lost(
        store
            .job_reconcile(first.id, first.fencing_token, Resolution::Succeeded)
            .await,
    );
    store
        .job_reconcile(second.id, second.fencing_token, Resolution::Succeeded)
        .await
        .unwrap();
}

/// A verdict for an unknown job is `NotFound`; a sweep with a bad lease is refused; a verdict
/// for a job that is not reconciling is `LeaseLost`.
pub async fn reconcile_rejects_unknown_and_bad_input(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_not_found(
        store
            .job_reconcile(JobId::new_v7(), FencingToken(1), Resolution::Succeeded)
            .await,
    );
    expect_invalid(
        store
            .jobs_claim_reconciling(sweep(&["deploy"], Duration::ZERO))
            .await,
        "lease",
    );
    let running = start(&*store, job("k", json!(1))).await;
    match store
        .job_reconcile(running.id, running.fencing_token, Resolution::Succeeded)
        .await
    {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(
        store.job_get(running.id).await.unwrap().state,
        JobState::Running
    );
}

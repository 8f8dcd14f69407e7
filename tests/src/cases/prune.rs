//! Retention: prune deletes only terminal jobs finished before the cutoff, in bounded batches,
//! and frees their idempotency keys (docs/design.md section 9).

use std::time::Duration;

use drover_core::{EnqueueStatus, Finish, JobState, PruneJobs, RunAt};
use serde_json::json;

use super::{
    all_jobs, complete, enqueue, expect_invalid, expect_not_found, failed_job, job, start,
    unbounded,
};
use crate::StoreFactory;

const HOUR: Duration = Duration::from_secs(3600);

fn prune(older_than: Duration, limit: u32) -> PruneJobs {
    PruneJobs { older_than, limit }
}

/// Only succeeded, failed and cancelled jobs finished before the cutoff are deleted.
pub async fn prune_deletes_only_old_terminal_jobs(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let succeeded = start(&*store, job("s", json!(1))).await;
    complete(&*store, &succeeded).await;
    let failed = failed_job(&*store, job("f", json!(1))).await;
    let cancelled = enqueue(&*store, job("c", json!(1))).await;
    store.job_cancel(cancelled.id).await.unwrap();
    let queued = enqueue(&*store, job("q", json!(1))).await;
    let running = start(&*store, job("r", json!(1))).await;
    h.advance(2 * HOUR).await;
    assert_eq!(store.jobs_prune(prune(HOUR, 100)).await.unwrap(), 3);
    for id in [succeeded.id, failed.id, cancelled.id] {
        expect_not_found(store.job_get(id).await);
    }
    assert_eq!(
        store.job_get(queued.id).await.unwrap().state,
        JobState::Queued
    );
    assert_eq!(
        store.job_get(running.id).await.unwrap().state,
        JobState::Running
    );
    assert_eq!(store.jobs_prune(prune(HOUR, 100)).await.unwrap(), 0);
}

/// Retention counts from `finished_at`, not `created_at`.
pub async fn prune_uses_finished_at(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let j = enqueue(&*store, job("k", json!(1))).await;
    h.advance(3 * HOUR).await;
    store.job_cancel(j.id).await.unwrap();
    assert_eq!(
        store.jobs_prune(prune(HOUR, 100)).await.unwrap(),
        0,
        "finished just now"
    );
    h.advance(2 * HOUR).await;
    assert_eq!(store.jobs_prune(prune(HOUR, 100)).await.unwrap(), 1);
}

/// One pass deletes at most `limit` rows.
pub async fn prune_is_bounded_by_limit(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    for n in 0..5 {
        let j = enqueue(&*store, job("k", json!(n))).await;
        store.job_cancel(j.id).await.unwrap();
    }
    h.advance(2 * HOUR).await;
    let passes: Vec<u64> = {
        let mut out = Vec::new();
        for _ in 0..4 {
            out.push(store.jobs_prune(prune(HOUR, 2)).await.unwrap());
        }
        out
    };
    assert_eq!(passes, vec![2, 2, 1, 0]);
    assert!(all_jobs(&*store).await.is_empty());
}

/// A job scheduled far in the future is never pruned, however old it is.
pub async fn prune_never_touches_future_scheduled_jobs(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let month = Duration::from_secs(30 * 24 * 3600);
    let later = enqueue(&*store, job("k", json!(1)).with_run_at(RunAt::After(month))).await;
    h.advance(Duration::from_secs(10 * 24 * 3600)).await;
    assert_eq!(
        store
            .jobs_prune(prune(Duration::from_secs(1), 100))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store.job_get(later.id).await.unwrap().state,
        JobState::Queued
    );
}

/// Pruning a job frees its idempotency key: the same key may then create a new job.
pub async fn prune_frees_idempotency_key(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_idempotency_key("key")).await;
    store
        .job_finish(
            running.id,
            running.fencing_token,
            Finish::Succeeded { result: None },
        )
        .await
        .unwrap();
    h.advance(2 * HOUR).await;
    assert_eq!(store.jobs_prune(prune(HOUR, 100)).await.unwrap(), 1);
    let again = store
        .job_enqueue(job("k", json!(2)).with_idempotency_key("key"))
        .await
        .unwrap();
    assert_eq!(again.status, EnqueueStatus::Created);
    assert_ne!(again.job.id, running.id);
}

/// A limit of 0 or above 100,000 is refused.
pub async fn prune_rejects_bad_limit(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_invalid(store.jobs_prune(prune(HOUR, 0)).await, "limit");
    expect_invalid(store.jobs_prune(prune(HOUR, 100_001)).await, "limit");
}

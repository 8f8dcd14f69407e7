//! The queue snapshot: counts per queue and state, ready and running jobs, and the age of the
//! oldest ready job (the queue lag).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use drover_core::{JobState, JobStore, NewWorkflow, PruneJobs, QueueSnapshot, RunAt};
use serde_json::json;

use super::{all_jobs, claim_from, complete, enqueue, failed_job, job, queue, start, unbounded};
use crate::StoreFactory;

async fn snapshot_of(store: &dyn drover_core::JobStore, name: &str) -> QueueSnapshot {
    let snapshot = store.queue_snapshot().await.unwrap();
    snapshot
        .queues
        .into_iter()
        .find(|q| q.queue.as_str() == name)
        .unwrap_or_else(|| panic!("queue {name} in the snapshot"))
}

/// Counts per state, ready (queued with `run_at` passed) and running.
pub async fn snapshot_counts_per_state(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let q = || queue("work");
    let done = start(&*store, job("s", json!(1)).with_queue(q())).await;
    complete(&*store, &done).await;
    failed_job(&*store, job("f", json!(1)).with_queue(q())).await;
    start(&*store, job("r", json!(1)).with_queue(q())).await;
    enqueue(&*store, job("k", json!(1)).with_queue(q())).await;
    enqueue(&*store, job("other.kind", json!(1)).with_queue(q())).await;
    enqueue(
        &*store,
        job("k", json!(1))
            .with_queue(q())
            .with_run_at(RunAt::After(Duration::from_secs(600))),
    )
    .await;
    enqueue(&*store, job("k", json!(1))).await;
    let s = snapshot_of(&*store, "work").await;
    assert_eq!(s.count(JobState::Queued), 3);
    assert_eq!(s.count(JobState::Running), 1);
    assert_eq!(s.count(JobState::Succeeded), 1);
    assert_eq!(s.count(JobState::Failed), 1);
    assert_eq!(s.count(JobState::Cancelled), 0);
    assert!(
        !s.counts.contains_key(&JobState::Cancelled),
        "states without jobs are absent"
    );
    assert_eq!((s.ready, s.running, s.paused), (2, 1, false));
    let default = snapshot_of(&*store, "default").await;
    assert_eq!((default.count(JobState::Queued), default.ready), (1, 1));
}

/// The lag is the age of the oldest ready job; none without ready jobs.
pub async fn snapshot_oldest_ready_age(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    enqueue(&*store, job("k", json!(1)).with_queue(queue("lag"))).await;
    h.advance(Duration::from_secs(5)).await;
    enqueue(
        &*store,
        job("k", json!(2))
            .with_queue(queue("lag"))
            .with_priority(-3),
    )
    .await;
    h.advance(Duration::from_secs(2)).await;
    let s = snapshot_of(&*store, "lag").await;
    let age = s.oldest_ready_age_ms.expect("ready jobs have a lag");
    assert!(
        (7_000..12_000).contains(&age),
        "oldest ready job is about 7 s old, got {age} ms"
    );
    assert_eq!(s.ready, 2);
    assert_eq!(claim_from(&*store, &["lag"], &["k"], 10).await.len(), 2);
    let s = snapshot_of(&*store, "lag").await;
    assert_eq!((s.ready, s.oldest_ready_age_ms, s.running), (0, None, 2));
    enqueue(
        &*store,
        job("k", json!(3))
            .with_queue(queue("lag"))
            .with_run_at(RunAt::After(Duration::from_secs(60))),
    )
    .await;
    let s = snapshot_of(&*store, "lag").await;
    assert_eq!(
        (s.ready, s.oldest_ready_age_ms),
        (0, None),
        "a future job is not ready"
    );
    h.advance(Duration::from_secs(61)).await;
    let s = snapshot_of(&*store, "lag").await;
    assert_eq!(s.ready, 1);
    assert!(s
        .oldest_ready_age_ms
        .is_some_and(|ms| (1_000..6_000).contains(&ms)));

    // A run_at long before the enqueue counts from the enqueue: the job has not waited 56
    // years, and one such job must not fire every lag alert.
    enqueue(
        &*store,
        job("k", json!(4))
            .with_queue(queue("past"))
            .with_run_at(RunAt::At(
                Utc.with_ymd_and_hms(1970, 1, 1, 0, 0, 0).unwrap(),
            )),
    )
    .await;
    h.advance(Duration::from_secs(3)).await;
    let s = snapshot_of(&*store, "past").await;
    assert_eq!(s.ready, 1);
    let age = s.oldest_ready_age_ms.expect("a ready job has a lag");
    assert!(
        (3_000..8_000).contains(&age),
        "ready since its enqueue about 3 s ago, got {age} ms"
    );
}

/// A paused queue without jobs appears, paused and empty.
pub async fn snapshot_includes_paused_empty_queue(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.queue_pause(queue("quiet")).await.unwrap();
    let s = snapshot_of(&*store, "quiet").await;
    assert!(s.paused);
    assert!(s.counts.is_empty());
    assert_eq!((s.ready, s.running, s.oldest_ready_age_ms), (0, 0, None));
}

/// The vacuum status ([`drover_core::JobStore::vacuum_status`]): `None` for a store without
/// vacuum (memory), and the snapshot carries the same answer; a store with vacuum answers
/// with estimates of a table that holds jobs.
pub async fn snapshot_vacuum_status_is_none_without_vacuum(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let done = start(&*store, job("s", json!(1))).await;
    complete(&*store, &done).await;
    let status = store.vacuum_status().await.unwrap();
    let snapshot = store.queue_snapshot().await.unwrap();
    assert_eq!(status.is_some(), snapshot.vacuum.is_some(), "{snapshot:?}");
    if h.store_name() == "memory" {
        assert_eq!(status, None);
        return;
    }
    let status = status.expect("a store with vacuum answers");
    assert!((0.0..=1.0).contains(&status.dead_fraction()), "{status:?}");
    assert!(
        status.oldest_transaction_pid.is_some() || status.oldest_transaction_age_ms.is_none(),
        "no prepared transaction here: an age comes with a pid ({status:?})"
    );
}

/// The counts of every queue and state as the snapshot gives them.
async fn snapshot_counts(store: &dyn JobStore) -> BTreeMap<(String, JobState), u64> {
    let snapshot = store.queue_snapshot().await.unwrap();
    let mut counts = BTreeMap::new();
    for q in snapshot.queues {
        for (state, n) in q.counts {
            counts.insert((q.queue.as_str().to_owned(), state), n);
        }
    }
    counts
}

/// The same counted from the jobs themselves, page by page.
async fn listed_counts(store: &dyn JobStore) -> BTreeMap<(String, JobState), u64> {
    let mut counts = BTreeMap::new();
    for j in all_jobs(store).await {
        *counts
            .entry((j.queue.as_str().to_owned(), j.state))
            .or_insert(0) += 1;
    }
    counts
}

/// After each kind of change a job goes through (batch and single enqueue, a workflow's
/// waiting jobs, claim, success, failure, cancel, retry, delete, prune, rescue), the
/// snapshot's counts are those of the jobs themselves.
pub async fn snapshot_counts_follow_every_change(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let check = |step: &'static str| {
        let store = store.clone();
        async move {
            let (given, listed) = (snapshot_counts(&*store).await, listed_counts(&*store).await);
            assert_eq!(
                given, listed,
                "after {step}: the snapshot's counts are the jobs'"
            );
        }
    };
    store
        .jobs_enqueue(
            (0..40)
                .map(|n| job("k", json!(n)).with_queue(queue("bulk")))
                .collect(),
        )
        .await
        .unwrap();
    enqueue(&*store, job("k", json!("one")).with_queue(queue("one"))).await;
    check("enqueues").await;
    let graph = NewWorkflow::new()
        .job(
            "first",
            job("k", json!("w1")).with_queue(queue("flow")),
            &[],
        )
        .job(
            "then",
            job("k", json!("w2")).with_queue(queue("flow")),
            &["first"],
        );
    store.workflow_enqueue(graph).await.unwrap();
    check("a workflow").await;
    let claimed = claim_from(&*store, &["bulk", "flow"], &["k"], 12).await;
    check("a claim").await;
    for done in &claimed[..4] {
        complete(&*store, done).await;
    }
    check("successes").await;
    let failed = failed_job(&*store, job("f", json!("f")).with_queue(queue("fails"))).await;
    check("a failure").await;
    let queued = all_jobs(&*store)
        .await
        .into_iter()
        .filter(|j| j.state == JobState::Queued && j.queue.as_str() == "bulk")
        .take(3)
        .collect::<Vec<_>>();
    for j in &queued {
        store.job_cancel(j.id).await.unwrap();
    }
    store.job_cancel(claimed[5].id).await.unwrap();
    check("cancels").await;
    store.job_retry(failed.id).await.unwrap();
    check("a retry").await;
    store.job_delete(claimed[0].id).await.unwrap();
    check("a delete").await;
    h.advance(Duration::from_secs(120)).await;
    store
        .jobs_prune(PruneJobs {
            older_than: Duration::from_secs(60),
            limit: 2,
        })
        .await
        .unwrap();
    check("a prune").await;
    store
        .jobs_rescue_expired(drover_core::RescueExpired {
            limit: 100,
            reconciler_kinds: Default::default(),
        })
        .await
        .unwrap();
    check("a rescue of expired leases").await;
}

/// Past the count bound: 10,050 ready jobs and 3 scheduled are counted exactly (queued minus
/// scheduled); with more than 10,000 of each, `ready` may be a lower bound, and says so.
pub async fn snapshot_ready_beyond_the_count_bound(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let deep = || queue("deep");
    store
        .jobs_enqueue(
            (0..10_050)
                .map(|n| job("k", json!(n)).with_queue(deep()))
                .collect(),
        )
        .await
        .unwrap();
    let later = |n: i32| {
        job("k", json!(-n))
            .with_queue(deep())
            .with_run_at(RunAt::After(Duration::from_secs(3_600)))
    };
    store
        .jobs_enqueue((0..3).map(later).collect())
        .await
        .unwrap();
    let s = snapshot_of(&*store, "deep").await;
    assert_eq!(s.count(JobState::Queued), 10_053);
    assert_eq!((s.ready, s.ready_at_least), (10_050, false), "{s:?}");
    store
        .jobs_enqueue((3..10_005).map(later).collect())
        .await
        .unwrap();
    let s = snapshot_of(&*store, "deep").await;
    assert_eq!(s.count(JobState::Queued), 20_055);
    if s.ready_at_least {
        assert!((10_000..10_050).contains(&s.ready), "{s:?}");
    } else {
        assert_eq!(s.ready, 10_050, "{s:?}");
    }
    let age = s.oldest_ready_age_ms.expect("ready jobs have a lag");
    assert!(age < 60_000, "{age}");
}

//! Claim: order, readiness, paused queues, registered kinds, queue filter, batch limit,
//! attempts and fencing tokens, the lease, argument checks, and concurrent claimers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use drover_core::{ClaimJobs, EnqueueStatus, Finish, JobState, JobStore, QueueName, Retry, RunAt};
use serde_json::json;

use super::{
    all_jobs, claim, claim_from, claim_params, complete, enqueue, expect_invalid, finish, job,
    queue, start, unbounded, within, worker,
};
use crate::StoreFactory;

/// Claims take ready jobs by priority (smaller first), then `run_at`, then id.
pub async fn claim_orders_by_priority_then_run_at_then_id(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let now = store.now().await.unwrap();
    let at = |secs: i64| RunAt::At(now - chrono::Duration::seconds(secs));
    let a = enqueue(&*store, job("k", json!("a")).with_run_at(at(10))).await;
    let b = enqueue(&*store, job("k", json!("b")).with_run_at(at(20))).await;
    let c = enqueue(&*store, job("k", json!("c")).with_priority(-1)).await;
    let d = enqueue(&*store, job("k", json!("d")).with_run_at(at(20))).await;
    let e = enqueue(
        &*store,
        job("k", json!("e")).with_priority(5).with_run_at(at(3600)),
    )
    .await;
    let mut order = Vec::new();
    for _ in 0..5 {
        let got = claim(&*store, &["k"], 1).await;
        assert_eq!(got.len(), 1);
        order.push(got[0].id);
    }
    assert_eq!(order, vec![c.id, b.id, d.id, a.id, e.id]);
    assert!(claim(&*store, &["k"], 1).await.is_empty());
}

/// A job whose `run_at` is in the future is skipped until the store's clock reaches it.
pub async fn claim_skips_jobs_not_ready_until_time_passes(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let later = enqueue(
        &*store,
        job("k", json!(1)).with_run_at(RunAt::After(Duration::from_secs(60))),
    )
    .await;
    let now_job = enqueue(&*store, job("k", json!(2))).await;
    let got = claim(&*store, &["k"], 10).await;
    assert_eq!(
        got.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![now_job.id]
    );
    // 10 s short of ready: on PostgreSQL the real clock runs on meanwhile, so the margin must
    // outlast a slow machine's round trips.
    h.advance(Duration::from_secs(50)).await;
    assert!(claim(&*store, &["k"], 10).await.is_empty());
    h.advance(Duration::from_secs(11)).await;
    let got = claim(&*store, &["k"], 10).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![later.id]);
}

/// A paused queue is skipped; its running jobs still finish; a resume makes its jobs
/// claimable again.
pub async fn claim_skips_paused_queue(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_queue(queue("mail"))).await;
    let waiting = enqueue(&*store, job("k", json!(2)).with_queue(queue("mail"))).await;
    let other = enqueue(&*store, job("k", json!(3))).await;
    store.queue_pause(queue("mail")).await.unwrap();
    let got = claim_from(&*store, &["mail", "default"], &["k"], 10).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![other.id]);
    complete(&*store, &running).await;
    assert_eq!(
        store.job_get(waiting.id).await.unwrap().state,
        JobState::Queued
    );
    store.queue_resume(queue("mail")).await.unwrap();
    let got = claim_from(&*store, &["mail"], &["k"], 10).await;
    assert_eq!(
        got.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![waiting.id]
    );
}

/// Only kinds the worker registered are claimed; others stay queued untouched (attempt 0,
/// token 0, unique key still held) and do not block later jobs.
pub async fn claim_only_registered_kinds(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let unknown = enqueue(
        &*store,
        job("new.kind", json!(1))
            .with_priority(-10)
            .with_unique_key("u"),
    )
    .await;
    let known = enqueue(&*store, job("old.kind", json!(2))).await;
    let got = claim(&*store, &["old.kind", "other"], 10).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![known.id]);
    let still = store.job_get(unknown.id).await.unwrap();
    assert_eq!(still, unknown, "a skipped job is untouched");
    let dup = store
        .job_enqueue(job("new.kind", json!(3)).with_unique_key("u"))
        .await
        .unwrap();
    assert_eq!(
        (dup.status, dup.job.id),
        (EnqueueStatus::Duplicate, unknown.id)
    );
    assert!(
        claim(&*store, &[], 10).await.is_empty(),
        "no kinds, no claims"
    );
    let got = claim(&*store, &["new.kind"], 10).await;
    assert_eq!(got[0].id, unknown.id);
}

/// Only the named queues are claimed from.
pub async fn claim_filters_by_queue(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = enqueue(&*store, job("k", json!(1)).with_queue(queue("qa"))).await;
    let b = enqueue(&*store, job("k", json!(2)).with_queue(queue("qb"))).await;
    enqueue(&*store, job("k", json!(3)).with_queue(queue("qc"))).await;
    let got = claim_from(&*store, &["qa", "qb"], &["k"], 10).await;
    let ids: HashSet<_> = got.iter().map(|j| j.id).collect();
    assert_eq!(ids, HashSet::from([a.id, b.id]));
    assert!(
        claim(&*store, &["k"], 10).await.is_empty(),
        "queue default has none"
    );
}

/// A claim takes at most `limit` jobs.
pub async fn claim_respects_limit(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store
        .jobs_enqueue((0..5).map(|n| job("k", json!(n))).collect())
        .await
        .unwrap();
    assert_eq!(claim(&*store, &["k"], 2).await.len(), 2);
    assert_eq!(claim(&*store, &["k"], 10).await.len(), 3);
    assert!(claim(&*store, &["k"], 10).await.is_empty());
}

/// Each claim adds one attempt and a strictly greater fencing token; a release gives the
/// attempt back but the next claim still gets a new token.
pub async fn claim_fencing_token_strictly_increases(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let first = start(&*store, job("k", json!(1)).with_max_attempts(5)).await;
    assert_eq!(first.attempt, 1);
    assert!(first.fencing_token.0 > 0);
    finish(
        &*store,
        &first,
        Finish::Failed {
            message: "x".into(),
            retry: Retry::After(Duration::ZERO),
        },
    )
    .await;
    let second = claim(&*store, &["k"], 1).await.remove(0);
    assert_eq!(second.attempt, 2);
    assert!(second.fencing_token > first.fencing_token);
    finish(&*store, &second, Finish::Released).await;
    let third = claim(&*store, &["k"], 1).await.remove(0);
    assert_eq!(third.attempt, 2, "a release gives the attempt back");
    assert!(third.fencing_token > second.fencing_token);
}

/// A claimed job is running under the claiming worker with `lease_expires_at = now + lease`.
pub async fn claim_sets_lease(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    enqueue(&*store, job("k", json!(1))).await;
    let before = store.now().await.unwrap();
    let claim = ClaimJobs {
        worker: worker("host-1:42"),
        queues: vec![QueueName::default_queue()],
        kinds: vec![super::kind("k")],
        limit: 1,
        start: 1,
        lease: Duration::from_secs(45),
    };
    let got = store.jobs_claim(claim).await.unwrap().jobs.remove(0);
    assert_eq!(got.state, JobState::Running);
    assert_eq!(got.lease_owner, Some(worker("host-1:42")));
    let attempted = got.attempted_at.expect("attempted_at set");
    assert!(attempted >= before);
    assert_eq!(
        got.lease_expires_at,
        Some(attempted + chrono::Duration::seconds(45))
    );
    assert_eq!(store.job_get(got.id).await.unwrap(), got);
}

/// A limit of 0 or above 10,000 and a lease outside 100 ms..=24 h are refused.
pub async fn claim_rejects_bad_limit_and_lease(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    enqueue(&*store, job("k", json!(1))).await;
    expect_invalid(store.jobs_claim(claim_params(&["k"], 0)).await, "limit");
    expect_invalid(
        store.jobs_claim(claim_params(&["k"], 10_001)).await,
        "limit",
    );
    let mut short = claim_params(&["k"], 1);
    short.lease = Duration::from_millis(50);
    expect_invalid(store.jobs_claim(short).await, "lease");
    let mut long = claim_params(&["k"], 1);
    long.lease = Duration::from_secs(25 * 3600);
    expect_invalid(store.jobs_claim(long).await, "lease");
    assert_eq!(all_jobs(&*store).await[0].state, JobState::Queued);
}

/// 8 concurrent claimers (half on another store handle) over 2,000 jobs claim each exactly
/// once.
pub async fn claim_concurrent_claimers_take_each_job_once(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let stores: Vec<Arc<dyn JobStore>> = vec![h.store(), h.another_store().await];
    stores[0]
        .jobs_enqueue((0..2000).map(|n| job("k", json!(n))).collect())
        .await
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                let mut params = claim_params(&["k"], 37);
                params.worker = worker(&format!("w{i}"));
                loop {
                    let got = store.jobs_claim(params.clone()).await.expect("claim").jobs;
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|j| j.id));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut total = 0;
    for task in tasks {
        let ids = within("concurrent claimers", task).await.unwrap();
        total += ids.len();
        seen.extend(ids);
    }
    assert_eq!(total, 2000, "every job claimed once");
    assert_eq!(seen.len(), 2000, "no job claimed twice");
}

//! Limits: `max_running` per key (explicit and implicit `kind:`/`queue:` keys), GCRA rates,
//! skipped jobs keeping their place, policy management, and concurrent claimers.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobState, JobStore, LimitPolicy, Rate};
use serde_json::json;

use super::{
    claim, claim_from, claim_params, complete, enqueue, expect_invalid, expect_not_found, job,
    limit_key, queue, unbounded, within, worker,
};
use crate::StoreFactory;

fn max_running(key: &str, n: u32) -> LimitPolicy {
    LimitPolicy::new(limit_key(key), Some(n), None).unwrap()
}

fn rate(key: &str, count: u32, period: Duration) -> LimitPolicy {
    LimitPolicy::new(
        limit_key(key),
        None,
        Some(Rate::new(count, period).unwrap()),
    )
    .unwrap()
}

/// At most `max_running` jobs naming an explicit key run at once; others are still claimed.
pub async fn limits_max_running_explicit_key(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.limit_set(max_running("customer:1", 2)).await.unwrap();
    for n in 0..4 {
        enqueue(
            &*store,
            job("k", json!(n)).with_limit_key(limit_key("customer:1")),
        )
        .await;
    }
    let free = enqueue(&*store, job("k", json!("free")).with_priority(5)).await;
    let got = claim(&*store, &["k"], 10).await;
    assert_eq!(got.len(), 3);
    assert!(got.iter().any(|j| j.id == free.id));
    assert!(claim(&*store, &["k"], 10).await.is_empty());
    let limited = got.iter().find(|j| j.id != free.id).unwrap();
    complete(&*store, limited).await;
    assert_eq!(claim(&*store, &["k"], 10).await.len(), 1);
}

/// Every job is subject to a policy keyed `kind:<kind>` when one exists.
pub async fn limits_max_running_implicit_kind_key(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.limit_set(max_running("kind:slow", 1)).await.unwrap();
    for n in 0..3 {
        enqueue(&*store, job("slow", json!(n))).await;
        enqueue(&*store, job("fast", json!(n))).await;
    }
    let got = claim(&*store, &["slow", "fast"], 10).await;
    assert_eq!(got.iter().filter(|j| j.kind.as_str() == "slow").count(), 1);
    assert_eq!(got.iter().filter(|j| j.kind.as_str() == "fast").count(), 3);
}

/// Every job is subject to a policy keyed `queue:<queue>` when one exists.
pub async fn limits_max_running_implicit_queue_key(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.limit_set(max_running("queue:mail", 2)).await.unwrap();
    for n in 0..4 {
        enqueue(&*store, job("k", json!(n)).with_queue(queue("mail"))).await;
        enqueue(&*store, job("k", json!(n))).await;
    }
    let got = claim_from(&*store, &["mail", "default"], &["k"], 10).await;
    assert_eq!(got.iter().filter(|j| j.queue.as_str() == "mail").count(), 2);
    assert_eq!(
        got.iter().filter(|j| j.queue.as_str() == "default").count(),
        4
    );
}

/// A long backlog behind a full `queue:<queue>` or `kind:<kind>` policy hides no admissible job
/// behind it: the claim skips the closed queue or kind (more jobs than a claim scans at most,
/// 10,000 on PostgreSQL, wait behind each policy here).
pub async fn limits_backlog_behind_a_full_policy_hides_no_other_job(f: &dyn StoreFactory) {
    const BACKLOG: usize = 10_001;
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.limit_set(max_running("queue:mail", 1)).await.unwrap();
    store.limit_set(max_running("kind:slow", 1)).await.unwrap();
    enqueue(&*store, job("k", json!("first")).with_queue(queue("mail"))).await;
    enqueue(&*store, job("slow", json!("first"))).await;
    let running = claim_from(&*store, &["mail", "default"], &["k", "slow"], 10).await;
    assert_eq!(
        running.len(),
        2,
        "one job of each policy runs: both are full"
    );
    for (kind, queue_name) in [("k", "mail"), ("slow", "default")] {
        let mut left = BACKLOG;
        while left > 0 {
            let n = left.min(5_000);
            let batch = (0..n)
                .map(|i| job(kind, json!(i)).with_queue(queue(queue_name)))
                .collect();
            store
                .jobs_enqueue(batch)
                .await
                .expect("enqueue the backlog");
            left -= n;
        }
    }
    // Last in claim order: after both backlogs.
    let free = enqueue(&*store, job("k", json!("free"))).await;
    let got = claim_from(&*store, &["mail", "default"], &["k", "slow"], 10).await;
    let ids: Vec<_> = got.iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![free.id], "only the job no full policy holds");
    complete(&*store, &running[0]).await;
    let next = claim_from(&*store, &["mail", "default"], &["k", "slow"], 10).await;
    assert_eq!(next.len(), 1, "a freed place admits one more: {next:?}");
    assert_eq!(next[0].queue.as_str(), running[0].queue.as_str());
}

/// A rate of N per period allows one claim every period / N, never a burst: no window of one
/// period holds more than N claims (docs/design.md section 4).
pub async fn limits_rate_spaces_claims_period_over_count_apart(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store
        .limit_set(rate("kind:api", 2, Duration::from_secs(10)))
        .await
        .unwrap();
    store
        .jobs_enqueue((0..8).map(|n| job("api", json!(n))).collect())
        .await
        .unwrap();
    assert_eq!(
        claim(&*store, &["api"], 10).await.len(),
        1,
        "one, not a burst"
    );
    assert!(claim(&*store, &["api"], 10).await.is_empty());
    // (Whole seconds: on PostgreSQL the store's clock also runs while the test does.)
    h.advance(Duration::from_secs(4)).await;
    assert!(
        claim(&*store, &["api"], 10).await.is_empty(),
        "not before 5 s"
    );
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(claim(&*store, &["api"], 10).await.len(), 1, "one per 5 s");
    assert!(claim(&*store, &["api"], 10).await.is_empty());
    // An idle minute does not save up claims for a burst: still one, then 5 s.
    h.advance(Duration::from_secs(60)).await;
    assert_eq!(
        claim(&*store, &["api"], 10).await.len(),
        1,
        "no saved-up burst"
    );
    assert!(claim(&*store, &["api"], 10).await.is_empty());
    h.advance(Duration::from_secs(5)).await;
    assert_eq!(claim(&*store, &["api"], 10).await.len(), 1);
}

/// The claim answer's `retry_after` (`Claimed::retry_after`): after a rate held back a job
/// the claim had room for, how long until the earliest such job is admissible; no time for
/// jobs only a full `max_running` holds (no clock says when a running job finishes) or when
/// nothing was held. A claim loop sleeps that long instead of guessing, so a rate runs at its
/// pace (with guessed pauses 4/s ran ~3/s).
pub async fn limits_claim_answer_says_when_a_rate_admits_the_next_job(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let seconds = |claimed: &drover_core::Claimed| {
        claimed
            .retry_after
            .map(|d| d.as_secs_f64())
            .expect("a time until the rate admits the next job")
    };
    store
        .limit_set(rate("kind:api", 1, Duration::from_secs(10)))
        .await
        .unwrap();
    store
        .limit_set(rate("slow", 1, Duration::from_secs(60)))
        .await
        .unwrap();
    store.limit_set(max_running("hold", 0)).await.unwrap();
    store
        .jobs_enqueue((0..3).map(|n| job("api", json!(n))).collect())
        .await
        .unwrap();
    // (On PostgreSQL the store's clock also runs while the test does: bounds, not values.)
    let first = store.jobs_claim(claim_params(&["api"], 10)).await.unwrap();
    assert_eq!(first.jobs.len(), 1);
    let wait = seconds(&first);
    assert!(wait > 8.0 && wait <= 10.0, "one per 10 s: {wait} s");
    h.advance(Duration::from_secs(4)).await;
    let none = store.jobs_claim(claim_params(&["api"], 10)).await.unwrap();
    assert!(none.jobs.is_empty());
    let wait = seconds(&none);
    assert!(
        wait > 4.0 && wait <= 6.0,
        "10 s less the 4 that passed: {wait} s"
    );
    h.advance(Duration::from_secs(6)).await;
    let second = store.jobs_claim(claim_params(&["api"], 10)).await.unwrap();
    assert_eq!(second.jobs.len(), 1, "admitted when the answer said");

    // The earliest of several held jobs: `both` jobs wait for `slow` (60 s), `api` for 10 s.
    store
        .jobs_enqueue(
            (0..2)
                .map(|n| job("both", json!(n)).with_limit_key(limit_key("slow")))
                .collect(),
        )
        .await
        .unwrap();
    let mixed = store
        .jobs_claim(claim_params(&["api", "both"], 10))
        .await
        .unwrap();
    assert_eq!(mixed.jobs.len(), 1, "the first `both` job");
    let wait = seconds(&mixed);
    assert!(
        wait > 8.0 && wait <= 10.0,
        "the api job's 10 s, not 60: {wait} s"
    );
    let both = store.jobs_claim(claim_params(&["both"], 10)).await.unwrap();
    assert!(both.jobs.is_empty());
    let wait = seconds(&both);
    assert!(wait > 58.0 && wait <= 60.0, "held by `slow`: {wait} s");

    // Held by a full max_running only, or nothing held: no time.
    enqueue(
        &*store,
        job("held", json!(1)).with_limit_key(limit_key("hold")),
    )
    .await;
    let held = store.jobs_claim(claim_params(&["held"], 10)).await.unwrap();
    assert!(held.jobs.is_empty());
    assert_eq!(held.retry_after, None, "max_running gives no time");
    enqueue(&*store, job("free", json!(1))).await;
    let free = store.jobs_claim(claim_params(&["free"], 10)).await.unwrap();
    assert_eq!(free.jobs.len(), 1);
    assert_eq!(free.retry_after, None, "nothing held");
}

/// Jobs a limit holds back keep their place and spend nothing; clearing the policy releases
/// them to the next claim.
pub async fn limits_skipped_jobs_keep_order_and_spend_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.limit_set(max_running("hold", 0)).await.unwrap();
    let held = enqueue(
        &*store,
        job("k", json!(1)).with_limit_key(limit_key("hold")),
    )
    .await;
    let free = enqueue(&*store, job("k", json!(2)).with_priority(3)).await;
    let got = claim(&*store, &["k"], 10).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![free.id]);
    assert_eq!(store.job_get(held.id).await.unwrap(), held, "untouched");
    store.limit_clear(limit_key("hold")).await.unwrap();
    let got = claim(&*store, &["k"], 10).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![held.id]);
    assert_eq!(got[0].attempt, 1);
}

/// A job held back by a rate does not spend the rate of its other keys.
pub async fn limits_refused_claim_spends_no_other_rate(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.limit_set(max_running("hold", 0)).await.unwrap();
    store
        .limit_set(rate("kind:k", 1, Duration::from_secs(60)))
        .await
        .unwrap();
    enqueue(
        &*store,
        job("k", json!(1)).with_limit_key(limit_key("hold")),
    )
    .await;
    let free = enqueue(&*store, job("k", json!(2)).with_priority(3)).await;
    let got = claim(&*store, &["k"], 10).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![free.id]);
}

/// Replacing a policy keeps its rate state: claims already counted still count.
pub async fn limits_replace_keeps_rate_state(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store
        .limit_set(rate("kind:k", 1, Duration::from_secs(60)))
        .await
        .unwrap();
    store
        .jobs_enqueue((0..3).map(|n| job("k", json!(n))).collect())
        .await
        .unwrap();
    assert_eq!(claim(&*store, &["k"], 10).await.len(), 1);
    let replaced = LimitPolicy::new(
        limit_key("kind:k"),
        Some(10),
        Some(Rate::new(1, Duration::from_secs(60)).unwrap()),
    )
    .unwrap();
    store.limit_set(replaced).await.unwrap();
    assert!(
        claim(&*store, &["k"], 10).await.is_empty(),
        "the rate already spent stays spent"
    );
    assert_eq!(
        store.limits_list().await.unwrap()[0].rate_available,
        Some(0)
    );
}

/// A rate changed on an existing policy spaces the next claim one NEW interval after the last
/// one, whichever way it changed (`Rate::replacing`): from 1/h to 10/s the held jobs go within
/// 0.1 s (they waited up to the hour: found by a breaker run), and from 10/s back to 1/h the
/// next claim waits the hour (one more used to slip through 0.1 s later).
pub async fn limits_changed_rate_spaces_the_next_claim_from_the_last_one(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let hourly = || rate("kind:k", 1, Duration::from_secs(3600));
    store.limit_set(hourly()).await.unwrap();
    store
        .jobs_enqueue((0..4).map(|n| job("k", json!(n))).collect())
        .await
        .unwrap();
    assert_eq!(claim(&*store, &["k"], 10).await.len(), 1);
    store
        .limit_set(rate("kind:k", 10, Duration::from_secs(1)))
        .await
        .unwrap();
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        claim(&*store, &["k"], 10).await.len(),
        1,
        "10/s admits a job 0.1 s after the last claim, not an hour"
    );
    store.limit_set(hourly()).await.unwrap();
    h.advance(Duration::from_secs(1)).await;
    let held = store.jobs_claim(claim_params(&["k"], 10)).await.unwrap();
    assert!(
        held.jobs.is_empty(),
        "1/h: the next claim an hour after the last"
    );
    let wait = held.retry_after.expect("held by the rate").as_secs();
    assert!((3590..=3600).contains(&wait), "{wait} s");
    assert_eq!(
        store.limits_list().await.unwrap()[0].rate_available,
        Some(0)
    );
}

/// A policy created while jobs with its key already run counts them at once.
pub async fn limits_new_policy_counts_jobs_already_running(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    for n in 0..3 {
        enqueue(&*store, job("k", json!(n)).with_limit_key(limit_key("db"))).await;
    }
    assert_eq!(claim(&*store, &["k"], 2).await.len(), 2);
    store.limit_set(max_running("db", 2)).await.unwrap();
    store.limit_set(max_running("kind:k", 5)).await.unwrap();
    let list = store.limits_list().await.unwrap();
    let running: Vec<(String, u64)> = list
        .iter()
        .map(|s| (s.policy.key.to_string(), s.running))
        .collect();
    assert_eq!(running, vec![("db".into(), 2), ("kind:k".into(), 2)]);
    assert!(claim(&*store, &["k"], 10).await.is_empty(), "db is full");
}

/// Policies are listed with usage, replaced in place, and cleared.
pub async fn limits_set_list_replace_clear(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let both = LimitPolicy::new(
        limit_key("db"),
        Some(2),
        Some(Rate::new(3, Duration::from_secs(60)).unwrap()),
    )
    .unwrap();
    assert_eq!(store.limit_set(both.clone()).await.unwrap(), both);
    store.limit_set(max_running("aaa", 9)).await.unwrap();
    let list = store.limits_list().await.unwrap();
    let keys: Vec<_> = list
        .iter()
        .map(|s| s.policy.key.as_str().to_owned())
        .collect();
    assert_eq!(keys, vec!["aaa", "db"], "listed by key");
    assert_eq!(list[1].policy, both);
    assert_eq!((list[1].running, list[1].rate_available), (0, Some(1)));
    assert_eq!(list[0].rate_available, None);

    enqueue(&*store, job("k", json!(1)).with_limit_key(limit_key("db"))).await;
    enqueue(&*store, job("k", json!(2)).with_limit_key(limit_key("db"))).await;
    assert_eq!(
        claim(&*store, &["k"], 10).await.len(),
        1,
        "3/60s: one per 20 s"
    );
    let db = store.limits_list().await.unwrap().remove(1);
    assert_eq!((db.running, db.rate_available), (1, Some(0)));
    h.advance(Duration::from_secs(20)).await;
    assert_eq!(claim(&*store, &["k"], 10).await.len(), 1);
    let db = store.limits_list().await.unwrap().remove(1);
    assert_eq!((db.running, db.rate_available), (2, Some(0)));

    let replaced = max_running("db", 5);
    store.limit_set(replaced.clone()).await.unwrap();
    let db = store.limits_list().await.unwrap().remove(1);
    assert_eq!(db.policy, replaced);
    assert_eq!(db.running, 2);

    store.limit_clear(limit_key("db")).await.unwrap();
    store.limit_clear(limit_key("aaa")).await.unwrap();
    assert!(store.limits_list().await.unwrap().is_empty());
}

/// Clearing a key without a policy is `NotFound`.
pub async fn limits_clear_unknown_is_not_found(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_not_found(store.limit_clear(limit_key("nope")).await);
}

/// A policy without any bound is refused (field `limit`).
pub async fn limits_set_rejects_policy_without_bound(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let empty = LimitPolicy {
        key: limit_key("k"),
        max_running: None,
        rate: None,
    };
    expect_invalid(store.limit_set(empty).await, "limit");
    assert!(store.limits_list().await.unwrap().is_empty());
}

/// 8 concurrent claimers never have more than `max_running` jobs of a limited key running.
pub async fn limits_concurrent_claimers_respect_max_running(f: &dyn StoreFactory) {
    const JOBS: usize = 40;
    const MAX: i64 = 3;
    let h = f.open(unbounded()).await;
    let stores: Vec<Arc<dyn JobStore>> = vec![h.store(), h.another_store().await];
    stores[0]
        .limit_set(max_running("gpu", MAX as u32))
        .await
        .unwrap();
    stores[0]
        .jobs_enqueue(
            (0..JOBS)
                .map(|n| job("k", json!(n)).with_limit_key(limit_key("gpu")))
                .collect(),
        )
        .await
        .unwrap();
    let running = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = stores[i % 2].clone();
            let (running, peak, done) = (running.clone(), peak.clone(), done.clone());
            tokio::spawn(async move {
                let mut params = claim_params(&["k"], 2);
                params.worker = worker(&format!("w{i}"));
                let mut mine = HashSet::new();
                while done.load(Ordering::SeqCst) < JOBS {
                    let got = store.jobs_claim(params.clone()).await.expect("claim").jobs;
                    if got.is_empty() {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    let now =
                        running.fetch_add(got.len() as i64, Ordering::SeqCst) + got.len() as i64;
                    peak.fetch_max(now, Ordering::SeqCst);
                    for j in got {
                        assert!(mine.insert(j.id));
                        // Counted down before the write, so the count never exceeds what the
                        // store has running.
                        running.fetch_sub(1, Ordering::SeqCst);
                        complete(&*store, &j).await;
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        within("limited claimers", task).await.unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= MAX, "at most {MAX} running at once, saw {peak}");
    assert_eq!(done.load(Ordering::SeqCst), JOBS);
    let states: Vec<JobState> = super::all_jobs(&*stores[0])
        .await
        .iter()
        .map(|j| j.state)
        .collect();
    assert!(states.iter().all(|s| *s == JobState::Succeeded));
    let usage = stores[0].limits_list().await.unwrap().remove(0);
    assert_eq!(usage.running, 0, "nothing left running");
}

/// A rate's period is kept in whole milliseconds (floored) by every store: the policy set, the
/// answer and the list agree.
pub async fn limits_rate_period_is_kept_in_whole_milliseconds(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let fine = LimitPolicy {
        key: limit_key("fine"),
        max_running: None,
        rate: Some(Rate {
            count: 2,
            period: Duration::from_micros(1_500),
        }),
    };
    let kept = Rate::new(2, Duration::from_millis(1)).unwrap();
    assert_eq!(kept.period, Duration::from_millis(1));
    let answer = store.limit_set(fine).await.unwrap();
    assert_eq!(answer.rate, Some(kept));
    let listed = store.limits_list().await.unwrap().remove(0);
    assert_eq!(listed.policy.rate, Some(kept));
}

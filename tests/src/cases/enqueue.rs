//! Enqueue: defaults, validation, idempotency keys, unique keys, quotas, batches.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use drover_core::job::SizeLimits;
use drover_core::{
    EnqueueStatus, Error, Finish, JobState, JobStore, NewJob, Quota, RescueExpired, Retry, RunAt,
    StoreConfig, StoreEvent,
};
use futures::StreamExt;
use serde_json::json;

use super::{
    all_jobs, claim, complete, enqueue, expect_conflict, expect_invalid, expect_quota_exceeded,
    job, kind, limit_key, queue, start, tenant, unbounded, with_quotas, IDEMPOTENCY_REUSED,
    IDEMPOTENCY_UNVERIFIABLE, LEASE,
};
use crate::StoreFactory;

/// A job enqueued with only kind and args takes the defaults of docs/design.md section 3.
pub async fn enqueue_defaults(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let now = store.now().await.unwrap();
    let answer = store
        .job_enqueue(job("email.send", json!({"to": "a@example.com"})))
        .await
        .unwrap();
    assert_eq!(answer.status, EnqueueStatus::Created);
    let j = answer.job;
    assert_eq!(j.state, JobState::Queued);
    assert_eq!(
        (j.queue.as_str(), j.tenant.as_str()),
        ("default", "default")
    );
    assert_eq!((j.attempt, j.max_attempts, j.priority), (0, 3, 0));
    assert_eq!(j.args, json!({"to": "a@example.com"}));
    assert_eq!(j.meta, json!({}));
    assert!(
        j.run_at >= now && j.created_at >= now,
        "run_at defaults to the store's now"
    );
    assert_eq!(j.run_at, j.created_at, "ready at once");
    assert_eq!(j.fencing_token.0, 0);
    assert!(j.lease_owner.is_none() && j.lease_expires_at.is_none());
    assert!(j.result.is_none() && j.errors.is_empty() && j.progress.is_none());
    assert!(j.idempotency_key.is_none() && j.unique_key.is_none() && j.limit_keys.is_empty());
    assert!(j.attempted_at.is_none() && j.finished_at.is_none() && !j.cancel_requested);
    assert_eq!(
        store.job_get(j.id).await.unwrap(),
        j,
        "get returns what enqueue returned"
    );
}

/// Every field given at enqueue is stored and returned unchanged.
pub async fn enqueue_round_trips_every_field(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let run_at = Utc.with_ymd_and_hms(2099, 6, 1, 12, 30, 15).unwrap()
        + chrono::Duration::microseconds(123_456);
    let meta = json!({"customer": "acme", "nested": {"list": [1, 2.5, "x", null, true]}});
    let new = job(
        "report.build",
        json!({"n": 7, "deep": {"a": [1, {"b": null}]}}),
    )
    .with_queue(queue("reports"))
    .with_tenant(tenant("acme"))
    .with_priority(-5)
    .with_run_at(RunAt::At(run_at))
    .with_max_attempts(7)
    .with_idempotency_key("idem-1")
    .with_unique_key("uniq-1")
    .with_limit_key(limit_key("customer:acme"))
    .with_limit_key(limit_key("db:reports"))
    .with_meta(meta.clone());
    let j = enqueue(&*store, new).await;
    assert_eq!(j.kind.as_str(), "report.build");
    assert_eq!(j.args, json!({"n": 7, "deep": {"a": [1, {"b": null}]}}));
    assert_eq!(j.queue.as_str(), "reports");
    assert_eq!(j.tenant.as_str(), "acme");
    assert_eq!(j.priority, -5);
    assert_eq!(
        j.run_at, run_at,
        "an absolute run_at is kept to the microsecond"
    );
    assert_eq!(j.max_attempts, 7);
    assert_eq!(j.idempotency_key.as_deref(), Some("idem-1"));
    assert_eq!(j.unique_key.as_deref(), Some("uniq-1"));
    assert_eq!(
        j.limit_keys,
        vec![limit_key("customer:acme"), limit_key("db:reports")]
    );
    assert_eq!(j.meta, meta);
    assert_eq!(store.job_get(j.id).await.unwrap(), j);
}

/// A batch is answered per job, in input order, with ids that grow in that order. An empty
/// batch is answered with no jobs (decided: a no-op, not an error).
pub async fn enqueue_batch_answers_in_order(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let batch = (0..5).map(|n| job("batch.item", json!({"n": n}))).collect();
    let answers = store.jobs_enqueue(batch).await.unwrap();
    assert_eq!(answers.len(), 5);
    for (n, answer) in answers.iter().enumerate() {
        assert_eq!(answer.status, EnqueueStatus::Created);
        assert_eq!(answer.job.args, json!({"n": n}));
    }
    assert!(answers.windows(2).all(|w| w[0].job.id < w[1].job.id));
    assert_eq!(all_jobs(&*store).await.len(), 5);
    assert!(
        store.jobs_enqueue(Vec::new()).await.unwrap().is_empty(),
        "an empty batch is a no-op"
    );

    // Meta, empty or not, is stored as given (an empty meta may travel as NULL: the store
    // must still keep `{}`), in a batch without keys and in one with a key.
    let metas = [
        json!({}),
        json!({"customer": "acme"}),
        json!({}),
        json!({"n": {"m": []}}),
    ];
    for keyed in [false, true] {
        let batch: Vec<_> = metas
            .iter()
            .enumerate()
            .map(|(n, meta)| {
                let new = job("batch.meta", json!({"n": n})).with_meta(meta.clone());
                if keyed && n == 1 {
                    new.with_idempotency_key("batch-meta-key")
                } else {
                    new
                }
            })
            .collect();
        let answers = store.jobs_enqueue(batch).await.unwrap();
        for (answer, meta) in answers.iter().zip(&metas) {
            assert_eq!(&answer.job.meta, meta, "keyed batch: {keyed}");
            assert_eq!(store.job_get(answer.job.id).await.unwrap(), answer.job);
        }
    }
}

/// A large batch of ready jobs without keys (which a store may store in bulk: the PostgreSQL
/// store uses COPY for such batches) keeps every field of every job, answers in input order,
/// dates every job at the same store time, is ready at once in claim order, and wakes the
/// subscribers of each of its queues. Two batches: one with meta, limit keys and every kind of
/// JSON text on some jobs, one where every job takes the defaults (fewer columns travel).
pub async fn enqueue_large_batch_stores_every_field(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mut events = store.subscribe().await.unwrap();
    let texts = [
        "plain",
        "caf\u{e9} \u{2713} \u{1f600}",
        "quote \" backslash \\ newline \n tab \t",
        "\u{7f}\u{1}\u{1f}",
        "",
    ];
    let n = 300usize;
    let batch: Vec<NewJob> = (0..n)
        .map(|i| {
            let text = texts[i % texts.len()];
            let mut new = job(
                ["bulk.a", "bulk.b"][i % 2],
                json!({"i": i, "text": text, "big": 10_000_000_000_000_000_000u64,
                       "float": 2.5, "list": [null, true, {"nested": text}]}),
            )
            .with_queue(queue(["bulk-q1", "bulk-q2", "bulk-q3"][i % 3]))
            .with_tenant(tenant(["t1", "t2"][i % 2]))
            .with_priority(match i % 4 {
                0 => i16::MIN,
                1 => i16::MAX,
                2 => -(i as i16),
                _ => i as i16,
            })
            .with_max_attempts(1 + (i as i32 * 7) % 1000);
            if i % 5 == 0 {
                new = new.with_meta(json!({"i": i, "text": text}));
            }
            for k in 0..(i % 4) {
                new = new.with_limit_key(limit_key(&format!("key:{}", (i + k) % 7)));
            }
            new
        })
        .collect();
    let before = store.now().await.unwrap();
    let answers = store.jobs_enqueue(batch.clone()).await.unwrap();
    let after = store.now().await.unwrap();
    assert_eq!(answers.len(), n);
    let created_at = answers[0].job.created_at;
    assert!(before <= created_at && created_at <= after);
    for (answer, new) in answers.iter().zip(&batch) {
        let j = &answer.job;
        assert_eq!(answer.status, EnqueueStatus::Created);
        assert_eq!(
            (&j.kind, &j.queue, &j.tenant, j.priority, j.max_attempts),
            (
                &new.kind,
                &new.queue,
                &new.tenant,
                new.priority,
                new.max_attempts
            )
        );
        assert_eq!((&j.meta, &j.limit_keys), (&new.meta, &new.limit_keys));
        assert_eq!(j.args["text"], new.args["text"]);
        assert_eq!(j.args["big"], json!(10_000_000_000_000_000_000u64));
        assert_eq!(j.args["list"], new.args["list"]);
        assert_eq!((j.created_at, j.run_at), (created_at, created_at));
        assert_eq!((j.state, j.attempt), (JobState::Queued, 0));
        assert_eq!(store.job_get(j.id).await.unwrap(), *j, "stored as answered");
    }
    assert!(answers.windows(2).all(|w| w[0].job.id < w[1].job.id));
    // Each queue is announced, in no particular order (a Resync would stand for all).
    let mut unseen = vec!["bulk-q1", "bulk-q2", "bulk-q3"];
    let all_seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            match event {
                StoreEvent::JobsAvailable { queue } => unseen.retain(|q| *q != queue.as_str()),
                StoreEvent::Resync => unseen.clear(),
                _ => {}
            }
            if unseen.is_empty() {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(all_seen, Ok(true), "every queue of the batch is announced");
    // Ready at once, in claim order: the i16::MIN jobs of the queue first.
    let mut params = super::claim_params(&["bulk.a", "bulk.b"], 10);
    params.queues = vec![queue("bulk-q1")];
    let claimed = store.jobs_claim(params).await.unwrap().jobs;
    assert_eq!(claimed.len(), 10);
    assert!(claimed
        .iter()
        .all(|j| j.priority == i16::MIN && j.queue.as_str() == "bulk-q1"));

    // Every job with the defaults: no meta and no limit keys anywhere in the batch.
    let plain: Vec<NewJob> = (0..n).map(|i| job("bulk.plain", json!(i))).collect();
    let answers = store.jobs_enqueue(plain).await.unwrap();
    for (i, answer) in answers.iter().enumerate() {
        let j = store.job_get(answer.job.id).await.unwrap();
        assert_eq!(j, answer.job);
        assert_eq!((j.args.clone(), j.meta.clone()), (json!(i), json!({})));
        assert!(j.limit_keys.is_empty() && j.run_at == j.created_at);
        assert_eq!(
            (j.queue.as_str(), j.tenant.as_str(), j.max_attempts),
            ("default", "default", 3)
        );
    }
    assert_eq!(all_jobs(&*store).await.len(), 2 * n);
}

/// Many one-job enqueues at once (which a store may commit together) each answer their own
/// job, created with the caller's args, all stored once; an invalid one among them is refused
/// alone, naming the field, and stores nothing.
pub async fn enqueue_concurrent_single_jobs_each_get_their_own(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let calls = (0..64).map(|n| {
        let store = Arc::clone(&store);
        async move {
            let new = if n == 13 {
                job("burst", json!({"n": n})).with_max_attempts(0)
            } else {
                job("burst", json!({"n": n}))
            };
            (n, store.jobs_enqueue(vec![new]).await)
        }
    });
    let mut ids = std::collections::HashSet::new();
    for (n, answer) in futures::future::join_all(calls).await {
        if n == 13 {
            expect_invalid(answer, "max_attempts");
            continue;
        }
        let answers = answer.expect("enqueue");
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].status, EnqueueStatus::Created);
        assert_eq!(answers[0].job.args, json!({"n": n}));
        assert!(ids.insert(answers[0].job.id), "each call gets its own job");
        let stored = store.job_get(answers[0].job.id).await.unwrap();
        assert_eq!(stored.args, json!({"n": n}));
        assert_eq!(stored.state, JobState::Queued);
    }
    assert_eq!(ids.len(), 63);
    assert_eq!(all_jobs(&*store).await.len(), 63);
}

/// One invalid job refuses the whole batch, names `jobs[i].field`, and stores nothing.
pub async fn enqueue_batch_with_invalid_job_stores_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let batch = vec![
        job("a", json!(1)),
        job("a", json!(2)),
        job("a", json!(3)).with_max_attempts(0),
    ];
    expect_invalid(store.jobs_enqueue(batch).await, "jobs[2].max_attempts");
    let batch = vec![job("a", json!(1)), job("a", json!(2)).with_meta(json!("x"))];
    expect_invalid(store.jobs_enqueue(batch).await, "jobs[1].meta");
    assert!(all_jobs(&*store).await.is_empty());
}

/// `max_attempts` must be within 1..=1000.
pub async fn enqueue_rejects_bad_max_attempts(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_max_attempts(0))
            .await,
        "max_attempts",
    );
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_max_attempts(1001))
            .await,
        "max_attempts",
    );
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_max_attempts(-1))
            .await,
        "max_attempts",
    );
    assert!(all_jobs(&*store).await.is_empty());
    enqueue(&*store, job("a", json!(1)).with_max_attempts(1)).await;
    enqueue(&*store, job("a", json!(1)).with_max_attempts(1000)).await;
}

/// NUL characters (which PostgreSQL cannot store) in args, meta or keys are refused.
pub async fn enqueue_rejects_nul_characters(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_invalid(
        store.job_enqueue(job("a", json!({"s": "x\u{0}y"}))).await,
        "args",
    );
    expect_invalid(store.job_enqueue(job("a", json!(["\u{0}"]))).await, "args");
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_meta(json!({"k\u{0}": 1})))
            .await,
        "meta",
    );
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_idempotency_key("k\u{0}"))
            .await,
        "idempotency_key",
    );
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_unique_key("u\u{0}"))
            .await,
        "unique_key",
    );
    assert!(all_jobs(&*store).await.is_empty());
}

/// Args and meta above the configured size bound are refused; at the bound they are accepted.
pub async fn enqueue_rejects_oversized_args_and_meta(f: &dyn StoreFactory) {
    let config = StoreConfig {
        sizes: SizeLimits {
            max_args_bytes: 100,
            max_meta_bytes: 60,
            max_result_bytes: 100,
        },
        ..unbounded()
    };
    let h = f.open(config).await;
    let store = h.store();
    // `"xxx..."` is the text plus two quotes.
    expect_invalid(
        store.job_enqueue(job("a", json!("x".repeat(99)))).await,
        "args",
    );
    enqueue(&*store, job("a", json!("x".repeat(98)))).await;
    let big_meta = json!({"k": "y".repeat(60)});
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_meta(big_meta))
            .await,
        "meta",
    );
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_meta(json!([1])))
            .await,
        "meta",
    );
    // The bound holds for the stored form: `1e19` (`1e+19` as serde_json writes it) is kept as
    // the integer 10000000000000000000 (20 bytes), so 16 of them are 97 bytes sent and 337
    // stored.
    let exponents = json!(vec![1e19; 16]);
    assert!(exponents.to_string().len() <= 100);
    let refused = store.job_enqueue(job("a", exponents)).await;
    if let Err(error) = &refused {
        assert!(error.to_string().contains("as stored"), "{error}");
    }
    expect_invalid(refused, "args");
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_meta(json!({"n": vec![1e19; 5]})))
            .await,
        "meta",
    );
    // Under the bound in both forms: accepted, and given back in the stored form.
    let fits = enqueue(&*store, job("a", json!(vec![1e19; 4]))).await;
    assert_eq!(
        store.job_get(fits.id).await.unwrap().args,
        json!(vec![10_000_000_000_000_000_000_u64; 4])
    );
    assert_eq!(all_jobs(&*store).await.len(), 2);
}

/// A batch mixing jobs that run at once, after a delay, at a past and at a future time (and
/// at the store's own `now()`) answers each as it is stored: the ready ones with run_at =
/// created_at, one created_at for the whole batch, delays from the store's clock; the ready
/// ones (and only those) are claimable at once.
pub async fn enqueue_batch_mixes_run_at_and_delays(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let now = store.now().await.unwrap();
    // Whole microseconds: what every store can keep exactly.
    let past = Utc.with_ymd_and_hms(1999, 12, 31, 23, 59, 59).unwrap()
        + chrono::Duration::microseconds(999_999);
    let future = now + chrono::Duration::hours(2);
    let hour = Duration::from_secs(3600);
    let runs = [
        None,
        Some(RunAt::After(hour)),
        Some(RunAt::At(past)),
        Some(RunAt::At(future)),
        None,
        Some(RunAt::After(Duration::ZERO)),
        Some(RunAt::After(Duration::from_micros(1))),
    ];
    let batch: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(n, run)| {
            let new = job("batch.when", json!({"n": n}));
            match run {
                Some(run) => new.with_run_at(*run),
                None => new,
            }
        })
        .collect();
    let answers = store.jobs_enqueue(batch).await.unwrap();
    assert_eq!(answers.len(), runs.len());
    let created_at = answers[0].job.created_at;
    assert!(created_at >= now);
    for (n, (answer, run)) in answers.iter().zip(&runs).enumerate() {
        let j = &answer.job;
        assert_eq!(j.args, json!({"n": n}));
        assert_eq!(
            j.created_at, created_at,
            "job {n}: one created_at per batch"
        );
        let expected = match run {
            None => created_at,
            Some(RunAt::At(at)) => *at,
            Some(RunAt::After(d)) => created_at + chrono::Duration::from_std(*d).unwrap(),
        };
        assert_eq!(j.run_at, expected, "job {n}");
        assert_eq!(&store.job_get(j.id).await.unwrap(), j, "job {n} as stored");
    }
    let mut claimed: Vec<i64> = claim(&*store, &["batch.when"], 100)
        .await
        .iter()
        .map(|j| j.args["n"].as_i64().unwrap())
        // Job 6 (1 µs) is ready by now or not, depending on the store's clock.
        .filter(|n| *n != 6)
        .collect();
    claimed.sort_unstable();
    assert_eq!(claimed, vec![0, 2, 4, 5], "the ready jobs, and only those");
}

/// A `run_at` long past makes the job claimable at once.
pub async fn enqueue_run_at_in_the_past_is_claimable_at_once(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let long_ago = Utc.with_ymd_and_hms(1971, 1, 1, 0, 0, 0).unwrap();
    let j = enqueue(
        &*store,
        job("old.job", json!(1)).with_run_at(RunAt::At(long_ago)),
    )
    .await;
    assert_eq!(j.run_at, long_ago);
    let claimed = claim(&*store, &["old.job"], 10).await;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, j.id);
}

/// A delay counts from the store's clock at enqueue; the job is ready once it has passed.
pub async fn enqueue_delay_uses_store_clock(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let j = enqueue(
        &*store,
        job("later", json!(1)).with_run_at(RunAt::After(Duration::from_secs(90))),
    )
    .await;
    assert_eq!(j.run_at - j.created_at, chrono::Duration::seconds(90));
    assert!(claim(&*store, &["later"], 10).await.is_empty());
    h.advance(Duration::from_secs(91)).await;
    assert_eq!(claim(&*store, &["later"], 10).await.len(), 1);
}

/// `run_at` outside 1970..=9999 and delays above 100 years are refused.
pub async fn enqueue_rejects_run_at_out_of_range(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let too_early: DateTime<Utc> = Utc.with_ymd_and_hms(1969, 12, 31, 0, 0, 0).unwrap();
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_run_at(RunAt::At(too_early)))
            .await,
        "run_at",
    );
    let too_late = drover_core::job::run_at_max() + chrono::Duration::seconds(1);
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_run_at(RunAt::At(too_late)))
            .await,
        "run_at",
    );
    let too_long = drover_core::job::DELAY_MAX + Duration::from_secs(1);
    expect_invalid(
        store
            .job_enqueue(job("a", json!(1)).with_run_at(RunAt::After(too_long)))
            .await,
        "delay",
    );
    assert!(all_jobs(&*store).await.is_empty());
}

/// Replaying a request with its idempotency key returns the stored job in its current state,
/// while queued and after it finished, and stores nothing new.
pub async fn enqueue_idempotency_replay_returns_current_state(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let request = job("pay", json!({"amount": 10})).with_idempotency_key("order-1");
    let created = enqueue(&*store, request.clone()).await;
    let replay = store.job_enqueue(request.clone()).await.unwrap();
    assert_eq!(replay.status, EnqueueStatus::Replayed);
    assert_eq!(replay.job, created);

    let running = claim(&*store, &["pay"], 1).await.remove(0);
    let replay = store.job_enqueue(request.clone()).await.unwrap();
    assert_eq!(replay.status, EnqueueStatus::Replayed);
    assert_eq!(
        replay.job.state,
        JobState::Running,
        "the replay shows the current state"
    );

    // The same request spelled differently: a zero delay, limit keys reordered and repeated.
    let keyed = job("pay", json!({"amount": 10}))
        .with_idempotency_key("order-2")
        .with_limit_key(limit_key("a"))
        .with_limit_key(limit_key("b"));
    let first = enqueue(&*store, keyed.clone()).await;
    let spelled = job("pay", json!({"amount": 10}))
        .with_idempotency_key("order-2")
        .with_run_at(RunAt::After(Duration::ZERO))
        .with_limit_key(limit_key("b"))
        .with_limit_key(limit_key("a"))
        .with_limit_key(limit_key("b"));
    let replay = store.job_enqueue(spelled).await.unwrap();
    assert_eq!(replay.status, EnqueueStatus::Replayed);
    assert_eq!(replay.job.id, first.id);
    let later = keyed.with_run_at(RunAt::After(Duration::from_secs(1)));
    assert!(
        matches!(store.job_enqueue(later).await, Err(Error::Conflict { .. })),
        "a real delay is a different request"
    );

    complete(&*store, &running).await;
    let replay = store.job_enqueue(request).await.unwrap();
    assert_eq!(replay.status, EnqueueStatus::Replayed);
    assert_eq!(replay.job.id, created.id);
    assert_eq!(replay.job.state, JobState::Succeeded);
    assert_eq!(all_jobs(&*store).await.len(), 2);
}

/// The same idempotency key with a different request is a `Conflict` naming the stored job.
pub async fn enqueue_idempotency_other_request_conflicts(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let created = enqueue(
        &*store,
        job("pay", json!({"amount": 10})).with_idempotency_key("k"),
    )
    .await;
    for other in [
        job("pay", json!({"amount": 11})).with_idempotency_key("k"),
        job("pay", json!({"amount": 10}))
            .with_idempotency_key("k")
            .with_priority(3),
        job("refund", json!({"amount": 10})).with_idempotency_key("k"),
    ] {
        expect_conflict(
            store.job_enqueue(other).await,
            IDEMPOTENCY_REUSED,
            Some("idempotency_key"),
            Some(created.id),
        );
    }
    assert_eq!(all_jobs(&*store).await.len(), 1);
}

/// A stored key without a request hash (a legacy row) cannot be verified: `Conflict`.
pub async fn enqueue_idempotency_legacy_row_conflicts(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let request = job("pay", json!({"amount": 10})).with_idempotency_key("legacy");
    let created = enqueue(&*store, request.clone()).await;
    h.forget_request_hash(created.id).await;
    expect_conflict(
        store.job_enqueue(request).await,
        IDEMPOTENCY_UNVERIFIABLE,
        Some("idempotency_key"),
        Some(created.id),
    );
    assert_eq!(all_jobs(&*store).await.len(), 1);
}

/// A `Conflict` in a batch of more than one job names the item, in its field
/// (`jobs[2].idempotency_key`) and its reason (`jobs[2]: ...`), like every other batch error;
/// nothing of the batch is stored. A batch of one is answered like a single request.
pub async fn enqueue_batch_conflict_names_the_item(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let paid = enqueue(
        &*store,
        job("pay", json!({"amount": 10})).with_idempotency_key("k"),
    )
    .await;
    let legacy = enqueue(
        &*store,
        job("pay", json!({"amount": 20})).with_idempotency_key("legacy"),
    )
    .await;
    h.forget_request_hash(legacy.id).await;
    let other = || job("pay", json!({"amount": 11})).with_idempotency_key("k");
    let fresh = |n: i32| job("pay", json!({"n": n}));

    expect_conflict(
        store
            .jobs_enqueue(vec![fresh(1), fresh(2), other(), fresh(3)])
            .await,
        &format!("jobs[2]: {IDEMPOTENCY_REUSED}"),
        Some("jobs[2].idempotency_key"),
        Some(paid.id),
    );
    // The first conflicting item is named, after items that replay.
    let replay = job("pay", json!({"amount": 10})).with_idempotency_key("k");
    let unverifiable = job("pay", json!({"amount": 20})).with_idempotency_key("legacy");
    expect_conflict(
        store
            .jobs_enqueue(vec![replay, fresh(4), unverifiable, fresh(6)])
            .await,
        &format!("jobs[2]: {IDEMPOTENCY_UNVERIFIABLE}"),
        Some("jobs[2].idempotency_key"),
        Some(legacy.id),
    );
    // The first item too; a batch of one is a single request.
    expect_conflict(
        store.jobs_enqueue(vec![other(), fresh(5)]).await,
        &format!("jobs[0]: {IDEMPOTENCY_REUSED}"),
        Some("jobs[0].idempotency_key"),
        Some(paid.id),
    );
    expect_conflict(
        store.jobs_enqueue(vec![other()]).await,
        IDEMPOTENCY_REUSED,
        Some("idempotency_key"),
        Some(paid.id),
    );
    assert_eq!(all_jobs(&*store).await.len(), 2, "nothing else was stored");

    // With quotas (PostgreSQL: the locked, counting path) the item is named all the same.
    let h = f.open(with_quotas(Some(100), Some(100))).await;
    let store = h.store();
    let paid = enqueue(
        &*store,
        job("pay", json!({"amount": 10})).with_idempotency_key("k"),
    )
    .await;
    expect_conflict(
        store.jobs_enqueue(vec![fresh(1), other()]).await,
        &format!("jobs[1]: {IDEMPOTENCY_REUSED}"),
        Some("jobs[1].idempotency_key"),
        Some(paid.id),
    );
    assert_eq!(all_jobs(&*store).await.len(), 1, "nothing else was stored");
}

/// Idempotency keys are scoped to the tenant: two tenants may use the same key.
pub async fn enqueue_idempotency_keys_scoped_per_tenant(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = enqueue(
        &*store,
        job("pay", json!(1))
            .with_tenant(tenant("a"))
            .with_idempotency_key("k"),
    )
    .await;
    let b = enqueue(
        &*store,
        job("pay", json!(2))
            .with_tenant(tenant("b"))
            .with_idempotency_key("k"),
    )
    .await;
    assert_ne!(a.id, b.id);
    let replay = store
        .job_enqueue(
            job("pay", json!(2))
                .with_tenant(tenant("b"))
                .with_idempotency_key("k"),
        )
        .await
        .unwrap();
    assert_eq!(
        (replay.status, replay.job.id),
        (EnqueueStatus::Replayed, b.id)
    );
}

/// A unique key held by a live (queued or running) job answers `Duplicate` with that job.
pub async fn enqueue_unique_key_returns_live_duplicate(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let first = enqueue(&*store, job("sync", json!(1)).with_unique_key("acct-9")).await;
    let dup = store
        .job_enqueue(job("sync", json!(2)).with_unique_key("acct-9"))
        .await
        .unwrap();
    assert_eq!(dup.status, EnqueueStatus::Duplicate);
    assert_eq!(dup.job, first);
    let running = claim(&*store, &["sync"], 1).await.remove(0);
    let dup = store
        .job_enqueue(job("sync", json!(3)).with_unique_key("acct-9"))
        .await
        .unwrap();
    assert_eq!(dup.status, EnqueueStatus::Duplicate);
    assert_eq!(dup.job.id, first.id);
    assert_eq!(dup.job.state, JobState::Running);
    assert_eq!(running.id, first.id);
    assert_eq!(all_jobs(&*store).await.len(), 1);
}

/// Once the holder is terminal (succeeded, failed or cancelled) the unique key is free again.
pub async fn enqueue_unique_key_free_once_terminal(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let first = start(&*store, job("sync", json!(1)).with_unique_key("u")).await;
    complete(&*store, &first).await;
    let second = enqueue(&*store, job("sync", json!(2)).with_unique_key("u")).await;
    assert_ne!(second.id, first.id);
    store.job_cancel(second.id).await.unwrap();
    let third = enqueue(&*store, job("sync", json!(3)).with_unique_key("u")).await;
    assert_ne!(third.id, second.id);
}

/// Unique keys are scoped to the tenant.
pub async fn enqueue_unique_key_scoped_per_tenant(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = enqueue(
        &*store,
        job("sync", json!(1))
            .with_tenant(tenant("a"))
            .with_unique_key("u"),
    )
    .await;
    let b = enqueue(
        &*store,
        job("sync", json!(1))
            .with_tenant(tenant("b"))
            .with_unique_key("u"),
    )
    .await;
    assert_ne!(a.id, b.id);
}

/// Repeats of a key inside one batch resolve to the first entry; a repeated idempotency key
/// with a different request refuses the whole batch.
pub async fn enqueue_batch_repeated_keys_resolve_to_first(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let same = job("pay", json!(1)).with_idempotency_key("k");
    let answers = store
        .jobs_enqueue(vec![
            same.clone(),
            same,
            job("sync", json!(1)).with_unique_key("u"),
            job("sync", json!(2)).with_unique_key("u"),
        ])
        .await
        .unwrap();
    let statuses: Vec<_> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        vec![
            EnqueueStatus::Created,
            EnqueueStatus::Replayed,
            EnqueueStatus::Created,
            EnqueueStatus::Duplicate
        ]
    );
    assert_eq!(answers[0].job.id, answers[1].job.id);
    assert_eq!(answers[2].job.id, answers[3].job.id);
    assert_eq!(answers[3].job.args, json!(1));
    assert_eq!(all_jobs(&*store).await.len(), 2);

    // A key repeated with a different request is refused as bad input naming the repeat (no
    // `Conflict`: the only holder of the key would be a job of the refused batch itself).
    let result = store
        .jobs_enqueue(vec![
            job("noop", json!(5)),
            job("pay", json!(5)).with_idempotency_key("fresh"),
            job("pay", json!(6)).with_idempotency_key("fresh"),
        ])
        .await;
    expect_invalid(result, "jobs[2].idempotency_key");
    assert_eq!(
        all_jobs(&*store).await.len(),
        2,
        "a refused batch stores nothing"
    );
    // The same key in two tenants is two keys; a zero delay is the same request as none.
    let answers = store
        .jobs_enqueue(vec![
            job("pay", json!(7)).with_idempotency_key("fresh"),
            job("pay", json!(8))
                .with_idempotency_key("fresh")
                .with_tenant(tenant("other")),
            job("pay", json!(7))
                .with_idempotency_key("fresh")
                .with_run_at(RunAt::After(Duration::ZERO)),
        ])
        .await
        .unwrap();
    let statuses: Vec<_> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        vec![
            EnqueueStatus::Created,
            EnqueueStatus::Created,
            EnqueueStatus::Replayed
        ]
    );
    assert_eq!(answers[0].job.id, answers[2].job.id);
}

/// The global quota refuses an enqueue that would pass it, with quota, current and max.
pub async fn enqueue_global_quota(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(3), None)).await;
    let store = h.store();
    for n in 0..3 {
        enqueue(
            &*store,
            job("a", json!(n)).with_tenant(tenant(&format!("t{n}"))),
        )
        .await;
    }
    expect_quota_exceeded(
        store.job_enqueue(job("a", json!(9))).await,
        Quota::Global,
        3,
        3,
    );
    assert_eq!(all_jobs(&*store).await.len(), 3, "nothing stored");
}

/// The per-tenant quota refuses one tenant while others may still enqueue.
pub async fn enqueue_tenant_quota(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(None, Some(2))).await;
    let store = h.store();
    for n in 0..2 {
        enqueue(&*store, job("a", json!(n)).with_tenant(tenant("acme"))).await;
    }
    expect_quota_exceeded(
        store
            .job_enqueue(job("a", json!(9)).with_tenant(tenant("acme")))
            .await,
        Quota::Tenant("acme".into()),
        2,
        2,
    );
    // In a batch too, whichever job comes first (here a delayed one of another tenant).
    let batch = vec![
        job("a", json!(10))
            .with_tenant(tenant("other"))
            .with_run_at(RunAt::After(Duration::from_secs(3600))),
        job("a", json!(11)).with_tenant(tenant("acme")),
    ];
    expect_quota_exceeded(
        store.jobs_enqueue(batch).await,
        Quota::Tenant("acme".into()),
        2,
        2,
    );
    enqueue(&*store, job("a", json!(1)).with_tenant(tenant("other"))).await;
    assert_eq!(all_jobs(&*store).await.len(), 3);
}

/// Concurrent one-job enqueues under quotas are each admitted or refused on their own: with
/// room for 20 jobs in total and 8 per tenant, 48 concurrent calls of three tenants (16 each)
/// store exactly 20 (fewer would need every tenant full, 24), at most 8 of any tenant; every
/// refusal is `QuotaExceeded` and every admitted call gets its own stored job.
pub async fn enqueue_concurrent_single_jobs_under_quotas(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(20), Some(8))).await;
    let store = h.store();
    let calls = (0..48).map(|n| {
        let store = Arc::clone(&store);
        async move {
            let owner = ["acme", "globex", "initech"][n % 3];
            let new = job("burst", json!({"n": n})).with_tenant(tenant(owner));
            (n, owner, store.jobs_enqueue(vec![new]).await)
        }
    });
    let mut admitted = std::collections::HashMap::new();
    let mut refused = 0;
    for (n, owner, answer) in futures::future::join_all(calls).await {
        match answer {
            Ok(answers) => {
                assert_eq!(answers.len(), 1);
                assert_eq!(answers[0].status, EnqueueStatus::Created);
                assert_eq!(answers[0].job.args, json!({"n": n}));
                assert_eq!(answers[0].job.tenant.as_str(), owner);
                assert!(
                    admitted.insert(answers[0].job.id, owner).is_none(),
                    "each call gets its own job"
                );
            }
            Err(Error::QuotaExceeded { .. }) => refused += 1,
            Err(other) => panic!("expected a job or QuotaExceeded, got {other:?}"),
        }
    }
    let stored = all_jobs(&*store).await;
    assert_eq!(stored.len(), 20, "the global quota is filled exactly");
    assert_eq!(refused, 28);
    for owner in ["acme", "globex", "initech"] {
        let held = stored.iter().filter(|j| j.tenant.as_str() == owner).count();
        assert!(
            held <= 8,
            "tenant {owner} holds {held} jobs, over its quota of 8"
        );
    }
    for job in &stored {
        assert_eq!(admitted.get(&job.id), Some(&job.tenant.as_str()));
    }
}

/// A batch that would overshoot a quota is refused whole; one that fits is accepted.
pub async fn enqueue_quota_refuses_whole_batch(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(5), None)).await;
    let store = h.store();
    store
        .jobs_enqueue((0..3).map(|n| job("a", json!(n))).collect())
        .await
        .unwrap();
    // The batches start with a delayed job: the count must not depend on which job comes first.
    let batch = |size: usize| -> Vec<NewJob> {
        (0..size)
            .map(|n| {
                let new = job("b", json!(n));
                if n == 0 {
                    new.with_run_at(RunAt::After(Duration::from_secs(3600)))
                } else {
                    new
                }
            })
            .collect()
    };
    expect_quota_exceeded(store.jobs_enqueue(batch(3)).await, Quota::Global, 3, 5);
    assert_eq!(all_jobs(&*store).await.len(), 3);
    store.jobs_enqueue(batch(2)).await.unwrap();
    assert_eq!(all_jobs(&*store).await.len(), 5);
}

/// Running and reconciling jobs count as pending; terminal ones free their place.
pub async fn enqueue_quota_counts_running_and_reconciling(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(2), None)).await;
    let store = h.store();
    start(&*store, job("recon", json!(1))).await;
    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: vec![kind("recon")],
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(rescued[0].to, JobState::Reconciling);
    let running = start(&*store, job("work", json!(1))).await;
    match store.job_enqueue(job("more", json!(1))).await {
        Err(Error::QuotaExceeded {
            current: 2, max: 2, ..
        }) => {}
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
    complete(&*store, &running).await;
    enqueue(&*store, job("more", json!(1))).await;
}

/// Replays and duplicates store nothing, so a full quota does not refuse them.
pub async fn enqueue_replay_and_duplicate_pass_a_full_quota(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(2), None)).await;
    let store = h.store();
    let keyed = job("pay", json!(1)).with_idempotency_key("k");
    let unique = job("sync", json!(1)).with_unique_key("u");
    enqueue(&*store, keyed.clone()).await;
    enqueue(&*store, unique.clone()).await;
    assert_eq!(
        store.job_enqueue(keyed).await.unwrap().status,
        EnqueueStatus::Replayed
    );
    assert_eq!(
        store.job_enqueue(unique).await.unwrap().status,
        EnqueueStatus::Duplicate
    );
    assert!(matches!(
        store.job_enqueue(job("x", json!(1))).await,
        Err(Error::QuotaExceeded { .. })
    ));
}

/// 50 concurrent enqueues with one idempotency key create exactly one job, and every answer
/// names it.
pub async fn enqueue_concurrent_same_idempotency_key_creates_one(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let stores: Vec<Arc<dyn JobStore>> = vec![h.store(), h.another_store().await];
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                store
                    .job_enqueue(job("pay", json!({"amount": 10})).with_idempotency_key("once"))
                    .await
            })
        })
        .collect();
    let mut created = 0;
    let mut ids = Vec::new();
    for task in tasks {
        let answer = task
            .await
            .unwrap()
            .expect("every concurrent enqueue succeeds");
        if answer.status == EnqueueStatus::Created {
            created += 1;
        } else {
            assert_eq!(answer.status, EnqueueStatus::Replayed);
        }
        ids.push(answer.job.id);
    }
    assert_eq!(created, 1);
    assert!(ids.iter().all(|id| *id == ids[0]));
    assert_eq!(all_jobs(&*stores[0]).await.len(), 1);
}

/// 50 concurrent enqueuers never push a tenant past its quota: exactly the quota succeed.
pub async fn enqueue_concurrent_enqueuers_respect_quota(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(None, Some(10))).await;
    let stores: Vec<Arc<dyn JobStore>> = vec![h.store(), h.another_store().await];
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                store
                    .job_enqueue(job("a", json!(i)).with_tenant(tenant("busy")))
                    .await
            })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(Error::QuotaExceeded { .. }) => {}
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(ok, 10);
    assert_eq!(all_jobs(&*stores[0]).await.len(), 10);
}

/// Replaying the request of a job that failed returns it failed, with its errors, and creates
/// nothing.
pub async fn enqueue_replay_after_failure_shows_failed(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let request = job("pay", json!(1))
        .with_idempotency_key("k")
        .with_max_attempts(1);
    let running = start(&*store, request.clone()).await;
    store
        .job_finish(
            running.id,
            running.fencing_token,
            Finish::Failed {
                message: "card declined".into(),
                retry: Retry::Never,
            },
        )
        .await
        .unwrap();
    let replay = store.job_enqueue(request).await.unwrap();
    assert_eq!(
        (replay.status, replay.job.state),
        (EnqueueStatus::Replayed, JobState::Failed)
    );
    assert_eq!(replay.job.errors.len(), 1);
}

/// Stored JSON is nested at most `JSON_DEPTH_MAX` (100) arrays and objects deep: args and meta
/// at the bound are stored, read back and claimed through every enqueue path (a single job, a
/// small batch, a bulk batch of 300); one level deeper is refused with `InvalidInput` naming
/// the field and storing nothing (PostgreSQL stored such a document, then every read of the job
/// failed: serde_json reads no deeper than 127 levels).
pub async fn enqueue_deeply_nested_args_round_trip(f: &dyn StoreFactory) {
    use drover_core::json::JSON_DEPTH_MAX;
    let h = f.open(unbounded()).await;
    let store = h.store();
    let nested = |depth: usize| {
        let mut deep = json!("leaf");
        for _ in 0..depth {
            deep = json!([deep]);
        }
        deep
    };
    // {"deep": <99 arrays>}: 100 deep.
    let deepest = json!({ "deep": nested(JSON_DEPTH_MAX - 1) });
    for n in [1usize, 10, 300] {
        let batch: Vec<NewJob> = (0..n)
            .map(|_| {
                job(&format!("deep.{n}"), deepest.clone())
                    .with_meta(json!({ "m": nested(JSON_DEPTH_MAX - 1) }))
            })
            .collect();
        let answers = store
            .jobs_enqueue(batch)
            .await
            .unwrap_or_else(|e| panic!("{n} jobs: {e}"));
        let got = store.job_get(answers[0].job.id).await;
        assert!(
            matches!(&got, Ok(j) if *j == answers[0].job),
            "{n} jobs: job_get answered {got:?}"
        );
        let claimed = store
            .jobs_claim(super::claim_params(&[&format!("deep.{n}")], 1))
            .await
            .map(|c| c.jobs);
        assert!(
            matches!(&claimed, Ok(jobs) if jobs.len() == 1 && jobs[0].args == deepest),
            "{n} jobs: claim answered {claimed:?}"
        );
    }
    let stored = all_jobs(&*store).await.len();
    for depth in [JSON_DEPTH_MAX, 127, 200] {
        for n in [1usize, 300] {
            let too_deep = json!({ "deep": nested(depth) });
            let mut batch: Vec<NewJob> = (0..n).map(|i| job("deep.refused", json!(i))).collect();
            batch[n - 1] = job("deep.refused", too_deep.clone());
            match store.jobs_enqueue(batch).await {
                Err(Error::InvalidInput { field, reason }) => {
                    assert!(field.ends_with("args"), "depth {depth}, {n} jobs: {field}");
                    assert!(reason.contains("deep"), "depth {depth}: {reason}");
                }
                other => panic!("depth {depth}, {n} jobs: {other:?}"),
            }
            let meta = job("deep.refused", json!(1)).with_meta(too_deep);
            expect_invalid(store.job_enqueue(meta).await, "meta");
        }
    }
    assert_eq!(
        all_jobs(&*store).await.len(),
        stored,
        "a refused enqueue stores nothing"
    );
}

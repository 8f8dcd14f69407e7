//! Outcomes recorded by workers through `jobs_finish` and `job_finish`: complete, fail with
//! and without retry, snooze, release, cancelled, and the fencing checks on each.

use std::time::Duration;

use drover_core::job::SizeLimits;
use drover_core::{
    Finish, FinishItem, FinishReply, Job, JobState, JobStore, Retry, StoreConfig, SucceededJobs,
};
use serde_json::json;

use super::{
    claim, expect_invalid, expect_lease_lost, expect_not_found, finish, job, queue, stale, start,
    unbounded, LEASE,
};
use crate::StoreFactory;

/// Success stores the result, clears the lease and sets `finished_at`.
pub async fn outcome_complete_stores_result(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    let to = finish(
        &*store,
        &running,
        Finish::Succeeded {
            result: Some(json!({"rows": 12})),
        },
    )
    .await;
    assert_eq!(to, JobState::Succeeded);
    let done = store.job_get(running.id).await.unwrap();
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.result, Some(json!({"rows": 12})));
    assert!(done.lease_owner.is_none() && done.lease_expires_at.is_none());
    assert!(done.finished_at.is_some());
    assert_eq!(done.attempt, 1);
}

/// A failure with attempts left requeues the job at now + delay and appends the error.
pub async fn outcome_fail_with_retry_requeues_after_delay(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_max_attempts(3)).await;
    let to = finish(
        &*store,
        &running,
        Finish::Failed {
            message: "timeout talking to smtp".into(),
            retry: Retry::After(Duration::from_secs(10)),
        },
    )
    .await;
    assert_eq!(to, JobState::Queued);
    let queued = store.job_get(running.id).await.unwrap();
    assert_eq!((queued.state, queued.attempt), (JobState::Queued, 1));
    assert!(queued.lease_owner.is_none() && queued.finished_at.is_none());
    assert_eq!(queued.errors.len(), 1);
    let error = &queued.errors[0];
    assert_eq!(
        (error.attempt, error.message.as_str()),
        (1, "timeout talking to smtp")
    );
    assert_eq!(queued.run_at - error.at, chrono::Duration::seconds(10));
    assert!(
        claim(&*store, &["k"], 1).await.is_empty(),
        "not before the delay"
    );
    h.advance(Duration::from_secs(11)).await;
    let again = claim(&*store, &["k"], 1).await.remove(0);
    assert_eq!(again.attempt, 2);
}

/// A failure on the last attempt ends `failed`.
pub async fn outcome_fail_on_last_attempt_fails(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mut running = start(&*store, job("k", json!(1)).with_max_attempts(2)).await;
    for attempt in 1..=2 {
        assert_eq!(running.attempt, attempt);
        let to = finish(
            &*store,
            &running,
            Finish::Failed {
                message: format!("fail {attempt}"),
                retry: Retry::After(Duration::ZERO),
            },
        )
        .await;
        if attempt == 1 {
            assert_eq!(to, JobState::Queued);
            running = claim(&*store, &["k"], 1).await.remove(0);
        } else {
            assert_eq!(to, JobState::Failed);
        }
    }
    let failed = store.job_get(running.id).await.unwrap();
    assert_eq!((failed.state, failed.attempt), (JobState::Failed, 2));
    assert_eq!(
        failed
            .errors
            .iter()
            .map(|e| e.message.as_str())
            .collect::<Vec<_>>(),
        vec!["fail 1", "fail 2"]
    );
    assert!(failed.finished_at.is_some());
}

/// `Retry::Never` fails the job at once, whatever attempts remain.
pub async fn outcome_fail_without_retry_fails_at_once(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_max_attempts(5)).await;
    let failed = fail_without_retry(&*store, &running, "bad args").await;
    assert_eq!((failed.attempt, failed.errors.len()), (1, 1));
}

/// Fails a running job with `Retry::Never`, expects it to become `failed`, and reads it back.
async fn fail_without_retry(store: &dyn JobStore, running: &Job, message: &str) -> Job {
    let to = finish(
        store,
        running,
        Finish::Failed {
            message: message.into(),
            retry: Retry::Never,
        },
    )
    .await;
    assert_eq!(to, JobState::Failed);
    store.job_get(running.id).await.unwrap()
}

/// A failure or cancellation message is never refused: NUL characters (which PostgreSQL text
/// cannot hold) are stored as U+FFFD on every store, through the batch and the one-job write,
/// and a message longer than the limit is cut at a character boundary after that.
pub async fn outcome_message_with_nul_is_stored_with_replacement(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let failing = start(&*store, job("nul-a", json!(1)).with_max_attempts(1)).await;
    let failed = fail_without_retry(&*store, &failing, "bad\u{0}byte").await;
    assert_eq!(failed.errors[0].message, "bad\u{fffd}byte");

    let cancelling = start(&*store, job("nul-b", json!(2))).await;
    let replies = store
        .jobs_finish(vec![FinishItem {
            parent: None,
            started: None,
            id: cancelling.id,
            token: cancelling.fencing_token,
            finish: Finish::Cancelled {
                message: format!("{}\u{0}", "é".repeat(5_000)),
            },
        }])
        .await
        .unwrap();
    assert_eq!(
        replies,
        vec![FinishReply::Recorded {
            id: cancelling.id,
            to: JobState::Cancelled
        }]
    );
    let cancelled = store.job_get(cancelling.id).await.unwrap();
    let message = &cancelled.errors[0].message;
    assert!(!message.contains('\0'), "{message}");
    assert_eq!(
        message.as_str(),
        drover_core::job::truncate_message(&format!("{}\u{fffd}", "é".repeat(5_000)))
    );
    assert!(message.len() <= drover_core::job::ERROR_MESSAGE_MAX_BYTES);
}

/// A snooze requeues at now + delay without spending the attempt.
pub async fn outcome_snooze_does_not_spend_attempt(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_max_attempts(1)).await;
    let before = store.now().await.unwrap();
    let to = finish(
        &*store,
        &running,
        Finish::Snoozed {
            delay: Duration::from_secs(60),
        },
    )
    .await;
    let after = store.now().await.unwrap();
    assert_eq!(to, JobState::Queued);
    let snoozed = store.job_get(running.id).await.unwrap();
    assert_eq!((snoozed.attempt, snoozed.errors.len()), (0, 0));
    let delay = chrono::Duration::seconds(60);
    assert!(snoozed.run_at >= before + delay && snoozed.run_at <= after + delay);
    assert!(claim(&*store, &["k"], 1).await.is_empty());
    h.advance(Duration::from_secs(61)).await;
    let again = claim(&*store, &["k"], 1).await.remove(0);
    assert_eq!(again.attempt, 1, "the single attempt is still available");
}

/// A release gives the attempt back and makes the job ready at once.
pub async fn outcome_release_does_not_spend_attempt(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_max_attempts(1)).await;
    assert_eq!(
        finish(&*store, &running, Finish::Released).await,
        JobState::Queued
    );
    let released = store.job_get(running.id).await.unwrap();
    assert_eq!((released.state, released.attempt), (JobState::Queued, 0));
    assert!(released.lease_owner.is_none());
    let again = claim(&*store, &["k"], 1).await.remove(0);
    assert_eq!(again.attempt, 1);
}

/// A handler stopped on its cancellation token ends `cancelled` with the message recorded.
pub async fn outcome_cancelled_records_cancelled(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    let to = finish(
        &*store,
        &running,
        Finish::Cancelled {
            message: "stopped by operator".into(),
        },
    )
    .await;
    assert_eq!(to, JobState::Cancelled);
    let cancelled = store.job_get(running.id).await.unwrap();
    assert!(cancelled.finished_at.is_some());
    assert_eq!(
        cancelled.errors.last().map(|e| e.message.as_str()),
        Some("stopped by operator")
    );
}

/// A write with a stale token is `LeaseLost` and changes nothing, whatever the outcome.
pub async fn outcome_stale_token_changes_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    for outcome in [
        Finish::Succeeded {
            result: Some(json!(1)),
        },
        Finish::Failed {
            message: "x".into(),
            retry: Retry::Never,
        },
        Finish::Snoozed {
            delay: Duration::from_secs(1),
        },
        Finish::Released,
        Finish::Cancelled {
            message: "x".into(),
        },
    ] {
        expect_lease_lost(
            store
                .job_finish(running.id, stale(running.fencing_token), outcome)
                .await,
        );
    }
    assert_eq!(store.job_get(running.id).await.unwrap(), running);
}

/// A write after the lease expired is `LeaseLost` and changes nothing, even before rescue.
pub async fn outcome_expired_lease_changes_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    h.advance(LEASE + Duration::from_secs(1)).await;
    expect_lease_lost(
        store
            .job_finish(
                running.id,
                running.fencing_token,
                Finish::Succeeded { result: None },
            )
            .await,
    );
    let stored = store.job_get(running.id).await.unwrap();
    assert_eq!(
        (stored.state, stored.result, stored.attempt),
        (JobState::Running, None, 1)
    );
}

/// A batch is answered per item in input order: good items are recorded, stale ones are
/// `LeaseLost`.
pub async fn outcome_batch_answers_per_item(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = start(&*store, job("a", json!(1))).await;
    let b = start(&*store, job("b", json!(2))).await;
    let c = start(&*store, job("c", json!(3))).await;
    let replies = store
        .jobs_finish(vec![
            FinishItem {
                parent: None,
                started: None,
                id: a.id,
                token: a.fencing_token,
                finish: Finish::Succeeded { result: None },
            },
            FinishItem {
                parent: None,
                started: None,
                id: b.id,
                token: stale(b.fencing_token),
                finish: Finish::Released,
            },
            FinishItem {
                parent: None,
                started: None,
                id: c.id,
                token: c.fencing_token,
                finish: Finish::Released,
            },
        ])
        .await
        .unwrap();
    assert_eq!(
        replies,
        vec![
            FinishReply::Recorded {
                id: a.id,
                to: JobState::Succeeded
            },
            FinishReply::LeaseLost { id: b.id },
            FinishReply::Recorded {
                id: c.id,
                to: JobState::Queued
            },
        ]
    );
    assert_eq!(store.job_get(b.id).await.unwrap().state, JobState::Running);
}

/// A result larger than the size bound is refused and nothing in the batch is recorded.
pub async fn outcome_result_over_size_is_refused(f: &dyn StoreFactory) {
    let config = StoreConfig {
        sizes: SizeLimits {
            max_result_bytes: 64,
            ..SizeLimits::default()
        },
        ..unbounded()
    };
    let h = f.open(config).await;
    let store = h.store();
    let a = start(&*store, job("a", json!(1))).await;
    let b = start(&*store, job("b", json!(1))).await;
    let big = json!("r".repeat(100));
    expect_invalid(
        store
            .job_finish(
                a.id,
                a.fencing_token,
                Finish::Succeeded {
                    result: Some(big.clone()),
                },
            )
            .await,
        "result",
    );
    let result = store
        .jobs_finish(vec![
            FinishItem {
                parent: None,
                started: None,
                id: a.id,
                token: a.fencing_token,
                finish: Finish::Succeeded { result: None },
            },
            FinishItem {
                parent: None,
                started: None,
                id: b.id,
                token: b.fencing_token,
                finish: Finish::Succeeded { result: Some(big) },
            },
        ])
        .await;
    expect_invalid(result, "jobs[1].result");
    assert_eq!(store.job_get(a.id).await.unwrap().state, JobState::Running);
    assert_eq!(store.job_get(b.id).await.unwrap().state, JobState::Running);
}

/// A store configured to keep no succeeded jobs (`SucceededJobs::Delete`) deletes a job as it
/// records the job's success, answering `Recorded` with state `succeeded`, and keeps every
/// other outcome as the default does: failed and cancelled jobs stay terminal, snoozed jobs
/// queued. A stale token deletes nothing. In a mixed batch each item is answered in order, and
/// a repeated id counts once (its first item), whichever outcome comes first.
pub async fn outcome_delete_succeeded_deletes_only_successes(f: &dyn StoreFactory) {
    let config = StoreConfig {
        succeeded_jobs: SucceededJobs::Delete,
        ..unbounded()
    };
    let h = f.open(config).await;
    let store = h.store();

    let done = start(&*store, job("k", json!(1)).with_queue(queue("one"))).await;
    assert_eq!(
        finish(
            &*store,
            &done,
            Finish::Succeeded {
                result: Some(json!({"kept": false}))
            }
        )
        .await,
        JobState::Succeeded
    );
    expect_not_found(store.job_get(done.id).await);

    let stale_one = start(&*store, job("k", json!(2)).with_queue(queue("two"))).await;
    let replies = store
        .jobs_finish(vec![FinishItem {
            parent: None,
            started: None,
            id: stale_one.id,
            token: stale(stale_one.fencing_token),
            finish: Finish::Succeeded { result: None },
        }])
        .await
        .unwrap();
    assert_eq!(replies, vec![FinishReply::LeaseLost { id: stale_one.id }]);
    assert_eq!(
        store.job_get(stale_one.id).await.unwrap().state,
        JobState::Running,
        "a stale success deleted the job"
    );

    // One batch: a success, a failure, a snooze, a success repeated, a failure then a success
    // of one id.
    let a = start(&*store, job("k", json!(3)).with_queue(queue("a"))).await;
    let b = start(&*store, job("k", json!(4)).with_queue(queue("b"))).await;
    let c = start(&*store, job("k", json!(5)).with_queue(queue("c"))).await;
    let d = start(&*store, job("k", json!(6)).with_queue(queue("d"))).await;
    let e = start(&*store, job("k", json!(7)).with_queue(queue("e"))).await;
    let item = |job: &Job, finish: Finish| FinishItem {
        parent: None,
        started: None,
        id: job.id,
        token: job.fencing_token,
        finish,
    };
    let success = || Finish::Succeeded { result: None };
    let failure = || Finish::Failed {
        message: "boom".into(),
        retry: Retry::Never,
    };
    let replies = store
        .jobs_finish(vec![
            item(&a, success()),
            item(&b, failure()),
            item(
                &c,
                Finish::Snoozed {
                    delay: Duration::from_secs(60),
                },
            ),
            item(&d, success()),
            item(&d, success()),
            item(&e, failure()),
            item(&e, success()),
            item(
                &stale_one,
                Finish::Cancelled {
                    message: "stop".into(),
                },
            ),
        ])
        .await
        .unwrap();
    let recorded = |job: &Job, to| FinishReply::Recorded { id: job.id, to };
    assert_eq!(
        replies,
        vec![
            recorded(&a, JobState::Succeeded),
            recorded(&b, JobState::Failed),
            recorded(&c, JobState::Queued),
            recorded(&d, JobState::Succeeded),
            FinishReply::LeaseLost { id: d.id },
            recorded(&e, JobState::Failed),
            FinishReply::LeaseLost { id: e.id },
            recorded(&stale_one, JobState::Cancelled),
        ]
    );
    expect_not_found(store.job_get(a.id).await);
    expect_not_found(store.job_get(d.id).await);
    assert_eq!(store.job_get(b.id).await.unwrap().state, JobState::Failed);
    assert_eq!(store.job_get(c.id).await.unwrap().state, JobState::Queued);
    assert_eq!(store.job_get(e.id).await.unwrap().state, JobState::Failed);
    assert_eq!(
        store.job_get(stale_one.id).await.unwrap().state,
        JobState::Cancelled
    );

    // What is left: the failed, cancelled and snoozed jobs, no succeeded one.
    let snapshot = store.queue_snapshot().await.unwrap();
    let succeeded: u64 = snapshot
        .queues
        .iter()
        .map(|q| q.counts.get(&JobState::Succeeded).copied().unwrap_or(0))
        .sum();
    assert_eq!(succeeded, 0, "a succeeded job was kept: {snapshot:?}");
}

/// A job deleted on success frees its idempotency key, as a prune does: a replay of the key
/// enqueues a new job.
pub async fn outcome_delete_succeeded_frees_idempotency_key(f: &dyn StoreFactory) {
    let config = StoreConfig {
        succeeded_jobs: SucceededJobs::Delete,
        ..unbounded()
    };
    let h = f.open(config).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_idempotency_key("key")).await;
    finish(&*store, &running, Finish::Succeeded { result: None }).await;
    let again = store
        .job_enqueue(job("k", json!(1)).with_idempotency_key("key"))
        .await
        .unwrap();
    assert_eq!(again.status, drover_core::EnqueueStatus::Created);
    assert_ne!(again.job.id, running.id);
}

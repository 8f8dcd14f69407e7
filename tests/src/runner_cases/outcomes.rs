//! Handler outcomes other than success, as the store records them: failures retried with
//! exponential backoff until the job fails, snooze (no attempt spent), a panic (a retryable
//! failure) and a timeout (the handler's token fires; a deaf handler is aborted) (docs/design.md
//! sections 3 and 6).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobState, NewJob};
use drover_runner::{CancelReason, Outcome, Registry};
use serde_json::json;
use tokio::sync::mpsc;

use super::{config, delay_after_last_error, no_jitter, within, Rig};
use crate::cases::kind;
use crate::StoreFactory;

/// A failing handler is retried after 10 s, then 20 s (base 10 s, no jitter, by the store's
/// clock), and the job fails on its third attempt with every attempt's error kept.
pub async fn runner_failures_retry_with_backoff_until_failed(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let mut registry = Registry::new();
    registry
        .register_fn(kind("flaky"), |ctx| async move {
            Outcome::retry(format!("smtp refused attempt {}", ctx.job().attempt))
        })
        .configure(kind("flaky"), no_jitter(10));
    let running = rig.start(registry, config("w1")).await;
    let id = rig.enqueue(NewJob::new(kind("flaky"), json!({}))).await;

    let job = rig
        .wait_job(id, "first retry", |j| {
            j.state == JobState::Queued && j.attempt == 1
        })
        .await;
    assert_eq!(delay_after_last_error(&job), chrono::Duration::seconds(10));
    assert_eq!(job.errors[0].message, "smtp refused attempt 1");

    // Ready once the delay has passed; attempt 2 fails and waits 20 s.
    rig.h.advance(Duration::from_secs(10)).await;
    let job = rig
        .wait_job(id, "second retry", |j| {
            j.state == JobState::Queued && j.attempt == 2
        })
        .await;
    assert_eq!(delay_after_last_error(&job), chrono::Duration::seconds(20));

    rig.h.advance(Duration::from_secs(20)).await;
    let job = rig.wait_state(id, JobState::Failed).await;
    assert_eq!(job.attempt, 3);
    let messages: Vec<_> = job.errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "smtp refused attempt 1",
            "smtp refused attempt 2",
            "smtp refused attempt 3"
        ]
    );
    assert_eq!(
        job.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let report = running.stop().await;
    assert_eq!((report.retried, report.failed), (2, 1));
}

/// A snoozed job is queued again 30 s later by the store's clock with its attempt given back,
/// and runs again once that time has passed.
pub async fn runner_snooze_runs_again_later_without_spending_an_attempt(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let mut registry = Registry::new();
    registry.register_fn(kind("poll"), move |_ctx| {
        let counter = Arc::clone(&counter);
        async move {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                Outcome::snooze(Duration::from_secs(30))
            } else {
                Outcome::success()
            }
        }
    });
    let running = rig.start(registry, config("w1")).await;
    let before = rig.now().await;
    let id = rig.enqueue(NewJob::new(kind("poll"), json!({}))).await;
    let job = rig
        .wait_job(id, "snoozed", |j| {
            j.state == JobState::Queued && j.attempted_at.is_some()
        })
        .await;
    let after = rig.now().await;
    assert_eq!(job.attempt, 0, "a snooze spends no attempt");
    let thirty = chrono::Duration::seconds(30);
    assert!(
        before + thirty <= job.run_at && job.run_at <= after + thirty,
        "ready 30 s after the snooze: {} not in [{}, {}]",
        job.run_at,
        before + thirty,
        after + thirty
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    rig.h.advance(Duration::from_secs(30)).await;
    let job = rig.wait_state(id, JobState::Succeeded).await;
    assert_eq!(job.attempt, 1);
    assert!(job.errors.is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let report = running.stop().await;
    assert_eq!((report.snoozed, report.succeeded), (1, 1));
}

/// A handler that panics records a retryable failure saying so; the retry succeeds.
pub async fn runner_panic_is_a_retryable_failure(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let mut registry = Registry::new();
    registry
        .register_fn(kind("fragile"), |ctx| async move {
            if ctx.job().attempt == 1 {
                panic!("kaboom");
            }
            Outcome::success()
        })
        .configure(kind("fragile"), no_jitter(5));
    let running = rig.start(registry, config("w1")).await;
    let id = rig.enqueue(NewJob::new(kind("fragile"), json!({}))).await;
    let job = rig
        .wait_job(id, "retry after panic", |j| {
            j.state == JobState::Queued && j.attempt == 1
        })
        .await;
    assert_eq!(job.errors[0].message, "handler panicked: kaboom");
    assert_eq!(delay_after_last_error(&job), chrono::Duration::seconds(5));
    rig.h.advance(Duration::from_secs(5)).await;
    let job = rig.wait_state(id, JobState::Succeeded).await;
    assert_eq!(job.attempt, 2);
    let report = running.stop().await;
    assert_eq!((report.retried, report.succeeded), (1, 1));
}

/// A kind's timeout fires the handler's token with reason `Timeout` and records a retryable
/// failure ("timed out after 50 ms", retried after the backoff); a handler that ignores its
/// token is aborted after the cancel grace and recorded the same way (here: its last attempt,
/// so it fails).
pub async fn runner_timeout_cancels_the_handler_and_records_a_retryable_failure(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry
        .register_fn(kind("stuck"), move |ctx| {
            let tx = tx.clone();
            async move {
                ctx.cancellation().cancelled().await;
                let _ = tx.send(ctx.cancel_reason());
                Outcome::retry("gave up")
            }
        })
        // Ignores its token entirely: aborted after the cancel grace.
        .register_fn(kind("deaf"), |_ctx| std::future::pending::<Outcome>())
        .configure(
            kind("stuck"),
            no_jitter(60).with_timeout(Duration::from_millis(50)),
        )
        .configure(
            kind("deaf"),
            no_jitter(60).with_timeout(Duration::from_millis(50)),
        );
    let mut config = config("w1");
    config.cancel_grace = Duration::from_millis(100);
    let running = rig.start(registry, config).await;
    let stuck = rig.enqueue(NewJob::new(kind("stuck"), json!({}))).await;
    let deaf = rig
        .enqueue(NewJob::new(kind("deaf"), json!({})).with_max_attempts(1))
        .await;
    assert_eq!(
        within("the stuck handler's token", rx.recv()).await,
        Some(Some(CancelReason::Timeout))
    );
    let job = rig
        .wait_job(stuck, "timed-out retry", |j| {
            j.state == JobState::Queued && j.attempt == 1
        })
        .await;
    assert_eq!(job.errors[0].message, "timed out after 50 ms");
    assert_eq!(delay_after_last_error(&job), chrono::Duration::seconds(60));
    let job = rig.wait_state(deaf, JobState::Failed).await;
    assert_eq!(job.errors[0].message, "timed out after 50 ms");
    let report = running.stop().await;
    assert_eq!((report.retried, report.failed), (1, 1));
}

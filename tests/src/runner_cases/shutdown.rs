//! Stopping running handlers: graceful shutdown releases unfinished jobs without spending an
//! attempt (RELIABILITY.md, guarantee 8) while a job that finishes within the grace period keeps its result, and
//! an operator's cancel of a running job reaches its handler (docs/design.md sections 3, 6 and 9).

use std::sync::Arc;
use std::time::Duration;

use drover_core::{CancelEffect, JobState, NewJob};
use drover_runner::{CancelReason, Outcome, Registry};
use serde_json::json;
use tokio::sync::{mpsc, Notify};

use super::{config, within, Rig};
use crate::cases::kind;
use crate::StoreFactory;

/// The must-show test of graceful shutdown: shutdown while handlers still run releases their jobs:
/// queued, ready at once, attempt given back, no error, no lease. One handler stops on its
/// token (reason `Shutdown`); one ignores it and is aborted after the cancel grace.
pub async fn runner_shutdown_releases_a_running_job_without_spending_an_attempt(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let started = Arc::new(Notify::new());
    let (reasons_tx, mut reasons) = mpsc::unbounded_channel();
    let mut registry = Registry::new();
    let signal = Arc::clone(&started);
    registry.register_fn(kind("long"), move |ctx| {
        let (signal, reasons_tx) = (Arc::clone(&signal), reasons_tx.clone());
        async move {
            signal.notify_one();
            ctx.cancellation().cancelled().await;
            let _ = reasons_tx.send(ctx.cancel_reason());
            Outcome::retry("interrupted by shutdown")
        }
    });
    let started_deaf = Arc::new(Notify::new());
    let signal = Arc::clone(&started_deaf);
    registry.register_fn(kind("deaf"), move |_ctx| {
        let signal = Arc::clone(&signal);
        async move {
            signal.notify_one();
            std::future::pending::<Outcome>().await
        }
    });
    let mut config = config("w1");
    config.shutdown_grace = Duration::from_millis(100);
    config.cancel_grace = Duration::from_millis(100);
    let running = rig.start(registry, config).await;
    let long = rig.enqueue(NewJob::new(kind("long"), json!({}))).await;
    let deaf = rig.enqueue(NewJob::new(kind("deaf"), json!({}))).await;
    within("the long handler starts", started.notified()).await;
    within("the deaf handler starts", started_deaf.notified()).await;
    for id in [long, deaf] {
        let job = rig.job(id).await;
        assert_eq!((job.state, job.attempt), (JobState::Running, 1));
    }

    let report = running.stop().await;
    assert_eq!(reasons.recv().await, Some(Some(CancelReason::Shutdown)));
    assert_eq!(report.released, 2);
    assert_eq!((report.retried, report.failed), (0, 0));
    let now = rig.now().await;
    for id in [long, deaf] {
        let job = rig.job(id).await;
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.attempt, 0, "a graceful release spends no attempt");
        assert!(job.errors.is_empty());
        assert!(job.lease_owner.is_none());
        assert!(job.lease_expires_at.is_none());
        assert!(job.run_at <= now, "ready at once");
    }
}

/// A handler that completes after shutdown began, within the grace period (here: when its
/// token fires, the work done anyway), is recorded as succeeded with its result, not released.
pub async fn runner_job_finishing_within_the_grace_period_succeeds(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let started = Arc::new(Notify::new());
    let signal = Arc::clone(&started);
    let mut registry = Registry::new();
    registry.register_fn(kind("stubborn"), move |ctx| {
        let signal = Arc::clone(&signal);
        async move {
            signal.notify_one();
            ctx.cancellation().cancelled().await;
            // The work completed anyway: recorded as success, not released.
            Outcome::success_with("done")
        }
    });
    let mut config = config("w1");
    config.shutdown_grace = Duration::from_millis(50);
    let running = rig.start(registry, config).await;
    let id = rig.enqueue(NewJob::new(kind("stubborn"), json!({}))).await;
    within("the handler starts", started.notified()).await;
    let report = running.stop().await;
    assert_eq!((report.succeeded, report.released), (1, 0));
    let job = rig.job(id).await;
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(job.result, Some(json!("done")));
    assert_eq!(job.attempt, 1);
}

/// A cancel of a running job answers `Requested`, reaches the handler through the store's
/// event (heartbeats are 10 s apart) with reason `CancelRequested`, and the job ends cancelled
/// with the handler's message, not retried.
pub async fn runner_cancel_of_a_running_job_reaches_the_handler_and_ends_cancelled(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let started = Arc::new(Notify::new());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let signal = Arc::clone(&started);
    let mut registry = Registry::new();
    registry.register_fn(kind("long"), move |ctx| {
        let (signal, tx) = (Arc::clone(&signal), tx.clone());
        async move {
            signal.notify_one();
            ctx.cancellation().cancelled().await;
            let _ = tx.send(ctx.cancel_reason());
            Outcome::cancelled("stopped on request")
        }
    });
    let mut config = config("w1");
    config.heartbeat_interval = Duration::from_secs(10);
    let running = rig.start(registry, config).await;
    let id = rig.enqueue(NewJob::new(kind("long"), json!({}))).await;
    within("the handler starts", started.notified()).await;
    let answer = rig.client().cancel(id).await.expect("cancel");
    assert_eq!(answer.effect, CancelEffect::Requested);
    assert_eq!(answer.job.state, JobState::Running);
    assert!(answer.job.cancel_requested);
    assert_eq!(
        within("the handler's token", rx.recv()).await,
        Some(Some(CancelReason::CancelRequested))
    );
    let job = rig.wait_state(id, JobState::Cancelled).await;
    assert_eq!(
        job.errors.last().map(|e| e.message.as_str()),
        Some("stopped on request")
    );
    assert_eq!(job.attempt, 1);
    let report = running.stop().await;
    assert_eq!(report.cancelled, 1);
}

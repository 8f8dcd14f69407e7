//! Claim-ahead (`PoolConfig::prefetch`): while a queue's jobs are short, a claim may take jobs
//! beyond the free slots; such a job is leased while it waits for a slot, starts in claim
//! order, is released without spending an attempt as soon as shutdown begins, and is cancelled
//! before it starts when a cancel is requested. It shows as waiting for a slot (no start time,
//! counted as claimed, not running) until its handler starts, which the worker then records.
//! Long jobs are never claimed ahead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use drover_core::{CancelEffect, JobId, JobState, NewJob};
use drover_runner::{Outcome, PoolConfig, Registry, WorkerConfig};
use serde_json::json;
use tokio::sync::Notify;

use super::{config, within, Rig};
use crate::cases::{kind, queue};
use crate::StoreFactory;

/// Handlers of the claim-ahead cases: `quick` counts its runs and succeeds at once; `hold`
/// signals `held` and waits for `release`; `slow` takes 80 ms (longer than
/// `PREFETCH_RUN_MAX`, so its queue stops claiming ahead).
struct Handlers {
    quick_runs: Arc<AtomicUsize>,
    held: Arc<Notify>,
    release: Arc<Notify>,
}

fn registry() -> (Registry, Handlers) {
    let handlers = Handlers {
        quick_runs: Arc::new(AtomicUsize::new(0)),
        held: Arc::new(Notify::new()),
        release: Arc::new(Notify::new()),
    };
    let mut registry = Registry::new();
    let runs = Arc::clone(&handlers.quick_runs);
    registry.register_fn(kind("quick"), move |_ctx| {
        runs.fetch_add(1, Ordering::SeqCst);
        async { Outcome::success() }
    });
    let (held, release) = (Arc::clone(&handlers.held), Arc::clone(&handlers.release));
    registry.register_fn(kind("hold"), move |_ctx| {
        let (held, release) = (Arc::clone(&held), Arc::clone(&release));
        async move {
            held.notify_one();
            release.notified().await;
            Outcome::success()
        }
    });
    registry.register_fn(kind("slow"), |_ctx| async {
        tokio::time::sleep(Duration::from_millis(80)).await;
        Outcome::success()
    });
    (registry, handlers)
}

/// One pool on queue `default` with one slot and `prefetch` claim-ahead places.
fn one_slot(id: &str, prefetch: usize) -> WorkerConfig {
    let mut config = config(id);
    config.pools = vec![PoolConfig::new("main", vec![queue("default")], 1).with_prefetch(prefetch)];
    config
}

/// Enqueues `first` of `kind_first`, waits until it succeeded (the claim loop now knows how
/// long its queue's jobs take), then enqueues a `hold` job and two `quick` jobs in one batch,
/// in that claim order, and waits until `hold` runs. Returns the ids of hold and the two quick
/// jobs.
async fn hold_then_two_quick(rig: &Rig, handlers: &Handlers, kind_first: &str) -> [JobId; 3] {
    let first = rig.enqueue(NewJob::new(kind(kind_first), json!({}))).await;
    rig.wait_state(first, JobState::Succeeded).await;
    let enqueued = rig
        .client()
        .enqueue_many(vec![
            NewJob::new(kind("hold"), json!({})),
            NewJob::new(kind("quick"), json!({"n": 1})),
            NewJob::new(kind("quick"), json!({"n": 2})),
        ])
        .await
        .expect("enqueue");
    within("the hold handler starts", handlers.held.notified()).await;
    [enqueued[0].job.id, enqueued[1].job.id, enqueued[2].job.id]
}

/// With one slot busy, a queue of short jobs claims the next two ahead: they are running
/// (leased, attempt 1) but have not run. When shutdown begins they are released at once,
/// without spending an attempt, while the held job still runs; that one then finishes within
/// the grace period.
pub async fn runner_claimed_ahead_jobs_wait_for_a_slot_and_are_released_at_shutdown(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let (registry, handlers) = registry();
    let running = rig.start(registry, one_slot("w1", 2)).await;
    let [hold, a, b] = hold_then_two_quick(&rig, &handlers, "quick").await;
    for id in [a, b] {
        let job = rig
            .wait_job(id, "claimed ahead", |job| job.state == JobState::Running)
            .await;
        assert_eq!(job.attempt, 1);
        assert_eq!(job.lease_owner.as_ref().map(|w| w.as_str()), Some("w1"));
        // Usually one claim takes all three; a claim of the slot alone may come first when the
        // loop's follow-up claim after the first job is late, so the claim times may differ.
    }
    assert_eq!(
        handlers.quick_runs.load(Ordering::SeqCst),
        1,
        "they wait for the slot"
    );

    let stopping = tokio::spawn(running.stop());
    for id in [a, b] {
        let job = rig.wait_state(id, JobState::Queued).await;
        assert_eq!(job.attempt, 0, "a job that never started spends no attempt");
        assert!(job.lease_owner.is_none());
        assert!(job.errors.is_empty());
    }
    assert_eq!(rig.job(hold).await.state, JobState::Running);
    handlers.release.notify_one();
    let report = within("shutdown", stopping).await.expect("stop task");
    assert_eq!((report.succeeded, report.released), (2, 2));
    assert_eq!(rig.job(hold).await.state, JobState::Succeeded);
    assert_eq!(
        handlers.quick_runs.load(Ordering::SeqCst),
        1,
        "released jobs never ran"
    );
}

/// While the one slot is busy, the jobs claimed ahead show as waiting for a slot: no start
/// time, and the snapshot counts them as claimed, not running. When they run, their start is
/// recorded (with their outcome), never before their claim.
pub async fn runner_claimed_ahead_jobs_show_as_waiting_until_they_start(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let (registry, handlers) = registry();
    let running = rig.start(registry, one_slot("w1", 2)).await;
    let [hold, a, b] = hold_then_two_quick(&rig, &handlers, "quick").await;
    for id in [a, b] {
        let job = rig
            .wait_job(id, "claimed ahead", |job| job.state == JobState::Running)
            .await;
        assert!(job.is_waiting_for_slot(), "no start time while it waits");
    }
    let held = rig.job(hold).await;
    assert_eq!(held.started_at, held.attempted_at, "started by its claim");
    let snapshot = rig.store.queue_snapshot().await.expect("snapshot");
    let q = snapshot
        .queues
        .iter()
        .find(|q| q.queue.as_str() == "default")
        .expect("queue default");
    assert_eq!((q.running, q.claimed), (1, 2));

    handlers.release.notify_one();
    for id in [a, b] {
        let job = rig.wait_state(id, JobState::Succeeded).await;
        let started = job.started_at.expect("its start was recorded");
        assert!(started >= job.attempted_at.expect("claimed"));
        assert!(started <= job.finished_at.expect("finished"));
    }
    running.stop().await;
}

/// A job claimed ahead that runs long gets its start recorded while it runs, by a heartbeat
/// its start nudges (the regular heartbeat is an hour away), not only when it finishes.
pub async fn runner_the_start_of_a_claimed_ahead_job_is_recorded_while_it_runs(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let (registry, handlers) = registry();
    let mut config = one_slot("w1", 2);
    config.heartbeat_interval = Duration::from_secs(3600);
    config.lease = Duration::from_secs(10_800);
    config.worker_stale_after = Duration::from_secs(10_800);
    let running = rig.start(registry, config).await;
    let first = rig.enqueue(NewJob::new(kind("quick"), json!({}))).await;
    rig.wait_state(first, JobState::Succeeded).await;
    let enqueued = rig
        .client()
        .enqueue_many(vec![
            NewJob::new(kind("hold"), json!({"n": 1})),
            NewJob::new(kind("hold"), json!({"n": 2})),
        ])
        .await
        .expect("enqueue");
    let (one, two) = (enqueued[0].job.id, enqueued[1].job.id);
    within("the first hold job starts", handlers.held.notified()).await;
    let waiting = rig
        .wait_job(two, "claimed ahead", |job| job.state == JobState::Running)
        .await;
    assert!(waiting.is_waiting_for_slot());
    handlers.release.notify_one();
    within("the second hold job starts", handlers.held.notified()).await;
    rig.wait_state(one, JobState::Succeeded).await;
    let job = rig
        .wait_job(two, "its start recorded while it runs", |job| {
            job.started_at.is_some()
        })
        .await;
    assert_eq!(job.state, JobState::Running, "recorded before it finished");
    handlers.release.notify_one();
    rig.wait_state(two, JobState::Succeeded).await;
    running.stop().await;
}

/// A cancel of a job claimed ahead (running, waiting for a slot) cancels it before its
/// handler ever runs; the job after it still runs once the slot frees.
pub async fn runner_cancel_of_a_claimed_ahead_job_cancels_it_before_it_starts(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let (registry, handlers) = registry();
    let running = rig.start(registry, one_slot("w1", 2)).await;
    let [hold, a, b] = hold_then_two_quick(&rig, &handlers, "quick").await;
    rig.wait_job(a, "claimed ahead", |job| job.state == JobState::Running)
        .await;
    let answer = rig.client().cancel(a).await.expect("cancel");
    assert_eq!(answer.effect, CancelEffect::Requested);
    let job = rig.wait_state(a, JobState::Cancelled).await;
    assert_eq!(
        job.errors.last().map(|e| e.message.as_str()),
        Some("cancelled on request before it started")
    );
    assert_eq!(
        handlers.quick_runs.load(Ordering::SeqCst),
        1,
        "it never ran"
    );

    handlers.release.notify_one();
    rig.wait_state(hold, JobState::Succeeded).await;
    rig.wait_state(b, JobState::Succeeded).await;
    assert_eq!(handlers.quick_runs.load(Ordering::SeqCst), 2);
    let report = running.stop().await;
    assert_eq!((report.succeeded, report.cancelled), (3, 1));
}

/// After a job that ran longer than `PREFETCH_RUN_MAX`, the queue claims no more than its free
/// slots: with the one slot held, the two jobs behind it stay queued (checked over many claim
/// loop polls) until it frees.
pub async fn runner_long_jobs_are_not_claimed_ahead(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let (registry, handlers) = registry();
    let running = rig.start(registry, one_slot("w1", 5)).await;
    let [hold, a, b] = hold_then_two_quick(&rig, &handlers, "slow").await;
    // Absence cannot be awaited: watch the store over 30 poll intervals (10 ms) of the loop.
    for _ in 0..30 {
        for id in [a, b] {
            let job = rig.job(id).await;
            assert_eq!(
                (job.state, job.attempt),
                (JobState::Queued, 0),
                "not claimed ahead"
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handlers.release.notify_one();
    for id in [hold, a, b] {
        rig.wait_state(id, JobState::Succeeded).await;
    }
    let report = running.stop().await;
    assert_eq!(report.succeeded, 4);
}

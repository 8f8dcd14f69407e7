//! Leases and heartbeats: a handler that outlives its lease loses the job to another worker
//! and its late completion is rejected by the fencing token (ADR 0001), and heartbeats save a
//! running job's progress and meta (docs/design.md sections 1, 3, 6 and 9).

use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobState, NewJob};
use drover_runner::{Outcome, Registry};
use serde_json::json;
use tokio::sync::Notify;

use super::{config, within, Rig};
use crate::cases::kind;
use crate::StoreFactory;

/// The must-show test of fencing: worker A's handler outlives its lease (90 s, moved past by
/// the store's clock while A does not heartbeat); worker B (another process) rescues the job
/// and runs it; A's late completion presents a stale fencing token, is rejected (`LeaseLost`
/// in A's report) and never overwrites B's result.
pub async fn runner_late_completion_after_lease_loss_is_rejected(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let mut registry_a = Registry::new();
    let (signal, gate) = (Arc::clone(&started), Arc::clone(&release));
    registry_a.register_fn(kind("long"), move |_ctx| {
        let (signal, gate) = (Arc::clone(&signal), Arc::clone(&gate));
        async move {
            signal.notify_one();
            gate.notified().await;
            Outcome::success_with("from A")
        }
    });
    let mut config_a = config("worker-a");
    config_a.pools[0].slots_per_queue = 1;
    // A's first heartbeat would come only after the case is over (a third of its lease, the
    // longest interval a worker accepts).
    config_a.lease = Duration::from_secs(90);
    config_a.heartbeat_interval = Duration::from_secs(30);
    let worker_a = rig.start(registry_a, config_a).await;
    let id = rig.enqueue(NewJob::new(kind("long"), json!({}))).await;
    within("A's handler starts", started.notified()).await;
    let first = rig.job(id).await;
    assert_eq!(
        first.lease_owner.as_ref().map(|w| w.as_str()),
        Some("worker-a")
    );

    // The lease expires by the store's clock while A's handler still runs.
    rig.h.advance(Duration::from_secs(91)).await;
    let mut registry_b = Registry::new();
    registry_b.register_fn(kind("long"), |_ctx| async {
        Outcome::success_with("from B")
    });
    let mut config_b = config("worker-b");
    config_b.rescue_interval = Duration::from_millis(10);
    let worker_b = rig.start(registry_b, config_b).await;
    let job = rig.wait_state(id, JobState::Succeeded).await;
    assert_eq!(job.result, Some(json!("from B")));
    assert_eq!(job.attempt, 2);
    assert!(job.fencing_token > first.fencing_token);
    assert!(
        job.errors[0].message.contains("lease expired"),
        "{}",
        job.errors[0].message
    );
    let report_b = worker_b.stop().await;
    assert_eq!(report_b.succeeded, 1, "B ran the job");

    // A finishes late: its write presents a stale token and is refused.
    release.notify_one();
    let report_a = worker_a.stop().await;
    assert_eq!(report_a.lease_lost, 1);
    assert_eq!(report_a.succeeded, 0);
    // Exactly one rescue of the expired lease: usually B's first maintenance pass, but A's
    // own first pass may run late on a loaded machine (both rescuers are racing for it).
    assert_eq!(
        report_a.rescued + report_b.rescued,
        1,
        "one rescue per expired lease"
    );
    let job = rig.job(id).await;
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(
        job.result,
        Some(json!("from B")),
        "A's late result must not win"
    );
}

/// Progress (`step`) and meta set by a running handler are saved by heartbeats while it runs,
/// and their final values before the outcome is recorded.
pub async fn runner_progress_and_meta_are_saved_by_heartbeats(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let release = Arc::new(Notify::new());
    let gate = Arc::clone(&release);
    let mut registry = Registry::new();
    registry.register_fn(kind("report"), move |ctx| {
        let gate = Arc::clone(&gate);
        async move {
            ctx.step("render", "page 1 of 2");
            ctx.set_meta(json!({"phase": "render"})).unwrap();
            gate.notified().await;
            ctx.step("render", "page 2 of 2");
            ctx.set_meta(json!({"phase": "done"})).unwrap();
            Outcome::success()
        }
    });
    let running = rig.start(registry, config("w1")).await;
    let id = rig.enqueue(NewJob::new(kind("report"), json!({}))).await;
    let job = rig
        .wait_job(id, "progress and meta saved", |j| {
            j.progress.is_some() && j.meta == json!({"phase": "render"})
        })
        .await;
    let progress = job.progress.expect("progress");
    assert_eq!(progress["step"], "render");
    assert_eq!(progress["detail"], "page 1 of 2");
    assert_eq!(job.state, JobState::Running);
    release.notify_one();
    let job = rig.wait_state(id, JobState::Succeeded).await;
    // The final progress: the latest detail and both steps of the run, in order.
    let progress = job.progress.expect("progress");
    assert_eq!(progress["detail"], "page 2 of 2");
    let history = drover_runner::progress::history(&progress).expect("a step history");
    let names: Vec<&str> = history.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(names, ["render", "render"], "{progress}");
    assert!(history.steps[0].at <= history.steps[1].at, "{progress}");
    assert_eq!(job.meta, json!({"phase": "done"}));
    running.stop().await;
}

//! Workflows through a real worker (docs/design.md section 10): a parent fans out children
//! with `JobContext::enqueue_children`, waits for them without holding its slot
//! (`Outcome::WaitForChildren`), and runs again reading their results; a failed child runs the
//! kind's rollback hook instead of the handler; a dependent reads its dependencies' results; a
//! workflow enqueued through the `Client` runs in dependency order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use drover_core::{JobKind, JobState, NewJob, NewWorkflow};
use drover_runner::{Metrics, Outcome, PoolConfig, Registry};
use serde_json::{json, Value};

use super::{config, Rig};
use crate::cases::{kind, queue};
use crate::StoreFactory;

/// Counts the workflow metrics.
#[derive(Default)]
struct Counted {
    child_failed: AtomicUsize,
    rollbacks: AtomicUsize,
}

impl Metrics for Counted {
    fn child_failed(&self, _kind: &JobKind) {
        self.child_failed.fetch_add(1, Ordering::SeqCst);
    }
    fn rollback(&self, _kind: &JobKind) {
        self.rollbacks.fetch_add(1, Ordering::SeqCst);
    }
}

/// A worker of one slot: the parent enqueues three children and waits; they can only run on
/// that slot, so they finish only if the parent gave it back. The last child's end queues the
/// parent, which runs again (no attempt spent by the wait) and sums its children's results.
pub async fn runner_a_parent_waits_for_its_children_without_a_slot_and_reads_them(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let mut registry = Registry::new();
    registry.register_fn(kind("wf.parent"), |ctx| async move {
        let children = match ctx.children().await {
            Ok(children) => children,
            Err(e) => return Outcome::retry(e.to_string()),
        };
        if children.is_empty() {
            let jobs = (1..=3)
                .map(|n| NewJob::new(kind("wf.child"), json!({ "n": n })))
                .collect();
            return match ctx.enqueue_children(jobs).await {
                Ok(_) => Outcome::wait_for_children(),
                Err(e) => Outcome::retry(e.to_string()),
            };
        }
        let states: Vec<JobState> = children.iter().map(|c| c.state).collect();
        let sum: i64 = children
            .iter()
            .filter_map(|c| c.result.as_ref()?.as_i64())
            .sum();
        Outcome::success_with(json!({ "sum": sum, "states": states }))
    });
    registry.register_typed(kind("wf.child"), |_ctx, args: Value| async move {
        Outcome::success_with(args["n"].as_i64().unwrap_or(0) * 10)
    });
    let mut one_slot = config("w1");
    one_slot.pools = vec![PoolConfig::new("only", vec![queue("default")], 1)];
    let running = rig.start(registry, one_slot).await;
    let parent = rig.enqueue(NewJob::new(kind("wf.parent"), json!({}))).await;

    let done = rig.wait_state(parent, JobState::Succeeded).await;
    let report = running.stop().await;
    assert_eq!(
        done.result,
        Some(json!({"sum": 60, "states": ["succeeded", "succeeded", "succeeded"]})),
        "{}",
        rig.h.store_name()
    );
    assert_eq!(done.attempt, 1, "the wait gave its attempt back");
    assert_eq!(done.live_children, 0);
    assert_eq!(report.waiting, 1, "{report}");
    assert_eq!(report.succeeded, 4, "{report}");
    let children = rig
        .list(drover_core::ListJobs {
            parent: Some(parent),
            ..Default::default()
        })
        .await;
    assert_eq!(children.len(), 3);
    assert!(children
        .iter()
        .all(|c| c.parent_id == Some(parent) && c.state == JobState::Succeeded && c.attempt == 1));
}

/// One child fails for good: when the parent runs again, its rollback hook runs instead of the
/// handler, with the failed child, and its outcome ends the parent; the metrics count the
/// failed child and the rollback once.
pub async fn runner_a_failed_child_runs_the_rollback_hook_instead_of_the_handler(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let handler_resumed = Arc::new(AtomicUsize::new(0));
    let resumed = Arc::clone(&handler_resumed);
    let mut registry = Registry::new();
    registry.register_fn(kind("wf.evacuate"), move |ctx| {
        let resumed = Arc::clone(&resumed);
        async move {
            if ctx.children().await.map_or(true, |c| !c.is_empty()) {
                resumed.fetch_add(1, Ordering::SeqCst);
                return Outcome::success();
            }
            let jobs = vec![
                NewJob::new(kind("wf.migrate"), json!({"ok": true})),
                NewJob::new(kind("wf.migrate"), json!({"ok": false})),
            ];
            match ctx.enqueue_children(jobs).await {
                Ok(_) => Outcome::wait_for_children(),
                Err(e) => Outcome::retry(e.to_string()),
            }
        }
    });
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    registry.register_rollback_fn(kind("wf.evacuate"), move |_ctx, failed| {
        let log = Arc::clone(&log);
        async move {
            let messages: Vec<String> = failed
                .iter()
                .flat_map(|c| c.errors.iter().map(|e| e.message.clone()))
                .collect();
            log.lock().unwrap().extend(messages);
            Outcome::discard(format!(
                "rolled back after {} failed migration(s)",
                failed.len()
            ))
        }
    });
    registry.register_typed(kind("wf.migrate"), |_ctx, args: Value| async move {
        if args["ok"] == json!(true) {
            Outcome::success()
        } else {
            Outcome::discard("disk full")
        }
    });
    let metrics = Arc::new(Counted::default());
    let worker = rig
        .worker(registry, config("w1"))
        .await
        .metrics(Arc::clone(&metrics) as Arc<dyn Metrics>);
    let running = super::Running::spawn(worker);
    let parent = rig
        .enqueue(NewJob::new(kind("wf.evacuate"), json!({})))
        .await;

    let done = rig.wait_state(parent, JobState::Failed).await;
    running.stop().await;
    assert_eq!(
        done.errors.last().map(|e| e.message.as_str()),
        Some("rolled back after 1 failed migration(s)")
    );
    assert_eq!(*seen.lock().unwrap(), ["disk full"]);
    assert_eq!(
        handler_resumed.load(Ordering::SeqCst),
        0,
        "the handler did not resume"
    );
    assert_eq!(metrics.child_failed.load(Ordering::SeqCst), 1);
    assert_eq!(metrics.rollbacks.load(Ordering::SeqCst), 1);
}

/// A workflow a -> b enqueued through the `Client` runs in order, and b reads a's result with
/// `JobContext::dependencies`.
pub async fn runner_a_dependent_reads_the_results_of_its_dependencies(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let mut registry = Registry::new();
    registry.register_fn(kind("wf.produce"), |_ctx| async move {
        Outcome::success_with(41)
    });
    registry.register_fn(kind("wf.consume"), |ctx| async move {
        let dependencies = match ctx.dependencies().await {
            Ok(d) => d,
            Err(e) => return Outcome::retry(e.to_string()),
        };
        let total: i64 = dependencies
            .iter()
            .filter_map(|d| d.result.as_ref()?.as_i64())
            .sum();
        Outcome::success_with(json!({"total": total + 1, "read": dependencies.len()}))
    });
    let running = rig.start(registry, config("w1")).await;
    let workflow = NewWorkflow::new()
        .job(
            "consume",
            NewJob::new(kind("wf.consume"), json!({})),
            &["produce"],
        )
        .job("produce", NewJob::new(kind("wf.produce"), json!({})), &[]);
    let enqueued = rig
        .client()
        .enqueue_workflow(workflow)
        .await
        .expect("enqueue workflow");
    let consume = enqueued.jobs[0].job.id;
    assert_eq!(enqueued.jobs[0].job.state, JobState::Waiting);

    let done = rig.wait_state(consume, JobState::Succeeded).await;
    running.stop().await;
    assert_eq!(done.result, Some(json!({"total": 42, "read": 1})));
    assert_eq!(done.workflow_id, Some(enqueued.id));
    let produce = rig.job(enqueued.jobs[1].job.id).await;
    assert!(
        produce.finished_at <= done.started_at,
        "b started after a ended"
    );
}

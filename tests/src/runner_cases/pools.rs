//! Capacity: a long-running kind in its own pool cannot starve the other kinds, and
//! `max_concurrent` caps the executions of a process over all its pools (docs/design.md section 6).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use drover_core::{JobState, ListJobs, NewJob};
use drover_runner::{Outcome, PoolConfig, Registry};
use serde_json::json;
use tokio::sync::{watch, Semaphore};

use super::{config, Rig, WAIT};
use crate::cases::{kind, queue};
use crate::StoreFactory;

/// Four jobs of a slow kind fill their own pool (two slots) and stay running, while twenty
/// fast jobs on the same queue all run in the general pool; the slow ones finish once let go.
pub async fn runner_long_kind_in_its_own_pool_cannot_starve_the_others(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let gate = Arc::new(Semaphore::new(0));
    let mut registry = Registry::new();
    let slow_gate = Arc::clone(&gate);
    registry
        .register_fn(kind("slow"), move |_ctx| {
            let gate = Arc::clone(&slow_gate);
            async move {
                let _permit = gate.acquire().await.expect("gate open");
                Outcome::success()
            }
        })
        .register_fn(kind("fast"), |_ctx| async { Outcome::success() });
    let mut config = config("w1");
    config.pools = vec![
        PoolConfig::new("slow", vec![queue("default")], 2).with_kinds(vec![kind("slow")]),
        PoolConfig::new("general", vec![queue("default")], 2).with_kinds(vec![kind("fast")]),
    ];
    let running = rig.start(registry, config).await;
    let mut slow = Vec::new();
    for _ in 0..4 {
        slow.push(rig.enqueue(NewJob::new(kind("slow"), json!({}))).await);
    }
    let mut fast = Vec::new();
    for _ in 0..20 {
        fast.push(rig.enqueue(NewJob::new(kind("fast"), json!({}))).await);
    }
    for id in &fast {
        rig.wait_state(*id, JobState::Succeeded).await;
    }
    // The slow pool fills (its claim may come after the fast jobs ran) and stays full; the
    // general pool ran everything else.
    rig.wait_list(
        ListJobs {
            kind: Some(kind("slow")),
            state: Some(JobState::Running),
            ..ListJobs::default()
        },
        "two slow jobs running",
        |jobs| jobs.len() == 2,
    )
    .await;
    let queued_slow = rig
        .list(ListJobs {
            kind: Some(kind("slow")),
            state: Some(JobState::Queued),
            ..ListJobs::default()
        })
        .await;
    assert_eq!(queued_slow.len(), 2);
    gate.add_permits(4);
    for id in &slow {
        rig.wait_state(*id, JobState::Succeeded).await;
    }
    let report = running.stop().await;
    assert_eq!(report.succeeded, 24);
}

/// A pool with a kind filter reserves its kinds in its queues: the worker's general pool (no
/// filter) on the same queue leaves them alone, so three long jobs that fill the reserved pool
/// never take the general pool's one slot from the short jobs queued behind them. In a queue
/// that no reserving pool serves, the general pool still runs the long kind.
pub async fn runner_a_kind_reserved_by_a_pool_is_left_to_it_by_the_general_pool(
    f: &dyn StoreFactory,
) {
    let rig = Rig::open(f).await;
    let gate = Arc::new(Semaphore::new(0));
    let mut registry = Registry::new();
    let long_gate = Arc::clone(&gate);
    registry
        .register_fn(kind("long"), move |_ctx| {
            let gate = Arc::clone(&long_gate);
            async move {
                let _permit = gate.acquire().await.expect("gate open");
                Outcome::success()
            }
        })
        .register_fn(kind("short"), |_ctx| async { Outcome::success() });
    let mut config = config("w1");
    config.pools = vec![
        PoolConfig::new("general", vec![queue("lq"), queue("other")], 1),
        PoolConfig::new("long", vec![queue("lq")], 1).with_kinds(vec![kind("long")]),
    ];
    let running = rig.start(registry, config).await;

    // Queue `other`: no pool reserves `long` there, so the general pool runs it.
    let elsewhere = rig
        .enqueue(NewJob::new(kind("long"), json!({})).with_queue(queue("other")))
        .await;
    rig.wait_state(elsewhere, JobState::Running).await;

    // Queue `lq`: the long jobs come first, as in the seed's report.
    let mut long = Vec::new();
    for _ in 0..3 {
        long.push(
            rig.enqueue(NewJob::new(kind("long"), json!({})).with_queue(queue("lq")))
                .await,
        );
    }
    let mut short = Vec::new();
    for _ in 0..3 {
        short.push(
            rig.enqueue(NewJob::new(kind("short"), json!({})).with_queue(queue("lq")))
                .await,
        );
    }
    for id in &short {
        rig.wait_state(*id, JobState::Succeeded).await;
    }
    let long_in_lq = |state| ListJobs {
        kind: Some(kind("long")),
        queue: Some(queue("lq")),
        state: Some(state),
        ..ListJobs::default()
    };
    rig.wait_list(
        long_in_lq(JobState::Running),
        "one long job running in lq",
        |jobs| jobs.len() == 1,
    )
    .await;
    assert_eq!(rig.list(long_in_lq(JobState::Queued)).await.len(), 2);

    gate.add_permits(4);
    for id in long.iter().chain([&elsewhere]) {
        rig.wait_state(*id, JobState::Succeeded).await;
    }
    let report = running.stop().await;
    assert_eq!(report.succeeded, 7);
}

/// With `max_concurrent` 3 over pools of 12 slots in all, never more than 3 handlers run at
/// once, and the cap is reached: the first handlers hold until three run together.
pub async fn runner_max_concurrent_caps_executions_over_all_pools(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let current = Arc::new(AtomicUsize::new(0));
    let (peak_tx, peak_rx) = watch::channel(0usize);
    let peak_tx = Arc::new(peak_tx);
    let mut registry = Registry::new();
    let (now, highest) = (Arc::clone(&current), Arc::clone(&peak_tx));
    registry.register_fn(kind("work"), move |_ctx| {
        let (now, highest, mut peak) = (Arc::clone(&now), Arc::clone(&highest), peak_rx.clone());
        async move {
            let running = now.fetch_add(1, Ordering::SeqCst) + 1;
            highest.send_modify(|p| *p = (*p).max(running));
            // Hold until the cap has been reached once, so that it is reached at all.
            let reached = tokio::time::timeout(WAIT, peak.wait_for(|p| *p >= 3))
                .await
                .is_ok_and(|seen| seen.is_ok());
            // Overlap a little with the next claims, where a broken cap would show.
            tokio::task::yield_now().await;
            now.fetch_sub(1, Ordering::SeqCst);
            if reached {
                Outcome::success()
            } else {
                Outcome::discard("three jobs never ran at once")
            }
        }
    });
    let mut config = config("w1");
    config.pools = vec![
        PoolConfig::new("a", vec![queue("default"), queue("mail")], 4),
        PoolConfig::new("b", vec![queue("reports")], 4),
    ];
    config.max_concurrent = Some(3);
    let running = rig.start(registry, config).await;
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| {
            let q = ["default", "mail", "reports"][i % 3];
            NewJob::new(kind("work"), json!({"i": i})).with_queue(queue(q))
        })
        .collect();
    let ids: Vec<_> = rig
        .client()
        .enqueue_many(jobs)
        .await
        .expect("enqueue")
        .into_iter()
        .map(|answer| answer.job.id)
        .collect();
    for id in &ids {
        rig.wait_job(*id, "finished", |j| j.state.is_terminal())
            .await;
    }
    let report = running.stop().await;
    assert_eq!(report.succeeded, 60, "every job saw the cap reached");
    let peak = *peak_tx.borrow();
    assert_eq!(peak, 3, "{peak} jobs ran at once with max_concurrent 3");
}

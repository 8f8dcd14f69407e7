//! Wake-up events from `subscribe`: jobs available after enqueue and resume, cancel requested
//! after a cancel of a running job. Awaited with a timeout, never slept for.

use std::time::Duration;

use drover_core::{EventStream, Finish, RunAt, StoreEvent};
use futures::StreamExt;
use serde_json::json;

use super::{claim_from, enqueue, finish, job, queue, start, unbounded};
use crate::StoreFactory;

/// Waits up to 10 s for an event matching `wanted`, skipping others.
async fn wait_for(events: &mut EventStream, wanted: impl Fn(&StoreEvent) -> bool, what: &str) {
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if wanted(&event) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "expected event: {what}");
}

/// An enqueue of a ready job wakes subscribers with `JobsAvailable` for its queue.
pub async fn events_jobs_available_after_enqueue(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mut events = store.subscribe().await.unwrap();
    enqueue(&*store, job("k", json!(1)).with_queue(queue("mail"))).await;
    wait_for(
        &mut events,
        |e| matches!(e, StoreEvent::JobsAvailable { queue } if queue.as_str() == "mail"),
        "JobsAvailable for mail",
    )
    .await;
}

/// A batch enqueue wakes subscribers with `JobsAvailable` for each queue that got a ready job,
/// whatever its place in the batch; a queue that got only delayed jobs is not announced
/// before them.
pub async fn events_jobs_available_after_batch_enqueue(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mut events = store.subscribe().await.unwrap();
    let later = RunAt::After(Duration::from_secs(3600));
    store
        .jobs_enqueue(vec![
            job("k", json!(1))
                .with_queue(queue("later"))
                .with_run_at(later),
            job("k", json!(2)).with_queue(queue("batch-mail")),
            job("k", json!(3))
                .with_queue(queue("later"))
                .with_run_at(later),
            job("k", json!(4)).with_queue(queue("batch-sms")),
        ])
        .await
        .unwrap();
    let mut announced = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if let StoreEvent::JobsAvailable { queue } = event {
                announced.push(queue.as_str().to_owned());
            }
            if ["batch-mail", "batch-sms"]
                .iter()
                .all(|q| announced.iter().any(|a| a == q))
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        found,
        Ok(true),
        "JobsAvailable for both queues: {announced:?}"
    );
    assert!(
        !announced.iter().any(|q| q == "later"),
        "a queue with only delayed jobs was announced: {announced:?}"
    );
}

/// A resume wakes subscribers with `JobsAvailable` for the queue.
pub async fn events_jobs_available_after_resume(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.queue_pause(queue("paused")).await.unwrap();
    let mut events = store.subscribe().await.unwrap();
    store.queue_resume(queue("paused")).await.unwrap();
    wait_for(
        &mut events,
        |e| matches!(e, StoreEvent::JobsAvailable { queue } if queue.as_str() == "paused"),
        "JobsAvailable for paused",
    )
    .await;
}

/// Setting and clearing a limit policy wake subscribers with `LimitsChanged`: jobs the policy
/// held may be claimable now, in any queue, and no other event would say so (found by a
/// fresh-user run: after `limits set K --rate 10/s` replaced 1/h, a held job waited up to the
/// 1 s poll).
pub async fn events_limits_changed_after_limit_set_and_clear(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mut events = store.subscribe().await.unwrap();
    let policy = drover_core::LimitPolicy::new(
        drover_core::LimitKey::parse("kind:k").unwrap(),
        Some(1),
        None,
    )
    .unwrap();
    store.limit_set(policy.clone()).await.unwrap();
    wait_for(
        &mut events,
        |e| *e == StoreEvent::LimitsChanged,
        "LimitsChanged after limit_set",
    )
    .await;
    store.limit_clear(policy.key).await.unwrap();
    wait_for(
        &mut events,
        |e| *e == StoreEvent::LimitsChanged,
        "LimitsChanged after limit_clear",
    )
    .await;
}

/// A job that ran under a limit policy with a `max_running` bound wakes, when it finishes
/// (whatever the outcome), the claim loops that may hold a job waiting for the place it frees:
/// its queue's (`JobsAvailable`) when the bound is its queue's own policy, every one
/// (`LimitsChanged`) when it is a kind's or an explicit key's policy, which jobs of other
/// queues may share. Before, such jobs waited for the claim loops' doubling re-claim pauses
/// (131 ms to 2.2 s measured; a queue sharing a key with a busy one waited for it to drain). A
/// job under no such bound wakes nobody when it finishes.
pub async fn events_jobs_available_when_a_job_under_max_running_finishes(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mut events = store.subscribe().await.unwrap();
    for (key, max) in [("queue:held", 1), ("team:x", 3), ("kind:limited", 2)] {
        let key = drover_core::LimitKey::parse(key).unwrap();
        let policy = drover_core::LimitPolicy::new(key, Some(max), None).unwrap();
        store.limit_set(policy).await.unwrap();
        // Take the policy's own LimitsChanged, so a later one is a finish's.
        wait_for(
            &mut events,
            |e| *e == StoreEvent::LimitsChanged,
            "LimitsChanged after limit_set",
        )
        .await;
    }
    let available = |name: &'static str| move |e: &StoreEvent| matches!(e, StoreEvent::JobsAvailable { queue } if queue.as_str() == name);
    let everyone = |e: &StoreEvent| *e == StoreEvent::LimitsChanged;

    // Each job: enqueue, take the enqueue's own wake-up, claim, finish, expect the finish's.
    let succeed = || Finish::Succeeded { result: None };
    let cases: [(drover_core::NewJob, &'static str, &str, Finish, bool); 4] = [
        (
            job("k", json!(1)).with_queue(queue("held")),
            "held",
            "k",
            succeed(),
            false,
        ),
        (
            job("k", json!(2)).with_queue(queue("held")),
            "held",
            "k",
            Finish::Failed {
                message: "boom".into(),
                retry: drover_core::Retry::Never,
            },
            false,
        ),
        (
            job("k", json!(3))
                .with_queue(queue("keyed"))
                .with_limit_key(drover_core::LimitKey::parse("team:x").unwrap()),
            "keyed",
            "k",
            succeed(),
            true,
        ),
        (
            job("limited", json!(4)).with_queue(queue("bykind")),
            "bykind",
            "limited",
            succeed(),
            true,
        ),
    ];
    for (new, name, kind, outcome, wakes_everyone) in cases {
        enqueue(&*store, new).await;
        wait_for(
            &mut events,
            available(name),
            "JobsAvailable after the enqueue",
        )
        .await;
        let running = claim_from(&*store, &[name], &[kind], 1).await;
        assert_eq!(running.len(), 1, "the job in {name} is claimable");
        let to = finish(&*store, &running[0], outcome).await;
        if wakes_everyone {
            wait_for(
                &mut events,
                everyone,
                &format!("LimitsChanged after a finish in {name} to {to:?}"),
            )
            .await;
        } else {
            wait_for(
                &mut events,
                available(name),
                &format!("JobsAvailable for {name} after a finish to {to:?}"),
            )
            .await;
        }
    }

    // No bound: the finish announces nothing, so the next announcement is a later enqueue's.
    enqueue(&*store, job("k", json!(4)).with_queue(queue("free"))).await;
    wait_for(&mut events, available("free"), "JobsAvailable for free").await;
    let running = claim_from(&*store, &["free"], &["k"], 1).await;
    finish(&*store, &running[0], Finish::Succeeded { result: None }).await;
    enqueue(&*store, job("k", json!(5)).with_queue(queue("marker"))).await;
    let next = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if let StoreEvent::JobsAvailable { queue } = event {
                return Some(queue.as_str().to_owned());
            }
        }
        None
    })
    .await;
    assert_eq!(
        next,
        Ok(Some("marker".to_owned())),
        "a finish under no max_running bound announced its queue"
    );
}

/// A cancel of a running job sends `CancelRequested` with its id.
pub async fn events_cancel_requested_after_cancel_of_running_job(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    let mut events = store.subscribe().await.unwrap();
    store.job_cancel(running.id).await.unwrap();
    let id = running.id;
    wait_for(
        &mut events,
        move |e| matches!(e, StoreEvent::CancelRequested { id: got } if *got == id),
        "CancelRequested",
    )
    .await;
}

/// A release (graceful shutdown) makes the job ready at once and wakes subscribers.
pub async fn events_jobs_available_after_release(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_queue(queue("slow"))).await;
    let mut events = store.subscribe().await.unwrap();
    store
        .job_finish(
            running.id,
            running.fencing_token,
            drover_core::Finish::Released,
        )
        .await
        .unwrap();
    wait_for(
        &mut events,
        |e| matches!(e, StoreEvent::JobsAvailable { queue } if queue.as_str() == "slow"),
        "JobsAvailable for slow after release",
    )
    .await;
}

/// An operator retry makes the job ready at once and wakes subscribers.
pub async fn events_jobs_available_after_retry(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let queued = enqueue(&*store, job("k", json!(1)).with_queue(queue("again"))).await;
    store.job_cancel(queued.id).await.unwrap();
    let mut events = store.subscribe().await.unwrap();
    store.job_retry(queued.id).await.unwrap();
    wait_for(
        &mut events,
        |e| matches!(e, StoreEvent::JobsAvailable { queue } if queue.as_str() == "again"),
        "JobsAvailable for again after retry",
    )
    .await;
}

/// A requeue that makes a waiting job ready wakes subscribers with `JobsAvailable` for its
/// queue.
pub async fn events_jobs_available_after_requeue(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let later = RunAt::After(Duration::from_secs(3600));
    let waiting = enqueue(
        &*store,
        job("k", json!(1))
            .with_queue(queue("requeued"))
            .with_run_at(later),
    )
    .await;
    let mut events = store.subscribe().await.unwrap();
    assert!(store.job_requeue(waiting.id).await.unwrap().changed);
    wait_for(
        &mut events,
        |e| matches!(e, StoreEvent::JobsAvailable { queue } if queue.as_str() == "requeued"),
        "JobsAvailable for requeued after requeue",
    )
    .await;
}

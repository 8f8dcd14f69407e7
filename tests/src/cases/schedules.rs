//! Cron schedules: upsert, list, remove, validation, and firing ticks exactly once across
//! concurrent callers.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use drover_core::{
    EnqueueStatus, Error, FireSchedule, JobState, JobStore, NewSchedule, Schedule, ScheduleName,
};
use serde_json::json;

use super::{
    all_jobs, claim, complete, enqueue, expect_invalid, expect_not_found, job, kind, queue,
    unbounded, with_quotas, within,
};
use crate::StoreFactory;

fn name(s: &str) -> ScheduleName {
    ScheduleName::parse(s).unwrap()
}

fn every_minute(n: &str) -> NewSchedule {
    let mut s = NewSchedule::new(name(n), "* * * * *", kind("report"), json!({"full": true}));
    s.queue = queue("cron");
    s.priority = 2;
    s.max_attempts = 4;
    s
}

fn fire(schedule: &Schedule, tick: DateTime<Utc>) -> FireSchedule {
    FireSchedule {
        name: schedule.name.clone(),
        tick,
        job: schedule.job_for_tick(tick),
    }
}

/// A tick `minutes` after the schedule was stored.
fn tick(schedule: &Schedule, minutes: i64) -> DateTime<Utc> {
    schedule.created_at + chrono::Duration::minutes(minutes)
}

/// Schedules are created, listed by name, replaced (restarting without catch-up) and removed.
pub async fn schedules_upsert_list_remove(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let b = store
        .schedule_upsert(every_minute("b-nightly"))
        .await
        .unwrap();
    assert_eq!((b.cron.as_str(), b.timezone.as_str()), ("* * * * *", "UTC"));
    assert_eq!(
        (b.queue.as_str(), b.priority, b.max_attempts),
        ("cron", 2, 4)
    );
    assert_eq!(b.last_tick_at, None);
    let mut berlin = NewSchedule::new(name("a-hourly"), "0 * * * *", kind("k"), json!(null));
    berlin.timezone = "Europe/Berlin".into();
    store.schedule_upsert(berlin).await.unwrap();
    let names: Vec<String> = store
        .schedules_list()
        .await
        .unwrap()
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    assert_eq!(names, vec!["a-hourly", "b-nightly"]);

    store
        .schedule_fire(fire(&b, tick(&b, 1)))
        .await
        .unwrap()
        .expect("fired");
    assert!(store.schedules_list().await.unwrap()[1]
        .last_tick_at
        .is_some());
    let mut changed = every_minute("b-nightly");
    changed.cron = "*/5 * * * *".into();
    let replaced = store.schedule_upsert(changed).await.unwrap();
    assert_eq!(
        (replaced.cron.as_str(), replaced.last_tick_at),
        ("*/5 * * * *", None)
    );

    store.schedule_remove(name("b-nightly")).await.unwrap();
    expect_not_found(store.schedule_remove(name("b-nightly")).await);
    assert_eq!(store.schedules_list().await.unwrap().len(), 1);

    // The expression is stored with its fields separated by single spaces.
    let mut spaced = every_minute("c-spaced");
    spaced.cron = "  0  9  * *   1-5 ".into();
    let stored = store.schedule_upsert(spaced).await.unwrap();
    assert_eq!(stored.cron, "0 9 * * 1-5");
    let listed = store.schedules_list().await.unwrap();
    let listed = listed.iter().find(|s| s.name == name("c-spaced")).unwrap();
    assert_eq!(listed.cron, "0 9 * * 1-5");
}

/// A bad expression, an unknown zone, or an expression that never fires is refused.
pub async fn schedules_reject_bad_input(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let with = |cron: &str, tz: &str| {
        let mut s = NewSchedule::new(name("s"), cron, kind("k"), json!({}));
        s.timezone = tz.into();
        s
    };
    expect_invalid(store.schedule_upsert(with("not cron", "UTC")).await, "cron");
    expect_invalid(
        store
            .schedule_upsert(with("* * * * *", "Mars/Olympus"))
            .await,
        "timezone",
    );
    expect_invalid(
        store.schedule_upsert(with("0 0 30 2 *", "UTC")).await,
        "cron",
    );
    let mut bad_attempts = with("* * * * *", "UTC");
    bad_attempts.max_attempts = 0;
    expect_invalid(store.schedule_upsert(bad_attempts).await, "max_attempts");
    assert!(store.schedules_list().await.unwrap().is_empty());
}

/// Firing a tick enqueues the schedule's job once; firing it again returns `None`.
pub async fn schedules_fire_enqueues_once(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let s = store
        .schedule_upsert(every_minute("reports"))
        .await
        .unwrap();
    let t = tick(&s, 1);
    let fired = store
        .schedule_fire(fire(&s, t))
        .await
        .unwrap()
        .expect("first fire enqueues");
    assert_eq!(fired.status, EnqueueStatus::Created);
    let j = fired.job;
    assert_eq!(
        (
            j.kind.as_str(),
            j.queue.as_str(),
            j.priority,
            j.max_attempts
        ),
        ("report", "cron", 2, 4)
    );
    assert_eq!(j.args, json!({"full": true}));
    assert_eq!(j.meta["schedule"], json!("reports"));
    assert!(store.schedule_fire(fire(&s, t)).await.unwrap().is_none());
    assert_eq!(
        store.schedules_list().await.unwrap()[0].last_tick_at,
        Some(t)
    );
    assert_eq!(all_jobs(&*store).await.len(), 1);
}

/// One tick fired by 8 tasks at once (half on another store handle) enqueues exactly one job.
pub async fn schedules_fire_concurrently_enqueues_exactly_one(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let stores: Vec<Arc<dyn JobStore>> = vec![h.store(), h.another_store().await];
    let s = stores[0]
        .schedule_upsert(every_minute("race"))
        .await
        .unwrap();
    let t = tick(&s, 3);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = stores[i % 2].clone();
            let request = fire(&s, t);
            tokio::spawn(async move { store.schedule_fire(request).await })
        })
        .collect();
    let mut fired = 0;
    for task in tasks {
        if within("concurrent fire", task)
            .await
            .unwrap()
            .expect("fire")
            .is_some()
        {
            fired += 1;
        }
    }
    assert_eq!(fired, 1);
    assert_eq!(all_jobs(&*stores[0]).await.len(), 1);
}

/// A tick older than one already fired returns `None` and enqueues nothing.
pub async fn schedules_older_tick_after_newer_is_none(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let s = store.schedule_upsert(every_minute("s")).await.unwrap();
    store
        .schedule_fire(fire(&s, tick(&s, 5)))
        .await
        .unwrap()
        .expect("newer fires");
    assert!(store
        .schedule_fire(fire(&s, tick(&s, 4)))
        .await
        .unwrap()
        .is_none());
    assert!(store
        .schedule_fire(fire(&s, tick(&s, 6)))
        .await
        .unwrap()
        .is_some());
    assert_eq!(all_jobs(&*store).await.len(), 2);
}

/// Firing a schedule that does not exist is `NotFound`.
pub async fn schedules_fire_missing_is_not_found(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let s = Schedule::from_new(every_minute("ghost"), store.now().await.unwrap());
    expect_not_found(store.schedule_fire(fire(&s, tick(&s, 1))).await);
    assert!(all_jobs(&*store).await.is_empty());
}

/// An enqueue refused by a quota leaves the tick unconsumed: it fires once there is room.
pub async fn schedules_quota_failure_leaves_tick_unconsumed(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(1), None)).await;
    let store = h.store();
    let blocker = enqueue(&*store, job("block", json!(1))).await;
    let s = store.schedule_upsert(every_minute("s")).await.unwrap();
    let t = tick(&s, 1);
    match store.schedule_fire(fire(&s, t)).await {
        Err(Error::QuotaExceeded { .. }) => {}
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
    assert_eq!(store.schedules_list().await.unwrap()[0].last_tick_at, None);
    let running = claim(&*store, &["block"], 1).await.remove(0);
    assert_eq!(running.id, blocker.id);
    complete(&*store, &running).await;
    let fired = store
        .schedule_fire(fire(&s, t))
        .await
        .unwrap()
        .expect("fires now");
    assert_eq!(fired.job.state, JobState::Queued);
}

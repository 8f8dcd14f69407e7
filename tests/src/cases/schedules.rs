//! Cron schedules: upsert (unchanged, new job, new timing), list, remove, validation, and firing
//! ticks exactly once across concurrent callers and concurrent writes.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use drover_core::{
    EnqueueStatus, Error, FireSchedule, Job, JobState, JobStore, NewSchedule, Schedule,
    ScheduleChange, ScheduleName,
};
use serde_json::json;

use super::{
    all_jobs, claim, claim_from, complete, enqueue, expect_invalid, expect_not_found, job, kind,
    queue, unbounded, with_quotas, within,
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
    schedule.fire(tick)
}

/// Writes `new` and expects `change`; returns the schedule as stored.
async fn upsert(store: &dyn JobStore, new: NewSchedule, change: ScheduleChange) -> Schedule {
    let answer = store.schedule_upsert(new).await.expect("upsert");
    assert_eq!(answer.change, change, "{:?}", answer.schedule);
    answer.schedule
}

/// The store's only schedule as listed.
async fn listed(store: &dyn JobStore) -> Schedule {
    let mut all = store.schedules_list().await.expect("list");
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

/// A tick `minutes` after the schedule was stored.
fn tick(schedule: &Schedule, minutes: i64) -> DateTime<Utc> {
    schedule.created_at + chrono::Duration::minutes(minutes)
}

/// Schedules are created, listed by name, replaced (restarting without catch-up) and removed.
pub async fn schedules_upsert_list_remove(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let b = upsert(&*store, every_minute("b-nightly"), ScheduleChange::Created).await;
    assert_eq!((b.cron.as_str(), b.timezone.as_str()), ("* * * * *", "UTC"));
    assert_eq!(
        (b.queue.as_str(), b.priority, b.max_attempts),
        ("cron", 2, 4)
    );
    assert_eq!(b.last_tick_at, None);
    let mut berlin = NewSchedule::new(name("a-hourly"), "0 * * * *", kind("k"), json!(null));
    berlin.timezone = "Europe/Berlin".into();
    upsert(&*store, berlin, ScheduleChange::Created).await;
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
    let replaced = upsert(&*store, changed, ScheduleChange::Rescheduled).await;
    assert_eq!(
        (replaced.cron.as_str(), replaced.last_tick_at),
        ("*/5 * * * *", Some(tick(&b, 1))),
        "a new timing keeps the last fired tick"
    );

    store.schedule_remove(name("b-nightly")).await.unwrap();
    expect_not_found(store.schedule_remove(name("b-nightly")).await);
    assert_eq!(store.schedules_list().await.unwrap().len(), 1);

    // The expression is stored with its fields separated by single spaces.
    let mut spaced = every_minute("c-spaced");
    spaced.cron = "  0  9  * *   1-5 ".into();
    let stored = upsert(&*store, spaced, ScheduleChange::Created).await;
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
    let s = upsert(&*store, every_minute("reports"), ScheduleChange::Created).await;
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
    let s = upsert(&*stores[0], every_minute("race"), ScheduleChange::Created).await;
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
    let s = upsert(&*store, every_minute("s"), ScheduleChange::Created).await;
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
    let s = upsert(&*store, every_minute("s"), ScheduleChange::Created).await;
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

/// Fires `tick` of `schedule` (as read) and completes the job it enqueues, so that job's unique
/// key no longer stands in for a second job of the tick: a tick that fired twice would show as
/// a second job. Returns the job.
async fn fire_and_complete(store: &dyn JobStore, schedule: &Schedule, tick: DateTime<Utc>) -> Job {
    let fired = store
        .schedule_fire(fire(schedule, tick))
        .await
        .expect("fire")
        .expect("the tick fires");
    assert_eq!(fired.status, EnqueueStatus::Created);
    let running = claim_from(store, &["cron"], &["report"], 1).await;
    assert_eq!(running.len(), 1, "the tick's job is claimable");
    assert_eq!(running[0].id, fired.job.id);
    complete(store, &running[0]).await;
    store.job_get(fired.job.id).await.expect("get")
}

/// Whether firing `tick` of `schedule` (as read) enqueues anything.
async fn fires(store: &dyn JobStore, schedule: &Schedule, tick: DateTime<Utc>) -> bool {
    store
        .schedule_fire(fire(schedule, tick))
        .await
        .expect("fire")
        .is_some()
}

/// Writing a schedule exactly as stored (as a deploy's start-up does) changes nothing: its
/// creation time and last tick stay, and the tick that fell due while nothing ran still fires,
/// as for a schedule left alone; the expression's spacing and the order of the keys of args
/// do not make it another schedule.
pub async fn schedules_writing_the_stored_schedule_again_changes_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let created = upsert(&*store, every_minute("nightly"), ScheduleChange::Created).await;
    fire_and_complete(&*store, &created, tick(&created, 1)).await;
    // Down for five minutes; then the deploy writes the same schedule again.
    h.advance(std::time::Duration::from_secs(5 * 60)).await;
    let before = listed(&*store).await;
    let mut again = every_minute("nightly");
    again.cron = " *  * * *   * ".into();
    again.args = serde_json::from_str(r#"{ "full" : true }"#).unwrap();
    let after = upsert(&*store, again, ScheduleChange::Unchanged).await;
    assert_eq!(after, before);
    assert_eq!(listed(&*store).await, before);

    let now = store.now().await.unwrap();
    let missed = after
        .due_tick(now)
        .expect("the tick missed while down is due");
    assert!(missed > before.last_tick_at.expect("fired"), "{missed}");
    fire_and_complete(&*store, &after, missed).await;
    upsert(&*store, every_minute("nightly"), ScheduleChange::Unchanged).await;
    let now_stored = listed(&*store).await;
    assert_eq!(now_stored.last_tick_at, Some(missed));
    assert!(
        !fires(&*store, &now_stored, missed).await,
        "fired once only"
    );
    assert_eq!(all_jobs(&*store).await.len(), 2);
}

/// A new job for a schedule keeps its ticks going (the tick missed meanwhile fires, with the new
/// job); a new timing fires its own ticks after the change only, keeps the last fired tick, and
/// a tick computed from the old timing no longer fires.
pub async fn schedules_new_job_keeps_ticks_and_new_timing_starts_after_the_change(
    f: &dyn StoreFactory,
) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let created = upsert(&*store, every_minute("nightly"), ScheduleChange::Created).await;
    fire_and_complete(&*store, &created, tick(&created, 1)).await;
    h.advance(std::time::Duration::from_secs(5 * 60)).await;
    let before = listed(&*store).await;
    let mut new_job = every_minute("nightly");
    new_job.args = json!({"full": false});
    new_job.priority = 7;
    let updated = upsert(&*store, new_job, ScheduleChange::Updated).await;
    assert_eq!(
        (updated.created_at, updated.last_tick_at),
        (before.created_at, before.last_tick_at)
    );
    let missed = updated
        .due_tick(store.now().await.unwrap())
        .expect("the tick missed meanwhile is due");
    let job = fire_and_complete(&*store, &updated, missed).await;
    assert_eq!((job.args, job.priority), (json!({"full": false}), 7));

    h.advance(std::time::Duration::from_secs(5 * 60)).await;
    let before = listed(&*store).await;
    let old_timing_due = before
        .due_tick(store.now().await.unwrap())
        .expect("the old timing has a missed tick");
    let lower = store.now().await.unwrap();
    let mut new_timing = every_minute("nightly");
    new_timing.cron = "*/2 * * * *".into();
    let rescheduled = upsert(&*store, new_timing, ScheduleChange::Rescheduled).await;
    let upper = store.now().await.unwrap();
    assert!(
        (lower..=upper).contains(&rescheduled.created_at),
        "the new timing starts at the change"
    );
    assert_eq!(rescheduled.last_tick_at, before.last_tick_at);
    assert_eq!(rescheduled.cron, "*/2 * * * *");
    assert!(
        !fires(&*store, &before, old_timing_due).await,
        "a tick of the old timing fires after the change"
    );
    assert!(
        !fires(&*store, &rescheduled, before.last_tick_at.unwrap()).await,
        "the last fired tick fires again"
    );
    let next = rescheduled.next_tick(upper).expect("a next tick");
    assert!(next > rescheduled.created_at);
    fire_and_complete(&*store, &rescheduled, next).await;
    assert_eq!(all_jobs(&*store).await.len(), 3);
}

/// No write makes a fired tick fire again: after each of writing the schedule unchanged, with
/// a new job, with a new timing, and removing it and adding it again, firing the tick (from the
/// schedule as read before the write, and as read after it) enqueues nothing.
pub async fn schedules_no_write_makes_a_fired_tick_fire_again(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    upsert(&*store, every_minute("nightly"), ScheduleChange::Created).await;
    h.advance(std::time::Duration::from_secs(90)).await;
    let read = listed(&*store).await;
    let fired = read
        .due_tick(store.now().await.unwrap())
        .expect("a tick is due");
    fire_and_complete(&*store, &read, fired).await;
    let mut new_job = every_minute("nightly");
    new_job.args = json!({"full": false});
    let mut new_timing = every_minute("nightly");
    new_timing.cron = "*/2 * * * *".into();
    for (write, change) in [
        (every_minute("nightly"), ScheduleChange::Unchanged),
        (new_job, ScheduleChange::Updated),
        (new_timing, ScheduleChange::Rescheduled),
    ] {
        let read_before = listed(&*store).await;
        let written = upsert(&*store, write, change).await;
        assert_eq!(written.last_tick_at, Some(fired), "{change:?}");
        assert!(!fires(&*store, &read_before, fired).await, "{change:?}");
        assert!(!fires(&*store, &written, fired).await, "{change:?}");
    }
    let read_before = listed(&*store).await;
    store.schedule_remove(name("nightly")).await.unwrap();
    let added = upsert(&*store, every_minute("nightly"), ScheduleChange::Created).await;
    assert!(
        !fires(&*store, &read_before, fired).await,
        "removed and added"
    );
    assert!(
        added.due_tick(store.now().await.unwrap()).is_none(),
        "an added schedule has no tick due before its creation"
    );
    assert_eq!(all_jobs(&*store).await.len(), 1);
}

/// Writes racing fires never make a tick fire twice: tick after tick, three callers fire it
/// while two write the schedule (unchanged, or with a new job) on two store handles; each tick
/// enqueues exactly one job, and once every job has finished (so no live job's unique key
/// hides a second one) firing every tick again enqueues nothing.
pub async fn schedules_writes_racing_fires_fire_each_tick_once(f: &dyn StoreFactory) {
    const TICKS: i64 = 6;
    let h = f.open(unbounded()).await;
    let stores: Vec<Arc<dyn JobStore>> = vec![h.store(), h.another_store().await];
    let s = upsert(&*stores[0], every_minute("race"), ScheduleChange::Created).await;
    for minute in 1..=TICKS {
        let t = tick(&s, minute);
        let mut firing = Vec::new();
        let mut writing = Vec::new();
        for i in 0..3 {
            let store = Arc::clone(&stores[i % 2]);
            let request = fire(&s, t);
            firing.push(tokio::spawn(
                async move { store.schedule_fire(request).await },
            ));
        }
        for i in 0..2 {
            let store = Arc::clone(&stores[(i + 1) % 2]);
            let mut write = every_minute("race");
            if (minute + i as i64) % 2 == 0 {
                write.args = json!({"full": minute});
            }
            writing.push(tokio::spawn(
                async move { store.schedule_upsert(write).await },
            ));
        }
        let mut created = 0;
        for task in firing {
            if let Some(answer) = within("fire", task).await.unwrap().expect("fire") {
                assert_eq!(answer.status, EnqueueStatus::Created);
                created += 1;
            }
        }
        assert_eq!(created, 1, "tick {minute}");
        for task in writing {
            let answer = within("upsert", task).await.unwrap().expect("upsert");
            assert_ne!(answer.change, ScheduleChange::Rescheduled);
        }
    }
    let jobs = all_jobs(&*stores[0]).await;
    assert_eq!(jobs.len(), TICKS as usize);
    for running in claim_from(&*stores[0], &["cron"], &["report"], 100).await {
        complete(&*stores[0], &running).await;
    }
    let stored = listed(&*stores[0]).await;
    assert_eq!(stored.created_at, s.created_at);
    assert_eq!(stored.last_tick_at, Some(tick(&s, TICKS)));
    for minute in 1..=TICKS {
        assert!(
            !fires(&*stores[0], &stored, tick(&s, minute)).await,
            "tick {minute}"
        );
    }
    assert_eq!(all_jobs(&*stores[0]).await.len(), TICKS as usize);
}

/// Eight callers on two store handles writing one new schedule at once: exactly one creates
/// it, the others find it stored exactly so and change nothing.
pub async fn schedules_concurrent_first_writes_create_it_once(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let stores: Vec<Arc<dyn JobStore>> = vec![h.store(), h.another_store().await];
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = Arc::clone(&stores[i % 2]);
            tokio::spawn(async move { store.schedule_upsert(every_minute("first")).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(within("upsert", task).await.unwrap().expect("upsert"));
    }
    let created: Vec<_> = answers
        .iter()
        .filter(|a| a.change == ScheduleChange::Created)
        .collect();
    assert_eq!(created.len(), 1, "{answers:?}");
    assert!(answers
        .iter()
        .filter(|a| a.change != ScheduleChange::Created)
        .all(|a| a.change == ScheduleChange::Unchanged && a.schedule == created[0].schedule));
    assert_eq!(listed(&*stores[0]).await, created[0].schedule);
}

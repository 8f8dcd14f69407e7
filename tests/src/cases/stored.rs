//! The stored form of what clients send, the same in every store: JSON numbers as PostgreSQL's
//! `jsonb` gives them back (`drover_core::json::normalize_numbers`) in every JSON value a job
//! or schedule keeps, and client-supplied instants with a leap second folded into the next
//! second and floored to whole microseconds (`drover_core::clock::stored_instant`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::json::normalized;
use drover_core::{
    EnqueueStatus, Finish, HeartbeatItem, HeartbeatJobs, JobStore, NewSchedule, RunAt, ScheduleName,
};
use serde_json::{json, Value};

use super::{all_jobs, claim, enqueue, finish, job, kind, start, unbounded, LEASE};
use crate::StoreFactory;

/// Numbers whose `jsonb` round trip is worth pinning: floats with and without exponent, the
/// extremes of f64, negative zero, integral floats inside and beyond 64 bits, and integers at
/// the 64-bit bounds.
fn numbers() -> Vec<Value> {
    vec![
        json!(1e15),
        json!(1e16),
        json!(-1e16),
        json!(1.5e1),
        json!(1.0),
        json!(-0.0),
        json!(0.0),
        json!(1e-7),
        json!(-1.5e-7),
        json!(1.2345678e17),
        json!(9.223372036854776e18),
        json!(-9.223372036854776e18),
        json!(1.8446744073709552e19),
        json!(1e22),
        json!(1e300),
        json!(f64::MAX),
        json!(f64::MIN),
        json!(f64::MIN_POSITIVE),
        json!(5e-324),
        json!(123.456),
        json!(0),
        json!(i64::MIN),
        json!(i64::MAX),
        json!(u64::MAX),
    ]
}

/// A JSON document holding every value of [`numbers`] at several depths.
fn document() -> Value {
    json!({
        "list": numbers(),
        "nested": {"a": {"b": [numbers()[1].clone(), {"c": numbers()[5].clone()}]}},
        "n": 1e16,
        "text": "1e16",
    })
}

/// Asserts that `got` is exactly what PostgreSQL gives back for `sent`: equal as values and
/// written the same (so integers stayed integers and floats floats).
#[track_caller]
fn assert_stored(got: &Value, sent: &Value, what: &str) {
    let expected = normalized(sent.clone());
    assert_eq!(got.to_string(), expected.to_string(), "{what}");
    assert_eq!(got, &expected, "{what}");
}

/// The facts about [`document`] that hold whatever `normalize_numbers` says: a float with an
/// exponent whose decimal is a 64-bit integer comes back as that integer, negative zero as
/// zero, and floats beyond 64 bits stay floats with their value.
#[track_caller]
fn assert_known_facts(got: &Value, what: &str) {
    assert_eq!(got["n"].to_string(), "10000000000000000", "{what}");
    assert!(got["n"].is_u64(), "{what}");
    assert_eq!(got["text"], json!("1e16"), "{what}");
    let list = got["list"].as_array().expect("list");
    assert_eq!(list[1].to_string(), "10000000000000000", "{what}");
    assert_eq!(list[2].to_string(), "-10000000000000000", "{what}");
    assert_eq!(list[3].to_string(), "15.0", "{what}");
    assert_eq!(list[5].to_string(), "0.0", "{what}");
    assert_eq!(list[9].to_string(), "123456780000000000", "{what}");
    assert!(
        list[14].is_f64() && list[14].as_f64() == Some(1e300),
        "{what}"
    );
    assert!(
        list[15].is_f64() && list[15].as_f64() == Some(f64::MAX),
        "{what}"
    );
    assert!(
        list[18].is_f64() && list[18].as_f64() == Some(5e-324),
        "{what}"
    );
    assert_eq!(list[23], json!(u64::MAX), "{what}");
    assert_eq!(got["nested"]["a"]["b"][1]["c"].to_string(), "0.0", "{what}");
}

/// Args and meta keep their numbers as PostgreSQL stores them, in the enqueue answer and in
/// every read (get, list, claim, replay); the idempotency key still replays the same request.
pub async fn stored_json_numbers_of_args_and_meta(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let sent = document();
    let request = job("numbers", sent.clone())
        .with_meta(sent.clone())
        .with_idempotency_key("numbers-1");
    let answer = store.job_enqueue(request.clone()).await.unwrap();
    assert_eq!(answer.status, EnqueueStatus::Created);
    let id = answer.job.id;
    let mut reads = vec![("enqueue answer", answer.job)];
    reads.push(("get", store.job_get(id).await.unwrap()));
    reads.push(("list", all_jobs(&*store).await.remove(0)));
    let replay = store.job_enqueue(request).await.unwrap();
    assert_eq!(
        (replay.status, replay.job.id),
        (EnqueueStatus::Replayed, id),
        "the same request replays"
    );
    reads.push(("replay", replay.job));
    reads.push(("claim", claim(&*store, &["numbers"], 1).await.remove(0)));
    for (what, j) in &reads {
        assert_stored(&j.args, &sent, &format!("args of the {what}"));
        assert_stored(&j.meta, &sent, &format!("meta of the {what}"));
        assert_known_facts(&j.args, &format!("args of the {what}"));
    }

    // One value per job, in a batch, each alone at the top level.
    let batch: Vec<_> = numbers().into_iter().map(|n| job("one", n)).collect();
    let answers = store.jobs_enqueue(batch).await.unwrap();
    for (sent, answer) in numbers().iter().zip(answers) {
        assert_stored(&answer.job.args, sent, "a batch answer");
        let got = store.job_get(answer.job.id).await.unwrap();
        assert_stored(&got.args, sent, "a batch job read back");
    }
}

/// Meta and progress saved by a heartbeat, and a handler's result, keep their numbers as
/// PostgreSQL stores them.
pub async fn stored_json_numbers_of_heartbeat_and_result(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    let sent = document();
    store
        .jobs_heartbeat(HeartbeatJobs {
            lease: LEASE,
            jobs: vec![HeartbeatItem {
                started: None,
                id: running.id,
                token: running.fencing_token,
                meta: Some(sent.clone()),
                progress: Some(json!({"step": "s", "detail": sent.clone()})),
            }],
        })
        .await
        .unwrap();
    let beaten = store.job_get(running.id).await.unwrap();
    assert_stored(&beaten.meta, &sent, "heartbeat meta");
    assert_known_facts(&beaten.meta, "heartbeat meta");
    let progress = beaten.progress.expect("progress");
    assert_stored(&progress["detail"], &sent, "heartbeat progress");

    finish(
        &*store,
        &running,
        Finish::Succeeded {
            result: Some(sent.clone()),
        },
    )
    .await;
    let done = store.job_get(running.id).await.unwrap();
    let result = done.result.expect("result");
    assert_stored(&result, &sent, "result");
    assert_known_facts(&result, "result");
}

/// A schedule's args keep their numbers as PostgreSQL stores them, in the upsert answer, the
/// list and the jobs its ticks enqueue.
pub async fn stored_json_numbers_of_schedule_args(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let sent = document();
    let name = ScheduleName::parse("numbers").unwrap();
    let new = NewSchedule::new(name, "* * * * *", kind("report"), sent.clone());
    let upserted = store.schedule_upsert(new).await.unwrap().schedule;
    assert_stored(&upserted.args, &sent, "upsert answer");
    assert_known_facts(&upserted.args, "upsert answer");
    let listed = store.schedules_list().await.unwrap().remove(0);
    assert_stored(&listed.args, &sent, "list");
    let tick = listed.created_at + chrono::Duration::minutes(1);
    let fired = store
        .schedule_fire(listed.fire(tick))
        .await
        .unwrap()
        .expect("fired");
    assert_stored(&fired.job.args, &sent, "fired job");
    let got = store.job_get(fired.job.id).await.unwrap();
    assert_stored(&got.args, &sent, "fired job read back");
}

/// The last tick of the store's only schedule.
async fn last_tick(store: &dyn JobStore) -> DateTime<Utc> {
    store.schedules_list().await.unwrap()[0]
        .last_tick_at
        .expect("a tick")
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("an RFC 3339 instant")
        .with_timezone(&Utc)
}

/// A client's `run_at` is stored with a leap second folded into the next second (23:59:60.5
/// as 00:00:00.5, as the PostgreSQL driver converts it) and floored to whole microseconds,
/// before 2000 too (where truncating microseconds since 2000 toward zero would round up).
pub async fn stored_run_at_folds_leap_seconds_and_floors_to_microseconds(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let cases = [
        ("2026-12-01T23:59:60.5Z", "2026-12-02T00:00:00.5Z"),
        (
            "2026-12-01T23:59:60.9999999Z",
            "2026-12-02T00:00:00.999999Z",
        ),
        ("1970-01-01T00:00:00.0000001Z", "1970-01-01T00:00:00Z"),
        (
            "1999-12-31T23:59:59.9999995Z",
            "1999-12-31T23:59:59.999999Z",
        ),
        ("1985-06-30T23:59:60.0000005Z", "1985-07-01T00:00:00Z"),
        ("2031-01-01T00:00:00.0000009Z", "2031-01-01T00:00:00Z"),
        (
            "2031-01-01T00:00:00.1234567Z",
            "2031-01-01T00:00:00.123456Z",
        ),
    ];
    // Each alone (the one-job statement) and all in one batch (the batch statement).
    let mut ids = Vec::new();
    for (sent, stored) in cases {
        let j = enqueue(
            &*store,
            job("at", json!(sent)).with_run_at(RunAt::At(utc(sent))),
        )
        .await;
        assert_eq!(j.run_at, utc(stored), "answer for {sent}");
        ids.push(j.id);
    }
    let batch = cases
        .iter()
        .map(|(sent, _)| job("at", json!(sent)).with_run_at(RunAt::At(utc(sent))))
        .collect();
    for (answer, (sent, stored)) in store.jobs_enqueue(batch).await.unwrap().iter().zip(cases) {
        assert_eq!(answer.job.run_at, utc(stored), "batch answer for {sent}");
        ids.push(answer.job.id);
    }
    for id in ids {
        let got = store.job_get(id).await.unwrap();
        let sent = got.args.as_str().unwrap().to_owned();
        let stored = cases.iter().find(|(s, _)| *s == sent).unwrap().1;
        assert_eq!(got.run_at, utc(stored), "read back for {sent}");
    }
    // The idempotency key still replays the request as sent.
    let keyed = job("at", json!(1))
        .with_run_at(RunAt::At(utc("2026-12-01T23:59:60.5Z")))
        .with_idempotency_key("leap");
    let created = enqueue(&*store, keyed.clone()).await;
    let replay = store.job_enqueue(keyed).await.unwrap();
    assert_eq!(
        (replay.status, replay.job.id, replay.job.run_at),
        (
            EnqueueStatus::Replayed,
            created.id,
            utc("2026-12-02T00:00:00.5Z")
        )
    );
    // A leap second just before 1970 folds into the first accepted instant.
    let folded = enqueue(
        &*store,
        job("at", json!(2)).with_run_at(RunAt::At(utc("1969-12-31T23:59:60.25Z"))),
    )
    .await;
    assert_eq!(folded.run_at, utc("1970-01-01T00:00:00.25Z"));
    // Delays keep whole microseconds of the store's clock.
    let delayed = enqueue(
        &*store,
        job("at", json!(3)).with_run_at(RunAt::After(Duration::from_nanos(1_500_999))),
    )
    .await;
    assert_eq!(
        (delayed.run_at - delayed.created_at).num_microseconds(),
        Some(1_500)
    );
}

/// A schedule tick is stored like `run_at`: a leap second folded, floored to microseconds; a
/// tick equal to the stored one once floored is already consumed. (Ticks come after the
/// schedule's creation, so they are instants of the future here.)
pub async fn stored_schedule_tick_folds_leap_seconds_and_floors(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let name = ScheduleName::parse("ticks").unwrap();
    let s = store
        .schedule_upsert(NewSchedule::new(
            name.clone(),
            "* * * * *",
            kind("report"),
            json!({}),
        ))
        .await
        .unwrap()
        .schedule;
    let fire = |tick: DateTime<Utc>| s.fire(tick);
    for (sent, stored) in [
        ("2998-01-01T00:00:00.0000001Z", "2998-01-01T00:00:00Z"),
        (
            "2998-12-31T23:59:59.9999995Z",
            "2998-12-31T23:59:59.999999Z",
        ),
        ("2999-12-01T23:59:60.5Z", "2999-12-02T00:00:00.5Z"),
    ] {
        let fired = store.schedule_fire(fire(utc(sent))).await.unwrap();
        assert!(fired.is_some(), "{sent} fires");
        assert_eq!(last_tick(&*store).await, utc(stored), "tick {sent}");
    }
    // The same instant once floored is the tick already consumed.
    let again = store
        .schedule_fire(fire(utc("2999-12-02T00:00:00.5000004Z")))
        .await
        .unwrap();
    assert!(again.is_none(), "an equal tick after flooring is consumed");
    assert_eq!(last_tick(&*store).await, utc("2999-12-02T00:00:00.5Z"));
}

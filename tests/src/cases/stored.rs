//! The stored form of what clients send, the same in every store: JSON numbers as PostgreSQL's
//! `jsonb` gives them back (`drover_core::json::normalize_numbers`) in every JSON value a job
//! or schedule keeps.

use drover_core::json::normalized;
use drover_core::{EnqueueStatus, Finish, HeartbeatItem, HeartbeatJobs, NewSchedule, ScheduleName};
use serde_json::{json, Value};

use super::{all_jobs, claim, finish, job, kind, start, unbounded, LEASE};
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
    let upserted = store.schedule_upsert(new).await.unwrap();
    assert_stored(&upserted.args, &sent, "upsert answer");
    assert_known_facts(&upserted.args, "upsert answer");
    let listed = store.schedules_list().await.unwrap().remove(0);
    assert_stored(&listed.args, &sent, "list");
    let tick = listed.created_at + chrono::Duration::minutes(1);
    let fired = store
        .schedule_fire(drover_core::FireSchedule {
            name: listed.name.clone(),
            tick,
            job: listed.job_for_tick(tick),
        })
        .await
        .unwrap()
        .expect("fired");
    assert_stored(&fired.job.args, &sent, "fired job");
    let got = store.job_get(fired.job.id).await.unwrap();
    assert_stored(&got.args, &sent, "fired job read back");
}

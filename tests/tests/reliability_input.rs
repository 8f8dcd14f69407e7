//! Hostile input (RELIABILITY.md, guarantee 15) through the store API (memory and PostgreSQL), the `drover`
//! CLI (real processes on PostgreSQL, and its flag parsing in process) and the HTTP API (a real
//! server on PostgreSQL): invalid and huge JSON, `\u0000`, invalid UTF-8, unknown states and
//! kinds in filters, SQL metacharacters in every free string field and in meta filters,
//! negative and overflowing numbers, `run_at` at the far ends of its range and beyond, cron
//! expressions that never fire or fire every second. Each gets a clear error naming the field,
//! or a defined behaviour that the test checks; and nothing already stored changes: every test
//! seeds jobs, a paused queue, a limit policy and a schedule first, and compares them before
//! and after.
//!
//! Property tests: `meta_filter_agrees_between_memory_and_postgres` lists jobs by generated
//! meta filters (hostile keys and values) through both stores' `jobs_list` and compares the
//! answers; `cli_flags_never_panic_and_errors_name_the_flag` feeds generated flag values to
//! the CLI's enqueue and list parsing. The HTTP request parsing has its proptests in
//! `crates/http/tests/request_parsing.rs` and jsonb containment against PostgreSQL in
//! `tests/http_api/postgres_only.rs`; they are not repeated here.
//!
//! PostgreSQL parts need `DROVER_TEST_DATABASE_URL`; without it they print `SKIPPED ...` and
//! pass, unless `DROVER_REQUIRE_POSTGRES` is set (CI), when they fail.

mod cli_support;
mod reliability_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use drover_core::{
    ClaimJobs, Error, FencingToken, Finish, FinishItem, FinishReply, HeartbeatItem, HeartbeatJobs,
    HeartbeatReply, JobId, JobKind, JobState, JobStore, LimitKey, LimitPolicy, ListJobs, NewJob,
    NewSchedule, PruneJobs, QueueName, Quotas, Rate, RunAt, ScheduleName, StoreConfig, TenantId,
    WorkerId,
};
use drover_store_memory::MemoryStore;
use reliability_support::{shared_server, Db, Instrument};
use serde_json::{json, Value};

/// Strings that break naive SQL, LIKE patterns, JSON paths, shells and terminals.
const HOSTILE: [&str; 12] = [
    "'; DROP TABLE drover.jobs; --",
    "\" OR 1=1 --",
    "\\",
    "%",
    "_",
    "$1",
    "a'b\"c`d",
    "{\"a\": 1}",
    "Robert'); DELETE FROM drover.jobs WHERE ('1'='1",
    "ünïcödé ✓ 𝄞",
    "\u{202e}reversed",
    "*/ SELECT pg_sleep(10); /*",
];

fn kind(name: &str) -> JobKind {
    JobKind::parse(name).unwrap()
}

fn unbounded() -> StoreConfig {
    StoreConfig {
        quotas: Quotas::unbounded(),
        ..StoreConfig::default()
    }
}

fn utc(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

/// Everything a store holds, as JSON: every job (by id), queues, limit policies, schedules.
async fn dump(store: &dyn JobStore) -> Value {
    let jobs = drover_tests::cases::all_jobs(store).await;
    json!({
        "jobs": jobs,
        "queues": store.queues_list().await.unwrap(),
        "limits": store.limits_list().await.unwrap().iter().map(|l| serde_json::to_value(l).unwrap()).collect::<Vec<_>>(),
        "schedules": store.schedules_list().await.unwrap(),
    })
}

/// `after` without the jobs of `added` equals `before`.
fn assert_unchanged(before: &Value, after: &Value, added: &BTreeSet<String>) {
    let mut after = after.clone();
    let jobs = after["jobs"].as_array_mut().unwrap();
    jobs.retain(|j| !added.contains(j["id"].as_str().unwrap()));
    let before_jobs = before["jobs"].as_array().unwrap();
    assert_eq!(
        before_jobs.len(),
        jobs.len(),
        "jobs were added or lost beyond the accepted ones"
    );
    for (b, a) in before_jobs.iter().zip(jobs.iter()) {
        assert_eq!(b, a, "a stored job changed");
    }
    for part in ["limits", "schedules"] {
        assert_eq!(before[part], after[part], "{part} changed");
    }
    let paused = |v: &Value| {
        v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| (q["name"].clone(), q["paused"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        paused(before),
        paused(&after),
        "a queue's pause state changed"
    );
}

/// Seeds a store: jobs with hostile free keys and meta, a paused queue, a limit policy and a
/// schedule.
async fn seed(store: &dyn JobStore) {
    let mut jobs = Vec::new();
    for (i, text) in HOSTILE.iter().enumerate() {
        jobs.push(
            NewJob::new(kind("seed"), json!({"n": i, "text": text, (*text): [text]}))
                .with_idempotency_key(format!("idem {text}"))
                .with_unique_key(format!("uniq {text}"))
                .with_meta(json!({"text": text, (*text): i})),
        );
    }
    jobs.push(
        NewJob::new(kind("seed"), json!(null)).with_queue(QueueName::parse("paused").unwrap()),
    );
    store.jobs_enqueue(jobs).await.unwrap();
    store
        .queue_pause(QueueName::parse("paused").unwrap())
        .await
        .unwrap();
    store
        .limit_set(
            LimitPolicy::new(
                LimitKey::parse("customer:acme").unwrap(),
                Some(2),
                Some(Rate::new(10, Duration::from_secs(60)).unwrap()),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    store
        .schedule_upsert(NewSchedule::new(
            ScheduleName::parse("nightly").unwrap(),
            "0 2 * * *",
            kind("seed"),
            json!({"text": HOSTILE[0]}),
        ))
        .await
        .unwrap();
}

/// Asserts `InvalidInput` naming `field`.
#[track_caller]
fn invalid<T: std::fmt::Debug>(result: Result<T, Error>, field: &str) {
    match result {
        Err(Error::InvalidInput { field: f, reason }) => {
            assert_eq!(f, field, "wrong field named (reason: {reason})");
            assert!(!reason.is_empty());
        }
        other => panic!("expected InvalidInput naming {field}, got {other:?}"),
    }
}

/// Every hostile input the store API can receive, against one store; returns the ids of the
/// jobs the accepted edge cases created.
async fn store_battery(store: &dyn JobStore) -> BTreeSet<String> {
    let mut added = BTreeSet::new();
    let job = || NewJob::new(kind("edge"), json!({}));
    // Huge and NUL-bearing JSON.
    let huge = json!({"pad": "x".repeat(300 * 1024)});
    invalid(
        store
            .job_enqueue(NewJob::new(kind("edge"), huge.clone()))
            .await,
        "args",
    );
    invalid(store.job_enqueue(job().with_meta(huge)).await, "meta");
    invalid(
        store
            .job_enqueue(NewJob::new(kind("edge"), json!({"s": "a\u{0}b"})))
            .await,
        "args",
    );
    invalid(
        store
            .job_enqueue(NewJob::new(kind("edge"), json!({"a\u{0}": 1})))
            .await,
        "args",
    );
    invalid(
        store
            .job_enqueue(NewJob::new(kind("edge"), json!(["\u{0}"])))
            .await,
        "args",
    );
    invalid(
        store
            .job_enqueue(job().with_meta(json!({"m": "\u{0}"})))
            .await,
        "meta",
    );
    invalid(store.job_enqueue(job().with_meta(json!([1]))).await, "meta");
    invalid(
        store.job_enqueue(job().with_meta(json!("text"))).await,
        "meta",
    );
    // Numbers out of range.
    for max_attempts in [0, -1, 1001, i32::MAX, i32::MIN] {
        invalid(
            store
                .job_enqueue(job().with_max_attempts(max_attempts))
                .await,
            "max_attempts",
        );
    }
    // run_at outside 1970..=9999, delays beyond 100 years.
    for at in [
        utc("1969-12-31T23:59:59Z"),
        Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap(),
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::MAX_UTC,
    ] {
        invalid(
            store.job_enqueue(job().with_run_at(RunAt::At(at))).await,
            "run_at",
        );
    }
    for delay in [Duration::from_secs(101 * 365 * 24 * 3600), Duration::MAX] {
        invalid(
            store
                .job_enqueue(job().with_run_at(RunAt::After(delay)))
                .await,
            "delay",
        );
    }
    // Free keys with control characters or too long.
    invalid(
        store
            .job_enqueue(job().with_idempotency_key("a\u{0}"))
            .await,
        "idempotency_key",
    );
    invalid(
        store
            .job_enqueue(job().with_idempotency_key("k".repeat(256)))
            .await,
        "idempotency_key",
    );
    invalid(
        store
            .job_enqueue(job().with_unique_key("line\nbreak"))
            .await,
        "unique_key",
    );
    let mut many_keys = job();
    for i in 0..17 {
        many_keys = many_keys.with_limit_key(LimitKey::parse(format!("k:{i}")).unwrap());
    }
    invalid(store.job_enqueue(many_keys).await, "limit_keys");
    // A batch with one bad job stores nothing.
    invalid(
        store
            .jobs_enqueue(vec![job(), job().with_max_attempts(0)])
            .await,
        "jobs[1].max_attempts",
    );
    // Names: SQL metacharacters, NUL, unknown states are refused before any store call.
    let long = "x".repeat(300);
    let names = HOSTILE.iter().copied().filter(|t| *t != "_");
    for text in names.chain(["", "a\u{0}", "a b", long.as_str()]) {
        invalid(JobKind::parse(text), "kind");
        invalid(QueueName::parse(text), "queue");
        invalid(TenantId::parse(text), "tenant");
        invalid(ScheduleName::parse(text), "schedule");
        assert!(LimitKey::parse(text).is_err(), "limit key {text:?}");
    }
    for state in ["sleeping", "", "RUNNING ", "queued'--", "\u{0}"] {
        assert!(state.parse::<JobState>().is_err(), "state {state:?}");
    }
    // Lists: bad filters are refused, an unknown (valid) kind matches nothing.
    invalid(
        store
            .jobs_list(ListJobs {
                limit: 1001,
                ..ListJobs::default()
            })
            .await,
        "limit",
    );
    for meta in [json!([1]), json!("x"), json!({"m": "\u{0}"})] {
        invalid(
            store
                .jobs_list(ListJobs {
                    meta: Some(meta),
                    ..ListJobs::default()
                })
                .await,
            "meta",
        );
    }
    let none = store
        .jobs_list(ListJobs {
            kind: Some(kind("no.such.kind")),
            ..ListJobs::default()
        })
        .await
        .unwrap();
    assert!(none.jobs.is_empty());
    // Meta filters with SQL metacharacters match exactly the job that holds them.
    for (i, text) in HOSTILE.iter().enumerate() {
        for filter in [json!({"text": text}), json!({ (*text): i })] {
            let page = store
                .jobs_list(ListJobs {
                    meta: Some(filter.clone()),
                    ..ListJobs::default()
                })
                .await
                .unwrap();
            let found: Vec<&Value> = page.jobs.iter().map(|j| &j.args["n"]).collect();
            assert_eq!(found, vec![&json!(i)], "filter {filter}");
        }
        let stored = store
            .jobs_list(ListJobs {
                meta: Some(json!({"text": text})),
                ..ListJobs::default()
            })
            .await
            .unwrap()
            .jobs
            .remove(0);
        assert_eq!(
            stored.idempotency_key.as_deref(),
            Some(format!("idem {text}").as_str())
        );
        assert_eq!(
            stored.args[*text],
            json!([text]),
            "args round-trip verbatim"
        );
        // The unique key, metacharacters and all, still deduplicates.
        let again = store
            .job_enqueue(
                NewJob::new(kind("seed"), json!({})).with_unique_key(format!("uniq {text}")),
            )
            .await
            .unwrap();
        assert_eq!(again.job.id, stored.id, "unique key {text:?}");
    }
    // Claims, heartbeats and outcomes with bad numbers or unknown jobs change nothing.
    let claim = |limit: u32, lease: Duration| ClaimJobs {
        worker: WorkerId::parse("w';DROP--").unwrap(),
        queues: vec![QueueName::default_queue()],
        kinds: vec![kind("nothing.registered")],
        limit,
        start: limit,
        lease,
    };
    assert!(matches!(
        store.jobs_claim(claim(0, Duration::from_secs(1))).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        store
            .jobs_claim(claim(10_001, Duration::from_secs(1)))
            .await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        store.jobs_claim(claim(1, Duration::ZERO)).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        store.jobs_claim(claim(1, Duration::MAX)).await,
        Err(Error::InvalidInput { .. })
    ));
    let unknown = JobId::new_v7();
    let seeded = store.jobs_list(ListJobs::default()).await.unwrap().jobs[0].id;
    for token in [FencingToken(-1), FencingToken(0), FencingToken(i64::MAX)] {
        for id in [unknown, seeded] {
            let beat = store
                .jobs_heartbeat(HeartbeatJobs {
                    lease: Duration::from_secs(10),
                    jobs: vec![HeartbeatItem {
                        started: None,
                        id,
                        token,
                        meta: Some(json!({"text": HOSTILE[0]})),
                        progress: None,
                    }],
                })
                .await
                .unwrap();
            assert_eq!(beat, vec![HeartbeatReply::LeaseLost { id }]);
            let finish = store
                .jobs_finish(vec![FinishItem {
                    parent: None,
                    started: None,
                    id,
                    token,
                    finish: Finish::Succeeded {
                        result: Some(json!(HOSTILE[0])),
                    },
                }])
                .await
                .unwrap();
            assert_eq!(finish, vec![FinishReply::LeaseLost { id }]);
        }
    }
    assert!(matches!(
        store.job_get(unknown).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.job_cancel(unknown).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.job_retry(unknown).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.job_retry(seeded).await,
        Err(Error::InvalidTransition { .. })
    ));
    for limit in [0, 100_001] {
        invalid(
            store
                .jobs_prune(PruneJobs {
                    older_than: Duration::ZERO,
                    limit,
                })
                .await,
            "limit",
        );
    }
    // Limits: a policy without a bound, rates of zero.
    assert!(LimitPolicy::new(LimitKey::parse("k").unwrap(), None, None).is_err());
    assert!(Rate::new(0, Duration::from_secs(1)).is_err());
    assert!(Rate::new(1, Duration::ZERO).is_err());
    // Schedules: expressions that never fire or do not parse, unknown time zones.
    let schedule = |cron: &str, timezone: &str| {
        let mut s = NewSchedule::new(
            ScheduleName::parse("edge").unwrap(),
            cron,
            kind("edge"),
            json!({}),
        );
        s.timezone = timezone.to_owned();
        s
    };
    for cron in [
        "0 0 30 2 *",
        "0 0 31 4 *",
        HOSTILE[0],
        "",
        "* * * *",
        "61 * * * *",
        "\u{0}",
    ] {
        invalid(store.schedule_upsert(schedule(cron, "UTC")).await, "cron");
    }
    for timezone in ["Mars/Olympus_Mons", HOSTILE[0], ""] {
        invalid(
            store.schedule_upsert(schedule("0 2 * * *", timezone)).await,
            "timezone",
        );
    }
    let mut bad_attempts = schedule("0 2 * * *", "UTC");
    bad_attempts.max_attempts = 0;
    invalid(store.schedule_upsert(bad_attempts).await, "max_attempts");

    // Accepted at the edges: defined behaviour.
    let past = store
        .job_enqueue(
            NewJob::new(kind("edge.past"), json!({}))
                .with_run_at(RunAt::At(utc("1970-01-01T00:00:00Z"))),
        )
        .await
        .unwrap()
        .job;
    let future = store
        .job_enqueue(
            NewJob::new(kind("edge.future"), json!({}))
                .with_run_at(RunAt::At(utc("9999-12-31T23:59:59Z"))),
        )
        .await
        .unwrap()
        .job;
    added.extend([past.id.to_string(), future.id.to_string()]);
    let edge_claim = |k: &str| ClaimJobs {
        worker: WorkerId::parse("edge-worker").unwrap(),
        queues: vec![QueueName::default_queue()],
        kinds: vec![kind(k)],
        limit: 10,
        start: 10,
        lease: Duration::from_secs(30),
    };
    let claimed = store
        .jobs_claim(edge_claim("edge.past"))
        .await
        .unwrap()
        .jobs;
    assert_eq!(
        claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![past.id],
        "1970 is ready at once"
    );
    assert!(
        store
            .jobs_claim(edge_claim("edge.future"))
            .await
            .unwrap()
            .jobs
            .is_empty(),
        "9999 is not ready"
    );
    for max_attempts in [1, 1000] {
        let created = store
            .job_enqueue(job().with_max_attempts(max_attempts))
            .await
            .unwrap()
            .job;
        assert_eq!(created.max_attempts, max_attempts);
        added.insert(created.id.to_string());
    }
    // A schedule firing every second: accepted; each tick enqueues once, however often fired.
    let every_second = store
        .schedule_upsert(schedule("* * * * * *", "UTC"))
        .await
        .unwrap()
        .schedule;
    let tick = every_second.next_tick(store.now().await.unwrap()).unwrap();
    let fire = || every_second.fire(tick);
    let first = store
        .schedule_fire(fire())
        .await
        .unwrap()
        .expect("the tick fires once");
    added.insert(first.job.id.to_string());
    assert!(
        store.schedule_fire(fire()).await.unwrap().is_none(),
        "and only once"
    );
    store
        .schedule_remove(ScheduleName::parse("edge").unwrap())
        .await
        .unwrap();
    added
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_through_the_store_api_memory() {
    let store = MemoryStore::new(unbounded());
    seed(&store).await;
    let before = dump(&store).await;
    let added = store_battery(&store).await;
    assert_unchanged(&before, &dump(&store).await, &added);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_through_the_store_api_postgres() {
    const TEST: &str = "hostile_input_through_the_store_api_postgres";
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::None).await;
    let store = db.store().await;
    seed(&store).await;
    let before = dump(&store).await;
    let added = store_battery(&store).await;
    assert_unchanged(&before, &dump(&store).await, &added);
    // The tables the metacharacters talk about are all still there.
    let tables: i64 = drover_store_postgres::sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'drover'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert!(tables >= 5, "drover's tables survive: {tables}");
    store.close().await;
}

// ------------------------------------------------------------------------------------------
// Property: the meta filter of `jobs_list` answers the same on both stores.

/// Keys of generated meta objects: a few plain ones (so filters and documents overlap) and
/// hostile ones.
fn meta_keys() -> Vec<String> {
    let mut keys: Vec<String> = ["a", "b", "tags"].iter().map(|k| (*k).to_owned()).collect();
    keys.extend(HOSTILE.iter().take(6).map(|k| (*k).to_owned()));
    keys
}

/// Scalars of generated meta: hostile strings, numbers at the edges of jsonb equality.
fn meta_scalars() -> Vec<Value> {
    let mut scalars = vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(1.0),
        json!(-0.0),
        json!(9007199254740993i64),
        json!(u64::MAX),
        json!(""),
    ];
    scalars.extend(HOSTILE.iter().map(|s| json!(s)));
    scalars
}

fn meta_value() -> proptest::strategy::BoxedStrategy<Value> {
    use proptest::prelude::*;
    let leaf = proptest::sample::select(meta_scalars());
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map(proptest::sample::select(meta_keys()), inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

fn meta_object() -> proptest::strategy::BoxedStrategy<Value> {
    use proptest::prelude::*;
    proptest::collection::btree_map(proptest::sample::select(meta_keys()), meta_value(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
        .boxed()
}

/// A filter derived from `doc`: a random part of it (keys dropped, array elements dropped).
fn part_of(doc: &Value, rng: &mut proptest::test_runner::TestRng) -> Value {
    use proptest::prelude::Rng;
    match doc {
        Value::Object(map) => {
            let mut part = serde_json::Map::new();
            for (k, v) in map {
                if rng.next_u32() % 3 != 0 {
                    part.insert(k.clone(), part_of(v, rng));
                }
            }
            Value::Object(part)
        }
        Value::Array(items) => {
            let mut part = Vec::new();
            for v in items {
                if rng.next_u32() % 2 == 0 {
                    part.push(part_of(v, rng));
                }
            }
            Value::Array(part)
        }
        scalar => scalar.clone(),
    }
}

/// The `args.n` of every job `store` lists for `filter`.
async fn matching(store: &dyn JobStore, filter: &Value) -> BTreeSet<u64> {
    let page = store
        .jobs_list(ListJobs {
            meta: Some(filter.clone()),
            limit: 1000,
            ..ListJobs::default()
        })
        .await
        .unwrap_or_else(|e| panic!("list by {filter}: {e}"));
    page.jobs
        .iter()
        .map(|j| j.args["n"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_filter_agrees_between_memory_and_postgres() {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;
    const TEST: &str = "meta_filter_agrees_between_memory_and_postgres";
    const DOCS: usize = 80;
    const FILTERS: usize = 300;
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::None).await;
    let pg = db.store().await;
    let memory = MemoryStore::new(unbounded());
    let mut runner = TestRunner::deterministic();
    let docs: Vec<Value> = (0..DOCS)
        .map(|_| meta_object().new_tree(&mut runner).unwrap().current())
        .collect();
    let jobs: Vec<NewJob> = docs
        .iter()
        .enumerate()
        .map(|(n, doc)| NewJob::new(kind("meta"), json!({"n": n})).with_meta(doc.clone()))
        .collect();
    pg.jobs_enqueue(jobs.clone()).await.unwrap();
    memory.jobs_enqueue(jobs).await.unwrap();
    let mut answered = 0;
    for i in 0..FILTERS {
        let filter = if i % 4 == 3 {
            meta_object().new_tree(&mut runner).unwrap().current()
        } else {
            let doc = docs[i % DOCS].clone();
            part_of(&doc, runner.rng())
        };
        let in_memory = matching(&memory, &filter).await;
        let in_postgres = matching(&pg, &filter).await;
        assert_eq!(
            in_memory, in_postgres,
            "meta filter {filter} matches different jobs (memory vs PostgreSQL)"
        );
        let expected: BTreeSet<u64> = docs
            .iter()
            .enumerate()
            .filter(|(_, doc)| drover_core::json::contains(doc, &filter))
            .map(|(n, _)| n as u64)
            .collect();
        assert_eq!(in_memory, expected, "filter {filter}");
        answered += usize::from(!in_memory.is_empty() && in_memory.len() < DOCS);
    }
    assert!(
        answered > FILTERS / 3,
        "the generator covers selective filters ({answered} of {FILTERS})"
    );
    pg.close().await;
}

// ------------------------------------------------------------------------------------------
// Property: the CLI's enqueue and list flags never panic; refusals name the flag.

fn cli_text() -> proptest::strategy::BoxedStrategy<Option<String>> {
    use proptest::prelude::*;
    let samples: Vec<String> = HOSTILE
        .iter()
        .map(|s| (*s).to_owned())
        .chain(
            [
                "",
                "noop",
                "{}",
                "[1]",
                "{\"a\":\"\\u0000\"}",
                "null",
                "{\"k\": 1e999}",
                "1970-01-01T00:00:00Z",
                "9999-12-31T23:59:59Z",
                "1969-12-31T23:59:59Z",
                "10000-01-01T00:00:00Z",
                "yesterday",
                "queued",
                "sleeping",
                "a\u{0}b",
                "0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79",
            ]
            .iter()
            .map(|s| (*s).to_owned()),
        )
        .collect();
    prop_oneof![
        Just(None),
        proptest::sample::select(samples).prop_map(Some),
        ".{0,40}".prop_map(Some),
    ]
    .boxed()
}

fn cli_number() -> proptest::strategy::BoxedStrategy<Option<i64>> {
    use proptest::prelude::*;
    prop_oneof![
        Just(None),
        proptest::sample::select(vec![
            0i64,
            -1,
            1,
            3,
            1000,
            1001,
            32767,
            32768,
            -32768,
            -32769,
            i64::MAX,
            i64::MIN,
        ])
        .prop_map(Some),
        any::<i64>().prop_map(Some),
    ]
    .boxed()
}

/// True when `message` is one line that names one of `fields`.
fn names_one_of(message: &str, fields: &[&str]) -> bool {
    !message.contains('\n') && fields.iter().any(|f| message.contains(f))
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(512))]

    #[test]
    fn cli_flags_never_panic_and_errors_name_the_flag(
        kind in cli_text(),
        args in cli_text(),
        queue in cli_text(),
        tenant in cli_text(),
        priority in cli_number(),
        run_at in cli_text(),
        delay_ms in proptest::option::of(0u64..u64::MAX),
        max_attempts in cli_number(),
        unique_key in cli_text(),
        idempotency_key in cli_text(),
        meta in cli_text(),
        limit_key in cli_text(),
        state in cli_text(),
        limit in proptest::sample::select(vec![0u32, 1, 50, 1000, 1001, u32::MAX]),
        before in cli_text(),
    ) {
        let enqueue = drover_cli::args::EnqueueArgs {
            kind: kind.clone(),
            args,
            queue: queue.clone(),
            priority,
            run_at: run_at.clone(),
            delay: delay_ms.filter(|_| run_at.is_none()).map(Duration::from_millis),
            max_attempts,
            idempotency_key,
            unique_key,
            tenant: tenant.clone(),
            meta: meta.clone(),
            limit_keys: limit_key.into_iter().collect(),
            depends_on: Vec::new(),
            run_regardless: false,
            workflow: None,
            file: None,
            batch_size: 1000,
            wait_for_room: false,
            otlp: None,
        };
        match drover_cli::commands::enqueue::job_from_flags(&enqueue) {
            Ok(job) => {
                job.validate(&drover_core::SizeLimits::default()).unwrap();
            }
            Err(e) => {
                // A usage error (exit code 2) naming the flag.
                let message = drover_cli::one_line(&e);
                proptest::prop_assert!(drover_cli::usage::is_usage(&e), "{message}");
                proptest::prop_assert!(
                    names_one_of(&message, &[
                        "KIND", "--args", "--queue", "--tenant", "--priority", "--run-at",
                        "--delay", "--max-attempts", "--unique-key", "--idempotency-key",
                        "--meta", "--limit-key",
                    ]),
                    "{message}"
                );
            }
        }
        // `jobs list` as the command line gives it: clap checks every flag but --meta.
        let mut argv = vec!["drover".to_owned(), "jobs".to_owned(), "list".to_owned()];
        for (flag, value) in [
            ("--queue", &queue),
            ("--state", &state),
            ("--kind", &kind),
            ("--tenant", &tenant),
            ("--meta", &meta),
            ("--before", &before),
        ] {
            if let Some(value) = value {
                argv.push(format!("{flag}={value}"));
            }
        }
        argv.push(format!("--limit={limit}"));
        match <drover_cli::args::Cli as clap::Parser>::try_parse_from(&argv) {
            Err(e) => {
                // Exit code 2, naming the flag.
                proptest::prop_assert_eq!(e.exit_code(), 2, "{}", e);
                let message = e.to_string();
                proptest::prop_assert!(
                    ["--queue", "--state", "--kind", "--tenant", "--before", "--limit"]
                        .iter()
                        .any(|flag| message.contains(&format!("'{flag} <"))),
                    "{message}"
                );
            }
            Ok(cli) => {
                let drover_cli::args::Command::Jobs(drover_cli::args::JobsCommand::List(list)) =
                    cli.command
                else {
                    panic!("not `jobs list`");
                };
                match drover_cli::commands::jobs::list_query(&list) {
                    Ok(query) => {
                        proptest::prop_assert!((1..=1000).contains(&query.limit));
                    }
                    Err(e) => {
                        let message = drover_cli::one_line(&e);
                        proptest::prop_assert!(drover_cli::usage::is_usage(&e), "{message}");
                        proptest::prop_assert!(names_one_of(&message, &["--meta"]), "{message}");
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// The CLI as a real process.

/// Every row of Drover's tables except workers, as text, by table; jobs keyed by id.
async fn dump_tables(pool: &drover_store_postgres::PgPool) -> Value {
    let mut out = serde_json::Map::new();
    for table in ["jobs", "queues", "limits", "schedules"] {
        let text: String = drover_store_postgres::sqlx::query_scalar(&format!(
            "SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY to_jsonb(t)::text), '[]'::jsonb)::text FROM drover.{table} t"
        ))
        .fetch_one(pool)
        .await
        .unwrap();
        out.insert(table.to_owned(), serde_json::from_str(&text).unwrap());
    }
    Value::Object(out)
}

/// `after` without the jobs in `added` equals `before`, table by table.
fn assert_tables_unchanged(before: &Value, after: &Value, added: &BTreeSet<String>) {
    for (table, rows) in before.as_object().unwrap() {
        let mut now: Vec<Value> = after[table].as_array().unwrap().clone();
        if table == "jobs" {
            now.retain(|j| !added.contains(j["id"].as_str().unwrap()));
        }
        assert_eq!(rows.as_array().unwrap(), &now, "drover.{table} changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_through_the_cli_changes_nothing() {
    use std::os::unix::ffi::OsStrExt;
    let Some(db) =
        cli_support::TestDb::migrated("hostile_input_through_the_cli_changes_nothing").await
    else {
        return;
    };
    // Seed: jobs whose free keys and meta carry SQL metacharacters, a paused queue, a limit,
    // a schedule.
    let mut seeded = Vec::new();
    for (i, text) in HOSTILE.iter().enumerate() {
        let meta = json!({"text": text, "n": i}).to_string();
        let args = json!({(*text): text}).to_string();
        let id = db
            .enqueue(
                "seed",
                &args,
                &[
                    "--meta",
                    &meta,
                    "--unique-key",
                    text,
                    "--idempotency-key",
                    text,
                ],
            )
            .await;
        seeded.push(id);
    }
    db.ok(&["queues", "pause", "paused"]).await;
    db.ok(&["limits", "set", "customer:acme", "--max-running", "2"])
        .await;
    db.ok(&[
        "schedules",
        "add",
        "nightly",
        "--cron",
        "0 2 * * *",
        "--kind",
        "seed",
    ])
    .await;
    let before = dump_tables(db.pool()).await;

    // Refused with exit code 1 and one line naming the problem: what only the database can
    // tell.
    let refused: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["jobs", "cancel", "0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79"],
            "not found",
        ),
        (vec!["jobs", "retry", &seeded[0]], "cannot retry"),
        (vec!["schedules", "remove", "x"], "not found"),
    ];
    for (args, needle) in &refused {
        let line = db.fails(args).await;
        assert!(
            line.to_lowercase().contains(&needle.to_lowercase()),
            "drover {args:?}: {line:?} does not name {needle:?}"
        );
    }
    // A flag value that breaks its rule is a usage error (exit code 2, as clap's own), found
    // before connecting, naming the flag: from clap's value parsers (`error: invalid value ...
    // for '--flag'`), or one line `drover: invalid --flag: ...` where the value is not quoted
    // (JSON args may hold secrets) or the rule spans flags.
    let flag_errors: Vec<(Vec<&str>, &str)> = vec![
        (vec!["enqueue", "noop", "--args", "{not json"], "--args"),
        (
            vec!["enqueue", "noop", "--args", "{\"s\": \"\\u0000\"}"],
            "--args",
        ),
        (vec!["enqueue", "noop", "--meta", "[1]"], "--meta"),
        (
            vec!["enqueue", "noop", "--meta", "{\"m\": \"\\u0000\"}"],
            "--meta",
        ),
        (vec!["enqueue", "noop", "--priority", "40000"], "--priority"),
        (
            vec!["enqueue", "noop", "--priority", "-40000"],
            "--priority",
        ),
        (
            vec!["enqueue", "noop", "--max-attempts", "0"],
            "--max-attempts",
        ),
        (
            vec!["enqueue", "noop", "--max-attempts", "-1"],
            "--max-attempts",
        ),
        (
            vec!["enqueue", "noop", "--max-attempts", "1001"],
            "--max-attempts",
        ),
        (
            vec!["enqueue", "noop", "--max-attempts", "9223372036854775807"],
            "--max-attempts",
        ),
        (
            vec!["enqueue", "noop", "--run-at", "1969-12-31T23:59:59Z"],
            "--run-at",
        ),
        (
            vec!["enqueue", "noop", "--run-at", "10000-01-01T00:00:00Z"],
            "--run-at",
        ),
        (vec!["enqueue", "noop", "--run-at", "yesterday"], "--run-at"),
        (vec!["enqueue", "noop", "--delay", "200years"], "--delay"),
        (
            vec!["enqueue", "noop", "--delay", "999999999999d"],
            "--delay: must be at most 36500 days",
        ),
        (
            vec!["limits", "set", "k", "--rate", "99999999999/s"],
            "count must be between",
        ),
        (vec!["enqueue", HOSTILE[0]], "KIND"),
        (vec!["enqueue", "noop", "--queue", "a b"], "--queue"),
        (vec!["enqueue", "noop", "--tenant", "x'y"], "--tenant"),
        (
            vec!["enqueue", "noop", "--unique-key", "line\nbreak"],
            "--unique-key",
        ),
        (
            vec!["enqueue", "noop", "--limit-key", HOSTILE[0]],
            "--limit-key",
        ),
        (vec!["jobs", "list", "--state", "sleeping"], "--state"),
        (vec!["jobs", "list", "--state", "queued'; --"], "--state"),
        (vec!["jobs", "list", "--kind", "bad kind"], "--kind"),
        (vec!["jobs", "list", "--queue", HOSTILE[1]], "--queue"),
        (vec!["jobs", "list", "--meta", "not json"], "--meta"),
        (
            vec!["jobs", "list", "--meta", "{\"n\": 99999999999999999999}"],
            "meta.n",
        ),
        (
            vec![
                "enqueue",
                "noop",
                "--args",
                "{\"n\": [123456789012345678901234567890]}",
            ],
            "args.n[0]",
        ),
        (vec!["jobs", "list", "--meta", "[1]"], "--meta"),
        (
            vec!["jobs", "list", "--meta", "{\"m\": \"\\u0000\"}"],
            "--meta",
        ),
        (vec!["jobs", "list", "--limit", "0"], "--limit"),
        (vec!["jobs", "list", "--limit", "1001"], "--limit"),
        (vec!["jobs", "list", "--before", HOSTILE[0]], "--before"),
        (vec!["jobs", "get", HOSTILE[0]], "UUID"),
        (vec!["queues", "pause", HOSTILE[0]], "<NAME>"),
        (
            vec![
                "schedules",
                "add",
                "x",
                "--cron",
                "0 0 30 2 *",
                "--kind",
                "k",
            ],
            "never fires",
        ),
        (
            vec!["schedules", "add", "x", "--cron", HOSTILE[0], "--kind", "k"],
            "--cron",
        ),
        (
            vec![
                "schedules",
                "add",
                "x",
                "--cron",
                "* * * * *",
                "--kind",
                "k",
                "--timezone",
                "Mars/Olympus",
            ],
            "--timezone",
        ),
        (
            vec![
                "schedules",
                "add",
                "x",
                "--cron",
                "* * * * *",
                "--kind",
                "k",
                "--max-attempts",
                "0",
            ],
            "--max-attempts",
        ),
        (vec!["limits", "set", "k"], "--max-running"),
        (vec!["limits", "set", "k", "--rate", "0/s"], "--rate"),
        (
            vec!["limits", "set", "k", "--rate", "99999999999999/s"],
            "--rate",
        ),
        (vec!["limits", "set", "k", "--rate", "1/0s"], "--rate"),
        (
            vec!["limits", "set", HOSTILE[0], "--max-running", "1"],
            "<KEY>",
        ),
        (vec!["prune", "--batch", "0"], "--batch"),
    ];
    for (args, needle) in &flag_errors {
        let stderr = db.usage_error(args).await;
        assert!(
            stderr.contains(needle),
            "drover {args:?}: {stderr:?} does not name {needle:?}"
        );
    }
    // Usage errors (exit code 2): numbers that do not fit, negative durations, invalid UTF-8.
    let usage: Vec<(Vec<&[u8]>, &str)> = vec![
        (
            vec![b"enqueue", b"noop", b"--priority", b"99999999999999999999"],
            "--priority",
        ),
        (vec![b"enqueue", b"noop", b"--delay", b"-5s"], "'-5'"),
        (
            vec![b"limits", b"set", b"k", b"--max-running", b"-1"],
            "'-1'",
        ),
        (
            vec![b"enqueue", b"noop", b"--args", b"{\"a\": \"\xff\"}"],
            "UTF-8",
        ),
        (vec![b"enqueue", b"no\xffop"], "UTF-8"),
        (vec![b"jobs", b"list", b"--meta", b"\xfe"], "UTF-8"),
    ];
    for (args, needle) in &usage {
        let mut command = db.command(&[]);
        command.args(args.iter().map(|a| std::ffi::OsStr::from_bytes(a)));
        command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let out = command.output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let shown: Vec<_> = args.iter().map(|a| String::from_utf8_lossy(a)).collect();
        assert_eq!(out.status.code(), Some(2), "{shown:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{shown:?} should name {needle}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    // Defined behaviour: accepted at the edges, filters with metacharacters match exactly.
    let mut added = BTreeSet::new();
    added.insert(
        db.enqueue("noop", "{}", &["--run-at", "1970-01-01T00:00:00Z"])
            .await,
    );
    added.insert(
        db.enqueue("noop", "{}", &["--run-at", "9999-12-31T23:59:59Z"])
            .await,
    );
    added.insert(
        db.enqueue(
            "noop",
            "{}",
            &["--max-attempts", "1000", "--priority", "-32768"],
        )
        .await,
    );
    for (i, text) in HOSTILE.iter().enumerate() {
        let filter = json!({"text": text}).to_string();
        let page = db.json(&["jobs", "list", "--meta", &filter]).await;
        let ids: Vec<&str> = page["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec![seeded[i].as_str()], "meta filter {filter}");
        // The same unique key (metacharacters and all) answers the stored job.
        let again = db.json(&["enqueue", "seed", "--unique-key", text]).await;
        assert_eq!(again["status"], "duplicate", "{again}");
        assert_eq!(again["job"]["id"], seeded[i].as_str());
    }
    let none = db.json(&["jobs", "list", "--kind", "no.such.kind"]).await;
    assert_eq!(none["jobs"], json!([]));
    let every_second = db
        .json(&[
            "schedules",
            "add",
            "every-second",
            "--cron",
            "* * * * * *",
            "--kind",
            "noop",
        ])
        .await;
    assert_eq!(every_second["name"], "every-second", "{every_second}");
    db.ok(&["schedules", "remove", "every-second"]).await;
    // A file of bad lines: each refused by number, the good one loaded.
    let mut file = Vec::new();
    file.extend_from_slice(b"{\"kind\": \"noop\", \"args\": {\"a\": \"\xff\"}}\n");
    file.extend_from_slice(b"{\"kind\": \"noop\", \"args\": {\"s\": \"\\u0000\"}}\n");
    file.extend_from_slice(
        format!(
            "{{\"kind\": \"noop\", \"args\": {{\"pad\": \"{}\"}}}}\n",
            "x".repeat(300 * 1024)
        )
        .as_bytes(),
    );
    file.extend_from_slice(b"{\"kind\": \"noop\", \"priority\": 1e400}\n");
    file.extend_from_slice(b"not json at all\n");
    file.extend_from_slice(
        b"{\"kind\": \"noop\", \"meta\": {\"q\": \"'; DROP TABLE drover.jobs; --\"}}\n",
    );
    let path = std::env::temp_dir().join(format!(
        "drover-hostile-{}.jsonl",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::write(&path, &file).unwrap();
    let out = db
        .run(&["--json", "enqueue", "--file", path.to_str().unwrap()])
        .await;
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "lines were rejected: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let loaded: Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    assert_eq!(loaded["created"], 1, "{loaded}");
    let rejected: Vec<u64> = loaded["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(rejected, vec![1, 2, 3, 4, 5], "{loaded}");
    let good = db
        .json(&[
            "jobs",
            "list",
            "--meta",
            "{\"q\": \"'; DROP TABLE drover.jobs; --\"}",
        ])
        .await;
    added.insert(good["jobs"][0]["id"].as_str().unwrap().to_owned());

    assert_tables_unchanged(&before, &dump_tables(db.pool()).await, &added);
}

// ------------------------------------------------------------------------------------------
// The HTTP API over real HTTP.

/// `text` percent-encoded for a query string or path segment.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_through_the_http_api_changes_nothing() {
    const TEST: &str = "hostile_input_through_the_http_api_changes_nothing";
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::None).await;
    let pg = db.store().await;
    seed(&pg).await;
    let store: Arc<dyn JobStore> = Arc::new(pg.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let state = drover_http::ApiState::new(
        store.clone(),
        drover_http::AuthMode::InsecureNoAuth,
        drover_http::ApiConfig::default(),
        None,
    );
    let serving = tokio::spawn(drover_http::serve(
        listener,
        drover_http::router(state),
        shutdown.clone(),
    ));
    let before = dump(&pg).await;
    let client = reqwest::Client::new();
    let post = |path: &str, body: Vec<u8>| {
        client
            .post(format!("{base}{path}"))
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };

    // Bodies: invalid UTF-8, numbers that do not fit, NUL, absurd nesting, a bad batch.
    let deep = format!(
        "{{\"kind\": \"a\", \"args\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let bodies: Vec<(Vec<u8>, &str)> = vec![
        (
            b"{\"kind\": \"a\", \"args\": {\"s\": \"\xff\"}}".to_vec(),
            "/v1/jobs",
        ),
        (
            b"{\"kind\": \"a\", \"priority\": 1e400}".to_vec(),
            "/v1/jobs",
        ),
        (
            b"{\"kind\": \"a\", \"priority\": -9223372036854775809}".to_vec(),
            "/v1/jobs",
        ),
        (
            b"{\"kind\": \"a\", \"delay_ms\": 18446744073709551616}".to_vec(),
            "/v1/jobs",
        ),
        (
            b"{\"kind\": \"a\", \"args\": {\"s\": \"\\u0000\"}}".to_vec(),
            "/v1/jobs",
        ),
        (
            b"{\"kind\": \"a\", \"run_at\": \"+10000-01-01T00:00:00Z\"}".to_vec(),
            "/v1/jobs",
        ),
        (
            b"{\"kind\": \"a\", \"run_at\": \"1969-12-31T23:59:59Z\"}".to_vec(),
            "/v1/jobs",
        ),
        (deep.into_bytes(), "/v1/jobs"),
        (
            b"{\"jobs\": [{\"kind\": \"a\"}, {\"kind\": \"a\", \"max_attempts\": 0}]}".to_vec(),
            "/v1/jobs/batch",
        ),
    ];
    for (body, path) in bodies {
        let answer = post(path, body.clone()).await.unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        assert_eq!(status, 400, "{shown}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["code"], "invalid_input", "{shown}: {text}");
    }

    // Query strings: unknown states and kinds, bad meta, bad numbers, unknown filters.
    let hostile = encode(HOSTILE[0]);
    let queries = [
        ("state=sleeping", "state"),
        (&format!("state={hostile}") as &str, "state"),
        ("kind=bad%20kind", "kind"),
        ("queue=%00", "queue"),
        (&format!("tenant={hostile}"), "tenant"),
        ("meta=not-json", "meta"),
        ("meta=%5B1%5D", "meta"),
        (&format!("meta={}", encode("{\"m\": \"\\u0000\"}")), "meta"),
        ("limit=-1", "limit"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=99999999999999999999", "limit"),
        (&format!("cursor={hostile}"), "cursor"),
        (&format!("{hostile}=1"), HOSTILE[0]),
    ];
    for (query, field) in queries {
        let answer = client
            .get(format!("{base}/v1/jobs?{query}"))
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        assert_eq!(status, 400, "{query}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["field"], field, "{query}: {text}");
    }
    // Paths: bad ids and queue names, unknown jobs, live jobs.
    let seeded = pg.jobs_list(ListJobs::default()).await.unwrap().jobs[0].id;
    for (method, path, status) in [
        ("GET", format!("/v1/jobs/{hostile}"), 400),
        ("POST", format!("/v1/jobs/{hostile}/cancel"), 400),
        ("POST", format!("/v1/jobs/{}/cancel", JobId::new_v7()), 404),
        ("POST", format!("/v1/jobs/{seeded}/retry"), 409),
        ("POST", format!("/v1/queues/{hostile}/pause"), 400),
    ] {
        let request = if method == "GET" {
            client.get(format!("{base}{path}"))
        } else {
            client.post(format!("{base}{path}"))
        };
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status().as_u16(), status, "{method} {path}");
    }

    // Defined behaviour: metacharacters in meta filters match exactly; edge times accepted.
    for (i, text) in HOSTILE.iter().enumerate() {
        let filter = encode(&json!({"text": text}).to_string());
        let page: Value = client
            .get(format!("{base}/v1/jobs?include=args&meta={filter}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let found: Vec<&Value> = page["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| &j["args"]["n"])
            .collect();
        assert_eq!(found, vec![&json!(i)], "meta filter {text:?}");
    }
    let none: Value = client
        .get(format!("{base}/v1/jobs?kind=no.such.kind"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(none["jobs"], json!([]));
    let mut added = BTreeSet::new();
    for run_at in ["1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z"] {
        let answer = post(
            "/v1/jobs",
            json!({"kind": "edge", "run_at": run_at})
                .to_string()
                .into_bytes(),
        )
        .await
        .unwrap();
        assert_eq!(answer.status().as_u16(), 202, "{run_at}");
        let body: Value = answer.json().await.unwrap();
        added.insert(body["job"]["id"].as_str().unwrap().to_owned());
    }

    assert_unchanged(&before, &dump(&pg).await, &added);
    shutdown.cancel();
    serving.await.unwrap().unwrap();
    pg.close().await;
}

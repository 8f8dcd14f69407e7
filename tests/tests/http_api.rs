//! The HTTP API (issue #6) over real HTTP: a reqwest client (and raw HTTP/1.1 where a client
//! library hides the detail) against `drover_http::serve` on a bound port, on the memory store
//! and on PostgreSQL.
//!
//! Each case is one `async fn(&Env)`; [`http_cases!`] stamps it once per store
//! (`memory::<case>` and `postgres::<case>`), so the same assertions hold on both. Cases that
//! need SQL (an unmigrated database, an unreachable one, jsonb `@>`) run on PostgreSQL only.
//! PostgreSQL tests need `DROVER_TEST_DATABASE_URL`; see `http_api/harness.rs` for isolation
//! (a database per test) and the skip rule.
//!
//! Every status code of the API is answered here: 200, 202, 400, 401, 403, 404, 405, 409, 413,
//! 415, 429 and 503.

#[path = "http_api/harness.rs"]
mod harness;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobState, Quotas, StoreConfig, WorkerId, WorkerRegistration};
use drover_http::ApiConfig;
use harness::*;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

// ------------------------------------------------------------------------------------------
// Enqueue and idempotency (issue #6 item 1)

/// `POST /v1/jobs` answers 202 with the committed job, which `GET` and the store then show.
async fn enqueue_returns_202_with_the_committed_job(env: &Env) {
    let api = env.api(unbounded()).await;
    let body = json!({
        "kind": "email.send",
        "args": {"to": "someone@example.com", "n": [1, 2]},
        "queue": "mail",
        "priority": -3,
        "max_attempts": 5,
        "meta": {"customer": "acme"},
        "delay_ms": 60_000,
        "unique_key": "welcome:42",
        "limit_keys": ["customer:42"],
    });
    let answer = api.post(Some(PRODUCER_A), "/v1/jobs", &body).await;
    assert_eq!(answer.status, 202, "{}", answer.text);
    assert_eq!(answer.json["status"], "created");
    let job = answer.job();
    assert_eq!(job["kind"], "email.send");
    assert_eq!(job["queue"], "mail");
    assert_eq!(job["tenant"], TENANT_A);
    assert_eq!(job["state"], "queued");
    assert_eq!(job["attempt"], 0);
    assert_eq!(job["max_attempts"], 5);
    assert_eq!(job["priority"], -3);
    assert_eq!(job["args"], body["args"]);
    assert_eq!(job["meta"], body["meta"]);
    assert_eq!(job["unique_key"], "welcome:42");
    assert_eq!(job["limit_keys"], json!(["customer:42"]));
    let run_at: chrono::DateTime<chrono::Utc> = job["run_at"].as_str().unwrap().parse().unwrap();
    let created_at: chrono::DateTime<chrono::Utc> =
        job["created_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        (run_at - created_at).num_seconds(),
        60,
        "delay_ms is from the store's now"
    );

    // Committed: the store has it, and GET shows the same job.
    let id = answer.job_id();
    let stored = api.stored(&id).await;
    assert_eq!(stored.state, JobState::Queued);
    assert_eq!(stored.args, body["args"]);
    let got = api.get(Some(PRODUCER_A), &format!("/v1/jobs/{id}")).await;
    assert_eq!(got.status, 200, "{}", got.text);
    for field in [
        "id",
        "kind",
        "queue",
        "tenant",
        "state",
        "args",
        "meta",
        "max_attempts",
    ] {
        assert_eq!(got.job()[field], job[field], "{field}");
    }
}

/// The same key with the same request replays the stored job (200); with another request, or
/// a key stored without a request hash, answers 409 saying why. Keys are per tenant.
async fn idempotency_key_replays_and_conflicts(env: &Env) {
    let api = env.api(unbounded()).await;
    let body = json!({"kind": "invoice.render", "args": {"invoice": 7}});
    let first = api.enqueue_with_key(PRODUCER_A, "invoice-7", &body).await;
    assert_eq!(first.status, 202, "{}", first.text);
    let id = first.job_id();

    let replay = api.enqueue_with_key(PRODUCER_A, "invoice-7", &body).await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.json["status"], "replayed");
    assert_eq!(replay.job_id(), id);
    assert_eq!(replay.job()["state"], "queued");

    // The key in the body as well as the header: the same request.
    let mut with_body_key = body.clone();
    with_body_key["idempotency_key"] = json!("invoice-7");
    let replay = api
        .enqueue_with_key(PRODUCER_A, "invoice-7", &with_body_key)
        .await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.job_id(), id);
    with_body_key["idempotency_key"] = json!("invoice-8");
    api.enqueue_with_key(PRODUCER_A, "invoice-7", &with_body_key)
        .await
        .assert_error(400, "invalid_input", Some("idempotency_key"));

    let other = json!({"kind": "invoice.render", "args": {"invoice": 8}});
    let conflict = api.enqueue_with_key(PRODUCER_A, "invoice-7", &other).await;
    conflict.assert_error(409, "conflict", None);
    assert!(
        conflict.message().contains("different request"),
        "{}",
        conflict.text
    );

    // Another tenant's identical key is its own.
    let b = api.enqueue_with_key(PRODUCER_B, "invoice-7", &body).await;
    assert_eq!(b.status, 202, "{}", b.text);
    assert_ne!(b.job_id(), id);

    // A key stored without a request hash (a row from before hashes were kept).
    let legacy = api
        .enqueue_with_key(PRODUCER_A, "legacy-1", &json!({"kind": "legacy"}))
        .await;
    assert_eq!(legacy.status, 202);
    env.forget_request_hash(legacy.job_id().parse().unwrap())
        .await;
    let conflict = api
        .enqueue_with_key(PRODUCER_A, "legacy-1", &json!({"kind": "legacy"}))
        .await;
    conflict.assert_error(409, "conflict", None);
    assert!(
        conflict.message().contains("without a request hash"),
        "{}",
        conflict.text
    );

    assert_eq!(
        api.all_jobs().await.len(),
        3,
        "no job was stored by a refusal"
    );
}

/// A replay shows the job's current state, terminal states included.
async fn idempotency_replay_shows_terminal_states(env: &Env) {
    let api = env.api(unbounded()).await;
    let body = json!({"kind": "report.build", "args": {"month": "2026-01"}});

    let succeeded = api.enqueue_with_key(OPERATOR_A, "report-1", &body).await;
    assert_eq!(succeeded.status, 202);
    api.run_job(&succeeded.job_id(), true).await;
    let replay = api.enqueue_with_key(OPERATOR_A, "report-1", &body).await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.json["status"], "replayed");
    assert_eq!(replay.job_id(), succeeded.job_id());
    assert_eq!(replay.job()["state"], "succeeded");
    assert_eq!(replay.job()["result"], json!({"done": true}));

    let failed = api.enqueue_with_key(OPERATOR_A, "report-2", &body).await;
    api.run_job(&failed.job_id(), false).await;
    let replay = api.enqueue_with_key(OPERATOR_A, "report-2", &body).await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.job()["state"], "failed");

    let cancelled = api.enqueue_with_key(OPERATOR_A, "report-3", &body).await;
    let cancel = api
        .post_empty(
            Some(OPERATOR_A),
            &format!("/v1/jobs/{}/cancel", cancelled.job_id()),
        )
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    let replay = api.enqueue_with_key(OPERATOR_A, "report-3", &body).await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.job()["state"], "cancelled");
    assert_eq!(api.all_jobs().await.len(), 3);
}

/// 50 concurrent POSTs with one `Idempotency-Key`: one job, and 50 answers that name it.
async fn concurrent_posts_with_one_key_create_one_job(env: &Env) {
    let api = env.api(unbounded()).await;
    let body = json!({"kind": "payment.capture", "args": {"order": 99}});
    let answers = futures::future::join_all(
        (0..50).map(|_| api.enqueue_with_key(PRODUCER_A, "capture-order-99", &body)),
    )
    .await;
    let ids: HashSet<String> = answers.iter().map(|a| a.job_id()).collect();
    assert_eq!(ids.len(), 1, "every answer names the same job");
    let created = answers.iter().filter(|a| a.status == 202).count();
    let replayed = answers
        .iter()
        .filter(|a| a.status == 200 && a.json["status"] == "replayed")
        .count();
    assert_eq!(
        (created, replayed),
        (1, 49),
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    let jobs = api.all_jobs().await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(Some(&jobs[0].id.to_string()), ids.iter().next());
}

/// A unique key held by a live job answers 200 `duplicate` with that job.
async fn unique_key_duplicate_answers_200(env: &Env) {
    let api = env.api(unbounded()).await;
    let body = json!({"kind": "sync.account", "unique_key": "account:5"});
    let first = api.enqueue_ok(PRODUCER_A, &body).await;
    let again = api
        .post(
            Some(PRODUCER_A),
            "/v1/jobs",
            &json!({"kind": "sync.account", "unique_key": "account:5", "args": {"v": 2}}),
        )
        .await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json["status"], "duplicate");
    assert_eq!(again.job_id(), first);
    assert_eq!(api.all_jobs().await.len(), 1);
}

/// `POST /v1/jobs/batch`: all or nothing, answers in order, fields named `jobs[i].field`.
async fn batch_enqueue(env: &Env) {
    let api = env.api(unbounded()).await;
    let batch = json!({"jobs": [
        {"kind": "a", "idempotency_key": "batch-1"},
        {"kind": "b", "queue": "other"},
        {"kind": "c", "unique_key": "only-one"},
    ]});
    let answer = api.post(Some(PRODUCER_A), "/v1/jobs/batch", &batch).await;
    assert_eq!(answer.status, 202, "{}", answer.text);
    let results = answer.json["results"].as_array().unwrap();
    let kinds: Vec<&str> = results
        .iter()
        .map(|r| r["job"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["a", "b", "c"]);
    assert!(results.iter().all(|r| r["status"] == "created"));
    assert!(results.iter().all(|r| r["job"]["tenant"] == TENANT_A));

    // Replay of the keyed job and duplicate of the unique one: nothing new, 200.
    let again = json!({"jobs": [
        {"kind": "a", "idempotency_key": "batch-1"},
        {"kind": "c", "unique_key": "only-one"},
    ]});
    let answer = api.post(Some(PRODUCER_A), "/v1/jobs/batch", &again).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let statuses: Vec<&str> = answer.json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["replayed", "duplicate"]);
    assert_eq!(
        answer.json["results"][0]["job"]["id"],
        results[0]["job"]["id"]
    );

    // One bad item refuses the whole batch, naming it.
    let bad = json!({"jobs": [{"kind": "ok"}, {"kind": "ok", "queue": "no spaces"}]});
    api.post(Some(PRODUCER_A), "/v1/jobs/batch", &bad)
        .await
        .assert_error(400, "invalid_input", Some("jobs[1].queue"));
    let bad = json!({"jobs": [{"kind": "ok"}, {"kind": "ok", "args": {"s": "nul\u{0}"}}]});
    api.post(Some(PRODUCER_A), "/v1/jobs/batch", &bad)
        .await
        .assert_error(400, "invalid_input", Some("jobs[1].args"));
    let bad = json!({"jobs": [{"kind": "ok"}, ["ok"]]});
    api.post(Some(PRODUCER_A), "/v1/jobs/batch", &bad)
        .await
        .assert_error(400, "invalid_input", Some("jobs[1]"));
    api.post(Some(PRODUCER_A), "/v1/jobs/batch", &json!({"jobs": []}))
        .await
        .assert_error(400, "invalid_input", Some("jobs"));
    api.send(
        reqwest::Method::POST,
        "/v1/jobs/batch",
        Some(PRODUCER_A),
        |r| r.header("Idempotency-Key", "k").json(&batch),
    )
    .await
    .assert_error(400, "invalid_input", Some("idempotency_key"));
    let exec =
        json!({"jobs": [{"kind": "ok"}, {"kind": "exec", "args": {"program": "/bin/true"}}]});
    api.post(Some(PRODUCER_A), "/v1/jobs/batch", &exec)
        .await
        .assert_error(403, "forbidden", Some("jobs[1].kind"));
    let other_tenant = json!({"jobs": [{"kind": "ok", "tenant": TENANT_B}]});
    api.post(Some(PRODUCER_A), "/v1/jobs/batch", &other_tenant)
        .await
        .assert_error(403, "forbidden", Some("jobs[0].tenant"));

    assert_eq!(
        api.all_jobs().await.len(),
        3,
        "refused batches store nothing"
    );
}

// ------------------------------------------------------------------------------------------
// Reading and changing jobs (issue #6 item 2)

/// `GET /v1/jobs` filters by queue, state, kind and meta containment, pages newest first with
/// a cursor, and names the field of a bad filter.
async fn list_filters_and_paginates(env: &Env) {
    let api = env.api(unbounded()).await;
    let j1 = api
        .enqueue_ok(
            PRODUCER_A,
            &json!({"kind": "a.one", "queue": "q1", "meta": {"customer": "acme", "tags": ["x", "y"]}}),
        )
        .await;
    let j2 = api
        .enqueue_ok(
            PRODUCER_A,
            &json!({"kind": "a.two", "queue": "q1", "meta": {"customer": "globex"}}),
        )
        .await;
    let j3 = api
        .enqueue_ok(
            PRODUCER_A,
            &json!({"kind": "a.one", "queue": "q2", "meta": {"customer": "acme", "n": 1}}),
        )
        .await;
    let j4 = api
        .enqueue_ok(PRODUCER_A, &json!({"kind": "a.one", "queue": "q1"}))
        .await;
    let cancel = api
        .post_empty(Some(PRODUCER_A), &format!("/v1/jobs/{j4}/cancel"))
        .await;
    assert_eq!(cancel.status, 200);
    let mut all = vec![j1.clone(), j2.clone(), j3.clone(), j4.clone()];
    for _ in 0..3 {
        all.push(
            api.enqueue_ok(PRODUCER_A, &json!({"kind": "b", "queue": "q3"}))
                .await,
        );
    }

    let list = |query: Vec<(&'static str, String)>| {
        let api = &api;
        async move {
            let answer = api
                .send(reqwest::Method::GET, "/v1/jobs", Some(PRODUCER_A), |r| {
                    r.query(&query)
                })
                .await;
            assert_eq!(answer.status, 200, "{query:?}: {}", answer.text);
            let ids: BTreeSet<String> = answer.json["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_owned())
                .collect();
            ids
        }
    };
    let set = |ids: &[&String]| ids.iter().map(|s| (*s).clone()).collect::<BTreeSet<_>>();
    assert_eq!(
        list(vec![("queue", "q1".into())]).await,
        set(&[&j1, &j2, &j4])
    );
    assert_eq!(
        list(vec![("kind", "a.one".into())]).await,
        set(&[&j1, &j3, &j4])
    );
    assert_eq!(list(vec![("state", "cancelled".into())]).await, set(&[&j4]));
    assert_eq!(
        list(vec![("meta", r#"{"customer":"acme"}"#.into())]).await,
        set(&[&j1, &j3])
    );
    assert_eq!(
        list(vec![("meta", r#"{"tags":["y"]}"#.into())]).await,
        set(&[&j1])
    );
    assert_eq!(
        list(vec![("meta", r#"{"n":1.0}"#.into())]).await,
        set(&[&j3])
    );
    assert_eq!(
        list(vec![
            ("queue", "q1".into()),
            ("kind", "a.one".into()),
            ("state", "queued".into())
        ])
        .await,
        set(&[&j1])
    );
    assert_eq!(list(vec![("meta", "{}".into())]).await.len(), 7);

    // Pages of two, newest first, until no cursor is given.
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![("limit", "2".to_owned())];
        if let Some(c) = &cursor {
            query.push(("cursor", c.clone()));
        }
        let page = api
            .send(reqwest::Method::GET, "/v1/jobs", Some(PRODUCER_A), |r| {
                r.query(&query)
            })
            .await;
        assert_eq!(page.status, 200, "{}", page.text);
        let jobs = page.json["jobs"].as_array().unwrap();
        assert!(jobs.len() <= 2);
        seen.extend(jobs.iter().map(|j| j["id"].as_str().unwrap().to_owned()));
        match page.json["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
        assert!(seen.len() <= 7, "pagination terminates");
    }
    let mut expected = all.clone();
    expected.sort();
    expected.reverse();
    assert_eq!(seen, expected, "every job once, newest first");

    for (query, field) in [
        (vec![("state", "bogus")], "state"),
        (vec![("limit", "0")], "limit"),
        (vec![("limit", "1001")], "limit"),
        (vec![("limit", "-1")], "limit"),
        (vec![("cursor", "not-a-job-id")], "cursor"),
        (vec![("meta", "[1]")], "meta"),
        (vec![("meta", "{not json")], "meta"),
        (vec![("meta", "{\"k\":\"\u{0}\"}")], "meta"),
        (vec![("queue", "no spaces")], "queue"),
        (vec![("kind", "")], "kind"),
        (vec![("colour", "red")], "colour"),
    ] {
        api.send(reqwest::Method::GET, "/v1/jobs", Some(PRODUCER_A), |r| {
            r.query(&query)
        })
        .await
        .assert_error(400, "invalid_input", Some(field));
    }
}

/// Get, cancel and retry: 200s, 404 for an unknown job, 400 for a malformed id, 409 for a
/// transition the state machine refuses; retry keeps the id and args and resets the attempt
/// budget.
async fn get_cancel_and_retry(env: &Env) {
    let api = env.api(unbounded()).await;
    let unknown = "0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79";
    api.get(Some(OPERATOR_A), &format!("/v1/jobs/{unknown}"))
        .await
        .assert_error(404, "not_found", None);
    api.post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{unknown}/cancel"))
        .await
        .assert_error(404, "not_found", None);
    api.post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{unknown}/retry"))
        .await
        .assert_error(404, "not_found", None);
    api.get(Some(OPERATOR_A), "/v1/jobs/not-a-uuid")
        .await
        .assert_error(400, "invalid_input", Some("id"));
    api.post_empty(Some(OPERATOR_A), "/v1/jobs/%FF%FE/cancel")
        .await
        .assert_error(400, "invalid_input", Some("path"));

    let args = json!({"file": "a.csv"});
    let id = api
        .enqueue_ok(
            PRODUCER_A,
            &json!({"kind": "import", "args": args, "max_attempts": 2}),
        )
        .await;
    let retry_path = format!("/v1/jobs/{id}/retry");
    let cancel_path = format!("/v1/jobs/{id}/cancel");

    // Retry of a queued job is refused: it never makes a copy.
    api.post_empty(Some(OPERATOR_A), &retry_path)
        .await
        .assert_error(409, "invalid_transition", None);

    let cancel = api.post_empty(Some(PRODUCER_A), &cancel_path).await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    assert_eq!(cancel.json["effect"], "cancelled");
    assert_eq!(cancel.job()["state"], "cancelled");
    api.post_empty(Some(PRODUCER_A), &cancel_path)
        .await
        .assert_error(409, "invalid_transition", None);

    let retried = api.post_empty(Some(OPERATOR_A), &retry_path).await;
    assert_eq!(retried.status, 200, "{}", retried.text);
    assert_eq!(retried.job_id(), id);
    assert_eq!(retried.job()["state"], "queued");
    assert_eq!(retried.job()["args"], args);

    // Spend the attempt budget, then retry: attempt back to 0, same id and args.
    api.run_job(&id, false).await;
    let failed = api.stored(&id).await;
    assert_eq!((failed.state, failed.attempt), (JobState::Failed, 1));
    let retried = api.post_empty(Some(OPERATOR_A), &retry_path).await;
    assert_eq!(retried.status, 200, "{}", retried.text);
    assert_eq!(retried.job()["attempt"], 0);
    assert_eq!(retried.job()["max_attempts"], 2);
    assert_eq!(retried.job()["args"], args);
    assert_eq!(api.all_jobs().await.len(), 1, "retry never copies a job");

    // Cancel of a running job asks its handler to stop.
    let claimed = api
        .store
        .jobs_claim(drover_core::ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: vec![queue("default")],
            kinds: vec![kind("import")],
            limit: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let cancel = api.post_empty(Some(PRODUCER_A), &cancel_path).await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    assert_eq!(cancel.json["effect"], "requested");
    assert_eq!(cancel.job()["state"], "running");
    assert_eq!(cancel.job()["cancel_requested"], true);
    assert!(cancel.json["message"]
        .as_str()
        .unwrap()
        .contains("succeeded"));
}

/// Pause and resume (operator only) and the queue list with counts.
async fn queues_pause_resume_and_list(env: &Env) {
    let api = env.api(unbounded()).await;
    api.enqueue_ok(PRODUCER_A, &json!({"kind": "send", "queue": "mail"}))
        .await;
    let paused = api
        .post_empty(Some(OPERATOR_A), "/v1/queues/mail/pause")
        .await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    assert_eq!(paused.json["name"], "mail");
    assert_eq!(paused.json["paused"], true);
    assert!(paused.json["paused_at"].is_string());
    let again = api
        .post_empty(Some(OPERATOR_A), "/v1/queues/mail/pause")
        .await;
    assert_eq!(again.status, 200, "pause is idempotent: {}", again.text);

    let queues = api.get(Some(PRODUCER_A), "/v1/queues").await;
    assert_eq!(queues.status, 200, "{}", queues.text);
    let mail = queues.json["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "mail")
        .cloned()
        .expect("mail listed");
    assert_eq!(mail["paused"], true);
    assert_eq!(mail["counts"]["queued"], 1);
    assert_eq!(mail["ready"], 1);

    let resumed = api
        .post_empty(Some(OPERATOR_ALL), "/v1/queues/mail/resume")
        .await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(resumed.json["paused"], false);
    let queues = api.get(Some(PRODUCER_A), "/v1/queues").await;
    assert!(queues.json["queues"]
        .as_array()
        .unwrap()
        .iter()
        .any(|q| q["name"] == "mail" && q["paused"] == false));

    api.post_empty(Some(OPERATOR_A), "/v1/queues/no%20spaces/pause")
        .await
        .assert_error(400, "invalid_input", Some("queue"));
}

/// `GET /v1/workers` lists registered workers.
async fn workers_are_listed(env: &Env) {
    let api = env.api(unbounded()).await;
    api.store
        .worker_register(WorkerRegistration {
            id: WorkerId::parse("worker-7").unwrap(),
            host: "host-a".to_owned(),
            pid: 4242,
            queues: vec![queue("default"), queue("mail")],
        })
        .await
        .unwrap();
    let workers = api.get(Some(PRODUCER_B), "/v1/workers").await;
    assert_eq!(workers.status, 200, "{}", workers.text);
    let list = workers.json["workers"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], "worker-7");
    assert_eq!(list[0]["pid"], 4242);
    assert_eq!(list[0]["queues"], json!(["default", "mail"]));
}

/// `/v1/ready`, `/metrics` and `/v1/openapi.json` answer without a token; metrics are
/// Prometheus text with the DESIGN.md names and no tenant or args in them.
async fn ready_metrics_and_openapi_need_no_token(env: &Env) {
    let api = env.api(unbounded()).await;
    let ready = api.get(None, "/v1/ready").await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    assert_eq!(ready.json["status"], "ready");
    let ready = api.get(Some("not-a-configured-token"), "/v1/ready").await;
    assert_eq!(ready.status, 200, "a stray token does not matter");

    api.enqueue_ok(
        PRODUCER_A,
        &json!({"kind": "send", "queue": "mail", "args": {"secret": "args-marker-1"}}),
    )
    .await;
    api.post_empty(Some(OPERATOR_A), "/v1/queues/other/pause")
        .await;
    let metrics = api.get(None, "/metrics").await;
    assert_eq!(metrics.status, 200, "{}", metrics.text);
    let content_type = metrics.headers["content-type"].to_str().unwrap();
    assert!(content_type.contains("text"), "{content_type}");
    for line in [
        r#"drover_jobs{queue="mail",state="queued"} 1"#,
        r#"drover_jobs_running{queue="mail"} 0"#,
        r#"drover_queue_paused{queue="other"} 1"#,
        r#"drover_queue_paused{queue="mail"} 0"#,
        "# TYPE drover_queue_lag_seconds gauge",
    ] {
        assert!(metrics.text.contains(line), "{line} in\n{}", metrics.text);
    }
    assert!(!metrics.text.contains(TENANT_A));
    assert!(!metrics.text.contains("args-marker-1"));

    let doc = api.get(None, "/v1/openapi.json").await;
    assert_eq!(doc.status, 200);
    assert!(doc.json["openapi"].as_str().unwrap().starts_with("3."));
}

// ------------------------------------------------------------------------------------------
// Quotas (issue #6 item 3)

/// Over `DROVER_MAX_PENDING`: 429 with `Retry-After` and a body naming the limit; nothing
/// stored.
async fn global_quota_answers_429(env: &Env) {
    let api = env
        .api(StoreConfig {
            quotas: Quotas {
                max_pending: Some(2),
                max_tenant_pending: None,
            },
            ..StoreConfig::default()
        })
        .await;
    api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    api.enqueue_ok(PRODUCER_B, &json!({"kind": "k"})).await;
    let refused = api
        .post(Some(PRODUCER_A), "/v1/jobs", &json!({"kind": "k"}))
        .await;
    refused.assert_error(429, "quota_exceeded", None);
    assert_eq!(refused.headers["retry-after"], "5");
    let details = &refused.json["error"]["details"];
    assert_eq!(details["limit"], "max_pending");
    assert_eq!(details["setting"], "DROVER_MAX_PENDING");
    assert_eq!(
        (details["current"].as_u64(), details["max"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(
        refused.message().contains("max_pending"),
        "{}",
        refused.text
    );
    let batch = api
        .post(
            Some(PRODUCER_B),
            "/v1/jobs/batch",
            &json!({"jobs": [{"kind": "k"}]}),
        )
        .await;
    batch.assert_error(429, "quota_exceeded", None);
    assert!(batch.headers.contains_key("retry-after"));
    assert_eq!(
        api.all_jobs().await.len(),
        2,
        "nothing stored over the quota"
    );
}

/// Over `DROVER_MAX_TENANT_PENDING`: 429 naming the limit and tenant; other tenants go on.
async fn tenant_quota_answers_429(env: &Env) {
    let api = env
        .api(StoreConfig {
            quotas: Quotas {
                max_pending: None,
                max_tenant_pending: Some(1),
            },
            ..StoreConfig::default()
        })
        .await;
    api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    let refused = api
        .post(Some(PRODUCER_A), "/v1/jobs", &json!({"kind": "k"}))
        .await;
    refused.assert_error(429, "quota_exceeded", None);
    assert!(refused.headers.contains_key("retry-after"));
    let details = &refused.json["error"]["details"];
    assert_eq!(details["limit"], "max_tenant_pending");
    assert_eq!(details["setting"], "DROVER_MAX_TENANT_PENDING");
    assert_eq!(details["tenant"], TENANT_A);
    api.enqueue_ok(PRODUCER_B, &json!({"kind": "k"})).await;
    assert_eq!(api.all_jobs().await.len(), 2);
}

/// An operator retry re-checks the quotas: 429 and the job stays as it was.
async fn retry_rechecks_quotas(env: &Env) {
    let api = env
        .api(StoreConfig {
            quotas: Quotas {
                max_pending: None,
                max_tenant_pending: Some(1),
            },
            ..StoreConfig::default()
        })
        .await;
    let first = api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    let cancel = api
        .post_empty(Some(PRODUCER_A), &format!("/v1/jobs/{first}/cancel"))
        .await;
    assert_eq!(cancel.status, 200);
    api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    let refused = api
        .post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{first}/retry"))
        .await;
    refused.assert_error(429, "quota_exceeded", None);
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(api.stored(&first).await.state, JobState::Cancelled);
}

// ------------------------------------------------------------------------------------------
// Authentication and authorization (issue #6 item 4)

/// Missing, wrong or malformed tokens answer 401 with a Bearer challenge; the scheme is
/// case-insensitive.
async fn missing_or_wrong_token_answers_401(env: &Env) {
    let api = env.api(unbounded()).await;
    let no_token = api.get(None, "/v1/jobs").await;
    no_token.assert_error(401, "unauthorized", None);
    assert_eq!(no_token.headers["www-authenticate"], "Bearer");
    api.get(Some("wrong-token-0000000000"), "/v1/jobs")
        .await
        .assert_error(401, "unauthorized", None);
    api.get(Some(&format!("{PRODUCER_A}x")), "/v1/jobs")
        .await
        .assert_error(401, "unauthorized", None);
    api.get(Some(&PRODUCER_A[..PRODUCER_A.len() - 1]), "/v1/jobs")
        .await
        .assert_error(401, "unauthorized", None);
    api.send(reqwest::Method::GET, "/v1/jobs", None, |r| {
        r.header("Authorization", format!("Basic {PRODUCER_A}"))
    })
    .await
    .assert_error(401, "unauthorized", None);
    api.send(reqwest::Method::GET, "/v1/jobs", None, |r| {
        r.header("Authorization", PRODUCER_A)
    })
    .await
    .assert_error(401, "unauthorized", None);
    let lower = api
        .send(reqwest::Method::GET, "/v1/jobs", None, |r| {
            r.header("Authorization", format!("bearer {PRODUCER_A}"))
        })
        .await;
    assert_eq!(lower.status, 200, "{}", lower.text);

    let refused = api.post(None, "/v1/jobs", &json!({"kind": "k"})).await;
    refused.assert_error(401, "unauthorized", None);
    assert!(
        api.all_jobs().await.is_empty(),
        "an unauthenticated enqueue stores nothing"
    );
}

/// A producer may not retry, pause, resume, enqueue `exec`, or act for another tenant: 403.
async fn producer_is_forbidden_operator_actions(env: &Env) {
    let api = env.api(unbounded()).await;
    let id = api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    api.post_empty(Some(PRODUCER_A), &format!("/v1/jobs/{id}/cancel"))
        .await;
    api.post_empty(Some(PRODUCER_A), &format!("/v1/jobs/{id}/retry"))
        .await
        .assert_error(403, "forbidden", None);
    assert_eq!(api.stored(&id).await.state, JobState::Cancelled);
    api.post_empty(Some(PRODUCER_A), "/v1/queues/default/pause")
        .await
        .assert_error(403, "forbidden", None);
    api.post_empty(Some(PRODUCER_A), "/v1/queues/default/resume")
        .await
        .assert_error(403, "forbidden", None);
    let queues = api.get(Some(PRODUCER_A), "/v1/queues").await;
    assert!(
        !queues.json["queues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["paused"] == true),
        "the refused pause changed nothing"
    );

    let exec = json!({"kind": "exec", "args": {"program": "/bin/echo", "args": ["hi"]}});
    api.post(Some(PRODUCER_A), "/v1/jobs", &exec)
        .await
        .assert_error(403, "forbidden", Some("kind"));
    assert_eq!(api.all_jobs().await.len(), 1, "the exec job was not stored");
    let by_operator = api.post(Some(OPERATOR_A), "/v1/jobs", &exec).await;
    assert_eq!(by_operator.status, 202, "{}", by_operator.text);

    api.post(
        Some(PRODUCER_A),
        "/v1/jobs",
        &json!({"kind": "k", "tenant": TENANT_B}),
    )
    .await
    .assert_error(403, "forbidden", Some("tenant"));
    api.send(reqwest::Method::GET, "/v1/jobs", Some(PRODUCER_A), |r| {
        r.query(&[("tenant", TENANT_B)])
    })
    .await
    .assert_error(403, "forbidden", Some("tenant"));
    let retried = api
        .post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{id}/retry"))
        .await;
    assert_eq!(retried.status, 200, "{}", retried.text);
}

/// Tenant A cannot list, get, cancel or retry tenant B's jobs (404, as for a missing job);
/// B and an all-tenant operator see them.
async fn tenants_are_isolated(env: &Env) {
    let api = env.api(unbounded()).await;
    let b_queued = api
        .enqueue_ok(
            PRODUCER_B,
            &json!({"kind": "b.work", "meta": {"owner": "b"}}),
        )
        .await;
    let b_done = api.enqueue_ok(PRODUCER_B, &json!({"kind": "b.work"})).await;
    let cancel = api
        .post_empty(Some(PRODUCER_B), &format!("/v1/jobs/{b_done}/cancel"))
        .await;
    assert_eq!(cancel.status, 200);
    let a_job = api.enqueue_ok(PRODUCER_A, &json!({"kind": "a.work"})).await;

    for token in [PRODUCER_A, OPERATOR_A] {
        let listed = api.get(Some(token), "/v1/jobs").await;
        assert_eq!(listed.status, 200);
        let ids: Vec<&str> = listed.json["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [a_job.as_str()], "tenant A sees only its job");
        let filtered = api
            .send(reqwest::Method::GET, "/v1/jobs", Some(token), |r| {
                r.query(&[("kind", "b.work"), ("meta", r#"{"owner":"b"}"#)])
            })
            .await;
        assert_eq!(filtered.json["jobs"], json!([]));
        api.send(reqwest::Method::GET, "/v1/jobs", Some(token), |r| {
            r.query(&[("tenant", TENANT_B)])
        })
        .await
        .assert_error(403, "forbidden", Some("tenant"));

        for id in [&b_queued, &b_done] {
            let got = api.get(Some(token), &format!("/v1/jobs/{id}")).await;
            got.assert_error(404, "not_found", None);
            assert_eq!(got.message(), format!("job {id} not found"));
            api.post_empty(Some(token), &format!("/v1/jobs/{id}/cancel"))
                .await
                .assert_error(404, "not_found", None);
        }
    }
    api.post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{b_done}/retry"))
        .await
        .assert_error(404, "not_found", None);
    assert_eq!(api.stored(&b_queued).await.state, JobState::Queued);
    assert_eq!(api.stored(&b_done).await.state, JobState::Cancelled);

    // Tenant B sees its own; an all-tenant operator sees all and may filter by tenant.
    let b_list = api.get(Some(OPERATOR_B), "/v1/jobs").await;
    assert_eq!(b_list.json["jobs"].as_array().unwrap().len(), 2);
    let b_retry = api
        .post_empty(Some(OPERATOR_B), &format!("/v1/jobs/{b_done}/retry"))
        .await;
    assert_eq!(b_retry.status, 200, "{}", b_retry.text);
    let all = api.get(Some(OPERATOR_ALL), "/v1/jobs").await;
    assert_eq!(all.json["jobs"].as_array().unwrap().len(), 3);
    let only_b = api
        .send(reqwest::Method::GET, "/v1/jobs", Some(OPERATOR_ALL), |r| {
            r.query(&[("tenant", TENANT_B)])
        })
        .await;
    assert_eq!(only_b.json["jobs"].as_array().unwrap().len(), 2);
    let got = api
        .get(Some(OPERATOR_ALL), &format!("/v1/jobs/{b_queued}"))
        .await;
    assert_eq!(got.status, 200);
}

// ------------------------------------------------------------------------------------------
// Input limits and the error shape (issue #6 item 5)

/// Invalid bodies answer 400 naming the field; a body that is not declared JSON, 415;
/// nothing is stored.
async fn invalid_input_answers_400_naming_the_field(env: &Env) {
    let api = env.api(unbounded()).await;
    let big_args = format!(
        r#"{{"kind": "a", "args": {{"pad": "{}"}}}}"#,
        "x".repeat(300 * 1024)
    );
    let cases: Vec<(String, &str)> = vec![
        (r#"{"kind": "a""#.into(), "body"),
        ("".into(), "body"),
        (r#"["a", {}]"#.into(), "body"),
        (r#"{"kind": "a", "colour": "red"}"#.into(), "colour"),
        (r#"{}"#.into(), "kind"),
        (r#"{"kind": ""}"#.into(), "kind"),
        (r#"{"kind": "has space"}"#.into(), "kind"),
        (r#"{"kind": "a", "queue": "no spaces"}"#.into(), "queue"),
        (r#"{"kind": "a", "queue": ""}"#.into(), "queue"),
        (
            r#"{"kind": "a", "args": {"s": "nul\u0000"}}"#.into(),
            "args",
        ),
        (r#"{"kind": "a", "args": ["\u0000"]}"#.into(), "args"),
        (r#"{"kind": "a", "args": {"k\u0000": 1}}"#.into(), "args"),
        (r#"{"kind": "a", "meta": {"m": "\u0000"}}"#.into(), "meta"),
        (r#"{"kind": "a\u0000"}"#.into(), "kind"),
        (
            r#"{"kind": "a", "unique_key": "u\u0000"}"#.into(),
            "unique_key",
        ),
        (
            r#"{"kind": "a", "max_attempts": -1}"#.into(),
            "max_attempts",
        ),
        (r#"{"kind": "a", "max_attempts": 0}"#.into(), "max_attempts"),
        (
            r#"{"kind": "a", "max_attempts": 1001}"#.into(),
            "max_attempts",
        ),
        (
            r#"{"kind": "a", "max_attempts": 1e40}"#.into(),
            "max_attempts",
        ),
        (
            r#"{"kind": "a", "max_attempts": 99999999999999999999}"#.into(),
            "max_attempts",
        ),
        (
            r#"{"kind": "a", "max_attempts": "3"}"#.into(),
            "max_attempts",
        ),
        (r#"{"kind": "a", "priority": 40000}"#.into(), "priority"),
        (r#"{"kind": "a", "run_at": "tomorrow"}"#.into(), "run_at"),
        (
            r#"{"kind": "a", "run_at": "0500-01-01T00:00:00Z"}"#.into(),
            "run_at",
        ),
        (r#"{"kind": "a", "delay_ms": -5}"#.into(), "delay_ms"),
        (r#"{"kind": "a", "meta": [1]}"#.into(), "meta"),
        (
            r#"{"kind": "a", "limit_keys": ["ok:1", "not ok"]}"#.into(),
            "limit_keys[1]",
        ),
        (big_args, "args"),
    ];
    for (body, field) in cases {
        let answer = api
            .send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
                r.header("Content-Type", "application/json")
                    .body(body.clone())
            })
            .await;
        assert_eq!(
            answer.json["error"]["field"].as_str(),
            Some(field),
            "{}: {}",
            &body[..body.len().min(80)],
            answer.text
        );
        answer.assert_error(400, "invalid_input", Some(field));
    }
    api.send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
        r.header("Idempotency-Key", "k".repeat(300))
            .json(&json!({"kind": "a"}))
    })
    .await
    .assert_error(400, "invalid_input", Some("idempotency_key"));

    let not_json = api
        .send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
            r.header("Content-Type", "text/plain")
                .body(r#"{"kind": "a"}"#)
        })
        .await;
    not_json.assert_error(415, "unsupported_media_type", None);
    let no_type = api
        .send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
            r.body(r#"{"kind": "a"}"#)
        })
        .await;
    no_type.assert_error(415, "unsupported_media_type", None);

    assert!(
        api.all_jobs().await.is_empty(),
        "no refused request stored a job"
    );
}

/// A body over the limit answers 413, whether its length is declared or it is chunked; a
/// body of exactly the limit is read (and then judged on its content).
async fn body_over_the_limit_answers_413(env: &Env) {
    let api = env.api(unbounded()).await;
    let limit = drover_http::MAX_BODY_BYTES_DEFAULT;

    // Declared too long: refused from the headers alone.
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {OPERATOR_ALL}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        limit + 1
    );
    let mut stream = raw_send(api.addr, head.as_bytes()).await;
    let answer = read_response(&mut stream).await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.json()["error"]["code"], "payload_too_large");
    assert_error_shape(&answer.json(), &String::from_utf8_lossy(&answer.body));

    // Exactly the limit: read in full; the args are then too large for a job (400).
    let prefix = r#"{"kind": "a", "args": {"pad": ""#;
    let suffix = r#""}}"#;
    let body = format!(
        "{prefix}{}{suffix}",
        "x".repeat(limit - prefix.len() - suffix.len())
    );
    assert_eq!(body.len(), limit);
    api.send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
        r.header("Content-Type", "application/json").body(body)
    })
    .await
    .assert_error(400, "invalid_input", Some("args"));

    // A configured limit of 1 KiB, chunked body without a declared length.
    let small = env
        .serve(
            api.store.clone(),
            ApiConfig {
                max_body_bytes: 1024,
                ..ApiConfig::default()
            },
        )
        .await;
    let ok = json!({"kind": "a", "args": {"pad": "y".repeat(900)}});
    assert!(serde_json::to_vec(&ok).unwrap().len() <= 1024);
    small.enqueue_ok(OPERATOR_ALL, &ok).await;
    let chunk = format!(
        r#"{{"kind": "a", "args": {{"pad": "{}"}}}}"#,
        "z".repeat(1100)
    );
    let request = format!(
        "POST /v1/jobs/batch HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {OPERATOR_ALL}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n",
        chunk.len()
    );
    let mut stream = raw_send(small.addr, request.as_bytes()).await;
    let answer = read_response(&mut stream).await;
    assert_eq!(
        answer.status,
        413,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.json()["error"]["code"], "payload_too_large");
    assert!(answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1024"));
    assert_eq!(api.all_jobs().await.len(), 1);
}

/// Unknown routes answer 404 and wrong methods 405, both in the error shape.
async fn unknown_routes_and_methods_answer_in_the_error_shape(env: &Env) {
    let api = env.api(unbounded()).await;
    api.get(Some(OPERATOR_ALL), "/v1/nope")
        .await
        .assert_error(404, "not_found", None);
    api.get(None, "/")
        .await
        .assert_error(404, "not_found", None);
    api.send(
        reqwest::Method::DELETE,
        "/v1/jobs",
        Some(OPERATOR_ALL),
        |r| r,
    )
    .await
    .assert_error(405, "method_not_allowed", None);
    api.get(
        Some(OPERATOR_ALL),
        "/v1/jobs/0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79/cancel",
    )
    .await
    .assert_error(405, "method_not_allowed", None);
    api.send(
        reqwest::Method::PUT,
        "/v1/queues/default/pause",
        Some(OPERATOR_ALL),
        |r| r,
    )
    .await
    .assert_error(405, "method_not_allowed", None);
}

// ------------------------------------------------------------------------------------------
// OpenAPI (issue #6 item 6)

/// Every route the issue names is in `/v1/openapi.json` and nothing else is; every documented
/// path and method answers (never 404/405) with a status the document lists; documented
/// operations with `security` answer 401 without a token and the others do not; methods the
/// document does not list answer 405.
async fn openapi_document_matches_the_routes(env: &Env) {
    let api = env.api(unbounded()).await;
    let doc = api.get(None, "/v1/openapi.json").await;
    assert_eq!(doc.status, 200);
    assert_eq!(
        doc.json,
        serde_json::to_value(drover_http::openapi()).unwrap(),
        "the served document is the generated one"
    );

    let mut documented: BTreeSet<(String, String)> = BTreeSet::new();
    for (path, item) in doc.json["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch", "head", "options"]
                .contains(&method.as_str())
            {
                documented.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = [
        ("POST", "/v1/jobs"),
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs/batch"),
        ("GET", "/v1/jobs/{id}"),
        ("POST", "/v1/jobs/{id}/cancel"),
        ("POST", "/v1/jobs/{id}/retry"),
        ("GET", "/v1/queues"),
        ("POST", "/v1/queues/{name}/pause"),
        ("POST", "/v1/queues/{name}/resume"),
        ("GET", "/v1/workers"),
        ("GET", "/v1/ready"),
        ("GET", "/metrics"),
        ("GET", "/v1/openapi.json"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_owned(), p.to_owned()))
    .collect();
    assert_eq!(documented, expected);

    let job = api
        .enqueue_ok(OPERATOR_ALL, &json!({"kind": "doc.probe"}))
        .await;
    for (method, path) in &documented {
        let operation = &doc.json["paths"][path][method.to_lowercase()];
        let listed: BTreeSet<u16> = operation["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.parse().unwrap())
            .collect();
        let concrete = path.replace("{id}", &job).replace("{name}", "default");
        let body = match path.as_str() {
            "/v1/jobs" => Some(json!({"kind": "doc.probe"})),
            "/v1/jobs/batch" => Some(json!({"jobs": [{"kind": "doc.probe"}]})),
            _ => None,
        };
        let http_method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let answer = api
            .send(
                http_method.clone(),
                &concrete,
                Some(OPERATOR_ALL),
                |r| match &body {
                    Some(b) => r.json(b),
                    None => r,
                },
            )
            .await;
        assert!(
            answer.status != 404 && answer.status != 405,
            "{method} {path} answered {}",
            answer.status
        );
        assert!(
            listed.contains(&answer.status),
            "{method} {path} answered {} which the document does not list ({listed:?}): {}",
            answer.status,
            answer.text
        );

        let secured = operation["security"]
            .as_array()
            .is_some_and(|s| !s.is_empty());
        let anonymous = api
            .send(http_method, &concrete, None, |r| match &body {
                Some(b) => r.json(b),
                None => r,
            })
            .await;
        if secured {
            assert!(listed.contains(&401), "{method} {path} documents 401");
            anonymous.assert_error(401, "unauthorized", None);
        } else {
            assert!(
                (200..300).contains(&anonymous.status),
                "{method} {path} needs no token: {}",
                anonymous.status
            );
        }

        for other in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            if documented.contains(&(other.to_owned(), path.clone())) {
                continue;
            }
            api.send(
                reqwest::Method::from_bytes(other.as_bytes()).unwrap(),
                &concrete,
                Some(OPERATOR_ALL),
                |r| r,
            )
            .await
            .assert_error(405, "method_not_allowed", None);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Shutdown and tracing (issue #6 item 7)

/// On shutdown the server stops accepting connections at once but finishes a request it is
/// already reading, then returns.
async fn shutdown_finishes_the_request_in_flight(env: &Env) {
    let mut api = env.api(unbounded()).await;
    let body = br#"{"kind": "late.upload", "args": {"part": 2}}"#;
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {OPERATOR_ALL}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    let mut stream = raw_send(api.addr, head.as_bytes()).await;
    // `100 Continue` arrives when the handler starts reading the body: the request is in
    // flight.
    let interim = read_response(&mut stream).await;
    assert_eq!(interim.status, 100);

    let server = api.take_server();
    api.shutdown_token().cancel();
    wait_until_refused(api.addr).await;

    stream.write_all(body).await.unwrap();
    let answer = read_response(&mut stream).await;
    assert_eq!(
        answer.status,
        202,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let id = answer.json()["job"]["id"].as_str().unwrap().to_owned();
    within("server returns", server)
        .await
        .expect("server task")
        .expect("server result");
    assert_eq!(api.stored(&id).await.state, JobState::Queued);
}

/// `drover serve` with a worker: one token stops both; the worker finishes the job it runs,
/// the server stops listening, and a replay afterwards shows the job `succeeded` with 200.
async fn server_and_worker_shut_down_together(env: &Env) {
    use drover_runner::{Outcome, Registry, Worker, WorkerConfig};

    let store = env.store(unbounded()).await;
    let mut api = env.serve(store.clone(), ApiConfig::default()).await;
    let shutdown = api.shutdown_token();
    let server = api.take_server();

    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let release = Arc::new(tokio::sync::Notify::new());
    let mut registry = Registry::new();
    {
        let release = release.clone();
        registry.register_fn(kind("slow.report"), move |ctx| {
            let started_tx = started_tx.clone();
            let release = release.clone();
            async move {
                let _ = started_tx.send(ctx.job().id.to_string());
                release.notified().await;
                Outcome::success_with(json!({"rows": 3}))
            }
        });
    }
    let mut config = WorkerConfig::default();
    config.worker_id = WorkerId::parse("http-test-worker").unwrap();
    config.poll_interval = Duration::from_millis(50);
    let worker = Worker::new(store.clone(), Arc::new(registry), config).unwrap();
    let worker = tokio::spawn(worker.run(shutdown.clone()));

    let body = json!({"kind": "slow.report", "args": {"month": 3}});
    let enqueued = api
        .enqueue_with_key(PRODUCER_A, "report-march", &body)
        .await;
    assert_eq!(enqueued.status, 202, "{}", enqueued.text);
    let id = enqueued.job_id();
    let running = within("the handler starts", started_rx.recv()).await;
    assert_eq!(running.as_deref(), Some(id.as_str()));
    let workers = api.get(Some(OPERATOR_ALL), "/v1/workers").await;
    assert!(
        workers.json["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["id"] == "http-test-worker"),
        "{}",
        workers.text
    );
    let running = api.get(Some(PRODUCER_A), &format!("/v1/jobs/{id}")).await;
    assert_eq!(running.job()["state"], "running");

    shutdown.cancel();
    wait_until_refused(api.addr).await;
    release.notify_one();
    within("the worker stops", worker)
        .await
        .expect("worker task")
        .expect("worker result");
    within("the server stops", server)
        .await
        .expect("server task")
        .expect("server result");
    let job = api.stored(&id).await;
    assert_eq!(job.state, JobState::Succeeded, "the running job finished");

    let again = env.serve(store, ApiConfig::default()).await;
    let replay = again
        .enqueue_with_key(PRODUCER_A, "report-march", &body)
        .await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.json["status"], "replayed");
    assert_eq!(replay.job_id(), id);
    assert_eq!(replay.job()["state"], "succeeded");
    assert_eq!(replay.job()["result"], json!({"rows": 3}));
}

/// Captured tracing output (every level) records requests but never a token, whether
/// accepted or refused, nor job args. Runs on a current-thread runtime so the capturing
/// subscriber sees the server's tasks.
async fn tokens_never_appear_in_logs(env: &Env, logs: &LogCapture) {
    let api = env.api(unbounded()).await;
    let secret_args = json!({"password": "args-secret-marker-77"});
    let enqueued = api
        .enqueue_with_key(
            OPERATOR_ALL,
            "log-test-key",
            &json!({"kind": "log.test", "args": secret_args}),
        )
        .await;
    assert_eq!(enqueued.status, 202);
    let id = enqueued.job_id();
    for token in [PRODUCER_A, OPERATOR_A, PRODUCER_B, OPERATOR_B, OPERATOR_ALL] {
        let answer = api.get(Some(token), "/v1/jobs").await;
        assert_eq!(answer.status, 200);
    }
    api.get(Some(OPERATOR_ALL), &format!("/v1/jobs/{id}")).await;
    api.get(Some("wrong-secret-token-0001"), "/v1/jobs")
        .await
        .assert_error(401, "unauthorized", None);
    api.send(reqwest::Method::GET, "/v1/jobs", None, |r| {
        r.header("Authorization", "Basic basic-secret-token-0001")
    })
    .await;
    api.post_empty(Some(PRODUCER_A), "/v1/queues/default/pause")
        .await
        .assert_error(403, "forbidden", None);
    api.stop().await;

    let text = logs.text();
    assert!(
        text.contains("/v1/jobs") && text.contains("status=202") && text.contains("status=401"),
        "requests are traced:\n{text}"
    );
    for secret in [
        PRODUCER_A,
        OPERATOR_A,
        PRODUCER_B,
        OPERATOR_B,
        OPERATOR_ALL,
        "wrong-secret-token-0001",
        "basic-secret-token-0001",
        "args-secret-marker-77",
    ] {
        assert!(
            !text.contains(secret),
            "{secret} appears in the logs:\n{text}"
        );
    }
}

/// A tracing subscriber writing every event (all levels, with span fields) into memory.
#[derive(Clone, Default)]
struct LogCapture(Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}

/// Installs a capturing subscriber for this thread; returns the capture and its guard.
fn capture_logs() -> (LogCapture, tracing::subscriber::DefaultGuard) {
    let capture = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(capture.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    (capture, guard)
}

// ------------------------------------------------------------------------------------------
// PostgreSQL only

/// `/v1/ready` answers 503 on a database whose schema is not migrated, with a reason naming
/// `drover migrate`, and 200 once it is migrated.
async fn ready_is_503_until_migrated(env: &Env) {
    let db = env.database().expect("postgres");
    let fresh = TestDatabase::create(db.admin(), false).await;
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let store = drover_store_postgres::PgStore::connect_with(
            fresh.connect.clone(),
            drover_store_postgres::PgOptions::default(),
        )
        .await
        .expect("connect");
        let api = env
            .serve(Arc::new(store.clone()), ApiConfig::default())
            .await;
        let ready = api.get(None, "/v1/ready").await;
        assert_eq!(ready.status, 503, "{}", ready.text);
        assert_error_shape(&ready.json, &ready.text);
        assert!(ready.message().contains("drover migrate"), "{}", ready.text);
        let enqueue = api
            .post(Some(OPERATOR_ALL), "/v1/jobs", &json!({"kind": "k"}))
            .await;
        assert!(enqueue.status >= 500, "{}", enqueue.text);
        assert!(
            enqueue.message().contains("drover migrate"),
            "{}",
            enqueue.text
        );

        drover_store_postgres::migrate(store.pool()).await.unwrap();
        let ready = api.get(None, "/v1/ready").await;
        assert_eq!(ready.status, 200, "{}", ready.text);
        api.stop().await;
        store.close().await;
    }))
    .await;
    fresh.drop_database().await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `/v1/ready` and reads answer 503 (with `Retry-After`) when the database does not answer;
/// readiness answers within its own bound even when the pool would wait longer.
async fn ready_is_503_when_the_database_is_down(env: &Env) {
    let db = env.database().expect("postgres");
    // Port 1 on this host: nothing listens there.
    let down = |acquire: Duration| {
        let pool = drover_store_postgres::sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(acquire)
            .connect_lazy_with(db.connect.clone().port(1));
        Arc::new(drover_store_postgres::PgStore::from_pool(
            pool,
            Default::default(),
        ))
    };
    let api = env
        .serve(down(Duration::from_millis(500)), ApiConfig::default())
        .await;
    let ready = api.get(None, "/v1/ready").await;
    ready.assert_error(503, "unavailable", None);
    assert!(ready.headers.contains_key("retry-after"));
    let list = api.get(Some(OPERATOR_ALL), "/v1/jobs").await;
    list.assert_error(503, "unavailable", None);
    let enqueue = api
        .post(Some(OPERATOR_ALL), "/v1/jobs", &json!({"kind": "k"}))
        .await;
    enqueue.assert_error(503, "unavailable", None);

    let slow = env
        .serve(
            down(Duration::from_secs(60)),
            ApiConfig {
                ready_timeout: Duration::from_millis(300),
                ..ApiConfig::default()
            },
        )
        .await;
    let ready = slow.get(None, "/v1/ready").await;
    ready.assert_error(503, "unavailable", None);
    assert!(ready.message().contains("within 300 ms"), "{}", ready.text);
}

/// `drover_core::json::contains` agrees with PostgreSQL's `jsonb @>` on generated meta
/// documents and filters (the memory store filters with the first, PostgreSQL with the
/// second, and `GET /v1/jobs?meta=` must not depend on the store).
async fn meta_containment_agrees_with_postgres(env: &Env) {
    const CASES: usize = 600;
    let mut pairs = meta_pairs(CASES);
    // Every pair of edge scalars, inside an object and inside an array.
    let scalars = meta_scalars();
    for x in &scalars {
        for y in &scalars {
            pairs.push((json!({"a": x}), json!({"a": y})));
            pairs.push((json!({"a": [x, "other"]}), json!({"a": [y]})));
        }
    }
    let total = pairs.len();
    let docs: Vec<String> = pairs.iter().map(|(d, _)| d.to_string()).collect();
    let filters: Vec<String> = pairs.iter().map(|(_, f)| f.to_string()).collect();
    let pool = env.database().expect("postgres").pool().await;
    let verdicts = containment_in_postgres(&pool, docs, filters).await;
    pool.close().await;
    assert_eq!(verdicts.len(), total);
    let mut mismatches = Vec::new();
    let mut contained = 0;
    for (i, ((doc, filter), postgres)) in pairs.iter().zip(verdicts).enumerate() {
        let rust = drover_core::json::contains(doc, filter);
        if i < CASES {
            contained += usize::from(postgres);
        }
        if rust != postgres {
            mismatches.push(format!(
                "{doc} @> {filter}: postgres {postgres}, core {rust}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {total} disagree:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(
        contained > CASES / 5 && contained < CASES * 4 / 5,
        "the generator covers both answers ({contained} of {CASES} contained)"
    );
}

/// `count` (document, filter) pairs from a fixed seed: mostly filters derived from their
/// document, some independent.
fn meta_pairs(count: usize) -> Vec<(Value, Value)> {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = (meta_document(), proptest::prelude::any::<u64>(), 0u8..10);
    let mut pairs: Vec<(Value, Value)> = Vec::with_capacity(count);
    while pairs.len() < count {
        let (doc, seed, mode) = strategy.new_tree(&mut runner).unwrap().current();
        let mut rng = Lcg(seed | 1);
        let filter = if mode < 7 {
            derive_filter(&doc, &mut rng)
        } else {
            meta_document().new_tree(&mut runner).unwrap().current()
        };
        pairs.push((doc, filter));
    }
    pairs
}

/// `a @> b` for each pair, in one statement (boxed so the case future stays `Send`).
fn containment_in_postgres(
    pool: &drover_store_postgres::PgPool,
    docs: Vec<String>,
    filters: Vec<String>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<bool>> + Send + '_>> {
    Box::pin(async move {
        drover_store_postgres::sqlx::query_scalar(
            "SELECT a::jsonb @> b::jsonb FROM unnest($1::text[], $2::text[]) \
             WITH ORDINALITY AS t(a, b, n) ORDER BY n",
        )
        .bind(docs)
        .bind(filters)
        .fetch_all(pool)
        .await
        .expect("jsonb containment")
    })
}

/// A tiny deterministic generator for deriving filters from documents.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Scalars chosen to hit the edges of jsonb equality: integers against floats, `-0.0`,
/// integers beyond 2^53 and beyond i64, strings differing only in case or accents.
fn meta_scalars() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(-1),
        json!(1.0),
        json!(-0.0),
        json!(0.5),
        json!(2.5e10),
        json!(9007199254740993i64),
        json!(9007199254740992.0),
        json!(u64::MAX),
        json!(1.8446744073709552e19),
        json!(""),
        json!("x"),
        json!("X"),
        json!("é"),
        json!("e\u{301}"),
    ]
}

/// A JSON object as stored in `meta`: few key names (so filters and documents overlap),
/// nested objects and arrays.
fn meta_document() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = proptest::sample::select(meta_scalars());
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                proptest::sample::select(vec!["a", "b", "c", "tags"]),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    });
    proptest::collection::btree_map(
        proptest::sample::select(vec!["a", "b", "c", "tags", "customer"]),
        value,
        0..5,
    )
    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

/// A filter derived from `doc`: some of its keys and elements kept, some values changed, now
/// and then a key it lacks.
fn derive_filter(doc: &Value, rng: &mut Lcg) -> Value {
    let scalars = meta_scalars();
    fn go(v: &Value, rng: &mut Lcg, scalars: &[Value]) -> Value {
        match v {
            Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (k, child) in map {
                    if rng.chance(60) {
                        let value = if rng.chance(85) {
                            go(child, rng, scalars)
                        } else {
                            scalars[(rng.next() as usize) % scalars.len()].clone()
                        };
                        out.insert(k.clone(), value);
                    }
                }
                if rng.chance(10) {
                    out.insert("zz".to_owned(), json!(1));
                }
                Value::Object(out)
            }
            Value::Array(items) => {
                let mut out = Vec::new();
                for item in items {
                    if rng.chance(50) {
                        out.push(go(item, rng, scalars));
                    }
                }
                if rng.chance(15) && !items.is_empty() {
                    // Repeats and order do not matter to containment.
                    out.insert(0, items[items.len() - 1].clone());
                }
                if rng.chance(10) {
                    out.push(scalars[(rng.next() as usize) % scalars.len()].clone());
                }
                Value::Array(out)
            }
            scalar => {
                if rng.chance(90) {
                    scalar.clone()
                } else {
                    scalars[(rng.next() as usize) % scalars.len()].clone()
                }
            }
        }
    }
    go(doc, rng, &scalars)
}

// ------------------------------------------------------------------------------------------
// `drover serve` startup (issue #6 item 4)

/// `drover serve` refuses to start without a token unless `--insecure-no-auth`; a token file
/// given with `--tokens` is read; a malformed one is refused without echoing its tokens.
#[test]
fn serve_refuses_to_start_without_tokens() {
    use drover_cli::commands::serve::auth_mode;
    use drover_http::AuthMode;

    if std::env::var_os("DROVER_API_TOKENS").is_none() {
        let refused = auth_mode(None, false).unwrap_err().to_string();
        assert!(refused.contains("--insecure-no-auth"), "{refused}");
        assert!(refused.contains("DROVER_API_TOKENS"), "{refused}");
        assert!(matches!(
            auth_mode(None, true),
            Ok(AuthMode::InsecureNoAuth)
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(
        &file,
        format!("# API tokens\n{}\n", token_spec().replace(',', "\n")),
    )
    .unwrap();
    match auth_mode(Some(&file), false) {
        Ok(AuthMode::Tokens(tokens)) => {
            assert_eq!(tokens.len(), 5);
            assert!(tokens.authenticate(OPERATOR_ALL).is_some());
        }
        other => panic!("token file not used: {other:?}"),
    }
    std::fs::write(&file, "# nothing here\n").unwrap();
    assert!(auth_mode(Some(&file), false).is_err());
    std::fs::write(&file, "short-secret:acme:producer\n").unwrap();
    let malformed = auth_mode(Some(&file), false).unwrap_err().to_string();
    assert!(!malformed.contains("short-secret"), "{malformed}");
}

// ------------------------------------------------------------------------------------------
// One test per case and store.

/// Stamps `memory::<case>` and `postgres::<case>` for each case of `both`, and
/// `postgres::<case>` for each of `postgres_only`.
macro_rules! http_cases {
    (both: [$($case:ident),* $(,)?], postgres_only: [$($pg:ident),* $(,)?] $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::harness::run_memory(|env| Box::pin(crate::$case(env))).await;
                }
            )*

            #[tokio::test(flavor = "current_thread")]
            async fn tokens_never_appear_in_logs() {
                let (logs, _guard) = crate::capture_logs();
                crate::harness::run_memory(move |env| {
                    Box::pin(async move { crate::tokens_never_appear_in_logs(env, &logs).await })
                })
                .await;
            }
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::harness::run_postgres(stringify!($case), |env| {
                        Box::pin(crate::$case(env))
                    })
                    .await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $pg() {
                    crate::harness::run_postgres(stringify!($pg), |env| {
                        Box::pin(crate::$pg(env))
                    })
                    .await;
                }
            )*

            #[tokio::test(flavor = "current_thread")]
            async fn tokens_never_appear_in_logs() {
                let (logs, _guard) = crate::capture_logs();
                crate::harness::run_postgres("tokens_never_appear_in_logs", move |env| {
                    Box::pin(async move { crate::tokens_never_appear_in_logs(env, &logs).await })
                })
                .await;
            }
        }
    };
}

http_cases!(
    both: [
        enqueue_returns_202_with_the_committed_job,
        idempotency_key_replays_and_conflicts,
        idempotency_replay_shows_terminal_states,
        concurrent_posts_with_one_key_create_one_job,
        unique_key_duplicate_answers_200,
        batch_enqueue,
        list_filters_and_paginates,
        get_cancel_and_retry,
        queues_pause_resume_and_list,
        workers_are_listed,
        ready_metrics_and_openapi_need_no_token,
        global_quota_answers_429,
        tenant_quota_answers_429,
        retry_rechecks_quotas,
        missing_or_wrong_token_answers_401,
        producer_is_forbidden_operator_actions,
        tenants_are_isolated,
        invalid_input_answers_400_naming_the_field,
        body_over_the_limit_answers_413,
        unknown_routes_and_methods_answer_in_the_error_shape,
        openapi_document_matches_the_routes,
        shutdown_finishes_the_request_in_flight,
        server_and_worker_shut_down_together,
    ],
    postgres_only: [
        ready_is_503_until_migrated,
        ready_is_503_when_the_database_is_down,
        meta_containment_agrees_with_postgres,
    ],
);

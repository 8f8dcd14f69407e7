//! Enqueue, idempotency keys, unique keys, batches and quotas over HTTP.

use std::collections::HashSet;

use drover_core::{JobState, Quotas, StoreConfig};
use serde_json::{json, Value};

use crate::harness::*;

// ------------------------------------------------------------------------------------------
// Enqueue and idempotency

/// `POST /v1/jobs` answers 202 with the committed job, which `GET` and the store then show.
pub(crate) async fn enqueue_returns_202_with_the_committed_job(env: &Env) {
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
        "limit_keys": ["customer:42", "customer:42"],
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
    assert_eq!(
        job["limit_keys"],
        json!(["customer:42"]),
        "a key named twice is stored once"
    );
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
pub(crate) async fn idempotency_key_replays_and_conflicts(env: &Env) {
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
    conflict.assert_error(409, "conflict", Some("idempotency_key"));
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
    conflict.assert_error(409, "conflict", Some("idempotency_key"));
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
pub(crate) async fn idempotency_replay_shows_terminal_states(env: &Env) {
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
pub(crate) async fn concurrent_posts_with_one_key_create_one_job(env: &Env) {
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
pub(crate) async fn unique_key_duplicate_answers_200(env: &Env) {
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
pub(crate) async fn batch_enqueue(env: &Env) {
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

    // A stored key reused with another request refuses the whole batch, naming the item;
    // the good item before it is not stored.
    let conflict = json!({"jobs": [
        {"kind": "fresh-before-conflict"},
        {"kind": "a", "idempotency_key": "batch-1", "args": {"other": true}},
    ]});
    let answer = api
        .post(Some(PRODUCER_A), "/v1/jobs/batch", &conflict)
        .await;
    answer.assert_error(409, "conflict", Some("jobs[1].idempotency_key"));
    assert!(answer.message().starts_with("jobs[1]: "), "{}", answer.text);
    assert_eq!(
        answer.json["error"]["details"]["existing_job_id"],
        results[0]["job"]["id"]
    );
    let listed = api
        .get(Some(PRODUCER_A), "/v1/jobs?kind=fresh-before-conflict")
        .await;
    assert_eq!(listed.json["jobs"], json!([]), "{}", listed.text);

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
// Quotas

/// Over `DROVER_MAX_PENDING`: 429 with `Retry-After` and a body naming the limit; nothing
/// stored. The cluster-wide counts span every tenant: a token of one tenant learns only that
/// the quota has no room (no counts in the message or details), on every route that meets the
/// quota (enqueue, batch, retry); a token of tenant `*` gets them.
pub(crate) async fn global_quota_answers_429(env: &Env) {
    let api = env
        .api(StoreConfig {
            quotas: Quotas {
                max_pending: Some(2),
                max_tenant_pending: None,
            },
            ..StoreConfig::default()
        })
        .await;
    let first = api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    api.enqueue_ok(PRODUCER_B, &json!({"kind": "k"})).await;
    let redacted = |answer: &Answer, what: &str| {
        answer.assert_error(429, "quota_exceeded", None);
        assert_eq!(answer.headers["retry-after"], "5");
        let details = &answer.json["error"]["details"];
        assert_eq!(
            details,
            &json!({"limit": "max_pending", "setting": "DROVER_MAX_PENDING"}),
            "{what}: {}",
            answer.text
        );
        assert!(
            answer.message().contains("cluster-wide") && answer.message().contains("max_pending"),
            "{what}: {}",
            answer.text
        );
        assert!(
            !answer.message().chars().any(|c| c.is_ascii_digit()),
            "{what}: no counts in {}",
            answer.text
        );
    };
    for token in [PRODUCER_A, OPERATOR_A] {
        let refused = api
            .post(Some(token), "/v1/jobs", &json!({"kind": "k"}))
            .await;
        redacted(&refused, "enqueue");
        assert!(
            refused.message().contains("this request's jobs"),
            "{}",
            refused.text
        );
    }
    let batch = api
        .post(
            Some(PRODUCER_B),
            "/v1/jobs/batch",
            &json!({"jobs": [{"kind": "k"}]}),
        )
        .await;
    redacted(&batch, "batch");

    // A token of every tenant sees the counts.
    let full = api
        .post(Some(OPERATOR_ALL), "/v1/jobs", &json!({"kind": "k"}))
        .await;
    full.assert_error(429, "quota_exceeded", None);
    assert_eq!(full.headers["retry-after"], "5");
    let details = &full.json["error"]["details"];
    assert_eq!(details["limit"], "max_pending");
    assert_eq!(details["setting"], "DROVER_MAX_PENDING");
    assert_eq!(
        (details["current"].as_u64(), details["max"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(
        full.message()
            .contains("max_pending allows 2 pending jobs and 2 are pending"),
        "{}",
        full.text
    );
    let batch = api
        .post(
            Some(OPERATOR_ALL),
            "/v1/jobs/batch",
            &json!({"jobs": [{"kind": "k"}]}),
        )
        .await;
    batch.assert_error(429, "quota_exceeded", None);
    assert_eq!(batch.json["error"]["details"]["current"], 2);
    assert_eq!(
        api.all_jobs().await.len(),
        2,
        "nothing stored over the quota"
    );

    // Retry: the same rule, worded for a job queued again (a retry creates no job).
    let cancel = api
        .post_empty(Some(PRODUCER_A), &format!("/v1/jobs/{first}/cancel"))
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    let retry = api
        .post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{first}/retry"))
        .await;
    redacted(&retry, "retry");
    assert!(
        retry.message().contains("queue this job again"),
        "{}",
        retry.text
    );
    let retry = api
        .post_empty(Some(OPERATOR_ALL), &format!("/v1/jobs/{first}/retry"))
        .await;
    retry.assert_error(429, "quota_exceeded", None);
    assert_eq!(retry.json["error"]["details"]["current"], 2);
    assert_eq!(retry.json["error"]["details"]["max"], 2);
    assert!(
        retry
            .message()
            .contains("queuing this job again would pass it"),
        "{}",
        retry.text
    );
    assert!(!retry.message().contains("new jobs"), "{}", retry.text);
    assert_eq!(api.stored(&first).await.state, JobState::Cancelled);
}

/// Over `DROVER_MAX_TENANT_PENDING`: 429 naming the limit and tenant; other tenants go on.
pub(crate) async fn tenant_quota_answers_429(env: &Env) {
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
    // The counts of a tenant quota are the caller's own tenant's: shown.
    let details = &refused.json["error"]["details"];
    assert_eq!(details["limit"], "max_tenant_pending");
    assert_eq!(details["setting"], "DROVER_MAX_TENANT_PENDING");
    assert_eq!(details["tenant"], TENANT_A);
    assert_eq!(
        (details["current"].as_u64(), details["max"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(
        refused
            .message()
            .contains("allows 1 pending jobs and 1 are pending"),
        "{}",
        refused.text
    );
    api.enqueue_ok(PRODUCER_B, &json!({"kind": "k"})).await;
    assert_eq!(api.all_jobs().await.len(), 2);
}

/// An operator retry re-checks the quotas: 429 and the job stays as it was.
pub(crate) async fn retry_rechecks_quotas(env: &Env) {
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
    // A retry makes no new job: the answer says the job cannot be queued again.
    assert!(
        refused
            .message()
            .contains("so queuing this job again would pass it"),
        "{}",
        refused.text
    );
    assert!(!refused.message().contains("new jobs"), "{}", refused.text);
    assert_eq!(refused.json["error"]["details"]["tenant"], TENANT_A);
    assert_eq!(refused.json["error"]["details"]["current"], 1);
    assert_eq!(api.stored(&first).await.state, JobState::Cancelled);
}

// ------------------------------------------------------------------------------------------
// Trace context (docs/opentelemetry.md)

/// `traceparent` and `tracestate` headers are stored with the jobs a request enqueues (one job
/// or a batch); as W3C Trace Context asks, a malformed `traceparent` is ignored and a malformed
/// `tracestate` dropped, never failing the request.
pub(crate) async fn trace_headers_are_stored_and_malformed_ones_ignored(env: &Env) {
    let api = env.api(unbounded()).await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body = json!({"kind": "email.send", "args": {}});
    let post = |parent: &'static str, state: String, path: &'static str, body: Value| {
        let api = &api;
        async move {
            api.send(reqwest::Method::POST, path, Some(PRODUCER_A), move |r| {
                r.header("traceparent", parent)
                    .header("tracestate", state)
                    .json(&body)
            })
            .await
        }
    };
    let answer = post(traceparent, "vendor=one".into(), "/v1/jobs", body.clone()).await;
    assert_eq!(answer.status, 202, "{}", answer.text);
    let stored = api.stored(&answer.job_id()).await;
    let context = stored.trace_context.expect("the headers' context");
    assert_eq!(context.traceparent, traceparent);
    assert_eq!(context.tracestate.as_deref(), Some("vendor=one"));

    let answer = post(
        traceparent,
        format!("long={}", "x".repeat(600)),
        "/v1/jobs",
        body.clone(),
    )
    .await;
    assert_eq!(answer.status, 202, "{}", answer.text);
    let context = api.stored(&answer.job_id()).await.trace_context.unwrap();
    assert_eq!(
        (context.traceparent.as_str(), context.tracestate),
        (traceparent, None)
    );

    let answer = post(
        "00-not-a-trace-01",
        "vendor=one".into(),
        "/v1/jobs",
        body.clone(),
    )
    .await;
    assert_eq!(answer.status, 202, "{}", answer.text);
    assert_eq!(api.stored(&answer.job_id()).await.trace_context, None);

    let batch = json!({"jobs": [body.clone(), body]});
    let answer = post(traceparent, "vendor=two".into(), "/v1/jobs/batch", batch).await;
    assert_eq!(answer.status, 202, "{}", answer.text);
    for result in answer.json["results"].as_array().unwrap() {
        let id = result["job"]["id"].as_str().unwrap();
        let context = api.stored(id).await.trace_context.unwrap();
        assert_eq!(context.traceparent, traceparent);
    }
}

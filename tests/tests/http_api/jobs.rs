//! Reading and changing jobs and queues over HTTP: list with filters and pages, get, cancel,
//! retry, requeue, queues, workers, readiness and metrics.

use std::collections::BTreeSet;
use std::time::Duration;

use drover_core::{JobState, WorkerId, WorkerRegistration};
use serde_json::json;

use crate::harness::*;

// ------------------------------------------------------------------------------------------
// Reading and changing jobs

/// `GET /v1/jobs` filters by queue, state, kind and meta containment, pages newest first with
/// a cursor, and names the field of a bad filter.
pub(crate) async fn list_filters_and_paginates(env: &Env) {
    let api = env.api(unbounded()).await;
    let j1 = api
        .enqueue_ok(
            PRODUCER_A,
            &json!({"kind": "a.one", "queue": "q1", "meta": {"customer": "acme", "tags": ["x", "y"]},
                    "args": {"order": 7, "lines": ["a", "b"]}}),
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
            &json!({"kind": "a.one", "queue": "q2", "meta": {"customer": "acme", "n": 1},
                    "args": {"order": 8}}),
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
    assert_eq!(
        list(vec![("args", r#"{"order":7}"#.into())]).await,
        set(&[&j1])
    );
    assert_eq!(
        list(vec![("args", r#"{"lines":["b"]}"#.into())]).await,
        set(&[&j1])
    );
    assert_eq!(
        list(vec![
            ("args", r#"{"order":8}"#.into()),
            ("queue", "q1".into())
        ])
        .await,
        set(&[])
    );

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
        (vec![("args", "[1]")], "args"),
        (vec![("args", "{not json")], "args"),
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

/// `GET /v1/jobs` answers summaries: every field of a job but `args`, `result`, `errors` and
/// `progress`, which appear only when `include` names them (`all` for every one); a bad
/// `include` answers 400 naming it; `GET /v1/jobs/{id}` shows the whole job.
pub(crate) async fn list_answers_summaries_unless_include_asks(env: &Env) {
    let api = env.api(unbounded()).await;
    let args = json!({"file": "a.csv", "rows": 2});
    let id = api
        .enqueue_ok(
            PRODUCER_A,
            &json!({"kind": "import", "args": args, "max_attempts": 1}),
        )
        .await;
    api.run_job(&id, false).await;
    let whole = api.get(Some(PRODUCER_A), &format!("/v1/jobs/{id}")).await;
    assert_eq!(whole.status, 200, "{}", whole.text);
    let whole = whole.job().as_object().unwrap().clone();
    assert_eq!(whole["args"], args);
    assert_eq!(whole["errors"].as_array().unwrap().len(), 1, "{whole:?}");

    let listed = |include: Option<&'static str>| {
        let api = &api;
        async move {
            let answer = api
                .send(
                    reqwest::Method::GET,
                    "/v1/jobs",
                    Some(PRODUCER_A),
                    |r| match include {
                        Some(include) => r.query(&[("include", include)]),
                        None => r,
                    },
                )
                .await;
            assert_eq!(answer.status, 200, "{include:?}: {}", answer.text);
            let jobs = answer.json["jobs"].as_array().unwrap().clone();
            assert_eq!(jobs.len(), 1);
            jobs[0].as_object().unwrap().clone()
        }
    };
    let without = |fields: &[&str]| {
        let mut job = whole.clone();
        for field in fields {
            job.remove(*field);
        }
        job
    };
    let large = ["args", "result", "errors", "progress"];
    assert_eq!(listed(None).await, without(&large), "a summary by default");
    assert_eq!(
        listed(Some("args,errors")).await,
        without(&["result", "progress"])
    );
    assert_eq!(
        listed(Some("result, progress")).await,
        without(&["args", "errors"])
    );
    assert_eq!(listed(Some("all")).await, whole);
    for bad in ["meta", "", "args,,errors"] {
        api.send(reqwest::Method::GET, "/v1/jobs", Some(PRODUCER_A), |r| {
            r.query(&[("include", bad)])
        })
        .await
        .assert_error(400, "invalid_input", Some("include"));
    }
}

/// Get, cancel and retry: 200s, 404 for an unknown job, 400 for a malformed id, 409 for a
/// transition the state machine refuses; retry keeps the id and args and resets the attempt
/// budget.
pub(crate) async fn get_cancel_and_retry(env: &Env) {
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
            start: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap()
        .jobs;
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

/// `POST /v1/jobs/{id}/requeue` (operators, of the job's tenant or of every tenant): a job
/// scheduled an hour ahead is ready now and says `changed`; a ready one answers `changed`
/// false; a producer gets 403, another tenant 404, a finished job 409 pointing to retry.
pub(crate) async fn requeue_makes_a_waiting_job_ready_now(env: &Env) {
    let api = env.api(unbounded()).await;
    let id = api
        .enqueue_ok(
            PRODUCER_A,
            &json!({"kind": "import", "delay_ms": 3_600_000}),
        )
        .await;
    let path = format!("/v1/jobs/{id}/requeue");
    let scheduled = api.stored(&id).await;
    api.post_empty(Some(PRODUCER_A), &path)
        .await
        .assert_error(403, "forbidden", None);
    api.post_empty(Some(OPERATOR_B), &path)
        .await
        .assert_error(404, "not_found", None);
    assert_eq!(
        api.stored(&id).await,
        scheduled,
        "refused requeues change nothing"
    );

    let requeued = api.post_empty(Some(OPERATOR_A), &path).await;
    assert_eq!(requeued.status, 200, "{}", requeued.text);
    assert_eq!(requeued.json["changed"], true);
    assert_eq!(requeued.job_id(), id);
    assert_eq!(requeued.job()["state"], "queued");
    assert_eq!(requeued.job()["attempt"], 0);
    let stored = api.stored(&id).await;
    assert!(
        stored.run_at < scheduled.run_at,
        "ready now: {}",
        stored.run_at
    );
    assert_eq!(
        requeued.job()["run_at"],
        json!(stored.run_at),
        "the answer shows the stored job"
    );
    let again = api.post_empty(Some(OPERATOR_ALL), &path).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json["changed"], false);
    assert_eq!(api.stored(&id).await, stored);

    let unknown = "0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79";
    api.post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{unknown}/requeue"))
        .await
        .assert_error(404, "not_found", None);
    api.post_empty(Some(OPERATOR_A), "/v1/jobs/not-a-uuid/requeue")
        .await
        .assert_error(400, "invalid_input", Some("id"));
    let cancel = api
        .post_empty(Some(PRODUCER_A), &format!("/v1/jobs/{id}/cancel"))
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    let refused = api.post_empty(Some(OPERATOR_A), &path).await;
    refused.assert_error(409, "invalid_transition", None);
    assert!(
        refused
            .message()
            .contains("cannot requeue a job that is cancelled")
            && refused.message().contains("retry it"),
        "{}",
        refused.text
    );
}

/// A job a worker claimed ahead of a free slot is `running` (leased) but says it waits for a
/// slot and has no start time; the job, list, queue and metrics answers tell it apart from a
/// job whose handler started.
pub(crate) async fn a_job_claimed_ahead_shows_as_waiting_for_a_slot(env: &Env) {
    let api = env.api(unbounded()).await;
    let first = api
        .enqueue_ok(PRODUCER_A, &json!({"kind": "k", "queue": "work"}))
        .await;
    let second = api
        .enqueue_ok(PRODUCER_A, &json!({"kind": "k", "queue": "work"}))
        .await;
    let claimed = api
        .store
        .jobs_claim(drover_core::ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: vec![queue("work")],
            kinds: vec![kind("k")],
            limit: 2,
            start: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap()
        .jobs;
    assert_eq!(claimed.len(), 2);

    let started = api
        .get(Some(PRODUCER_A), &format!("/v1/jobs/{first}"))
        .await;
    assert_eq!(started.status, 200, "{}", started.text);
    assert_eq!(started.job()["state"], "running");
    assert_eq!(started.job()["waiting_for_slot"], false);
    assert_eq!(started.job()["started_at"], started.job()["attempted_at"]);
    let waiting = api
        .get(Some(PRODUCER_A), &format!("/v1/jobs/{second}"))
        .await;
    assert_eq!(waiting.job()["state"], "running");
    assert_eq!(waiting.job()["waiting_for_slot"], true);
    assert!(waiting.job()["started_at"].is_null(), "{}", waiting.text);

    let listed = api.get(Some(PRODUCER_A), "/v1/jobs?state=running").await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let flags: Vec<(String, bool)> = listed.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_owned(),
                j["waiting_for_slot"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(flags, vec![(second.clone(), true), (first.clone(), false)]);

    let queues = api.get(Some(OPERATOR_ALL), "/v1/queues").await;
    let work = queues.json["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "work")
        .cloned()
        .expect("work listed");
    assert_eq!(
        (work["running"].as_u64(), work["claimed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(work["counts"]["running"], 2, "both are leased");

    // Metrics label the queues a registered worker serves (others fold into "(other)").
    api.store
        .worker_register(WorkerRegistration {
            id: WorkerId::parse("w").unwrap(),
            host: "host-a".to_owned(),
            pid: 1,
            queues: vec![queue("work")],
        })
        .await
        .unwrap();
    let metrics = api.get(Some(OPERATOR_ALL), "/metrics").await;
    for line in [
        r#"drover_jobs_running{queue="work"} 1"#,
        r#"drover_jobs_claimed{queue="work"} 1"#,
        r#"drover_jobs{queue="work",state="running"} 2"#,
    ] {
        assert!(metrics.text.contains(line), "{line} in\n{}", metrics.text);
    }
}

/// Pause and resume (operators of every tenant only: a queue is shared by all tenants) and the
/// queue list with counts.
pub(crate) async fn queues_pause_resume_and_list(env: &Env) {
    let api = env.api(unbounded()).await;
    api.enqueue_ok(PRODUCER_A, &json!({"kind": "send", "queue": "mail"}))
        .await;
    api.post_empty(Some(OPERATOR_A), "/v1/queues/mail/pause")
        .await
        .assert_error(403, "forbidden", None);
    let paused = api
        .post_empty(Some(OPERATOR_ALL), "/v1/queues/mail/pause")
        .await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    assert_eq!(paused.json["name"], "mail");
    assert_eq!(paused.json["paused"], true);
    assert_eq!(paused.json["changed"], true, "{}", paused.text);
    assert!(paused.json["paused_at"].is_string());
    let again = api
        .post_empty(Some(OPERATOR_ALL), "/v1/queues/mail/pause")
        .await;
    assert_eq!(again.status, 200, "pause is idempotent: {}", again.text);
    assert_eq!(again.json["paused"], true);
    assert_eq!(
        again.json["changed"], false,
        "already paused: {}",
        again.text
    );
    assert_eq!(
        again.json["paused_at"], paused.json["paused_at"],
        "a second pause keeps the first pause's time"
    );

    // The counts span every tenant: a token of one tenant may not read them.
    for token in [PRODUCER_A, OPERATOR_A] {
        api.get(Some(token), "/v1/queues")
            .await
            .assert_error(403, "forbidden", None);
    }
    let queues = api.get(Some(OPERATOR_ALL), "/v1/queues").await;
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
    // What keeps the database from cleaning the jobs table: nothing to say for the memory
    // store; PostgreSQL's statistics otherwise.
    let vacuum = &queues.json["vacuum"];
    if env.database().is_some() {
        assert!(vacuum["jobs_dead_rows"].is_u64(), "{}", queues.text);
        assert!(vacuum["jobs_live_rows"].is_u64(), "{}", queues.text);
        assert!(
            vacuum.get("oldest_transaction_age_seconds").is_some(),
            "{}",
            queues.text
        );
    } else {
        assert!(vacuum.is_null(), "{}", queues.text);
    }

    let resumed = api
        .post_empty(Some(OPERATOR_ALL), "/v1/queues/mail/resume")
        .await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(resumed.json["paused"], false);
    assert_eq!(resumed.json["changed"], true, "{}", resumed.text);
    let queues = api.get(Some(OPERATOR_ALL), "/v1/queues").await;
    assert!(queues.json["queues"]
        .as_array()
        .unwrap()
        .iter()
        .any(|q| q["name"] == "mail" && q["paused"] == false));

    // As `drover queues resume`: resuming a queue that is not paused says nothing changed, and
    // a queue nobody has heard of (no jobs, not paused: a typo) is refused, naming it.
    let not_paused = api
        .post_empty(Some(OPERATOR_ALL), "/v1/queues/mail/resume")
        .await;
    assert_eq!(not_paused.status, 200, "{}", not_paused.text);
    assert_eq!(not_paused.json["paused"], false);
    assert_eq!(not_paused.json["changed"], false, "{}", not_paused.text);
    let typo = api
        .post_empty(Some(OPERATOR_ALL), "/v1/queues/mial/resume")
        .await;
    typo.assert_error(404, "not_found", None);
    assert_eq!(
        typo.message(),
        "no queue named mial: it has no jobs and is not paused, so nothing was resumed; check the name with GET /v1/queues"
    );
    // A queue may be paused before its first job; resuming it then changes it, and afterwards
    // (no jobs, no pause) it is unknown again.
    let early = api
        .post_empty(Some(OPERATOR_ALL), "/v1/queues/later/pause")
        .await;
    assert_eq!(early.status, 200, "{}", early.text);
    assert_eq!(early.json["changed"], true, "{}", early.text);
    let resumed = api
        .post_empty(Some(OPERATOR_ALL), "/v1/queues/later/resume")
        .await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(resumed.json["changed"], true, "{}", resumed.text);
    api.post_empty(Some(OPERATOR_ALL), "/v1/queues/later/resume")
        .await
        .assert_error(404, "not_found", None);
    let queues = api.get(Some(OPERATOR_ALL), "/v1/queues").await;
    assert!(
        queues.json["queues"]
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["name"] != "mial" && q["name"] != "later"),
        "a refused resume leaves nothing behind: {}",
        queues.text
    );

    api.post_empty(Some(OPERATOR_ALL), "/v1/queues/no%20spaces/pause")
        .await
        .assert_error(400, "invalid_input", Some("queue"));
}

/// `GET /v1/workers` lists registered workers.
pub(crate) async fn workers_are_listed(env: &Env) {
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
    // Workers serve every tenant: a token of one tenant may not list them.
    for token in [PRODUCER_B, OPERATOR_B] {
        api.get(Some(token), "/v1/workers")
            .await
            .assert_error(403, "forbidden", None);
    }
    let workers = api.get(Some(OPERATOR_ALL), "/v1/workers").await;
    assert_eq!(workers.status, 200, "{}", workers.text);
    let list = workers.json["workers"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], "worker-7");
    assert_eq!(list[0]["pid"], 4242);
    assert_eq!(list[0]["queues"], json!(["default", "mail"]));
}

/// `/v1/ready` and `/v1/openapi.json` answer without a token (a stray one does not matter).
pub(crate) async fn ready_and_openapi_need_no_token(env: &Env) {
    let api = env.api(unbounded()).await;
    let ready = api.get(None, "/v1/ready").await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    assert_eq!(ready.json["status"], "ready");
    let ready = api.get(Some("not-a-configured-token"), "/v1/ready").await;
    assert_eq!(ready.status, 200, "a stray token does not matter");

    let doc = api.get(None, "/v1/openapi.json").await;
    assert_eq!(doc.status, 200);
    assert!(doc.json["openapi"].as_str().unwrap().starts_with("3."));
}

/// `/metrics` names every tenant's queues and kinds and counts every tenant's jobs, so with
/// tokens configured it needs a token of tenant `*` (401 without one, 403 for a token of one
/// tenant, answers that show none of the data), like `/v1/queues`; it is Prometheus text with
/// the docs/design.md names and no tenant or args. Open under `--insecure-no-auth`, and on the
/// worker's metrics-only router, which serves nothing else.
pub(crate) async fn metrics_need_a_token_of_every_tenant(env: &Env) {
    let api = env.api(unbounded()).await;
    api.enqueue_ok(
        PRODUCER_A,
        &json!({"kind": "send", "queue": "mail", "args": {"secret": "args-marker-1"}}),
    )
    .await;
    api.enqueue_ok(
        PRODUCER_B,
        &json!({"kind": "bob.secret-kind", "queue": "bob-private-queue"}),
    )
    .await;
    api.post_empty(Some(OPERATOR_ALL), "/v1/queues/other/pause")
        .await;
    // Queues a registered worker serves have series of their own.
    api.store
        .worker_register(WorkerRegistration {
            id: WorkerId::parse("worker-m").unwrap(),
            host: "host-m".to_owned(),
            pid: 7,
            queues: vec![queue("mail"), queue("bob-private-queue")],
        })
        .await
        .unwrap();

    let anonymous = api.get(None, "/metrics").await;
    anonymous.assert_error(401, "unauthorized", None);
    assert_eq!(anonymous.headers["www-authenticate"], "Bearer");
    api.get(Some("wrong-token-0000000000"), "/metrics")
        .await
        .assert_error(401, "unauthorized", None);
    for token in [PRODUCER_A, OPERATOR_A, PRODUCER_B, OPERATOR_B] {
        let refused = api.get(Some(token), "/metrics").await;
        refused.assert_error(403, "forbidden", None);
        assert_eq!(
            refused.message(),
            "the metrics count the jobs of every tenant: it needs a token of tenant *"
        );
        let queues = api.get(Some(token), "/v1/queues").await;
        queues.assert_error(403, "forbidden", None);
    }

    let metrics = api.get(Some(OPERATOR_ALL), "/metrics").await;
    assert_eq!(metrics.status, 200, "{}", metrics.text);
    let content_type = metrics.headers["content-type"].to_str().unwrap();
    assert!(content_type.contains("text"), "{content_type}");
    for line in [
        r#"drover_jobs{queue="mail",state="queued"} 1"#,
        r#"drover_jobs{queue="bob-private-queue",state="queued"} 1"#,
        r#"drover_jobs_running{queue="mail"} 0"#,
        r#"drover_queue_paused{queue="other"} 1"#,
        r#"drover_queue_paused{queue="mail"} 0"#,
        "# TYPE drover_queue_lag_seconds gauge",
    ] {
        assert!(metrics.text.contains(line), "{line} in\n{}", metrics.text);
    }
    assert!(!metrics.text.contains(TENANT_A));
    assert!(!metrics.text.contains("args-marker-1"));

    // With the process's counters (a server beside a worker): the kinds are in them.
    let process =
        drover_http::ProcessMetrics::new([drover_core::JobKind::parse("bob.secret-kind").unwrap()]);
    process.record_enqueued("bob.secret-kind");
    let state = drover_http::ApiState::new(
        api.store.clone(),
        drover_http::AuthMode::Tokens(drover_http::ApiTokens::parse(&token_spec()).unwrap()),
        drover_http::ApiConfig::default(),
        Some(process.clone()),
    );
    let with_counters = serve_on_free_port(|listener, stop| {
        drover_http::serve(listener, drover_http::router(state), stop)
    })
    .await;
    for token in [None, Some(PRODUCER_B), Some(OPERATOR_B)] {
        let answer = raw_get(with_counters.0, "/metrics", token).await;
        assert!(
            answer.status == 401 || answer.status == 403,
            "{token:?}: {}",
            answer.status
        );
        let body = String::from_utf8_lossy(&answer.body);
        assert!(!body.contains("bob"), "{body}");
    }
    let answer = raw_get(with_counters.0, "/metrics", Some(OPERATOR_ALL)).await;
    assert_eq!(answer.status, 200);
    assert!(String::from_utf8_lossy(&answer.body)
        .contains(r#"drover_jobs_enqueued_total{kind="bob.secret-kind"} 1"#));
    with_counters.1.cancel();

    // `--insecure-no-auth`: open to anyone.
    let insecure = TestApi::start(
        api.store.clone(),
        drover_http::AuthMode::InsecureNoAuth,
        drover_http::ApiConfig::default(),
    )
    .await;
    let open = insecure.get(None, "/metrics").await;
    assert_eq!(open.status, 200, "{}", open.text);
    assert!(open.text.contains(r#"queue="bob-private-queue""#));

    // A worker's metrics address: metrics and readiness without a token, nothing else.
    let store = api.store.clone();
    let worker_side = serve_on_free_port(|listener, stop| {
        drover_http::serve(
            listener,
            drover_http::metrics_router(store, Some(process)),
            stop,
        )
    })
    .await;
    let open = raw_get(worker_side.0, "/metrics", None).await;
    assert_eq!(open.status, 200);
    assert!(String::from_utf8_lossy(&open.body).contains(r#"kind="bob.secret-kind""#));
    assert_eq!(raw_get(worker_side.0, "/v1/ready", None).await.status, 200);
    for path in ["/v1/jobs", "/v1/queues", "/v1/workers", "/v1/openapi.json"] {
        let answer = raw_get(worker_side.0, path, Some(OPERATOR_ALL)).await;
        assert_eq!(answer.status, 404, "{path}");
        assert_error_shape(&answer.json(), &String::from_utf8_lossy(&answer.body));
    }
    worker_side.1.cancel();
}

/// A producer that enqueues jobs of 300 kinds and queues of its own making grows no label set
/// of `/metrics`: its queues are summed under `queue="(other)"` (no worker serves them) and its
/// kinds counted under `kind="(other)"` (the process registers none of them), while a served
/// queue and a registered kind keep their own series.
pub(crate) async fn metrics_label_sets_do_not_grow_with_what_producers_enqueue(env: &Env) {
    let api = env.api(unbounded()).await;
    let process = drover_http::ProcessMetrics::new([drover_core::JobKind::parse("send").unwrap()]);
    let state = drover_http::ApiState::new(
        api.store.clone(),
        drover_http::AuthMode::Tokens(drover_http::ApiTokens::parse(&token_spec()).unwrap()),
        drover_http::ApiConfig::default(),
        Some(process),
    );
    let server = serve_on_free_port(|listener, stop| {
        drover_http::serve(listener, drover_http::router(state), stop)
    })
    .await;
    api.store
        .worker_register(WorkerRegistration {
            id: WorkerId::parse("worker-mail").unwrap(),
            host: "host-a".to_owned(),
            pid: 1,
            queues: vec![queue("mail")],
        })
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let enqueue = |body: serde_json::Value| {
        let request = client
            .post(format!("http://{}/v1/jobs", server.0))
            .bearer_auth(PRODUCER_A)
            .json(&body)
            .send();
        async move {
            let answer = request.await.expect("enqueue");
            assert_eq!(answer.status(), 202);
        }
    };
    enqueue(json!({"kind": "send", "queue": "mail"})).await;
    for i in 0..300 {
        enqueue(json!({"kind": format!("made.up-{i}"), "queue": format!("made-up-{i}")})).await;
    }

    let answer = raw_get(server.0, "/metrics", Some(OPERATOR_ALL)).await;
    assert_eq!(answer.status, 200);
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    let values = |label: &str| -> BTreeSet<String> {
        let prefix = format!("{label}=\"");
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let start = line.find(&prefix)? + prefix.len();
                let end = start + line[start..].find('"')?;
                Some(line[start..end].to_owned())
            })
            .collect()
    };
    let expected = |values: &[&str]| values.iter().map(|v| (*v).to_owned()).collect();
    assert_eq!(values("queue"), expected(&["(other)", "mail"]), "{text}");
    assert_eq!(values("kind"), expected(&["(other)", "send"]), "{text}");
    for line in [
        r#"drover_jobs{queue="(other)",state="queued"} 300"#,
        r#"drover_jobs{queue="mail",state="queued"} 1"#,
        r#"drover_jobs_enqueued_total{kind="(other)"} 300"#,
        r#"drover_jobs_enqueued_total{kind="send"} 1"#,
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    server.1.cancel();
}

/// A job id is a UUID in any form RFC 9562 and common tools write (hyphenated or not, any
/// case, `urn:uuid:...`, `{...}`): every form names the same job on get, cancel, retry and
/// as a list cursor, and every answer, a 404 included, shows the canonical form (hyphenated
/// lowercase), never the form typed.
pub(crate) async fn job_ids_in_any_uuid_form_answer_with_the_canonical_form(env: &Env) {
    let api = env.api(unbounded()).await;
    let id = api.enqueue_ok(OPERATOR_ALL, &json!({"kind": "k"})).await;
    let forms = |id: &str| {
        let upper = id.to_uppercase();
        vec![
            id.to_owned(),
            upper.clone(),
            id.replace('-', ""),
            upper.replace('-', ""),
            format!("urn:uuid:{id}"),
            format!("URN:UUID:{upper}"),
            format!("%7B{id}%7D"),
            format!("%7b{upper}%7d"),
        ]
    };
    for form in forms(&id) {
        let got = api
            .get(Some(OPERATOR_ALL), &format!("/v1/jobs/{form}"))
            .await;
        assert_eq!(got.status, 200, "{form}: {}", got.text);
        assert_eq!(got.job_id(), id, "{form}");
    }
    let cancelled = api
        .post_empty(
            Some(OPERATOR_ALL),
            &format!("/v1/jobs/urn:uuid:{id}/cancel"),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_eq!(cancelled.job_id(), id);
    let retried = api
        .post_empty(
            Some(OPERATOR_ALL),
            &format!("/v1/jobs/{}/retry", id.to_uppercase()),
        )
        .await;
    assert_eq!(retried.status, 200, "{}", retried.text);
    assert_eq!(retried.job_id(), id);
    let newer = api.enqueue_ok(OPERATOR_ALL, &json!({"kind": "k"})).await;
    let page = api
        .send(reqwest::Method::GET, "/v1/jobs", Some(OPERATOR_ALL), |r| {
            r.query(&[("cursor", format!("urn:uuid:{}", newer.to_uppercase()))])
        })
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_eq!(page.json["jobs"][0]["id"], id.as_str());

    let unknown = "ffffffff-ffff-7fff-bfff-ffffffffffff";
    for form in forms(unknown) {
        for (method, path) in [
            (reqwest::Method::GET, format!("/v1/jobs/{form}")),
            (reqwest::Method::POST, format!("/v1/jobs/{form}/cancel")),
            (reqwest::Method::POST, format!("/v1/jobs/{form}/retry")),
        ] {
            let answer = api.send(method, &path, Some(OPERATOR_ALL), |r| r).await;
            answer.assert_error(404, "not_found", None);
            assert_eq!(
                answer.message(),
                format!("job {unknown} not found"),
                "{path}"
            );
        }
    }
    // Another tenant's job answers the same 404, in the canonical form too.
    let answer = api
        .get(
            Some(PRODUCER_B),
            &format!("/v1/jobs/urn:uuid:{}", id.to_uppercase()),
        )
        .await;
    answer.assert_error(404, "not_found", None);
    assert_eq!(answer.message(), format!("job {id} not found"));
}

/// `DELETE /v1/jobs/{id}` (operators, of the job's tenant or of every tenant): a producer gets
/// 403 and another tenant 404, changing nothing; a job another job waits for answers 409
/// naming it, a running one 409 saying to cancel it first; a queued job is deleted, answered
/// as it was, and recorded in the audit log; then it answers 404.
pub(crate) async fn delete_is_for_operators_and_refuses_jobs_still_needed(env: &Env) {
    let api = env.api(unbounded()).await;
    let id = api.enqueue_ok(PRODUCER_A, &json!({"kind": "import"})).await;
    let path = format!("/v1/jobs/{id}");
    let delete = |token: &'static str, path: String| {
        let api = &api;
        async move {
            api.send(reqwest::Method::DELETE, &path, Some(token), |r| r)
                .await
        }
    };
    delete(PRODUCER_A, path.clone())
        .await
        .assert_error(403, "forbidden", None);
    delete(OPERATOR_B, path.clone())
        .await
        .assert_error(404, "not_found", None);
    let waits = api
        .enqueue_ok(PRODUCER_A, &json!({"kind": "report", "depends_on": [id]}))
        .await;
    let kept = delete(OPERATOR_A, path.clone()).await;
    kept.assert_error(409, "conflict", None);
    assert_eq!(
        kept.json["error"]["details"]["existing_job_id"],
        waits.as_str()
    );
    assert!(
        kept.message().contains("retention keeps it"),
        "{}",
        kept.text
    );
    assert_eq!(api.stored(&id).await.state, JobState::Queued);

    let running = api.enqueue_ok(PRODUCER_A, &json!({"kind": "long"})).await;
    api.claim(&running).await;
    let refused = delete(OPERATOR_ALL, format!("/v1/jobs/{running}")).await;
    refused.assert_error(409, "invalid_transition", None);
    assert!(
        refused.message().contains("cancel it first"),
        "{}",
        refused.text
    );

    let cancel = api
        .post_empty(Some(PRODUCER_A), &format!("/v1/jobs/{waits}/cancel"))
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    let deleted = delete(OPERATOR_A, path.clone()).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.job_id(), id);
    assert_eq!(deleted.job()["state"], "queued");
    assert!(api.all_jobs().await.iter().all(|j| j.id.to_string() != id));
    delete(OPERATOR_A, path.clone())
        .await
        .assert_error(404, "not_found", None);
    let audit = api
        .get(Some(OPERATOR_A), "/v1/audit?action=job.delete")
        .await;
    assert_eq!(audit.status, 200, "{}", audit.text);
    let entries = audit.json["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{}", audit.text);
    assert_eq!(entries[0]["target"], json!({"job": id}));
    assert_eq!(entries[0]["jobs"], 1);
    assert_eq!(entries[0]["tenant"], TENANT_A);
}

/// `POST /v1/jobs/bulk`: a preview counts and changes nothing; a producer may cancel but not
/// retry or delete; a token of one tenant acts on its own jobs only (another tenant's filter
/// 403, another tenant's ids not found); bad input names the field and its rule; one audit
/// record names the filter and counts the jobs changed.
pub(crate) async fn bulk_actions_preview_then_act_within_the_tokens_tenant(env: &Env) {
    let api = env.api(unbounded()).await;
    let mut mine = Vec::new();
    for n in 0..3 {
        mine.push(
            api.enqueue_ok(PRODUCER_A, &json!({"kind": "bulk.a", "args": n}))
                .await,
        );
    }
    let theirs = api.enqueue_ok(PRODUCER_B, &json!({"kind": "bulk.a"})).await;
    let bulk = "/v1/jobs/bulk";
    let preview = api
        .post(
            Some(PRODUCER_A),
            bulk,
            &json!({"action": "cancel", "filter": {"kind": "bulk.a"}, "preview": true}),
        )
        .await;
    assert_eq!(preview.status, 200, "{}", preview.text);
    assert_eq!(
        preview.json,
        json!({"action": "cancel", "preview": true, "matched": 3, "more": false})
    );
    assert!(api
        .all_jobs()
        .await
        .iter()
        .all(|j| j.state == JobState::Queued));

    api.post(
        Some(PRODUCER_A),
        bulk,
        &json!({"action": "delete", "filter": {"kind": "bulk.a"}}),
    )
    .await
    .assert_error(403, "forbidden", None);
    api.post(
        Some(PRODUCER_A),
        bulk,
        &json!({"action": "cancel", "filter": {"tenant": TENANT_B}}),
    )
    .await
    .assert_error(403, "forbidden", Some("filter.tenant"));
    let too_many: Vec<String> = (0..1_001)
        .map(|_| drover_core::JobId::new_v7().to_string())
        .collect();
    for (body, field) in [
        (json!({"action": "explode", "ids": [theirs]}), "action"),
        (json!({"action": "cancel"}), "ids"),
        (
            json!({"action": "cancel", "ids": [theirs], "filter": {}}),
            "filter",
        ),
        (json!({"action": "cancel", "ids": too_many}), "ids"),
        (json!({"action": "cancel", "ids": [theirs, theirs]}), "ids"),
        (json!({"action": "cancel", "ids": ["nope"]}), "ids[0]"),
        (
            json!({"action": "cancel", "filter": {"state": "sleeping"}}),
            "filter.state",
        ),
        (
            json!({"action": "cancel", "filter": {"meta": [1]}}),
            "filter.meta",
        ),
    ] {
        let answer = api.post(Some(OPERATOR_ALL), bulk, &body).await;
        answer.assert_error(400, "invalid_input", Some(field));
    }
    let unknown = api
        .post(
            Some(OPERATOR_ALL),
            bulk,
            &json!({"action": "cancel", "filter": {}, "dry_run": true}),
        )
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.text);
    assert!(unknown.text.contains("dry_run"), "{}", unknown.text);
    assert!(
        api.all_jobs()
            .await
            .iter()
            .all(|j| j.state == JobState::Queued),
        "refused requests change nothing"
    );

    let cancelled = api
        .post(
            Some(PRODUCER_A),
            bulk,
            &json!({"action": "cancel", "filter": {}}),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_eq!(
        cancelled.json,
        json!({"action": "cancel", "preview": false, "changed": 3, "skipped": 0, "not_found": 0})
    );
    assert_eq!(api.stored(&theirs).await.state, JobState::Queued);
    let deleted = api
        .post(
            Some(OPERATOR_A),
            bulk,
            &json!({"action": "delete", "ids": [mine[0], theirs]}),
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(
        (&deleted.json["changed"], &deleted.json["not_found"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(api.all_jobs().await.len(), 3);
    let audit = api
        .get(Some(OPERATOR_A), "/v1/audit?action=jobs.cancel")
        .await;
    assert_eq!(audit.status, 200, "{}", audit.text);
    let entries = audit.json["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{}", audit.text);
    assert_eq!(
        entries[0]["target"],
        json!({"filter": {"tenant": TENANT_A}})
    );
    assert_eq!(entries[0]["jobs"], 3);
}

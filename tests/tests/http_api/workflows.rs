//! Workflows over HTTP (docs/design.md section 10): `POST /v1/workflows` with dependencies by
//! name, `GET /v1/workflows` and `/v1/workflows/{id}`, cancel and retry of a whole workflow,
//! `depends_on` and `run_regardless` on `POST /v1/jobs`, the `workflow` and `parent` filters of
//! `GET /v1/jobs`, and tenant isolation.

use std::collections::BTreeSet;
use std::time::Duration;

use drover_core::{ClaimJobs, EnqueueChildren, JobKind, JobState, NewJob, TenantId, WorkerId};
use serde_json::{json, Value};

use crate::harness::*;

/// `POST /v1/workflows`, asserting 202; returns the answer's JSON.
async fn enqueue_workflow(api: &TestApi, token: &str, body: &Value) -> Value {
    let answer = api.post(Some(token), "/v1/workflows", body).await;
    assert_eq!(answer.status, 202, "{}", answer.text);
    answer.json
}

/// The ids of a `GET /v1/jobs` page with `query`.
async fn listed(api: &TestApi, token: &str, query: &[(&str, String)]) -> BTreeSet<String> {
    let answer = api
        .send(reqwest::Method::GET, "/v1/jobs", Some(token), |r| {
            r.query(query)
        })
        .await;
    assert_eq!(answer.status, 200, "{query:?}: {}", answer.text);
    answer.json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

/// A chain a <- b <- c (and d beside them): enqueued as one unit with local names; the graph
/// reads back with its edges by name; the jobs list filters by workflow and by `waiting`; a
/// dependency's success queues its dependent; a whole-workflow cancel cancels what is live and
/// a retry runs the cancelled jobs again, waiting for the dependencies that run again.
pub(crate) async fn workflows_enqueue_get_list_cancel_and_retry(env: &Env) {
    let api = env.api(unbounded()).await;
    let answer = enqueue_workflow(
        &api,
        OPERATOR_A,
        &json!({"jobs": [
            {"name": "c", "kind": "wf.step", "depends_on": ["b"]},
            {"name": "b", "kind": "wf.step", "depends_on": ["a"], "args": {"n": 2}},
            {"name": "a", "kind": "wf.step", "queue": "wf"},
            {"name": "d", "kind": "wf.step", "run_regardless": true, "depends_on": ["a"]},
        ]}),
    )
    .await;
    let id = answer["id"].as_str().unwrap().to_owned();
    let jobs = answer["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 4, "one answer per job, in request order");
    let job_id = |i: usize| jobs[i]["job"]["id"].as_str().unwrap().to_owned();
    let (c, b, a, d) = (job_id(0), job_id(1), job_id(2), job_id(3));
    for (i, (name, state)) in [
        ("c", "waiting"),
        ("b", "waiting"),
        ("a", "queued"),
        ("d", "waiting"),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(jobs[i]["status"], "created", "{}", jobs[i]);
        assert_eq!(jobs[i]["job"]["name"], name);
        assert_eq!(jobs[i]["job"]["state"], state, "{name}: {}", jobs[i]);
        assert_eq!(jobs[i]["job"]["workflow_id"], id.as_str());
        assert_eq!(jobs[i]["job"]["tenant"], TENANT_A);
    }
    assert_eq!(jobs[1]["job"]["depends_on"], json!([a]));
    assert_eq!(jobs[1]["job"]["pending_dependencies"], 1);
    assert_eq!(jobs[3]["job"]["run_regardless"], true);

    let got = api
        .get(Some(PRODUCER_A), &format!("/v1/workflows/{id}"))
        .await;
    assert_eq!(got.status, 200, "{}", got.text);
    let workflow = &got.json["workflow"];
    assert_eq!(workflow["id"], id.as_str());
    assert_eq!(workflow["tenant"], TENANT_A);
    assert_eq!(workflow["state"], "running");
    assert_eq!(workflow["counts"], json!({"waiting": 3, "queued": 1}));
    let edges: BTreeSet<(String, String)> = workflow["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["job"].as_str().unwrap().to_owned(),
                e["depends_on"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let edge = |j: &str, d: &str| (j.to_owned(), d.to_owned());
    assert_eq!(
        edges,
        BTreeSet::from([edge("c", "b"), edge("b", "a"), edge("d", "a")])
    );
    let names: BTreeSet<&str> = workflow["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["a", "b", "c", "d"]));
    assert!(
        workflow["jobs"][0].get("args").is_none(),
        "the graph shows summaries"
    );

    let list = api.get(Some(PRODUCER_A), "/v1/workflows").await;
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(list.json["workflows"].as_array().unwrap().len(), 1);
    assert_eq!(list.json["workflows"][0]["id"], id.as_str());
    assert_eq!(list.json["workflows"][0]["counts"]["waiting"], 3);
    assert_eq!(list.json["next_cursor"], Value::Null);

    api.enqueue_ok(PRODUCER_A, &json!({"kind": "wf.step"}))
        .await;
    assert_eq!(
        listed(&api, PRODUCER_A, &[("workflow", id.clone())]).await,
        set(&[&a, &b, &c, &d])
    );
    assert_eq!(
        listed(
            &api,
            PRODUCER_A,
            &[("workflow", id.clone()), ("state", "waiting".into())]
        )
        .await,
        set(&[&b, &c, &d])
    );

    // a succeeds: b and d are queued in the same step, c still waits for b.
    api.run_job(&a, true).await;
    assert_eq!(api.stored(&b).await.state, JobState::Queued);
    assert_eq!(api.stored(&d).await.state, JobState::Queued);
    assert_eq!(api.stored(&c).await.state, JobState::Waiting);

    // Cancel the whole workflow: b, c, d end cancelled; a stays succeeded.
    let cancel = api
        .post_empty(Some(PRODUCER_A), &format!("/v1/workflows/{id}/cancel"))
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    assert_eq!(cancel.json["id"], id.as_str());
    assert_eq!(cancel.json["jobs"], 3, "{}", cancel.text);
    for job in [&b, &c, &d] {
        assert_eq!(api.stored(job).await.state, JobState::Cancelled);
    }
    assert_eq!(api.stored(&a).await.state, JobState::Succeeded);
    let got = api
        .get(Some(PRODUCER_A), &format!("/v1/workflows/{id}"))
        .await;
    assert_eq!(got.json["workflow"]["state"], "cancelled", "{}", got.text);

    // Retry it: b and d are queued (a succeeded), c waits for b again.
    let retry = api
        .post_empty(Some(OPERATOR_A), &format!("/v1/workflows/{id}/retry"))
        .await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    assert_eq!(retry.json["jobs"], 3, "{}", retry.text);
    assert_eq!(api.stored(&b).await.state, JobState::Queued);
    assert_eq!(api.stored(&d).await.state, JobState::Queued);
    assert_eq!(api.stored(&c).await.state, JobState::Waiting);
}

/// A bad graph answers 400 naming the field and stores nothing: a cycle, a dangling name, a
/// missing or repeated name, an unknown field, an unknown stored dependency, and a name on
/// `POST /v1/jobs`.
pub(crate) async fn workflow_errors_name_the_field(env: &Env) {
    let api = env.api(unbounded()).await;
    let cycle = api
        .post(
            Some(PRODUCER_A),
            "/v1/workflows",
            &json!({"jobs": [
                {"name": "a", "kind": "k", "depends_on": ["c"]},
                {"name": "b", "kind": "k", "depends_on": ["a"]},
                {"name": "c", "kind": "k", "depends_on": ["b"]},
            ]}),
        )
        .await;
    cycle.assert_error(400, "invalid_input", Some("jobs"));
    assert!(cycle.message().contains("cycle"), "{}", cycle.text);
    let unknown = "0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79";
    for (body, field) in [
        (
            json!({"jobs": [{"name": "a", "kind": "k", "depends_on": ["nope"]}]}),
            "jobs[0].depends_on[0]",
        ),
        (json!({"jobs": [{"kind": "k"}]}), "jobs[0].name"),
        (
            json!({"jobs": [{"name": "a", "kind": "k"}, {"name": "a", "kind": "k"}]}),
            "jobs[1].name",
        ),
        (
            json!({"jobs": [{"name": "a", "kind": "k", "after": ["b"]}]}),
            "jobs[0].after",
        ),
        (json!({"jobs": []}), "jobs"),
        (json!({"jobs": [{"name": "a", "kind": ""}]}), "jobs[0].kind"),
        (
            json!({"jobs": [{"name": "a", "kind": "k", "depends_on": [unknown]}]}),
            "jobs[0].depends_on",
        ),
        (
            json!({"jobs": [
                {"name": "a", "kind": "k"},
                {"name": "b", "kind": "k", "depends_on": ["a", unknown, "a"]},
            ]}),
            "jobs[1].depends_on[2]",
        ),
        (
            json!({"jobs": [
                {"name": "a", "kind": "k"},
                {"name": "b", "kind": "k", "depends_on": [unknown, "a", unknown.to_uppercase()]},
            ]}),
            "jobs[1].depends_on[2]",
        ),
        (json!({"graph": []}), "graph"),
    ] {
        api.post(Some(PRODUCER_A), "/v1/workflows", &body)
            .await
            .assert_error(400, "invalid_input", Some(field));
    }
    for (body, field) in [
        (json!({"kind": "k", "name": "a"}), "name"),
        (json!({"kind": "k", "depends_on": ["a"]}), "depends_on[0]"),
        (json!({"kind": "k", "depends_on": [unknown]}), "depends_on"),
        (
            json!({"kind": "k", "depends_on": [unknown, unknown.to_uppercase()]}),
            "depends_on[1]",
        ),
        (
            json!({"kind": "k", "depends_on": vec![unknown; 1_001]}),
            "depends_on",
        ),
        (
            json!({"kind": "k", "run_regardless": "yes"}),
            "run_regardless",
        ),
    ] {
        api.post(Some(PRODUCER_A), "/v1/jobs", &body)
            .await
            .assert_error(400, "invalid_input", Some(field));
    }
    api.post(
        Some(PRODUCER_A),
        "/v1/jobs/batch",
        &json!({"jobs": [{"kind": "k"}, {"kind": "k", "depends_on": [unknown]}]}),
    )
    .await
    .assert_error(400, "invalid_input", Some("jobs[1].depends_on"));
    assert!(api.all_jobs().await.is_empty(), "nothing stored");
    api.get(Some(PRODUCER_A), "/v1/workflows/not-a-uuid")
        .await
        .assert_error(400, "invalid_input", Some("workflow"));
    api.get(Some(PRODUCER_A), &format!("/v1/workflows/{unknown}"))
        .await
        .assert_error(404, "not_found", None);
    api.get(Some(PRODUCER_A), "/v1/workflows?limit=0")
        .await
        .assert_error(400, "invalid_input", Some("limit"));
    api.get(Some(PRODUCER_A), "/v1/workflows?state=running")
        .await
        .assert_error(400, "invalid_input", Some("state"));
    api.get(Some(PRODUCER_A), "/v1/jobs?workflow=nope")
        .await
        .assert_error(400, "invalid_input", Some("workflow"));
    api.get(Some(PRODUCER_A), "/v1/jobs?parent=nope")
        .await
        .assert_error(400, "invalid_input", Some("parent"));
}

/// Another tenant's workflow answers 404 to get, cancel and retry, is not listed, and its jobs
/// cannot be dependencies; a producer may not retry a workflow.
pub(crate) async fn workflows_are_isolated_by_tenant(env: &Env) {
    let api = env.api(unbounded()).await;
    let answer = enqueue_workflow(
        &api,
        PRODUCER_A,
        &json!({"jobs": [{"name": "a", "kind": "k"}, {"name": "b", "kind": "k", "depends_on": ["a"]}]}),
    )
    .await;
    let id = answer["id"].as_str().unwrap().to_owned();
    let a = answer["jobs"][0]["job"]["id"].as_str().unwrap().to_owned();
    for (token, path) in [
        (PRODUCER_B, format!("/v1/workflows/{id}")),
        (PRODUCER_B, format!("/v1/workflows/{id}/cancel")),
        (OPERATOR_B, format!("/v1/workflows/{id}/cancel")),
        (OPERATOR_B, format!("/v1/workflows/{id}/retry")),
    ] {
        let answer = if path.ends_with(&id) {
            api.get(Some(token), &path).await
        } else {
            api.post_empty(Some(token), &path).await
        };
        answer.assert_error(404, "not_found", None);
        assert!(
            answer.message().contains(&id),
            "names the workflow: {}",
            answer.text
        );
    }
    api.post_empty(Some(PRODUCER_A), &format!("/v1/workflows/{id}/retry"))
        .await
        .assert_error(403, "forbidden", None);
    let b_list = api.get(Some(PRODUCER_B), "/v1/workflows").await;
    assert_eq!(b_list.status, 200, "{}", b_list.text);
    assert_eq!(b_list.json["workflows"], json!([]));
    api.get(
        Some(PRODUCER_B),
        &format!("/v1/workflows?tenant={TENANT_A}"),
    )
    .await
    .assert_error(403, "forbidden", Some("tenant"));
    let all = api
        .get(
            Some(OPERATOR_ALL),
            &format!("/v1/workflows?tenant={TENANT_A}"),
        )
        .await;
    assert_eq!(all.json["workflows"].as_array().unwrap().len(), 1);
    assert!(
        listed(&api, PRODUCER_B, &[("workflow", id.clone())])
            .await
            .is_empty(),
        "the workflow filter stays within the caller's tenant"
    );
    // A job of tenant A is no dependency tenant B can name: it answers as unknown.
    api.post(
        Some(PRODUCER_B),
        "/v1/jobs",
        &json!({"kind": "k", "depends_on": [a]}),
    )
    .await
    .assert_error(400, "invalid_input", Some("depends_on"));
    api.post(
        Some(PRODUCER_B),
        "/v1/workflows",
        &json!({"jobs": [{"name": "x", "kind": "k", "depends_on": [a]}]}),
    )
    .await
    .assert_error(400, "invalid_input", Some("jobs[0].depends_on"));
    // A tenant-scoped token cannot enqueue into another tenant's name.
    api.post(
        Some(PRODUCER_B),
        "/v1/workflows",
        &json!({"jobs": [{"name": "x", "kind": "k", "tenant": TENANT_A}]}),
    )
    .await
    .assert_error(403, "forbidden", Some("jobs[0].tenant"));
    // Its own still works and stays untouched by B's attempts.
    let got = api
        .get(Some(OPERATOR_A), &format!("/v1/workflows/{id}"))
        .await;
    assert_eq!(
        got.json["workflow"]["counts"],
        json!({"queued": 1, "waiting": 1})
    );
}

/// `POST /v1/jobs` takes `depends_on` (ids) and `run_regardless`: a dependent waits, and when
/// its dependency fails it runs anyway with `run_regardless`, else it is cancelled naming it;
/// `GET /v1/jobs?parent=ID` lists a parent's children.
pub(crate) async fn jobs_depend_on_ids_and_list_by_parent(env: &Env) {
    let api = env.api(unbounded()).await;
    let first = api
        .enqueue_ok(PRODUCER_A, &json!({"kind": "dep.first"}))
        .await;
    let anyway = api
        .post(
            Some(PRODUCER_A),
            "/v1/jobs",
            &json!({"kind": "dep.next", "depends_on": [first], "run_regardless": true}),
        )
        .await;
    assert_eq!(anyway.status, 202, "{}", anyway.text);
    assert_eq!(anyway.job()["state"], "waiting");
    assert_eq!(anyway.job()["depends_on"], json!([first]));
    let anyway = anyway.job_id();
    let batch = api
        .post(
            Some(PRODUCER_A),
            "/v1/jobs/batch",
            &json!({"jobs": [{"kind": "dep.next", "depends_on": [first]}]}),
        )
        .await;
    assert_eq!(batch.status, 202, "{}", batch.text);
    assert_eq!(batch.json["results"][0]["job"]["state"], "waiting");
    let strict = batch.json["results"][0]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    api.run_job(&first, false).await;
    assert_eq!(api.stored(&anyway).await.state, JobState::Queued);
    let strict = api.stored(&strict).await;
    assert_eq!(strict.state, JobState::Cancelled);
    assert!(
        strict.errors.last().unwrap().message.contains(&first),
        "{:?}",
        strict.errors
    );

    // A parent with two children, stored as a worker's handler would.
    let parent = api
        .enqueue_ok(PRODUCER_A, &json!({"kind": "dep.parent"}))
        .await;
    let claimed = api
        .store
        .jobs_claim(ClaimJobs {
            worker: WorkerId::parse("test-worker").unwrap(),
            queues: vec![queue("default")],
            kinds: vec![kind("dep.parent")],
            limit: 1,
            start: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert_eq!(claimed.id.to_string(), parent);
    let child = |n: i32| {
        let mut job = NewJob::new(JobKind::parse("dep.child").unwrap(), json!({ "n": n }));
        job.tenant = TenantId::parse(TENANT_A).unwrap();
        job
    };
    let children = api
        .store
        .children_enqueue(EnqueueChildren {
            parent: claimed.id,
            token: claimed.fencing_token,
            jobs: vec![child(1), child(2)],
        })
        .await
        .unwrap();
    let ids: Vec<String> = children.iter().map(|c| c.job.id.to_string()).collect();
    assert_eq!(
        listed(&api, PRODUCER_A, &[("parent", parent.clone())]).await,
        set(&[&ids[0], &ids[1]])
    );
    let got = api
        .get(Some(PRODUCER_A), &format!("/v1/jobs/{}", ids[0]))
        .await;
    assert_eq!(got.job()["parent_id"], parent.as_str(), "{}", got.text);
    assert!(listed(&api, PRODUCER_B, &[("parent", parent.clone())])
        .await
        .is_empty());
}

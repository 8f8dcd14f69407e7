//! The audit log over HTTP (docs/audit.md): every operator write of the API is recorded with
//! the caller's token fingerprint and tenant, a refused one is not; `GET /v1/audit` scopes a
//! token of one tenant to its records, filters, and pages by keyset.

use drover_http::auth::token_fingerprint;
use serde_json::{json, Value};

use crate::harness::*;

/// The records of a `GET /v1/audit` page.
async fn audit(api: &TestApi, token: &str, query: &str) -> Vec<Value> {
    let answer = api.get(Some(token), &format!("/v1/audit{query}")).await;
    assert_eq!(answer.status, 200, "{query}: {}", answer.text);
    answer.json["entries"].as_array().unwrap().clone()
}

fn actions(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect()
}

/// A cancel, a retry, a pause and a resume are each recorded once, newest first, with the
/// token's fingerprint (never the token), the tenant, the target and the jobs touched; a
/// refused cancel records nothing; a token of one tenant sees only its tenant's records.
pub(crate) async fn operator_actions_are_audited_with_their_token_and_tenant(env: &Env) {
    let api = env.api(unbounded()).await;
    let job = api
        .enqueue_ok(PRODUCER_A, &json!({"kind": "audit.probe"}))
        .await;
    let cancel = api
        .post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{job}/cancel"))
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    api.post_empty(Some(OPERATOR_A), &format!("/v1/jobs/{job}/cancel"))
        .await
        .assert_error(409, "invalid_transition", None);
    let retry = api
        .post_empty(Some(OPERATOR_ALL), &format!("/v1/jobs/{job}/retry"))
        .await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    for verb in ["pause", "resume"] {
        let answer = api
            .post_empty(Some(OPERATOR_ALL), &format!("/v1/queues/default/{verb}"))
            .await;
        assert_eq!(answer.status, 200, "{verb}: {}", answer.text);
    }

    let all = audit(&api, OPERATOR_ALL, "").await;
    assert_eq!(
        actions(&all),
        ["queue.resume", "queue.pause", "job.retry", "job.cancel"],
        "one record per accepted action, newest first: {all:?}"
    );
    let cancelled = &all[3];
    assert_eq!(cancelled["actor"], token_fingerprint(OPERATOR_A));
    assert_eq!(cancelled["tenant"], TENANT_A);
    assert_eq!(cancelled["source"], "api");
    assert_eq!(cancelled["target"], json!({ "job": job }));
    assert_eq!(cancelled["jobs"], 1);
    // An operator of every tenant acting on a tenant's job: the record carries the job's
    // tenant, so the tenant sees it.
    assert_eq!(all[2]["actor"], token_fingerprint(OPERATOR_ALL));
    assert_eq!(all[2]["tenant"], TENANT_A);
    assert_eq!(all[1]["target"], json!({ "queue": "default" }));
    assert_eq!(all[1]["jobs"], 0);
    assert!(all[1]["tenant"].is_null(), "{}", all[1]);
    let ids: Vec<i64> = all.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "{ids:?}");
    let text = serde_json::to_string(&all).unwrap();
    for token in [OPERATOR_A, OPERATOR_ALL] {
        assert!(!text.contains(token), "a token in the audit log: {text}");
    }

    assert_eq!(
        actions(&audit(&api, PRODUCER_A, "").await),
        ["job.retry", "job.cancel"],
        "a tenant's token sees its tenant's records only"
    );
    assert!(audit(&api, OPERATOR_B, "").await.is_empty());
    api.get(Some(OPERATOR_B), &format!("/v1/audit?tenant={TENANT_A}"))
        .await
        .assert_error(403, "forbidden", Some("tenant"));
    api.get(None, "/v1/audit")
        .await
        .assert_error(401, "unauthorized", None);
}

/// Filters by action, source and actor combine; `limit` and `cursor` page newest first
/// without repeats; a bad action, source, limit or cursor, or an unknown parameter, is refused
/// naming it.
pub(crate) async fn the_audit_log_filters_pages_and_names_bad_parameters(env: &Env) {
    let api = env.api(unbounded()).await;
    for queue in ["a", "b", "c"] {
        for verb in ["pause", "resume"] {
            let answer = api
                .post_empty(Some(OPERATOR_ALL), &format!("/v1/queues/{queue}/{verb}"))
                .await;
            assert_eq!(answer.status, 200, "{queue} {verb}: {}", answer.text);
        }
    }
    let paused = audit(&api, OPERATOR_ALL, "?action=queue.pause").await;
    let queues: Vec<&Value> = paused.iter().map(|e| &e["target"]["queue"]).collect();
    assert_eq!(queues, [&json!("c"), &json!("b"), &json!("a")]);
    let actor = token_fingerprint(OPERATOR_ALL);
    assert_eq!(
        audit(&api, OPERATOR_ALL, &format!("?source=api&actor={actor}"))
            .await
            .len(),
        6
    );
    assert!(audit(&api, OPERATOR_ALL, "?source=cli").await.is_empty());
    assert!(audit(&api, OPERATOR_ALL, "?actor=someone").await.is_empty());

    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let answer = api
            .get(Some(OPERATOR_ALL), &format!("/v1/audit?limit=4{cursor}"))
            .await;
        assert_eq!(answer.status, 200, "{}", answer.text);
        for entry in answer.json["entries"].as_array().unwrap() {
            seen.push(entry["id"].as_i64().unwrap());
        }
        match answer.json["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");

    for (query, field) in [
        ("action=job.remove", "action"),
        ("source=web", "source"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("cursor=abc", "cursor"),
        ("cursor=0", "cursor"),
        ("probe=1", "probe"),
    ] {
        api.get(Some(OPERATOR_ALL), &format!("/v1/audit?{query}"))
            .await
            .assert_error(400, "invalid_input", Some(field));
    }
}

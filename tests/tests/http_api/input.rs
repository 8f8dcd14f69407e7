//! Input limits and the one error shape over HTTP (400, 413, 415, 404, 405), and the OpenAPI
//! document against the routes.

use std::collections::BTreeSet;

use drover_core::{Quotas, StoreConfig};
use drover_http::ApiConfig;
use serde_json::{json, Value};

use crate::harness::*;

// ------------------------------------------------------------------------------------------
// Input limits and the error shape

/// Invalid bodies answer 400 naming the field; a body that is not declared JSON, 415;
/// nothing is stored.
pub(crate) async fn invalid_input_answers_400_naming_the_field(env: &Env) {
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
        // Integers beyond 64 bits would be stored as the nearest double: refused, by path.
        (
            r#"{"kind": "a", "args": {"n": 123456789012345678901234567890}}"#.into(),
            "args.n",
        ),
        (
            r#"{"kind": "a", "meta": {"ids": [1, -9223372036854775809]}}"#.into(),
            "meta.ids[1]",
        ),
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
        // A lone UTF-16 surrogate escape is not Unicode text: refused by path, with the rule.
        (r#"{"kind": "a", "args": {"s": "\ud800"}}"#.into(), "args.s"),
        (r#"{"kind": "a\udc00"}"#.into(), "kind"),
        (
            r#"{"kind": "a", "meta": {"m": ["\ud800x"]}}"#.into(),
            "meta.m[0]",
        ),
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
    // A header or query parameter given twice is ambiguous: refused, naming it, nothing stored.
    api.send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
        r.header("Idempotency-Key", "one")
            .header("Idempotency-Key", "two")
            .json(&json!({"kind": "a"}))
    })
    .await
    .assert_error(400, "invalid_input", Some("idempotency_key"));
    api.send(reqwest::Method::GET, "/v1/jobs", Some(OPERATOR_ALL), |r| {
        r.query(&[("meta", r#"{"n": 18446744073709551616}"#)])
    })
    .await
    .assert_error(400, "invalid_input", Some("meta.n"));
    let surrogate = api
        .send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
            r.header("Content-Type", "application/json")
                .body(r#"{"kind": "a", "args": {"text": "x\ud800y"}}"#)
        })
        .await;
    surrogate.assert_error(400, "invalid_input", Some("args.text"));
    assert_eq!(
        surrogate.message(),
        r"invalid args.text: must be Unicode text, but \ud800 (line 1, column 34) is a lone UTF-16 surrogate; surrogate escapes come only in pairs, one of \ud800-\udbff followed at once by one of \udc00-\udfff (or write the character itself)"
    );
    let filter = api
        .send(reqwest::Method::GET, "/v1/jobs", Some(OPERATOR_ALL), |r| {
            r.query(&[("meta", r#"{"a": "\ud800"}"#)])
        })
        .await;
    filter.assert_error(400, "invalid_input", Some("meta"));
    assert!(
        filter
            .message()
            .contains(r"\ud800 (line 1, column 8) is a lone UTF-16 surrogate"),
        "{}",
        filter.text
    );
    // Two unknown filters: the answer names the first as given, every time (the parameters
    // were kept in a hash map, whose order changes from one request to the next).
    for _ in 0..16 {
        for (path, first) in [
            ("/v1/jobs?zeta=1&alpha=2&state=queued", "zeta"),
            ("/v1/jobs?alpha=2&zeta=1", "alpha"),
        ] {
            let answer = api.get(Some(OPERATOR_ALL), path).await;
            answer.assert_error(400, "invalid_input", Some(first));
        }
    }
    for (name, first, second) in [("limit", "1", "2"), ("state", "queued", "failed")] {
        api.send(reqwest::Method::GET, "/v1/jobs", Some(OPERATOR_ALL), |r| {
            r.query(&[(name, first), (name, second)])
        })
        .await
        .assert_error(400, "invalid_input", Some(name));
    }
    // Query names and values that are not UTF-8 once decoded are refused, not read with
    // U+FFFD in place of the bytes.
    for path in [
        "/v1/jobs?%ff=1",
        "/v1/jobs?state=%ff",
        "/v1/jobs?kind=a%C3&limit=1",
        "/v1/jobs?limit=1&x=%e2%82",
    ] {
        api.send(reqwest::Method::GET, path, Some(OPERATOR_ALL), |r| r)
            .await
            .assert_error(400, "invalid_input", Some("query"));
    }
    // Encoded UTF-8 is read as such: the kind's rule names the decoded letter.
    let listed = api
        .send(
            reqwest::Method::GET,
            "/v1/jobs?kind=caf%C3%A9",
            Some(OPERATOR_ALL),
            |r| r,
        )
        .await;
    listed.assert_error(400, "invalid_input", Some("kind"));
    assert!(listed.text.contains("found 'é'"), "{listed:?}");
    assert!(api.all_jobs().await.is_empty(), "nothing was stored");

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
pub(crate) async fn body_over_the_limit_answers_413(env: &Env) {
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
pub(crate) async fn unknown_routes_and_methods_answer_in_the_error_shape(env: &Env) {
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
// OpenAPI

/// Every route of the API (docs/design.md section 7) is in `/v1/openapi.json` and nothing else is; every documented
/// path and method answers (never 404/405) with a status the document lists; documented
/// operations with `security` answer 401 without a token and the others do not; methods the
/// document does not list answer 405.
pub(crate) async fn openapi_document_matches_the_routes(env: &Env) {
    let api = env.api(unbounded()).await;
    let doc = api.get(None, "/v1/openapi.json").await;
    assert_eq!(doc.status, 200);
    assert_eq!(
        doc.json,
        serde_json::to_value(drover_http::openapi()).unwrap(),
        "the served document is the generated one"
    );
    // The schemas say what the server does: only `kind` is required in a request; args,
    // result and progress are any JSON, result and progress null when absent; a page is
    // 1..=1000 jobs.
    let schemas = &doc.json["components"]["schemas"];
    assert_eq!(schemas["EnqueueRequest"]["required"], json!(["kind"]));
    for field in ["args", "result", "progress"] {
        let schema = &schemas["JobView"]["properties"][field];
        assert!(schema.get("type").is_none(), "{field}: any JSON: {schema}");
    }
    for field in ["result", "progress"] {
        let required = schemas["JobView"]["required"].as_array().unwrap();
        assert!(!required.contains(&json!(field)), "{field} may be null");
    }
    // A list's jobs carry the large fields only when `include` names them.
    let item = &schemas["JobListItem"];
    let required = item["required"].as_array().unwrap();
    for field in ["args", "result", "errors", "progress"] {
        assert!(item["properties"].get(field).is_some(), "{field}: {item}");
        assert!(!required.contains(&json!(field)), "{field} may be absent");
    }
    for field in ["id", "state", "meta", "run_at"] {
        assert!(required.contains(&json!(field)), "{field} is always there");
    }
    assert!(doc.json["paths"]["/v1/jobs"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "include"));
    let limit = doc.json["paths"]["/v1/jobs"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap()["schema"]
        .clone();
    assert_eq!(
        (limit["minimum"].as_u64(), limit["maximum"].as_u64()),
        (Some(1), Some(1000))
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
        ("POST", "/v1/jobs/bulk"),
        ("GET", "/v1/jobs/{id}"),
        ("DELETE", "/v1/jobs/{id}"),
        ("POST", "/v1/jobs/{id}/cancel"),
        ("POST", "/v1/jobs/{id}/retry"),
        ("POST", "/v1/jobs/{id}/requeue"),
        ("POST", "/v1/workflows"),
        ("GET", "/v1/workflows"),
        ("GET", "/v1/workflows/{id}"),
        ("POST", "/v1/workflows/{id}/cancel"),
        ("POST", "/v1/workflows/{id}/retry"),
        ("GET", "/v1/queues"),
        ("POST", "/v1/queues/{name}/pause"),
        ("POST", "/v1/queues/{name}/resume"),
        ("GET", "/v1/workers"),
        ("GET", "/v1/audit"),
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
    let doomed = api
        .enqueue_ok(OPERATOR_ALL, &json!({"kind": "doc.probe"}))
        .await;
    let workflow = api
        .post(
            Some(OPERATOR_ALL),
            "/v1/workflows",
            &json!({"jobs": [{"name": "a", "kind": "doc.probe"}]}),
        )
        .await;
    assert_eq!(workflow.status, 202, "{}", workflow.text);
    let workflow = workflow.json["id"].as_str().unwrap().to_owned();
    for (method, path) in &documented {
        let operation = &doc.json["paths"][path][method.to_lowercase()];
        let listed: BTreeSet<u16> = operation["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.parse().unwrap())
            .collect();
        let id = if path.starts_with("/v1/workflows") {
            &workflow
        } else if method == "DELETE" {
            &doomed
        } else {
            &job
        };
        let concrete = path.replace("{id}", id).replace("{name}", "default");
        let body = match path.as_str() {
            "/v1/jobs" => Some(json!({"kind": "doc.probe"})),
            "/v1/jobs/batch" => Some(json!({"jobs": [{"kind": "doc.probe"}]})),
            "/v1/jobs/bulk" => Some(json!({"action": "cancel", "filter": {}, "preview": true})),
            "/v1/workflows" => Some(json!({"jobs": [{"name": "a", "kind": "doc.probe"}]})),
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
// Integer fields, query strings, charsets

/// Integer fields (`priority`, `delay_ms`, `max_attempts` in bodies and batch items, `limit` in
/// the query) take any JSON number whose value is a whole number in range (`-0` is 0, `1e3` is
/// 1000); anything else is refused with the field's rule and the value as sent, never a Rust
/// type or a parser's reading of the number.
pub(crate) async fn integer_fields_name_their_rule(env: &Env) {
    let api = env.api(unbounded()).await;
    let post = |body: String| {
        let api = &api;
        async move {
            api.send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
                r.header("Content-Type", "application/json").body(body)
            })
            .await
        }
    };
    for (field, literal, stored) in [
        ("priority", "-0", 0),
        ("priority", "0", 0),
        ("priority", "-0.0", 0),
        ("priority", "1e3", 1000),
        ("priority", "-32768", -32768),
        ("priority", "32767.0", 32767),
        ("max_attempts", "1E3", 1000),
        ("max_attempts", "5.0", 5),
        ("max_attempts", "1", 1),
        ("delay_ms", "-0", 0),
        ("delay_ms", "6e4", 60_000),
    ] {
        let answer = post(format!(r#"{{"kind": "a", "{field}": {literal}}}"#)).await;
        assert_eq!(answer.status, 202, "{field}: {literal}: {}", answer.text);
        if field != "delay_ms" {
            assert_eq!(answer.job()[field], stored, "{field}: {literal}");
        }
    }
    let rules = [
        ("priority", -32768i64, 32767i64),
        ("delay_ms", 0, 3_153_600_000_000),
        ("max_attempts", 1, 1000),
    ];
    for (field, min, max) in rules {
        let below = (min - 1).to_string();
        let above = (max + 1).to_string();
        for (literal, got) in [
            ("2.5", "2.5"),
            ("1e-400", "1e-400"),
            ("1e40", "1e40"),
            ("18446744073709551616", "18446744073709551616"),
            ("-9223372036854775809", "-9223372036854775809"),
            ("99999999999999999999", "99999999999999999999"),
            (below.as_str(), below.as_str()),
            (above.as_str(), above.as_str()),
            ("\"3\"", "a string"),
            ("true", "true"),
            ("[1]", "an array"),
            ("{}", "an object"),
        ] {
            let expected =
                format!("invalid {field}: must be an integer between {min} and {max}, got {got}");
            let answer = post(format!(r#"{{"kind": "a", "{field}": {literal}}}"#)).await;
            answer.assert_error(400, "invalid_input", Some(field));
            assert_eq!(answer.message(), expected, "{literal}");

            let batch =
                format!(r#"{{"jobs": [{{"kind": "a"}}, {{"kind": "a", "{field}": {literal}}}]}}"#);
            let answer = api
                .send(
                    reqwest::Method::POST,
                    "/v1/jobs/batch",
                    Some(OPERATOR_ALL),
                    |r| r.header("Content-Type", "application/json").body(batch),
                )
                .await;
            let batch_field = format!("jobs[1].{field}");
            answer.assert_error(400, "invalid_input", Some(&batch_field));
            assert_eq!(
                answer.message(),
                format!(
                    "invalid {batch_field}: must be an integer between {min} and {max}, got {got}"
                )
            );
        }
    }
    // A number longer than 40 characters is described, not quoted back.
    let long = "9".repeat(2000);
    let answer = post(format!(r#"{{"kind": "a", "max_attempts": {long}}}"#)).await;
    answer.assert_error(400, "invalid_input", Some("max_attempts"));
    assert_eq!(
        answer.message(),
        "invalid max_attempts: must be an integer between 1 and 1000, got a number of 2000 characters"
    );

    for (limit, ok) in [
        ("1", true),
        ("1e1", true),
        ("1000", true),
        ("-0", false),
        ("0", false),
        ("2.5", false),
        ("1001", false),
        ("18446744073709551616", false),
        ("ten", false),
        ("", false),
    ] {
        let answer = api
            .send(reqwest::Method::GET, "/v1/jobs", Some(OPERATOR_ALL), |r| {
                r.query(&[("limit", limit)])
            })
            .await;
        if ok {
            assert_eq!(answer.status, 200, "limit={limit}: {}", answer.text);
        } else {
            answer.assert_error(400, "invalid_input", Some("limit"));
            let got = if limit.is_empty() {
                "an empty value"
            } else {
                limit
            };
            assert_eq!(
                answer.message(),
                format!("invalid limit: must be an integer between 1 and 1000, got {got}")
            );
        }
    }
    // No answer above named a Rust type or a parser's reading of the number.
    assert_eq!(
        api.all_jobs().await.len(),
        11,
        "refused requests stored nothing"
    );
}

/// A query parameter on a route that takes none is refused with 400 naming it and the rule,
/// on every such route of the OpenAPI document (every route but `GET /v1/jobs`, `GET
/// /v1/workflows` and `GET /v1/audit`), and the
/// request does nothing: `POST /v1/jobs?tenant=...` does not enqueue for the token's tenant.
pub(crate) async fn query_parameters_are_refused_where_none_are_taken(env: &Env) {
    let api = env.api(unbounded()).await;
    let doc = serde_json::to_value(drover_http::openapi()).unwrap();
    let job = api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let takes_query = operation["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
            if takes_query {
                assert!(
                    [
                        ("get", "/v1/jobs"),
                        ("get", "/v1/workflows"),
                        ("get", "/v1/audit")
                    ]
                    .contains(&(method.as_str(), path.as_str())),
                    "{method} {path}"
                );
                continue;
            }
            let concrete = path.replace("{id}", &job).replace("{name}", "default");
            let body = match path.as_str() {
                "/v1/jobs" => Some(json!({"kind": "k"})),
                "/v1/jobs/batch" => Some(json!({"jobs": [{"kind": "k"}]})),
                "/v1/jobs/bulk" => Some(json!({"action": "cancel", "ids": [job]})),
                "/v1/workflows" => Some(json!({"jobs": [{"name": "a", "kind": "k"}]})),
                _ => None,
            };
            let http_method =
                reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            for (query, field) in [
                ("tenant=tenant-b", "tenant"),
                ("&%74enant=tenant-b&x=1", "tenant"),
                ("probe", "probe"),
                ("=1", "query"),
                ("%ff=1", "query"),
            ] {
                let answer = api
                    .send(
                        http_method.clone(),
                        &format!("{concrete}?{query}"),
                        Some(OPERATOR_ALL),
                        |r| match &body {
                            Some(b) => r.json(b),
                            None => r,
                        },
                    )
                    .await;
                answer.assert_error(400, "invalid_input", Some(field));
                let rule = format!("{} {path} takes no query parameters", method.to_uppercase());
                assert!(
                    answer.message().contains(&rule),
                    "{method} {path}?{query}: {}",
                    answer.text
                );
            }
            checked += 1;
        }
    }
    assert_eq!(
        checked, 19,
        "every route but GET /v1/jobs, GET /v1/workflows and GET /v1/audit"
    );
    let refused = api
        .post(
            Some(PRODUCER_A),
            "/v1/jobs?tenant=tenant-b",
            &json!({"kind": "k"}),
        )
        .await;
    refused.assert_error(400, "invalid_input", Some("tenant"));
    assert_eq!(
        refused.message(),
        "invalid tenant: is a query parameter, and POST /v1/jobs takes no query parameters; give the request's fields in its JSON body"
    );
    assert_eq!(api.all_jobs().await.len(), 1, "no refused request enqueued");
    assert_eq!(api.stored(&job).await.state, drover_core::JobState::Queued);
    let queues = api.get(Some(OPERATOR_ALL), "/v1/queues").await;
    assert!(
        queues.json["queues"]
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["paused"] == false),
        "no refused pause paused: {}",
        queues.text
    );
    // An empty query holds no parameter.
    for path in ["/v1/jobs?", "/v1/jobs?&"] {
        let answer = api
            .post(Some(PRODUCER_A), path, &json!({"kind": "k"}))
            .await;
        assert_eq!(answer.status, 202, "{path}: {}", answer.text);
    }
    let got = api.get(Some(PRODUCER_A), &format!("/v1/jobs/{job}?")).await;
    assert_eq!(got.status, 200, "{}", got.text);
}

/// A body on a route that documents none is refused with 400 naming `body` and the rule, on
/// every such route of the OpenAPI document, and the request does nothing: a cancel with a
/// reason does not cancel as if the reason were kept. No body, `Content-Length: 0` and an
/// empty chunked body are no body.
pub(crate) async fn bodies_are_refused_where_none_are_taken(env: &Env) {
    let api = env.api(unbounded()).await;
    let doc = serde_json::to_value(drover_http::openapi()).unwrap();
    let job = api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if !operation["requestBody"].is_null() {
                continue;
            }
            let concrete = path.replace("{id}", &job).replace("{name}", "default");
            let http_method =
                reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            for body in [r#"{"reason": "no longer needed"}"#, "x"] {
                let answer = api
                    .send(http_method.clone(), &concrete, Some(OPERATOR_ALL), |r| {
                        r.header("Content-Type", "application/json").body(body)
                    })
                    .await;
                answer.assert_error(400, "invalid_input", Some("body"));
                let rule = format!("{} {path} takes no body", method.to_uppercase());
                assert!(
                    answer.message().contains(&rule),
                    "{method} {path}: {}",
                    answer.text
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 18, "every route but the three enqueues");
    assert_eq!(api.stored(&job).await.state, drover_core::JobState::Queued);
    assert_eq!(api.all_jobs().await.len(), 1, "no refused request enqueued");
    let queues = api.get(Some(OPERATOR_ALL), "/v1/queues").await;
    assert!(
        queues.json["queues"]
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["paused"] == false),
        "no refused pause paused: {}",
        queues.text
    );
    // No body in any of its empty forms: an empty chunked one, and none at all.
    for chunks in ["0\r\n\r\n", "4\r\nbody\r\n0\r\n\r\n"] {
        let request = format!(
            "POST /v1/queues/default/pause HTTP/1.1\r\nHost: test\r\n\
             Authorization: Bearer {OPERATOR_ALL}\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}"
        );
        let mut stream = raw_send(api.addr, request.as_bytes()).await;
        let answer = read_response(&mut stream).await;
        let expected = if chunks.starts_with('0') { 200 } else { 400 };
        assert_eq!(
            answer.status,
            expected,
            "{chunks:?}: {}",
            String::from_utf8_lossy(&answer.body)
        );
    }
    let cancel = api
        .send(
            reqwest::Method::POST,
            &format!("/v1/jobs/{job}/cancel"),
            Some(OPERATOR_ALL),
            |r| r.header("Content-Length", "0"),
        )
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
}

/// A JSON body declared in a charset other than UTF-8 answers 415 naming the rule; `utf-8` in
/// any case, quoted or not, is accepted.
pub(crate) async fn bodies_in_another_charset_answer_415(env: &Env) {
    let api = env.api(unbounded()).await;
    for path in ["/v1/jobs", "/v1/jobs/batch"] {
        let body = if path == "/v1/jobs" {
            r#"{"kind": "a"}"#
        } else {
            r#"{"jobs": [{"kind": "a"}]}"#
        };
        for content_type in [
            "application/json; charset=utf-16",
            "application/json;charset=UTF-16LE",
            "application/json; charset=latin1",
            "application/json; charset=\"iso-8859-1\"",
            "APPLICATION/JSON; CHARSET=US-ASCII",
            "application/json; charset=",
            "application/json; charset=utf-8; charset=utf-16",
        ] {
            let answer = api
                .send(reqwest::Method::POST, path, Some(OPERATOR_ALL), |r| {
                    r.header("Content-Type", content_type).body(body)
                })
                .await;
            answer.assert_error(415, "unsupported_media_type", None);
            assert!(
                answer.message().contains("must be UTF-8 JSON")
                    && answer.message().contains("charset=utf-8"),
                "{content_type}: {}",
                answer.text
            );
        }
        // A body really written in UTF-16 and declared so: the same 415.
        let utf16: Vec<u8> = body.encode_utf16().flat_map(u16::to_le_bytes).collect();
        api.send(reqwest::Method::POST, path, Some(OPERATOR_ALL), |r| {
            r.header("Content-Type", "application/json; charset=utf-16le")
                .body(utf16)
        })
        .await
        .assert_error(415, "unsupported_media_type", None);
        assert!(api.all_jobs().await.is_empty(), "nothing stored");
    }
    for content_type in [
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "application/json; Charset=\"Utf-8\"",
        "application/vnd.drover+json; charset=utf-8",
    ] {
        let answer = api
            .send(reqwest::Method::POST, "/v1/jobs", Some(OPERATOR_ALL), |r| {
                r.header("Content-Type", content_type)
                    .body(r#"{"kind": "a"}"#)
            })
            .await;
        assert_eq!(answer.status, 202, "{content_type}: {}", answer.text);
    }
}

// ------------------------------------------------------------------------------------------
// OpenAPI statuses against answers

/// The statuses each operation answered, by (lowercase method, path template).
#[derive(Default)]
struct Observed(std::collections::BTreeMap<(String, String), BTreeSet<u16>>);

impl Observed {
    fn note(&mut self, method: &str, path: &str, answer: &Answer) {
        assert_error_shape_unless_ok(answer);
        self.0
            .entry((method.to_owned(), path.to_owned()))
            .or_default()
            .insert(answer.status);
    }
}

/// Error answers have the one shape; 2xx answers are not errors.
fn assert_error_shape_unless_ok(answer: &Answer) {
    if !(200..300).contains(&answer.status) {
        assert_error_shape(&answer.json, &answer.text);
    }
}

/// Every operation of `/v1/openapi.json` answers exactly the statuses it lists: each route is
/// driven to every outcome the code has (success, replay, bad input, a query parameter, no
/// token, a token of one tenant or role, missing job, refused transition, body too large or
/// not UTF-8 JSON, quota, and, on PostgreSQL, a database without the schema) and every answer
/// must be listed; every listed status must have been answered (on the memory store, 503
/// cannot be provoked and is only required to be listed by the routes that read the store).
pub(crate) async fn documented_statuses_are_the_answered_ones(env: &Env) {
    let store = env.store(unbounded()).await;
    let api = env.serve(store.clone(), ApiConfig::default()).await;
    let small = env
        .serve(
            store,
            ApiConfig {
                max_body_bytes: 64,
                ..ApiConfig::default()
            },
        )
        .await;
    let mut seen = Observed::default();
    let doc = serde_json::to_value(drover_http::openapi()).unwrap();
    let mut operations: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            operations.push((method.clone(), path.clone()));
        }
    }

    // Generic probes of every operation: as an operator of every tenant, without a token, as a
    // producer of one tenant, and with a query parameter.
    let job = api
        .enqueue_ok(OPERATOR_ALL, &json!({"kind": "doc.probe"}))
        .await;
    // The generic delete (200) takes a job of its own, so the probe job stays for the rest.
    let doomed = api
        .enqueue_ok(OPERATOR_ALL, &json!({"kind": "doc.probe"}))
        .await;
    let body_of = |method: &str, path: &str| match (method, path) {
        ("post", "/v1/jobs") => Some(json!({"kind": "doc.probe"})),
        ("post", "/v1/jobs/batch") => Some(json!({"jobs": [{"kind": "doc.probe"}]})),
        ("post", "/v1/jobs/bulk") => {
            Some(json!({"action": "cancel", "filter": {"kind": "doc.none"}, "preview": true}))
        }
        ("post", "/v1/workflows") => Some(json!({"jobs": [{"name": "a", "kind": "doc.probe"}]})),
        _ => None,
    };
    for (method, path) in &operations {
        let id = if (method.as_str(), path.as_str()) == ("delete", "/v1/jobs/{id}") {
            &doomed
        } else {
            &job
        };
        let concrete = path.replace("{id}", id).replace("{name}", "default");
        let http_method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        for (token, query) in [
            (Some(OPERATOR_ALL), ""),
            (None, ""),
            (Some(PRODUCER_A), ""),
            (Some(OPERATOR_ALL), "?probe=1"),
        ] {
            let answer = api
                .send(
                    http_method.clone(),
                    &format!("{concrete}{query}"),
                    token,
                    |r| match body_of(method, path) {
                        Some(b) => r.json(&b),
                        None => r,
                    },
                )
                .await;
            seen.note(method, path, &answer);
        }
    }

    // Specific outcomes.
    let post = "post";
    for (path, body, bad, exec, keyed) in [
        (
            "/v1/jobs",
            json!({"kind": "a"}),
            json!({"kind": ""}),
            json!({"kind": "exec", "args": {"program": "/bin/true"}}),
            true,
        ),
        (
            "/v1/jobs/batch",
            json!({"jobs": [{"kind": "a", "idempotency_key": "doc-batch"}]}),
            json!({"jobs": []}),
            json!({"jobs": [{"kind": "exec", "args": {"program": "/bin/true"}}]}),
            false,
        ),
    ] {
        let send_keyed = |body: Value| {
            let api = &api;
            async move {
                if keyed {
                    api.enqueue_with_key(OPERATOR_ALL, "doc-key", &body).await
                } else {
                    api.post(Some(OPERATOR_ALL), path, &body).await
                }
            }
        };
        seen.note(post, path, &send_keyed(body.clone()).await); // 202
        seen.note(post, path, &send_keyed(body.clone()).await); // 200 replay
        let other = if keyed {
            json!({"kind": "b"})
        } else {
            json!({"jobs": [{"kind": "b", "idempotency_key": "doc-batch"}]})
        };
        seen.note(post, path, &send_keyed(other).await); // 409
        seen.note(post, path, &api.post(Some(OPERATOR_ALL), path, &bad).await); // 400
        seen.note(post, path, &api.post(Some(PRODUCER_A), path, &exec).await); // 403
        seen.note(
            post,
            path,
            &small
                .post(Some(OPERATOR_ALL), path, &json!({"kind": "x".repeat(100)}))
                .await,
        ); // 413
        let text = api
            .send(reqwest::Method::POST, path, Some(OPERATOR_ALL), |r| {
                r.header("Content-Type", "text/plain").body("{}")
            })
            .await;
        seen.note(post, path, &text); // 415
    }
    // Bulk: a bad action (400), a producer's retry (403), too large (413), not JSON (415).
    let bulk = "/v1/jobs/bulk";
    seen.note(
        post,
        bulk,
        &api.post(
            Some(OPERATOR_ALL),
            bulk,
            &json!({"action": "explode", "filter": {}}),
        )
        .await,
    );
    seen.note(
        post,
        bulk,
        &api.post(
            Some(PRODUCER_A),
            bulk,
            &json!({"action": "retry", "filter": {}}),
        )
        .await,
    );
    seen.note(
        post,
        bulk,
        &small
            .post(
                Some(OPERATOR_ALL),
                bulk,
                &json!({"action": "cancel", "ids": ["x".repeat(100)]}),
            )
            .await,
    );
    seen.note(
        post,
        bulk,
        &api.send(reqwest::Method::POST, bulk, Some(OPERATOR_ALL), |r| {
            r.header("Content-Type", "text/plain").body("{}")
        })
        .await,
    );
    let get = "get";
    seen.note(
        get,
        "/v1/jobs",
        &api.get(Some(OPERATOR_ALL), "/v1/jobs?state=bogus").await,
    );
    seen.note(
        get,
        "/v1/jobs",
        &api.get(Some(PRODUCER_A), &format!("/v1/jobs?tenant={TENANT_B}"))
            .await,
    );
    let unknown = "0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79";
    for (method, path, suffix) in [
        (get, "/v1/jobs/{id}", ""),
        ("delete", "/v1/jobs/{id}", ""),
        (post, "/v1/jobs/{id}/cancel", "/cancel"),
        (post, "/v1/jobs/{id}/retry", "/retry"),
        (post, "/v1/jobs/{id}/requeue", "/requeue"),
    ] {
        let http_method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        for id in ["not-a-uuid", unknown] {
            let answer = api
                .send(
                    http_method.clone(),
                    &format!("/v1/jobs/{id}{suffix}"),
                    Some(OPERATOR_ALL),
                    |r| r,
                )
                .await;
            seen.note(method, path, &answer); // 400, 404
        }
    }
    // A delete of a job another job waits for (409).
    api.enqueue_ok(
        OPERATOR_ALL,
        &json!({"kind": "doc.probe", "depends_on": [job]}),
    )
    .await;
    seen.note(
        "delete",
        "/v1/jobs/{id}",
        &api.send(
            reqwest::Method::DELETE,
            &format!("/v1/jobs/{job}"),
            Some(OPERATOR_ALL),
            |r| r,
        )
        .await,
    );
    // The probe job: a retry while queued (409), a cancel, then a second cancel and a requeue
    // (409).
    let retry = format!("/v1/jobs/{job}/retry");
    let cancel = format!("/v1/jobs/{job}/cancel");
    seen.note(
        post,
        "/v1/jobs/{id}/retry",
        &api.post_empty(Some(OPERATOR_ALL), &retry).await,
    );
    let first = api.post_empty(Some(OPERATOR_ALL), &cancel).await;
    assert!(matches!(first.status, 200 | 409), "{}", first.text);
    seen.note(
        post,
        "/v1/jobs/{id}/cancel",
        &api.post_empty(Some(OPERATOR_ALL), &cancel).await,
    );
    seen.note(
        post,
        "/v1/jobs/{id}/requeue",
        &api.post_empty(Some(OPERATOR_ALL), &format!("/v1/jobs/{job}/requeue"))
            .await,
    ); // 409: the probe job is cancelled
    let waiting = api
        .enqueue_ok(
            OPERATOR_ALL,
            &json!({"kind": "doc.probe", "delay_ms": 60_000}),
        )
        .await;
    seen.note(
        post,
        "/v1/jobs/{id}/requeue",
        &api.post_empty(Some(OPERATOR_ALL), &format!("/v1/jobs/{waiting}/requeue"))
            .await,
    ); // 200
       // Workflows: a replay of every job (200), a key reused with another request (409), a bad
       // graph (400), exec by a producer (403), too large (413), not JSON (415); reads and
       // changes of a stored workflow (200), a malformed id (400), another tenant's list (403),
       // a producer's retry (403, in the generic probes), a unique key taken meanwhile (409).
    let wf = "/v1/workflows";
    let keyed = json!({"jobs": [{"name": "a", "kind": "doc.wf", "idempotency_key": "doc-wf"}]});
    let created = api.post(Some(OPERATOR_ALL), wf, &keyed).await;
    seen.note(post, wf, &created); // 202
    seen.note(post, wf, &api.post(Some(OPERATOR_ALL), wf, &keyed).await); // 200
    seen.note(
        post,
        wf,
        &api.post(
            Some(OPERATOR_ALL),
            wf,
            &json!({"jobs": [{"name": "a", "kind": "doc.other", "idempotency_key": "doc-wf"}]}),
        )
        .await,
    ); // 409
    seen.note(
        post,
        wf,
        &api.post(Some(OPERATOR_ALL), wf, &json!({"jobs": []})).await,
    ); // 400
    seen.note(
        post,
        wf,
        &api.post(
            Some(PRODUCER_A),
            wf,
            &json!({"jobs": [{"name": "a", "kind": "exec", "args": {"program": "/bin/true"}}]}),
        )
        .await,
    ); // 403
    seen.note(
        post,
        wf,
        &small
            .post(
                Some(OPERATOR_ALL),
                wf,
                &json!({"jobs": [{"name": "a", "kind": "x".repeat(100)}]}),
            )
            .await,
    ); // 413
    seen.note(
        post,
        wf,
        &api.send(reqwest::Method::POST, wf, Some(OPERATOR_ALL), |r| {
            r.header("Content-Type", "text/plain").body("{}")
        })
        .await,
    ); // 415
    seen.note(
        get,
        wf,
        &api.get(Some(PRODUCER_A), &format!("{wf}?tenant={TENANT_B}"))
            .await,
    ); // 403
    seen.note(
        get,
        "/v1/audit",
        &api.get(Some(PRODUCER_A), &format!("/v1/audit?tenant={TENANT_B}"))
            .await,
    ); // 403
    let unique = api
        .post(
            Some(OPERATOR_ALL),
            wf,
            &json!({"jobs": [{"name": "u", "kind": "doc.wf", "unique_key": "doc-unique"}]}),
        )
        .await;
    assert_eq!(unique.status, 202, "{}", unique.text);
    let unique = unique.json["id"].as_str().unwrap().to_owned();
    for (method, path, concrete) in [
        (get, "/v1/workflows/{id}", format!("{wf}/{unique}")),
        (
            post,
            "/v1/workflows/{id}/cancel",
            format!("{wf}/{unique}/cancel"),
        ),
        (
            post,
            "/v1/workflows/{id}/retry",
            format!("{wf}/{unique}/retry"),
        ),
        (get, "/v1/workflows/{id}", format!("{wf}/not-a-uuid")),
        (
            post,
            "/v1/workflows/{id}/cancel",
            format!("{wf}/not-a-uuid/cancel"),
        ),
        (
            post,
            "/v1/workflows/{id}/retry",
            format!("{wf}/not-a-uuid/retry"),
        ),
    ] {
        let http_method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let answer = api
            .send(http_method, &concrete, Some(OPERATOR_ALL), |r| r)
            .await;
        seen.note(method, path, &answer); // 200 (the retry runs the cancelled job), 400
    }
    api.post_empty(Some(OPERATOR_ALL), &format!("{wf}/{unique}/cancel"))
        .await;
    api.enqueue_ok(
        OPERATOR_ALL,
        &json!({"kind": "doc.wf", "unique_key": "doc-unique"}),
    )
    .await;
    seen.note(
        post,
        "/v1/workflows/{id}/retry",
        &api.post_empty(Some(OPERATOR_ALL), &format!("{wf}/{unique}/retry"))
            .await,
    ); // 409
    for path in ["/v1/queues/{name}/pause", "/v1/queues/{name}/resume"] {
        let concrete = path.replace("{name}", "no%20spaces");
        seen.note(
            post,
            path,
            &api.post_empty(Some(OPERATOR_ALL), &concrete).await,
        ); // 400
    }
    seen.note(
        post,
        "/v1/queues/{name}/resume",
        &api.post_empty(Some(OPERATOR_ALL), "/v1/queues/never-used/resume")
            .await,
    ); // 404

    // Quotas: a server whose tenants may have one pending job each (tenant B only here).
    let quota = env
        .api(StoreConfig {
            quotas: Quotas {
                max_pending: None,
                max_tenant_pending: Some(1),
            },
            ..StoreConfig::default()
        })
        .await;
    let b_first = quota.enqueue_ok(PRODUCER_B, &json!({"kind": "q"})).await;
    let cancelled = quota
        .post_empty(Some(PRODUCER_B), &format!("/v1/jobs/{b_first}/cancel"))
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    quota.enqueue_ok(PRODUCER_B, &json!({"kind": "q"})).await;
    seen.note(
        post,
        "/v1/jobs",
        &quota
            .post(Some(PRODUCER_B), "/v1/jobs", &json!({"kind": "q"}))
            .await,
    );
    seen.note(
        post,
        "/v1/jobs/batch",
        &quota
            .post(
                Some(PRODUCER_B),
                "/v1/jobs/batch",
                &json!({"jobs": [{"kind": "q"}]}),
            )
            .await,
    );
    seen.note(
        post,
        "/v1/jobs/{id}/retry",
        &quota
            .post_empty(Some(OPERATOR_B), &format!("/v1/jobs/{b_first}/retry"))
            .await,
    );
    let b_workflow = quota
        .post(
            Some(OPERATOR_B),
            "/v1/workflows",
            &json!({"jobs": [{"name": "a", "kind": "q"}]}),
        )
        .await;
    seen.note(post, "/v1/workflows", &b_workflow); // 429: tenant B has its one pending job
                                                   // A workflow of tenant B cancelled while B's pending job was cancelled too, then retried
                                                   // once B's place is taken again: 429.
    let queued = quota.all_jobs().await;
    let pending = queued
        .iter()
        .find(|j| j.state == drover_core::JobState::Queued)
        .map(|j| j.id.to_string())
        .unwrap();
    quota
        .post_empty(Some(OPERATOR_B), &format!("/v1/jobs/{pending}/cancel"))
        .await;
    let b_workflow = quota
        .post(
            Some(OPERATOR_B),
            "/v1/workflows",
            &json!({"jobs": [{"name": "a", "kind": "q"}]}),
        )
        .await;
    assert_eq!(b_workflow.status, 202, "{}", b_workflow.text);
    let b_workflow = b_workflow.json["id"].as_str().unwrap().to_owned();
    quota
        .post_empty(
            Some(OPERATOR_B),
            &format!("/v1/workflows/{b_workflow}/cancel"),
        )
        .await;
    quota.enqueue_ok(PRODUCER_B, &json!({"kind": "q"})).await;
    seen.note(
        post,
        "/v1/workflows/{id}/retry",
        &quota
            .post_empty(
                Some(OPERATOR_B),
                &format!("/v1/workflows/{b_workflow}/retry"),
            )
            .await,
    ); // 429

    // PostgreSQL: a database without the schema answers 503 `fatal` on every route that reads
    // the store.
    let mut fatal_seen = false;
    if let Some(db) = env.database() {
        let fresh = db.server().database(Schema::Empty).await;
        let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
            let store = drover_store_postgres::PgStore::connect_with(
                fresh.connect.clone(),
                drover_store_postgres::PgOptions::default(),
            )
            .await
            .expect("connect");
            let bare = env
                .serve(std::sync::Arc::new(store.clone()), ApiConfig::default())
                .await;
            let mut seen_here = Vec::new();
            for (method, path) in &operations {
                let concrete = path.replace("{id}", unknown).replace("{name}", "default");
                let http_method =
                    reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
                let answer = bare
                    .send(
                        http_method,
                        &concrete,
                        Some(OPERATOR_ALL),
                        |r| match body_of(method, path) {
                            Some(b) => r.json(&b),
                            None => r,
                        },
                    )
                    .await;
                if path != "/v1/openapi.json" {
                    answer.assert_error(503, "fatal", None);
                    assert!(
                        answer.message().contains("drover migrate"),
                        "{}",
                        answer.text
                    );
                }
                seen_here.push((method.clone(), path.clone(), answer));
            }
            bare.stop().await;
            store.close().await;
            seen_here
        }))
        .await;
        fresh.drop_database().await;
        match result {
            Ok(answers) => {
                for (method, path, answer) in answers {
                    seen.note(&method, &path, &answer);
                }
                fatal_seen = true;
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    let mut problems = Vec::new();
    for (method, path) in &operations {
        let listed: BTreeSet<u16> = doc["paths"][path][method]["responses"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.parse().unwrap())
            .collect();
        let answered = seen
            .0
            .get(&(method.clone(), path.clone()))
            .cloned()
            .unwrap_or_default();
        let unlisted: Vec<u16> = answered.difference(&listed).copied().collect();
        let mut unanswered: Vec<u16> = listed.difference(&answered).copied().collect();
        if !fatal_seen && path != "/v1/openapi.json" {
            if !listed.contains(&503) {
                problems.push(format!(
                    "{method} {path} reads the store: 503 must be listed"
                ));
            }
            unanswered.retain(|s| *s != 503);
        }
        if !unlisted.is_empty() || !unanswered.is_empty() {
            problems.push(format!(
                "{method} {path}: answered but not listed {unlisted:?}; listed but never answered {unanswered:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

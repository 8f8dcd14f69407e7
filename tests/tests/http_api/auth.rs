//! Authentication and authorization over HTTP: 401 for missing or wrong tokens, 403 for
//! operator-only actions and `exec`, tenant isolation, and `drover serve` refusing to start
//! without tokens.

use drover_core::JobState;
use serde_json::json;

use crate::harness::*;

// ------------------------------------------------------------------------------------------
// Authentication and authorization

/// Missing, wrong or malformed tokens answer 401 with a Bearer challenge; the scheme is
/// case-insensitive.
pub(crate) async fn missing_or_wrong_token_answers_401(env: &Env) {
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
    // Two credentials are ambiguous (which tenant?): refused, even when both are valid.
    api.send(reqwest::Method::GET, "/v1/jobs", None, |r| {
        r.header("Authorization", format!("Bearer {PRODUCER_A}"))
            .header("Authorization", format!("Bearer {PRODUCER_A}"))
    })
    .await
    .assert_error(401, "unauthorized", None);

    let refused = api.post(None, "/v1/jobs", &json!({"kind": "k"})).await;
    refused.assert_error(401, "unauthorized", None);
    assert!(
        api.all_jobs().await.is_empty(),
        "an unauthenticated enqueue stores nothing"
    );
}

/// One thing wrong with a request: what, the path and query, extra headers, the body.
struct Fault {
    what: &'static str,
    target: String,
    headers: Vec<(&'static str, &'static str)>,
    body: Option<String>,
}

/// The token is checked before anything else about a request: on every operation that needs
/// one, a request without a token (or with a wrong one) answers 401, whatever else is wrong
/// with it (a query parameter, a body that is not JSON, a wrong content type, a body over the
/// limit, a malformed id or queue name, a repeated `Idempotency-Key`), and changes nothing.
/// Routes that need no token still refuse a query parameter with 400.
pub(crate) async fn authentication_comes_before_request_validation(env: &Env) {
    let store = env.store(unbounded()).await;
    let api = env
        .serve(
            store,
            drover_http::ApiConfig {
                max_body_bytes: 64,
                ..drover_http::ApiConfig::default()
            },
        )
        .await;
    let job = api.enqueue_ok(PRODUCER_A, &json!({"kind": "k"})).await;
    let doc = serde_json::to_value(drover_http::openapi()).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let http_method =
                reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let secured = operation["security"]
                .as_array()
                .is_some_and(|s| !s.is_empty());
            let concrete = path.replace("{id}", &job).replace("{name}", "default");
            if !secured {
                let answer = api
                    .send(http_method, &format!("{concrete}?probe=1"), None, |r| r)
                    .await;
                answer.assert_error(400, "invalid_input", Some("probe"));
                continue;
            }
            let takes_body = !operation["requestBody"].is_null();
            let malformed = path
                .replace("{id}", "not-a-uuid")
                .replace("{name}", "no%20spaces");
            let fault = |what,
                         target: String,
                         headers: Vec<(&'static str, &'static str)>,
                         body: Option<String>| Fault {
                what,
                target,
                headers,
                body,
            };
            let mut faults = vec![
                fault(
                    "a query parameter",
                    format!("{concrete}?probe=1"),
                    vec![],
                    None,
                ),
                fault(
                    "a query string that is not UTF-8",
                    format!("{concrete}?%ff=1"),
                    vec![],
                    None,
                ),
            ];
            if malformed != concrete {
                faults.push(fault("a malformed path parameter", malformed, vec![], None));
            }
            if takes_body {
                let json_type = ("Content-Type", "application/json");
                let body = |text: &str| Some(text.to_owned());
                faults.extend([
                    fault(
                        "a body that is not JSON",
                        concrete.clone(),
                        vec![json_type],
                        body("{"),
                    ),
                    fault(
                        "a wrong content type",
                        concrete.clone(),
                        vec![("Content-Type", "text/plain")],
                        body("{}"),
                    ),
                    fault(
                        "a charset other than UTF-8",
                        concrete.clone(),
                        vec![("Content-Type", "application/json; charset=latin1")],
                        body("{}"),
                    ),
                    fault("no content type", concrete.clone(), vec![], body("{}")),
                    fault(
                        "a body over the limit",
                        concrete.clone(),
                        vec![json_type],
                        Some(format!("{{\"kind\": \"{}\"}}", "x".repeat(100))),
                    ),
                    fault(
                        "an unknown field and a query parameter",
                        format!("{concrete}?tenant=tenant-b"),
                        vec![json_type],
                        body(r#"{"kind": "k", "bogus": 1}"#),
                    ),
                    fault(
                        "a repeated Idempotency-Key",
                        concrete.clone(),
                        vec![
                            json_type,
                            ("Idempotency-Key", "a"),
                            ("Idempotency-Key", "b"),
                        ],
                        body(r#"{"kind": "k"}"#),
                    ),
                ]);
            }
            for Fault {
                what: fault,
                target,
                headers,
                body,
            } in &faults
            {
                for token in [None, Some("wrong-token-0000000000")] {
                    let answer = api
                        .send(http_method.clone(), target, token, |mut r| {
                            for (name, value) in headers {
                                r = r.header(*name, *value);
                            }
                            match body {
                                Some(b) => r.body(b.clone()),
                                None => r,
                            }
                        })
                        .await;
                    assert_eq!(
                        answer.status, 401,
                        "{method} {target} with {fault} and token {token:?}: {}",
                        answer.text
                    );
                    answer.assert_error(401, "unauthorized", None);
                    assert_eq!(answer.headers["www-authenticate"], "Bearer");
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 20, "every operation that needs a token");
    let jobs = api.all_jobs().await;
    assert_eq!(jobs.len(), 1, "no refused request enqueued");
    assert_eq!(
        jobs[0].state,
        JobState::Queued,
        "no refused request changed the job"
    );
    // HEAD is served by the GET route, and checked as that operation: a token where GET needs
    // one, none for readiness, and the filters of GET /v1/jobs.
    let head = |path: &'static str, token: Option<&'static str>| {
        let api = &api;
        async move {
            api.send(reqwest::Method::HEAD, path, token, |r| r)
                .await
                .status
        }
    };
    assert_eq!(head("/v1/jobs?probe=1", None).await, 401);
    assert_eq!(head("/v1/queues", None).await, 401);
    assert_eq!(head("/v1/ready", None).await, 200);
    assert_eq!(head("/v1/jobs?state=queued", Some(PRODUCER_A)).await, 200);
    assert_eq!(head("/v1/queues?probe=1", Some(OPERATOR_ALL)).await, 400);
    // The same faults with a token get the answer that names them.
    api.get(Some(OPERATOR_ALL), "/v1/queues?probe=1")
        .await
        .assert_error(400, "invalid_input", Some("probe"));
    api.send(reqwest::Method::POST, "/v1/jobs", Some(PRODUCER_A), |r| {
        r.header("Content-Type", "text/plain").body("{}")
    })
    .await
    .assert_error(415, "unsupported_media_type", None);
    api.send(reqwest::Method::POST, "/v1/jobs", Some(PRODUCER_A), |r| {
        r.header("Content-Type", "application/json").body("{")
    })
    .await
    .assert_error(400, "invalid_input", Some("body"));
}

/// A producer may not retry, pause, resume, enqueue `exec`, or act for another tenant: 403.
pub(crate) async fn producer_is_forbidden_operator_actions(env: &Env) {
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
    let queues = api.get(Some(OPERATOR_ALL), "/v1/queues").await;
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
pub(crate) async fn tenants_are_isolated(env: &Env) {
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
// `drover serve` startup

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
    // Tokens and --insecure-no-auth contradict each other: refused, whichever way the tokens
    // come, rather than one of them winning without a word.
    let both = auth_mode(Some(&file), true).unwrap_err().to_string();
    assert!(
        both.contains("--tokens") && both.contains("--insecure-no-auth"),
        "{both}"
    );
    std::fs::write(&file, "# nothing here\n").unwrap();
    assert!(auth_mode(Some(&file), false).is_err());
    std::fs::write(&file, "short-secret:acme:producer\n").unwrap();
    let malformed = auth_mode(Some(&file), false).unwrap_err().to_string();
    assert!(!malformed.contains("short-secret"), "{malformed}");
}

/// `drover serve --insecure-no-auth` refuses to start when tokens are given as well, by
/// `--tokens FILE` or by `DROVER_API_TOKENS`, saying which; nothing listens.
#[test]
fn serve_refuses_tokens_with_insecure_no_auth() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, token_spec().replace(',', "\n")).unwrap();
    let run = |args: &[&str], env_tokens: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_drover-test-worker"));
        command
            .arg("serve")
            .args(args)
            .args(["--insecure-no-auth", "--listen", "127.0.0.1:0"])
            .env_remove("DROVER_DATABASE_URL")
            .env_remove("DROVER_API_TOKENS");
        if let Some(spec) = env_tokens {
            command.env("DROVER_API_TOKENS", spec);
        }
        // A server that starts anyway is killed after 30 s, so the test fails instead of hanging.
        let mut child = command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run drover serve");
        let deadline = std::time::Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for drover serve") {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        // Refused: exited on its own, with a usage error (exit code 2).
        (status.is_some_and(|s| s.code() == Some(2)), stderr)
    };
    let (refused, stderr) = run(&["--tokens", file.to_str().unwrap()], None);
    assert!(refused, "{stderr}");
    assert!(
        stderr.contains("--tokens and --insecure-no-auth contradict each other"),
        "{stderr}"
    );
    assert!(!stderr.contains("API on http://"), "{stderr}");
    let (refused, stderr) = run(&[], Some(&token_spec()));
    assert!(refused, "{stderr}");
    assert!(
        stderr.contains("DROVER_API_TOKENS is set but --insecure-no-auth"),
        "{stderr}"
    );
    assert!(!stderr.contains(PRODUCER_A), "no token echoed: {stderr}");
}

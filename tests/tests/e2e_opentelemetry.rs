//! End-to-end OpenTelemetry tests (docs/opentelemetry.md) with real `drover` processes on
//! PostgreSQL and an OTLP/HTTP receiver in this process (protobuf decoded with
//! `opentelemetry-proto`): a job enqueued over HTTP with a `traceparent` header runs on a
//! separate worker, whose attempt span carries that trace and the messaging attributes and no
//! args; a retried job's second attempt starts a trace of its own linked to the enqueue
//! (docs/adr/0013-trace-context.md); an unreachable collector neither fails nor holds up jobs
//! and is reported once. `drover enqueue` joins the trace in `TRACEPARENT` and sends its
//! spans (a batch's `publish` links its jobs' `create` spans; a workflow is one `publish`). A
//! handler's log lines, its own spans and the children it enqueues nest inside its attempt's
//! span, in the collector and in the worker's JSON log (`drover-test-worker`'s `traced` kind).
//!
//! The receiver's arrivals are the events waited on, with a generous deadline; nothing sleeps.
//!
//! Needs `DROVER_TEST_DATABASE_URL`; without it every test here prints `SKIPPED ...` and
//! passes, unless `DROVER_REQUIRE_POSTGRES` is set (CI), when it fails.

mod cli_support;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use cli_support::{wait_until, TempFile, TestDb};
use drover_store_postgres::sqlx;
use drover_tests::process::Process;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};

/// Deadline for spans and jobs on the loaded 2-core CI machine.
const WAIT: Duration = Duration::from_secs(60);

/// The caller's trace: its id and the id of the caller's span.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// Spans the receiver got, in arrival order, and the names of the metrics with their
/// services.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Span>>>, Arc<Mutex<Vec<String>>>);

impl Received {
    fn spans(&self) -> Vec<Span> {
        self.0.lock().unwrap().clone()
    }

    fn metrics(&self) -> Vec<String> {
        self.1.lock().unwrap().clone()
    }
}

async fn metrics(State(received): State<Received>, body: Bytes) -> &'static str {
    let request = ExportMetricsServiceRequest::decode(body).expect("an OTLP protobuf body");
    let mut names = received.1.lock().unwrap();
    for resource in request.resource_metrics {
        for scope in resource.scope_metrics {
            names.extend(scope.metrics.into_iter().map(|m| m.name));
        }
    }
    ""
}

async fn traces(State(received): State<Received>, body: Bytes) -> &'static str {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
    let mut spans = received.0.lock().unwrap();
    for resource in request.resource_spans {
        for scope in resource.scope_spans {
            spans.extend(scope.spans);
        }
    }
    ""
}

/// Starts the receiver on a free port of 127.0.0.1; its endpoint URL.
async fn receiver(received: Received) -> String {
    let router = axum::Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .with_state(received);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// Makes `command` export to `endpoint`, quickly (a 100 ms batch delay).
fn export_to(command: &mut tokio::process::Command, endpoint: &str, service: &str) {
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_SERVICE_NAME", service)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "500")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "2000");
}

/// A `drover` process exporting to `endpoint`.
fn exporting(db: &TestDb, endpoint: &str, service: &str, args: &[&str]) -> Process {
    let mut command = db.command(args);
    export_to(&mut command, endpoint, service);
    Process::spawn(command, args)
}

/// Makes `command` a caller in the caller's trace: `TRACEPARENT` and `TRACESTATE`, the
/// OpenTelemetry environment carriers `drover enqueue` reads.
fn in_callers_trace(command: &mut tokio::process::Command) {
    command
        .env("TRACEPARENT", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .env("TRACESTATE", "caller=yes");
}

/// Runs `drover --json ARGS` of `command` to its end; its answer.
async fn answer(mut command: tokio::process::Command, args: &[&str]) -> Value {
    let out = tokio::time::timeout(WAIT, command.stderr(Stdio::piped()).output())
        .await
        .unwrap_or_else(|_| panic!("drover {args:?} did not finish"))
        .expect("run drover");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "drover {args:?}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("drover {args:?}: {e}"))
}

/// The stored trace context of job `id`: its trace, its span and its trace state.
async fn stored_context(db: &TestDb, id: &str) -> (String, String, Option<String>) {
    let (traceparent, tracestate): (String, Option<String>) = sqlx::query_as(
        "SELECT trace_context->>'traceparent', trace_context->>'tracestate' \
         FROM drover.jobs WHERE id = $1::uuid",
    )
    .bind(id)
    .fetch_one(db.pool())
    .await
    .expect("a job with a trace context");
    let parts: Vec<&str> = traceparent.split('-').collect();
    (parts[1].to_owned(), parts[2].to_owned(), tracestate)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<Value> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(match value {
        AnyValue::StringValue(s) => json!(s),
        AnyValue::IntValue(n) => json!(n),
        AnyValue::BoolValue(b) => json!(b),
        AnyValue::DoubleValue(d) => json!(d),
        other => json!(format!("{other:?}")),
    })
}

/// The attempt spans of job `id`, by attempt.
fn attempts(received: &Received, id: &str) -> Vec<Span> {
    let mut spans: Vec<Span> = received
        .spans()
        .into_iter()
        .filter(|s| attribute(s, "messaging.message.id") == Some(json!(id)))
        .filter(|s| s.kind == SpanKind::Consumer as i32)
        .collect();
    spans.sort_by_key(|s| attribute(s, "drover.job.attempt").and_then(|a| a.as_i64()));
    spans
}

/// POSTs `body` to `/v1/jobs` of the API at `api` with the caller's trace headers; the id.
async fn enqueue_traced(api: &str, body: Value) -> String {
    let response = reqwest::Client::new()
        .post(format!("{api}/v1/jobs"))
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .header("tracestate", "caller=yes")
        .json(&body)
        .send()
        .await
        .expect("the API answers");
    assert_eq!(response.status(), 202);
    let answer: Value = response.json().await.unwrap();
    answer["job"]["id"].as_str().expect("an id").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_enqueue_and_its_attempts_form_one_trace() {
    let Some(db) = TestDb::migrated("an_http_enqueue_and_its_attempts_form_one_trace").await else {
        return;
    };
    let received = Received::default();
    let endpoint = receiver(received.clone()).await;
    let serve = exporting(
        &db,
        &endpoint,
        "drover-api",
        &["serve", "--insecure-no-auth", "--listen", "127.0.0.1:0"],
    );
    let line = serve.wait_for_line("API on http://", WAIT).await;
    let api = line
        .split("API on ")
        .nth(1)
        .and_then(|rest| rest.split("/v1").next())
        .expect("the API's address")
        .to_owned();
    let mut worker = exporting(&db, &endpoint, "drover-worker", &["worker", "--slots", "2"]);
    worker.worker_started().await;

    let secret = "hunter2-do-not-export";
    let plain = enqueue_traced(&api, json!({"kind": "noop", "args": {"password": secret}})).await;
    let retried = enqueue_traced(
        &api,
        json!({"kind": "fail", "args": {"fail_times": 1}, "max_attempts": 2}),
    )
    .await;

    let plain_attempt = wait_until("the noop job's attempt span", WAIT, || {
        let spans = attempts(&received, &plain);
        async move { spans.into_iter().next() }
    })
    .await;
    assert_eq!(hex(&plain_attempt.trace_id), TRACE_ID, "the caller's trace");
    assert_eq!(plain_attempt.name, "process default");
    for (key, value) in [
        ("messaging.system", json!("drover")),
        ("messaging.destination.name", json!("default")),
        ("messaging.operation.type", json!("process")),
        ("drover.job.kind", json!("noop")),
        ("drover.job.attempt", json!(1)),
        ("drover.tenant", json!("default")),
        ("drover.job.outcome", json!("succeeded")),
    ] {
        assert_eq!(attribute(&plain_attempt, key), Some(value), "{key}");
    }
    // The attempt descends from the API's publish span, itself a child of the caller's span.
    let publish = wait_until("the enqueue's publish span", WAIT, || {
        let parent = plain_attempt.parent_span_id.clone();
        let spans = received.spans();
        async move { spans.into_iter().find(|s| s.span_id == parent) }
    })
    .await;
    assert_eq!(publish.name, "publish default");
    assert_eq!(publish.kind, SpanKind::Producer as i32);
    assert_eq!(hex(&publish.parent_span_id), CALLER_SPAN);
    assert_eq!(hex(&publish.trace_id), TRACE_ID);

    // The retried job: attempt 1 in the caller's trace, attempt 2 in a trace of its own
    // linked to the enqueue.
    let [first, second] = wait_until("both attempt spans of the retried job", WAIT, || {
        let spans = attempts(&received, &retried);
        async move { <[Span; 2]>::try_from(spans).ok() }
    })
    .await;
    assert_eq!(hex(&first.trace_id), TRACE_ID);
    assert_eq!(
        attribute(&first, "drover.job.outcome"),
        Some(json!("retried"))
    );
    assert_eq!(
        first.status.as_ref().map(|s| s.message.as_str()),
        Some("planned failure 1 of 1 (fail_times)")
    );
    assert_ne!(hex(&second.trace_id), TRACE_ID, "a trace of its own");
    assert!(second.parent_span_id.is_empty(), "a root span");
    assert_eq!(attribute(&second, "drover.job.attempt"), Some(json!(2)));
    assert_eq!(
        attribute(&second, "drover.job.outcome"),
        Some(json!("succeeded"))
    );
    let link = second.links.first().expect("a link to the enqueue");
    assert_eq!(hex(&link.trace_id), TRACE_ID);
    assert_eq!(
        link.span_id, first.parent_span_id,
        "linked to the publish span"
    );

    // The worker's metrics arrive too.
    wait_until("the worker's metrics", WAIT, || {
        let names = received.metrics();
        async move {
            [
                "messaging.process.duration",
                "drover.job.queue_wait",
                "drover.jobs.finished",
            ]
            .iter()
            .all(|name| names.iter().any(|n| n == name))
            .then_some(())
        }
    })
    .await;

    // No attribute of any span holds the args.
    for span in received.spans() {
        for kv in &span.attributes {
            let text = format!("{:?}", kv.value);
            assert!(
                !text.contains(secret),
                "{} of {} holds the args",
                kv.key,
                span.name
            );
        }
    }
    worker.stop(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_neither_fails_nor_holds_up_jobs() {
    let Some(db) =
        TestDb::migrated("an_unreachable_collector_neither_fails_nor_holds_up_jobs").await
    else {
        return;
    };
    // A port nothing listens on: bound, then closed.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut worker = exporting(
        &db,
        &format!("http://{closed}"),
        "drover-worker",
        &["worker", "--slots", "4"],
    );
    worker.worker_started().await;
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(db.enqueue("noop", "{}", &[]).await);
    }
    db.wait_jobs(&ids, "succeeded", None, WAIT).await;
    worker.stop(WAIT).await;
    let stderr = worker.stderr();
    let warnings = stderr
        .lines()
        .filter(|line| line.contains("OpenTelemetry export failed"))
        .count();
    assert_eq!(warnings, 1, "one warning, not one per batch: {stderr}");
}

/// `drover enqueue` joins the caller's trace given in `TRACEPARENT`/`TRACESTATE` and sends its
/// spans before it exits: one job is a `publish` span; a file's batch a `publish` span that
/// links a `create` span per job; a workflow one `publish` span. Each job stores the span it
/// was enqueued in, so its attempts descend from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_enqueue_joins_the_callers_trace_and_a_batch_links_its_jobs() {
    let Some(db) =
        TestDb::migrated("a_cli_enqueue_joins_the_callers_trace_and_a_batch_links_its_jobs").await
    else {
        return;
    };
    let received = Received::default();
    let endpoint = receiver(received.clone()).await;
    let enqueue = |args: &[&str]| {
        let mut command = db.command(args);
        export_to(&mut command, &endpoint, "drover-cli");
        in_callers_trace(&mut command);
        command
    };
    let span = |id: &str| {
        received
            .spans()
            .into_iter()
            .find(|s| hex(&s.span_id) == id)
            .unwrap_or_else(|| panic!("span {id} was not sent before the command exited"))
    };

    // One job.
    let args = ["--json", "enqueue", "noop"];
    let one = answer(enqueue(&args), &args).await;
    let (trace, span_id, state) = stored_context(&db, one["job"]["id"].as_str().unwrap()).await;
    assert_eq!(
        (trace.as_str(), state.as_deref()),
        (TRACE_ID, Some("caller=yes"))
    );
    let publish = span(&span_id);
    assert_eq!(publish.name, "publish default");
    assert_eq!(publish.kind, SpanKind::Producer as i32);
    assert_eq!(hex(&publish.parent_span_id), CALLER_SPAN);
    assert_eq!(attribute(&publish, "drover.job.kind"), Some(json!("noop")));

    // A batch from a file: a create span per job, in the caller's trace, each linked from the
    // batch's publish span.
    let file = TempFile::new(
        "batch.jsonl",
        "{\"kind\": \"noop\", \"queue\": \"batch\"}\n{\"kind\": \"noop\", \"queue\": \"batch\"}\n",
    );
    let args = ["--json", "enqueue", "--file", file.arg()];
    assert_eq!(answer(enqueue(&args), &args).await["created"], 2);
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT id::text FROM drover.jobs WHERE queue = 'batch' ORDER BY id")
            .fetch_all(db.pool())
            .await
            .unwrap();
    let mut created = Vec::new();
    for id in &ids {
        let (trace, span_id, _) = stored_context(&db, id).await;
        assert_eq!(trace, TRACE_ID);
        let create = span(&span_id);
        assert_eq!(create.name, "create batch");
        assert_eq!(create.kind, SpanKind::Producer as i32);
        assert_eq!(hex(&create.parent_span_id), CALLER_SPAN);
        created.push(span_id);
    }
    let batch = received
        .spans()
        .into_iter()
        .find(|s| s.name == "publish batch")
        .expect("the batch's publish span");
    assert_eq!(
        attribute(&batch, "messaging.batch.message_count"),
        Some(json!(2))
    );
    assert_eq!(
        (hex(&batch.trace_id), hex(&batch.parent_span_id)),
        (TRACE_ID.to_owned(), CALLER_SPAN.to_owned()),
        "the batch is in the caller's trace too"
    );
    let mut linked: Vec<String> = batch.links.iter().map(|l| hex(&l.span_id)).collect();
    linked.sort();
    created.sort();
    assert_eq!(
        linked, created,
        "the publish span links each job's create span"
    );

    // A workflow: one publish span every job of the graph descends from.
    let workflow = TempFile::new(
        "workflow.json",
        r#"{"jobs": [{"name": "a", "kind": "noop"}, {"name": "b", "kind": "noop", "depends_on": ["a"]}]}"#,
    );
    let args = ["--json", "enqueue", "--workflow", workflow.arg()];
    let graph = answer(enqueue(&args), &args).await;
    let jobs = graph["jobs"].as_array().expect("the workflow's jobs");
    let mut contexts = Vec::new();
    for job in jobs {
        contexts.push(stored_context(&db, job["job"]["id"].as_str().unwrap()).await);
    }
    assert_eq!(contexts.len(), 2);
    assert_eq!(contexts[0], contexts[1], "one context for the graph");
    assert_eq!(contexts[0].0, TRACE_ID);
    let publish = span(&contexts[0].1);
    assert_eq!(publish.name, "publish");
    assert_eq!(hex(&publish.parent_span_id), CALLER_SPAN);
    assert_eq!(
        attribute(&publish, "messaging.batch.message_count"),
        Some(json!(2))
    );
}

/// A handler's own log lines and spans, and the children it enqueues, nest inside its
/// attempt's `process` span, in the trace given at enqueue (`TRACEPARENT`, here with export
/// off: the stored context is the caller's span): in the collector (a log line is an event of
/// the attempt span), and in the worker's JSON log, whose filter names only the handler's
/// target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_logs_spans_and_children_nest_in_its_attempt() {
    let Some(db) = TestDb::migrated("a_handlers_logs_spans_and_children_nest_in_its_attempt").await
    else {
        return;
    };
    let received = Received::default();
    let endpoint = receiver(received.clone()).await;
    // The `drover` command line plus the `traced` kind.
    let args = ["--json", "--log", "warn,drover_test_worker=info", "worker"];
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_drover-test-worker"));
    command
        .args(args)
        .env("DROVER_DATABASE_URL", &db.url)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    export_to(&mut command, &endpoint, "drover-worker");
    let mut worker = Process::spawn(command, &args);
    worker.wait_for_line(" started on ", WAIT).await;
    let args = ["--json", "enqueue", "traced"];
    let mut command = db.command(&args);
    in_callers_trace(&mut command);
    let enqueued = answer(command, &args).await;
    let id = enqueued["job"]["id"].as_str().unwrap().to_owned();

    let attempt = wait_until("the traced job's attempt span", WAIT, || {
        let spans = attempts(&received, &id);
        async move { spans.into_iter().next() }
    })
    .await;
    assert_eq!(hex(&attempt.trace_id), TRACE_ID);
    assert_eq!(hex(&attempt.parent_span_id), CALLER_SPAN);
    let events: Vec<&str> = attempt.events.iter().map(|e| e.name.as_str()).collect();
    assert!(
        events.contains(&"traced handler says hello"),
        "the handler's log line is an event of its attempt: {events:?}"
    );
    let step = wait_until("the handler's own span", WAIT, || {
        let spans = received.spans();
        async move { spans.into_iter().find(|s| s.name == "traced step") }
    })
    .await;
    assert_eq!(hex(&step.trace_id), TRACE_ID);
    assert_eq!(
        step.parent_span_id, attempt.span_id,
        "a child of the attempt"
    );
    let child = wait_until("the child job's attempt span", WAIT, || {
        let spans = received.spans();
        async move {
            spans.into_iter().find(|s| {
                s.kind == SpanKind::Consumer as i32
                    && attribute(s, "drover.job.kind") == Some(json!("noop"))
            })
        }
    })
    .await;
    assert_eq!(hex(&child.trace_id), TRACE_ID);
    assert_eq!(
        child.parent_span_id, attempt.span_id,
        "the child's attempt descends from its parent's"
    );

    // In the log, both lines carry the attempt's span with its trace id, the second one
    // under the handler's own span.
    for message in [
        "traced handler says hello",
        "traced handler inside its own span",
    ] {
        let line = worker.wait_for_line(message, WAIT).await;
        let line: Value = serde_json::from_str(&line).expect("a JSON log line");
        let process = line["spans"]
            .as_array()
            .and_then(|spans| spans.iter().find(|s| s["name"] == "process"))
            .unwrap_or_else(|| panic!("no attempt span in {line}"));
        assert_eq!(process["trace_id"], TRACE_ID, "{line}");
        assert_eq!(process["messaging.message.id"], json!(id), "{line}");
    }
    // Stopped by SIGTERM (its stop line is JSON here, which `Process::stop` does not read).
    worker.signal(rustix::process::Signal::TERM);
    assert!(
        worker.wait_exit(WAIT).await.success(),
        "{}",
        worker.stderr()
    );
}

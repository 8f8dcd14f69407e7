//! Graceful shutdown of the server (with a worker) and request tracing that never records a
//! token or job args.

use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobState, WorkerId};
use drover_http::ApiConfig;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::harness::*;

// ------------------------------------------------------------------------------------------
// Shutdown and tracing

/// On shutdown the server stops accepting connections at once but finishes a request it is
/// already reading, then returns.
pub(crate) async fn shutdown_finishes_the_request_in_flight(env: &Env) {
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
pub(crate) async fn server_and_worker_shut_down_together(env: &Env) {
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
pub(crate) async fn tokens_never_appear_in_logs(env: &Env, logs: &LogCapture) {
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
pub(crate) struct LogCapture(Arc<std::sync::Mutex<Vec<u8>>>);

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

/// The capture of every event of this test process, at every level: a global subscriber
/// installed once. (A thread-local default subscriber misses events when other tests run in
/// parallel threads, because tracing caches each callsite's interest process-wide.) Other
/// tests' events land in the same capture, which only makes the "no secret in the logs" check
/// stricter.
pub(crate) fn capture_logs() -> (LogCapture, ()) {
    static CAPTURE: std::sync::OnceLock<LogCapture> = std::sync::OnceLock::new();
    let capture = CAPTURE.get_or_init(|| {
        let capture = LogCapture::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(capture.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in the http_api test binary");
        capture
    });
    (capture.clone(), ())
}

//! The attempt spans the executor makes with the configured tracer (docs/opentelemetry.md,
//! docs/adr/0018-direct-attempt-spans.md), for both ways later attempts relate to the
//! enqueue. A file of its own: `telemetry::configure` is process-wide, and turned on it would
//! change what other tests' jobs store.

use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobKind, JobState, JobStore, NewJob, StoreConfig, TraceContext};
use drover_runner::telemetry::{self, LaterAttempts};
use drover_runner::{Client, JobContext, Outcome, Registry, Worker, WorkerConfig};
use drover_store_memory::MemoryStore;
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);
const ENQUEUE_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const ENQUEUE_SPAN: &str = "00f067aa0ba902b7";

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

/// Runs a `flaky` job (fails its first attempt, succeeds its second) enqueued in the trace
/// `ENQUEUE_TRACE` with spans on as `later` says; returns the two attempt spans, in order.
async fn two_attempts(later: LaterAttempts) -> Vec<SpanData> {
    let kept = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .build();
    let tracer = Box::new(provider.tracer("test"));
    telemetry::configure(Some((later, tracer)));

    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new(StoreConfig::default()));
    let (second_ran, mut second) = tokio::sync::mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry.register_fn(JobKind::parse("flaky").unwrap(), move |ctx: JobContext| {
        let second_ran = second_ran.clone();
        async move {
            if ctx.job().attempt == 1 {
                Outcome::retry_after("first attempt fails", Duration::from_millis(1))
            } else {
                let _ = second_ran.send(());
                Outcome::success()
            }
        }
    });
    let worker = Worker::new(
        Arc::clone(&store),
        Arc::new(registry),
        WorkerConfig::default(),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let traceparent = format!("00-{ENQUEUE_TRACE}-{ENQUEUE_SPAN}-01");
    let job = NewJob::new(
        JobKind::parse("flaky").unwrap(),
        json!({"secret": "s3cr3t"}),
    )
    .with_trace_context(TraceContext::new(traceparent, None).unwrap());
    let id = Client::new(Arc::clone(&store))
        .enqueue(job)
        .await
        .unwrap()
        .job
        .id;
    tokio::time::timeout(WAIT, second.recv())
        .await
        .expect("a second attempt in time");
    // A stop waits for the runs and writes their outcomes.
    shutdown.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(store.job_get(id).await.unwrap().state, JobState::Succeeded);
    telemetry::configure(None);
    let spans = kept.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 2, "one span per attempt: {spans:?}");
    for (attempt, span) in (1_i64..).zip(&spans) {
        assert_eq!(span.name, "process default");
        assert_eq!(span.span_kind, SpanKind::Consumer);
        for expected in [
            KeyValue::new("messaging.system", "drover"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.destination.name", "default"),
            KeyValue::new("messaging.message.id", id.to_string()),
            KeyValue::new("drover.job.kind", "flaky"),
            KeyValue::new("drover.job.attempt", attempt),
        ] {
            assert!(
                span.attributes.contains(&expected),
                "{expected:?} in {span:?}"
            );
        }
        for kv in &span.attributes {
            assert!(!kv.value.as_str().contains("s3cr3t"), "no args: {kv:?}");
        }
    }
    assert_eq!(
        attribute(&spans[0], "drover.job.outcome"),
        Some("retried".into())
    );
    assert_eq!(
        spans[0].status,
        Status::error("first attempt fails"),
        "a failure's message"
    );
    assert_eq!(
        attribute(&spans[1], "drover.job.outcome"),
        Some("succeeded".into())
    );
    assert_eq!(
        spans[1].status,
        Status::Unset,
        "a success leaves the status unset"
    );
    spans
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_descend_from_the_enqueue_and_later_ones_link_or_join_it() {
    // Link (the default): the first attempt a child, the second a trace of its own linked.
    let spans = two_attempts(LaterAttempts::Link).await;
    let first = &spans[0];
    assert_eq!(first.span_context.trace_id().to_string(), ENQUEUE_TRACE);
    assert_eq!(first.parent_span_id.to_string(), ENQUEUE_SPAN);
    let second = &spans[1];
    assert_ne!(second.span_context.trace_id().to_string(), ENQUEUE_TRACE);
    assert_eq!(
        second.parent_span_id.to_string(),
        "0000000000000000",
        "a root"
    );
    let link = second.links.links.first().expect("a link to the enqueue");
    assert_eq!(link.span_context.trace_id().to_string(), ENQUEUE_TRACE);
    assert_eq!(link.span_context.span_id().to_string(), ENQUEUE_SPAN);

    // Parent: both attempts children of the enqueue, no link.
    let spans = two_attempts(LaterAttempts::Parent).await;
    for span in &spans {
        assert_eq!(span.span_context.trace_id().to_string(), ENQUEUE_TRACE);
        assert_eq!(span.parent_span_id.to_string(), ENQUEUE_SPAN);
        assert!(span.links.links.is_empty());
    }
}

//! An attempt without its `tracing` log span (docs/opentelemetry.md, "Handlers' spans and
//! logs"): the application's subscriber has its `tracing-opentelemetry` layer (filtered with
//! `drover_telemetry::export_filter`) and `drover_telemetry::attempt_layer`, but neither a log that records the `drover::job` target
//! nor `attempt_context_layer`. The runner then makes no `tracing` span for the attempt, yet a
//! handler's log line is an event of its attempt's span, a task it spawns with
//! `.with_current_context()` nests in it, and one spawned with only `.in_current_span()`
//! starts a trace of its own (what the context layer is for). A file of its own: the
//! subscriber and `configure` are process-wide.

use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobKind, JobStore, NewJob, StoreConfig};
use drover_runner::telemetry::{self, LaterAttempts};
use drover_runner::{Client, JobContext, Outcome, Registry, Worker, WorkerConfig};
use drover_store_memory::MemoryStore;
use opentelemetry::context::FutureExt as _;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

const WAIT: Duration = Duration::from_secs(20);

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
}

/// A log line, and two spawned tasks with a span each: one carrying the attempt's context,
/// one only the current `tracing` span. Reports whether the handler ran in a `tracing` span.
async fn handler(ctx: JobContext, in_span: tokio::sync::mpsc::UnboundedSender<bool>) -> Outcome {
    let _ = in_span.send(!tracing::Span::current().is_none());
    tracing::info!("lean says hello");
    tokio::spawn(
        async { tracing::info_span!("with context").in_scope(|| tracing::info!("carried")) }
            .with_current_context(),
    )
    .await
    .unwrap();
    tokio::spawn(
        async { tracing::info_span!("in span only").in_scope(|| tracing::info!("alone")) }
            .in_current_span(),
    )
    .await
    .unwrap();
    let _ = ctx;
    Outcome::success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_layer_that_records_it_an_attempt_has_no_log_span_and_still_nests() {
    let kept = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .build();
    // The application's layer exports what drover-telemetry's would: spans and events at
    // info and above, without the attempt's log span.
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("app"))
                .with_filter(drover_telemetry::export_filter()),
        )
        .with(drover_telemetry::attempt_layer());
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let tracer = BoxedTracer::new(Box::new(provider.tracer("drover")));
    telemetry::configure(Some((LaterAttempts::Link, tracer)));

    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new(StoreConfig::default()));
    let (in_span, mut reported) = tokio::sync::mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry.register_fn(JobKind::parse("lean").unwrap(), move |ctx: JobContext| {
        handler(ctx, in_span.clone())
    });
    let worker = Worker::new(
        Arc::clone(&store),
        Arc::new(registry),
        WorkerConfig::default(),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    Client::new(Arc::clone(&store))
        .enqueue(NewJob::new(JobKind::parse("lean").unwrap(), json!({})))
        .await
        .unwrap();
    let ran_in_a_span = tokio::time::timeout(WAIT, reported.recv())
        .await
        .expect("the job runs in time")
        .unwrap();
    // A stop waits for the runs: the attempt span has ended.
    shutdown.cancel();
    running.await.unwrap().unwrap();
    telemetry::configure(None);

    assert!(!ran_in_a_span, "no tracing span is made for the attempt");
    let spans = kept.get_finished_spans().unwrap();
    let attempt = named(&spans, "process default");
    let events: Vec<&str> = attempt
        .events
        .iter()
        .map(|event| event.name.as_ref())
        .collect();
    assert_eq!(events, ["lean says hello"]);
    let carried = named(&spans, "with context");
    assert_eq!(carried.parent_span_id, attempt.span_context.span_id());
    assert_eq!(
        carried.span_context.trace_id(),
        attempt.span_context.trace_id()
    );
    let alone = named(&spans, "in span only");
    assert_eq!(alone.parent_span_id, SpanId::INVALID, "{alone:?}");
    assert_ne!(
        alone.span_context.trace_id(),
        attempt.span_context.trace_id()
    );
}

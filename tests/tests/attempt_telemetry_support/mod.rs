//! What `attempt_telemetry.rs` and `attempt_telemetry_lean.rs` share: an application's own
//! tracer provider and subscriber around the runner ([`install`]), one job run by a worker on
//! a memory store ([`run_until`]), and finding a finished span by name ([`named`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobKind, JobStore, NewJob, StoreConfig};
use drover_runner::telemetry::{self, LaterAttempts};
use drover_runner::{Client, Registry, Worker, WorkerConfig};
use drover_store_memory::MemoryStore;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

const WAIT: Duration = Duration::from_secs(20);

/// Installs, for the whole process, the subscriber of an application with its own tracer
/// provider: its `tracing-opentelemetry` layer, exporting what drover-telemetry's would
/// (`export_filter`: spans and events at info and above, without the attempt's log span),
/// `attempt_layer`, and with `context_layer` `attempt_context_layer` too; then turns the
/// runner's spans on with a tracer of that provider. Returns the exporter that keeps every
/// finished span.
pub fn install(context_layer: bool) -> InMemorySpanExporter {
    let kept = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("app"))
                .with_filter(drover_telemetry::export_filter()),
        )
        .with(drover_telemetry::attempt_layer());
    // Not `Option<layer>`: a `None` layer counts as one that wants every span, which would
    // keep the attempt's log span alive.
    if context_layer {
        tracing::subscriber::set_global_default(
            subscriber.with(drover_telemetry::attempt_context_layer()),
        )
    } else {
        tracing::subscriber::set_global_default(subscriber)
    }
    .unwrap();
    let tracer = Box::new(provider.tracer("drover"));
    telemetry::configure(Some((LaterAttempts::Link, tracer)));
    kept
}

/// Runs a worker with `registry` on a memory store, enqueues one job of `kind`, and waits for
/// `done` (at most 20 s, else panics saying `what` did not happen in time); then stops the
/// worker, which waits for its runs, so every attempt span has ended, and turns the spans
/// off. Returns what `done` gave.
pub async fn run_until<T>(
    registry: Registry,
    kind: &str,
    what: &str,
    done: impl Future<Output = T>,
) -> T {
    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new(StoreConfig::default()));
    let worker = Worker::new(
        Arc::clone(&store),
        Arc::new(registry),
        WorkerConfig::default(),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    Client::new(Arc::clone(&store))
        .enqueue(NewJob::new(JobKind::parse(kind).unwrap(), json!({})))
        .await
        .unwrap();
    let done = tokio::time::timeout(WAIT, done)
        .await
        .unwrap_or_else(|_| panic!("{what} in time"));
    shutdown.cancel();
    running.await.unwrap().unwrap();
    telemetry::configure(None);
    done
}

/// The finished span named `name` (a panic listing them all when there is none).
pub fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
}

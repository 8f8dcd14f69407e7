//! An attempt without its `tracing` log span (docs/opentelemetry.md, "Handlers' spans and
//! logs"): the application's subscriber has its `tracing-opentelemetry` layer (filtered with
//! `drover_telemetry::export_filter`) and `drover_telemetry::attempt_layer`, but neither a log
//! that records the `drover::job` target nor `attempt_context_layer`. The runner then makes
//! no `tracing` span for the attempt, yet a handler's log line is an event of its attempt's
//! span, a task it spawns with `.with_current_context()` nests in it, and one spawned with
//! only `.in_current_span()` starts a trace of its own (what the context layer is for). A file of its own: the
//! subscriber and `configure` are process-wide.

mod attempt_telemetry_support;

use attempt_telemetry_support::{install, named, run_until};
use drover_core::JobKind;
use drover_runner::{JobContext, Outcome, Registry};
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::SpanId;
use tracing::Instrument;

/// A log line, and two spawned tasks with a span each: one carrying the attempt's context,
/// one only the current `tracing` span. Reports whether the handler ran in a `tracing` span.
async fn handler(in_span: tokio::sync::mpsc::UnboundedSender<bool>) -> Outcome {
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
    Outcome::success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_layer_that_records_it_an_attempt_has_no_log_span_and_still_nests() {
    let kept = install(false);
    let (in_span, mut reported) = tokio::sync::mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry.register_fn(JobKind::parse("lean").unwrap(), move |_ctx: JobContext| {
        handler(in_span.clone())
    });
    let ran_in_a_span = run_until(registry, "lean", "the job runs", reported.recv())
        .await
        .unwrap();

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

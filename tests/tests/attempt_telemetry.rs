//! Handler code inside an attempt's span, in one process (docs/opentelemetry.md, "Handlers'
//! spans and logs"), set up as an application with its own tracer provider does: its own
//! `tracing-opentelemetry` layer filtered with `drover_telemetry::export_filter`,
//! `drover_telemetry::attempt_layer` and `attempt_context_layer`, and `telemetry::configure`
//! with a tracer. A handler's log line, a task it spawns with `.in_current_span()`, and a
//! child it enqueues inside a span of its own all land in its attempt's trace. A file of its
//! own: the subscriber and `configure` are process-wide (attempt_telemetry_lean.rs is the
//! setup without the context layer).

mod attempt_telemetry_support;

use attempt_telemetry_support::{install, named, run_until};
use drover_core::{JobKind, NewJob};
use drover_runner::{JobContext, Outcome, Registry};
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use tracing::Instrument;

/// The parent: a log line, a spawned task's span, and a child enqueued inside its own span.
async fn parent(ctx: JobContext) -> Outcome {
    tracing::info!("parent says hello");
    tokio::spawn(
        async { tracing::info_span!("spawned step").in_scope(|| tracing::info!("spawned")) }
            .in_current_span(),
    )
    .await
    .unwrap();
    let child = NewJob::new(JobKind::parse("child").unwrap(), json!({}));
    async { ctx.enqueue_children(vec![child]).await.unwrap() }
        .instrument(tracing::info_span!("own step"))
        .await;
    Outcome::success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_logs_spawned_tasks_and_children_stay_in_its_attempts_trace() {
    let kept = install(true);
    let (child_ran, mut child_done) = tokio::sync::mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry.register_fn(JobKind::parse("parent").unwrap(), parent);
    registry.register_fn(JobKind::parse("child").unwrap(), move |_ctx: JobContext| {
        let child_ran = child_ran.clone();
        async move {
            let _ = child_ran.send(());
            Outcome::success()
        }
    });
    run_until(registry, "parent", "the child runs", child_done.recv()).await;

    let spans = kept.get_finished_spans().unwrap();
    let attempts: Vec<&SpanData> = spans
        .iter()
        .filter(|span| span.name == "process default")
        .collect();
    assert_eq!(attempts.len(), 2, "the parent's and the child's: {spans:?}");
    let own_step = named(&spans, "own step");
    let spawned = named(&spans, "spawned step");
    let parent_attempt = attempts
        .iter()
        .copied()
        .find(|span| span.span_context.span_id() == own_step.parent_span_id)
        .expect("the handler's own span is a child of its attempt");
    assert_eq!(
        spawned.parent_span_id,
        parent_attempt.span_context.span_id(),
        "a task spawned in the attempt's span nests in it"
    );
    let events: Vec<&str> = parent_attempt
        .events
        .iter()
        .map(|event| event.name.as_ref())
        .collect();
    assert_eq!(events, ["parent says hello"]);
    let child_attempt = attempts
        .iter()
        .find(|span| span.span_context.span_id() != parent_attempt.span_context.span_id())
        .unwrap();
    assert_eq!(
        child_attempt.parent_span_id,
        own_step.span_context.span_id(),
        "the child descends from the span it was enqueued in"
    );
    for span in [own_step, spawned, *child_attempt] {
        assert_eq!(
            span.span_context.trace_id(),
            parent_attempt.span_context.trace_id()
        );
    }
}

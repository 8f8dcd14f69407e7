//! Trace context across the queue (docs/opentelemetry.md, docs/adr/0013-trace-context.md):
//! the enqueue spans of [`crate::Client`], the W3C context stored with each job, and the
//! attempt span each run executes in.
//!
//! Spans are `tracing` spans with OpenTelemetry's messaging attributes; a
//! `tracing-opentelemetry` layer (`drover-telemetry` installs one) turns them into
//! OpenTelemetry spans. They are off until [`configure`] turns them on: then the enqueue
//! path creates a span per enqueue and the executor one per attempt; off, neither does any
//! work beyond reading one atomic. The setting is process-wide, like the tracer provider
//! the spans go to.
//!
//! | span | name | kind | parent | links |
//! |---|---|---|---|---|
//! | one enqueue | `publish <queue>` | producer | the job's given context, else the caller's span | |
//! | a batch | `publish <queue>` (`publish` for mixed queues) | producer | the context every job was given, else the caller's span | each job's `create` span |
//! | a job of a batch | `create <queue>` | producer | the job's given context, else the caller's span | |
//! | an attempt | `process <queue>` | consumer | the stored context (first attempt; later ones per [`LaterAttempts`]) | the stored context (later attempts, by default) |

use std::sync::atomic::{AtomicU8, Ordering};

use drover_core::{Job, NewJob, NewWorkflow, QueueName, TraceContext};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::metrics::JobOutcome;

/// How the attempts after the first relate to the context stored at enqueue (the first
/// attempt is always its child).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LaterAttempts {
    /// A new trace per later attempt, linked to the enqueue (the default: a retry hours later
    /// does not stretch the enqueue's trace; docs/adr/0013-trace-context.md).
    #[default]
    Link,
    /// Every attempt a child of the enqueue, in one trace.
    Parent,
}

impl LaterAttempts {
    /// `link` or `parent`.
    pub fn as_str(self) -> &'static str {
        match self {
            LaterAttempts::Link => "link",
            LaterAttempts::Parent => "parent",
        }
    }
}

impl std::str::FromStr for LaterAttempts {
    type Err = drover_core::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "link" => Ok(LaterAttempts::Link),
            "parent" => Ok(LaterAttempts::Parent),
            _ => Err(drover_core::Error::invalid(
                "later_attempts",
                "must be link or parent",
            )),
        }
    }
}

const OFF: u8 = 0;
const LINK: u8 = 1;
const PARENT: u8 = 2;

static SPANS: AtomicU8 = AtomicU8::new(OFF);

/// Turns the enqueue and attempt spans on (`Some`, with how later attempts relate to the
/// enqueue) or off (`None`, the default) for the whole process.
pub fn configure(spans: Option<LaterAttempts>) {
    let value = match spans {
        None => OFF,
        Some(LaterAttempts::Link) => LINK,
        Some(LaterAttempts::Parent) => PARENT,
    };
    SPANS.store(value, Ordering::Relaxed);
}

/// Whether the spans are on, and how later attempts relate to the enqueue.
pub fn spans() -> Option<LaterAttempts> {
    match SPANS.load(Ordering::Relaxed) {
        LINK => Some(LaterAttempts::Link),
        PARENT => Some(LaterAttempts::Parent),
        _ => None,
    }
}

/// The OpenTelemetry span context a stored trace context names (remote, as it came from
/// another process); `None` when it does not parse.
pub fn span_context(context: &TraceContext) -> Option<SpanContext> {
    let (trace, span, flags) = context.parts()?;
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = context
        .tracestate
        .as_deref()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let span_context = SpanContext::new(trace_id, span_id, TraceFlags::new(flags), true, state);
    span_context.is_valid().then_some(span_context)
}

/// The stored form of a valid span context; `None` for an invalid one (no OpenTelemetry
/// layer, or a span it does not record).
pub fn trace_context(span_context: &SpanContext) -> Option<TraceContext> {
    if !span_context.is_valid() {
        return None;
    }
    let state = span_context.trace_state().header();
    Some(TraceContext {
        traceparent: format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        ),
        tracestate: (!state.is_empty()).then_some(state),
    })
}

/// The trace context of `span` (the current span by default), if an OpenTelemetry layer
/// records it.
pub fn capture(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    trace_context(span.context().span().span_context())
}

/// A producer span for `queue`, a child of `parent` when given (else of the current span).
fn producer_span(
    operation: &'static str,
    queue: Option<&QueueName>,
    parent: Option<&TraceContext>,
) -> Span {
    let name = match queue {
        Some(queue) => format!("{operation} {queue}"),
        None => operation.to_owned(),
    };
    let span = tracing::info_span!(
        target: "drover::enqueue",
        "enqueue",
        otel.name = name,
        otel.kind = "producer",
        messaging.system = "drover",
        messaging.operation.type = operation,
        messaging.operation.name = operation,
        messaging.destination.name = Empty,
        messaging.message.id = Empty,
        messaging.batch.message_count = Empty,
        drover.job.kind = Empty,
    );
    if let Some(queue) = queue {
        span.record("messaging.destination.name", queue.as_str());
    }
    if let Some(parent) = parent.and_then(span_context) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
    span
}

/// A number of messages as a span attribute: signed, as OpenTelemetry's integers are (the
/// `tracing` layer exports an unsigned one as text).
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// For one enqueue with spans on: a `publish <queue>` span, and the job's trace context
/// replaced by that span's (its attempts descend from the enqueue). The span is returned to
/// be entered around the store call.
pub(crate) fn publish_one(job: &mut NewJob) -> Span {
    let span = producer_span("publish", Some(&job.queue), job.trace_context.as_ref());
    span.record("drover.job.kind", job.kind.as_str());
    if let Some(context) = capture(&span) {
        job.trace_context = Some(context);
    }
    span
}

/// For a batch with spans on: a `create <queue>` span per job (its context stored with the
/// job), and a `publish` span that links them (at most [`BATCH_LINKS_MAX`]), a child of the
/// context every job was given (a request's `traceparent`), else of the caller's span.
pub(crate) fn publish_batch(jobs: &mut [NewJob]) -> Span {
    let queue = jobs
        .first()
        .map(|job| &job.queue)
        .filter(|first| jobs.iter().all(|job| &job.queue == *first));
    let given = jobs
        .first()
        .and_then(|job| job.trace_context.clone())
        .filter(|first| {
            jobs.iter()
                .all(|job| job.trace_context.as_ref() == Some(first))
        });
    let batch = producer_span("publish", queue, given.as_ref());
    batch.record("messaging.batch.message_count", count(jobs.len()));
    for (i, job) in jobs.iter_mut().enumerate() {
        let create = batch
            .in_scope(|| producer_span("create", Some(&job.queue), job.trace_context.as_ref()));
        create.record("drover.job.kind", job.kind.as_str());
        let Some(context) = capture(&create) else {
            continue;
        };
        if i < BATCH_LINKS_MAX {
            if let Some(linked) = span_context(&context) {
                batch.add_link(linked);
            }
        }
        job.trace_context = Some(context);
    }
    batch
}

/// For a workflow graph with spans on: one `publish` span (a child of the first job's given
/// context, else of the caller's span), whose context every job of the graph stores in place
/// of that one or of none.
pub(crate) fn publish_workflow(workflow: &mut NewWorkflow) -> Span {
    let given = workflow
        .jobs
        .first()
        .and_then(|job| job.job.trace_context.clone());
    let span = producer_span("publish", None, given.as_ref());
    span.record("messaging.batch.message_count", count(workflow.jobs.len()));
    if let Some(context) = capture(&span) {
        for job in &mut workflow.jobs {
            if job.job.trace_context.is_none() || job.job.trace_context == given {
                job.job.trace_context = Some(context.clone());
            }
        }
    }
    span
}

/// Most jobs a batch's `publish` span links (OpenTelemetry's default link limit).
pub const BATCH_LINKS_MAX: usize = 128;

/// The `tracing` target of the attempt spans (a log filter can name it).
pub const ATTEMPT_TARGET: &str = "drover::job";

/// The span an attempt of `job` runs in, with spans on: `process <queue>`, a child of the
/// stored context for the first attempt, and for later ones as `later` says.
pub(crate) fn attempt_span(job: &Job, later: LaterAttempts) -> Span {
    let span = tracing::info_span!(
        target: ATTEMPT_TARGET,
        "process",
        otel.name = format!("process {}", job.queue),
        otel.kind = "consumer",
        otel.status_code = Empty,
        otel.status_description = Empty,
        messaging.system = "drover",
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = job.queue.as_str(),
        messaging.message.id = %job.id,
        drover.job.kind = job.kind.as_str(),
        drover.job.attempt = job.attempt,
        drover.tenant = job.tenant.as_str(),
        drover.job.outcome = Empty,
        trace_id = Empty,
    );
    if let Some(stored) = job.trace_context.as_ref().and_then(span_context) {
        if job.attempt <= 1 || later == LaterAttempts::Parent {
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(stored));
        } else {
            let _ = span.set_parent(opentelemetry::Context::new());
            span.add_link(stored);
        }
    } else {
        // An attempt without a stored context starts its own trace, never one of whatever
        // span happens to be current on the executor's task.
        let _ = span.set_parent(opentelemetry::Context::new());
    }
    if let Some(context) = capture(&span) {
        if let Some(trace_id) = context.trace_id() {
            // Log lines of the handler carry the trace id through this field of their span.
            span.record("trace_id", trace_id);
        }
    }
    span
}

/// Records how an attempt ended on its span: the outcome, and an error status with the
/// stored error message for a failure.
pub(crate) fn record_outcome(span: &Span, outcome: JobOutcome, error: Option<&str>) {
    span.record("drover.job.outcome", outcome.as_str());
    match error {
        Some(message) => {
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_description", message);
        }
        None => {
            span.record("otel.status_code", "OK");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_stored_context_round_trips_through_a_span_context() {
        let stored = TraceContext::new(GOOD, Some("congo=t61rcWkgMzE".into())).unwrap();
        let span_context = span_context(&stored).unwrap();
        assert!(span_context.is_remote());
        assert!(span_context.is_sampled());
        assert_eq!(trace_context(&span_context), Some(stored));
    }

    #[test]
    fn without_an_opentelemetry_layer_nothing_is_captured() {
        let span = tracing::info_span!("outside");
        assert_eq!(capture(&span), None);
        assert_eq!(trace_context(&SpanContext::empty_context()), None);
    }

    #[test]
    fn later_attempts_parse_from_their_names() {
        for later in [LaterAttempts::Link, LaterAttempts::Parent] {
            assert_eq!(later.as_str().parse::<LaterAttempts>().unwrap(), later);
        }
        let error = "child".parse::<LaterAttempts>().unwrap_err();
        assert!(error.to_string().contains("later_attempts"));
    }
}

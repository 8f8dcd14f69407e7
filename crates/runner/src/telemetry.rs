//! Trace context across the queue (docs/opentelemetry.md, docs/adr/0013-trace-context.md):
//! the enqueue spans of [`crate::Client`], the W3C context stored with each job, and the
//! attempt span each run executes in.
//!
//! Enqueue spans are `tracing` spans with OpenTelemetry's messaging attributes, which a
//! `tracing-opentelemetry` layer (`drover-telemetry` installs one) turns into OpenTelemetry
//! spans: they are children of the caller's span. An attempt's span is made with the
//! configured tracer directly, and the attempt runs under its OpenTelemetry context, so that
//! the handler's own spans and enqueues nest in it; a `tracing` span beside it, where a
//! layer records it, carries the trace id to the log. Everything is off until [`configure`]
//! turns it on; off, neither path does any work beyond reading one atomic. The setting is
//! process-wide, like the tracer provider the spans go to.
//!
//! | span | name | kind | parent | links |
//! |---|---|---|---|---|
//! | one enqueue | `publish <queue>` | producer | the job's given context, else the caller's span | |
//! | a batch | `publish <queue>` (`publish` for mixed queues) | producer | the context every job was given, else the caller's span | each job's `create` span |
//! | a job of a batch | `create <queue>` | producer | the job's given context, else the caller's span | |
//! | an attempt | `process <queue>` | consumer | the stored context (first attempt; later ones per [`LaterAttempts`]) | the stored context (later attempts, by default) |

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use drover_core::{Job, JobId, NewJob, NewWorkflow, QueueName, TraceContext};
use opentelemetry::trace::{
    Link, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer,
};
use opentelemetry::{KeyValue, StringValue};
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

/// The tracer of the attempt spans, while spans are on (how later attempts relate is in
/// `SPANS`).
static TRACER: RwLock<Option<Box<dyn AttemptTracer>>> = RwLock::new(None);

/// What makes the attempt spans: any OpenTelemetry tracer that is `Send + Sync` and whose
/// spans are `Send + Sync + 'static`, kept with its own span type (an
/// `opentelemetry::global::BoxedTracer` works too, but boxes each span once more).
pub trait AttemptTracer: Send + Sync {
    /// Starts the span `builder` describes as a child of `parent`, and returns `parent`
    /// with that span current.
    fn start_attempt(
        &self,
        builder: SpanBuilder,
        parent: &opentelemetry::Context,
    ) -> opentelemetry::Context;
}

impl<T> AttemptTracer for T
where
    T: Tracer + Send + Sync,
    T::Span: Send + Sync + 'static,
{
    fn start_attempt(
        &self,
        builder: SpanBuilder,
        parent: &opentelemetry::Context,
    ) -> opentelemetry::Context {
        parent.with_span(builder.start_with_context(self, parent))
    }
}

/// Turns the enqueue and attempt spans on (`Some`: how later attempts relate to the enqueue,
/// and the tracer the attempt spans are made with) or off (`None`, the default) for the whole
/// process. The enqueue spans are `tracing` spans: they reach OpenTelemetry through the
/// subscriber's `tracing-opentelemetry` layer.
pub fn configure(spans: Option<(LaterAttempts, Box<dyn AttemptTracer>)>) {
    let (value, tracer) = match spans {
        None => (OFF, None),
        Some((LaterAttempts::Link, tracer)) => (LINK, Some(tracer)),
        Some((LaterAttempts::Parent, tracer)) => (PARENT, Some(tracer)),
    };
    let replaced = std::mem::replace(
        &mut *TRACER.write().unwrap_or_else(|e| e.into_inner()),
        tracer,
    );
    SPANS.store(value, Ordering::Relaxed);
    // Dropped outside the lock: the last tracer of a provider shuts it down, flushing.
    drop(replaced);
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

/// The trace context of the current OpenTelemetry context: inside an attempt, its span or
/// the innermost span a handler entered.
pub fn capture_current() -> Option<TraceContext> {
    opentelemetry::Context::map_current(|cx| trace_context(cx.span().span_context()))
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

/// The `tracing` target of the attempt's log span (a log filter can name it; the
/// OpenTelemetry layer of `drover-telemetry` leaves it out, as the attempt's OpenTelemetry
/// span is made directly). The span is made only where a layer records it.
pub const ATTEMPT_TARGET: &str = "drover::job";

/// The attributes of an attempt's span, with room for the outcome [`Attempt::record_outcome`]
/// adds (a full vector would be reallocated on the executor's thread). Names are shared with
/// the job, not copied.
fn attributes(job: &Job) -> Vec<KeyValue> {
    let shared = |name: Arc<str>| StringValue::from(name);
    let mut attributes = Vec::with_capacity(9);
    attributes.extend([
        KeyValue::new("messaging.system", "drover"),
        KeyValue::new("messaging.operation.type", "process"),
        KeyValue::new("messaging.operation.name", "process"),
        KeyValue::new("messaging.destination.name", shared((&job.queue).into())),
        KeyValue::new("messaging.message.id", id_text(job.id)),
        KeyValue::new("drover.job.kind", shared((&job.kind).into())),
        KeyValue::new("drover.job.attempt", i64::from(job.attempt)),
        KeyValue::new("drover.tenant", shared((&job.tenant).into())),
    ]);
    attributes
}

/// A job id as text: its `Display` form, without the formatting machinery.
fn id_text(id: JobId) -> String {
    let mut buffer = [0; 36];
    id.0.hyphenated().encode_lower(&mut buffer).to_string()
}

/// One attempt's spans, with spans on: the OpenTelemetry `process <queue>` span, made with
/// the configured tracer rather than through a `tracing` span (docs/adr/0018-direct-attempt-spans.md),
/// in the context the attempt runs under, and beside it, where a layer records it, a
/// `tracing` span named `process` that log lines inside the attempt show, with the trace id.
pub(crate) struct Attempt {
    context: opentelemetry::Context,
    log: Span,
}

impl Attempt {
    /// The spans of an attempt of `job`, or `None` with spans off: `process <queue>`, a child
    /// of the stored context for the first attempt, and for later ones as configured.
    pub(crate) fn start(job: &Job) -> Option<Attempt> {
        // Off, one atomic read: the lock is not touched.
        let later = spans()?;
        let tracing = TRACER.read().unwrap_or_else(|e| e.into_inner());
        let tracer = tracing.as_ref()?;
        let queue = job.queue.as_str();
        let mut name = String::with_capacity("process ".len() + queue.len());
        name.push_str("process ");
        name.push_str(queue);
        let mut builder = SpanBuilder::from_name(name)
            .with_kind(SpanKind::Consumer)
            .with_attributes(attributes(job));
        // An attempt without a stored context starts its own trace, never one of whatever
        // context happens to be current on the executor's task.
        let mut parent = opentelemetry::Context::new();
        if let Some(stored) = job.trace_context.as_ref().and_then(span_context) {
            if job.attempt <= 1 || later == LaterAttempts::Parent {
                parent = parent.with_remote_span_context(stored);
            } else {
                builder = builder.with_links(vec![Link::with_context(stored)]);
            }
        }
        let context = tracer.start_attempt(builder, &parent);
        drop(tracing);
        // Log lines of the handler carry the trace id through a field of their span (none
        // from a tracer that makes no valid spans).
        let trace_id = {
            let span = context.span();
            let span_context = span.span_context();
            span_context
                .is_valid()
                .then(|| tracing::field::display(span_context.trace_id()))
        };
        // Made while the attempt's context is current, so that a layer may keep that context
        // with the span (`drover-telemetry`'s attempt context layer does). It exists only
        // where a layer records it (a log that shows it, that context layer): otherwise the
        // macro returns a disabled span at once (docs/adr/0020-attempt-log-span-on-demand.md).
        let log = {
            let _current = context.clone().attach();
            tracing::info_span!(
                target: ATTEMPT_TARGET,
                "process",
                messaging.message.id = %job.id,
                drover.job.kind = job.kind.as_str(),
                messaging.destination.name = job.queue.as_str(),
                drover.job.attempt = job.attempt,
                trace_id,
            )
        };
        Some(Attempt { context, log })
    }

    /// The OpenTelemetry context the attempt runs under: handler spans and enqueues nest in it.
    pub(crate) fn context(&self) -> opentelemetry::Context {
        self.context.clone()
    }

    /// The `tracing` span the attempt runs in (disabled when no layer records it).
    pub(crate) fn log_span(&self) -> Span {
        self.log.clone()
    }

    /// Records how the attempt ended: the outcome, and for a failure an error status with
    /// the stored error message (otherwise the status stays unset, as OpenTelemetry asks of
    /// instrumentation).
    pub(crate) fn record_outcome(&self, outcome: JobOutcome, error: Option<&str>) {
        let span = self.context.span();
        span.set_attribute(KeyValue::new("drover.job.outcome", outcome.as_str()));
        if let Some(message) = error {
            span.set_status(Status::error(message.to_owned()));
        }
    }

    /// Ends the attempt's span (it is exported from here on).
    pub(crate) fn end(self) {
        self.context.span().end();
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
    fn a_job_id_as_text_is_its_display_form() {
        for _ in 0..3 {
            let id = JobId::new_v7();
            assert_eq!(id_text(id), id.to_string());
        }
        let parsed: JobId = "0190a4c7-5f3e-7d2a-9b1c-0123456789ab".parse().unwrap();
        assert_eq!(id_text(parsed), "0190a4c7-5f3e-7d2a-9b1c-0123456789ab");
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

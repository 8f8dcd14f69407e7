//! OpenTelemetry export for Drover (docs/opentelemetry.md): OTLP over HTTP/protobuf of the
//! runner's enqueue and attempt spans (`drover_runner::telemetry`) and of its metrics, for
//! the `drover` binary and embedding applications.
//!
//! The standard variables configure the export: the exporter's `OTEL_EXPORTER_OTLP_*`
//! (endpoint, headers, timeout), the SDK's `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, `OTEL_BSP_*` and
//! `OTEL_METRIC_EXPORT_INTERVAL`. The SDK reads them itself when [`Telemetry::start`] builds
//! the providers. Spans leave through a batch processor on a thread of its own: a slow or
//! unreachable collector never slows a job; spans beyond its queue are dropped, and the first
//! failed export is logged once as a warning.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use drover_core::{JobKind, JobState, QueueName};
use drover_runner::telemetry::LaterAttempts;
use drover_runner::{JobOutcome, Metrics};
use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Histogram, MeterProvider};
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry::{KeyValue, StringValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing::field::{Field, Visit};
use tracing::{Level, Metadata};
use tracing_subscriber::filter::{filter_fn, LevelFilter};
use tracing_subscriber::layer::{self, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The service name when `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name none.
pub const SERVICE_NAME_DEFAULT: &str = "drover";

/// The label value of kinds and queues without series of their own.
pub const OTHER: &str = "(other)";

/// A failure to build the exporters (a malformed endpoint, say).
#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The running export: a tracer provider and a meter provider, each exporting over OTLP.
/// Call [`Telemetry::shutdown`] at exit to send what is still buffered. Clones share the
/// providers.
#[derive(Debug, Clone)]
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
}

impl Telemetry {
    /// Builds the OTLP exporters and providers from the standard variables and turns the
    /// runner's spans on, with later attempts related to the enqueue as `later` says.
    ///
    /// # Errors
    /// The exporters cannot be built (a malformed `OTEL_EXPORTER_OTLP_*` value).
    pub fn start(later: LaterAttempts) -> Result<Telemetry, Error> {
        let warned = Arc::new(AtomicBool::new(false));
        let resource = resource();
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()
            .map_err(|e| Error(format!("cannot build the OTLP span exporter: {e}")))?;
        let tracer_provider = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_batch_exporter(WarnOnce {
                inner: spans,
                warned: Arc::clone(&warned),
            })
            .build();
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_temporality(Temporality::Cumulative)
            .build()
            .map_err(|e| Error(format!("cannot build the OTLP metric exporter: {e}")))?;
        let meter_provider = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_periodic_exporter(WarnOnce {
                inner: metrics,
                warned,
            })
            .build();
        let tracer = Box::new(tracer_provider.tracer("drover"));
        drover_runner::telemetry::configure(Some((later, tracer)));
        Ok(Telemetry {
            tracer_provider,
            meter_provider,
        })
    }

    /// The `tracing` layer that turns spans at info level and above into OpenTelemetry spans
    /// of this export (events become events of their span). It filters for itself: add it
    /// to a subscriber as it is. An event outside every span it records, inside an attempt
    /// (whose span the runner makes directly), becomes an event of the attempt's span
    /// ([`attempt_layer`]). A task a handler spawns with `.in_current_span()` at its top level
    /// (outside spans of its own) nests in the attempt only with [`attempt_context_layer`] in
    /// the subscriber too.
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        exporting_layer(&self.tracer_provider)
    }

    /// The runner's metrics as OpenTelemetry instruments of this export; `kinds` and `queues`
    /// are the label values with series of their own, every other one counts as
    /// [`OTHER`].
    pub fn metrics(
        &self,
        kinds: impl IntoIterator<Item = JobKind>,
        queues: impl IntoIterator<Item = QueueName>,
    ) -> Arc<dyn Metrics> {
        Arc::new(OtelMetrics::new(
            &self.meter_provider,
            kinds.into_iter().map(|k| k.as_str().to_owned()).collect(),
            queues.into_iter().map(|q| q.as_str().to_owned()).collect(),
        ))
    }

    /// Sends what is buffered (bounded by the exporters' timeouts) and stops the export; the
    /// runner's spans are turned off.
    pub fn shutdown(self) {
        drover_runner::telemetry::configure(None);
        let _ = self
            .tracer_provider
            .shutdown_with_timeout(Duration::from_secs(5));
        let _ = self
            .meter_provider
            .shutdown_with_timeout(Duration::from_secs(5));
    }
}

/// [`Telemetry::layer`] for `provider`.
fn exporting_layer<S>(provider: &SdkTracerProvider) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("drover"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_filter(export_filter());
    spans.and_then(attempt_layer())
}

/// What the `tracing` layer exports: spans and events at info and above, except the
/// runner's attempt log span (the attempt's OpenTelemetry span is made by the runner). An
/// application with its own `tracing-opentelemetry` layer beside [`attempt_layer`] filters
/// that layer with this too: an event inside a span exported there but not here (a debug
/// span) would otherwise be added to that span twice.
pub fn export_filter<S>() -> impl Filter<S> + Send + Sync + 'static {
    filter_fn(|meta: &Metadata<'_>| {
        *meta.level() <= Level::INFO && meta.target() != drover_runner::telemetry::ATTEMPT_TARGET
    })
    .with_max_level_hint(LevelFilter::INFO)
}

/// The layer that makes an event inside an attempt an event of the attempt's OpenTelemetry
/// span, for an application that installs its own `tracing-opentelemetry` layer
/// ([`Telemetry::layer`] includes it): an event at info and above outside every exported
/// span becomes an event of the current OpenTelemetry span (inside an attempt, the
/// attempt's), as `tracing-opentelemetry` does for events inside its spans: the `message` its
/// name, `level`, `target` and the other fields (but `log.*`) attributes.
///
/// It does not keep the attempt's `tracing` log span (target
/// [`drover_runner::telemetry::ATTEMPT_TARGET`]) alive: that span exists only where a layer
/// records it (a log showing it, [`attempt_context_layer`]), so an attempt costs no `tracing`
/// span of its own otherwise (docs/adr/0020-attempt-log-span-on-demand.md).
pub fn attempt_layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    // The spans it sees are the exported ones: an event inside one is that span's (a debug
    // span a handler enters holds no events of its own for the collector).
    AttemptEvents.with_filter(export_filter())
}

/// The layer that keeps an attempt's `tracing` log span (target
/// [`drover_runner::telemetry::ATTEMPT_TARGET`]) and makes the attempt's OpenTelemetry
/// context current wherever that span is entered, so that work run in the span elsewhere (a
/// task spawned with `.in_current_span()`) nests its spans, events and enqueues in the
/// attempt, as the handler itself does. It costs each attempt a `tracing` span; without it, a
/// task carries the attempt's context with
/// `opentelemetry::context::FutureExt::with_current_context` (docs/opentelemetry.md).
pub fn attempt_context_layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    AttemptContextLayer.with_filter(
        filter_fn(|meta: &Metadata<'_>| is_attempt(meta)).with_max_level_hint(LevelFilter::INFO),
    )
}

fn is_attempt(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.target() == drover_runner::telemetry::ATTEMPT_TARGET
}

struct AttemptEvents;

impl<S> Layer<S> for AttemptEvents
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_event(&self, event: &tracing::Event<'_>, ctx: layer::Context<'_, S>) {
        // An event inside an exported span is that span's (the tracing-opentelemetry layer
        // adds it there); one made a root on purpose (`parent: None`) belongs to no span.
        if event.is_root() || ctx.event_span(event).is_some() {
            return;
        }
        // A copy, not a borrow of the current one: recording the fields runs their `Debug`
        // code, which may itself log or attach a context.
        let current = opentelemetry::Context::current();
        let span = current.span();
        if !span.is_recording() {
            return;
        }
        let meta = event.metadata();
        let mut fields = EventFields {
            name: None,
            attributes: vec![
                KeyValue::new("level", meta.level().as_str()),
                KeyValue::new("target", meta.target().to_owned()),
            ],
        };
        event.record(&mut fields);
        let name = fields.name.unwrap_or_else(|| meta.name().to_owned());
        span.add_event(name, fields.attributes);
    }
}

struct AttemptContextLayer;

/// An attempt's OpenTelemetry context, kept with its log span.
struct AttemptContext(opentelemetry::Context);

thread_local! {
    /// The log spans entered on this thread, innermost last, with the context each made
    /// current (none when it was current already).
    static ENTERED: std::cell::RefCell<Vec<(tracing::span::Id, Option<opentelemetry::ContextGuard>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl<S> Layer<S> for AttemptContextLayer
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_new_span(
        &self,
        _attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: layer::Context<'_, S>,
    ) {
        // The runner makes the log span while the attempt's context is current.
        let current = opentelemetry::Context::current();
        if !current.has_active_span() {
            return;
        }
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(AttemptContext(current));
        }
    }

    fn on_enter(&self, id: &tracing::span::Id, ctx: layer::Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let guard = {
            let extensions = span.extensions();
            let Some(AttemptContext(context)) = extensions.get::<AttemptContext>() else {
                return;
            };
            // The runner polls an attempt under its context already; only elsewhere (a
            // spawned task) is there anything to attach, and only then a copy to make.
            let attempt = context.span().span_context().span_id();
            let current = opentelemetry::Context::map_current(|current| {
                current.span().span_context().span_id()
            });
            (current != attempt).then(|| context.clone().attach())
        };
        // Every enter is kept, to pair with its exit.
        ENTERED.with(|entered| entered.borrow_mut().push((id.clone(), guard)));
    }

    fn on_exit(&self, id: &tracing::span::Id, _ctx: layer::Context<'_, S>) {
        let guard = ENTERED.with(|entered| {
            let mut entered = entered.borrow_mut();
            let at = entered.iter().rposition(|(entered, _)| entered == id)?;
            Some(entered.remove(at))
        });
        drop(guard);
    }
}

/// An event's `message` (its name) and other fields (its attributes).
struct EventFields {
    name: Option<String>,
    attributes: Vec<KeyValue>,
}

impl EventFields {
    fn add(&mut self, field: &Field, value: opentelemetry::Value) {
        // `log.*` fields are where tracing-log puts a `log` record's own metadata.
        if !field.name().starts_with("log.") {
            self.attributes.push(KeyValue::new(field.name(), value));
        }
    }
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.name = Some(value.to_owned());
        } else {
            self.add(field, value.to_owned().into());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.name = Some(text);
        } else {
            self.add(field, text.into());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.add(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(value) => self.add(field, value.into()),
            Err(_) => self.add(field, value.to_string().into()),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.add(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.add(field, value.into());
    }
}

/// The resource from the environment (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), with
/// [`SERVICE_NAME_DEFAULT`] when neither names the service.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        Resource::builder()
            .with_service_name(SERVICE_NAME_DEFAULT)
            .build()
    }
}

/// An exporter that logs its first failure as a warning and later ones not at all (the
/// collector being down should say so once, not once a batch).
#[derive(Debug)]
struct WarnOnce<E> {
    inner: E,
    warned: Arc<AtomicBool>,
}

impl<E> WarnOnce<E> {
    fn seen(&self, result: OTelSdkResult) -> OTelSdkResult {
        if let Err(error) = &result {
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    error = %error,
                    "OpenTelemetry export failed; telemetry is dropped until the collector answers (logged once)"
                );
            }
        }
        result
    }
}

impl<E: SpanExporter> SpanExporter for WarnOnce<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        self.seen(result)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for WarnOnce<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        self.seen(result)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// The runner's metrics as OpenTelemetry instruments (docs/opentelemetry.md, Metrics).
///
/// A job's measurements go to instruments bound to their label sets (OpenTelemetry's bound
/// instruments, ADR 0019): they build no labels and the SDK looks none up; the kind and
/// queue are found by position (a scan of up to eight names, a hash lookup beyond). Each
/// series is bound at its first measurement, so that only series that happened are
/// exported. Rescues, rare, are measured unbound.
struct OtelMetrics {
    kinds: Names,
    queues: Names,
    /// By kind and queue (`kind * queues + queue`, [`OTHER`] last in each).
    series: Vec<Series>,
    enqueued: Counter<u64>,
    finished: Counter<u64>,
    rescued: Counter<u64>,
    duration: Histogram<f64>,
    queue_wait: Histogram<f64>,
}

/// The bound instruments of one kind and queue.
#[derive(Default)]
struct Series {
    enqueued: OnceLock<BoundCounter<u64>>,
    queue_wait: OnceLock<BoundHistogram<f64>>,
    /// By outcome ([`JobOutcome::index`]): the finished counter and the duration.
    finished: [OnceLock<(BoundCounter<u64>, BoundHistogram<f64>)>; JobOutcome::ALL.len()],
}

/// The label values with series of their own, and where each one's series are.
struct Names {
    values: Vec<StringValue>,
    positions: HashMap<String, usize>,
}

impl Names {
    fn new(names: Vec<String>) -> Names {
        let mut positions = HashMap::new();
        let mut values = Vec::new();
        for name in names {
            if !positions.contains_key(&name) {
                positions.insert(name.clone(), values.len());
                values.push(StringValue::from(name));
            }
        }
        values.push(StringValue::from(OTHER));
        Names { values, positions }
    }

    /// Where `name`'s series are: its own, or [`OTHER`]'s.
    fn position(&self, name: &str) -> usize {
        // A short list is faster to scan than to hash into.
        if self.positions.len() <= 8 {
            return self.values[..self.positions.len()]
                .iter()
                .position(|value| value.as_str() == name)
                .unwrap_or(self.positions.len());
        }
        self.positions
            .get(name)
            .copied()
            .unwrap_or(self.positions.len())
    }
}

impl OtelMetrics {
    fn new(provider: &SdkMeterProvider, kinds: Vec<String>, queues: Vec<String>) -> Self {
        let meter = provider.meter("drover");
        let kinds = Names::new(kinds);
        let queues = Names::new(queues);
        let series = (0..kinds.values.len() * queues.values.len())
            .map(|_| Series::default())
            .collect();
        OtelMetrics {
            kinds,
            queues,
            series,
            enqueued: meter
                .u64_counter("drover.jobs.enqueued")
                .with_description("Jobs enqueued by this process")
                .build(),
            finished: meter
                .u64_counter("drover.jobs.finished")
                .with_description("Job runs finished by this process, per outcome")
                .build(),
            rescued: meter
                .u64_counter("drover.jobs.rescued")
                .with_description("Expired leases rescued by this process")
                .build(),
            duration: meter
                .f64_histogram("messaging.process.duration")
                .with_unit("s")
                .with_description("Handler run time of a job's attempt")
                .build(),
            queue_wait: meter
                .f64_histogram("drover.job.queue_wait")
                .with_unit("s")
                .with_description("Time from a job becoming runnable to its claim")
                .build(),
        }
    }

    /// The series of `kind` and `queue`, and their labels (made only to bind an instrument).
    fn series(
        &self,
        kind: &JobKind,
        queue: &QueueName,
    ) -> (&Series, impl Fn() -> [KeyValue; 3] + '_) {
        let kind = self.kinds.position(kind.as_str());
        let queue = self.queues.position(queue.as_str());
        let labels = move || {
            [
                KeyValue::new("messaging.system", "drover"),
                KeyValue::new(
                    "messaging.destination.name",
                    self.queues.values[queue].clone(),
                ),
                KeyValue::new("drover.job.kind", self.kinds.values[kind].clone()),
            ]
        };
        (
            &self.series[kind * self.queues.values.len() + queue],
            labels,
        )
    }

    fn labels(&self, kind: &JobKind, queue: &QueueName) -> [KeyValue; 3] {
        self.series(kind, queue).1()
    }
}

impl Metrics for OtelMetrics {
    fn job_enqueued(&self, kind: &JobKind, queue: &QueueName) {
        let (series, labels) = self.series(kind, queue);
        series
            .enqueued
            .get_or_init(|| self.enqueued.bind(&labels()))
            .add(1);
    }

    fn job_queue_wait(&self, kind: &JobKind, queue: &QueueName, wait: Duration) {
        let (series, labels) = self.series(kind, queue);
        series
            .queue_wait
            .get_or_init(|| self.queue_wait.bind(&labels()))
            .record(wait.as_secs_f64());
    }

    fn job_finished(
        &self,
        kind: &JobKind,
        queue: &QueueName,
        outcome: JobOutcome,
        duration: Duration,
    ) {
        let (series, labels) = self.series(kind, queue);
        let labels = || {
            let [system, destination, kind] = labels();
            [
                system,
                destination,
                kind,
                KeyValue::new("drover.job.outcome", outcome.as_str()),
            ]
        };
        let Some(slot) = series.finished.get(outcome.index()) else {
            // An outcome newer than this table: measured without a bound series.
            let labels = labels();
            self.finished.add(1, &labels);
            self.duration.record(duration.as_secs_f64(), &labels);
            return;
        };
        let (finished, duration_of) = slot.get_or_init(|| {
            let labels = labels();
            (self.finished.bind(&labels), self.duration.bind(&labels))
        });
        finished.add(1);
        duration_of.record(duration.as_secs_f64());
    }

    fn job_rescued(&self, kind: &JobKind, queue: &QueueName, to: JobState) {
        let [system, destination, kind] = self.labels(kind, queue);
        self.rescued.add(
            1,
            &[
                system,
                destination,
                kind,
                KeyValue::new("drover.job.state", to.as_str()),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::Tracer as _;
    use opentelemetry_sdk::trace::InMemorySpanExporter;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// A tracer provider whose spans the returned exporter keeps as each ends.
    fn kept_spans() -> (InMemorySpanExporter, SdkTracerProvider) {
        let kept = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        (kept, provider)
    }

    fn event_names(span: &SpanData) -> Vec<String> {
        span.events.iter().map(|e| e.name.to_string()).collect()
    }

    #[test]
    fn an_attempts_log_span_carries_its_context_and_events_and_is_not_exported() {
        let (kept, provider) = kept_spans();
        let subscriber = tracing_subscriber::registry()
            .with(exporting_layer(&provider))
            .with(attempt_context_layer());
        tracing::subscriber::with_default(subscriber, || {
            let attempt = provider.tracer("test").start("attempt");
            let context = opentelemetry::Context::new().with_span(attempt);
            // As the runner makes it: while the attempt's context is current.
            let log = {
                let _current = context.clone().attach();
                tracing::info_span!(target: drover_runner::telemetry::ATTEMPT_TARGET, "process")
            };
            // Entered with no context current, as a task spawned with `.in_current_span()`
            // is: the attempt's context becomes current.
            log.in_scope(|| {
                tracing::info!(answer = 42, word = "yes", "outside spans of its own");
                tracing::debug!("below info");
                tracing::debug_span!("quiet step").in_scope(|| tracing::warn!("in a quiet span"));
                tracing::info_span!("step").in_scope(|| tracing::info!("inside its own span"));
            });
            // Outside the attempt, no span is there to take an event.
            tracing::info!("after the attempt");
            context.span().end();
        });
        let spans = kept.get_finished_spans().unwrap();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["step", "attempt"], "the log span is not exported");
        let (step, attempt) = (&spans[0], &spans[1]);
        assert_eq!(
            event_names(attempt),
            ["outside spans of its own", "in a quiet span"],
            "info and above, outside exported spans"
        );
        assert_eq!(event_names(step), ["inside its own span"], "not duplicated");
        assert_eq!(step.parent_span_id, attempt.span_context.span_id());
        assert_eq!(
            step.span_context.trace_id(),
            attempt.span_context.trace_id()
        );
        let first = &attempt.events.first().unwrap().attributes;
        for expected in [
            KeyValue::new("level", "INFO"),
            KeyValue::new("answer", 42_i64),
            KeyValue::new("word", "yes"),
        ] {
            assert!(first.contains(&expected), "{expected:?} in {first:?}");
        }
    }

    #[test]
    fn without_the_context_layer_events_go_to_the_current_span() {
        let (kept, provider) = kept_spans();
        // That no log span is made is `tests/tests/attempt_telemetry_lean.rs`'s to show: a
        // callsite's interest is shared by the subscribers of every test running here.
        let subscriber = tracing_subscriber::registry().with(exporting_layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let attempt = provider.tracer("test").start("attempt");
            let context = opentelemetry::Context::new().with_span(attempt);
            {
                // As the runner polls an attempt: under its context.
                let _current = context.clone().attach();
                tracing::info!("under the attempt");
                tracing::info!(parent: None, "a root on purpose");
                tracing::info_span!("step").in_scope(|| tracing::info!("inside its own span"));
            }
            tracing::info!("after the attempt");
            context.span().end();
        });
        let spans = kept.get_finished_spans().unwrap();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["step", "attempt"]);
        assert_eq!(event_names(&spans[1]), ["under the attempt"]);
        assert_eq!(
            event_names(&spans[0]),
            ["inside its own span"],
            "not duplicated"
        );
        assert_eq!(spans[0].parent_span_id, spans[1].span_context.span_id());
    }

    #[test]
    fn measurements_reach_their_series_and_only_measured_series_are_exported() {
        use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
        use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};

        let exported = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exported.clone()).build())
            .build();
        let metrics = OtelMetrics::new(&provider, vec!["email.send".into()], vec!["mail".into()]);
        let kind = JobKind::parse("email.send").unwrap();
        let mail = QueueName::parse("mail").unwrap();
        let other_kind = JobKind::parse("report.build").unwrap();
        let second = Duration::from_secs(1);
        metrics.job_enqueued(&kind, &mail);
        metrics.job_enqueued(&kind, &mail);
        metrics.job_queue_wait(&kind, &mail, second);
        metrics.job_finished(&kind, &mail, JobOutcome::Succeeded, second);
        metrics.job_finished(&kind, &mail, JobOutcome::Succeeded, 3 * second);
        metrics.job_finished(&kind, &mail, JobOutcome::Retried, second);
        metrics.job_finished(&other_kind, &mail, JobOutcome::Failed, second);
        provider.force_flush().unwrap();

        // (metric, kind, outcome) -> (count or sum of a counter, count of a histogram, sum)
        let mut seen = std::collections::BTreeMap::new();
        for resource in exported.get_finished_metrics().unwrap() {
            for metric in resource.scope_metrics().flat_map(|scope| scope.metrics()) {
                let key = |attributes: Vec<&KeyValue>| {
                    let get = |name: &str| {
                        attributes
                            .iter()
                            .find(|kv| kv.key.as_str() == name)
                            .map(|kv| kv.value.as_str().into_owned())
                            .unwrap_or_default()
                    };
                    assert_eq!(get("messaging.destination.name"), "mail");
                    (
                        metric.name().to_owned(),
                        get("drover.job.kind"),
                        get("drover.job.outcome"),
                    )
                };
                match metric.data() {
                    AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                        for point in sum.data_points() {
                            seen.insert(key(point.attributes().collect()), (point.value(), 0.0));
                        }
                    }
                    AggregatedMetrics::F64(MetricData::Histogram(histogram)) => {
                        for point in histogram.data_points() {
                            seen.insert(
                                key(point.attributes().collect()),
                                (point.count(), point.sum()),
                            );
                        }
                    }
                    other => panic!("unexpected data {other:?}"),
                }
            }
        }
        let series = |metric: &str, kind: &str, outcome: &str| {
            seen.get(&(metric.to_owned(), kind.to_owned(), outcome.to_owned()))
                .copied()
        };
        assert_eq!(
            series("drover.jobs.enqueued", "email.send", ""),
            Some((2, 0.0))
        );
        assert_eq!(
            series("drover.job.queue_wait", "email.send", ""),
            Some((1, 1.0))
        );
        assert_eq!(
            series("drover.jobs.finished", "email.send", "succeeded"),
            Some((2, 0.0))
        );
        assert_eq!(
            series("messaging.process.duration", "email.send", "succeeded"),
            Some((2, 4.0))
        );
        assert_eq!(
            series("drover.jobs.finished", "email.send", "retried"),
            Some((1, 0.0))
        );
        assert_eq!(
            series("drover.jobs.finished", OTHER, "failed"),
            Some((1, 0.0))
        );
        assert_eq!(
            seen.len(),
            8,
            "no series for what was not measured: {:?}",
            seen.keys().collect::<Vec<_>>()
        );
    }

    #[test]
    fn names_find_their_series_in_short_and_long_lists() {
        for count in [1, 8, 9, 40] {
            let mut names: Vec<String> = (0..count).map(|i| format!("kind{i}")).collect();
            names.push("kind0".into()); // a repeat has no series of its own
            let names = Names::new(names);
            assert_eq!(
                names.values.len(),
                count + 1,
                "each name once, then (other)"
            );
            for i in 0..count {
                let at = names.position(&format!("kind{i}"));
                assert_eq!(names.values[at].as_str(), format!("kind{i}"));
            }
            assert_eq!(names.position("unknown"), count, "(other) is last");
            assert_eq!(names.values[count].as_str(), OTHER);
        }
    }

    #[test]
    fn metric_labels_name_only_the_given_kinds_and_queues() {
        let provider = SdkMeterProvider::builder().build();
        let metrics = OtelMetrics::new(&provider, vec!["email.send".into()], vec!["mail".into()]);
        let labels = |kind: &str, queue: &str| {
            metrics.labels(
                &JobKind::parse(kind).unwrap(),
                &QueueName::parse(queue).unwrap(),
            )
        };
        let [_, queue, kind] = labels("email.send", "mail");
        assert_eq!(
            (queue.value.as_str(), kind.value.as_str()),
            ("mail".into(), "email.send".into())
        );
        let [_, queue, kind] = labels("report.build", "reports");
        assert_eq!(
            (queue.value.as_str(), kind.value.as_str()),
            (OTHER.into(), OTHER.into())
        );
    }
}

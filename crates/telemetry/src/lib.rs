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

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobKind, JobState, QueueName};
use drover_runner::telemetry::LaterAttempts;
use drover_runner::{JobOutcome, Metrics};
use opentelemetry::metrics::{Counter, Histogram, MeterProvider};
use opentelemetry::trace::TracerProvider;
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
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
        drover_runner::telemetry::configure(Some(later));
        Ok(Telemetry {
            tracer_provider,
            meter_provider,
        })
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans of this export.
    pub fn layer<S>(
        &self,
    ) -> tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer_provider.tracer("drover"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
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
struct OtelMetrics {
    kinds: HashSet<String>,
    queues: HashSet<String>,
    enqueued: Counter<u64>,
    finished: Counter<u64>,
    rescued: Counter<u64>,
    duration: Histogram<f64>,
    queue_wait: Histogram<f64>,
}

impl OtelMetrics {
    fn new(provider: &SdkMeterProvider, kinds: HashSet<String>, queues: HashSet<String>) -> Self {
        let meter = provider.meter("drover");
        OtelMetrics {
            kinds,
            queues,
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

    fn labels(&self, kind: &JobKind, queue: &QueueName) -> [KeyValue; 3] {
        let bounded = |set: &HashSet<String>, value: &str| {
            if set.contains(value) {
                value.to_owned()
            } else {
                OTHER.to_owned()
            }
        };
        [
            KeyValue::new("messaging.system", "drover"),
            KeyValue::new(
                "messaging.destination.name",
                bounded(&self.queues, queue.as_str()),
            ),
            KeyValue::new("drover.job.kind", bounded(&self.kinds, kind.as_str())),
        ]
    }
}

impl Metrics for OtelMetrics {
    fn job_enqueued(&self, kind: &JobKind, queue: &QueueName) {
        self.enqueued.add(1, &self.labels(kind, queue));
    }

    fn job_queue_wait(&self, kind: &JobKind, queue: &QueueName, wait: Duration) {
        self.queue_wait
            .record(wait.as_secs_f64(), &self.labels(kind, queue));
    }

    fn job_finished(
        &self,
        kind: &JobKind,
        queue: &QueueName,
        outcome: JobOutcome,
        duration: Duration,
    ) {
        let [system, destination, kind] = self.labels(kind, queue);
        let labels = [
            system,
            destination,
            kind,
            KeyValue::new("drover.job.outcome", outcome.as_str()),
        ];
        self.finished.add(1, &labels);
        self.duration.record(duration.as_secs_f64(), &labels);
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

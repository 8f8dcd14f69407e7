//! Prometheus exposition (DESIGN.md section 7, metric names): queue gauges computed from a store
//! snapshot at scrape time, plus this process's counters when it runs jobs.
//!
//! Labels are queue names, states, kinds and outcomes only: never args, results or tenants.

use std::sync::Arc;

use drover_core::{JobState, Snapshot};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueStateLabels {
    queue: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindOutcomeLabels {
    kind: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

fn duration_histogram() -> Histogram {
    // 1 ms .. ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Counters of one process's job activity, exported with the queue gauges. Cheap to clone
/// (shared); safe to use from many tasks.
#[derive(Clone)]
pub struct ProcessMetrics {
    inner: Arc<ProcessInner>,
}

struct ProcessInner {
    outcomes: Family<KindOutcomeLabels, Counter>,
    enqueued: Family<KindLabels, Counter>,
    started: Family<KindLabels, Counter>,
    rescued: Family<KindLabels, Counter>,
    durations: Family<KindLabels, Histogram, fn() -> Histogram>,
}

impl Default for ProcessMetrics {
    fn default() -> Self {
        ProcessMetrics {
            inner: Arc::new(ProcessInner {
                outcomes: Family::default(),
                enqueued: Family::default(),
                started: Family::default(),
                rescued: Family::default(),
                durations: Family::new_with_constructor(duration_histogram),
            }),
        }
    }
}

impl std::fmt::Debug for ProcessMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessMetrics")
    }
}

impl ProcessMetrics {
    /// Counts a job of `kind` ending a run with `outcome` (`succeeded`, `retried`, `failed`,
    /// `cancelled`, `snoozed`, `released`, `lease_lost`) after `seconds` of handler time.
    pub fn record_outcome(&self, kind: &str, outcome: &str, seconds: f64) {
        self.inner
            .outcomes
            .get_or_create(&KindOutcomeLabels {
                kind: kind.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.inner
            .durations
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .observe(seconds);
    }

    /// Counts an enqueued job.
    pub fn record_enqueued(&self, kind: &str) {
        self.inner
            .enqueued
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts a started run.
    pub fn record_started(&self, kind: &str) {
        self.inner
            .started
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts a rescued lease.
    pub fn record_rescued(&self, kind: &str) {
        self.inner
            .rescued
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "drover_job_outcomes",
            "Job runs finished by this process, per kind and outcome",
            self.inner.outcomes.clone(),
        );
        registry.register(
            "drover_jobs_enqueued",
            "Jobs enqueued by this process, per kind",
            self.inner.enqueued.clone(),
        );
        registry.register(
            "drover_jobs_started",
            "Job runs started by this process, per kind",
            self.inner.started.clone(),
        );
        registry.register(
            "drover_jobs_rescued",
            "Expired leases rescued by this process, per kind",
            self.inner.rescued.clone(),
        );
        registry.register(
            "drover_job_duration_seconds",
            "Handler run time, per kind",
            self.inner.durations.clone(),
        );
    }
}

impl drover_runner::Metrics for ProcessMetrics {
    fn job_enqueued(&self, kind: &drover_core::JobKind, _queue: &drover_core::QueueName) {
        self.record_enqueued(kind.as_str());
    }

    fn job_started(&self, kind: &drover_core::JobKind, _queue: &drover_core::QueueName) {
        self.record_started(kind.as_str());
    }

    fn job_finished(
        &self,
        kind: &drover_core::JobKind,
        _queue: &drover_core::QueueName,
        outcome: drover_runner::JobOutcome,
        duration: std::time::Duration,
    ) {
        self.record_outcome(kind.as_str(), outcome.as_str(), duration.as_secs_f64());
    }

    fn job_rescued(
        &self,
        kind: &drover_core::JobKind,
        _queue: &drover_core::QueueName,
        _to: JobState,
    ) {
        self.record_rescued(kind.as_str());
    }
}

/// Renders the queue gauges of `snapshot` (`drover_jobs{queue,state}`,
/// `drover_queue_lag_seconds{queue}`, `drover_jobs_running{queue}`,
/// `drover_queue_paused{queue}`, `drover_jobs_ready{queue}`) and, when given, the process
/// counters, as OpenMetrics text.
pub fn render(snapshot: &Snapshot, process: Option<&ProcessMetrics>) -> String {
    let mut registry = Registry::default();
    let jobs = Family::<QueueStateLabels, Gauge>::default();
    let lag = Family::<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let running = Family::<QueueLabels, Gauge>::default();
    let ready = Family::<QueueLabels, Gauge>::default();
    let paused = Family::<QueueLabels, Gauge>::default();
    for q in &snapshot.queues {
        let queue = q.queue.to_string();
        for state in JobState::ALL {
            jobs.get_or_create(&QueueStateLabels {
                queue: queue.clone(),
                state: state.as_str().to_owned(),
            })
            .set(i64::try_from(q.count(state)).unwrap_or(i64::MAX));
        }
        let labels = QueueLabels { queue };
        lag.get_or_create(&labels)
            .set(q.oldest_ready_age_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
        running
            .get_or_create(&labels)
            .set(i64::try_from(q.running).unwrap_or(i64::MAX));
        ready
            .get_or_create(&labels)
            .set(i64::try_from(q.ready).unwrap_or(i64::MAX));
        paused.get_or_create(&labels).set(i64::from(q.paused));
    }
    registry.register("drover_jobs", "Jobs per queue and state", jobs);
    registry.register(
        "drover_queue_lag_seconds",
        "Age of the oldest ready job per queue (0 when none is ready)",
        lag,
    );
    registry.register("drover_jobs_running", "Running jobs per queue", running);
    registry.register("drover_jobs_ready", "Ready queued jobs per queue", ready);
    registry.register(
        "drover_queue_paused",
        "1 when the queue is paused cluster-wide",
        paused,
    );
    if let Some(process) = process {
        process.register(&mut registry);
    }
    let mut out = String::new();
    // Encoding into a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_core::{QueueName, QueueSnapshot};
    use std::collections::BTreeMap;

    #[test]
    fn renders_design_names() {
        let snapshot = Snapshot {
            taken_at: chrono::Utc::now(),
            queues: vec![QueueSnapshot {
                queue: QueueName::parse("mail").unwrap(),
                paused: true,
                counts: BTreeMap::from([(JobState::Queued, 3), (JobState::Running, 1)]),
                ready: 2,
                running: 1,
                oldest_ready_age_ms: Some(1500),
            }],
        };
        let process = ProcessMetrics::default();
        process.record_outcome("email.send", "succeeded", 0.01);
        let text = render(&snapshot, Some(&process));
        assert!(
            text.contains(r#"drover_jobs{queue="mail",state="queued"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"drover_queue_lag_seconds{queue="mail"} 1.5"#),
            "{text}"
        );
        assert!(
            text.contains(r#"drover_jobs_running{queue="mail"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"drover_queue_paused{queue="mail"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"drover_job_outcomes_total{kind="email.send",outcome="succeeded"} 1"#),
            "{text}"
        );
    }
}

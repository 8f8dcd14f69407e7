//! Prometheus exposition (DESIGN.md section 7, metric names): queue gauges computed from a store
//! snapshot at scrape time, plus this process's counters when it runs jobs.
//!
//! Labels are queue names, states, kinds and outcomes only: never args, results or tenants.
//!
//! The text is deterministic: the same state renders the same bytes. Metric families come in
//! a fixed order, each series' labels in a fixed order (the fields of its label struct), and
//! the series of a family sorted by their label values (`SortedFamily`; prometheus-client's
//! own `Family` keeps them in a `HashMap`, whose order changes from one process to the next).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use drover_core::{JobState, Snapshot};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A family of series keyed by label set, like prometheus-client's `Family`, but encoded in
/// the order of its label sets (their fields compared in declaration order), so a render
/// never depends on a hash map's order. Cheap to clone (shared).
#[derive(Debug)]
struct SortedFamily<S, M> {
    series: Arc<RwLock<BTreeMap<S, M>>>,
    new_metric: fn() -> M,
}

impl<S, M> Clone for SortedFamily<S, M> {
    fn clone(&self) -> Self {
        SortedFamily {
            series: Arc::clone(&self.series),
            new_metric: self.new_metric,
        }
    }
}

impl<S: Ord + Clone, M: Default> Default for SortedFamily<S, M> {
    fn default() -> Self {
        Self::new(M::default)
    }
}

impl<S: Ord + Clone, M> SortedFamily<S, M> {
    fn new(new_metric: fn() -> M) -> Self {
        SortedFamily {
            series: Arc::new(RwLock::new(BTreeMap::new())),
            new_metric,
        }
    }

    /// Runs `f` on the series of `labels`, created first if needed. A panic elsewhere while the
    /// lock was held leaves the counts usable (they are atomics), so a poisoned lock is entered.
    fn with<R>(&self, labels: &S, f: impl FnOnce(&M) -> R) -> R {
        {
            let series = self.series.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(metric) = series.get(labels) {
                return f(metric);
            }
        }
        let mut series = self.series.write().unwrap_or_else(PoisonError::into_inner);
        let metric = series
            .entry(labels.clone())
            .or_insert_with(|| (self.new_metric)());
        f(metric)
    }
}

impl<S, M: TypedMetric> TypedMetric for SortedFamily<S, M> {
    const TYPE: MetricType = M::TYPE;
}

impl<S, M> EncodeMetric for SortedFamily<S, M>
where
    S: EncodeLabelSet,
    M: EncodeMetric + TypedMetric,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let series = self.series.read().unwrap_or_else(PoisonError::into_inner);
        for (labels, metric) in series.iter() {
            metric.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct QueueStateLabels {
    queue: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct KindOutcomeLabels {
    kind: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
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
    outcomes: SortedFamily<KindOutcomeLabels, Counter>,
    enqueued: SortedFamily<KindLabels, Counter>,
    started: SortedFamily<KindLabels, Counter>,
    rescued: SortedFamily<KindLabels, Counter>,
    durations: SortedFamily<KindLabels, Histogram>,
}

impl Default for ProcessMetrics {
    fn default() -> Self {
        ProcessMetrics {
            inner: Arc::new(ProcessInner {
                outcomes: SortedFamily::default(),
                enqueued: SortedFamily::default(),
                started: SortedFamily::default(),
                rescued: SortedFamily::default(),
                durations: SortedFamily::new(duration_histogram),
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
        self.inner.outcomes.with(
            &KindOutcomeLabels {
                kind: kind.to_owned(),
                outcome: outcome.to_owned(),
            },
            |c| c.inc(),
        );
        self.inner.durations.with(
            &KindLabels {
                kind: kind.to_owned(),
            },
            |h| h.observe(seconds),
        );
    }

    /// Counts an enqueued job.
    pub fn record_enqueued(&self, kind: &str) {
        self.inner.enqueued.with(
            &KindLabels {
                kind: kind.to_owned(),
            },
            |c| c.inc(),
        );
    }

    /// Counts a started run.
    pub fn record_started(&self, kind: &str) {
        self.inner.started.with(
            &KindLabels {
                kind: kind.to_owned(),
            },
            |c| c.inc(),
        );
    }

    /// Counts a rescued lease.
    pub fn record_rescued(&self, kind: &str) {
        self.inner.rescued.with(
            &KindLabels {
                kind: kind.to_owned(),
            },
            |c| c.inc(),
        );
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
/// `drover_queue_lag_seconds{queue}`, `drover_jobs_running{queue}` (handler started),
/// `drover_jobs_claimed{queue}` (claimed ahead, waiting for a slot; with the running ones they
/// make `drover_jobs{state="running"}`), `drover_queue_paused{queue}`,
/// `drover_jobs_ready{queue}`) and, when given, the process counters, as OpenMetrics text.
pub fn render(snapshot: &Snapshot, process: Option<&ProcessMetrics>) -> String {
    let mut registry = Registry::default();
    let jobs = SortedFamily::<QueueStateLabels, Gauge>::default();
    let lag = SortedFamily::<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let running = SortedFamily::<QueueLabels, Gauge>::default();
    let claimed = SortedFamily::<QueueLabels, Gauge>::default();
    let ready = SortedFamily::<QueueLabels, Gauge>::default();
    let paused = SortedFamily::<QueueLabels, Gauge>::default();
    for q in &snapshot.queues {
        let queue = q.queue.to_string();
        for state in JobState::ALL {
            let labels = QueueStateLabels {
                queue: queue.clone(),
                state: state.as_str().to_owned(),
            };
            jobs.with(&labels, |g| {
                g.set(i64::try_from(q.count(state)).unwrap_or(i64::MAX))
            });
        }
        let labels = QueueLabels { queue };
        lag.with(&labels, |g| {
            g.set(q.oldest_ready_age_ms.map_or(0.0, |ms| ms as f64 / 1000.0))
        });
        running.with(&labels, |g| {
            g.set(i64::try_from(q.running).unwrap_or(i64::MAX))
        });
        claimed.with(&labels, |g| {
            g.set(i64::try_from(q.claimed).unwrap_or(i64::MAX))
        });
        ready.with(&labels, |g| {
            g.set(i64::try_from(q.ready).unwrap_or(i64::MAX))
        });
        paused.with(&labels, |g| g.set(i64::from(q.paused)));
    }
    registry.register("drover_jobs", "Jobs per queue and state", jobs);
    registry.register(
        "drover_queue_lag_seconds",
        "Age of the oldest ready job per queue (0 when none is ready)",
        lag,
    );
    registry.register(
        "drover_jobs_running",
        "Running jobs whose handler started, per queue",
        running,
    );
    registry.register(
        "drover_jobs_claimed",
        "Jobs claimed ahead by a worker and waiting for a slot, per queue",
        claimed,
    );
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

    fn queue_snapshot(name: &str, queued: u64) -> QueueSnapshot {
        QueueSnapshot {
            queue: QueueName::parse(name).unwrap(),
            paused: false,
            counts: BTreeMap::from([(JobState::Queued, queued)]),
            ready: queued,
            running: 0,
            claimed: 0,
            oldest_ready_age_ms: None,
        }
    }

    /// The label values of the samples of `metric` (lines `metric{...} value`), in text order.
    fn series_of(text: &str, metric: &str) -> Vec<String> {
        text.lines()
            .filter_map(|line| line.strip_prefix(metric)?.strip_prefix('{'))
            .map(|rest| rest.split('}').next().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn the_same_state_renders_the_same_sorted_text() {
        // Queues and kinds arrive in no particular order; many series, so a hash map's order
        // would show.
        let names = [
            "mail", "billing", "zeta", "alpha", "reports", "images", "default", "queue-10",
            "queue-2", "Upper",
        ];
        let snapshot = Snapshot {
            taken_at: chrono::Utc::now(),
            queues: names
                .iter()
                .enumerate()
                .map(|(i, n)| queue_snapshot(n, i as u64))
                .collect(),
        };
        let process = ProcessMetrics::default();
        for kind in ["email.send", "a.kind", "report.build", "exec", "b", "noop"] {
            for outcome in ["succeeded", "retried", "failed", "cancelled"] {
                process.record_outcome(kind, outcome, 0.01);
            }
            process.record_enqueued(kind);
            process.record_started(kind);
            process.record_rescued(kind);
        }
        let first = render(&snapshot, Some(&process));
        for _ in 0..20 {
            assert_eq!(render(&snapshot, Some(&process)), first);
        }
        // Another process (new maps, new hash seeds) with the same counts renders the same.
        let other = ProcessMetrics::default();
        for kind in ["noop", "b", "exec", "report.build", "a.kind", "email.send"] {
            for outcome in ["cancelled", "failed", "retried", "succeeded"] {
                other.record_outcome(kind, outcome, 0.01);
            }
            other.record_enqueued(kind);
            other.record_started(kind);
            other.record_rescued(kind);
        }
        let mut reversed = snapshot.clone();
        reversed.queues.reverse();
        assert_eq!(render(&reversed, Some(&other)), first);

        // Series sorted by their labels, labels in a fixed order (queue before state, kind
        // before outcome).
        let mut sorted_queues: Vec<&str> = names.to_vec();
        sorted_queues.sort_unstable();
        let queue_series: Vec<String> = sorted_queues
            .iter()
            .map(|q| format!("queue=\"{q}\""))
            .collect();
        for metric in [
            "drover_queue_lag_seconds",
            "drover_jobs_running",
            "drover_jobs_claimed",
            "drover_jobs_ready",
            "drover_queue_paused",
        ] {
            assert_eq!(series_of(&first, metric), queue_series, "{metric}: {first}");
        }
        let jobs = series_of(&first, "drover_jobs");
        let mut expected: Vec<(String, String)> = Vec::new();
        for q in &sorted_queues {
            for state in JobState::ALL {
                expected.push(((*q).to_owned(), state.as_str().to_owned()));
            }
        }
        expected.sort();
        let expected: Vec<String> = expected
            .iter()
            .map(|(q, s)| format!("queue=\"{q}\",state=\"{s}\""))
            .collect();
        assert_eq!(jobs, expected, "{first}");
        let outcomes = series_of(&first, "drover_job_outcomes_total");
        let mut sorted = outcomes.clone();
        sorted.sort();
        assert_eq!(outcomes, sorted);
        assert_eq!(outcomes.len(), 24);
        assert!(
            outcomes[0].starts_with("kind=\"a.kind\",outcome="),
            "{outcomes:?}"
        );
        // A histogram's lines stay together, buckets in increasing order.
        let buckets = series_of(&first, "drover_job_duration_seconds_bucket");
        assert_eq!(buckets.len(), 6 * 18, "{first}");
        assert_eq!(buckets[0], "le=\"0.001\",kind=\"a.kind\"", "{buckets:?}");
        assert_eq!(buckets[17], "le=\"+Inf\",kind=\"a.kind\"", "{buckets:?}");
        assert_eq!(buckets[18], "le=\"0.001\",kind=\"b\"", "{buckets:?}");
    }

    #[test]
    fn renders_design_names() {
        let snapshot = Snapshot {
            taken_at: chrono::Utc::now(),
            queues: vec![QueueSnapshot {
                queue: QueueName::parse("mail").unwrap(),
                paused: true,
                counts: BTreeMap::from([(JobState::Queued, 3), (JobState::Running, 3)]),
                ready: 2,
                running: 1,
                claimed: 2,
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
            text.contains(r#"drover_jobs_claimed{queue="mail"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"drover_jobs{queue="mail",state="running"} 3"#),
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

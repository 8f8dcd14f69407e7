//! Prometheus exposition (docs/design.md section 7, metric names): queue gauges computed from a store
//! snapshot at scrape time, plus this process's counters when it runs jobs.
//!
//! Labels are queue names, states, kinds and outcomes only: never args, results or tenants.
//!
//! Queue and kind names come from callers (any producer may enqueue to a new queue or kind),
//! so those labels are bounded; every other value is counted under [`OTHER_LABEL`]:
//!
//! | Label | Own series | Source |
//! |---|---|---|
//! | `queue` | `default`, queues that a registered worker serves, paused queues | [`scrape`] |
//! | `kind` | kinds this process registers ([`ProcessMetrics::new`]) | [`ProcessMetrics`] |
//!
//! and at most [`LABEL_VALUES_MAX`] values each (the first in name order).
//!
//! The text is deterministic: the same state renders the same bytes. Metric families come in
//! a fixed order, each series' labels in a fixed order (the fields of its label struct), and
//! the series of a family sorted by their label values (`SortedFamily`; prometheus-client's
//! own `Family` keeps them in a `HashMap`, whose order changes from one process to the next).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use drover_core::{
    JobKind, JobState, QueueName, QueueSnapshot, Snapshot, VacuumStatus, WorkerInfo,
};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The label value that stands for every queue (or kind) without a series of its own. No
/// queue or kind can be named so (names cannot hold parentheses).
pub const OTHER_LABEL: &str = "(other)";

/// Most values of one label (`queue`, `kind`) with series of their own; beyond it the values
/// last in name order are counted under [`OTHER_LABEL`] too.
pub const LABEL_VALUES_MAX: usize = 1_000;

/// The values a label may take (at most [`LABEL_VALUES_MAX`], the first in name order); any
/// other value is counted under [`OTHER_LABEL`]. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
struct LabelValues(Arc<HashSet<String>>);

impl LabelValues {
    fn new(values: impl IntoIterator<Item = String>) -> Self {
        let sorted: BTreeSet<String> = values.into_iter().collect();
        LabelValues(Arc::new(
            sorted.into_iter().take(LABEL_VALUES_MAX).collect(),
        ))
    }

    /// `value` when it has series of its own, else [`OTHER_LABEL`].
    fn label<'a>(&self, value: &'a str) -> &'a str {
        if self.0.contains(value) {
            value
        } else {
            OTHER_LABEL
        }
    }
}

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
///
/// The `kind` label names only the kinds given to [`ProcessMetrics::new`] (the kinds this
/// process registers): a job of any other kind (enqueued through the API, rescued from
/// another worker) is counted under `kind="(other)"`, so callers cannot grow the label set.
#[derive(Clone)]
pub struct ProcessMetrics {
    inner: Arc<ProcessInner>,
}

struct ProcessInner {
    kinds: LabelValues,
    outcomes: SortedFamily<KindOutcomeLabels, Counter>,
    enqueued: SortedFamily<KindLabels, Counter>,
    started: SortedFamily<KindLabels, Counter>,
    rescued: SortedFamily<KindLabels, Counter>,
    child_failures: SortedFamily<KindLabels, Counter>,
    rollbacks: SortedFamily<KindLabels, Counter>,
    durations: SortedFamily<KindLabels, Histogram>,
    queue_waits: SortedFamily<KindLabels, Histogram>,
}

impl Default for ProcessMetrics {
    /// Counters that name no kind: every job is counted under `kind="(other)"`.
    fn default() -> Self {
        ProcessMetrics::new(Vec::new())
    }
}

impl ProcessMetrics {
    /// Counters whose `kind` label names `kinds` (at most [`LABEL_VALUES_MAX`]; give the kinds
    /// this process registers) and counts every other kind under `kind="(other)"`.
    pub fn new(kinds: impl IntoIterator<Item = JobKind>) -> Self {
        ProcessMetrics {
            inner: Arc::new(ProcessInner {
                kinds: LabelValues::new(kinds.into_iter().map(|kind| kind.as_str().to_owned())),
                outcomes: SortedFamily::default(),
                enqueued: SortedFamily::default(),
                started: SortedFamily::default(),
                rescued: SortedFamily::default(),
                child_failures: SortedFamily::default(),
                rollbacks: SortedFamily::default(),
                durations: SortedFamily::new(duration_histogram),
                queue_waits: SortedFamily::new(duration_histogram),
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
    /// The `kind` label of `kind`: itself when it has series of its own, else `(other)`.
    fn kind_labels(&self, kind: &str) -> KindLabels {
        KindLabels {
            kind: self.inner.kinds.label(kind).to_owned(),
        }
    }

    /// Counts a job of `kind` ending a run with `outcome` (`succeeded`, `retried`, `failed`,
    /// `cancelled`, `snoozed`, `released`, `waiting`, `lease_lost`) after `seconds` of handler time.
    pub fn record_outcome(&self, kind: &str, outcome: &str, seconds: f64) {
        let labels = self.kind_labels(kind);
        self.inner.durations.with(&labels, |h| h.observe(seconds));
        self.inner.outcomes.with(
            &KindOutcomeLabels {
                kind: labels.kind,
                outcome: outcome.to_owned(),
            },
            |c| c.inc(),
        );
    }

    /// Records how long a job of `kind` waited from runnable to its claim.
    pub fn record_queue_wait(&self, kind: &str, seconds: f64) {
        self.inner
            .queue_waits
            .with(&self.kind_labels(kind), |h| h.observe(seconds));
    }

    /// Counts an enqueued job.
    pub fn record_enqueued(&self, kind: &str) {
        self.inner
            .enqueued
            .with(&self.kind_labels(kind), |c| c.inc());
    }

    /// Counts a started run.
    pub fn record_started(&self, kind: &str) {
        self.inner
            .started
            .with(&self.kind_labels(kind), |c| c.inc());
    }

    /// Counts a rescued lease.
    pub fn record_rescued(&self, kind: &str) {
        self.inner
            .rescued
            .with(&self.kind_labels(kind), |c| c.inc());
    }

    /// Counts a failed or cancelled child its parent of `kind` observed when it ran again.
    pub fn record_child_failed(&self, kind: &str) {
        self.inner
            .child_failures
            .with(&self.kind_labels(kind), |c| c.inc());
    }

    /// Counts a run of the rollback hook of `kind`.
    pub fn record_rollback(&self, kind: &str) {
        self.inner
            .rollbacks
            .with(&self.kind_labels(kind), |c| c.inc());
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
            "drover_child_failures",
            "Failed or cancelled children observed by their parent's next run in this process, per parent kind",
            self.inner.child_failures.clone(),
        );
        registry.register(
            "drover_rollbacks",
            "Rollback hooks run by this process instead of the handler, per parent kind",
            self.inner.rollbacks.clone(),
        );
        registry.register(
            "drover_job_duration_seconds",
            "Handler run time, per kind",
            self.inner.durations.clone(),
        );
        registry.register(
            "drover_job_queue_wait_seconds",
            "Time from a job becoming runnable to its claim, per kind",
            self.inner.queue_waits.clone(),
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

    fn job_queue_wait(
        &self,
        kind: &drover_core::JobKind,
        _queue: &drover_core::QueueName,
        wait: std::time::Duration,
    ) {
        self.record_queue_wait(kind.as_str(), wait.as_secs_f64());
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

    fn child_failed(&self, kind: &drover_core::JobKind) {
        self.record_child_failed(kind.as_str());
    }

    fn rollback(&self, kind: &drover_core::JobKind) {
        self.record_rollback(kind.as_str());
    }
}

/// The queues with series of their own on a metrics page (see the module doc): `default`,
/// the queues `workers` serve, and the queues `snapshot` shows paused; at most
/// [`LABEL_VALUES_MAX`] of them, the first in name order.
pub fn labelled_queues(snapshot: &Snapshot, workers: &[WorkerInfo]) -> BTreeSet<QueueName> {
    let mut queues: BTreeSet<QueueName> = workers
        .iter()
        .flat_map(|worker| worker.queues.iter().cloned())
        .chain(
            snapshot
                .queues
                .iter()
                .filter(|q| q.paused)
                .map(|q| q.queue.clone()),
        )
        .collect();
    queues.insert(QueueName::default_queue());
    queues.into_iter().take(LABEL_VALUES_MAX).collect()
}

/// Reads the snapshot and the worker list from `store` and renders them with `process`
/// ([`render`], with the queues of [`labelled_queues`]): what `GET /metrics` and
/// `drover metrics` answer.
///
/// # Errors
/// The store's error.
pub async fn scrape(
    client: &drover_runner::Client,
    process: Option<&ProcessMetrics>,
) -> Result<String, drover_core::Error> {
    let snapshot = client.snapshot().await?;
    let workers = client.workers().await?;
    Ok(render(
        &snapshot,
        &labelled_queues(&snapshot, &workers),
        process,
    ))
}

/// One queue's gauges, or the sum of several queues' under [`OTHER_LABEL`].
#[derive(Default)]
struct QueueGauges {
    counts: BTreeMap<JobState, u64>,
    ready: u64,
    running: u64,
    claimed: u64,
    /// The oldest ready job's age (the largest of the queues').
    lag_ms: Option<u64>,
    /// 1 when the queue (any of the queues) is paused.
    paused: bool,
}

impl QueueGauges {
    fn add(&mut self, q: &QueueSnapshot) {
        for (state, count) in &q.counts {
            *self.counts.entry(*state).or_default() += count;
        }
        self.ready += q.ready;
        self.running += q.running;
        self.claimed += q.claimed;
        self.lag_ms = self.lag_ms.max(q.oldest_ready_age_ms);
        self.paused |= q.paused;
    }
}

/// Renders the queue gauges of `snapshot` (`drover_jobs{queue,state}`,
/// `drover_queue_lag_seconds{queue}`, `drover_jobs_running{queue}` (handler started),
/// `drover_jobs_claimed{queue}` (claimed ahead, waiting for a slot; with the running ones they
/// make `drover_jobs{state="running"}`), `drover_queue_paused{queue}`,
/// `drover_jobs_ready{queue}`) and, when given, the process counters, as OpenMetrics text.
/// Queues outside `labelled` are summed under `queue="(other)"` (their largest lag; paused
/// when any is).
pub fn render(
    snapshot: &Snapshot,
    labelled: &BTreeSet<QueueName>,
    process: Option<&ProcessMetrics>,
) -> String {
    let mut by_label: BTreeMap<&str, QueueGauges> = BTreeMap::new();
    for q in &snapshot.queues {
        let label = if labelled.contains(&q.queue) {
            q.queue.as_str()
        } else {
            OTHER_LABEL
        };
        by_label.entry(label).or_default().add(q);
    }
    let mut registry = Registry::default();
    let jobs = SortedFamily::<QueueStateLabels, Gauge>::default();
    let lag = SortedFamily::<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let running = SortedFamily::<QueueLabels, Gauge>::default();
    let claimed = SortedFamily::<QueueLabels, Gauge>::default();
    let ready = SortedFamily::<QueueLabels, Gauge>::default();
    let paused = SortedFamily::<QueueLabels, Gauge>::default();
    let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for (queue, q) in &by_label {
        for state in JobState::ALL {
            let labels = QueueStateLabels {
                queue: (*queue).to_owned(),
                state: state.as_str().to_owned(),
            };
            let count = q.counts.get(&state).copied().unwrap_or(0);
            jobs.with(&labels, |g| g.set(gauge(count)));
        }
        let labels = QueueLabels {
            queue: (*queue).to_owned(),
        };
        lag.with(&labels, |g| {
            g.set(q.lag_ms.map_or(0.0, |ms| ms as f64 / 1000.0))
        });
        running.with(&labels, |g| g.set(gauge(q.running)));
        claimed.with(&labels, |g| g.set(gauge(q.claimed)));
        ready.with(&labels, |g| g.set(gauge(q.ready)));
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
    if let Some(vacuum) = &snapshot.vacuum {
        register_vacuum(&mut registry, vacuum);
    }
    if let Some(process) = process {
        process.register(&mut registry);
    }
    let mut out = String::new();
    // Encoding into a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}

/// The vacuum gauges (stores with vacuum only): what keeps the database from cleaning the
/// jobs table, for an alert when claims slow down for that reason.
fn register_vacuum(registry: &mut Registry, vacuum: &VacuumStatus) {
    let gauge = |value: u64| {
        let gauge = Gauge::<i64>::default();
        gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        gauge
    };
    let age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    age.set(
        vacuum
            .oldest_transaction_age_ms
            .map_or(0.0, |ms| ms as f64 / 1000.0),
    );
    registry.register(
        "drover_oldest_transaction_age_seconds",
        "Age of the database's open transaction that holds back vacuum of the jobs table the most (0 when none is open)",
        age,
    );
    registry.register(
        "drover_replication_slot_xmin_age_transactions",
        "Transactions behind the oldest horizon a replication slot holds (0 when none)",
        gauge(vacuum.replication_slot_xmin_age.unwrap_or(0)),
    );
    registry.register(
        "drover_jobs_dead_rows_estimate",
        "Estimated dead row versions in the jobs table, which claims step over until vacuum removes them",
        gauge(vacuum.jobs_dead_rows),
    );
    registry.register(
        "drover_jobs_live_rows_estimate",
        "Estimated live rows in the jobs table",
        gauge(vacuum.jobs_live_rows),
    );
    if let Some(at) = vacuum.jobs_last_vacuum_at {
        let seconds = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        seconds.set(at.timestamp_micros() as f64 / 1e6);
        registry.register(
            "drover_jobs_last_vacuum_timestamp_seconds",
            "When the jobs table was last vacuumed (Unix time; absent when never)",
            seconds,
        );
    }
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
            ready_at_least: false,
            running: 0,
            claimed: 0,
            oldest_ready_age_ms: None,
        }
    }

    fn kind(name: &str) -> JobKind {
        JobKind::parse(name).unwrap()
    }

    fn queues(names: &[&str]) -> BTreeSet<QueueName> {
        names
            .iter()
            .map(|n| QueueName::parse(*n).unwrap())
            .collect()
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
            vacuum: None,
        };
        let kinds = ["email.send", "a.kind", "report.build", "exec", "b", "noop"];
        let labelled = queues(&names);
        let process = ProcessMetrics::new(kinds.map(kind));
        for kind in kinds {
            for outcome in ["succeeded", "retried", "failed", "cancelled"] {
                process.record_outcome(kind, outcome, 0.01);
            }
            process.record_enqueued(kind);
            process.record_started(kind);
            process.record_rescued(kind);
        }
        let first = render(&snapshot, &labelled, Some(&process));
        for _ in 0..20 {
            assert_eq!(render(&snapshot, &labelled, Some(&process)), first);
        }
        // Another process (new maps, new hash seeds) with the same counts renders the same.
        let other = ProcessMetrics::new(kinds.map(kind).into_iter().rev());
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
        assert_eq!(render(&reversed, &labelled, Some(&other)), first);

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
                ready_at_least: false,
                running: 1,
                claimed: 2,
                oldest_ready_age_ms: Some(1500),
            }],
            vacuum: None,
        };
        let process = ProcessMetrics::new([kind("email.send")]);
        process.record_outcome("email.send", "succeeded", 0.01);
        process.record_outcome("email.send", "waiting", 0.01);
        process.record_child_failed("email.send");
        process.record_child_failed("email.send");
        process.record_rollback("email.send");
        process.record_queue_wait("email.send", 0.003);
        process.record_queue_wait("other.kind", 2.5);
        let text = render(&snapshot, &queues(&["mail"]), Some(&process));
        assert!(
            text.contains(r#"drover_job_queue_wait_seconds_count{kind="email.send"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"drover_job_queue_wait_seconds_bucket{le="0.004",kind="email.send"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"drover_job_queue_wait_seconds_sum{kind="(other)"} 2.5"#),
            "{text}"
        );
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
        assert!(
            text.contains(r#"drover_job_outcomes_total{kind="email.send",outcome="waiting"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"drover_child_failures_total{kind="email.send"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"drover_rollbacks_total{kind="email.send"} 1"#),
            "{text}"
        );
        assert!(
            !text.contains("drover_jobs_dead_rows_estimate"),
            "no vacuum, no gauges"
        );
    }

    #[test]
    fn renders_the_vacuum_gauges_of_a_store_with_vacuum() {
        let snapshot = Snapshot {
            taken_at: chrono::Utc::now(),
            queues: Vec::new(),
            vacuum: Some(VacuumStatus {
                oldest_transaction_age_ms: Some(312_500),
                oldest_transaction_pid: Some(4242),
                replication_slot: Some("standby_1".to_owned()),
                replication_slot_xmin_age: Some(1_000_000),
                jobs_dead_rows: 750_000,
                jobs_live_rows: 250_000,
                jobs_last_vacuum_at: Some(
                    chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
                ),
            }),
        };
        let text = render(&snapshot, &BTreeSet::new(), None);
        for line in [
            "drover_oldest_transaction_age_seconds 312.5",
            "drover_replication_slot_xmin_age_transactions 1000000",
            "drover_jobs_dead_rows_estimate 750000",
            "drover_jobs_live_rows_estimate 250000",
            "drover_jobs_last_vacuum_timestamp_seconds 1800000000.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(
            !text.contains("4242") && !text.contains("standby_1"),
            "no pid or slot label"
        );
        let none_open = Snapshot {
            vacuum: Some(VacuumStatus::default()),
            ..snapshot
        };
        let text = render(&none_open, &BTreeSet::new(), None);
        assert!(
            text.contains("drover_oldest_transaction_age_seconds 0.0"),
            "{text}"
        );
        assert!(
            !text.contains("drover_jobs_last_vacuum_timestamp_seconds"),
            "{text}"
        );
    }

    /// docs/monitoring.md is the metrics reference: every family the text can hold (the queue
    /// gauges, the vacuum gauges, the process counters and histograms) has its row there.
    #[test]
    fn every_metric_family_is_in_the_monitoring_guide() {
        let snapshot = Snapshot {
            taken_at: chrono::Utc::now(),
            queues: vec![queue_snapshot("default", 1)],
            vacuum: Some(VacuumStatus {
                jobs_last_vacuum_at: Some(chrono::Utc::now()),
                ..VacuumStatus::default()
            }),
        };
        let process = ProcessMetrics::new([kind("email.send")]);
        let text = render(&snapshot, &queues(&["default"]), Some(&process));
        let guide = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/monitoring.md"),
        )
        .expect("docs/monitoring.md");
        let families: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.split_once(' '))
            .collect();
        assert!(families.len() >= 19, "{text}");
        for (family, kind) in families {
            let exposed = if kind == "counter" {
                format!("{family}_total")
            } else {
                family.to_owned()
            };
            assert!(
                guide.contains(&format!("`{exposed}`")) || guide.contains(&format!("`{exposed}{{")),
                "docs/monitoring.md has no row for the {kind} `{exposed}`"
            );
        }
    }

    /// A producer that enqueues to thousands of queues and kinds of its own making adds no
    /// series: those queues are summed under `queue="(other)"` and those kinds counted under
    /// `kind="(other)"`; queues a worker serves, paused queues and `default` keep their own.
    #[test]
    fn queues_and_kinds_from_callers_fold_into_one_label_value() {
        let mut snapshot = Snapshot {
            taken_at: chrono::Utc::now(),
            queues: (0..5_000)
                .map(|i| queue_snapshot(&format!("tenant-queue-{i}"), 2))
                .collect(),
            vacuum: None,
        };
        snapshot.queues.push(queue_snapshot("mail", 3));
        snapshot.queues.push(queue_snapshot("default", 1));
        let mut held = queue_snapshot("held", 4);
        held.paused = true;
        snapshot.queues.push(held);
        snapshot.queues[7].oldest_ready_age_ms = Some(9_000);
        snapshot.queues[7].running = 5;
        let worker = WorkerInfo {
            id: drover_core::WorkerId::parse("w").unwrap(),
            host: "h".to_owned(),
            pid: 1,
            queues: queues(&["mail", "reports"]).into_iter().collect(),
            started_at: chrono::Utc::now(),
            last_heartbeat_at: chrono::Utc::now(),
        };
        let labelled = labelled_queues(&snapshot, &[worker]);
        assert_eq!(labelled, queues(&["default", "held", "mail", "reports"]));

        let process = ProcessMetrics::new([kind("noop"), kind("email.send")]);
        for i in 0..5_000 {
            process.record_enqueued(&format!("tenant.kind-{i}"));
            process.record_rescued(&format!("tenant.kind-{i}"));
        }
        process.record_enqueued("noop");
        process.record_outcome("tenant.kind-1", "failed", 0.5);
        let text = render(&snapshot, &labelled, Some(&process));
        assert_eq!(
            series_of(&text, "drover_jobs_ready"),
            [
                r#"queue="(other)""#,
                r#"queue="default""#,
                r#"queue="held""#,
                r#"queue="mail""#
            ],
            "{text}"
        );
        assert!(
            text.contains(r#"drover_jobs{queue="(other)",state="queued"} 10000"#),
            "{text}"
        );
        assert!(text.contains(r#"drover_jobs_running{queue="(other)"} 5"#));
        assert!(text.contains(r#"drover_queue_lag_seconds{queue="(other)"} 9.0"#));
        assert!(text.contains(r#"drover_queue_paused{queue="(other)"} 0"#));
        assert!(text.contains(r#"drover_queue_paused{queue="held"} 1"#));
        assert_eq!(
            series_of(&text, "drover_jobs_enqueued_total"),
            [r#"kind="(other)""#, r#"kind="noop""#],
            "{text}"
        );
        assert!(text.contains(r#"drover_jobs_enqueued_total{kind="(other)"} 5000"#));
        assert!(text.contains(r#"drover_jobs_rescued_total{kind="(other)"} 5000"#));
        assert!(text.contains(r#"drover_job_outcomes_total{kind="(other)",outcome="failed"} 1"#));
        assert!(!text.contains("tenant-queue") && !text.contains("tenant.kind"));
        // Bounded whatever the input: the 3 labelled queues with jobs and (other), per state.
        assert_eq!(
            series_of(&text, "drover_jobs").len(),
            4 * JobState::ALL.len()
        );
    }

    /// Even the values that may have series of their own are capped: of more than
    /// LABEL_VALUES_MAX served queues or registered kinds, the first in name order keep theirs.
    #[test]
    fn label_values_are_capped() {
        let names: Vec<String> = (0..LABEL_VALUES_MAX + 500)
            .map(|i| format!("q{i:05}"))
            .collect();
        let snapshot = Snapshot {
            taken_at: chrono::Utc::now(),
            queues: names.iter().map(|n| queue_snapshot(n, 1)).collect(),
            vacuum: None,
        };
        let worker = WorkerInfo {
            id: drover_core::WorkerId::parse("w").unwrap(),
            host: "h".to_owned(),
            pid: 1,
            queues: names.iter().map(|n| QueueName::parse(n).unwrap()).collect(),
            started_at: chrono::Utc::now(),
            last_heartbeat_at: chrono::Utc::now(),
        };
        let labelled = labelled_queues(&snapshot, &[worker]);
        assert_eq!(labelled.len(), LABEL_VALUES_MAX);
        assert_eq!(labelled.first().map(QueueName::as_str), Some("default"));
        let process = ProcessMetrics::new(names.iter().map(|n| kind(n)));
        for name in &names {
            process.record_started(name);
        }
        let text = render(&snapshot, &labelled, Some(&process));
        // The labelled queues with jobs (all but `default`) and (other).
        assert_eq!(
            series_of(&text, "drover_jobs_ready").len(),
            LABEL_VALUES_MAX
        );
        let started = series_of(&text, "drover_jobs_started_total");
        assert_eq!(started.len(), LABEL_VALUES_MAX + 1);
        assert_eq!(started[0], r#"kind="(other)""#);
        assert!(text.contains(r#"drover_jobs_started_total{kind="(other)"} 500"#));
        assert!(
            text.contains(r#"drover_jobs_ready{queue="(other)"} 501"#),
            "{text}"
        );
    }
}

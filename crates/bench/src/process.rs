//! End-to-end processing throughput (BENCHMARKS.md, "What is measured"): N no-op jobs are enqueued beforehand,
//! then W workers of S slots each are told to start; the figure is N / (time from that moment
//! until the last job is recorded succeeded).
//!
//! "Recorded" is exact: the runner reports [`Metrics::job_finished`] only after the completer's
//! `jobs_finish` call returned, so when the counts reach N every outcome is committed; the
//! store's own count (`queue_snapshot`) is checked afterwards and, should it still be short,
//! polled until it agrees (then its time is used).
//!
//! Workers run either in this process (memory store, or `--worker-mode in-process`) or as child
//! processes (this binary in `worker` mode, see `child.rs`), which report their counts on
//! stdout.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Error, JobKind, JobStore, QueueName, SucceededJobs};
use drover_runner::{
    CancellationToken, JobContext, JobOutcome, Metrics, MetricsFanOut, Outcome, PoolConfig,
    Registry, Worker, WorkerConfig,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, Notify};

use crate::options::{DATABASE_URL_ENV, KIND, QUEUE};
use crate::target::{done, wait_succeeded, PgTarget};

/// How often the store's count is polled when it lags the workers' reports.
const VERIFY_INTERVAL: Duration = Duration::from_millis(5);
/// How long a worker process may take to connect and say `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a worker process may take to stop after `stop`.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest a processing measurement of `n` jobs may take before it is abandoned: 2 min,
/// or 10 ms a job if that is longer.
pub fn deadline_for(n: usize) -> Duration {
    Duration::from_secs(120).max(Duration::from_millis(10).saturating_mul(n as u32))
}

/// Counts jobs recorded as succeeded; wakes waiters when the count changes and when it
/// reaches its target.
#[derive(Debug)]
pub struct SucceededCounter {
    count: AtomicU64,
    target: u64,
    /// Notified (one stored permit) when the count reaches the target.
    pub reached: Notify,
    /// Notified (one stored permit, so bursts coalesce) whenever the count grows.
    pub changed: Notify,
}

impl SucceededCounter {
    /// A counter that fires [`SucceededCounter::reached`] at `target` (`u64::MAX`: never).
    pub fn new(target: u64) -> Self {
        SucceededCounter {
            count: AtomicU64::new(0),
            target,
            reached: Notify::new(),
            changed: Notify::new(),
        }
    }

    /// Jobs counted so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }
}

impl Metrics for SucceededCounter {
    fn job_finished(&self, _: &JobKind, _: &QueueName, outcome: JobOutcome, _: Duration) {
        if outcome == JobOutcome::Succeeded {
            let count = self.count.fetch_add(1, Ordering::AcqRel) + 1;
            self.changed.notify_one();
            if count == self.target {
                self.reached.notify_one();
            }
        }
    }
}

/// A registry with the `noop` kind: a handler that succeeds at once.
///
/// # Errors
/// Never in practice (`KIND` is a valid name).
pub fn noop_registry() -> Result<Registry, Error> {
    let mut registry = Registry::new();
    registry.register_fn(JobKind::parse(KIND)?, |_ctx: JobContext| async {
        Outcome::success()
    });
    Ok(registry)
}

/// A worker with one pool of `slots` slots on the `bench` queue, default settings otherwise
/// (LISTEN/NOTIFY wake-ups, 1 s poll fallback, batched completer), reporting to `metrics`
/// (and to the OpenTelemetry export while it is on).
///
/// # Errors
/// `InvalidInput` from the worker configuration.
pub fn bench_worker(
    store: Arc<dyn JobStore>,
    registry: Registry,
    slots: usize,
    metrics: Arc<dyn Metrics>,
) -> Result<Worker, Error> {
    let config = WorkerConfig::with_pools(vec![PoolConfig::new(
        "bench",
        vec![QueueName::parse(QUEUE)?],
        slots,
    )]);
    let metrics: Arc<dyn Metrics> = match crate::TELEMETRY.get() {
        Some(telemetry) => Arc::new(MetricsFanOut(vec![
            metrics,
            telemetry.metrics([JobKind::parse(KIND)?], [QueueName::parse(QUEUE)?]),
        ])),
        None => metrics,
    };
    Ok(Worker::new(store, Arc::new(registry), config)?.metrics(metrics))
}

/// Runs `workers` workers of `slots` slots inside this process on `store`, which holds `n`
/// ready jobs; returns the time from their start until all `n` are recorded succeeded.
///
/// # Errors
/// `Fatal` when they do not finish within [`deadline_for`]; a worker's error.
pub async fn in_process(
    store: Arc<dyn JobStore>,
    n: usize,
    workers: usize,
    slots: usize,
    succeeded_jobs: SucceededJobs,
) -> Result<Duration, Error> {
    let counter = Arc::new(SucceededCounter::new(n as u64));
    let built = (0..workers)
        .map(|_| {
            bench_worker(
                Arc::clone(&store),
                noop_registry()?,
                slots,
                Arc::clone(&counter) as Arc<dyn Metrics>,
            )
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let runs: Vec<_> = built
        .into_iter()
        .map(|worker| tokio::spawn(worker.run(shutdown.clone())))
        .collect();
    let waited = tokio::time::timeout(deadline_for(n), counter.reached.notified()).await;
    let mut finished = Instant::now();
    let outcome = match waited {
        Ok(()) => {
            if done(store.as_ref(), n as u64, succeeded_jobs).await? < n as u64 {
                finished = wait_succeeded(
                    store.as_ref(),
                    n as u64,
                    succeeded_jobs,
                    VERIFY_INTERVAL,
                    Duration::from_secs(60),
                )
                .await?;
            }
            Ok(finished.duration_since(started))
        }
        Err(_) => Err(Error::fatal(format!(
            "only {} of {n} jobs succeeded within {} s",
            counter.count(),
            deadline_for(n).as_secs()
        ))),
    };
    shutdown.cancel();
    for run in runs {
        run.await
            .map_err(|error| Error::fatal(format!("a worker task failed: {error}")))??;
    }
    outcome
}

/// How a multi-process run went, measured from the start signal: its total time and when the
/// parent heard of the first recorded job, of a tenth and of nine tenths of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Processed {
    /// Start signal -> last job recorded succeeded (the figure of the run).
    pub took: Duration,
    /// Start signal -> the first job recorded: the workers' start-up (connections, first
    /// statements) plus one claim and one finish.
    pub first_job: Option<Duration>,
    /// Start signal -> a tenth of the jobs recorded.
    pub tenth: Option<Duration>,
    /// Start signal -> nine tenths of the jobs recorded.
    pub nine_tenths: Option<Duration>,
}

impl Processed {
    /// A run whose milestones were not watched.
    pub fn total(took: Duration) -> Processed {
        Processed {
            took,
            first_job: None,
            tenth: None,
            nine_tenths: None,
        }
    }

    /// Jobs per second between a tenth and nine tenths of the `n` jobs recorded: the rate
    /// once every worker runs, without the start-up and the last jobs' drain. `None` when
    /// either milestone is missing or both were heard at once.
    pub fn middle_per_s(&self, n: usize) -> Option<f64> {
        let span = self.nine_tenths?.checked_sub(self.tenth?)?.as_secs_f64();
        let jobs = milestone(n, 9) - milestone(n, 1);
        (span > 0.0).then(|| jobs as f64 / span)
    }
}

/// The job count of `tenths` tenths of `n` (rounded up, at least 1).
fn milestone(n: usize, tenths: usize) -> u64 {
    ((n * tenths).div_ceil(10)).max(1) as u64
}

/// A line from a worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ChildLine {
    /// Connected and waiting for `start`.
    Ready,
    /// Jobs it has recorded as succeeded so far.
    Succeeded(u64),
    /// Anything else (its final report), passed to the log.
    Other(String),
    /// Its stdout closed: it exited.
    Closed,
}

impl ChildLine {
    fn parse(line: &str) -> ChildLine {
        let line = line.trim();
        if line == "ready" {
            return ChildLine::Ready;
        }
        match line.strip_prefix("succeeded ").map(str::parse) {
            Some(Ok(count)) => ChildLine::Succeeded(count),
            _ => ChildLine::Other(line.to_owned()),
        }
    }
}

/// One spawned worker process.
struct WorkerProcess {
    child: Child,
    stdin: ChildStdin,
}

impl WorkerProcess {
    async fn say(&mut self, word: &str) -> Result<(), Error> {
        let io = |error: std::io::Error| Error::Fatal {
            message: "could not write to a worker process".to_owned(),
            source: Some(Box::new(error)),
        };
        self.stdin
            .write_all(format!("{word}\n").as_bytes())
            .await
            .map_err(io)?;
        self.stdin.flush().await.map_err(io)
    }
}

/// Runs `workers` worker processes of `slots` slots on the PostgreSQL `target`, whose database
/// holds `n` ready jobs; `store` is used only to check the final count. Returns the time from
/// telling them to start until all `n` are recorded succeeded.
///
/// # Errors
/// `Fatal` when a process cannot be started, exits early, or they do not finish within
/// [`deadline_for`].
pub async fn processes(
    target: &PgTarget,
    store: &dyn JobStore,
    n: usize,
    workers: usize,
    slots: usize,
) -> Result<Processed, Error> {
    let exe = std::env::current_exe().map_err(|error| Error::Fatal {
        message: "cannot find the drover-bench executable to spawn workers".to_owned(),
        source: Some(Box::new(error)),
    })?;
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, ChildLine)>();
    let mut children = Vec::with_capacity(workers);
    for index in 0..workers {
        let mut child = Command::new(&exe)
            .arg("worker")
            .arg("--slots")
            .arg(slots.to_string())
            .args(
                (target.succeeded_jobs() == SucceededJobs::Delete).then_some("--delete-succeeded"),
            )
            .env(DATABASE_URL_ENV, target.url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| Error::Fatal {
                message: "could not spawn a worker process".to_owned(),
                source: Some(Box::new(error)),
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Error::fatal("a worker process has no stdin or stdout pipe"));
        };
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send((index, ChildLine::parse(&line))).is_err() {
                    return;
                }
            }
            let _ = tx.send((index, ChildLine::Closed));
        });
        children.push(WorkerProcess { child, stdin });
    }
    drop(tx);

    let result = drive(&mut children, &mut rx, store, n, target.succeeded_jobs()).await;
    for child in &mut children {
        // A child that already exited cannot be told anything; it is reaped below.
        let _ = child.say("stop").await;
    }
    for (index, child) in children.iter_mut().enumerate() {
        match tokio::time::timeout(STOP_TIMEOUT, child.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => tracing::warn!(index, %status, "worker process exited with failure"),
            Ok(Err(error)) => tracing::warn!(index, %error, "could not wait for a worker process"),
            Err(_) => {
                tracing::warn!(index, "worker process did not stop; killing it");
                let _ = child.child.kill().await;
            }
        }
    }
    while let Ok((index, line)) = rx.try_recv() {
        if let ChildLine::Other(text) = line {
            tracing::debug!(index, %text, "worker process said");
        }
    }
    result
}

/// Waits for every child's `ready`, starts them, and waits until their counts reach `n`.
async fn drive(
    children: &mut [WorkerProcess],
    rx: &mut mpsc::UnboundedReceiver<(usize, ChildLine)>,
    store: &dyn JobStore,
    n: usize,
    succeeded_jobs: SucceededJobs,
) -> Result<Processed, Error> {
    let mut ready = 0;
    while ready < children.len() {
        match tokio::time::timeout(READY_TIMEOUT, rx.recv()).await {
            Ok(Some((_, ChildLine::Ready))) => ready += 1,
            Ok(Some((index, ChildLine::Closed))) => {
                return Err(Error::fatal(format!(
                    "worker process {index} exited before it was ready (see its stderr above)"
                )))
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                return Err(Error::fatal(format!(
                    "worker processes not ready within {} s",
                    READY_TIMEOUT.as_secs()
                )))
            }
        }
    }
    let started = Instant::now();
    for child in children.iter_mut() {
        child.say("start").await?;
    }
    let deadline = started + deadline_for(n);
    let mut counts = vec![0u64; children.len()];
    let (mut first_job, mut tenth, mut nine_tenths) = (None, None, None);
    while counts.iter().sum::<u64>() < n as u64 {
        match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
            Ok(Some((index, ChildLine::Succeeded(count)))) => {
                counts[index] = count;
                let sum = counts.iter().sum::<u64>();
                for (seen, at) in [
                    (&mut first_job, 1),
                    (&mut tenth, milestone(n, 1)),
                    (&mut nine_tenths, milestone(n, 9)),
                ] {
                    if seen.is_none() && sum >= at {
                        *seen = Some(started.elapsed());
                    }
                }
            }
            Ok(Some((index, ChildLine::Closed))) => {
                return Err(Error::fatal(format!(
                    "worker process {index} exited during the run (see its stderr above)"
                )))
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                return Err(Error::fatal(format!(
                    "only {} of {n} jobs succeeded within {} s",
                    counts.iter().sum::<u64>(),
                    deadline_for(n).as_secs()
                )))
            }
        }
    }
    let mut finished = Instant::now();
    if done(store, n as u64, succeeded_jobs).await? < n as u64 {
        finished = wait_succeeded(
            store,
            n as u64,
            succeeded_jobs,
            VERIFY_INTERVAL,
            Duration::from_secs(60),
        )
        .await?;
    }
    Ok(Processed {
        took: finished.duration_since(started),
        first_job,
        tenth,
        nine_tenths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enqueue::batches;
    use crate::target::memory_store;

    #[test]
    fn child_lines_parse() {
        assert_eq!(ChildLine::parse("ready\n"), ChildLine::Ready);
        assert_eq!(ChildLine::parse("succeeded 42"), ChildLine::Succeeded(42));
        assert_eq!(
            ChildLine::parse("succeeded x"),
            ChildLine::Other("succeeded x".to_owned())
        );
    }

    #[test]
    fn the_middle_rate_counts_the_jobs_between_a_tenth_and_nine_tenths() {
        let ms = Duration::from_millis;
        let run = Processed {
            took: ms(1_000),
            first_job: Some(ms(10)),
            tenth: Some(ms(100)),
            nine_tenths: Some(ms(500)),
        };
        // 1,000 jobs: 900 - 100 = 800 recorded in 0.4 s.
        assert_eq!(run.middle_per_s(1_000), Some(2_000.0));
        let at_once = Processed {
            nine_tenths: Some(ms(100)),
            ..run
        };
        assert_eq!(at_once.middle_per_s(1_000), None);
        assert_eq!(Processed::total(ms(1_000)).middle_per_s(1_000), None);
        // Rounded up, never 0: a milestone is a count the parent can reach.
        assert_eq!((milestone(15, 1), milestone(15, 9)), (2, 14));
        assert_eq!(milestone(1, 1), 1);
    }

    #[test]
    fn deadlines_grow_with_the_job_count() {
        assert_eq!(deadline_for(100), Duration::from_secs(120));
        assert_eq!(deadline_for(50_000), Duration::from_secs(500));
    }

    #[tokio::test]
    async fn counter_fires_at_its_target_only_for_successes() {
        let counter = SucceededCounter::new(2);
        let kind = JobKind::parse("noop").unwrap();
        let queue = QueueName::default_queue();
        counter.job_finished(&kind, &queue, JobOutcome::Retried, Duration::ZERO);
        counter.job_finished(&kind, &queue, JobOutcome::Succeeded, Duration::ZERO);
        counter.job_finished(&kind, &queue, JobOutcome::Succeeded, Duration::ZERO);
        assert_eq!(counter.count(), 2);
        tokio::time::timeout(Duration::from_secs(5), counter.reached.notified())
            .await
            .expect("the stored permit wakes a late waiter");
    }

    #[tokio::test]
    async fn in_process_workers_finish_every_job_on_the_memory_store() {
        let store = memory_store();
        batches(store.as_ref(), 500, 100, false).await.unwrap();
        let elapsed = in_process(Arc::clone(&store), 500, 2, 8, SucceededJobs::Keep)
            .await
            .unwrap();
        assert!(elapsed > Duration::ZERO);
        assert_eq!(crate::target::succeeded(store.as_ref()).await.unwrap(), 500);
    }

    #[tokio::test]
    async fn in_process_workers_finish_every_job_on_a_store_that_deletes_them() {
        let store = crate::target::memory_store_with(SucceededJobs::Delete);
        batches(store.as_ref(), 500, 100, false).await.unwrap();
        in_process(Arc::clone(&store), 500, 2, 8, SucceededJobs::Delete)
            .await
            .unwrap();
        assert_eq!(crate::target::succeeded(store.as_ref()).await.unwrap(), 0);
        assert_eq!(
            done(store.as_ref(), 500, SucceededJobs::Delete)
                .await
                .unwrap(),
            500
        );
    }
}

//! Enqueue-to-start latency (BENCHMARKS.md, "What is measured"): with one worker started and idle (waiting on
//! its store's wake-up events, LISTEN/NOTIFY on PostgreSQL), jobs are enqueued one at a time at
//! a steady rate; each latency is the time from the enqueue call's start on the producer to the
//! handler's start, both read from `Instant` in this process (same clock). The peer scripts
//! measure the same interval (call start -> handler start).
//!
//! Before measuring, a few warm-up jobs run (not counted), which also proves the worker is up
//! and listening.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Error, JobKind, JobStore};
use drover_runner::{CancellationToken, JobContext, NoopMetrics, Outcome, Registry};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use crate::enqueue::bench_job;
use crate::options::KIND;
use crate::process::bench_worker;

/// Warm-up jobs run before measuring (numbered -1, -2, ...; not counted).
pub const WARMUP_JOBS: i64 = 3;
/// How long one job may take to start before the measurement is abandoned.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Measures `n` enqueue-to-start latencies, in milliseconds, in enqueue order. `worker_store`
/// and `producer` may be the same store or two handles on one database (separate pools, as an
/// application and a worker would have); one worker of `slots` slots runs the jobs; one job is
/// enqueued every `period` (a job whose enqueue overruns its period delays the next ones).
///
/// # Errors
/// An enqueue error; `Fatal` when a job does not start within [`START_TIMEOUT`] or the worker
/// fails.
pub async fn measure(
    worker_store: Arc<dyn JobStore>,
    producer: Arc<dyn JobStore>,
    n: usize,
    period: Duration,
    slots: usize,
) -> Result<Vec<f64>, Error> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(i64, Instant)>();
    let mut registry = Registry::new();
    registry.register_fn(JobKind::parse(KIND)?, move |ctx: JobContext| {
        let tx = tx.clone();
        async move {
            let started = Instant::now();
            let seq = ctx
                .job()
                .args
                .get("seq")
                .and_then(Value::as_i64)
                .unwrap_or(i64::MIN);
            // The receiver outlives the worker; a send error only means the run was abandoned.
            let _ = tx.send((seq, started));
            Outcome::success()
        }
    });
    let worker = bench_worker(worker_store, registry, slots, Arc::new(NoopMetrics))?;
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(worker.run(shutdown.clone()));

    let result = produce(producer.as_ref(), &mut rx, n, period).await;
    shutdown.cancel();
    run.await
        .map_err(|error| Error::fatal(format!("the worker task failed: {error}")))??;
    result
}

/// The warm-up and the measured jobs.
async fn produce(
    producer: &dyn JobStore,
    rx: &mut mpsc::UnboundedReceiver<(i64, Instant)>,
    n: usize,
    period: Duration,
) -> Result<Vec<f64>, Error> {
    for seq in 1..=WARMUP_JOBS {
        producer.job_enqueue(bench_job(-seq, false)?).await?;
        wait_for(rx, -seq).await?;
    }
    let mut sent = Vec::with_capacity(n);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker.tick().await;
    for seq in 0..n {
        ticker.tick().await;
        sent.push(Instant::now());
        producer.job_enqueue(bench_job(seq as i64, false)?).await?;
    }
    let mut started: HashMap<i64, Instant> = HashMap::with_capacity(n);
    while started.len() < n {
        match tokio::time::timeout(START_TIMEOUT, rx.recv()).await {
            Ok(Some((seq, at))) if (0..n as i64).contains(&seq) => {
                started.entry(seq).or_insert(at);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                return Err(Error::fatal(format!(
                    "only {} of {n} latency jobs started within {} s of the last enqueue",
                    started.len(),
                    START_TIMEOUT.as_secs()
                )))
            }
        }
    }
    Ok(sent
        .iter()
        .enumerate()
        .map(|(seq, at)| {
            started.get(&(seq as i64)).map_or(f64::NAN, |start| {
                start.saturating_duration_since(*at).as_secs_f64() * 1_000.0
            })
        })
        .collect())
}

/// Waits until job `seq` starts.
async fn wait_for(rx: &mut mpsc::UnboundedReceiver<(i64, Instant)>, seq: i64) -> Result<(), Error> {
    loop {
        match tokio::time::timeout(START_TIMEOUT, rx.recv()).await {
            Ok(Some((got, _))) if got == seq => return Ok(()),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                return Err(Error::fatal(format!(
                    "warm-up job {seq} did not start within {} s: is the worker running?",
                    START_TIMEOUT.as_secs()
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::memory_store;

    #[tokio::test]
    async fn latencies_come_back_for_every_job_on_the_memory_store() {
        let store = memory_store();
        let latencies = measure(
            Arc::clone(&store),
            Arc::clone(&store),
            20,
            Duration::from_millis(2),
            4,
        )
        .await
        .unwrap();
        assert_eq!(latencies.len(), 20);
        assert!(
            latencies.iter().all(|ms| ms.is_finite() && *ms >= 0.0),
            "{latencies:?}"
        );
    }
}

//! Measures end-to-end processing throughput of no-op jobs on the memory store: enqueues N
//! jobs up front, runs one worker until all succeeded, prints jobs per second. Not a test: no
//! assertion on time (docs/design.md section 8).
//!
//! `cargo run --release -p drover-runner --example noop_throughput -- [jobs] [slots] [store-only]`
//!
//! With `store-only` as third argument it measures the store alone instead (claim a batch of
//! `slots`, finish it, repeat): the upper bound the runner can reach on this store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{JobKind, JobStore, NewJob, QueueName, Quotas, StoreConfig};
use drover_runner::{JobOutcome, Metrics, Outcome, PoolConfig, Registry, Worker, WorkerConfig};
use drover_store_memory::MemoryStore;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

struct Finished {
    count: AtomicUsize,
    target: usize,
    done: Notify,
}

impl Metrics for Finished {
    fn job_finished(&self, _: &JobKind, _: &QueueName, outcome: JobOutcome, _: Duration) {
        if outcome == JobOutcome::Succeeded
            && self.count.fetch_add(1, Ordering::Relaxed) + 1 == self.target
        {
            self.done.notify_one();
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), drover_core::Error> {
    let mut args = std::env::args().skip(1);
    let jobs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(500_000);
    let slots: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let store_only = args.next().as_deref() == Some("store-only");
    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new(StoreConfig {
        quotas: Quotas::unbounded(),
        ..StoreConfig::default()
    }));
    let kind = JobKind::parse("noop")?;
    let started = Instant::now();
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(10_000) {
        let batch = chunk
            .iter()
            .map(|_| NewJob::new(kind.clone(), serde_json::Value::Null))
            .collect();
        store.jobs_enqueue(batch).await?;
    }
    let enqueue = started.elapsed();
    println!(
        "enqueued {jobs} jobs in {:.2} s ({:.0} jobs/s, batches of 10,000)",
        enqueue.as_secs_f64(),
        jobs as f64 / enqueue.as_secs_f64()
    );

    if store_only {
        let started = Instant::now();
        let worker = drover_core::WorkerId::parse("bench")?;
        let mut done = 0;
        while done < jobs {
            let claimed = store
                .jobs_claim(drover_core::ClaimJobs {
                    worker: worker.clone(),
                    queues: vec![QueueName::default_queue()],
                    kinds: vec![JobKind::parse("noop")?],
                    limit: slots as u32,
                    start: slots as u32,
                    lease: Duration::from_secs(60),
                })
                .await?
                .jobs;
            let items = claimed
                .iter()
                .map(|job| drover_core::FinishItem {
                    parent: None,
                    started: None,
                    id: job.id,
                    token: job.fencing_token,
                    finish: drover_core::Finish::Succeeded { result: None },
                })
                .collect();
            done += claimed.len();
            store.jobs_finish(items).await?;
        }
        let elapsed = started.elapsed();
        println!(
            "store only: {:.0} claim+finish per second",
            jobs as f64 / elapsed.as_secs_f64()
        );
        return Ok(());
    }
    let mut registry = Registry::new();
    registry.register_fn(kind, |_ctx| async { Outcome::success() });
    let config = WorkerConfig::with_pools(vec![PoolConfig::new(
        "bench",
        vec![QueueName::default_queue()],
        slots,
    )]);
    let finished = Arc::new(Finished {
        count: AtomicUsize::new(0),
        target: jobs,
        done: Notify::new(),
    });
    let worker = Worker::new(Arc::clone(&store), Arc::new(registry), config)?
        .metrics(Arc::clone(&finished) as Arc<dyn Metrics>);
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let run = tokio::spawn(worker.run(shutdown.clone()));
    finished.done.notified().await;
    let elapsed = started.elapsed();
    shutdown.cancel();
    let report = run
        .await
        .map_err(|e| drover_core::Error::fatal(e.to_string()))??;
    println!(
        "processed {} no-op jobs with {slots} slots in {:.2} s: {:.0} jobs/s",
        report.succeeded,
        elapsed.as_secs_f64(),
        jobs as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

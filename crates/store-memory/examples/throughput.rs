//! Rough throughput of the memory store alone (no runner): enqueue in batches, then claim and
//! complete in batches, from several tokio tasks. A measurement aid, not a test:
//! `cargo run --release -p drover-store-memory --example throughput [jobs] [batch] [tasks]`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{
    ClaimJobs, Finish, FinishItem, JobKind, JobStore, NewJob, QueueName, Quotas, StoreConfig,
    WorkerId,
};
use drover_store_memory::MemoryStore;

#[tokio::main]
async fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let jobs = args.next().unwrap_or(1_000_000);
    let batch = args.next().unwrap_or(1_000);
    let tasks = args.next().unwrap_or(4);
    let config = StoreConfig {
        quotas: Quotas::unbounded(),
        ..StoreConfig::default()
    };
    let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new(config));
    let kind = JobKind::parse("noop").expect("valid kind");

    let started = Instant::now();
    for chunk in 0..jobs.div_ceil(batch) {
        let n = batch.min(jobs - chunk * batch);
        let new: Vec<NewJob> = (0..n)
            .map(|i| NewJob::new(kind.clone(), serde_json::json!({"i": i})))
            .collect();
        store.jobs_enqueue(new).await.expect("enqueue");
    }
    let enqueue = started.elapsed();

    let started = Instant::now();
    let workers: Vec<_> = (0..tasks)
        .map(|t| {
            let store = store.clone();
            let kind = kind.clone();
            tokio::spawn(async move {
                let claim = ClaimJobs {
                    worker: WorkerId::parse(format!("w{t}")).expect("valid worker id"),
                    queues: vec![QueueName::default_queue()],
                    kinds: vec![kind],
                    limit: u32::try_from(batch).expect("batch fits u32"),
                    start: u32::try_from(batch).expect("batch fits u32"),
                    lease: Duration::from_secs(60),
                };
                let mut done = 0usize;
                loop {
                    let claimed = store.jobs_claim(claim.clone()).await.expect("claim").jobs;
                    if claimed.is_empty() {
                        return done;
                    }
                    done += claimed.len();
                    let items = claimed
                        .into_iter()
                        .map(|j| FinishItem {
                            parent: None,
                            started: None,
                            id: j.id,
                            token: j.fencing_token,
                            finish: Finish::Succeeded { result: None },
                        })
                        .collect();
                    store.jobs_finish(items).await.expect("finish");
                }
            })
        })
        .collect();
    let mut processed = 0;
    for w in workers {
        processed += w.await.expect("worker task");
    }
    let process = started.elapsed();
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "enqueue: {jobs} jobs in {enqueue:?} ({:.0}/s); claim+complete: {processed} jobs in {process:?} ({:.0}/s); batch {batch}, {tasks} tasks",
        rate(jobs, enqueue),
        rate(processed, process)
    );
}

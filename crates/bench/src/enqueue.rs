//! The enqueue workloads (issue #7, item 1a): one job per call from concurrent producers, and
//! batches from one producer (as the peers' bulk enqueue is measured). Jobs are no-op jobs of
//! kind `noop` in queue `bench` with args `{"seq": i}`, like the peers'.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Error, JobKind, JobStore, NewJob, QueueName};
use serde_json::json;
use tokio::sync::Barrier;

use crate::options::{KIND, QUEUE};

/// The benchmark job number `seq`.
///
/// # Errors
/// Never in practice: `KIND` and `QUEUE` are valid names.
pub fn bench_job(seq: i64) -> Result<NewJob, Error> {
    Ok(NewJob::new(JobKind::parse(KIND)?, json!({ "seq": seq }))
        .with_queue(QueueName::parse(QUEUE)?))
}

/// `n` jobs numbered from 0, built before any timing starts.
///
/// # Errors
/// As [`bench_job`].
pub fn bench_jobs(n: usize) -> Result<Vec<NewJob>, Error> {
    (0..n).map(|seq| bench_job(seq as i64)).collect()
}

/// Enqueues `n` jobs one per `job_enqueue` call from `producers` concurrent tasks (the first
/// `n % producers` take one job more); returns the time from the common start until the last
/// call returned. Jobs are built before the start.
///
/// # Errors
/// The first enqueue error.
pub async fn single(
    store: Arc<dyn JobStore>,
    n: usize,
    producers: usize,
) -> Result<Duration, Error> {
    let producers = producers.clamp(1, n.max(1));
    let mut jobs = bench_jobs(n)?.into_iter();
    let start = Arc::new(Barrier::new(producers + 1));
    let mut tasks = Vec::with_capacity(producers);
    for p in 0..producers {
        let share = n / producers + usize::from(p < n % producers);
        let mine: Vec<NewJob> = jobs.by_ref().take(share).collect();
        let store = Arc::clone(&store);
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for job in mine {
                store.job_enqueue(job).await?;
            }
            Ok::<(), Error>(())
        }));
    }
    start.wait().await;
    let started = Instant::now();
    for task in tasks {
        task.await
            .map_err(|error| Error::fatal(format!("a producer task failed: {error}")))??;
    }
    Ok(started.elapsed())
}

/// Enqueues `n` jobs in calls of `batch` jobs, one after another from one producer; returns
/// the total time of the calls. Jobs are built before timing starts.
///
/// # Errors
/// The first enqueue error.
pub async fn batches(store: &dyn JobStore, n: usize, batch: usize) -> Result<Duration, Error> {
    let batch = batch.max(1);
    let mut jobs = bench_jobs(n)?.into_iter();
    // Moved out chunk by chunk (splitting the front off the vector would copy the rest each
    // time: quadratic in `n`).
    let mut chunks = Vec::with_capacity(n.div_ceil(batch));
    loop {
        let chunk: Vec<NewJob> = jobs.by_ref().take(batch).collect();
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk);
    }
    let started = Instant::now();
    for chunk in chunks {
        store.jobs_enqueue(chunk).await?;
    }
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::memory_store;
    use drover_core::{JobState, ListJobs};

    async fn queued(store: &dyn JobStore) -> Vec<i64> {
        let mut seqs = Vec::new();
        let mut before = None;
        loop {
            let page = store
                .jobs_list(ListJobs {
                    state: Some(JobState::Queued),
                    before,
                    limit: 1_000,
                    ..ListJobs::default()
                })
                .await
                .unwrap();
            seqs.extend(
                page.jobs
                    .iter()
                    .map(|job| job.args["seq"].as_i64().unwrap()),
            );
            match page.next {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        seqs.sort_unstable();
        seqs
    }

    #[tokio::test]
    async fn single_enqueues_every_job_once_across_producers() {
        let store = memory_store();
        single(Arc::clone(&store), 101, 8).await.unwrap();
        assert_eq!(queued(store.as_ref()).await, (0..101).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn batches_enqueue_every_job_once_with_a_short_last_batch() {
        let store = memory_store();
        batches(store.as_ref(), 2_500, 1_000).await.unwrap();
        assert_eq!(queued(store.as_ref()).await, (0..2_500).collect::<Vec<_>>());
    }

    #[test]
    fn bench_jobs_go_to_the_bench_queue() {
        let job = bench_job(7).unwrap();
        assert_eq!(job.queue.as_str(), QUEUE);
        assert_eq!(job.kind.as_str(), KIND);
        assert_eq!(job.args, json!({"seq": 7}));
    }
}

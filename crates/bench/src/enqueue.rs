//! The enqueue workloads (BENCHMARKS.md, "What is measured"): one job per call from concurrent producers, and
//! batches from one producer (as the peers' bulk enqueue is measured). Jobs are no-op jobs of
//! kind `noop` in queue `bench` with args `{"seq": i}`, like the peers'.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Error, JobKind, JobStore, NewJob, QueueName};
use serde_json::json;
use tokio::sync::Barrier;

use crate::options::{KIND, QUEUE};

/// The benchmark job number `seq`; with `meta`, its meta is `{"customer": "c<seq mod 1,000>"}`.
///
/// # Errors
/// Never in practice: `KIND` and `QUEUE` are valid names.
pub fn bench_job(seq: i64, meta: bool) -> Result<NewJob, Error> {
    let mut job = NewJob::new(JobKind::parse(KIND)?, json!({ "seq": seq }))
        .with_queue(QueueName::parse(QUEUE)?);
    if meta {
        job.meta = json!({ "customer": format!("c{}", seq.rem_euclid(1_000)) });
    }
    Ok(job)
}

/// `n` jobs numbered from 0, built before any timing starts.
///
/// # Errors
/// As [`bench_job`].
pub fn bench_jobs(n: usize, meta: bool) -> Result<Vec<NewJob>, Error> {
    (0..n).map(|seq| bench_job(seq as i64, meta)).collect()
}

/// Enqueues `n` jobs one per `job_enqueue` call from `producers` concurrent tasks (the first
/// `n % producers` take one job more); returns the time from the first producer's start until
/// the last call returned. Jobs are built before the start.
///
/// # Errors
/// The first enqueue error.
pub async fn single(
    store: Arc<dyn JobStore>,
    n: usize,
    producers: usize,
    meta: bool,
) -> Result<Duration, Error> {
    concurrent_calls(bench_jobs(n, meta)?, producers, store).await
}

/// One call of the one-job-per-call workload: what [`concurrent_calls`] measures. Each producer
/// holds a clone; a call borrows it, so nothing is cloned per job.
trait EnqueueCall: Clone + Send + Sync + 'static {
    /// Enqueues `job`.
    fn call(&self, job: NewJob)
        -> impl std::future::Future<Output = Result<(), Error>> + Send + '_;
}

impl EnqueueCall for Arc<dyn JobStore> {
    async fn call(&self, job: NewJob) -> Result<(), Error> {
        self.job_enqueue(job).await.map(drop)
    }
}

/// [`single`]'s measurement with the call given: `n` jobs, one per `call`, from `producers`
/// tasks released together. Each producer reads the clock when it is released and after its
/// last call; the result runs from the earliest start to the latest end. (The releasing task
/// reading the clock after the release would miss the work producers did before it was
/// scheduled again: with a fast store, whole producers' shares.)
async fn concurrent_calls(
    jobs: Vec<NewJob>,
    producers: usize,
    call: impl EnqueueCall,
) -> Result<Duration, Error> {
    let n = jobs.len();
    let producers = producers.clamp(1, n.max(1));
    let mut jobs = jobs.into_iter();
    let start = Arc::new(Barrier::new(producers));
    let mut tasks = Vec::with_capacity(producers);
    for p in 0..producers {
        let share = n / producers + usize::from(p < n % producers);
        let mine: Vec<NewJob> = jobs.by_ref().take(share).collect();
        let call = call.clone();
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let started = Instant::now();
            for job in mine {
                call.call(job).await?;
            }
            Ok::<(Instant, Instant), Error>((started, Instant::now()))
        }));
    }
    let mut span: Option<(Instant, Instant)> = None;
    for task in tasks {
        let (started, finished) = task
            .await
            .map_err(|error| Error::fatal(format!("a producer task failed: {error}")))??;
        span = Some(match span {
            None => (started, finished),
            Some((first, last)) => (first.min(started), last.max(finished)),
        });
    }
    Ok(span.map_or(Duration::ZERO, |(first, last)| last.duration_since(first)))
}

/// Enqueues `n` jobs in calls of `batch` jobs, one after another from one producer; returns
/// the total time of the calls. Jobs are built before timing starts.
///
/// # Errors
/// The first enqueue error.
pub async fn batches(
    store: &dyn JobStore,
    n: usize,
    batch: usize,
    meta: bool,
) -> Result<Duration, Error> {
    let batch = batch.max(1);
    let mut jobs = bench_jobs(n, meta)?.into_iter();
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
        single(Arc::clone(&store), 101, 8, false).await.unwrap();
        assert_eq!(queued(store.as_ref()).await, (0..101).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn batches_enqueue_every_job_once_with_a_short_last_batch() {
        let store = memory_store();
        batches(store.as_ref(), 2_500, 1_000, false).await.unwrap();
        assert_eq!(queued(store.as_ref()).await, (0..2_500).collect::<Vec<_>>());
    }

    /// A call that takes its duration without yielding (a store that answers at once, like
    /// the memory store, never yields either).
    #[derive(Clone)]
    struct Busy(Duration);

    impl EnqueueCall for Busy {
        async fn call(&self, _job: NewJob) -> Result<(), Error> {
            let until = Instant::now() + self.0;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            Ok(())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn single_counts_the_work_producers_do_before_the_caller_runs_again() {
        // On one thread the producer released last runs all its calls before any other task:
        // all 40 calls run one after another, and the measurement must hold every one of
        // them (read by the releasing task, it held none of the first producer's).
        let per_call = Duration::from_millis(1);
        let took = concurrent_calls(bench_jobs(40, false).unwrap(), 2, Busy(per_call))
            .await
            .unwrap();
        assert!(
            took >= per_call * 40,
            "measured {took:?} for 40 calls of {per_call:?}"
        );
    }

    #[test]
    fn bench_jobs_go_to_the_bench_queue() {
        let job = bench_job(7, false).unwrap();
        assert_eq!(job.queue.as_str(), QUEUE);
        assert_eq!(job.kind.as_str(), KIND);
        assert_eq!(job.args, json!({"seq": 7}));
        assert_eq!(job.meta, json!({}));
    }

    #[test]
    fn bench_jobs_with_meta_name_one_of_a_thousand_customers() {
        let jobs = bench_jobs(1_002, true).unwrap();
        assert_eq!(jobs[7].meta, json!({"customer": "c7"}));
        assert_eq!(jobs[1_001].meta, json!({"customer": "c1"}));
    }
}

//! Workflow workloads (docs/design.md section 10), each on one in-process worker:
//!
//! | scenario | what runs | figures |
//! |---|---|---|
//! | `fan_out` | one parent enqueues N no-op children from its handler (batches of 1,000) into its paused queue, returns "wait for my children"; the bench resumes the queue once the parent waits, and the parent runs again when the last child ended | `process_per_s`: children per second, from the first child's claim to the last child's finish (every child stored before the first runs, as `process` enqueues its jobs beforehand); `resume_ms`: the last child's finish to the parent's second claim |
//! | `fan_out_streamed` | the same with the queue never paused: children run while their parent still enqueues the rest | the same figures; the children's inserts share the window |
//! | `chain` | a workflow of N no-op jobs, each depending on the one before | latency percentiles of one step: a job's finish to the next job's claim |
//!
//! Every instant is the store's (`attempted_at`, `finished_at`), read back after the run, so the
//! figures do not depend on when the bench happens to poll.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use drover_core::{
    Error, Job, JobDetails, JobId, JobKind, JobState, JobStore, ListJobs, NewJob, NewWorkflow,
    QueueName,
};
use drover_runner::{CancellationToken, JobContext, NoopMetrics, Outcome, Registry};
use drover_store_postgres::sqlx;
use serde_json::json;

use crate::options::{KIND, QUEUE};
use crate::process::bench_worker;

/// The kind of the fan-out's parent.
pub const PARENT_KIND: &str = "fan_out_parent";
/// Children per `enqueue_children` call.
const CHILDREN_PER_CALL: usize = 1_000;
/// How often the bench checks whether the workload ended.
const POLL: Duration = Duration::from_millis(5);

/// What a fan-out measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FanOut {
    /// Children per second, first child's claim to last child's finish.
    pub children_per_s: f64,
    /// Last child's finish to the parent's second claim, milliseconds.
    pub resume_ms: f64,
    /// The child whose finish was recorded last.
    pub last_child: JobId,
    /// The parent's second claim.
    pub resumed_at: DateTime<Utc>,
    /// Parent enqueued to parent succeeded, seconds.
    pub took: Duration,
}

/// Runs one fan-out of `n` children on one worker of `slots` slots; `streamed`: the children
/// run while their parent still enqueues the rest, else they are all stored first.
///
/// # Errors
/// A store error; `Fatal` when the parent does not succeed within `deadline` or the children
/// did not all succeed.
pub async fn fan_out(
    store: Arc<dyn JobStore>,
    n: usize,
    slots: usize,
    deadline: Duration,
    streamed: bool,
) -> Result<FanOut, Error> {
    let mut registry = Registry::new();
    registry.register_fn(JobKind::parse(KIND)?, |_ctx: JobContext| async {
        Outcome::success()
    });
    let pausing = (!streamed).then(|| Arc::clone(&store));
    registry.register_fn(JobKind::parse(PARENT_KIND)?, move |ctx: JobContext| {
        let pausing = pausing.clone();
        async move {
            match parent_run(&ctx, n, pausing.as_deref()).await {
                Ok(outcome) => outcome,
                Err(error) => Outcome::retry(format!("fan-out parent: {error}")),
            }
        }
    });
    let worker = bench_worker(Arc::clone(&store), registry, slots, Arc::new(NoopMetrics))?;
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(worker.run(shutdown.clone()));

    let started = Instant::now();
    let parent = NewJob::new(JobKind::parse(PARENT_KIND)?, json!({ "children": n }))
        .with_queue(QueueName::parse(QUEUE)?);
    let parent = store.job_enqueue(parent).await?.job.id;
    if !streamed {
        wait_until_waiting(store.as_ref(), parent, deadline).await?;
        store.queue_resume(QueueName::parse(QUEUE)?).await?;
    }
    let ended = wait_for(store.as_ref(), &[parent], deadline).await;
    let took = started.elapsed();
    shutdown.cancel();
    run.await
        .map_err(|error| Error::fatal(format!("the worker task failed: {error}")))??;
    let parent = ended?
        .pop()
        .ok_or_else(|| Error::fatal("the parent is gone"))?;
    if parent.state != JobState::Succeeded {
        return Err(Error::fatal(format!("the parent ended {}", parent.state)));
    }
    let children = children_of(store.as_ref(), parent.id).await?;
    if children.len() != n || children.iter().any(|c| c.state != JobState::Succeeded) {
        return Err(Error::fatal(format!(
            "{} of {n} children succeeded",
            children
                .iter()
                .filter(|c| c.state == JobState::Succeeded)
                .count()
        )));
    }
    let first_claim = children.iter().filter_map(|c| c.attempted_at).min();
    let last = children
        .iter()
        .filter_map(|c| Some((c.finished_at?, c.id)))
        .max();
    let (Some(first_claim), Some((last_finish, last_child)), Some(resumed)) =
        (first_claim, last, parent.attempted_at)
    else {
        return Err(Error::fatal(
            "children or parent without claim or finish times",
        ));
    };
    let busy = seconds_between(first_claim, last_finish).max(1e-6);
    Ok(FanOut {
        children_per_s: (n as f64 / busy).round(),
        resume_ms: seconds_between(last_finish, resumed) * 1_000.0,
        last_child,
        resumed_at: resumed,
        took,
    })
}

/// The parent's handler: enqueue the children on the first run (into its queue paused by
/// `pausing`, when given), succeed once they all ended (a run that finds some live, after a
/// crash before its wait was recorded, waits again).
async fn parent_run(
    ctx: &JobContext,
    n: usize,
    pausing: Option<&dyn JobStore>,
) -> Result<Outcome, Error> {
    if ctx.job().live_children > 0 {
        return Ok(Outcome::WaitForChildren);
    }
    if !ctx.children().await?.is_empty() {
        return Ok(Outcome::success());
    }
    let kind = JobKind::parse(KIND)?;
    let queue = QueueName::parse(QUEUE)?;
    if let Some(store) = pausing {
        store.queue_pause(queue.clone()).await?;
    }
    let mut seq = 0usize;
    while seq < n {
        let batch: Vec<NewJob> = (seq..n.min(seq + CHILDREN_PER_CALL))
            .map(|i| NewJob::new(kind.clone(), json!({ "seq": i })).with_queue(queue.clone()))
            .collect();
        seq += batch.len();
        ctx.enqueue_children(batch).await?;
    }
    Ok(Outcome::WaitForChildren)
}

/// Runs a chain of `n` jobs on one worker of `slots` slots; returns each step's latency (a
/// job's finish to the next job's claim), milliseconds.
///
/// # Errors
/// A store error; `Fatal` when the chain does not finish within `deadline`.
pub async fn chain(
    store: Arc<dyn JobStore>,
    n: usize,
    slots: usize,
    deadline: Duration,
) -> Result<Vec<f64>, Error> {
    let mut registry = Registry::new();
    registry.register_fn(JobKind::parse(KIND)?, |_ctx: JobContext| async {
        Outcome::success()
    });
    let worker = bench_worker(Arc::clone(&store), registry, slots, Arc::new(NoopMetrics))?;
    let kind = JobKind::parse(KIND)?;
    let queue = QueueName::parse(QUEUE)?;
    let mut graph = NewWorkflow::new();
    for i in 0..n {
        let job = NewJob::new(kind.clone(), json!({ "seq": i })).with_queue(queue.clone());
        let before = (i > 0).then(|| format!("step-{}", i - 1));
        let depends: Vec<&str> = before.iter().map(String::as_str).collect();
        graph = graph.job(format!("step-{i}"), job, &depends);
    }
    let enqueued = store.workflow_enqueue(graph).await?;
    let ids: Vec<JobId> = enqueued.jobs.iter().map(|e| e.job.id).collect();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(worker.run(shutdown.clone()));
    let last = ids
        .last()
        .copied()
        .ok_or_else(|| Error::fatal("empty chain"))?;
    let ended = wait_for(store.as_ref(), &[last], deadline).await;
    shutdown.cancel();
    run.await
        .map_err(|error| Error::fatal(format!("the worker task failed: {error}")))??;
    ended?;
    let mut jobs = Vec::with_capacity(n);
    for chunk in ids.chunks(1_000) {
        jobs.extend(store.jobs_get(chunk.to_vec()).await?);
    }
    if jobs.len() != n || jobs.iter().any(|j| j.state != JobState::Succeeded) {
        return Err(Error::fatal("not every step of the chain succeeded"));
    }
    Ok(jobs
        .windows(2)
        .filter_map(|pair| {
            let finished = pair[0].finished_at?;
            let claimed = pair[1].attempted_at?;
            Some(seconds_between(finished, claimed) * 1_000.0)
        })
        .collect())
}

/// Waits until `parent` waits for its children.
async fn wait_until_waiting(
    store: &dyn JobStore,
    parent: JobId,
    deadline: Duration,
) -> Result<(), Error> {
    let started = Instant::now();
    while store.job_get(parent).await?.state != JobState::Waiting {
        if started.elapsed() > deadline {
            return Err(Error::fatal(format!(
                "the parent did not wait for its children within {} s",
                deadline.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Waits until every job of `ids` is terminal; returns them.
async fn wait_for(
    store: &dyn JobStore,
    ids: &[JobId],
    deadline: Duration,
) -> Result<Vec<Job>, Error> {
    let started = Instant::now();
    loop {
        let jobs = store.jobs_get(ids.to_vec()).await?;
        if jobs.len() == ids.len() && jobs.iter().all(|j| j.state.is_terminal()) {
            return Ok(jobs);
        }
        if started.elapsed() > deadline {
            return Err(Error::fatal(format!(
                "the workflow did not finish within {} s",
                deadline.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Every child of `parent`, without their large fields.
async fn children_of(store: &dyn JobStore, parent: JobId) -> Result<Vec<Job>, Error> {
    let mut children = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .jobs_list(ListJobs {
                parent: Some(parent),
                before,
                limit: 1_000,
                details: JobDetails::NONE,
                ..ListJobs::default()
            })
            .await?;
        children.extend(page.jobs);
        match page.next {
            Some(next) => before = Some(next),
            None => return Ok(children),
        }
    }
}

/// PostgreSQL only: the commit instant of the transaction that wrote `job` last, when the
/// server tracks commit timestamps (`track_commit_timestamp = on`); `None` otherwise.
pub async fn committed_at(pool: &sqlx::PgPool, job: JobId) -> Option<DateTime<Utc>> {
    sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
        "SELECT pg_xact_commit_timestamp(xmin) FROM drover.jobs WHERE id = $1",
    )
    .bind(job.as_uuid())
    .fetch_one(pool)
    .await
    .ok()
    .flatten()
}

/// Milliseconds from `from` to `to`.
pub fn millis_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    seconds_between(from, to) * 1_000.0
}

fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(0) as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::memory_store;

    #[tokio::test]
    async fn a_fan_out_and_a_chain_complete_on_the_memory_store() {
        let fan = fan_out(memory_store(), 200, 8, Duration::from_secs(30), false)
            .await
            .unwrap();
        assert!(fan.children_per_s > 0.0 && fan.resume_ms >= 0.0, "{fan:?}");
        let steps = chain(memory_store(), 50, 8, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(steps.len(), 49);
        assert!(steps.iter().all(|ms| *ms >= 0.0), "{steps:?}");
    }
}

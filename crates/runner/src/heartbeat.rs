//! The heartbeat loop (docs/design.md sections 3 and 6): every interval, one `jobs_heartbeat` call
//! extends the leases of all running jobs of the process and saves their changed meta and
//! progress, and `worker_heartbeat` keeps the worker registered (re-registering after
//! `NotFound`). A `LeaseLost` reply cancels that handler at once and marks it so its outcome
//! is never written (for a run whose outcome is already with the completer, it only marks it:
//! the write, if still to come, is dropped and says so); `cancel_requested` fires the handler's token; a `Deferred` reply (the job
//! busy with another write) changes nothing and the next beat carries the same updates.
//!
//! It is also the store's health probe: when a claim, heartbeat or write failed transiently,
//! it beats again after a capped exponential backoff instead of the full interval, and the
//! first heartbeat that succeeds lets the claim loops claim again. A `step`, and the start of a
//! job claimed ahead, nudge an early heartbeat that carries only changed progress and starts
//! not yet recorded (at most one a second; a nudge within that second is delivered when it is
//! over), so the store learns within about a second that a job left the backlog.

use std::sync::Arc;

use drover_core::{Entity, Error, HeartbeatJobs, HeartbeatReply};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::health::{classify, ErrorClass, RetryDelay};
use crate::running::{CancelReason, JobShared, NUDGE_SPACING};
use crate::runtime::Runtime;

/// Most jobs in one `jobs_heartbeat` call.
const HEARTBEAT_CHUNK: usize = 1_000;

/// Beats until `stop` fires.
pub(crate) async fn run_heartbeat(rt: Arc<Runtime>, stop: CancellationToken) {
    let interval = rt.config.heartbeat_interval;
    let mut retry = RetryDelay::new(rt.config.store_retry_min, rt.config.store_retry_max);
    let mut next = Instant::now() + interval;
    // After a nudged heartbeat: when to look for a nudge held back meanwhile.
    let mut held_check: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(next) => {
                if beat(&rt).await {
                    rt.health.mark_healthy();
                    retry.reset();
                    next = Instant::now() + interval;
                } else {
                    next = Instant::now() + retry.next_delay().min(interval);
                }
            }
            () = rt.health.probe_requested() => {
                next = next.min(Instant::now() + retry.current().min(interval));
            }
            () = rt.nudge.notified() => {
                beat_changed(&rt).await;
                held_check = Some(Instant::now() + NUDGE_SPACING);
            }
            () = sleep_until_some(held_check) => {
                held_check = None;
                if rt.nudge.take_held() {
                    beat_changed(&rt).await;
                    held_check = Some(Instant::now() + NUDGE_SPACING);
                }
            }
        }
    }
}

/// Sleeps until `at`, or forever when it is `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A nudged heartbeat: the jobs with changed meta or progress, or a start to record.
async fn beat_changed(rt: &Runtime) {
    let changed = rt.running.with_updates();
    if !changed.is_empty() {
        beat_jobs(rt, &changed).await;
    }
}

/// One full heartbeat: every running job, then the worker. True when the store answered.
async fn beat(rt: &Runtime) -> bool {
    let jobs = rt.running.snapshot();
    // Side by side, so a slow worker heartbeat never holds back the leases.
    let (jobs_ok, worker_ok) = tokio::join!(beat_jobs(rt, &jobs), beat_worker(rt));
    jobs_ok && worker_ok
}

/// Awaits one heartbeat call for at most a heartbeat interval: a call that hangs (a half-open
/// connection, a stalled store) counts as failed, so the loop tries again after its retry
/// delay instead of letting every lease expire behind it.
async fn bounded<T>(
    rt: &Runtime,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let limit = rt.config.heartbeat_interval;
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(Error::unavailable(format!(
            "the store did not answer a heartbeat within {} ms",
            limit.as_millis()
        )))
    })
}

/// Heartbeats `jobs` in chunks; true when every call was answered.
pub(crate) async fn beat_jobs(rt: &Runtime, jobs: &[Arc<JobShared>]) -> bool {
    let mut all_ok = true;
    for chunk in jobs.chunks(HEARTBEAT_CHUNK) {
        let items: Vec<_> = chunk.iter().map(|job| job.heartbeat_item()).collect();
        let carried: Vec<(bool, bool)> = items
            .iter()
            .map(|item| (item.meta.is_some(), item.progress.is_some()))
            .collect();
        let call = HeartbeatJobs {
            lease: rt.config.lease,
            jobs: items,
        };
        let carried_starts: Vec<bool> = call.jobs.iter().map(|i| i.started.is_some()).collect();
        match bounded(rt, rt.store.jobs_heartbeat(call)).await {
            Ok(replies) => {
                // Replies come per item in input order; each concerns the run whose token
                // the item carried, not a later run of the same job.
                for (((job, carried), (meta, progress)), reply) in
                    chunk.iter().zip(carried_starts).zip(&carried).zip(replies)
                {
                    if reply.id() != job.job.id {
                        tracing::error!(job_id = %job.job.id, "store answered a heartbeat for another job; ignoring the answer");
                        continue;
                    }
                    match reply {
                        HeartbeatReply::Extended { .. } if carried => job.start_written(),
                        // Nothing was written: the next beat carries the same updates.
                        HeartbeatReply::Deferred { .. } => job.restore_updates(*meta, *progress),
                        _ => {}
                    }
                    handle_reply(rt, job, reply);
                }
            }
            Err(error) => {
                for (job, (meta, progress)) in chunk.iter().zip(carried) {
                    job.restore_updates(meta, progress);
                }
                all_ok &= failed(rt, error, "heartbeat of running jobs failed");
            }
        }
    }
    all_ok
}

fn handle_reply(rt: &Runtime, job: &Arc<JobShared>, reply: HeartbeatReply) {
    let id = job.job.id;
    match reply {
        HeartbeatReply::Extended {
            cancel_requested: true,
            ..
        } => {
            if !job.cancel.is_cancelled() {
                tracing::info!(job_id = %id, "cancel requested: firing the handler's cancellation token");
                rt.cancel_job(job, CancelReason::CancelRequested);
            }
        }
        HeartbeatReply::Extended { .. } => {}
        HeartbeatReply::Deferred { .. } => {
            tracing::debug!(job_id = %id, "heartbeat deferred: the job is busy with another write");
        }
        HeartbeatReply::LeaseLost { .. } if job.is_handed_over() => {
            // The handler is done and its outcome is with the completer: most often that
            // write committed while this heartbeat was under way, and a lease really lost is
            // answered, and said, by the write itself. Marked quietly, so a write still waiting
            // is dropped (saying so) instead of holding its room.
            tracing::debug!(job_id = %id, "heartbeat answered lease lost after the outcome was handed over");
            job.mark_lease_lost();
        }
        HeartbeatReply::LeaseLost { .. } => {
            if !job.lease_lost() {
                tracing::warn!(
                    job_id = %id,
                    kind = %job.job.kind,
                    "heartbeat answered lease lost: cancelling the handler; its outcome will not be written"
                );
                rt.cancel_job(job, CancelReason::LeaseLost);
            }
        }
    }
}

/// Records the worker's own heartbeat, registering again when it was pruned.
async fn beat_worker(rt: &Runtime) -> bool {
    let id = rt.config.worker_id.clone();
    match bounded(rt, rt.store.worker_heartbeat(id)).await {
        Ok(()) => {
            // Best effort: a send cut off by the bound loses that activity.
            let limit = rt.config.heartbeat_interval;
            let _ = tokio::time::timeout(limit, rt.activity.send(&*rt.store)).await;
            true
        }
        Err(Error::NotFound {
            entity: Entity::Worker,
            ..
        }) => {
            tracing::info!("worker registration was pruned; registering again");
            match rt.store.worker_register(rt.registration()).await {
                Ok(_) => true,
                Err(error) => failed(rt, error, "registering the worker again failed"),
            }
        }
        Err(error) => failed(rt, error, "worker heartbeat failed"),
    }
}

/// Handles a failed heartbeat call; returns whether the store counts as answering.
fn failed(rt: &Runtime, error: Error, what: &str) -> bool {
    match classify(&error) {
        ErrorClass::Transient => {
            tracing::warn!(error = %error, "{what}; claims paused until a heartbeat succeeds");
            rt.health.mark_unhealthy();
            false
        }
        ErrorClass::Fatal => {
            rt.fatal.report(error);
            false
        }
        ErrorClass::Other => {
            tracing::error!(error = %error, "{what}");
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::{TimeZone, Utc};
    use drover_core::{
        ClaimJobs, JobKind, JobStore, ManualClock, NewJob, QueueName, RescueExpired, StoreConfig,
        WorkerId,
    };
    use drover_store_memory::MemoryStore;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::{NoopMetrics, Registry, WorkerConfig};

    /// A runtime on `store` with no handlers and the default configuration.
    fn runtime(store: Arc<MemoryStore>) -> Runtime {
        Runtime::new(
            store,
            Arc::new(Registry::new()),
            WorkerConfig::default(),
            Arc::new(NoopMetrics),
            None,
        )
    }

    /// A worker whose lease on a job was lost and which claimed the job again holds the later
    /// run; the heartbeat sent for the earlier run answers lease lost, which stops that run
    /// alone: the later run keeps its token, its place among the running jobs and so its
    /// heartbeats.
    #[tokio::test]
    async fn a_lease_lost_answer_for_an_earlier_run_leaves_the_later_run_alone() {
        let clock = ManualClock::new(Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap());
        let store = Arc::new(MemoryStore::with_clock(
            StoreConfig::default(),
            Arc::new(clock.clone()),
        ));
        let kind = JobKind::parse("quick").unwrap();
        store
            .jobs_enqueue(vec![NewJob::new(kind.clone(), serde_json::json!({}))])
            .await
            .unwrap();
        let claim = || ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: vec![QueueName::default_queue()],
            kinds: vec![kind.clone()],
            limit: 1,
            start: 1,
            lease: Duration::from_secs(30),
        };
        let first = store.jobs_claim(claim()).await.unwrap().jobs.remove(0);
        clock.advance(Duration::from_secs(31));
        let rescued = store
            .jobs_rescue_expired(RescueExpired {
                reconciler_kinds: vec![],
                limit: 10,
            })
            .await
            .unwrap();
        assert_eq!(rescued.len(), 1);
        let second = store.jobs_claim(claim()).await.unwrap().jobs.remove(0);
        assert_eq!(second.id, first.id);

        let rt = runtime(store);
        let run = |job| Arc::new(JobShared::new(job, CancellationToken::new(), None, 1024));
        let (first, second) = (run(first), run(second));
        rt.running.insert_all(std::slice::from_ref(&first));
        rt.running.insert_all(std::slice::from_ref(&second));

        assert!(beat_jobs(&rt, std::slice::from_ref(&first)).await);
        assert_eq!(first.reason(), Some(CancelReason::LeaseLost));
        assert!(!second.cancel.is_cancelled(), "the later run keeps running");
        let held = rt
            .running
            .get(&second.job.id)
            .expect("the later run is held");
        assert!(Arc::ptr_eq(&held, &second));
    }

    /// A heartbeat that answers lease lost for a run whose outcome is already with the
    /// completer (its write committed while the heartbeat was under way) does not warn or
    /// fire the token: the run is marked lost quietly, and a write still waiting answers
    /// for the lease.
    #[tokio::test]
    async fn a_lease_lost_answer_after_the_outcome_was_handed_over_only_marks_the_run() {
        let store = Arc::new(MemoryStore::new(StoreConfig::default()));
        let kind = JobKind::parse("quick").unwrap();
        store
            .jobs_enqueue(vec![NewJob::new(kind.clone(), serde_json::json!({}))])
            .await
            .unwrap();
        let job = store
            .jobs_claim(ClaimJobs {
                worker: WorkerId::parse("w").unwrap(),
                queues: vec![QueueName::default_queue()],
                kinds: vec![kind],
                limit: 1,
                start: 1,
                lease: Duration::from_secs(30),
            })
            .await
            .unwrap()
            .jobs
            .remove(0);
        let rt = runtime(store);
        let (done, running) = (
            Arc::new(JobShared::new(
                job.clone(),
                CancellationToken::new(),
                None,
                1024,
            )),
            Arc::new(JobShared::new(job, CancellationToken::new(), None, 1024)),
        );
        done.handed_over();
        let lost = |job: &Arc<JobShared>| HeartbeatReply::LeaseLost { id: job.job.id };
        handle_reply(&rt, &done, lost(&done));
        assert!(done.lease_lost() && !done.cancel.is_cancelled());
        handle_reply(&rt, &running, lost(&running));
        assert!(running.lease_lost() && running.cancel.is_cancelled());
    }
}

//! The heartbeat loop (docs/design.md sections 3 and 6): every interval, one `jobs_heartbeat` call
//! extends the leases of all running jobs of the process and saves their changed meta and
//! progress, and `worker_heartbeat` keeps the worker registered (re-registering after
//! `NotFound`). A `LeaseLost` reply cancels that handler at once and marks it so its outcome
//! is never written; `cancel_requested` fires the handler's token; a `Deferred` reply (the job
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
                // Replies come per item in input order.
                for (((job, carried), (meta, progress)), reply) in
                    chunk.iter().zip(carried_starts).zip(&carried).zip(&replies)
                {
                    match reply {
                        HeartbeatReply::Extended { id, .. } if carried && *id == job.job.id => {
                            job.start_written();
                        }
                        // Nothing was written: the next beat carries the same updates.
                        HeartbeatReply::Deferred { id } if *id == job.job.id => {
                            job.restore_updates(*meta, *progress);
                        }
                        _ => {}
                    }
                }
                for reply in replies {
                    handle_reply(rt, reply);
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

fn handle_reply(rt: &Runtime, reply: HeartbeatReply) {
    match reply {
        HeartbeatReply::Extended {
            id,
            cancel_requested: true,
            ..
        } => {
            if let Some(job) = rt.running.get(&id) {
                if !job.cancel.is_cancelled() {
                    tracing::info!(job_id = %id, "cancel requested: firing the handler's cancellation token");
                    rt.cancel_job(&job, CancelReason::CancelRequested);
                }
            }
        }
        HeartbeatReply::Extended { .. } => {}
        HeartbeatReply::Deferred { id } => {
            tracing::debug!(job_id = %id, "heartbeat deferred: the job is busy with another write");
        }
        HeartbeatReply::LeaseLost { id } => {
            if let Some(job) = rt.running.get(&id) {
                if !job.lease_lost() {
                    tracing::warn!(
                        job_id = %id,
                        kind = %job.job.kind,
                        "heartbeat answered lease lost: cancelling the handler; its outcome will not be written"
                    );
                    rt.cancel_job(&job, CancelReason::LeaseLost);
                }
            }
        }
    }
}

/// Records the worker's own heartbeat, registering again when it was pruned.
async fn beat_worker(rt: &Runtime) -> bool {
    let id = rt.config.worker_id.clone();
    match bounded(rt, rt.store.worker_heartbeat(id)).await {
        Ok(()) => true,
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

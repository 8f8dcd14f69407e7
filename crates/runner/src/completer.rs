//! The completer: receives the outcomes of every slot through one channel and writes them with
//! `jobs_finish` in batches (everything waiting, up to the batch size, then repeat; no
//! artificial delay). Meta and progress changed since the last heartbeat are saved first.
//!
//! Faults (docs/design.md sections 5 and 9): `Unavailable` keeps the batch and retries it with
//! capped backoff (fenced writes are safe to repeat) and pauses claims; once shutdown began the
//! retries stop at the flush timeout. A `LeaseLost` reply is logged and counted, never
//! retried. `Fatal` stops the worker.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use drover_core::{Finish, FinishItem, FinishReply, HeartbeatJobs, JobId, JobState, Retry};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::activity::EndedRun;
use crate::health::{classify, ErrorClass, RetryDelay};
use crate::metrics::JobOutcome;
use crate::running::JobShared;
use crate::runtime::{bump, Runtime};

/// One outcome waiting to be written.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) shared: Arc<JobShared>,
    pub(crate) finish: Finish,
    /// The handler's run time.
    pub(crate) duration: Duration,
    /// Its place of [`Runtime::unwritten_room`](crate::runtime::Runtime), given back when the
    /// completion is dropped (recorded or given up); `None` for a write that did not wait for
    /// room (the release of an unstarted job).
    pub(crate) _room: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Writes outcomes until every sender is gone and the channel is empty.
pub(crate) async fn run_completer(rt: Arc<Runtime>, mut rx: UnboundedReceiver<Completion>) {
    let limit = rt.config.completer_batch;
    let mut batch = Vec::with_capacity(limit);
    loop {
        batch.clear();
        if rx.recv_many(&mut batch, limit).await == 0 {
            return;
        }
        write_batch(&rt, &mut batch).await;
    }
}

/// Writes one batch, retrying transient failures; empties `batch`.
async fn write_batch(rt: &Runtime, batch: &mut Vec<Completion>) {
    let mut retry = RetryDelay::new(rt.config.store_retry_min, rt.config.store_retry_max);
    loop {
        batch.retain(|completion| {
            if completion.shared.lease_lost() {
                tracing::warn!(
                    job_id = %completion.shared.job.id,
                    "lease lost before the outcome was written; not writing it"
                );
                lease_lost(rt, completion);
                false
            } else {
                true
            }
        });
        if batch.is_empty() {
            return;
        }
        save_updates(rt, batch).await;
        let items: Vec<FinishItem> = batch
            .iter()
            .map(|completion| FinishItem {
                parent: completion.shared.job.parent_id,
                id: completion.shared.job.id,
                token: completion.shared.job.fencing_token,
                finish: completion.finish.clone(),
                started: completion.shared.start_to_record(),
            })
            .collect();
        match rt.store.jobs_finish(items).await {
            Ok(replies) => {
                recorded(rt, std::mem::take(batch), replies);
                return;
            }
            Err(error) => match classify(&error) {
                ErrorClass::Transient => {
                    rt.health.mark_unhealthy();
                    if rt.flush_deadline_passed() {
                        tracing::error!(
                            error = %error,
                            outcomes = batch.len(),
                            "store still unavailable after the flush timeout: outcomes not written; their leases will expire and the jobs will be rescued"
                        );
                        unwritten(rt, std::mem::take(batch));
                        return;
                    }
                    let delay = retry.next_delay();
                    tracing::warn!(
                        error = %error,
                        outcomes = batch.len(),
                        retry_in_ms = delay.as_millis() as u64,
                        "writing outcomes failed; retrying"
                    );
                    tokio::time::sleep(delay).await;
                }
                ErrorClass::Fatal => {
                    unwritten(rt, std::mem::take(batch));
                    rt.fatal.report(error);
                    return;
                }
                ErrorClass::Other if batch.len() > 1 => {
                    // One item poisons the batch (e.g. refused input): write them one by one
                    // so only that one is affected.
                    tracing::warn!(error = %error, "batch of outcomes refused; writing them one by one");
                    for completion in std::mem::take(batch) {
                        let mut single = vec![completion];
                        Box::pin(write_batch(rt, &mut single)).await;
                    }
                    return;
                }
                ErrorClass::Other => {
                    let completion = batch.remove(0);
                    if let Some(fallback) = fallback(&completion.finish, &error) {
                        tracing::warn!(
                            job_id = %completion.shared.job.id,
                            error = %error,
                            "outcome refused by the store; recording a failure instead"
                        );
                        batch.push(Completion {
                            finish: fallback,
                            ..completion
                        });
                    } else {
                        tracing::error!(
                            job_id = %completion.shared.job.id,
                            error = %error,
                            "outcome refused by the store; not written"
                        );
                        unwritten(rt, vec![completion]);
                        return;
                    }
                }
            },
        }
    }
}

/// For an outcome the store refused as invalid (e.g. a result over the size bound), a plain
/// failure without retry that names the problem; `None` when even that was refused.
fn fallback(finish: &Finish, error: &drover_core::Error) -> Option<Finish> {
    match finish {
        Finish::Failed {
            retry: Retry::Never,
            ..
        } => None,
        _ => Some(Finish::Failed {
            message: format!("outcome could not be recorded: {error}"),
            retry: Retry::Never,
        }),
    }
}

/// Saves meta/progress changed since the last heartbeat, before the outcome clears the lease.
async fn save_updates(rt: &Runtime, batch: &[Completion]) {
    let changed: Vec<&Arc<JobShared>> = batch
        .iter()
        .map(|completion| &completion.shared)
        .filter(|shared| shared.has_updates())
        .collect();
    if changed.is_empty() {
        return;
    }
    let items: Vec<_> = changed
        .iter()
        .map(|shared| shared.heartbeat_item())
        .collect();
    let carried: Vec<(bool, bool)> = items
        .iter()
        .map(|item| (item.meta.is_some(), item.progress.is_some()))
        .collect();
    let heartbeat = HeartbeatJobs {
        lease: rt.config.lease,
        jobs: items,
    };
    if let Err(error) = rt.store.jobs_heartbeat(heartbeat).await {
        tracing::warn!(error = %error, "saving progress before the outcome failed");
        for (shared, (meta, progress)) in changed.iter().zip(carried) {
            shared.restore_updates(meta, progress);
        }
    }
}

/// Handles the replies to a written batch.
fn recorded(rt: &Runtime, batch: Vec<Completion>, replies: Vec<FinishReply>) {
    let in_order = replies.len() == batch.len()
        && batch
            .iter()
            .zip(&replies)
            .all(|(completion, reply)| completion.shared.job.id == reply.id());
    let mut by_id: HashMap<JobId, FinishReply> = HashMap::new();
    let mut ordered = Vec::new();
    if in_order {
        ordered = replies;
    } else {
        tracing::error!("store answered a batch of outcomes out of order; matching by id");
        by_id = replies
            .into_iter()
            .map(|reply| (reply.id(), reply))
            .collect();
    }
    let mut ordered = ordered.into_iter();
    rt.running
        .remove_all(batch.iter().map(|completion| &completion.shared));
    let mut ended = Vec::with_capacity(batch.len());
    for completion in &batch {
        let reply = if in_order {
            ordered.next()
        } else {
            by_id.remove(&completion.shared.job.id)
        };
        let job = &completion.shared.job;
        match reply {
            Some(FinishReply::Recorded { to, .. }) => {
                let outcome = outcome_of(&completion.finish, to);
                rt.transition(job, JobState::Running, to);
                rt.finished(job, outcome, completion.duration);
                ended.push(EndedRun {
                    job,
                    outcome,
                    duration: completion.duration,
                });
            }
            Some(FinishReply::LeaseLost { .. }) => {
                tracing::warn!(
                    job_id = %job.id,
                    kind = %job.kind,
                    "outcome not recorded: the lease was lost (the job was rescued or taken by another worker)"
                );
                rt.finished(job, JobOutcome::LeaseLost, completion.duration);
            }
            None => {
                tracing::error!(job_id = %job.id, "store gave no answer for this outcome");
                bump(&rt.counters.unwritten, 1);
            }
        }
    }
    rt.activity.ended(&ended);
}

/// The outcome label of a recorded write.
fn outcome_of(finish: &Finish, to: JobState) -> JobOutcome {
    match (finish, to) {
        (_, JobState::Succeeded) => JobOutcome::Succeeded,
        (_, JobState::Cancelled) => JobOutcome::Cancelled,
        (_, JobState::Failed) => JobOutcome::Failed,
        (Finish::Snoozed { .. }, _) => JobOutcome::Snoozed,
        (Finish::Released, _) => JobOutcome::Released,
        (Finish::WaitForChildren, _) => JobOutcome::Waiting,
        (_, _) => JobOutcome::Retried,
    }
}

fn lease_lost(rt: &Runtime, completion: &Completion) {
    rt.running.remove(&completion.shared);
    rt.finished(
        &completion.shared.job,
        JobOutcome::LeaseLost,
        completion.duration,
    );
}

fn unwritten(rt: &Runtime, batch: Vec<Completion>) {
    bump(&rt.counters.unwritten, batch.len() as u64);
    rt.running
        .remove_all(batch.iter().map(|completion| &completion.shared));
}

//! The rescuer: moves running jobs whose lease expired (by the store's clock) back to queued,
//! to failed when their attempts are spent, to reconciling when this worker registers a
//! reconciler for their kind, or to cancelled when a cancel was requested (docs/design.md sections 3
//! and 9); a job whose handler never started (it waited for a slot in a worker that stopped)
//! goes back to queued with its attempt given back. Each expired lease is rescued exactly once
//! however many workers race.

use std::sync::Arc;

use drover_core::{Error, JobState, RescueExpired};
use tokio_util::sync::CancellationToken;

use crate::running::CancelReason;
use crate::runtime::{bump, Runtime};

/// Most jobs rescued by one store call; a pass repeats while a full batch came back.
pub(crate) const RESCUE_BATCH: u32 = 1_000;

/// One rescue pass.
pub(crate) async fn rescue_pass(rt: Arc<Runtime>, stop: CancellationToken) -> Result<(), Error> {
    let reconciler_kinds = rt.registry.reconciler_kinds();
    loop {
        let mark = rt.running.mark();
        let rescued = rt
            .store
            .jobs_rescue_expired(RescueExpired {
                reconciler_kinds: reconciler_kinds.clone(),
                limit: RESCUE_BATCH,
            })
            .await?;
        let full = rescued.len() >= RESCUE_BATCH as usize;
        bump(&rt.counters.rescued, rescued.len() as u64);
        for job in rescued {
            if job.attempt_spent {
                tracing::info!(
                    job_id = %job.id,
                    kind = %job.kind,
                    queue = %job.queue,
                    to = %job.to,
                    "rescued a job whose lease expired"
                );
            } else {
                tracing::info!(
                    job_id = %job.id,
                    kind = %job.kind,
                    queue = %job.queue,
                    to = %job.to,
                    "rescued a job whose lease expired before its handler started; attempt not spent"
                );
            }
            rt.metrics.job_rescued(&job.kind, &job.queue, job.to);
            rt.transition_of(job.id, &job.kind, &job.queue, JobState::Running, job.to);
            // If this process still runs it, its lease is gone: stop the handler and write
            // nothing for it (not a run claimed again after this rescue).
            if let Some(running) = rt.running.get_taken_in_by(&job.id, mark) {
                rt.cancel_job(&running, CancelReason::LeaseLost);
            }
        }
        if !full || stop.is_cancelled() {
            return Ok(());
        }
        tokio::task::yield_now().await;
    }
}

//! The reconcile sweep: takes reconciling jobs of the kinds this worker has reconcilers for
//! under a short lease, asks each kind's [`crate::Reconciler`] how the interrupted work ended,
//! and records the verdict. An error or an inconclusive verdict leaves the job reconciling for
//! the next sweep (docs/design.md sections 3 and 6). The reconciler's cancellation token fires on
//! shutdown; the sweep then stops after the current job.

use std::sync::Arc;

use drover_core::{ClaimReconciling, Error, JobState, Resolution};
use tokio_util::sync::CancellationToken;

use crate::health::{classify, ErrorClass};
use crate::runtime::{bump, Runtime};

/// Most reconciling jobs taken by one sweep.
pub(crate) const RECONCILE_BATCH: u32 = 100;

/// One sweep.
pub(crate) async fn reconcile_pass(rt: Arc<Runtime>, stop: CancellationToken) -> Result<(), Error> {
    let kinds = rt.registry.reconciler_kinds();
    if kinds.is_empty() {
        return Ok(());
    }
    let jobs = rt
        .store
        .jobs_claim_reconciling(ClaimReconciling {
            worker: rt.config.worker_id.clone(),
            kinds,
            limit: RECONCILE_BATCH,
            lease: rt.config.lease,
        })
        .await?;
    for job in jobs {
        let Some(reconciler) = rt.registry.reconciler(&job.kind) else {
            continue;
        };
        let cancel = stop.child_token();
        let verdict = {
            let run = reconciler.reconcile(&job, cancel.clone());
            tokio::pin!(run);
            // The verdict must arrive while the reconcile lease holds; after shutdown the
            // reconciler gets the cancel grace to stop.
            let lease = rt.config.lease;
            let first = tokio::select! {
                verdict = &mut run => Some(Some(verdict)),
                () = tokio::time::sleep(lease) => Some(None),
                () = stop.cancelled() => None,
            };
            match first {
                Some(verdict) => verdict,
                None => tokio::time::timeout(rt.config.cancel_grace, &mut run)
                    .await
                    .ok(),
            }
        };
        let resolution = match verdict {
            Some(Ok(resolution)) => resolution,
            Some(Err(reason)) => {
                tracing::warn!(job_id = %job.id, kind = %job.kind, reason = %reason, "reconciler failed; the job stays reconciling");
                Resolution::Inconclusive
            }
            None => {
                tracing::warn!(job_id = %job.id, kind = %job.kind, "reconciler gave no verdict in time; the job stays reconciling");
                Resolution::Inconclusive
            }
        };
        match rt
            .store
            .job_reconcile(job.id, job.fencing_token, resolution)
            .await
        {
            Ok(transition) => {
                if transition.to != transition.from {
                    bump(&rt.counters.reconciled, 1);
                    tracing::info!(job_id = %job.id, kind = %job.kind, to = %transition.to, "reconciled");
                    rt.transition(&job, JobState::Reconciling, transition.to);
                }
            }
            Err(error) => match classify(&error) {
                ErrorClass::Transient | ErrorClass::Fatal => return Err(error),
                ErrorClass::Other => {
                    tracing::warn!(job_id = %job.id, error = %error, "recording a reconcile verdict failed");
                }
            },
        }
        if stop.is_cancelled() {
            break;
        }
    }
    Ok(())
}

//! The cleaner: retention pruning of terminal jobs older than the retention (by the time they
//! finished; never queued, running or reconciling jobs), at most `prune_limit` per store call
//! and repeating while a full batch was deleted, and removal of stale worker registrations
//! (DESIGN.md sections 6 and 9).

use std::sync::Arc;

use drover_core::{Error, PruneJobs};
use tokio_util::sync::CancellationToken;

use crate::runtime::{bump, Runtime};

/// One cleaning pass.
pub(crate) async fn clean_pass(rt: Arc<Runtime>, stop: CancellationToken) -> Result<(), Error> {
    let limit = rt.config.prune_limit;
    let mut total = 0u64;
    loop {
        let deleted = rt
            .store
            .jobs_prune(PruneJobs {
                older_than: rt.config.retention,
                limit,
            })
            .await?;
        total += deleted;
        bump(&rt.counters.pruned, deleted);
        if deleted < u64::from(limit) || stop.is_cancelled() {
            break;
        }
        // Let other work run between full batches.
        tokio::task::yield_now().await;
    }
    if total > 0 {
        tracing::info!(deleted = total, "pruned terminal jobs past retention");
    }
    let stale = rt.store.workers_prune(rt.config.worker_stale_after).await?;
    if stale > 0 {
        tracing::info!(workers = stale, "removed stale worker registrations");
    }
    Ok(())
}

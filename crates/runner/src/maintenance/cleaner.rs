//! The cleaner: retention pruning of terminal jobs older than the retention (by the time they
//! finished; never waiting, queued, running or reconciling jobs), at most `prune_limit` per pass (one
//! store call, so a backlog is worked off over the following passes and no pass holds the
//! database for long), audit records older than the audit retention, as many at most
//! (docs/audit.md), and removal of stale worker registrations (docs/design.md sections 6 and 9).

use std::sync::Arc;

use drover_core::{Error, PruneAudit, PruneJobs};
use tokio_util::sync::CancellationToken;

use crate::runtime::{bump, Runtime};

/// One cleaning pass.
pub(crate) async fn clean_pass(rt: Arc<Runtime>, _stop: CancellationToken) -> Result<(), Error> {
    let deleted = rt
        .store
        .jobs_prune(PruneJobs {
            older_than: rt.config.retention,
            limit: rt.config.prune_limit,
        })
        .await?;
    bump(&rt.counters.pruned, deleted);
    if deleted > 0 {
        tracing::info!(deleted, "pruned terminal jobs past retention");
    }
    let records = rt
        .store
        .audit_prune(PruneAudit {
            older_than: rt.config.audit_retention,
            limit: rt.config.prune_limit,
        })
        .await?;
    if records > 0 {
        tracing::info!(records, "pruned audit records past the audit retention");
    }
    let stale = rt.store.workers_prune(rt.config.worker_stale_after).await?;
    if stale > 0 {
        tracing::info!(workers = stale, "removed stale worker registrations");
    }
    Ok(())
}

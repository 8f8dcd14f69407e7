//! Ending transactions explicitly. A `sqlx::Transaction` dropped on an error path is rolled back
//! only when its connection is next used, so its row locks would outlive the failed call and
//! make the caller's next call skip (`SKIP LOCKED`) or wait for rows nobody works on. Every
//! transaction of the store ends here instead: commit on success, rollback on error.

use drover_core::Error;
use sqlx::{Postgres, Transaction};

use crate::error::SqlxResultExt;

/// Commits `tx` when `result` is a success, rolls it back otherwise; returns `result` (or the
/// commit's error).
pub(crate) async fn settle<T>(
    tx: Transaction<'_, Postgres>,
    result: Result<T, Error>,
) -> Result<T, Error> {
    match result {
        Ok(value) => {
            tx.commit().await.store_err()?;
            Ok(value)
        }
        Err(error) => {
            // The original error explains more than a failed rollback (which, on a broken
            // connection, the server performs anyway).
            if let Err(rollback) = tx.rollback().await {
                tracing::debug!(error = %rollback, "rollback after a failed store call failed");
            }
            Err(error)
        }
    }
}

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

/// How many times a transaction that hit a deadlock or serialization failure is run again
/// before the error is returned (`Unavailable`, so the caller may retry later).
pub(crate) const CONFLICT_RETRIES: usize = 4;

/// Whether a call that failed with `error` after `tries` reruns runs again: a deadlock or
/// serialization failure ([`crate::error::is_write_conflict`]), at most [`CONFLICT_RETRIES`]
/// times. A failed statement or transaction wrote nothing, so the rerun is safe.
pub(crate) fn runs_again(tries: usize, error: &Error) -> bool {
    tries < CONFLICT_RETRIES && crate::error::is_write_conflict(error)
}

/// Runs `$body` (an expression using the transaction `$tx`, awaited here) in a transaction on
/// `$conn`, committed on success; a deadlock or serialization failure
/// ([`crate::error::is_write_conflict`]) rolls back and runs it again, at most
/// [`CONFLICT_RETRIES`] more times. Workflow transactions lock rows in two orders (a child's
/// finish locks the child then its parent, a parent's cancel the parent then its children), so
/// PostgreSQL may break a deadlock between them by failing one: that one simply runs again.
macro_rules! retried {
    ($conn:expr, |$tx:ident| $body:expr) => {{
        let mut tries = 0usize;
        loop {
            let mut $tx = match sqlx::Connection::begin(&mut *$conn).await {
                Ok(tx) => tx,
                Err(error) => break Err(crate::error::map_sqlx_error(error)),
            };
            let result = $body.await;
            match crate::transaction::settle($tx, result).await {
                Err(error) if crate::transaction::runs_again(tries, &error) => tries += 1,
                other => break other,
            }
        }
    }};
}
pub(crate) use retried;

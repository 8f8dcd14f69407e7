//! Maintenance services every worker runs (DESIGN.md section 6); store operations are safe to
//! run concurrently from many workers: the rescuer (expired leases), the reconcile sweep, the
//! cron scheduler and the cleaner (retention pruning and stale worker registrations).
//!
//! Each runs one pass at start and then every interval until its stop token fires. A pass that
//! fails with `Unavailable` is logged and retried with capped exponential backoff (never
//! later than the interval); `Fatal` stops the worker; other errors are logged and the next
//! pass runs at the next interval.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use drover_core::Error;
use tokio_util::sync::CancellationToken;

use crate::health::{classify, ErrorClass, RetryDelay};
use crate::runtime::Runtime;

pub(crate) mod cleaner;
pub(crate) mod reconcile;
pub(crate) mod rescuer;
pub(crate) mod scheduler;

/// Runs `pass` now and then every `interval` until `stop` fires.
pub(crate) async fn periodic<F, Fut>(
    rt: Arc<Runtime>,
    name: &'static str,
    interval: Duration,
    stop: CancellationToken,
    mut pass: F,
) where
    F: FnMut(Arc<Runtime>, CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let mut retry = RetryDelay::new(rt.config.store_retry_min, rt.config.store_retry_max);
    loop {
        if stop.is_cancelled() {
            return;
        }
        let wait = match pass(Arc::clone(&rt), stop.clone()).await {
            Ok(()) => {
                retry.reset();
                interval
            }
            Err(error) => match classify(&error) {
                ErrorClass::Transient => {
                    let delay = retry.next_delay().min(interval);
                    tracing::warn!(
                        service = name,
                        error = %error,
                        retry_in_ms = delay.as_millis() as u64,
                        "maintenance pass failed; retrying"
                    );
                    delay
                }
                ErrorClass::Fatal => {
                    rt.fatal.report(error);
                    return;
                }
                ErrorClass::Other => {
                    tracing::error!(service = name, error = %error, "maintenance pass failed");
                    interval
                }
            },
        };
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

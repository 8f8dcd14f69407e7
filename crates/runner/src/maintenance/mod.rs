//! Maintenance services every worker runs (docs/design.md section 6); store operations are safe to
//! run concurrently from many workers: the rescuer (expired leases), the reconcile sweep, the
//! cron scheduler, the cleaner (retention pruning and stale worker registrations) and the
//! vacuum watch (warnings when the database cannot clean the jobs table).
//!
//! Each runs its first pass after the start delay (`WorkerConfig::maintenance_start_delay`
//! with jitter, capped at its interval; see [`first_pass_delay`]) and then every interval until
//! its stop token fires. A pass that fails with `Unavailable` is logged and retried with capped
//! exponential backoff (never later than the interval); `Fatal` stops the worker; other errors
//! are logged and the next pass runs at the next interval.

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
pub(crate) mod vacuum;

/// When a service's first pass runs after start, with `jitter` a fraction in 0..1 (clamped):
/// spread over `start_delay..2 x start_delay`, a range capped at `interval`; when the interval
/// is shorter than twice the delay, over its second half (`interval / 2..interval`), so
/// workers started together still spread their first passes. Zero when `start_delay` is zero.
pub(crate) fn first_pass_delay(interval: Duration, start_delay: Duration, jitter: f64) -> Duration {
    if start_delay.is_zero() {
        return Duration::ZERO;
    }
    let latest = start_delay.saturating_mul(2).min(interval);
    let earliest = start_delay.min(latest / 2);
    earliest + (latest - earliest).mul_f64(jitter.clamp(0.0, 1.0))
}

/// Runs `pass` after [`first_pass_delay`] and then every `interval` until `stop` fires.
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
    let mut wait = first_pass_delay(
        interval,
        rt.config.maintenance_start_delay,
        rand::random::<f64>(),
    );
    loop {
        // Biased: a stop that has fired wins over a wait that is over (or zero).
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = match pass(Arc::clone(&rt), stop.clone()).await {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn the_first_pass_waits_the_start_delay_and_its_jitter() {
        assert_eq!(first_pass_delay(MS(60_000), MS(1_000), 0.0), MS(1_000));
        assert_eq!(first_pass_delay(MS(60_000), MS(1_000), 0.5), MS(1_500));
        assert_eq!(first_pass_delay(MS(60_000), MS(1_000), 1.0), MS(2_000));
        assert_eq!(first_pass_delay(MS(2_000), MS(1_000), 0.25), MS(1_250));
    }

    #[test]
    fn a_short_interval_spreads_the_first_pass_over_its_second_half() {
        // The cron scheduler's default interval equals the default delay: 0.5..1 s.
        assert_eq!(first_pass_delay(MS(1_000), MS(1_000), 0.0), MS(500));
        assert_eq!(first_pass_delay(MS(1_000), MS(1_000), 0.5), MS(750));
        assert_eq!(first_pass_delay(MS(1_000), MS(1_000), 1.0), MS(1_000));
        assert_eq!(first_pass_delay(MS(10), MS(1_000), 0.0), MS(5));
        assert_eq!(first_pass_delay(MS(1_500), MS(1_000), 0.0), MS(750));
        assert_eq!(first_pass_delay(MS(1_500), MS(1_000), 1.0), MS(1_500));
    }

    #[test]
    fn no_start_delay_means_the_first_pass_runs_at_start() {
        assert_eq!(
            first_pass_delay(MS(60_000), Duration::ZERO, 0.9),
            Duration::ZERO
        );
    }

    #[test]
    fn jitter_outside_zero_to_one_is_clamped() {
        assert_eq!(first_pass_delay(MS(60_000), MS(1_000), -3.0), MS(1_000));
        assert_eq!(first_pass_delay(MS(60_000), MS(1_000), 7.0), MS(2_000));
    }
}

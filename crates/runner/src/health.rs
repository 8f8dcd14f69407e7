//! Store health and fault handling (docs/design.md section 5, "transient errors are retried with
//! backoff"; seeds: "the worker makes no claims until a heartbeat passes").
//!
//! [`Health`] is the gate of the claim loops: a claim, heartbeat or outcome write that fails
//! with [`Error::Unavailable`] marks the store unhealthy and the claim loops stop claiming;
//! the heartbeat loop probes with capped exponential backoff and marks it healthy again when a
//! heartbeat succeeds. [`FatalSlot`] records the first [`Error::Fatal`] (or other error that
//! makes the worker useless) and tells `Worker::run` to stop and return it. [`RetryDelay`] is
//! the capped exponential backoff of store retries.

use std::time::Duration;

use drover_core::Error;
use parking_lot::Mutex;
use rand::Rng;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

/// Whether the store answered the last heartbeat; claim loops claim only while healthy.
#[derive(Debug)]
pub(crate) struct Health {
    healthy: watch::Sender<bool>,
    probe: Notify,
}

impl Health {
    pub(crate) fn new() -> Self {
        Health {
            healthy: watch::Sender::new(true),
            probe: Notify::new(),
        }
    }

    pub(crate) fn is_healthy(&self) -> bool {
        *self.healthy.borrow()
    }

    /// Stops claims until a heartbeat succeeds; wakes the heartbeat loop to probe soon.
    pub(crate) fn mark_unhealthy(&self) {
        let changed = self.healthy.send_if_modified(|healthy| {
            let was = *healthy;
            *healthy = false;
            was
        });
        if changed {
            self.probe.notify_one();
        }
    }

    /// Lets claims resume.
    pub(crate) fn mark_healthy(&self) {
        self.healthy.send_if_modified(|healthy| {
            let was = *healthy;
            *healthy = true;
            !was
        });
    }

    /// Resolves once the store is healthy (at once when it is).
    pub(crate) async fn wait_healthy(&self) {
        let mut rx = self.healthy.subscribe();
        // The sender lives as long as `self`, so `wait_for` cannot fail while we borrow it.
        let _ = rx.wait_for(|healthy| *healthy).await;
    }

    /// Resolves when the store was just marked unhealthy.
    pub(crate) async fn probe_requested(&self) {
        self.probe.notified().await;
    }
}

/// The first error that stops the worker.
#[derive(Debug, Default)]
pub(crate) struct FatalSlot {
    error: Mutex<Option<Error>>,
    fired: CancellationToken,
}

impl FatalSlot {
    /// Records `error` (the first one wins) and asks the worker to stop.
    pub(crate) fn report(&self, error: Error) {
        {
            let mut slot = self.error.lock();
            if slot.is_none() {
                tracing::error!(error = %error, "store error stops the worker");
                *slot = Some(error);
            }
        }
        self.fired.cancel();
    }

    /// Resolves once an error was reported.
    pub(crate) async fn fired(&self) {
        self.fired.cancelled().await;
    }

    /// Takes the reported error.
    pub(crate) fn take(&self) -> Option<Error> {
        self.error.lock().take()
    }
}

/// Capped exponential backoff with jitter for retrying store calls.
#[derive(Debug, Clone)]
pub(crate) struct RetryDelay {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl RetryDelay {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        RetryDelay {
            min,
            max,
            next: min,
        }
    }

    /// The delay to wait now (between half and all of the current step), then doubles the
    /// step up to the cap.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = step.saturating_mul(2).min(self.max);
        let factor: f64 = rand::thread_rng().gen_range(0.5..=1.0);
        step.mul_f64(factor).max(self.min.min(step))
    }

    /// The current step without advancing.
    pub(crate) fn current(&self) -> Duration {
        self.next
    }

    /// Back to the first step after a success.
    pub(crate) fn reset(&mut self) {
        self.next = self.min;
    }
}

/// How the runner treats a store error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// `Unavailable`: log, retry with backoff.
    Transient,
    /// `Fatal`: stop the worker.
    Fatal,
    /// Anything else: specific to the call.
    Other,
}

pub(crate) fn classify(error: &Error) -> ErrorClass {
    match error {
        Error::Unavailable { .. } => ErrorClass::Transient,
        Error::Fatal { .. } => ErrorClass::Fatal,
        _ => ErrorClass::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_to_the_cap_and_resets() {
        let mut delay = RetryDelay::new(Duration::from_millis(100), Duration::from_millis(350));
        let first = delay.next_delay();
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        assert_eq!(delay.current(), Duration::from_millis(200));
        delay.next_delay();
        assert_eq!(delay.current(), Duration::from_millis(350));
        delay.next_delay();
        assert_eq!(delay.current(), Duration::from_millis(350));
        delay.reset();
        assert_eq!(delay.current(), Duration::from_millis(100));
    }

    #[tokio::test]
    async fn health_gate_opens_again() {
        let health = Health::new();
        assert!(health.is_healthy());
        health.mark_unhealthy();
        assert!(!health.is_healthy());
        let waiter = async { health.wait_healthy().await };
        health.mark_healthy();
        waiter.await;
        assert!(health.is_healthy());
    }
}

//! [`Outcome`]: what a handler tells the runner about one run of a job (docs/design.md section 3):
//! a value the handler returns, never a panic or a side channel.
//!
//! The runner turns an outcome into a [`drover_core::Finish`] for the completer: success,
//! retry (after an explicit delay or the kind's backoff), discard (fail without retry), snooze
//! (no attempt spent), cancelled, or wait for the children the run enqueued
//! ([`Outcome::WaitForChildren`], docs/design.md section 10). Handlers that return `Result<T, E>` get the conversion
//! `Ok(value)` -> success with `value` as the result, `Err(error)` -> retry with the error's
//! text.

use std::fmt::Display;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// The result of one run of a handler.
///
/// Messages end up in the job's error list and in operator views: they must not contain job
/// args, results or secrets (docs/design.md section 9).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// The work is done; `result` (any JSON, at most the store's result size bound) is stored.
    Success {
        /// The handler's result, `None` for none.
        result: Option<Value>,
    },
    /// The attempt failed; the job runs again if attempts remain, after `delay` or, when
    /// `None`, after the kind's backoff for this attempt ([`crate::KindConfig::backoff`]).
    Retry {
        /// What went wrong.
        message: String,
        /// Explicit delay before the next attempt.
        delay: Option<Duration>,
    },
    /// The job fails now without retry, whatever attempts remain (e.g. invalid input).
    Discard {
        /// Why.
        message: String,
    },
    /// Run the job again after `delay` without spending an attempt.
    Snooze {
        /// How long to wait.
        delay: Duration,
    },
    /// The handler stopped because it was cancelled; the job ends `cancelled`.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// Wait for the children this job enqueued ([`crate::JobContext::enqueue_children`]):
    /// the lease and the slot are given back at once, no attempt is spent, and the job runs
    /// again when every child is terminal (at once when none is live), reading their outcomes
    /// with [`crate::JobContext::children`] (docs/design.md section 10).
    WaitForChildren,
}

impl Outcome {
    /// Success without a result.
    pub fn success() -> Self {
        Outcome::Success { result: None }
    }

    /// Success with `result` serialized to JSON; a result that cannot be serialized makes the
    /// outcome a [`Outcome::Discard`] naming the problem (retrying would not help).
    pub fn success_with(result: impl Serialize) -> Self {
        match serde_json::to_value(result) {
            Ok(Value::Null) => Outcome::Success { result: None },
            Ok(value) => Outcome::Success {
                result: Some(value),
            },
            Err(error) => Outcome::Discard {
                message: format!("handler result could not be serialized to JSON: {error}"),
            },
        }
    }

    /// A retryable failure using the kind's backoff.
    pub fn retry(message: impl Into<String>) -> Self {
        Outcome::Retry {
            message: message.into(),
            delay: None,
        }
    }

    /// A retryable failure retried after exactly `delay` (if attempts remain).
    pub fn retry_after(message: impl Into<String>, delay: Duration) -> Self {
        Outcome::Retry {
            message: message.into(),
            delay: Some(delay),
        }
    }

    /// A failure that is not retried.
    pub fn discard(message: impl Into<String>) -> Self {
        Outcome::Discard {
            message: message.into(),
        }
    }

    /// Run again after `delay` without spending an attempt.
    pub fn snooze(delay: Duration) -> Self {
        Outcome::Snooze { delay }
    }

    /// The handler observed its cancellation and stopped.
    pub fn cancelled(reason: impl Into<String>) -> Self {
        Outcome::Cancelled {
            reason: reason.into(),
        }
    }

    /// Wait for this job's children without holding a lease or a slot.
    pub fn wait_for_children() -> Self {
        Outcome::WaitForChildren
    }

    /// True for [`Outcome::Success`].
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success { .. })
    }
}

impl<E: Display> From<Result<Outcome, E>> for Outcome {
    /// `Ok(outcome)` -> that outcome (a handler that decides its outcome and uses `?` on its
    /// store calls: `ctx.enqueue_children(jobs).await?; Ok(Outcome::WaitForChildren)`);
    /// `Err(error)` -> [`Outcome::retry`] with the error's `Display` text.
    fn from(result: Result<Outcome, E>) -> Self {
        match result {
            Ok(outcome) => outcome,
            Err(error) => Outcome::retry(error.to_string()),
        }
    }
}

impl<T: Serialize, E: Display> From<Result<T, E>> for Outcome {
    /// `Ok(value)` -> [`Outcome::success_with`]; `Err(error)` -> [`Outcome::retry`] with the
    /// error's `Display` text.
    fn from(result: Result<T, E>) -> Self {
        match result {
            Ok(value) => Outcome::success_with(value),
            Err(error) => Outcome::retry(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_convert() {
        let ok: Result<Value, String> = Ok(json!({"sent": 3}));
        assert_eq!(
            Outcome::from(ok),
            Outcome::Success {
                result: Some(json!({"sent": 3}))
            }
        );
        let unit: Result<(), String> = Ok(());
        assert_eq!(Outcome::from(unit), Outcome::success());
        let err: Result<(), std::io::Error> = Err(std::io::Error::other("smtp down"));
        assert_eq!(Outcome::from(err), Outcome::retry("smtp down"));
        let chosen: Result<Outcome, String> = Ok(Outcome::WaitForChildren);
        assert_eq!(Outcome::from(chosen), Outcome::WaitForChildren);
        let failed: Result<Outcome, String> = Err("store down".into());
        assert_eq!(Outcome::from(failed), Outcome::retry("store down"));
    }

    #[test]
    fn unserializable_result_is_discarded() {
        use std::collections::HashMap;
        // A map with non-string keys cannot become a JSON object.
        let mut bad = HashMap::new();
        bad.insert((1, 2), 3);
        assert!(matches!(
            Outcome::success_with(bad),
            Outcome::Discard { .. }
        ));
    }
}

//! Retry backoff (docs/design.md section 3): exponential with jitter, capped (default 1 hour).
//!
//! Pure: the caller passes the attempt number and a random number, so the same inputs always
//! give the same delay and the policy is easy to test.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default first retry delay.
pub const BACKOFF_BASE_DEFAULT: Duration = Duration::from_secs(1);
/// Default cap on any retry delay (docs/design.md section 3).
pub const BACKOFF_CAP_DEFAULT: Duration = Duration::from_secs(3600);
/// Default jitter: each delay is spread over plus or minus this fraction.
pub const BACKOFF_JITTER_DEFAULT: f64 = 0.25;

/// Exponential backoff: `base * 2^(attempt - 1)`, spread by `jitter`, never above `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Backoff {
    /// Delay after the first failed attempt, before jitter.
    #[serde(with = "crate::job::duration_ms", rename = "base_ms")]
    pub base: Duration,
    /// Upper bound of every delay, after jitter.
    #[serde(with = "crate::job::duration_ms", rename = "cap_ms")]
    pub cap: Duration,
    /// Fraction in 0.0..=1.0: the delay is multiplied by a factor in `1 - jitter ..= 1 + jitter`.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: BACKOFF_BASE_DEFAULT,
            cap: BACKOFF_CAP_DEFAULT,
            jitter: BACKOFF_JITTER_DEFAULT,
        }
    }
}

impl Backoff {
    /// The delay before retrying after failed attempt `attempt` (1-based; values below 1 count
    /// as 1). `random` is a number in `0.0..1.0` (values outside are clamped) that picks the
    /// point within the jitter band. Never overflows; always `<= cap`.
    pub fn delay(&self, attempt: i32, random: f64) -> Duration {
        let exponent = attempt.saturating_sub(1).clamp(0, 62) as u32;
        let factor = 1u64 << exponent;
        let base_ms = u64::try_from(self.base.as_millis()).unwrap_or(u64::MAX);
        let cap_ms = u64::try_from(self.cap.as_millis()).unwrap_or(u64::MAX);
        let raw_ms = base_ms.saturating_mul(factor).min(cap_ms);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let random = if random.is_finite() {
            random.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let spread = 1.0 - jitter + 2.0 * jitter * random;
        let jittered = (raw_ms as f64 * spread).round();
        let ms = if jittered.is_finite() && jittered >= 0.0 {
            (jittered as u64).min(cap_ms)
        } else {
            cap_ms
        };
        Duration::from_millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_and_caps() {
        let b = Backoff {
            jitter: 0.0,
            ..Backoff::default()
        };
        assert_eq!(b.delay(1, 0.5), Duration::from_secs(1));
        assert_eq!(b.delay(2, 0.5), Duration::from_secs(2));
        assert_eq!(b.delay(5, 0.5), Duration::from_secs(16));
        assert_eq!(b.delay(50, 0.5), BACKOFF_CAP_DEFAULT);
        assert_eq!(b.delay(i32::MAX, 0.5), BACKOFF_CAP_DEFAULT);
        assert_eq!(b.delay(i32::MIN, 0.5), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_in_band_and_under_cap() {
        let b = Backoff::default();
        for r in [0.0, 0.1, 0.5, 0.99, 1.0, f64::NAN, -3.0, 7.0] {
            let d = b.delay(3, r);
            assert!(
                d >= Duration::from_secs(3) && d <= Duration::from_secs(5),
                "{d:?}"
            );
            assert!(b.delay(40, r) <= BACKOFF_CAP_DEFAULT);
        }
    }
}

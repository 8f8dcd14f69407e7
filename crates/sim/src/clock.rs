//! Simulated time: the store's [`Clock`] reads tokio's paused clock from a fixed base, so the
//! store and the runner (whose timers are tokio's) share one deterministic time.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use drover_core::Clock;
use tokio::time::Instant;

/// The simulated wall clock: `base` plus the tokio time elapsed since the world started, plus
/// the clock jumps so far (microseconds; the runner's timers, on tokio's clock, do not jump).
#[derive(Debug, Clone)]
pub struct SimClock {
    base: DateTime<Utc>,
    start: Instant,
    skew_us: Arc<AtomicI64>,
}

impl SimClock {
    /// A clock reading `base` now (call inside the paused runtime).
    pub fn new() -> Self {
        SimClock {
            base: base(),
            start: Instant::now(),
            skew_us: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Microseconds of simulated time since the world started (no skew).
    pub fn elapsed_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Moves what the store reads forward by `d` (a clock jump), for good.
    pub fn jump(&self, d: Duration) {
        let us = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        self.skew_us.fetch_add(us, Ordering::SeqCst);
    }

    /// Moves what the store reads back by `d` (undoes a [`SimClock::jump`]).
    pub fn jump_back(&self, d: Duration) {
        let us = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        self.skew_us.fetch_sub(us, Ordering::SeqCst);
    }

    /// Microseconds since the base instant as the store reads them (jumps included).
    pub fn store_us(&self) -> i64 {
        self.elapsed_us() as i64 + self.skew_us.load(Ordering::SeqCst)
    }
}

impl Default for SimClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        self.base + chrono::Duration::microseconds(self.store_us())
    }
}

/// The instant every world starts at.
pub fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or_default()
}

/// `at` as microseconds since [`base`] (negative before it).
pub fn us_since_base(at: DateTime<Utc>) -> i64 {
    (at - base()).num_microseconds().unwrap_or(i64::MAX)
}

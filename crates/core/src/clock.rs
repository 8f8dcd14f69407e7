//! Time as an injected value. `core` never reads the system clock in its logic: callers pass
//! `now` in. Stores take a [`Clock`]: the memory store uses [`SystemClock`] in production and
//! [`ManualClock`] in tests; the PostgreSQL store uses the database's `now()` instead
//! (DESIGN.md section 9).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A source of the current instant.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant (UTC).
    fn now(&self) -> DateTime<Utc>;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now = add(*now, d);
    }

    /// Sets the clock to `at` (forward or back).
    pub fn set(&self, at: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `at + d`, saturating at chrono's largest instant instead of overflowing.
pub fn add(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at - d`, saturating at chrono's smallest instant.
pub fn sub(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| at.checked_sub_signed(d))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The non-negative time from `earlier` to `later` (zero when `later` is not after `earlier`).
pub fn since(later: DateTime<Utc>, earlier: DateTime<Utc>) -> Duration {
    (later - earlier).to_std().unwrap_or(Duration::ZERO)
}

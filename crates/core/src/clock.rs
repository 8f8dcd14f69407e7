//! Time as an injected value. `core` never reads the system clock in its logic: callers pass
//! `now` in. Stores take a [`Clock`]: the memory store uses [`SystemClock`] in production and
//! [`ManualClock`] in tests; the PostgreSQL store uses the database's `now()` instead
//! (docs/design.md section 9).

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

/// The instant as every store keeps it (docs/design.md section 4), applied by both stores to every
/// instant a caller supplies (`run_at`, a schedule tick) and by the memory store to its clock:
///
/// - a leap second is folded into the next second (`2026-12-01T23:59:60.5Z`, which chrono
///   holds as 23:59:59 with 1.5 s of nanoseconds, is `2026-12-02T00:00:00.5Z`), as
///   PostgreSQL reads `23:59:60` and as sqlx converts a chrono leap second for it (by
///   chrono's arithmetic); many clients cannot parse a seconds field of 60;
/// - then the instant is truncated toward the past (floor) to whole microseconds, PostgreSQL's
///   precision. This is a floor for instants before 2000 too (`1970-01-01T00:00:00.0000001Z`
///   is `1970-01-01T00:00:00Z`), where sqlx's own conversion (microseconds since 2000,
///   truncated toward zero) would round up: the PostgreSQL store sends instants already
///   converted by this function.
pub fn stored_instant(at: DateTime<Utc>) -> DateTime<Utc> {
    let mut nanos = at.timestamp_subsec_nanos();
    if nanos < 1_000_000_000 && nanos % 1_000 == 0 {
        // Already whole microseconds and no leap second: as stored (the common case, cheap,
        // where rebuilding the instant costs a calendar computation).
        return at;
    }
    let mut secs = at.timestamp();
    if nanos >= 1_000_000_000 {
        secs += 1;
        nanos -= 1_000_000_000;
    }
    DateTime::from_timestamp(secs, nanos - nanos % 1_000).unwrap_or(at)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn stored_instants_fold_leap_seconds_and_floor_to_microseconds() {
        let leap = utc("2026-12-01T23:59:60.5Z");
        assert!(
            leap.timestamp_subsec_nanos() >= 1_000_000_000,
            "chrono keeps the leap"
        );
        assert_eq!(stored_instant(leap), utc("2026-12-02T00:00:00.5Z"));
        assert_eq!(
            stored_instant(utc("2026-12-01T23:59:60.9999999Z")),
            utc("2026-12-02T00:00:00.999999Z")
        );
        assert_eq!(
            stored_instant(utc("1970-01-01T00:00:00.0000001Z")),
            utc("1970-01-01T00:00:00Z")
        );
        assert_eq!(
            stored_instant(utc("1999-12-31T23:59:59.9999999Z")),
            utc("1999-12-31T23:59:59.999999Z")
        );
        assert_eq!(
            stored_instant(utc("2030-01-01T00:00:00.1234569Z")),
            utc("2030-01-01T00:00:00.123456Z")
        );
        let whole = utc("2030-01-01T00:00:00.123456Z");
        assert_eq!(stored_instant(whole), whole);
        assert_eq!(stored_instant(stored_instant(leap)), stored_instant(leap));
    }
}

//! Leases and fencing tokens (docs/design.md sections 1 and 3).
//!
//! A claim gives a worker a lease: `lease_owner`, `lease_expires_at` and a new [`FencingToken`].
//! Every later worker write (heartbeat, complete, fail, snooze, release) presents the token; the
//! store applies it only if the job is still running under that token and the lease has not
//! expired by the store's clock. A rescued or re-claimed job therefore never accepts a late
//! write from the worker that lost it (see docs/adr/0001-fencing.md).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bounds::range_rule;

/// Default lease length (docs/design.md section 3).
pub const LEASE_DEFAULT: Duration = Duration::from_secs(60);
/// Shortest accepted lease.
pub const LEASE_MIN: Duration = Duration::from_millis(100);
/// Longest accepted lease: 24 hours.
pub const LEASE_MAX: Duration = Duration::from_secs(24 * 3600);
/// Default heartbeat interval (docs/design.md section 3).
pub const HEARTBEAT_DEFAULT: Duration = Duration::from_secs(15);

/// A job's fencing token: 0 before its first claim, then incremented by every claim (and every
/// reconcile claim), so it strictly increases across the job's claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub i64);

impl FencingToken {
    /// The token of a job never claimed.
    pub const NONE: FencingToken = FencingToken(0);

    /// The token the next claim will carry.
    pub fn next(self) -> FencingToken {
        FencingToken(self.0.saturating_add(1))
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Checks a lease length against [`LEASE_MIN`]..=[`LEASE_MAX`].
///
/// # Errors
/// [`crate::Error::InvalidInput`] with field `lease` otherwise.
pub fn check_lease(lease: Duration) -> Result<(), crate::Error> {
    if lease < LEASE_MIN || lease > LEASE_MAX {
        return Err(crate::Error::invalid(
            "lease",
            range_rule(
                format_args!("{} ms", LEASE_MIN.as_millis()),
                format_args!("{} s", LEASE_MAX.as_secs()),
                format_args!("{} ms", lease.as_millis()),
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_lease_accepts_its_bounds_and_says_them_in_its_units() {
        assert!(check_lease(LEASE_MIN).is_ok());
        assert!(check_lease(LEASE_MAX).is_ok());
        match check_lease(Duration::from_millis(10)) {
            Err(crate::Error::InvalidInput { field, reason }) => {
                assert_eq!(field, "lease");
                assert_eq!(reason, "must be between 100 ms and 86400 s, got 10 ms");
            }
            other => panic!("{other:?}"),
        }
        assert!(check_lease(LEASE_MAX + Duration::from_millis(1)).is_err());
    }
}

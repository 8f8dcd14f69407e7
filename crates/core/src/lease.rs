//! Leases and fencing tokens (DESIGN.md sections 1 and 3).
//!
//! A claim gives a worker a lease: `lease_owner`, `lease_expires_at` and a new [`FencingToken`].
//! Every later worker write (heartbeat, complete, fail, snooze, release) presents the token; the
//! store applies it only if the job is still running under that token and the lease has not
//! expired by the store's clock. A rescued or re-claimed job therefore never accepts a late
//! write from the worker that lost it (see docs/adr/0001-fencing.md).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default lease length (DESIGN.md section 3).
pub const LEASE_DEFAULT: Duration = Duration::from_secs(60);
/// Shortest accepted lease.
pub const LEASE_MIN: Duration = Duration::from_millis(100);
/// Longest accepted lease: 24 hours.
pub const LEASE_MAX: Duration = Duration::from_secs(24 * 3600);
/// Default heartbeat interval (DESIGN.md section 3).
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
            format!(
                "must be between {} ms and {} s, got {} ms",
                LEASE_MIN.as_millis(),
                LEASE_MAX.as_secs(),
                lease.as_millis()
            ),
        ));
    }
    Ok(())
}

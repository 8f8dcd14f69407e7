//! The numeric bounds of the store contract, each defined once, and the one range check
//! every "must be between" rule goes through.
//!
//! Both stores, the runner and the operator surfaces read these constants from here, so a
//! bound cannot drift between them; the params structs of [`crate::store`] check them in their
//! `validate` methods.

use std::fmt::Display;
use std::time::Duration;

use crate::error::Error;

/// Largest batch accepted by `jobs_claim`.
pub const CLAIM_LIMIT_MAX: u32 = 10_000;
/// Default page size of `jobs_list`.
pub const LIST_LIMIT_DEFAULT: u32 = 50;
/// Largest page size of `jobs_list`.
pub const LIST_LIMIT_MAX: u32 = 1_000;

/// Checks a request for jobs by id (`jobs_get`, `jobs_tenants`) against
/// [`LIST_LIMIT_MAX`], the one bound of both stores.
///
/// # Errors
/// [`Error::InvalidInput`] naming `ids` for more than [`LIST_LIMIT_MAX`] ids.
pub fn check_ids_len(len: usize) -> Result<(), Error> {
    let max = LIST_LIMIT_MAX as usize;
    if len > max {
        return Err(Error::invalid(
            "ids",
            format!("at most {max} ids, got {len}"),
        ));
    }
    Ok(())
}
/// Largest batch accepted by `jobs_enqueue`.
pub const ENQUEUE_BATCH_MAX: usize = 100_000;
/// Default retention of terminal jobs (docs/design.md section 3): 7 days.
pub const RETENTION_DEFAULT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default bound on rows deleted by one prune pass (docs/design.md section 6).
pub const PRUNE_LIMIT_DEFAULT: u32 = 1_000;
/// Largest `limit` accepted by `jobs_prune`.
pub const PRUNE_LIMIT_MAX: u32 = 100_000;
/// Most job ids one bulk action names (`BulkJobs`, selection by ids); more are selected with
/// a filter.
pub const BULK_IDS_MAX: usize = 1_000;
/// Jobs a bulk action reads and changes per step (one transaction in PostgreSQL): a page of
/// its filter, or a slice of its ids.
pub const BULK_CHUNK: u32 = 500;
/// Jobs a bulk retry reads and changes per step: fewer than [`BULK_CHUNK`], because with a
/// global quota (`max_pending`) a retry step holds the global quota lock, which every enqueue
/// of the cluster waits for, until it commits (docs/design.md section 7).
pub const BULK_RETRY_CHUNK: u32 = 50;
/// A bulk preview stops counting here and answers "at least" this many.
pub const BULK_PREVIEW_MAX: u64 = 10_000;
/// Store events buffered per subscriber before it lags (and then receives
/// [`crate::StoreEvent::Resync`]).
pub const EVENT_BUFFER: usize = 1024;

/// The rule of a range: `must be between {min} and {max}, got {got}`.
pub fn range_rule(min: impl Display, max: impl Display, got: impl Display) -> String {
    format!("must be between {min} and {max}, got {got}")
}

/// Checks `min <= value <= max`. Nothing is allocated unless the check fails, so hot paths
/// may call it.
///
/// # Errors
/// [`Error::InvalidInput`] naming `field`, with the rule of [`range_rule`].
#[inline]
pub fn check_range<T: PartialOrd + Display>(
    field: impl Into<String>,
    value: T,
    min: T,
    max: T,
) -> Result<(), Error> {
    if value < min || value > max {
        return Err(Error::invalid(field, range_rule(min, max, value)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_range_accepts_its_bounds_and_names_the_field_outside_them() {
        assert!(check_range("limit", 1u32, 1, 10).is_ok());
        assert!(check_range("limit", 10u32, 1, 10).is_ok());
        for (value, got) in [(0u32, "0"), (11, "11")] {
            match check_range("limit", value, 1, 10) {
                Err(Error::InvalidInput { field, reason }) => {
                    assert_eq!(field, "limit");
                    assert_eq!(reason, format!("must be between 1 and 10, got {got}"));
                }
                other => panic!("{value}: {other:?}"),
            }
        }
    }
}

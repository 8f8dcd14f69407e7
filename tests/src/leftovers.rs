//! Test resources that a killed run could not clean up: PostgreSQL databases and private
//! server folders named `<prefix><uuid v7, simple form>`. The UUID's timestamp is the creation
//! time, so a later run can tell a leftover from a resource of a run still going.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use drover_store_postgres::sqlx::types::Uuid;

/// Resources older than this are leftovers of killed runs (no test runs for an hour).
pub const LEFTOVER_AGE: Duration = Duration::from_secs(3600);

/// Whether `name` is `prefix` followed by a UUID v7 created more than [`LEFTOVER_AGE`] ago.
/// Names of another shape are never leftovers.
pub fn is_leftover(name: &str, prefix: &str) -> bool {
    let Some(created) = name
        .strip_prefix(prefix)
        .and_then(|hex| Uuid::parse_str(hex).ok())
        .and_then(|id| id.get_timestamp())
        .map(|ts| {
            let (secs, nanos) = ts.to_unix();
            UNIX_EPOCH + Duration::new(secs, nanos)
        })
    else {
        return false;
    };
    SystemTime::now()
        .duration_since(created)
        .is_ok_and(|age| age > LEFTOVER_AGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_v7_names_with_the_prefix_are_leftovers() {
        let fresh = format!("db_{}", Uuid::now_v7().simple());
        assert!(!is_leftover(&fresh, "db_"));
        let ts = drover_store_postgres::sqlx::types::uuid::Timestamp::from_unix(
            drover_store_postgres::sqlx::types::uuid::NoContext,
            1_700_000_000,
            0,
        );
        let old = format!("db_{}", Uuid::new_v7(ts).simple());
        assert!(is_leftover(&old, "db_"));
        assert!(!is_leftover(&old, "other_"));
        assert!(!is_leftover("db_not-a-uuid", "db_"));
    }
}

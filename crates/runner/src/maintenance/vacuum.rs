//! The vacuum watch: once a minute ([`crate::VACUUM_CHECK_INTERVAL`]) a worker reads what keeps the
//! database from cleaning the jobs table ([`drover_core::JobStore::vacuum_status`], a read of
//! statistics, never on the claim path) and warns when the oldest open transaction is older
//! than `transaction_age_warning`, or dead row versions are more than `dead_rows_warning` of
//! the table: claims then step over dead index entries and slow down, and nothing else would
//! say why. A warning that still holds is repeated at most every [`VACUUM_WARNING_REPEAT`].
//! The watch never stops a worker: a failed read is logged at debug level and tried again at
//! the next pass.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Error, VacuumStatus};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::config::{WorkerConfig, DEAD_ROWS_WARNING_MIN, VACUUM_WARNING_REPEAT};
use crate::runtime::Runtime;

/// A condition worth a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finding {
    /// The oldest open transaction is older than `transaction_age_warning`.
    OldTransaction,
    /// Dead row versions are more than `dead_rows_warning` of the table.
    DeadRows,
}

/// The conditions `status` meets under `config`'s thresholds.
pub(crate) fn findings(status: &VacuumStatus, config: &WorkerConfig) -> Vec<Finding> {
    let mut found = Vec::new();
    if let (Some(limit), Some(age)) = (
        config.transaction_age_warning,
        status.oldest_transaction_age(),
    ) {
        if age > limit {
            found.push(Finding::OldTransaction);
        }
    }
    if let Some(fraction) = config.dead_rows_warning {
        if status.jobs_dead_rows >= DEAD_ROWS_WARNING_MIN && status.dead_fraction() > fraction {
            found.push(Finding::DeadRows);
        }
    }
    found
}

/// When each finding was last warned about.
#[derive(Debug, Default)]
pub(crate) struct VacuumWatch {
    old_transaction: Option<Instant>,
    dead_rows: Option<Instant>,
}

impl VacuumWatch {
    /// Whether `finding` is to be warned about at `now` (first time, or the last warning is
    /// [`VACUUM_WARNING_REPEAT`] old); records the warning if so. A finding that no longer
    /// holds is forgotten by [`VacuumWatch::clear_except`], so it warns at once when it
    /// comes back.
    fn due(&mut self, finding: Finding, now: Instant) -> bool {
        let last = match finding {
            Finding::OldTransaction => &mut self.old_transaction,
            Finding::DeadRows => &mut self.dead_rows,
        };
        if last.is_some_and(|at| now.duration_since(at) < VACUUM_WARNING_REPEAT) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Forgets the findings not in `found`.
    fn clear_except(&mut self, found: &[Finding]) {
        if !found.contains(&Finding::OldTransaction) {
            self.old_transaction = None;
        }
        if !found.contains(&Finding::DeadRows) {
            self.dead_rows = None;
        }
    }
}

/// One pass: reads the status and warns about what is due.
pub(crate) async fn vacuum_pass(
    rt: Arc<Runtime>,
    watch: Arc<Mutex<VacuumWatch>>,
    _stop: CancellationToken,
) -> Result<(), Error> {
    let status = match rt.store.vacuum_status().await {
        Ok(Some(status)) => status,
        Ok(None) => return Ok(()),
        Err(error) => {
            tracing::debug!(%error, "reading the vacuum status failed; trying at the next pass");
            return Ok(());
        }
    };
    let found = findings(&status, &rt.config);
    let due: Vec<Finding> = {
        let mut watch = watch.lock();
        watch.clear_except(&found);
        let now = Instant::now();
        found.into_iter().filter(|f| watch.due(*f, now)).collect()
    };
    for finding in due {
        warn(finding, &status, &rt.config);
    }
    Ok(())
}

/// Logs the warning for `finding`, with the facts and the remedy.
fn warn(finding: Finding, status: &VacuumStatus, config: &WorkerConfig) {
    let age = status.oldest_transaction_age().unwrap_or_default();
    let pid = status.oldest_transaction_pid;
    match finding {
        Finding::OldTransaction => tracing::warn!(
            transaction_age_s = age.as_secs(),
            pid = pid.map(i64::from),
            dead_rows = status.jobs_dead_rows,
            "the oldest open transaction of the database began {} ago ({}): vacuum cannot remove the jobs table's dead row versions newer than it, so claims step over more of them and slow down; end it if it is stuck ({}), see the Vacuum paragraph of Drover's operator's guide",
            seconds(age),
            holder(pid),
            pid.map_or_else(
                || "COMMIT PREPARED or ROLLBACK PREPARED it".to_owned(),
                |pid| format!("SELECT pg_terminate_backend({pid})")
            ),
        ),
        Finding::DeadRows => tracing::warn!(
            dead_rows = status.jobs_dead_rows,
            live_rows = status.jobs_live_rows,
            "drover.jobs holds about {} dead row versions ({:.0} % of its rows; last vacuum {}): claims step over their index entries until vacuum removes them; {}",
            status.jobs_dead_rows,
            status.dead_fraction() * 100.0,
            status
                .jobs_last_vacuum_at
                .map_or_else(|| "never".to_owned(), |at| at.to_rfc3339()),
            cause(status, config),
        ),
    }
}

/// A transaction at least this old (or older than `transaction_age_warning`, when that is
/// shorter) is named as what keeps the dead rows.
const CAUSE_TRANSACTION_AGE: Duration = Duration::from_secs(60);

/// What most likely keeps vacuum from removing them, and what to do.
fn cause(status: &VacuumStatus, config: &WorkerConfig) -> String {
    let age = status.oldest_transaction_age().unwrap_or_default();
    let old = config
        .transaction_age_warning
        .map_or(CAUSE_TRANSACTION_AGE, |limit| {
            limit.min(CAUSE_TRANSACTION_AGE)
        });
    if status.oldest_transaction_age_ms.is_some() && age >= old {
        return format!(
            "the oldest open transaction ({}) began {} ago and keeps them: end it, then VACUUM drover.jobs",
            holder(status.oldest_transaction_pid),
            seconds(age)
        );
    }
    if let (Some(slot), Some(xmin_age)) =
        (&status.replication_slot, status.replication_slot_xmin_age)
    {
        return format!(
            "replication slot {slot} holds a horizon {xmin_age} transactions old and keeps them: drop the slot if its standby is gone (SELECT pg_drop_replication_slot('{slot}')), then VACUUM drover.jobs"
        );
    }
    "vacuum has not caught up: check that autovacuum is on and visits drover.jobs often enough, or run VACUUM drover.jobs".to_owned()
}

fn holder(pid: Option<u32>) -> String {
    pid.map_or_else(
        || "a prepared transaction".to_owned(),
        |pid| format!("pid {pid}"),
    )
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(age_s: Option<u64>, dead: u64, live: u64) -> VacuumStatus {
        VacuumStatus {
            oldest_transaction_age_ms: age_s.map(|s| s * 1000),
            oldest_transaction_pid: age_s.map(|_| 42),
            jobs_dead_rows: dead,
            jobs_live_rows: live,
            ..VacuumStatus::default()
        }
    }

    #[test]
    fn an_old_transaction_or_many_dead_rows_are_found_above_their_thresholds() {
        let config = WorkerConfig::default();
        assert!(findings(&status(Some(299), 0, 0), &config).is_empty());
        assert!(findings(&status(None, 0, 0), &config).is_empty());
        assert_eq!(
            findings(&status(Some(301), 0, 0), &config),
            vec![Finding::OldTransaction]
        );
        assert_eq!(
            findings(&status(None, 60_000, 40_000), &config),
            vec![Finding::DeadRows]
        );
        assert!(findings(&status(None, 40_000, 60_000), &config).is_empty());
        // A small table is cheap to step over, whatever its fraction.
        assert!(findings(&status(None, 9_999, 1), &config).is_empty());
        let off = WorkerConfig {
            transaction_age_warning: None,
            dead_rows_warning: None,
            ..WorkerConfig::default()
        };
        assert!(findings(&status(Some(3_600), 1_000_000, 0), &off).is_empty());
    }

    #[test]
    fn a_warning_repeats_at_most_every_ten_minutes_and_at_once_when_it_comes_back() {
        let mut watch = VacuumWatch::default();
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        assert!(watch.due(Finding::OldTransaction, at(0)));
        assert!(!watch.due(Finding::OldTransaction, at(60)));
        assert!(
            watch.due(Finding::DeadRows, at(60)),
            "each finding on its own"
        );
        assert!(!watch.due(Finding::OldTransaction, at(599)));
        assert!(watch.due(Finding::OldTransaction, at(600)));
        watch.clear_except(&[Finding::DeadRows]);
        assert!(
            watch.due(Finding::OldTransaction, at(660)),
            "it went away and came back"
        );
        assert!(!watch.due(Finding::DeadRows, at(650)), "warned 590 s ago");
        assert!(watch.due(Finding::DeadRows, at(660)), "warned 600 s ago");
    }

    #[test]
    fn the_cause_names_the_transaction_the_slot_or_autovacuum() {
        let config = WorkerConfig::default();
        let cause = |status: &VacuumStatus| super::cause(status, &config);
        let old = status(Some(3_600), 100_000, 0);
        assert!(cause(&old).contains("pid 42"), "{}", cause(&old));
        let young = status(Some(5), 100_000, 0);
        assert!(!cause(&young).contains("pid 42"), "{}", cause(&young));
        let strict = WorkerConfig {
            transaction_age_warning: Some(Duration::from_secs(1)),
            ..WorkerConfig::default()
        };
        assert!(
            super::cause(&young, &strict).contains("pid 42"),
            "below its own threshold"
        );
        let slot = VacuumStatus {
            replication_slot: Some("standby_1".to_owned()),
            replication_slot_xmin_age: Some(5_000_000),
            ..status(Some(1), 100_000, 0)
        };
        assert!(
            cause(&slot).contains("pg_drop_replication_slot('standby_1')"),
            "{}",
            cause(&slot)
        );
        assert!(cause(&status(None, 100_000, 0)).contains("autovacuum"));
    }
}

//! Activity: what the workers did, per minute and queue (docs/design.md, "Activity").
//!
//! Each worker adds up the runs it ends, per minute of the store's clock and queue: how
//! many ended in each outcome, how long they waited in the queue and how long their handlers
//! ran, as [`Histogram`]s with the fixed bounds of [`HISTOGRAM_BOUNDS_MS`]. It sends what it
//! added up with its registration heartbeat ([`crate::JobStore::activity_record`]); the store
//! adds it to what other workers sent for the same minute and queue and keeps
//! [`ACTIVITY_RETENTION`]. The dashboard's charts read it: a read costs one row per minute
//! and queue, whatever the number of jobs, and no job's write pays for it.

use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::names::QueueName;

/// How long a store keeps activity, counted back from its clock.
pub const ACTIVITY_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// The upper bounds of a [`Histogram`]'s buckets, in milliseconds; one more bucket holds
/// everything longer.
pub const HISTOGRAM_BOUNDS_MS: [u64; 18] = [
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
    900_000, 3_600_000,
];

/// How many buckets a [`Histogram`] has: one per bound, and one past the last.
pub const HISTOGRAM_BUCKETS: usize = HISTOGRAM_BOUNDS_MS.len() + 1;

/// Durations counted into fixed buckets ([`HISTOGRAM_BOUNDS_MS`]), with their sum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// How many durations fell into each bucket: the first `d <= 1 ms`, then
    /// `bound[i - 1] < d <= bound[i]`, the last `d > 3,600,000 ms`.
    pub counts: Vec<u64>,
    /// The sum of the durations, in milliseconds.
    pub sum_ms: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; HISTOGRAM_BUCKETS],
            sum_ms: 0,
        }
    }
}

impl Histogram {
    /// Counts one duration.
    pub fn record(&mut self, duration: Duration) {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let bucket = HISTOGRAM_BOUNDS_MS.partition_point(|bound| *bound < ms);
        self.counts[bucket] += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
    }

    /// Adds `other`'s counts to this one's.
    pub fn add(&mut self, other: &Histogram) {
        for (count, more) in self.counts.iter_mut().zip(&other.counts) {
            *count = count.saturating_add(*more);
        }
        self.sum_ms = self.sum_ms.saturating_add(other.sum_ms);
    }

    /// How many durations it counts.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// An estimate of the `q` quantile (0 to 1): the upper bound of the bucket that holds it
    /// (the last bound for the open bucket past it); `None` when it counts nothing.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: at least the first duration.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let bound = HISTOGRAM_BOUNDS_MS[bucket.min(HISTOGRAM_BOUNDS_MS.len() - 1)];
                return Some(Duration::from_millis(bound));
            }
        }
        None
    }

    /// Checks the bucket count; `field` names it in the error.
    pub fn validate(&self, field: &str) -> Result<()> {
        if self.counts.len() != HISTOGRAM_BUCKETS {
            return Err(Error::invalid(
                format!("{field}.counts"),
                format!(
                    "must hold {HISTOGRAM_BUCKETS} bucket counts, not {}",
                    self.counts.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Runs of one queue that ended in one minute, by outcome, with how long they waited and ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityMinute {
    /// The minute's start (store clock, whole minutes).
    pub minute: DateTime<Utc>,
    /// The queue.
    pub queue: QueueName,
    /// Runs recorded as succeeded.
    pub succeeded: u64,
    /// Runs that failed with attempts left: queued again after the backoff.
    pub retried: u64,
    /// Runs recorded as failed (attempts spent, or discarded).
    pub failed: u64,
    /// Runs recorded as cancelled.
    pub cancelled: u64,
    /// Runs recorded as snoozed.
    pub snoozed: u64,
    /// How long the jobs that started in this minute waited: from runnable (`run_at`, or the
    /// enqueue when that came later) to the claim.
    pub wait: Histogram,
    /// How long the handlers of the runs that ended in this minute ran.
    pub duration: Histogram,
}

impl ActivityMinute {
    /// Nothing yet for `queue` in the minute that holds `at`.
    pub fn new(at: DateTime<Utc>, queue: QueueName) -> Self {
        ActivityMinute {
            minute: minute_of(at),
            queue,
            succeeded: 0,
            retried: 0,
            failed: 0,
            cancelled: 0,
            snoozed: 0,
            wait: Histogram::default(),
            duration: Histogram::default(),
        }
    }

    /// Runs that ended, whatever the outcome.
    pub fn ended(&self) -> u64 {
        self.succeeded + self.retried + self.failed + self.cancelled + self.snoozed
    }

    /// Adds `other`'s counts to this one's (the minute and queue are this one's).
    pub fn add(&mut self, other: &ActivityMinute) {
        self.succeeded = self.succeeded.saturating_add(other.succeeded);
        self.retried = self.retried.saturating_add(other.retried);
        self.failed = self.failed.saturating_add(other.failed);
        self.cancelled = self.cancelled.saturating_add(other.cancelled);
        self.snoozed = self.snoozed.saturating_add(other.snoozed);
        self.wait.add(&other.wait);
        self.duration.add(&other.duration);
    }

    /// Checks the minute is whole and both histograms have their buckets.
    pub fn validate(&self) -> Result<()> {
        if minute_of(self.minute) != self.minute {
            return Err(Error::invalid(
                "minute",
                "must be the start of a minute (no seconds)",
            ));
        }
        self.wait.validate("wait")?;
        self.duration.validate("duration")
    }

    /// Checks every entry of what a worker sends, naming the entry's index.
    pub fn validate_all(activity: &[ActivityMinute]) -> Result<()> {
        activity.iter().enumerate().try_for_each(|(i, minute)| {
            minute
                .validate()
                .map_err(|e| e.in_field(&format!("activity[{i}]")))
        })
    }
}

/// The start of the minute that holds `at`.
pub fn minute_of(at: DateTime<Utc>) -> DateTime<Utc> {
    at.duration_trunc(chrono::TimeDelta::minutes(1))
        .unwrap_or(at)
}

/// Which activity to read ([`crate::JobStore::activity_list`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListActivity {
    /// Minutes from this one on (inclusive).
    pub since: DateTime<Utc>,
}

/// Activity summed over queues, one entry per minute from `since` to `until`, minutes
/// without activity included as zero: what a chart draws.
pub fn per_minute(
    activity: &[ActivityMinute],
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    queue: &QueueName,
) -> Vec<ActivityMinute> {
    let first = minute_of(since);
    let last = minute_of(until);
    let mut minutes = Vec::new();
    let mut at = first;
    while at <= last {
        minutes.push(ActivityMinute::new(at, queue.clone()));
        at += chrono::TimeDelta::minutes(1);
    }
    for entry in activity {
        let index = (entry.minute - first).num_minutes();
        if let Some(slot) = usize::try_from(index).ok().and_then(|i| minutes.get_mut(i)) {
            slot.add(entry);
        }
    }
    minutes
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn queue(name: &str) -> QueueName {
        QueueName::parse(name).unwrap()
    }

    #[test]
    fn a_histogram_counts_each_duration_in_the_bucket_of_its_upper_bound() {
        let mut h = Histogram::default();
        for ms in [0, 1, 2, 3, 1_000, 1_001, 3_600_001] {
            h.record(Duration::from_millis(ms));
        }
        assert_eq!(h.counts[0], 2, "0 and 1 ms: the first bucket");
        assert_eq!(h.counts[1], 1, "2 ms");
        assert_eq!(h.counts[2], 1, "3 ms: up to 5");
        assert_eq!(h.counts[9], 1, "1,000 ms");
        assert_eq!(h.counts[10], 1, "1,001 ms: up to 2,500");
        assert_eq!(h.counts[HISTOGRAM_BUCKETS - 1], 1, "past the last bound");
        assert_eq!(h.count(), 7);
        assert_eq!(h.sum_ms, 1 + 2 + 3 + 1_000 + 1_001 + 3_600_001);
    }

    #[test]
    fn quantiles_answer_the_bound_of_the_bucket_that_holds_them() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        for _ in 0..90 {
            h.record(Duration::from_millis(7));
        }
        for _ in 0..10 {
            h.record(Duration::from_millis(400));
        }
        assert_eq!(h.quantile(0.5), Some(Duration::from_millis(10)));
        assert_eq!(h.quantile(0.9), Some(Duration::from_millis(10)));
        assert_eq!(h.quantile(0.95), Some(Duration::from_millis(500)));
        assert_eq!(h.quantile(0.0), Some(Duration::from_millis(10)));
        let mut long = Histogram::default();
        long.record(Duration::from_secs(7_200));
        assert_eq!(long.quantile(0.5), Some(Duration::from_millis(3_600_000)));
    }

    #[test]
    fn minutes_add_up_and_are_checked() {
        let at = Utc.with_ymd_and_hms(2030, 1, 1, 10, 5, 42).unwrap();
        let mut a = ActivityMinute::new(at, queue("mail"));
        assert_eq!(
            a.minute,
            Utc.with_ymd_and_hms(2030, 1, 1, 10, 5, 0).unwrap()
        );
        a.succeeded = 3;
        a.duration.record(Duration::from_millis(20));
        let mut b = a.clone();
        b.failed = 2;
        b.wait.record(Duration::from_millis(4));
        a.add(&b);
        assert_eq!((a.succeeded, a.failed, a.ended()), (6, 2, 8));
        assert_eq!((a.duration.count(), a.wait.count()), (2, 1));
        a.validate().unwrap();

        let mut off = a.clone();
        off.minute = at;
        let e = ActivityMinute::validate_all(&[a.clone(), off]).unwrap_err();
        assert!(e.to_string().contains("activity[1].minute"), "{e}");
        let mut short = a;
        short.wait.counts.pop();
        let e = short.validate().unwrap_err();
        assert!(e.to_string().contains("wait.counts"), "{e}");
    }

    #[test]
    fn per_minute_sums_queues_and_fills_quiet_minutes() {
        let start = Utc.with_ymd_and_hms(2030, 1, 1, 10, 0, 0).unwrap();
        let mut mail = ActivityMinute::new(start, queue("mail"));
        mail.succeeded = 4;
        let mut reports = ActivityMinute::new(start, queue("reports"));
        reports.failed = 1;
        let mut later = ActivityMinute::new(start + chrono::TimeDelta::minutes(2), queue("mail"));
        later.succeeded = 7;
        let mut before = ActivityMinute::new(start - chrono::TimeDelta::minutes(5), queue("mail"));
        before.succeeded = 100;
        let all = queue("all");
        let minutes = per_minute(
            &[mail, reports, later, before],
            start + chrono::TimeDelta::seconds(30),
            start + chrono::TimeDelta::seconds(150),
            &all,
        );
        let ended: Vec<u64> = minutes.iter().map(ActivityMinute::ended).collect();
        assert_eq!(ended, vec![5, 0, 7]);
        assert_eq!(minutes[1].minute, start + chrono::TimeDelta::minutes(1));
    }
}

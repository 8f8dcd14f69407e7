//! The runs this worker ended, added up per minute and queue (docs/design.md, "Activity")
//! until its next registration heartbeat sends them ([`JobStore::activity_record`]). The
//! completer adds each written batch of outcomes under one lock; the store sees one write per
//! heartbeat.
//!
//! Minutes are the store's clock: a run's queue wait counts in the minute of its claim, its end
//! and run time in the minute of its claim plus its run time. What a failed send could not
//! deliver is kept for the next one, up to [`MOST_ENTRIES`] minutes and queues (the oldest go
//! first).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::{ActivityMinute, Job, JobStore, QueueName};

use crate::metrics::JobOutcome;

/// Most minutes and queues kept while the store does not take them.
const MOST_ENTRIES: usize = 10_000;

/// The activity not yet sent.
#[derive(Debug, Default)]
pub(crate) struct ActivityTally {
    minutes: Mutex<Minutes>,
}

/// The minutes of each queue, oldest first: a run finds its queue without cloning the name
/// and its minute among the last few.
#[derive(Debug, Default)]
struct Minutes {
    by_queue: HashMap<QueueName, Vec<ActivityMinute>>,
    len: usize,
}

/// Minutes since the Unix epoch: the key a run is added up under.
fn minute_number(at: DateTime<Utc>) -> i64 {
    at.timestamp().div_euclid(60)
}

impl Minutes {
    fn entry(&mut self, at: DateTime<Utc>, queue: &QueueName) -> &mut ActivityMinute {
        let minute = minute_number(at);
        if !self.by_queue.contains_key(queue) {
            self.by_queue.insert(queue.clone(), Vec::new());
        }
        let minutes = self.by_queue.get_mut(queue).expect("inserted above");
        let index = match minutes
            .iter()
            .rposition(|m| minute_number(m.minute) <= minute)
        {
            Some(i) if minute_number(minutes[i].minute) == minute => i,
            found => {
                let at_index = found.map_or(0, |i| i + 1);
                minutes.insert(at_index, ActivityMinute::new(at, queue.clone()));
                self.len += 1;
                at_index
            }
        };
        &mut minutes[index]
    }

    /// Drops the oldest minutes past the bound.
    fn bound(&mut self) {
        while self.len > MOST_ENTRIES {
            let oldest = self
                .by_queue
                .iter()
                .filter_map(|(queue, minutes)| Some((minutes.first()?.minute, queue.clone())))
                .min();
            let Some((_, queue)) = oldest else { return };
            if let Some(minutes) = self.by_queue.get_mut(&queue) {
                minutes.remove(0);
                self.len -= 1;
            }
        }
    }
}

/// One run whose outcome the store recorded.
pub(crate) struct EndedRun<'a> {
    pub(crate) job: &'a Job,
    pub(crate) outcome: JobOutcome,
    /// The handler's run time.
    pub(crate) duration: Duration,
}

impl ActivityTally {
    /// Adds up runs whose outcomes the store recorded: each one's outcome and run time, and
    /// its queue wait (from runnable, its `run_at` or its enqueue when that came later, to
    /// its claim). Outcomes that end no attempt (released, waiting) are not counted.
    pub(crate) fn ended(&self, runs: &[EndedRun<'_>]) {
        let mut minutes = self.minutes.lock().unwrap_or_else(PoisonError::into_inner);
        for run in runs {
            let Some(claimed) = run.job.attempted_at else {
                continue;
            };
            let runnable = run.job.run_at.max(run.job.created_at);
            let wait = (claimed - runnable).to_std().unwrap_or_default();
            let ended = claimed + chrono::TimeDelta::from_std(run.duration).unwrap_or_default();
            let count: fn(&mut ActivityMinute) -> &mut u64 = match run.outcome {
                JobOutcome::Succeeded => |m| &mut m.succeeded,
                JobOutcome::Retried => |m| &mut m.retried,
                JobOutcome::Failed => |m| &mut m.failed,
                JobOutcome::Cancelled => |m| &mut m.cancelled,
                JobOutcome::Snoozed => |m| &mut m.snoozed,
                JobOutcome::Released | JobOutcome::Waiting | JobOutcome::LeaseLost => continue,
            };
            let minute = minutes.entry(ended, &run.job.queue);
            *count(minute) += 1;
            minute.duration.record(run.duration);
            if minute_number(claimed) == minute_number(ended) {
                minute.wait.record(wait);
            } else {
                minutes.entry(claimed, &run.job.queue).wait.record(wait);
            }
        }
        if minutes.len > MOST_ENTRIES {
            minutes.bound();
        }
    }

    /// Takes what was added up so far, by minute and queue.
    fn take(&self) -> Vec<ActivityMinute> {
        let taken = {
            let mut minutes = self.minutes.lock().unwrap_or_else(PoisonError::into_inner);
            std::mem::take(&mut *minutes)
        };
        let mut activity: Vec<ActivityMinute> = taken.by_queue.into_values().flatten().collect();
        activity.sort_by(|a, b| (a.minute, &a.queue).cmp(&(b.minute, &b.queue)));
        activity
    }

    /// Puts back what a send did not deliver, added to what came meanwhile.
    fn give_back(&self, activity: Vec<ActivityMinute>) {
        let mut minutes = self.minutes.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in activity {
            minutes.entry(entry.minute, &entry.queue).add(&entry);
        }
        minutes.bound();
    }

    /// Sends what was added up; on a failure keeps it for the next send.
    pub(crate) async fn send(&self, store: &dyn JobStore) {
        let activity = self.take();
        if activity.is_empty() {
            return;
        }
        if let Err(error) = store.activity_record(activity.clone()).await {
            if error.is_transient() {
                tracing::debug!(error = %error, "sending the worker's activity failed; it goes with the next heartbeat");
                self.give_back(activity);
            } else {
                tracing::warn!(error = %error, "the store refused the worker's activity; it is dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{TimeZone, Timelike};
    use drover_core::{JobId, JobKind, ListActivity, ManualClock, NewJob, StoreConfig};
    use drover_store_memory::MemoryStore;

    use super::*;

    fn at(minute: u32, second: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 1, 1, 10, minute, second)
            .unwrap()
    }

    /// A job of queue `queue` enqueued 3 ms before its claim at `claimed`.
    fn job(queue: &str, claimed: DateTime<Utc>) -> Job {
        let enqueued = claimed - chrono::TimeDelta::milliseconds(3);
        let mut job = NewJob::new(JobKind::parse("k").unwrap(), serde_json::json!({}))
            .into_job(JobId::new_v7(), enqueued);
        job.queue = QueueName::parse(queue).unwrap();
        job.attempted_at = Some(claimed);
        job
    }

    fn run(job: &Job, outcome: JobOutcome, duration: Duration) -> EndedRun<'_> {
        EndedRun {
            job,
            outcome,
            duration,
        }
    }

    #[test]
    fn runs_count_in_the_minutes_of_their_claim_and_of_their_end() {
        let tally = ActivityTally::default();
        let mail = job("mail", at(0, 50));
        let reports = job("reports", at(0, 0));
        let mut unclaimed = job("mail", at(0, 0));
        unclaimed.attempted_at = None;
        tally.ended(&[
            // Claimed at 10:00:50, ran 20 s: its end in 10:01, its wait in 10:00.
            run(&mail, JobOutcome::Succeeded, Duration::from_secs(20)),
            run(&mail, JobOutcome::Failed, Duration::from_secs(1)),
            run(&mail, JobOutcome::LeaseLost, Duration::from_secs(1)),
            run(&mail, JobOutcome::Released, Duration::from_secs(1)),
            run(&reports, JobOutcome::Retried, Duration::ZERO),
            run(&unclaimed, JobOutcome::Succeeded, Duration::ZERO),
        ]);

        let sent = tally.take();
        let summary: Vec<(u32, &str, u64, u64, u64)> = sent
            .iter()
            .map(|m| {
                (
                    m.minute.minute(),
                    m.queue.as_str(),
                    m.ended(),
                    m.wait.count(),
                    m.duration.count(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (0, "mail", 1, 2, 1),
                (0, "reports", 1, 1, 1),
                (1, "mail", 1, 0, 1)
            ]
        );
        assert_eq!(
            (sent[0].failed, sent[2].succeeded, sent[1].retried),
            (1, 1, 1)
        );
        assert_eq!(
            sent[0].wait.sum_ms, 6,
            "3 ms from the enqueue to the claim, twice"
        );
        assert!(tally.take().is_empty(), "taken once");
    }

    #[test]
    fn what_a_send_did_not_deliver_is_added_to_what_came_meanwhile() {
        let tally = ActivityTally::default();
        let mail = job("mail", at(0, 0));
        tally.ended(&[run(&mail, JobOutcome::Succeeded, Duration::ZERO)]);
        let undelivered = tally.take();
        tally.ended(&[run(&mail, JobOutcome::Succeeded, Duration::ZERO)]);
        tally.give_back(undelivered);
        let kept = tally.take();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].succeeded, 2);
    }

    #[test]
    fn the_tally_keeps_at_most_its_bound_dropping_the_oldest_minutes() {
        let tally = ActivityTally::default();
        let start = at(0, 0);
        for i in 0..=MOST_ENTRIES as i64 {
            let claimed = start + chrono::TimeDelta::minutes(i);
            let queue = if i % 2 == 0 { "mail" } else { "reports" };
            tally.ended(&[run(
                &job(queue, claimed),
                JobOutcome::Succeeded,
                Duration::ZERO,
            )]);
        }
        let kept = tally.take();
        assert_eq!(kept.len(), MOST_ENTRIES);
        assert_eq!(kept[0].minute, start + chrono::TimeDelta::minutes(1));
        // A late run of an older minute goes in order.
        tally.ended(&[run(
            &job("mail", at(5, 0)),
            JobOutcome::Failed,
            Duration::ZERO,
        )]);
        tally.ended(&[run(
            &job("mail", at(3, 0)),
            JobOutcome::Failed,
            Duration::ZERO,
        )]);
        tally.ended(&[run(
            &job("mail", at(5, 1)),
            JobOutcome::Failed,
            Duration::ZERO,
        )]);
        let minutes: Vec<(u32, u64)> = tally
            .take()
            .iter()
            .map(|m| (m.minute.minute(), m.failed))
            .collect();
        assert_eq!(minutes, vec![(3, 1), (5, 2)]);
    }

    #[tokio::test]
    async fn a_send_adds_to_what_the_store_has_and_is_not_kept() {
        let clock = ManualClock::new(at(0, 30));
        let store = MemoryStore::with_clock(StoreConfig::default(), Arc::new(clock));
        let tally = ActivityTally::default();
        let mail = job("mail", at(0, 10));
        tally.ended(&[run(&mail, JobOutcome::Succeeded, Duration::from_millis(40))]);
        tally.send(&store).await;
        tally.ended(&[run(&mail, JobOutcome::Succeeded, Duration::from_millis(40))]);
        tally.send(&store).await;
        let stored = store
            .activity_list(ListActivity { since: at(0, 0) })
            .await
            .unwrap();
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].succeeded, 2);
        assert_eq!(stored[0].duration.count(), 2);
        assert!(tally.take().is_empty(), "delivered, so not kept");
    }
}

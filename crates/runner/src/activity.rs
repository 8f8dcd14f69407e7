//! The runs this worker ended, added up per minute and queue (docs/design.md, "Activity")
//! until its next registration heartbeat sends them ([`JobStore::activity_record`]). A run
//! costs a lock and a map update here; the store sees one write per heartbeat.
//!
//! Minutes are the store's clock: a job's wait counts in the minute of its claim, its end in
//! the minute of its claim plus its run time. What a failed send could not deliver is kept
//! for the next one, up to [`MOST_ENTRIES`] minutes and queues (the oldest go first).

use std::collections::BTreeMap;
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
    minutes: Mutex<BTreeMap<(DateTime<Utc>, QueueName), ActivityMinute>>,
}

impl ActivityTally {
    /// Counts a job's wait in the queue, from runnable to its claim.
    pub(crate) fn waited(&self, job: &Job, wait: Duration) {
        if let Some(claimed) = job.attempted_at {
            self.update(claimed, &job.queue, |minute| minute.wait.record(wait));
        }
    }

    /// Counts a run's end and its handler's run time; outcomes that end no attempt (released,
    /// waiting, lease lost) are not counted.
    pub(crate) fn ended(&self, job: &Job, outcome: JobOutcome, duration: Duration) {
        let Some(claimed) = job.attempted_at else {
            return;
        };
        let ended = claimed + chrono::TimeDelta::from_std(duration).unwrap_or_default();
        self.update(ended, &job.queue, |minute| {
            let count = match outcome {
                JobOutcome::Succeeded => &mut minute.succeeded,
                JobOutcome::Retried => &mut minute.retried,
                JobOutcome::Failed => &mut minute.failed,
                JobOutcome::Cancelled => &mut minute.cancelled,
                JobOutcome::Snoozed => &mut minute.snoozed,
                JobOutcome::Released | JobOutcome::Waiting | JobOutcome::LeaseLost => return,
            };
            *count += 1;
            minute.duration.record(duration);
        });
    }

    fn update(
        &self,
        at: DateTime<Utc>,
        queue: &QueueName,
        change: impl FnOnce(&mut ActivityMinute),
    ) {
        let mut minutes = self.minutes.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (drover_core::activity::minute_of(at), queue.clone());
        let minute = minutes
            .entry(key)
            .or_insert_with(|| ActivityMinute::new(at, queue.clone()));
        change(minute);
        if minutes.len() > MOST_ENTRIES {
            minutes.pop_first();
        }
    }

    /// Takes what was added up so far.
    fn take(&self) -> Vec<ActivityMinute> {
        let mut minutes = self.minutes.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut *minutes).into_values().collect()
    }

    /// Puts back what a send did not deliver, added to what came meanwhile.
    fn give_back(&self, activity: Vec<ActivityMinute>) {
        let mut minutes = self.minutes.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in activity {
            minutes
                .entry((entry.minute, entry.queue.clone()))
                .and_modify(|kept| kept.add(&entry))
                .or_insert(entry);
        }
        while minutes.len() > MOST_ENTRIES {
            minutes.pop_first();
        }
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

    use chrono::TimeZone;
    use drover_core::{JobId, JobKind, ListActivity, ManualClock, NewJob, StoreConfig};
    use drover_store_memory::MemoryStore;

    use super::*;

    fn at(minute: u32, second: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 1, 1, 10, minute, second)
            .unwrap()
    }

    /// A job of queue `queue` claimed at `claimed`.
    fn job(queue: &str, claimed: DateTime<Utc>) -> Job {
        let mut job = NewJob::new(JobKind::parse("k").unwrap(), serde_json::json!({}))
            .into_job(JobId::new_v7(), claimed);
        job.queue = QueueName::parse(queue).unwrap();
        job.attempted_at = Some(claimed);
        job
    }

    #[test]
    fn runs_count_in_the_minutes_of_their_claim_and_of_their_end() {
        let tally = ActivityTally::default();
        let mail = job("mail", at(0, 50));
        tally.waited(&mail, Duration::from_millis(3));
        // Claimed at 10:00:50, ran 20 s: ended in 10:01.
        tally.ended(&mail, JobOutcome::Succeeded, Duration::from_secs(20));
        tally.ended(&mail, JobOutcome::Failed, Duration::from_secs(1));
        tally.ended(&mail, JobOutcome::LeaseLost, Duration::from_secs(1));
        tally.ended(&mail, JobOutcome::Released, Duration::from_secs(1));
        tally.ended(
            &job("reports", at(0, 0)),
            JobOutcome::Retried,
            Duration::ZERO,
        );
        let mut unclaimed = job("mail", at(0, 0));
        unclaimed.attempted_at = None;
        tally.waited(&unclaimed, Duration::from_secs(1));

        let sent = tally.take();
        let summary: Vec<(u32, &str, u64, u64, u64)> = sent
            .iter()
            .map(|m| {
                use chrono::Timelike;
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
                (0, "mail", 1, 1, 1),
                (0, "reports", 1, 0, 1),
                (1, "mail", 1, 0, 1)
            ]
        );
        assert_eq!(
            (sent[0].failed, sent[2].succeeded, sent[1].retried),
            (1, 1, 1)
        );
        assert!(tally.take().is_empty(), "taken once");
    }

    #[test]
    fn what_a_send_did_not_deliver_is_added_to_what_came_meanwhile() {
        let tally = ActivityTally::default();
        let mail = job("mail", at(0, 0));
        tally.ended(&mail, JobOutcome::Succeeded, Duration::ZERO);
        let undelivered = tally.take();
        tally.ended(&mail, JobOutcome::Succeeded, Duration::ZERO);
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
            tally.ended(&job("mail", claimed), JobOutcome::Succeeded, Duration::ZERO);
        }
        let kept = tally.take();
        assert_eq!(kept.len(), MOST_ENTRIES);
        assert_eq!(kept[0].minute, start + chrono::TimeDelta::minutes(1));
    }

    #[tokio::test]
    async fn a_send_adds_to_what_the_store_has_and_is_not_kept() {
        let clock = ManualClock::new(at(0, 30));
        let store = MemoryStore::with_clock(StoreConfig::default(), Arc::new(clock));
        let tally = ActivityTally::default();
        let mail = job("mail", at(0, 10));
        tally.ended(&mail, JobOutcome::Succeeded, Duration::from_millis(40));
        tally.send(&store).await;
        tally.ended(&mail, JobOutcome::Succeeded, Duration::from_millis(40));
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

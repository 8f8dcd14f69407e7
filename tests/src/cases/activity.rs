//! Activity: what workers send per minute and queue is added up, listed by minute and queue,
//! checked before anything is kept, and kept for the retention only.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use drover_core::activity::minute_of;
use drover_core::{ActivityMinute, Error, JobStore, ListActivity, ACTIVITY_RETENTION};

use super::{queue, unbounded};
use crate::StoreFactory;

fn minute(at: DateTime<Utc>, name: &str, succeeded: u64, waits_ms: &[u64]) -> ActivityMinute {
    let mut minute = ActivityMinute::new(at, queue(name));
    minute.succeeded = succeeded;
    for ms in waits_ms {
        minute.wait.record(Duration::from_millis(*ms));
        minute.duration.record(Duration::from_millis(*ms * 10));
    }
    minute
}

async fn listed(store: &dyn JobStore, since: DateTime<Utc>) -> Vec<(DateTime<Utc>, String, u64)> {
    store
        .activity_list(ListActivity { since })
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.minute, m.queue.to_string(), m.succeeded))
        .collect()
}

/// Two workers' activity for the same minute and queue adds up, histograms bucket by bucket;
/// a list starts at its minute and is ordered by minute and queue.
pub async fn activity_adds_up_per_minute_and_queue(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let now = minute_of(store.now().await.unwrap());
    let before = now - TimeDelta::minutes(1);
    assert!(listed(&*store, before).await.is_empty(), "nothing yet");
    store
        .activity_record(vec![
            minute(now, "mail", 2, &[3, 40]),
            minute(before, "mail", 5, &[]),
            minute(now, "a.reports", 1, &[]),
        ])
        .await
        .unwrap();
    let mut failures = minute(now, "mail", 0, &[3]);
    failures.failed = 4;
    failures.retried = 2;
    failures.cancelled = 1;
    failures.snoozed = 7;
    // The same minute and queue twice in one call adds up too.
    store
        .activity_record(vec![failures, minute(now, "mail", 1, &[])])
        .await
        .unwrap();
    store.activity_record(vec![]).await.unwrap();

    assert_eq!(
        listed(&*store, before).await,
        vec![
            (before, "mail".to_owned(), 5),
            (now, "a.reports".to_owned(), 1),
            (now, "mail".to_owned(), 3),
        ]
    );
    assert_eq!(listed(&*store, now).await.len(), 2, "from `since` on");
    let mail = store
        .activity_list(ListActivity { since: now })
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        (
            mail.failed,
            mail.retried,
            mail.cancelled,
            mail.snoozed,
            mail.ended()
        ),
        (4, 2, 1, 7, 17)
    );
    let mut expected = minute(now, "mail", 0, &[3, 40, 3]);
    expected.queue = mail.queue.clone();
    assert_eq!(mail.wait, expected.wait, "the waits' buckets added");
    assert_eq!(mail.duration, expected.duration);
    assert_eq!(mail.wait.sum_ms, 46);
}

/// A call with one bad entry keeps nothing and names the entry and the field.
pub async fn activity_rejects_bad_entries_keeping_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let now = minute_of(store.now().await.unwrap());
    let mut off_minute = minute(now, "mail", 1, &[]);
    off_minute.minute = now + TimeDelta::seconds(7);
    let mut short = minute(now, "mail", 1, &[]);
    short.duration.counts.truncate(3);
    for (bad, field) in [
        (off_minute, "activity[1].minute"),
        (short, "activity[1].duration.counts"),
    ] {
        let err = store
            .activity_record(vec![minute(now, "mail", 1, &[]), bad])
            .await
            .unwrap_err();
        match err {
            Error::InvalidInput { field: named, .. } => assert_eq!(named, field),
            other => panic!("expected InvalidInput naming {field}, got {other:?}"),
        }
    }
    assert!(
        listed(&*store, now - TimeDelta::minutes(1))
            .await
            .is_empty(),
        "the good entries of refused calls are not kept"
    );
}

/// A minute older than the retention is not kept; one just inside it is.
pub async fn activity_keeps_the_retention_only(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let now = store.now().await.unwrap();
    let retention = TimeDelta::from_std(ACTIVITY_RETENTION).unwrap();
    let too_old = minute_of(now - retention - TimeDelta::minutes(2));
    let kept = minute_of(now - retention + TimeDelta::minutes(5));
    store
        .activity_record(vec![
            minute(too_old, "mail", 1, &[]),
            minute(kept, "mail", 2, &[]),
        ])
        .await
        .unwrap();
    assert_eq!(
        listed(&*store, too_old).await,
        vec![(kept, "mail".to_owned(), 2)]
    );
}

//! When a job's handler started: a claim starts its first `start` jobs at once and claims the
//! rest ahead (leased, `started_at` unset: waiting for a slot); a heartbeat or a finish records
//! the start of a job claimed ahead; the snapshot counts the two apart; and an expired lease of
//! a job that never started gives its attempt back, a bounded number of times in a row.

use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::state::UNSTARTED_RESCUES_MAX;
use drover_core::{
    Finish, FinishItem, FinishReply, HeartbeatItem, HeartbeatJobs, HeartbeatReply, Job, JobState,
    JobStore, ListJobs, RescueExpired, Retry,
};
use serde_json::json;

use super::{
    claim_params, enqueue, expect_invalid, job, kind, limit_key, stale, unbounded, within, LEASE,
};
use crate::StoreFactory;

/// Claims up to `limit` jobs of kind `k` from queue `default`, starting the first `start`.
async fn claim_starting(store: &dyn JobStore, limit: u32, start: u32) -> Vec<Job> {
    let mut params = claim_params(&["k"], limit);
    params.start = start;
    store.jobs_claim(params).await.expect("claim").jobs
}

fn heartbeat(job: &Job, started: Option<Duration>) -> HeartbeatJobs {
    HeartbeatJobs {
        lease: LEASE,
        jobs: vec![HeartbeatItem {
            id: job.id,
            token: job.fencing_token,
            meta: None,
            progress: None,
            started,
        }],
    }
}

fn finish_item(job: &Job, finish: Finish, started: Option<Duration>) -> FinishItem {
    FinishItem {
        parent: None,
        id: job.id,
        token: job.fencing_token,
        finish,
        started,
    }
}

fn rescue(reconciler_kinds: &[&str]) -> RescueExpired {
    RescueExpired {
        reconciler_kinds: reconciler_kinds.iter().map(|k| kind(k)).collect(),
        limit: 100,
    }
}

/// Expects `started_at` between `before - elapsed` and `after - elapsed` (the store's clock
/// read around the call that recorded it).
#[track_caller]
fn expect_started_within(
    job: &Job,
    before: DateTime<Utc>,
    after: DateTime<Utc>,
    elapsed: Duration,
) {
    let elapsed = chrono::Duration::from_std(elapsed).unwrap();
    let started = job.started_at.expect("start recorded");
    assert!(
        started >= before - elapsed && started <= after - elapsed,
        "started_at {started} not within [{before}, {after}] - {elapsed}"
    );
}

/// A claim starts the first `start` jobs in claim order at the claim's time; the others are
/// leased like them but wait for a slot (no `started_at`), and `job_get` and `jobs_list` say so.
pub async fn started_claim_starts_the_first_jobs_and_claims_the_rest_ahead(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(
            enqueue(&*store, job("k", json!(n)).with_priority(n))
                .await
                .id,
        );
    }
    let claimed = claim_starting(&*store, 3, 1).await;
    let claimed_ids: Vec<_> = claimed.iter().map(|j| j.id).collect();
    assert_eq!(claimed_ids, ids[..3], "claim order");
    assert_eq!(
        claimed[0].started_at, claimed[0].attempted_at,
        "started at the claim"
    );
    assert!(!claimed[0].is_waiting_for_slot());
    for ahead in &claimed[1..] {
        assert_eq!((ahead.state, ahead.attempt), (JobState::Running, 1));
        assert!(ahead.lease_expires_at.is_some() && ahead.lease_owner.is_some());
        assert!(ahead.started_at.is_none() && ahead.is_waiting_for_slot());
    }
    let stored = store.job_get(ids[1]).await.unwrap();
    assert!(stored.is_waiting_for_slot(), "job_get shows it waiting");
    let listed = store
        .jobs_list(ListJobs {
            state: Some(JobState::Running),
            ..ListJobs::default()
        })
        .await
        .unwrap()
        .jobs;
    let waiting: Vec<_> = listed
        .iter()
        .filter(|j| j.is_waiting_for_slot())
        .map(|j| j.id)
        .collect();
    assert_eq!(listed.len(), 3);
    assert_eq!(
        waiting,
        vec![ids[2], ids[1]],
        "the list shows which wait (newest first)"
    );
    // start 0 claims every job ahead; start = limit starts every job.
    let last = claim_starting(&*store, 1, 0).await;
    assert_eq!(last.len(), 1);
    assert!(last[0].is_waiting_for_slot());
    for n in 0..2 {
        enqueue(&*store, job("k", json!(n))).await;
    }
    let all = claim_starting(&*store, 5, 5).await;
    assert_eq!(all.len(), 2, "fewer jobs than start: all start");
    assert!(all.iter().all(|j| j.started_at == j.attempted_at));
}

/// Under a limit policy (the claim admits jobs one by one) the first `start` jobs in claim
/// order start too, counting the jobs before the first limited one, which are claimed without
/// admission.
pub async fn started_claim_under_a_limit_policy_starts_the_first_jobs(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let policy = drover_core::LimitPolicy::new(limit_key("kind:k"), Some(10), None).unwrap();
    store.limit_set(policy).await.unwrap();
    let free = enqueue(&*store, job("free", json!(0)).with_priority(0)).await;
    let mut limited = Vec::new();
    for n in 1..4 {
        limited.push(
            enqueue(&*store, job("k", json!(n)).with_priority(n))
                .await
                .id,
        );
    }
    let mut params = claim_params(&["free", "k"], 3);
    params.start = 2;
    let claimed = store.jobs_claim(params).await.unwrap().jobs;
    let ids: Vec<_> = claimed.iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![free.id, limited[0], limited[1]], "claim order");
    let started: Vec<bool> = claimed.iter().map(|j| j.started_at.is_some()).collect();
    assert_eq!(started, vec![true, true, false]);
    let stored = store.job_get(limited[1]).await.unwrap();
    assert!(stored.is_waiting_for_slot());
}

/// `start` above `limit` is refused, naming the field.
pub async fn started_claim_refuses_a_start_above_the_limit(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    enqueue(&*store, job("k", json!(1))).await;
    let mut params = claim_params(&["k"], 2);
    params.start = 3;
    expect_invalid(store.jobs_claim(params).await, "start");
    let again = claim_starting(&*store, 1, 1).await;
    assert_eq!(again.len(), 1, "nothing was claimed by the refused claim");
}

/// A heartbeat records the start of a job claimed ahead as the store's now minus the time the
/// worker measured, never before the claim; the first start recorded stays; a stale token
/// records nothing.
pub async fn started_heartbeat_records_the_start_of_a_job_claimed_ahead(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    for n in 0..2 {
        enqueue(&*store, job("k", json!(n))).await;
    }
    let claimed = claim_starting(&*store, 2, 0).await;
    let (first, second) = (&claimed[0], &claimed[1]);
    h.advance(Duration::from_secs(10)).await;
    let elapsed = Duration::from_secs(3);
    let mut stale_item = heartbeat(first, Some(elapsed));
    stale_item.jobs[0].token = stale(first.fencing_token);
    let replies = store.jobs_heartbeat(stale_item).await.unwrap();
    assert!(matches!(replies[0], HeartbeatReply::LeaseLost { .. }));
    assert!(store.job_get(first.id).await.unwrap().is_waiting_for_slot());

    let before = store.now().await.unwrap();
    let replies = store
        .jobs_heartbeat(heartbeat(first, Some(elapsed)))
        .await
        .unwrap();
    let after = store.now().await.unwrap();
    assert!(matches!(replies[0], HeartbeatReply::Extended { .. }));
    let recorded = store.job_get(first.id).await.unwrap();
    expect_started_within(&recorded, before, after, elapsed);
    assert!(!recorded.is_waiting_for_slot());
    h.advance(Duration::from_secs(1)).await;
    store
        .jobs_heartbeat(heartbeat(first, Some(Duration::ZERO)))
        .await
        .unwrap();
    let kept = store.job_get(first.id).await.unwrap();
    assert_eq!(
        kept.started_at.unwrap() - kept.attempted_at.unwrap(),
        recorded.started_at.unwrap() - recorded.attempted_at.unwrap(),
        "the first start recorded stays"
    );

    // A worker whose clock says the handler started before the claim: the claim's time.
    store
        .jobs_heartbeat(heartbeat(second, Some(Duration::from_secs(3600))))
        .await
        .unwrap();
    let clamped = store.job_get(second.id).await.unwrap();
    assert_eq!(clamped.started_at, clamped.attempted_at);
}

/// A finish records the start of a job claimed ahead with its outcome, for a success alone
/// and in a batch of mixed outcomes; a job released without starting keeps no start.
pub async fn started_finish_records_the_start_with_the_outcome(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    for n in 0..3 {
        enqueue(&*store, job("k", json!(n)).with_max_attempts(3)).await;
    }
    let claimed = claim_starting(&*store, 3, 0).await;
    h.advance(Duration::from_secs(10)).await;
    let elapsed = Duration::from_secs(2);

    let before = store.now().await.unwrap();
    let replies = store
        .jobs_finish(vec![finish_item(
            &claimed[0],
            Finish::Succeeded { result: None },
            Some(elapsed),
        )])
        .await
        .unwrap();
    let after = store.now().await.unwrap();
    assert!(matches!(
        replies[0],
        FinishReply::Recorded {
            to: JobState::Succeeded,
            ..
        }
    ));
    let succeeded = store.job_get(claimed[0].id).await.unwrap();
    expect_started_within(&succeeded, before, after, elapsed);

    let before = store.now().await.unwrap();
    let failure = Finish::Failed {
        message: "boom".into(),
        retry: Retry::After(Duration::from_secs(60)),
    };
    let replies = store
        .jobs_finish(vec![
            finish_item(&claimed[1], failure, Some(elapsed)),
            finish_item(&claimed[2], Finish::Released, None),
        ])
        .await
        .unwrap();
    let after = store.now().await.unwrap();
    assert!(replies
        .iter()
        .all(|r| matches!(r, FinishReply::Recorded { .. })));
    let retried = store.job_get(claimed[1].id).await.unwrap();
    assert_eq!((retried.state, retried.attempt), (JobState::Queued, 1));
    expect_started_within(&retried, before, after, elapsed);
    let released = store.job_get(claimed[2].id).await.unwrap();
    assert_eq!((released.state, released.attempt), (JobState::Queued, 0));
    assert!(released.started_at.is_none(), "it never started");
}

/// The snapshot counts running jobs whose handler started (`running`) apart from those
/// claimed ahead and waiting for a slot (`claimed`); `counts[running]` holds both.
pub async fn started_snapshot_counts_claimed_ahead_apart_from_running(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    for n in 0..4 {
        enqueue(&*store, job("k", json!(n))).await;
    }
    let claimed = claim_starting(&*store, 3, 1).await;
    let queue_of = |snapshot: drover_core::Snapshot| {
        snapshot
            .queues
            .into_iter()
            .find(|q| q.queue.as_str() == "default")
            .expect("queue default")
    };
    let q = queue_of(store.queue_snapshot().await.unwrap());
    assert_eq!((q.running, q.claimed), (1, 2));
    assert_eq!(q.count(JobState::Running), 3);
    assert_eq!((q.count(JobState::Queued), q.ready), (1, 1));
    store
        .jobs_heartbeat(heartbeat(&claimed[1], Some(Duration::ZERO)))
        .await
        .unwrap();
    store
        .jobs_finish(vec![finish_item(
            &claimed[2],
            Finish::Succeeded { result: None },
            Some(Duration::ZERO),
        )])
        .await
        .unwrap();
    let q = queue_of(store.queue_snapshot().await.unwrap());
    assert_eq!((q.running, q.claimed), (2, 0));
    assert_eq!(q.count(JobState::Running), 2);
}

/// An expired lease of a job that never started (claimed ahead by a worker that stopped)
/// gives the attempt back: a `max_attempts 1` job is queued again, not failed, with a note
/// that the attempt was not spent, and runs again; a started job spends its attempt.
pub async fn rescue_of_a_job_that_never_started_gives_the_attempt_back(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let waiting = enqueue(&*store, job("k", json!(1)).with_max_attempts(1)).await;
    let started = enqueue(&*store, job("k", json!(2)).with_max_attempts(1)).await;
    let claimed = claim_starting(&*store, 2, 0).await;
    assert_eq!(claimed.len(), 2);
    // The second job's handler started; the worker recorded it, then stopped.
    store
        .jobs_heartbeat(heartbeat(&claimed[1], Some(Duration::ZERO)))
        .await
        .unwrap();
    h.advance(LEASE + Duration::from_secs(1)).await;
    let mut rescued = store.jobs_rescue_expired(rescue(&["k"])).await.unwrap();
    rescued.sort_by_key(|r| r.id);
    assert_eq!(rescued.len(), 2);
    assert_eq!(
        (rescued[0].id, rescued[0].to, rescued[0].attempt_spent),
        (waiting.id, JobState::Queued, false),
        "never started: queued again (not reconciled, nothing ran), attempt given back"
    );
    assert_eq!(
        (rescued[1].id, rescued[1].to, rescued[1].attempt_spent),
        (started.id, JobState::Reconciling, true),
        "started: the usual rescue"
    );
    let requeued = store.job_get(waiting.id).await.unwrap();
    assert_eq!((requeued.state, requeued.attempt), (JobState::Queued, 0));
    assert!(requeued.lease_owner.is_none() && requeued.lease_expires_at.is_none());
    assert!(requeued.finished_at.is_none() && requeued.started_at.is_none());
    let note = requeued.errors.last().expect("a note in the job's errors");
    assert_eq!(note.attempt, 1);
    assert!(
        note.message.contains("before the handler started"),
        "{}",
        note.message
    );
    assert!(note.message.contains("not spent"), "{}", note.message);
    let again = claim_starting(&*store, 1, 1).await;
    assert_eq!((again[0].id, again[0].attempt), (waiting.id, 1));
}

/// A job whose handler never started gets its attempt back at most `UNSTARTED_RESCUES_MAX`
/// times in a row; the next expired lease of that attempt spends it (so a job that kills its
/// worker before its start is recorded cannot crash workers forever).
pub async fn rescue_gives_an_attempt_back_a_bounded_number_of_times(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let created = enqueue(&*store, job("k", json!(1)).with_max_attempts(1)).await;
    for _ in 0..UNSTARTED_RESCUES_MAX {
        assert_eq!(claim_starting(&*store, 1, 0).await.len(), 1);
        h.advance(LEASE + Duration::from_secs(1)).await;
        let rescued = store.jobs_rescue_expired(rescue(&[])).await.unwrap();
        assert_eq!(
            (rescued[0].to, rescued[0].attempt_spent),
            (JobState::Queued, false)
        );
    }
    assert_eq!(claim_starting(&*store, 1, 0).await.len(), 1);
    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = within("rescue", store.jobs_rescue_expired(rescue(&[])))
        .await
        .unwrap();
    assert_eq!(
        (rescued[0].to, rescued[0].attempt_spent),
        (JobState::Failed, true)
    );
    let failed = store.job_get(created.id).await.unwrap();
    assert_eq!((failed.state, failed.attempt), (JobState::Failed, 1));
    assert_eq!(failed.errors.len(), UNSTARTED_RESCUES_MAX + 1);
    assert!(failed
        .errors
        .last()
        .unwrap()
        .message
        .contains("lease expired during"));
}

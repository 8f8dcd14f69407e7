//! The contract cases, grouped by area. Each is a `pub async fn(&dyn StoreFactory)`, re-exported
//! flat so [`crate::contract_suite!`] can name it; names start with their area.
//!
//! Cases never sleep: they move the store's clock with [`crate::Harness::advance`] and await
//! events with a timeout. Times are compared as differences of stored instants (or bracketed by
//! the store's `now()` before and after a call), because PostgreSQL's clock keeps running while
//! a case runs.

mod activity;
mod audit;
mod bulk;
mod cancel;
mod claim;
mod delete;
mod enqueue;
mod events;
mod lease;
mod limits;
mod list;
mod outcome;
mod prune;
mod queues;
mod reconcile;
mod requeue;
mod rescue;
mod retry;
mod schedules;
mod snapshot;
mod started;
mod stored;
mod trace;
mod transitions;
mod workers;
mod workflows;

pub use activity::*;
pub use audit::*;
pub use bulk::*;
pub use cancel::*;
pub use claim::*;
pub use delete::*;
pub use enqueue::*;
pub use events::*;
pub use lease::*;
pub use limits::*;
pub use list::*;
pub use outcome::*;
pub use prune::*;
pub use queues::*;
pub use reconcile::*;
pub use requeue::*;
pub use rescue::*;
pub use retry::*;
pub use schedules::*;
pub use snapshot::*;
pub use started::*;
pub use stored::*;
pub use trace::*;
pub use transitions::*;
pub use workers::*;
pub use workflows::*;

use std::fmt::Debug;
use std::time::Duration;

use drover_core::{
    ClaimJobs, EnqueueStatus, Error, FencingToken, Finish, Job, JobKind, JobState, JobStore,
    LimitKey, ListJobs, NewJob, QueueName, Quota, Result, StoreConfig, TenantId, WorkerId,
};
use serde_json::Value;

/// The lease cases claim with unless they test leases: 30 s.
pub const LEASE: Duration = Duration::from_secs(30);

/// A job of `kind` with `args` and defaults elsewhere.
pub fn job(kind: &str, args: Value) -> NewJob {
    NewJob::new(JobKind::parse(kind).expect("valid kind"), args)
}

/// The default configuration with quotas off, for cases that do not test quotas.
pub fn unbounded() -> StoreConfig {
    StoreConfig {
        quotas: drover_core::Quotas::unbounded(),
        ..StoreConfig::default()
    }
}

/// A configuration with the given quotas (`None`: unbounded).
pub fn with_quotas(max_pending: Option<u64>, max_tenant_pending: Option<u64>) -> StoreConfig {
    StoreConfig {
        quotas: drover_core::Quotas {
            max_pending,
            max_tenant_pending,
        },
        ..StoreConfig::default()
    }
}

/// A kind name.
pub fn kind(name: &str) -> JobKind {
    JobKind::parse(name).expect("valid kind")
}

/// A queue name.
pub fn queue(name: &str) -> QueueName {
    QueueName::parse(name).expect("valid queue")
}

/// A tenant.
pub fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).expect("valid tenant")
}

/// A worker id.
pub fn worker(name: &str) -> WorkerId {
    WorkerId::parse(name).expect("valid worker id")
}

/// A limit key.
pub fn limit_key(name: &str) -> LimitKey {
    LimitKey::parse(name).expect("valid limit key")
}

/// Claim parameters: worker `w1`, queue `default`, `kinds`, `limit` (every job claimed starts at
/// once), lease [`LEASE`].
pub fn claim_params(kinds: &[&str], limit: u32) -> ClaimJobs {
    ClaimJobs {
        worker: worker("w1"),
        queues: vec![QueueName::default_queue()],
        kinds: kinds.iter().map(|k| kind(k)).collect(),
        limit,
        start: limit,
        lease: LEASE,
    }
}

/// Claims up to `limit` jobs of `kinds` from queue `default`.
pub async fn claim(store: &dyn JobStore, kinds: &[&str], limit: u32) -> Vec<Job> {
    store
        .jobs_claim(claim_params(kinds, limit))
        .await
        .expect("claim")
        .jobs
}

/// Claims up to `limit` jobs of `kinds` from `queues`.
pub async fn claim_from(
    store: &dyn JobStore,
    queues: &[&str],
    kinds: &[&str],
    limit: u32,
) -> Vec<Job> {
    let mut params = claim_params(kinds, limit);
    params.queues = queues.iter().map(|q| queue(q)).collect();
    store.jobs_claim(params).await.expect("claim").jobs
}

/// Enqueues one job and expects it to be created.
pub async fn enqueue(store: &dyn JobStore, new: NewJob) -> Job {
    let answer = store.job_enqueue(new).await.expect("enqueue");
    assert_eq!(answer.status, EnqueueStatus::Created, "expected a new job");
    answer.job
}

/// Enqueues one job and claims it (its kind must have no other ready job in its queue).
pub async fn start(store: &dyn JobStore, new: NewJob) -> Job {
    let queue_name = new.queue.as_str().to_owned();
    let kind_name = new.kind.as_str().to_owned();
    let created = enqueue(store, new).await;
    let claimed = claim_from(store, &[&queue_name], &[&kind_name], 1).await;
    assert_eq!(claimed.len(), 1, "the new job is claimable");
    assert_eq!(claimed[0].id, created.id, "the claim took the new job");
    claimed.into_iter().next().expect("one job")
}

/// Records an outcome for a running job and expects it to be accepted.
pub async fn finish(store: &dyn JobStore, job: &Job, outcome: Finish) -> JobState {
    store
        .job_finish(job.id, job.fencing_token, outcome)
        .await
        .expect("finish accepted")
}

/// Completes a running job without a result.
pub async fn complete(store: &dyn JobStore, job: &Job) {
    let to = finish(store, job, Finish::Succeeded { result: None }).await;
    assert_eq!(to, JobState::Succeeded);
}

/// A job in state `failed` (enqueued with one attempt, claimed, failed).
pub async fn failed_job(store: &dyn JobStore, new: NewJob) -> Job {
    let running = start(store, new.with_max_attempts(1)).await;
    let to = finish(
        store,
        &running,
        Finish::Failed {
            message: "boom".into(),
            retry: drover_core::Retry::After(Duration::ZERO),
        },
    )
    .await;
    assert_eq!(to, JobState::Failed);
    store.job_get(running.id).await.expect("get")
}

/// Every job of the store (all pages).
pub async fn all_jobs(store: &dyn JobStore) -> Vec<Job> {
    all_pages(
        store,
        ListJobs {
            limit: 1000,
            ..ListJobs::default()
        },
    )
    .await
}

/// Every job `query` selects, following its cursor page by page from the first (the query's
/// own `before` is the start); panics if a page's cursor repeats the one it was asked with.
pub async fn all_pages(store: &dyn JobStore, mut query: ListJobs) -> Vec<Job> {
    let mut out = Vec::new();
    loop {
        let page = store.jobs_list(query.clone()).await.expect("list");
        out.extend(page.jobs);
        match page.next {
            Some(next) => {
                assert_ne!(Some(next), query.before, "the cursor moves on");
                query.before = Some(next);
            }
            None => return out,
        }
    }
}

/// A token one below `token`: stale for any job claimed at least once.
pub fn stale(token: FencingToken) -> FencingToken {
    FencingToken(token.0 - 1)
}

/// Expects `InvalidInput` naming exactly `field`.
#[track_caller]
pub fn expect_invalid<T: Debug>(result: Result<T>, field: &str) {
    match result {
        Err(Error::InvalidInput { field: got, .. }) => {
            assert_eq!(got, field, "InvalidInput names the field")
        }
        other => panic!("expected InvalidInput for {field}, got {other:?}"),
    }
}

/// Expects `Conflict` with exactly `reason` and `field`, naming the job `existing`: the same
/// words from every store.
#[track_caller]
pub fn expect_conflict<T: Debug>(
    result: Result<T>,
    reason: &str,
    field: Option<&str>,
    existing: Option<drover_core::JobId>,
) {
    match result {
        Err(Error::Conflict {
            reason: got_reason,
            existing: got_existing,
            field: got_field,
        }) => {
            assert_eq!(got_reason, reason, "the conflict's reason");
            assert_eq!(got_field.as_deref(), field, "the conflict's field");
            assert_eq!(got_existing, existing, "the conflict's existing job");
        }
        other => panic!("expected Conflict ({reason}), got {other:?}"),
    }
}

/// The reason of a `Conflict` over an idempotency key reused with another request.
pub const IDEMPOTENCY_REUSED: &str = "idempotency key was already used with a different request";

/// The reason of a `Conflict` over an idempotency key stored without a request hash.
pub const IDEMPOTENCY_UNVERIFIABLE: &str =
    "idempotency key was stored without a request hash, so a replay cannot be verified; use a new key";

/// Expects `NotFound`.
#[track_caller]
pub fn expect_not_found<T: Debug>(result: Result<T>) {
    match result {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
}

/// Expects `LeaseLost`.
#[track_caller]
pub fn expect_lease_lost<T: Debug>(result: Result<T>) {
    match result {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("expected LeaseLost, got {other:?}"),
    }
}

/// Expects `QuotaExceeded` by exactly `quota`, with `current` pending jobs counted against its
/// bound `max`.
#[track_caller]
pub fn expect_quota_exceeded<T: Debug>(result: Result<T>, quota: Quota, current: u64, max: u64) {
    match result {
        Err(Error::QuotaExceeded {
            quota: got,
            current: got_current,
            max: got_max,
        }) => assert_eq!((got, got_current, got_max), (quota, current, max)),
        other => panic!("expected QuotaExceeded ({quota:?}, {current}/{max}), got {other:?}"),
    }
}

/// Expects `InvalidTransition` from `from`.
#[track_caller]
pub fn expect_invalid_transition<T: Debug>(result: Result<T>, from: JobState) {
    match result {
        Err(Error::InvalidTransition { from: got, .. }) => assert_eq!(got, from),
        other => panic!("expected InvalidTransition from {from}, got {other:?}"),
    }
}

/// Awaits `future` for at most 30 s (a stuck case fails instead of hanging CI).
pub async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(30), future).await {
        Ok(out) => out,
        Err(_) => panic!("timed out: {what}"),
    }
}

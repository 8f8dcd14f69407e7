//! Transitions outside the worker hot path, computed by core's `state::apply` itself inside a
//! transaction (lock the rows, apply, write back with jobs_write.sql), so they cannot drift from
//! the table of docs/design.md section 3: cancel, operator retry and requeue, rescue of expired
//! leases and the reconciler's verdict; the operator delete, decided by core's `check_delete`.
//! Plus the reconcile claim and prune, which are single statements.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use drover_core::{
    apply, check_delete, CancelEffect, CancelOutcome, ClaimReconciling, DeleteLinks, Error, Event,
    FencingToken, Job, JobId, JobKind, JobState, PruneJobs, Quota, RequeueOutcome, RescueExpired,
    Rescued, Resolution, StoreConfig, Transition,
};
use serde_json::Value;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::enqueue::{lock_quotas, quota_lock_keys};
use crate::error::SqlxResultExt;
use crate::propagate::{ended, propagate};
use crate::records::{into_jobs, micros, JobRecord};
use crate::sql;
use crate::transaction::{retried, settle};

/// A job (locked FOR UPDATE by job_lock.sql) with the database clock of its transaction.
#[derive(sqlx::FromRow)]
pub(crate) struct LockedJob {
    #[sqlx(flatten)]
    pub(crate) job: JobRecord,
    pub(crate) db_now: DateTime<Utc>,
}

/// Locks one job; `NotFound` when it does not exist.
pub(crate) async fn lock_job(
    conn: &mut PgConnection,
    id: JobId,
) -> Result<(Job, DateTime<Utc>), Error> {
    fetch_job(conn, id, sql::JOB_LOCK).await
}

/// Reads one job without locking it, with the database clock; `NotFound` when it does not exist.
pub(crate) async fn read_job(
    conn: &mut PgConnection,
    id: JobId,
) -> Result<(Job, DateTime<Utc>), Error> {
    fetch_job(conn, id, sql::JOB_READ).await
}

/// One job by `statement` (job_lock.sql or job_read.sql), with the database clock.
async fn fetch_job(
    conn: &mut PgConnection,
    id: JobId,
    statement: &'static str,
) -> Result<(Job, DateTime<Utc>), Error> {
    let row = sqlx::query_as::<_, LockedJob>(statement)
        .bind(id.as_uuid())
        .fetch_optional(conn)
        .await
        .store_err()?
        .ok_or_else(|| Error::job_not_found(id))?;
    Ok((row.job.into_job()?, row.db_now))
}

/// Writes back jobs changed by `apply` (jobs_write.sql); returns them as stored.
pub(crate) async fn write_jobs(
    conn: &mut PgConnection,
    jobs: &[Job],
    notify_cancel: bool,
) -> Result<Vec<Job>, Error> {
    let len = jobs.len();
    let mut ids = Vec::with_capacity(len);
    let mut states = Vec::with_capacity(len);
    let mut attempts = Vec::with_capacity(len);
    let mut tokens = Vec::with_capacity(len);
    let mut owners: Vec<Option<&str>> = Vec::with_capacity(len);
    let mut expiries = Vec::with_capacity(len);
    let mut cancels = Vec::with_capacity(len);
    let mut results: Vec<Option<&Value>> = Vec::with_capacity(len);
    let mut errors: Vec<Value> = Vec::with_capacity(len);
    let mut progress: Vec<Option<&Value>> = Vec::with_capacity(len);
    let mut run_ats = Vec::with_capacity(len);
    let mut finished = Vec::with_capacity(len);
    let mut metas: Vec<&Value> = Vec::with_capacity(len);
    let mut attempted = Vec::with_capacity(len);
    let mut started = Vec::with_capacity(len);
    let mut pending = Vec::with_capacity(len);
    let mut children = Vec::with_capacity(len);
    for job in jobs {
        ids.push(job.id.as_uuid());
        states.push(job.state.as_str());
        attempts.push(job.attempt);
        tokens.push(job.fencing_token.0);
        owners.push(job.lease_owner.as_ref().map(|w| w.as_str()));
        expiries.push(job.lease_expires_at);
        cancels.push(job.cancel_requested);
        results.push(job.result.as_ref());
        errors.push(
            serde_json::to_value(&job.errors)
                .map_err(|_| Error::fatal("could not encode a job's error list"))?,
        );
        progress.push(job.progress.as_ref());
        run_ats.push(job.run_at);
        finished.push(job.finished_at);
        metas.push(&job.meta);
        attempted.push(job.attempted_at);
        started.push(job.started_at);
        pending.push(job.pending_dependencies);
        children.push(job.live_children);
    }
    let records = sqlx::query_as::<_, JobRecord>(sql::JOBS_WRITE)
        .bind(&ids)
        .bind(&states)
        .bind(&attempts)
        .bind(&tokens)
        .bind(&owners)
        .bind(&expiries)
        .bind(&cancels)
        .bind(&results)
        .bind(&errors)
        .bind(&progress)
        .bind(&run_ats)
        .bind(&finished)
        .bind(&metas)
        .bind(&attempted)
        .bind(notify_cancel)
        .bind(&started)
        .bind(&pending)
        .bind(&children)
        .fetch_all(conn)
        .await
        .store_err()?;
    into_jobs(records)
}

/// Writes back one job and returns it as stored.
pub(crate) async fn write_job(
    conn: &mut PgConnection,
    job: &Job,
    notify_cancel: bool,
) -> Result<Job, Error> {
    write_jobs(conn, std::slice::from_ref(job), notify_cancel)
        .await?
        .pop()
        .ok_or_else(|| Error::job_not_found(job.id))
}

/// Cancels a job: waiting, queued or reconciling -> cancelled; running -> cancel requested and
/// a `drover_cancel` NOTIFY with the job id; then propagates (children cancelled or signalled,
/// dependents of a cancelled job cancelled: propagate.rs). Round trips: BEGIN, lock, write,
/// [propagation rounds], COMMIT; tried again on a deadlock.
pub(crate) async fn cancel(conn: &mut PgConnection, id: JobId) -> Result<CancelOutcome, Error> {
    retried!(conn, |tx| cancel_in(&mut tx, id))
}

pub(crate) async fn cancel_in(conn: &mut PgConnection, id: JobId) -> Result<CancelOutcome, Error> {
    let (mut job, now) = lock_job(conn, id).await?;
    let before = job.clone();
    let transition = apply(&mut job, Event::Cancel, now)?;
    let job = write_job(conn, &job, true).await?;
    let effect = if transition.to == JobState::Running {
        CancelEffect::Requested
    } else {
        CancelEffect::Cancelled
    };
    let mut cascaded = 0;
    if ended(&before, &job) {
        let propagation = propagate(conn, vec![job.clone()], now).await?;
        cascaded = propagation.reached.len() as u64;
    }
    Ok(CancelOutcome {
        effect,
        job,
        cascaded,
    })
}

/// Operator retry of a finished job: same id, attempt budget reset, ready now; quotas
/// re-checked under the quota locks (before the unique key, like the memory store); unique key
/// kept, refused with `Conflict` while another live job of the tenant holds it. Round trips: BEGIN, [tenant, locks], lock, checks, write,
/// COMMIT.
pub(crate) async fn retry(
    conn: &mut PgConnection,
    config: &StoreConfig,
    id: JobId,
) -> Result<Job, Error> {
    retried!(conn, |tx| retry_in(&mut tx, config, id))
}

pub(crate) async fn retry_in(
    conn: &mut PgConnection,
    config: &StoreConfig,
    id: JobId,
) -> Result<Job, Error> {
    let quotas = config.quotas;
    let quota_checked = !quotas.is_unbounded();
    if quota_checked {
        // Quota locks come before the row lock, in the same order as enqueue takes them.
        let tenant: Option<String> =
            sqlx::query_scalar("SELECT tenant FROM drover.jobs WHERE id = $1")
                .bind(id.as_uuid())
                .fetch_optional(&mut *conn)
                .await
                .store_err()?;
        let tenant = tenant.ok_or_else(|| Error::job_not_found(id))?;
        let tenant = drover_core::TenantId::parse(tenant)
            .map_err(|_| Error::fatal("stored tenant is invalid"))?;
        let keys = quota_lock_keys(
            quotas.max_pending.is_some(),
            quotas
                .max_tenant_pending
                .is_some()
                .then(|| std::iter::once(&tenant)),
        );
        lock_quotas(conn, &keys).await?;
    }
    let (mut job, now) = lock_job(conn, id).await?;
    let stored = job.clone();
    apply(&mut job, Event::Retry, now)?;
    let (global_pending, tenant_pending, holder): (i64, i64, Option<Uuid>) =
        sqlx::query_as(sql::RETRY_CHECK)
            .bind(job.tenant.as_str())
            .bind(job.unique_key.as_deref())
            .bind(id.as_uuid())
            .fetch_one(&mut *conn)
            .await
            .store_err()?;
    let pending = |n: i64| u64::try_from(n).unwrap_or(0);
    if let Some(max) = quotas.max_pending {
        if pending(global_pending) >= max {
            return Err(Error::QuotaExceeded {
                quota: Quota::Global,
                current: pending(global_pending),
                max,
            });
        }
    }
    if let Some(max) = quotas.max_tenant_pending {
        if pending(tenant_pending) >= max {
            return Err(Error::QuotaExceeded {
                quota: Quota::Tenant(job.tenant.as_str().to_owned()),
                current: pending(tenant_pending),
                max,
            });
        }
    }
    if let Some(holder) = holder {
        return Err(Error::unique_key_held(JobId(holder)));
    }
    if stored.depends_on.is_empty() && stored.parent_id.is_none() {
        return write_job(conn, &job, false).await;
    }
    // Waits again for its dependencies still live; its parent counts it live again
    // (docs/design.md section 10).
    let mut jobs: BTreeMap<JobId, Job> = BTreeMap::from([(id, stored)]);
    crate::workflow::retry_linked(conn, &BTreeSet::from([id]), &mut jobs, now).await?;
    let job = jobs.remove(&id).ok_or_else(|| Error::job_not_found(id))?;
    Ok(job)
}

/// Operator requeue: a queued job waiting for its `run_at` becomes ready now, written back
/// (jobs_write.sql wakes its queue after the commit); a ready one is left unwritten. Round
/// trips: BEGIN, lock, write (none when unchanged), COMMIT.
pub(crate) async fn requeue(conn: &mut PgConnection, id: JobId) -> Result<RequeueOutcome, Error> {
    let mut tx = conn.begin().await.store_err()?;
    let result = requeue_in(&mut tx, id).await;
    settle(tx, result).await
}

pub(crate) async fn requeue_in(
    conn: &mut PgConnection,
    id: JobId,
) -> Result<RequeueOutcome, Error> {
    let (mut job, now) = lock_job(conn, id).await?;
    let run_at = job.run_at;
    apply(&mut job, Event::Requeue, now)?;
    if job.run_at == run_at {
        return Ok(RequeueOutcome {
            job,
            changed: false,
        });
    }
    let job = write_job(conn, &job, false).await?;
    Ok(RequeueOutcome { job, changed: true })
}

/// Operator delete: lock the job, read its relations (job_delete_links.sql), let
/// `check_delete` decide, delete it with its edges and parent link (job_delete.sql). Round
/// trips: BEGIN, lock, links, delete, COMMIT.
pub(crate) async fn delete(conn: &mut PgConnection, id: JobId) -> Result<Job, Error> {
    retried!(conn, |tx| delete_in(&mut tx, id))
}

pub(crate) async fn delete_in(conn: &mut PgConnection, id: JobId) -> Result<Job, Error> {
    let (job, _) = lock_job(conn, id).await?;
    let (parent_state, live_dependent): (Option<String>, Option<Uuid>) =
        sqlx::query_as(sql::JOB_DELETE_LINKS)
            .bind(id.as_uuid())
            .bind(job.parent_id.map(|p| p.as_uuid()))
            .fetch_one(&mut *conn)
            .await
            .store_err()?;
    let parent = parent_state
        .map(|state| state.parse::<JobState>())
        .transpose()
        .map_err(|_| Error::fatal("stored job state is invalid"))?;
    let links = DeleteLinks {
        parent,
        live_dependent: live_dependent.map(JobId),
    };
    check_delete(&job, links)?;
    sqlx::query(sql::JOB_DELETE)
        .bind(id.as_uuid())
        .execute(&mut *conn)
        .await
        .store_err()?;
    Ok(job)
}

/// Rescues up to `limit` expired leases, each exactly once however many rescuers race
/// (rescue_lock.sql skips rows another rescuer holds and re-checks expiry). Round trips: BEGIN,
/// lock, write, COMMIT.
pub(crate) async fn rescue(
    conn: &mut PgConnection,
    rescue: RescueExpired,
) -> Result<Vec<Rescued>, Error> {
    if rescue.limit == 0 {
        return Ok(Vec::new());
    }
    retried!(conn, |tx| rescue_in(&mut tx, &rescue))
}

async fn rescue_in(conn: &mut PgConnection, rescue: &RescueExpired) -> Result<Vec<Rescued>, Error> {
    let locked = sqlx::query_as::<_, LockedJob>(sql::RESCUE_LOCK)
        .bind(i32::try_from(rescue.limit).unwrap_or(i32::MAX))
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    if locked.is_empty() {
        return Ok(Vec::new());
    }
    let mut jobs = Vec::with_capacity(locked.len());
    let mut spent = Vec::with_capacity(locked.len());
    let mut now = None;
    for row in locked {
        now = Some(row.db_now);
        let mut job = row.job.into_job()?;
        let reconciler = rescue.reconciler_kinds.contains(&job.kind);
        let attempt = job.attempt;
        apply(&mut job, Event::LeaseExpired { reconciler }, row.db_now)?;
        spent.push(job.attempt == attempt);
        jobs.push(job);
    }
    let stored = write_jobs(conn, &jobs, false).await?;
    // A rescue that ends a job (attempts spent) propagates like its finish would have.
    let ended: Vec<Job> = stored
        .into_iter()
        .filter(|job| job.state.is_terminal())
        .collect();
    if let (false, Some(now)) = (ended.is_empty(), now) {
        // Each answer names the state the transaction leaves its job in (a child rescued in
        // the batch that cancelled its parent ends cancelled).
        let propagation = propagate(conn, ended, now).await?;
        for job in &mut jobs {
            if let Some(after) = propagation.written.get(&job.id) {
                job.state = after.state;
            }
        }
    }
    Ok(jobs
        .into_iter()
        .zip(spent)
        .map(|(job, attempt_spent)| Rescued {
            id: job.id,
            kind: job.kind,
            queue: job.queue,
            to: job.state,
            attempt_spent,
        })
        .collect())
}

/// Takes reconciling jobs under a reconcile lease (reconcile_claim.sql, one statement).
pub(crate) async fn claim_reconciling(
    conn: &mut PgConnection,
    claim: ClaimReconciling,
) -> Result<Vec<Job>, Error> {
    claim.validate()?;
    if claim.limit == 0 || claim.kinds.is_empty() {
        return Ok(Vec::new());
    }
    let kinds: Vec<&str> = claim.kinds.iter().map(JobKind::as_str).collect();
    let records = sqlx::query_as::<_, JobRecord>(sql::RECONCILE_CLAIM)
        .bind(claim.worker.as_str())
        .bind(&kinds)
        .bind(i32::try_from(claim.limit).unwrap_or(i32::MAX))
        .bind(micros(claim.lease))
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let mut jobs = into_jobs(records)?;
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

/// Records a reconciler's verdict under its reconcile lease. Round trips: BEGIN, lock, write,
/// COMMIT.
pub(crate) async fn reconcile(
    conn: &mut PgConnection,
    id: JobId,
    token: FencingToken,
    resolution: Resolution,
) -> Result<Transition, Error> {
    retried!(conn, |tx| reconcile_in(
        &mut tx,
        id,
        token,
        resolution.clone()
    ))
}

async fn reconcile_in(
    conn: &mut PgConnection,
    id: JobId,
    token: FencingToken,
    resolution: Resolution,
) -> Result<Transition, Error> {
    let (mut job, now) = lock_job(conn, id).await?;
    let before = job.clone();
    let transition = apply(&mut job, Event::Reconciled { token, resolution }, now)?;
    let job = write_job(conn, &job, false).await?;
    if ended(&before, &job) {
        propagate(conn, vec![job], now).await?;
    }
    Ok(transition)
}

/// Deletes at most `limit` terminal jobs finished before `now - older_than` (one statement).
pub(crate) async fn prune(conn: &mut PgConnection, prune: PruneJobs) -> Result<u64, Error> {
    prune.validate()?;
    let pruned: i64 = sqlx::query_scalar(sql::JOBS_PRUNE)
        .bind(micros(prune.older_than))
        .bind(i32::try_from(prune.limit).unwrap_or(i32::MAX))
        .fetch_one(&mut *conn)
        .await
        .store_err()?;
    Ok(u64::try_from(pruned).unwrap_or(0))
}

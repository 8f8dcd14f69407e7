//! The audit log (docs/audit.md): `JobStore::operate` runs an operator write and inserts its
//! record (audit_insert.sql) in one transaction, tried again on a deadlock like the write
//! alone; the list (one keyset statement) and retention's prune.
//!
//! A bulk action (`drover_core::bulk`) runs in steps of `BulkAction::step` jobs (`BULK_CHUNK`,
//! `BULK_RETRY_CHUNK` for a retry), one transaction each: the step's jobs read (a keyset page of the filter, or a slice of the ids), each
//! changed by its own operation's function (`cancel_in`, `retry_in`, `delete_in`) inside its
//! own savepoint (a job whose write PostgreSQL refuses is rolled back alone and skipped), then its
//! record: inserted by the first step, its count raised by each later one
//! (audit_add_jobs.sql), so the record always counts exactly the jobs committed.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use drover_core::{
    Actor, AuditAction, AuditEntry, AuditPage, AuditSource, BulkAction, BulkJobs, BulkOutcome,
    Error, JobId, ListAudit, NewAuditEntry, Operated, Operation, PruneAudit, Selection,
    StoreConfig, TenantId,
};
use serde_json::Value;
use sqlx::{Connection, PgConnection};

use crate::enqueue::lock_quotas_for;
use crate::error::SqlxResultExt;
use crate::records::micros;
use crate::sql;
use crate::transaction::{retried, settle};
use crate::{admin, lifecycle, workflow};
use uuid::Uuid;

/// Runs `operation` and records it, in one transaction. Round trips: those of the write
/// inside its transaction, + 1 insert.
pub(crate) async fn operate(
    conn: &mut PgConnection,
    config: &StoreConfig,
    operation: Operation,
    actor: Actor,
) -> Result<Operated, Error> {
    actor.validate()?;
    let operation = operation.scoped(&actor)?;
    if let Operation::JobsBulk(bulk) = operation {
        let bulk = with_ids_tenant(conn, bulk).await?;
        let operation = Operation::JobsBulk(bulk.clone());
        return operate_bulk(conn, config, &bulk, &operation, &actor).await;
    }
    retried!(conn, |tx| operate_in(&mut tx, config, &operation, &actor))
}

/// The tenants of the stored jobs among `ids` (at most 1,000), by jobs_tenants.sql: no large
/// field read. One round trip.
pub(crate) async fn jobs_tenants(
    conn: &mut PgConnection,
    ids: &[JobId],
) -> Result<Vec<(JobId, TenantId)>, Error> {
    drover_core::bounds::check_ids_len(ids.len())?;
    let uuids: Vec<Uuid> = ids.iter().map(|id| id.as_uuid()).collect();
    let found: Vec<(Uuid, String)> = sqlx::query_as(sql::JOBS_TENANTS)
        .bind(&uuids)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    found
        .into_iter()
        .map(|(id, tenant)| {
            let tenant =
                TenantId::parse(tenant).map_err(|_| Error::fatal("stored tenant is invalid"))?;
            Ok((JobId(id), tenant))
        })
        .collect()
}

/// Sets the tenant a bulk action by ids is recorded with: the one its stored jobs share
/// (jobs_tenants.sql over all its ids, at most `BULK_IDS_MAX`, before it acts).
async fn with_ids_tenant(conn: &mut PgConnection, bulk: BulkJobs) -> Result<BulkJobs, Error> {
    let Selection::Ids(ids) = &bulk.selection else {
        return Ok(bulk);
    };
    let found = jobs_tenants(conn, ids).await?;
    Ok(bulk.with_ids_tenant(found.iter().map(|(_, tenant)| tenant)))
}

/// Where the next step of a bulk action starts: the index of its slice of ids, or the keyset
/// cursor of its filter.
#[derive(Debug, Clone, Copy, Default)]
struct BulkPosition {
    step: usize,
    before: Option<JobId>,
}

/// Runs a bulk action step by step, each step in its own transaction with its part of the
/// record. Round trips per step: BEGIN, read, the jobs' own (those of each job's operation,
/// + SAVEPOINT and RELEASE or ROLLBACK TO), record, COMMIT.
async fn operate_bulk(
    conn: &mut PgConnection,
    config: &StoreConfig,
    bulk: &BulkJobs,
    operation: &Operation,
    actor: &Actor,
) -> Result<Operated, Error> {
    let mut total = BulkOutcome::default();
    let mut record = None;
    let mut at = BulkPosition::default();
    loop {
        let (step, next, id) = retried!(conn, |tx| bulk_step(
            &mut tx, config, bulk, at, record, operation, actor
        ))?;
        total.add(step);
        record = Some(id);
        match next {
            Some(next) => at = next,
            None => return Ok(Operated::JobsBulk(total)),
        }
    }
}

/// One step of a bulk action: its jobs, each changed by its own operation, and the record
/// (inserted, or its count raised). Answers the step's counts, where the next step starts
/// (none after the last) and the record's id.
async fn bulk_step(
    conn: &mut PgConnection,
    config: &StoreConfig,
    bulk: &BulkJobs,
    at: BulkPosition,
    record: Option<i64>,
    operation: &Operation,
    actor: &Actor,
) -> Result<(BulkOutcome, Option<BulkPosition>, i64), Error> {
    let mut outcome = BulkOutcome::default();
    let step = bulk.action.step() as usize;
    let (mut jobs, next): (Vec<(JobId, TenantId)>, _) =
        match (&bulk.selection, bulk.page(at.before)) {
            (_, Some(query)) => {
                let page = admin::jobs_list(conn, query).await?;
                let next = page.next.map(|before| BulkPosition {
                    step: at.step + 1,
                    before: Some(before),
                });
                let jobs = page
                    .jobs
                    .into_iter()
                    .map(|job| (job.id, job.tenant))
                    .collect();
                (jobs, next)
            }
            (Selection::Ids(all), None) => {
                let chunk = all.chunks(step).nth(at.step).unwrap_or_default();
                let uuids: Vec<Uuid> = chunk.iter().map(|id| id.as_uuid()).collect();
                let found: HashMap<Uuid, String> = sqlx::query_as(sql::JOBS_TENANTS)
                    .bind(&uuids)
                    .fetch_all(&mut *conn)
                    .await
                    .store_err()?
                    .into_iter()
                    .collect();
                let mut visible = Vec::with_capacity(chunk.len());
                for id in chunk {
                    let Some(tenant) = found.get(&id.as_uuid()) else {
                        continue;
                    };
                    if bulk.tenant.as_ref().is_none_or(|t| t.as_str() == tenant) {
                        let tenant = TenantId::parse(tenant)
                            .map_err(|_| Error::fatal("stored tenant is invalid"))?;
                        visible.push((*id, tenant));
                    }
                }
                outcome.not_found += (chunk.len() - visible.len()) as u64;
                let more = (at.step + 1) * step < all.len();
                let next = more.then_some(BulkPosition {
                    step: at.step + 1,
                    before: None,
                });
                (visible, next)
            }
            (Selection::Filter(_), None) => (Vec::new(), None),
        };
    // Quota locks before row locks, tenants in sorted order (as every enqueue takes them),
    // then the rows in id order (`propagate::lock_order`), as every multi-row locker does.
    if bulk.action == BulkAction::Retry {
        lock_quotas_for(conn, config, jobs.iter().map(|(_, tenant)| tenant)).await?;
    }
    jobs.sort_unstable_by_key(|(id, _)| *id);
    let ids = jobs.into_iter().map(|(id, _)| id);
    for id in ids {
        // Each job in its own savepoint: a write PostgreSQL refuses (a unique key taken
        // meanwhile) aborts only the savepoint, so the job is skipped and the step goes on.
        let mut job_tx = conn.begin().await.store_err()?;
        let answer = match bulk.action {
            BulkAction::Cancel => lifecycle::cancel_in(&mut job_tx, id)
                .await
                .map(|o| o.cascaded),
            BulkAction::Retry => lifecycle::retry_in(&mut job_tx, config, id)
                .await
                .map(|_| 0),
            BulkAction::Delete => lifecycle::delete_in(&mut job_tx, id).await.map(|_| 0),
        };
        outcome.count(settle(job_tx, answer).await)?;
    }
    let record = match record {
        None => insert(conn, actor, operation, &Operated::JobsBulk(outcome)).await?,
        Some(id) => {
            sqlx::query(sql::AUDIT_ADD_JOBS)
                .bind(id)
                .bind(i64::try_from(outcome.jobs()).unwrap_or(i64::MAX))
                .execute(&mut *conn)
                .await
                .store_err()?;
            id
        }
    };
    Ok((outcome, next, record))
}

async fn operate_in(
    conn: &mut PgConnection,
    config: &StoreConfig,
    operation: &Operation,
    actor: &Actor,
) -> Result<Operated, Error> {
    let operated = match operation.clone() {
        Operation::JobCancel(id) => Operated::JobCancel(lifecycle::cancel_in(conn, id).await?),
        Operation::JobRetry(id) => Operated::JobRetry(lifecycle::retry_in(conn, config, id).await?),
        Operation::JobRequeue(id) => Operated::JobRequeue(lifecycle::requeue_in(conn, id).await?),
        Operation::JobDelete(id) => Operated::JobDelete(lifecycle::delete_in(conn, id).await?),
        Operation::QueuePause(queue) => {
            Operated::QueuePause(admin::queue_pause(conn, queue).await?)
        }
        Operation::QueueResume(queue) => {
            Operated::QueueResume(admin::queue_resume(conn, queue).await?)
        }
        Operation::WorkflowCancel(id) => {
            Operated::WorkflowCancel(workflow::workflow_cancel_in(conn, id).await?)
        }
        Operation::WorkflowRetry(id) => {
            Operated::WorkflowRetry(workflow::workflow_retry_in(conn, config, id).await?)
        }
        Operation::LimitSet(policy) => Operated::LimitSet(admin::limit_set(conn, policy).await?),
        Operation::LimitClear(key) => {
            admin::limit_clear(conn, key).await?;
            Operated::LimitClear
        }
        Operation::ScheduleUpsert(schedule) => {
            Operated::ScheduleUpsert(admin::schedule_upsert_in(conn, config, schedule).await?)
        }
        Operation::ScheduleRemove(name) => {
            admin::schedule_remove(conn, name).await?;
            Operated::ScheduleRemove
        }
        Operation::JobsPrune(prune) => Operated::JobsPrune(lifecycle::prune(conn, prune).await?),
        // Run in steps by `operate_bulk`, never in one transaction.
        Operation::JobsBulk(_) => {
            return Err(Error::fatal(
                "a bulk action runs in steps, not in one transaction",
            ))
        }
    };
    insert(conn, actor, operation, &operated).await?;
    Ok(operated)
}

/// Inserts the record of `operation` answered by `operated` (audit_insert.sql); answers its
/// id.
async fn insert(
    conn: &mut PgConnection,
    actor: &Actor,
    operation: &Operation,
    operated: &Operated,
) -> Result<i64, Error> {
    let entry = NewAuditEntry::new(actor, operation, operated);
    sqlx::query_scalar(sql::AUDIT_INSERT)
        .bind(&entry.actor)
        .bind(entry.tenant.as_ref().map(TenantId::as_str))
        .bind(entry.action.as_str())
        .bind(&entry.target)
        .bind(i64::try_from(entry.jobs).unwrap_or(i64::MAX))
        .bind(entry.source.as_str())
        .fetch_one(&mut *conn)
        .await
        .store_err()
}

/// A row of `drover.audit_log`.
#[derive(sqlx::FromRow)]
struct AuditRecord {
    id: i64,
    at: DateTime<Utc>,
    actor: String,
    tenant: Option<String>,
    action: String,
    target: Value,
    jobs: i64,
    source: String,
}

impl AuditRecord {
    fn into_entry(self) -> Result<AuditEntry, Error> {
        let corrupt = |what: &str| Error::fatal(format!("stored audit {what} is invalid"));
        Ok(AuditEntry {
            id: self.id,
            at: self.at,
            actor: self.actor,
            tenant: self
                .tenant
                .map(TenantId::parse)
                .transpose()
                .map_err(|_| corrupt("tenant"))?,
            action: self
                .action
                .parse::<AuditAction>()
                .map_err(|_| corrupt("action"))?,
            target: self.target,
            jobs: u64::try_from(self.jobs).unwrap_or(0),
            source: self
                .source
                .parse::<AuditSource>()
                .map_err(|_| corrupt("source"))?,
        })
    }
}

/// A page newest first (audit_list.sql): one statement.
pub(crate) async fn audit_list(
    conn: &mut PgConnection,
    query: ListAudit,
) -> Result<AuditPage, Error> {
    query.validate()?;
    let size = query.page_size();
    let records = sqlx::query_as::<_, AuditRecord>(sql::AUDIT_LIST)
        .bind(query.before)
        .bind(query.action.map(AuditAction::as_str))
        .bind(query.source.map(AuditSource::as_str))
        .bind(query.actor.as_deref())
        .bind(query.tenant.as_ref().map(TenantId::as_str))
        .bind(i32::try_from(size).unwrap_or(i32::MAX).saturating_add(1))
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let mut entries = records
        .into_iter()
        .map(AuditRecord::into_entry)
        .collect::<Result<Vec<_>, _>>()?;
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    let next = if entries.len() > size {
        entries.truncate(size);
        entries.last().map(|e| e.id)
    } else {
        None
    };
    Ok(AuditPage { entries, next })
}

/// Deletes records past the retention (audit_prune.sql): one statement.
pub(crate) async fn audit_prune(conn: &mut PgConnection, prune: PruneAudit) -> Result<u64, Error> {
    prune.validate()?;
    let pruned: i64 = sqlx::query_scalar(sql::AUDIT_PRUNE)
        .bind(micros(prune.older_than))
        .bind(i32::try_from(prune.limit).unwrap_or(i32::MAX))
        .fetch_one(&mut *conn)
        .await
        .store_err()?;
    Ok(u64::try_from(pruned).unwrap_or(0))
}

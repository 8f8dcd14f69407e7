//! The audit log (docs/audit.md): `JobStore::operate` runs an operator write and inserts its
//! record (audit_insert.sql) in one transaction, tried again on a deadlock like the write
//! alone; the list (one keyset statement) and retention's prune.

use chrono::{DateTime, Utc};
use drover_core::{
    Actor, AuditAction, AuditEntry, AuditPage, AuditSource, Error, ListAudit, NewAuditEntry,
    Operated, Operation, PruneAudit, StoreConfig, TenantId,
};
use serde_json::Value;
use sqlx::PgConnection;

use crate::error::SqlxResultExt;
use crate::records::micros;
use crate::sql;
use crate::transaction::retried;
use crate::{admin, lifecycle, workflow};

/// Runs `operation` and records it, in one transaction. Round trips: those of the write
/// inside its transaction, + 1 insert.
pub(crate) async fn operate(
    conn: &mut PgConnection,
    config: &StoreConfig,
    operation: Operation,
    actor: Actor,
) -> Result<Operated, Error> {
    actor.validate()?;
    retried!(conn, |tx| operate_in(&mut tx, config, &operation, &actor))
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
    };
    let entry = NewAuditEntry::new(actor, operation, &operated);
    sqlx::query(sql::AUDIT_INSERT)
        .bind(&entry.actor)
        .bind(entry.tenant.as_ref().map(TenantId::as_str))
        .bind(entry.action.as_str())
        .bind(&entry.target)
        .bind(i64::try_from(entry.jobs).unwrap_or(i64::MAX))
        .bind(entry.source.as_str())
        .execute(&mut *conn)
        .await
        .store_err()?;
    Ok(operated)
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

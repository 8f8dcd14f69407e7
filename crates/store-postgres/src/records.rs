//! Private row types: what the SQL returns, decoded by column name, then converted into `core`
//! types (rows decode into private record structs, never into `core` types). `core` derives no sqlx
//! traits, so the conversion checks every stored name again and turns a bad row into
//! [`Error::Fatal`] instead of panicking.

use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::activity::{ActivityMinute, Histogram};
use drover_core::{
    AttemptError, Error, FencingToken, Job, JobId, JobKind, JobState, LimitKey, LimitPolicy,
    QueueName, Rate, Schedule, ScheduleName, TenantId, WorkerId, WorkerInfo, WorkflowId,
};
use serde_json::Value;
use uuid::Uuid;

/// A row of `drover.jobs`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct JobRecord {
    pub id: Uuid,
    pub kind: String,
    pub queue: String,
    pub tenant: String,
    pub args: Value,
    pub meta: Value,
    pub priority: i16,
    pub run_at: DateTime<Utc>,
    pub state: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub fencing_token: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub cancel_requested: bool,
    pub result: Option<Value>,
    pub errors: Value,
    pub progress: Option<Value>,
    pub idempotency_key: Option<String>,
    pub request_hash: Option<String>,
    pub unique_key: Option<String>,
    pub limit_keys: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub attempted_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub workflow_id: Option<Uuid>,
    pub name: Option<String>,
    pub parent_id: Option<Uuid>,
    pub depends_on: Option<Vec<Uuid>>,
    pub run_regardless: bool,
    pub pending_dependencies: i32,
    pub live_children: i32,
    pub trace_context: Option<Value>,
}

fn corrupt(what: &str) -> Error {
    Error::fatal(format!("stored {what} is invalid"))
}

impl JobRecord {
    /// Converts the row into a [`Job`].
    ///
    /// # Errors
    /// [`Error::Fatal`] when a stored name, state or error list does not parse.
    pub fn into_job(self) -> Result<Job, Error> {
        let errors: Vec<AttemptError> =
            serde_json::from_value(self.errors).map_err(|_| corrupt("job error list"))?;
        let limit_keys = self
            .limit_keys
            .into_iter()
            .map(|k| LimitKey::parse(k).map_err(|_| corrupt("limit key")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Job {
            id: JobId(self.id),
            kind: JobKind::parse(self.kind).map_err(|_| corrupt("job kind"))?,
            queue: QueueName::parse(self.queue).map_err(|_| corrupt("queue name"))?,
            tenant: TenantId::parse(self.tenant).map_err(|_| corrupt("tenant"))?,
            args: self.args,
            meta: self.meta,
            priority: self.priority,
            run_at: self.run_at,
            state: parse_state(&self.state)?,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            fencing_token: FencingToken(self.fencing_token),
            lease_owner: self
                .lease_owner
                .map(|w| WorkerId::parse(w).map_err(|_| corrupt("lease owner")))
                .transpose()?,
            lease_expires_at: self.lease_expires_at,
            cancel_requested: self.cancel_requested,
            result: self.result,
            errors,
            progress: self.progress,
            idempotency_key: self.idempotency_key,
            unique_key: self.unique_key,
            limit_keys,
            created_at: self.created_at,
            attempted_at: self.attempted_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            workflow_id: self.workflow_id.map(WorkflowId),
            name: self.name,
            parent_id: self.parent_id.map(JobId),
            depends_on: self
                .depends_on
                .unwrap_or_default()
                .into_iter()
                .map(JobId)
                .collect(),
            run_regardless: self.run_regardless,
            pending_dependencies: self.pending_dependencies,
            live_children: self.live_children,
            trace_context: self
                .trace_context
                .map(|value| serde_json::from_value(value).map_err(|_| corrupt("trace context")))
                .transpose()?,
        })
    }
}

/// Parses a stored state name.
///
/// # Errors
/// [`Error::Fatal`] for an unknown name.
pub(crate) fn parse_state(state: &str) -> Result<JobState, Error> {
    state.parse().map_err(|_| corrupt("job state"))
}

/// Converts rows into jobs.
pub(crate) fn into_jobs(records: Vec<JobRecord>) -> Result<Vec<Job>, Error> {
    records.into_iter().map(JobRecord::into_job).collect()
}

/// A row of `drover.workers`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct WorkerRecord {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub queues: Vec<String>,
    pub started_at: DateTime<Utc>,
    pub last_heartbeat_at: DateTime<Utc>,
}

impl WorkerRecord {
    /// Converts the row into a [`WorkerInfo`].
    pub fn into_info(self) -> Result<WorkerInfo, Error> {
        Ok(WorkerInfo {
            id: WorkerId::parse(self.id).map_err(|_| corrupt("worker id"))?,
            host: self.host,
            pid: u32::try_from(self.pid).map_err(|_| corrupt("worker pid"))?,
            queues: self
                .queues
                .into_iter()
                .map(|q| QueueName::parse(q).map_err(|_| corrupt("queue name")))
                .collect::<Result<_, _>>()?,
            started_at: self.started_at,
            last_heartbeat_at: self.last_heartbeat_at,
        })
    }
}

/// A row of `drover.activity`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct ActivityRecord {
    pub minute: DateTime<Utc>,
    pub queue: String,
    pub succeeded: i64,
    pub retried: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub snoozed: i64,
    pub wait_counts: Vec<i64>,
    pub wait_sum_ms: i64,
    pub duration_counts: Vec<i64>,
    pub duration_sum_ms: i64,
}

impl ActivityRecord {
    /// Converts the row into an [`ActivityMinute`].
    pub fn into_minute(self) -> Result<ActivityMinute, Error> {
        fn count(n: i64) -> Result<u64, Error> {
            u64::try_from(n).map_err(|_| corrupt("activity count"))
        }
        fn histogram(counts: Vec<i64>, sum_ms: i64) -> Result<Histogram, Error> {
            let histogram = Histogram {
                counts: counts.into_iter().map(count).collect::<Result<_, _>>()?,
                sum_ms: count(sum_ms)?,
            };
            histogram
                .validate("histogram")
                .map_err(|_| corrupt("activity histogram"))?;
            Ok(histogram)
        }
        Ok(ActivityMinute {
            minute: self.minute,
            queue: QueueName::parse(self.queue).map_err(|_| corrupt("queue name"))?,
            succeeded: count(self.succeeded)?,
            retried: count(self.retried)?,
            failed: count(self.failed)?,
            cancelled: count(self.cancelled)?,
            snoozed: count(self.snoozed)?,
            wait: histogram(self.wait_counts, self.wait_sum_ms)?,
            duration: histogram(self.duration_counts, self.duration_sum_ms)?,
        })
    }
}

/// A row of `drover.limits`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct LimitRecord {
    pub key: String,
    pub max_running: Option<i32>,
    pub rate_count: Option<i32>,
    pub rate_period_ms: Option<i64>,
    pub rate_tat: Option<DateTime<Utc>>,
}

impl LimitRecord {
    /// Converts the row into a [`LimitPolicy`].
    pub fn policy(&self) -> Result<LimitPolicy, Error> {
        let key = LimitKey::parse(self.key.clone()).map_err(|_| corrupt("limit key"))?;
        let max_running = self
            .max_running
            .map(|m| u32::try_from(m).map_err(|_| corrupt("limit max_running")))
            .transpose()?;
        let rate = match (self.rate_count, self.rate_period_ms) {
            (Some(count), Some(ms)) => Some(Rate {
                count: u32::try_from(count).map_err(|_| corrupt("limit rate"))?,
                period: Duration::from_millis(
                    u64::try_from(ms).map_err(|_| corrupt("limit rate"))?,
                ),
            }),
            _ => None,
        };
        Ok(LimitPolicy {
            key,
            max_running,
            rate,
        })
    }
}

/// A row of `drover.schedules`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScheduleRecord {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub kind: String,
    pub args: Value,
    pub queue: String,
    pub priority: i16,
    pub max_attempts: i32,
    pub created_at: DateTime<Utc>,
    pub last_tick_at: Option<DateTime<Utc>>,
}

impl ScheduleRecord {
    /// Converts the row into a [`Schedule`].
    pub fn into_schedule(self) -> Result<Schedule, Error> {
        Ok(Schedule {
            name: ScheduleName::parse(self.name).map_err(|_| corrupt("schedule name"))?,
            cron: self.cron,
            timezone: self.timezone,
            kind: JobKind::parse(self.kind).map_err(|_| corrupt("job kind"))?,
            args: self.args,
            queue: QueueName::parse(self.queue).map_err(|_| corrupt("queue name"))?,
            priority: self.priority,
            max_attempts: self.max_attempts,
            created_at: self.created_at,
            last_tick_at: self.last_tick_at,
        })
    }
}

/// Longest delay the SQL adds to `now()`: 1,000 years, in microseconds. Longer delays are
/// clamped so `now() + delay` never leaves PostgreSQL's timestamp range (core saturates the
/// same way at its own bound).
const DELAY_MAX_MICROS: i64 = 1_000 * 366 * 24 * 3600 * 1_000_000;

/// A duration as whole microseconds for SQL (`$n * interval '1 microsecond'`), clamped to
/// 1,000 years.
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros())
        .unwrap_or(i64::MAX)
        .min(DELAY_MAX_MICROS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_clamp() {
        assert_eq!(micros(Duration::from_millis(1500)), 1_500_000);
        assert_eq!(micros(Duration::MAX), DELAY_MAX_MICROS);
    }
}

//! What operators look at and manage (docs/design.md sections 4 and 7): job get and list, queues
//! (pause, resume, list, snapshot), workers, limit policies and cron schedules. Each operation
//! is one statement unless its doc says otherwise.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::activity::{ActivityMinute, Histogram, ListActivity, ACTIVITY_RETENTION};
use drover_core::error::Entity;
use drover_core::search::ArgsSearch;
use drover_core::{
    Error, Job, JobId, JobPage, JobState, LimitKey, LimitPolicy, LimitStatus, ListJobs,
    NewSchedule, QueueChange, QueueInfo, QueueName, QueueSnapshot, Schedule, ScheduleChange,
    ScheduleName, ScheduleUpsert, Snapshot, StoreConfig, VacuumStatus, WorkerId, WorkerInfo,
    WorkerRegistration,
};
use serde_json::Value;
use sqlx::{Connection, PgConnection};

use crate::claim::running_counts;
use crate::error::SqlxResultExt;
use crate::records::{
    into_jobs, micros, ActivityRecord, JobRecord, LimitRecord, ScheduleRecord, WorkerRecord,
};
use crate::sql;
use crate::transaction::settle;

/// The database clock.
pub(crate) async fn now(conn: &mut PgConnection) -> Result<DateTime<Utc>, Error> {
    sqlx::query_scalar(sql::DB_NOW)
        .fetch_one(&mut *conn)
        .await
        .store_err()
}

/// One job.
pub(crate) async fn job_get(conn: &mut PgConnection, id: JobId) -> Result<Job, Error> {
    sqlx::query_as::<_, JobRecord>(sql::JOB_GET)
        .bind(id.as_uuid())
        .fetch_optional(&mut *conn)
        .await
        .store_err()?
        .ok_or_else(|| Error::job_not_found(id))?
        .into_job()
}

/// A page of jobs, newest first, carrying the large fields `query.details` names; fetches one
/// row more than the page to find the cursor.
pub(crate) async fn jobs_list(conn: &mut PgConnection, query: ListJobs) -> Result<JobPage, Error> {
    if let Some(mut search) = ArgsSearch::new(&query)? {
        while let Some(read) = search.next_read() {
            search.take(jobs_page(conn, read).await?);
        }
        return Ok(search.finish());
    }
    jobs_page(conn, query).await
}

/// A page of jobs without an args filter ([`jobs_list`] searches args with these).
async fn jobs_page(conn: &mut PgConnection, query: ListJobs) -> Result<JobPage, Error> {
    query.validate()?;
    let page = query.page_size();
    // The kind and tenant filters as jobs_done_facets_idx's elements (0003_fewer_index_writes.sql).
    let facets: Vec<String> = query
        .kind
        .iter()
        .map(|kind| format!("k:{}", kind.as_str()))
        .chain(
            query
                .tenant
                .iter()
                .map(|tenant| format!("t:{}", tenant.as_str())),
        )
        .collect();
    let records = if query.workflow.is_some() || query.parent.is_some() {
        // A workflow's or a parent's jobs: read through their own index.
        sqlx::query_as::<_, JobRecord>(sql::JOBS_LIST_MEMBERS)
            .bind(query.queue.as_ref().map(QueueName::as_str))
            .bind(query.state.map(JobState::as_str))
            .bind(query.kind.as_ref().map(|k| k.as_str()))
            .bind(query.tenant.as_ref().map(|t| t.as_str()))
            .bind(query.meta.as_ref())
            .bind(query.before.map(|id| id.as_uuid()))
            .bind(i64::from(page) + 1)
            .bind(query.details.args)
            .bind(query.details.result)
            .bind(query.details.errors)
            .bind(query.details.progress)
            .bind(query.workflow.map(|w| w.as_uuid()))
            .bind(query.parent.map(|p| p.as_uuid()))
            .fetch_all(&mut *conn)
            .await
            .store_err()?
    } else {
        sqlx::query_as::<_, JobRecord>(sql::JOBS_LIST)
            .bind(query.queue.as_ref().map(QueueName::as_str))
            .bind(query.state.map(JobState::as_str))
            .bind(query.kind.as_ref().map(|k| k.as_str()))
            .bind(query.tenant.as_ref().map(|t| t.as_str()))
            .bind(query.meta.as_ref())
            .bind(query.before.map(|id| id.as_uuid()))
            .bind(i64::from(page) + 1)
            .bind(&facets)
            .bind(query.details.args)
            .bind(query.details.result)
            .bind(query.details.errors)
            .bind(query.details.progress)
            .fetch_all(&mut *conn)
            .await
            .store_err()?
    };
    let mut jobs = into_jobs(records)?;
    let page = usize::try_from(page).unwrap_or(usize::MAX);
    let next = if jobs.len() > page {
        jobs.truncate(page);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(JobPage { jobs, next })
}

/// A row of queue_snapshot.sql.
#[derive(sqlx::FromRow)]
struct SnapshotRow {
    queue: String,
    paused: bool,
    counts: Value,
    ready: i64,
    ready_at_least: bool,
    claimed: i64,
    oldest_ready_age_ms: Option<i64>,
    taken_at: DateTime<Utc>,
}

/// Counts per queue and state at one instant (one statement, in a transaction without JIT
/// compilation; a second for the clock when no queue exists), and the vacuum status (one
/// more).
pub(crate) async fn snapshot(conn: &mut PgConnection) -> Result<Snapshot, Error> {
    let mut tx = conn.begin().await.store_err()?;
    let result = snapshot_rows(&mut tx).await;
    let rows = settle(tx, result).await?;
    let taken_at = match rows.first() {
        Some(row) => row.taken_at,
        None => now(&mut *conn).await?,
    };
    let mut queues = Vec::with_capacity(rows.len());
    for row in rows {
        let mut counts = BTreeMap::new();
        if let Value::Object(map) = &row.counts {
            for (state, n) in map {
                let state: JobState = state
                    .parse()
                    .map_err(|_| Error::fatal("stored job state is invalid"))?;
                counts.insert(state, n.as_u64().unwrap_or(0));
            }
        }
        let leased = counts.get(&JobState::Running).copied().unwrap_or(0);
        let claimed = u64::try_from(row.claimed).unwrap_or(0).min(leased);
        queues.push(QueueSnapshot {
            queue: QueueName::parse(row.queue)
                .map_err(|_| Error::fatal("stored queue name is invalid"))?,
            paused: row.paused,
            counts,
            ready: u64::try_from(row.ready).unwrap_or(0),
            ready_at_least: row.ready_at_least,
            running: leased - claimed,
            claimed,
            oldest_ready_age_ms: row
                .oldest_ready_age_ms
                .map(|ms| u64::try_from(ms).unwrap_or(0)),
        });
    }
    let vacuum = vacuum_status(&mut *conn).await?;
    Ok(Snapshot {
        taken_at,
        queues,
        vacuum: Some(vacuum),
    })
}

/// The rows of queue_snapshot.sql, planned without JIT.
async fn snapshot_rows(conn: &mut PgConnection) -> Result<Vec<SnapshotRow>, Error> {
    sqlx::query(sql::JIT_OFF)
        .execute(&mut *conn)
        .await
        .store_err()?;
    sqlx::query_as::<_, SnapshotRow>(sql::QUEUE_SNAPSHOT)
        .fetch_all(&mut *conn)
        .await
        .store_err()
}

/// A row of vacuum_status.sql.
#[derive(sqlx::FromRow)]
struct VacuumRow {
    oldest_transaction_age_ms: Option<i64>,
    oldest_transaction_pid: Option<i32>,
    replication_slot: Option<String>,
    replication_slot_xmin_age: Option<i64>,
    jobs_dead_rows: i64,
    jobs_live_rows: i64,
    jobs_last_vacuum_at: Option<DateTime<Utc>>,
}

/// What keeps vacuum from cleaning drover.jobs (one statement over the statistics views).
pub(crate) async fn vacuum_status(conn: &mut PgConnection) -> Result<VacuumStatus, Error> {
    let row = sqlx::query_as::<_, VacuumRow>(sql::VACUUM_STATUS)
        .fetch_one(&mut *conn)
        .await
        .store_err()?;
    let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(VacuumStatus {
        oldest_transaction_age_ms: row.oldest_transaction_age_ms.map(unsigned),
        oldest_transaction_pid: row
            .oldest_transaction_pid
            .and_then(|pid| u32::try_from(pid).ok()),
        replication_slot: row.replication_slot,
        replication_slot_xmin_age: row.replication_slot_xmin_age.map(unsigned),
        jobs_dead_rows: unsigned(row.jobs_dead_rows),
        jobs_live_rows: unsigned(row.jobs_live_rows),
        jobs_last_vacuum_at: row.jobs_last_vacuum_at,
    })
}

/// A row of the queue statements.
#[derive(sqlx::FromRow)]
struct QueueRecord {
    name: String,
    paused: bool,
    paused_at: Option<DateTime<Utc>>,
}

impl QueueRecord {
    fn into_info(self) -> Result<QueueInfo, Error> {
        Ok(QueueInfo {
            name: QueueName::parse(self.name)
                .map_err(|_| Error::fatal("stored queue name is invalid"))?,
            paused: self.paused,
            paused_at: if self.paused { self.paused_at } else { None },
        })
    }
}

/// Pauses a queue cluster-wide. queue_pause.sql answers a row only when it paused the queue
/// (the insert, or the update of an unpaused row, decided under the row's lock, so of racing
/// pauses one does); otherwise the queue already was paused and is read back, in a statement of
/// its own so that it sees a pause committed since the first one began.
pub(crate) async fn queue_pause(
    conn: &mut PgConnection,
    queue: QueueName,
) -> Result<QueueChange, Error> {
    let paused = sqlx::query_as::<_, QueueRecord>(sql::QUEUE_PAUSE)
        .bind(queue.as_str())
        .fetch_optional(&mut *conn)
        .await
        .store_err()?;
    if let Some(record) = paused {
        return Ok(QueueChange {
            queue: record.into_info()?,
            changed: true,
        });
    }
    let stored = sqlx::query_as::<_, QueueRecord>(sql::QUEUE_GET)
        .bind(queue.as_str())
        .fetch_optional(&mut *conn)
        .await
        .store_err()?;
    let info = match stored {
        Some(record) => record.into_info()?,
        // Resumed in between: not paused now.
        None => QueueInfo::unpaused(queue),
    };
    Ok(QueueChange {
        queue: info,
        changed: false,
    })
}

/// Resumes a queue and wakes idle workers; `changed` when this call removed a pause.
pub(crate) async fn queue_resume(
    conn: &mut PgConnection,
    queue: QueueName,
) -> Result<QueueChange, Error> {
    let (changed,): (bool,) = sqlx::query_as(sql::QUEUE_RESUME)
        .bind(queue.as_str())
        .fetch_one(&mut *conn)
        .await
        .store_err()?;
    Ok(QueueChange {
        queue: QueueInfo::unpaused(queue),
        changed,
    })
}

/// Queues with jobs or a stored pause state.
pub(crate) async fn queues_list(conn: &mut PgConnection) -> Result<Vec<QueueInfo>, Error> {
    sqlx::query_as::<_, QueueRecord>(sql::QUEUES_LIST)
        .fetch_all(&mut *conn)
        .await
        .store_err()?
        .into_iter()
        .map(QueueRecord::into_info)
        .collect()
}

/// Registers (or re-registers) a worker.
pub(crate) async fn worker_register(
    conn: &mut PgConnection,
    worker: WorkerRegistration,
) -> Result<WorkerInfo, Error> {
    let host = worker.stored_host();
    let queues: Vec<&str> = worker.queues.iter().map(QueueName::as_str).collect();
    sqlx::query_as::<_, WorkerRecord>(sql::WORKER_REGISTER)
        .bind(worker.id.as_str())
        .bind(host)
        .bind(i64::from(worker.pid))
        .bind(&queues)
        .fetch_one(&mut *conn)
        .await
        .store_err()?
        .into_info()
}

/// Records a worker heartbeat; `NotFound` when it is not registered.
pub(crate) async fn worker_heartbeat(conn: &mut PgConnection, id: WorkerId) -> Result<(), Error> {
    let done = sqlx::query(sql::WORKER_HEARTBEAT)
        .bind(id.as_str())
        .execute(&mut *conn)
        .await
        .store_err()?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound {
            entity: Entity::Worker,
            id: id.to_string(),
        });
    }
    // Every live worker folds the job counts' changes now and then, so they stay few while
    // nobody reads the overview (docs/design.md, "Counts").
    sqlx::query(sql::JOB_COUNTS_FOLD)
        .execute(&mut *conn)
        .await
        .store_err()?;
    Ok(())
}

/// Adds a worker's activity to the stored minutes (activity_record.sql). Entries for the same
/// minute and queue are summed first: one statement may update a row once.
pub(crate) async fn activity_record(
    conn: &mut PgConnection,
    activity: Vec<ActivityMinute>,
) -> Result<(), Error> {
    let mut summed: BTreeMap<(DateTime<Utc>, QueueName), ActivityMinute> = BTreeMap::new();
    for entry in activity {
        summed
            .entry((entry.minute, entry.queue.clone()))
            .and_modify(|kept| kept.add(&entry))
            .or_insert(entry);
    }
    let activity: Vec<ActivityMinute> = summed.into_values().collect();
    fn counts(histogram: &Histogram) -> String {
        let counts: Vec<String> = histogram.counts.iter().map(u64::to_string).collect();
        format!("{{{}}}", counts.join(","))
    }
    fn signed(n: u64) -> i64 {
        i64::try_from(n).unwrap_or(i64::MAX)
    }
    let column = |f: fn(&ActivityMinute) -> u64| -> Vec<i64> {
        activity.iter().map(|m| signed(f(m))).collect()
    };
    let minutes: Vec<DateTime<Utc>> = activity.iter().map(|m| m.minute).collect();
    let queues: Vec<&str> = activity.iter().map(|m| m.queue.as_str()).collect();
    let waits: Vec<String> = activity.iter().map(|m| counts(&m.wait)).collect();
    let durations: Vec<String> = activity.iter().map(|m| counts(&m.duration)).collect();
    sqlx::query(sql::ACTIVITY_RECORD)
        .bind(&minutes)
        .bind(&queues)
        .bind(column(|m| m.succeeded))
        .bind(column(|m| m.retried))
        .bind(column(|m| m.failed))
        .bind(column(|m| m.cancelled))
        .bind(column(|m| m.snoozed))
        .bind(&waits)
        .bind(column(|m| m.wait.sum_ms))
        .bind(&durations)
        .bind(column(|m| m.duration.sum_ms))
        .bind(ACTIVITY_RETENTION.as_secs_f64())
        .execute(&mut *conn)
        .await
        .store_err()?;
    Ok(())
}

/// The activity of the minutes from `query.since` on (activity_list.sql).
pub(crate) async fn activity_list(
    conn: &mut PgConnection,
    query: ListActivity,
) -> Result<Vec<ActivityMinute>, Error> {
    sqlx::query_as::<_, ActivityRecord>(sql::ACTIVITY_LIST)
        .bind(query.since)
        .fetch_all(&mut *conn)
        .await
        .store_err()?
        .into_iter()
        .map(ActivityRecord::into_minute)
        .collect()
}

/// Removes a worker's registration (idempotent).
pub(crate) async fn worker_deregister(conn: &mut PgConnection, id: WorkerId) -> Result<(), Error> {
    sqlx::query(sql::WORKER_DEREGISTER)
        .bind(id.as_str())
        .execute(&mut *conn)
        .await
        .store_err()?;
    Ok(())
}

/// Registered workers by id.
pub(crate) async fn workers_list(conn: &mut PgConnection) -> Result<Vec<WorkerInfo>, Error> {
    sqlx::query_as::<_, WorkerRecord>(sql::WORKERS_LIST)
        .fetch_all(&mut *conn)
        .await
        .store_err()?
        .into_iter()
        .map(WorkerRecord::into_info)
        .collect()
}

/// Removes workers whose last heartbeat is older than `older_than`.
pub(crate) async fn workers_prune(
    conn: &mut PgConnection,
    older_than: Duration,
) -> Result<u64, Error> {
    let done = sqlx::query(sql::WORKERS_PRUNE)
        .bind(micros(older_than))
        .execute(&mut *conn)
        .await
        .store_err()?;
    Ok(done.rows_affected())
}

/// A row of limits_list.sql.
#[derive(sqlx::FromRow)]
struct ListedLimit {
    #[sqlx(flatten)]
    limit: LimitRecord,
    db_now: DateTime<Utc>,
}

/// Limit policies with their usage. Round trips: policies, running counts.
pub(crate) async fn limits_list(conn: &mut PgConnection) -> Result<Vec<LimitStatus>, Error> {
    let rows = sqlx::query_as::<_, ListedLimit>(sql::LIMITS_LIST)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<&str> = rows.iter().map(|r| r.limit.key.as_str()).collect();
    let running = running_counts(conn, &keys).await?.running;
    rows.iter()
        .map(|row| {
            let policy = row.limit.policy()?;
            let rate_available = policy
                .rate
                .map(|rate| rate.available(row.limit.rate_tat, row.db_now));
            Ok(LimitStatus {
                running: running.get(row.limit.key.as_str()).copied().unwrap_or(0),
                rate_available,
                policy,
            })
        })
        .collect()
}

/// Creates or replaces a limit policy (keeping its rate state).
pub(crate) async fn limit_set(
    conn: &mut PgConnection,
    policy: LimitPolicy,
) -> Result<LimitPolicy, Error> {
    let policy = policy.validated()?;
    let max_running = policy
        .max_running
        .map(|m| i32::try_from(m).unwrap_or(i32::MAX));
    let rate_count = policy
        .rate
        .map(|r| i32::try_from(r.count).unwrap_or(i32::MAX));
    let rate_period_ms = policy
        .rate
        .map(|r| i64::try_from(r.period.as_millis()).unwrap_or(i64::MAX));
    sqlx::query_as::<_, LimitRecord>(sql::LIMIT_SET)
        .bind(policy.key.as_str())
        .bind(max_running)
        .bind(rate_count)
        .bind(rate_period_ms)
        .fetch_one(&mut *conn)
        .await
        .store_err()?
        .policy()
}

/// Removes a limit policy; `NotFound` when none has the key.
pub(crate) async fn limit_clear(conn: &mut PgConnection, key: LimitKey) -> Result<(), Error> {
    let removed = sqlx::query(sql::LIMIT_CLEAR)
        .bind(key.as_str())
        .fetch_optional(&mut *conn)
        .await
        .store_err()?;
    if removed.is_none() {
        return Err(Error::NotFound {
            entity: Entity::Limit,
            id: key.to_string(),
        });
    }
    Ok(())
}

/// Schedules by name.
pub(crate) async fn schedules_list(conn: &mut PgConnection) -> Result<Vec<Schedule>, Error> {
    sqlx::query_as::<_, ScheduleRecord>(sql::SCHEDULES_LIST)
        .fetch_all(&mut *conn)
        .await
        .store_err()?
        .into_iter()
        .map(ScheduleRecord::into_schedule)
        .collect()
}

/// How often an upsert decides again after the row it decided on was created or removed
/// concurrently, before it gives up with `Unavailable`.
const SCHEDULE_UPSERT_ATTEMPTS: usize = 4;

/// Creates or replaces a schedule by core's rule ([`Schedule::upsert`]) in one transaction:
/// the database clock, the row locked (so no tick of it fires meanwhile), then an insert, an
/// update, or nothing when the schedule is stored exactly so. Round trips: BEGIN, clock, lock,
/// write (none when unchanged), COMMIT.
pub(crate) async fn schedule_upsert(
    conn: &mut PgConnection,
    config: &StoreConfig,
    schedule: NewSchedule,
) -> Result<ScheduleUpsert, Error> {
    let mut tx = conn.begin().await.store_err()?;
    let result = schedule_upsert_in(&mut tx, config, schedule).await;
    settle(tx, result).await
}

pub(crate) async fn schedule_upsert_in(
    conn: &mut PgConnection,
    config: &StoreConfig,
    schedule: NewSchedule,
) -> Result<ScheduleUpsert, Error> {
    let now = now(&mut *conn).await?;
    schedule.validate(now, &config.sizes)?;
    for _ in 0..SCHEDULE_UPSERT_ATTEMPTS {
        let stored = sqlx::query_as::<_, ScheduleRecord>(sql::SCHEDULE_LOCK)
            .bind(schedule.name.as_str())
            .fetch_optional(&mut *conn)
            .await
            .store_err()?
            .map(ScheduleRecord::into_schedule)
            .transpose()?;
        let decided = Schedule::upsert(stored, schedule.clone(), now);
        let statement = match decided.change {
            ScheduleChange::Unchanged => return Ok(decided),
            ScheduleChange::Created => sql::SCHEDULE_INSERT,
            ScheduleChange::Updated | ScheduleChange::Rescheduled => sql::SCHEDULE_UPDATE,
        };
        let s = &decided.schedule;
        let written = sqlx::query_as::<_, ScheduleRecord>(statement)
            .bind(s.name.as_str())
            .bind(&s.cron)
            .bind(&s.timezone)
            .bind(s.kind.as_str())
            .bind(&s.args)
            .bind(s.queue.as_str())
            .bind(s.priority)
            .bind(s.max_attempts)
            .bind(s.created_at)
            .fetch_optional(&mut *conn)
            .await
            .store_err()?;
        // None: another upsert created the schedule first (or it was removed): decide again
        // on the row as it is now.
        if let Some(record) = written {
            return Ok(ScheduleUpsert {
                schedule: record.into_schedule()?,
                change: decided.change,
            });
        }
    }
    Err(Error::unavailable(
        "the schedule was created or removed concurrently while it was written; try again",
    ))
}

/// Removes a schedule; `NotFound` when none has the name.
pub(crate) async fn schedule_remove(
    conn: &mut PgConnection,
    name: ScheduleName,
) -> Result<(), Error> {
    let done = sqlx::query(sql::SCHEDULE_REMOVE)
        .bind(name.as_str())
        .execute(&mut *conn)
        .await
        .store_err()?;
    if done.rows_affected() == 0 {
        return Err(Error::NotFound {
            entity: Entity::Schedule,
            id: name.to_string(),
        });
    }
    Ok(())
}

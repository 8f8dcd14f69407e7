//! Claim (docs/design.md sections 3 and 4; `JobStore::jobs_claim`).
//!
//! Fast path, one statement (claim_fast.sql): lock the next ready jobs `FOR UPDATE SKIP LOCKED`
//! in claim order and start them in the same `UPDATE`, up to the first job subject to a limit
//! policy (so order is kept). A claim of one queue (the runner's) first tries claim_queue.sql,
//! the same without any limit check, which claims only while no policy exists at all and
//! otherwise reports that the fast path must run.
//!
//! Slow path, one transaction, taken only when the fast path stopped at such a job before
//! filling the claim: lock every policy row
//! (key order), count running jobs per policy key and read the clock after counting (the
//! admission's time: the claimed jobs' attempted_at and lease start, and the readiness of
//! candidates), read candidates page by page in claim order
//! `FOR UPDATE SKIP LOCKED`, admit them in order with core's [`Admission`] (the same math as the
//! memory store), then start the admitted jobs and store the policies' new GCRA times in one
//! statement. Holding the policy locks until commit makes concurrent claimers see each other's
//! claims, so they never exceed `max_running` or a rate. Skipped jobs are only read: they keep
//! their place and spend nothing.
//!
//! Round trips: one queue and no policy 1; fast path 1 (+1 for a one-queue claim while policies
//! exist); slow path BEGIN, policies, running counts, one per candidate page, update, COMMIT.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use drover_core::{
    Admission, ClaimJobs, Claimed, Error, Job, JobKind, LimitKey, LimitState, QueueName, WorkerId,
};
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, Row};
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::records::{into_jobs, micros, JobRecord, LimitRecord};
use crate::sql;
use crate::transaction::settle;

/// Most candidates the slow path reads in one claim before giving up on filling it.
const SCAN_MAX: usize = 10_000;

/// A claim candidate (claim_candidates.sql).
#[derive(sqlx::FromRow)]
struct Candidate {
    id: Uuid,
    kind: String,
    queue: String,
    limit_keys: Vec<String>,
    priority: i16,
    run_at: DateTime<Utc>,
}

impl Candidate {
    /// The effective limit keys: explicit keys, `kind:<kind>` and `queue:<queue>`, sorted and
    /// deduplicated like `Job::effective_limit_keys`.
    fn effective_keys(&self) -> Result<Vec<LimitKey>, Error> {
        let corrupt = || Error::fatal("stored job has an invalid name or limit key");
        let mut keys = self
            .limit_keys
            .iter()
            .map(|k| LimitKey::parse(k.as_str()).map_err(|_| corrupt()))
            .collect::<Result<Vec<_>, _>>()?;
        let kind = JobKind::parse(self.kind.as_str()).map_err(|_| corrupt())?;
        let queue = QueueName::parse(self.queue.as_str()).map_err(|_| corrupt())?;
        keys.push(LimitKey::for_kind(&kind));
        keys.push(LimitKey::for_queue(&queue));
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

/// Claims up to `claim.limit` ready jobs; see the module docs.
pub(crate) async fn claim(conn: &mut PgConnection, claim: ClaimJobs) -> Result<Claimed, Error> {
    claim.validate()?;
    if claim.queues.is_empty() || claim.kinds.is_empty() {
        return Ok(Claimed::default());
    }
    // Each queue once: claim_fast.sql scans per queue and limits the merged candidates.
    let mut queues: Vec<&str> = claim.queues.iter().map(QueueName::as_str).collect();
    queues.sort_unstable();
    queues.dedup();
    let kinds: Vec<&str> = claim.kinds.iter().map(JobKind::as_str).collect();
    let limit = i32::try_from(claim.limit).unwrap_or(i32::MAX);
    let start = i32::try_from(claim.start).unwrap_or(i32::MAX);
    let lease_us = micros(claim.lease);
    if let [queue] = queues.as_slice() {
        let rows = sqlx::query_as::<_, FastClaimRow>(sql::CLAIM_QUEUE)
            .bind(*queue)
            .bind(&kinds)
            .bind(limit)
            .bind(claim.worker.as_str())
            .bind(lease_us)
            .bind(start)
            .fetch_all(&mut *conn)
            .await
            .store_err()?;
        if !rows.first().is_some_and(|r| r.blocked) {
            return Ok(Claimed::jobs(sorted(
                rows.into_iter().filter_map(|r| r.job).collect(),
            )?));
        }
    }
    let rows = sqlx::query_as::<_, FastClaimRow>(sql::CLAIM_FAST)
        .bind(&queues)
        .bind(&kinds)
        .bind(limit)
        .bind(claim.worker.as_str())
        .bind(lease_us)
        .bind(start)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let blocked = rows.first().is_some_and(|r| r.blocked);
    let records: Vec<JobRecord> = rows.into_iter().filter_map(|r| r.job).collect();
    let claimed = records.len();
    let mut jobs = sorted(records)?;
    if !blocked || claimed >= usize::try_from(claim.limit).unwrap_or(usize::MAX) {
        return Ok(Claimed::jobs(jobs));
    }
    let taken = u32::try_from(claimed).unwrap_or(claim.limit);
    let rest = claim.limit - taken;
    let more = claim_with_limits(
        &mut *conn,
        &claim.worker,
        Counts {
            limit: rest,
            start: claim.start.saturating_sub(taken),
        },
        &queues,
        &kinds,
        lease_us,
    )
    .await?;
    jobs.extend(more.jobs);
    Ok(Claimed {
        jobs,
        retry_after: more.retry_after,
    })
}

/// A row of claim_fast.sql: whether a job subject to a limit stopped the claim, and the claimed
/// job (absent on the row that only carries `blocked`).
struct FastClaimRow {
    blocked: bool,
    job: Option<JobRecord>,
}

impl<'r> sqlx::FromRow<'r, PgRow> for FastClaimRow {
    fn from_row(row: &'r PgRow) -> Result<Self, sqlx::Error> {
        let blocked = row.try_get("blocked")?;
        let id: Option<Uuid> = row.try_get("id")?;
        let job = match id {
            Some(_) => Some(JobRecord::from_row(row)?),
            None => None,
        };
        Ok(FastClaimRow { blocked, job })
    }
}

fn sorted(records: Vec<JobRecord>) -> Result<Vec<Job>, Error> {
    let mut jobs = into_jobs(records)?;
    jobs.sort_by_key(|j| (j.priority, j.run_at, j.id));
    Ok(jobs)
}

/// How many jobs the slow path claims at most, and how many of the first of them start at
/// once.
#[derive(Clone, Copy)]
struct Counts {
    limit: u32,
    start: u32,
}

/// The slow path: admission under locked policies, in one transaction. The answer's
/// `retry_after` comes from the admission, on the database's clock.
async fn claim_with_limits(
    conn: &mut PgConnection,
    worker: &WorkerId,
    counts: Counts,
    queues: &[&str],
    kinds: &[&str],
    lease_us: i64,
) -> Result<Claimed, Error> {
    let mut tx = conn.begin().await.store_err()?;
    let result = claim_with_limits_in(&mut tx, worker, counts, queues, kinds, lease_us).await;
    settle(tx, result).await
}

async fn claim_with_limits_in(
    conn: &mut PgConnection,
    worker: &WorkerId,
    counts: Counts,
    queues: &[&str],
    kinds: &[&str],
    lease_us: i64,
) -> Result<Claimed, Error> {
    let limit = usize::try_from(counts.limit).unwrap_or(usize::MAX);
    let policies = sqlx::query_as::<_, LimitRecord>(sql::CLAIM_POLICIES)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let keys: Vec<&str> = policies.iter().map(|p| p.key.as_str()).collect();
    // The admission's clock is read after the counts, so the claimed jobs are dated after
    // every finish the counts saw (the transaction's start can precede them).
    let RunningCounts {
        running,
        db_now: now,
    } = running_counts(conn, &keys).await?;
    let mut states = Vec::with_capacity(policies.len());
    for p in &policies {
        states.push(LimitState {
            policy: p.policy()?,
            running: running.get(p.key.as_str()).copied().unwrap_or(0),
            rate_tat: p.rate_tat,
        });
    }
    let mut admission = Admission::new(now, states);

    let page = i32::try_from(limit.saturating_mul(2).clamp(100, SCAN_MAX)).unwrap_or(100);
    let mut admitted: Vec<Uuid> = Vec::new();
    let mut cursor: Option<(i16, DateTime<Utc>, Uuid)> = None;
    let mut scanned = 0usize;
    loop {
        // A queue or kind whose implicit key is closed has nothing admissible: it is left out
        // of the scan, so a long backlog behind a full policy is neither read nor locked
        // (Admission::closed). Checked again before each page, as admissions fill policies.
        let open_queues = open_names(&mut admission, queues, "queue");
        let open_kinds = open_names(&mut admission, kinds, "kind");
        if open_queues.is_empty() || open_kinds.is_empty() {
            break;
        }
        let candidates = sqlx::query_as::<_, Candidate>(sql::CLAIM_CANDIDATES)
            .bind(&open_queues)
            .bind(&open_kinds)
            .bind(page)
            .bind(cursor.map(|c| c.0))
            .bind(cursor.map(|c| c.1))
            .bind(cursor.map(|c| c.2))
            .bind(now)
            .fetch_all(&mut *conn)
            .await
            .store_err()?;
        for candidate in &candidates {
            if admission.try_admit(&candidate.effective_keys()?) {
                admitted.push(candidate.id);
                if admitted.len() == limit {
                    break;
                }
            }
        }
        scanned += candidates.len();
        let exhausted = candidates.len() < usize::try_from(page).unwrap_or(0);
        if admitted.len() == limit || exhausted || scanned >= SCAN_MAX {
            break;
        }
        cursor = candidates.last().map(|c| (c.priority, c.run_at, c.id));
    }
    let retry_after = admission.retry_after();
    if admitted.is_empty() {
        return Ok(Claimed {
            jobs: Vec::new(),
            retry_after,
        });
    }
    let mut tat_keys = Vec::new();
    let mut tats = Vec::new();
    for state in admission.into_touched() {
        if let (Some(_), Some(tat)) = (state.policy.rate, state.rate_tat) {
            tat_keys.push(state.policy.key.as_str().to_owned());
            tats.push(tat);
        }
    }
    // Admitted in claim order: the first of them start at once.
    let start = usize::try_from(counts.start).unwrap_or(usize::MAX);
    let starting = &admitted[..start.min(admitted.len())];
    let records = sqlx::query_as::<_, JobRecord>(sql::CLAIM_IDS)
        .bind(&admitted)
        .bind(worker.as_str())
        .bind(lease_us)
        .bind(&tat_keys)
        .bind(&tats)
        .bind(now)
        .bind(starting)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    Ok(Claimed {
        jobs: sorted(records)?,
        retry_after,
    })
}

/// The `names` (queues or kinds, per `prefix`) whose implicit limit key `prefix:<name>` is not
/// closed.
fn open_names<'a>(admission: &mut Admission, names: &[&'a str], prefix: &str) -> Vec<&'a str> {
    names
        .iter()
        .copied()
        .filter(|name| {
            LimitKey::parse(format!("{prefix}:{name}")).map_or(true, |key| !admission.closed(&key))
        })
        .collect()
}

/// Running jobs per limit key, and the database clock read after counting them.
pub(crate) struct RunningCounts {
    /// Running jobs per key; keys without running jobs are absent.
    pub(crate) running: HashMap<String, u64>,
    /// `clock_timestamp()` after the counts.
    pub(crate) db_now: DateTime<Utc>,
}

/// Running jobs per limit key (limits_running.sql), for `keys`, in one round trip.
pub(crate) async fn running_counts(
    conn: &mut sqlx::PgConnection,
    keys: &[&str],
) -> Result<RunningCounts, Error> {
    let (names, counts, db_now): (Vec<String>, Vec<i64>, DateTime<Utc>) =
        sqlx::query_as(sql::LIMITS_RUNNING)
            .bind(keys)
            .fetch_one(conn)
            .await
            .store_err()?;
    let running = names
        .into_iter()
        .zip(counts)
        .map(|(k, n)| (k, u64::try_from(n).unwrap_or(0)))
        .collect();
    Ok(RunningCounts { running, db_now })
}

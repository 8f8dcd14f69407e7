//! The insert lane (enqueue/mod.rs; also `PgStore::enqueue_in` and a schedule's tick) of a
//! validated [`Batch`]: one `INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING` for
//! the whole batch, then the resolution of skipped jobs (idempotency replay or conflict,
//! unique-key duplicate), then the quotas.
//!
//! Round trips: a batch without keys and without quotas is one statement (autocommit). A single
//! job with keys is one statement, plus one lookup when it was skipped. A single job without
//! quota counts uses enqueue_one.sql, a plain `INSERT ... VALUES` whose plan PostgreSQL caches
//! instead of planning the batch statement every call. A batch without keys uses
//! enqueue_insert_keyless.sql, the same without ON CONFLICT (nothing can conflict): one choice,
//! [`Statement::choose`]. A batch with keys runs in a transaction (or a savepoint inside the
//! caller's transaction) so a conflict stores nothing: BEGIN, insert, [lookup], COMMIT. With
//! quotas: BEGIN, advisory locks (the global lock, or tenant stripe locks when only tenant
//! quotas are configured), insert (which also reads the pending counts), [lookup], COMMIT.
//!
//! Semantics are those of enqueueing the jobs one after another: a key repeated inside the batch
//! resolves to the first job that used it.
//!
//! Wake-ups ([`Wake`]): inside the caller's own transaction (`enqueue_in`) the insert itself
//! NOTIFYs, so the notification is delivered only if the caller commits; the store's own
//! enqueues return the queues that got ready jobs and notify after their commit (notify.rs).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use drover_core::{
    EnqueueStatus, Enqueued, Error, Job, JobId, JobState, NewJob, Quota, RunAt, StoreConfig,
    TenantId,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::records::{micros, JobRecord};
use crate::sql;
use crate::transaction::settle;

/// How many times skipped jobs whose key holder vanished (finished or pruned between the insert
/// and the lookup) are inserted again before giving up with `Unavailable`.
const RESOLVE_ROUNDS_MAX: usize = 8;

/// Advisory lock key of the global pending quota.
const GLOBAL_QUOTA_LOCK: i64 = 0x6472_6f76_6572_7167; // "droverqg"

/// The workflow and parent every job of a batch is stored with (workflow.rs: a parent's
/// children, a graph's jobs), written by the insert itself so they need no second write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Family {
    /// The workflow of every job, if any.
    pub(crate) workflow: Option<Uuid>,
    /// The parent of every job, if any.
    pub(crate) parent: Option<Uuid>,
}

/// A validated batch with the ids and request hashes the store assigns.
pub(crate) struct Batch {
    jobs: Vec<NewJob>,
    ids: Vec<Uuid>,
    hashes: Vec<Option<String>>,
}

impl Batch {
    /// Validates the batch ([`drover_core::job::prepare_batch`], the rules every store shares),
    /// rewrites its jobs into their stored form there (`run_at` floored to microseconds before
    /// sqlx converts it, JSON numbers as jsonb gives them back, so the answers built from the
    /// batch show what the table holds), and assigns ids (UUID v7) and request hashes (jobs
    /// with an idempotency key only).
    ///
    /// # Errors
    /// `InvalidInput` as `prepare_batch` returns it.
    pub(crate) fn prepare(mut jobs: Vec<NewJob>, config: &StoreConfig) -> Result<Batch, Error> {
        let hashes = drover_core::job::prepare_batch(&mut jobs, &config.sizes)?;
        let ids = jobs.iter().map(|_| JobId::new_v7().as_uuid()).collect();
        Ok(Batch { jobs, ids, hashes })
    }

    /// A batch of jobs already validated by [`Batch::prepare`] (one by one), none with an
    /// idempotency key, with the ids assigned then (group enqueue, combine.rs).
    pub(crate) fn keyless(jobs: Vec<NewJob>, ids: Vec<Uuid>) -> Batch {
        let hashes = vec![None; jobs.len()];
        Batch { jobs, ids, hashes }
    }

    /// The jobs and their ids, in order.
    pub(crate) fn into_parts(self) -> (Vec<NewJob>, Vec<Uuid>) {
        (self.jobs, self.ids)
    }

    /// The job and id of a batch of one; `None` for any other size.
    pub(crate) fn into_single(self) -> Option<(NewJob, Uuid)> {
        match (<[NewJob; 1]>::try_from(self.jobs), self.ids.as_slice()) {
            (Ok([job]), [id]) => Some((job, *id)),
            _ => None,
        }
    }

    fn len(&self) -> usize {
        self.jobs.len()
    }

    /// The jobs, in order.
    pub(crate) fn jobs(&self) -> &[NewJob] {
        &self.jobs
    }

    /// The ids assigned to the jobs, in order.
    pub(crate) fn ids(&self) -> &[Uuid] {
        &self.ids
    }

    /// The answers of a batch stored by COPY: every job created, ready and dated `now`; the
    /// queues to notify after the commit are the batch's distinct queues.
    pub(crate) fn copied(self, now: DateTime<Utc>) -> Enqueue {
        let mut seen: HashSet<&str> = HashSet::new();
        let ready_queues: Vec<String> = self
            .jobs
            .iter()
            .map(|job| job.queue.as_str())
            .filter(|queue| seen.insert(queue))
            .map(str::to_owned)
            .collect();
        let answers = self
            .jobs
            .into_iter()
            .zip(self.ids)
            .map(|(new, id)| Enqueued {
                status: EnqueueStatus::Created,
                // run_at: `into_job` dates a job without run_at at its creation.
                job: new.into_job(JobId(id), now),
            })
            .collect();
        Enqueue {
            answers,
            ready_queues,
        }
    }
}

/// Where an enqueue's wake-up notifications go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// NOTIFY inside the transaction (`enqueue_in`: delivered only if the caller commits).
    InTransaction,
    /// Not in the transaction: the caller hands [`Enqueue::ready_queues`] to the store's
    /// notifier once it has committed (notify.rs).
    AfterCommit,
}

/// What an enqueue did.
#[derive(Debug)]
pub(crate) struct Enqueue {
    /// One answer per job, in input order.
    pub(crate) answers: Vec<Enqueued>,
    /// With [`Wake::AfterCommit`]: the distinct queues that got a job ready at once (to
    /// notify after the commit); empty otherwise.
    pub(crate) ready_queues: Vec<String>,
}

/// Enqueues a prepared batch on `conn` (autocommit, or inside the caller's transaction), opening
/// a transaction or savepoint only when a conflict could require undoing part of the batch or a
/// quota must be checked.
pub(crate) async fn enqueue(
    conn: &mut PgConnection,
    config: &StoreConfig,
    batch: Batch,
    wake: Wake,
) -> Result<Enqueue, Error> {
    if batch.len() == 0 {
        return Ok(Enqueue {
            answers: Vec::new(),
            ready_queues: Vec::new(),
        });
    }
    enqueue_answers(conn, config, &batch, Family::default(), wake)
        .await?
        .into_enqueue(batch)
}

/// [`enqueue`] of a non-empty batch up to the store's answers, leaving `batch` to the caller
/// (who turns the answers into jobs with [`Resolved::into_enqueue`], or keeps the batch to try
/// again differently, as the group enqueue does).
pub(crate) async fn enqueue_answers(
    conn: &mut PgConnection,
    config: &StoreConfig,
    batch: &Batch,
    family: Family,
    wake: Wake,
) -> Result<Resolved, Error> {
    let quotas = config.quotas;
    let quota_checked = !quotas.is_unbounded();
    let has_keys = batch
        .jobs
        .iter()
        .any(|j| j.idempotency_key.is_some() || j.unique_key.is_some());
    let needs_transaction = quota_checked || (has_keys && batch.len() > 1);
    if !needs_transaction {
        let (resolved, _) =
            insert_and_resolve(conn, batch, family, Counting::default(), wake).await?;
        return Ok(resolved);
    }
    let mut tx = conn.begin().await.store_err()?;
    let result = enqueue_locked(&mut tx, config, batch, family, wake).await;
    settle(tx, result).await
}

/// The transactional enqueue: quota locks (when quotas are configured), insert and resolve,
/// quota check.
async fn enqueue_locked(
    conn: &mut PgConnection,
    config: &StoreConfig,
    batch: &Batch,
    family: Family,
    wake: Wake,
) -> Result<Resolved, Error> {
    let quotas = config.quotas;
    let quota_checked = !quotas.is_unbounded();
    if quota_checked {
        let keys = quota_lock_keys(
            quotas.max_pending.is_some(),
            quotas
                .max_tenant_pending
                .is_some()
                .then(|| batch.jobs.iter().map(|j| &j.tenant)),
        );
        lock_quotas(conn, &keys).await?;
    }
    let counting = Counting {
        global: quotas.max_pending.is_some(),
        tenants: quotas.max_tenant_pending.is_some(),
    };
    let (resolved, pending) = insert_and_resolve(conn, batch, family, counting, wake).await?;
    if quota_checked {
        check_quotas(config, batch, &resolved.answers, pending.as_ref())?;
    }
    Ok(resolved)
}

/// The advisory lock keys for the configured quotas, sorted so every caller takes them in the
/// same order.
///
/// With a global quota every enqueue takes the one global lock, which already serializes all
/// quota checks, so no tenant lock is needed. With only tenant quotas, tenants map onto
/// [`TENANT_LOCK_STRIPES`] stripe locks: a batch of thousands of tenants takes at most that
/// many locks (PostgreSQL's shared lock table is small: `max_locks_per_transaction` x
/// connections), at the price of tenants that share a stripe waiting for each other.
pub(crate) fn quota_lock_keys<'a>(
    global: bool,
    tenants: Option<impl Iterator<Item = &'a TenantId>>,
) -> Vec<i64> {
    if global {
        return vec![GLOBAL_QUOTA_LOCK];
    }
    let mut keys: Vec<i64> = match tenants {
        Some(tenants) => tenants.map(tenant_lock_key).collect(),
        None => Vec::new(),
    };
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// How many stripe locks the tenant quotas are spread over.
pub(crate) const TENANT_LOCK_STRIPES: u64 = 64;

/// Advisory lock key of the first tenant quota stripe ("droverqt" in ASCII, low byte cleared).
const TENANT_QUOTA_LOCK_BASE: i64 = 0x6472_6f76_6572_7100;

fn tenant_lock_key(tenant: &TenantId) -> i64 {
    let digest = Sha256::digest(format!("drover.quota.tenant\0{tenant}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    let stripe = u64::from_be_bytes(bytes) % TENANT_LOCK_STRIPES;
    TENANT_QUOTA_LOCK_BASE + i64::try_from(stripe).unwrap_or(0)
}

/// Takes the quota advisory locks `config` calls for, for jobs of `tenants`, for the rest of the
/// transaction (none without quotas). Paths that lock job rows too take these first, in the
/// order every enqueue takes them, so they never wait for each other in a cycle.
pub(crate) async fn lock_quotas_for<'a>(
    conn: &mut PgConnection,
    config: &StoreConfig,
    tenants: impl Iterator<Item = &'a TenantId>,
) -> Result<(), Error> {
    let quotas = config.quotas;
    if quotas.is_unbounded() {
        return Ok(());
    }
    let keys = quota_lock_keys(
        quotas.max_pending.is_some(),
        quotas.max_tenant_pending.is_some().then_some(tenants),
    );
    lock_quotas(conn, &keys).await
}

/// Takes the quota advisory locks for the rest of the transaction.
pub(crate) async fn lock_quotas(conn: &mut PgConnection, keys: &[i64]) -> Result<(), Error> {
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query(sql::QUOTA_LOCK)
        .bind(keys)
        .execute(conn)
        .await
        .store_err()?;
    Ok(())
}

/// Which pending counts the insert should return for the quota check.
#[derive(Debug, Clone, Copy, Default)]
struct Counting {
    /// Pending jobs in total (`max_pending` is configured).
    global: bool,
    /// Pending jobs per tenant of the batch (`max_tenant_pending` is configured).
    tenants: bool,
}

/// Pending jobs before this enqueue's inserts, read under the quota locks.
struct PendingBefore {
    global: u64,
    tenants: HashMap<String, u64>,
}

/// Checks the quotas for the jobs this enqueue created, all together: `pending` holds the
/// counts before them (read under the quota locks by the first insert that created a job).
/// Global first, then tenants in order of first appearance, like the memory store.
fn check_quotas(
    config: &StoreConfig,
    batch: &Batch,
    answers: &[Answer],
    pending: Option<&PendingBefore>,
) -> Result<(), Error> {
    let mut created_total = 0u64;
    let mut created_per_tenant: Vec<(&str, u64)> = Vec::new();
    for (job, answer) in batch.jobs.iter().zip(answers) {
        if !matches!(answer, Answer::Created { .. }) {
            continue;
        }
        created_total += 1;
        let tenant = job.tenant.as_str();
        match created_per_tenant.iter_mut().find(|(t, _)| *t == tenant) {
            Some((_, n)) => *n += 1,
            None => created_per_tenant.push((tenant, 1)),
        }
    }
    if created_total == 0 {
        return Ok(());
    }
    let pending = pending
        .ok_or_else(|| Error::fatal("enqueue created jobs without counting pending ones"))?;
    let quotas = config.quotas;
    if let Some(max) = quotas.max_pending {
        if pending.global.saturating_add(created_total) > max {
            return Err(Error::QuotaExceeded {
                quota: Quota::Global,
                current: pending.global,
                max,
            });
        }
    }
    if let Some(max) = quotas.max_tenant_pending {
        for (tenant, created) in &created_per_tenant {
            let current = pending.tenants.get(*tenant).copied().unwrap_or(0);
            if current.saturating_add(*created) > max {
                return Err(Error::QuotaExceeded {
                    quota: Quota::Tenant((*tenant).to_owned()),
                    current,
                    max,
                });
            }
        }
    }
    Ok(())
}

/// A stored job with its request hash, as the resolution sees it.
struct Holder {
    job: Job,
    request_hash: Option<String>,
}

impl Holder {
    fn from_record(record: JobRecord) -> Result<Holder, Error> {
        let request_hash = record.request_hash.clone();
        Ok(Holder {
            job: record.into_job()?,
            request_hash,
        })
    }
}

/// Inserts the batch, then answers every job: created ones from the insert, skipped ones from
/// the key holders, inserting again the few whose holder vanished meanwhile.
async fn insert_and_resolve(
    conn: &mut PgConnection,
    batch: &Batch,
    family: Family,
    counting: Counting,
    wake: Wake,
) -> Result<(Resolved, Option<PendingBefore>), Error> {
    let n = batch.len();
    let position: HashMap<Uuid, usize> = batch
        .ids
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, i))
        .collect();
    let mut answers: Vec<Option<Answer>> = (0..n).map(|_| None).collect();
    let mut to_insert: Vec<usize> = (0..n).collect();
    let mut pending: Option<PendingBefore> = None;
    let mut ready_queues: Vec<String> = Vec::new();
    // Distinct queues in a set beside the list: a batch may name 100,000.
    let mut ready_seen: HashSet<&str> = HashSet::new();
    for _ in 0..RESOLVE_ROUNDS_MAX {
        let inserted = insert(conn, batch, family, &to_insert, counting, wake).await?;
        if pending.is_none() {
            if let Some(first) = inserted.first() {
                pending = Some(first.pending_before()?);
            }
        }
        for row in inserted {
            let i = *position
                .get(&row.id)
                .ok_or_else(|| Error::fatal("enqueue returned a job it was not given"))?;
            if row.ready && wake == Wake::AfterCommit {
                let queue = batch.jobs[i].queue.as_str();
                if ready_seen.insert(queue) {
                    ready_queues.push(queue.to_owned());
                }
            }
            answers[i] = Some(Answer::Created {
                id: row.id,
                run_at: row.run_at,
                created_at: row.created_at,
            });
        }
        let skipped: Vec<usize> = to_insert
            .iter()
            .copied()
            .filter(|i| answers[*i].is_none())
            .collect();
        if skipped.is_empty() {
            return Ok((finish_answers(answers, ready_queues)?, pending));
        }
        let holders = lookup(conn, batch, &skipped).await?;
        let index = HolderIndex::new(&holders, &position);
        let mut again = Vec::new();
        for i in skipped {
            match resolve(batch, i, &index)? {
                Some(answer) => answers[i] = Some(Answer::Stored(Box::new(answer))),
                None => again.push(i),
            }
        }
        if again.is_empty() {
            return Ok((finish_answers(answers, ready_queues)?, pending));
        }
        to_insert = again;
    }
    Err(Error::unavailable(
        "enqueue kept racing with jobs finishing that hold its keys; retry",
    ))
}

fn finish_answers(
    answers: Vec<Option<Answer>>,
    ready_queues: Vec<String>,
) -> Result<Resolved, Error> {
    let answers = answers
        .into_iter()
        .map(|a| a.ok_or_else(|| Error::fatal("enqueue left a job unanswered")))
        .collect::<Result<_, _>>()?;
    Ok(Resolved {
        answers,
        ready_queues,
    })
}

/// One job's answer before it becomes an [`Enqueued`]: the created job is built only at the
/// end, from the batch's own `NewJob` (moved, not cloned).
enum Answer {
    /// Created by this enqueue with these values chosen by the database.
    Created {
        id: Uuid,
        run_at: DateTime<Utc>,
        created_at: DateTime<Utc>,
    },
    /// Answered with a stored job (idempotent replay or unique-key duplicate); boxed, as these
    /// are rare and a job is large.
    Stored(Box<Enqueued>),
}

/// Every job answered, in input order, with the queues to notify after the commit.
pub(crate) struct Resolved {
    answers: Vec<Answer>,
    ready_queues: Vec<String>,
}

impl Resolved {
    /// [`Resolved::into_enqueue`] leaving `batch` to the caller (its created jobs are cloned):
    /// a transaction that may run again keeps its batch (workflow.rs).
    pub(crate) fn into_enqueue_cloned(self, batch: &Batch) -> Result<Enqueue, Error> {
        let copy = Batch {
            jobs: batch.jobs.clone(),
            ids: batch.ids.clone(),
            hashes: batch.hashes.clone(),
        };
        self.into_enqueue(copy)
    }

    /// The answers, building each created job from `batch`'s own input.
    pub(crate) fn into_enqueue(self, batch: Batch) -> Result<Enqueue, Error> {
        if batch.jobs.len() != self.answers.len() {
            return Err(Error::fatal("enqueue answered another number of jobs"));
        }
        let answers = batch
            .jobs
            .into_iter()
            .zip(self.answers)
            .map(|(new, answer)| match answer {
                Answer::Created {
                    id,
                    run_at,
                    created_at,
                } => {
                    let mut job = new.into_job(JobId(id), created_at);
                    job.run_at = run_at;
                    Enqueued {
                        status: EnqueueStatus::Created,
                        job,
                    }
                }
                Answer::Stored(answer) => *answer,
            })
            .collect();
        Ok(Enqueue {
            answers,
            ready_queues: self.ready_queues,
        })
    }
}

/// Key holders found by the lookup, indexed by (tenant, key). `created` is the batch position of
/// holders created by this very batch.
struct HolderIndex<'a> {
    by_idempotency_key: HashMap<(&'a str, &'a str), (&'a Holder, Option<usize>)>,
    by_unique_key: HashMap<(&'a str, &'a str), (&'a Holder, Option<usize>)>,
}

impl<'a> HolderIndex<'a> {
    fn new(holders: &'a [Holder], position: &HashMap<Uuid, usize>) -> Self {
        let mut index = HolderIndex {
            by_idempotency_key: HashMap::new(),
            by_unique_key: HashMap::new(),
        };
        for holder in holders {
            let created = position.get(&holder.job.id.as_uuid()).copied();
            let tenant = holder.job.tenant.as_str();
            if let Some(key) = &holder.job.idempotency_key {
                index
                    .by_idempotency_key
                    .insert((tenant, key.as_str()), (holder, created));
            }
            if let Some(key) = &holder.job.unique_key {
                if JobState::PENDING.contains(&holder.job.state) {
                    index
                        .by_unique_key
                        .insert((tenant, key.as_str()), (holder, created));
                }
            }
        }
        index
    }
}

/// Answers skipped job `i` as if the batch were enqueued one job at a time: its idempotency key
/// first (same request: replay; other request or legacy row: conflict), then its unique key
/// (live holder: duplicate). Jobs of this batch created after `i` do not count. `None` when
/// the key holder vanished between insert and lookup: insert the job again.
fn resolve<'a>(
    batch: &Batch,
    i: usize,
    index: &HolderIndex<'a>,
) -> Result<Option<Enqueued>, Error> {
    let job = &batch.jobs[i];
    let tenant = job.tenant.as_str();
    let visible = |found: Option<&(&'a Holder, Option<usize>)>| -> Option<&'a Holder> {
        match found {
            Some((holder, created)) if created.is_none_or(|pos| pos < i) => Some(*holder),
            _ => None,
        }
    };
    if let Some(key) = &job.idempotency_key {
        if let Some(holder) = visible(index.by_idempotency_key.get(&(tenant, key.as_str()))) {
            return match (&holder.request_hash, &batch.hashes[i]) {
                (Some(stored), Some(hash)) if stored == hash => Ok(Some(Enqueued {
                    status: EnqueueStatus::Replayed,
                    job: holder.job.clone(),
                })),
                (None, _) => {
                    Err(Error::idempotency_unverifiable(holder.job.id)
                        .in_batch_item(i, batch.len()))
                }
                _ => Err(Error::idempotency_reused(holder.job.id).in_batch_item(i, batch.len())),
            };
        }
    }
    if let Some(key) = &job.unique_key {
        if let Some(holder) = visible(index.by_unique_key.get(&(tenant, key.as_str()))) {
            return Ok(Some(Enqueued {
                status: EnqueueStatus::Duplicate,
                job: holder.job.clone(),
            }));
        }
    }
    Ok(None)
}

/// What the insert statements return for each created job: the values the database chose,
/// whether it is ready at once, and the pending counts before the statement (NULL unless
/// asked for). Decoded by column name: enqueue_insert.sql and enqueue_one.sql answer a row per
/// created job, enqueue_insert_keyless.sql a summary ([`KeylessRow`]).
#[derive(sqlx::FromRow)]
struct Inserted {
    id: Uuid,
    run_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    /// `run_at <= now()`: ready at once.
    ready: bool,
    /// NULL unless counted.
    pending_before: Option<i64>,
    /// NULL unless counted.
    tenant_pending_before: Option<Value>,
}

impl Inserted {
    fn pending_before(&self) -> Result<PendingBefore, Error> {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        let mut tenants = HashMap::new();
        if let Some(Value::Object(map)) = &self.tenant_pending_before {
            for (tenant, n) in map {
                let n = n
                    .as_i64()
                    .ok_or_else(|| Error::fatal("pending count is not a number"))?;
                tenants.insert(tenant.clone(), count(n));
            }
        }
        Ok(PendingBefore {
            global: count(self.pending_before.unwrap_or(0)),
            tenants,
        })
    }
}

/// `{}`: a meta sent as NULL (the insert statements store `{}` for NULL) or left out (COPY).
pub(crate) fn is_empty_object(value: &Value) -> bool {
    matches!(value, Value::Object(map) if map.is_empty())
}

/// The statement that inserts the jobs at some positions of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Statement {
    /// enqueue_one.sql: one job, no quota counts (a plain `INSERT ... VALUES` whose plan
    /// PostgreSQL caches).
    One,
    /// enqueue_insert.sql: some job has a key (ON CONFLICT DO NOTHING, in input order).
    Keyed,
    /// enqueue_insert_keyless.sql: no job has a key (nothing can conflict).
    Keyless,
}

impl Statement {
    fn choose(batch: &Batch, positions: &[usize], counting: Counting) -> Statement {
        if positions.len() == 1 && !counting.global && !counting.tenants {
            return Statement::One;
        }
        let keyless = positions.iter().all(|&i| {
            let job = &batch.jobs[i];
            job.idempotency_key.is_none() && job.unique_key.is_none()
        });
        if keyless {
            Statement::Keyless
        } else {
            Statement::Keyed
        }
    }
}

/// The columns of the jobs to insert, one array each, in the batch statements' parameter
/// order ($1-$14; enqueue_insert_rows.sql).
struct Columns<'a> {
    ids: Vec<Uuid>,
    kinds: Vec<&'a str>,
    queues: Vec<&'a str>,
    tenants: Vec<&'a str>,
    args: Vec<&'a Value>,
    /// An empty meta (most jobs) travels as NULL: the statement stores `{}` for it, and the
    /// server does not parse a JSON document per job for nothing.
    metas: Vec<Option<&'a Value>>,
    priorities: Vec<i16>,
    run_ats: Vec<Option<DateTime<Utc>>>,
    delays: Vec<Option<i64>>,
    max_attempts: Vec<i32>,
    idempotency_keys: Vec<Option<&'a str>>,
    request_hashes: Vec<Option<&'a str>>,
    unique_keys: Vec<Option<&'a str>>,
    /// Comma-joined; '' for none.
    limit_keys: Vec<String>,
    /// $21: the stored form of each job's trace context (NULL: none).
    trace_contexts: Vec<Option<Value>>,
}

impl<'a> Columns<'a> {
    fn new(batch: &'a Batch, positions: &[usize]) -> Columns<'a> {
        let len = positions.len();
        let mut columns = Columns {
            ids: Vec::with_capacity(len),
            kinds: Vec::with_capacity(len),
            queues: Vec::with_capacity(len),
            tenants: Vec::with_capacity(len),
            args: Vec::with_capacity(len),
            metas: Vec::with_capacity(len),
            priorities: Vec::with_capacity(len),
            run_ats: Vec::with_capacity(len),
            delays: Vec::with_capacity(len),
            max_attempts: Vec::with_capacity(len),
            idempotency_keys: Vec::with_capacity(len),
            request_hashes: Vec::with_capacity(len),
            unique_keys: Vec::with_capacity(len),
            limit_keys: Vec::with_capacity(len),
            trace_contexts: Vec::with_capacity(len),
        };
        for &i in positions {
            let job = &batch.jobs[i];
            let (run_at, delay) = run_at_or_delay(job);
            columns.ids.push(batch.ids[i]);
            columns.kinds.push(job.kind.as_str());
            columns.queues.push(job.queue.as_str());
            columns.tenants.push(job.tenant.as_str());
            columns.args.push(&job.args);
            columns
                .metas
                .push(Some(&job.meta).filter(|meta| !is_empty_object(meta)));
            columns.priorities.push(job.priority);
            columns.run_ats.push(run_at);
            columns.delays.push(delay);
            columns.max_attempts.push(job.max_attempts);
            columns
                .idempotency_keys
                .push(job.idempotency_key.as_deref());
            columns.request_hashes.push(batch.hashes[i].as_deref());
            columns.unique_keys.push(job.unique_key.as_deref());
            columns.limit_keys.push(
                job.limit_keys
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            );
            columns.trace_contexts.push(trace_context(job));
        }
        columns
    }

    /// Binds the columns as $1-$14 of `query`.
    fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        query
            .bind(&self.ids)
            .bind(&self.kinds)
            .bind(&self.queues)
            .bind(&self.tenants)
            .bind(&self.args)
            .bind(&self.metas)
            .bind(&self.priorities)
            .bind(&self.run_ats)
            .bind(&self.delays)
            .bind(&self.max_attempts)
            .bind(&self.idempotency_keys)
            .bind(&self.request_hashes)
            .bind(&self.unique_keys)
            .bind(&self.limit_keys)
    }
}

/// A job's trace context as the `trace_context` column stores it.
pub(crate) fn trace_context(job: &NewJob) -> Option<Value> {
    job.trace_context
        .as_ref()
        .and_then(|context| serde_json::to_value(context).ok())
}

/// A job's `run_at` as the insert statements take it: an instant, or a delay after the
/// statement's `now()`, or neither (ready now).
fn run_at_or_delay(job: &NewJob) -> (Option<DateTime<Utc>>, Option<i64>) {
    match job.run_at {
        None => (None, None),
        Some(RunAt::At(at)) => (Some(at), None),
        Some(RunAt::After(d)) => (None, Some(micros(d))),
    }
}

/// Inserts the jobs at `positions` with the statement [`Statement::choose`] picks; returns the
/// created ones.
async fn insert(
    conn: &mut PgConnection,
    batch: &Batch,
    family: Family,
    positions: &[usize],
    counting: Counting,
    wake: Wake,
) -> Result<Vec<Inserted>, Error> {
    let statement = Statement::choose(batch, positions, counting);
    if let (Statement::One, [i]) = (statement, positions) {
        return insert_one(conn, batch, family, *i, wake).await;
    }
    let columns = Columns::new(batch, positions);
    let mut distinct_tenants: Vec<&str> = if counting.tenants {
        columns.tenants.clone()
    } else {
        Vec::new()
    };
    distinct_tenants.sort_unstable();
    distinct_tenants.dedup();
    let text = match statement {
        Statement::Keyless => sql::ENQUEUE_INSERT_KEYLESS,
        Statement::One | Statement::Keyed => sql::ENQUEUE_INSERT,
    };
    let query = columns
        .bind(sqlx::query(text))
        .bind(counting.global)
        .bind(counting.tenants)
        .bind(&distinct_tenants)
        .bind(wake == Wake::InTransaction)
        .bind(family.workflow)
        .bind(family.parent)
        .bind(&columns.trace_contexts);
    if statement == Statement::Keyless {
        let rows = query
            .try_map(|row: PgRow| <KeylessRow as sqlx::FromRow<PgRow>>::from_row(&row))
            .fetch_all(conn)
            .await
            .store_err()?;
        expand_keyless(batch, positions, rows)
    } else {
        query
            .try_map(|row: PgRow| <Inserted as sqlx::FromRow<PgRow>>::from_row(&row))
            .fetch_all(conn)
            .await
            .store_err()
    }
}

/// A row of enqueue_insert_keyless.sql: the summary (`id` NULL, `inserted` set) or a
/// job whose run_at is not the statement's `now()`.
#[derive(sqlx::FromRow)]
struct KeylessRow {
    id: Option<Uuid>,
    run_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    ready: bool,
    pending_before: Option<i64>,
    tenant_pending_before: Option<Value>,
    /// How many jobs the statement inserted (the summary only).
    inserted: Option<i64>,
}

impl KeylessRow {
    fn into_inserted(self, id: Uuid) -> Inserted {
        Inserted {
            id,
            run_at: self.run_at,
            created_at: self.created_at,
            ready: self.ready,
            pending_before: self.pending_before,
            tenant_pending_before: self.tenant_pending_before,
        }
    }
}

/// One [`Inserted`] per job at `positions` from enqueue_insert_keyless.sql's summed-up
/// answer: the listed jobs as listed, every other one created at the summary's `now()` and
/// ready then (run_at = created_at). The summary's counts go with the first job (where
/// `insert_and_resolve` reads them).
///
/// # Errors
/// `Fatal` when the answer is not shaped so or counts another number of jobs.
fn expand_keyless(
    batch: &Batch,
    positions: &[usize],
    rows: Vec<KeylessRow>,
) -> Result<Vec<Inserted>, Error> {
    // The summary is looked for, not assumed first: UNION ALL promises no order.
    let mut summary = None;
    let mut listed: HashMap<Uuid, Inserted> = HashMap::new();
    for row in rows {
        match (row.id, row.inserted) {
            (Some(id), _) => {
                listed.insert(id, row.into_inserted(id));
            }
            (None, Some(n)) if summary.is_none() => {
                summary = Some((row.into_inserted(Uuid::nil()), n));
            }
            (None, _) => {
                return Err(Error::fatal(
                    "enqueue answered a second summary row, or one without a count",
                ))
            }
        }
    }
    let summary = match summary {
        Some((row, n)) if usize::try_from(n).ok() == Some(positions.len()) => row,
        Some((_, n)) => {
            return Err(Error::fatal(format!(
                "enqueue inserted {n} jobs of {}",
                positions.len()
            )))
        }
        None => return Err(Error::fatal("enqueue answered without its summary row")),
    };
    let mut counts = Some((summary.pending_before, summary.tenant_pending_before));
    let mut created = Vec::with_capacity(positions.len());
    for &i in positions {
        let id = batch.ids[i];
        let mut job = listed.remove(&id).unwrap_or(Inserted {
            id,
            run_at: summary.run_at,
            created_at: summary.created_at,
            ready: true,
            pending_before: None,
            tenant_pending_before: None,
        });
        if let Some((pending, tenants)) = counts.take() {
            job.pending_before = pending;
            job.tenant_pending_before = tenants;
        }
        created.push(job);
    }
    if !listed.is_empty() {
        return Err(Error::fatal("enqueue returned a job it was not given"));
    }
    Ok(created)
}

/// Runs enqueue_one.sql for the job at `i` (no quota counts); returns it when created.
async fn insert_one(
    conn: &mut PgConnection,
    batch: &Batch,
    family: Family,
    i: usize,
    wake: Wake,
) -> Result<Vec<Inserted>, Error> {
    let job = &batch.jobs[i];
    let (run_at, delay) = run_at_or_delay(job);
    let limit_keys: Vec<&str> = job.limit_keys.iter().map(|k| k.as_str()).collect();
    sqlx::query_as::<_, Inserted>(sql::ENQUEUE_ONE)
        .bind(batch.ids[i])
        .bind(job.kind.as_str())
        .bind(job.queue.as_str())
        .bind(job.tenant.as_str())
        .bind(&job.args)
        .bind(&job.meta)
        .bind(job.priority)
        .bind(run_at)
        .bind(delay)
        .bind(job.max_attempts)
        .bind(job.idempotency_key.as_deref())
        .bind(batch.hashes[i].as_deref())
        .bind(job.unique_key.as_deref())
        .bind(&limit_keys)
        .bind(wake == Wake::InTransaction)
        .bind(family.workflow)
        .bind(family.parent)
        .bind(trace_context(job))
        .fetch_all(conn)
        .await
        .store_err()
}

/// Runs enqueue_lookup.sql for the keys of the jobs at `positions`.
async fn lookup(
    conn: &mut PgConnection,
    batch: &Batch,
    positions: &[usize],
) -> Result<Vec<Holder>, Error> {
    let mut idem_tenants = Vec::new();
    let mut idem_keys = Vec::new();
    let mut unique_tenants = Vec::new();
    let mut unique_keys = Vec::new();
    for &i in positions {
        let job = &batch.jobs[i];
        if let Some(key) = &job.idempotency_key {
            idem_tenants.push(job.tenant.as_str());
            idem_keys.push(key.as_str());
        }
        if let Some(key) = &job.unique_key {
            unique_tenants.push(job.tenant.as_str());
            unique_keys.push(key.as_str());
        }
    }
    let records = sqlx::query_as::<_, JobRecord>(sql::ENQUEUE_LOOKUP)
        .bind(&idem_tenants)
        .bind(&idem_keys)
        .bind(&unique_tenants)
        .bind(&unique_keys)
        .fetch_all(conn)
        .await
        .store_err()?;
    let mut seen = std::collections::HashSet::new();
    records
        .into_iter()
        .filter(|r| seen.insert(r.id))
        .map(Holder::from_record)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_locks_are_bounded_and_ordered() {
        let tenants: Vec<TenantId> = (0..5000)
            .map(|n| TenantId::parse(format!("t{n}")).unwrap())
            .collect();
        assert_eq!(
            quota_lock_keys(true, Some(tenants.iter())),
            vec![GLOBAL_QUOTA_LOCK]
        );
        let keys = quota_lock_keys(false, Some(tenants.iter()));
        assert_eq!(keys.len() as u64, TENANT_LOCK_STRIPES);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let one = quota_lock_keys(false, Some(tenants[..1].iter()));
        assert_eq!(one, quota_lock_keys(false, Some(tenants[..1].iter())));
        assert!(quota_lock_keys(false, None::<std::slice::Iter<'_, TenantId>>).is_empty());
    }
}

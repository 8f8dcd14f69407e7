//! The memory store's state behind its one mutex, and the job operations that run under it:
//! enqueue, claim, worker writes, cancel, retry, rescue, reconcile and prune.
//!
//! Every state change goes through `drover_core::apply`; this file only finds the jobs an
//! operation concerns, checks what lies outside a single job (keys, quotas, limits, paused
//! queues) and keeps the [`Indexes`] in step.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::limits::LimitState;
use drover_core::{
    apply, Admission, EnqueueStatus, Enqueued, Error, Event, FencingToken, Job, JobId, LimitKey,
    LimitPolicy, NewJob, QueueInfo, QueueName, Quota, Quotas, Schedule, ScheduleName, TenantId,
    Transition, WorkerId, WorkerInfo, WorkflowId,
};
use drover_core::{ActivityMinute, ClaimJobs, Claimed, Result};
use uuid::Uuid;

use crate::index::{id_of, key_time, FastMap, Indexes, JobTable, Placement, ReadyKey};
use crate::workflow::Workflows;

/// `at` as PostgreSQL stores it: a leap second folded into the next second, floored to whole
/// microseconds ([`drover_core::clock::stored_instant`]).
pub(crate) fn micros(at: DateTime<Utc>) -> DateTime<Utc> {
    drover_core::clock::stored_instant(at)
}

/// Truncates the timestamps a transition may compute from a caller's duration.
pub(crate) fn normalize(job: &mut Job) {
    job.run_at = micros(job.run_at);
    job.lease_expires_at = job.lease_expires_at.map(micros);
    job.started_at = job.started_at.map(micros);
}

/// A stored idempotency key: the job it created and the request hash (`None` for rows written
/// before hashes were kept).
#[derive(Debug, Clone)]
pub(crate) struct IdempotencyEntry {
    pub job: JobId,
    pub hash: Option<String>,
}

/// A limit policy with its GCRA theoretical arrival time.
#[derive(Debug, Clone)]
pub(crate) struct StoredLimit {
    pub policy: LimitPolicy,
    pub rate_tat: Option<DateTime<Utc>>,
}

/// A job to enqueue, validated, with its request hash when it carries an idempotency key.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub job: NewJob,
    pub hash: Option<String>,
    /// Its position in the caller's input, for error fields (`jobs[i]`).
    pub label: usize,
    /// Positions in the batch of earlier entries it depends on (a workflow's local names).
    pub local_deps: Vec<usize>,
}

impl Prepared {
    /// An entry of a plain batch: labelled by its position, no local dependencies.
    pub fn plain(job: NewJob, hash: Option<String>, label: usize) -> Self {
        Prepared {
            job,
            hash,
            label,
            local_deps: Vec::new(),
        }
    }
}

/// Where the jobs of an enqueue come from, besides their own fields.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Origin {
    /// The workflow every created job joins.
    pub workflow: Option<WorkflowId>,
    /// The parent every created job is a child of.
    pub parent: Option<JobId>,
    /// The length of the caller's input for error fields: above 1 prefixes `jobs[i].`.
    pub batch_len: usize,
    /// Most jobs the batch may create (a parent's room for live children), if bounded.
    pub room: Option<usize>,
}

/// How one job of an enqueue batch will be answered.
pub(crate) enum Decision {
    /// Store it.
    Create,
    /// Answer with a stored job.
    Existing(EnqueueStatus, JobId),
    /// Answer with the job created for an earlier entry of the batch.
    SameAs(EnqueueStatus, usize),
}

/// Everything the memory store holds.
#[derive(Debug, Default)]
pub(crate) struct Inner {
    pub jobs: JobTable,
    pub idx: Indexes,
    pub idempotency: FastMap<TenantId, FastMap<String, IdempotencyEntry>>,
    pub queues: BTreeMap<QueueName, QueueInfo>,
    pub workers: BTreeMap<WorkerId, WorkerInfo>,
    /// The workers' activity by minute and queue (`drover_core::activity`).
    pub activity: BTreeMap<(DateTime<Utc>, QueueName), ActivityMinute>,
    pub limits: BTreeMap<LimitKey, StoredLimit>,
    pub schedules: BTreeMap<ScheduleName, Schedule>,
    /// Dependency edges, children and workflow records.
    pub wf: Workflows,
    last_id: Option<JobId>,
    /// The Unix millisecond of `last_id`'s fresh UUID.
    last_id_ms: u128,
}

impl Inner {
    /// A new job id, strictly greater than every id handed out before (UUID v7 order).
    ///
    /// A fresh random UUID v7 costs a `getrandom` call, so one is drawn per millisecond and
    /// ids within the same millisecond count up from it (its 62 random bits leave room).
    pub(crate) fn next_id(&mut self) -> JobId {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let id = match self.last_id {
            Some(last) if ms <= self.last_id_ms => {
                JobId(Uuid::from_u128(last.0.as_u128().wrapping_add(1)))
            }
            last => {
                let fresh = JobId::new_v7();
                self.last_id_ms = ms;
                match last {
                    Some(last) if fresh <= last => {
                        JobId(Uuid::from_u128(last.0.as_u128().wrapping_add(1)))
                    }
                    _ => fresh,
                }
            }
        };
        self.last_id = Some(id);
        id
    }

    /// Makes every later id count up from `first` by one, never reading the system clock.
    pub(crate) fn count_ids_from(&mut self, first: JobId) {
        self.last_id = Some(JobId(Uuid::from_u128(first.0.as_u128().wrapping_sub(1))));
        self.last_id_ms = u128::MAX;
    }

    /// True when `queue` is paused.
    pub fn is_paused(&self, queue: &QueueName) -> bool {
        self.queues.get(queue).is_some_and(|q| q.paused)
    }

    /// Applies `event` to job `id` and re-indexes it.
    ///
    /// # Errors
    /// `NotFound` for an unknown job; the errors of `apply` (the job is then unchanged).
    pub fn transition(
        &mut self,
        id: JobId,
        event: Event,
        now: DateTime<Utc>,
    ) -> Result<(Transition, &Job)> {
        self.transition_started(id, None, event, now)
    }

    /// Applies `Event::Started` with `started` (the token and the time since the handler
    /// started), when given, then `event`, to job `id`, and re-indexes it once (a worker's
    /// heartbeat or finish that also reports the start of a job claimed ahead).
    ///
    /// # Errors
    /// `NotFound` for an unknown job; the errors of `apply` (the job is then unchanged, unless
    /// only `event` failed after the start was recorded).
    pub fn transition_started(
        &mut self,
        id: JobId,
        started: Option<(FencingToken, Duration)>,
        event: Event,
        now: DateTime<Utc>,
    ) -> Result<(Transition, &Job)> {
        let job = self
            .jobs
            .get_mut(&id)
            .ok_or_else(|| Error::job_not_found(id))?;
        let before = Placement::of(job);
        let result = match started {
            Some((token, elapsed)) => apply(job, Event::Started { token, elapsed }, now)
                .and_then(|_| apply(job, event, now)),
            None => apply(job, event, now),
        };
        normalize(job);
        self.idx.moved(job, before, now);
        result.map(|transition| (transition, &**job))
    }

    /// Enqueues a validated batch (see `JobStore::jobs_enqueue`). Returns the answers and the
    /// queues that got a job ready at once.
    ///
    /// # Errors
    /// `Conflict` for an idempotency key reused with another request or stored without a hash;
    /// `QuotaExceeded`. On error nothing is stored.
    pub fn enqueue(
        &mut self,
        batch: Vec<Prepared>,
        now: DateTime<Utc>,
        quotas: &Quotas,
    ) -> Result<(Vec<Enqueued>, Vec<QueueName>)> {
        let batch_len = batch.len();
        self.enqueue_from(
            batch,
            now,
            quotas,
            Origin {
                batch_len,
                ..Origin::default()
            },
        )
    }

    /// Enqueues a validated batch whose created jobs join `origin`'s workflow and parent, and
    /// whose entries may depend on earlier ones ([`Prepared::local_deps`]); dependencies are
    /// settled with `drover_core::workflow::settle_new` and their edges stored. Returns the
    /// answers in batch order and the queues that got a job ready at once.
    ///
    /// # Errors
    /// As [`Inner::enqueue`], and `InvalidInput` on `depends_on` for a dependency that names no
    /// job of the tenant. On error nothing is stored.
    pub fn enqueue_from(
        &mut self,
        batch: Vec<Prepared>,
        now: DateTime<Utc>,
        quotas: &Quotas,
        origin: Origin,
    ) -> Result<(Vec<Enqueued>, Vec<QueueName>)> {
        let decisions = self.decide(&batch, origin.batch_len)?;
        if let Some(room) = origin.room {
            let new = decisions
                .iter()
                .filter(|d| matches!(d, Decision::Create))
                .count();
            if new > room {
                return Err(Error::invalid(
                    "jobs",
                    format!(
                        "a parent has at most {} live children: room for {room}, got {new} new",
                        drover_core::job::CHILDREN_MAX
                    ),
                ));
            }
        }
        self.check_quotas(&batch, &decisions, quotas)?;
        self.check_dependencies(&batch, &decisions, origin.batch_len, now)?;

        let mut answered: Vec<Option<JobId>> = vec![None; batch.len()];
        let mut ready_queues: Vec<QueueName> = Vec::new();
        let mut answers = Vec::with_capacity(batch.len());
        for (i, (prepared, decision)) in batch.into_iter().zip(decisions).enumerate() {
            let (status, id) = match decision {
                Decision::Create => {
                    let id = self.next_id();
                    let Prepared {
                        job: new,
                        hash,
                        local_deps,
                        label,
                    } = prepared;
                    let tenant = new.tenant.clone();
                    let mut job = new.into_job(id, now);
                    job.workflow_id = origin.workflow;
                    job.parent_id = origin.parent;
                    if !local_deps.is_empty() {
                        let mut local = Vec::with_capacity(local_deps.len() + job.depends_on.len());
                        let mut seen = HashSet::with_capacity(local.capacity());
                        for k in local_deps {
                            let dependency = answered[k].ok_or_else(|| {
                                Error::fatal("memory store: a dependency comes after its dependent")
                            })?;
                            if seen.insert(dependency) {
                                local.push(dependency);
                            }
                        }
                        for dependency in std::mem::take(&mut job.depends_on) {
                            if seen.insert(dependency) {
                                local.push(dependency);
                            }
                        }
                        job.depends_on = local;
                    }
                    if !job.depends_on.is_empty() {
                        self.settle(&mut job, now)
                            .map_err(|e| e.in_batch_item(label, origin.batch_len))?;
                    }
                    normalize(&mut job);
                    if let Some(key) = &job.idempotency_key {
                        self.idempotency.entry(tenant).or_default().insert(
                            key.clone(),
                            IdempotencyEntry {
                                job: id,
                                hash: hash.clone(),
                            },
                        );
                    }
                    if job.is_ready(now) && !ready_queues.contains(&job.queue) {
                        ready_queues.push(job.queue.clone());
                    }
                    self.idx.inserted(&job, now);
                    self.wf.inserted(&job);
                    answers.push(Enqueued {
                        status: EnqueueStatus::Created,
                        job: job.clone(),
                    });
                    self.jobs.insert(id, Box::new(job));
                    answered[i] = Some(id);
                    continue;
                }
                Decision::Existing(status, id) => (status, id),
                Decision::SameAs(status, earlier) => {
                    let id = answered[earlier].ok_or_else(|| {
                        Error::fatal("memory store: a batch entry referred to a later entry")
                    })?;
                    (status, id)
                }
            };
            answered[i] = Some(id);
            let job = self
                .jobs
                .get(&id)
                .map(|job| Job::clone(job))
                .ok_or_else(|| Error::fatal("memory store: an answered job is missing"))?;
            answers.push(Enqueued { status, job });
        }
        Ok((answers, ready_queues))
    }

    /// Decides, per batch entry, whether it creates a job or is answered with another one.
    ///
    /// # Errors
    /// `Conflict` naming the entry (`jobs[i]`) when the batch holds more than one.
    fn decide(&self, batch: &[Prepared], batch_len: usize) -> Result<Vec<Decision>> {
        let mut decisions = Vec::with_capacity(batch.len());
        // Keys first used by an entry of this batch that creates a job.
        let mut batch_idempotency: HashMap<(&TenantId, &str), (usize, Option<&str>)> =
            HashMap::new();
        let mut batch_unique: HashMap<(&TenantId, &str), usize> = HashMap::new();
        for (i, prepared) in batch.iter().enumerate() {
            let (job, hash, label) = (&prepared.job, &prepared.hash, prepared.label);
            if let Some(key) = job.idempotency_key.as_deref() {
                let stored = self.idempotency.get(&job.tenant).and_then(|m| m.get(key));
                if let Some(entry) = stored {
                    match &entry.hash {
                        None => {
                            return Err(Error::idempotency_unverifiable(entry.job)
                                .in_batch_item(label, batch_len))
                        }
                        Some(h) if Some(h.as_str()) != hash.as_deref() => {
                            return Err(Error::idempotency_reused(entry.job)
                                .in_batch_item(label, batch_len));
                        }
                        Some(_) => {
                            decisions.push(Decision::Existing(EnqueueStatus::Replayed, entry.job));
                            continue;
                        }
                    }
                }
                if let Some(&(earlier, earlier_hash)) = batch_idempotency.get(&(&job.tenant, key)) {
                    if earlier_hash != hash.as_deref() {
                        // Refused before by `prepare_batch` (InvalidInput); kept as a guard.
                        let earlier = batch[earlier].label;
                        return Err(Error::Conflict {
                            reason: format!(
                                "idempotency key is used by jobs[{earlier}] of this batch with a different request"
                            ),
                            existing: None,
                            field: Some("idempotency_key".to_owned()),
                        }
                        .in_batch_item(label, batch_len));
                    }
                    decisions.push(Decision::SameAs(EnqueueStatus::Replayed, earlier));
                    continue;
                }
            }
            if let Some(key) = job.unique_key.as_deref() {
                if let Some(holder) = self.idx.unique_holder(&job.tenant, key) {
                    decisions.push(Decision::Existing(EnqueueStatus::Duplicate, holder));
                    continue;
                }
                if let Some(&earlier) = batch_unique.get(&(&job.tenant, key)) {
                    decisions.push(Decision::SameAs(EnqueueStatus::Duplicate, earlier));
                    continue;
                }
            }
            if let Some(key) = job.idempotency_key.as_deref() {
                batch_idempotency.insert((&job.tenant, key), (i, hash.as_deref()));
            }
            if let Some(key) = job.unique_key.as_deref() {
                batch_unique.insert((&job.tenant, key), i);
            }
            decisions.push(Decision::Create);
        }
        Ok(decisions)
    }

    /// Checks the pending quotas for the jobs a batch creates, all together.
    fn check_quotas(
        &self,
        batch: &[Prepared],
        decisions: &[Decision],
        quotas: &Quotas,
    ) -> Result<()> {
        let mut new_total: u64 = 0;
        let mut new_by_tenant: Vec<(&TenantId, u64)> = Vec::new();
        for (prepared, decision) in batch.iter().zip(decisions) {
            if !matches!(decision, Decision::Create) {
                continue;
            }
            new_total += 1;
            match new_by_tenant
                .iter_mut()
                .find(|(t, _)| **t == prepared.job.tenant)
            {
                Some((_, n)) => *n += 1,
                None => new_by_tenant.push((&prepared.job.tenant, 1)),
            }
        }
        if new_total == 0 {
            return Ok(());
        }
        self.check_quota_room(quotas, new_total, &new_by_tenant)
    }

    /// Refuses when `new_total` more pending jobs (`new_by_tenant` per tenant) would pass a
    /// quota.
    ///
    /// # Errors
    /// `QuotaExceeded` naming the first quota passed (the global one first).
    pub fn check_quota_room(
        &self,
        quotas: &Quotas,
        new_total: u64,
        new_by_tenant: &[(&TenantId, u64)],
    ) -> Result<()> {
        if let Some(max) = quotas.max_pending {
            let current = self.idx.pending;
            if current.saturating_add(new_total) > max {
                return Err(Error::QuotaExceeded {
                    quota: Quota::Global,
                    current,
                    max,
                });
            }
        }
        if let Some(max) = quotas.max_tenant_pending {
            for (tenant, n) in new_by_tenant {
                let current = self.idx.tenant_pending(tenant);
                if current.saturating_add(*n) > max {
                    return Err(Error::QuotaExceeded {
                        quota: Quota::Tenant(tenant.as_str().to_owned()),
                        current,
                        max,
                    });
                }
            }
        }
        Ok(())
    }

    /// Claims up to `claim.limit` ready jobs (see `JobStore::jobs_claim`); arguments already
    /// validated.
    pub fn claim(&mut self, claim: &ClaimJobs, now: DateTime<Utc>) -> Claimed {
        self.idx.promote(&self.jobs, now);
        let limit = usize::try_from(claim.limit).unwrap_or(usize::MAX);
        let (chosen, retry_after) = self.choose(claim, limit, now);
        let start = usize::try_from(claim.start).unwrap_or(usize::MAX);
        let mut claimed = Vec::with_capacity(chosen.len());
        for (n, id) in chosen.into_iter().enumerate() {
            let event = Event::Claim {
                worker: claim.worker.clone(),
                lease: claim.lease,
                start: n < start,
            };
            if let Ok((_, job)) = self.transition(id, event, now) {
                claimed.push(job.clone());
            }
        }
        Claimed {
            jobs: claimed,
            retry_after,
        }
    }

    /// Picks the jobs a claim takes, in claim order, counting them against limit policies
    /// (whose rate state is written back), and how long until a job a rate held back is
    /// admissible ([`Admission::retry_after`]).
    fn choose(
        &mut self,
        claim: &ClaimJobs,
        limit: usize,
        now: DateTime<Utc>,
    ) -> (Vec<JobId>, Option<Duration>) {
        let mut admission = if self.limits.is_empty() {
            None
        } else {
            let states = self.limits.values().map(|l| LimitState {
                policy: l.policy.clone(),
                running: self.idx.running_under(&l.policy.key),
                rate_tat: l.rate_tat,
            });
            Some(Admission::new(now, states))
        };

        let mut seen_queues = HashSet::new();
        let mut sources = Vec::new();
        for queue in &claim.queues {
            if !seen_queues.insert(queue) || self.is_paused(queue) {
                continue;
            }
            let Some(by_kind) = self.idx.ready.get(queue) else {
                continue;
            };
            let mut seen_kinds = HashSet::new();
            for kind in &claim.kinds {
                if !seen_kinds.insert(kind) {
                    continue;
                }
                if let Some(set) = by_kind.get(kind) {
                    if !set.is_empty() {
                        sources.push(set.iter());
                    }
                }
            }
        }

        // Merge the per-(queue, kind) sets in claim order.
        let mut heads: BinaryHeap<Reverse<(ReadyKey, usize)>> = BinaryHeap::new();
        for (i, source) in sources.iter_mut().enumerate() {
            if let Some(key) = source.next() {
                heads.push(Reverse((*key, i)));
            }
        }
        let now_key = key_time(now);
        let mut chosen = Vec::new();
        while chosen.len() < limit {
            let Some(Reverse((key, i))) = heads.pop() else {
                break;
            };
            let (_, run_at, id) = key;
            let id = id_of(id);
            // The ready index holds only queued jobs, keyed by their run_at; a clock set back
            // can leave a job there that is not ready yet.
            let mut take = run_at <= now_key;
            let mut source_open = true;
            if let (true, Some(admission)) = (take, admission.as_mut()) {
                match self.jobs.get(&id) {
                    None => take = false,
                    Some(job) => {
                        let keys = job.effective_limit_keys();
                        if admission.applies_to(&keys) && !admission.try_admit(&keys) {
                            take = false;
                            // Every later job of this source shares the refused job's queue
                            // and kind: when either key is closed, none of them can be
                            // admitted (Admission::closed), so the source is done.
                            source_open = !admission.closed(&LimitKey::for_queue(&job.queue))
                                && !admission.closed(&LimitKey::for_kind(&job.kind));
                        }
                    }
                }
            }
            if source_open {
                if let Some(next) = sources[i].next() {
                    heads.push(Reverse((*next, i)));
                }
            }
            if take {
                chosen.push(id);
            }
        }
        drop(sources);

        let mut retry_after = None;
        if let Some(admission) = admission {
            retry_after = admission.retry_after();
            for state in admission.into_touched() {
                if let Some(stored) = self.limits.get_mut(&state.policy.key) {
                    stored.rate_tat = state.rate_tat;
                }
            }
        }
        (chosen, retry_after)
    }

    /// Deletes up to `limit` terminal jobs finished before `cutoff`, with their idempotency
    /// keys, skipping the jobs live jobs still need ([`Inner::protected`]); returns how many.
    pub fn prune(&mut self, cutoff: DateTime<Utc>, limit: usize) -> u64 {
        // Finished strictly before `cutoff`: up to the microsecond before it.
        let mut doomed: Vec<JobId> = Vec::new();
        self.idx
            .finished
            .scan_up_to(key_time(cutoff).saturating_sub(1), |(_, id)| {
                let id = id_of(id);
                if self.jobs.get(&id).is_some_and(|job| !self.protected(job)) {
                    doomed.push(id);
                }
                doomed.len() < limit
            });
        let mut pruned = 0;
        for id in doomed {
            if self.remove(id) {
                pruned += 1;
            }
        }
        pruned
    }

    /// Deletes job `id` from the jobs, every index and the idempotency keys (prune, and a
    /// success under `SucceededJobs::Delete`); `false` if there was no such job.
    pub fn remove(&mut self, id: JobId) -> bool {
        let Some(job) = self.jobs.remove(&id) else {
            return false;
        };
        self.idx.removed(&job);
        self.wf.removed(&job);
        if let Some(key) = &job.idempotency_key {
            if let Some(keys) = self.idempotency.get_mut(&job.tenant) {
                if keys.get(key).is_some_and(|e| e.job == id) {
                    keys.remove(key);
                }
                if keys.is_empty() {
                    self.idempotency.remove(&job.tenant);
                }
            }
        }
        true
    }
}

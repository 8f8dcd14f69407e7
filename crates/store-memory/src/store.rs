//! [`MemoryStore`]: the whole [`JobStore`] contract in process memory, behind one mutex.
//!
//! Each trait method validates its arguments, takes the lock once, does its work with
//! `drover_core::apply` for every transition, releases the lock, then publishes wake-up events.
//! Nothing blocks while the lock is held, so the store is safe to share between tokio tasks
//! and threads as `Arc<dyn JobStore>`.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::activity::{self, ActivityMinute, ListActivity, ACTIVITY_RETENTION};
use drover_core::bounds::EVENT_BUFFER;
use drover_core::search::ArgsSearch;
use drover_core::workflow::WorkflowSummary;
use drover_core::FencingToken;
use drover_core::{
    clock, json, Actor, AuditPage, CancelEffect, CancelOutcome, ClaimJobs, ClaimReconciling,
    Claimed, Clock, Enqueued, Entity, Error, Event, EventStream, Finish, FinishItem, FinishReply,
    FireSchedule, HeartbeatJobs, HeartbeatReply, Job, JobId, JobPage, JobState, JobStore, LimitKey,
    LimitPolicy, LimitStatus, ListAudit, ListJobs, NewAuditEntry, NewJob, NewSchedule, Operated,
    Operation, PruneAudit, PruneJobs, QueueChange, QueueInfo, QueueName, QueueSnapshot,
    RequeueOutcome, RescueExpired, Rescued, Resolution, Result, Schedule, ScheduleChange,
    ScheduleName, ScheduleUpsert, Snapshot, StoreConfig, StoreEvent, SucceededJobs, SystemClock,
    Transition, VacuumStatus, WorkerId, WorkerInfo, WorkerRegistration,
};
use drover_core::{
    EnqueueChildren, EnqueuedWorkflow, ListWorkflows, NewWorkflow, Workflow, WorkflowChange,
    WorkflowId, WorkflowPage,
};
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::StreamExt;

use crate::audit::AuditLog;
use crate::index::{id_of, key_time, state_slot, time_of, ReadyKey, WAITING_SLOT};
use crate::inner::{micros, Inner, Origin, Prepared, StoredLimit};
use crate::workflow::{Effects, WorkflowRecord};

/// The in-memory job store: docs/design.md's explicit development mode (nothing survives a restart)
/// and the benchmark baseline.
///
/// Claims, finishes, rescue and prune cost O(batch · log n) thanks to per-queue, per-kind
/// ready indexes. Time comes from the injected [`Clock`], truncated to whole microseconds so
/// values match what PostgreSQL stores.
#[derive(Debug)]
pub struct MemoryStore {
    config: StoreConfig,
    clock: Arc<dyn Clock>,
    inner: Mutex<Inner>,
    audit: Mutex<AuditLog>,
    events: broadcast::Sender<StoreEvent>,
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new(config: StoreConfig) -> Self {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// An empty store on `clock` (tests pass a [`drover_core::ManualClock`]).
    pub fn with_clock(config: StoreConfig, clock: Arc<dyn Clock>) -> Self {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        MemoryStore {
            config,
            clock,
            inner: Mutex::new(Inner::default()),
            audit: Mutex::new(AuditLog::default()),
            events,
        }
    }

    /// An empty store on `clock` whose job ids count up from `first` instead of drawing UUID
    /// v7 from the system clock, so the same calls give the same ids (the deterministic
    /// simulator, `drover-sim`).
    pub fn with_clock_and_first_id(
        config: StoreConfig,
        clock: Arc<dyn Clock>,
        first: JobId,
    ) -> Self {
        let store = Self::with_clock(config, clock);
        store.inner.lock().count_ids_from(first);
        store
    }

    /// The store's clock, truncated to whole microseconds.
    fn clock_now(&self) -> DateTime<Utc> {
        micros(self.clock.now())
    }

    /// Test hook for the contract suite: erases the request hash stored with job `id`'s
    /// idempotency key, as rows written before hashes were kept look. No effect when the job
    /// has no key.
    #[doc(hidden)]
    pub fn test_forget_request_hash(&self, id: JobId) {
        let mut inner = self.inner.lock();
        let Some((tenant, key)) = inner
            .jobs
            .get(&id)
            .and_then(|j| Some((j.tenant.clone(), j.idempotency_key.clone()?)))
        else {
            return;
        };
        if let Some(entry) = inner
            .idempotency
            .get_mut(&tenant)
            .and_then(|m| m.get_mut(&key))
        {
            entry.hash = None;
        }
    }

    fn publish(&self, event: StoreEvent) {
        if self.events.receiver_count() > 0 {
            // Without subscribers there is nobody to wake; a send error only means that.
            let _ = self.events.send(event);
        }
    }

    fn publish_ready(&self, queues: Vec<QueueName>) {
        for queue in queues {
            self.publish(StoreEvent::JobsAvailable { queue });
        }
    }

    /// Publishes what a propagation did: wake-ups for queues that got a ready job, cancel
    /// requests for running jobs it signalled.
    fn publish_effects(&self, fx: Effects) {
        self.publish_ready(fx.ready);
        for id in fx.cancel_requested {
            self.publish(StoreEvent::CancelRequested { id });
        }
    }
}

/// Whom a job that just stopped running wakes, given its queue and effective limit keys
/// `keys`, as the PostgreSQL store does (finish.sql's `freed_queue`): nobody unless a policy
/// with a `max_running` bound covers it, whose place it frees; its queue when only its queue's
/// policy (`queue:<queue>`) does, since only that queue's jobs can wait for that place; every
/// claim loop (`LimitsChanged`) when a kind's or an explicit key's policy does, since jobs of
/// any queue may wait for those.
fn freed_place(inner: &Inner, queue: &QueueName, keys: &[LimitKey]) -> Option<StoreEvent> {
    let bounded = |key: &LimitKey| {
        inner
            .limits
            .get(key)
            .is_some_and(|limit| limit.policy.max_running.is_some())
    };
    let queue_key = LimitKey::for_queue(queue);
    if keys.iter().any(|key| *key != queue_key && bounded(key)) {
        Some(StoreEvent::LimitsChanged)
    } else if bounded(&queue_key) {
        Some(StoreEvent::JobsAvailable {
            queue: queue.clone(),
        })
    } else {
        None
    }
}

/// Validates a batch and computes request hashes, outside the lock.
fn prepare(mut jobs: Vec<NewJob>, config: &StoreConfig) -> Result<Vec<Prepared>> {
    let hashes = drover_core::job::prepare_batch(&mut jobs, &config.sizes)?;
    Ok(jobs
        .into_iter()
        .zip(hashes)
        .enumerate()
        .map(|(i, (job, hash))| Prepared::plain(job, hash, i))
        .collect())
}

/// A workflow's summary: its counts per state.
fn summary(id: WorkflowId, record: &WorkflowRecord, jobs: &[&Job]) -> WorkflowSummary {
    let mut states = std::collections::BTreeMap::new();
    for job in jobs {
        *states.entry(job.state).or_insert(0u64) += 1;
    }
    WorkflowSummary {
        id,
        tenant: record.tenant.clone(),
        created_at: record.created_at,
        states,
    }
}

/// Since when the longest-waiting ready job of `set` has been ready: the earliest
/// `max(run_at, created_at)` (a job cannot wait from before it existed, so a `run_at` far in
/// the past does not inflate the lag; docs/design.md section 4, queue snapshot). Looks at every
/// ready job of the set (a snapshot is an operator's call, not the claim path).
fn oldest_ready_since(
    set: &std::collections::BTreeSet<ReadyKey>,
    jobs: &crate::index::JobTable,
) -> Option<DateTime<Utc>> {
    set.iter()
        .filter_map(|&(_, run_at, id)| {
            let run_at = time_of(run_at);
            jobs.get(&id_of(id)).map(|job| run_at.max(job.created_at))
        })
        .min()
}

#[async_trait]
impl JobStore for MemoryStore {
    async fn jobs_enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let prepared = prepare(jobs, &self.config)?;
        let (answers, ready) = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            inner.enqueue(prepared, now, &self.config.quotas)?
        };
        self.publish_ready(ready);
        Ok(answers)
    }

    async fn workflow_enqueue(&self, workflow: NewWorkflow) -> Result<EnqueuedWorkflow> {
        let plan = workflow.plan(&self.config.sizes)?;
        let mut jobs: Vec<NewJob> = workflow
            .jobs
            .into_iter()
            .map(|entry| {
                let mut job = entry.job;
                job.name = Some(entry.name);
                job
            })
            .collect();
        let tenant = jobs[0].tenant.clone();
        let hashes = drover_core::job::prepare_batch(&mut jobs, &self.config.sizes)?;
        // The batch in plan order: every job after the jobs of the graph it depends on.
        let mut position = vec![0; jobs.len()];
        for (at, planned) in plan.iter().enumerate() {
            position[planned.index] = at;
        }
        let mut slots: Vec<Option<(NewJob, Option<String>)>> =
            jobs.into_iter().zip(hashes).map(Some).collect();
        let batch = plan
            .iter()
            .map(|planned| {
                let (job, hash) = slots[planned.index]
                    .take()
                    .ok_or_else(|| Error::fatal("memory store: a plan named a job twice"))?;
                Ok(Prepared {
                    job,
                    hash,
                    label: planned.index,
                    local_deps: planned.depends_on.iter().map(|&d| position[d]).collect(),
                })
            })
            .collect::<Result<Vec<Prepared>>>()?;
        let (id, answers, ready) = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            // Time-ordered and strictly increasing, as job ids are.
            let id = WorkflowId(inner.next_id().0);
            inner.wf.records.insert(
                id,
                WorkflowRecord {
                    tenant,
                    created_at: now,
                    jobs: Vec::new(),
                    stored: 0,
                },
            );
            let origin = Origin {
                workflow: Some(id),
                parent: None,
                batch_len: usize::MAX,
                room: None,
            };
            match inner.enqueue_from(batch, now, &self.config.quotas, origin) {
                Ok((answers, ready)) => {
                    // Nothing created (every job a replay or a unique key's holder): the
                    // graph answers the workflow those jobs belong to, and stores none.
                    let created = answers
                        .iter()
                        .any(|a| a.status == drover_core::EnqueueStatus::Created);
                    if !created {
                        inner.wf.records.remove(&id);
                    }
                    let id = drover_core::workflow::answered_workflow(id, &answers);
                    (id, answers, ready)
                }
                Err(e) => {
                    inner.wf.records.remove(&id);
                    return Err(e);
                }
            }
        };
        self.publish_ready(ready);
        let mut answers: Vec<Option<Enqueued>> = answers.into_iter().map(Some).collect();
        let jobs = position
            .iter()
            .map(|&at| {
                answers[at]
                    .take()
                    .ok_or_else(|| Error::fatal("memory store: a workflow answer is missing"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(EnqueuedWorkflow { id, jobs })
    }

    async fn children_enqueue(&self, children: EnqueueChildren) -> Result<Vec<Enqueued>> {
        let EnqueueChildren {
            parent,
            token,
            jobs,
        } = children;
        let batch_len = jobs.len();
        let prepared = prepare(jobs, &self.config)?;
        let (answers, ready) = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            let stored = inner
                .jobs
                .get(&parent)
                .ok_or_else(|| Error::job_not_found(parent))?;
            drover_core::state::check_lease(stored, token, now)?;
            for (i, child) in prepared.iter().enumerate() {
                if child.job.tenant != stored.tenant {
                    return Err(Error::invalid(
                        "tenant",
                        format!("must be the tenant of the parent job ({})", stored.tenant),
                    )
                    .in_batch_item(i, batch_len));
                }
            }
            if prepared.is_empty() {
                return Ok(Vec::new());
            }
            let origin = Origin {
                workflow: stored.workflow_id,
                parent: Some(parent),
                batch_len,
                room: Some(Inner::children_room(stored.live_children)),
            };
            let (answers, ready) =
                inner.enqueue_from(prepared, now, &self.config.quotas, origin)?;
            // New children not already terminal (one cancelled by its dependency at birth
            // never ends again) are live.
            let live = answers
                .iter()
                .filter(|a| a.status == drover_core::EnqueueStatus::Created)
                .filter(|a| !a.job.state.is_terminal())
                .count();
            let event = Event::ChildrenAdded {
                token: Some(token),
                count: u32::try_from(live).unwrap_or(u32::MAX),
            };
            inner.transition(parent, event, now)?;
            (answers, ready)
        };
        self.publish_ready(ready);
        Ok(answers)
    }

    async fn jobs_tenants(&self, ids: Vec<JobId>) -> Result<Vec<(JobId, drover_core::TenantId)>> {
        drover_core::bounds::check_ids_len(ids.len())?;
        let inner = self.inner.lock();
        Ok(ids
            .iter()
            .filter_map(|id| inner.jobs.get(id).map(|job| (*id, job.tenant.clone())))
            .collect())
    }

    async fn jobs_get(&self, ids: Vec<JobId>) -> Result<Vec<Job>> {
        drover_core::bounds::check_ids_len(ids.len())?;
        let inner = self.inner.lock();
        Ok(ids
            .iter()
            .filter_map(|id| inner.jobs.get(id).map(|job| Job::clone(job)))
            .collect())
    }

    async fn workflow_get(&self, id: WorkflowId) -> Result<Workflow> {
        let inner = self.inner.lock();
        let (record, jobs) = inner.workflow_jobs(id)?;
        Ok(Workflow {
            id,
            tenant: record.tenant,
            created_at: record.created_at,
            jobs: jobs.into_iter().cloned().collect(),
        })
    }

    async fn workflows_list(&self, query: ListWorkflows) -> Result<WorkflowPage> {
        query.validate()?;
        let page = usize::try_from(query.page_size()).unwrap_or(usize::MAX);
        let inner = self.inner.lock();
        let upper = match query.before {
            Some(before) => std::ops::Bound::Excluded(before),
            None => std::ops::Bound::Unbounded,
        };
        let mut workflows = Vec::with_capacity(page);
        let mut next = None;
        let matching = inner
            .wf
            .records
            .range((std::ops::Bound::Unbounded, upper))
            .rev()
            .filter(|(_, record)| query.tenant.as_ref().is_none_or(|t| &record.tenant == t));
        for (id, record) in matching {
            if workflows.len() == page {
                next = workflows.last().map(|w: &WorkflowSummary| w.id);
                break;
            }
            let jobs: Vec<&Job> = record
                .jobs
                .iter()
                .filter_map(|j| inner.jobs.get(j).map(|j| &**j))
                .collect();
            workflows.push(summary(*id, record, &jobs));
        }
        Ok(WorkflowPage { workflows, next })
    }

    async fn workflow_cancel(&self, id: WorkflowId) -> Result<WorkflowChange> {
        let mut fx = Effects::default();
        let jobs = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            inner.workflow_cancel(id, now, &mut fx)?
        };
        self.publish_effects(fx);
        Ok(WorkflowChange { id, jobs })
    }

    async fn workflow_retry(&self, id: WorkflowId) -> Result<WorkflowChange> {
        let mut fx = Effects::default();
        let jobs = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            inner.workflow_retry(id, now, &self.config.quotas, &mut fx)?
        };
        self.publish_effects(fx);
        Ok(WorkflowChange { id, jobs })
    }

    async fn job_get(&self, id: JobId) -> Result<Job> {
        self.inner
            .lock()
            .jobs
            .get(&id)
            .map(|job| Job::clone(job))
            .ok_or_else(|| Error::job_not_found(id))
    }

    async fn jobs_list(&self, query: ListJobs) -> Result<JobPage> {
        if let Some(mut search) = ArgsSearch::new(&query)? {
            while let Some(read) = search.next_read() {
                search.take(self.jobs_list(read).await?);
            }
            return Ok(search.finish());
        }
        query.validate()?;
        let page = usize::try_from(query.page_size()).unwrap_or(usize::MAX);
        let inner = self.inner.lock();
        // A parent's children or a workflow's jobs are read from their index, not a scan.
        let candidates: Box<dyn Iterator<Item = &Job>> = if let Some(parent) = query.parent {
            let ids = inner
                .wf
                .children
                .get(&parent)
                .map_or(&[][..], Vec::as_slice);
            Box::new(ids.iter().filter_map(|id| inner.jobs.get(id).map(|j| &**j)))
        } else if let Some(workflow) = query.workflow {
            let ids = inner
                .wf
                .records
                .get(&workflow)
                .map_or(&[][..], |r| r.jobs.as_slice());
            Box::new(ids.iter().filter_map(|id| inner.jobs.get(id).map(|j| &**j)))
        } else {
            Box::new(inner.jobs.values().map(|j| &**j))
        };
        let mut matching: Vec<&Job> = candidates
            .filter(|j| query.parent.is_none_or(|p| j.parent_id == Some(p)))
            .filter(|j| query.workflow.is_none_or(|w| j.workflow_id == Some(w)))
            .filter(|j| query.before.is_none_or(|before| j.id < before))
            .filter(|j| query.queue.as_ref().is_none_or(|q| &j.queue == q))
            .filter(|j| query.state.is_none_or(|s| j.state == s))
            .filter(|j| query.kind.as_ref().is_none_or(|k| &j.kind == k))
            .filter(|j| query.tenant.as_ref().is_none_or(|t| &j.tenant == t))
            .filter(|j| {
                query
                    .meta
                    .as_ref()
                    .is_none_or(|m| json::contains(&j.meta, m))
            })
            .collect();
        let more = matching.len() > page;
        if more {
            matching.select_nth_unstable_by(page, |a, b| b.id.cmp(&a.id));
            matching.truncate(page);
        }
        matching.sort_unstable_by_key(|j| std::cmp::Reverse(j.id));
        let jobs: Vec<Job> = matching
            .into_iter()
            .map(|j| {
                let mut job = j.clone();
                query.details.strip(&mut job);
                job
            })
            .collect();
        let next = if more {
            jobs.last().map(|j| j.id)
        } else {
            None
        };
        Ok(JobPage { jobs, next })
    }

    async fn jobs_claim(&self, claim: ClaimJobs) -> Result<Claimed> {
        claim.validate()?;
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        Ok(inner.claim(&claim, now))
    }

    async fn jobs_heartbeat(&self, heartbeat: HeartbeatJobs) -> Result<Vec<HeartbeatReply>> {
        heartbeat.validate(&self.config.sizes)?;
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        let replies = heartbeat
            .jobs
            .into_iter()
            .map(|item| {
                let id = item.id;
                let started = item.started.map(|elapsed| (item.token, elapsed));
                let event = Event::Heartbeat {
                    token: item.token,
                    lease: heartbeat.lease,
                    meta: item.meta.map(json::normalized),
                    progress: item.progress.map(json::normalized),
                };
                match inner.transition_started(id, started, event, now) {
                    Ok((_, job)) => HeartbeatReply::Extended {
                        id,
                        cancel_requested: job.cancel_requested,
                        lease_expires_at: job.lease_expires_at.unwrap_or(now),
                    },
                    Err(_) => HeartbeatReply::LeaseLost { id },
                }
            })
            .collect();
        Ok(replies)
    }

    async fn jobs_finish(&self, items: Vec<FinishItem>) -> Result<Vec<FinishReply>> {
        FinishItem::validate_batch(&items, &self.config.sizes)?;
        let mut ready = Vec::new();
        // A finish under a kind's or an explicit key's max_running bound wakes every loop.
        let mut wake_all = false;
        let mut fx = Effects::default();
        let replies = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            let limited = !inner.limits.is_empty();
            let delete = self.config.succeeded_jobs == SucceededJobs::Delete;
            let mut ended = Vec::new();
            let mut succeeded = Vec::new();
            let mut replies: Vec<FinishReply> = items
                .into_iter()
                .map(|item| {
                    let id = item.id;
                    let token = item.token;
                    let started = item.started.map(|elapsed| (token, elapsed));
                    let finish = match item.finish {
                        Finish::Succeeded { result } => Finish::Succeeded {
                            result: result.map(json::normalized),
                        },
                        other => other,
                    };
                    let event = finish.into_event(token);
                    match inner.transition_started(id, started, event, now) {
                        Ok((transition, job)) => {
                            let freed = if job.is_ready(now) {
                                Some(StoreEvent::JobsAvailable {
                                    queue: job.queue.clone(),
                                })
                            } else if limited {
                                let (queue, keys) = (job.queue.clone(), job.effective_limit_keys());
                                freed_place(&inner, &queue, &keys)
                            } else {
                                None
                            };
                            match freed {
                                Some(StoreEvent::JobsAvailable { queue })
                                    if !ready.contains(&queue) =>
                                {
                                    ready.push(queue);
                                }
                                Some(StoreEvent::LimitsChanged) => wake_all = true,
                                _ => {}
                            }
                            if transition.to.is_terminal() {
                                ended.push(id);
                            }
                            if delete && transition.to == JobState::Succeeded {
                                succeeded.push(id);
                            }
                            FinishReply::Recorded {
                                id,
                                to: transition.to,
                            }
                        }
                        Err(_) => FinishReply::LeaseLost { id },
                    }
                })
                .collect();
            // Dependents, parents and children follow in the same step (docs/design.md
            // section 10); a success others read is kept under delete-on-success.
            inner.propagate(ended, now, &mut fx);
            // Each reply names the state the step leaves its job in: propagation may have
            // moved a job of the batch after its own item (a child whose parent the batch
            // cancelled ends cancelled, as it would have one item at a time).
            for reply in &mut replies {
                if let FinishReply::Recorded { id, to } = reply {
                    if let Some(job) = inner.jobs.get(id) {
                        *to = job.state;
                    }
                }
            }
            for id in succeeded {
                if !inner.keeps_success(id) {
                    inner.remove(id);
                }
            }
            replies
        };
        self.publish_ready(ready);
        self.publish_effects(fx);
        if wake_all {
            self.publish(StoreEvent::LimitsChanged);
        }
        Ok(replies)
    }

    async fn job_cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let mut fx = Effects::default();
        let outcome = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            let (transition, _) = inner.transition(id, Event::Cancel, now)?;
            let effect = if transition.to == JobState::Cancelled {
                CancelEffect::Cancelled
            } else {
                CancelEffect::Requested
            };
            // Its children, and its dependents when it ended, follow in the same step.
            inner.propagate(vec![id], now, &mut fx);
            let job = inner
                .jobs
                .get(&id)
                .map(|job| Job::clone(job))
                .ok_or_else(|| Error::job_not_found(id))?;
            CancelOutcome {
                effect,
                job,
                cascaded: fx.cascaded,
            }
        };
        if outcome.effect == CancelEffect::Requested {
            self.publish(StoreEvent::CancelRequested { id });
        }
        self.publish_effects(fx);
        Ok(outcome)
    }

    async fn job_retry(&self, id: JobId) -> Result<Job> {
        let job = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            let job = inner
                .jobs
                .get(&id)
                .ok_or_else(|| Error::job_not_found(id))?;
            if !job.state.is_terminal() {
                return Err(Error::InvalidTransition {
                    from: job.state,
                    event: drover_core::EventName::Retry,
                });
            }
            inner.check_quota_room(&self.config.quotas, 1, &[(&job.tenant, 1)])?;
            if let Some(key) = &job.unique_key {
                if let Some(holder) = inner.idx.unique_holder(&job.tenant, key) {
                    if holder != id {
                        return Err(Error::unique_key_held(holder));
                    }
                }
            }
            let linked = !job.depends_on.is_empty() || job.parent_id.is_some();
            if linked {
                // Waits again for its dependencies still live; its parent counts it live.
                let mut fx = Effects::default();
                inner.retry_linked(&std::iter::once(id).collect(), now, &mut fx);
            } else {
                inner.transition(id, Event::Retry, now)?;
            }
            inner
                .jobs
                .get(&id)
                .map(|job| Job::clone(job))
                .ok_or_else(|| Error::job_not_found(id))?
        };
        self.publish(StoreEvent::JobsAvailable {
            queue: job.queue.clone(),
        });
        Ok(job)
    }

    async fn job_requeue(&self, id: JobId) -> Result<RequeueOutcome> {
        let outcome = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            let run_at = inner
                .jobs
                .get(&id)
                .map(|job| job.run_at)
                .ok_or_else(|| Error::job_not_found(id))?;
            let (_, job) = inner.transition(id, Event::Requeue, now)?;
            RequeueOutcome {
                changed: job.run_at != run_at,
                job: job.clone(),
            }
        };
        if outcome.changed {
            self.publish(StoreEvent::JobsAvailable {
                queue: outcome.job.queue.clone(),
            });
        }
        Ok(outcome)
    }

    async fn job_delete(&self, id: JobId) -> Result<Job> {
        let mut inner = self.inner.lock();
        let job = inner
            .jobs
            .get(&id)
            .map(|job| Job::clone(job))
            .ok_or_else(|| Error::job_not_found(id))?;
        drover_core::check_delete(&job, inner.delete_links(&job))?;
        inner.remove(id);
        Ok(job)
    }

    async fn jobs_rescue_expired(&self, rescue: RescueExpired) -> Result<Vec<Rescued>> {
        let limit = usize::try_from(rescue.limit).unwrap_or(usize::MAX);
        let mut ready = Vec::new();
        let mut fx = Effects::default();
        let rescued = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            let mut ended = Vec::new();
            let expired: Vec<JobId> = inner
                .idx
                .leases
                .up_to(key_time(now), limit)
                .into_iter()
                .map(|(_, id)| id_of(id))
                .collect();
            let mut rescued = Vec::with_capacity(expired.len());
            for id in expired {
                let Some((reconciler, attempt)) = inner
                    .jobs
                    .get(&id)
                    .map(|j| (rescue.reconciler_kinds.contains(&j.kind), j.attempt))
                else {
                    continue;
                };
                if let Ok((transition, job)) =
                    inner.transition(id, Event::LeaseExpired { reconciler }, now)
                {
                    if job.is_ready(now) && !ready.contains(&job.queue) {
                        ready.push(job.queue.clone());
                    }
                    if transition.to.is_terminal() {
                        ended.push(id);
                    }
                    rescued.push(Rescued {
                        id,
                        kind: job.kind.clone(),
                        queue: job.queue.clone(),
                        to: transition.to,
                        attempt_spent: job.attempt == attempt,
                    });
                }
            }
            // A job a rescue ended propagates in the same step (docs/design.md section 10);
            // each answer names the state the step leaves its job in (a child rescued in the
            // batch that cancelled its parent ends cancelled).
            inner.propagate(ended, now, &mut fx);
            for r in &mut rescued {
                if let Some(job) = inner.jobs.get(&r.id) {
                    r.to = job.state;
                }
            }
            rescued
        };
        self.publish_ready(ready);
        self.publish_effects(fx);
        Ok(rescued)
    }

    async fn jobs_claim_reconciling(&self, claim: ClaimReconciling) -> Result<Vec<Job>> {
        claim.validate()?;
        let limit = usize::try_from(claim.limit).unwrap_or(usize::MAX);
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        let free: Vec<JobId> = inner
            .idx
            .reconciling
            .iter()
            .filter(|id| {
                inner.jobs.get(id).is_some_and(|j| {
                    claim.kinds.contains(&j.kind) && j.lease_expires_at.is_none_or(|at| at <= now)
                })
            })
            .take(limit)
            .copied()
            .collect();
        let mut claimed = Vec::with_capacity(free.len());
        for id in free {
            let event = Event::ReconcileClaim {
                worker: claim.worker.clone(),
                lease: claim.lease,
            };
            if let Ok((_, job)) = inner.transition(id, event, now) {
                claimed.push(job.clone());
            }
        }
        Ok(claimed)
    }

    async fn job_reconcile(
        &self,
        id: JobId,
        token: FencingToken,
        resolution: Resolution,
    ) -> Result<Transition> {
        let mut fx = Effects::default();
        let transition = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            let (transition, _) =
                inner.transition(id, Event::Reconciled { token, resolution }, now)?;
            if transition.to.is_terminal() {
                inner.propagate(vec![id], now, &mut fx);
            }
            transition
        };
        self.publish_effects(fx);
        Ok(transition)
    }

    async fn jobs_prune(&self, prune: PruneJobs) -> Result<u64> {
        prune.validate()?;
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        let cutoff = clock::sub(now, prune.older_than);
        let limit = usize::try_from(prune.limit).unwrap_or(usize::MAX);
        Ok(inner.prune(cutoff, limit))
    }

    async fn queue_pause(&self, queue: QueueName) -> Result<QueueChange> {
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        let info = inner
            .queues
            .entry(queue.clone())
            .or_insert_with(|| QueueInfo::unpaused(queue));
        let changed = !info.paused;
        if changed {
            info.paused = true;
            info.paused_at = Some(now);
        }
        Ok(QueueChange {
            queue: info.clone(),
            changed,
        })
    }

    async fn queue_resume(&self, queue: QueueName) -> Result<QueueChange> {
        // A queue's entry only stores a pause: resuming removes it (as the PostgreSQL store
        // deletes its row), so a queue resumed by mistake is not listed.
        let removed = self.inner.lock().queues.remove(&queue);
        let info = QueueInfo::unpaused(queue.clone());
        self.publish(StoreEvent::JobsAvailable { queue });
        Ok(QueueChange {
            queue: info,
            changed: removed.is_some_and(|q| q.paused),
        })
    }

    async fn queues_list(&self) -> Result<Vec<QueueInfo>> {
        let inner = self.inner.lock();
        let mut queues = inner.queues.clone();
        for name in inner.idx.counts.keys() {
            if !queues.contains_key(name) {
                queues.insert(name.clone(), QueueInfo::unpaused(name.clone()));
            }
        }
        Ok(queues.into_values().collect())
    }

    async fn queue_snapshot(&self) -> Result<Snapshot> {
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        let inner = &mut *inner;
        inner.idx.promote(&inner.jobs, now);
        let mut names: Vec<&QueueName> = inner.queues.keys().collect();
        for name in inner.idx.counts.keys() {
            if !inner.queues.contains_key(name) {
                names.push(name);
            }
        }
        names.sort();
        let queues = names
            .into_iter()
            .map(|name| {
                let slots = inner.idx.counts.get(name).copied().unwrap_or_default();
                let waiting = slots[WAITING_SLOT];
                let counts = JobState::ALL
                    .into_iter()
                    .filter(|s| slots[state_slot(*s)] > 0)
                    .map(|s| (s, slots[state_slot(s)]))
                    .collect();
                let (mut ready, mut oldest) = (0u64, None::<DateTime<Utc>>);
                if let Some(by_kind) = inner.idx.ready.get(name) {
                    for set in by_kind.values() {
                        ready += set.len() as u64;
                        if let Some(at) = oldest_ready_since(set, &inner.jobs) {
                            oldest = Some(oldest.map_or(at, |o| o.min(at)));
                        }
                    }
                }
                QueueSnapshot {
                    queue: name.clone(),
                    paused: inner.is_paused(name),
                    counts,
                    ready,
                    ready_at_least: false,
                    running: slots[state_slot(JobState::Running)].saturating_sub(waiting),
                    claimed: waiting,
                    oldest_ready_age_ms: oldest
                        .map(|at| u64::try_from((now - at).num_milliseconds().max(0)).unwrap_or(0)),
                }
            })
            .collect();
        Ok(Snapshot {
            taken_at: now,
            queues,
            vacuum: None,
        })
    }

    /// Nothing to vacuum: removed jobs leave no dead versions behind.
    async fn vacuum_status(&self) -> Result<Option<VacuumStatus>> {
        Ok(None)
    }

    async fn worker_register(&self, worker: WorkerRegistration) -> Result<WorkerInfo> {
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        let info = WorkerInfo {
            id: worker.id.clone(),
            host: worker.stored_host(),
            pid: worker.pid,
            queues: worker.queues,
            started_at: now,
            last_heartbeat_at: now,
        };
        inner.workers.insert(worker.id, info.clone());
        Ok(info)
    }

    async fn worker_heartbeat(&self, id: WorkerId) -> Result<()> {
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        match inner.workers.get_mut(&id) {
            Some(worker) => {
                worker.last_heartbeat_at = now;
                Ok(())
            }
            None => Err(Error::NotFound {
                entity: Entity::Worker,
                id: id.to_string(),
            }),
        }
    }

    async fn activity_record(&self, activity: Vec<ActivityMinute>) -> Result<()> {
        ActivityMinute::validate_all(&activity)?;
        let mut inner = self.inner.lock();
        let kept_from = clock::sub(self.clock_now(), ACTIVITY_RETENTION);
        for minute in activity {
            if minute.minute < activity::minute_of(kept_from) {
                continue;
            }
            inner
                .activity
                .entry((minute.minute, minute.queue.clone()))
                .and_modify(|stored| stored.add(&minute))
                .or_insert(minute);
        }
        inner
            .activity
            .retain(|(minute, _), _| *minute >= activity::minute_of(kept_from));
        Ok(())
    }

    async fn activity_list(&self, query: ListActivity) -> Result<Vec<ActivityMinute>> {
        let inner = self.inner.lock();
        Ok(inner
            .activity
            .iter()
            .skip_while(|((minute, _), _)| *minute < query.since)
            .map(|(_, minute)| minute.clone())
            .collect())
    }

    async fn worker_deregister(&self, id: WorkerId) -> Result<()> {
        self.inner.lock().workers.remove(&id);
        Ok(())
    }

    async fn workers_list(&self) -> Result<Vec<WorkerInfo>> {
        Ok(self.inner.lock().workers.values().cloned().collect())
    }

    async fn workers_prune(&self, older_than: std::time::Duration) -> Result<u64> {
        let mut inner = self.inner.lock();
        let cutoff = clock::sub(self.clock_now(), older_than);
        let before = inner.workers.len();
        inner.workers.retain(|_, w| w.last_heartbeat_at >= cutoff);
        Ok((before - inner.workers.len()) as u64)
    }

    async fn limits_list(&self) -> Result<Vec<LimitStatus>> {
        let inner = self.inner.lock();
        let now = self.clock_now();
        Ok(inner
            .limits
            .values()
            .map(|l| LimitStatus {
                policy: l.policy.clone(),
                running: inner.idx.running_under(&l.policy.key),
                rate_available: l.policy.rate.map(|r| r.available(l.rate_tat, now)),
            })
            .collect())
    }

    async fn limit_set(&self, policy: LimitPolicy) -> Result<LimitPolicy> {
        let policy = policy.validated()?;
        let mut guard = self.inner.lock();
        let now = self.clock_now();
        let inner = &mut *guard;
        match inner.limits.get_mut(&policy.key) {
            Some(stored) => {
                if let Some(rate) = policy.rate {
                    stored.rate_tat = rate.replacing(stored.policy.rate, stored.rate_tat, now);
                }
                stored.policy = policy.clone();
            }
            None => {
                inner.idx.track_limit_key(&policy.key, &inner.jobs);
                inner.limits.insert(
                    policy.key.clone(),
                    StoredLimit {
                        policy: policy.clone(),
                        rate_tat: None,
                    },
                );
            }
        }
        drop(guard);
        self.publish(StoreEvent::LimitsChanged);
        Ok(policy)
    }

    async fn limit_clear(&self, key: LimitKey) -> Result<()> {
        let mut inner = self.inner.lock();
        match inner.limits.remove(&key) {
            Some(_) => {
                inner.idx.untrack_limit_key(&key);
                drop(inner);
                self.publish(StoreEvent::LimitsChanged);
                Ok(())
            }
            None => Err(Error::NotFound {
                entity: Entity::Limit,
                id: key.to_string(),
            }),
        }
    }

    async fn schedules_list(&self) -> Result<Vec<Schedule>> {
        Ok(self.inner.lock().schedules.values().cloned().collect())
    }

    async fn schedule_upsert(&self, schedule: NewSchedule) -> Result<ScheduleUpsert> {
        let mut inner = self.inner.lock();
        let now = self.clock_now();
        schedule.validate(now, &self.config.sizes)?;
        let stored = inner.schedules.get(&schedule.name).cloned();
        let upsert = Schedule::upsert(stored, schedule, now);
        if upsert.change != ScheduleChange::Unchanged {
            inner
                .schedules
                .insert(upsert.schedule.name.clone(), upsert.schedule.clone());
        }
        Ok(upsert)
    }

    async fn schedule_remove(&self, name: ScheduleName) -> Result<()> {
        match self.inner.lock().schedules.remove(&name) {
            Some(_) => Ok(()),
            None => Err(Error::NotFound {
                entity: Entity::Schedule,
                id: name.to_string(),
            }),
        }
    }

    async fn schedule_fire(&self, fire: FireSchedule) -> Result<Option<Enqueued>> {
        let tick = micros(fire.tick);
        let prepared = prepare(vec![fire.job], &self.config)?;
        let (answer, ready) = {
            let mut inner = self.inner.lock();
            let now = self.clock_now();
            let schedule = inner
                .schedules
                .get(&fire.name)
                .ok_or_else(|| Error::NotFound {
                    entity: Entity::Schedule,
                    id: fire.name.to_string(),
                })?;
            // A tick of another timing (changed since read, or removed and added again) or
            // from before the timing was set never fires; nor one already fired.
            let retimed = schedule.created_at != micros(fire.created_at);
            if retimed
                || tick <= schedule.created_at
                || schedule.last_tick_at.is_some_and(|last| last >= tick)
            {
                return Ok(None);
            }
            let (mut answers, ready) = inner.enqueue(prepared, now, &self.config.quotas)?;
            if let Some(schedule) = inner.schedules.get_mut(&fire.name) {
                schedule.last_tick_at = Some(tick);
            }
            (answers.pop(), ready)
        };
        self.publish_ready(ready);
        Ok(answer)
    }

    async fn operate(&self, operation: Operation, actor: Actor) -> Result<Operated> {
        actor.validate()?;
        let operation = match operation.scoped(&actor)? {
            // Recorded with the tenant its ids' jobs share, read before it acts.
            Operation::JobsBulk(bulk) => {
                let mut tenants = Vec::new();
                if let drover_core::Selection::Ids(ids) = &bulk.selection {
                    let found = self.jobs_tenants(ids.clone()).await?;
                    tenants.extend(found.into_iter().map(|(_, tenant)| tenant));
                }
                Operation::JobsBulk(bulk.with_ids_tenant(&tenants))
            }
            other => other,
        };
        let operated = operation.clone().run_unrecorded(self).await?;
        let entry = NewAuditEntry::new(&actor, &operation, &operated);
        let now = self.clock_now();
        self.audit.lock().append(now, entry);
        Ok(operated)
    }

    async fn audit_list(&self, query: ListAudit) -> Result<AuditPage> {
        query.validate()?;
        Ok(self.audit.lock().list(&query))
    }

    async fn audit_prune(&self, prune: PruneAudit) -> Result<u64> {
        prune.validate()?;
        let cutoff = clock::sub(self.clock_now(), prune.older_than);
        let limit = usize::try_from(prune.limit).unwrap_or(usize::MAX);
        Ok(self.audit.lock().prune(cutoff, limit))
    }

    async fn now(&self) -> Result<DateTime<Utc>> {
        Ok(self.clock_now())
    }

    async fn check_ready(&self) -> Result<()> {
        Ok(())
    }

    async fn subscribe(&self) -> Result<EventStream> {
        let stream = BroadcastStream::new(self.events.subscribe())
            .map(|item| item.unwrap_or(StoreEvent::Resync));
        Ok(Box::pin(stream))
    }

    fn config(&self) -> StoreConfig {
        self.config
    }
}

#[cfg(test)]
mod tests {
    //! Checks of the memory store's own bookkeeping; its behaviour is covered by the contract
    //! suite in `tests/`.

    use std::collections::BTreeMap;
    use std::time::Duration;

    use chrono::TimeZone;
    use drover_core::{JobKind, ManualClock, Quotas, Retry, RunAt};
    use serde_json::json;

    use super::*;

    fn store() -> (MemoryStore, ManualClock) {
        let clock = ManualClock::new(Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap());
        let config = StoreConfig {
            quotas: Quotas::unbounded(),
            ..StoreConfig::default()
        };
        (
            MemoryStore::with_clock(config, Arc::new(clock.clone())),
            clock,
        )
    }

    fn claim(kinds: &[&str]) -> ClaimJobs {
        ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: vec![QueueName::default_queue(), QueueName::parse("q2").unwrap()],
            kinds: kinds.iter().map(|k| JobKind::parse(*k).unwrap()).collect(),
            limit: 7,
            start: 3,
            lease: Duration::from_secs(5),
        }
    }

    #[test]
    fn ids_strictly_increase() {
        let mut inner = Inner::default();
        let mut last = None;
        for _ in 0..20_000 {
            let id = inner.next_id();
            assert!(last.is_none_or(|l| l < id));
            assert_eq!(id.0.get_version_num(), 7);
            last = Some(id);
        }
    }

    /// After a mix of operations, the snapshot's counters agree with a recount of the jobs.
    #[tokio::test]
    async fn counters_agree_with_a_recount() {
        let (store, clock) = store();
        for round in 0..30u32 {
            let jobs = (0..10)
                .map(|i| {
                    let kind = JobKind::parse(["a", "b", "c"][i % 3]).unwrap();
                    let mut job = NewJob::new(kind, json!(i)).with_priority((i % 4) as i16);
                    if i % 2 == 0 {
                        job = job.with_queue(QueueName::parse("q2").unwrap());
                    }
                    if i % 5 == 0 {
                        job = job.with_run_at(RunAt::After(Duration::from_secs(3)));
                    }
                    job
                })
                .collect();
            store.jobs_enqueue(jobs).await.unwrap();
            let claimed = store.jobs_claim(claim(&["a", "b"])).await.unwrap().jobs;
            let items = claimed
                .iter()
                .enumerate()
                .map(|(i, j)| FinishItem {
                    parent: None,
                    id: j.id,
                    token: j.fencing_token,
                    started: (i % 2 == 1).then_some(Duration::ZERO),
                    finish: match (i + round as usize) % 4 {
                        0 => Finish::Succeeded { result: None },
                        1 => Finish::Failed {
                            message: "x".into(),
                            retry: Retry::After(Duration::from_secs(1)),
                        },
                        2 => Finish::Released,
                        _ => Finish::Snoozed {
                            delay: Duration::from_secs(2),
                        },
                    },
                })
                .take(5)
                .collect();
            store.jobs_finish(items).await.unwrap();
            clock.advance(Duration::from_secs(2));
            store
                .jobs_rescue_expired(RescueExpired {
                    reconciler_kinds: vec![JobKind::parse("b").unwrap()],
                    limit: 3,
                })
                .await
                .unwrap();
            if round % 7 == 0 {
                store
                    .jobs_prune(PruneJobs {
                        older_than: Duration::from_secs(10),
                        limit: 4,
                    })
                    .await
                    .unwrap();
            }
        }
        let now = store.now().await.unwrap();
        let snapshot = store.queue_snapshot().await.unwrap();
        let inner = store.inner.lock();
        let mut recount: BTreeMap<(String, JobState), u64> = BTreeMap::new();
        let mut ready: BTreeMap<String, u64> = BTreeMap::new();
        let mut waiting: BTreeMap<String, u64> = BTreeMap::new();
        for job in inner.jobs.values() {
            *recount
                .entry((job.queue.to_string(), job.state))
                .or_default() += 1;
            if job.is_ready(now) {
                *ready.entry(job.queue.to_string()).or_default() += 1;
            }
            if job.is_waiting_for_slot() {
                *waiting.entry(job.queue.to_string()).or_default() += 1;
            }
        }
        assert!(
            waiting.values().sum::<u64>() > 0,
            "some jobs wait for a slot"
        );
        for q in &snapshot.queues {
            for (state, n) in &q.counts {
                assert_eq!(recount.get(&(q.queue.to_string(), *state)), Some(n));
            }
            assert_eq!(ready.get(q.queue.as_str()).copied().unwrap_or(0), q.ready);
            let claimed = waiting.get(q.queue.as_str()).copied().unwrap_or(0);
            assert_eq!(q.claimed, claimed);
            assert_eq!(q.running + q.claimed, q.count(JobState::Running));
        }
        let counted: u64 = snapshot.queues.iter().flat_map(|q| q.counts.values()).sum();
        assert_eq!(counted as usize, inner.jobs.len());
        let pending = inner
            .jobs
            .values()
            .filter(|j| !j.state.is_terminal())
            .count();
        assert_eq!(inner.idx.pending as usize, pending);
        let running = inner
            .jobs
            .values()
            .filter(|j| j.state == JobState::Running)
            .count();
        assert_eq!(inner.idx.leases.len(), running);
        let finished = inner
            .jobs
            .values()
            .filter(|j| j.state.is_terminal())
            .count();
        assert_eq!(inner.idx.finished.len(), finished);
    }

    /// A small deterministic generator (xorshift64*), so a failure replays.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
        }
    }

    /// Checks the workflow bookkeeping against a recount of the jobs: unresolved edges point
    /// at live dependencies, a waiting job counts exactly its unresolved edges, a job counts
    /// exactly its live children, no job waits with nothing to wait for, and the pending
    /// count agrees.
    fn check_workflow_bookkeeping(inner: &Inner) {
        let mut unresolved_of: BTreeMap<JobId, i32> = BTreeMap::new();
        for edge in &inner.wf.unresolved {
            let Some(dependency) = inner.jobs.get(&edge.dependency) else {
                continue;
            };
            let job = inner.jobs.get(&edge.job);
            if job.is_some_and(|j| j.state == JobState::Waiting) {
                assert!(
                    !dependency.state.is_terminal(),
                    "{edge:?}: dependency ended"
                );
                *unresolved_of.entry(edge.job).or_default() += 1;
            }
        }
        for job in inner.jobs.values() {
            if job.state == JobState::Waiting {
                let pending = unresolved_of.get(&job.id).copied().unwrap_or(0);
                assert_eq!(job.pending_dependencies, pending, "{}", job.id);
                assert!(
                    pending > 0 || job.live_children > 0,
                    "{} waits for nothing",
                    job.id
                );
            }
            let live = inner
                .wf
                .children
                .get(&job.id)
                .into_iter()
                .flatten()
                .filter_map(|c| inner.jobs.get(c))
                .filter(|c| !c.state.is_terminal())
                .count();
            assert_eq!(
                job.live_children as usize, live,
                "live children of {}",
                job.id
            );
        }
        let pending = inner
            .jobs
            .values()
            .filter(|j| !j.state.is_terminal())
            .count();
        assert_eq!(inner.idx.pending as usize, pending);
        let waiting = inner
            .jobs
            .values()
            .filter(|j| j.state == JobState::Waiting)
            .count() as u64;
        let counted: u64 = inner
            .idx
            .counts
            .values()
            .map(|c| c[state_slot(JobState::Waiting)])
            .sum();
        assert_eq!(counted, waiting);
    }

    /// Random graphs, children, finishes, cancels, rescues, retries and prunes keep the
    /// workflow bookkeeping exact.
    #[tokio::test]
    async fn workflow_bookkeeping_agrees_with_a_recount() {
        use drover_core::{EnqueueChildren, NewWorkflow};
        let (store, clock) = store();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let kinds = ["a", "b"];
        let mut workflows = Vec::new();
        for round in 0..60 {
            let size = 1 + rng.below(6);
            let mut graph = NewWorkflow::new();
            for i in 0..size {
                let deps: Vec<String> = (0..i)
                    .filter(|_| rng.below(3) == 0)
                    .map(|d| format!("n{d}"))
                    .collect();
                let refs: Vec<&str> = deps.iter().map(String::as_str).collect();
                let mut job = NewJob::new(JobKind::parse(kinds[rng.below(2)]).unwrap(), json!(i))
                    .with_max_attempts(1 + rng.below(2) as i32);
                if rng.below(4) == 0 {
                    job = job.run_regardless();
                }
                graph = graph.job(format!("n{i}"), job, &refs);
            }
            workflows.push(store.workflow_enqueue(graph).await.unwrap().id);

            let claimed = store.jobs_claim(claim(&kinds)).await.unwrap().jobs;
            let mut items = Vec::new();
            for job in claimed {
                if rng.below(3) == 0 {
                    let n = rng.below(3);
                    let children = (0..n)
                        .map(|c| NewJob::new(JobKind::parse(kinds[c % 2]).unwrap(), json!(c)))
                        .collect();
                    store
                        .children_enqueue(EnqueueChildren {
                            parent: job.id,
                            token: job.fencing_token,
                            jobs: children,
                        })
                        .await
                        .unwrap();
                }
                if rng.below(6) == 0 {
                    continue; // Left running: its lease expires.
                }
                let finish = match rng.below(5) {
                    0 => Finish::WaitForChildren,
                    1 => Finish::Failed {
                        message: "x".into(),
                        retry: Retry::After(Duration::ZERO),
                    },
                    2 => Finish::Cancelled {
                        message: "stop".into(),
                    },
                    _ => Finish::Succeeded { result: None },
                };
                items.push(FinishItem {
                    parent: None,
                    id: job.id,
                    token: job.fencing_token,
                    started: None,
                    finish,
                });
            }
            store.jobs_finish(items).await.unwrap();
            check_workflow_bookkeeping(&store.inner.lock());

            let live: Vec<JobId> = {
                let inner = store.inner.lock();
                inner
                    .jobs
                    .values()
                    .filter(|j| !j.state.is_terminal())
                    .map(|j| j.id)
                    .collect()
            };
            if !live.is_empty() && rng.below(3) == 0 {
                store.job_cancel(live[rng.below(live.len())]).await.unwrap();
            }
            if rng.below(4) == 0 {
                let workflow = workflows[rng.below(workflows.len())];
                match rng.below(2) {
                    0 => drop(store.workflow_cancel(workflow).await),
                    _ => drop(store.workflow_retry(workflow).await),
                }
            }
            clock.advance(Duration::from_secs(40));
            store
                .jobs_rescue_expired(RescueExpired {
                    reconciler_kinds: Vec::new(),
                    limit: 100,
                })
                .await
                .unwrap();
            if round % 10 == 9 {
                store
                    .jobs_prune(PruneJobs {
                        older_than: Duration::from_secs(100),
                        limit: 50,
                    })
                    .await
                    .unwrap();
            }
            check_workflow_bookkeeping(&store.inner.lock());
        }
        // Run everything to the end: nothing waits for ever.
        for _ in 0..200 {
            let claimed = store.jobs_claim(claim(&kinds)).await.unwrap().jobs;
            if claimed.is_empty() {
                break;
            }
            let items = claimed
                .into_iter()
                .map(|job| FinishItem {
                    parent: None,
                    id: job.id,
                    token: job.fencing_token,
                    started: None,
                    finish: Finish::Succeeded { result: None },
                })
                .collect();
            store.jobs_finish(items).await.unwrap();
            check_workflow_bookkeeping(&store.inner.lock());
        }
        let inner = store.inner.lock();
        let stuck: Vec<&Job> = inner
            .jobs
            .values()
            .filter(|j| !j.state.is_terminal())
            .map(|j| &**j)
            .collect();
        assert!(stuck.is_empty(), "jobs left: {stuck:?}");
    }
}

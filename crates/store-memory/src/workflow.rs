//! The memory store's workflows (docs/design.md section 10): the dependency edges, the parent
//! to children index and the workflow records beside the jobs, and the operations that span
//! jobs. The rules themselves are `drover_core::workflow`'s (`settle_new`, `Needs` and
//! `propagate`, `plan_retry`); this file loads what they ask for under the store's one lock
//! and writes back what they changed, so propagation happens in the same atomic step as the
//! change that caused it.
//!
//! Indexes cost O(1) per edge and per child: a dependency finds its dependents, and a parent
//! its children, without a scan, so a fan-out of n children or a chain of n links costs O(n).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use drover_core::job::CHILDREN_MAX;
use drover_core::workflow::{plan_retry, propagate, settle_new, Dependency, Needs};
use drover_core::{
    DeleteLinks, Entity, Error, Event, Job, JobId, JobState, QueueName, Quotas, Result, TenantId,
    WorkflowId,
};

use crate::index::{FastMap, FastSet, Placement};
use crate::inner::{normalize, Decision, Inner, Prepared};

/// A stored workflow: its tenant, when it was enqueued, and its jobs in creation order
/// (children included; ids of pruned jobs are skipped when read).
#[derive(Debug, Clone)]
pub(crate) struct WorkflowRecord {
    pub tenant: TenantId,
    pub created_at: DateTime<Utc>,
    pub jobs: Vec<JobId>,
    /// How many of `jobs` are still stored: the record goes with the last one.
    pub stored: usize,
}

/// The workflow indexes beside the jobs.
#[derive(Debug, Default)]
pub(crate) struct Workflows {
    /// Every edge by its dependency: the jobs that depend on it, resolved edges included (prune
    /// and delete-on-success ask whether a job has dependents). Ids of pruned dependents stay
    /// until their dependency goes, and are skipped.
    pub dependents: FastMap<JobId, Vec<JobId>>,
    /// The edges not resolved yet: each resolves exactly once.
    pub unresolved: FastSet<Dependency>,
    /// Children by parent (ids of pruned children skipped, as above).
    pub children: FastMap<JobId, Vec<JobId>>,
    /// Workflows by id (ids are time-ordered: newest last).
    pub records: BTreeMap<WorkflowId, WorkflowRecord>,
}

impl Workflows {
    /// Indexes a job just stored.
    pub fn inserted(&mut self, job: &Job) {
        for dependency in &job.depends_on {
            self.dependents.entry(*dependency).or_default().push(job.id);
        }
        if let Some(parent) = job.parent_id {
            self.children.entry(parent).or_default().push(job.id);
        }
        if let Some(record) = job.workflow_id.and_then(|w| self.records.get_mut(&w)) {
            record.jobs.push(job.id);
            record.stored += 1;
        }
    }

    /// Forgets a job deleted from the store.
    pub fn removed(&mut self, job: &Job) {
        self.dependents.remove(&job.id);
        self.children.remove(&job.id);
        for dependency in &job.depends_on {
            self.unresolved.remove(&Dependency {
                job: job.id,
                dependency: *dependency,
            });
        }
        if let Some(workflow) = job.workflow_id {
            if let Some(record) = self.records.get_mut(&workflow) {
                record.stored = record.stored.saturating_sub(1);
                if record.stored == 0 {
                    self.records.remove(&workflow);
                }
            }
        }
    }
}

/// What an operation's propagation did besides its own job: queues that got a ready job, running
/// jobs whose cancel it requested, and how many jobs it reached.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub ready: Vec<QueueName>,
    pub cancel_requested: Vec<JobId>,
    pub cascaded: u64,
}

impl Effects {
    fn ready_queue(&mut self, queue: &QueueName) {
        if !self.ready.contains(queue) {
            self.ready.push(queue.clone());
        }
    }
}

impl Inner {
    /// Checks, before anything of a batch is stored, that every stored dependency of a job it
    /// creates names a job of the job's tenant.
    ///
    /// # Errors
    /// `InvalidInput` on `depends_on` (prefixed `jobs[i].` as `batch_len` says), worded by
    /// `settle_new`.
    pub(crate) fn check_dependencies(
        &self,
        batch: &[Prepared],
        decisions: &[Decision],
        batch_len: usize,
        now: DateTime<Utc>,
    ) -> Result<()> {
        for (prepared, decision) in batch.iter().zip(decisions) {
            let job = &prepared.job;
            if job.depends_on.is_empty() || !matches!(decision, Decision::Create) {
                continue;
            }
            let known = job.depends_on.iter().all(|id| {
                self.jobs
                    .get(id)
                    .is_some_and(|dependency| dependency.tenant == job.tenant)
            });
            if known {
                continue;
            }
            // Let the one rule word the refusal.
            let mut probe = job.clone().into_job(JobId(uuid::Uuid::nil()), now);
            let found: Vec<Job> = job
                .depends_on
                .iter()
                .filter_map(|id| self.jobs.get(id).map(|j| Job::clone(j)))
                .collect();
            settle_new(&mut probe, &found, now)
                .map_err(|e| e.in_batch_item(prepared.label, batch_len))?;
        }
        Ok(())
    }

    /// Settles a new job against its stored dependencies (`settle_new`) and keeps the edges
    /// it still waits on.
    pub(crate) fn settle(&mut self, job: &mut Job, now: DateTime<Utc>) -> Result<()> {
        let dependencies: Vec<Job> = job
            .depends_on
            .iter()
            .filter_map(|id| self.jobs.get(id).map(|j| Job::clone(j)))
            .collect();
        let pending = settle_new(job, &dependencies, now)?;
        self.wf.unresolved.extend(pending);
        Ok(())
    }

    /// True when a change of `job` may reach other jobs: it has dependents, a parent, or live
    /// children.
    fn may_propagate(&self, job: &Job) -> bool {
        job.parent_id.is_some() || job.live_children > 0 || self.wf.dependents.contains_key(&job.id)
    }

    /// Propagates the ends of `ended` (jobs that became terminal, or had their cancel
    /// requested, in this operation), round after round until nothing more changes
    /// (`Needs::of`, then `propagate`), writing back every change under the same lock.
    pub(crate) fn propagate(&mut self, ended: Vec<JobId>, now: DateTime<Utc>, fx: &mut Effects) {
        let mut ended: Vec<Job> = ended
            .into_iter()
            .filter_map(|id| self.jobs.get(&id))
            .filter(|job| self.may_propagate(job))
            .map(|job| Job::clone(job))
            .collect();
        while !ended.is_empty() {
            let needs = Needs::of(&ended);
            if needs.is_empty() {
                break;
            }
            let mut edges = Vec::new();
            let mut loaded: BTreeMap<JobId, Job> = BTreeMap::new();
            for dependency in &needs.dependents_of {
                let Some(dependents) = self.wf.dependents.get(dependency) else {
                    continue;
                };
                for dependent in dependents {
                    let edge = Dependency {
                        job: *dependent,
                        dependency: *dependency,
                    };
                    if !self.wf.unresolved.contains(&edge) {
                        continue;
                    }
                    edges.push(edge);
                    if let Some(job) = self.jobs.get(dependent) {
                        loaded.entry(job.id).or_insert_with(|| Job::clone(job));
                    }
                }
            }
            for parent in &needs.parents {
                if let Some(job) = self.jobs.get(parent) {
                    loaded.entry(job.id).or_insert_with(|| Job::clone(job));
                }
            }
            for parent in &needs.children_of {
                let Some(children) = self.wf.children.get(parent) else {
                    continue;
                };
                for child in children {
                    if let Some(job) = self.jobs.get(child) {
                        if !job.state.is_terminal() && !job.cancel_requested {
                            loaded.entry(job.id).or_insert_with(|| Job::clone(job));
                        }
                    }
                }
            }
            let out = propagate(&ended, &edges, &mut loaded, now);
            for edge in &out.resolved {
                self.wf.unresolved.remove(edge);
            }
            for id in &out.changed {
                if let Some(job) = loaded.remove(id) {
                    self.write_back(job, now, fx);
                }
            }
            fx.cascaded += out.ended.len() as u64;
            ended = out
                .ended
                .iter()
                .filter_map(|id| self.jobs.get(id).map(|j| Job::clone(j)))
                .collect();
        }
    }

    /// Stores `job` (a changed copy of a stored job) in place and re-indexes it, noting a job
    /// that became ready and a running job whose cancel was just requested.
    pub(crate) fn write_back(&mut self, mut job: Job, now: DateTime<Utc>, fx: &mut Effects) {
        let Some(stored) = self.jobs.get_mut(&job.id) else {
            return;
        };
        normalize(&mut job);
        let before = Placement::of(stored);
        let was_requested = stored.cancel_requested;
        **stored = job;
        self.idx.moved(stored, before, now);
        if stored.is_ready(now) {
            fx.ready_queue(&stored.queue);
        }
        if stored.state == JobState::Running && stored.cancel_requested && !was_requested {
            fx.cancel_requested.push(stored.id);
        }
    }

    /// True when retention must keep the terminal `job`: a job not terminal depends on it, it
    /// has live children, or its parent is not terminal (docs/design.md section 10).
    pub(crate) fn protected(&self, job: &Job) -> bool {
        let live = |id: &JobId| self.jobs.get(id).is_some_and(|j| !j.state.is_terminal());
        job.live_children > 0
            || job.parent_id.as_ref().is_some_and(live)
            || self
                .wf
                .dependents
                .get(&job.id)
                .is_some_and(|dependents| dependents.iter().any(live))
    }

    /// What an operator delete of `job` must know of its relations
    /// ([`drover_core::check_delete`]): its parent's state, when the parent is stored, and a
    /// dependent not terminal of smallest id, if any (as job_delete_links.sql names it).
    pub(crate) fn delete_links(&self, job: &Job) -> DeleteLinks {
        let live = |id: &&JobId| self.jobs.get(*id).is_some_and(|j| !j.state.is_terminal());
        DeleteLinks {
            parent: job
                .parent_id
                .and_then(|parent| self.jobs.get(&parent))
                .map(|parent| parent.state),
            live_dependent: self
                .wf
                .dependents
                .get(&job.id)
                .and_then(|dependents| dependents.iter().filter(live).min().copied()),
        }
    }

    /// True when a success under delete-on-success must keep its row: the job has dependents
    /// or a parent (they read its result), or live children.
    pub(crate) fn keeps_success(&self, id: JobId) -> bool {
        self.jobs.get(&id).is_some_and(|job| {
            job.parent_id.is_some()
                || job.live_children > 0
                || self.wf.dependents.get(&id).is_some_and(|d| !d.is_empty())
        })
    }

    /// The jobs of a workflow still stored, in creation order.
    pub(crate) fn workflow_jobs(&self, id: WorkflowId) -> Result<(WorkflowRecord, Vec<&Job>)> {
        let record = self.wf.records.get(&id).ok_or_else(|| Error::NotFound {
            entity: Entity::Workflow,
            id: id.to_string(),
        })?;
        let jobs = record
            .jobs
            .iter()
            .filter_map(|id| self.jobs.get(id).map(|j| &**j))
            .collect();
        Ok((record.clone(), jobs))
    }

    /// Cancels every job of workflow `id` that is not terminal (running ones get their cancel
    /// requested), then propagates. Returns how many of its jobs changed.
    ///
    /// # Errors
    /// `NotFound`.
    pub(crate) fn workflow_cancel(
        &mut self,
        id: WorkflowId,
        now: DateTime<Utc>,
        fx: &mut Effects,
    ) -> Result<u64> {
        let (record, _) = self.workflow_jobs(id)?;
        let mut ended = Vec::new();
        for job_id in record.jobs {
            let Some(job) = self.jobs.get(&job_id) else {
                continue;
            };
            if job.state.is_terminal() || job.cancel_requested {
                continue;
            }
            if let Ok((transition, job)) = self.transition(job_id, Event::Cancel, now) {
                if transition.to == JobState::Running {
                    fx.cancel_requested.push(job.id);
                }
                ended.push(job_id);
            }
        }
        let changed = ended.len() as u64;
        self.propagate(ended, now, fx);
        Ok(changed)
    }

    /// Retries every failed or cancelled job of workflow `id` (`plan_retry`): quotas checked
    /// for them all, unique keys checked, the edges to dependencies that run again unresolved
    /// again. Returns how many jobs it retried.
    ///
    /// # Errors
    /// `NotFound`; `QuotaExceeded`; `Conflict` when a live job holds a retried job's unique
    /// key. On error nothing changes.
    pub(crate) fn workflow_retry(
        &mut self,
        id: WorkflowId,
        now: DateTime<Utc>,
        quotas: &Quotas,
        fx: &mut Effects,
    ) -> Result<u64> {
        let (_, jobs) = self.workflow_jobs(id)?;
        let mut retried = BTreeSet::new();
        let mut by_tenant: Vec<(&TenantId, u64)> = Vec::new();
        for job in &jobs {
            if matches!(job.state, JobState::Failed | JobState::Cancelled) {
                retried.insert(job.id);
                match by_tenant.iter_mut().find(|(t, _)| **t == job.tenant) {
                    Some((_, n)) => *n += 1,
                    None => by_tenant.push((&job.tenant, 1)),
                }
                if let Some(key) = &job.unique_key {
                    if let Some(holder) = self.idx.unique_holder(&job.tenant, key) {
                        if holder != job.id {
                            return Err(Error::unique_key_held(holder));
                        }
                    }
                }
            }
        }
        if retried.is_empty() {
            return Ok(0);
        }
        self.check_quota_room(quotas, retried.len() as u64, &by_tenant)?;
        self.retry_linked(&retried, now, fx);
        Ok(retried.len() as u64)
    }

    /// Runs the terminal jobs `retried` again with `plan_retry`: each waits again for its
    /// dependencies that are live or retried too (inside its workflow or not), a retried child
    /// counts live again at its parent, and a retried parent waits for its retried children.
    /// The caller checked quotas and unique keys.
    pub(crate) fn retry_linked(
        &mut self,
        retried: &BTreeSet<JobId>,
        now: DateTime<Utc>,
        fx: &mut Effects,
    ) {
        let mut loaded: BTreeMap<JobId, Job> = BTreeMap::new();
        let mut edges = Vec::new();
        for id in retried {
            let Some(job) = self.jobs.get(id) else {
                continue;
            };
            let related = job.depends_on.iter().copied().chain(job.parent_id);
            for other in related.chain(std::iter::once(*id)) {
                if let Some(found) = self.jobs.get(&other) {
                    loaded.entry(other).or_insert_with(|| Job::clone(found));
                }
            }
            edges.extend(job.depends_on.iter().map(|dependency| Dependency {
                job: *id,
                dependency: *dependency,
            }));
        }
        let (changed, unresolved) = plan_retry(retried, &mut loaded, &edges, now);
        for id in changed {
            if let Some(job) = loaded.remove(&id) {
                self.write_back(job, now, fx);
            }
        }
        self.wf.unresolved.extend(unresolved);
    }

    /// Most live children a parent with `live` may get now, for [`crate::inner::Origin`].
    pub(crate) fn children_room(live: i32) -> usize {
        CHILDREN_MAX.saturating_sub(usize::try_from(live.max(0)).unwrap_or(CHILDREN_MAX))
    }
}

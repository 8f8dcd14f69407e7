//! The checker against deliberately broken stores: each wrapper below breaks one rule of the
//! store contract, and the simulator must catch it within a bounded number of seeds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::workflow::{
    EnqueueChildren, EnqueuedWorkflow, ListWorkflows, NewWorkflow, Workflow, WorkflowChange,
    WorkflowPage,
};
use drover_core::{
    CancelOutcome, ClaimJobs, ClaimReconciling, Claimed, Enqueued, EventStream, FencingToken,
    Finish, FinishItem, FinishReply, FireSchedule, HeartbeatJobs, HeartbeatReply, Job, JobId,
    JobPage, JobState, JobStore, LimitKey, LimitPolicy, LimitStatus, ListJobs, NewJob, NewSchedule,
    PruneJobs, QueueChange, QueueInfo, QueueName, RequeueOutcome, RescueExpired, Rescued,
    Resolution, Result, Retry, Schedule, ScheduleName, ScheduleUpsert, Snapshot, StoreConfig,
    Transition, VacuumStatus, WorkerId, WorkerInfo, WorkerRegistration,
};
use drover_sim::clock::SimClock;
use drover_sim::world::{Wrap, LEASE};
use drover_sim::{run_seed, Options};

/// The one rule a [`Broken`] store breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaks {
    /// A finish with a stale token is applied as if its token were the job's current one.
    AcceptsStaleTokens,
    /// Every third success is answered `Recorded` but not applied.
    LosesFinishes,
    /// A rescue also takes leases that end within the next lease length.
    RescuesLiveLeases,
    /// A graceful release spends the attempt (it is applied as a failure retried at once).
    SpendsReleasedAttempts,
    /// A claim takes jobs from paused queues too.
    IgnoresPauses,
}

struct Broken {
    inner: Arc<dyn JobStore>,
    clock: SimClock,
    breaks: Breaks,
    successes: AtomicU64,
}

impl std::fmt::Debug for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broken")
            .field("breaks", &self.breaks)
            .finish()
    }
}

#[async_trait]
impl JobStore for Broken {
    async fn jobs_finish(&self, mut items: Vec<FinishItem>) -> Result<Vec<FinishReply>> {
        match self.breaks {
            Breaks::AcceptsStaleTokens => {
                for item in &mut items {
                    if let Ok(job) = self.inner.job_get(item.id).await {
                        if job.state == JobState::Running {
                            item.token = job.fencing_token;
                        }
                    }
                }
                self.inner.jobs_finish(items).await
            }
            Breaks::LosesFinishes => {
                // Answers in input order: the lost ones `Recorded`, the others as the store did.
                let mut lost = Vec::new();
                let mut kept = Vec::new();
                for item in items {
                    let success = matches!(item.finish, Finish::Succeeded { .. });
                    if success && self.successes.fetch_add(1, Ordering::SeqCst) % 3 == 2 {
                        lost.push(Some(item.id));
                    } else {
                        lost.push(None);
                        kept.push(item);
                    }
                }
                let mut applied = self.inner.jobs_finish(kept).await?.into_iter();
                Ok(lost
                    .into_iter()
                    .filter_map(|lost| match lost {
                        Some(id) => Some(FinishReply::Recorded {
                            id,
                            to: JobState::Succeeded,
                        }),
                        None => applied.next(),
                    })
                    .collect())
            }
            Breaks::SpendsReleasedAttempts => {
                for item in &mut items {
                    if item.finish == Finish::Released {
                        item.finish = Finish::Failed {
                            message: "released".into(),
                            retry: Retry::After(Duration::ZERO),
                        };
                    }
                }
                self.inner.jobs_finish(items).await
            }
            Breaks::RescuesLiveLeases | Breaks::IgnoresPauses => {
                self.inner.jobs_finish(items).await
            }
        }
    }

    async fn jobs_rescue_expired(&self, rescue: RescueExpired) -> Result<Vec<Rescued>> {
        if self.breaks != Breaks::RescuesLiveLeases {
            return self.inner.jobs_rescue_expired(rescue).await;
        }
        self.clock.jump(LEASE);
        let rescued = self.inner.jobs_rescue_expired(rescue).await;
        self.clock.jump_back(LEASE);
        rescued
    }

    async fn jobs_enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        self.inner.jobs_enqueue(jobs).await
    }

    async fn workflow_enqueue(&self, workflow: NewWorkflow) -> Result<EnqueuedWorkflow> {
        self.inner.workflow_enqueue(workflow).await
    }

    async fn children_enqueue(&self, children: EnqueueChildren) -> Result<Vec<Enqueued>> {
        self.inner.children_enqueue(children).await
    }

    async fn jobs_get(&self, ids: Vec<JobId>) -> Result<Vec<Job>> {
        self.inner.jobs_get(ids).await
    }

    async fn workflow_get(&self, id: drover_core::WorkflowId) -> Result<Workflow> {
        self.inner.workflow_get(id).await
    }

    async fn workflows_list(&self, query: ListWorkflows) -> Result<WorkflowPage> {
        self.inner.workflows_list(query).await
    }

    async fn workflow_cancel(&self, id: drover_core::WorkflowId) -> Result<WorkflowChange> {
        self.inner.workflow_cancel(id).await
    }

    async fn workflow_retry(&self, id: drover_core::WorkflowId) -> Result<WorkflowChange> {
        self.inner.workflow_retry(id).await
    }

    async fn job_get(&self, id: JobId) -> Result<Job> {
        self.inner.job_get(id).await
    }

    async fn jobs_list(&self, query: ListJobs) -> Result<JobPage> {
        self.inner.jobs_list(query).await
    }

    async fn jobs_claim(&self, claim: ClaimJobs) -> Result<Claimed> {
        if self.breaks != Breaks::IgnoresPauses {
            return self.inner.jobs_claim(claim).await;
        }
        let paused: Vec<QueueName> = self
            .inner
            .queues_list()
            .await?
            .into_iter()
            .filter(|q| q.paused && claim.queues.contains(&q.name))
            .map(|q| q.name)
            .collect();
        for queue in &paused {
            self.inner.queue_resume(queue.clone()).await?;
        }
        let claimed = self.inner.jobs_claim(claim).await;
        for queue in paused {
            self.inner.queue_pause(queue).await?;
        }
        claimed
    }

    async fn jobs_heartbeat(&self, heartbeat: HeartbeatJobs) -> Result<Vec<HeartbeatReply>> {
        self.inner.jobs_heartbeat(heartbeat).await
    }

    async fn job_cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.inner.job_cancel(id).await
    }

    async fn job_retry(&self, id: JobId) -> Result<Job> {
        self.inner.job_retry(id).await
    }

    async fn job_requeue(&self, id: JobId) -> Result<RequeueOutcome> {
        self.inner.job_requeue(id).await
    }

    async fn jobs_claim_reconciling(&self, claim: ClaimReconciling) -> Result<Vec<Job>> {
        self.inner.jobs_claim_reconciling(claim).await
    }

    async fn job_reconcile(
        &self,
        id: JobId,
        token: FencingToken,
        resolution: Resolution,
    ) -> Result<Transition> {
        self.inner.job_reconcile(id, token, resolution).await
    }

    async fn jobs_prune(&self, prune: PruneJobs) -> Result<u64> {
        self.inner.jobs_prune(prune).await
    }

    async fn queue_pause(&self, queue: QueueName) -> Result<QueueChange> {
        self.inner.queue_pause(queue).await
    }

    async fn queue_resume(&self, queue: QueueName) -> Result<QueueChange> {
        self.inner.queue_resume(queue).await
    }

    async fn queues_list(&self) -> Result<Vec<QueueInfo>> {
        self.inner.queues_list().await
    }

    async fn queue_snapshot(&self) -> Result<Snapshot> {
        self.inner.queue_snapshot().await
    }

    async fn vacuum_status(&self) -> Result<Option<VacuumStatus>> {
        self.inner.vacuum_status().await
    }

    async fn worker_register(&self, worker: WorkerRegistration) -> Result<WorkerInfo> {
        self.inner.worker_register(worker).await
    }

    async fn worker_heartbeat(&self, id: WorkerId) -> Result<()> {
        self.inner.worker_heartbeat(id).await
    }

    async fn worker_deregister(&self, id: WorkerId) -> Result<()> {
        self.inner.worker_deregister(id).await
    }

    async fn workers_list(&self) -> Result<Vec<WorkerInfo>> {
        self.inner.workers_list().await
    }

    async fn workers_prune(&self, older_than: Duration) -> Result<u64> {
        self.inner.workers_prune(older_than).await
    }

    async fn limits_list(&self) -> Result<Vec<LimitStatus>> {
        self.inner.limits_list().await
    }

    async fn limit_set(&self, policy: LimitPolicy) -> Result<LimitPolicy> {
        self.inner.limit_set(policy).await
    }

    async fn limit_clear(&self, key: LimitKey) -> Result<()> {
        self.inner.limit_clear(key).await
    }

    async fn schedules_list(&self) -> Result<Vec<Schedule>> {
        self.inner.schedules_list().await
    }

    async fn schedule_upsert(&self, schedule: NewSchedule) -> Result<ScheduleUpsert> {
        self.inner.schedule_upsert(schedule).await
    }

    async fn schedule_remove(&self, name: ScheduleName) -> Result<()> {
        self.inner.schedule_remove(name).await
    }

    async fn operate(
        &self,
        operation: drover_core::Operation,
        actor: drover_core::Actor,
    ) -> Result<drover_core::Operated> {
        self.inner.operate(operation, actor).await
    }

    async fn audit_list(&self, query: drover_core::ListAudit) -> Result<drover_core::AuditPage> {
        self.inner.audit_list(query).await
    }

    async fn audit_prune(&self, prune: drover_core::PruneAudit) -> Result<u64> {
        self.inner.audit_prune(prune).await
    }

    async fn schedule_fire(&self, fire: FireSchedule) -> Result<Option<Enqueued>> {
        self.inner.schedule_fire(fire).await
    }

    async fn now(&self) -> Result<DateTime<Utc>> {
        self.inner.now().await
    }

    async fn check_ready(&self) -> Result<()> {
        self.inner.check_ready().await
    }

    async fn subscribe(&self) -> Result<EventStream> {
        self.inner.subscribe().await
    }

    fn config(&self) -> StoreConfig {
        self.inner.config()
    }
}

fn broken(breaks: Breaks) -> Options {
    let wrap: Wrap = Arc::new(move |inner: Arc<dyn JobStore>, clock: &SimClock| {
        Arc::new(Broken {
            inner,
            clock: clock.clone(),
            breaks,
            successes: AtomicU64::new(0),
        }) as Arc<dyn JobStore>
    });
    Options {
        wrap: Some(wrap),
        ..Options::default()
    }
}

/// Runs seeds from 0 until one breaks `rule`; panics after `max` seeds.
fn caught_within(breaks: Breaks, rule: &str, max: u64) -> u64 {
    let options = broken(breaks);
    for seed in 0..max {
        let run = run_seed(seed, &options);
        if run.violations.iter().any(|v| v.rule == rule) {
            eprintln!("{breaks:?} caught by seed {seed}:\n{}", run.report());
            return seed;
        }
    }
    panic!("{breaks:?}: no seed of 0..{max} found {rule:?}");
}

#[test]
fn the_checker_catches_a_store_that_accepts_stale_tokens() {
    caught_within(
        Breaks::AcceptsStaleTokens,
        "a finish was accepted with a stale fencing token",
        50,
    );
}

#[test]
fn the_checker_catches_a_store_that_loses_a_finish() {
    caught_within(
        Breaks::LosesFinishes,
        "the final state disagrees with the history",
        50,
    );
}

#[test]
fn the_checker_catches_a_store_that_rescues_a_live_lease() {
    caught_within(Breaks::RescuesLiveLeases, "a live lease was rescued", 10);
}

#[test]
fn the_checker_catches_a_store_that_spends_an_attempt_on_a_graceful_release() {
    caught_within(
        Breaks::SpendsReleasedAttempts,
        "an attempt was counted wrongly",
        100,
    );
}

#[test]
fn the_checker_catches_a_store_that_claims_from_paused_queues() {
    caught_within(
        Breaks::IgnoresPauses,
        "a job was claimed from a paused queue",
        20,
    );
}

#[allow(dead_code)]
fn unused(_: FencingToken, _: HeartbeatReply, _: Job, _: DateTime<Utc>) {}

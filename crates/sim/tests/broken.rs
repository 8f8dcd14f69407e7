//! The checker against deliberately broken stores: each wrapper below breaks one rule of the
//! store contract, and the simulator must catch it within a bounded number of seeds.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::activity::{ActivityMinute, ListActivity};
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
use drover_sim::{run_seed, Options, SeedRun};

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
    /// An enqueue drops its jobs' dependencies: dependents are ready at once.
    PromotesDependentsEarly,
    /// Every job runs regardless of its dependencies' failures.
    RunsDependentsOfFailures,
    /// A parent's wait for its children is stored as a snooze: it runs again at once.
    ResumesParentsEarly,
    /// A limit policy is stored without its `max_running`.
    IgnoresMaxRunning,
    /// A limit policy is stored without its rate.
    IgnoresRates,
    /// A tick already fired enqueues its job again.
    FiresTicksTwice,
    /// Its configuration reports a quota 10 below the one it enforces.
    ExceedsQuotas,
    /// Retention also deletes jobs a live job depends on (they vanish from every read).
    PrunesDependencies,
}

struct Broken {
    inner: Arc<dyn JobStore>,
    clock: SimClock,
    breaks: Breaks,
    successes: AtomicU64,
    /// Jobs a broken prune deleted (hidden from every read).
    hidden: Mutex<BTreeSet<JobId>>,
    /// When a claim last ignored a pause (the simulation's paused tokio clock).
    last_ignored_pause: Mutex<Option<tokio::time::Instant>>,
}

impl Broken {
    fn visible(&self, id: JobId) -> bool {
        !self
            .hidden
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
    }
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
            Breaks::ResumesParentsEarly => {
                for item in &mut items {
                    if item.finish == Finish::WaitForChildren {
                        item.finish = Finish::Snoozed {
                            delay: Duration::ZERO,
                        };
                    }
                }
                self.inner.jobs_finish(items).await
            }
            _ => self.inner.jobs_finish(items).await,
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

    async fn jobs_enqueue(&self, mut jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        for job in &mut jobs {
            match self.breaks {
                Breaks::PromotesDependentsEarly => job.depends_on.clear(),
                Breaks::RunsDependentsOfFailures => job.run_regardless = true,
                _ => {}
            }
        }
        self.inner.jobs_enqueue(jobs).await
    }

    async fn workflow_enqueue(&self, mut workflow: NewWorkflow) -> Result<EnqueuedWorkflow> {
        for entry in &mut workflow.jobs {
            match self.breaks {
                Breaks::PromotesDependentsEarly => {
                    entry.depends_on.clear();
                    entry.job.depends_on.clear();
                }
                Breaks::RunsDependentsOfFailures => entry.job.run_regardless = true,
                _ => {}
            }
        }
        self.inner.workflow_enqueue(workflow).await
    }

    async fn children_enqueue(&self, children: EnqueueChildren) -> Result<Vec<Enqueued>> {
        self.inner.children_enqueue(children).await
    }

    async fn jobs_get(&self, ids: Vec<JobId>) -> Result<Vec<Job>> {
        let ids = ids.into_iter().filter(|id| self.visible(*id)).collect();
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
        let mut page = self.inner.jobs_list(query).await?;
        page.jobs.retain(|j| self.visible(j.id));
        Ok(page)
    }

    async fn jobs_claim(&self, claim: ClaimJobs) -> Result<Claimed> {
        if self.breaks != Breaks::IgnoresPauses {
            return self.inner.jobs_claim(claim).await;
        }
        // The resume below wakes the workers' claim loops, which claim again at once: at most
        // one ignored pause per instant of the simulated clock, or a paused queue without
        // claimable jobs would keep them claiming without time ever passing.
        let again_this_instant = {
            let now = tokio::time::Instant::now();
            let mut last = self
                .last_ignored_pause
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let again = *last == Some(now);
            *last = Some(now);
            again
        };
        if again_this_instant {
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

    async fn job_delete(&self, id: JobId) -> Result<Job> {
        self.inner.job_delete(id).await
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
        let n = self.inner.jobs_prune(prune).await?;
        if self.breaks != Breaks::PrunesDependencies {
            return Ok(n);
        }
        // Terminal jobs a live job depends on go too.
        let jobs = drover_sim::world::all_jobs(self.inner.as_ref()).await;
        let live_deps: BTreeSet<JobId> = jobs
            .iter()
            .filter(|j| !j.state.is_terminal())
            .flat_map(|j| j.depends_on.iter().copied())
            .collect();
        let mut hidden = self.hidden.lock().unwrap_or_else(|e| e.into_inner());
        let before = hidden.len();
        hidden.extend(
            jobs.iter()
                .filter(|j| j.state.is_terminal() && live_deps.contains(&j.id))
                .map(|j| j.id),
        );
        Ok(n + (hidden.len() - before) as u64)
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

    async fn activity_record(&self, activity: Vec<ActivityMinute>) -> Result<()> {
        self.inner.activity_record(activity).await
    }

    async fn activity_list(&self, query: ListActivity) -> Result<Vec<ActivityMinute>> {
        self.inner.activity_list(query).await
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

    async fn limit_set(&self, mut policy: LimitPolicy) -> Result<LimitPolicy> {
        match self.breaks {
            Breaks::IgnoresMaxRunning => policy.max_running = None,
            Breaks::IgnoresRates => policy.rate = None,
            _ => {}
        }
        if policy.max_running.is_none() && policy.rate.is_none() {
            policy.max_running = Some(1_000_000);
        }
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
        let mut job = fire.job.clone();
        let fired = self.inner.schedule_fire(fire).await?;
        if fired.is_some() || self.breaks != Breaks::FiresTicksTwice {
            return Ok(fired);
        }
        // Enqueued again; the unique key the scheduler sets per tick is dropped with it.
        job.unique_key = None;
        Ok(self.inner.jobs_enqueue(vec![job]).await?.pop())
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
        let mut config = self.inner.config();
        if self.breaks == Breaks::ExceedsQuotas {
            config.quotas.max_pending = config.quotas.max_pending.map(|m| m.saturating_sub(10));
        }
        config
    }
}

fn broken(breaks: Breaks) -> Options {
    let wrap: Wrap = Arc::new(move |inner: Arc<dyn JobStore>, clock: &SimClock| {
        Arc::new(Broken {
            inner,
            clock: clock.clone(),
            breaks,
            successes: AtomicU64::new(0),
            hidden: Mutex::new(BTreeSet::new()),
            last_ignored_pause: Mutex::new(None),
        }) as Arc<dyn JobStore>
    });
    Options {
        wrap: Some(wrap),
        ..Options::default()
    }
}

/// Runs seeds from 0 until one breaks `rule`; panics after `max` seeds.
fn caught_within(breaks: Breaks, rule: &str, max: u64) -> u64 {
    caught_run(breaks, rule, max).seed
}

/// The first run of seeds `0..max` whose history breaks `rule`.
fn caught_run(breaks: Breaks, rule: &str, max: u64) -> SeedRun {
    let options = broken(breaks);
    for seed in 0..max {
        let run = run_seed(seed, &options);
        if run.violations.iter().any(|v| v.rule == rule) {
            eprintln!("{breaks:?} caught by seed {seed}:\n{}", run.report());
            return run;
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

#[test]
fn the_checker_catches_a_store_that_promotes_a_dependent_early() {
    caught_within(
        Breaks::PromotesDependentsEarly,
        "a dependent started before its dependencies were terminal",
        50,
    );
}

#[test]
fn the_checker_catches_a_store_that_runs_a_dependent_of_a_failed_job() {
    caught_within(
        Breaks::RunsDependentsOfFailures,
        "a dependent ran although a dependency failed",
        50,
    );
}

#[test]
fn the_checker_catches_a_store_that_resumes_a_parent_before_its_children_ended() {
    caught_within(
        Breaks::ResumesParentsEarly,
        "a parent resumed before its children were terminal",
        50,
    );
}

#[test]
fn the_checker_catches_a_store_that_ignores_max_running() {
    caught_within(Breaks::IgnoresMaxRunning, "max_running was exceeded", 50);
}

#[test]
fn the_checker_catches_a_store_that_ignores_rates() {
    caught_within(Breaks::IgnoresRates, "a rate limit was exceeded", 50);
}

#[test]
fn the_checker_catches_a_store_that_fires_a_cron_tick_twice() {
    caught_within(
        Breaks::FiresTicksTwice,
        "a cron tick was enqueued twice",
        20,
    );
}

#[test]
fn the_checker_catches_a_store_that_exceeds_its_quota() {
    caught_within(
        Breaks::ExceedsQuotas,
        "the pending-job quota was exceeded",
        50,
    );
}

#[test]
fn the_checker_catches_a_store_whose_retention_deletes_a_dependency() {
    caught_within(
        Breaks::PrunesDependencies,
        "retention deleted a job a live job depends on",
        50,
    );
}

#[allow(dead_code)]
fn unused(_: FencingToken, _: HeartbeatReply, _: Job, _: DateTime<Utc>) {}

#[test]
fn a_failure_shrinks_to_a_smaller_world_that_still_breaks_the_rule() {
    let rule = "max_running was exceeded";
    let options = broken(Breaks::IgnoresMaxRunning);
    // The failed run itself: running its seed again takes the same path only in a build with
    // `--cfg tokio_unstable` (drover_sim::EXACT_REPLAY). In a plain build a smaller world may
    // also miss the fault by chance, so up to five failed runs are shrunk.
    let tries = if drover_sim::world::EXACT_REPLAY {
        1
    } else {
        5
    };
    let (seed, events, small, shrunk) = (0..tries)
        .map(|_| {
            let run = caught_run(Breaks::IgnoresMaxRunning, rule, 50);
            let (seed, events) = (run.seed, run.end.history.len());
            let (small, shrunk) = drover_sim::shrink(&options, run, 40);
            (seed, events, small, shrunk)
        })
        .find(|(seed, _, small, _)| {
            drover_sim::replay_command(*seed, small) != drover_sim::replay_command(*seed, &options)
        })
        .expect("no smaller world broke the rule");
    assert!(
        shrunk.violations.iter().any(|v| v.rule == rule),
        "{}",
        shrunk.report()
    );
    let command = drover_sim::replay_command(seed, &small);
    if drover_sim::world::EXACT_REPLAY {
        // Only an exact replay makes the two histories comparable: in a plain build the
        // smaller world's run may take a longer path.
        assert!(
            shrunk.end.history.len() < events,
            "{} events, {events} before shrinking ({small:?})",
            shrunk.end.history.len()
        );
    }
    assert!(
        command.starts_with(&format!("drover-sim --seeds 1 --from {seed} ")),
        "{command}"
    );
    eprintln!(
        "{events} events shrunk to {}: {command}",
        shrunk.end.history.len()
    );
}

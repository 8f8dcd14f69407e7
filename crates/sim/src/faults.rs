//! The fault-injecting store: a [`JobStore`] that delegates every method to the store it wraps
//! and, per call and from the seed's one RNG, fails it before the write, fails it after the
//! write committed, or slows it (in simulated time). Each worker incarnation, client and
//! operator has its own view with a [`Gate`]: a crashed worker's calls never reach the store
//! nor come back, a paused worker's wait until it is resumed. The view records the calls that
//! change jobs into the history, at the moment the store committed them.

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::activity::{ActivityMinute, ListActivity};
use drover_core::workflow::{
    EnqueueChildren, EnqueuedWorkflow, ListWorkflows, NewWorkflow, Workflow, WorkflowChange,
    WorkflowPage,
};
use drover_core::FencingToken;
use drover_core::{
    CancelOutcome, ClaimJobs, ClaimReconciling, Claimed, EnqueueStatus, Enqueued, Error,
    EventStream, Finish, FinishItem, FinishReply, FireSchedule, HeartbeatJobs, HeartbeatReply, Job,
    JobId, JobPage, JobStore, LimitKey, LimitPolicy, LimitStatus, ListJobs, NewJob, NewSchedule,
    PruneJobs, QueueChange, QueueInfo, QueueName, RequeueOutcome, RescueExpired, Rescued,
    Resolution, Result, Schedule, ScheduleName, ScheduleUpsert, Snapshot, StoreConfig, Transition,
    VacuumStatus, WorkerId, WorkerInfo, WorkerRegistration,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::watch;

use crate::clock::{us_since_base, SimClock};
use crate::history::{
    Answer, Beat, ClaimedJob, EnqueueAns, EnqueueReq, Ev, Fault, FinishReq, Record,
};

/// Per-call fault probabilities while faults are on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultRates {
    /// `Unavailable` before the write.
    pub before: f64,
    /// `Unavailable` after the write committed.
    pub after: f64,
    /// A slow call (half before the write, half after).
    pub slow: f64,
    /// Longest slow call, ms.
    pub slow_max_ms: u64,
}

impl Default for FaultRates {
    fn default() -> Self {
        FaultRates {
            before: 0.03,
            after: 0.03,
            slow: 0.05,
            slow_max_ms: 3_000,
        }
    }
}

impl FaultRates {
    /// No store faults at all.
    pub fn none() -> Self {
        FaultRates {
            before: 0.0,
            after: 0.0,
            slow: 0.0,
            ..FaultRates::default()
        }
    }
}

/// What every part of one world shares: the seed's RNG, the history, the clock, the fault
/// switch.
#[derive(Debug)]
pub struct Ctx {
    rng: Mutex<ChaCha8Rng>,
    history: Mutex<Vec<Record>>,
    /// The store's clock.
    pub clock: SimClock,
    faults_on: AtomicBool,
    rates: FaultRates,
    faults: Mutex<BTreeMap<&'static str, u64>>,
}

impl Ctx {
    /// A world context for `seed` (call inside the paused runtime).
    pub fn new(seed: u64, rates: FaultRates) -> Self {
        Ctx {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            history: Mutex::new(Vec::new()),
            clock: SimClock::new(),
            faults_on: AtomicBool::new(true),
            rates,
            faults: Mutex::new(BTreeMap::new()),
        }
    }

    /// The seed's RNG (every random choice of the world comes from it).
    pub fn rng(&self) -> MutexGuard<'_, ChaCha8Rng> {
        self.rng.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A number in `lo..hi` (`lo` when the range is empty).
    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        self.rng().gen_range(lo..hi)
    }

    /// True with probability `p`.
    pub fn chance(&self, p: f64) -> bool {
        self.rng().gen_bool(p.clamp(0.0, 1.0))
    }

    /// Appends to the history.
    pub fn record(&self, who: &str, ev: Ev) {
        let t = self.clock.store_us();
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Record {
                t,
                who: who.to_owned(),
                ev,
            });
    }

    /// The history so far.
    pub fn history(&self) -> Vec<Record> {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Faults injected, by kind.
    pub fn fault_counts(&self) -> BTreeMap<&'static str, u64> {
        self.faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts a fault of another kind than the store's (a crash, a pause).
    pub fn count_fault(&self, name: &'static str) {
        *self
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name)
            .or_default() += 1;
    }

    /// Turns store faults off for good (the quiet period).
    pub fn stop_faults(&self) {
        self.faults_on.store(false, Ordering::SeqCst);
    }

    /// True while faults are injected.
    pub fn faults_on(&self) -> bool {
        self.faults_on.load(Ordering::SeqCst)
    }

    fn draw_fault(&self) -> Option<Fault> {
        if !self.faults_on() {
            return None;
        }
        let r = self.rates;
        let (x, ms, early) = {
            let mut rng = self.rng();
            (
                rng.gen::<f64>(),
                rng.gen_range(1..=r.slow_max_ms.max(1)),
                rng.gen_bool(0.5),
            )
        };
        let fault = if x < r.before {
            Fault::Before
        } else if x < r.before + r.after {
            Fault::After
        } else if x < r.before + r.after + r.slow {
            if early {
                Fault::SlowBefore { ms }
            } else {
                Fault::SlowAfter { ms }
            }
        } else {
            return None;
        };
        self.count_fault(fault.name());
        Some(fault)
    }
}

/// Whether a process may talk to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// Calls pass.
    Open,
    /// Calls wait (a paused or partitioned worker).
    Held,
    /// Calls never pass nor come back (a crashed process).
    Dead,
}

/// A process's door to the store.
#[derive(Debug)]
pub struct Gate {
    tx: watch::Sender<Door>,
}

impl Gate {
    /// An open gate.
    pub fn new() -> Arc<Self> {
        Arc::new(Gate {
            tx: watch::channel(Door::Open).0,
        })
    }

    /// Sets the door.
    pub fn set(&self, door: Door) {
        self.tx.send_replace(door);
    }

    /// The door now.
    pub fn door(&self) -> Door {
        *self.tx.borrow()
    }

    /// Waits until the door is open; never returns once it is dead.
    pub async fn pass(&self) {
        let mut rx = self.tx.subscribe();
        loop {
            let door = *rx.borrow_and_update();
            match door {
                Door::Open => return,
                Door::Held => {}
                Door::Dead => std::future::pending::<()>().await,
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// One process's view of the store: faults, its gate, and the recorder.
#[derive(Clone)]
pub struct FaultyStore {
    inner: Arc<dyn JobStore>,
    ctx: Arc<Ctx>,
    who: String,
    gate: Arc<Gate>,
}

impl std::fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStore")
            .field("who", &self.who)
            .finish()
    }
}

fn err_text(e: &Error) -> String {
    e.code().to_owned()
}

fn lease_us(at: Option<DateTime<Utc>>) -> i64 {
    at.map(us_since_base).unwrap_or(i64::MIN)
}

fn outcome_name(finish: &Finish) -> &'static str {
    match finish {
        Finish::Succeeded { .. } => "succeeded",
        Finish::Failed { .. } => "failed",
        Finish::Snoozed { .. } => "snoozed",
        Finish::Released => "released",
        Finish::Cancelled { .. } => "cancelled",
        Finish::WaitForChildren => "wait_for_children",
    }
}

/// The tag a simulated client gave a job (its args' `tag`).
pub fn tag_of(job: &NewJob) -> String {
    job.args
        .get("tag")
        .and_then(|t| t.as_str())
        .unwrap_or_default()
        .to_owned()
}

impl FaultyStore {
    /// `who`'s view of `inner`.
    pub fn new(
        inner: Arc<dyn JobStore>,
        ctx: Arc<Ctx>,
        who: impl Into<String>,
        gate: Arc<Gate>,
    ) -> Self {
        FaultyStore {
            inner,
            ctx,
            who: who.into(),
            gate,
        }
    }

    /// Runs one call through the gate and the fault draw; `record` turns the store's answer
    /// (and the fault) into a history event, called as soon as the store answered.
    async fn call<T, Fut>(
        &self,
        f: impl FnOnce() -> Fut,
        record: impl FnOnce(Answer<&T>, Option<Fault>) -> Option<Ev>,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        self.gate.pass().await;
        let fault = self.ctx.draw_fault();
        let mut unsent = Unsent {
            store: self,
            fault,
            record: Some(record),
            answer: PhantomData,
        };
        if let Some(Fault::SlowBefore { ms }) = fault {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            self.gate.pass().await;
        }
        let record = unsent
            .record
            .take()
            .unwrap_or_else(|| unreachable!("taken once"));
        if let Some(Fault::Before) = fault {
            if let Some(ev) = record(Answer::Err("injected unavailable".into()), fault) {
                self.ctx.record(&self.who, ev);
            }
            return Err(Error::unavailable("simulated: the store did not answer"));
        }
        let result = f().await;
        let answer = match &result {
            Ok(t) => Answer::Ok(t),
            Err(e) => Answer::Err(err_text(e)),
        };
        if let Some(ev) = record(answer, fault) {
            self.ctx.record(&self.who, ev);
        }
        if let Some(Fault::SlowAfter { ms }) = fault {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        // A process that crashed meanwhile never sees the answer; a paused one sees it later.
        self.gate.pass().await;
        if let Some(Fault::After) = fault {
            return Err(Error::unavailable(
                "simulated: the answer was lost after the write",
            ));
        }
        result
    }

    /// A call recorded only when a fault hit it.
    async fn plain<T, Fut>(&self, op: &'static str, f: impl FnOnce() -> Fut) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        self.call(f, |answer, fault| {
            fault.map(|fault| Ev::Call {
                op: op.to_owned(),
                fault: Some(fault),
                ok: answer.ok().is_some(),
            })
        })
        .await
    }
}

/// Records a faulted call its caller gave up on (a heartbeat's deadline dropped it) while the
/// fault held it before the store: without this the history would not show the attempt, and a
/// lease lost behind several such calls would look like one lost by a healthy worker. A call
/// dropped because its process crashed is not recorded (the crash is).
struct Unsent<'a, T, R>
where
    R: FnOnce(Answer<&T>, Option<Fault>) -> Option<Ev>,
{
    store: &'a FaultyStore,
    fault: Option<Fault>,
    record: Option<R>,
    answer: PhantomData<fn(&T)>,
}

impl<T, R> Drop for Unsent<'_, T, R>
where
    R: FnOnce(Answer<&T>, Option<Fault>) -> Option<Ev>,
{
    fn drop(&mut self) {
        let Some(record) = self.record.take() else {
            return;
        };
        if self.fault.is_none() || self.store.gate.door() == Door::Dead {
            return;
        }
        if let Some(ev) = record(
            Answer::Err("abandoned by the caller before it reached the store".into()),
            self.fault,
        ) {
            self.store.ctx.record(&self.store.who, ev);
        }
    }
}

/// Every job id `store` holds.
async fn job_ids(store: &dyn JobStore) -> std::collections::BTreeSet<JobId> {
    crate::world::all_jobs(store)
        .await
        .into_iter()
        .map(|j| j.id)
        .collect()
}

impl<T> Answer<&T> {
    fn map<U>(self, f: impl FnOnce(&T) -> U) -> Answer<U> {
        match self {
            Answer::Ok(t) => Answer::Ok(f(t)),
            Answer::Err(e) => Answer::Err(e),
        }
    }
}

fn status_name(status: EnqueueStatus) -> &'static str {
    match status {
        EnqueueStatus::Created => "created",
        EnqueueStatus::Replayed => "replayed",
        EnqueueStatus::Duplicate => "duplicate",
    }
}

/// The request summary of one job of an enqueue.
pub fn enqueue_req(job: &NewJob) -> EnqueueReq {
    EnqueueReq {
        tag: tag_of(job),
        queue: job.queue.to_string(),
        key: job.idempotency_key.clone(),
        unique: job.unique_key.clone(),
        priority: job.priority,
        delay_ms: match job.run_at {
            Some(drover_core::RunAt::After(d)) => d.as_millis() as u64,
            _ => 0,
        },
        max_attempts: job.max_attempts,
        depends_on: job.depends_on.clone(),
        run_regardless: job.run_regardless,
        limit_keys: job.limit_keys.iter().map(|k| k.to_string()).collect(),
        kind: job.kind.to_string(),
    }
}

fn enqueue_ans(e: &Enqueued) -> EnqueueAns {
    EnqueueAns {
        job: e.job.id,
        status: status_name(e.status).to_owned(),
        state: e.job.state,
    }
}

#[async_trait]
impl JobStore for FaultyStore {
    async fn jobs_enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let reqs: Vec<EnqueueReq> = jobs.iter().map(enqueue_req).collect();
        self.call(
            || self.inner.jobs_enqueue(jobs),
            |answer, fault| {
                Some(Ev::Enqueue {
                    jobs: reqs,
                    fault,
                    answer: answer.map(|a| a.iter().map(enqueue_ans).collect()),
                })
            },
        )
        .await
    }

    async fn workflow_enqueue(&self, workflow: NewWorkflow) -> Result<EnqueuedWorkflow> {
        let mut reqs: Vec<EnqueueReq> = workflow.jobs.iter().map(|w| enqueue_req(&w.job)).collect();
        let local: Vec<Vec<usize>> = workflow
            .jobs
            .iter()
            .map(|w| {
                w.depends_on
                    .iter()
                    .filter_map(|name| workflow.jobs.iter().position(|o| &o.name == name))
                    .collect()
            })
            .collect();
        self.call(
            || self.inner.workflow_enqueue(workflow),
            |answer, fault| {
                if let Answer::Ok(answered) = &answer {
                    for (req, deps) in reqs.iter_mut().zip(&local) {
                        req.depends_on.extend(
                            deps.iter()
                                .filter_map(|&d| answered.jobs.get(d))
                                .map(|e| e.job.id),
                        );
                    }
                }
                Some(Ev::Workflow {
                    jobs: reqs,
                    fault,
                    answer: answer.map(|a| a.jobs.iter().map(enqueue_ans).collect()),
                })
            },
        )
        .await
    }

    async fn children_enqueue(&self, children: EnqueueChildren) -> Result<Vec<Enqueued>> {
        let reqs: Vec<EnqueueReq> = children.jobs.iter().map(enqueue_req).collect();
        let (parent, token) = (children.parent, children.token);
        self.call(
            || self.inner.children_enqueue(children),
            |answer, fault| {
                Some(Ev::Children {
                    parent,
                    token,
                    jobs: reqs,
                    fault,
                    answer: answer.map(|a| a.iter().map(enqueue_ans).collect()),
                })
            },
        )
        .await
    }

    async fn jobs_get(&self, ids: Vec<JobId>) -> Result<Vec<Job>> {
        self.plain("jobs_get", || self.inner.jobs_get(ids)).await
    }

    async fn workflow_get(&self, id: drover_core::WorkflowId) -> Result<Workflow> {
        self.plain("workflow_get", || self.inner.workflow_get(id))
            .await
    }

    async fn workflows_list(&self, query: ListWorkflows) -> Result<WorkflowPage> {
        self.plain("workflows_list", || self.inner.workflows_list(query))
            .await
    }

    async fn workflow_cancel(&self, id: drover_core::WorkflowId) -> Result<WorkflowChange> {
        self.plain("workflow_cancel", || self.inner.workflow_cancel(id))
            .await
    }

    async fn workflow_retry(&self, id: drover_core::WorkflowId) -> Result<WorkflowChange> {
        self.plain("workflow_retry", || self.inner.workflow_retry(id))
            .await
    }

    async fn job_get(&self, id: JobId) -> Result<Job> {
        self.plain("job_get", || self.inner.job_get(id)).await
    }

    async fn jobs_list(&self, query: ListJobs) -> Result<JobPage> {
        self.plain("jobs_list", || self.inner.jobs_list(query))
            .await
    }

    async fn jobs_claim(&self, claim: ClaimJobs) -> Result<Claimed> {
        self.call(
            || self.inner.jobs_claim(claim),
            |answer, fault| {
                let answer = answer.map(|c| {
                    c.jobs
                        .iter()
                        .map(|j| ClaimedJob {
                            job: j.id,
                            queue: j.queue.to_string(),
                            token: j.fencing_token,
                            attempt: j.attempt,
                            max_attempts: j.max_attempts,
                            lease_until: lease_us(j.lease_expires_at),
                        })
                        .collect::<Vec<_>>()
                });
                // Empty claims are the idle loop's polling: recorded only when a fault hit.
                if fault.is_none() && answer.ok().is_some_and(|a| a.is_empty()) {
                    return None;
                }
                Some(Ev::Claim { fault, answer })
            },
        )
        .await
    }

    async fn jobs_heartbeat(&self, heartbeat: HeartbeatJobs) -> Result<Vec<HeartbeatReply>> {
        let sent: Vec<(JobId, FencingToken)> =
            heartbeat.jobs.iter().map(|i| (i.id, i.token)).collect();
        self.call(
            || self.inner.jobs_heartbeat(heartbeat),
            |answer, fault| {
                if sent.is_empty() && fault.is_none() {
                    return None;
                }
                Some(Ev::Heartbeat {
                    fault,
                    answer: answer.map(|replies| {
                        sent.iter()
                            .zip(replies)
                            .map(|(&(job, token), reply)| Beat {
                                job,
                                token,
                                lease_until: match reply {
                                    HeartbeatReply::Extended {
                                        lease_expires_at, ..
                                    } => Some(us_since_base(*lease_expires_at)),
                                    HeartbeatReply::LeaseLost { .. }
                                    | HeartbeatReply::Deferred { .. } => None,
                                },
                            })
                            .collect()
                    }),
                })
            },
        )
        .await
    }

    async fn jobs_finish(&self, items: Vec<FinishItem>) -> Result<Vec<FinishReply>> {
        let reqs: Vec<FinishReq> = items
            .iter()
            .map(|i| FinishReq {
                job: i.id,
                token: i.token,
                outcome: outcome_name(&i.finish).to_owned(),
                result: match &i.finish {
                    Finish::Succeeded { result } => result.clone(),
                    _ => None,
                },
            })
            .collect();
        self.call(
            || self.inner.jobs_finish(items),
            |answer, fault| {
                Some(Ev::Finish {
                    items: reqs,
                    fault,
                    answer: answer.map(|replies| {
                        replies
                            .iter()
                            .map(|r| match r {
                                FinishReply::Recorded { to, .. } => Some(*to),
                                FinishReply::LeaseLost { .. } => None,
                            })
                            .collect()
                    }),
                })
            },
        )
        .await
    }

    async fn job_cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.call(
            || self.inner.job_cancel(id),
            |answer, fault| {
                Some(Ev::Cancel {
                    job: id,
                    fault,
                    answer: answer.map(|o| o.job.state),
                })
            },
        )
        .await
    }

    async fn job_retry(&self, id: JobId) -> Result<Job> {
        self.call(
            || self.inner.job_retry(id),
            |answer, fault| {
                Some(Ev::Retry {
                    job: id,
                    fault,
                    answer: answer.map(|j| j.state),
                })
            },
        )
        .await
    }

    async fn job_delete(&self, id: JobId) -> Result<Job> {
        self.plain("job_delete", || self.inner.job_delete(id)).await
    }

    async fn job_requeue(&self, id: JobId) -> Result<RequeueOutcome> {
        self.plain("job_requeue", || self.inner.job_requeue(id))
            .await
    }

    async fn jobs_rescue_expired(&self, rescue: RescueExpired) -> Result<Vec<Rescued>> {
        self.call(
            || self.inner.jobs_rescue_expired(rescue),
            |answer, fault| {
                let answer = answer.map(|r| {
                    r.iter()
                        .map(|r| (r.id, r.to, r.attempt_spent))
                        .collect::<Vec<_>>()
                });
                if fault.is_none() && answer.ok().is_some_and(|a| a.is_empty()) {
                    return None;
                }
                Some(Ev::Rescue { fault, answer })
            },
        )
        .await
    }

    async fn jobs_claim_reconciling(&self, claim: ClaimReconciling) -> Result<Vec<Job>> {
        self.plain("jobs_claim_reconciling", || {
            self.inner.jobs_claim_reconciling(claim)
        })
        .await
    }

    async fn job_reconcile(
        &self,
        id: JobId,
        token: FencingToken,
        resolution: Resolution,
    ) -> Result<Transition> {
        self.plain("job_reconcile", || {
            self.inner.job_reconcile(id, token, resolution)
        })
        .await
    }

    async fn jobs_prune(&self, prune: PruneJobs) -> Result<u64> {
        // The jobs deleted: the store's jobs just before and just after (the world runs on one
        // thread and the memory store never yields, so nothing else changes the store between
        // the three calls).
        let inner = Arc::clone(&self.inner);
        self.call(
            || async move {
                let before = job_ids(inner.as_ref()).await;
                let n = inner.jobs_prune(prune).await?;
                let after = job_ids(inner.as_ref()).await;
                Ok((n, before.difference(&after).copied().collect::<Vec<_>>()))
            },
            |answer, fault| {
                let answer = answer.map(|(_, deleted)| deleted.clone());
                // Passes that deleted nothing are recorded only when a fault hit them.
                if fault.is_none() && answer.ok().is_some_and(|a| a.is_empty()) {
                    return None;
                }
                Some(Ev::Prune { fault, answer })
            },
        )
        .await
        .map(|(n, _)| n)
    }

    async fn queue_pause(&self, queue: QueueName) -> Result<QueueChange> {
        let name = queue.to_string();
        self.call(
            || self.inner.queue_pause(queue),
            |answer, fault| {
                Some(Ev::QueuePause {
                    queue: name,
                    fault,
                    answer: answer.map(|c| c.changed),
                })
            },
        )
        .await
    }

    async fn queue_resume(&self, queue: QueueName) -> Result<QueueChange> {
        let name = queue.to_string();
        self.call(
            || self.inner.queue_resume(queue),
            |answer, fault| {
                Some(Ev::QueueResume {
                    queue: name,
                    fault,
                    answer: answer.map(|c| c.changed),
                })
            },
        )
        .await
    }

    async fn queues_list(&self) -> Result<Vec<QueueInfo>> {
        self.plain("queues_list", || self.inner.queues_list()).await
    }

    async fn queue_snapshot(&self) -> Result<Snapshot> {
        self.plain("queue_snapshot", || self.inner.queue_snapshot())
            .await
    }

    async fn vacuum_status(&self) -> Result<Option<VacuumStatus>> {
        self.plain("vacuum_status", || self.inner.vacuum_status())
            .await
    }

    async fn worker_register(&self, worker: WorkerRegistration) -> Result<WorkerInfo> {
        self.plain("worker_register", || self.inner.worker_register(worker))
            .await
    }

    async fn worker_heartbeat(&self, id: WorkerId) -> Result<()> {
        self.plain("worker_heartbeat", || self.inner.worker_heartbeat(id))
            .await
    }

    async fn activity_record(&self, activity: Vec<ActivityMinute>) -> Result<()> {
        self.plain("activity_record", || self.inner.activity_record(activity))
            .await
    }

    async fn activity_list(&self, query: ListActivity) -> Result<Vec<ActivityMinute>> {
        self.plain("activity_list", || self.inner.activity_list(query))
            .await
    }

    async fn worker_deregister(&self, id: WorkerId) -> Result<()> {
        self.plain("worker_deregister", || self.inner.worker_deregister(id))
            .await
    }

    async fn workers_list(&self) -> Result<Vec<WorkerInfo>> {
        self.plain("workers_list", || self.inner.workers_list())
            .await
    }

    async fn workers_prune(&self, older_than: Duration) -> Result<u64> {
        self.plain("workers_prune", || self.inner.workers_prune(older_than))
            .await
    }

    async fn limits_list(&self) -> Result<Vec<LimitStatus>> {
        self.plain("limits_list", || self.inner.limits_list()).await
    }

    async fn limit_set(&self, policy: LimitPolicy) -> Result<LimitPolicy> {
        let key = policy.key.to_string();
        let (max_running, rate) = (
            policy.max_running,
            policy.rate.map(|r| {
                (
                    r.count,
                    i64::try_from(r.period.as_micros()).unwrap_or(i64::MAX),
                )
            }),
        );
        self.call(
            || self.inner.limit_set(policy),
            |answer, fault| {
                Some(Ev::LimitSet {
                    key,
                    max_running,
                    rate,
                    fault,
                    answer: answer.map(|_| ()),
                })
            },
        )
        .await
    }

    async fn limit_clear(&self, key: LimitKey) -> Result<()> {
        self.plain("limit_clear", || self.inner.limit_clear(key))
            .await
    }

    async fn schedules_list(&self) -> Result<Vec<Schedule>> {
        self.plain("schedules_list", || self.inner.schedules_list())
            .await
    }

    async fn schedule_upsert(&self, schedule: NewSchedule) -> Result<ScheduleUpsert> {
        let (name, cron) = (schedule.name.to_string(), schedule.cron.clone());
        self.call(
            || self.inner.schedule_upsert(schedule),
            |answer, fault| {
                Some(Ev::ScheduleUpsert {
                    schedule: name,
                    cron,
                    fault,
                    answer: answer.map(|_| ()),
                })
            },
        )
        .await
    }

    async fn schedule_remove(&self, name: ScheduleName) -> Result<()> {
        self.plain("schedule_remove", || self.inner.schedule_remove(name))
            .await
    }

    /// Each operation through this view's own recorded method, so the history sees it; the
    /// simulation keeps no audit log.
    async fn operate(
        &self,
        operation: drover_core::Operation,
        _actor: drover_core::Actor,
    ) -> Result<drover_core::Operated> {
        operation.run_unrecorded(self).await
    }

    async fn audit_list(&self, query: drover_core::ListAudit) -> Result<drover_core::AuditPage> {
        self.inner.audit_list(query).await
    }

    async fn audit_prune(&self, prune: drover_core::PruneAudit) -> Result<u64> {
        self.inner.audit_prune(prune).await
    }

    async fn schedule_fire(&self, fire: FireSchedule) -> Result<Option<Enqueued>> {
        let (schedule, tick, job) = (
            fire.name.to_string(),
            us_since_base(fire.tick),
            enqueue_req(&fire.job),
        );
        self.call(
            || self.inner.schedule_fire(fire),
            |answer, fault| {
                // A tick another worker fired already is recorded only when a fault hit it.
                if fault.is_none() && answer.ok().is_some_and(|a| a.is_none()) {
                    return None;
                }
                Some(Ev::Fire {
                    schedule,
                    tick,
                    job,
                    fault,
                    answer: answer.map(|a| a.as_ref().map(enqueue_ans)),
                })
            },
        )
        .await
    }

    // The clock, readiness, events and configuration are not faulted: a worker reads them
    // at start and the runner has its own fallbacks (polling) for the event stream.
    async fn now(&self) -> Result<DateTime<Utc>> {
        self.gate.pass().await;
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

//! The executor: a tokio task per job that starts on a free slot, in the worker's
//! `TaskTracker`; when its job is done it runs the jobs its queue claimed ahead
//! (`backlog.rs`) on the same slot, one after the other, until none waits. Each job runs
//! inside a `tracing` span with the job id, kind, queue and attempt (never args). The span
//! is at debug level (enable `drover_runner=debug` to see it around a handler's own log
//! lines): building an enabled span costs about a microsecond a job, a noticeable share of a
//! no-op job. With trace spans on (`telemetry::configure`) the job runs instead under its
//! attempt's OpenTelemetry `process <queue>` span, descending from the job's stored trace
//! context, and in a `tracing` span that carries the trace id. It runs the handler with a
//! [`JobContext`], enforces the kind's timeout, catches panics, aborts a handler that ignores
//! its cancellation for longer than the cancel grace, hands the outcome to the completer,
//! then gives the slot to the next waiting job or back (docs/design.md sections 3, 6 and 9).

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Finish, Job, JobState, Retry};
use futures::FutureExt;
use opentelemetry::context::FutureExt as _;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backlog::{leave_unstarted, Backlog, Waiting};
use crate::completer::Completion;
use crate::context::{ended_badly, JobContext, Links};
use crate::handler::Handler;
use crate::metrics::JobOutcome;
use crate::outcome::Outcome;
use crate::registry::{KindConfig, Rollback};
use crate::running::{CancelReason, JobShared};
use crate::runtime::{bump, Runtime};
use crate::telemetry;

/// The capacity one job holds: a slot of its queue and, with `max_concurrent`, a place in the
/// process-wide cap. Dropping it gives both back.
#[derive(Debug)]
pub(crate) struct SlotPermit {
    queue: OwnedSemaphorePermit,
    _global: Option<OwnedSemaphorePermit>,
    /// The claim loop's record of its last job's run time, in microseconds (it claims ahead
    /// only while jobs are short); `None` when it does not claim ahead.
    last_run_us: Option<Arc<AtomicU64>>,
}

impl SlotPermit {
    /// A slot of a queue whose claim loop claims ahead (`last_run_us`: where its jobs record
    /// their run time) or not (`None`), without a place of the process-wide cap.
    pub(crate) fn new(queue: OwnedSemaphorePermit, last_run_us: Option<Arc<AtomicU64>>) -> Self {
        SlotPermit {
            queue,
            _global: None,
            last_run_us,
        }
    }

    /// Records a job's run time for its claim loop.
    fn record_run(&self, duration: Duration) {
        if let Some(last) = &self.last_run_us {
            let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
            last.store(micros, Ordering::Relaxed);
        }
    }

    /// The same slot for a job that holds `global` of the process-wide cap (the previous
    /// place of the cap is given back).
    pub(crate) fn with_global(self, global: Option<OwnedSemaphorePermit>) -> SlotPermit {
        SlotPermit {
            queue: self.queue,
            _global: global,
            last_run_us: self.last_run_us,
        }
    }
}

/// Where a claimed job stands: it has a slot and starts at once, or it was claimed ahead and
/// waits in its queue's [`Backlog`] (holding a place of the queue's claim-ahead).
#[derive(Debug)]
pub(crate) enum Place {
    /// Starts at once.
    Slot(SlotPermit),
    /// Waits for a slot (see `PoolConfig::prefetch`).
    Ahead {
        ahead: OwnedSemaphorePermit,
        global: Option<OwnedSemaphorePermit>,
    },
}

/// Capacity reserved before a claim: free slots of one queue, places of its claim-ahead, and
/// as many places of the process-wide cap as both together. Unused places go back when it is
/// dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    queue: Option<OwnedSemaphorePermit>,
    ahead: Option<OwnedSemaphorePermit>,
    global: Option<OwnedSemaphorePermit>,
    last_run_us: Option<Arc<AtomicU64>>,
}

impl Reservation {
    /// `queue`: free slots; `ahead`: claim-ahead places;
    /// `global`: places of the process-wide cap; `last_run_us`: where jobs record their run
    /// time for the claim loop (when it claims ahead).
    pub(crate) fn new(
        queue: Option<OwnedSemaphorePermit>,
        ahead: Option<OwnedSemaphorePermit>,
        global: Option<OwnedSemaphorePermit>,
        last_run_us: Option<Arc<AtomicU64>>,
    ) -> Self {
        Reservation {
            queue,
            ahead,
            global,
            last_run_us,
        }
    }

    /// Places reserved: slots plus claim-ahead places.
    pub(crate) fn len(&self) -> usize {
        self.slots() + self.ahead.as_ref().map_or(0, |p| p.num_permits())
    }

    /// Slots reserved: how many of the claimed jobs start at once.
    pub(crate) fn slots(&self) -> usize {
        self.queue.as_ref().map_or(0, |p| p.num_permits())
    }

    /// Takes one place for a job: a slot for a job the claim started (`started`), a
    /// claim-ahead place for one claimed ahead (or a slot, should none be left). `None` when
    /// nothing fits.
    pub(crate) fn take_one(&mut self, started: bool) -> Option<Place> {
        let ahead_left = self.ahead.as_ref().is_some_and(|p| p.num_permits() > 0);
        let use_slot = started || !ahead_left;
        if use_slot && self.slots() == 0 {
            return None;
        }
        let global = match &mut self.global {
            Some(global) => Some(global.split(1)?),
            None => None,
        };
        if use_slot {
            let queue = self.queue.as_mut()?.split(1)?;
            return Some(Place::Slot(SlotPermit {
                queue,
                _global: global,
                last_run_us: self.last_run_us.clone(),
            }));
        }
        Some(Place::Ahead {
            ahead: self.ahead.as_mut()?.split(1)?,
            global,
        })
    }
}

/// What the claim loops need to start jobs.
#[derive(Clone)]
pub(crate) struct Starter {
    pub(crate) tracker: TaskTracker,
    pub(crate) completer: UnboundedSender<Completion>,
    /// Fired when shutdown begins: jobs still waiting for a slot are released at once. Shared
    /// behind an `Arc`: cloning a `CancellationToken` takes its mutex, once per task otherwise.
    pub(crate) stop_claims: Arc<CancellationToken>,
}

impl Starter {
    /// Registers freshly claimed jobs as running; gives each a place of `reservation` (the
    /// rest of it is returned by the caller dropping it): a job the claim started gets a slot
    /// and an executor task, a job claimed ahead waits in its queue's backlog, where a task
    /// whose job finished picks it up (or, should a slot be free by now, a new task at once).
    pub(crate) fn start(
        &self,
        rt: &Arc<Runtime>,
        jobs: Vec<Job>,
        reservation: &mut Reservation,
        backlog: Option<&Arc<Backlog>>,
    ) {
        if jobs.is_empty() {
            return;
        }
        bump(&rt.counters.claimed, jobs.len() as u64);
        let shared: Vec<Arc<JobShared>> = jobs
            .into_iter()
            .map(|job| {
                Arc::new(JobShared::new(
                    job,
                    CancellationToken::new(),
                    Some(Arc::clone(&rt.nudge)),
                    rt.max_meta_bytes,
                ))
            })
            .collect();
        rt.running.insert_all(&shared);
        let mut waiting = Vec::new();
        for job in shared {
            rt.transition(&job.job, JobState::Queued, JobState::Running);
            match reservation.take_one(job.job.started_at.is_some()) {
                Some(Place::Slot(slot)) => self.spawn(rt, job, Some(slot), backlog.cloned()),
                Some(Place::Ahead { ahead, global }) => waiting.push(Waiting {
                    shared: job,
                    ahead,
                    global,
                }),
                None => {
                    tracing::warn!(
                        job_id = %job.job.id,
                        "store returned more jobs than the claim asked for; running it beyond the slot limit"
                    );
                    self.spawn(rt, job, None, None);
                }
            }
        }
        if waiting.is_empty() {
            return;
        }
        let Some(backlog) = backlog else {
            // Never: claim-ahead places are reserved only by a loop with a backlog.
            for job in waiting {
                leave_unstarted(rt, &job.shared, Some(&self.completer));
            }
            return;
        };
        backlog.push_all(waiting);
        if self.stop_claims.is_cancelled() {
            // Shutdown began while this claim was in flight: the worker's release of waiting
            // jobs may be over already (see `Worker::run`).
            backlog.release_all(rt, &self.completer);
            return;
        }
        self.start_waiting(rt, backlog);
    }

    /// Starts jobs waiting in `backlog` on its free slots, if any (slots freed since the claim
    /// loop's reservation, or given back outside the backlog's lock by a task that panicked).
    pub(crate) fn start_waiting(&self, rt: &Arc<Runtime>, backlog: &Arc<Backlog>) {
        while let Ok(queue) = Arc::clone(&backlog.slots).try_acquire_owned() {
            let slot = SlotPermit::new(queue, Some(Arc::clone(&backlog.last_run_us)));
            match next_startable(rt, backlog, slot, &self.stop_claims, &self.completer) {
                Some((job, slot)) => self.spawn(rt, job, Some(slot), Some(Arc::clone(backlog))),
                None => break,
            }
        }
    }

    /// Spawns an executor task for `job`; with `backlog`, the task goes on with the jobs
    /// waiting there when it finishes.
    fn spawn(
        &self,
        rt: &Arc<Runtime>,
        job: Arc<JobShared>,
        slot: Option<SlotPermit>,
        backlog: Option<Arc<Backlog>>,
    ) {
        self.tracker.spawn(execute(
            Arc::clone(rt),
            job,
            slot,
            backlog,
            self.completer.clone(),
            Arc::clone(&self.stop_claims),
        ));
    }
}

/// How the handler's future ended.
#[derive(Debug)]
enum Ran {
    /// It returned.
    Returned(Outcome),
    /// It panicked with this message.
    Panicked(String),
    /// It did not stop within the cancel grace after its token fired, and was dropped.
    Abandoned,
    /// No handler is registered for the kind (cannot happen: only registered kinds are
    /// claimed).
    NoHandler,
    /// The children of a kind with a rollback hook could not be read, so neither the hook nor
    /// the handler ran.
    NoChildren(drover_core::Error),
}

/// For a kind with a rollback hook (`registry.rs`): the hook, bound to the children that ended
/// failed or cancelled, when there are any; else the kind's handler. An error when the
/// children could not be read.
async fn rollback_or_handler(
    rt: &Runtime,
    shared: &Arc<JobShared>,
    rollback: &Arc<dyn Rollback>,
) -> Option<Result<Arc<dyn Handler>, drover_core::Error>> {
    let ctx = JobContext::from_shared(Arc::clone(shared), Some(Arc::clone(&rt.links)));
    let children = match ctx.children().await {
        Ok(children) => children,
        Err(error) => return Some(Err(error)),
    };
    let failed: Vec<Job> = children.into_iter().filter(ended_badly).collect();
    if failed.is_empty() {
        return rt.registry.handler(&shared.job.kind).cloned().map(Ok);
    }
    rt.metrics.rollback(&shared.job.kind);
    Some(Ok(Arc::new(RollbackRun {
        rollback: Arc::clone(rollback),
        failed: parking_lot::Mutex::new(Some(failed)),
    })))
}

/// A rollback hook run as the handler of one run.
struct RollbackRun {
    rollback: Arc<dyn Rollback>,
    failed: parking_lot::Mutex<Option<Vec<Job>>>,
}

#[async_trait::async_trait]
impl Handler for RollbackRun {
    async fn run(&self, ctx: JobContext) -> Outcome {
        let failed = self.failed.lock().take().unwrap_or_default();
        self.rollback.rollback(ctx, failed).await
    }
}

/// The next job of `backlog` that may start, with `slot`; `None` (the slot given back) when
/// none waits. A job whose token fired while it waited leaves without running
/// (`backlog::leave_unstarted`); once shutdown began, every waiting job leaves that way.
pub(crate) fn next_startable(
    rt: &Runtime,
    backlog: &Backlog,
    mut slot: SlotPermit,
    stop_claims: &CancellationToken,
    completer: &UnboundedSender<Completion>,
) -> Option<(Arc<JobShared>, SlotPermit)> {
    loop {
        let (job, held) = backlog.next_for(slot)?;
        if stop_claims.is_cancelled() {
            drop(held);
            leave_unstarted(rt, &job, Some(completer));
            backlog.release_all(rt, completer);
            return None;
        }
        if job.reason().is_none() {
            return Some((job, held));
        }
        leave_unstarted(rt, &job, Some(completer));
        slot = held;
    }
}

/// Runs `job` to its outcome, then, with a `backlog`, each job waiting there in turn on the
/// same slot, until none waits (the slot is then given back).
async fn execute(
    rt: Arc<Runtime>,
    mut job: Arc<JobShared>,
    mut slot: Option<SlotPermit>,
    backlog: Option<Arc<Backlog>>,
    completer: UnboundedSender<Completion>,
    stop_claims: Arc<CancellationToken>,
) {
    loop {
        match telemetry::Attempt::start(&job.job) {
            Some(attempt) => {
                run_one(&rt, &job, slot.as_ref(), &completer, Some(&attempt))
                    .instrument(attempt.log_span())
                    .with_context(attempt.context())
                    .await;
                attempt.end();
            }
            None => {
                let span = tracing::debug_span!(
                    "job",
                    job_id = %job.job.id,
                    kind = %job.job.kind,
                    queue = %job.job.queue,
                    attempt = job.job.attempt,
                );
                run_one(&rt, &job, slot.as_ref(), &completer, None)
                    .instrument(span)
                    .await;
            }
        }
        let (Some(backlog), Some(held)) = (backlog.as_ref(), slot.take()) else {
            return;
        };
        match next_startable(&rt, backlog, held, &stop_claims, &completer) {
            Some((next, next_slot)) => {
                job = next;
                slot = Some(next_slot);
            }
            None => return,
        }
        // Handlers that finish at their first poll never yield: spend the task's budget so a
        // long backlog still lets the completer and other tasks of this thread run.
        tokio::task::consume_budget().await;
    }
}

/// Runs one job that holds `slot` (or runs beyond the slot limit: `None`) and hands its
/// outcome to the completer.
async fn run_one(
    rt: &Runtime,
    shared: &Arc<JobShared>,
    slot: Option<&SlotPermit>,
    completer: &UnboundedSender<Completion>,
    attempt: Option<&telemetry::Attempt>,
) {
    let job = &shared.job;
    let started = Instant::now();
    if shared.handler_started(started) {
        // A job claimed ahead: the store learns of its start from the next heartbeat or
        // its finish, whichever comes first.
        rt.nudge.nudge();
    }
    rt.metrics.job_started(&job.kind, &job.queue);
    if let Some(claimed) = job.attempted_at {
        // Runnable at its run_at, or at its enqueue when that came later (docs/opentelemetry.md).
        let runnable = job.run_at.max(job.created_at);
        let wait = (claimed - runnable).to_std().unwrap_or_default();
        rt.metrics.job_queue_wait(&job.kind, &job.queue, wait);
    }
    let config = rt.registry.config(&job.kind);
    let handler = match rt.registry.rollback(&job.kind) {
        Some(rollback) => rollback_or_handler(rt, shared, rollback).await,
        None => rt.registry.handler(&job.kind).cloned().map(Ok),
    };
    let ran = match handler {
        Some(Ok(handler)) => {
            run_handler(
                handler,
                shared,
                Arc::clone(&rt.links),
                config.timeout,
                rt.config.cancel_grace,
            )
            .await
        }
        Some(Err(error)) => Ran::NoChildren(error),
        None => Ran::NoHandler,
    };
    let duration = started.elapsed();
    if let Some(slot) = slot {
        slot.record_run(duration);
    }
    let finish = if shared.lease_lost() {
        tracing::warn!("lease lost while running: the outcome of this run is not written");
        None
    } else {
        Some(decide(ran, shared, &config, rt))
    };
    if let Some(attempt) = attempt {
        record_on_span(attempt, job, finish.as_ref());
    }
    // Room for the outcome before it is handed over, this slot held meanwhile: the claims
    // slow down with the writes (Runtime::unwritten_room).
    let room = match finish {
        Some(_) => Arc::clone(&rt.unwritten_room).acquire_owned().await.ok(),
        None => None,
    };
    hand_over(rt, shared, finish, duration, Some(completer), room);
}

/// Records the outcome the run asks for on its attempt span (whether a failure is retried
/// is the store's decision; this is the runner's expectation from the attempts left).
fn record_on_span(attempt: &telemetry::Attempt, job: &Job, finish: Option<&Finish>) {
    let (outcome, error) = match finish {
        None => (JobOutcome::LeaseLost, Some("lease lost while running")),
        Some(Finish::Succeeded { .. }) => (JobOutcome::Succeeded, None),
        Some(Finish::Failed { message, retry }) => {
            let retried = *retry != Retry::Never && job.attempt < job.max_attempts;
            let outcome = if retried {
                JobOutcome::Retried
            } else {
                JobOutcome::Failed
            };
            (outcome, Some(message.as_str()))
        }
        Some(Finish::Snoozed { .. }) => (JobOutcome::Snoozed, None),
        Some(Finish::Released) => (JobOutcome::Released, None),
        Some(Finish::Cancelled { .. }) => (JobOutcome::Cancelled, None),
        Some(Finish::WaitForChildren) => (JobOutcome::Waiting, None),
    };
    attempt.record_outcome(outcome, error);
}

/// Hands a job's write to the completer; `None` when its lease was lost: nothing is written,
/// the job leaves the running map and counts as lease lost. `duration` is the handler's run
/// time (zero for a job claimed ahead that never started); `room`, its place of
/// `Runtime::unwritten_room`, goes with the write.
pub(crate) fn hand_over(
    rt: &Runtime,
    shared: &Arc<JobShared>,
    finish: Option<Finish>,
    duration: Duration,
    completer: Option<&UnboundedSender<Completion>>,
    room: Option<tokio::sync::OwnedSemaphorePermit>,
) {
    shared.handed_over();
    let Some(finish) = finish else {
        rt.running.remove(shared);
        rt.finished(&shared.job, JobOutcome::LeaseLost, duration);
        return;
    };
    let sent = completer.is_some_and(|completer| {
        completer
            .send(Completion {
                shared: Arc::clone(shared),
                finish,
                duration,
                _room: room,
            })
            .is_ok()
    });
    if !sent {
        tracing::error!("completer stopped before the outcome could be handed over");
        rt.running.remove(shared);
        bump(&rt.counters.unwritten, 1);
    }
}

/// Polls the handler until it returns, the timeout elapses or its token fires; after the token
/// fired, gives it `cancel_grace` more before dropping it.
async fn run_handler(
    handler: Arc<dyn Handler>,
    shared: &Arc<JobShared>,
    links: Arc<Links>,
    timeout: Option<Duration>,
    cancel_grace: Duration,
) -> Ran {
    let ctx = JobContext::from_shared(Arc::clone(shared), Some(links));
    let run = AssertUnwindSafe(async move { handler.run(ctx).await }).catch_unwind();
    tokio::pin!(run);
    let deadline = async {
        match timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    let first = tokio::select! {
        biased;
        result = &mut run => Some(result),
        () = shared.cancel.cancelled() => None,
        () = deadline => {
            shared.cancel_with(CancelReason::Timeout);
            None
        }
    };
    let result = match first {
        Some(result) => Some(result),
        None => tokio::time::timeout(cancel_grace, &mut run).await.ok(),
    };
    match result {
        Some(Ok(outcome)) => Ran::Returned(outcome),
        Some(Err(payload)) => Ran::Panicked(panic_message(payload.as_ref())),
        None => {
            tracing::warn!(
                cancel_grace_ms = cancel_grace.as_millis() as u64,
                "handler ignored its cancellation; aborted"
            );
            Ran::Abandoned
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Turns how the handler ended, and why its token fired, into the write for the completer.
fn decide(ran: Ran, shared: &JobShared, config: &KindConfig, rt: &Runtime) -> Finish {
    let attempt = shared.job.attempt;
    let backoff = || Retry::After(config.backoff.delay(attempt, rand::random::<f64>()));
    let cancel_grace_ms = rt.config.cancel_grace.as_millis();
    // Success is recorded whatever fired the token: the work happened (docs/design.md section 9).
    if let Ran::Returned(Outcome::Success { result }) = ran {
        return succeeded(result, rt);
    }
    // So is a wait for children: they are stored, and running the parent again before they
    // end would enqueue them again (a cancel requested meanwhile ends it cancelled).
    if let Ran::Returned(Outcome::WaitForChildren) = ran {
        return Finish::WaitForChildren;
    }
    match shared.reason() {
        Some(CancelReason::Shutdown) => Finish::Released,
        Some(CancelReason::Timeout) => Finish::Failed {
            message: format!(
                "timed out after {} ms",
                config.timeout.unwrap_or_default().as_millis()
            ),
            retry: backoff(),
        },
        Some(CancelReason::CancelRequested) => Finish::Cancelled {
            message: match ran {
                Ran::Returned(Outcome::Cancelled { reason }) => reason,
                Ran::Returned(Outcome::Retry { message, .. })
                | Ran::Returned(Outcome::Discard { message }) => {
                    format!("cancelled on request: {message}")
                }
                Ran::Panicked(message) => {
                    format!("cancelled on request; handler panicked: {message}")
                }
                Ran::Abandoned => format!(
                    "cancelled on request; handler did not stop within {cancel_grace_ms} ms and was aborted"
                ),
                _ => "cancelled on request".to_owned(),
            },
        },
        // Lease lost is handled before `decide`; a token fired by the handler itself, or no
        // firing at all, leaves the handler's own verdict.
        Some(CancelReason::LeaseLost) | None => match ran {
            Ran::Returned(Outcome::Success { result }) => succeeded(result, rt),
            Ran::Returned(Outcome::Retry { message, delay }) => Finish::Failed {
                message,
                retry: delay.map_or_else(backoff, Retry::After),
            },
            Ran::Returned(Outcome::Discard { message }) => Finish::Failed {
                message,
                retry: Retry::Never,
            },
            Ran::Returned(Outcome::Snooze { delay }) => Finish::Snoozed { delay },
            Ran::Returned(Outcome::Cancelled { reason }) => Finish::Cancelled { message: reason },
            Ran::Panicked(message) => Finish::Failed {
                message: format!("handler panicked: {message}"),
                retry: backoff(),
            },
            Ran::Abandoned => Finish::Failed {
                message: format!(
                    "handler did not stop within {cancel_grace_ms} ms after its cancellation token fired and was aborted"
                ),
                retry: backoff(),
            },
            Ran::NoChildren(error) => Finish::Failed {
                message: format!("could not read the job's children for its rollback hook: {error}"),
                retry: backoff(),
            },
            Ran::Returned(Outcome::WaitForChildren) => Finish::WaitForChildren,
            Ran::NoHandler => Finish::Failed {
                message: format!(
                    "no handler for kind {} in worker {}",
                    shared.job.kind, rt.config.worker_id
                ),
                retry: backoff(),
            },
        },
    }
}

/// A success, unless the result breaks the store's rules (too large, NUL): then a failure
/// without retry that says why, since running again would produce the same result.
fn succeeded(result: Option<serde_json::Value>, rt: &Runtime) -> Finish {
    if let Some(value) = &result {
        if let Err(error) = drover_core::json::check_value("result", value, rt.max_result_bytes) {
            return Finish::Failed {
                message: error.to_string(),
                retry: Retry::Never,
            };
        }
    }
    Finish::Succeeded { result }
}

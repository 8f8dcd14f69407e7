//! The executor: one tokio task per claimed job, in the worker's `TaskTracker`, inside a
//! `tracing` span with the job id, kind, queue and attempt (never args). The span is at debug
//! level (enable `drover_runner=debug` to see it around a handler's own log lines): building
//! an enabled span costs about a microsecond a job, a noticeable share of a no-op job. It runs the handler
//! with a [`JobContext`], enforces the kind's timeout, catches panics, aborts a handler that
//! ignores its cancellation for longer than the cancel grace, releases the slot as soon as the
//! handler returns, and hands the outcome to the completer (DESIGN.md sections 3, 6 and 9).

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Finish, Job, JobState, Retry};
use futures::FutureExt;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::completer::Completion;
use crate::context::JobContext;
use crate::handler::Handler;
use crate::metrics::JobOutcome;
use crate::outcome::Outcome;
use crate::registry::KindConfig;
use crate::running::{CancelReason, JobShared};
use crate::runtime::{bump, Runtime};

/// The capacity one job holds: a slot of its queue and, with `max_concurrent`, a place in the
/// process-wide cap. Dropping it gives both back.
#[derive(Debug)]
pub(crate) struct SlotPermit {
    _queue: OwnedSemaphorePermit,
    _global: Option<OwnedSemaphorePermit>,
    /// The claim loop's record of its last job's run time, in microseconds (it claims ahead
    /// only while jobs are short); `None` when it does not claim ahead.
    last_run_us: Option<Arc<AtomicU64>>,
}

impl SlotPermit {
    /// Records a job's run time for its claim loop.
    fn record_run(&self, duration: Duration) {
        if let Some(last) = &self.last_run_us {
            let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
            last.store(micros, Ordering::Relaxed);
        }
    }
}

/// Where a claimed job stands: it has a slot and starts at once, or it was claimed ahead and
/// waits (holding a place of the queue's claim-ahead) for a slot of `slots`.
#[derive(Debug)]
pub(crate) enum Place {
    /// Starts at once.
    Slot(SlotPermit),
    /// Waits for a slot (see `PoolConfig::prefetch`).
    Ahead {
        ahead: OwnedSemaphorePermit,
        global: Option<OwnedSemaphorePermit>,
        slots: Arc<Semaphore>,
        last_run_us: Option<Arc<AtomicU64>>,
    },
}

/// Capacity reserved before a claim: free slots of one queue, places of its claim-ahead, and
/// as many places of the process-wide cap as both together. Unused places go back when it is
/// dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    queue: Option<OwnedSemaphorePermit>,
    ahead: Option<(OwnedSemaphorePermit, Arc<Semaphore>)>,
    global: Option<OwnedSemaphorePermit>,
    last_run_us: Option<Arc<AtomicU64>>,
}

impl Reservation {
    /// `queue`: free slots; `ahead`: claim-ahead places and the slots such a job waits for;
    /// `global`: places of the process-wide cap; `last_run_us`: where jobs record their run
    /// time for the claim loop (when it claims ahead).
    pub(crate) fn new(
        queue: Option<OwnedSemaphorePermit>,
        ahead: Option<(OwnedSemaphorePermit, Arc<Semaphore>)>,
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
        self.queue.as_ref().map_or(0, |p| p.num_permits())
            + self.ahead.as_ref().map_or(0, |(p, _)| p.num_permits())
    }

    /// Takes one place for a job: a slot while any is left, then a claim-ahead place.
    pub(crate) fn take_one(&mut self) -> Option<Place> {
        let global = match &mut self.global {
            Some(global) => Some(global.split(1)?),
            None => None,
        };
        if let Some(queue) = self.queue.as_mut().and_then(|q| q.split(1)) {
            return Some(Place::Slot(SlotPermit {
                _queue: queue,
                _global: global,
                last_run_us: self.last_run_us.clone(),
            }));
        }
        let (ahead, slots) = self.ahead.as_mut()?;
        Some(Place::Ahead {
            ahead: ahead.split(1)?,
            global,
            slots: Arc::clone(slots),
            last_run_us: self.last_run_us.clone(),
        })
    }
}

/// What the claim loops need to start jobs.
#[derive(Clone)]
pub(crate) struct Starter {
    pub(crate) tracker: TaskTracker,
    pub(crate) completer: UnboundedSender<Completion>,
    /// Fired when shutdown begins: jobs still waiting for a slot are released at once. Shared
    /// behind an `Arc`: cloning a `CancellationToken` takes its mutex, once per job otherwise.
    pub(crate) stop_claims: Arc<CancellationToken>,
}

impl Starter {
    /// Registers freshly claimed jobs as running and spawns one executor task each, giving
    /// each a place of `reservation` (the rest of it is returned by the caller dropping it).
    pub(crate) fn start(&self, rt: &Arc<Runtime>, jobs: Vec<Job>, reservation: &mut Reservation) {
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
        for job in shared {
            let slot = reservation.take_one();
            if slot.is_none() {
                tracing::warn!(
                    job_id = %job.job.id,
                    "store returned more jobs than the claim asked for; running it beyond the slot limit"
                );
            }
            rt.transition(&job.job, JobState::Queued, JobState::Running);
            let span = tracing::debug_span!(
                "job",
                job_id = %job.job.id,
                kind = %job.job.kind,
                queue = %job.job.queue,
                attempt = job.job.attempt,
            );
            self.tracker.spawn(
                execute(
                    Arc::clone(rt),
                    job,
                    slot,
                    self.completer.clone(),
                    Arc::clone(&self.stop_claims),
                )
                .instrument(span),
            );
        }
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
}

/// A job claimed ahead waits for a slot of its queue; `Err` with the write for the completer
/// when it must not start: shutdown began (released, no attempt spent), a cancel was requested
/// (cancelled before it started), or `None` when its lease was lost (nothing is written).
async fn wait_for_slot(
    shared: &JobShared,
    slots: Arc<Semaphore>,
    stop_claims: &CancellationToken,
) -> Result<OwnedSemaphorePermit, Option<Finish>> {
    // A slot free at once needs no waiting (and no registration with the two tokens).
    let acquired = match Arc::clone(&slots).try_acquire_owned() {
        Ok(permit) if !stop_claims.is_cancelled() => Some(permit),
        Ok(_) => return Err(Some(Finish::Released)),
        Err(_) => tokio::select! {
            biased;
            () = shared.cancel.cancelled() => None,
            () = stop_claims.cancelled() => return Err(Some(Finish::Released)),
            permit = slots.acquire_owned() => permit.ok(),
        },
    };
    match (acquired, shared.reason()) {
        (Some(permit), None) => Ok(permit),
        (_, Some(CancelReason::CancelRequested)) => Err(Some(Finish::Cancelled {
            message: "cancelled on request before it started".to_owned(),
        })),
        (_, Some(CancelReason::LeaseLost)) => Err(None),
        // Shutdown, or a closed semaphore (never: they are not closed).
        _ => Err(Some(Finish::Released)),
    }
}

/// Runs one job to its outcome.
async fn execute(
    rt: Arc<Runtime>,
    shared: Arc<JobShared>,
    place: Option<Place>,
    completer: UnboundedSender<Completion>,
    stop_claims: Arc<CancellationToken>,
) {
    let job = &shared.job;
    let slot = match place {
        Some(Place::Slot(slot)) => Some(slot),
        Some(Place::Ahead {
            ahead,
            global,
            slots,
            last_run_us,
        }) => {
            let waited = wait_for_slot(&shared, slots, &stop_claims).await;
            drop(ahead);
            match waited {
                Ok(queue) => Some(SlotPermit {
                    _queue: queue,
                    _global: global,
                    last_run_us,
                }),
                Err(finish) => {
                    hand_over(&rt, &shared, finish, Duration::ZERO, &completer);
                    return;
                }
            }
        }
        None => None,
    };
    rt.metrics.job_started(&job.kind, &job.queue);
    let config = rt.registry.config(&job.kind);
    let started = Instant::now();
    let ran = match rt.registry.handler(&job.kind) {
        Some(handler) => {
            run_handler(
                Arc::clone(handler),
                &shared,
                config.timeout,
                rt.config.cancel_grace,
            )
            .await
        }
        None => Ran::NoHandler,
    };
    let duration = started.elapsed();
    if let Some(slot) = &slot {
        slot.record_run(duration);
    }
    drop(slot);
    let finish = if shared.lease_lost() {
        tracing::warn!("lease lost while running: the outcome of this run is not written");
        None
    } else {
        Some(decide(ran, &shared, &config, &rt))
    };
    hand_over(&rt, &shared, finish, duration, &completer);
}

/// Hands a job's write to the completer; `None` when its lease was lost: nothing is written,
/// the job leaves the running map and counts as lease lost. `duration` is the handler's run
/// time (zero for a job claimed ahead that never started).
fn hand_over(
    rt: &Runtime,
    shared: &Arc<JobShared>,
    finish: Option<Finish>,
    duration: Duration,
    completer: &UnboundedSender<Completion>,
) {
    let id = shared.job.id;
    let Some(finish) = finish else {
        rt.running.remove(&id);
        rt.finished(&shared.job, JobOutcome::LeaseLost, duration);
        return;
    };
    if completer
        .send(Completion {
            shared: Arc::clone(shared),
            finish,
            duration,
        })
        .is_err()
    {
        tracing::error!("completer stopped before the outcome could be handed over");
        rt.running.remove(&id);
        bump(&rt.counters.unwritten, 1);
    }
}

/// Polls the handler until it returns, the timeout elapses or its token fires; after the token
/// fired, gives it `cancel_grace` more before dropping it.
async fn run_handler(
    handler: Arc<dyn Handler>,
    shared: &Arc<JobShared>,
    timeout: Option<Duration>,
    cancel_grace: Duration,
) -> Ran {
    let ctx = JobContext::from_shared(Arc::clone(shared));
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
    // Success is recorded whatever fired the token: the work happened (DESIGN.md section 9).
    if let Ran::Returned(Outcome::Success { result }) = ran {
        return succeeded(result, rt);
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

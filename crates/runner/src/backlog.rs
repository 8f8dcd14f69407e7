//! Jobs claimed ahead of a free slot (`PoolConfig::prefetch`) wait in their claim loop's
//! [`Backlog`], in claim order, without a task of their own: an executor task whose job
//! finished takes the next waiting job and runs it with the same slot, and gives the slot
//! back only when none waits. A claimed-ahead job thus costs no task spawn, no semaphore
//! round trip and no wake-up, and the slots' tasks stay warm in the cache.
//!
//! Liveness: an executor that finds the backlog empty gives its slot back while it holds the
//! backlog's lock, and the claim loop, after it adds jobs, takes any free slot and starts the
//! next waiting job on it (`Starter::start`); so a job never waits while a slot of its queue is
//! free.
//!
//! A waiting job whose cancellation token fires (cancel requested, lease lost) leaves the
//! backlog at once ([`Runtime::cancel_job`]): "cancelled on request before it started", or
//! nothing written when its lease was lost. When shutdown begins every waiting job is
//! released without spending an attempt (DESIGN.md sections 6 and 9).

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use drover_core::{Finish, JobId};
use parking_lot::Mutex;
use tokio::sync::mpsc::{UnboundedSender, WeakUnboundedSender};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::completer::Completion;
use crate::executor::{hand_over, SlotPermit};
use crate::running::{CancelReason, JobShared};
use crate::runtime::Runtime;

/// A job claimed ahead, with the places it holds while it waits.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) shared: Arc<JobShared>,
    /// Its place of the queue's claim-ahead; given back when it starts or leaves.
    pub(crate) ahead: OwnedSemaphorePermit,
    /// Its place of the process-wide `max_concurrent` cap, kept when it starts.
    pub(crate) global: Option<OwnedSemaphorePermit>,
}

/// The jobs one claim loop claimed ahead, waiting for a slot of its queue, in claim order.
#[derive(Debug)]
pub(crate) struct Backlog {
    waiting: Mutex<VecDeque<Waiting>>,
    /// The queue's slots.
    pub(crate) slots: Arc<Semaphore>,
    /// The claim loop's record of its last job's run time, in microseconds.
    pub(crate) last_run_us: Arc<AtomicU64>,
}

impl Backlog {
    /// An empty backlog for a queue with `slots`.
    pub(crate) fn new(slots: Arc<Semaphore>, last_run_us: Arc<AtomicU64>) -> Self {
        Backlog {
            waiting: Mutex::new(VecDeque::new()),
            slots,
            last_run_us,
        }
    }

    /// Adds jobs, in claim order, behind those already waiting.
    pub(crate) fn push_all(&self, jobs: impl IntoIterator<Item = Waiting>) {
        self.waiting.lock().extend(jobs);
    }

    /// The next waiting job with `slot`, which it now holds (with the job's own place of the
    /// process-wide cap); or, when none waits, `None` and the slot is given back, under the
    /// lock (see the module docs).
    pub(crate) fn next_for(&self, slot: SlotPermit) -> Option<(Arc<JobShared>, SlotPermit)> {
        let mut waiting = self.waiting.lock();
        match waiting.pop_front() {
            Some(next) => {
                drop(waiting);
                let Waiting {
                    shared,
                    ahead,
                    global,
                } = next;
                drop(ahead);
                Some((shared, slot.with_global(global)))
            }
            None => {
                drop(slot);
                None
            }
        }
    }

    /// Takes the waiting job `id` out, if it waits here.
    fn remove(&self, id: JobId) -> Option<Waiting> {
        let mut waiting = self.waiting.lock();
        let index = waiting.iter().position(|w| w.shared.job.id == id)?;
        waiting.remove(index)
    }

    /// Takes every waiting job out.
    pub(crate) fn drain(&self) -> Vec<Waiting> {
        self.waiting.lock().drain(..).collect()
    }
}

/// Every backlog of a worker, and a way to the completer that does not keep it open.
#[derive(Debug, Default)]
pub(crate) struct Backlogs {
    inner: OnceLock<(Vec<Arc<Backlog>>, WeakUnboundedSender<Completion>)>,
}

impl Backlogs {
    /// Records the worker's backlogs (once, when its claim loops are built).
    pub(crate) fn set(&self, backlogs: Vec<Arc<Backlog>>, completer: &UnboundedSender<Completion>) {
        let _ = self.inner.set((backlogs, completer.downgrade()));
    }

    /// Takes job `id` out of whichever backlog holds it.
    fn remove(&self, id: JobId) -> Option<(Waiting, Option<UnboundedSender<Completion>>)> {
        let (backlogs, completer) = self.inner.get()?;
        let waiting = backlogs.iter().find_map(|backlog| backlog.remove(id))?;
        Some((waiting, completer.upgrade()))
    }

    /// Every waiting job of every backlog, taken out.
    pub(crate) fn drain(&self) -> Vec<Waiting> {
        self.inner
            .get()
            .map(|(backlogs, _)| backlogs.iter().flat_map(|b| b.drain()).collect())
            .unwrap_or_default()
    }
}

/// The write for a job that leaves a backlog without running, by why its token fired:
/// cancelled before it started, nothing (lease lost: `None`), or released (shutdown, or no
/// reason: it spends no attempt).
pub(crate) fn unstarted_finish(shared: &JobShared) -> Option<Finish> {
    match shared.reason() {
        Some(CancelReason::CancelRequested) => Some(Finish::Cancelled {
            message: "cancelled on request before it started".to_owned(),
        }),
        Some(CancelReason::LeaseLost) => None,
        Some(CancelReason::Shutdown | CancelReason::Timeout) | None => Some(Finish::Released),
    }
}

/// Hands the write of a job that leaves a backlog without running to the completer.
pub(crate) fn leave_unstarted(
    rt: &Runtime,
    waiting: Waiting,
    completer: Option<&UnboundedSender<Completion>>,
) {
    let finish = unstarted_finish(&waiting.shared);
    hand_over(
        rt,
        &waiting.shared,
        finish,
        std::time::Duration::ZERO,
        completer,
    );
}

impl Runtime {
    /// Fires `job`'s cancellation token with `reason`; a job still waiting for a slot leaves
    /// its backlog at once with the matching write (see [`unstarted_finish`]).
    pub(crate) fn cancel_job(&self, job: &JobShared, reason: CancelReason) {
        job.cancel_with(reason);
        if let Some((waiting, completer)) = self.backlogs.remove(job.job.id) {
            leave_unstarted(self, waiting, completer.as_ref());
        }
    }
}

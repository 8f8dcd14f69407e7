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
//! released without spending an attempt (docs/design.md sections 6 and 9). A waiting job has no
//! start time in the store; the executor reports its start when it leaves for a slot.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use drover_core::Finish;
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

    /// Takes the waiting run out, if it waits here.
    fn remove(&self, run: &JobShared) -> Option<Waiting> {
        let mut waiting = self.waiting.lock();
        let index = waiting
            .iter()
            .position(|w| std::ptr::eq(Arc::as_ptr(&w.shared), run))?;
        waiting.remove(index)
    }

    /// Takes every waiting job out and hands each one's write to the completer (see
    /// [`unstarted_finish`]): the release when shutdown begins.
    pub(crate) fn release_all(&self, rt: &Runtime, completer: &UnboundedSender<Completion>) {
        let waiting: Vec<Waiting> = self.waiting.lock().drain(..).collect();
        for job in waiting {
            leave_unstarted(rt, &job.shared, Some(completer));
        }
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
    fn remove(&self, run: &JobShared) -> Option<(Waiting, Option<UnboundedSender<Completion>>)> {
        let (backlogs, completer) = self.inner.get()?;
        let waiting = backlogs.iter().find_map(|backlog| backlog.remove(run))?;
        Some((waiting, completer.upgrade()))
    }

    /// Releases every waiting job of every backlog ([`Backlog::release_all`]).
    pub(crate) fn release_all(&self, rt: &Runtime, completer: &UnboundedSender<Completion>) {
        if let Some((backlogs, _)) = self.inner.get() {
            for backlog in backlogs {
                backlog.release_all(rt, completer);
            }
        }
    }
}

/// The write for a job that leaves a backlog without running, by why its token fired:
/// cancelled before it started, nothing (lease lost: `None`), or released (shutdown, or no
/// reason: it spends no attempt).
fn unstarted_finish(shared: &JobShared) -> Option<Finish> {
    match shared.reason() {
        Some(CancelReason::CancelRequested) => Some(Finish::Cancelled {
            message: "cancelled on request before it started".to_owned(),
        }),
        Some(CancelReason::LeaseLost) => None,
        Some(CancelReason::Shutdown | CancelReason::Timeout) | None => Some(Finish::Released),
    }
}

/// Hands the write of a job that leaves a backlog without running ([`unstarted_finish`]) to
/// the completer.
pub(crate) fn leave_unstarted(
    rt: &Runtime,
    job: &Arc<JobShared>,
    completer: Option<&UnboundedSender<Completion>>,
) {
    let finish = unstarted_finish(job);
    hand_over(rt, job, finish, std::time::Duration::ZERO, completer, None);
}

impl Runtime {
    /// Fires `job`'s cancellation token with `reason`; a job still waiting for a slot leaves
    /// its backlog at once with the matching write (see [`unstarted_finish`]).
    pub(crate) fn cancel_job(&self, job: &JobShared, reason: CancelReason) {
        job.cancel_with(reason);
        if let Some((waiting, completer)) = self.backlogs.remove(job) {
            leave_unstarted(self, &waiting.shared, completer.as_ref());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use chrono::Utc;
    use drover_core::{Job, JobId, JobKind, NewJob, StoreConfig};
    use drover_store_memory::MemoryStore;
    use serde_json::json;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    use super::*;
    use crate::executor::{next_startable, Reservation, Starter};
    use crate::metrics::NoopMetrics;
    use crate::outcome::Outcome;
    use crate::registry::Registry;
    use crate::WorkerConfig;

    fn runtime() -> Arc<Runtime> {
        let mut registry = Registry::new();
        registry.register_fn(JobKind::parse("quick").unwrap(), |_ctx| async {
            Outcome::success()
        });
        Arc::new(Runtime::new(
            Arc::new(MemoryStore::new(StoreConfig::default())),
            Arc::new(registry),
            WorkerConfig::default(),
            Arc::new(NoopMetrics),
            None,
        ))
    }

    fn job(n: i64) -> Job {
        NewJob::new(JobKind::parse("quick").unwrap(), json!({ "n": n }))
            .into_job(JobId::new_v7(), Utc::now())
    }

    fn shared(job: Job) -> Arc<JobShared> {
        Arc::new(JobShared::new(job, CancellationToken::new(), None, 1024))
    }

    /// A backlog of one slot (free) holding `jobs`, each with a place of `ahead`.
    fn backlog_of(jobs: &[Arc<JobShared>], ahead: &Arc<Semaphore>) -> Arc<Backlog> {
        let backlog = Arc::new(Backlog::new(
            Arc::new(Semaphore::new(1)),
            Arc::new(AtomicU64::new(u64::MAX)),
        ));
        backlog.push_all(jobs.iter().map(|job| Waiting {
            shared: Arc::clone(job),
            ahead: Arc::clone(ahead).try_acquire_owned().unwrap(),
            global: None,
        }));
        backlog
    }

    fn slot_of(backlog: &Backlog) -> SlotPermit {
        SlotPermit::new(
            Arc::clone(&backlog.slots).try_acquire_owned().unwrap(),
            None,
        )
    }

    /// The write of a job cancelled while it waited.
    fn cancelled_before_start(job: &JobShared) -> (JobId, Finish) {
        (
            job.job.id,
            Finish::Cancelled {
                message: "cancelled on request before it started".to_owned(),
            },
        )
    }

    fn written(rx: &mut UnboundedReceiver<Completion>) -> Vec<(JobId, Finish)> {
        let mut out = Vec::new();
        while let Ok(completion) = rx.try_recv() {
            out.push((completion.shared.job.id, completion.finish));
        }
        out
    }

    #[test]
    fn jobs_leave_in_claim_order_and_the_slot_goes_back_when_none_waits() {
        let ahead = Arc::new(Semaphore::new(3));
        let jobs: Vec<_> = (0..3).map(|n| shared(job(n))).collect();
        let backlog = backlog_of(&jobs, &ahead);
        assert_eq!(ahead.available_permits(), 0);
        let mut slot = slot_of(&backlog);
        for (n, expected) in jobs.iter().enumerate() {
            let (next, held) = backlog.next_for(slot).expect("a job waits");
            assert_eq!(next.job.id, expected.job.id, "claim order");
            assert_eq!(ahead.available_permits(), n + 1, "its claim-ahead place");
            assert_eq!(backlog.slots.available_permits(), 0, "the slot is kept");
            slot = held;
        }
        assert!(backlog.next_for(slot).is_none());
        assert_eq!(backlog.slots.available_permits(), 1, "slot given back");
    }

    #[test]
    fn a_job_whose_token_fired_while_waiting_leaves_without_running() {
        let rt = runtime();
        let (tx, mut rx) = unbounded_channel();
        let ahead = Arc::new(Semaphore::new(3));
        let jobs: Vec<_> = (0..3).map(|n| shared(job(n))).collect();
        rt.running.insert_all(&jobs);
        jobs[0].cancel_with(CancelReason::CancelRequested);
        jobs[1].cancel_with(CancelReason::LeaseLost);
        let backlog = backlog_of(&jobs, &ahead);
        let stop = CancellationToken::new();
        let (next, _slot) =
            next_startable(&rt, &backlog, slot_of(&backlog), &stop, &tx).expect("the third");
        assert_eq!(next.job.id, jobs[2].job.id);
        assert_eq!(
            written(&mut rx),
            vec![cancelled_before_start(&jobs[0])],
            "a lost lease writes nothing"
        );
        assert!(rt.running.get(&jobs[1].job.id).is_none());
        assert_eq!(rt.counters.lease_lost.load(Ordering::Relaxed), 1);
        assert_eq!(ahead.available_permits(), 3);
    }

    #[test]
    fn once_shutdown_began_every_waiting_job_is_released() {
        let rt = runtime();
        let (tx, mut rx) = unbounded_channel();
        let ahead = Arc::new(Semaphore::new(2));
        let jobs: Vec<_> = (0..2).map(|n| shared(job(n))).collect();
        let backlog = backlog_of(&jobs, &ahead);
        let stop = CancellationToken::new();
        stop.cancel();
        assert!(next_startable(&rt, &backlog, slot_of(&backlog), &stop, &tx).is_none());
        let ids: Vec<_> = jobs
            .iter()
            .map(|job| (job.job.id, Finish::Released))
            .collect();
        assert_eq!(written(&mut rx), ids);
        assert_eq!(backlog.slots.available_permits(), 1);
        assert_eq!(ahead.available_permits(), 2);
    }

    #[test]
    fn cancel_job_takes_a_waiting_job_out_at_once() {
        let rt = runtime();
        let (tx, mut rx) = unbounded_channel();
        let ahead = Arc::new(Semaphore::new(2));
        let jobs: Vec<_> = (0..2).map(|n| shared(job(n))).collect();
        let backlog = backlog_of(&jobs, &ahead);
        rt.backlogs.set(vec![Arc::clone(&backlog)], &tx);
        rt.cancel_job(&jobs[1], CancelReason::CancelRequested);
        assert!(jobs[1].cancel.is_cancelled());
        assert_eq!(written(&mut rx), vec![cancelled_before_start(&jobs[1])]);
        assert_eq!(ahead.available_permits(), 1, "its place went back");
        let (next, held) = backlog.next_for(slot_of(&backlog)).unwrap();
        assert_eq!(next.job.id, jobs[0].job.id);
        assert!(
            backlog.next_for(held).is_none(),
            "the cancelled job is gone"
        );
    }

    /// The claim loop's reservation had no free slot, but one freed before the jobs were
    /// added: they start at once, in claim order, on that slot.
    #[tokio::test]
    async fn jobs_added_while_a_slot_is_free_start_at_once() {
        let rt = runtime();
        let (tx, mut rx) = unbounded_channel();
        let tracker = TaskTracker::new();
        let starter = Starter {
            tracker: tracker.clone(),
            completer: tx,
            stop_claims: Arc::new(CancellationToken::new()),
        };
        let backlog = Arc::new(Backlog::new(
            Arc::new(Semaphore::new(1)),
            Arc::new(AtomicU64::new(u64::MAX)),
        ));
        let ahead = Arc::new(Semaphore::new(2));
        let mut reservation = Reservation::new(
            None,
            Some(Arc::clone(&ahead).try_acquire_many_owned(2).unwrap()),
            None,
            None,
        );
        let jobs = vec![job(0), job(1)];
        let ids: Vec<_> = jobs.iter().map(|job| job.id).collect();
        starter.start(&rt, jobs, &mut reservation, Some(&backlog));
        drop(reservation);
        tracker.close();
        tokio::time::timeout(Duration::from_secs(10), tracker.wait())
            .await
            .expect("both jobs ran");
        let done: Vec<_> = written(&mut rx).into_iter().map(|(id, _)| id).collect();
        assert_eq!(done, ids, "both ran, in claim order");
        assert_eq!(backlog.slots.available_permits(), 1);
        assert_eq!(ahead.available_permits(), 2);
    }
}

//! The jobs this process is running: one [`JobShared`] per claimed job, shared by the job's
//! executor task, its [`crate::JobContext`], the heartbeat loop, the event dispatcher and the
//! completer, and the [`RunningJobs`] map that holds them from claim until the outcome is
//! written (so heartbeats keep extending the lease of a job whose outcome waits in the
//! completer during a database outage).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use drover_core::{HeartbeatItem, Job, JobId};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Why a job's cancellation token fired. The first reason recorded wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancelReason {
    /// A client or operator cancelled the running job (docs/design.md section 9).
    CancelRequested,
    /// The lease was lost (heartbeat answered `LeaseLost`, or the job was rescued): the outcome
    /// of this run is never written.
    LeaseLost,
    /// The worker is shutting down and the grace period is over: the job is released without
    /// spending an attempt unless the handler still succeeds.
    Shutdown,
    /// The kind's timeout elapsed: the attempt is recorded as a retryable failure.
    Timeout,
}

impl CancelReason {
    /// A short lowercase name: `cancel_requested`, `lease_lost`, `shutdown`, `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::CancelRequested => "cancel_requested",
            CancelReason::LeaseLost => "lease_lost",
            CancelReason::Shutdown => "shutdown",
            CancelReason::Timeout => "timeout",
        }
    }
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Wakes the heartbeat loop early to save progress and record the start of jobs claimed
/// ahead, at most once per second per process: a nudge within a second of the last one is
/// kept and delivered when that second is over ([`HeartbeatNudge::take_held`]).
#[derive(Debug)]
pub(crate) struct HeartbeatNudge {
    notify: Notify,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last nudge; `u64::MAX` before the first.
    last_ms: AtomicU64,
    /// A nudge came within the spacing and waits for it to pass.
    held: AtomicBool,
}

/// Smallest spacing between two nudges.
pub(crate) const NUDGE_SPACING: std::time::Duration = std::time::Duration::from_secs(1);

impl HeartbeatNudge {
    pub(crate) fn new() -> Self {
        HeartbeatNudge {
            notify: Notify::new(),
            epoch: Instant::now(),
            last_ms: AtomicU64::new(u64::MAX),
            held: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// Asks for an early heartbeat; within a second of the last one the request is held
    /// until that second is over.
    pub(crate) fn nudge(&self) {
        if self.held.load(Ordering::Relaxed) {
            return;
        }
        let now = self.now_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        let spacing = NUDGE_SPACING.as_millis() as u64;
        if last != u64::MAX && now.saturating_sub(last) < spacing {
            self.held.store(true, Ordering::Relaxed);
            return;
        }
        if self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.notify.notify_one();
        }
    }

    /// Waits for the next nudge.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// Takes a nudge held back by the spacing (the heartbeat loop asks once the spacing after
    /// a nudged heartbeat is over); true when there was one, which counts as a nudge now.
    pub(crate) fn take_held(&self) -> bool {
        if !self.held.swap(false, Ordering::Relaxed) {
            return false;
        }
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
        true
    }
}

/// The instant job start times are kept relative to (the first time one is asked for), so a
/// start fits in an atomic.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Meta and progress changed by the handler since the last heartbeat that saved them.
#[derive(Debug, Default)]
struct Updates {
    meta: Option<Value>,
    meta_dirty: bool,
    progress: Option<Value>,
    progress_dirty: bool,
}

/// State shared by everything that touches one running job.
#[derive(Debug)]
pub(crate) struct JobShared {
    /// The job as claimed (attempt and fencing token of this run).
    pub(crate) job: Job,
    /// Fires on cancel request, lost lease, shutdown or timeout.
    pub(crate) cancel: CancellationToken,
    reason: OnceLock<CancelReason>,
    lease_lost: AtomicBool,
    has_updates: AtomicBool,
    updates: Mutex<Updates>,
    nudge: Option<Arc<HeartbeatNudge>>,
    /// Size bound of meta from the store's configuration, in bytes.
    pub(crate) max_meta_bytes: usize,
    /// When the handler started on this worker, in nanoseconds after [`epoch`] plus one; 0
    /// until it starts (set once, by the executor).
    handler_started: AtomicU64,
    /// The store has the job's start: the claim started it, or a heartbeat or finish
    /// carried it since.
    start_recorded: AtomicBool,
    /// The job's outcome (or its leaving unstarted) went to the completer.
    handed_over: AtomicBool,
    /// The failed children of this run were reported to `Metrics::child_failed` (once a run).
    children_observed: AtomicBool,
    /// When [`RunningJobs`] took this run in, as its count of runs taken in so far (0 before).
    taken_in: AtomicU64,
}

impl JobShared {
    pub(crate) fn new(
        job: Job,
        cancel: CancellationToken,
        nudge: Option<Arc<HeartbeatNudge>>,
        max_meta_bytes: usize,
    ) -> Self {
        JobShared {
            cancel,
            reason: OnceLock::new(),
            lease_lost: AtomicBool::new(false),
            has_updates: AtomicBool::new(false),
            updates: Mutex::new(Updates::default()),
            start_recorded: AtomicBool::new(job.started_at.is_some()),
            job,
            nudge,
            max_meta_bytes,
            handler_started: AtomicU64::new(0),
            handed_over: AtomicBool::new(false),
            children_observed: AtomicBool::new(false),
            taken_in: AtomicU64::new(0),
        }
    }

    /// True the first time it is called for this run: the failed children this run reads are
    /// to be counted then, and only then.
    pub(crate) fn first_children_observation(&self) -> bool {
        !self.children_observed.swap(true, Ordering::AcqRel)
    }

    /// Records that the handler starts now (`at`); true when the store does not know yet
    /// (a job claimed ahead), so its start is to be written.
    pub(crate) fn handler_started(&self, at: Instant) -> bool {
        let nanos =
            u64::try_from(at.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX - 1);
        let _ = self.handler_started.compare_exchange(
            0,
            nanos + 1,
            Ordering::Release,
            Ordering::Relaxed,
        );
        !self.start_recorded.load(Ordering::Acquire)
    }

    /// When the handler started, if it did.
    fn started_at(&self) -> Option<Instant> {
        match self.handler_started.load(Ordering::Acquire) {
            0 => None,
            n => Some(epoch() + std::time::Duration::from_nanos(n - 1)),
        }
    }

    /// For a job claimed ahead whose handler started and whose start the store does not know:
    /// how long ago it started (what [`HeartbeatItem::started`] and `FinishItem::started`
    /// carry).
    pub(crate) fn start_to_record(&self) -> Option<std::time::Duration> {
        if self.start_recorded.load(Ordering::Acquire) {
            return None;
        }
        self.started_at().map(|at| at.elapsed())
    }

    /// The store recorded the job's start.
    pub(crate) fn start_written(&self) {
        self.start_recorded.store(true, Ordering::Release);
    }

    /// True while the handler runs and the store does not know it started.
    fn start_pending(&self) -> bool {
        self.handler_started.load(Ordering::Acquire) != 0
            && !self.start_recorded.load(Ordering::Acquire)
            && !self.handed_over.load(Ordering::Acquire)
    }

    /// Marks that the job's outcome went to the completer: its finish carries the start.
    pub(crate) fn handed_over(&self) {
        self.handed_over.store(true, Ordering::Release);
    }

    /// Whether the job's outcome went to the completer (its handler is done).
    pub(crate) fn is_handed_over(&self) -> bool {
        self.handed_over.load(Ordering::Acquire)
    }

    /// Records `reason` (unless one is recorded already) and fires the token.
    pub(crate) fn cancel_with(&self, reason: CancelReason) {
        let _ = self.reason.set(reason);
        if reason == CancelReason::LeaseLost {
            self.lease_lost.store(true, Ordering::Release);
        }
        self.cancel.cancel();
    }

    /// Marks the lease lost without firing the token (the handler is done): a write not yet
    /// made is dropped, and the run leaves the running jobs with it.
    pub(crate) fn mark_lease_lost(&self) {
        let _ = self.reason.set(CancelReason::LeaseLost);
        self.lease_lost.store(true, Ordering::Release);
    }

    /// Why the token fired, if it did through the runner.
    pub(crate) fn reason(&self) -> Option<CancelReason> {
        self.reason.get().copied()
    }

    /// True once the lease is known lost: nothing may be written for this run.
    pub(crate) fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::Acquire)
    }

    /// Replaces the progress with `next` of this run's previous progress, under one lock so
    /// that steps recorded at once by clones of a context each extend the other's; the next
    /// heartbeat saves it.
    pub(crate) fn update_progress(&self, next: impl FnOnce(Option<Value>) -> Value) {
        {
            let mut updates = self.updates.lock();
            let progress = next(updates.progress.clone());
            // A value the store would refuse would fail the whole heartbeat call, and with
            // it the leases of every job in it: it is not recorded.
            if let Err(error) =
                drover_core::json::check_value("progress", &progress, self.max_meta_bytes)
            {
                tracing::warn!(job_id = %self.job.id, error = %error, "progress not recorded");
                return;
            }
            updates.progress = Some(progress);
            updates.progress_dirty = true;
        }
        self.has_updates.store(true, Ordering::Release);
        if let Some(nudge) = &self.nudge {
            nudge.nudge();
        }
    }

    /// Records a replacement meta object; the next heartbeat saves it.
    pub(crate) fn set_meta(&self, meta: Value) {
        {
            let mut updates = self.updates.lock();
            updates.meta = Some(meta);
            updates.meta_dirty = true;
        }
        self.has_updates.store(true, Ordering::Release);
        if let Some(nudge) = &self.nudge {
            nudge.nudge();
        }
    }

    /// The latest progress recorded by the handler.
    pub(crate) fn progress(&self) -> Option<Value> {
        self.updates.lock().progress.clone()
    }

    /// The current meta: the handler's replacement if any, else the job's.
    pub(crate) fn meta(&self) -> Value {
        self.updates
            .lock()
            .meta
            .clone()
            .unwrap_or_else(|| self.job.meta.clone())
    }

    /// True when meta or progress changed since the last heartbeat took them.
    pub(crate) fn has_updates(&self) -> bool {
        self.has_updates.load(Ordering::Acquire)
    }

    /// A heartbeat item for this job, taking the changed meta/progress (see
    /// [`JobShared::restore_updates`] when the heartbeat could not be written).
    pub(crate) fn heartbeat_item(&self) -> HeartbeatItem {
        let (meta, progress) = if self.has_updates.swap(false, Ordering::AcqRel) {
            let mut updates = self.updates.lock();
            let meta = if updates.meta_dirty {
                updates.meta_dirty = false;
                updates.meta.clone()
            } else {
                None
            };
            let progress = if updates.progress_dirty {
                updates.progress_dirty = false;
                updates.progress.clone()
            } else {
                None
            };
            (meta, progress)
        } else {
            (None, None)
        };
        HeartbeatItem {
            id: self.job.id,
            token: self.job.fencing_token,
            meta,
            progress,
            started: self.start_to_record(),
        }
    }

    /// Marks meta and/or progress as changed again after a heartbeat that carried them could
    /// not be written (the values themselves are still held here).
    pub(crate) fn restore_updates(&self, meta: bool, progress: bool) {
        if !meta && !progress {
            return;
        }
        {
            let mut updates = self.updates.lock();
            updates.meta_dirty |= meta;
            updates.progress_dirty |= progress;
        }
        self.has_updates.store(true, Ordering::Release);
    }
}

/// A cheap hasher for job ids: they are UUID v7 with 74 random bits chosen by the store, so
/// SipHash's protection against chosen keys buys nothing on this hot path (one insert and
/// one remove per job).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
}

/// The jobs claimed by this process whose outcome is not written yet, by id. One id can be
/// claimed again by this process while its earlier run's outcome still waits (the lease was
/// lost meanwhile, the job queued and claimed anew): the later run replaces the earlier one,
/// and removals name the run, so the earlier run leaving never takes the later one's entry
/// (whose heartbeats would stop and whose lease would be lost).
#[derive(Debug, Default)]
pub(crate) struct RunningJobs {
    jobs: Mutex<HashMap<JobId, Arc<JobShared>, BuildHasherDefault<IdHasher>>>,
    /// Runs taken in so far; only changes under the `jobs` lock.
    taken_in: AtomicU64,
}

impl RunningJobs {
    /// Adds freshly claimed jobs.
    pub(crate) fn insert_all(&self, jobs: &[Arc<JobShared>]) {
        let mut map = self.jobs.lock();
        for job in jobs {
            let count = self.taken_in.fetch_add(1, Ordering::Relaxed) + 1;
            job.taken_in.store(count, Ordering::Relaxed);
            map.insert(job.job.id, Arc::clone(job));
        }
    }

    /// A mark of the runs taken in so far, for [`RunningJobs::get_taken_in_by`]: read it
    /// before a store call whose answer names jobs without their tokens (a rescue).
    pub(crate) fn mark(&self) -> u64 {
        let _map = self.jobs.lock();
        self.taken_in.load(Ordering::Relaxed)
    }

    /// The run of `id` this process holds if it was taken in by `mark`: a run claimed after
    /// the store call the mark was read for cannot be the one that call answered about.
    pub(crate) fn get_taken_in_by(&self, id: &JobId, mark: u64) -> Option<Arc<JobShared>> {
        self.get(id)
            .filter(|run| run.taken_in.load(Ordering::Relaxed) <= mark)
    }

    /// Removes a run whose outcome was written (or will never be), unless a later run of the
    /// same job replaced it.
    pub(crate) fn remove(&self, run: &Arc<JobShared>) {
        Self::remove_from(&mut self.jobs.lock(), run);
    }

    /// Removes several runs at once, each as [`RunningJobs::remove`] does.
    pub(crate) fn remove_all<'a>(&self, runs: impl IntoIterator<Item = &'a Arc<JobShared>>) {
        let mut map = self.jobs.lock();
        for run in runs {
            Self::remove_from(&mut map, run);
        }
    }

    fn remove_from(
        map: &mut HashMap<JobId, Arc<JobShared>, BuildHasherDefault<IdHasher>>,
        run: &Arc<JobShared>,
    ) {
        if map
            .get(&run.job.id)
            .is_some_and(|held| Arc::ptr_eq(held, run))
        {
            map.remove(&run.job.id);
        }
    }

    /// The job with `id`, if this process runs it.
    pub(crate) fn get(&self, id: &JobId) -> Option<Arc<JobShared>> {
        self.jobs.lock().get(id).cloned()
    }

    /// Every job, in no particular order.
    pub(crate) fn snapshot(&self) -> Vec<Arc<JobShared>> {
        self.jobs.lock().values().cloned().collect()
    }

    /// The jobs whose meta or progress changed since their last heartbeat, and those whose
    /// handler started, after they were claimed ahead, without the store knowing yet.
    pub(crate) fn with_updates(&self) -> Vec<Arc<JobShared>> {
        self.jobs
            .lock()
            .values()
            .filter(|job| job.has_updates() || job.start_pending())
            .cloned()
            .collect()
    }

    /// Number of jobs.
    pub(crate) fn len(&self) -> usize {
        self.jobs.lock().len()
    }

    /// Fires the token of every job with `reason`.
    pub(crate) fn cancel_all(&self, reason: CancelReason) {
        for job in self.snapshot() {
            job.cancel_with(reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    /// A queued job of kind `k`.
    fn job() -> Job {
        drover_core::NewJob::new(
            drover_core::JobKind::parse("k").unwrap(),
            serde_json::json!({}),
        )
        .into_job(JobId::new_v7(), chrono::Utc::now())
    }

    /// Whether a nudge is waiting to be taken by the heartbeat loop, without waiting.
    fn notified_now(nudge: &HeartbeatNudge) -> bool {
        nudge.notified().now_or_never().is_some()
    }

    /// Progress the store would refuse (too large, or holding NUL) is not recorded, so the
    /// heartbeat that carries the run's other updates, and the leases of every job in its
    /// call, still go through; the progress recorded before stays.
    #[test]
    fn progress_the_store_would_refuse_is_not_recorded() {
        let shared = JobShared::new(job(), CancellationToken::new(), None, 1024);
        shared.update_progress(|_| serde_json::json!({"step": "small"}));
        assert!(shared.heartbeat_item().progress.is_some());
        shared.update_progress(|_| serde_json::json!({"detail": "x".repeat(2_000)}));
        shared.update_progress(|_| serde_json::json!({"detail": "a\u{0}b"}));
        shared.set_meta(serde_json::json!({"kept": true}));
        let item = shared.heartbeat_item();
        assert_eq!(item.progress, None, "nothing new to send");
        assert_eq!(item.meta, Some(serde_json::json!({"kept": true})));
        drover_core::HeartbeatJobs {
            lease: std::time::Duration::from_secs(30),
            jobs: vec![item],
        }
        .validate(&drover_core::SizeLimits {
            max_meta_bytes: 1024,
            ..drover_core::SizeLimits::default()
        })
        .expect("the store takes the heartbeat");
        assert_eq!(
            shared.progress(),
            Some(serde_json::json!({"step": "small"}))
        );
    }

    #[test]
    fn a_nudge_within_the_spacing_is_held_for_later_not_lost() {
        let nudge = HeartbeatNudge::new();
        nudge.nudge();
        assert!(
            notified_now(&nudge),
            "the first nudge wakes the heartbeat loop"
        );
        nudge.nudge();
        nudge.nudge();
        assert!(!notified_now(&nudge), "within the spacing: no wake-up");
        assert!(nudge.take_held(), "but held for when the spacing is over");
        assert!(!nudge.take_held(), "once");
        nudge.nudge();
        assert!(!notified_now(&nudge), "taking it counts as a nudge now");
        assert!(nudge.take_held());
    }

    #[test]
    fn an_earlier_run_leaving_never_takes_a_later_run_of_the_same_job() {
        let job = job();
        let run = |token: i64| {
            let mut job = job.clone();
            job.fencing_token = drover_core::FencingToken(token);
            Arc::new(JobShared::new(job, CancellationToken::new(), None, 1024))
        };
        let (first, second) = (run(1), run(2));
        let running = RunningJobs::default();
        running.insert_all(std::slice::from_ref(&first));
        let mark = running.mark();
        running.insert_all(std::slice::from_ref(&second));

        running.remove(&first);
        running.remove_all([&first]);
        let held = running.get(&job.id).expect("the later run stays");
        assert!(Arc::ptr_eq(&held, &second));
        assert!(
            running.get_taken_in_by(&job.id, mark).is_none(),
            "a run taken in after the mark is not the one a call sent before it answered about"
        );
        assert!(running.get_taken_in_by(&job.id, running.mark()).is_some());

        running.remove(&second);
        assert_eq!(running.len(), 0);
    }

    #[test]
    fn a_job_claimed_ahead_has_a_start_to_record_once_its_handler_started() {
        let job = job();
        let shared = JobShared::new(job.clone(), CancellationToken::new(), None, 1024);
        assert_eq!(shared.start_to_record(), None, "not started yet");
        assert!(!shared.start_pending());
        assert!(
            shared.handler_started(Instant::now()),
            "the store does not know"
        );
        assert!(shared.start_to_record().is_some());
        assert!(shared.heartbeat_item().started.is_some());
        assert!(shared.start_pending());
        shared.handed_over();
        assert!(!shared.start_pending(), "its finish carries the start");
        shared.start_written();
        assert_eq!(shared.start_to_record(), None);

        let mut started = job;
        started.started_at = Some(chrono::Utc::now());
        let shared = JobShared::new(started, CancellationToken::new(), None, 1024);
        assert!(
            !shared.handler_started(Instant::now()),
            "started by its claim"
        );
        assert_eq!(shared.start_to_record(), None);
    }
}

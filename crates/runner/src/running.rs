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
    /// A client or operator cancelled the running job (DESIGN.md section 9).
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

/// Wakes the heartbeat loop early to save progress, at most once per second per process.
#[derive(Debug)]
pub(crate) struct HeartbeatNudge {
    notify: Notify,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last nudge; `u64::MAX` before the first.
    last_ms: AtomicU64,
}

/// Smallest spacing between two nudges.
const NUDGE_SPACING_MS: u64 = 1000;

impl HeartbeatNudge {
    pub(crate) fn new() -> Self {
        HeartbeatNudge {
            notify: Notify::new(),
            epoch: Instant::now(),
            last_ms: AtomicU64::new(u64::MAX),
        }
    }

    /// Asks for an early heartbeat unless one was asked for less than a second ago.
    pub(crate) fn nudge(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != u64::MAX && now.saturating_sub(last) < NUDGE_SPACING_MS {
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
}

impl JobShared {
    pub(crate) fn new(
        job: Job,
        cancel: CancellationToken,
        nudge: Option<Arc<HeartbeatNudge>>,
        max_meta_bytes: usize,
    ) -> Self {
        JobShared {
            job,
            cancel,
            reason: OnceLock::new(),
            lease_lost: AtomicBool::new(false),
            has_updates: AtomicBool::new(false),
            updates: Mutex::new(Updates::default()),
            nudge,
            max_meta_bytes,
        }
    }

    /// Records `reason` (unless one is recorded already) and fires the token.
    pub(crate) fn cancel_with(&self, reason: CancelReason) {
        let _ = self.reason.set(reason);
        if reason == CancelReason::LeaseLost {
            self.lease_lost.store(true, Ordering::Release);
        }
        self.cancel.cancel();
    }

    /// Why the token fired, if it did through the runner.
    pub(crate) fn reason(&self) -> Option<CancelReason> {
        self.reason.get().copied()
    }

    /// True once the lease is known lost: nothing may be written for this run.
    pub(crate) fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::Acquire)
    }

    /// Records a progress value; the next heartbeat saves it.
    pub(crate) fn set_progress(&self, progress: Value) {
        {
            let mut updates = self.updates.lock();
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

/// The jobs claimed by this process whose outcome is not written yet, by id.
#[derive(Debug, Default)]
pub(crate) struct RunningJobs {
    jobs: Mutex<HashMap<JobId, Arc<JobShared>, BuildHasherDefault<IdHasher>>>,
}

impl RunningJobs {
    /// Adds freshly claimed jobs.
    pub(crate) fn insert_all(&self, jobs: &[Arc<JobShared>]) {
        let mut map = self.jobs.lock();
        for job in jobs {
            map.insert(job.job.id, Arc::clone(job));
        }
    }

    /// Removes a job whose outcome was written (or will never be).
    pub(crate) fn remove(&self, id: &JobId) {
        self.jobs.lock().remove(id);
    }

    /// Removes several jobs at once.
    pub(crate) fn remove_all<'a>(&self, ids: impl IntoIterator<Item = &'a JobId>) {
        let mut map = self.jobs.lock();
        for id in ids {
            map.remove(id);
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

    /// The jobs whose meta or progress changed since their last heartbeat.
    pub(crate) fn with_updates(&self) -> Vec<Arc<JobShared>> {
        self.jobs
            .lock()
            .values()
            .filter(|job| job.has_updates())
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

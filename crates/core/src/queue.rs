//! Queues, workers and the queue snapshot: what operators look at (docs/design.md sections 4 and 7).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::names::{QueueName, WorkerId};
use crate::state::JobState;

/// What a pause or a resume did to a queue ([`crate::JobStore::queue_pause`],
/// [`crate::JobStore::queue_resume`]); the CLI and the HTTP API answer with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueChange {
    /// The queue as it is after the call.
    #[serde(flatten)]
    pub queue: QueueInfo,
    /// True when this call paused (or resumed) the queue; false when it already was as asked,
    /// so nothing changed. Decided by the store in the same step as the change, so of calls
    /// racing to pause (or resume) one queue exactly one says true.
    pub changed: bool,
}

/// A queue as `queues list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    /// Name.
    pub name: QueueName,
    /// Paused cluster-wide: no worker claims from it; running jobs finish.
    pub paused: bool,
    /// When it was last paused, while paused.
    pub paused_at: Option<DateTime<Utc>>,
}

impl QueueInfo {
    /// `queue` as it is without a stored pause: not paused, no pause time.
    pub fn unpaused(queue: QueueName) -> Self {
        QueueInfo {
            name: queue,
            paused: false,
            paused_at: None,
        }
    }
}

/// Counts and lag of one queue at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSnapshot {
    /// Name.
    pub queue: QueueName,
    /// Paused cluster-wide.
    pub paused: bool,
    /// Jobs per state; states without jobs are absent.
    pub counts: BTreeMap<JobState, u64>,
    /// Queued jobs that are ready now (`run_at <= now`), whatever their kind.
    pub ready: u64,
    /// `ready` is a lower bound, not the count: a store that bounds its reads counts ready
    /// jobs only so far (PostgreSQL: more than 10,000 ready and more than 10,000 scheduled in
    /// one priority of the queue; docs/design.md, "Counts").
    #[serde(default)]
    pub ready_at_least: bool,
    /// Jobs running with their handler started.
    pub running: u64,
    /// Jobs claimed ahead by a worker and waiting in its backlog for a slot: leased (state
    /// `running`) but not started. `counts[running]` is `running + claimed`.
    #[serde(default)]
    pub claimed: u64,
    /// Age of the oldest ready job: `now - run_at`, in milliseconds (`None` when none is ready).
    /// This is the queue lag; jobs of kinds no worker registers count too.
    pub oldest_ready_age_ms: Option<u64>,
}

impl QueueSnapshot {
    /// The lag as a `Duration`.
    pub fn lag(&self) -> Option<Duration> {
        self.oldest_ready_age_ms.map(Duration::from_millis)
    }

    /// Jobs in `state`.
    pub fn count(&self, state: JobState) -> u64 {
        self.counts.get(&state).copied().unwrap_or(0)
    }

    /// The ready count as a person reads it: `10001+` when it is a lower bound.
    pub fn ready_text(&self) -> String {
        ready_text(self.ready, self.ready_at_least)
    }
}

/// A ready count as a person reads it: the number, with `+` when it is a lower bound
/// ([`QueueSnapshot::ready_at_least`]).
pub fn ready_text(ready: u64, at_least: bool) -> String {
    if at_least {
        format!("{ready}+")
    } else {
        ready.to_string()
    }
}

/// Counts per queue and state, taken at one instant of the store's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The store's clock when taken.
    pub taken_at: DateTime<Utc>,
    /// One entry per queue that has jobs or a stored pause state, sorted by name.
    pub queues: Vec<QueueSnapshot>,
    /// What keeps the database from cleaning the jobs table
    /// ([`crate::JobStore::vacuum_status`]); `None` for a store without vacuum (memory).
    #[serde(default)]
    pub vacuum: Option<VacuumStatus>,
}

/// What keeps vacuum from removing the dead row versions of the jobs table, and how many it
/// has left (PostgreSQL's statistics views; estimates). Claims step over dead entries of the
/// claim index until vacuum removes them, and vacuum cannot remove row versions that an open
/// transaction or a replication slot may still need: the ages below say how far back that
/// is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VacuumStatus {
    /// Age of the open transaction that holds back vacuum the most (the session of the
    /// database whose snapshot or transaction id is oldest, or a prepared transaction), in
    /// milliseconds since it began; `None` when no other transaction is open, or when the
    /// store's role may not see when it began (another role's session without
    /// `pg_read_all_stats`: its pid is still given).
    pub oldest_transaction_age_ms: Option<u64>,
    /// The backend process id of that transaction's session (`None` for a prepared
    /// transaction, or when none is open).
    pub oldest_transaction_pid: Option<u32>,
    /// The replication slot holding the oldest row horizon (`xmin`), if any.
    pub replication_slot: Option<String>,
    /// How many transactions old that slot's horizon is (`age(xmin)`).
    pub replication_slot_xmin_age: Option<u64>,
    /// Estimated dead row versions in the jobs table (`n_dead_tup`).
    pub jobs_dead_rows: u64,
    /// Estimated live rows of the jobs table (`n_live_tup`).
    pub jobs_live_rows: u64,
    /// When the jobs table was last vacuumed, by autovacuum or by hand (`None`: not since
    /// the statistics were reset).
    pub jobs_last_vacuum_at: Option<DateTime<Utc>>,
}

impl VacuumStatus {
    /// The age of the oldest open transaction.
    pub fn oldest_transaction_age(&self) -> Option<Duration> {
        self.oldest_transaction_age_ms.map(Duration::from_millis)
    }

    /// Dead row versions as a fraction of all row versions of the jobs table (0 when it
    /// has none).
    pub fn dead_fraction(&self) -> f64 {
        let all = self.jobs_dead_rows.saturating_add(self.jobs_live_rows);
        if all == 0 {
            0.0
        } else {
            self.jobs_dead_rows as f64 / all as f64
        }
    }
}

/// A worker process as registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Id, also the lease owner of its jobs.
    pub id: WorkerId,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Queues it serves.
    pub queues: Vec<QueueName>,
    /// Registration time (store clock).
    pub started_at: DateTime<Utc>,
    /// Latest heartbeat (store clock).
    pub last_heartbeat_at: DateTime<Utc>,
}

/// Most bytes of a worker's host name a store keeps.
pub const HOST_MAX_BYTES: usize = 255;

/// What a worker registers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRegistration {
    /// Id (unique per process start).
    pub id: WorkerId,
    /// Host name (stored as [`WorkerRegistration::stored_host`] gives it).
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Queues it serves.
    pub queues: Vec<QueueName>,
}

impl WorkerRegistration {
    /// The host name as every store keeps it: NUL characters (which PostgreSQL text cannot
    /// hold) replaced by U+FFFD, then at most [`HOST_MAX_BYTES`] bytes, cut at a character
    /// boundary. A registration is never refused for its host name.
    pub fn stored_host(&self) -> String {
        crate::job::stored_text(&self.host, HOST_MAX_BYTES)
    }
}

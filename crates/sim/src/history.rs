//! The recorded history: every client and operator call and its answer, every worker call to
//! the store that changes a job, every handler start and end, every fault and every crash or
//! pause of a worker, in the order they happened (one tokio thread, so the order in which the
//! store committed them).

use drover_core::{FencingToken, JobId, JobState};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One entry of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The store's clock, microseconds since the base instant (simulated time plus clock
    /// jumps).
    pub t: i64,
    /// Who made the call: `client0`, `operator`, a worker incarnation `w1-0`, `sim`.
    pub who: String,
    /// What happened.
    #[serde(flatten)]
    pub ev: Ev,
}

/// A fault the fault-injecting store applied to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "fault")]
pub enum Fault {
    /// `Unavailable` before the call reached the store: nothing was written.
    Before,
    /// The call committed, then the caller got `Unavailable`.
    After,
    /// The call waited `ms` (simulated) before reaching the store.
    SlowBefore {
        /// The wait.
        ms: u64,
    },
    /// The call committed, then its answer took `ms` (simulated) to come back.
    SlowAfter {
        /// The wait.
        ms: u64,
    },
}

impl Fault {
    /// The kind's name, for the summary.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Before => "error_before_write",
            Fault::After => "error_after_commit",
            Fault::SlowBefore { .. } => "slow_before",
            Fault::SlowAfter { .. } => "slow_after",
        }
    }
}

/// The answer the store gave (committed) or the error the call ended with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer<T> {
    /// The store answered this (and committed it, also when a fault then hid it).
    Ok(T),
    /// The call failed; nothing was committed.
    Err(String),
}

impl<T> Answer<T> {
    /// The committed answer, if any.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Answer::Ok(t) => Some(t),
            Answer::Err(_) => None,
        }
    }
}

/// One job of an enqueue request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnqueueReq {
    /// The client's name for the job (`c0.12`), also in its args.
    pub tag: String,
    /// Queue.
    pub queue: String,
    /// Idempotency key.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub key: Option<String>,
    /// Unique key.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub unique: Option<String>,
    /// Priority.
    pub priority: i16,
    /// Delay before it is ready, ms.
    pub delay_ms: u64,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// The jobs it waits for (a graph's local dependencies as the ids the store answered).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub depends_on: Vec<JobId>,
    /// Runs even when a dependency failed or was cancelled.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub run_regardless: bool,
    /// Explicit limit keys.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub limit_keys: Vec<String>,
    /// The job's kind (for its implicit `kind:` limit key).
    pub kind: String,
}

/// One job of an enqueue answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnqueueAns {
    /// The job.
    pub job: JobId,
    /// created, replayed or duplicate.
    pub status: String,
    /// Its state in the answer.
    pub state: JobState,
}

/// One job a claim returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedJob {
    /// The job.
    pub job: JobId,
    /// Its queue.
    pub queue: String,
    /// The claim's fencing token.
    pub token: FencingToken,
    /// The attempt this claim runs.
    pub attempt: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Lease end, microseconds since the base instant.
    pub lease_until: i64,
}

/// One heartbeat item and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Beat {
    /// The job.
    pub job: JobId,
    /// The token sent.
    pub token: FencingToken,
    /// The new lease end (microseconds since the base instant), `None` when the lease was lost.
    pub lease_until: Option<i64>,
}

/// One finish item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishReq {
    /// The job.
    pub job: JobId,
    /// The token sent.
    pub token: FencingToken,
    /// succeeded, failed, snoozed, released, cancelled, wait_for_children.
    pub outcome: String,
    /// The result of a success.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub result: Option<Value>,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "ev")]
pub enum Ev {
    /// A batch enqueue.
    Enqueue {
        /// The request.
        jobs: Vec<EnqueueReq>,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Answer.
        answer: Answer<Vec<EnqueueAns>>,
    },
    /// A workflow graph enqueued as one unit.
    Workflow {
        /// The graph's jobs in input order, local dependencies as the answered ids.
        jobs: Vec<EnqueueReq>,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Answer, per job in input order.
        answer: Answer<Vec<EnqueueAns>>,
    },
    /// A running parent enqueued children.
    Children {
        /// The parent.
        parent: JobId,
        /// The parent's token.
        token: FencingToken,
        /// The children.
        jobs: Vec<EnqueueReq>,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Answer.
        answer: Answer<Vec<EnqueueAns>>,
    },
    /// A cron tick fired.
    Fire {
        /// The schedule.
        schedule: String,
        /// The tick, microseconds since the base instant.
        tick: i64,
        /// The enqueue request.
        job: EnqueueReq,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// The job enqueued, `None` when the tick was not fired (already fired, or retimed).
        answer: Answer<Option<EnqueueAns>>,
    },
    /// A schedule created or changed.
    ScheduleUpsert {
        /// The schedule.
        schedule: String,
        /// Its cron expression.
        cron: String,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Whether the store stored it.
        answer: Answer<()>,
    },
    /// A limit policy set.
    LimitSet {
        /// The key.
        key: String,
        /// Jobs with the key running at once.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        max_running: Option<u32>,
        /// Claims per period: (count, period in microseconds).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        rate: Option<(u32, i64)>,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Whether the store stored it.
        answer: Answer<()>,
    },
    /// The store's pending-job quota, as the store reports its configuration.
    Quota {
        /// Most pending (not terminal) jobs.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        max_pending: Option<u64>,
    },
    /// Retention pruned finished jobs.
    Prune {
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// The jobs deleted.
        answer: Answer<Vec<JobId>>,
    },
    /// A claim.
    Claim {
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Answer.
        answer: Answer<Vec<ClaimedJob>>,
    },
    /// A lease heartbeat.
    Heartbeat {
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Answer per item.
        answer: Answer<Vec<Beat>>,
    },
    /// A finish batch.
    Finish {
        /// The items.
        items: Vec<FinishReq>,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Per item: the new state, or `None` for lease lost.
        answer: Answer<Vec<Option<JobState>>>,
    },
    /// A cancel.
    Cancel {
        /// The job.
        job: JobId,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// The job's state after the cancel.
        answer: Answer<JobState>,
    },
    /// An operator retry.
    Retry {
        /// The job.
        job: JobId,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// The job's state after the retry.
        answer: Answer<JobState>,
    },
    /// A queue pause.
    QueuePause {
        /// The queue.
        queue: String,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Whether this call paused it.
        answer: Answer<bool>,
    },
    /// A queue resume.
    QueueResume {
        /// The queue.
        queue: String,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Whether this call resumed it.
        answer: Answer<bool>,
    },
    /// A rescue of expired leases.
    Rescue {
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// The rescued jobs, where they went, and whether the attempt was spent.
        answer: Answer<Vec<(JobId, JobState, bool)>>,
    },
    /// Any other call, recorded only when a fault hit it.
    Call {
        /// The trait method.
        op: String,
        /// Fault applied.
        #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
        fault: Option<Fault>,
        /// Whether the store answered Ok.
        ok: bool,
    },
    /// A handler started.
    HandlerStart {
        /// The job.
        job: JobId,
        /// Its attempt.
        attempt: i32,
        /// Its token.
        token: FencingToken,
    },
    /// A handler returned.
    HandlerEnd {
        /// The job.
        job: JobId,
        /// Its token.
        token: FencingToken,
        /// What it returned.
        outcome: String,
    },
    /// A worker process crashed (its tasks stop, its leases are left to expire).
    WorkerCrash,
    /// A worker process started (a new incarnation after a crash, or at the start).
    WorkerStart,
    /// A worker stopped talking to the store (paused or partitioned).
    WorkerPause,
    /// A paused worker talks to the store again.
    WorkerUnpause,
    /// A worker was asked to stop gracefully (it releases what it runs).
    WorkerStop,
    /// A worker's run returned.
    WorkerExit {
        /// It was asked to stop.
        asked: bool,
        /// The error it returned.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        error: Option<String>,
    },
    /// A worker host's network link was cut (the PostgreSQL run, `tests/tests/reliability_partitions.rs`).
    Partition,
    /// A worker host's network link was restored.
    Heal,
    /// PostgreSQL was restarted: `fast` (clients disconnected) or `immediate` (a crash).
    DatabaseRestart {
        /// The `pg_ctl` stop mode.
        mode: String,
    },
    /// The store's clock jumped forward.
    ClockJump {
        /// By how much, ms.
        ms: u64,
    },
    /// The faults stop; every worker and queue is brought back.
    Quiet,
}

impl Ev {
    /// The jobs this event concerns (for shortening a history to the offending jobs).
    pub fn jobs(&self) -> Vec<JobId> {
        match self {
            Ev::Enqueue { answer, jobs, .. } | Ev::Workflow { answer, jobs, .. } => answer
                .ok()
                .map(|a| a.iter().map(|e| e.job).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .chain(jobs.iter().flat_map(|j| j.depends_on.iter().copied()))
                .collect(),
            Ev::Children { parent, answer, .. } => std::iter::once(*parent)
                .chain(answer.ok().into_iter().flatten().map(|e| e.job))
                .collect(),
            Ev::Fire { answer, .. } => answer
                .ok()
                .and_then(|a| a.as_ref().map(|e| vec![e.job]))
                .unwrap_or_default(),
            Ev::Prune { answer, .. } => answer.ok().cloned().unwrap_or_default(),
            Ev::Claim { answer, .. } => answer
                .ok()
                .map(|a| a.iter().map(|c| c.job).collect())
                .unwrap_or_default(),
            Ev::Heartbeat { answer, .. } => answer
                .ok()
                .map(|a| a.iter().map(|b| b.job).collect())
                .unwrap_or_default(),
            Ev::Finish { items, .. } => items.iter().map(|i| i.job).collect(),
            Ev::Cancel { job, .. }
            | Ev::Retry { job, .. }
            | Ev::HandlerStart { job, .. }
            | Ev::HandlerEnd { job, .. } => vec![*job],
            Ev::Rescue { answer, .. } => answer
                .ok()
                .map(|a| a.iter().map(|(j, _, _)| *j).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// True for events about the world rather than a job (shown in every shortened history).
    pub fn is_world(&self) -> bool {
        matches!(
            self,
            Ev::WorkerCrash
                | Ev::WorkerStop
                | Ev::WorkerExit { .. }
                | Ev::ClockJump { .. }
                | Ev::WorkerStart
                | Ev::WorkerPause
                | Ev::WorkerUnpause
                | Ev::Partition
                | Ev::Heal
                | Ev::DatabaseRestart { .. }
                | Ev::Quiet
                | Ev::QueuePause { .. }
                | Ev::QueueResume { .. }
                | Ev::LimitSet { .. }
                | Ev::ScheduleUpsert { .. }
                | Ev::Quota { .. }
        )
    }
}

/// The records of `history` that concern one of `jobs`, and the world's events (crashes,
/// pauses, queue pauses), as JSON lines: a history cut to what shows a violation.
pub fn cut(history: &[Record], jobs: &std::collections::BTreeSet<JobId>) -> String {
    let kept: Vec<Record> = history
        .iter()
        .filter(|r| r.ev.is_world() || r.ev.jobs().iter().any(|j| jobs.contains(j)))
        .cloned()
        .collect();
    to_json_lines(&kept)
}

/// The history as JSON lines.
pub fn to_json_lines(history: &[Record]) -> String {
    let mut out = String::new();
    for record in history {
        out.push_str(&serde_json::to_string(record).unwrap_or_default());
        out.push('\n');
    }
    out
}

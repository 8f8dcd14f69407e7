//! [`WorkerConfig`] and [`PoolConfig`]: everything a [`crate::Worker`] is built from, with the
//! defaults of docs/design.md sections 3 and 6 and [`WorkerConfig::validate`].
//!
//! Durations are `std::time::Duration`; the CLI maps flags such as `--slots`, `--queue` and
//! `DROVER_MAX_CONCURRENT` onto these fields (only the CLI reads the environment).

use std::collections::HashSet;
use std::time::Duration;

use drover_core::bounds::check_range;
use drover_core::lease::{check_lease, HEARTBEAT_DEFAULT, LEASE_DEFAULT};
use drover_core::store::{PRUNE_LIMIT_DEFAULT, RETENTION_DEFAULT};
use drover_core::{Error, JobKind, QueueName, WorkerId};
use rand::Rng;

use crate::registry::Registry;

/// Default slots per queue of a pool (`--slots`).
pub const SLOTS_DEFAULT: usize = 8;
/// Largest slots per queue of a pool.
pub const SLOTS_MAX: usize = 10_000;

/// Largest `max_concurrent`: far above what one process runs, so the cap never stands in a
/// real configuration's way, while a typo (or a value tokio's semaphore cannot hold: it
/// panics above `usize::MAX >> 3`) is refused.
pub const MAX_CONCURRENT_MAX: usize = 1_000_000;
/// Largest claim-ahead of one queue of a pool ([`PoolConfig::prefetch`]).
pub const PREFETCH_MAX: usize = 10_000;
/// The default claim-ahead of a queue is this many times its slots ...
pub const PREFETCH_DEFAULT_PER_SLOT: usize = 8;
/// ... but at most this many jobs.
pub const PREFETCH_DEFAULT_MAX: usize = 1_000;
/// A claim loop claims ahead (see [`PoolConfig::prefetch`]) only while the last job it ran took
/// less than this: for short jobs a claim ahead saves a claim round trip and commit per batch;
/// for long ones it would only hold jobs that another worker could start sooner.
pub const PREFETCH_RUN_MAX: Duration = Duration::from_millis(50);
/// A lease lasts at least this many heartbeat intervals: the heartbeat interval may be at most
/// a third of the lease, so a lost heartbeat still leaves the lease a whole interval to spare
/// before it could expire under a running job (defaults: 15 s heartbeats, 60 s lease).
pub const HEARTBEATS_PER_LEASE_MIN: u32 = 3;

/// The longest heartbeat interval [`WorkerConfig::validate`] accepts with `lease`: a third of
/// it ([`HEARTBEATS_PER_LEASE_MIN`]).
pub fn heartbeat_interval_max(lease: Duration) -> Duration {
    lease / HEARTBEATS_PER_LEASE_MIN
}

/// Default poll interval: how long an idle claim loop waits for an event before claiming
/// anyway (the fallback when the store cannot push events, e.g. behind PgBouncer).
pub const POLL_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
/// Default interval of the expired-lease rescuer.
pub const RESCUE_INTERVAL_DEFAULT: Duration = Duration::from_secs(15);
/// Default interval of the reconcile sweep.
pub const RECONCILE_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
/// Default interval of the cron scheduler.
pub const SCHEDULE_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
/// Default interval of retention pruning (docs/design.md section 6: about once a minute).
pub const PRUNE_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
/// Default wait before the first pass of each maintenance service (see
/// [`WorkerConfig::maintenance_start_delay`]).
pub const MAINTENANCE_START_DELAY_DEFAULT: Duration = Duration::from_secs(1);
/// Largest prune batch accepted by stores.
pub use drover_core::bounds::PRUNE_LIMIT_MAX;
/// Default age after which another worker's registration counts as stale and is pruned.
pub const WORKER_STALE_AFTER_DEFAULT: Duration = Duration::from_secs(120);
/// Default grace period at shutdown: running jobs may finish within it; after it, a handler
/// that ignores its cancellation still gets the cancel grace ([`CANCEL_GRACE_DEFAULT`]).
pub const SHUTDOWN_GRACE_DEFAULT: Duration = Duration::from_secs(30);
/// Default time a handler gets to stop after its cancellation token fired (shutdown, timeout,
/// cancel request, lost lease) before its task is aborted.
pub const CANCEL_GRACE_DEFAULT: Duration = Duration::from_secs(5);
/// Default time the completer keeps retrying outcome writes at shutdown once every handler
/// has stopped.
pub const FLUSH_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default most outcomes written by one `jobs_finish` call.
pub const COMPLETER_BATCH_DEFAULT: usize = 1_000;

/// Completer batches of outcomes a worker keeps waiting to be written at most, besides one
/// per slot ([`WorkerConfig::unwritten_max`]).
pub const UNWRITTEN_BATCHES: usize = 4;
/// Largest completer batch.
pub const COMPLETER_BATCH_MAX: usize = 10_000;
/// Default age of the oldest open transaction above which a worker warns that vacuum cannot
/// clean the jobs table ([`WorkerConfig::transaction_age_warning`]).
pub const TRANSACTION_AGE_WARNING_DEFAULT: Duration = Duration::from_secs(300);
/// Default fraction of dead row versions in the jobs table above which a worker warns
/// ([`WorkerConfig::dead_rows_warning`]).
pub const DEAD_ROWS_WARNING_DEFAULT: f64 = 0.5;
/// Fewer dead row versions than this never warn, whatever their fraction (a small table is
/// cheap to step over).
pub const DEAD_ROWS_WARNING_MIN: u64 = 10_000;
/// How often a worker reads the vacuum status ([`drover_core::JobStore::vacuum_status`]).
pub const VACUUM_CHECK_INTERVAL: Duration = Duration::from_secs(60);
/// A vacuum warning that still holds is repeated at most this often.
pub const VACUUM_WARNING_REPEAT: Duration = Duration::from_secs(600);

/// Default first delay before retrying a store call that failed transiently.
pub const STORE_RETRY_MIN_DEFAULT: Duration = Duration::from_millis(100);
/// Default cap of the delay before retrying a store call that failed transiently.
pub const STORE_RETRY_MAX_DEFAULT: Duration = Duration::from_secs(10);

/// A set of slots serving some queues and optionally only some kinds (docs/design.md section 6).
///
/// Each queue of the pool gets its own claim loop with `slots_per_queue` slots, so a pool with
/// `--slots 8 --queue default --queue mail` runs up to 16 jobs at once. A long-running kind can
/// get its own pool (`kinds: Some(vec![kind])`) so it never starves the rest: a pool with a
/// kind filter reserves its kinds in its queues, and the general pools (no filter) of the same
/// worker do not claim them there ([`WorkerConfig::kinds_to_claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Name used in logs and errors.
    pub name: String,
    /// Queues served, at least one.
    pub queues: Vec<QueueName>,
    /// Slots of each queue, 1..=10,000.
    pub slots_per_queue: usize,
    /// Kinds this pool runs; each must be registered. `None`: every registered kind except,
    /// in each queue, the kinds that a pool of the same worker with a kind filter reserves
    /// there.
    pub kinds: Option<Vec<JobKind>>,
    /// Claim-ahead of each queue: how many jobs beyond its free slots a claim may take while
    /// the queue's jobs are short (the last one ran under [`PREFETCH_RUN_MAX`]), 0..=10,000;
    /// `None` (default): 8 per slot ([`PREFETCH_DEFAULT_PER_SLOT`]), at most 1,000
    /// ([`PREFETCH_DEFAULT_MAX`]); in any case at most what keeps one claim within the
    /// store's claim bound (slots + prefetch <= 10,000). Such a job is leased (attempt counted,
    /// heartbeated) while it waits for a slot, and starts as soon as one frees, in claim order;
    /// when shutdown begins the waiting jobs are released at once without spending an
    /// attempt, and a cancel request cancels a waiting job before it starts. It has no
    /// `started_at` until its handler starts (snapshots count it as claimed, not running); with
    /// a worker crash it is rescued after its lease without spending its attempt (at most 3
    /// times in a row per attempt). 0 turns it off: a claim
    /// then never takes more jobs than the free slots.
    pub prefetch: Option<usize>,
}

impl PoolConfig {
    /// A pool serving `queues` with `slots_per_queue` slots each and every registered kind.
    pub fn new(name: impl Into<String>, queues: Vec<QueueName>, slots_per_queue: usize) -> Self {
        PoolConfig {
            name: name.into(),
            queues,
            slots_per_queue,
            kinds: None,
            prefetch: None,
        }
    }

    /// Sets the claim-ahead of each queue ([`PoolConfig::prefetch`]).
    pub fn with_prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// The claim-ahead of each queue: `prefetch`, or when unset 8 per slot up to 1,000; then
    /// bounded so that slots + claim-ahead fit in one claim (`CLAIM_LIMIT_MAX`, 10,000).
    pub fn prefetch_per_queue(&self) -> usize {
        let prefetch = self.prefetch.unwrap_or_else(|| {
            self.slots_per_queue
                .saturating_mul(PREFETCH_DEFAULT_PER_SLOT)
                .min(PREFETCH_DEFAULT_MAX)
        });
        let claim_max = drover_core::store::CLAIM_LIMIT_MAX as usize;
        prefetch.min(claim_max.saturating_sub(self.slots_per_queue))
    }

    /// Restricts the pool to `kinds`.
    pub fn with_kinds(mut self, kinds: Vec<JobKind>) -> Self {
        self.kinds = Some(kinds);
        self
    }
}

impl Default for PoolConfig {
    /// Pool `default` serving queue `default` with 8 slots.
    fn default() -> Self {
        PoolConfig::new("default", vec![QueueName::default_queue()], SLOTS_DEFAULT)
    }
}

/// Settings of a worker process. Build with [`WorkerConfig::default`] and assign fields;
/// [`crate::Worker::new`] validates it against the registry.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// This process's id, written as lease owner (default `host:pid:random`, see
    /// [`default_worker_id`]).
    pub worker_id: WorkerId,
    /// The pools, at least one (default: one pool serving `default` with 8 slots).
    pub pools: Vec<PoolConfig>,
    /// Cap on concurrent executions over all pools of the process (`DROVER_MAX_CONCURRENT`);
    /// `None` (default): only the pools' slots bound it.
    pub max_concurrent: Option<usize>,
    /// Lease length of a claim, extended by every heartbeat (default 60 s; 100 ms..=24 h;
    /// at least [`HEARTBEATS_PER_LEASE_MIN`] heartbeat intervals).
    pub lease: Duration,
    /// Interval of the heartbeat that extends the leases of all running jobs and saves their
    /// progress (default 15 s; longer than zero and at most a third of the lease,
    /// [`heartbeat_interval_max`]).
    pub heartbeat_interval: Duration,
    /// Fallback wait of an idle claim loop when no event arrives (default 1 s).
    pub poll_interval: Duration,
    /// Interval of the expired-lease rescuer (default 15 s).
    pub rescue_interval: Duration,
    /// Interval of the reconcile sweep (default 30 s).
    pub reconcile_interval: Duration,
    /// Interval of the cron scheduler (default 1 s).
    pub schedule_interval: Duration,
    /// How long terminal jobs are kept (default 7 days).
    pub retention: Duration,
    /// How long audit records of operator actions are kept (default 90 days,
    /// [`drover_core::AUDIT_RETENTION_DEFAULT`]); pruned by the same passes as jobs, at most
    /// `prune_limit` records a pass.
    pub audit_retention: Duration,
    /// Interval of retention pruning (default 60 s).
    pub prune_interval: Duration,
    /// Most jobs deleted by one retention pass (default 1,000; 1..=100,000): a pass makes one
    /// prune call, so a backlog is worked off over the following passes. A cluster that
    /// finishes more jobs per `prune_interval` and worker than this outgrows it.
    pub prune_limit: u32,
    /// Wait before the first pass of each maintenance service (rescuer, reconcile sweep, cron
    /// scheduler, cleaner: retention and stale worker registrations). Each service's first
    /// pass comes at a random point between this delay and twice it, a range capped at the
    /// service's interval (when the interval is shorter than twice the delay: in the second
    /// half of the interval). Default 1 s: the rescuer, the reconcile sweep and the cleaner
    /// sweep 1-2 s after start, the cron scheduler (1 s interval) 0.5-1 s after. A starting
    /// worker claims before it sweeps, and workers started together (a deploy) spread their
    /// sweeps instead of running them all at once on fresh connections; nothing a sweep does
    /// is urgent at start (an expired lease waits at most twice this delay more). Zero: every
    /// service runs its first pass at start.
    pub maintenance_start_delay: Duration,
    /// Other workers whose last heartbeat is older than this are removed from the worker
    /// registry (default 2 min; must be longer than `heartbeat_interval`). Checked every
    /// `prune_interval`.
    pub worker_stale_after: Duration,
    /// At shutdown, how long running jobs may take to finish before their tokens fire
    /// (default 30 s). A handler that then ignores its token gets `cancel_grace` more before
    /// it is aborted, so running jobs may delay a stop by up to `shutdown_grace +
    /// cancel_grace` (35 s by default).
    pub shutdown_grace: Duration,
    /// How long a handler may take to stop after its token fired before it is aborted
    /// (default 5 s).
    pub cancel_grace: Duration,
    /// At shutdown, once every handler has stopped, how long the completer keeps retrying
    /// outcome writes the store refuses transiently before giving up on them (default 30 s;
    /// an outcome not written leaves its lease to expire and the job is rescued).
    pub flush_timeout: Duration,
    /// Most outcomes written by one `jobs_finish` call (default 1,000; 1..=10,000).
    pub completer_batch: usize,
    /// First delay before retrying a store call that failed with `Unavailable` (default
    /// 100 ms); doubles up to `store_retry_max`.
    pub store_retry_min: Duration,
    /// Cap of that delay (default 10 s).
    pub store_retry_max: Duration,
    /// Warn when the oldest open transaction of the database is older than this: vacuum
    /// cannot remove the jobs table's dead row versions newer than it, and claims slow down
    /// stepping over them (default 5 min; `None`: never). Checked every minute
    /// ([`VACUUM_CHECK_INTERVAL`]), repeated at most every 10 minutes while it holds.
    pub transaction_age_warning: Option<Duration>,
    /// Warn when dead row versions are more than this fraction of the jobs table's row
    /// versions, and at least [`DEAD_ROWS_WARNING_MIN`] (default 0.5; `None`: never; above 0,
    /// at most 1). Checked and repeated as `transaction_age_warning`.
    pub dead_rows_warning: Option<f64>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            worker_id: default_worker_id(),
            pools: vec![PoolConfig::default()],
            max_concurrent: None,
            lease: LEASE_DEFAULT,
            heartbeat_interval: HEARTBEAT_DEFAULT,
            poll_interval: POLL_INTERVAL_DEFAULT,
            rescue_interval: RESCUE_INTERVAL_DEFAULT,
            reconcile_interval: RECONCILE_INTERVAL_DEFAULT,
            schedule_interval: SCHEDULE_INTERVAL_DEFAULT,
            retention: RETENTION_DEFAULT,
            audit_retention: drover_core::AUDIT_RETENTION_DEFAULT,
            prune_interval: PRUNE_INTERVAL_DEFAULT,
            prune_limit: PRUNE_LIMIT_DEFAULT,
            maintenance_start_delay: MAINTENANCE_START_DELAY_DEFAULT,
            worker_stale_after: WORKER_STALE_AFTER_DEFAULT,
            shutdown_grace: SHUTDOWN_GRACE_DEFAULT,
            cancel_grace: CANCEL_GRACE_DEFAULT,
            flush_timeout: FLUSH_TIMEOUT_DEFAULT,
            completer_batch: COMPLETER_BATCH_DEFAULT,
            store_retry_min: STORE_RETRY_MIN_DEFAULT,
            store_retry_max: STORE_RETRY_MAX_DEFAULT,
            transaction_age_warning: Some(TRANSACTION_AGE_WARNING_DEFAULT),
            dead_rows_warning: Some(DEAD_ROWS_WARNING_DEFAULT),
        }
    }
}

impl WorkerConfig {
    /// The default configuration with these pools.
    pub fn with_pools(pools: Vec<PoolConfig>) -> Self {
        WorkerConfig {
            pools,
            ..WorkerConfig::default()
        }
    }

    /// Total slots over all pools and queues (before `max_concurrent`).
    pub fn total_slots(&self) -> usize {
        self.pools
            .iter()
            .map(|pool| pool.slots_per_queue.saturating_mul(pool.queues.len()))
            .fold(0usize, usize::saturating_add)
    }

    /// Most outcomes waiting to be recorded at once: four of the completer's batches (one
    /// being written, the next ones filling meanwhile: a burst of short jobs outruns one
    /// write) plus every slot. A finished run waits for room before it hands its outcome
    /// over, holding its slot, so a slow store slows the claims (docs/design.md section 6).
    pub fn unwritten_max(&self) -> usize {
        self.completer_batch
            .saturating_mul(UNWRITTEN_BATCHES)
            .saturating_add(self.total_slots())
            .max(1)
    }

    /// Jobs the process can run at once: the total slots, bounded by `max_concurrent`.
    pub fn max_running(&self) -> usize {
        let slots = self.total_slots();
        self.max_concurrent.map_or(slots, |cap| cap.min(slots))
    }

    /// Every queue served by some pool, without repeats, in pool order.
    pub fn queues(&self) -> Vec<QueueName> {
        let mut seen = HashSet::new();
        self.pools
            .iter()
            .flat_map(|pool| pool.queues.iter())
            .filter(|queue| seen.insert((*queue).clone()))
            .cloned()
            .collect()
    }

    /// The kinds the claim loop of `pool` in `queue` claims, in registry order: a pool with a
    /// kind filter claims the registered kinds it lists; a general pool (no filter) claims every
    /// registered kind except those that a pool with a kind filter reserves in `queue`. So a
    /// kind reserved in one queue is still claimed by general pools in the other queues, and
    /// another process without the reserving pool claims it as usual.
    pub fn kinds_to_claim(
        &self,
        pool: &PoolConfig,
        queue: &QueueName,
        registered: &[JobKind],
    ) -> Vec<JobKind> {
        match &pool.kinds {
            Some(filter) => registered
                .iter()
                .filter(|kind| filter.contains(kind))
                .cloned()
                .collect(),
            None => {
                let reserved: HashSet<&JobKind> = self
                    .pools
                    .iter()
                    .filter(|other| other.queues.contains(queue))
                    .filter_map(|other| other.kinds.as_ref())
                    .flatten()
                    .collect();
                registered
                    .iter()
                    .filter(|kind| !reserved.contains(kind))
                    .cloned()
                    .collect()
            }
        }
    }

    /// Checks the configuration against the registry.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the field:
    /// - pools: none; a pool without a name or queues, with zero (or more than 10,000) slots,
    ///   a prefetch above 10,000, a repeated queue, an empty kind filter, a kind filter naming
    ///   an unregistered kind, or no registered kind to claim (a general pool: in one of its
    ///   queues, because pools with a kind filter reserve every registered kind there); two
    ///   pools with one name;
    /// - `max_concurrent` outside 1..=1,000,000; a lease outside 100 ms..=24 h; a heartbeat
    ///   interval (field `heartbeat_interval`) longer than a third of the lease
    ///   ([`heartbeat_interval_max`]); a zero interval; `prune_limit` outside 1..=100,000;
    ///   `completer_batch` outside 1..=10,000; `worker_stale_after` not longer than the
    ///   heartbeat interval; `store_retry_min` above `store_retry_max`; a kind whose timeout
    ///   is zero; a zero `transaction_age_warning`; a `dead_rows_warning` outside (0, 1].
    pub fn validate(&self, registry: &Registry) -> Result<(), Error> {
        if self.pools.is_empty() {
            return Err(Error::invalid("pools", "at least one pool is needed"));
        }
        let mut names = HashSet::new();
        for (i, pool) in self.pools.iter().enumerate() {
            let field = |name: &str| format!("pools[{i}].{name}");
            if pool.name.trim().is_empty() {
                return Err(Error::invalid(field("name"), "must not be empty"));
            }
            if !names.insert(pool.name.as_str()) {
                return Err(Error::invalid(
                    field("name"),
                    format!("pool {:?} is defined twice", pool.name),
                ));
            }
            if pool.queues.is_empty() {
                return Err(Error::invalid(
                    field("queues"),
                    format!("pool {:?} serves no queue", pool.name),
                ));
            }
            let mut queues = HashSet::new();
            for queue in &pool.queues {
                if !queues.insert(queue) {
                    return Err(Error::invalid(
                        field("queues"),
                        format!("pool {:?} lists queue {queue} twice", pool.name),
                    ));
                }
            }
            check_range(field("slots_per_queue"), pool.slots_per_queue, 1, SLOTS_MAX)?;
            if let Some(prefetch) = pool.prefetch {
                check_range(field("prefetch"), prefetch, 0, PREFETCH_MAX)?;
            }
            if let Some(kinds) = &pool.kinds {
                if kinds.is_empty() {
                    return Err(Error::invalid(
                        field("kinds"),
                        format!(
                            "pool {:?} has an empty kind filter (use none to run every kind)",
                            pool.name
                        ),
                    ));
                }
                if let Some(unknown) = kinds.iter().find(|kind| !registry.contains(kind)) {
                    return Err(Error::invalid(
                        field("kinds"),
                        format!(
                            "pool {:?} names kind {unknown}, which has no registered handler",
                            pool.name
                        ),
                    ));
                }
            } else if registry.kinds().is_empty() {
                return Err(Error::invalid(
                    field("kinds"),
                    format!(
                        "pool {:?} has no kind to claim: register a handler first",
                        pool.name
                    ),
                ));
            }
        }
        let registered = registry.kinds();
        for (i, pool) in self.pools.iter().enumerate() {
            if pool.kinds.is_some() {
                continue;
            }
            if let Some(queue) = pool
                .queues
                .iter()
                .find(|queue| self.kinds_to_claim(pool, queue, &registered).is_empty())
            {
                return Err(Error::invalid(
                    format!("pools[{i}].queues"),
                    format!(
                        "pool {:?} has no kind to claim in queue {queue}: pools with a kind filter reserve every registered kind there",
                        pool.name
                    ),
                ));
            }
        }
        for kind in registry.kinds() {
            if registry.config(&kind).timeout == Some(Duration::ZERO) {
                return Err(Error::invalid(
                    "timeout",
                    format!("the timeout of kind {kind} must be longer than zero"),
                ));
            }
        }
        if let Some(cap) = self.max_concurrent {
            check_range("max_concurrent", cap, 1, MAX_CONCURRENT_MAX)?;
        }
        check_lease(self.lease)?;
        for (name, value) in [
            ("heartbeat_interval", self.heartbeat_interval),
            ("poll_interval", self.poll_interval),
            ("rescue_interval", self.rescue_interval),
            ("reconcile_interval", self.reconcile_interval),
            ("schedule_interval", self.schedule_interval),
            ("prune_interval", self.prune_interval),
            ("retention", self.retention),
            ("audit_retention", self.audit_retention),
            ("store_retry_min", self.store_retry_min),
        ] {
            if value.is_zero() {
                return Err(Error::invalid(name, "must be longer than zero"));
            }
        }
        if self.heartbeat_interval > heartbeat_interval_max(self.lease) {
            return Err(Error::invalid(
                "heartbeat_interval",
                format!(
                    "must be at most a third of the lease ({} ms for a lease of {} ms), got {} ms: with fewer than {HEARTBEATS_PER_LEASE_MIN} heartbeats per lease, one late heartbeat can let the lease expire under a running job and the job run twice",
                    heartbeat_interval_max(self.lease).as_millis(),
                    self.lease.as_millis(),
                    self.heartbeat_interval.as_millis(),
                ),
            ));
        }
        if self.worker_stale_after <= self.heartbeat_interval {
            return Err(Error::invalid(
                "worker_stale_after",
                "must be longer than the heartbeat interval",
            ));
        }
        check_range("prune_limit", self.prune_limit, 1, PRUNE_LIMIT_MAX)?;
        check_range(
            "completer_batch",
            self.completer_batch,
            1,
            COMPLETER_BATCH_MAX,
        )?;
        if self.store_retry_min > self.store_retry_max {
            return Err(Error::invalid(
                "store_retry_min",
                "must not be longer than store_retry_max",
            ));
        }
        if self.transaction_age_warning == Some(Duration::ZERO) {
            return Err(Error::invalid(
                "transaction_age_warning",
                "must be longer than zero (None turns the warning off)",
            ));
        }
        if let Some(fraction) = self.dead_rows_warning {
            if !(fraction > 0.0 && fraction <= 1.0) {
                return Err(Error::invalid(
                    "dead_rows_warning",
                    format!(
                        "must be above 0 and at most 1 (None turns the warning off), got {fraction}"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A worker id `host:pid:random` (8 hex digits), unique per process start. Characters of the
/// host name outside visible ASCII become `_`; the host part is cut to 200 bytes.
pub fn default_worker_id() -> WorkerId {
    let host: String = host_name().chars().take(200).collect();
    let random: u32 = rand::thread_rng().gen();
    let id = format!("{host}:{}:{random:08x}", std::process::id());
    WorkerId::parse(id).unwrap_or_else(|_| {
        WorkerId::parse(format!("worker:{}:{random:08x}", std::process::id()))
            .unwrap_or_else(|_| unreachable_worker_id())
    })
}

/// This machine's host name as visible ASCII (`localhost` when it cannot be read), for the
/// worker registry and default worker ids.
pub(crate) fn host_name() -> String {
    hostname::get()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect()
}

/// A constant id used only if even the fallback id fails to parse (it cannot: it is visible
/// ASCII and short).
fn unreachable_worker_id() -> WorkerId {
    match WorkerId::parse("worker") {
        Ok(id) => id,
        Err(_) => unreachable!("\"worker\" is a valid worker id"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;

    fn kind(name: &str) -> JobKind {
        JobKind::parse(name).unwrap()
    }

    fn registry() -> Registry {
        let mut registry = Registry::new();
        registry.register_fn(kind("a"), |_| async { Outcome::success() });
        registry
    }

    fn field_of(config: &WorkerConfig) -> String {
        match config.validate(&registry()) {
            Err(Error::InvalidInput { field, .. }) => field,
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid_and_follow_the_design() {
        let config = WorkerConfig::default();
        config.validate(&registry()).unwrap();
        assert_eq!(config.lease, Duration::from_secs(60));
        assert_eq!(config.heartbeat_interval, Duration::from_secs(15));
        assert_eq!(config.retention, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(config.prune_limit, 1_000);
        assert!(config.worker_id.as_str().split(':').count() >= 3);
    }

    #[test]
    fn the_heartbeat_interval_is_at_most_a_third_of_the_lease() {
        let with = |lease_ms: u64, heartbeat_ms: u64| WorkerConfig {
            lease: Duration::from_millis(lease_ms),
            heartbeat_interval: Duration::from_millis(heartbeat_ms),
            ..WorkerConfig::default()
        };
        // Accepted up to a third, to the millisecond and below it.
        for (lease, heartbeat) in [(60_000, 15_000), (60_000, 20_000), (2_000, 500), (100, 33)] {
            with(lease, heartbeat)
                .validate(&registry())
                .unwrap_or_else(|e| panic!("lease {lease} ms, heartbeat {heartbeat} ms: {e}"));
        }
        // Refused above it, where one late heartbeat could let the lease lapse.
        for (lease, heartbeat) in [
            (60_000, 20_001),
            (60_000, 30_000),
            (2_000, 1_000),
            (100, 34),
        ] {
            let config = with(lease, heartbeat);
            assert_eq!(
                field_of(&config),
                "heartbeat_interval",
                "{lease}/{heartbeat}"
            );
            let err = config.validate(&registry()).unwrap_err().to_string();
            assert!(
                err.contains("must be at most a third of the lease")
                    && err.contains(&format!("got {heartbeat} ms")),
                "{err}"
            );
        }
        assert_eq!(
            heartbeat_interval_max(Duration::from_secs(60)),
            Duration::from_secs(20)
        );
    }

    #[test]
    fn slots_are_per_queue_and_capped_by_max_concurrent() {
        let mut config = WorkerConfig::with_pools(vec![PoolConfig::new(
            "p",
            vec![
                QueueName::default_queue(),
                QueueName::parse("mail").unwrap(),
            ],
            8,
        )]);
        assert_eq!(config.total_slots(), 16);
        assert_eq!(config.max_running(), 16);
        config.max_concurrent = Some(5);
        assert_eq!(config.max_running(), 5);
    }

    #[test]
    fn validation_names_the_problem() {
        let mut c = WorkerConfig::default();
        c.pools.clear();
        assert_eq!(field_of(&c), "pools");

        let mut c = WorkerConfig::default();
        c.pools[0].slots_per_queue = 0;
        assert_eq!(field_of(&c), "pools[0].slots_per_queue");

        let mut c = WorkerConfig::default();
        c.pools[0].prefetch = Some(PREFETCH_MAX + 1);
        assert_eq!(field_of(&c), "pools[0].prefetch");
        c.pools[0].prefetch = Some(PREFETCH_MAX);
        assert!(c.validate(&registry()).is_ok());
        c.pools[0].prefetch = Some(0);
        assert!(c.validate(&registry()).is_ok());

        let mut c = WorkerConfig::default();
        c.pools[0].kinds = Some(vec![kind("unknown")]);
        let err = c.validate(&registry()).unwrap_err().to_string();
        assert!(
            err.contains("unknown") && err.contains("no registered handler"),
            "{err}"
        );

        let c = WorkerConfig {
            lease: Duration::from_secs(15),
            ..WorkerConfig::default()
        };
        assert_eq!(field_of(&c), "heartbeat_interval");

        for cap in [0, MAX_CONCURRENT_MAX + 1, usize::MAX] {
            let c = WorkerConfig {
                max_concurrent: Some(cap),
                ..WorkerConfig::default()
            };
            assert_eq!(field_of(&c), "max_concurrent", "{cap}");
        }
        let c = WorkerConfig {
            max_concurrent: Some(MAX_CONCURRENT_MAX),
            ..WorkerConfig::default()
        };
        assert!(c.validate(&registry()).is_ok());

        let mut c = WorkerConfig::default();
        c.pools[0].queues.clear();
        assert_eq!(field_of(&c), "pools[0].queues");

        let mut c = WorkerConfig::default();
        c.pools.push(PoolConfig::default());
        assert_eq!(field_of(&c), "pools[1].name");

        let c = WorkerConfig::default();
        let empty = Registry::new();
        assert!(c.validate(&empty).is_err());

        // A general pool left with no kind in one of its queues.
        let c = WorkerConfig::with_pools(vec![
            PoolConfig::new("general", vec![QueueName::default_queue()], 1),
            PoolConfig::new("long", vec![QueueName::default_queue()], 1)
                .with_kinds(vec![kind("a")]),
        ]);
        let err = c.validate(&registry()).unwrap_err().to_string();
        assert!(
            err.contains("pools[0].queues")
                && err.contains("no kind to claim in queue default")
                && err.contains("reserve every registered kind"),
            "{err}"
        );
    }

    #[test]
    fn a_kind_filter_reserves_its_kinds_in_its_queues_only() {
        let registered = vec![kind("long"), kind("short"), kind("other")];
        let (lq, mail) = (
            QueueName::parse("lq").unwrap(),
            QueueName::parse("mail").unwrap(),
        );
        let c = WorkerConfig::with_pools(vec![
            PoolConfig::new("general", vec![lq.clone(), mail.clone()], 1),
            PoolConfig::new("long", vec![lq.clone()], 1).with_kinds(vec![kind("long")]),
            PoolConfig::new("both", vec![lq.clone()], 1)
                .with_kinds(vec![kind("long"), kind("other")]),
        ]);
        let kinds =
            |pool: usize, queue: &QueueName| c.kinds_to_claim(&c.pools[pool], queue, &registered);
        assert_eq!(kinds(0, &lq), vec![kind("short")]);
        assert_eq!(kinds(0, &mail), registered, "nothing is reserved in mail");
        assert_eq!(kinds(1, &lq), vec![kind("long")]);
        assert_eq!(
            kinds(2, &lq),
            vec![kind("long"), kind("other")],
            "pools with filters may share a kind"
        );
    }
}

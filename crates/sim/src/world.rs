//! The world one seed builds and runs: the memory store (ids counted from a fixed id, time from
//! the paused tokio clock), wrapped per process in a [`FaultyStore`]; 2–4 workers of the real
//! runner, crashed, paused, stopped gracefully and brought back by a chaos loop that also
//! makes the store's clock jump; clients enqueuing; an operator cancelling, retrying,
//! requeuing, pausing and resuming. Faults for a bounded simulated time, then a
//! quiet period without faults until every job is terminal.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use drover_core::store::LIST_LIMIT_MAX;
use drover_core::workflow::NewWorkflow;
use drover_core::{
    Backoff, FencingToken, Job, JobId, JobKind, JobStore, LimitKey, LimitPolicy, ListJobs, NewJob,
    NewSchedule, QueueName, Quotas, Rate, RunAt, ScheduleName, StoreConfig, WorkerId,
};
use drover_runner::{
    CancellationToken, Client, Handler, JobContext, KindConfig, Outcome, PoolConfig, Registry,
    Worker, WorkerConfig,
};
use drover_store_memory::MemoryStore;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::clock::SimClock;
use crate::faults::{Ctx, Door, FaultRates, FaultyStore, Gate};
use crate::history::{Ev, Record};

/// Wraps the memory store before the fault layer (the tests' deliberately broken stores).
pub type Wrap = Arc<dyn Fn(Arc<dyn JobStore>, &SimClock) -> Arc<dyn JobStore> + Send + Sync>;

/// What a run of one seed looks like.
#[derive(Clone)]
pub struct Options {
    /// Jobs each client enqueues at most (new requests; replays of a key come on top).
    pub jobs: u32,
    /// Workers; `None`: 2–4 from the seed.
    pub workers: Option<usize>,
    /// Simulated seconds with faults.
    pub fault_secs: u64,
    /// Most simulated seconds of quiet to wait for every job to be terminal.
    pub quiet_max_secs: u64,
    /// Store fault probabilities.
    pub rates: FaultRates,
    /// Crash and pause workers.
    pub chaos: bool,
    /// Let workers claim ahead (0–3 per queue from the seed). Off by default: the runner
    /// measures a claimed-ahead job's wait on `std::time::Instant`, outside the simulation.
    pub prefetch: bool,
    /// A store between the memory store and the fault layer.
    pub wrap: Option<Wrap>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            jobs: 30,
            workers: None,
            fault_secs: 60,
            quiet_max_secs: 600,
            rates: FaultRates::default(),
            chaos: true,
            prefetch: false,
            wrap: None,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("jobs", &self.jobs)
            .field("workers", &self.workers)
            .field("fault_secs", &self.fault_secs)
            .field("quiet_max_secs", &self.quiet_max_secs)
            .field("rates", &self.rates)
            .field("chaos", &self.chaos)
            .field("prefetch", &self.prefetch)
            .field("wrap", &self.wrap.is_some())
            .finish()
    }
}

/// What one world left behind.
#[derive(Debug, Clone)]
pub struct WorldEnd {
    /// The history.
    pub history: Vec<Record>,
    /// Every job in the store at the end, by id.
    pub jobs: Vec<Job>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Simulated seconds the world ran.
    pub sim_secs: f64,
    /// Jobs not terminal when the quiet period ran out.
    pub settled: bool,
}

/// The kind every simulated job has.
pub const KIND: &str = "sim.work";
/// The queues.
pub const QUEUES: [&str; 2] = ["q1", "q2"];
/// The limit keys jobs carry: the first bounded in running jobs, the second in rate.
pub const LIMIT_KEYS: [&str; 2] = ["lim", "rate"];
/// The cron schedule's name.
pub const SCHEDULE: &str = "tick";
/// The workers' lease.
pub const LEASE: Duration = Duration::from_secs(2);

struct Slot {
    gate: Arc<Gate>,
    task: Option<JoinHandle<()>>,
    incarnation: u32,
    name: String,
    slots: usize,
    /// Jobs claimed ahead per queue.
    prefetch: usize,
    /// When the chaos loop brings it back (simulated ms since start).
    revive_at: Option<u64>,
    /// Fired to stop the worker gracefully.
    shutdown: CancellationToken,
    /// Asked to stop gracefully and not started again yet.
    stopping: bool,
}

struct World {
    ctx: Arc<Ctx>,
    /// How long workers keep finished jobs (their retention pass runs every 2 s).
    retention: Duration,
    store: Arc<dyn JobStore>,
    workers: Mutex<Vec<Slot>>,
    known: Mutex<Vec<JobId>>,
}

fn kind() -> JobKind {
    JobKind::parse(KIND).unwrap_or_else(|_| unreachable!("a valid kind"))
}

fn limit_key(name: &str) -> LimitKey {
    LimitKey::parse(name).unwrap_or_else(|_| unreachable!("a valid limit key"))
}

fn queue(name: &str) -> QueueName {
    QueueName::parse(name).unwrap_or_else(|_| unreachable!("a valid queue"))
}

/// splitmix64: the handler's choices from the job's seed and its token.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The simulated handler: from the job's `h` and its fencing token (so each run differs) it
/// succeeds (result: its tag and token), fails with a retry delay, snoozes, discards, or runs
/// longer than the lease; it stops when its cancellation token fires.
struct SimHandler {
    ctx: Arc<Ctx>,
    who: String,
    gate: Arc<Gate>,
}

#[async_trait]
impl Handler for SimHandler {
    async fn run(&self, jc: JobContext) -> Outcome {
        let job = jc.job();
        let (id, token, attempt) = (job.id, jc.fencing_token(), job.attempt);
        let tag = job.args.get("tag").cloned().unwrap_or_default();
        let h = job.args.get("h").and_then(|h| h.as_u64()).unwrap_or(0);
        if self.gate.door() != Door::Dead {
            self.ctx.record(
                &self.who,
                Ev::HandlerStart {
                    job: id,
                    attempt,
                    token,
                },
            );
        }
        let x = mix(h ^ (token.0 as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let fanout = job.args.get("fanout").and_then(|n| n.as_u64()).unwrap_or(0);
        if fanout > 0 {
            // A parent: its first run enqueues its children and waits for them; a run that
            // finds children (they ended, or a crash came between) goes on as any job.
            let fresh = match jc.children().await {
                Ok(children) => children.is_empty(),
                Err(_) => {
                    return self.ended(
                        id,
                        token,
                        "retry",
                        Outcome::retry_after("children unreadable", LEASE),
                    )
                }
            };
            if fresh {
                let children: Vec<NewJob> = (0..fanout)
                    .map(|k| {
                        NewJob::new(
                            kind(),
                            json!({"tag": format!("{}/{k}", tag.as_str().unwrap_or_default()), "h": mix(h ^ (k + 1))}),
                        )
                        .with_queue(queue(QUEUES[(mix(h ^ k) % 2) as usize]))
                        .with_max_attempts(1 + (mix(h + k) % 3) as i32)
                    })
                    .collect();
                return match jc.enqueue_children(children).await {
                    Ok(_) => self.ended(id, token, "wait", Outcome::wait_for_children()),
                    Err(_) => self.ended(
                        id,
                        token,
                        "retry",
                        Outcome::retry_after("children not stored", Duration::from_millis(300)),
                    ),
                };
            }
        }
        let choice = x % 100;
        let work = if (85..95).contains(&choice) {
            LEASE.as_millis() as u64 * (1 + (x >> 40) % 3)
        } else {
            10 + (x >> 20) % 800
        };
        let cancel = jc.cancellation();
        let cancelled = tokio::select! {
            biased;
            () = cancel.cancelled() => true,
            () = tokio::time::sleep(Duration::from_millis(work)) => false,
        };
        let delay = Duration::from_millis(1 + (x >> 8) % 2_000);
        let (name, outcome) = if cancelled {
            ("cancelled", Outcome::cancelled("stopped on the token"))
        } else {
            match choice {
                0..=54 | 85..=94 => (
                    "success",
                    Outcome::success_with(json!({"tag": tag, "token": token.0})),
                ),
                55..=74 => ("retry", Outcome::retry_after("simulated failure", delay)),
                75..=84 => ("snooze", Outcome::snooze(delay)),
                _ => ("discard", Outcome::discard("simulated bad input")),
            }
        };
        self.ended(id, token, name, outcome)
    }
}

impl SimHandler {
    /// Records the handler's end (unless its process crashed) and returns `outcome`.
    fn ended(&self, job: JobId, token: FencingToken, name: &str, outcome: Outcome) -> Outcome {
        if self.gate.door() != Door::Dead {
            self.ctx.record(
                &self.who,
                Ev::HandlerEnd {
                    job,
                    token,
                    outcome: name.to_owned(),
                },
            );
        }
        outcome
    }
}

impl World {
    fn start_worker(self: &Arc<Self>, i: usize) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut workers[i];
        slot.incarnation += 1;
        slot.name = format!("w{i}-{}", slot.incarnation);
        slot.gate = Gate::new();
        slot.revive_at = None;
        slot.stopping = false;
        slot.shutdown = CancellationToken::new();
        let view = FaultyStore::new(
            Arc::clone(&self.store),
            Arc::clone(&self.ctx),
            slot.name.clone(),
            Arc::clone(&slot.gate),
        );
        let mut registry = Registry::new();
        registry.register(
            kind(),
            SimHandler {
                ctx: Arc::clone(&self.ctx),
                who: slot.name.clone(),
                gate: Arc::clone(&slot.gate),
            },
        );
        // No jitter anywhere: the runner's random draws (thread_rng) would not be the seed's.
        registry.set_default_config(KindConfig::default().with_backoff(Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
            jitter: 0.0,
        }));
        let mut config = WorkerConfig::default();
        config.worker_id = WorkerId::parse(slot.name.clone())
            .unwrap_or_else(|_| unreachable!("a valid worker id"));
        config.pools =
            vec![
                PoolConfig::new("sim", QUEUES.iter().map(|q| queue(q)).collect(), slot.slots)
                    .with_prefetch(slot.prefetch),
            ];
        config.lease = LEASE;
        config.heartbeat_interval = LEASE / 4;
        config.poll_interval = Duration::from_millis(500);
        config.rescue_interval = Duration::from_secs(1);
        config.maintenance_start_delay = Duration::ZERO;
        config.prune_interval = Duration::from_secs(2);
        config.retention = self.retention;
        config.store_retry_min = Duration::from_millis(200);
        config.store_retry_max = Duration::from_millis(200);
        config.cancel_grace = Duration::from_secs(1);
        config.shutdown_grace = Duration::from_secs(1);
        config.transaction_age_warning = None;
        config.dead_rows_warning = None;
        let worker = match Worker::new(Arc::new(view), Arc::new(registry), config) {
            Ok(worker) => worker,
            Err(error) => panic!("simulated worker config rejected: {error}"),
        };
        let shutdown = slot.shutdown.clone();
        let (ctx, name) = (Arc::clone(&self.ctx), slot.name.clone());
        slot.task = Some(tokio::spawn(async move {
            let result = worker.run(shutdown.clone()).await;
            ctx.record(
                &name,
                Ev::WorkerExit {
                    asked: shutdown.is_cancelled(),
                    error: result.err().map(|e| e.to_string()),
                },
            );
        }));
        self.ctx.record(&slot.name, Ev::WorkerStart);
    }

    fn crash(&self, i: usize, revive_at: u64) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut workers[i];
        slot.gate.set(Door::Dead);
        if let Some(task) = slot.task.take() {
            task.abort();
        }
        slot.revive_at = Some(revive_at);
        self.ctx.count_fault("worker_crash");
        self.ctx.record(&slot.name, Ev::WorkerCrash);
    }

    fn pause(&self, i: usize, revive_at: u64) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut workers[i];
        slot.gate.set(Door::Held);
        slot.revive_at = Some(revive_at);
        self.ctx.count_fault("worker_pause");
        self.ctx.record(&slot.name, Ev::WorkerPause);
    }

    /// Asks worker `i` to stop gracefully: it stops claiming, lets its handlers finish for
    /// `shutdown_grace`, releases the rest and writes what it can.
    fn stop(&self, i: usize) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut workers[i];
        slot.shutdown.cancel();
        slot.stopping = true;
        self.ctx.count_fault("worker_graceful_stop");
        self.ctx.record(&slot.name, Ev::WorkerStop);
    }

    /// True when worker `i` was stopped gracefully and its run returned.
    fn stopped(&self, i: usize) -> bool {
        let workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &workers[i];
        slot.stopping && slot.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Brings worker `i` back: a paused one resumes, a crashed or stopped one starts anew.
    fn revive(self: &Arc<Self>, i: usize) {
        let restart = {
            let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
            let slot = &mut workers[i];
            slot.revive_at = None;
            let door = slot.gate.door();
            if door == Door::Held {
                slot.gate.set(Door::Open);
                self.ctx.record(&slot.name, Ev::WorkerUnpause);
            }
            door == Door::Dead || slot.stopping
        };
        if restart {
            self.start_worker(i);
        }
    }

    /// Every ~250 ms of simulated time: revives workers whose time has come and, now and
    /// then, crashes or pauses an open one.
    async fn chaos(self: Arc<Self>) {
        let lease_ms = LEASE.as_millis() as u64;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = self.ctx.clock.elapsed_us() / 1_000;
            let n = self.workers.lock().unwrap_or_else(|e| e.into_inner()).len();
            for i in 0..n {
                let due = self.workers.lock().unwrap_or_else(|e| e.into_inner())[i]
                    .revive_at
                    .is_some_and(|at| at <= now);
                if due {
                    self.revive(i);
                } else if self.stopped(i) {
                    let back = now + self.ctx.range(200, 3_000);
                    self.workers.lock().unwrap_or_else(|e| e.into_inner())[i].revive_at =
                        Some(back);
                }
            }
            if !self.ctx.chance(0.05) {
                continue;
            }
            let i = self.ctx.range(0, n as u64) as usize;
            let open = {
                let workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
                workers[i].gate.door() == Door::Open && !workers[i].stopping
            };
            match self.ctx.range(0, 4) {
                _ if !open => {}
                0 => {
                    let back = now + self.ctx.range(500, 5_000);
                    self.crash(i, back);
                }
                1 => {
                    let back = now + self.ctx.range(lease_ms / 2, 3 * lease_ms);
                    self.pause(i, back);
                }
                2 => self.stop(i),
                _ => {
                    // The store's clock jumps forward (the runner's timers do not).
                    let ms = self.ctx.range(100, 2 * lease_ms);
                    self.ctx.clock.jump(Duration::from_millis(ms));
                    self.ctx.count_fault("clock_jump");
                    self.ctx.record("sim", Ev::ClockJump { ms });
                }
            }
        }
    }

    async fn client(self: Arc<Self>, c: usize, budget: u32) {
        let view = FaultyStore::new(
            Arc::clone(&self.store),
            Arc::clone(&self.ctx),
            format!("client{c}"),
            Gate::new(),
        );
        let client = Client::new(Arc::new(view));
        let ctx = &self.ctx;
        let mut made = 0;
        let mut keyed: Vec<NewJob> = Vec::new();
        while made < budget {
            tokio::time::sleep(Duration::from_millis(ctx.range(20, 1_500))).await;
            let len = if ctx.chance(0.2) { ctx.range(2, 6) } else { 1 };
            let mut jobs: Vec<NewJob> = Vec::new();
            for _ in 0..len {
                if !keyed.is_empty() && ctx.chance(0.15) {
                    // A replay of an earlier request with its idempotency key.
                    let again = keyed[ctx.range(0, keyed.len() as u64) as usize].clone();
                    if !jobs
                        .iter()
                        .any(|j| j.idempotency_key == again.idempotency_key)
                    {
                        jobs.push(again);
                    }
                    continue;
                }
                made += 1;
                let tag = format!("c{c}.{made}");
                let mut job = self.new_job(&tag);
                if ctx.chance(0.3) {
                    job.run_at = Some(RunAt::After(Duration::from_millis(ctx.range(1, 5_000))));
                }
                if ctx.chance(0.15) {
                    job.depends_on = self.some_known(ctx.range(1, 3) as usize);
                    job.run_regardless = ctx.chance(0.3);
                }
                if ctx.chance(0.3) {
                    job.idempotency_key = Some(format!("k-{tag}"));
                    keyed.push(job.clone());
                }
                if ctx.chance(0.2) {
                    job.unique_key = Some(format!("u{}", ctx.range(0, 3)));
                }
                jobs.push(job);
            }
            if jobs.is_empty() {
                continue;
            }
            if ctx.chance(0.1) {
                made += 1;
                self.graph(&client, format!("c{c}.{made}")).await;
                continue;
            }
            let keyed_batch = jobs.iter().all(|j| j.idempotency_key.is_some());
            for _ in 0..3 {
                let answer = if jobs.len() == 1 {
                    client.enqueue(jobs[0].clone()).await.map(|e| vec![e])
                } else {
                    client.enqueue_many(jobs.clone()).await
                };
                match answer {
                    Ok(answers) => {
                        self.known
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .extend(answers.iter().map(|a| a.job.id));
                        break;
                    }
                    // A client retries what its keys make safe to send again.
                    Err(error) if error.is_transient() && keyed_batch => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(_) => break,
                }
            }
        }
    }

    /// A job with the seed's queue, priority, attempts, limit keys and fan-out.
    fn new_job(&self, tag: &str) -> NewJob {
        let ctx = &self.ctx;
        let mut args = json!({"tag": tag, "h": ctx.range(0, u64::MAX)});
        if ctx.chance(0.1) {
            args["fanout"] = json!(ctx.range(1, 4));
        }
        let mut job = NewJob::new(kind(), args);
        job.queue = queue(QUEUES[ctx.range(0, QUEUES.len() as u64) as usize]);
        job.priority = ctx.range(0, 7) as i16 - 3;
        job.max_attempts = ctx.range(1, 5) as i32;
        for key in LIMIT_KEYS {
            if ctx.chance(0.25) {
                job.limit_keys.push(limit_key(key));
            }
        }
        job
    }

    /// Up to `n` distinct jobs the clients created.
    fn some_known(&self, n: usize) -> Vec<JobId> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut picked = Vec::new();
        for _ in 0..n {
            if known.is_empty() {
                break;
            }
            let id = known[self.ctx.range(0, known.len() as u64) as usize];
            if !picked.contains(&id) {
                picked.push(id);
            }
        }
        picked
    }

    /// Enqueues a workflow graph of 2–5 jobs, each depending on some of the earlier ones.
    async fn graph(&self, client: &Client, tag: String) {
        let ctx = &self.ctx;
        let n = ctx.range(2, 6) as usize;
        // A keyed graph is sent again after a transient error (its keys make that safe).
        let keyed = ctx.chance(0.3);
        let mut graph = NewWorkflow::new();
        for i in 0..n {
            let mut job = self.new_job(&format!("{tag}.{i}"));
            job.run_regardless = ctx.chance(0.3);
            if keyed {
                job.idempotency_key = Some(format!("k-{tag}.{i}"));
            }
            if ctx.chance(0.1) {
                job.unique_key = Some(format!("u{}", ctx.range(0, 3)));
            }
            let names: Vec<String> = (0..i)
                .filter(|_| ctx.chance(0.5))
                .map(|d| format!("j{d}"))
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            graph = graph.job(format!("j{i}"), job, &names);
        }
        for _ in 0..3 {
            match client.enqueue_workflow(graph.clone()).await {
                Ok(answer) => {
                    self.known
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(answer.jobs.iter().map(|a| a.job.id));
                    return;
                }
                Err(error) if error.is_transient() && keyed => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(_) => return,
            }
        }
    }

    /// Sets the seed's limit policies, stores its cron schedule and records its quota, through
    /// `store` (faults on: each call is repeated until the store answers).
    async fn set_up(&self, store: &FaultyStore) {
        let ctx = &self.ctx;
        self.ctx.record(
            "sim",
            Ev::Quota {
                max_pending: self.store.config().quotas.max_pending,
            },
        );
        for policy in [self.limit_policy(0), self.limit_policy(1)] {
            while store.limit_set(policy.clone()).await.is_err() {}
        }
        let schedule = self.schedule(ctx.chance(0.5));
        while store.schedule_upsert(schedule.clone()).await.is_err() {}
    }

    /// A policy for `LIMIT_KEYS[i]`: the first bounds how many run at once, the second how
    /// many are claimed per period (with a bound on running now and then).
    fn limit_policy(&self, i: usize) -> LimitPolicy {
        let ctx = &self.ctx;
        let (max_running, rate) = if i == 0 {
            let rate = ctx
                .chance(0.3)
                .then(|| Rate::new(ctx.range(2, 6) as u32, Duration::from_secs(ctx.range(1, 4))));
            (Some(ctx.range(1, 4) as u32), rate)
        } else {
            let rate = Rate::new(
                ctx.range(1, 4) as u32,
                Duration::from_millis(ctx.range(500, 4_000)),
            );
            (ctx.chance(0.3).then(|| ctx.range(1, 3) as u32), Some(rate))
        };
        let rate = rate.map(|r| r.unwrap_or_else(|e| panic!("a valid rate: {e}")));
        LimitPolicy::new(limit_key(LIMIT_KEYS[i]), max_running, rate)
            .unwrap_or_else(|e| panic!("a valid policy: {e}"))
    }

    /// The world's cron schedule, firing every 2 or every 3 seconds.
    fn schedule(&self, fast: bool) -> NewSchedule {
        let mut schedule = NewSchedule::new(
            ScheduleName::parse(SCHEDULE).unwrap_or_else(|_| unreachable!("a valid name")),
            if fast {
                "*/2 * * * * *"
            } else {
                "*/3 * * * * *"
            },
            kind(),
            json!({"tag": "cron", "h": self.ctx.range(0, u64::MAX)}),
        );
        schedule.queue = queue(QUEUES[self.ctx.range(0, QUEUES.len() as u64) as usize]);
        schedule.max_attempts = 2;
        schedule
    }

    async fn operator(self: Arc<Self>) {
        let view = FaultyStore::new(
            Arc::clone(&self.store),
            Arc::clone(&self.ctx),
            "operator",
            Gate::new(),
        );
        let client = Client::new(Arc::new(view));
        let ctx = &self.ctx;
        loop {
            tokio::time::sleep(Duration::from_millis(ctx.range(300, 3_000))).await;
            let pick = {
                let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
                (!known.is_empty()).then(|| known[ctx.range(0, known.len() as u64) as usize])
            };
            let q = queue(QUEUES[ctx.range(0, QUEUES.len() as u64) as usize]);
            match ctx.range(0, 100) {
                0..=34 => {
                    if let Some(id) = pick {
                        let _ = client.cancel(id).await;
                    }
                }
                35..=49 => {
                    if let Some(id) = pick {
                        let _ = client.retry(id).await;
                    }
                }
                50..=59 => {
                    if let Some(id) = pick {
                        let _ = client.requeue(id).await;
                    }
                }
                60..=74 => {
                    let _ = client.queue_pause(q).await;
                }
                75..=79 => {
                    if ctx.chance(0.5) {
                        let policy = self.limit_policy(ctx.range(0, 2) as usize);
                        let _ = client.limit_set(policy).await;
                    } else {
                        let schedule = self.schedule(ctx.chance(0.5));
                        let _ = client.schedule_upsert(schedule).await;
                    }
                }
                _ => {
                    let _ = client.queue_resume(q).await;
                }
            }
        }
    }
}

/// Every job in `store`, by id.
pub async fn all_jobs(store: &dyn JobStore) -> Vec<Job> {
    let mut jobs = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .jobs_list(ListJobs {
                before,
                limit: LIST_LIMIT_MAX,
                ..ListJobs::default()
            })
            .await
            .unwrap_or_else(|e| panic!("listing the memory store failed: {e}"));
        jobs.extend(page.jobs);
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    jobs.sort_by_key(|j| j.id);
    jobs
}

/// True when this build makes every seed replay exactly: tokio's `select!` draws from the
/// runtime's seeded RNG only when built with `--cfg tokio_unstable` (docs/adr/0012-simulation.md).
pub const EXACT_REPLAY: bool = cfg!(tokio_unstable);

/// Runs the world of `seed` on a fresh paused current-thread runtime.
pub fn run_world(seed: u64, options: &Options) -> WorldEnd {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().start_paused(true);
    // `tokio::select!` without `biased;` starts at a random branch; seeded, it is the seed's.
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = builder
        .build()
        .unwrap_or_else(|e| panic!("no tokio runtime: {e}"));
    let outcome = runtime.block_on(world(seed, options));
    // Dropping the runtime drops every task left (crashed workers' orphans included).
    drop(runtime);
    outcome
}

async fn world(seed: u64, options: &Options) -> WorldEnd {
    let ctx = Arc::new(Ctx::new(seed, options.rates));
    let first = JobId(
        uuid::Builder::from_unix_timestamp_millis(
            crate::clock::base().timestamp_millis() as u64,
            &[0; 10],
        )
        .into_uuid(),
    );
    let memory: Arc<dyn JobStore> = Arc::new(MemoryStore::with_clock_and_first_id(
        StoreConfig {
            quotas: Quotas {
                max_pending: ctx.chance(0.5).then(|| ctx.range(25, 80)),
                max_tenant_pending: None,
            },
            ..StoreConfig::default()
        },
        Arc::new(ctx.clock.clone()),
        first,
    ));
    let store = match &options.wrap {
        Some(wrap) => wrap(Arc::clone(&memory), &ctx.clock),
        None => Arc::clone(&memory),
    };
    let n = options.workers.unwrap_or_else(|| ctx.range(2, 5) as usize);
    let slots: Vec<Slot> = (0..n)
        .map(|_| Slot {
            gate: Gate::new(),
            task: None,
            incarnation: 0,
            name: String::new(),
            slots: ctx.range(1, 4) as usize,
            prefetch: if options.prefetch {
                ctx.range(0, 4) as usize
            } else {
                0
            },
            revive_at: None,
            shutdown: CancellationToken::new(),
            stopping: false,
        })
        .collect();
    let world = Arc::new(World {
        ctx: Arc::clone(&ctx),
        retention: Duration::from_secs(ctx.range(1, 30)),
        store,
        workers: Mutex::new(slots),
        known: Mutex::new(Vec::new()),
    });
    let setup = FaultyStore::new(
        Arc::clone(&world.store),
        Arc::clone(&ctx),
        "operator",
        Gate::new(),
    );
    world.set_up(&setup).await;
    for i in 0..n {
        world.start_worker(i);
    }
    let clients = ctx.range(1, 3) as usize;
    let mut actors: Vec<JoinHandle<()>> = (0..clients)
        .map(|c| tokio::spawn(Arc::clone(&world).client(c, options.jobs)))
        .collect();
    actors.push(tokio::spawn(Arc::clone(&world).operator()));
    if options.chaos {
        actors.push(tokio::spawn(Arc::clone(&world).chaos()));
    }
    tokio::time::sleep(Duration::from_secs(options.fault_secs)).await;

    // Quiet: no more faults, clients, operator or chaos; every worker and queue back.
    ctx.stop_faults();
    for actor in &actors {
        actor.abort();
    }
    ctx.record("sim", Ev::Quiet);
    for i in 0..n {
        // A worker stopping gracefully finishes its stop first (its grace periods are short).
        while world.workers.lock().unwrap_or_else(|e| e.into_inner())[i].stopping
            && !world.stopped(i)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        world.revive(i);
    }
    let operator = FaultyStore::new(
        Arc::clone(&world.store),
        Arc::clone(&ctx),
        "sim",
        Gate::new(),
    );
    for q in QUEUES {
        let _ = operator.queue_resume(queue(q)).await;
    }
    // No more ticks: the quiet period ends when every job is terminal.
    let _ = operator
        .schedule_remove(
            ScheduleName::parse(SCHEDULE).unwrap_or_else(|_| unreachable!("a valid name")),
        )
        .await;
    let mut settled = false;
    for _ in 0..options.quiet_max_secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if all_jobs(memory.as_ref())
            .await
            .iter()
            .all(|j| j.state.is_terminal())
        {
            settled = true;
            break;
        }
    }
    let sim_secs = ctx.clock.elapsed_us() as f64 / 1e6;
    let jobs = all_jobs(memory.as_ref()).await;
    WorldEnd {
        history: ctx.history(),
        jobs,
        faults: ctx.fault_counts(),
        sim_secs,
        settled,
    }
}

//! The runner end to end on `MemoryStore` with a `ManualClock`: jobs succeed, retry with
//! backoff, snooze, typed and bad args, panics, timeouts, graceful shutdown releasing a running
//! job (issue #2), cancel of a running job, a handler that outlives its lease (issue #4, two
//! workers), registered kinds only, pools against starvation, `max_concurrent`, progress and
//! meta, cron schedules across DST with three competing workers, retention, and the reconcile
//! sweep.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use drover_core::{
    Backoff, CancelEffect, ClaimJobs, Clock, Error, Job, JobId, JobKind, JobState, JobStore,
    ListJobs, ManualClock, NewJob, NewSchedule, QueueName, Quotas, Resolution, RunAt, ScheduleName,
    StoreConfig, WorkerId,
};
use drover_runner::{
    CancelReason, Client, KindConfig, Outcome, PoolConfig, Reconciler, Registry, TransitionEvent,
    Worker, WorkerConfig, WorkerReport,
};
use drover_store_memory::MemoryStore;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

fn kind(name: &str) -> JobKind {
    JobKind::parse(name).unwrap()
}

fn queue(name: &str) -> QueueName {
    QueueName::parse(name).unwrap()
}

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

struct Harness {
    store: Arc<MemoryStore>,
    clock: ManualClock,
}

impl Harness {
    fn new() -> Self {
        Harness::at("2026-05-01T00:00:00Z")
    }

    fn at(start: &str) -> Self {
        let clock = ManualClock::new(utc(start));
        let config = StoreConfig {
            quotas: Quotas::unbounded(),
            ..StoreConfig::default()
        };
        let store = Arc::new(MemoryStore::with_clock(config, Arc::new(clock.clone())));
        Harness { store, clock }
    }

    fn dyn_store(&self) -> Arc<dyn JobStore> {
        Arc::clone(&self.store) as Arc<dyn JobStore>
    }

    fn client(&self) -> Client {
        Client::new(self.dyn_store())
    }

    async fn enqueue(&self, job: NewJob) -> JobId {
        self.client().enqueue(job).await.unwrap().job.id
    }

    fn start(&self, registry: Registry, config: WorkerConfig) -> Running {
        self.start_worker(Worker::new(self.dyn_store(), Arc::new(registry), config).unwrap())
    }

    fn start_worker(&self, worker: Worker) -> Running {
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(worker.run(shutdown.clone()));
        Running { shutdown, handle }
    }

    async fn job(&self, id: JobId) -> Job {
        self.store.job_get(id).await.unwrap()
    }

    /// Polls the job until `done` holds (no event exists for "the store now shows X").
    async fn wait_job(&self, id: JobId, what: &str, done: impl Fn(&Job) -> bool) -> Job {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let job = self.job(id).await;
            if done(&job) {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}; job is {job:#?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    async fn wait_state(&self, id: JobId, state: JobState) -> Job {
        self.wait_job(id, state.as_str(), |job| job.state == state)
            .await
    }

    async fn list(&self, query: ListJobs) -> Vec<Job> {
        self.store.jobs_list(query).await.unwrap().jobs
    }
}

struct Running {
    shutdown: CancellationToken,
    handle: JoinHandle<Result<WorkerReport, Error>>,
}

impl Running {
    async fn stop(self) -> WorkerReport {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.handle)
            .await
            .expect("worker stops in time")
            .expect("worker task")
            .expect("worker run")
    }
}

fn config(id: &str) -> WorkerConfig {
    let mut config = WorkerConfig::default();
    config.worker_id = WorkerId::parse(id).unwrap();
    config.heartbeat_interval = Duration::from_millis(50);
    config.lease = Duration::from_secs(30);
    config.poll_interval = Duration::from_millis(5);
    config.rescue_interval = Duration::from_secs(3600);
    config.reconcile_interval = Duration::from_secs(3600);
    config.schedule_interval = Duration::from_secs(3600);
    config.prune_interval = Duration::from_secs(3600);
    config.shutdown_grace = Duration::from_secs(10);
    config.cancel_grace = Duration::from_secs(5);
    config.store_retry_min = Duration::from_millis(5);
    config.store_retry_max = Duration::from_millis(50);
    config
}

fn no_jitter(base_secs: u64) -> KindConfig {
    KindConfig::default().with_backoff(Backoff {
        base: Duration::from_secs(base_secs),
        cap: Duration::from_secs(3600),
        jitter: 0.0,
    })
}

#[tokio::test]
async fn jobs_run_and_succeed() {
    let h = Harness::new();
    let mut registry = Registry::new();
    registry.register_fn(kind("add"), |ctx| async move {
        let n = ctx.job().args["n"].as_i64().unwrap_or(0);
        Ok::<_, String>(json!({"double": n * 2}))
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<TransitionEvent>();
    let worker = Worker::new(h.dyn_store(), Arc::new(registry), config("w1"))
        .unwrap()
        .on_transition(move |event| {
            let _ = tx.send(event.clone());
        });
    let running = h.start_worker(worker);
    let mut ids = Vec::new();
    for n in 0..50 {
        ids.push(h.enqueue(NewJob::new(kind("add"), json!({"n": n}))).await);
    }
    let mut succeeded = BTreeSet::new();
    while succeeded.len() < ids.len() {
        let event = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap();
        if event.to == JobState::Succeeded {
            assert_eq!(event.from, JobState::Running);
            succeeded.insert(event.job_id);
        }
    }
    for (n, id) in ids.iter().enumerate() {
        let job = h.job(*id).await;
        assert_eq!(job.state, JobState::Succeeded);
        assert_eq!(job.attempt, 1);
        assert_eq!(job.result, Some(json!({"double": n as i64 * 2})));
        assert!(job.lease_owner.is_none());
    }
    let report = running.stop().await;
    assert_eq!(report.claimed, 50);
    assert_eq!(report.succeeded, 50);
    assert_eq!(report.unwritten, 0);
    let line = report.to_string();
    assert!(line.starts_with("worker w1: claimed 50, succeeded 50,"), "{line}");
    // Deregistered on the way out.
    assert!(h.store.workers_list().await.unwrap().is_empty());
}

#[tokio::test]
async fn failures_retry_with_backoff_until_failed() {
    let h = Harness::new();
    let mut registry = Registry::new();
    registry
        .register_fn(kind("flaky"), |ctx| async move {
            Outcome::retry(format!("smtp refused attempt {}", ctx.job().attempt))
        })
        .configure(kind("flaky"), no_jitter(10));
    let running = h.start(registry, config("w1"));
    let id = h.enqueue(NewJob::new(kind("flaky"), json!({}))).await;

    // Attempt 1 fails: queued again 10 s later (base 10 s, no jitter) by the store's clock.
    let job = h
        .wait_job(id, "first retry", |j| {
            j.state == JobState::Queued && j.attempt == 1
        })
        .await;
    assert_eq!(job.run_at, h.clock.now() + chrono::Duration::seconds(10));
    assert_eq!(job.errors[0].message, "smtp refused attempt 1");

    // Not ready before the delay; after it, attempt 2 fails and waits 20 s.
    h.clock.advance(Duration::from_secs(10));
    let job = h
        .wait_job(id, "second retry", |j| {
            j.state == JobState::Queued && j.attempt == 2
        })
        .await;
    assert_eq!(job.run_at, h.clock.now() + chrono::Duration::seconds(20));

    h.clock.advance(Duration::from_secs(20));
    let job = h.wait_state(id, JobState::Failed).await;
    assert_eq!(job.attempt, 3);
    let messages: Vec<_> = job.errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "smtp refused attempt 1",
            "smtp refused attempt 2",
            "smtp refused attempt 3"
        ]
    );
    let report = running.stop().await;
    assert_eq!((report.retried, report.failed), (2, 1));
}

#[tokio::test]
async fn snooze_runs_again_later_without_spending_an_attempt() {
    let h = Harness::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let mut registry = Registry::new();
    registry.register_fn(kind("poll"), move |_ctx| {
        let counter = Arc::clone(&counter);
        async move {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                Outcome::snooze(Duration::from_secs(30))
            } else {
                Outcome::success()
            }
        }
    });
    let running = h.start(registry, config("w1"));
    let id = h.enqueue(NewJob::new(kind("poll"), json!({}))).await;
    let job = h
        .wait_job(id, "snoozed", |j| {
            j.state == JobState::Queued && j.attempted_at.is_some()
        })
        .await;
    assert_eq!(job.attempt, 0);
    assert_eq!(job.run_at, h.clock.now() + chrono::Duration::seconds(30));
    h.clock.advance(Duration::from_secs(30));
    let job = h.wait_state(id, JobState::Succeeded).await;
    assert_eq!(job.attempt, 1);
    assert!(job.errors.is_empty());
    let report = running.stop().await;
    assert_eq!((report.snoozed, report.succeeded), (1, 1));
}

#[derive(Debug, Deserialize)]
struct Email {
    to: String,
    #[serde(default)]
    cc: Vec<String>,
}

#[tokio::test]
async fn typed_args_run_and_bad_args_fail_without_retry() {
    let h = Harness::new();
    let mut registry = Registry::new();
    registry.register_typed(kind("email.send"), |_ctx, email: Email| async move {
        Outcome::success_with(
            json!({"recipients": 1 + email.cc.len(), "domain": email.to.split('@').nth(1)}),
        )
    });
    let running = h.start(registry, config("w1"));
    let good = h
        .enqueue(NewJob::new(
            kind("email.send"),
            json!({"to": "a@example.com", "cc": ["b@example.com"]}),
        ))
        .await;
    let bad = h
        .enqueue(NewJob::new(
            kind("email.send"),
            json!({"recipient": "secret@example.com"}),
        ))
        .await;
    let job = h.wait_state(good, JobState::Succeeded).await;
    assert_eq!(
        job.result,
        Some(json!({"recipients": 2, "domain": "example.com"}))
    );
    let job = h.wait_state(bad, JobState::Failed).await;
    assert_eq!(job.attempt, 1, "bad args are not retried");
    assert_eq!(job.max_attempts, 3);
    let message = &job.errors[0].message;
    assert!(message.contains("invalid args"), "{message}");
    assert!(message.contains("Email"), "{message}");
    assert!(message.contains("missing field `to`"), "{message}");
    assert!(!message.contains("secret@example.com"), "{message}");
    running.stop().await;
}

#[tokio::test]
async fn a_panic_is_a_retryable_failure() {
    let h = Harness::new();
    let mut registry = Registry::new();
    registry
        .register_fn(kind("fragile"), |ctx| async move {
            if ctx.job().attempt == 1 {
                panic!("kaboom");
            }
            Outcome::success()
        })
        .configure(kind("fragile"), no_jitter(5));
    let running = h.start(registry, config("w1"));
    let id = h.enqueue(NewJob::new(kind("fragile"), json!({}))).await;
    let job = h
        .wait_job(id, "retry after panic", |j| {
            j.state == JobState::Queued && j.attempt == 1
        })
        .await;
    assert_eq!(job.errors[0].message, "handler panicked: kaboom");
    h.clock.advance(Duration::from_secs(5));
    let job = h.wait_state(id, JobState::Succeeded).await;
    assert_eq!(job.attempt, 2);
    running.stop().await;
}

#[tokio::test]
async fn a_timeout_cancels_the_handler_and_records_a_retryable_failure() {
    let h = Harness::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry
        .register_fn(kind("stuck"), move |ctx| {
            let tx = tx.clone();
            async move {
                ctx.cancellation().cancelled().await;
                tx.send(ctx.cancel_reason()).unwrap();
                Outcome::retry("gave up")
            }
        })
        // Ignores its token entirely: aborted after the cancel grace.
        .register_fn(kind("deaf"), |_ctx| std::future::pending::<Outcome>())
        .configure(
            kind("stuck"),
            no_jitter(60).with_timeout(Duration::from_millis(50)),
        )
        .configure(
            kind("deaf"),
            no_jitter(60).with_timeout(Duration::from_millis(50)),
        );
    let mut config = config("w1");
    config.cancel_grace = Duration::from_millis(100);
    let running = h.start(registry, config);
    let stuck = h.enqueue(NewJob::new(kind("stuck"), json!({}))).await;
    let deaf = h
        .enqueue(NewJob::new(kind("deaf"), json!({})).with_max_attempts(1))
        .await;
    assert_eq!(
        tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap(),
        Some(CancelReason::Timeout)
    );
    let job = h
        .wait_job(stuck, "timed-out retry", |j| {
            j.state == JobState::Queued && j.attempt == 1
        })
        .await;
    assert_eq!(job.errors[0].message, "timed out after 50 ms");
    assert_eq!(job.run_at, h.clock.now() + chrono::Duration::seconds(60));
    let job = h.wait_state(deaf, JobState::Failed).await;
    assert_eq!(job.errors[0].message, "timed out after 50 ms");
    running.stop().await;
}

/// THE must-show test of issue #2: shutdown while a handler still runs releases the job, with
/// its attempt given back and the job queued.
#[tokio::test]
async fn shutdown_releases_a_running_job_without_spending_an_attempt() {
    let h = Harness::new();
    let started = Arc::new(Notify::new());
    let mut registry = Registry::new();
    let signal = Arc::clone(&started);
    registry.register_fn(kind("long"), move |ctx| {
        let signal = Arc::clone(&signal);
        async move {
            signal.notify_one();
            ctx.cancellation().cancelled().await;
            assert_eq!(ctx.cancel_reason(), Some(CancelReason::Shutdown));
            Outcome::retry("interrupted by shutdown")
        }
    });
    let started_deaf = Arc::new(Notify::new());
    let signal = Arc::clone(&started_deaf);
    registry.register_fn(kind("deaf"), move |_ctx| {
        let signal = Arc::clone(&signal);
        async move {
            signal.notify_one();
            std::future::pending::<Outcome>().await
        }
    });
    let mut config = config("w1");
    config.shutdown_grace = Duration::from_millis(100);
    config.cancel_grace = Duration::from_millis(100);
    let running = h.start(registry, config);
    let id = h.enqueue(NewJob::new(kind("long"), json!({}))).await;
    let deaf = h.enqueue(NewJob::new(kind("deaf"), json!({}))).await;
    tokio::time::timeout(WAIT, started.notified())
        .await
        .unwrap();
    tokio::time::timeout(WAIT, started_deaf.notified())
        .await
        .unwrap();
    assert_eq!(h.job(id).await.attempt, 1);

    let report = running.stop().await;
    assert_eq!(report.released, 2);
    for id in [id, deaf] {
        let job = h.job(id).await;
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.attempt, 0, "a graceful release spends no attempt");
        assert!(job.errors.is_empty());
        assert!(job.lease_owner.is_none());
        assert!(job.run_at <= h.clock.now(), "ready at once");
    }
}

#[tokio::test]
async fn a_job_finishing_within_the_grace_period_or_succeeding_anyway_succeeds() {
    let h = Harness::new();
    let started = Arc::new(Notify::new());
    let signal = Arc::clone(&started);
    let mut registry = Registry::new();
    registry.register_fn(kind("stubborn"), move |ctx| {
        let signal = Arc::clone(&signal);
        async move {
            signal.notify_one();
            ctx.cancellation().cancelled().await;
            // The work completed anyway: recorded as success, not released.
            Outcome::success_with("done")
        }
    });
    let mut config = config("w1");
    config.shutdown_grace = Duration::from_millis(50);
    let running = h.start(registry, config);
    let id = h.enqueue(NewJob::new(kind("stubborn"), json!({}))).await;
    tokio::time::timeout(WAIT, started.notified())
        .await
        .unwrap();
    let report = running.stop().await;
    assert_eq!((report.succeeded, report.released), (1, 0));
    let job = h.job(id).await;
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(job.result, Some(json!("done")));
}

#[tokio::test]
async fn cancel_of_a_running_job_reaches_the_handler_and_it_ends_cancelled() {
    let h = Harness::new();
    let started = Arc::new(Notify::new());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let signal = Arc::clone(&started);
    let mut registry = Registry::new();
    registry.register_fn(kind("long"), move |ctx| {
        let signal = Arc::clone(&signal);
        let tx = tx.clone();
        async move {
            signal.notify_one();
            ctx.cancellation().cancelled().await;
            tx.send(ctx.cancel_reason()).unwrap();
            Outcome::cancelled("stopped on request")
        }
    });
    // Heartbeats far apart: the store's CancelRequested event must reach the handler.
    let mut config = config("w1");
    config.heartbeat_interval = Duration::from_secs(10);
    let running = h.start(registry, config);
    let id = h.enqueue(NewJob::new(kind("long"), json!({}))).await;
    tokio::time::timeout(WAIT, started.notified())
        .await
        .unwrap();
    let answer = h.client().cancel(id).await.unwrap();
    assert_eq!(answer.effect, CancelEffect::Requested);
    assert_eq!(
        tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap(),
        Some(CancelReason::CancelRequested)
    );
    let job = h.wait_state(id, JobState::Cancelled).await;
    assert_eq!(job.errors.last().unwrap().message, "stopped on request");
    let report = running.stop().await;
    assert_eq!(report.cancelled, 1);
}

/// THE must-show test of issue #4: a handler outlives its lease; the job is rescued and run by
/// a second worker; the first worker's late completion is rejected and never overwrites the
/// second's result.
#[tokio::test]
async fn a_late_completion_after_lease_loss_is_rejected() {
    let h = Harness::new();
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let mut registry_a = Registry::new();
    let (signal, gate) = (Arc::clone(&started), Arc::clone(&release));
    registry_a.register_fn(kind("long"), move |_ctx| {
        let (signal, gate) = (Arc::clone(&signal), Arc::clone(&gate));
        async move {
            signal.notify_one();
            gate.notified().await;
            Outcome::success_with("from A")
        }
    });
    let mut config_a = config("worker-a");
    config_a.pools[0].slots_per_queue = 1;
    // A's heartbeat would only come after the test is over.
    config_a.heartbeat_interval = Duration::from_secs(20);
    let worker_a = h.start(registry_a, config_a);
    let id = h.enqueue(NewJob::new(kind("long"), json!({}))).await;
    tokio::time::timeout(WAIT, started.notified())
        .await
        .unwrap();
    let first = h.job(id).await;
    assert_eq!(
        first.lease_owner.as_ref().map(|w| w.as_str()),
        Some("worker-a")
    );

    // The lease (30 s) expires by the store's clock while A's handler still runs.
    h.clock.advance(Duration::from_secs(31));
    let mut registry_b = Registry::new();
    registry_b.register_fn(kind("long"), |_ctx| async {
        Outcome::success_with("from B")
    });
    let mut config_b = config("worker-b");
    config_b.rescue_interval = Duration::from_millis(10);
    let worker_b = h.start(registry_b, config_b);
    let job = h.wait_state(id, JobState::Succeeded).await;
    assert_eq!(job.result, Some(json!("from B")));
    assert_eq!(job.attempt, 2);
    assert!(job.fencing_token > first.fencing_token);
    assert!(job.errors[0].message.contains("lease expired"));
    let report_b = worker_b.stop().await;
    assert_eq!(report_b.rescued, 1);

    // A finishes late: its write presents a stale token and is refused.
    release.notify_one();
    let report_a = worker_a.stop().await;
    assert_eq!(report_a.lease_lost, 1);
    assert_eq!(report_a.succeeded, 0);
    let job = h.job(id).await;
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(
        job.result,
        Some(json!("from B")),
        "A's late result must not win"
    );
}

#[tokio::test]
async fn only_registered_kinds_are_claimed() {
    let h = Harness::new();
    let mut registry = Registry::new();
    registry.register_fn(kind("known"), |_ctx| async { Outcome::success() });
    let running = h.start(registry, config("w1"));
    let unknown = h
        .enqueue(NewJob::new(kind("only.in.new.code"), json!({})))
        .await;
    let known = h.enqueue(NewJob::new(kind("known"), json!({}))).await;
    h.wait_state(known, JobState::Succeeded).await;
    running.stop().await;
    let job = h.job(unknown).await;
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.attempt, 0);
    assert!(job.attempted_at.is_none());
}

#[tokio::test]
async fn a_long_kind_in_its_own_pool_cannot_starve_the_others() {
    let h = Harness::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut registry = Registry::new();
    let slow_gate = Arc::clone(&gate);
    registry
        .register_fn(kind("slow"), move |_ctx| {
            let gate = Arc::clone(&slow_gate);
            async move {
                let _permit = gate.acquire().await.unwrap();
                Outcome::success()
            }
        })
        .register_fn(kind("fast"), |_ctx| async { Outcome::success() });
    let mut config = config("w1");
    config.pools = vec![
        PoolConfig::new("slow", vec![queue("default")], 2).with_kinds(vec![kind("slow")]),
        PoolConfig::new("general", vec![queue("default")], 2).with_kinds(vec![kind("fast")]),
    ];
    let running = h.start(registry, config);
    let mut slow = Vec::new();
    for _ in 0..4 {
        slow.push(h.enqueue(NewJob::new(kind("slow"), json!({}))).await);
    }
    let mut fast = Vec::new();
    for _ in 0..20 {
        fast.push(h.enqueue(NewJob::new(kind("fast"), json!({}))).await);
    }
    for id in &fast {
        h.wait_state(*id, JobState::Succeeded).await;
    }
    // The slow pool is full and stays full; the general pool ran everything else.
    let running_slow = h
        .list(ListJobs {
            kind: Some(kind("slow")),
            state: Some(JobState::Running),
            ..ListJobs::default()
        })
        .await;
    assert_eq!(running_slow.len(), 2);
    gate.add_permits(4);
    for id in &slow {
        h.wait_state(*id, JobState::Succeeded).await;
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_caps_executions_over_all_pools() {
    let h = Harness::new();
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut registry = Registry::new();
    let (current, highest) = (Arc::clone(&now), Arc::clone(&peak));
    registry.register_fn(kind("work"), move |_ctx| {
        let (current, highest) = (Arc::clone(&current), Arc::clone(&highest));
        async move {
            let running = current.fetch_add(1, Ordering::SeqCst) + 1;
            highest.fetch_max(running, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
            current.fetch_sub(1, Ordering::SeqCst);
            Outcome::success()
        }
    });
    let mut config = config("w1");
    config.pools = vec![
        PoolConfig::new("a", vec![queue("default"), queue("mail")], 4),
        PoolConfig::new("b", vec![queue("reports")], 4),
    ];
    config.max_concurrent = Some(3);
    let running = h.start(registry, config);
    let mut ids = Vec::new();
    for i in 0..60 {
        let q = ["default", "mail", "reports"][i % 3];
        ids.push(
            h.enqueue(NewJob::new(kind("work"), json!({})).with_queue(queue(q)))
                .await,
        );
    }
    for id in &ids {
        h.wait_state(*id, JobState::Succeeded).await;
    }
    running.stop().await;
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 3, "{peak} jobs ran at once with max_concurrent 3");
    assert!(peak >= 2, "jobs should run concurrently, peak was {peak}");
}

#[tokio::test]
async fn progress_and_meta_are_saved_by_heartbeats_and_before_the_outcome() {
    let h = Harness::new();
    let release = Arc::new(Notify::new());
    let gate = Arc::clone(&release);
    let mut registry = Registry::new();
    registry.register_fn(kind("report"), move |ctx| {
        let gate = Arc::clone(&gate);
        async move {
            ctx.step("render", "page 1 of 2");
            ctx.set_meta(json!({"phase": "render"})).unwrap();
            gate.notified().await;
            ctx.step("render", "page 2 of 2");
            ctx.set_meta(json!({"phase": "done"})).unwrap();
            Outcome::success()
        }
    });
    let running = h.start(registry, config("w1"));
    let id = h.enqueue(NewJob::new(kind("report"), json!({}))).await;
    let job = h
        .wait_job(id, "progress saved", |j| j.progress.is_some())
        .await;
    assert_eq!(
        job.progress,
        Some(json!({"step": "render", "detail": "page 1 of 2"}))
    );
    assert_eq!(job.meta, json!({"phase": "render"}));
    assert_eq!(job.state, JobState::Running);
    release.notify_one();
    let job = h.wait_state(id, JobState::Succeeded).await;
    assert_eq!(
        job.progress,
        Some(json!({"step": "render", "detail": "page 2 of 2"}))
    );
    assert_eq!(job.meta, json!({"phase": "done"}));
    running.stop().await;
}

/// Steps the clock through `steps` with three competing workers; a probe schedule firing
/// every second proves a scheduler pass ran at each step. Returns the ticks `nightly` fired.
async fn run_schedule(start: &str, steps: &[&str]) -> Vec<String> {
    let h = Harness::at(start);
    h.store
        .schedule_upsert(NewSchedule {
            timezone: "Europe/Berlin".into(),
            ..NewSchedule::new(
                ScheduleName::parse("nightly").unwrap(),
                "30 2 * * *",
                kind("nightly"),
                json!({}),
            )
        })
        .await
        .unwrap();
    h.store
        .schedule_upsert(NewSchedule::new(
            ScheduleName::parse("probe").unwrap(),
            "* * * * * *",
            kind("probe"),
            json!({}),
        ))
        .await
        .unwrap();
    let mut workers = Vec::new();
    for name in ["s1", "s2", "s3"] {
        let mut registry = Registry::new();
        registry
            .register_fn(kind("nightly"), |_ctx| async { Outcome::success() })
            .register_fn(kind("probe"), |_ctx| async { Outcome::success() });
        let mut config = config(name);
        config.schedule_interval = Duration::from_millis(2);
        workers.push(h.start(registry, config));
    }
    for step in steps {
        h.clock.set(utc(step));
        let tick = utc(step).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let probes = h
                .list(ListJobs {
                    meta: Some(json!({"schedule": "probe", "tick": tick})),
                    ..ListJobs::default()
                })
                .await;
            if !probes.is_empty() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no scheduler pass at {step}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let mut fired = 0;
    for worker in workers {
        fired += worker.stop().await.schedules_fired;
    }
    let nightly = h
        .list(ListJobs {
            kind: Some(kind("nightly")),
            ..ListJobs::default()
        })
        .await;
    let probes = h
        .list(ListJobs {
            kind: Some(kind("probe")),
            ..ListJobs::default()
        })
        .await;
    assert_eq!(probes.len(), steps.len(), "one probe job per step");
    assert_eq!(
        fired as usize,
        nightly.len() + probes.len(),
        "each tick fired exactly once across the three workers"
    );
    let mut ticks: Vec<String> = nightly
        .iter()
        .map(|job| job.meta["tick"].as_str().unwrap().to_owned())
        .collect();
    ticks.sort();
    ticks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_fire_once_per_tick_across_workers_in_berlin_autumn() {
    // 2026-10-25: 03:00 CEST -> 02:00 CET, so 02:30 happens twice; it fires at the first.
    let ticks = run_schedule(
        "2026-10-24T12:00:00Z",
        &[
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:30:00Z", // 02:30 CEST: fires
            "2026-10-25T01:00:00Z", // 02:00 CET
            "2026-10-25T01:30:00Z", // 02:30 CET, the repeat: must not fire
            "2026-10-25T12:00:00Z",
            "2026-10-26T01:30:00Z", // 02:30 CET next day: fires
        ],
    )
    .await;
    assert_eq!(
        ticks,
        ["2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_fire_once_per_tick_across_workers_in_berlin_spring() {
    // 2026-03-29: 02:00 CET -> 03:00 CEST, so 02:30 does not exist; it fires at 03:00 CEST.
    let ticks = run_schedule(
        "2026-03-27T12:00:00Z",
        &[
            "2026-03-28T01:30:00Z", // 02:30 CET: fires
            "2026-03-29T00:30:00Z", // 01:30 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST, first instant after the gap: fires
            "2026-03-29T01:30:00Z", // 03:30 CEST
            "2026-03-30T00:30:00Z", // 02:30 CEST: fires
        ],
    )
    .await;
    assert_eq!(
        ticks,
        [
            "2026-03-28T01:30:00.000Z",
            "2026-03-29T01:00:00.000Z",
            "2026-03-30T00:30:00.000Z"
        ]
    );
}

#[tokio::test]
async fn retention_prunes_old_terminal_jobs_and_never_live_ones() {
    let h = Harness::new();
    let mut registry = Registry::new();
    registry
        .register_fn(kind("quick"), |_ctx| async { Outcome::success() })
        .register_fn(kind("doomed"), |_ctx| async {
            Outcome::discard("bad input")
        });
    let mut config = config("w1");
    config.retention = Duration::from_secs(24 * 3600);
    config.prune_limit = 2;
    config.prune_interval = Duration::from_millis(5);
    let running = h.start(registry, config);

    // Old terminal jobs: five succeeded and one failed, finished at t0.
    let mut old = Vec::new();
    for _ in 0..5 {
        old.push(h.enqueue(NewJob::new(kind("quick"), json!({}))).await);
    }
    old.push(h.enqueue(NewJob::new(kind("doomed"), json!({}))).await);
    for id in &old {
        h.wait_job(*id, "terminal", |j| j.state.is_terminal()).await;
    }
    // A job far in the future and a running job (claimed by a crashed worker, lease expired
    // by the end, but the rescuer is not due) are never pruned.
    let future = h
        .enqueue(
            NewJob::new(kind("quick"), json!({}))
                .with_run_at(RunAt::At(h.clock.now() + chrono::Duration::days(365))),
        )
        .await;
    let running_id = h.enqueue(NewJob::new(kind("orphan"), json!({}))).await;
    let claimed = h
        .store
        .jobs_claim(ClaimJobs {
            worker: WorkerId::parse("crashed").unwrap(),
            queues: vec![queue("default")],
            kinds: vec![kind("orphan")],
            limit: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!(claimed[0].id, running_id);

    // Twelve hours later a recent job finishes; 13 hours after that the old ones are 25 h old.
    h.clock.advance(Duration::from_secs(12 * 3600));
    let recent = h.enqueue(NewJob::new(kind("quick"), json!({}))).await;
    h.wait_state(recent, JobState::Succeeded).await;
    h.clock.advance(Duration::from_secs(13 * 3600));

    let deadline = tokio::time::Instant::now() + WAIT;
    for id in &old {
        while h.store.job_get(*id).await.is_ok() {
            assert!(tokio::time::Instant::now() < deadline, "old job not pruned");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let report = running.stop().await;
    assert!(report.pruned >= 6);
    assert_eq!(h.job(recent).await.state, JobState::Succeeded);
    assert_eq!(h.job(future).await.state, JobState::Queued);
    assert_eq!(h.job(running_id).await.state, JobState::Running);
}

/// Inconclusive on the first call, succeeded on the second.
struct DeployReconciler {
    calls: Mutex<u32>,
}

#[async_trait]
impl Reconciler for DeployReconciler {
    async fn reconcile(&self, job: &Job, _cancel: CancellationToken) -> Result<Resolution, String> {
        assert_eq!(job.state, JobState::Reconciling);
        let mut calls = self.calls.lock().unwrap();
        *calls += 1;
        match *calls {
            1 => Ok(Resolution::Inconclusive),
            2 => Err("host unreachable".into()),
            _ => Ok(Resolution::Succeeded),
        }
    }
}

#[tokio::test]
async fn the_reconcile_sweep_resolves_a_rescued_reconciling_job() {
    let h = Harness::new();
    let id = h.enqueue(NewJob::new(kind("deploy"), json!({}))).await;
    // A worker that crashed mid-deploy: its lease expires.
    h.store
        .jobs_claim(ClaimJobs {
            worker: WorkerId::parse("crashed").unwrap(),
            queues: vec![queue("default")],
            kinds: vec![kind("deploy")],
            limit: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    h.clock.advance(Duration::from_secs(61));

    let reconciler = Arc::new(DeployReconciler {
        calls: Mutex::new(0),
    });
    let mut registry = Registry::new();
    registry
        .register_fn(kind("other"), |_ctx| async { Outcome::success() })
        .register_reconciler(kind("deploy"), SharedReconciler(Arc::clone(&reconciler)));
    let (tx, mut rx) = mpsc::unbounded_channel::<TransitionEvent>();
    let mut config = config("w1");
    config.rescue_interval = Duration::from_millis(5);
    config.reconcile_interval = Duration::from_millis(5);
    let worker = Worker::new(h.dyn_store(), Arc::new(registry), config)
        .unwrap()
        .on_transition(move |event| {
            let _ = tx.send(event.clone());
        });
    let running = h.start_worker(worker);
    let job = h.wait_state(id, JobState::Succeeded).await;
    assert!(job.errors[0].message.contains("lease expired"));
    assert!(*reconciler.calls.lock().unwrap() >= 3);
    let report = running.stop().await;
    assert_eq!((report.rescued, report.reconciled), (1, 1));
    let mut seen = Vec::new();
    while let Ok(event) = rx.try_recv() {
        seen.push((event.from, event.to));
    }
    assert_eq!(
        seen,
        [
            (JobState::Running, JobState::Reconciling),
            (JobState::Reconciling, JobState::Succeeded)
        ]
    );
}

struct SharedReconciler(Arc<DeployReconciler>);

#[async_trait]
impl Reconciler for SharedReconciler {
    async fn reconcile(&self, job: &Job, cancel: CancellationToken) -> Result<Resolution, String> {
        self.0.reconcile(job, cancel).await
    }
}

//! Runner interactions with a `MockJobStore` (mockall): the faults and call shapes the memory
//! store cannot produce — a heartbeat answering `LeaseLost`, transient `Unavailable` on claim
//! and heartbeat, `Fatal`, and the `limit` of every claim against the free capacity.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use drover_core::{
    Claimed, Error, Finish, FinishItem, FinishReply, HeartbeatJobs, HeartbeatReply, Job, JobId,
    JobKind, JobState, MockJobStore, NewJob, QueueName, StoreConfig, StoreEvent, WorkerInfo,
    WorkerRegistration,
};
use drover_runner::{
    CancelReason, Outcome, PoolConfig, Registry, Worker, WorkerConfig, WorkerReport,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);

fn kind(name: &str) -> JobKind {
    JobKind::parse(name).unwrap()
}

fn queue(name: &str) -> QueueName {
    QueueName::parse(name).unwrap()
}

/// A job as a claim returns it: running, attempt 1, token 1.
fn claimed(kind_name: &str, queue_name: &str) -> Job {
    let now = Utc::now();
    let mut job = NewJob::new(kind(kind_name), serde_json::json!({}))
        .with_queue(queue(queue_name))
        .into_job(JobId::new_v7(), now);
    job.state = JobState::Running;
    job.attempt = 1;
    job.fencing_token = drover_core::FencingToken(1);
    job.lease_expires_at = Some(now + chrono::Duration::seconds(60));
    job.attempted_at = Some(now);
    job.started_at = Some(now);
    job
}

fn worker_info(registration: WorkerRegistration) -> WorkerInfo {
    WorkerInfo {
        id: registration.id,
        host: registration.host,
        pid: registration.pid,
        queues: registration.queues,
        started_at: Utc::now(),
        last_heartbeat_at: Utc::now(),
    }
}

/// A mock answering registration, events and maintenance calls harmlessly; tests add claim,
/// heartbeat and finish expectations.
fn base_store() -> MockJobStore {
    base_store_with_events(None)
}

/// [`base_store`] whose first subscription yields `events` (later ones, and every one without
/// it, never yield).
fn base_store_with_events(
    events: Option<futures::channel::mpsc::UnboundedReceiver<StoreEvent>>,
) -> MockJobStore {
    let mut store = MockJobStore::new();
    store.expect_config().returning(StoreConfig::default);
    store
        .expect_worker_register()
        .returning(|registration| Ok(worker_info(registration)));
    store.expect_worker_deregister().returning(|_| Ok(()));
    store.expect_activity_record().returning(|_| Ok(()));
    let events = Mutex::new(events);
    store.expect_subscribe().returning(move || {
        Ok(match events.lock().unwrap().take() {
            Some(events) => Box::pin(events),
            None => Box::pin(futures::stream::pending()),
        })
    });
    store.expect_jobs_rescue_expired().returning(|_| Ok(vec![]));
    store.expect_now().returning(|| Ok(Utc::now()));
    store.expect_schedules_list().returning(|| Ok(vec![]));
    store.expect_jobs_prune().returning(|_| Ok(0));
    store.expect_workers_prune().returning(|_| Ok(0));
    store.expect_vacuum_status().returning(|| Ok(None));
    store
}

fn fast_config() -> WorkerConfig {
    let mut config = WorkerConfig::default();
    config.heartbeat_interval = Duration::from_millis(50);
    config.lease = Duration::from_secs(5);
    config.poll_interval = Duration::from_millis(10);
    config.shutdown_grace = Duration::from_secs(5);
    config.cancel_grace = Duration::from_secs(1);
    config.store_retry_min = Duration::from_millis(5);
    config.store_retry_max = Duration::from_millis(50);
    config
}

/// Every job of a heartbeat extended, no cancel requested.
fn extended(heartbeat: &HeartbeatJobs) -> Vec<HeartbeatReply> {
    heartbeat
        .jobs
        .iter()
        .map(|item| HeartbeatReply::Extended {
            id: item.id,
            cancel_requested: false,
            lease_expires_at: Utc::now(),
        })
        .collect()
}

fn recorded(items: &[FinishItem]) -> Vec<FinishReply> {
    items
        .iter()
        .map(|item| FinishReply::Recorded {
            id: item.id,
            to: JobState::Succeeded,
        })
        .collect()
}

async fn stop(
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<Result<WorkerReport, Error>>,
) -> Result<WorkerReport, Error> {
    shutdown.cancel();
    tokio::time::timeout(WAIT, handle)
        .await
        .expect("worker stops")
        .expect("worker task")
}

#[tokio::test]
async fn heartbeat_lease_lost_cancels_the_handler_and_nothing_is_finished() {
    let job = claimed("slow", "default");
    let job_id = job.id;
    let mut store = base_store();
    let pending = Mutex::new(Some(job));
    store.expect_jobs_claim().returning(move |_| {
        Ok(Claimed::jobs(
            pending.lock().unwrap().take().into_iter().collect(),
        ))
    });
    store.expect_jobs_heartbeat().returning(|heartbeat| {
        Ok(heartbeat
            .jobs
            .iter()
            .map(|item| HeartbeatReply::LeaseLost { id: item.id })
            .collect())
    });
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    let finished: Arc<Mutex<Vec<JobId>>> = Arc::default();
    let log = Arc::clone(&finished);
    store.expect_jobs_finish().returning(move |items| {
        log.lock().unwrap().extend(items.iter().map(|item| item.id));
        Ok(recorded(&items))
    });

    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry.register_fn(kind("slow"), move |ctx| {
        let tx = tx.clone();
        async move {
            ctx.cancellation().cancelled().await;
            tx.send(ctx.cancel_reason()).unwrap();
            Outcome::retry("stopped after losing the lease")
        }
    });
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config()).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));

    let reason = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, Some(CancelReason::LeaseLost));
    let report = stop(shutdown, handle).await.unwrap();
    assert_eq!(report.lease_lost, 1);
    assert_eq!(report.claimed, 1);
    assert!(
        !finished.lock().unwrap().contains(&job_id),
        "no jobs_finish may carry a job whose lease was lost"
    );
}

/// A `Deferred` heartbeat reply (the job's row busy with another write) changes nothing: the
/// handler keeps running, and the next heartbeat carries the progress the deferred one did.
#[tokio::test]
async fn a_deferred_heartbeat_keeps_the_handler_and_carries_its_progress_again() {
    let job = claimed("steps", "default");
    let mut store = base_store();
    let pending = Mutex::new(Some(job));
    store.expect_jobs_claim().returning(move |_| {
        Ok(Claimed::jobs(
            pending.lock().unwrap().take().into_iter().collect(),
        ))
    });
    let (beats_tx, mut beats) = mpsc::unbounded_channel();
    let deferred_once = Mutex::new(false);
    store.expect_jobs_heartbeat().returning(move |heartbeat| {
        let progress: Vec<Option<Value>> = heartbeat
            .jobs
            .iter()
            .map(|item| item.progress.clone())
            .collect();
        let mut deferred = deferred_once.lock().unwrap();
        let carried = progress.iter().any(Option::is_some);
        let replies = if carried && !*deferred {
            *deferred = true;
            heartbeat
                .jobs
                .iter()
                .map(|item| HeartbeatReply::Deferred { id: item.id })
                .collect()
        } else {
            extended(&heartbeat)
        };
        beats_tx.send(progress).unwrap();
        Ok(replies)
    });
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    let finished: Arc<Mutex<Vec<FinishItem>>> = Arc::default();
    let log = Arc::clone(&finished);
    store.expect_jobs_finish().returning(move |items| {
        log.lock().unwrap().extend(items.iter().cloned());
        Ok(recorded(&items))
    });
    let (done_tx, done) = tokio::sync::oneshot::channel::<()>();
    let done = Arc::new(tokio::sync::Mutex::new(Some(done)));
    let mut registry = Registry::new();
    registry.register_fn(kind("steps"), move |ctx| {
        let done = Arc::clone(&done);
        async move {
            ctx.step("copy", json!({ "files": 3 }));
            let done = done.lock().await.take().unwrap();
            let cancellation = ctx.cancellation();
            tokio::select! {
                _ = done => Outcome::success(),
                () = cancellation.cancelled() => Outcome::retry("cancelled"),
            }
        }
    });
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config()).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));

    // Beats until the one after the deferred one: it carries the same progress again.
    let (mut carrying, mut beaten) = (0, 0);
    while carrying < 2 {
        beaten += 1;
        assert!(
            beaten < 100,
            "no heartbeat carried the deferred progress again"
        );
        let progress = tokio::time::timeout(WAIT, beats.recv())
            .await
            .expect("a heartbeat")
            .unwrap();
        if progress.iter().any(Option::is_some) {
            carrying += 1;
        }
    }
    done_tx.send(()).unwrap();
    let finish = until_finished(&finished).await;
    assert_eq!(finish.finish, Finish::Succeeded { result: None });
    let report = stop(shutdown, handle).await.unwrap();
    assert_eq!(report.lease_lost, 0);
}

/// The order of store calls, as seen by the mock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Claim,
    ClaimFailed,
    HeartbeatOk,
    HeartbeatFailed,
}

#[tokio::test]
async fn unavailable_claim_pauses_claims_until_a_heartbeat_succeeds() {
    let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
    let mut store = base_store();
    let log = Arc::clone(&calls);
    store.expect_jobs_claim().returning(move |_| {
        let mut log = log.lock().unwrap();
        if log.is_empty() {
            log.push(Call::ClaimFailed);
            Err(Error::unavailable("connection reset"))
        } else {
            log.push(Call::Claim);
            Ok(Claimed::default())
        }
    });
    store.expect_jobs_heartbeat().returning(|_| Ok(vec![]));
    let log = Arc::clone(&calls);
    store.expect_worker_heartbeat().returning(move |_| {
        log.lock().unwrap().push(Call::HeartbeatOk);
        Ok(())
    });
    store
        .expect_jobs_finish()
        .returning(|items| Ok(recorded(&items)));
    let mut registry = Registry::new();
    registry.register_fn(kind("a"), |_| async { Outcome::success() });
    let mut config = fast_config();
    // The regular heartbeat is far away: only the probe after the failure can reopen claims.
    config.heartbeat_interval = Duration::from_secs(3);
    config.lease = Duration::from_secs(9);
    let worker = Worker::new(Arc::new(store), Arc::new(registry), config).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));

    let deadline = tokio::time::Instant::now() + WAIT;
    while !calls.lock().unwrap().contains(&Call::Claim) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "claims never resumed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop(shutdown, handle).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    let failed = calls.iter().position(|c| *c == Call::ClaimFailed).unwrap();
    let resumed = calls.iter().position(|c| *c == Call::Claim).unwrap();
    assert!(
        calls[failed..resumed].contains(&Call::HeartbeatOk),
        "claims resumed without a successful heartbeat: {calls:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn unavailable_heartbeat_pauses_claims_until_a_heartbeat_succeeds() {
    let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
    let mut store = base_store();
    let log = Arc::clone(&calls);
    store.expect_jobs_claim().returning(move |_| {
        log.lock().unwrap().push(Call::Claim);
        Ok(Claimed::default())
    });
    store.expect_jobs_heartbeat().returning(|_| Ok(vec![]));
    let log = Arc::clone(&calls);
    let beats = AtomicUsize::new(0);
    store.expect_worker_heartbeat().returning(move |_| {
        // Beats 2 to 4 fail: the store is down for a while.
        let n = beats.fetch_add(1, Ordering::SeqCst) + 1;
        if (2..=4).contains(&n) {
            log.lock().unwrap().push(Call::HeartbeatFailed);
            Err(Error::unavailable("database restarting"))
        } else {
            log.lock().unwrap().push(Call::HeartbeatOk);
            Ok(())
        }
    });
    store
        .expect_jobs_finish()
        .returning(|items| Ok(recorded(&items)));
    let mut registry = Registry::new();
    registry.register_fn(kind("a"), |_| async { Outcome::success() });
    let mut config = fast_config();
    config.heartbeat_interval = Duration::from_millis(30);
    let worker = Worker::new(Arc::new(store), Arc::new(registry), config).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));

    // Wait for a claim after the failures ended.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        {
            let calls = calls.lock().unwrap();
            let last_failure = calls.iter().rposition(|c| *c == Call::HeartbeatFailed);
            if let Some(at) = last_failure {
                if calls[at..].contains(&Call::Claim) {
                    break;
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "claims never resumed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop(shutdown, handle).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    let first_failure = calls
        .iter()
        .position(|c| *c == Call::HeartbeatFailed)
        .unwrap();
    let recovered = first_failure
        + calls[first_failure..]
            .iter()
            .position(|c| *c == Call::HeartbeatOk)
            .unwrap();
    assert!(
        calls[first_failure..recovered]
            .iter()
            .all(|c| *c != Call::Claim),
        "a claim was made while the store was unhealthy: {calls:?}"
    );
    assert!(calls[..first_failure].contains(&Call::Claim));
    assert!(calls[recovered..].contains(&Call::Claim));
}

#[tokio::test]
async fn fatal_error_stops_run_with_the_error() {
    let mut store = base_store();
    store.expect_jobs_claim().returning(|_| {
        Err(Error::fatal(
            "schema drover is missing: run `drover migrate` first",
        ))
    });
    store.expect_jobs_heartbeat().returning(|_| Ok(vec![]));
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    store
        .expect_jobs_finish()
        .returning(|items| Ok(recorded(&items)));
    let mut registry = Registry::new();
    registry.register_fn(kind("a"), |_| async { Outcome::success() });
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config()).unwrap();
    // Never cancelled: the fatal error alone must end `run`.
    let result = tokio::time::timeout(WAIT, worker.run(CancellationToken::new()))
        .await
        .expect("run returns on a fatal error");
    match result {
        Err(Error::Fatal { message, .. }) => assert!(message.contains("drover migrate")),
        other => panic!("expected the fatal error, got {other:?}"),
    }
}

#[tokio::test]
async fn fatal_error_at_registration_is_returned() {
    let mut store = MockJobStore::new();
    store.expect_config().returning(StoreConfig::default);
    store.expect_worker_register().returning(|_| {
        Err(Error::fatal(
            "relation drover.workers does not exist: run `drover migrate`",
        ))
    });
    let mut registry = Registry::new();
    registry.register_fn(kind("a"), |_| async { Outcome::success() });
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config()).unwrap();
    let result = worker.run(CancellationToken::new()).await;
    assert!(matches!(result, Err(Error::Fatal { .. })), "{result:?}");
}

/// Shared bookkeeping of the capacity test.
#[derive(Default)]
struct Capacity {
    /// Jobs claimed whose handler has not returned, per queue.
    held: HashMap<String, usize>,
    /// Jobs whose handler runs, per queue.
    running: HashMap<String, usize>,
    /// Every limit asked for, with the queue.
    limits: Vec<(String, u32)>,
    /// Broken promises.
    violations: Vec<String>,
    claimed: usize,
    /// Jobs handed out claimed ahead (not started by their claim).
    ahead: HashSet<JobId>,
    /// Jobs whose start a heartbeat or a finish reported.
    starts_reported: HashSet<JobId>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_never_asks_for_more_than_free_capacity() {
    capacity_case(0).await;
}

/// A claim loop claims ahead only once a job of it ran short: the first claim asks for the
/// slots alone; after one job that finished at once, the next claim (woken by an event) asks
/// for every free slot plus every claim-ahead place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_after_a_short_job_takes_claim_ahead_places() {
    const SLOTS: usize = 4;
    const PREFETCH: usize = 3;
    let (events_tx, events_rx) = futures::channel::mpsc::unbounded::<StoreEvent>();
    let mut store = base_store_with_events(Some(events_rx));
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    store
        .expect_jobs_heartbeat()
        .returning(|heartbeat| Ok(extended(&heartbeat)));
    let (limits_tx, mut limits_rx) = mpsc::unbounded_channel::<(u32, u32)>();
    let handed_out = AtomicUsize::new(0);
    store.expect_jobs_claim().returning(move |claim| {
        let _ = limits_tx.send((claim.limit, claim.start));
        // One job in all, so the loop's first claim comes back short of its request.
        Ok(Claimed::jobs(
            if handed_out.fetch_add(1, Ordering::SeqCst) == 0 {
                vec![claimed("work", "default")]
            } else {
                vec![]
            },
        ))
    });
    let (finished_tx, mut finished_rx) = mpsc::unbounded_channel::<()>();
    store.expect_jobs_finish().returning(move |items| {
        let _ = finished_tx.send(());
        Ok(recorded(&items))
    });
    let mut registry = Registry::new();
    registry.register_fn(kind("work"), |_| async { Outcome::success() });
    let mut config = fast_config();
    // Only the event below wakes the loop after its first claim.
    config.poll_interval = Duration::from_secs(600);
    config.pools =
        vec![PoolConfig::new("main", vec![queue("default")], SLOTS).with_prefetch(PREFETCH)];
    let worker = Worker::new(Arc::new(store), Arc::new(registry), config).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));

    let first = tokio::time::timeout(WAIT, limits_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first,
        (SLOTS as u32, SLOTS as u32),
        "before any job ran, a claim asks for the slots only, all to start at once"
    );
    // The job's run time and its slot are recorded before its outcome is written.
    tokio::time::timeout(WAIT, finished_rx.recv())
        .await
        .unwrap()
        .unwrap();
    events_tx
        .unbounded_send(StoreEvent::JobsAvailable {
            queue: queue("default"),
        })
        .unwrap();
    let second = tokio::time::timeout(WAIT, limits_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        second,
        ((SLOTS + PREFETCH) as u32, SLOTS as u32),
        "after a short job, a claim asks for the free slots and the claim-ahead places; \
         the jobs for the free slots start at once"
    );
    let report = stop(shutdown, handle).await.unwrap();
    assert_eq!(report.claimed, 1);
    assert_eq!(report.succeeded, 1);
}

/// With claim-ahead, a claim asks for at most the free slots plus the free claim-ahead places
/// of its queue (and the free places of the process cap, which counts claimed-ahead jobs too),
/// while no more handlers than slots ever run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_ahead_never_runs_more_than_the_slots() {
    capacity_case(3).await;
}

/// Pools of 4 slots per queue with `prefetch` claim-ahead, a process cap of 6 (plus the
/// claim-ahead of one queue with it on), 400 jobs of about a millisecond.
async fn capacity_case(prefetch: usize) {
    const SLOTS: usize = 4;
    const TOTAL: usize = 400;
    let max_concurrent = 6 + prefetch;
    let state: Arc<Mutex<Capacity>> = Arc::default();
    let mut store = base_store();
    let claims = Arc::clone(&state);
    store.expect_jobs_claim().returning(move |claim| {
        let mut state = claims.lock().unwrap();
        let queue_name = claim.queues[0].to_string();
        let limit = claim.limit as usize;
        let held_here = state.held.get(&queue_name).copied().unwrap_or(0);
        let held_all: usize = state.held.values().sum();
        if limit == 0
            || held_here + limit > SLOTS + prefetch
            || held_all + limit > max_concurrent
        {
            let violation = format!(
                "claim on {queue_name} asked for {limit} with {held_here} held there and {held_all} in all"
            );
            state.violations.push(violation);
        }
        if claim.start > claim.limit || claim.start as usize > SLOTS {
            let violation = format!(
                "claim on {queue_name} asked to start {} of {limit}",
                claim.start
            );
            state.violations.push(violation);
        }
        state.limits.push((queue_name.clone(), claim.limit));
        // Hand out as many as asked (sometimes fewer), until TOTAL are claimed; the first
        // `start` of them started, as a store does.
        let give = limit.min(TOTAL - state.claimed).min(if state.claimed % 7 == 0 { 1 } else { limit });
        state.claimed += give;
        *state.held.entry(queue_name.clone()).or_default() += give;
        let jobs: Vec<Job> = (0..give)
            .map(|n| {
                let mut job = claimed("work", &queue_name);
                if n >= claim.start as usize {
                    job.started_at = None;
                }
                job
            })
            .collect();
        state.ahead.extend(jobs.iter().filter(|j| j.started_at.is_none()).map(|j| j.id));
        Ok(Claimed::jobs(jobs))
    });
    let beats = Arc::clone(&state);
    store.expect_jobs_heartbeat().returning(move |heartbeat| {
        let mut state = beats.lock().unwrap();
        for item in heartbeat.jobs.iter().filter(|i| i.started.is_some()) {
            state.starts_reported.insert(item.id);
        }
        Ok(extended(&heartbeat))
    });
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    let finishes = Arc::clone(&state);
    store.expect_jobs_finish().returning(move |items| {
        let mut state = finishes.lock().unwrap();
        for item in items.iter().filter(|i| i.started.is_some()) {
            state.starts_reported.insert(item.id);
        }
        Ok(recorded(&items))
    });

    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<()>();
    let handlers = Arc::clone(&state);
    let mut registry = Registry::new();
    registry.register_fn(kind("work"), move |ctx| {
        let state = Arc::clone(&handlers);
        let done = done_tx.clone();
        async move {
            let queue_name = ctx.job().queue.to_string();
            {
                let mut state = state.lock().unwrap();
                let running = state.running.entry(queue_name.clone()).or_default();
                *running += 1;
                if *running > SLOTS {
                    let violation = format!("{running} handlers ran at once on {queue_name}");
                    state.violations.push(violation);
                }
            }
            // Hold the slot for a moment so claims meet busy slots.
            for _ in 0..(ctx.job().id.as_uuid().as_u128() % 5) {
                tokio::task::yield_now().await;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            let mut locked = state.lock().unwrap();
            *locked.running.get_mut(&queue_name).unwrap() -= 1;
            *locked.held.get_mut(&queue_name).unwrap() -= 1;
            drop(locked);
            let _ = done.send(());
            Outcome::success()
        }
    });
    let mut config = fast_config();
    config.pools = vec![
        PoolConfig::new("main", vec![queue("default"), queue("mail")], SLOTS)
            .with_prefetch(prefetch),
        PoolConfig::new("extra", vec![queue("reports")], SLOTS).with_prefetch(prefetch),
    ];
    config.max_concurrent = Some(max_concurrent);
    let worker = Worker::new(Arc::new(store), Arc::new(registry), config).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    for _ in 0..TOTAL {
        tokio::time::timeout(WAIT, done_rx.recv())
            .await
            .unwrap()
            .unwrap();
    }
    let report = stop(shutdown, handle).await.unwrap();
    let state = state.lock().unwrap();
    assert!(state.violations.is_empty(), "{:?}", state.violations);
    assert_eq!(
        state.starts_reported, state.ahead,
        "the start of every job claimed ahead, and only of those, is reported"
    );
    assert_eq!(report.claimed as usize, TOTAL);
    assert_eq!(report.succeeded as usize, TOTAL);
    assert!(state
        .limits
        .iter()
        .all(|(_, limit)| *limit as usize <= SLOTS + prefetch));
    // Whether a claim here takes claim-ahead places depends on how the three loops share the
    // cap at that moment; `a_claim_after_a_short_job_takes_claim_ahead_places` proves it.
    assert!(
        state.limits.iter().any(|(_, limit)| *limit > 1),
        "claims should batch free slots"
    );
}

#[tokio::test]
async fn outcomes_are_kept_and_written_again_after_unavailable() {
    let job = claimed("a", "default");
    let job_id = job.id;
    let mut store = base_store();
    let pending = Mutex::new(Some(job));
    store.expect_jobs_claim().returning(move |_| {
        Ok(Claimed::jobs(
            pending.lock().unwrap().take().into_iter().collect(),
        ))
    });
    store.expect_jobs_heartbeat().returning(|_| Ok(vec![]));
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    let writes: Arc<Mutex<Vec<Vec<JobId>>>> = Arc::default();
    let log = Arc::clone(&writes);
    store.expect_jobs_finish().returning(move |items| {
        let mut log = log.lock().unwrap();
        log.push(items.iter().map(|item| item.id).collect());
        if log.len() <= 2 {
            Err(Error::unavailable("failover in progress"))
        } else {
            Ok(recorded(&items))
        }
    });
    let mut registry = Registry::new();
    registry.register_fn(kind("a"), |_| async { Outcome::success_with("done") });
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config()).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    let deadline = tokio::time::Instant::now() + WAIT;
    while writes.lock().unwrap().len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "outcome never written"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let report = stop(shutdown, handle).await.unwrap();
    assert_eq!((report.succeeded, report.unwritten), (1, 0));
    let writes = writes.lock().unwrap();
    assert_eq!(writes.len(), 3, "written once it succeeded, never again");
    assert!(writes.iter().all(|ids| ids == &vec![job_id]));
}

#[tokio::test]
async fn a_pruned_worker_registers_again() {
    let registrations = Arc::new(AtomicUsize::new(0));
    let mut store = MockJobStore::new();
    store.expect_config().returning(StoreConfig::default);
    let count = Arc::clone(&registrations);
    store
        .expect_worker_register()
        .returning(move |registration| {
            count.fetch_add(1, Ordering::SeqCst);
            Ok(worker_info(registration))
        });
    store.expect_worker_deregister().returning(|_| Ok(()));
    store
        .expect_subscribe()
        .returning(|| Ok(Box::pin(futures::stream::pending())));
    store.expect_jobs_rescue_expired().returning(|_| Ok(vec![]));
    store.expect_now().returning(|| Ok(Utc::now()));
    store.expect_schedules_list().returning(|| Ok(vec![]));
    store.expect_jobs_prune().returning(|_| Ok(0));
    store.expect_workers_prune().returning(|_| Ok(0));
    store
        .expect_jobs_claim()
        .returning(|_| Ok(Claimed::default()));
    store.expect_jobs_heartbeat().returning(|_| Ok(vec![]));
    store.expect_worker_heartbeat().returning(|id| {
        Err(Error::NotFound {
            entity: drover_core::Entity::Worker,
            id: id.to_string(),
        })
    });
    let mut registry = Registry::new();
    registry.register_fn(kind("a"), |_| async { Outcome::success() });
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config()).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    let deadline = tokio::time::Instant::now() + WAIT;
    while registrations.load(Ordering::SeqCst) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never registered again"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop(shutdown, handle).await.unwrap();
}

/// A claim loop claims a job a rate held back when the store says the rate admits it (the
/// claim's `retry_after`), not at the next of its doubling re-claim pauses: under a rate of one
/// job per 250 ms the store hands out jobs exactly 250 ms apart (the pauses alone, 10, 20, 40,
/// 80, 160 ms, claimed 310 ms apart: a rate of 4/s ran at 3.2/s). Tokio's clock is paused, so
/// the times are exact and the test takes no real time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_rate_held_job_is_claimed_when_the_store_says_the_rate_admits_it() {
    const INTERVAL: Duration = Duration::from_millis(250);
    const ADMITTED: usize = 4;
    let mut store = base_store();
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    store
        .expect_jobs_heartbeat()
        .returning(|heartbeat| Ok(extended(&heartbeat)));
    store
        .expect_jobs_finish()
        .returning(|items| Ok(recorded(&items)));
    // The store's rate: the instant the next job is admissible, and when each was claimed.
    let next: Arc<Mutex<Option<tokio::time::Instant>>> = Arc::default();
    let (admitted_tx, mut admitted_rx) = mpsc::unbounded_channel::<tokio::time::Instant>();
    store.expect_jobs_claim().returning(move |_| {
        let now = tokio::time::Instant::now();
        let mut next = next.lock().unwrap();
        match *next {
            Some(at) if now < at => Ok(Claimed {
                jobs: vec![],
                retry_after: Some(at - now),
            }),
            _ => {
                *next = Some(now + INTERVAL);
                let _ = admitted_tx.send(now);
                Ok(Claimed {
                    jobs: vec![claimed("work", "default")],
                    retry_after: Some(INTERVAL),
                })
            }
        }
    });
    let mut registry = Registry::new();
    registry.register_fn(kind("work"), |_| async { Outcome::success() });
    let mut config = fast_config();
    config.poll_interval = Duration::from_secs(600);
    config.pools = vec![PoolConfig::new("main", vec![queue("default")], 4).with_prefetch(0)];
    let worker = Worker::new(Arc::new(store), Arc::new(registry), config).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    let mut claimed_at = Vec::new();
    for _ in 0..ADMITTED {
        claimed_at.push(admitted_rx.recv().await.expect("a claim"));
    }
    let gaps: Vec<Duration> = claimed_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter()
            .all(|gap| *gap >= INTERVAL && *gap <= INTERVAL + Duration::from_millis(2)),
        "jobs claimed {gaps:?} apart, the rate admits one per {INTERVAL:?}"
    );
    let report = stop(shutdown, handle).await.unwrap();
    assert!(report.claimed >= ADMITTED as u64);
}

/// Counts the workflow metrics and the outcomes of runs.
#[derive(Default)]
struct WorkflowMetrics {
    child_failed: AtomicUsize,
    rollbacks: AtomicUsize,
    enqueued: AtomicUsize,
    outcomes: Mutex<Vec<drover_runner::JobOutcome>>,
}

impl drover_runner::Metrics for WorkflowMetrics {
    fn job_enqueued(&self, _kind: &JobKind, _queue: &QueueName) {
        self.enqueued.fetch_add(1, Ordering::SeqCst);
    }
    fn job_finished(
        &self,
        _kind: &JobKind,
        _queue: &QueueName,
        outcome: drover_runner::JobOutcome,
        _duration: Duration,
    ) {
        self.outcomes.lock().unwrap().push(outcome);
    }
    fn child_failed(&self, _kind: &JobKind) {
        self.child_failed.fetch_add(1, Ordering::SeqCst);
    }
    fn rollback(&self, _kind: &JobKind) {
        self.rollbacks.fetch_add(1, Ordering::SeqCst);
    }
}

/// A mock that claims `job` once and records every finish, answering each with `to`.
fn one_job_store(job: Job, to: JobState) -> (MockJobStore, Arc<Mutex<Vec<FinishItem>>>) {
    let mut store = base_store();
    let pending = Mutex::new(Some(job));
    store.expect_jobs_claim().returning(move |_| {
        Ok(Claimed::jobs(
            pending.lock().unwrap().take().into_iter().collect(),
        ))
    });
    store
        .expect_jobs_heartbeat()
        .returning(|heartbeat| Ok(extended(&heartbeat)));
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    let finished: Arc<Mutex<Vec<FinishItem>>> = Arc::default();
    let log = Arc::clone(&finished);
    store.expect_jobs_finish().returning(move |items| {
        log.lock().unwrap().extend(items.iter().cloned());
        Ok(items
            .iter()
            .map(|item| FinishReply::Recorded { id: item.id, to })
            .collect())
    });
    (store, finished)
}

async fn until_finished(finished: &Mutex<Vec<FinishItem>>) -> FinishItem {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(item) = finished.lock().unwrap().first().cloned() {
            return item;
        }
        assert!(tokio::time::Instant::now() < deadline, "no finish written");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_parent_enqueues_children_fenced_and_waits_for_them_without_its_slot() {
    let parent = claimed("fan.out", "default");
    let (parent_id, token) = (parent.id, parent.fencing_token);
    let (mut store, finished) = one_job_store(parent, JobState::Waiting);
    let stored: Arc<Mutex<Vec<drover_core::EnqueueChildren>>> = Arc::default();
    let log = Arc::clone(&stored);
    store.expect_children_enqueue().returning(move |children| {
        let answers = children
            .jobs
            .iter()
            .map(|child| drover_core::Enqueued {
                status: drover_core::EnqueueStatus::Created,
                job: child.clone().into_job(JobId::new_v7(), Utc::now()),
            })
            .collect();
        log.lock().unwrap().push(children);
        Ok(answers)
    });
    let mut registry = Registry::new();
    registry.register_fn(kind("fan.out"), |ctx| async move {
        let children = (0..3)
            .map(|i| NewJob::new(kind("migrate"), serde_json::json!({ "shard": i })))
            .collect();
        match ctx.enqueue_children(children).await {
            Ok(answers) if answers.len() == 3 => Outcome::wait_for_children(),
            other => Outcome::discard(format!("children not stored: {other:?}")),
        }
    });
    let metrics = Arc::new(WorkflowMetrics::default());
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config())
        .unwrap()
        .metrics(Arc::clone(&metrics) as Arc<dyn drover_runner::Metrics>);
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));

    let item = until_finished(&finished).await;
    let report = stop(shutdown, handle).await.unwrap();
    assert_eq!(item.id, parent_id);
    assert_eq!(item.token, token);
    assert_eq!(item.finish, drover_core::Finish::WaitForChildren);
    let stored = stored.lock().unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!((stored[0].parent, stored[0].token), (parent_id, token));
    assert_eq!(stored[0].jobs.len(), 3);
    assert_eq!(metrics.enqueued.load(Ordering::SeqCst), 3);
    assert_eq!(
        *metrics.outcomes.lock().unwrap(),
        [drover_runner::JobOutcome::Waiting],
        "a wait is neither a success nor a failure"
    );
    assert_eq!((report.waiting, report.succeeded, report.failed), (1, 0, 0));
}

#[tokio::test]
async fn a_failed_child_runs_the_rollback_hook_instead_of_the_handler() {
    let parent = claimed("evacuate", "default");
    let parent_id = parent.id;
    let (mut store, finished) = one_job_store(parent.clone(), JobState::Succeeded);
    let child = |state: JobState| {
        let mut job = NewJob::new(kind("migrate"), serde_json::json!({}))
            .into_job(JobId::new_v7(), Utc::now());
        job.parent_id = Some(parent_id);
        job.state = state;
        job
    };
    let children = vec![
        child(JobState::Succeeded),
        child(JobState::Failed),
        child(JobState::Cancelled),
    ];
    let failed_ids: Vec<JobId> = children[1..].iter().map(|c| c.id).collect();
    store.expect_jobs_list().returning(move |query| {
        assert_eq!(query.parent, Some(parent_id));
        // Newest first, as stores answer.
        let mut jobs = children.clone();
        jobs.reverse();
        Ok(drover_core::JobPage { jobs, next: None })
    });
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut registry = Registry::new();
    registry.register_fn(kind("evacuate"), |_ctx| async move {
        Outcome::discard("the handler must not run over a failed fan-out")
    });
    registry.register_rollback_fn(kind("evacuate"), move |ctx, failed: Vec<Job>| {
        let tx = tx.clone();
        async move {
            // The hook reads the children too; the failures are counted once a run.
            let all = ctx.children().await.map(|c| c.len());
            tx.send((failed.iter().map(|j| j.id).collect::<Vec<_>>(), all))
                .unwrap();
            Outcome::success_with(serde_json::json!({"rolled_back": failed.len()}))
        }
    });
    let metrics = Arc::new(WorkflowMetrics::default());
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config())
        .unwrap()
        .metrics(Arc::clone(&metrics) as Arc<dyn drover_runner::Metrics>);
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));

    let (failed, all) = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    let item = until_finished(&finished).await;
    stop(shutdown, handle).await.unwrap();
    assert_eq!(
        failed, failed_ids,
        "the failed and cancelled children, oldest first"
    );
    assert_eq!(all.unwrap(), 3);
    assert_eq!(
        item.finish,
        drover_core::Finish::Succeeded {
            result: Some(serde_json::json!({"rolled_back": 2}))
        }
    );
    assert_eq!(metrics.child_failed.load(Ordering::SeqCst), 2);
    assert_eq!(metrics.rollbacks.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_parent_whose_children_succeeded_runs_its_handler_and_reads_them() {
    let parent = claimed("evacuate", "default");
    let parent_id = parent.id;
    let (mut store, finished) = one_job_store(parent, JobState::Succeeded);
    let mut done =
        NewJob::new(kind("migrate"), serde_json::json!({})).into_job(JobId::new_v7(), Utc::now());
    done.parent_id = Some(parent_id);
    done.state = JobState::Succeeded;
    done.result = Some(serde_json::json!(7));
    store.expect_jobs_list().returning(move |_| {
        Ok(drover_core::JobPage {
            jobs: vec![done.clone()],
            next: None,
        })
    });
    let mut registry = Registry::new();
    registry.register_fn(kind("evacuate"), |ctx| async move {
        let children = ctx.children().await.map_err(|e| e.to_string())?;
        let sum: i64 = children
            .iter()
            .filter_map(|c| c.result.as_ref().and_then(serde_json::Value::as_i64))
            .sum();
        Ok::<_, String>(sum)
    });
    registry.register_rollback_fn(kind("evacuate"), |_ctx, _failed| async move {
        Outcome::discard("no child failed: the hook must not run")
    });
    let metrics = Arc::new(WorkflowMetrics::default());
    let worker = Worker::new(Arc::new(store), Arc::new(registry), fast_config())
        .unwrap()
        .metrics(Arc::clone(&metrics) as Arc<dyn drover_runner::Metrics>);
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    let item = until_finished(&finished).await;
    stop(shutdown, handle).await.unwrap();
    assert_eq!(
        item.finish,
        drover_core::Finish::Succeeded {
            result: Some(serde_json::json!(7))
        }
    );
    assert_eq!(metrics.rollbacks.load(Ordering::SeqCst), 0);
    assert_eq!(metrics.child_failed.load(Ordering::SeqCst), 0);
}

/// A store that writes outcomes slower than handlers finish slows the claims: the jobs a
/// worker holds (claimed and not yet recorded) stay within its slots plus
/// `WorkerConfig::unwritten_max`, instead of growing with every claim while the writes lag.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_that_writes_slowly_slows_the_claims() {
    const SLOTS: usize = 2;
    #[derive(Default)]
    struct Held {
        claimed: usize,
        recorded: usize,
        most: usize,
    }
    let held: Arc<Mutex<Held>> = Arc::default();
    let mut store = base_store();
    let claims = Arc::clone(&held);
    store.expect_jobs_claim().returning(move |claim| {
        let mut held = claims.lock().unwrap();
        let give = claim.limit as usize;
        held.claimed += give;
        held.most = held.most.max(held.claimed - held.recorded);
        Ok(Claimed::jobs(
            (0..give).map(|_| claimed("work", "default")).collect(),
        ))
    });
    store
        .expect_jobs_heartbeat()
        .returning(|heartbeat| Ok(extended(&heartbeat)));
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    let writes = Arc::clone(&held);
    let enough = Arc::new(tokio::sync::Notify::new());
    let written = Arc::clone(&enough);
    store.expect_jobs_finish().returning(move |items| {
        // A slow write: this call holds its runtime thread, as a slow statement holds the
        // completer.
        std::thread::sleep(Duration::from_millis(20));
        let mut held = writes.lock().unwrap();
        held.recorded += items.len();
        if held.recorded >= 30 {
            written.notify_one();
        }
        Ok(recorded(&items))
    });
    let mut registry = Registry::new();
    registry.register_fn(kind("work"), |_ctx| async { Outcome::success() });
    let mut config = fast_config();
    config.pools = vec![PoolConfig::new("main", vec![queue("default")], SLOTS).with_prefetch(0)];
    config.completer_batch = 1;
    let bound = SLOTS + config.unwritten_max();
    let worker = Worker::new(Arc::new(store), Arc::new(registry), config).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    tokio::time::timeout(WAIT, enough.notified())
        .await
        .expect("30 outcomes written");
    let _ = stop(shutdown, handle).await;
    let held = held.lock().unwrap();
    assert!(
        held.most <= bound,
        "the worker held {} jobs at once; at most {bound} (slots and unwritten outcomes)",
        held.most
    );
}

/// Shutdown with the store refusing every write while runs wait for room to hand their
/// outcomes over: the waiting runs hand them over at once, the flush timeout starts, and the
/// worker stops (it would wait for the store to return otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_the_store_down_and_no_room_for_outcomes_still_ends() {
    const SLOTS: usize = 2;
    let mut store = base_store();
    let claimed_count = Arc::new(AtomicUsize::new(0));
    let full = Arc::new(tokio::sync::Notify::new());
    let mut config = fast_config();
    config.pools = vec![PoolConfig::new("main", vec![queue("default")], SLOTS).with_prefetch(0)];
    config.completer_batch = 1;
    config.flush_timeout = Duration::from_millis(200);
    config.shutdown_grace = Duration::from_millis(200);
    // Every slot busy with a run waiting for room, and the room full.
    let held_at_most = SLOTS + config.unwritten_max();
    let (claims, filled) = (Arc::clone(&claimed_count), Arc::clone(&full));
    store.expect_jobs_claim().returning(move |claim| {
        let before = claims.fetch_add(claim.limit as usize, Ordering::SeqCst);
        if before + claim.limit as usize >= held_at_most {
            filled.notify_one();
        }
        Ok(Claimed::jobs(
            (0..claim.limit)
                .map(|_| claimed("work", "default"))
                .collect(),
        ))
    });
    store
        .expect_jobs_heartbeat()
        .returning(|heartbeat| Ok(extended(&heartbeat)));
    store.expect_worker_heartbeat().returning(|_| Ok(()));
    store
        .expect_jobs_finish()
        .returning(|_| Err(Error::unavailable("the database is down")));
    let mut registry = Registry::new();
    registry.register_fn(kind("work"), |_ctx| async { Outcome::success() });
    let worker = Worker::new(Arc::new(store), Arc::new(registry), config).unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    tokio::time::timeout(WAIT, full.notified())
        .await
        .expect("the slots and the room fill up");
    let report = stop(shutdown, handle).await.unwrap();
    assert_eq!(report.succeeded, 0, "nothing could be written");
    assert_eq!(claimed_count.load(Ordering::SeqCst), held_at_most);
}

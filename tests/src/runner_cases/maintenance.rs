//! The maintenance services every worker runs: retention pruning (old terminal jobs only),
//! the reconcile sweep of a rescued job, and cron schedules firing each tick exactly once
//! across competing workers (docs/design.md sections 6 and 9).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use drover_core::{
    ClaimJobs, Error, Finish, FinishItem, FinishReply, HeartbeatItem, HeartbeatJobs,
    HeartbeatReply, Job, JobId, JobState, ListJobs, NewJob, NewSchedule, Resolution, RunAt,
    Schedule, ScheduleChange, ScheduleName, WorkerRegistration,
};
use drover_runner::{Outcome, Reconciler, Registry, TransitionEvent};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{config, Rig, Running, WAIT};
use crate::cases::{kind, queue, worker};
use crate::StoreFactory;

/// Retention (24 h here) prunes terminal jobs by the time they finished, in batches of the
/// prune limit (2), and never a recent terminal job, a job scheduled a year ahead or a running
/// job.
pub async fn runner_retention_prunes_old_terminal_jobs_and_never_live_ones(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let mut registry = Registry::new();
    registry
        .register_fn(kind("quick"), |_ctx| async { Outcome::success() })
        .register_fn(kind("doomed"), |_ctx| async {
            Outcome::discard("bad input")
        });
    let mut config = config("w1");
    config.retention = Duration::from_secs(24 * 3600);
    config.prune_limit = 2;
    config.prune_interval = Duration::from_millis(10);
    let running = rig.start(registry, config).await;

    // Old terminal jobs: five succeeded and one failed, finished now.
    let mut old = Vec::new();
    for _ in 0..5 {
        old.push(rig.enqueue(NewJob::new(kind("quick"), json!({}))).await);
    }
    old.push(rig.enqueue(NewJob::new(kind("doomed"), json!({}))).await);
    for id in &old {
        rig.wait_job(*id, "terminal", |j| j.state.is_terminal())
            .await;
    }
    // A job a year ahead, and a running job of a crashed worker (its lease kept alive past
    // the end of the case, so no rescue can touch it).
    let in_a_year = rig.now().await + chrono::Duration::days(365);
    let future = rig
        .enqueue(NewJob::new(kind("quick"), json!({})).with_run_at(RunAt::At(in_a_year)))
        .await;
    let orphan_id = rig.enqueue(NewJob::new(kind("orphan"), json!({}))).await;
    let orphan = rig
        .store
        .jobs_claim(ClaimJobs {
            worker: worker("crashed"),
            queues: vec![queue("default")],
            kinds: vec![kind("orphan")],
            limit: 1,
            start: 1,
            lease: Duration::from_secs(24 * 3600),
        })
        .await
        .expect("claim")
        .jobs
        .remove(0);
    assert_eq!(orphan.id, orphan_id);

    // Twelve hours later a recent job finishes; 13 hours after that the old ones are 25 h old.
    rig.h.advance(Duration::from_secs(12 * 3600)).await;
    let beat = rig
        .store
        .jobs_heartbeat(HeartbeatJobs {
            lease: Duration::from_secs(24 * 3600),
            jobs: vec![HeartbeatItem {
                started: None,
                id: orphan.id,
                token: orphan.fencing_token,
                meta: None,
                progress: None,
            }],
        })
        .await
        .expect("heartbeat");
    assert!(matches!(beat[0], HeartbeatReply::Extended { .. }));
    let recent = rig.enqueue(NewJob::new(kind("quick"), json!({}))).await;
    rig.wait_state(recent, JobState::Succeeded).await;
    rig.h.advance(Duration::from_secs(13 * 3600)).await;

    let deadline = tokio::time::Instant::now() + WAIT;
    for id in &old {
        loop {
            match rig.store.job_get(*id).await {
                Err(Error::NotFound { .. }) => break,
                Ok(_) => {}
                Err(other) => panic!("get: {other:?}"),
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: an old terminal job was not pruned",
                rig.h.store_name()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let report = running.stop().await;
    assert_eq!(report.pruned, 6, "only the six old terminal jobs");
    assert_eq!(rig.job(recent).await.state, JobState::Succeeded);
    assert_eq!(rig.job(future).await.state, JobState::Queued);
    assert_eq!(rig.job(orphan_id).await.state, JobState::Running);
}

/// One retention pass deletes at most the prune limit (default 1,000), whatever is left: with
/// 2,500 succeeded jobs past the retention, the worker's first pass deletes exactly 1,000 and
/// leaves 1,500 for the next passes. The pass is over when it has removed the stale worker
/// registration it removes after pruning jobs.
pub async fn runner_retention_pass_deletes_at_most_the_prune_limit(f: &dyn StoreFactory) {
    const JOBS: u32 = 2_500;
    let rig = Rig::open(f).await;
    let new_jobs = (0..JOBS)
        .map(|n| NewJob::new(kind("done"), json!({ "n": n })))
        .collect();
    rig.store.jobs_enqueue(new_jobs).await.expect("enqueue");
    let claimed = rig
        .store
        .jobs_claim(ClaimJobs {
            worker: worker("finisher"),
            queues: vec![queue("default")],
            kinds: vec![kind("done")],
            limit: JOBS,
            start: JOBS,
            lease: Duration::from_secs(60),
        })
        .await
        .expect("claim")
        .jobs;
    assert_eq!(claimed.len(), JOBS as usize);
    let replies = rig
        .store
        .jobs_finish(
            claimed
                .iter()
                .map(|job| FinishItem {
                    parent: None,
                    id: job.id,
                    token: job.fencing_token,
                    started: None,
                    finish: Finish::Succeeded { result: None },
                })
                .collect(),
        )
        .await
        .expect("finish");
    assert!(replies
        .iter()
        .all(|reply| matches!(reply, FinishReply::Recorded { .. })));
    rig.store
        .worker_register(WorkerRegistration {
            id: worker("stale"),
            host: "gone".to_owned(),
            pid: 1,
            queues: vec![queue("default")],
        })
        .await
        .expect("register");
    rig.h.advance(Duration::from_secs(8 * 24 * 3600)).await;

    let config = config("w1");
    assert_eq!(
        (config.prune_limit, config.retention),
        (1_000, Duration::from_secs(7 * 24 * 3600)),
        "the defaults"
    );
    let mut registry = Registry::new();
    registry.register_fn(kind("other"), |_ctx| async { Outcome::success() });
    let running = rig.start(registry, config).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let workers = rig.store.workers_list().await.expect("workers");
        if !workers.iter().any(|w| w.id == worker("stale")) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: the first cleaning pass did not finish",
            rig.h.store_name()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let succeeded = |snapshot: drover_core::Snapshot| {
        snapshot
            .queues
            .iter()
            .map(|q| q.count(JobState::Succeeded))
            .sum::<u64>()
    };
    let left = succeeded(rig.store.queue_snapshot().await.expect("snapshot"));
    let report = running.stop().await;
    assert_eq!(
        (report.pruned, left),
        (1_000, 1_500),
        "one pass deleted more than the prune limit"
    );
}

/// Inconclusive on the first call, an error on the second, succeeded after that.
struct DeployReconciler {
    calls: Arc<AtomicU32>,
}

#[async_trait]
impl Reconciler for DeployReconciler {
    async fn reconcile(&self, job: &Job, _cancel: CancellationToken) -> Result<Resolution, String> {
        if job.state != JobState::Reconciling {
            return Err(format!("asked to reconcile a {} job", job.state));
        }
        match self.calls.fetch_add(1, Ordering::SeqCst) + 1 {
            1 => Ok(Resolution::Inconclusive),
            2 => Err("host unreachable".into()),
            _ => Ok(Resolution::Succeeded),
        }
    }
}

/// Enqueues a job of `kind_name` and leaves it as a crashed worker would: claimed by worker
/// `crashed` with a 60 s lease, then the clock moved 61 s so that lease has expired.
async fn abandoned(rig: &Rig, kind_name: &str) -> JobId {
    let id = rig.enqueue(NewJob::new(kind(kind_name), json!({}))).await;
    rig.store
        .jobs_claim(ClaimJobs {
            worker: worker("crashed"),
            queues: vec![queue("default")],
            kinds: vec![kind(kind_name)],
            limit: 1,
            start: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .expect("claim");
    rig.h.advance(Duration::from_secs(61)).await;
    id
}

/// A job of a kind with a reconciler whose worker crashed (lease expired) is rescued to
/// reconciling, and the sweep resolves it: an inconclusive verdict and a reconciler error
/// leave it reconciling for the next sweep; the third verdict ends it succeeded. The
/// transition hook sees running -> reconciling -> succeeded.
pub async fn runner_reconcile_sweep_resolves_a_rescued_reconciling_job(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    // A worker that crashed mid-deploy: its lease expires.
    let id = abandoned(&rig, "deploy").await;

    let calls = Arc::new(AtomicU32::new(0));
    let mut registry = Registry::new();
    registry
        .register_fn(kind("other"), |_ctx| async { Outcome::success() })
        .register_reconciler(
            kind("deploy"),
            DeployReconciler {
                calls: Arc::clone(&calls),
            },
        );
    let (tx, mut rx) = mpsc::unbounded_channel::<TransitionEvent>();
    let mut config = config("w1");
    config.rescue_interval = Duration::from_millis(10);
    config.reconcile_interval = Duration::from_millis(10);
    let worker = rig
        .worker(registry, config)
        .await
        .on_transition(move |event| {
            let _ = tx.send(event.clone());
        });
    let running = Running::spawn(worker);
    let job = rig.wait_state(id, JobState::Succeeded).await;
    assert!(
        job.errors[0].message.contains("lease expired"),
        "{}",
        job.errors[0].message
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
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

/// A starting worker sweeps only after its maintenance start delay (WorkerConfig::
/// maintenance_start_delay, 300 ms here; jitter adds up to as long again): a job whose
/// crashed worker's lease has expired stays running until then, and is then rescued. The
/// rescuer's interval is an hour, so the rescue seen is the first pass.
pub async fn runner_maintenance_waits_its_start_delay(f: &dyn StoreFactory) {
    const START_DELAY: Duration = Duration::from_millis(300);
    let rig = Rig::open(f).await;
    let id = abandoned(&rig, "work").await;

    let mut registry = Registry::new();
    registry.register_fn(kind("other"), |_ctx| async { Outcome::success() });
    let (tx, mut rx) = mpsc::unbounded_channel::<(TransitionEvent, std::time::Instant)>();
    let mut config = config("w1");
    config.maintenance_start_delay = START_DELAY;
    let worker = rig
        .worker(registry, config)
        .await
        .on_transition(move |event| {
            let _ = tx.send((event.clone(), std::time::Instant::now()));
        });
    let started = std::time::Instant::now();
    let running = Running::spawn(worker);
    let (event, at) = tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("the job is rescued in time")
        .expect("a transition");
    assert_eq!((event.job_id, event.from), (id, JobState::Running));
    let waited = at.duration_since(started);
    assert!(
        waited >= START_DELAY,
        "the rescuer swept {} ms after start, before its start delay of {} ms",
        waited.as_millis(),
        START_DELAY.as_millis()
    );
    let report = running.stop().await;
    assert_eq!(report.rescued, 1);
    assert_ne!(rig.job(id).await.state, JobState::Running);
}

/// The tick a schedule's job was enqueued for (its meta).
fn tick_of(job: &Job) -> DateTime<Utc> {
    let text = job.meta["tick"]
        .as_str()
        .expect("a schedule job has a tick");
    DateTime::parse_from_rfc3339(text)
        .expect("an RFC 3339 tick")
        .with_timezone(&Utc)
}

/// Creates the schedule both schedule cases use: `every-second`, firing each second (6-field
/// cron), enqueuing jobs of kind `tick`.
async fn every_second(rig: &Rig) -> Schedule {
    rig.store
        .schedule_upsert(NewSchedule::new(
            ScheduleName::parse("every-second").expect("valid schedule name"),
            "* * * * * *",
            kind("tick"),
            json!({}),
        ))
        .await
        .expect("upsert schedule")
        .schedule
}

/// A per-second schedule with three workers (separate processes) competing to fire it: the
/// store's clock is moved to three successive whole seconds and each brings a tick; every
/// tick enqueues exactly one job, whichever worker fires it, so the ticks of the jobs are
/// distinct and the workers' fired counts add up to the jobs. Time moves with
/// [`crate::Harness::advance_to`] (PostgreSQL: the database clock passes the second), since
/// ticks are instants of the store's clock kept in job meta and unique keys, which
/// `advance` does not shift.
pub async fn runner_schedule_fires_once_per_tick_across_three_workers(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let schedule = every_second(&rig).await;
    let mut workers = Vec::new();
    for name in ["s1", "s2", "s3"] {
        let mut registry = Registry::new();
        registry.register_fn(kind("tick"), |_ctx| async { Outcome::success() });
        let mut config = config(name);
        config.schedule_interval = Duration::from_millis(10);
        workers.push(rig.start(registry, config).await);
    }
    let ticks_query = ListJobs {
        kind: Some(kind("tick")),
        limit: 1000,
        ..ListJobs::default()
    };
    let mut targets = Vec::new();
    for _ in 0..3 {
        let target = rig.now().await.trunc_subsecs(0) + chrono::Duration::seconds(1);
        rig.h.advance_to(target).await;
        rig.wait_list(ticks_query.clone(), "a tick at the target", |jobs| {
            jobs.iter().any(|job| tick_of(job) >= target)
        })
        .await;
        targets.push(target);
    }
    let mut fired = 0;
    for worker in workers {
        fired += worker.stop().await.schedules_fired;
    }
    let jobs = rig.list(ticks_query).await;
    let mut ticks: Vec<DateTime<Utc>> = jobs.iter().map(tick_of).collect();
    ticks.sort();
    let mut distinct = ticks.clone();
    distinct.dedup();
    assert_eq!(distinct, ticks, "a tick enqueued more than one job");
    assert_eq!(
        fired as usize,
        jobs.len(),
        "each fire enqueued one job: no two workers fired one tick"
    );
    // Each move of the clock brought a tick at or after its target and before the next one
    // (memory: exactly the target, the clock moving only when told).
    for (n, target) in targets.iter().enumerate() {
        let until = targets.get(n + 1).copied();
        assert!(
            ticks
                .iter()
                .any(|t| t >= target && until.is_none_or(|until| *t < until)),
            "no tick for the move to {target}: {ticks:?}"
        );
    }
    for job in &jobs {
        assert!(tick_of(job) > schedule.created_at);
        assert_eq!(tick_of(job), tick_of(job).trunc_subsecs(0));
        assert_eq!(job.meta["schedule"], json!("every-second"));
    }
}

/// Ticks a scheduler pass finds missed by less than the catch-up grace (10 s) each enqueue
/// their job, oldest first: a per-second schedule whose store clock moved four whole seconds
/// past its creation before any worker ran gets a job for each of those four ticks from the
/// worker's first passes, not only for the latest (found by a breaker run: a pass that ran a
/// little late skipped a tick of a per-second schedule).
pub async fn runner_schedule_fires_each_tick_a_late_pass_finds(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let schedule = every_second(&rig).await;
    let first = schedule.created_at.trunc_subsecs(0) + chrono::Duration::seconds(1);
    let expected: Vec<DateTime<Utc>> = (0..4)
        .map(|n| first + chrono::Duration::seconds(n))
        .collect();
    let last = *expected.last().expect("four ticks");
    rig.h.advance_to(last).await;

    let mut registry = Registry::new();
    registry.register_fn(kind("tick"), |_ctx| async { Outcome::success() });
    let mut config = config("s1");
    config.schedule_interval = Duration::from_millis(10);
    let worker = rig.start(registry, config).await;
    let ticks_query = ListJobs {
        kind: Some(kind("tick")),
        limit: 1000,
        ..ListJobs::default()
    };
    rig.wait_list(ticks_query.clone(), "a job for the latest tick", |jobs| {
        jobs.iter().any(|job| tick_of(job) >= last)
    })
    .await;
    worker.stop().await;
    let mut ticks: Vec<DateTime<Utc>> = rig.list(ticks_query).await.iter().map(tick_of).collect();
    ticks.sort();
    // PostgreSQL's clock goes on moving: ticks after the last expected one may have fired too.
    let missed: Vec<_> = expected.iter().filter(|t| !ticks.contains(t)).collect();
    assert!(
        missed.is_empty(),
        "ticks {missed:?} never fired; fired {ticks:?}"
    );
    let mut distinct = ticks.clone();
    distinct.dedup();
    assert_eq!(distinct, ticks, "a tick enqueued more than one job");
    assert!(
        ticks.iter().all(|t| *t >= first),
        "a tick before the schedule's creation fired: {ticks:?}"
    );
}

/// A deploy that writes its schedule again as stored (through the application's [`Client`],
/// as a start-up does) keeps the ticks that fell due while no worker ran: a per-second schedule
/// left without a worker for four ticks, written again, then served by a worker, gets a job
/// for each of those ticks, once.
///
/// [`Client`]: drover_runner::Client
pub async fn runner_rewritten_schedule_fires_the_ticks_missed_while_down(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let schedule = every_second(&rig).await;
    let first = schedule.created_at.trunc_subsecs(0) + chrono::Duration::seconds(1);
    let expected: Vec<DateTime<Utc>> = (0..4)
        .map(|n| first + chrono::Duration::seconds(n))
        .collect();
    let last = *expected.last().expect("four ticks");
    rig.h.advance_to(last).await;

    let written = rig
        .client()
        .schedule_upsert(NewSchedule::new(
            ScheduleName::parse("every-second").expect("valid schedule name"),
            "* * * * * *",
            kind("tick"),
            json!({}),
        ))
        .await
        .expect("write the schedule again");
    assert_eq!(written.change, ScheduleChange::Unchanged);
    assert_eq!(written.schedule, schedule);

    let mut registry = Registry::new();
    registry.register_fn(kind("tick"), |_ctx| async { Outcome::success() });
    let mut config = config("s1");
    config.schedule_interval = Duration::from_millis(10);
    let worker = rig.start(registry, config).await;
    let ticks_query = ListJobs {
        kind: Some(kind("tick")),
        limit: 1000,
        ..ListJobs::default()
    };
    rig.wait_list(ticks_query.clone(), "a job for the latest tick", |jobs| {
        jobs.iter().any(|job| tick_of(job) >= last)
    })
    .await;
    worker.stop().await;
    let mut ticks: Vec<DateTime<Utc>> = rig.list(ticks_query).await.iter().map(tick_of).collect();
    ticks.sort();
    let missed: Vec<_> = expected.iter().filter(|t| !ticks.contains(t)).collect();
    assert!(
        missed.is_empty(),
        "ticks {missed:?} due while down never fired; fired {ticks:?}"
    );
    let mut distinct = ticks.clone();
    distinct.dedup();
    assert_eq!(distinct, ticks, "a tick enqueued more than one job");
}

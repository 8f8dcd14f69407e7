//! The runner on `MemoryStore` with a `ManualClock` set to absolute dates: cron schedules
//! across the Europe/Berlin daylight-saving changes (autumn: a repeated 02:30 fires once, at
//! its first occurrence; spring: a skipped 02:30 fires once, at the first instant after the
//! gap) with three competing workers (docs/design.md section 9).
//!
//! Only these stay here because they need a clock at chosen wall-clock dates, which
//! PostgreSQL's clock cannot be. Every other store-touching runner behaviour is in the runner
//! suite of the `drover-tests` crate (`tests/src/runner_cases`), run against every store.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::{
    Error, JobKind, JobStore, ListJobs, ManualClock, NewSchedule, Quotas, ScheduleName,
    StoreConfig, WorkerId,
};
use drover_runner::{Outcome, Registry, Worker, WorkerConfig, WorkerReport};
use drover_store_memory::MemoryStore;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

fn kind(name: &str) -> JobKind {
    JobKind::parse(name).unwrap()
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
    fn at(start: &str) -> Self {
        let clock = ManualClock::new(utc(start));
        let config = StoreConfig {
            quotas: Quotas::unbounded(),
            ..StoreConfig::default()
        };
        let store = Arc::new(MemoryStore::with_clock(config, Arc::new(clock.clone())));
        Harness { store, clock }
    }

    fn start(&self, registry: Registry, config: WorkerConfig) -> Running {
        let store = Arc::clone(&self.store) as Arc<dyn JobStore>;
        let worker = Worker::new(store, Arc::new(registry), config).unwrap();
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(worker.run(shutdown.clone()));
        Running { shutdown, handle }
    }

    async fn list(&self, query: ListJobs) -> Vec<drover_core::Job> {
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
    config.schedule_interval = Duration::from_millis(2);
    config.prune_interval = Duration::from_secs(3600);
    config.store_retry_min = Duration::from_millis(5);
    config.store_retry_max = Duration::from_millis(50);
    config
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
        workers.push(h.start(registry, config(name)));
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

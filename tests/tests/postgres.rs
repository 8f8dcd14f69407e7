//! The store contract suite and the runner suite run against [`PgStore`], plus PostgreSQL-only
//! tests: concurrency at scale, the migrator, transactional enqueue, error mapping and recovery
//! after lost connections.
//!
//! Needs `DROVER_TEST_DATABASE_URL` (e.g. `postgres://postgres@127.0.0.1:5432/test`); without it
//! every test here skips, unless `DROVER_REQUIRE_POSTGRES` is set, when they fail instead.
//!
//! Isolation: every `open` creates its own database, a copy of the migrated template of the
//! kit `drover_tests::postgres`; `cleanup` drops the databases the factory created (so does
//! dropping the factory, for a case that panicked).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use drover_core::{
    ClaimJobs, EnqueueStatus, Error, Finish, FinishItem, Job, JobDetails, JobId, JobKind, JobState,
    JobStore, LimitKey, LimitPolicy, ListJobs, NewJob, QueueName, Quotas, Retry, StoreConfig,
    StoreEvent, WorkerId,
};
use drover_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use drover_store_postgres::sqlx::types::Uuid;
use drover_store_postgres::sqlx::{self, Connection, PgPool};
use drover_store_postgres::{migrations, PgOptions, PgStore, COPY_MIN_JOBS};
use drover_tests::postgres::{execute_on as exec, ident, Schema, Server, TestDatabase};
use drover_tests::{Harness, StoreFactory};
use futures::StreamExt;
use serde_json::json;

/// Opens PostgreSQL stores, each in a fresh database copied from the kit's migrated template.
struct PgFactory {
    server: Server,
    /// Databases created by this factory, dropped by `cleanup` (or with the factory, for a case
    /// that panicked).
    created: Mutex<Vec<TestDatabase>>,
}

impl PgFactory {
    /// The factory, or `None` when `DROVER_TEST_DATABASE_URL` is unset (the case then skips).
    fn from_env() -> Option<PgFactory> {
        Server::from_env().map(PgFactory::new)
    }

    /// The factory of a PostgreSQL-only test, or `None` after the kit printed why it skips.
    fn for_test(test: &str) -> Option<PgFactory> {
        Server::for_test(test).map(PgFactory::new)
    }

    fn new(server: Server) -> PgFactory {
        PgFactory {
            server,
            created: Mutex::new(Vec::new()),
        }
    }

    async fn admin_pool(&self) -> PgPool {
        self.server.admin_pool().await
    }

    /// Creates a fresh database holding `schema`, dropped with the factory; returns its name
    /// and connect options.
    async fn database(&self, schema: Schema) -> (String, PgConnectOptions) {
        let database = self.server.database(schema).await;
        let answer = (database.name.clone(), database.connect.clone());
        self.created.lock().unwrap().push(database);
        answer
    }

    /// Creates a fresh database from the template; returns its name and connect options.
    async fn fresh_database(&self) -> (String, PgConnectOptions) {
        self.database(Schema::Migrated).await
    }

    /// Opens a store with `options` on a fresh migrated database.
    async fn open_pg(&self, options: PgOptions) -> PgHarness {
        let (database, connect) = self.fresh_database().await;
        let store = PgStore::connect_with(connect.clone(), options.clone())
            .await
            .expect("connect to the test database");
        PgHarness {
            store: Arc::new(store),
            connect,
            options,
            database,
        }
    }
}

/// One store on its own database.
struct PgHarness {
    store: Arc<PgStore>,
    connect: PgConnectOptions,
    options: PgOptions,
    #[allow(dead_code)]
    database: String,
}

const ADVANCE: &str = "
WITH jobs AS (
    UPDATE drover.jobs
    SET run_at = run_at - $1 * interval '1 microsecond',
        created_at = created_at - $1 * interval '1 microsecond',
        attempted_at = attempted_at - $1 * interval '1 microsecond',
        started_at = started_at - $1 * interval '1 microsecond',
        finished_at = finished_at - $1 * interval '1 microsecond',
        lease_expires_at = lease_expires_at - $1 * interval '1 microsecond'
    RETURNING 1
), limits AS (
    UPDATE drover.limits SET rate_tat = rate_tat - $1 * interval '1 microsecond' RETURNING 1
), schedules AS (
    UPDATE drover.schedules
    SET created_at = created_at - $1 * interval '1 microsecond',
        last_tick_at = last_tick_at - $1 * interval '1 microsecond'
    RETURNING 1
), workers AS (
    UPDATE drover.workers
    SET started_at = started_at - $1 * interval '1 microsecond',
        last_heartbeat_at = last_heartbeat_at - $1 * interval '1 microsecond'
    RETURNING 1
), queues AS (
    UPDATE drover.queues SET paused_at = paused_at - $1 * interval '1 microsecond' RETURNING 1
), workflows AS (
    UPDATE drover.workflows SET created_at = created_at - $1 * interval '1 microsecond' RETURNING 1
), audit AS (
    UPDATE drover.audit_log SET at = at - $1 * interval '1 microsecond' RETURNING 1
)
SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM limits)
     + (SELECT count(*) FROM schedules) + (SELECT count(*) FROM workers)
     + (SELECT count(*) FROM queues) + (SELECT count(*) FROM workflows)";

#[async_trait]
impl Harness for PgHarness {
    fn store(&self) -> Arc<dyn JobStore> {
        self.store.clone()
    }

    async fn another_store(&self) -> Arc<dyn JobStore> {
        Arc::new(
            PgStore::connect_with(self.connect.clone(), self.options.clone())
                .await
                .expect("second pool"),
        )
    }

    async fn advance(&self, d: Duration) {
        let micros = i64::try_from(d.as_micros()).expect("advance fits");
        sqlx::query_scalar::<_, i64>(ADVANCE)
            .bind(micros)
            .fetch_one(self.store.pool())
            .await
            .expect("shift stored timestamps");
    }

    async fn forget_request_hash(&self, id: JobId) {
        sqlx::query("UPDATE drover.jobs SET request_hash = NULL WHERE id = $1")
            .bind(id.as_uuid())
            .execute(self.store.pool())
            .await
            .expect("forget request hash");
    }

    fn store_name(&self) -> &'static str {
        "postgres"
    }
}

#[async_trait]
impl StoreFactory for PgFactory {
    async fn open(&self, config: StoreConfig) -> Box<dyn Harness> {
        Box::new(
            self.open_pg(PgOptions {
                config,
                max_connections: 16,
                ..PgOptions::default()
            })
            .await,
        )
    }

    async fn cleanup(&self) {
        let databases: Vec<TestDatabase> = std::mem::take(&mut *self.created.lock().unwrap());
        for database in databases {
            database.drop_database().await;
        }
    }
}

drover_tests::contract_suite!("postgres", PgFactory::from_env());
drover_tests::runner_suite!("postgres", PgFactory::from_env());

// ---------------------------------------------------------------------------------------------
// PostgreSQL-only tests. Each starts with `PgFactory::for_test`, the kit's rule: without the URL
// it skips, or fails when DROVER_REQUIRE_POSTGRES is set. The factory drops the test's
// databases when the test ends, panicked or not.

fn kind(name: &str) -> JobKind {
    JobKind::parse(name).unwrap()
}

fn new_job(kind_name: &str) -> NewJob {
    NewJob::new(kind(kind_name), json!({}))
}

fn unbounded_options() -> PgOptions {
    PgOptions {
        config: StoreConfig {
            quotas: Quotas::unbounded(),
            ..StoreConfig::default()
        },
        max_connections: 16,
        ..PgOptions::default()
    }
}

fn claim_params(worker: &str, limit: u32) -> ClaimJobs {
    ClaimJobs {
        worker: WorkerId::parse(worker).unwrap(),
        queues: vec![QueueName::default_queue()],
        kinds: vec![kind("work")],
        limit,
        start: limit,
        lease: Duration::from_secs(60),
    }
}

/// A fresh database without the drover schema (not copied from the template).
async fn bare_database(factory: &PgFactory) -> PgConnectOptions {
    factory.database(Schema::Empty).await.1
}

/// Counts jobs of the store's database in `state`.
async fn count_in_state(pool: &PgPool, state: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE state = $1")
        .bind(state)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A batch enqueue cancelled at any point (its future dropped: a timeout, a client gone)
/// stores all of its jobs or none, and leaves no broken connection behind: the next
/// enqueue on the same small pool, large (COPY) or small (INSERT), succeeds. Batches of
/// 1,000 jobs, cut after 0 µs to 26 ms (a batch takes about 10 ms on a quiet machine), then
/// after twice and four times an uncut batch's measured time, then never (60 s, so some
/// batch ends whole however loaded the machine is), three times each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_enqueue_cancelled_at_any_point_stores_all_or_nothing() {
    let Some(factory) =
        PgFactory::for_test("batch_enqueue_cancelled_at_any_point_stores_all_or_nothing")
    else {
        return;
    };
    let factory = &factory;
    let options = PgOptions {
        max_connections: 3,
        ..unbounded_options()
    };
    let h = factory.open_pg(options).await;
    let started = std::time::Instant::now();
    let uncut: Vec<NewJob> = (0..1000)
        .map(|n| NewJob::new(kind("uncut"), json!(n)))
        .collect();
    h.store.jobs_enqueue(uncut).await.unwrap();
    let batch_micros = started.elapsed().as_micros() as u64;
    let mut attempt = 0;
    let mut stored_whole = 0;
    let mut cut_short = 0;
    let cuts = [
        0u64,
        50,
        100,
        200,
        400,
        800,
        1600,
        3200,
        6400,
        12800,
        25600,
        2 * batch_micros,
        4 * batch_micros,
        60_000_000,
    ];
    for micros in cuts {
        for _ in 0..3 {
            attempt += 1;
            let cut = kind(&format!("cut{attempt}"));
            let batch: Vec<NewJob> = (0..1000)
                .map(|n| NewJob::new(cut.clone(), json!(n)))
                .collect();
            let result =
                tokio::time::timeout(Duration::from_micros(micros), h.store.jobs_enqueue(batch))
                    .await;
            let stored: i64 =
                sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE kind = $1")
                    .bind(cut.as_str())
                    .fetch_one(h.store.pool())
                    .await
                    .unwrap();
            match result {
                Ok(answers) => {
                    assert_eq!((answers.unwrap().len(), stored), (1000, 1000));
                    stored_whole += 1;
                }
                Err(_) => {
                    assert!(
                        stored == 0 || stored == 1000,
                        "attempt {attempt}: {stored} of 1,000 stored"
                    );
                    cut_short += 1;
                }
            }
            let after: Vec<NewJob> = (0..300)
                .map(|n| NewJob::new(kind("after"), json!(n)))
                .collect();
            assert_eq!(
                h.store
                    .jobs_enqueue(after)
                    .await
                    .expect("a large enqueue after a cut")
                    .len(),
                300
            );
            h.store
                .job_enqueue(new_job("after"))
                .await
                .expect("a small enqueue after a cut");
        }
    }
    assert!(
        stored_whole >= 3 && cut_short > 0,
        "some calls were cut: {cut_short} of {attempt} cut, {stored_whole} whole"
    );
    assert_eq!(
        count_in_state(h.store.pool(), "queued").await % 1000,
        (1000 + attempt * 301) as i64 % 1000
    );
}

/// 8 concurrent claimers on two pools (as two worker processes would) drain 20,000 jobs;
/// every job runs exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claimers_8_take_20000_jobs_each_exactly_once() {
    let Some(factory) = PgFactory::for_test("claimers_8_take_20000_jobs_each_exactly_once") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let other = PgStore::connect_with(h.connect.clone(), unbounded_options())
        .await
        .unwrap();
    let stores: Vec<Arc<PgStore>> = vec![h.store.clone(), Arc::new(other)];
    for _ in 0..2 {
        let batch: Vec<NewJob> = (0..10_000)
            .map(|n| NewJob::new(kind("work"), json!(n)))
            .collect();
        h.store.jobs_enqueue(batch).await.unwrap();
    }
    let mut tasks = Vec::new();
    for c in 0..8 {
        let store = stores[c % 2].clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let jobs = store
                    .jobs_claim(claim_params(&format!("w{c}"), 100))
                    .await
                    .unwrap()
                    .jobs;
                if jobs.is_empty() {
                    return seen;
                }
                let items = jobs
                    .iter()
                    .map(|j| drover_core::FinishItem {
                        parent: None,
                        started: None,
                        id: j.id,
                        token: j.fencing_token,
                        finish: drover_core::Finish::Succeeded { result: None },
                    })
                    .collect();
                let replies = store.jobs_finish(items).await.unwrap();
                assert!(replies
                    .iter()
                    .all(|r| matches!(r, drover_core::FinishReply::Recorded { .. })));
                seen.extend(jobs.into_iter().map(|j| j.id));
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert_eq!(all.len(), 20_000, "claims across all claimers");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 20_000, "no job was claimed twice");
    assert_eq!(count_in_state(h.store.pool(), "succeeded").await, 20_000);
    let reclaimed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM drover.jobs WHERE attempt <> 1 OR fencing_token <> 1",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert_eq!(reclaimed, 0, "every job ran exactly once");
}

/// 50 concurrent enqueues of one request with one idempotency key create exactly one job
/// (with quotas on, through the locked path, and off, through the autocommit path).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enqueue_50_concurrent_same_idempotency_key_create_one() {
    let Some(factory) =
        PgFactory::for_test("enqueue_50_concurrent_same_idempotency_key_create_one")
    else {
        return;
    };
    let factory = &factory;
    for options in [
        unbounded_options(),
        PgOptions {
            max_connections: 16,
            ..PgOptions::default()
        },
    ] {
        let h = factory.open_pg(options).await;
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let store = h.store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .job_enqueue(new_job("work").with_idempotency_key("once"))
                    .await
                    .unwrap()
            }));
        }
        let mut created = 0;
        let mut ids = Vec::new();
        for t in tasks {
            let answer = t.await.unwrap();
            if answer.status == EnqueueStatus::Created {
                created += 1;
            } else {
                assert_eq!(answer.status, EnqueueStatus::Replayed);
            }
            ids.push(answer.job.id);
        }
        assert_eq!(created, 1);
        ids.dedup();
        assert_eq!(ids.len(), 1, "every answer names the same job");
        assert_eq!(count_in_state(h.store.pool(), "queued").await, 1);
    }
}

/// 50 concurrent enqueuers (single jobs and pairs) never push a tenant past its quota, and
/// the global quota holds across tenants.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enqueue_50_concurrent_enqueuers_never_pass_quotas() {
    let Some(factory) = PgFactory::for_test("enqueue_50_concurrent_enqueuers_never_pass_quotas")
    else {
        return;
    };
    let factory = &factory;
    let h = factory
        .open_pg(PgOptions {
            max_connections: 16,
            config: StoreConfig {
                quotas: Quotas {
                    max_pending: Some(30),
                    max_tenant_pending: Some(20),
                },
                ..StoreConfig::default()
            },
            ..PgOptions::default()
        })
        .await;
    let mut tasks = Vec::new();
    for n in 0..50 {
        let store = h.store.clone();
        tasks.push(tokio::spawn(async move {
            let tenant = drover_core::TenantId::parse(if n % 3 == 0 { "b" } else { "a" }).unwrap();
            let size = if n % 2 == 0 { 1 } else { 2 };
            let batch = (0..size)
                .map(|_| new_job("work").with_tenant(tenant.clone()))
                .collect();
            match store.jobs_enqueue(batch).await {
                Ok(answers) => answers.len(),
                Err(Error::QuotaExceeded { current, max, .. }) => {
                    assert!(current <= max);
                    0
                }
                Err(other) => panic!("unexpected {other:?}"),
            }
        }));
    }
    let mut stored = 0;
    for t in tasks {
        stored += t.await.unwrap();
    }
    let per_tenant: Vec<(String, i64)> =
        sqlx::query_as("SELECT tenant, count(*) FROM drover.jobs GROUP BY tenant ORDER BY tenant")
            .fetch_all(h.store.pool())
            .await
            .unwrap();
    let total: i64 = per_tenant.iter().map(|(_, n)| n).sum();
    assert_eq!(total as usize, stored, "answers match what was stored");
    assert!(total <= 30, "global quota held: {per_tenant:?}");
    assert!(
        per_tenant.iter().all(|(_, n)| *n <= 20),
        "tenant quota held: {per_tenant:?}"
    );
    assert!(
        total >= 29,
        "the quota was filled, not starved: {per_tenant:?}"
    );
}

/// 8 concurrent claimers never run more jobs of a kind than its max_running allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limits_8_claimers_never_exceed_max_running() {
    let Some(factory) = PgFactory::for_test("limits_8_claimers_never_exceed_max_running") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    h.store
        .limit_set(LimitPolicy::new(LimitKey::parse("kind:work").unwrap(), Some(3), None).unwrap())
        .await
        .unwrap();
    let batch: Vec<NewJob> = (0..300)
        .map(|n| NewJob::new(kind("work"), json!(n)))
        .collect();
    h.store.jobs_enqueue(batch).await.unwrap();
    let in_hand = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let peak = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let mut tasks = Vec::new();
    for c in 0..8 {
        let store = h.store.clone();
        let in_hand = in_hand.clone();
        let peak = peak.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            let mut idle = 0;
            while idle < 50 {
                let jobs = store
                    .jobs_claim(claim_params(&format!("w{c}"), 2))
                    .await
                    .unwrap()
                    .jobs;
                if jobs.is_empty() {
                    idle += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                idle = 0;
                // The database counts these as running from the claim's commit until the
                // finish commits, so this counter never exceeds the true running count.
                let now = in_hand.fetch_add(jobs.len() as i64, std::sync::atomic::Ordering::SeqCst)
                    + jobs.len() as i64;
                peak.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
                in_hand.fetch_sub(jobs.len() as i64, std::sync::atomic::Ordering::SeqCst);
                for j in &jobs {
                    store
                        .job_finish(
                            j.id,
                            j.fencing_token,
                            drover_core::Finish::Succeeded { result: None },
                        )
                        .await
                        .unwrap();
                }
                done += jobs.len();
            }
            done
        }));
    }
    let monitor = {
        let pool = h.store.pool().clone();
        tokio::spawn(async move {
            let mut worst = 0;
            for _ in 0..200 {
                let running = count_in_state(&pool, "running").await;
                worst = worst.max(running);
                tokio::task::yield_now().await;
            }
            worst
        })
    };
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    let worst = monitor.await.unwrap();
    assert_eq!(done, 300, "every job ran");
    assert!(
        worst <= 3,
        "the database never had more than 3 running: {worst}"
    );
    let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
    assert!(peak <= 3, "claimers never held more than 3 at once: {peak}");
    assert!(
        peak >= 2,
        "claims overlapped (the test exercised concurrency): {peak}"
    );
}

/// A NUL character anywhere in args is refused as InvalidInput naming `args`, never a
/// database error; in a heartbeat's progress it names `progress`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nul_character_is_invalid_input() {
    let Some(factory) = PgFactory::for_test("nul_character_is_invalid_input") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    for args in [
        json!({"a": "x\u{0}y"}),
        json!({"k\u{0}": 1}),
        json!(["\u{0}"]),
    ] {
        match h.store.job_enqueue(NewJob::new(kind("work"), args)).await {
            Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "args"),
            other => panic!("expected InvalidInput for args, got {other:?}"),
        }
    }
    h.store.job_enqueue(new_job("work")).await.unwrap();
    let job = h
        .store
        .jobs_claim(claim_params("w", 1))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let replies = h
        .store
        .jobs_heartbeat(drover_core::HeartbeatJobs {
            lease: Duration::from_secs(60),
            jobs: vec![drover_core::HeartbeatItem {
                started: None,
                id: job.id,
                token: job.fencing_token,
                meta: None,
                progress: Some(json!({"step": "a\u{0}"})),
            }],
        })
        .await;
    match replies {
        Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "progress"),
        other => panic!("expected InvalidInput for progress, got {other:?}"),
    }
    // A failure message with NUL is stored (with the NUL replaced), not refused: the
    // outcome of a run must always be recordable.
    let to = h
        .store
        .job_finish(
            job.id,
            job.fencing_token,
            drover_core::Finish::Failed {
                message: "bad\u{0}byte".into(),
                retry: drover_core::Retry::Never,
            },
        )
        .await
        .unwrap();
    assert_eq!(to, JobState::Failed);
    let stored = h.store.job_get(job.id).await.unwrap();
    assert_eq!(stored.errors[0].message, "bad\u{fffd}byte");
}

/// A batch of 10,000 jobs is enqueued in one call (one statement: far below the 65,535 bind
/// parameter limit), without and with idempotency keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_enqueue_of_10000_jobs_in_one_call() {
    let Some(factory) = PgFactory::for_test("batch_enqueue_of_10000_jobs_in_one_call") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let batch: Vec<NewJob> = (0..10_000)
        .map(|n| NewJob::new(kind("work"), json!({"n": n, "to": "someone@example.com"})))
        .collect();
    let started = Instant::now();
    let answers = h.store.jobs_enqueue(batch).await.unwrap();
    let plain = started.elapsed();
    assert_eq!(answers.len(), 10_000);
    assert!(answers.iter().all(|a| a.status == EnqueueStatus::Created));
    let keyed: Vec<NewJob> = (0..10_000)
        .map(|n| {
            NewJob::new(kind("work"), json!({"n": n}))
                .with_idempotency_key(format!("key-{n}"))
                .with_unique_key(format!("unique-{n}"))
        })
        .collect();
    let started = Instant::now();
    let answers = h.store.jobs_enqueue(keyed.clone()).await.unwrap();
    let with_keys = started.elapsed();
    assert!(answers.iter().all(|a| a.status == EnqueueStatus::Created));
    let started = Instant::now();
    let replays = h.store.jobs_enqueue(keyed).await.unwrap();
    let replayed = started.elapsed();
    assert!(replays.iter().all(|a| a.status == EnqueueStatus::Replayed));
    assert!(replays
        .iter()
        .zip(&answers)
        .all(|(r, a)| r.job.id == a.job.id));
    assert_eq!(count_in_state(h.store.pool(), "queued").await, 20_000);
    eprintln!(
        "batch enqueue of 10,000 jobs: {:.1} ms plain, {:.1} ms with idempotency and unique keys, {:.1} ms replayed",
        plain.as_secs_f64() * 1000.0,
        with_keys.as_secs_f64() * 1000.0,
        replayed.as_secs_f64() * 1000.0
    );
}

/// `enqueue_in` enqueues inside the caller's transaction: visible to others and announced
/// only after commit; nothing after rollback; a conflicting batch undoes only itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enqueue_in_commits_and_rolls_back_with_the_caller() {
    let Some(factory) = PgFactory::for_test("enqueue_in_commits_and_rolls_back_with_the_caller")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let mut events = h.store.subscribe().await.unwrap();

    let mut tx = h.store.pool().begin().await.unwrap();
    sqlx::query("CREATE TABLE app_orders (id int PRIMARY KEY)")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("INSERT INTO app_orders VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let answers = h
        .store
        .enqueue_in(&mut tx, vec![new_job("work")])
        .await
        .unwrap();
    let id = answers[0].job.id;
    assert!(
        matches!(h.store.job_get(id).await, Err(Error::NotFound { .. })),
        "invisible before commit"
    );
    tx.commit().await.unwrap();
    assert_eq!(h.store.job_get(id).await.unwrap().state, JobState::Queued);
    let event = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .unwrap();
    assert_eq!(
        event,
        Some(StoreEvent::JobsAvailable {
            queue: QueueName::default_queue()
        })
    );

    let mut tx = h.store.pool().begin().await.unwrap();
    sqlx::query("INSERT INTO app_orders VALUES (2)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let answers = h
        .store
        .enqueue_in(&mut tx, vec![new_job("work")])
        .await
        .unwrap();
    let rolled_back = answers[0].job.id;
    tx.rollback().await.unwrap();
    assert!(matches!(
        h.store.job_get(rolled_back).await,
        Err(Error::NotFound { .. })
    ));
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM app_orders")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(orders, 1);

    // A batch that conflicts is undone alone (savepoint); the caller's work survives.
    h.store
        .job_enqueue(new_job("work").with_idempotency_key("k"))
        .await
        .unwrap();
    let mut tx = h.store.pool().begin().await.unwrap();
    sqlx::query("INSERT INTO app_orders VALUES (3)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let conflict = h
        .store
        .enqueue_in(
            &mut tx,
            vec![
                new_job("first"),
                NewJob::new(kind("work"), json!({"other": true})).with_idempotency_key("k"),
            ],
        )
        .await;
    assert!(
        matches!(conflict, Err(Error::Conflict { .. })),
        "{conflict:?}"
    );
    let kept = h
        .store
        .enqueue_in(&mut tx, vec![new_job("kept")])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        h.store.job_get(kept[0].job.id).await.unwrap().kind.as_str(),
        "kept"
    );
    let firsts: i64 = sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE kind = 'first'")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(firsts, 0, "the conflicting batch stored nothing");
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM app_orders")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(orders, 2);
}

/// The meta containment index (migration 2) covers only finished jobs that have meta, and
/// the form in which jobs_list.sql states a meta filter with keys lets the planner use it
/// (a filter with keys implies `meta <> '{}'`); the index of migration 1 is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn meta_index_covers_finished_jobs_with_meta_only() {
    let Some(factory) = PgFactory::for_test("meta_index_covers_finished_jobs_with_meta_only")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let pool = h.store.pool();
    let definition: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'drover' AND indexname = 'jobs_done_meta_set_idx'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        definition.contains("USING gin (meta jsonb_path_ops)"),
        "{definition}"
    );
    assert!(definition.contains("meta <> '{}'::jsonb"), "{definition}");
    let old: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = 'drover' AND indexname = 'jobs_done_meta_idx'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(old, 0, "the index of every finished job's meta is dropped");
    // 5,000 finished jobs without meta and one with: the filter is selective.
    sqlx::query(
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, meta, run_at, state, max_attempts, finished_at) \
         SELECT gen_random_uuid(), 'k', 'default', 'default', '{}', \
                CASE WHEN n = 0 THEN '{\"customer\": \"acme\"}'::jsonb ELSE '{}'::jsonb END, \
                now(), 'succeeded', 1, now() \
         FROM generate_series(0, 4999) AS n",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE drover.jobs")
        .execute(pool)
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT j.id FROM drover.jobs j WHERE j.state = 'succeeded' \
         AND ($1::jsonb IS NULL OR $1 = '{}'::jsonb OR (j.meta @> $1 AND j.meta <> '{}'::jsonb))",
    )
    .bind(serde_json::json!({"customer": "acme"}))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("jobs_done_meta_set_idx"), "{plan}");
}

/// The runner's claim (claim_queue.sql) updates the rows it locked through their tuple
/// addresses (a TID scan), whatever the size of the table or of the claim: not by a
/// primary-key descent per job, and never by a hash join over a sequential scan of the
/// whole table (how a large claim joined with its candidates was once planned). The
/// statement is prepared as the store prepares it and explained as a generic plan, the
/// plan a prepared statement settles on after its first executions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runner_claim_updates_the_locked_rows_by_tuple_address() {
    let Some(factory) =
        PgFactory::for_test("runner_claim_updates_the_locked_rows_by_tuple_address")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let pool = h.store.pool();
    sqlx::query(
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, max_attempts) \
         SELECT gen_random_uuid(), 'k', 'default', 'default', '{}', now(), 'queued', 3 \
         FROM generate_series(1, 5000)",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE drover.jobs")
        .execute(pool)
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    // Joined from its parts as the store's sql.rs joins them.
    let statement = concat!(
        include_str!("../../crates/store-postgres/src/sql/claim_queue.sql"),
        include_str!("../../crates/store-postgres/src/sql/claim_start.sql"),
        include_str!("../../crates/store-postgres/src/sql/claim_queue_end.sql"),
    );
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    let prepare =
        format!("PREPARE claim_queue(text, text[], integer, text, bigint, integer) AS {statement}");
    sqlx::Executor::execute(&mut *conn, prepare.as_str())
        .await
        .unwrap();
    for limit in [1, 288, 1000] {
        let plan: Vec<String> = sqlx::query_scalar(&format!(
            "EXPLAIN EXECUTE claim_queue('default', '{{k}}', {limit}, 'w', 60000000, {limit})"
        ))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("Tid Scan on jobs"), "limit {limit}: {plan}");
        assert!(!plan.contains("Seq Scan on jobs"), "limit {limit}: {plan}");
        assert!(!plan.contains("jobs_pkey"), "limit {limit}: {plan}");
    }
    // The same text claims: the first three jobs in claim order (one run_at, so by id),
    // the first two of them started.
    let answered = sqlx::query("EXECUTE claim_queue('default', '{k}', 3, 'w', 60000000, 2)")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    assert_eq!(answered.len(), 3);
    let running: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM drover.jobs WHERE state = 'running' AND attempt = 1 \
         AND fencing_token = 1 AND lease_owner = 'w' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let first: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM drover.jobs ORDER BY id LIMIT 3")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(running, first);
    let started: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM drover.jobs WHERE state = 'running' AND started_at = attempted_at \
         ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(started, first[..2]);
}

/// Migration 3: the pending index holds only jobs waiting for a worker (a claim does not
/// write it), the kind and tenant list indexes are replaced by one GIN index over the
/// facets, and the planner (with the expression statistics ANALYZE fills) answers a rare
/// kind or tenant from that index and a common one without it (a bitmap of most of the
/// table, then a sort, would cost a full pass per page).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fewer_index_writes_keep_kind_and_tenant_lists_indexed() {
    let Some(factory) =
        PgFactory::for_test("fewer_index_writes_keep_kind_and_tenant_lists_indexed")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let pool = h.store.pool();
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'drover' AND tablename = 'jobs'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let definition = |name: &str| {
        indexes
            .iter()
            .find(|(index, _)| index == name)
            .map(|(_, definition)| definition.clone())
    };
    for gone in [
        "jobs_pending_idx",
        "jobs_done_kind_idx",
        "jobs_done_tenant_idx",
    ] {
        assert_eq!(definition(gone), None, "{gone} is dropped");
    }
    let waiting = definition("jobs_waiting_idx").expect("jobs_waiting_idx");
    assert!(
        waiting.contains("'queued'::text, 'reconciling'::text"),
        "{waiting}"
    );
    assert!(!waiting.contains("running"), "{waiting}");
    let facets = definition("jobs_done_facets_idx").expect("jobs_done_facets_idx");
    assert!(facets.contains("USING gin"), "{facets}");
    // 20,000 finished jobs: kind 'common' and tenant 'default' on all but ten, which have
    // kind 'rare' and tenant 'acme'.
    sqlx::query(
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, max_attempts, finished_at) \
         SELECT gen_random_uuid(), CASE WHEN n % 2000 = 0 THEN 'rare' ELSE 'common' END, 'default', \
                CASE WHEN n % 2000 = 0 THEN 'acme' ELSE 'default' END, '{}', now(), 'succeeded', 1, now() \
         FROM generate_series(0, 19999) AS n",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE drover.jobs")
        .execute(pool)
        .await
        .unwrap();
    // The terminal branch of jobs_list.sql, as it states kind and tenant filters.
    let plan_for = |facet: &'static str| async move {
        let mut conn = pool.acquire().await.unwrap();
        let plan: Vec<String> = sqlx::query_scalar(
            "EXPLAIN SELECT j.id FROM drover.jobs j WHERE j.state = 'succeeded' \
             AND (cardinality($1::text[]) = 0 OR ARRAY['k:' || j.kind, 't:' || j.tenant] @> $1::text[]) \
             ORDER BY j.id DESC LIMIT 51",
        )
        .bind(vec![facet.to_owned()])
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        plan.join("\n")
    };
    for rare in ["k:rare", "t:acme"] {
        let plan = plan_for(rare).await;
        assert!(plan.contains("jobs_done_facets_idx"), "{rare}: {plan}");
    }
    for common in ["k:common", "t:default"] {
        let plan = plan_for(common).await;
        assert!(!plan.contains("jobs_done_facets_idx"), "{common}: {plan}");
    }
}

/// A list filtered by the queue of a backlog (all its jobs queued) reads the finished jobs
/// through jobs_done_queue_idx, which finds none at once, not by walking every succeeded job
/// of the other queues newest first: the (queue, state) statistics of migration 12 tell the
/// planner the backlog owns no succeeded job (at 1,000,000 jobs it walked 514,000 of them
/// without: BENCHMARKS.md, "Dashboard").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_filter_reads_finished_jobs_through_the_queue_index() {
    let Some(factory) =
        PgFactory::for_test("a_queue_filter_reads_finished_jobs_through_the_queue_index")
    else {
        return;
    };
    let h = factory.open_pg(unbounded_options()).await;
    let pool = h.store.pool();
    // 40,000 jobs in four queues, ids interleaved: 'backlog' all queued, the others finished.
    sqlx::query(
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, max_attempts, finished_at) \
         SELECT gen_random_uuid(), 'k', (ARRAY['backlog', 'mail', 'media', 'reports'])[n % 4 + 1], \
                'default', '{}', now(), CASE WHEN n % 4 = 0 THEN 'queued' ELSE 'succeeded' END, 1, \
                CASE WHEN n % 4 = 0 THEN NULL ELSE now() END \
         FROM generate_series(0, 39999) AS n",
    )
    .execute(pool)
    .await
    .unwrap();
    let plan = || async {
        sqlx::query("ANALYZE drover.jobs")
            .execute(pool)
            .await
            .unwrap();
        let mut conn = pool.acquire().await.unwrap();
        // The succeeded branch of jobs_list.sql, as it states a queue filter.
        let plan: Vec<String> = sqlx::query_scalar(
            "EXPLAIN SELECT j.* FROM drover.jobs j WHERE j.state = 'succeeded' \
             AND ($1::text IS NULL OR j.queue = $1) ORDER BY j.id DESC LIMIT 51",
        )
        .bind("backlog")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        plan.join("\n")
    };
    let with_statistics = plan().await;
    assert!(
        with_statistics.contains("jobs_done_queue_idx"),
        "{with_statistics}"
    );
    // The statistics the planner read: the pairs there are, and none of the backlog and
    // succeeded.
    let pairs: Vec<Vec<String>> = sqlx::query_scalar(
        "SELECT m.values FROM pg_statistic_ext s JOIN pg_statistic_ext_data d ON d.stxoid = s.oid, \
         pg_mcv_list_items(d.stxdmcv) m WHERE s.stxname = 'jobs_queue_state_stats'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(
        pairs.contains(&vec!["backlog".to_owned(), "queued".to_owned()]),
        "{pairs:?}"
    );
    assert!(
        !pairs.contains(&vec!["backlog".to_owned(), "succeeded".to_owned()]),
        "{pairs:?}"
    );
    assert_eq!(pairs.len(), 4, "{pairs:?}");
}

/// The plan of jobs_list.sql (its lines joined) for a page of 50 filtered by meta
/// `{"customer": "c40"}` and by `state` when given, as the store plans it: for these values.
async fn explain_meta_list(pool: &PgPool, state: Option<&str>) -> String {
    let (_, list) = drover_store_postgres::statements::ALL
        .iter()
        .find(|(files, _)| *files == "jobs_list.sql")
        .expect("the list statement");
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {list}"))
        .bind(None::<String>)
        .bind(state)
        .bind(None::<String>)
        .bind(None::<String>)
        .bind(serde_json::json!({"customer": "c40"}))
        .bind(None::<uuid::Uuid>)
        .bind(51_i64)
        .bind(Vec::<String>::new())
        .bind(false)
        .bind(false)
        .bind(false)
        .bind(false)
        .fetch_all(pool)
        .await
        .unwrap();
    plan.join("\n")
}

/// A meta filter without a state finds the queued jobs whose meta matches through
/// jobs_queued_meta_set_idx (migration 13, ADR 0017), not by reading the backlog newest first
/// (616 ms at 5,000,000 jobs without it: BENCHMARKS.md, "Dashboard"), and lists every match.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_meta_filter_reads_queued_jobs_through_their_meta_index() {
    let Some(factory) =
        PgFactory::for_test("a_meta_filter_reads_queued_jobs_through_their_meta_index")
    else {
        return;
    };
    let h = factory.open_pg(unbounded_options()).await;
    let pool = h.store.pool();
    // 40,000 queued jobs, a fifth with meta naming one of 1,000 customers: 40 of "c40".
    sqlx::query(
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, meta, run_at, state, max_attempts) \
         SELECT gen_random_uuid(), 'k', 'backlog', 'default', '{}', \
                CASE WHEN n % 5 = 0 THEN jsonb_build_object('customer', 'c' || n % 1000) \
                     ELSE '{}' END, now(), 'queued', 1 \
         FROM generate_series(0, 39999) AS n",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE drover.jobs")
        .execute(pool)
        .await
        .unwrap();
    let plan = explain_meta_list(pool, None).await;
    assert!(plan.contains("jobs_queued_meta_set_idx"), "{plan}");
    let page = h
        .store
        .jobs_list(ListJobs {
            meta: Some(serde_json::json!({"customer": "c40"})),
            limit: 100,
            details: JobDetails::NONE,
            ..ListJobs::default()
        })
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 40);
    assert!(page
        .jobs
        .iter()
        .all(|job| job.meta == serde_json::json!({"customer": "c40"})));
    assert!(page.jobs.windows(2).all(|w| w[0].id > w[1].id));
}

/// A state filter folds away, when the list statement is planned, every branch of
/// jobs_list.sql that reads other states, including the branch of two states (queued and
/// reconciling), which PostgreSQL does not refute by itself: with a meta filter, which no
/// index of queued jobs serves, it scanned the whole table (591 ms at 5,000,000 jobs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_state_filter_reads_only_the_branch_of_its_state() {
    let Some(factory) = PgFactory::for_test("a_state_filter_reads_only_the_branch_of_its_state")
    else {
        return;
    };
    let h = factory.open_pg(unbounded_options()).await;
    let pool = h.store.pool();
    for state in [
        "waiting",
        "queued",
        "reconciling",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    ] {
        let plan = explain_meta_list(pool, Some(state)).await;
        assert_eq!(
            plan.matches("One-Time Filter: false").count(),
            5,
            "{state}: the five other branches fold away\n{plan}"
        );
    }
}

/// Migration 3 refuses to drop the old pending index when an index it would otherwise
/// build is there but INVALID (a `CREATE INDEX CONCURRENTLY` that failed): the error names
/// the index, nothing of the migration is kept, and once the index is dropped the migration
/// builds it and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fewer_index_writes_refuses_an_invalid_prebuilt_index() {
    let Some(factory) = PgFactory::for_test("fewer_index_writes_refuses_an_invalid_prebuilt_index")
    else {
        return;
    };
    let factory = &factory;
    let connect = bare_database(factory).await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(connect)
        .await
        .unwrap();
    drover_store_postgres::migrate(&pool).await.unwrap();
    // Back to version 2, with an operator's pre-built index left invalid.
    for statement in [
        "DELETE FROM drover.schema_migrations WHERE version = 3",
        "DROP STATISTICS drover.jobs_facets_stats",
        "DROP INDEX drover.jobs_done_facets_idx",
        "CREATE INDEX jobs_pending_idx ON drover.jobs (tenant, id) \
         WHERE state IN ('queued', 'running', 'reconciling')",
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'drover.jobs_waiting_idx'::regclass",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    let error = drover_store_postgres::migrate(&pool).await.unwrap_err();
    let message = format!("{error} {:?}", std::error::Error::source(&error));
    assert!(message.contains("migration 3"), "{message}");
    assert!(
        message.contains("jobs_waiting_idx") && message.contains("invalid"),
        "{message}"
    );
    let kept: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = 'drover' AND indexname = 'jobs_pending_idx'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(kept, 1, "the old index stays while the new one is invalid");
    sqlx::query("DROP INDEX drover.jobs_waiting_idx")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        drover_store_postgres::migrate(&pool).await.unwrap(),
        vec![3]
    );
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
         WHERE c.relname IN ('jobs_pending_idx', 'jobs_waiting_idx', 'jobs_done_facets_idx') \
           AND i.indisvalid ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(indexes, vec!["jobs_done_facets_idx", "jobs_waiting_idx"]);
    pool.close().await;
}

/// A heartbeat that took a running job's lock before its finish may record a start with a later
/// clock reading than the finish's: each one-statement finish (a success alone, and any other
/// outcome) still leaves the job started no later than it finished.
#[tokio::test]
async fn a_finish_never_leaves_a_job_finished_before_it_started() {
    let Some(factory) =
        PgFactory::for_test("a_finish_never_leaves_a_job_finished_before_it_started")
    else {
        return;
    };
    let h = factory.open_pg(unbounded_options()).await;
    let pool = h.store.pool();
    for _ in 0..2 {
        h.store.job_enqueue(new_job("work")).await.unwrap();
    }
    let running = h.store.jobs_claim(claim_params("w", 2)).await.unwrap().jobs;
    assert_eq!(running.len(), 2);
    for job in &running {
        sqlx::query("UPDATE drover.jobs SET started_at = now() + interval '1 hour' WHERE id = $1")
            .bind(job.id.as_uuid())
            .execute(pool)
            .await
            .unwrap();
    }
    let item = |job: &Job, finish: Finish| FinishItem {
        parent: None,
        id: job.id,
        token: job.fencing_token,
        finish,
        started: None,
    };
    // A batch of successes alone takes finish_succeeded.sql, any other finish.sql.
    h.store
        .jobs_finish(vec![item(&running[0], Finish::Succeeded { result: None })])
        .await
        .unwrap();
    h.store
        .jobs_finish(vec![item(
            &running[1],
            Finish::Failed {
                message: "boom".into(),
                retry: Retry::Never,
            },
        )])
        .await
        .unwrap();
    for job in &running {
        let stored = h.store.job_get(job.id).await.unwrap();
        let (started, finished) = (stored.started_at.unwrap(), stored.finished_at.unwrap());
        assert!(
            started <= finished,
            "started {started}, finished {finished}"
        );
    }
}

/// A running job always has a lease owner and a lease expiry (jobs_lease_check): a direct
/// write that takes either away, or stores a running job without them, is refused by the
/// database (23514); a reconciling job has both or neither; queued and finished jobs are
/// not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_job_without_a_lease_cannot_be_stored() {
    let Some(factory) = PgFactory::for_test("a_running_job_without_a_lease_cannot_be_stored")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let pool = h.store.pool();
    h.store.job_enqueue(new_job("work")).await.unwrap();
    let running = h
        .store
        .jobs_claim(claim_params("w", 1))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let id = running.id.as_uuid();
    let refused = [
        "UPDATE drover.jobs SET lease_owner = NULL WHERE id = $1",
        "UPDATE drover.jobs SET lease_expires_at = NULL WHERE id = $1",
        "UPDATE drover.jobs SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, max_attempts) \
         SELECT gen_random_uuid(), kind, queue, tenant, args, run_at, 'running', 3 FROM drover.jobs WHERE id = $1",
        "UPDATE drover.jobs SET state = 'reconciling', lease_expires_at = NULL WHERE id = $1",
    ];
    for statement in refused {
        let error = sqlx::query(statement)
            .bind(id)
            .execute(pool)
            .await
            .expect_err(statement);
        let database = error.as_database_error().expect("a database error");
        assert_eq!(
            database.code().as_deref(),
            Some("23514"),
            "{statement}: {error}"
        );
        assert_eq!(
            database.constraint(),
            Some("jobs_lease_check"),
            "{statement}"
        );
    }
    for allowed in [
        "UPDATE drover.jobs SET state = 'reconciling' WHERE id = $1",
        "UPDATE drover.jobs SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
        "UPDATE drover.jobs SET state = 'queued' WHERE id = $1",
        "UPDATE drover.jobs SET lease_owner = 'stale' WHERE id = $1",
    ] {
        sqlx::query(allowed)
            .bind(id)
            .execute(pool)
            .await
            .expect(allowed);
    }
    let validated: bool = sqlx::query_scalar(
        "SELECT convalidated FROM pg_constraint WHERE conname = 'jobs_lease_check'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(validated, "the migration validated the constraint");
}

/// The vacuum status names what keeps vacuum from cleaning the jobs table: a transaction
/// left open (REPEATABLE READ with a read) is the oldest, by pid, in the status and the
/// snapshot, and a VACUUM run meanwhile leaves the dead row versions of an update of
/// every job; once the transaction ends, VACUUM removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vacuum_status_names_the_transaction_that_keeps_dead_rows() {
    let Some(factory) =
        PgFactory::for_test("vacuum_status_names_the_transaction_that_keeps_dead_rows")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let jobs: Vec<NewJob> = (0..200)
        .map(|n| NewJob::new(kind("work"), json!(n)))
        .collect();
    h.store.jobs_enqueue(jobs).await.unwrap();
    let mut reader = sqlx::PgConnection::connect_with(&h.connect).await.unwrap();
    let reader_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut reader)
        .await
        .unwrap();
    exec(
        &mut reader,
        "BEGIN ISOLATION LEVEL REPEATABLE READ".to_owned(),
    )
    .await
    .unwrap();
    let _: i64 = sqlx::query_scalar("SELECT count(*) FROM drover.jobs")
        .fetch_one(&mut reader)
        .await
        .unwrap();
    let mut writer = sqlx::PgConnection::connect_with(&h.connect).await.unwrap();
    // Dead versions of every job, counted at once (statistics are flushed lazily).
    for statement in [
        "UPDATE drover.jobs SET priority = priority",
        "SELECT pg_stat_force_next_flush()",
        "VACUUM drover.jobs",
    ] {
        exec(&mut writer, statement.to_owned()).await.unwrap();
    }
    let status = h
        .store
        .vacuum_status()
        .await
        .unwrap()
        .expect("PostgreSQL has vacuum");
    assert_eq!(
        status.oldest_transaction_pid,
        Some(reader_pid as u32),
        "{status:?}"
    );
    assert!(status.oldest_transaction_age_ms.is_some(), "{status:?}");
    assert!(
        status.jobs_dead_rows >= 200,
        "vacuum could not remove them: {status:?}"
    );
    assert!(status.jobs_live_rows >= 200, "{status:?}");
    assert!(status.jobs_last_vacuum_at.is_some(), "{status:?}");
    let snapshot = h.store.queue_snapshot().await.unwrap();
    let vacuum = snapshot.vacuum.expect("the snapshot has it too");
    assert_eq!(vacuum.oldest_transaction_pid, Some(reader_pid as u32));

    exec(&mut reader, "COMMIT".to_owned()).await.unwrap();
    exec(&mut writer, "VACUUM drover.jobs".to_owned())
        .await
        .unwrap();
    let status = h.store.vacuum_status().await.unwrap().unwrap();
    assert_ne!(
        status.oldest_transaction_pid,
        Some(reader_pid as u32),
        "{status:?}"
    );
    assert!(
        status.jobs_dead_rows < 200,
        "vacuum removed them: {status:?}"
    );
}

/// Migrations applied concurrently from 4 tasks run once each (in version order);
/// migrate is idempotent;
/// applied_versions lists them; nothing lands in schema public.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_concurrently_once_and_idempotent() {
    let Some(factory) = PgFactory::for_test("migrate_concurrently_once_and_idempotent") else {
        return;
    };
    let factory = &factory;
    let connect = bare_database(factory).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let connect = connect.clone();
        tasks.push(tokio::spawn(async move {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect_with(connect)
                .await
                .unwrap();
            let applied = drover_store_postgres::migrate(&pool).await.unwrap();
            pool.close().await;
            applied
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    // Each migration runs in its own transaction under the migration lock, so the
    // migrators may share the work: every version is applied by exactly one of them.
    let known: Vec<i64> = migrations().iter().map(|m| m.version).collect();
    let mut applied_once: Vec<i64> = results.iter().flatten().copied().collect();
    applied_once.sort_unstable();
    assert_eq!(applied_once, known, "{results:?}");
    for result in &results {
        assert!(
            result.windows(2).all(|pair| pair[0] < pair[1]),
            "in order: {results:?}"
        );
    }

    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(connect)
        .await
        .unwrap();
    assert!(drover_store_postgres::migrate(&pool)
        .await
        .unwrap()
        .is_empty());
    let applied = drover_store_postgres::applied_versions(&pool)
        .await
        .unwrap();
    assert_eq!(applied.iter().map(|m| m.version).collect::<Vec<_>>(), known);
    for (applied, known) in applied.iter().zip(migrations()) {
        assert_eq!(applied.name, known.name);
        assert_eq!(applied.checksum, known.checksum());
    }
    let public: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(public, 0, "nothing is created in schema public");
    let store = PgStore::from_pool(pool, unbounded_options());
    store.check_ready().await.unwrap();
    store.close().await;
}

/// Without the schema every operation is Fatal and says to run `drover migrate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn missing_schema_is_fatal_with_advice() {
    let Some(factory) = PgFactory::for_test("missing_schema_is_fatal_with_advice") else {
        return;
    };
    let factory = &factory;
    let connect = bare_database(factory).await;
    let store = PgStore::connect_with(connect, unbounded_options())
        .await
        .unwrap();
    let fatal = |e: Error| match e {
        Error::Fatal { message, .. } => assert!(message.contains("drover migrate"), "{message}"),
        other => panic!("expected Fatal, got {other:?}"),
    };
    fatal(store.check_ready().await.unwrap_err());
    fatal(store.job_enqueue(new_job("work")).await.unwrap_err());
    fatal(store.jobs_claim(claim_params("w", 1)).await.unwrap_err());
    fatal(store.queue_snapshot().await.unwrap_err());
    assert!(drover_store_postgres::applied_versions(store.pool())
        .await
        .unwrap()
        .is_empty());
    store.close().await;
}

/// A server that refuses connections is Unavailable (transient), and the message does not
/// echo the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closed_port_is_unavailable() {
    let Some(_factory) = PgFactory::for_test("closed_port_is_unavailable") else {
        return;
    };
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("postgres://postgres:secret@127.0.0.1:{port}/test");
    let result = PgStore::connect(
        &url,
        PgOptions {
            acquire_timeout: Duration::from_secs(1),
            ..PgOptions::default()
        },
    )
    .await;
    match result {
        Err(e @ Error::Unavailable { .. }) => {
            let text = format!("{e}");
            assert!(
                !text.contains("secret") && !text.contains("postgres://"),
                "{text}"
            );
            assert!(e.is_transient());
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    match PgStore::connect("not a url", PgOptions::default()).await {
        Err(Error::Fatal { message, .. }) => assert!(!message.contains("not a url")),
        other => panic!("expected Fatal, got {other:?}"),
    }
}

/// TLS follows the URL's `sslmode`: without one the connection is plain (a job's round trips
/// pay no encryption); with `sslmode=require` it is encrypted when the server offers TLS, and
/// refused when it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_follows_the_urls_sslmode() {
    let Some(server) = Server::for_test("tls_follows_the_urls_sslmode") else {
        return;
    };
    let url = server.url("postgres");
    let encrypted = |store: PgStore| async move {
        let ssl: bool =
            sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .fetch_one(store.pool())
                .await
                .unwrap();
        let offered: String = sqlx::query_scalar("SHOW ssl")
            .fetch_one(store.pool())
            .await
            .unwrap();
        store.close().await;
        (ssl, offered == "on")
    };
    let plain = PgStore::connect(&url, PgOptions::default()).await.unwrap();
    let (ssl, offered) = encrypted(plain).await;
    if std::env::var_os("PGSSLMODE").is_none() {
        assert!(!ssl, "a URL without sslmode connects without TLS");
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    let required = PgStore::connect(
        &format!("{url}{separator}sslmode=require"),
        PgOptions {
            acquire_timeout: Duration::from_secs(5),
            ..PgOptions::default()
        },
    )
    .await;
    match (offered, required) {
        (true, Ok(store)) => assert!(encrypted(store).await.0, "sslmode=require encrypts"),
        (false, Err(e)) => assert!(!e.to_string().contains(&url), "{e}"),
        (offered, other) => panic!(
            "server offers TLS: {offered}; sslmode=require gave {:?}",
            other.map(|_| "a store")
        ),
    }
}

/// A claim is dated after every change it saw: a slow-path claim (a `max_running` policy)
/// whose transaction began before the job holding the policy finished, and which admitted
/// the next job because it saw that finish, stamps the claimed job's attempted_at after the
/// holder's finished_at (stamped with the transaction's start, it came before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_after_a_finish_it_saw_is_dated_after_that_finish() {
    let Some(factory) =
        PgFactory::for_test("claim_after_a_finish_it_saw_is_dated_after_that_finish")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    h.store
        .limit_set(LimitPolicy::new(LimitKey::parse("kind:work").unwrap(), Some(1), None).unwrap())
        .await
        .unwrap();
    h.store.job_enqueue(new_job("work")).await.unwrap();
    let holder = h
        .store
        .jobs_claim(claim_params("w1", 1))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let held = h.store.job_enqueue(new_job("work")).await.unwrap().job;
    // Another session holds the policy row, so the next claim's transaction begins and
    // then waits for the policy lock.
    let blocker_options = h.connect.clone().application_name("drover-test-blocker");
    let mut blocker = sqlx::PgConnection::connect_with(&blocker_options)
        .await
        .unwrap();
    let mut blocker_tx = blocker.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM drover.limits FOR UPDATE")
        .execute(&mut *blocker_tx)
        .await
        .unwrap();
    let store = h.store.clone();
    let claim = tokio::spawn(async move { store.jobs_claim(claim_params("w2", 1)).await });
    let database = h.database.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        sqlx::query("SELECT pg_stat_clear_snapshot()")
            .execute(&mut *blocker_tx)
            .await
            .unwrap();
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'drover' AND wait_event_type = 'Lock'",
        )
        .bind(&database)
        .fetch_one(&mut *blocker_tx)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the claim never waited for the policy lock"
        );
        tokio::task::yield_now().await;
    }
    // The holder finishes while the claim waits; then the policy lock is released.
    h.store
        .job_finish(
            holder.id,
            holder.fencing_token,
            drover_core::Finish::Succeeded { result: None },
        )
        .await
        .unwrap();
    blocker_tx.rollback().await.unwrap();
    let claimed = claim.await.unwrap().unwrap().jobs;
    assert_eq!(
        claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![held.id]
    );
    let finished_at = h
        .store
        .job_get(holder.id)
        .await
        .unwrap()
        .finished_at
        .unwrap();
    let attempted_at = claimed[0].attempted_at.unwrap();
    assert!(
        attempted_at >= finished_at,
        "the claim admitted by the finish is dated {attempted_at}, before the finish at {finished_at}"
    );
    assert!(claimed[0].lease_expires_at.unwrap() >= finished_at + chrono::Duration::seconds(60));
}

/// Terminating the store's connections (one of them blocked mid-call) gives Unavailable to
/// the interrupted call; the next call succeeds on fresh connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminated_connections_are_unavailable_then_recover() {
    let Some(factory) = PgFactory::for_test("terminated_connections_are_unavailable_then_recover")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let job = h.store.job_enqueue(new_job("work")).await.unwrap().job;
    // Another session (not the store's: its application_name differs) locks the job row,
    // so the store's cancel blocks inside its transaction.
    let blocker_options = h.connect.clone().application_name("drover-test-blocker");
    let mut blocker = sqlx::PgConnection::connect_with(&blocker_options)
        .await
        .unwrap();
    let mut blocker_tx = blocker.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM drover.jobs WHERE id = $1 FOR UPDATE")
        .bind(job.id.as_uuid())
        .execute(&mut *blocker_tx)
        .await
        .unwrap();
    let store = h.store.clone();
    let cancel = tokio::spawn(async move { store.job_cancel(job.id).await });
    // Wait until the cancel is blocked on the row lock.
    let database = h.database.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Inside a transaction pg_stat_activity is read once and cached: drop the snapshot
        // so each poll sees the current activity.
        sqlx::query("SELECT pg_stat_clear_snapshot()")
            .execute(&mut *blocker_tx)
            .await
            .unwrap();
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'drover' AND wait_event_type = 'Lock'",
        )
        .bind(&database)
        .fetch_one(&mut *blocker_tx)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the cancel never blocked");
        tokio::task::yield_now().await;
    }
    let terminated: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'drover') t",
    )
    .bind(&database)
    .fetch_one(&mut *blocker_tx)
    .await
    .unwrap();
    assert!(terminated >= 1);
    let interrupted = cancel.await.unwrap();
    match interrupted {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_transient()),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    blocker_tx.rollback().await.unwrap();
    // The pool discards the dead connections: the next calls just work.
    assert_eq!(
        h.store.job_get(job.id).await.unwrap().state,
        JobState::Queued
    );
    let outcome = h.store.job_cancel(job.id).await.unwrap();
    assert_eq!(outcome.job.state, JobState::Cancelled);
}

/// The event stream survives a lost LISTEN connection: it emits Resync once listening
/// again, then delivers new events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_resync_after_listen_connection_loss() {
    let Some(factory) = PgFactory::for_test("events_resync_after_listen_connection_loss") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let mut events = h.store.subscribe().await.unwrap();
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%') t",
    )
    .bind(&h.database)
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert_eq!(killed, 1, "one LISTEN connection");
    let event = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .unwrap();
    assert_eq!(event, Some(StoreEvent::Resync));
    h.store.job_enqueue(new_job("work")).await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .unwrap();
    assert_eq!(
        event,
        Some(StoreEvent::JobsAvailable {
            queue: QueueName::default_queue()
        })
    );
}

/// PgBouncer settings: without the statement cache every operation still works, and with
/// `listen: false` the event stream never yields (workers poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pgbouncer_mode_works_without_statement_cache_or_listen() {
    let Some(factory) =
        PgFactory::for_test("pgbouncer_mode_works_without_statement_cache_or_listen")
    else {
        return;
    };
    let factory = &factory;
    let h = factory
        .open_pg(PgOptions {
            statement_cache: false,
            listen: false,
            ..unbounded_options()
        })
        .await;
    let mut events = h.store.subscribe().await.unwrap();
    let job = h
        .store
        .job_enqueue(new_job("work").with_unique_key("u"))
        .await
        .unwrap()
        .job;
    let claimed = h.store.jobs_claim(claim_params("w", 5)).await.unwrap().jobs;
    assert_eq!(claimed[0].id, job.id);
    h.store
        .job_finish(
            job.id,
            claimed[0].fencing_token,
            drover_core::Finish::Succeeded {
                result: Some(json!(1)),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        h.store.job_get(job.id).await.unwrap().result,
        Some(json!(1))
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), events.next())
            .await
            .is_err(),
        "no events without LISTEN"
    );
}

/// The schema of a database, as lines: columns, indexes (with validity), constraints,
/// extended statistics, functions and the recorded migrations of schema `drover`.
const SCHEMA_DESCRIPTION: &str = "
SELECT line FROM (
    SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' '
        || is_nullable || ' ' || coalesce(column_default, '') AS line
    FROM information_schema.columns WHERE table_schema = 'drover'
    UNION ALL
    SELECT 'index ' || i.indexrelid::regclass::text || ' valid=' || x.indisvalid || ' '
        || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_index x ON x.indexrelid = i.indexrelid
    WHERE c.relnamespace = 'drover'::regnamespace
    UNION ALL
    SELECT 'constraint ' || conrelid::regclass::text || '.' || conname || ' '
        || pg_get_constraintdef(oid) || ' validated=' || convalidated
    FROM pg_constraint WHERE connamespace = 'drover'::regnamespace
    UNION ALL
    SELECT 'statistics ' || stxname FROM pg_statistic_ext
    WHERE stxnamespace = 'drover'::regnamespace
    UNION ALL
    SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p
    WHERE p.pronamespace = 'drover'::regnamespace
    UNION ALL
    SELECT 'migration ' || version || ' ' || name || ' ' || checksum
    FROM drover.schema_migrations
) schema_lines ORDER BY line";

/// The schema described by [`SCHEMA_DESCRIPTION`] of the database at `connect`.
async fn schema_description(connect: PgConnectOptions) -> Vec<String> {
    let mut conn = sqlx::PgConnection::connect_with(&connect).await.unwrap();
    let lines = sqlx::query_scalar(SCHEMA_DESCRIPTION)
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    lines
}

/// A database the kit copies from its template holds exactly the schema `migrate` builds in an
/// empty database (so a stale or half-built template cannot pass for the migrated schema),
/// with every compiled-in migration recorded. Prints how long each way of setting up a
/// database takes (the kit copies, the faster).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn template_copy_holds_the_schema_migrate_builds() {
    let Some(factory) = PgFactory::for_test("template_copy_holds_the_schema_migrate_builds") else {
        return;
    };
    let factory = &factory;
    let started = Instant::now();
    let mut copies = Vec::new();
    for _ in 0..3 {
        copies.push(factory.fresh_database().await.1);
    }
    let copy = started.elapsed() / 3;
    let started = Instant::now();
    let mut migrated = Vec::new();
    for _ in 0..3 {
        let connect = bare_database(factory).await;
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(connect.clone())
            .await
            .unwrap();
        drover_store_postgres::migrate(&pool).await.unwrap();
        pool.close().await;
        migrated.push(connect);
    }
    let migrate = started.elapsed() / 3;
    eprintln!(
        "test database setup: {:.1} ms copying the template, {:.1} ms creating and migrating",
        copy.as_secs_f64() * 1000.0,
        migrate.as_secs_f64() * 1000.0
    );
    let expected = schema_description(migrated[0].clone()).await;
    for version in migrations().iter().map(|m| m.version) {
        assert!(
            expected
                .iter()
                .any(|line| line.starts_with(&format!("migration {version} "))),
            "migration {version} is not recorded: {expected:#?}"
        );
    }
    assert!(
        expected.iter().any(|line| line.starts_with("index ")),
        "{expected:#?}"
    );
    assert!(
        expected.iter().all(|line| !line.contains("valid=false")),
        "{expected:#?}"
    );
    for connect in copies.into_iter().chain(migrated.into_iter().skip(1)) {
        assert_eq!(schema_description(connect).await, expected);
    }
}

/// A claim that meets a job subject to a limit policy part-way switches from the one-statement
/// path to the admission path without losing claim order: free jobs before and after it, the
/// admitted limited job, never the held one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limits_mixed_claim_keeps_order_across_paths() {
    let Some(factory) = PgFactory::for_test("limits_mixed_claim_keeps_order_across_paths") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let store = &h.store;
    let key = |k: &str| LimitKey::parse(k).unwrap();
    store
        .limit_set(LimitPolicy::new(key("open"), Some(5), None).unwrap())
        .await
        .unwrap();
    store
        .limit_set(LimitPolicy::new(key("hold"), Some(0), None).unwrap())
        .await
        .unwrap();
    // A policy on an unrelated kind does not stop claims of this kind.
    store
        .limit_set(LimitPolicy::new(key("kind:other"), Some(0), None).unwrap())
        .await
        .unwrap();
    let enqueue = |priority: i16, limit: Option<&str>| {
        let mut job = new_job("work").with_priority(priority);
        if let Some(k) = limit {
            job = job.with_limit_key(key(k));
        }
        async move { store.job_enqueue(job).await.unwrap().job.id }
    };
    let a = enqueue(0, None).await;
    let b = enqueue(1, Some("open")).await;
    let held = enqueue(2, Some("hold")).await;
    let d = enqueue(3, None).await;
    let e = enqueue(4, Some("open")).await;
    let got: Vec<JobId> = store
        .jobs_claim(claim_params("w", 3))
        .await
        .unwrap()
        .jobs
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(got, vec![a, b, d]);
    let got: Vec<JobId> = store
        .jobs_claim(claim_params("w", 10))
        .await
        .unwrap()
        .jobs
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(got, vec![e]);
    let held_job = store.job_get(held).await.unwrap();
    assert_eq!((held_job.state, held_job.attempt), (JobState::Queued, 0));
}

/// Enqueues of a unique key racing with its holder finishing never fail and never leave two
/// live holders: each answer is the live holder (Duplicate) or a new job (Created).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unique_key_enqueue_racing_holder_finish_stays_consistent() {
    let Some(factory) =
        PgFactory::for_test("unique_key_enqueue_racing_holder_finish_stays_consistent")
    else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    for round in 0..20 {
        let key = format!("u{round}");
        let holder = h
            .store
            .job_enqueue(new_job("work").with_unique_key(key.clone()))
            .await
            .unwrap()
            .job;
        let running = h
            .store
            .jobs_claim(claim_params("w", 1))
            .await
            .unwrap()
            .jobs
            .remove(0);
        assert_eq!(running.id, holder.id);
        let finisher = {
            let store = h.store.clone();
            tokio::spawn(async move {
                store
                    .job_finish(
                        running.id,
                        running.fencing_token,
                        drover_core::Finish::Succeeded { result: None },
                    )
                    .await
                    .unwrap();
            })
        };
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let store = h.store.clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .job_enqueue(new_job("work").with_unique_key(key))
                    .await
                    .unwrap()
            }));
        }
        finisher.await.unwrap();
        let mut created = Vec::new();
        for t in tasks {
            let answer = t.await.unwrap();
            match answer.status {
                EnqueueStatus::Created => created.push(answer.job.id),
                EnqueueStatus::Duplicate => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(created.len() <= 1, "one new holder at most: {created:?}");
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM drover.jobs WHERE unique_key = $1 AND state IN ('queued', 'running', 'reconciling')",
        )
        .bind(&key)
        .fetch_one(h.store.pool())
        .await
        .unwrap();
        assert_eq!(live as usize, created.len());
        // Clear the new holder (if any) out of the way of the next round's claim.
        for id in created {
            h.store.job_cancel(id).await.unwrap();
        }
    }
}

/// A batch spanning thousands of tenants under tenant quotas takes a bounded number of quota
/// locks (never exhausting PostgreSQL's lock table) and still checks every tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enqueue_batch_of_5000_tenants_under_tenant_quota() {
    let Some(factory) = PgFactory::for_test("enqueue_batch_of_5000_tenants_under_tenant_quota")
    else {
        return;
    };
    let factory = &factory;
    let h = factory
        .open_pg(PgOptions {
            config: StoreConfig {
                quotas: Quotas {
                    max_pending: None,
                    max_tenant_pending: Some(2),
                },
                ..StoreConfig::default()
            },
            ..unbounded_options()
        })
        .await;
    let tenant = |n: usize| drover_core::TenantId::parse(format!("t{n}")).unwrap();
    let batch: Vec<NewJob> = (0..10_000)
        .map(|n| new_job("work").with_tenant(tenant(n % 5000)))
        .collect();
    let answers = h.store.jobs_enqueue(batch).await.unwrap();
    assert!(answers.iter().all(|a| a.status == EnqueueStatus::Created));
    match h
        .store
        .jobs_enqueue(vec![
            new_job("work").with_tenant(tenant(1)),
            new_job("work").with_tenant(tenant(4999)),
        ])
        .await
    {
        Err(Error::QuotaExceeded {
            quota,
            current,
            max,
        }) => {
            assert_eq!(quota, drover_core::Quota::Tenant("t1".into()));
            assert_eq!((current, max), (2, 2));
        }
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
    assert_eq!(count_in_state(h.store.pool(), "queued").await, 10_000);
}

/// `count` finite doubles spread over the whole range (a fixed xorshift sequence of bit
/// patterns, every sign and exponent), plus integral floats around the 64-bit bounds.
fn spread_of_doubles(count: usize) -> Vec<f64> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut values = Vec::with_capacity(count + 200);
    while values.len() < count {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let x = f64::from_bits(state);
        if x.is_finite() {
            values.push(x);
        }
    }
    for e in 0..=25 {
        for m in [
            1.0,
            1.5,
            1.2345678,
            9.223372036854776,
            1.8446744073709552,
            9.99,
        ] {
            values.push(m * 10f64.powi(e));
            values.push(-m * 10f64.powi(e));
            values.push(m / 10f64.powi(e));
        }
    }
    values.extend([
        0.0,
        -0.0,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
    ]);
    values
}

/// `normalize_numbers` is PostgreSQL's jsonb round trip: 20,000 doubles sent through
/// `$1::jsonb` come back exactly as the function predicts (same value, same integer or float
/// kind), and a normalized value comes back unchanged (so the store may send it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn json_numbers_normalize_like_jsonb() {
    let Some(factory) = PgFactory::for_test("json_numbers_normalize_like_jsonb") else {
        return;
    };
    let factory = &factory;
    let pool = factory.admin_pool().await;
    let values = spread_of_doubles(20_000);
    for chunk in values.chunks(2_000) {
        let sent = serde_json::Value::Array(chunk.iter().map(|x| json!(x)).collect());
        let expected = drover_core::json::normalized(sent.clone());
        for value in [&sent, &expected] {
            let back: serde_json::Value = sqlx::query_scalar("SELECT $1::jsonb")
                .bind(value)
                .fetch_one(&pool)
                .await
                .expect("jsonb round trip");
            let (back, expected) = (back.as_array().unwrap(), expected.as_array().unwrap());
            for (i, (got, want)) in back.iter().zip(expected).enumerate() {
                assert_eq!(
                    got.to_string(),
                    want.to_string(),
                    "{:e} (sent as {})",
                    chunk[i],
                    value[i]
                );
            }
        }
    }
    pool.close().await;
}

/// `stored_instant` agrees with PostgreSQL: a whole leap second in RFC 3339 text
/// (`23:59:60`) is read as the next second, and instants the store sends (leap seconds
/// folded, floored) come back unchanged, before 2000 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instants_are_stored_like_postgres_reads_them() {
    let Some(factory) = PgFactory::for_test("instants_are_stored_like_postgres_reads_them") else {
        return;
    };
    let factory = &factory;
    use drover_core::clock::stored_instant;
    let pool = factory.admin_pool().await;
    for text in [
        "2026-12-01T23:59:60.5Z",
        "2016-12-31T23:59:60.999999Z",
        "1972-06-30T23:59:60Z",
        "2026-12-01T23:59:60.0000005Z",
    ] {
        let parsed = chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&chrono::Utc);
        let read: Result<chrono::DateTime<chrono::Utc>, sqlx::Error> =
            sqlx::query_scalar("SELECT $1::text::timestamptz")
                .bind(text)
                .fetch_one(&pool)
                .await;
        match read {
            // PostgreSQL rounds text to the nearest microsecond where the rule floors:
            // they agree whenever the text has whole microseconds.
            Ok(read) if parsed.timestamp_subsec_nanos() % 1_000 == 0 => {
                assert_eq!(read, stored_instant(parsed), "{text}")
            }
            Ok(_) => {}
            // As text, PostgreSQL takes a leap second only without a fraction (23:59:60);
            // the store sends binary instants, which never hold one.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("22008") => {
                assert!(
                    text.contains(":60.") && parsed.timestamp_subsec_nanos() != 1_000_000_000,
                    "{text}"
                );
            }
            Err(e) => panic!("{text}: {e}"),
        }
        let sent = stored_instant(parsed);
        let back: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT $1::timestamptz")
            .bind(sent)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(back, sent, "{text}");
    }
    for text in [
        "1970-01-01T00:00:00.0000001Z",
        "1999-12-31T23:59:59.9999995Z",
        "1969-12-31T23:59:59.9999999Z",
        "2031-01-01T00:00:00.0000009Z",
    ] {
        let sent = stored_instant(
            chrono::DateTime::parse_from_rfc3339(text)
                .unwrap()
                .with_timezone(&chrono::Utc),
        );
        let back: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT $1::timestamptz")
            .bind(sent)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(back, sent, "{text}");
    }
    pool.close().await;
}

// ---------------------------------------------------------------------------------------------
// Attempts to break the COPY path of `jobs_enqueue` (copy.rs): batches of COPY_MIN_JOBS (64) or
// more ready jobs without keys under no quota go through binary COPY, smaller ones through the
// UNNEST insert.

/// Jobs exercising every value the core validation accepts that an encoder could get wrong:
/// numbers jsonb rewrites, unicode (astral plane, U+2028/2029, noncharacters), every control
/// character, escapes, names at their maximum lengths with every allowed character, i16 and
/// max_attempts extremes, 16 limit keys of 255 characters, meta on some jobs, and a string of
/// almost 256 KiB on a few.
fn edge_jobs(n: usize) -> Vec<NewJob> {
    let controls: String = (1u32..0x20)
        .chain([0x7f, 0x80, 0x9f])
        .filter_map(char::from_u32)
        .collect();
    let texts = [
        String::from("\u{2028}\u{2029} line separators"),
        String::from("\u{1f600}\u{10ffff}\u{fffe}\u{ffff}\u{feff} astral and noncharacters"),
        controls,
        String::from("\"\\/\u{8}\u{c}\n\r\t</script>"),
        String::new(),
        String::from("\u{e9}\u{301} combining, \u{202e} rtl override"),
    ];
    let kind_max = format!("{}-_.:/", "K".repeat(128 - 6));
    let queue_max = format!("{}-_.:", "q".repeat(64 - 4));
    let tenant_max = format!("{}-_.:", "t".repeat(128 - 4));
    let big = "x".repeat(256 * 1024 - 200);
    (0..n)
        .map(|i| {
            let text = texts[i % texts.len()].clone();
            // Nested as deep as stored JSON may be (JSON_DEPTH_MAX) inside the args object.
            let mut deep = json!(text.clone());
            for _ in 0..drover_core::json::JSON_DEPTH_MAX - 1 {
                deep = json!([deep]);
            }
            let numbers = json!([
                1e19,
                -0.0,
                1.5e300,
                f64::MAX,
                f64::MIN_POSITIVE,
                5e-324,
                -1e-7,
                0.1,
                1e16,
                u64::MAX,
                i64::MIN,
                1.2345678e17,
                12345678901234567890u64,
                2.5
            ]);
            let args = if i % 97 == 3 {
                json!({"i": i, "big": big})
            } else {
                json!({"i": i, "text": text, text.clone(): i, "numbers": numbers, "deep": deep,
                       "empty": {}, "list": [], "null": null, "bools": [true, false]})
            };
            let mut new = NewJob::new(kind(if i % 2 == 0 { &kind_max } else { "edge" }), args)
                .with_queue(
                    QueueName::parse(if i % 3 == 0 {
                        queue_max.as_str()
                    } else {
                        "edge-q"
                    })
                    .unwrap(),
                )
                .with_tenant(
                    drover_core::TenantId::parse(if i % 5 == 0 {
                        tenant_max.as_str()
                    } else {
                        "t"
                    })
                    .unwrap(),
                )
                .with_priority([i16::MIN, i16::MAX, 0, -1, 1][i % 5])
                .with_max_attempts([1, 1000, 3][i % 3]);
            if i % 4 == 0 {
                new = new
                    .with_meta(json!({"text": texts[(i + 1) % texts.len()], "n": 1e19, "z": -0.0}));
            }
            if i % 7 == 0 {
                for k in 0..16 {
                    let key = format!("{k:02}:{}", "_.:-@/=+aZ9".repeat(30));
                    new = new.with_limit_key(LimitKey::parse(&key[..255]).unwrap());
                }
            } else if i % 7 == 1 {
                new = new.with_limit_key(LimitKey::parse(format!("queue:{queue_max}")).unwrap());
            }
            new
        })
        .collect()
}

/// The stored columns of a job as PostgreSQL text (what each path wrote, byte for byte).
async fn stored_text(
    pool: &PgPool,
    id: JobId,
) -> (
    String,
    String,
    String,
    String,
    String,
    String,
    i16,
    i32,
    String,
    bool,
) {
    let row: (String, String, String, String, String, String, i16, i32, String, bool) = sqlx::query_as(
        "SELECT kind, queue, tenant, args::text, meta::text, limit_keys::text, priority, max_attempts, \
                state, run_at = created_at FROM drover.jobs WHERE id = $1",
    )
    .bind(id.as_uuid())
    .fetch_one(pool)
    .await
    .unwrap();
    row
}

/// The same jobs stored by the INSERT (COPY_MIN_JOBS - 1 jobs) and by COPY (the same jobs
/// twice) are stored alike, byte for byte in PostgreSQL's text form, and every answer
/// equals job_get and the list API's copy of the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_and_insert_store_edge_values_alike() {
    let Some(factory) = PgFactory::for_test("copy_and_insert_store_edge_values_alike") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let small = COPY_MIN_JOBS - 1;
    let jobs = edge_jobs(small);
    let inserted = h
        .store
        .jobs_enqueue(jobs.clone())
        .await
        .expect("a small batch: INSERT");
    let mut twice = jobs.clone();
    twice.extend(jobs.clone());
    let copied = h
        .store
        .jobs_enqueue(twice)
        .await
        .expect("the batch twice: COPY");
    assert_eq!((inserted.len(), copied.len()), (small, 2 * small));
    let mut listed = std::collections::HashMap::new();
    let mut before = None;
    loop {
        let page = h
            .store
            .jobs_list(drover_core::ListJobs {
                before,
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        for j in page.jobs {
            listed.insert(j.id, j);
        }
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    assert_eq!(listed.len(), 3 * small);
    for (i, a) in inserted.iter().chain(&copied).enumerate() {
        let got = h.store.job_get(a.job.id).await.unwrap();
        assert_eq!(got, a.job, "job {i}: job_get differs from the answer");
        assert_eq!(
            listed[&a.job.id], a.job,
            "job {i}: list differs from the answer"
        );
    }
    for i in 0..small {
        let by_insert = stored_text(h.store.pool(), inserted[i].job.id).await;
        for c in [i, i + small] {
            let by_copy = stored_text(h.store.pool(), copied[c].job.id).await;
            assert_eq!(
                by_copy, by_insert,
                "job {i}: COPY stored it otherwise than INSERT"
            );
        }
        let (a, b) = (&inserted[i].job, &copied[i].job);
        assert_eq!(
            (
                &a.args,
                &a.meta,
                &a.limit_keys,
                &a.kind,
                &a.queue,
                &a.tenant,
                a.priority,
                a.max_attempts
            ),
            (
                &b.args,
                &b.meta,
                &b.limit_keys,
                &b.kind,
                &b.queue,
                &b.tenant,
                b.priority,
                b.max_attempts
            ),
            "job {i}: answers differ"
        );
    }
}

/// The largest batch the core allows (100,000 jobs) goes through COPY whole, with one
/// queue and with a queue per job; the latter wakes its last queue's subscribers too. (The
/// queues to wake were deduplicated by scanning a list per job: 93 s in a debug build for
/// the batch with a queue per job against 1.1 s for one queue; a set now.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_largest_batch_with_a_queue_per_job() {
    let Some(factory) = PgFactory::for_test("copy_largest_batch_with_a_queue_per_job") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let max = drover_core::store::ENQUEUE_BATCH_MAX;
    let one_queue: Vec<NewJob> = (0..max)
        .map(|n| NewJob::new(kind("big"), json!(n)))
        .collect();
    let started = Instant::now();
    let answers = h.store.jobs_enqueue(one_queue).await.unwrap();
    let single = started.elapsed();
    assert_eq!(answers.len(), max);
    assert_eq!(
        h.store.job_get(answers[max - 1].job.id).await.unwrap(),
        answers[max - 1].job
    );
    let per_queue: Vec<NewJob> = (0..max)
        .map(|n| {
            NewJob::new(kind("big"), json!(n))
                .with_queue(QueueName::parse(format!("q{n}")).unwrap())
        })
        .collect();
    let mut events = h.store.subscribe().await.unwrap();
    let started = Instant::now();
    let answers = h.store.jobs_enqueue(per_queue).await.unwrap();
    let distinct = started.elapsed();
    let last = QueueName::parse(format!("q{}", max - 1)).unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(event) = events.next().await {
            // A subscriber more than EVENT_BUFFER events behind gets Resync instead of
            // the events it missed (listen.rs): a wake-up of every queue.
            if event
                == (StoreEvent::JobsAvailable {
                    queue: last.clone(),
                })
                || event == StoreEvent::Resync
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        woken,
        Ok(true),
        "the last queue's subscribers are woken (or resynchronised)"
    );
    assert_eq!(answers.len(), max);
    assert_eq!(
        count_in_state(h.store.pool(), "queued").await,
        2 * max as i64
    );
    eprintln!("100,000 jobs: one queue {single:?}, a queue each {distinct:?}");
}

/// Behind PgBouncer in transaction mode (no statement cache, no LISTEN), COPY batches and
/// every other call keep working on the same connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_without_statement_cache_or_listen() {
    let Some(factory) = PgFactory::for_test("copy_without_statement_cache_or_listen") else {
        return;
    };
    let factory = &factory;
    let options = PgOptions {
        statement_cache: false,
        listen: false,
        max_connections: 2,
        ..unbounded_options()
    };
    let h = factory.open_pg(options).await;
    for round in 0..20 {
        let batch: Vec<NewJob> = (0..250)
            .map(|n| NewJob::new(kind("work"), json!(n)))
            .collect();
        let answers = h
            .store
            .jobs_enqueue(batch)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(
            h.store.job_get(answers[17].job.id).await.unwrap(),
            answers[17].job
        );
        h.store.job_enqueue(new_job("work")).await.unwrap();
        let small: Vec<NewJob> = (0..5)
            .map(|n| NewJob::new(kind("work"), json!(n)))
            .collect();
        h.store.jobs_enqueue(small).await.unwrap();
        let claimed = h
            .store
            .jobs_claim(claim_params("w", 50))
            .await
            .unwrap()
            .jobs;
        assert_eq!(claimed.len(), 50);
    }
    assert_eq!(
        count_in_state(h.store.pool(), "queued").await
            + count_in_state(h.store.pool(), "running").await,
        20 * 256
    );
}

/// A COPY batch on a database without the schema is refused like an INSERT batch: `Fatal`
/// telling to run `drover migrate`, and the store keeps answering afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_on_unmigrated_database_says_migrate() {
    let Some(factory) = PgFactory::for_test("copy_on_unmigrated_database_says_migrate") else {
        return;
    };
    let factory = &factory;
    let connect = bare_database(factory).await;
    let store = PgStore::connect_with(connect, unbounded_options())
        .await
        .unwrap();
    for n in [COPY_MIN_JOBS - 1, COPY_MIN_JOBS, 1000] {
        for _ in 0..3 {
            let batch: Vec<NewJob> = (0..n)
                .map(|i| NewJob::new(kind("work"), json!(i)))
                .collect();
            match store.jobs_enqueue(batch).await {
                Err(Error::Fatal { message, .. }) => {
                    assert!(message.contains("drover migrate"), "{n}: {message}")
                }
                other => panic!("{n} jobs: {other:?}"),
            }
        }
    }
}

/// A COPY-sized batch (COPY_MIN_JOBS+ ready jobs, no keys, no quota) holding one invalid job is
/// refused as InvalidInput naming that job's field, stores nothing, and leaves the
/// connection usable (its validation overlaps the read of the store's clock, copy.rs); with
/// the database unreachable the same batch is still InvalidInput, a valid one Unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_batch_with_an_invalid_job_is_invalid_input_and_stores_nothing() {
    let Some(factory) =
        PgFactory::for_test("copy_batch_with_an_invalid_job_is_invalid_input_and_stores_nothing")
    else {
        return;
    };
    let factory = &factory;
    let h = factory
        .open_pg(PgOptions {
            max_connections: 1,
            ..unbounded_options()
        })
        .await;
    let with_bad = |n: usize, bad: usize| -> Vec<NewJob> {
        (0..n)
            .map(|i| {
                let args = if i == bad {
                    json!({"a": "x\u{0}y"})
                } else {
                    json!({"seq": i})
                };
                NewJob::new(kind("work"), args)
            })
            .collect()
    };
    for (n, bad) in [(200usize, 0usize), (1000, 999), (5000, 2500)] {
        match h.store.jobs_enqueue(with_bad(n, bad)).await {
            Err(Error::InvalidInput { field, .. }) => {
                assert_eq!(field, format!("jobs[{bad}].args"))
            }
            other => panic!("{n} jobs, job {bad} bad: expected InvalidInput, got {other:?}"),
        }
        let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM drover.jobs")
            .fetch_one(h.store.pool())
            .await
            .unwrap();
        assert_eq!(stored, 0, "{n} jobs: a refused batch leaves no row");
    }
    // The one connection is still in step: a valid COPY batch follows.
    let answers = h
        .store
        .jobs_enqueue(with_bad(300, usize::MAX))
        .await
        .unwrap();
    assert_eq!(answers.len(), 300);
    assert_eq!(
        h.store.job_get(answers[299].job.id).await.unwrap(),
        answers[299].job
    );

    // Port 1 on this host: nothing listens there.
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy_with(h.connect.clone().port(1));
    let down = PgStore::from_pool(pool, unbounded_options());
    match down.jobs_enqueue(with_bad(250, 7)).await {
        Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "jobs[7].args"),
        other => panic!("database down, job 7 bad: expected InvalidInput, got {other:?}"),
    }
    match down.jobs_enqueue(with_bad(250, usize::MAX)).await {
        Err(Error::Unavailable { .. }) => {}
        other => panic!("database down, valid batch: expected Unavailable, got {other:?}"),
    }
}

/// A worker waiting on a queue (subscribed) is woken promptly by every COPY batch, also when
/// batches follow each other quickly on several queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_batches_wake_subscribers_promptly() {
    let Some(factory) = PgFactory::for_test("copy_batches_wake_subscribers_promptly") else {
        return;
    };
    let factory = &factory;
    let h = factory.open_pg(unbounded_options()).await;
    let mut events = h.store.subscribe().await.unwrap();
    for round in 0..10 {
        let name = format!("wake{round}");
        let batch: Vec<NewJob> = (0..300)
            .map(|n| {
                NewJob::new(kind("work"), json!(n))
                    .with_queue(QueueName::parse(name.as_str()).unwrap())
            })
            .collect();
        let started = Instant::now();
        h.store.jobs_enqueue(batch).await.unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(e) = events.next().await {
                if matches!(&e, StoreEvent::JobsAvailable { queue } if queue.as_str() == name) {
                    return;
                }
            }
        })
        .await;
        assert!(
            woke.is_ok(),
            "round {round}: no wake-up for {name} within 2 s"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "round {round}: woke after {:?}",
            started.elapsed()
        );
    }
}

/// Producers enqueueing large batches, each cut by a timeout at a random point, while
/// claimers run and finish jobs on the same store: every batch is stored whole or not at
/// all, no call other than a cut one fails, and every stored job runs exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_cancelled_at_random_under_concurrency_with_claimers() {
    let Some(factory) =
        PgFactory::for_test("copy_cancelled_at_random_under_concurrency_with_claimers")
    else {
        return;
    };
    let factory = &factory;
    let options = PgOptions {
        max_connections: 6,
        ..unbounded_options()
    };
    let h = factory.open_pg(options).await;
    let store = h.store.clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut claimers = Vec::new();
    for c in 0..3 {
        let store = store.clone();
        let done = done.clone();
        claimers.push(tokio::spawn(async move {
            let mut ran = 0usize;
            let mut idle_after_done = 0;
            loop {
                let mut params = claim_params(&format!("w{c}"), 200);
                params.kinds = vec![kind("cut")];
                let jobs = store
                    .jobs_claim(params)
                    .await
                    .unwrap_or_else(|e| panic!("claim: {e}"))
                    .jobs;
                if jobs.is_empty() {
                    if done.load(std::sync::atomic::Ordering::SeqCst) {
                        idle_after_done += 1;
                        if idle_after_done > 20 {
                            return ran;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let items = jobs
                    .iter()
                    .map(|j| drover_core::FinishItem {
                        parent: None,
                        id: j.id,
                        token: j.fencing_token,
                        finish: drover_core::Finish::Succeeded { result: None },
                        started: None,
                    })
                    .collect();
                let replies = store
                    .jobs_finish(items)
                    .await
                    .unwrap_or_else(|e| panic!("finish: {e}"));
                assert!(replies
                    .iter()
                    .all(|r| matches!(r, drover_core::FinishReply::Recorded { .. })));
                ran += jobs.len();
            }
        }));
    }
    let mut producers = Vec::new();
    for p in 0..3u64 {
        let store = store.clone();
        producers.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            let mut seed = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(p + 1);
            for b in 0..40 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let cut = Duration::from_micros(seed % 30_000);
                let batch: Vec<NewJob> = (0..1000)
                    .map(|n| {
                        NewJob::new(kind("cut"), json!({"p": p, "b": b, "n": n}))
                            .with_meta(json!({"batch": format!("{p}-{b}")}))
                    })
                    .collect();
                match tokio::time::timeout(cut, store.jobs_enqueue(batch)).await {
                    Ok(Ok(answers)) => {
                        assert_eq!(answers.len(), 1000);
                        outcomes.push((format!("{p}-{b}"), true));
                    }
                    Ok(Err(e)) => panic!("producer {p} batch {b}: an uncut enqueue failed: {e}"),
                    Err(_) => outcomes.push((format!("{p}-{b}"), false)),
                }
            }
            outcomes
        }));
    }
    let mut outcomes = Vec::new();
    for t in producers {
        outcomes.extend(t.await.unwrap());
    }
    // A cut after the data went out may still commit: wait until the server has finished
    // every COPY of this database (a cut one either commits or aborts).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let copying: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND state <> 'idle' AND query LIKE 'COPY drover.jobs%'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        if copying == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{copying} COPY statement(s) still running after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut ran = 0;
    for t in claimers {
        ran += t.await.unwrap();
    }
    let mut stored_total = 0i64;
    for (batch, answered) in &outcomes {
        let stored: i64 =
            sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE meta->>'batch' = $1")
                .bind(batch)
                .fetch_one(store.pool())
                .await
                .unwrap();
        if *answered {
            assert_eq!(stored, 1000, "batch {batch} answered but {stored} stored");
        } else {
            assert!(
                stored == 0 || stored == 1000,
                "batch {batch} cut: {stored} of 1,000 stored"
            );
        }
        stored_total += stored;
    }
    assert_eq!(ran as i64, stored_total, "every stored job ran once");
    assert_eq!(
        count_in_state(store.pool(), "succeeded").await,
        stored_total
    );
    let twice: i64 = sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE attempt <> 1")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(twice, 0);
    // Afterwards every connection of the pool is in step.
    for _ in 0..12 {
        let batch: Vec<NewJob> = (0..300)
            .map(|n| NewJob::new(kind("after"), json!(n)))
            .collect();
        store
            .jobs_enqueue(batch)
            .await
            .expect("a large enqueue afterwards");
        store
            .job_enqueue(new_job("after"))
            .await
            .expect("a small enqueue afterwards");
        store
            .jobs_list(drover_core::ListJobs::default())
            .await
            .expect("a list afterwards");
    }
}

/// A COPY the server refuses part-way (a row breaking a constraint the operator added, first
/// or last row of the batch; a lock it cannot take in time) stores nothing, fails like the
/// INSERT does for the same batch, and leaves the store's connections in step.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copy_refused_mid_stream_fails_like_insert_and_stores_nothing() {
    let Some(factory) =
        PgFactory::for_test("copy_refused_mid_stream_fails_like_insert_and_stores_nothing")
    else {
        return;
    };
    let factory = &factory;
    let h = factory
        .open_pg(PgOptions {
            max_connections: 2,
            ..unbounded_options()
        })
        .await;
    sqlx::query("ALTER TABLE drover.jobs ADD CONSTRAINT test_no_bad CHECK (NOT (args ? 'bad'))")
        .execute(h.store.pool())
        .await
        .unwrap();
    let describe = |r: &Result<Vec<drover_core::Enqueued>, Error>| match r {
        Ok(a) => format!("Ok({} jobs)", a.len()),
        Err(Error::Fatal { message, .. }) => format!("Fatal({message})"),
        Err(Error::InvalidInput { field, reason, .. }) => {
            format!("InvalidInput({field}: {reason})")
        }
        Err(Error::Unavailable { message, .. }) => format!("Unavailable({message})"),
        Err(e) => format!("{e:?}"),
    };
    for n in [COPY_MIN_JOBS - 1, COPY_MIN_JOBS, 20_000] {
        for bad_at in [0, n - 1] {
            let batch: Vec<NewJob> = (0..n)
                .map(|i| {
                    NewJob::new(
                        kind("refused"),
                        if i == bad_at {
                            json!({"bad": 1})
                        } else {
                            json!({"ok": i})
                        },
                    )
                })
                .collect();
            let result = h.store.jobs_enqueue(batch).await;
            let said = describe(&result);
            assert!(
                said.starts_with("Fatal(database error (SQLSTATE 23514)"),
                "{n} jobs, bad at {bad_at}: {said}"
            );
            let after: Vec<NewJob> = (0..250)
                .map(|i| NewJob::new(kind("after"), json!(i)))
                .collect();
            h.store
                .jobs_enqueue(after)
                .await
                .expect("a large enqueue after a refusal");
            h.store
                .job_enqueue(new_job("after"))
                .await
                .expect("a small enqueue after a refusal");
        }
    }
    let refused: i64 =
        sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE kind = 'refused'")
            .fetch_one(h.store.pool())
            .await
            .unwrap();
    assert_eq!(refused, 0);

    // A lock it cannot take within lock_timeout: Unavailable, for both paths alike.
    sqlx::query(&format!(
        "ALTER DATABASE {} SET lock_timeout = '200ms'",
        ident(&h.database)
    ))
    .execute(h.store.pool())
    .await
    .unwrap();
    let store = PgStore::connect_with(h.connect.clone(), h.options.clone())
        .await
        .unwrap();
    let mut locker = sqlx::PgConnection::connect_with(&h.connect).await.unwrap();
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query("LOCK TABLE drover.jobs IN SHARE MODE")
        .execute(&mut locker)
        .await
        .unwrap();
    for n in [COPY_MIN_JOBS - 1, COPY_MIN_JOBS] {
        let batch: Vec<NewJob> = (0..n)
            .map(|i| NewJob::new(kind("locked"), json!(i)))
            .collect();
        let said = describe(&store.jobs_enqueue(batch).await);
        assert!(
            said.starts_with("Unavailable(lock not available"),
            "{n} jobs under a lock: {said}"
        );
    }
    sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
    let batch: Vec<NewJob> = (0..200)
        .map(|i| NewJob::new(kind("locked"), json!(i)))
        .collect();
    store
        .jobs_enqueue(batch)
        .await
        .expect("once the lock is gone");
}

/// An operator write and its audit record commit together: when the record's insert fails
/// (a trigger stands in for a full disk or a lost connection), the cancel it records is rolled
/// back and the job stays queued; once the insert works again, both are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_record_failure_rolls_back_its_write() {
    let Some(factory) = PgFactory::for_test("audit_record_failure_rolls_back_its_write") else {
        return;
    };
    let h = factory.open_pg(unbounded_options()).await;
    let store = h.store.clone();
    let job = store.job_enqueue(new_job("audited")).await.unwrap().job;
    sqlx::raw_sql(
        "CREATE FUNCTION drover.refuse_audit() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'no room for the record'; END $$;
         CREATE TRIGGER refuse_audit BEFORE INSERT ON drover.audit_log
             FOR EACH ROW EXECUTE FUNCTION drover.refuse_audit();",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let actor = drover_core::Actor::new("ops", drover_core::AuditSource::Cli);
    let refused = store
        .operate(drover_core::Operation::JobCancel(job.id), actor.clone())
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(store.job_get(job.id).await.unwrap().state, JobState::Queued);
    sqlx::query("DROP TRIGGER refuse_audit ON drover.audit_log")
        .execute(store.pool())
        .await
        .unwrap();
    store
        .operate(drover_core::Operation::JobCancel(job.id), actor)
        .await
        .unwrap();
    assert_eq!(
        store.job_get(job.id).await.unwrap().state,
        JobState::Cancelled
    );
    let records = store
        .audit_list(drover_core::ListAudit::default())
        .await
        .unwrap()
        .entries;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].action, drover_core::AuditAction::JobCancel);
}

/// A bulk retry whose write PostgreSQL refuses (the retried job's unique key taken by an
/// enqueue that commits while the retry waits on the unique index) skips that job alone: each
/// job runs in its own savepoint, so the step goes on and retries the next job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bulk_retry_skips_a_job_whose_unique_key_is_taken_meanwhile() {
    let Some(factory) =
        PgFactory::for_test("bulk_retry_skips_a_job_whose_unique_key_is_taken_meanwhile")
    else {
        return;
    };
    let h = factory.open_pg(unbounded_options()).await;
    let keyed = h
        .store
        .job_enqueue(new_job("work").with_unique_key("k"))
        .await
        .unwrap()
        .job
        .id;
    let plain = h.store.job_enqueue(new_job("work")).await.unwrap().job.id;
    for id in [keyed, plain] {
        h.store.job_cancel(id).await.unwrap();
    }

    // An enqueue holding key "k", not yet committed: the retry's check does not see it, its
    // write waits on the unique index, then fails when the enqueue commits.
    let mut tx = h.store.pool().begin().await.unwrap();
    h.store
        .enqueue_in(&mut tx, vec![new_job("work").with_unique_key("k")])
        .await
        .unwrap();
    let store = h.store.clone();
    let retry = tokio::spawn(async move {
        store
            .operate(
                drover_core::Operation::JobsBulk(drover_core::BulkJobs::ids(
                    drover_core::BulkAction::Retry,
                    vec![keyed, plain],
                )),
                drover_core::Actor::new("ops", drover_core::AuditSource::Cli),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    tx.commit().await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), retry)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        answer,
        drover_core::Operated::JobsBulk(drover_core::BulkOutcome {
            changed: 1,
            skipped: 1,
            not_found: 0,
            ..drover_core::BulkOutcome::default()
        })
    );
    assert_eq!(
        h.store.job_get(keyed).await.unwrap().state,
        JobState::Cancelled
    );
    assert_eq!(
        h.store.job_get(plain).await.unwrap().state,
        JobState::Queued
    );
    factory.cleanup().await;
}

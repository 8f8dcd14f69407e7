//! The migrator beside job traffic (PostgreSQL only): job writes keep flowing while
//! `migrate` runs on a table of millions of rows beside a long reader, a step that cannot get
//! its lock gives up with a message naming the session in the way, an interrupted index build
//! is dropped and built again, and a migration cut short between its steps completes when run
//! again.
//!
//! Needs `DROVER_TEST_DATABASE_URL`; without it every test skips, unless
//! `DROVER_REQUIRE_POSTGRES` is set, when they fail instead. Each test makes its own database
//! (empty, migrated here to the version it needs) from the kit `drover_tests::postgres`, which
//! drops it at the end and sweeps the ones a killed run left behind.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_core::{JobState, JobStore, Quotas, RescueExpired, StoreConfig};
use drover_store_postgres::sqlx::{self, Connection, Executor, PgConnection, PgPool};
use drover_store_postgres::{migrations, Migration, Migrator, PgOptions, PgStore};
use drover_tests::postgres::{Schema, Server, TestDatabase};

/// Rows in the table of the traffic test.
const MILLIONS: i64 = 2_000_000;
/// The bound on a job write's wait while `migrate` runs (RELIABILITY.md, guarantee 16).
const WRITE_WAIT_BOUND: Duration = Duration::from_secs(1);
/// How long the long readers hold their transaction: well over the lock timeout.
const READER_HOLDS: Duration = Duration::from_secs(3);

/// A test-only migration after the released ones: an index built concurrently.
const ONLINE_INDEX: Migration = Migration {
    version: 1_000_000,
    name: "test_online_index",
    sql: "-- drover:step online\nCREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_test_created_idx ON drover.jobs (created_at);\n",
};

/// A database of its own (empty: no Drover schema), dropped with the guard.
struct Database {
    database: TestDatabase,
}

impl Database {
    /// A fresh empty database, or `None` (the test skips) without `DROVER_TEST_DATABASE_URL`.
    async fn create(test: &str) -> Option<Database> {
        let server = Server::for_test(test)?;
        Some(Database {
            database: server.database(Schema::Empty).await,
        })
    }

    async fn pool(&self, connections: u32) -> PgPool {
        self.database.pool(connections).await
    }

    async fn store(&self) -> Arc<PgStore> {
        let options = PgOptions {
            config: StoreConfig {
                quotas: Quotas::unbounded(),
                ..StoreConfig::default()
            },
            max_connections: 4,
            ..PgOptions::default()
        };
        Arc::new(
            PgStore::connect_with(self.database.connect.clone(), options)
                .await
                .expect("store"),
        )
    }

    /// A connection of its own, for a long transaction.
    async fn connection(&self) -> PgConnection {
        PgConnection::connect_with(&self.database.connect)
            .await
            .expect("connect")
    }
}

/// The version of the lease constraint migration, and the one before it.
fn lease_check_version() -> i64 {
    migrations()
        .iter()
        .find(|m| m.name == "running_lease_check")
        .expect("the lease check migration")
        .version
}

/// This binary's migrations followed by [`ONLINE_INDEX`].
fn with_online_index() -> Vec<Migration> {
    let mut list = migrations().to_vec();
    list.push(ONLINE_INDEX);
    list
}

/// Fills drover.jobs with `rows` jobs (sequential ids; one in a thousand running under a live
/// lease, one queued in queue `filled`, the rest succeeded), plus, with `legacy`, one running
/// job without a lease and one reconciling job with half a lease, as a schema before the lease
/// constraint allowed. The indexes are dropped for the load and built again after it (much
/// faster than row by row).
async fn fill(pool: &PgPool, rows: i64, legacy: bool) {
    let statements = [
        "CREATE TEMPORARY TABLE fill_indexes AS SELECT indexname, indexdef FROM pg_indexes \
         WHERE schemaname = 'drover' AND tablename = 'jobs' AND indexname <> 'jobs_pkey'",
        "DO $$ DECLARE r record; BEGIN \
         FOR r IN SELECT indexname FROM fill_indexes LOOP EXECUTE format('DROP INDEX drover.%I', r.indexname); END LOOP; END $$",
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, attempt, max_attempts, \
                                  lease_owner, lease_expires_at, attempted_at, finished_at) \
         SELECT lpad(to_hex(n), 32, '0')::uuid, 'filled.' || (n % 7), 'filled', 'default', '{}', now(), \
                CASE n % 1000 WHEN 0 THEN 'running' WHEN 1 THEN 'queued' ELSE 'succeeded' END, \
                CASE n % 1000 WHEN 1 THEN 0 ELSE 1 END, 3, \
                CASE n % 1000 WHEN 0 THEN 'old-worker' END, \
                CASE n % 1000 WHEN 0 THEN now() + interval '1 hour' END, \
                CASE n % 1000 WHEN 1 THEN NULL ELSE now() END, \
                CASE WHEN n % 1000 > 1 THEN now() END \
         FROM generate_series(1, $1) AS n",
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, attempt, max_attempts, lease_owner) \
         VALUES ('ffffffff-0000-0000-0000-000000000001', 'work', 'filled', 'default', '{}', now(), 'running', 1, 3, NULL), \
                ('ffffffff-0000-0000-0000-000000000002', 'work', 'filled', 'default', '{}', now(), 'reconciling', 1, 3, 'half')",
        "DO $$ DECLARE r record; BEGIN \
         FOR r IN SELECT indexdef FROM fill_indexes LOOP EXECUTE r.indexdef; END LOOP; END $$",
        "DROP TABLE fill_indexes",
    ];
    let mut conn = pool.acquire().await.unwrap();
    for statement in statements {
        if !legacy && statement.contains("ffffffff-") {
            continue;
        }
        sqlx::query(statement)
            .bind(rows)
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    sqlx::query("VACUUM ANALYZE drover.jobs")
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// The writer's enqueue: a ready job of the default queue.
const WRITER_ENQUEUE: &str =
    "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, max_attempts) \
     VALUES (gen_random_uuid(), 'work', 'default', 'default', '{}', now(), 'queued', 3)";
/// The writer's claim: the first ready job of the default queue, leased.
const WRITER_CLAIM: &str = "UPDATE drover.jobs j \
     SET state = 'running', attempt = j.attempt + 1, fencing_token = j.fencing_token + 1, \
         lease_owner = 'writer', lease_expires_at = now() + interval '60 seconds', attempted_at = now() \
     WHERE j.id = (SELECT id FROM drover.jobs WHERE state = 'queued' AND queue = 'default' \
                   ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) \
     RETURNING j.id, j.fencing_token";
/// The writer's fenced finish: a success.
const WRITER_FINISH: &str = "UPDATE drover.jobs \
     SET state = 'succeeded', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL \
     WHERE id = $1 AND fencing_token = $2 AND state = 'running'";

/// Job writes in a loop (enqueue, claim, finish), each one timed. They are the store's writes
/// in plain SQL over the columns every schema version has: the store of this binary needs the
/// latest schema (it refuses an older one), while the writes here stand for the workers of the
/// release before, which keep running while `migrate` brings the schema forward.
struct Writer {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    longest: Arc<Mutex<(Duration, &'static str)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    fn start(pool: PgPool) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let longest = Arc::new(Mutex::new((Duration::ZERO, "none")));
        let task = tokio::spawn({
            let (stop, rounds, longest) = (stop.clone(), rounds.clone(), longest.clone());
            async move {
                let timed = |what: &'static str, started: Instant| {
                    let took = started.elapsed();
                    let mut longest = longest.lock().unwrap();
                    if took > longest.0 {
                        *longest = (took, what);
                    }
                };
                while !stop.load(Ordering::SeqCst) {
                    let started = Instant::now();
                    sqlx::query(WRITER_ENQUEUE)
                        .execute(&pool)
                        .await
                        .expect("enqueue");
                    timed("enqueue", started);
                    let started = Instant::now();
                    let claimed: Vec<(sqlx::types::Uuid, i64)> = sqlx::query_as(WRITER_CLAIM)
                        .fetch_all(&pool)
                        .await
                        .expect("claim");
                    timed("claim", started);
                    for (id, token) in claimed {
                        let started = Instant::now();
                        sqlx::query(WRITER_FINISH)
                            .bind(id)
                            .bind(token)
                            .execute(&pool)
                            .await
                            .expect("finish");
                        timed("finish", started);
                    }
                    rounds.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Writer {
            stop,
            rounds,
            longest,
            task,
        }
    }

    fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::SeqCst)
    }

    /// Waits until the writer has done `more` rounds beyond now (a deadline of a minute).
    async fn wait_rounds(&self, more: u64) {
        let target = self.rounds() + more;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.rounds() < target {
            assert!(Instant::now() < deadline, "the writer stopped writing");
            assert!(!self.task.is_finished(), "the writer failed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops it; returns the longest write and its kind.
    async fn finish(self) -> (Duration, &'static str) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the writer failed");
        *self.longest.lock().unwrap()
    }
}

/// A transaction left open on its own connection: REPEATABLE READ with a read of drover.jobs,
/// so it holds an ACCESS SHARE lock on the table and a snapshot (an analytics query, a
/// forgotten psql session).
struct Reader {
    conn: PgConnection,
    pid: i32,
}

impl Reader {
    async fn open(db: &Database) -> Reader {
        let mut conn = db.connection().await;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .unwrap();
        let _: i64 = sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE state = 'running'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        Reader { conn, pid }
    }

    async fn end(mut self) -> Instant {
        self.conn.execute("COMMIT").await.unwrap();
        let ended = Instant::now();
        self.conn.close().await.ok();
        ended
    }
}

async fn constraint_validated(pool: &PgPool) -> Option<bool> {
    sqlx::query_scalar(
        "SELECT convalidated FROM pg_constraint \
         WHERE conrelid = 'drover.jobs'::regclass AND conname = 'jobs_lease_check'",
    )
    .fetch_optional(pool)
    .await
    .unwrap()
}

async fn index_valid(pool: &PgPool, name: &str) -> Option<bool> {
    sqlx::query_scalar(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap()
}

async fn applied(pool: &PgPool) -> Vec<i64> {
    drover_store_postgres::applied_versions(pool)
        .await
        .unwrap()
        .iter()
        .map(|m| m.version)
        .collect()
}

/// The measurement behind RELIABILITY.md's guarantee 16: a jobs table of two million rows, job writes (enqueue, claim,
/// finish) timed one by one throughout, and `migrate` run beside long readers:
///
/// 1. the lease constraint's locking step cannot get its lock while a reader holds the table:
///    with a 3 s budget migrate gives up, naming the reader's pid and the remedy, and
///    changes nothing;
/// 2. with a reader that ends after 3 s, migrate tries again until it gets the lock, then
///    repairs the old rows and validates the constraint over the whole table;
/// 3. an index built concurrently waits for a reader's snapshot: with a short budget it gives
///    up naming the reader; once the reader is gone the next run builds it.
///
/// Throughout, no job write waits a second (the step's 300 ms lock timeout bounds the wait
/// behind its lock request, and the validation and the index build let writes go on).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_keeps_job_writes_flowing_on_millions_of_rows_beside_long_readers() {
    let Some(db) = Database::create("migrate_keeps_job_writes_flowing").await else {
        return;
    };
    let pool = db.pool(4).await;
    let version = lease_check_version();
    Migrator::new().up_to(version - 1).run(&pool).await.unwrap();
    let loading = Instant::now();
    fill(&pool, MILLIONS, true).await;
    eprintln!(
        "filled {MILLIONS} rows in {:.1} s",
        loading.elapsed().as_secs_f64()
    );
    let list = with_online_index();
    let writer = Writer::start(db.pool(2).await);
    writer.wait_rounds(20).await;

    // 1. A reader that outlasts the budget.
    let reader = Reader::open(&db).await;
    let rounds = writer.rounds();
    let error = Migrator::new()
        .lock_budget(READER_HOLDS)
        .run(&pool)
        .await
        .expect_err("the reader holds the table for longer than the budget");
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "migration {version} (running_lease_check) step 1 of 3"
        )),
        "{message}"
    );
    let timeout = drover_store_postgres::migrate::LOCK_TIMEOUT_DEFAULT.as_millis();
    assert!(
        message.contains(&format!("lock timeout ({timeout} ms)")),
        "{message}"
    );
    assert!(
        message.contains(&format!("pid {} (", reader.pid)),
        "{message}"
    );
    assert!(message.contains("idle in transaction"), "{message}");
    assert!(
        message.contains(&format!("pg_terminate_backend({})", reader.pid)),
        "{message}"
    );
    assert!(writer.rounds() > rounds + 3, "job writes went on meanwhile");
    reader.end().await;
    assert_eq!(
        constraint_validated(&pool).await,
        None,
        "nothing was changed"
    );
    assert!(!applied(&pool).await.contains(&version));

    // 2. A reader that ends after 3 s: migrate waits for it by trying again.
    let reader = Reader::open(&db).await;
    let ends = tokio::spawn(async move {
        tokio::time::sleep(READER_HOLDS).await;
        reader.end().await
    });
    let started = Instant::now();
    let now_applied = Migrator::new().up_to(version).run(&pool).await.unwrap();
    let done = Instant::now();
    let reader_ended = ends.await.unwrap();
    assert_eq!(now_applied, vec![version]);
    assert!(
        done > reader_ended,
        "migrate completed after the reader ended ({:.1} s)",
        (done - started).as_secs_f64()
    );
    assert_eq!(constraint_validated(&pool).await, Some(true));
    let repaired: (Option<String>, bool) = sqlx::query_as(
        "SELECT lease_owner, lease_expires_at <= now() FROM drover.jobs \
         WHERE id = 'ffffffff-0000-0000-0000-000000000001'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        repaired,
        (Some("unknown".to_owned()), true),
        "an expired lease to rescue"
    );
    let freed: (Option<String>, Option<chrono::DateTime<chrono::Utc>>) = sqlx::query_as(
        "SELECT lease_owner, lease_expires_at FROM drover.jobs \
         WHERE id = 'ffffffff-0000-0000-0000-000000000002'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        freed,
        (None, None),
        "the half lease is freed for the next sweep"
    );

    // The migrations after it, to the latest, with no reader in the way (their online steps
    // build indexes beside the writer too).
    Migrator::new().run(&pool).await.unwrap();

    // 3. An index built concurrently beside a reader's snapshot.
    let reader = Reader::open(&db).await;
    let error = Migrator::with_migrations(&list)
        .lock_budget(Duration::from_secs(2))
        .run(&pool)
        .await
        .expect_err("the build waits for the reader's snapshot for longer than the budget");
    let message = error.to_string();
    assert!(
        message.contains("migration 1000000 (test_online_index)"),
        "{message}"
    );
    assert!(
        message.contains("job reads and writes went on"),
        "{message}"
    );
    assert!(
        message.contains(&format!("pid {} (", reader.pid)),
        "{message}"
    );
    assert!(
        message.contains("jobs_test_created_idx INVALID"),
        "{message}"
    );
    reader.end().await;
    assert_eq!(
        index_valid(&pool, "jobs_test_created_idx").await,
        Some(false)
    );
    // A reader that ends after 3 s: the next run drops the invalid index (waiting for the
    // reader) and builds it again.
    let reader = Reader::open(&db).await;
    let ends = tokio::spawn(async move {
        tokio::time::sleep(READER_HOLDS).await;
        reader.end().await
    });
    let now_applied = Migrator::with_migrations(&list).run(&pool).await.unwrap();
    let done = Instant::now();
    let reader_ended = ends.await.unwrap();
    assert_eq!(now_applied, vec![ONLINE_INDEX.version]);
    assert!(done > reader_ended, "the build waited for the reader");
    assert_eq!(
        index_valid(&pool, "jobs_test_created_idx").await,
        Some(true)
    );

    let rounds = writer.rounds();
    let (longest, what) = writer.finish().await;
    assert!(
        longest < WRITE_WAIT_BOUND,
        "the longest job write ({what}) waited {:.3} s",
        longest.as_secs_f64()
    );
    eprintln!(
        "longest job write: {what} {:.3} s over {} rounds",
        longest.as_secs_f64(),
        rounds
    );
    pool.close().await;
}

/// A migration cut short after its first step (the constraint added NOT VALID, nothing more)
/// completes when migrate runs again: the done step is skipped by its guard, rows an older
/// schema allowed are repaired, the constraint is validated. From the first step on, a new
/// running row without a lease is refused; the repaired running job is rescued like the job
/// of a worker that stopped heartbeating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_cut_short_between_steps_completes_when_run_again() {
    let Some(db) = Database::create("a_migration_cut_short_between_steps").await else {
        return;
    };
    let pool = db.pool(2).await;
    let version = lease_check_version();
    Migrator::new().up_to(version - 1).run(&pool).await.unwrap();
    fill(&pool, 1_000, true).await;
    let migration = migrations().iter().find(|m| m.version == version).unwrap();
    let first = migration.steps().unwrap()[0];
    pool.execute(first.sql).await.unwrap();
    assert_eq!(constraint_validated(&pool).await, Some(false));
    let refused = sqlx::query(
        "UPDATE drover.jobs SET lease_owner = NULL WHERE state = 'running' AND lease_owner = 'old-worker'",
    )
    .execute(&pool)
    .await
    .expect_err("new rows are checked from the first step on");
    let code = refused
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("23514"), "{refused}");

    let later: Vec<i64> = migrations()
        .iter()
        .map(|m| m.version)
        .filter(|v| *v >= version)
        .collect();
    assert_eq!(Migrator::new().run(&pool).await.unwrap(), later);
    assert_eq!(constraint_validated(&pool).await, Some(true));
    assert_eq!(applied(&pool).await.last(), later.last());
    let store = db.store().await;
    store.check_ready().await.unwrap();
    let rescued = store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: Vec::new(),
            limit: 100,
        })
        .await
        .unwrap();
    let ids: Vec<String> = rescued.iter().map(|r| r.id.to_string()).collect();
    assert_eq!(
        ids,
        vec!["ffffffff-0000-0000-0000-000000000001"],
        "{rescued:?}"
    );
    assert_eq!(rescued[0].to, JobState::Queued);
    store.close().await;
    pool.close().await;
}

/// An index an earlier build left INVALID (a `CREATE INDEX CONCURRENTLY` that failed or was
/// killed) is dropped and built again, not skipped by `IF NOT EXISTS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_index_left_by_an_earlier_build_is_built_again() {
    let Some(db) = Database::create("an_invalid_index_is_built_again").await else {
        return;
    };
    let pool = db.pool(2).await;
    Migrator::new().run(&pool).await.unwrap();
    fill(&pool, 1_000, false).await;
    for statement in [
        "CREATE INDEX jobs_test_created_idx ON drover.jobs (kind)",
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'drover.jobs_test_created_idx'::regclass",
    ] {
        pool.execute(statement).await.unwrap();
    }
    let list = with_online_index();
    assert_eq!(
        Migrator::with_migrations(&list).run(&pool).await.unwrap(),
        vec![ONLINE_INDEX.version]
    );
    assert_eq!(
        index_valid(&pool, "jobs_test_created_idx").await,
        Some(true)
    );
    let definition: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_test_created_idx'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        definition.contains("(created_at)"),
        "built from the migration: {definition}"
    );
    pool.close().await;
}

/// A released migration edited after it was applied is refused by name, and a database one
/// migration behind is not ready (workers refuse to start on it), saying to migrate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_or_missing_migration_is_refused_with_advice() {
    let Some(db) = Database::create("a_changed_or_missing_migration").await else {
        return;
    };
    let pool = db.pool(2).await;
    let version = lease_check_version();
    Migrator::new().up_to(version - 1).run(&pool).await.unwrap();
    let store = db.store().await;
    let error = store.check_ready().await.unwrap_err().to_string();
    assert!(error.contains("drover migrate"), "{error}");
    Migrator::new().run(&pool).await.unwrap();
    store.check_ready().await.unwrap();
    sqlx::query("UPDATE drover.schema_migrations SET checksum = 'edited' WHERE version = $1")
        .bind(version)
        .execute(&pool)
        .await
        .unwrap();
    let error = Migrator::new().run(&pool).await.unwrap_err().to_string();
    assert!(
        error.contains(&format!(
            "migration {version} (running_lease_check) was changed after it was applied"
        )),
        "{error}"
    );
    store.close().await;
    pool.close().await;
}

/// Migration 9 moves the parent-child link into `drover.job_children`: the links of children
/// stored by an earlier version are copied, the index it replaces is gone, and the lookups of
/// a parent's children read the copied links (its children list, its cancel cascade).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_children_of_an_earlier_version_are_linked_by_the_migration() {
    let Some(db) = Database::create("the_children_are_linked_by_the_migration").await else {
        return;
    };
    let pool = db.pool(2).await;
    let version = migrations()
        .iter()
        .find(|m| m.name == "job_children")
        .expect("the link migration")
        .version;
    Migrator::new().up_to(version - 1).run(&pool).await.unwrap();
    sqlx::query(
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, max_attempts, \
                                  parent_id, live_children) \
         VALUES ('aaaaaaaa-0000-0000-0000-000000000001', 'parent', 'q', 'default', '{}', now(), \
                 'waiting', 3, NULL, 2), \
                ('aaaaaaaa-0000-0000-0000-000000000002', 'child', 'q', 'default', '{}', now(), \
                 'queued', 3, 'aaaaaaaa-0000-0000-0000-000000000001', 0), \
                ('aaaaaaaa-0000-0000-0000-000000000003', 'child', 'q', 'default', '{}', now(), \
                 'queued', 3, 'aaaaaaaa-0000-0000-0000-000000000001', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(index_valid(&pool, "jobs_parent_idx").await, Some(true));

    Migrator::new().run(&pool).await.unwrap();
    let links: Vec<(String, String)> = sqlx::query_as(
        "SELECT parent_id::text, child_id::text FROM drover.job_children ORDER BY child_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let parent = "aaaaaaaa-0000-0000-0000-000000000001";
    assert_eq!(
        links,
        vec![
            (
                parent.to_owned(),
                "aaaaaaaa-0000-0000-0000-000000000002".to_owned()
            ),
            (
                parent.to_owned(),
                "aaaaaaaa-0000-0000-0000-000000000003".to_owned()
            ),
        ]
    );
    assert_eq!(index_valid(&pool, "jobs_parent_idx").await, None, "dropped");

    let store = db.store().await;
    store.check_ready().await.unwrap();
    let parent_id: drover_core::JobId = parent.parse().unwrap();
    let children = store
        .jobs_list(drover_core::ListJobs {
            parent: Some(parent_id),
            ..drover_core::ListJobs::default()
        })
        .await
        .unwrap();
    assert_eq!(children.jobs.len(), 2, "{children:?}");
    store.job_cancel(parent_id).await.unwrap();
    let states: Vec<String> =
        sqlx::query_scalar("SELECT state FROM drover.jobs WHERE kind = 'child' ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(states, vec!["cancelled", "cancelled"]);
    store.close().await;
    pool.close().await;
}

/// The counts per queue and state as the store's snapshot gives them, and as `count(*)` does.
async fn counts_both_ways(
    store: &PgStore,
    pool: &PgPool,
) -> (Vec<(String, String, i64)>, Vec<(String, String, i64)>) {
    let snapshot = store.queue_snapshot().await.unwrap();
    let mut given = Vec::new();
    for q in snapshot.queues {
        for (state, n) in q.counts {
            given.push((q.queue.to_string(), state.as_str().to_owned(), n as i64));
        }
    }
    given.sort();
    let counted: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT queue, state, count(*) FROM drover.jobs GROUP BY queue, state ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    (given, counted)
}

/// Migration 10 maintains the job counts (docs/design.md, "Counts"): it counts the jobs an
/// earlier version stored, jobs written while it runs are counted once, and a TRUNCATE of
/// the jobs table empties the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_counts_start_from_the_jobs_there_and_follow_writes_during_the_migration() {
    let Some(db) = Database::create("the_job_counts_start_from_the_jobs_there").await else {
        return;
    };
    let pool = db.pool(4).await;
    let version = migrations()
        .iter()
        .find(|m| m.name == "job_counts")
        .expect("the counts migration")
        .version;
    Migrator::new().up_to(version - 1).run(&pool).await.unwrap();
    fill(&pool, 50_000, false).await;

    // An earlier version's writer goes on while the migration runs: inserts into two queues
    // and moves jobs between states.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (pool, stop) = (pool.clone(), stop.clone());
        tokio::spawn(async move {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                sqlx::query(
                    "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, \
                                              max_attempts) \
                     SELECT gen_random_uuid(), 'w', q, 'default', '{}', now(), 'queued', 3 \
                     FROM unnest(ARRAY['during', 'default']) q",
                )
                .execute(&pool)
                .await
                .unwrap();
                sqlx::query(
                    "UPDATE drover.jobs SET state = 'cancelled', finished_at = now() \
                     WHERE id IN (SELECT id FROM drover.jobs WHERE state = 'queued' \
                                  ORDER BY id LIMIT 3)",
                )
                .execute(&pool)
                .await
                .unwrap();
                rounds += 1;
            }
            rounds
        })
    };
    Migrator::new().run(&pool).await.unwrap();
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.await.unwrap();
    assert!(rounds > 0, "the writer wrote");

    let store = db.store().await;
    store.check_ready().await.unwrap();
    let (given, counted) = counts_both_ways(&store, &pool).await;
    assert_eq!(given, counted);
    assert!(given.iter().any(|(q, _, _)| q == "during"), "{given:?}");

    // The count step again (a run cut short before it was recorded repeats it) with changes
    // not yet folded: the changes the count includes are dropped, not counted twice.
    sqlx::query("UPDATE drover.jobs SET queue = 'moved' WHERE queue = 'during'")
        .execute(&pool)
        .await
        .unwrap();
    let migration = migrations().iter().find(|m| m.version == version).unwrap();
    let (locking, online) = migration.sql.split_once("-- drover:step online").unwrap();
    let empty_totals = locking.rsplit_once("DELETE").unwrap().1;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&format!("DELETE{empty_totals}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(online).execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    let (given, counted) = counts_both_ways(&store, &pool).await;
    assert_eq!(given, counted);
    assert!(given.iter().any(|(q, _, _)| q == "moved"), "{given:?}");

    sqlx::query("TRUNCATE drover.jobs")
        .execute(&pool)
        .await
        .unwrap();
    let (given, counted) = counts_both_ways(&store, &pool).await;
    assert_eq!((given.len(), counted.len()), (0, 0));
    store
        .job_enqueue(drover_core::NewJob::new(
            drover_core::JobKind::parse("k").unwrap(),
            serde_json::json!(1),
        ))
        .await
        .unwrap();
    let (given, counted) = counts_both_ways(&store, &pool).await;
    assert_eq!(given, counted);
    assert_eq!(given.len(), 1);
    store.close().await;
    pool.close().await;
}

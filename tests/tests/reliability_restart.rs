//! PostgreSQL restarted and unreachable under running workers (RELIABILITY.md, guarantees 1,
//! 1a, 9, 13 and 14), on a private PostgreSQL instance the test starts itself
//! (`reliability_support::private_pg`): the shared server is never restarted.
//!
//! - 1,000 jobs in flight across two worker processes while PostgreSQL restarts twice, once
//!   `fast` (clients disconnected, clean shutdown) and once `immediate` (a crash: processes
//!   killed, recovery at start). Afterwards no job is lost, none is stuck running, none ran
//!   after its final state was recorded, no stale writer won; the workers never exited.
//!   A schedule firing every second runs through both restarts: no tick enqueues twice. An
//!   HTTP producer enqueues through both restarts, retrying with idempotency keys: every
//!   acknowledged enqueue is stored once, and a restart is answered 503 and nothing else.
//! - The database stopped under a worker: the worker keeps running, logs the transient errors
//!   and retries with capped exponential backoff, makes no claims (the claim loop is gated,
//!   while heartbeats keep probing), and resumes on its own once PostgreSQL is back.
//! - SIGTERM while the database is down: the worker still stops (what it cannot write is given
//!   up after the flush timeout), and its job runs again on another worker afterwards.
//!
//! The tests take turns (a lock): each runs its own PostgreSQL next to worker processes
//! on a 2-core machine. Without PostgreSQL binaries or, as root, without `runuser` they skip,
//! unless `DROVER_REQUIRE_POSTGRES` is set, when they fail.

mod reliability_support;

use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobKind, JobStore, NewSchedule, ScheduleName};
use drover_store_postgres::sqlx;
use reliability_support::private_pg::PrivatePg;
use reliability_support::{audit, wait_until, Db, Instrument};

/// Deadline of any wait on the loaded 2-core CI machine.
const WAIT: Duration = Duration::from_secs(180);

/// One private PostgreSQL at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarts_with_1000_jobs_in_flight_lose_no_job() {
    const TEST: &str = "postgres_restarts_with_1000_jobs_in_flight_lose_no_job";
    let _turn = TURN.lock().await;
    let Some(pg) = PrivatePg::start(TEST).await else {
        return;
    };
    let db = Db::create(&pg.server(), TEST, Instrument::Full).await;
    let mut a = db.spawn_worker(&["--slots", "8"]);
    let mut b = db.spawn_worker(&["--slots", "8"]);
    let a_id = a.worker_started().await;
    let b_id = b.worker_started().await;
    let mut ids = db.enqueue_records(1000, 40, 25).await;
    // A schedule firing every second runs through the restarts too: each tick enqueues once.
    let store = db.store().await;
    store
        .schedule_upsert(NewSchedule::new(
            ScheduleName::parse("every-second").unwrap(),
            "* * * * * *",
            JobKind::parse("noop").unwrap(),
            serde_json::json!({}),
        ))
        .await
        .unwrap();

    // An HTTP producer enqueues through both restarts, retrying each request with its
    // idempotency key until it is answered: no enqueue may be lost or stored twice, and the
    // only refusal a restart may cause is 503 (retry).
    let producer = HttpProducer::start(&db).await;

    for (mode, progress) in [("fast", 250), ("immediate", 600)] {
        wait_until("both workers busy and progress made", WAIT, || async {
            (db.running_under(&a_id).await > 0
                && db.running_under(&b_id).await > 0
                && db.count("succeeded").await >= progress)
                .then_some(())
        })
        .await;
        let before = db.count("succeeded").await;
        pg.restart(mode).await;
        assert!(a.is_running(), "after the {mode} restart: {}", a.stderr());
        assert!(b.is_running(), "after the {mode} restart: {}", b.stderr());
        assert!(
            db.count("succeeded").await < 1000,
            "the {mode} restart happened with jobs in flight (succeeded before: {before})"
        );
    }

    let produced = producer.finish().await;
    assert!(
        produced.len() >= 10,
        "the producer got through: {}",
        produced.len()
    );
    eprintln!(
        "through two restarts: {} enqueues over HTTP acknowledged",
        produced.len()
    );
    let per_key: Vec<(String, i64)> = sqlx::query_as(
        "SELECT idempotency_key, count(*) FROM drover.jobs WHERE idempotency_key LIKE 'restart-%' \
         GROUP BY 1 HAVING count(*) <> 1",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert!(
        per_key.is_empty(),
        "keys stored other than once: {per_key:?}"
    );
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM drover.jobs WHERE id = ANY($1::uuid[]) AND idempotency_key LIKE 'restart-%'",
    )
    .bind(&produced)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(
        stored,
        produced.len() as i64,
        "every acknowledged enqueue is stored"
    );
    ids.extend(produced);
    db.wait_all_terminal(WAIT).await;
    // The ticks the schedule enqueues while the backlog fills the tenant's quota are held back,
    // so how many fired by now depends on the machine's speed: wait for three.
    wait_until("the schedule to fire three ticks", WAIT, || async {
        let ticks: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT meta->>'tick') FROM drover.jobs WHERE meta ? 'schedule'",
        )
        .fetch_one(db.pool())
        .await
        .unwrap();
        (ticks >= 3).then_some(())
    })
    .await;
    store
        .schedule_remove(ScheduleName::parse("every-second").unwrap())
        .await
        .unwrap();
    db.wait_all_terminal(WAIT).await;
    store.close().await;
    let ticks: Vec<(String, i64)> = sqlx::query_as(
        "SELECT meta->>'tick', count(*) FROM drover.jobs WHERE meta ? 'schedule' \
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert!(ticks.len() >= 3, "the schedule fired: {ticks:?}");
    let repeated: Vec<_> = ticks.iter().filter(|(_, n)| *n > 1).collect();
    assert!(
        repeated.is_empty(),
        "ticks enqueued more than once: {repeated:?}"
    );
    let scheduled: Vec<sqlx::types::Uuid> =
        sqlx::query_scalar("SELECT id FROM drover.jobs WHERE meta ? 'schedule'")
            .fetch_all(db.pool())
            .await
            .unwrap();
    ids.extend(scheduled);
    let audit = audit(&db, &ids).await;
    audit.assert_clean();
    assert_eq!(audit.count("succeeded"), ids.len() as i64, "{audit:?}");
    for worker in [&a, &b] {
        let stderr = worker.stderr();
        assert!(
            stderr.contains("store unavailable"),
            "the lost connections were logged as transient: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert!(a.is_running() && b.is_running(), "no worker exited");
    a.stop(WAIT).await;
    b.stop(WAIT).await;
}

/// A producer posting `record` jobs to a real HTTP API on the test's database, each with its own
/// idempotency key, retrying every request (same key, same body) until it is answered 202 or
/// 200; any other answer than 503 fails the test.
struct HttpProducer {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Vec<sqlx::types::Uuid>>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    shutdown: tokio_util::sync::CancellationToken,
}

impl HttpProducer {
    async fn start(db: &Db) -> HttpProducer {
        let store: Arc<dyn JobStore> = Arc::new(db.store().await);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/jobs", listener.local_addr().unwrap());
        let shutdown = tokio_util::sync::CancellationToken::new();
        let state = drover_http::ApiState::new(
            store,
            drover_http::AuthMode::InsecureNoAuth,
            drover_http::ApiConfig::default(),
            None,
        );
        let server = tokio::spawn(drover_http::serve(
            listener,
            drover_http::router(state),
            shutdown.clone(),
        ));
        let stop = tokio_util::sync::CancellationToken::new();
        let stopping = stop.clone();
        let task = tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut ids = Vec::new();
            let mut key = 0;
            while !stopping.is_cancelled() {
                key += 1;
                let deadline = std::time::Instant::now() + WAIT;
                loop {
                    let answer = client
                        .post(&url)
                        .header("Idempotency-Key", format!("restart-{key}"))
                        .json(&serde_json::json!({"kind": "record", "args": {"ms": 0}, "max_attempts": 25}))
                        .send()
                        .await;
                    match answer {
                        Ok(answer) if matches!(answer.status().as_u16(), 200 | 202) => {
                            let body: serde_json::Value = answer.json().await.unwrap();
                            ids.push(body["job"]["id"].as_str().unwrap().parse().unwrap());
                            break;
                        }
                        Ok(answer) => {
                            let status = answer.status().as_u16();
                            let text = answer.text().await.unwrap_or_default();
                            assert_eq!(status, 503, "a restart may only answer 503: {text}");
                        }
                        Err(error) => panic!("the API itself did not answer: {error}"),
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "key {key} never got in"
                    );
                    // Back off before retrying, as a client should.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            ids
        });
        HttpProducer {
            stop,
            task,
            server,
            shutdown,
        }
    }

    /// Stops producing; returns the ids of every acknowledged enqueue.
    async fn finish(self) -> Vec<sqlx::types::Uuid> {
        self.stop.cancel();
        let ids = self.task.await.expect("the producer panicked");
        self.shutdown.cancel();
        self.server.await.unwrap().unwrap();
        ids
    }
}

/// The `retry_in_ms=N` of a log line.
fn retry_in_ms(line: &str) -> u64 {
    line.split("retry_in_ms=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no retry_in_ms in {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_pauses_claims_and_the_worker_resumes_on_its_own() {
    const TEST: &str = "unreachable_database_pauses_claims_and_the_worker_resumes_on_its_own";
    let _turn = TURN.lock().await;
    let Some(pg) = PrivatePg::start(TEST).await else {
        return;
    };
    let db = Db::create(&pg.server(), TEST, Instrument::Full).await;
    let mut worker = db.spawn_worker(&["--slots", "2", "--poll-interval", "200ms"]);
    let id = worker.worker_started().await;
    let mut ids = db.enqueue_records(1, 2500, 10).await;
    wait_until("the job to run", WAIT, || async {
        (db.running_under(&id).await == 1 && db.side_effects_of(worker.pid).await == 1)
            .then_some(())
    })
    .await;

    pg.stop("fast").await;
    // The job's handler ends during the outage: its outcome cannot be written, and the
    // completer retries with growing delays; heartbeats keep failing and probing.
    let failed_writes = "writing outcomes failed; retrying";
    wait_until("three failed outcome writes", WAIT, || async {
        (worker.count_lines(failed_writes) >= 3).then_some(())
    })
    .await;
    let delays: Vec<u64> = worker
        .lines_with(failed_writes)
        .iter()
        .map(|l| retry_in_ms(l))
        .collect();
    for pair in delays.windows(3) {
        assert!(
            pair[2] > pair[0],
            "the retry delay doubles (with jitter): {delays:?}"
        );
    }
    // Each failed call waits out the pool's acquire timeout (5 s) first: a refused connection
    // is retried by the pool until then.
    let heartbeat_failures = "heartbeat failed; claims paused until a heartbeat succeeds";
    wait_until("four failed heartbeat calls", WAIT, || async {
        (worker.count_lines(heartbeat_failures) >= 4).then_some(())
    })
    .await;
    // The claim loop polls every 200 ms when healthy; while unhealthy it waits for a
    // heartbeat to succeed instead of claiming.
    let claim_failures = worker.count_lines("claim failed");
    assert!(
        claim_failures <= 2,
        "no claims while the database is unreachable ({claim_failures} failed claims):\n{}",
        worker.stderr()
    );
    assert!(
        worker.is_running(),
        "the worker keeps running: {}",
        worker.stderr()
    );
    for line in worker.lines_with(heartbeat_failures) {
        assert!(line.contains("store unavailable"), "{line}");
    }

    pg.start_again().await;
    // Without a restart the worker works again: a new job runs, and the interrupted one (its
    // lease expired during the outage) is rescued and run again.
    ids.extend(db.enqueue_records(1, 0, 10).await);
    db.wait_all_terminal(WAIT).await;

    let audit = audit(&db, &ids).await;
    audit.assert_clean();
    assert_eq!(audit.count("succeeded"), 2, "{audit:?}");
    assert_eq!(
        worker.count_lines("claim failed"),
        claim_failures,
        "no claim failed after the database came back"
    );
    let stopped = worker.stop(WAIT).await;
    assert!(!worker.stderr().contains("panicked"));
    assert!(stopped.contains("succeeded 2"), "{stopped}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_an_outage_stops_the_worker_and_its_job_runs_again_later() {
    const TEST: &str = "sigterm_during_an_outage_stops_the_worker_and_its_job_runs_again_later";
    let _turn = TURN.lock().await;
    let Some(pg) = PrivatePg::start(TEST).await else {
        return;
    };
    let db = Db::create(&pg.server(), TEST, Instrument::Full).await;
    let mut a = db.spawn_worker(&["--slots", "1", "--shutdown-grace", "500ms"]);
    let a_id = a.worker_started().await;
    let ids = db.enqueue_records(1, 3000, 10).await;
    wait_until("the job to run on A", WAIT, || async {
        (db.running_under(&a_id).await == 1 && db.side_effects_of(a.pid).await == 1).then_some(())
    })
    .await;
    pg.stop("fast").await;
    a.wait_for_line("claims paused until a heartbeat succeeds", WAIT)
        .await;
    // Asked to stop while the database is away, the worker still stops: what it cannot
    // write is given up after the flush timeout and left to lease expiry.
    let asked = std::time::Instant::now();
    a.signal(rustix::process::Signal::TERM);
    let status = a.wait_exit(WAIT).await;
    let took = asked.elapsed();
    assert!(status.success(), "{status}: {}", a.stderr());
    let stopped = a.wait_for_line("drover: worker stopped: ", WAIT).await;
    assert!(stopped.contains("unwritten 1"), "{stopped}");
    eprintln!("SIGTERM during the outage: the worker stopped after {took:?}");

    pg.start_again().await;
    let mut b = db.spawn_worker(&["--slots", "1"]);
    b.worker_started().await;
    db.wait_all_terminal(WAIT).await;
    let audit = audit(&db, &ids).await;
    audit.assert_clean();
    assert_eq!(audit.count("succeeded"), 1, "{audit:?}");
    assert_eq!(audit.side_effects, 2, "the job ran again on B");
    b.stop(WAIT).await;
}

/// Large (COPY) and small (INSERT) batch enqueues in a loop while PostgreSQL restarts, fast
/// then immediate: every answered batch is stored whole and read back as answered, every batch
/// is stored whole or not at all, the only error a restart may cause is `Unavailable`, and once
/// the server is back every call succeeds (no connection is left out of step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_batches_through_postgres_restarts_store_whole_or_nothing() {
    const TEST: &str = "copy_batches_through_postgres_restarts_store_whole_or_nothing";
    let _turn = TURN.lock().await;
    let Some(pg) = PrivatePg::start(TEST).await else {
        return;
    };
    let db = Db::create(&pg.server(), TEST, Instrument::Full).await;
    let store = Arc::new(db.store().await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut producers = Vec::new();
    for p in 0..2 {
        let store = store.clone();
        let stop = stop.clone();
        producers.push(tokio::spawn(async move {
            let mut outcomes: Vec<(String, bool)> = Vec::new();
            let mut unexpected: Vec<String> = Vec::new();
            let mut b = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                b += 1;
                let name = format!("{p}-{b}");
                let size = if b % 4 == 0 { 50 } else { 1000 };
                let batch: Vec<drover_core::NewJob> = (0..size)
                    .map(|n| {
                        drover_core::NewJob::new(
                            JobKind::parse("noop").unwrap(),
                            serde_json::json!({"n": n}),
                        )
                        .with_meta(serde_json::json!({"batch": name}))
                    })
                    .collect();
                match store.jobs_enqueue(batch).await {
                    Ok(answers) => {
                        assert_eq!(answers.len(), size);
                        for a in [&answers[0], &answers[size - 1]] {
                            match store.job_get(a.job.id).await {
                                Ok(j) if j == a.job => {}
                                Ok(j) => unexpected
                                    .push(format!("{name}: job_get {j:?} != answer {:?}", a.job)),
                                Err(e) if e.is_transient() => {}
                                Err(e) => unexpected.push(format!("{name}: job_get: {e}")),
                            }
                        }
                        outcomes.push((name, true));
                    }
                    Err(e) if e.is_transient() => {
                        outcomes.push((name, false));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => {
                        unexpected.push(format!("{name}: enqueue of {size}: {e:?}"));
                        outcomes.push((name, false));
                    }
                }
            }
            (outcomes, unexpected)
        }));
    }
    for mode in ["fast", "immediate", "fast"] {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        pg.restart(mode).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut outcomes = Vec::new();
    let mut unexpected = Vec::new();
    for t in producers {
        let (o, u) = t.await.unwrap();
        outcomes.extend(o);
        unexpected.extend(u);
    }
    // Once the server is back, every call succeeds on every connection of the pool.
    for round in 0..12 {
        let batch: Vec<drover_core::NewJob> = (0..300)
            .map(|n| {
                drover_core::NewJob::new(JobKind::parse("after").unwrap(), serde_json::json!(n))
            })
            .collect();
        if let Err(e) = store.jobs_enqueue(batch).await {
            unexpected.push(format!(
                "after the restarts, round {round}: large enqueue: {e:?}"
            ));
        }
        if let Err(e) = store
            .job_enqueue(drover_core::NewJob::new(
                JobKind::parse("after").unwrap(),
                serde_json::json!(0),
            ))
            .await
        {
            unexpected.push(format!(
                "after the restarts, round {round}: small enqueue: {e:?}"
            ));
        }
    }
    let counts: Vec<(String, i64)> = sqlx::query_as(
        "SELECT meta->>'batch', count(*) FROM drover.jobs WHERE meta ? 'batch' GROUP BY 1",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    let counts: std::collections::HashMap<String, i64> = counts.into_iter().collect();
    let answered = outcomes.iter().filter(|(_, ok)| *ok).count();
    let failed = outcomes.len() - answered;
    eprintln!("{answered} batches answered, {failed} refused as unavailable");
    for (name, ok) in &outcomes {
        let size = if name.split('-').nth(1).unwrap().parse::<usize>().unwrap() % 4 == 0 {
            50
        } else {
            1000
        };
        let stored = counts.get(name).copied().unwrap_or(0);
        if *ok {
            assert_eq!(
                stored, size as i64,
                "batch {name} answered but {stored} stored"
            );
        } else {
            assert!(
                stored == 0 || stored == size as i64,
                "batch {name} refused: {stored} of {size} stored"
            );
        }
    }
    assert!(unexpected.is_empty(), "unexpected answers: {unexpected:#?}");
    assert!(failed > 0, "a restart landed during an enqueue");
    store.close().await;
}

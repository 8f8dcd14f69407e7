//! Fault tests (RELIABILITY.md) on the shared PostgreSQL server, with real worker processes
//! of the `drover-test-worker` binary (the `drover` CLI plus the `record` kind, whose side
//! effect is a row in the test's database): SIGKILL of a worker mid-job, the workers'
//! database connections cut with `pg_terminate_backend`, a worker frozen (SIGSTOP) past its
//! lease and continued (its late writes are rejected; a stalled handler's side effect is
//! stopped only when fenced with the run's token), a graceful restart of every worker, and
//! the schema dropped under a running worker (a non-transient error: it stops, saying to run
//! `drover migrate`).
//!
//! After each fault [`audit`] checks the promises: every enqueued job is accounted for, none
//! ran after its final state was recorded, fencing tokens only grew, no stale writer won; and
//! the tests wait until no job is left running. Restarting PostgreSQL itself happens on a
//! private instance (`reliability_restart.rs`), never on the shared server.
//!
//! Workers use `--lease 2s --heartbeat 500ms --rescue-interval 500ms`. Needs
//! `DROVER_TEST_DATABASE_URL`; without it every test prints `SKIPPED ...` and passes, unless
//! `DROVER_REQUIRE_POSTGRES` is set (CI), when it fails.

mod reliability_support;

use std::time::Duration;

use drover_store_postgres::sqlx;
use reliability_support::{audit, counter, shared_server, wait_until, Db, Instrument};
use rustix::process::Signal;

/// Deadline of any wait on the loaded 2-core CI machine.
const WAIT: Duration = Duration::from_secs(120);

/// The tests with worker processes take turns: together they would open more connections than
/// the shared server allows (100 by default) and crowd the two cores.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Side effects of process `pid` under a claim that is no longer the job's latest: runs the
/// fault interrupted.
async fn interrupted_runs_of(db: &Db, pid: u32) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM side_effects s JOIN drover.jobs j ON j.id = s.job_id \
         WHERE s.pid = $1 AND s.fencing_token < j.fencing_token",
    )
    .bind(pid as i32)
    .fetch_one(db.pool())
    .await
    .unwrap()
}

/// SIGSTOPs `worker` at a moment when none of its store connections is inside a statement or
/// transaction (a process frozen inside one would hold its row locks until it runs again, see
/// RELIABILITY.md, which is not what these tests are about). The workers' store connections
/// are the `drover` ones on the test database; only `worker` may have any.
async fn freeze_outside_a_transaction(db: &Db, worker: &reliability_support::WorkerProcess) {
    let mut tries = 0;
    loop {
        worker.signal(Signal::STOP);
        let busy: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'drover' \
             AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')",
        )
        .bind(&db.name)
        .fetch_one(db.pool())
        .await
        .unwrap();
        if busy == 0 {
            return;
        }
        tries += 1;
        assert!(tries < 100, "the worker never paused outside a transaction");
        worker.signal(Signal::CONT);
        tokio::time::sleep(Duration::from_millis(7)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_worker_mid_job_loses_no_job() {
    const TEST: &str = "sigkill_of_a_worker_mid_job_loses_no_job";
    let _turn = TURN.lock().await;
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::Full).await;
    let mut a = db.spawn_worker(&["--slots", "4"]);
    let mut b = db.spawn_worker(&["--slots", "4"]);
    let a_id = a.worker_started().await;
    b.worker_started().await;
    let ids = db.enqueue_records(200, 150, 10).await;

    // Mid-job: A runs jobs (its handlers have started) while others already finished. Checked
    // with A frozen outside any statement, and killed frozen: nothing A does can record those
    // jobs between the check and the kill (checked live, its completer could record them in
    // between, and the kill would interrupt nothing).
    wait_until(
        "A's handlers to run jobs while others succeeded",
        WAIT,
        || async {
            freeze_outside_a_transaction(&db, &a).await;
            let started_on_a: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM side_effects s JOIN drover.jobs j ON j.id = s.job_id \
             WHERE s.pid = $1 AND j.state = 'running' AND j.lease_owner = $2 \
             AND s.fencing_token = j.fencing_token",
            )
            .bind(a.pid as i32)
            .bind(&a_id)
            .fetch_one(db.pool())
            .await
            .unwrap();
            if started_on_a >= 2 && db.count("succeeded").await >= 10 {
                return Some(());
            }
            a.signal(Signal::CONT);
            None
        },
    )
    .await;
    a.signal(Signal::KILL);
    assert!(!a.wait_exit(WAIT).await.success());

    db.wait_all_terminal(WAIT).await;
    let audit = audit(&db, &ids).await;
    audit.assert_clean();
    assert_eq!(audit.count("succeeded"), 200, "{audit:?}");
    assert!(
        interrupted_runs_of(&db, a.pid).await >= 2,
        "the kill interrupted A's running jobs, which ran again elsewhere"
    );
    let expired: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM drover.jobs WHERE errors::text LIKE '%lease expired%'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert!(expired >= 2, "the killed attempts were spent and say why");
    let stopped = b.stop(WAIT).await;
    assert!(counter(&stopped, "rescued") >= 2, "{stopped}");
}

/// Jobs a worker claimed ahead (waiting in its backlog for its one busy slot) never started:
/// when the worker is SIGKILLed, their expired leases give the attempt back, so jobs with
/// `max_attempts 1` run elsewhere instead of failing. The job whose handler ran spends its
/// attempt as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_worker_spends_no_attempt_of_jobs_it_claimed_ahead() {
    const TEST: &str = "sigkill_of_a_worker_spends_no_attempt_of_jobs_it_claimed_ahead";
    let _turn = TURN.lock().await;
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::Full).await;
    let mut a = db.spawn_worker(&["--slots", "1", "--prefetch", "8"]);
    let a_id = a.worker_started().await;
    // A short job first: A claims ahead only once it saw that its queue's jobs are short.
    let first = db.enqueue_records(1, 0, 1).await;
    db.wait_all_terminal(WAIT).await;
    // Then a long job, which takes A's slot, and five short ones, which A claims ahead.
    let long = db.enqueue_records(1, 60_000, 1).await;
    let short = db.enqueue_records(5, 0, 1).await;
    wait_until(
        "A to run the long job and hold the short ones",
        WAIT,
        || async {
            let (running, waiting): (i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE started_at IS NOT NULL), \
                    count(*) FILTER (WHERE started_at IS NULL) \
             FROM drover.jobs WHERE state = 'running' AND lease_owner = $1",
            )
            .bind(&a_id)
            .fetch_one(db.pool())
            .await
            .unwrap();
            let long_ran = db.side_effects_of(a.pid).await >= 2;
            (running == 1 && waiting == 5 && long_ran).then_some(())
        },
    )
    .await;
    a.signal(Signal::KILL);
    assert!(!a.wait_exit(WAIT).await.success());

    let mut b = db.spawn_worker(&["--slots", "4"]);
    b.worker_started().await;
    db.wait_all_terminal(WAIT).await;
    let ids: Vec<_> = first.iter().chain(&long).chain(&short).copied().collect();
    let audit = audit(&db, &ids).await;
    audit.assert_clean();
    let outcomes: Vec<(String, i32, i32, String)> = sqlx::query_as(
        "SELECT state, attempt, (SELECT count(*) FROM side_effects s WHERE s.job_id = j.id \
                AND s.pid = $2)::int, COALESCE(errors->-1->>'message', '') \
         FROM drover.jobs j WHERE id = ANY($1) ORDER BY id",
    )
    .bind(&short)
    .bind(a.pid as i32)
    .fetch_all(db.pool())
    .await
    .unwrap();
    for (state, attempt, runs_on_a, note) in &outcomes {
        assert_eq!(
            (state.as_str(), *attempt, *runs_on_a),
            ("succeeded", 1, 0),
            "a job claimed ahead by the killed worker runs elsewhere on its only attempt"
        );
        assert!(note.contains("before the handler started"), "{note}");
    }
    let (state, note): (String, String) =
        sqlx::query_as("SELECT state, errors->-1->>'message' FROM drover.jobs WHERE id = $1")
            .bind(long[0])
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(
        state, "failed",
        "the job whose handler ran spent its only attempt"
    );
    assert!(
        note.starts_with("lease expired during attempt 1 of 1"),
        "{note}"
    );
    let stopped = b.stop(WAIT).await;
    assert_eq!(counter(&stopped, "rescued"), 6, "{stopped}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_database_connections_lose_no_job() {
    const TEST: &str = "cut_database_connections_lose_no_job";
    let _turn = TURN.lock().await;
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::Full).await;
    let mut a = db.spawn_worker(&["--slots", "4"]);
    let mut b = db.spawn_worker(&["--slots", "4"]);
    a.worker_started().await;
    b.worker_started().await;
    let ids = db.enqueue_records(300, 40, 10).await;

    // Three cuts while the workers are busy, each after visible progress since the last.
    for round in 1..=3 {
        wait_until("progress before the next cut", WAIT, || async {
            (db.count("succeeded").await >= round * 60).then_some(())
        })
        .await;
        let terminated = db.terminate_worker_connections().await;
        assert!(
            terminated >= 2,
            "round {round}: the workers had connections"
        );
    }

    db.wait_all_terminal(WAIT).await;
    let audit = audit(&db, &ids).await;
    audit.assert_clean();
    assert_eq!(audit.count("succeeded"), 300, "{audit:?}");
    assert!(
        a.is_running(),
        "a lost connection is transient: {}",
        a.stderr()
    );
    assert!(
        b.is_running(),
        "a lost connection is transient: {}",
        b.stderr()
    );
    // They still work on fresh connections, and stop cleanly.
    let more = db.enqueue_records(20, 0, 10).await;
    db.wait_all_terminal(WAIT).await;
    let all: Vec<_> = ids.iter().chain(&more).copied().collect();
    audit_all_succeeded(&db, &all).await;
    a.stop(WAIT).await;
    b.stop(WAIT).await;
}

async fn audit_all_succeeded(db: &Db, ids: &[sqlx::types::Uuid]) {
    let audit = audit(db, ids).await;
    audit.assert_clean();
    assert_eq!(audit.count("succeeded"), ids.len() as i64, "{audit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_worker_past_its_lease_cannot_write_late() {
    const TEST: &str = "frozen_worker_past_its_lease_cannot_write_late";
    let _turn = TURN.lock().await;
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::Full).await;
    let mut a = db.spawn_worker(&["--slots", "2"]);
    let a_id = a.worker_started().await;
    let ids = db.enqueue_records(2, 2500, 10).await;
    wait_until("A's handlers to start both jobs", WAIT, || async {
        (db.running_under(&a_id).await == 2 && db.side_effects_of(a.pid).await == 2).then_some(())
    })
    .await;
    freeze_outside_a_transaction(&db, &a).await;

    // B rescues both jobs once A's lease expired, runs and finishes them.
    let mut b = db.spawn_worker(&["--slots", "2"]);
    b.worker_started().await;
    let final_rows = wait_until("B to finish both jobs", WAIT, || async {
        let rows: Vec<(String, i64, Option<i32>, String)> = sqlx::query_as(
            "SELECT state, fencing_token, (result->>'pid')::int, finished_at::text FROM drover.jobs \
             WHERE state = 'succeeded' ORDER BY id",
        )
        .fetch_all(db.pool())
        .await
        .unwrap();
        (rows.len() == 2).then_some(rows)
    })
    .await;
    for (_, token, pid, _) in &final_rows {
        assert_eq!(*pid, Some(b.pid as i32), "B's run recorded the result");
        assert_eq!(*token, 2, "B's claim is the second");
    }

    // A wakes up: its handlers end, and every write it tries is refused.
    a.signal(Signal::CONT);
    let stopped = a.stop(WAIT).await;
    assert_eq!(counter(&stopped, "lease lost"), 2, "{stopped}");
    assert_eq!(counter(&stopped, "succeeded"), 0, "{stopped}");
    let after: Vec<(String, i64, Option<i32>, String)> = sqlx::query_as(
        "SELECT state, fencing_token, (result->>'pid')::int, finished_at::text FROM drover.jobs ORDER BY id",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(after, final_rows, "the late writer changed nothing");
    let audit = audit(&db, &ids).await;
    audit.assert_clean();
    assert_eq!(audit.side_effects, 4, "each job ran on A and on B");
    b.stop(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_restart_of_every_worker_loses_no_job() {
    const TEST: &str = "graceful_restart_of_every_worker_loses_no_job";
    let _turn = TURN.lock().await;
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::Full).await;
    let flags = ["--slots", "4", "--shutdown-grace", "500ms"];
    let mut workers = vec![
        db.spawn_worker(&flags),
        db.spawn_worker(&flags),
        db.spawn_worker(&flags),
    ];
    for worker in &workers {
        worker.worker_started().await;
    }
    // Long jobs that outlast the grace period (they are released), then many short ones.
    let mut ids = db.enqueue_records(6, 8000, 10).await;
    ids.extend(db.enqueue_records(240, 100, 10).await);
    wait_until(
        "long jobs running and short ones finishing",
        WAIT,
        || async {
            let long_running: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM drover.jobs WHERE state = 'running' AND args->>'ms' = '8000'",
            )
            .fetch_one(db.pool())
            .await
            .unwrap();
            (long_running == 6 && db.count("succeeded").await >= 10).then_some(())
        },
    )
    .await;

    for worker in &workers {
        worker.signal(Signal::TERM);
    }
    let mut released = 0;
    for worker in &mut workers {
        let status = worker.wait_exit(WAIT).await;
        assert!(status.success(), "{}", worker.stderr());
        let stopped = worker.wait_for_line("drover: worker stopped: ", WAIT).await;
        released += counter(&stopped, "released");
    }
    let long_queued: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM drover.jobs WHERE state = 'queued' AND args->>'ms' = '8000'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert!(
        long_queued >= 1,
        "long jobs outlasting the grace period were released"
    );
    assert!(
        released >= long_queued as u64,
        "{released} released, {long_queued} long queued"
    );
    // Every worker is gone: every job is queued or finished, none running, none charged for
    // the release.
    let states = db.states().await;
    assert_eq!(states.get("running"), None, "{states:?}");
    assert_eq!(states.get("reconciling"), None, "{states:?}");
    let charged: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM drover.jobs WHERE state = 'queued' AND (attempt <> 0 OR errors <> '[]'::jsonb)",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(charged, 0, "a graceful release spends no attempt");
    let partial = audit(&db, &ids).await;
    partial.assert_clean();

    // The new generation finishes everything.
    let mut workers = vec![
        db.spawn_worker(&flags),
        db.spawn_worker(&flags),
        db.spawn_worker(&flags),
    ];
    db.wait_all_terminal(WAIT).await;
    audit_all_succeeded(&db, &ids).await;
    let long: Vec<i32> = sqlx::query_scalar(
        "SELECT attempt FROM drover.jobs WHERE args->>'ms' = '8000' ORDER BY id",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(long, vec![1; 6], "released runs gave their attempt back");
    for worker in &mut workers {
        worker.stop(WAIT).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_schema_stops_the_worker_saying_to_migrate() {
    const TEST: &str = "dropped_schema_stops_the_worker_saying_to_migrate";
    let _turn = TURN.lock().await;
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::None).await;
    let mut worker = db.spawn_worker(&["--slots", "2", "--poll-interval", "200ms"]);
    worker.worker_started().await;
    // The drop locks the schema's tables one by one while the worker's statements hold some:
    // PostgreSQL may end the drop as a deadlock's victim, which is then simply tried again.
    let mut tries = 0;
    while let Err(e) = sqlx::query("DROP SCHEMA drover CASCADE")
        .execute(db.pool())
        .await
    {
        let deadlock = e
            .as_database_error()
            .and_then(|db_error| db_error.code())
            .is_some_and(|code| code == "40P01");
        tries += 1;
        assert!(deadlock && tries < 10, "DROP SCHEMA: {e}");
    }
    let status = worker.wait_exit(WAIT).await;
    assert_eq!(status.code(), Some(1), "{}", worker.stderr());
    let stderr = worker.stderr();
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("drover: ") && last.contains("run `drover migrate`"),
        "the last line says what to do: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The audit itself can fail: each promise, broken by hand in the database, is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reports_each_broken_promise() {
    const TEST: &str = "audit_reports_each_broken_promise";
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::Full).await;
    let ids = db.enqueue_records(4, 0, 1).await;
    let clean = audit(&db, &ids).await;
    clean.assert_clean();
    assert_eq!(clean.count("queued"), 4);

    // Job 0 "runs" and succeeds, then runs again after its final state was recorded; job 1
    // succeeds with a result written under a stale token; job 2 leaves a terminal state; job 3
    // is lost.
    let run = |id: sqlx::types::Uuid, token: i64| {
        let pool = db.pool().clone();
        async move {
            sqlx::query(
                "UPDATE drover.jobs SET state = 'running', attempt = attempt + 1, fencing_token = $2, \
                 lease_owner = 'w', lease_expires_at = now() + interval '1 minute' WHERE id = $1",
            )
            .bind(id)
            .bind(token)
            .execute(&pool)
            .await
            .unwrap();
            sqlx::query(
                "INSERT INTO side_effects (job_id, attempt, fencing_token, pid, started_at) \
                 VALUES ($1, 1, $2, 1, clock_timestamp())",
            )
            .bind(id)
            .bind(token)
            .execute(&pool)
            .await
            .unwrap();
            sqlx::query(
                "UPDATE drover.jobs SET state = 'succeeded', finished_at = now(), lease_owner = NULL, \
                 lease_expires_at = NULL, result = jsonb_build_object('token', $2::bigint) WHERE id = $1",
            )
            .bind(id)
            .bind(token)
            .execute(&pool)
            .await
            .unwrap();
        }
    };
    run(ids[0], 1).await;
    sqlx::query(
        "INSERT INTO side_effects (job_id, attempt, fencing_token, pid, started_at) \
         VALUES ($1, 1, 1, 1, clock_timestamp())",
    )
    .bind(ids[0])
    .execute(db.pool())
    .await
    .unwrap();
    run(ids[1], 1).await;
    sqlx::query("UPDATE drover.jobs SET fencing_token = 2 WHERE id = $1")
        .bind(ids[1])
        .execute(db.pool())
        .await
        .unwrap();
    run(ids[2], 1).await;
    sqlx::query("UPDATE drover.jobs SET state = 'queued', finished_at = NULL WHERE id = $1")
        .bind(ids[2])
        .execute(db.pool())
        .await
        .unwrap();
    // ... and is claimed again without a new fencing token, beyond its attempts, and a run
    // under a token nobody issued leaves a side effect.
    sqlx::query(
        "UPDATE drover.jobs SET state = 'running', attempt = 5, lease_owner = 'forger', \
         lease_expires_at = now() + interval '1 hour' WHERE id = $1",
    )
    .bind(ids[2])
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO side_effects (job_id, attempt, fencing_token, pid, started_at) \
         VALUES ($1, 5, 7, 1, clock_timestamp())",
    )
    .bind(ids[2])
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query("DELETE FROM drover.jobs WHERE id = $1")
        .bind(ids[3])
        .execute(db.pool())
        .await
        .unwrap();

    let broken = audit(&db, &ids).await;
    let text = broken.violations.join("\n");
    for promise in [
        "enqueued job lost",
        "job ran after its final state was recorded",
        "succeeded job whose result was written by a stale claim",
        "succeeded job without a side effect of its latest claim",
        "job left a terminal state",
        "claim whose fencing token did not increase",
        "side effect of a run that no claim issued",
        "side effect of a run under a fencing token above the job's current one",
        "attempts above max_attempts",
    ] {
        assert!(text.contains(promise), "{promise} not reported:\n{text}");
    }
}

/// What Drover does not promise, shown, and the remedy proved: a handler stalled past its lease
/// (here: its process frozen before the handler's side effect) still performs that side effect
/// when it wakes, after another worker finished the job; Drover refuses its writes, not its
/// side effects. The same side effect fenced with the run's token (RELIABILITY.md) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handler_side_effects_are_stopped_only_by_fencing() {
    const TEST: &str = "stalled_handler_side_effects_are_stopped_only_by_fencing";
    let _turn = TURN.lock().await;
    let Some(server) = shared_server(TEST) else {
        return;
    };
    let db = Db::create(&server, TEST, Instrument::Full).await;
    let mut a = db.spawn_worker(&["--slots", "2"]);
    let a_id = a.worker_started().await;
    let plain = db
        .enqueue_record_args(1, serde_json::json!({"before_ms": 2500}), 10)
        .await;
    let fenced = db
        .enqueue_record_args(
            1,
            serde_json::json!({"before_ms": 2500, "fenced": true}),
            10,
        )
        .await;
    wait_until("A to run both jobs", WAIT, || async {
        (db.running_under(&a_id).await == 2).then_some(())
    })
    .await;
    freeze_outside_a_transaction(&db, &a).await;
    assert_eq!(
        db.side_effects_of(a.pid).await,
        0,
        "frozen before the side effects"
    );

    let mut b = db.spawn_worker(&["--slots", "2"]);
    b.worker_started().await;
    db.wait_all_terminal(WAIT).await;
    assert_eq!(db.count("succeeded").await, 2, "B finished both");
    a.signal(Signal::CONT);
    let stopped = a.stop(WAIT).await;
    assert_eq!(counter(&stopped, "succeeded"), 0, "{stopped}");

    let late: Vec<(sqlx::types::Uuid, i32)> =
        sqlx::query_as("SELECT job_id, pid FROM side_effects WHERE pid = $1")
            .bind(a.pid as i32)
            .fetch_all(db.pool())
            .await
            .unwrap();
    assert_eq!(
        late,
        vec![(plain[0], a.pid as i32)],
        "the unfenced side effect happened late; the fenced one was refused"
    );
    let ids: Vec<_> = plain.iter().chain(&fenced).copied().collect();
    let audit = audit(&db, &ids).await;
    assert_eq!(audit.count("succeeded"), 2);
    assert_eq!(audit.violations.len(), 1, "{:?}", audit.violations);
    assert!(
        audit.violations[0].starts_with("job ran after its final state was recorded")
            && audit.violations[0].contains(&plain[0].to_string()),
        "{:?}",
        audit.violations
    );
    b.stop(WAIT).await;
}

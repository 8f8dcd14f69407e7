//! The evacuate scenario end to end on PostgreSQL (docs/design.md section 10), with real
//! `evacuate` worker processes: a parent fans out `migrate` children to the reserved
//! `transfers` pool and waits without a slot; one worker is SIGKILLed while it runs some of them.
//! Every child still ends succeeded, once per successful attempt (a killed attempt is rescued
//! when its lease expires); the parent runs exactly twice (fan-out, resume); `ping` jobs on the
//! same workers' general pool finish while the parent waits. A failed migration sends the
//! parent to its rollback hook.
//!
//! Being an integration test of this package, it also makes `cargo test --workspace` build
//! `target/<profile>/evacuate`. Needs `DROVER_TEST_DATABASE_URL` (skips without it, fails
//! without it under `DROVER_REQUIRE_POSTGRES`).

use std::process::Stdio;
use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_store_postgres::sqlx::{self, PgPool};
use drover_tests::postgres::{Schema, Server, TestDatabase};
use drover_tests::process::{wait_until, Process};
use rustix::process::Signal;

/// Deadline for jobs to reach a state on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(90);

/// Worker flags: a short lease so a killed worker's jobs come back quickly; a general pool
/// and the reserved transfers pool.
const WORKER: [&str; 9] = [
    "worker",
    "--lease",
    "2s",
    "--heartbeat",
    "500ms",
    "--pool",
    "general:default:2",
    "--pool",
    "transfers:transfers:2",
];

fn command(db: &TestDatabase, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_evacuate"));
    command
        .args(args)
        .env("DROVER_DATABASE_URL", &db.url)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `evacuate --json enqueue KIND --args ARGS`; returns the job id.
async fn enqueue(db: &TestDatabase, kind: &str, args: &str) -> String {
    let out = command(db, &["--json", "enqueue", kind, "--args", args])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("run evacuate enqueue");
    assert!(
        out.status.success(),
        "enqueue {kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON answer");
    answer["job"]["id"].as_str().expect("job id").to_owned()
}

/// A job as these checks read it.
#[derive(Debug, sqlx::FromRow)]
struct Row {
    state: String,
    attempt: i32,
    fencing_token: i64,
    errors: serde_json::Value,
    finished_at: Option<DateTime<Utc>>,
    attempted_at: Option<DateTime<Utc>>,
}

async fn rows(pool: &PgPool, kind: &str) -> Vec<Row> {
    sqlx::query_as(
        "SELECT state, attempt, fencing_token, errors, finished_at, attempted_at \
         FROM drover.jobs WHERE kind = $1 ORDER BY id",
    )
    .bind(kind)
    .fetch_all(pool)
    .await
    .expect("read jobs")
}

async fn state_of(pool: &PgPool, id: &str) -> String {
    sqlx::query_scalar("SELECT state FROM drover.jobs WHERE id = $1::uuid")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("read a job's state")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_loses_no_child_and_the_parent_resumes_once() {
    let test = "a_killed_worker_loses_no_child_and_the_parent_resumes_once";
    let Some(server) = Server::for_test(test) else {
        return;
    };
    let db = server.database(Schema::Migrated).await;
    let pool = db.pool(2).await;
    let a = Process::spawn(command(&db, &WORKER), &WORKER);
    let mut b = Process::spawn(command(&db, &WORKER), &WORKER);
    let a_id = a.worker_started().await;
    b.worker_started().await;

    let volumes: Vec<String> = (0..24).map(|i| format!("\"v{i}\"")).collect();
    let parent = enqueue(
        &db,
        "evacuate",
        &format!(
            r#"{{"host": "host-a", "volumes": [{}], "millis": 400}}"#,
            volumes.join(",")
        ),
    )
    .await;
    let mut pings = Vec::new();
    for i in 0..10 {
        pings.push(enqueue(&db, "ping", &format!(r#"{{"n": {i}}}"#)).await);
    }

    // Mid-fan-out, observed: worker a runs some migrations.
    wait_until("worker a to run migrations", WAIT, || async {
        let running: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM drover.jobs \
             WHERE kind = 'migrate' AND state = 'running' AND lease_owner = $1",
        )
        .bind(&a_id)
        .fetch_one(&pool)
        .await
        .expect("count running migrations");
        (running > 0).then_some(())
    })
    .await;
    a.signal(Signal::KILL);
    drop(a);

    wait_until("the parent to succeed", WAIT, || async {
        (state_of(&pool, &parent).await == "succeeded").then_some(())
    })
    .await;

    let children = rows(&pool, "migrate").await;
    assert_eq!(children.len(), 24, "one child per volume, none twice");
    let mut rescued = 0;
    for child in &children {
        assert_eq!(child.state, "succeeded", "{child:?}");
        // One claim per attempt; each attempt but the last ended by an expired lease.
        let expired = child.errors.as_array().map_or(0, |errors| errors.len()) as i32;
        assert_eq!(child.attempt, expired + 1, "{child:?}");
        assert!(child.fencing_token >= i64::from(child.attempt), "{child:?}");
        rescued += expired;
    }
    assert!(rescued > 0, "some child ran on the killed worker");

    let parents = rows(&pool, "evacuate").await;
    let parent_row = &parents[0];
    assert_eq!(parent_row.state, "succeeded");
    // Two claims: the fan-out and the one resume (waiting gave its attempt back).
    assert_eq!(
        (parent_row.fencing_token, parent_row.attempt),
        (2, 1),
        "{parent_row:?}"
    );
    let resumed = parent_row.attempted_at.expect("claimed");
    let last_child = children
        .iter()
        .filter_map(|c| c.finished_at)
        .max()
        .expect("finished children");
    assert!(resumed >= last_child, "resumed after the last child");

    // The plain jobs ran while the parent waited: each finished before it resumed.
    for ping in rows(&pool, "ping").await {
        assert_eq!(ping.state, "succeeded", "{ping:?}");
        assert!(ping.finished_at.expect("finished") < resumed, "{ping:?}");
    }
    assert_eq!(pings.len(), 10);
    b.stop(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_migration_rolls_the_evacuation_back() {
    let test = "a_failed_migration_rolls_the_evacuation_back";
    let Some(server) = Server::for_test(test) else {
        return;
    };
    let db = server.database(Schema::Migrated).await;
    let pool = db.pool(2).await;
    let mut worker = Process::spawn(command(&db, &WORKER), &WORKER);
    worker.worker_started().await;
    let parent = enqueue(
        &db,
        "evacuate",
        r#"{"host": "host-b", "volumes": ["v1", "v2", "v3"], "fail": ["v2"], "millis": 10}"#,
    )
    .await;
    wait_until("the parent to fail", WAIT, || async {
        (state_of(&pool, &parent).await == "failed").then_some(())
    })
    .await;
    let message: String = sqlx::query_scalar(
        "SELECT errors -> -1 ->> 'message' FROM drover.jobs WHERE id = $1::uuid",
    )
    .bind(&parent)
    .fetch_one(&pool)
    .await
    .expect("read the parent's error");
    assert_eq!(
        message,
        "evacuation rolled back: 1 migration(s) failed (v2)"
    );
    let states: Vec<String> = rows(&pool, "migrate")
        .await
        .into_iter()
        .map(|c| c.state)
        .collect();
    assert_eq!(states, ["succeeded", "failed", "succeeded"]);
    worker.stop(WAIT).await;
}

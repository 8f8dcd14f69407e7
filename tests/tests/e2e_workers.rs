//! End-to-end tests with real `drover` processes on PostgreSQL: two workers
//! draining a bulk enqueue; SIGTERM of a worker mid-job (its jobs are released without
//! spending an attempt and finished by the other worker); SIGKILL of a worker mid-job (its jobs
//! are rescued once their lease expires, the attempt spent, and finished by the other worker);
//! a paused queue (nothing claimed from it, a running job finishes, resume drains it); and the
//! Ctrl-C case of graceful shutdown (SIGINT releases a running job, attempt back to 0).
//!
//! Workers run with a short lease (`--lease 2s --heartbeat 500ms`) so lease expiry takes
//! seconds. "Mid-job" is observed, not slept for: the tests wait until the database shows the
//! `sleep` jobs running with the worker as lease owner, then send the signal.
//!
//! Needs `DROVER_TEST_DATABASE_URL`; without it every test here prints `SKIPPED ...` and
//! passes, unless `DROVER_REQUIRE_POSTGRES` is set (CI), when it fails.

mod cli_support;

use std::time::Duration;

use cli_support::{wait_until, JobRow, TempFile, TestDb};
use drover_store_postgres::sqlx;
use rustix::process::Signal;
use serde_json::Value;

/// Deadline for jobs to reach a state on the loaded 2-core CI machine.
const WAIT: Duration = Duration::from_secs(45);

/// Worker flags of these tests: a short lease so a killed worker's jobs come back quickly.
const SHORT_LEASE: [&str; 4] = ["--lease", "2s", "--heartbeat", "500ms"];

fn worker_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["worker"];
    args.extend_from_slice(&SHORT_LEASE);
    args.extend_from_slice(extra);
    args
}

/// The `claimed N` counter of a worker's `drover: worker stopped: ...` line.
fn counter(stopped: &str, name: &str) -> u64 {
    let pattern = format!("{name} ");
    let at = stopped
        .find(&pattern)
        .unwrap_or_else(|| panic!("no {name} in {stopped}"));
    stopped[at + pattern.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {name} in {stopped}"))
}

async fn worker_ids(db: &TestDb) -> Vec<String> {
    db.json(&["workers", "list"])
        .await
        .as_array()
        .expect("a workers array")
        .iter()
        .map(|w| w["id"].as_str().expect("id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_drain_a_bulk_enqueue() {
    let Some(db) = TestDb::migrated("two_workers_drain_a_bulk_enqueue").await else {
        return;
    };
    let mut a = db.spawn(&worker_args(&["--slots", "4"]));
    let mut b = db.spawn(&worker_args(&["--slots", "4"]));
    let (a_id, b_id) = (a.worker_started().await, b.worker_started().await);
    wait_until("both workers to register", WAIT, || async {
        let ids = worker_ids(&db).await;
        (ids.contains(&a_id) && ids.contains(&b_id)).then_some(())
    })
    .await;

    // 300 jobs: noops, short sleeps that keep slots busy so both workers take some, and jobs
    // that fail once before they succeed.
    let mut lines = Vec::new();
    for i in 0..300 {
        lines.push(match i % 10 {
            0..=5 => r#"{"kind": "noop"}"#.to_owned(),
            6 | 7 => format!(
                r#"{{"kind": "sleep", "args": {{"ms": {}}}}}"#,
                20 + i % 7 * 10
            ),
            _ => r#"{"kind": "fail", "args": {"fail_times": 1}, "queue": "default"}"#.to_owned(),
        });
    }
    let file = TempFile::new("bulk.jsonl", &(lines.join("\n") + "\n"));
    let answer = db
        .json(&["enqueue", "--file", file.arg(), "--batch-size", "64"])
        .await;
    assert_eq!(answer["created"], 300, "{answer}");
    assert_eq!(answer["rejected"], serde_json::json!([]));

    wait_until("300 jobs to succeed", WAIT, || async {
        (db.count("succeeded").await == 300).then_some(())
    })
    .await;
    let snapshot = db.json(&["snapshot"]).await;
    assert_eq!(
        snapshot["queues"][0]["counts"]["succeeded"], 300,
        "{snapshot}"
    );
    assert_eq!(snapshot["queues"][0]["running"], 0, "{snapshot}");
    let retried: i64 =
        sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE kind = 'fail' AND attempt = 2")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(
        retried, 60,
        "every fail job succeeded on its second attempt"
    );

    a.signal(Signal::TERM);
    b.signal(Signal::TERM);
    assert!(a.wait_exit(WAIT).await.success(), "{}", a.stderr());
    assert!(b.wait_exit(WAIT).await.success(), "{}", b.stderr());
    let a_stopped = a.wait_for_line("worker stopped", WAIT).await;
    let b_stopped = b.wait_for_line("worker stopped", WAIT).await;
    // 300 first claims and 60 second attempts of the fail jobs, split between the workers.
    assert_eq!(
        counter(&a_stopped, "claimed") + counter(&b_stopped, "claimed"),
        360,
        "{a_stopped}\n{b_stopped}"
    );
    assert!(counter(&a_stopped, "claimed") > 0, "{a_stopped}");
    assert!(counter(&b_stopped, "claimed") > 0, "{b_stopped}");
    assert_eq!(
        counter(&a_stopped, "succeeded") + counter(&b_stopped, "succeeded"),
        300
    );
    assert_eq!(
        counter(&a_stopped, "retried") + counter(&b_stopped, "retried"),
        60
    );
    assert!(worker_ids(&db).await.is_empty(), "both deregistered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_running_jobs_to_the_other_worker_without_spending_attempts() {
    let Some(db) = TestDb::migrated(
        "sigterm_releases_running_jobs_to_the_other_worker_without_spending_attempts",
    )
    .await
    else {
        return;
    };
    let mut a = db.spawn(&worker_args(&["--slots", "2", "--shutdown-grace", "0s"]));
    let a_id = a.worker_started().await;
    // Long enough that A is signalled before they end, even on a loaded machine: between the
    // first job's start and the signal there are only a CLI enqueue and a few queries.
    let jobs = vec![
        db.enqueue("sleep", r#"{"ms": 8000}"#, &[]).await,
        db.enqueue("sleep", r#"{"ms": 8000}"#, &[]).await,
    ];
    db.wait_jobs(&jobs, "running", Some(&a_id), WAIT).await;
    for id in &jobs {
        assert_eq!(db.job_row(id).await.attempt, 1);
    }

    a.signal(Signal::TERM);
    let status = a.wait_exit(WAIT).await;
    assert!(
        status.success(),
        "SIGTERM is a clean stop: {status}; {}",
        a.stderr()
    );
    let stderr = a.stderr();
    assert!(stderr.contains("drover: shutting down"), "{stderr}");
    let stopped = a.wait_for_line("drover: worker stopped: ", WAIT).await;
    assert_eq!(counter(&stopped, "released"), 2, "{stopped}");
    assert_eq!(counter(&stopped, "succeeded"), 0, "{stopped}");
    assert!(
        !worker_ids(&db).await.contains(&a_id),
        "A left the worker list"
    );

    // B starts only now, so the released jobs can only run there.
    let mut b = db.spawn(&worker_args(&["--slots", "2"]));
    let b_id = b.worker_started().await;

    // The released jobs run on B with attempt 1 again: A's attempt was given back.
    db.wait_jobs(&jobs, "running", Some(&b_id), WAIT).await;
    for id in &jobs {
        let row = db.job_row(id).await;
        assert_eq!(row.attempt, 1, "release spends no attempt: {row:?}");
    }
    db.wait_jobs(&jobs, "succeeded", None, WAIT).await;
    for id in &jobs {
        let job = db.json(&["jobs", "get", id]).await;
        assert_eq!(job["attempt"], 1, "{job}");
        assert_eq!(job["errors"], serde_json::json!([]), "{job}");
    }
    b.signal(Signal::TERM);
    assert!(b.wait_exit(WAIT).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_jobs_are_rescued_after_lease_expiry_with_the_attempt_spent() {
    let Some(db) =
        TestDb::migrated("sigkill_jobs_are_rescued_after_lease_expiry_with_the_attempt_spent")
            .await
    else {
        return;
    };
    let mut a = db.spawn(&worker_args(&["--slots", "2"]));
    let a_id = a.worker_started().await;
    let jobs = vec![
        db.enqueue("sleep", r#"{"ms": 8000}"#, &[]).await,
        db.enqueue("sleep", r#"{"ms": 60000}"#, &[]).await,
    ];
    // Both are caught running before the kill (the first is short enough for B to finish it,
    // and long enough to be still running after the second enqueue on a loaded machine).
    db.wait_jobs(&jobs, "running", Some(&a_id), WAIT).await;
    a.signal(Signal::KILL);
    let status = a.wait_exit(WAIT).await;
    assert!(!status.success(), "killed: {status}");

    // Until the lease expires the jobs stay running under the dead worker.
    let row = db.job_row(&jobs[0]).await;
    assert_eq!(row.lease_owner.as_deref(), Some(a_id.as_str()), "{row:?}");
    let lease_expires_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT lease_expires_at FROM drover.jobs WHERE id = $1::uuid")
            .bind(&jobs[0])
            .fetch_one(db.pool())
            .await
            .unwrap();

    // B rescues them once the lease expires (its rescuer runs at least once per lease when
    // --lease is short) and runs them again: attempt 2.
    let mut b = db.spawn(&worker_args(&["--slots", "2", "--shutdown-grace", "0s"]));
    let b_id = b.worker_started().await;
    wait_until("the jobs to be rescued and running on B", WAIT, || async {
        for id in &jobs {
            let row = db.job_row(id).await;
            if row.lease_owner.as_deref() != Some(b_id.as_str()) && row.state != "succeeded" {
                return None;
            }
        }
        Some(())
    })
    .await;
    db.wait_jobs(&jobs[..1], "succeeded", None, WAIT).await;
    let job = db.json(&["jobs", "get", &jobs[0]]).await;
    assert_eq!(job["attempt"], 2, "the crashed attempt is spent: {job}");
    let message = job["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("lease expired during attempt 1"), "{job}");
    let rescued_at: chrono::DateTime<chrono::Utc> = job["errors"][0]["at"]
        .as_str()
        .expect("the rescue's time")
        .parse()
        .unwrap();
    assert!(
        rescued_at >= lease_expires_at,
        "rescued at {rescued_at}, before the lease expired at {lease_expires_at}"
    );
    let row = db.job_row(&jobs[1]).await;
    assert_eq!(
        row,
        JobRow {
            state: "running".to_owned(),
            attempt: 2,
            lease_owner: Some(b_id.clone())
        }
    );

    // The dead worker's registration stays until it is stale; B's heartbeat keeps B's alive.
    let ids = worker_ids(&db).await;
    assert!(ids.contains(&b_id), "{ids:?}");
    b.signal(Signal::TERM);
    assert!(b.wait_exit(WAIT).await.success());
    let stopped = b.wait_for_line("drover: worker stopped: ", WAIT).await;
    assert!(
        counter(&stopped, "rescued") >= 2,
        "B's rescuer took both: {stopped}"
    );
    assert_eq!(counter(&stopped, "released"), 1, "{stopped}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_queue_is_not_claimed_running_job_finishes_resume_drains_it() {
    let Some(db) =
        TestDb::migrated("paused_queue_is_not_claimed_running_job_finishes_resume_drains_it").await
    else {
        return;
    };
    let mut worker = db.spawn(&worker_args(&[
        "--queue",
        "q",
        "--queue",
        "other",
        "--slots",
        "2",
        "--poll-interval",
        "100ms",
    ]));
    let id = worker.worker_started().await;
    let running = db
        .enqueue("sleep", r#"{"ms": 2500}"#, &["--queue", "q"])
        .await;
    db.wait_jobs(&[&running], "running", Some(&id), WAIT).await;

    let paused = db.json(&["queues", "pause", "q"]).await;
    assert_eq!(paused["paused"], true);
    let held = vec![
        db.enqueue("noop", "{}", &["--queue", "q"]).await,
        db.enqueue("noop", "{}", &["--queue", "q"]).await,
    ];
    // The running job finishes; the worker keeps serving other queues.
    db.wait_jobs(&[&running], "succeeded", None, WAIT).await;
    let other = db.enqueue("noop", "{}", &["--queue", "other"]).await;
    db.wait_jobs(&[other], "succeeded", None, WAIT).await;
    // After the running job freed its slot the claim loop of q has polled several times (every
    // 100 ms); nothing of q may have been claimed in that window.
    let finished_at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT finished_at FROM drover.jobs WHERE id = $1::uuid")
            .bind(&running)
            .fetch_one(db.pool())
            .await
            .unwrap();
    wait_until(
        "five poll intervals after the running job finished",
        WAIT,
        || async {
            for id in &held {
                let row = db.job_row(id).await;
                assert_eq!(row.state, "queued", "claimed from a paused queue: {row:?}");
                assert_eq!(row.attempt, 0);
            }
            let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
                .fetch_one(db.pool())
                .await
                .unwrap();
            (now - finished_at >= chrono::Duration::milliseconds(500)).then_some(())
        },
    )
    .await;
    let list = db.json(&["queues", "list"]).await;
    let q: &Value = list
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "q")
        .unwrap();
    assert_eq!(q["paused"], true, "{list}");
    assert_eq!(q["queued"], 2, "{list}");

    db.ok(&["queues", "resume", "q"]).await;
    db.wait_jobs(&held, "succeeded", None, WAIT).await;
    for id in &held {
        assert_eq!(db.job_row(id).await.attempt, 1);
    }
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_releases_a_running_sleep_job_with_attempt_back_to_zero() {
    let Some(db) =
        TestDb::migrated("sigint_releases_a_running_sleep_job_with_attempt_back_to_zero").await
    else {
        return;
    };
    // The Ctrl-C case of graceful shutdown: a job longer than the shutdown grace is released, not
    // left running and not charged an attempt.
    let mut worker = db.spawn(&worker_args(&["--slots", "1", "--shutdown-grace", "300ms"]));
    let id = worker.worker_started().await;
    let job = db.enqueue("sleep", r#"{"ms": 600000}"#, &[]).await;
    db.wait_jobs(&[&job], "running", Some(&id), WAIT).await;
    assert_eq!(db.job_row(&job).await.attempt, 1);

    worker.signal(Signal::INT);
    let status = worker.wait_exit(WAIT).await;
    assert!(
        status.success(),
        "Ctrl-C is a clean stop: {status}; {}",
        worker.stderr()
    );
    let stopped = worker.wait_for_line("drover: worker stopped: ", WAIT).await;
    assert_eq!(counter(&stopped, "released"), 1, "{stopped}");

    let after = db.json(&["jobs", "get", &job]).await;
    assert_eq!(after["state"], "queued", "{after}");
    assert_eq!(after["attempt"], 0, "{after}");
    assert!(after["lease_owner"].is_null(), "{after}");
    assert_eq!(after["errors"], serde_json::json!([]), "{after}");
    assert!(worker_ids(&db).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_signal_exits_at_once_and_leaves_the_job_to_lease_expiry() {
    let Some(db) =
        TestDb::migrated("second_signal_exits_at_once_and_leaves_the_job_to_lease_expiry").await
    else {
        return;
    };
    // Default grace (30 s): the first signal waits for the job, the second exits at once.
    let mut worker = db.spawn(&worker_args(&["--slots", "1"]));
    let id = worker.worker_started().await;
    let job = db.enqueue("sleep", r#"{"ms": 600000}"#, &[]).await;
    db.wait_jobs(&[&job], "running", Some(&id), WAIT).await;
    worker.signal(Signal::TERM);
    worker.wait_for_line("drover: shutting down", WAIT).await;
    worker.signal(Signal::TERM);
    let status = worker.wait_exit(WAIT).await;
    assert_eq!(status.code(), Some(130), "{}", worker.stderr());
    assert!(
        worker.stderr().contains("second signal"),
        "{}",
        worker.stderr()
    );
    // Nothing was written for the job: it is still running under the gone worker, its attempt
    // spent, until its lease expires and another worker rescues it.
    let row = db.job_row(&job).await;
    assert_eq!(
        row,
        JobRow {
            state: "running".to_owned(),
            attempt: 1,
            lease_owner: Some(id.clone())
        }
    );
    let mut rescuer = db.spawn(&worker_args(&["--queue", "elsewhere", "--slots", "1"]));
    rescuer.worker_started().await;
    wait_until("the job to be rescued", WAIT, || async {
        let row = db.job_row(&job).await;
        (row.state == "queued").then_some(row)
    })
    .await;
    assert_eq!(db.job_row(&job).await.attempt, 1, "the attempt stays spent");
    rescuer.signal(Signal::TERM);
    assert!(rescuer.wait_exit(WAIT).await.success());
}

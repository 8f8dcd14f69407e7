//! Every `drover` operator command (docs/cli.md) run as a real process against PostgreSQL (one
//! fresh database per test), with its `--json` output parsed and checked against the
//! database, and its table output looked at once.
//!
//! Needs `DROVER_TEST_DATABASE_URL`; without it every test here prints `SKIPPED ...` and
//! passes, unless `DROVER_REQUIRE_POSTGRES` is set (CI), when it fails.

mod cli_support;

use std::time::Duration;

use cli_support::{wait_until, TempFile, TestDb};
use drover_store_postgres::sqlx;
use rustix::process::Signal;
use serde_json::{json, Value};

/// Deadline for jobs to reach a state on the loaded 2-core CI machine.
const WAIT: Duration = Duration::from_secs(30);

fn ids(page: &Value) -> Vec<String> {
    page["jobs"]
        .as_array()
        .expect("a jobs array")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_schema_says_migrate_then_migrate_and_migrations_list() {
    let Some(db) =
        TestDb::empty("missing_schema_says_migrate_then_migrate_and_migrations_list").await
    else {
        return;
    };
    for command in [
        &["jobs", "list"][..],
        &["enqueue", "noop"],
        &["snapshot", "--json"],
        &["worker", "--slots", "1"],
    ] {
        let line = db.fails(command).await;
        assert!(line.contains("`drover migrate`"), "{command:?}: {line}");
    }

    let pending = db.json(&["migrations", "list"]).await;
    assert_eq!(pending[0]["version"], 1, "{pending}");
    assert_eq!(pending[0]["state"], "pending", "{pending}");
    assert!(pending[0]["applied_at"].is_null(), "{pending}");

    let known: Vec<i64> = drover_store_postgres::migrations()
        .iter()
        .map(|m| m.version)
        .collect();
    let latest = *known.last().unwrap();
    assert_eq!(pending.as_array().unwrap().len(), known.len(), "{pending}");
    let first = db.json(&["migrate"]).await;
    assert_eq!(first["applied_now"], json!(known), "{first}");
    assert_eq!(first["schema_version"], latest, "{first}");
    let again = db.ok(&["migrate"]).await;
    assert!(
        again.contains(&format!("database is up to date (schema version {latest})")),
        "{again}"
    );

    let applied = db.json(&["migrations", "list"]).await;
    for migration in applied.as_array().unwrap() {
        assert_eq!(migration["state"], "applied", "{applied}");
        assert!(migration["applied_at"].is_string(), "{applied}");
    }
    let table = db.ok(&["migrations", "list"]).await;
    assert!(
        table.contains("initial") && table.contains("applied"),
        "{table}"
    );
    assert_eq!(db.json(&["jobs", "list"]).await["jobs"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_flags_round_trip_through_jobs_get() {
    let Some(db) = TestDb::migrated("enqueue_flags_round_trip_through_jobs_get").await else {
        return;
    };
    let flags = [
        "enqueue",
        "report.build",
        "--args",
        r#"{"scope":"all","n":3}"#,
        "--queue",
        "reports",
        "--priority",
        "-2",
        "--run-at",
        "2030-01-02T03:04:05Z",
        "--max-attempts",
        "7",
        "--idempotency-key",
        "idem-1",
        "--unique-key",
        "report:2030-01",
        "--tenant",
        "acme",
        "--meta",
        r#"{"customer":"acme","tier":1}"#,
        "--limit-key",
        "customer:acme",
    ];
    let created = db.json(&flags).await;
    assert_eq!(created["status"], "created", "{created}");
    let id = created["job"]["id"].as_str().unwrap().to_owned();

    let job = db.json(&["jobs", "get", &id]).await;
    assert_eq!(job["kind"], "report.build");
    assert_eq!(job["args"], json!({"scope": "all", "n": 3}));
    assert_eq!(job["queue"], "reports");
    assert_eq!(job["priority"], -2);
    assert_eq!(job["run_at"], "2030-01-02T03:04:05Z");
    assert_eq!(job["max_attempts"], 7);
    assert_eq!(job["attempt"], 0);
    assert_eq!(job["state"], "queued");
    assert_eq!(job["idempotency_key"], "idem-1");
    assert_eq!(job["unique_key"], "report:2030-01");
    assert_eq!(job["tenant"], "acme");
    assert_eq!(job["meta"], json!({"customer": "acme", "tier": 1}));
    assert_eq!(job["limit_keys"], json!(["customer:acme"]));

    // The same request with the same idempotency key returns the stored job.
    let replay = db.json(&flags).await;
    assert_eq!(replay["status"], "replayed", "{replay}");
    assert_eq!(replay["job"]["id"], id.as_str());
    // Another request under the key is a conflict, reported in one line.
    let conflict = db
        .fails(&[
            "enqueue",
            "noop",
            "--tenant",
            "acme",
            "--idempotency-key",
            "idem-1",
        ])
        .await;
    assert!(conflict.contains("conflict"), "{conflict}");
    // The unique key: a second live job of the tenant returns the first.
    let duplicate = db
        .json(&[
            "enqueue",
            "report.build",
            "--tenant",
            "acme",
            "--unique-key",
            "report:2030-01",
        ])
        .await;
    assert_eq!(duplicate["status"], "duplicate", "{duplicate}");
    assert_eq!(duplicate["job"]["id"], id.as_str());

    // --delay is counted from the database clock.
    let delayed = db.json(&["enqueue", "noop", "--delay", "10m"]).await;
    let (run_at, created_at): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("SELECT run_at, created_at FROM drover.jobs WHERE id = $1::uuid")
            .bind(delayed["job"]["id"].as_str().unwrap())
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!((run_at - created_at).num_seconds(), 600);
    // `null` means "not given", as over HTTP: the defaults `{}`.
    let nulls = db
        .json(&["enqueue", "noop", "--args", "null", "--meta", "null"])
        .await;
    assert_eq!(nulls["job"]["args"], serde_json::json!({}), "{nulls}");
    assert_eq!(nulls["job"]["meta"], serde_json::json!({}), "{nulls}");

    // People get a line and a table.
    let line = db.ok(&["enqueue", "noop", "--queue", "mail"]).await;
    assert!(
        line.starts_with("enqueued job ") && line.contains("queue mail"),
        "{line}"
    );
    let table = db.ok(&["jobs", "get", &id]).await;
    for field in [
        "report.build",
        "reports",
        "acme",
        "0/7",
        "customer:acme",
        "idem-1",
    ] {
        assert!(table.contains(field), "{field} missing from:\n{table}");
    }
    // A bad flag value is a usage error (exit code 2): one line naming the flag and the rule.
    let bad = db
        .usage_error(&["enqueue", "noop", "--max-attempts", "0"])
        .await;
    assert!(
        bad.contains("--max-attempts") && bad.contains("must be an integer between 1 and 1000"),
        "{bad}"
    );
    let bad = db
        .usage_error(&["enqueue", "noop", "--args", "{not json"])
        .await;
    assert!(
        bad.starts_with("drover: invalid --args: not valid JSON"),
        "{bad}"
    );
    // A lone surrogate escape is named with its position and rule, as over HTTP.
    let bad = db
        .usage_error(&["enqueue", "noop", "--meta", r#"{"a": "\ud800"}"#])
        .await;
    assert!(
        bad.contains(r"invalid --meta: must be Unicode text, but \ud800 (line 1, column 8) is a lone UTF-16 surrogate"),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_list_filters_paginate_and_cancel_retry() {
    let Some(db) = TestDb::migrated("jobs_list_filters_paginate_and_cancel_retry").await else {
        return;
    };
    let a = db
        .enqueue(
            "noop",
            "{}",
            &["--queue", "mail", "--meta", r#"{"customer":"acme"}"#],
        )
        .await;
    let b = db
        .enqueue("sleep", r#"{"ms":1}"#, &["--tenant", "t2"])
        .await;
    let c = db
        .enqueue("noop", "{}", &["--meta", r#"{"customer":"globex","x":1}"#])
        .await;

    let all = db.json(&["jobs", "list"]).await;
    assert_eq!(
        ids(&all),
        vec![c.clone(), b.clone(), a.clone()],
        "newest first"
    );
    assert!(all["next"].is_null());
    // Summaries unless --include asks for the large fields; `jobs get` shows the whole job.
    let whole = db.json(&["jobs", "get", &c]).await;
    assert_eq!(whole["args"], json!({}), "{whole}");
    let summary = all["jobs"][0].as_object().unwrap();
    for field in ["args", "result", "errors", "progress"] {
        assert!(!summary.contains_key(field), "{field}: {all}");
    }
    for (field, value) in whole.as_object().unwrap() {
        if !["args", "result", "errors", "progress"].contains(&field.as_str()) {
            assert_eq!(&summary[field], value, "{field}");
        }
    }
    let with_args = db.json(&["jobs", "list", "--include", "args,errors"]).await;
    let first = with_args["jobs"][0].as_object().unwrap();
    assert_eq!(first["args"], json!({}), "{with_args}");
    assert_eq!(first["errors"], json!([]), "{with_args}");
    assert!(!first.contains_key("result") && !first.contains_key("progress"));
    let every = db.json(&["jobs", "list", "--include", "all"]).await;
    assert_eq!(every["jobs"][0], whole);
    let bad = db
        .usage_error(&["--json", "jobs", "list", "--include", "meta"])
        .await;
    assert!(bad.contains("--include"), "{bad}");
    let table_only = db.usage_error(&["jobs", "list", "--include", "args"]).await;
    assert!(
        table_only.contains("--include applies to --json output"),
        "{table_only}"
    );
    let by = |args: &'static [&'static str]| {
        let db = &db;
        async move {
            let mut all = vec!["jobs", "list"];
            all.extend_from_slice(args);
            ids(&db.json(&all).await)
        }
    };
    assert_eq!(by(&["--queue", "mail"]).await, vec![a.clone()]);
    assert_eq!(by(&["--kind", "sleep"]).await, vec![b.clone()]);
    assert_eq!(by(&["--tenant", "t2"]).await, vec![b.clone()]);
    assert_eq!(
        by(&["--meta", r#"{"customer":"globex"}"#]).await,
        vec![c.clone()]
    );
    assert_eq!(
        by(&["--state", "queued", "--kind", "noop"]).await,
        vec![c.clone(), a.clone()]
    );
    assert!(by(&["--state", "failed"]).await.is_empty());

    // Keyset pages.
    let first = db.json(&["jobs", "list", "--limit", "2"]).await;
    assert_eq!(ids(&first), vec![c.clone(), b.clone()]);
    let next = first["next"].as_str().expect("a next cursor").to_owned();
    let second = db
        .json(&["jobs", "list", "--limit", "2", "--before", &next])
        .await;
    assert_eq!(ids(&second), vec![a.clone()]);
    let table = db.ok(&["jobs", "list", "--limit", "2"]).await;
    assert!(
        table.contains(&c) && table.contains(&format!("more: --before {next}")),
        "{table}"
    );

    // Cancel a queued job, retry it, refuse a retry of a live job.
    let cancelled = db.json(&["jobs", "cancel", &a]).await;
    assert_eq!(cancelled["effect"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["job"]["state"], "cancelled");
    let again = db.fails(&["jobs", "cancel", &a]).await;
    assert!(
        again.contains("cannot cancel a job that is cancelled"),
        "{again}"
    );
    let retried = db.json(&["jobs", "retry", &a]).await;
    assert_eq!(retried["id"], a.as_str());
    assert_eq!(retried["state"], "queued");
    assert_eq!(retried["attempt"], 0);
    let refused = db.fails(&["jobs", "retry", &a]).await;
    assert!(
        refused.contains("cannot retry a job that is queued"),
        "{refused}"
    );
    assert_eq!(db.count("queued").await, 3, "a retry never makes a copy");

    // Requeue a job scheduled an hour ahead: ready now; again: nothing changes; a finished job
    // is refused, pointing to retry.
    let later = db.enqueue("noop", "{}", &["--delay", "1h"]).await;
    let requeued = db.json(&["jobs", "requeue", &later]).await;
    assert_eq!(requeued["changed"], true, "{requeued}");
    assert_eq!(requeued["job"]["id"], later.as_str());
    assert_eq!(requeued["job"]["state"], "queued");
    let run_at: chrono::DateTime<chrono::Utc> =
        requeued["job"]["run_at"].as_str().unwrap().parse().unwrap();
    assert!(
        run_at <= chrono::Utc::now() + chrono::Duration::seconds(5),
        "{run_at}"
    );
    let line = db.ok(&["jobs", "requeue", &later]).await;
    assert!(
        line.contains(&format!("job {later} was ready already"))
            && line.contains("nothing changed"),
        "{line}"
    );
    db.json(&["jobs", "cancel", &later]).await;
    let refused = db.fails(&["jobs", "requeue", &later]).await;
    assert!(
        refused.contains("cannot requeue a job that is cancelled") && refused.contains("retry it"),
        "{refused}"
    );
    let refused = db.fails(&["jobs", "retry", &a]).await;
    assert!(refused.contains("requeue it"), "{refused}");

    // Delete a cancelled job (--json shows it as it was), then it is gone; a job another job
    // waits for is refused, naming that job.
    let deleted = db.json(&["jobs", "delete", &later]).await;
    assert_eq!(deleted["id"], later.as_str(), "{deleted}");
    assert_eq!(deleted["state"], "cancelled");
    let gone = db.fails(&["jobs", "get", &later]).await;
    assert!(gone.contains("not found"), "{gone}");
    let waits = db.enqueue("noop", "{}", &["--depends-on", &a]).await;
    let kept = db.fails(&["jobs", "delete", &a]).await;
    assert!(
        kept.contains(&format!("job {waits} depends on")) && kept.contains("retention keeps it"),
        "{kept}"
    );
    db.json(&["jobs", "cancel", &waits]).await;
    let line = db.ok(&["jobs", "delete", &waits]).await;
    assert!(
        line.contains(&format!("job {waits} deleted (it was cancelled)")),
        "{line}"
    );

    let unknown = db
        .fails(&["jobs", "get", "0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79"])
        .await;
    assert!(unknown.contains("not found"), "{unknown}");
    let bad = db.usage_error(&["jobs", "get", "nope"]).await;
    assert!(bad.contains("<ID>") && bad.contains("UUID"), "{bad}");
    let bad = db
        .usage_error(&["jobs", "list", "--state", "sleeping"])
        .await;
    assert!(bad.contains("--state"), "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_pause_resume_and_list() {
    let Some(db) = TestDb::migrated("queues_pause_resume_and_list").await else {
        return;
    };
    db.enqueue("noop", "{}", &["--queue", "mail"]).await;
    db.enqueue("noop", "{}", &["--queue", "mail"]).await;
    let paused = db.json(&["queues", "pause", "mail"]).await;
    assert_eq!(paused["name"], "mail", "{paused}");
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["changed"], true, "{paused}");
    // Pausing a paused queue changes nothing and says so, as resuming one that is not paused
    // does (and as the HTTP API answers: `changed` false).
    let again = db.json(&["queues", "pause", "mail"]).await;
    assert_eq!(again["changed"], false, "{again}");
    assert_eq!(again["paused_at"], paused["paused_at"], "{again}");
    let line = db.ok(&["queues", "pause", "mail"]).await;
    assert!(
        line.contains("queue mail was already paused; nothing changed"),
        "{line}"
    );

    let list = db.json(&["queues", "list"]).await;
    let mail = list
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "mail")
        .unwrap_or_else(|| panic!("mail missing: {list}"));
    assert_eq!(mail["paused"], true);
    assert_eq!(mail["queued"], 2);
    assert_eq!(mail["running"], 0);
    let table = db.ok(&["queues", "list"]).await;
    assert!(table.contains("mail") && table.contains("yes"), "{table}");

    let resumed = db.json(&["queues", "resume", "mail"]).await;
    assert_eq!(resumed["paused"], false, "{resumed}");
    assert_eq!(resumed["changed"], true, "{resumed}");
    db.ok(&["queues", "pause", "mail"]).await;
    let line = db.ok(&["queues", "resume", "mail"]).await;
    assert!(line.contains("queue mail resumed"), "{line}");
    let list = db.json(&["queues", "list"]).await;
    assert_eq!(list[0]["paused"], false, "{list}");
    // Resuming is idempotent, but says when it changed nothing; a name nobody has used (a
    // typo that would leave the real queue paused) is refused.
    let line = db.ok(&["queues", "resume", "mail"]).await;
    assert!(
        line.contains("queue mail was not paused; nothing changed"),
        "{line}"
    );
    let error = db.fails(&["queues", "resume", "mial"]).await;
    assert!(error.contains("no queue named mial"), "{error}");
    assert!(error.contains("drover queues list"), "{error}");
    let list = db.json(&["queues", "list"]).await;
    assert!(
        list.as_array().unwrap().iter().all(|q| q["name"] != "mial"),
        "{list}"
    );
    // Pausing a name no job has used works (a queue paused ahead of its first job) but warns
    // on stderr, as a typo would leave the real queue running; a known queue gets no warning.
    let out = db.run(&["queues", "pause", "mial"]).await;
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("drover: warning: no job has used queue mial yet")
            && stderr.contains("drover queues list"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("queue mial paused"));
    let out = db.run(&["queues", "pause", "mail"]).await;
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
}

/// `--file -` reads the job lines from standard input, as a pipe gives them: good lines are
/// loaded, a bad one is reported by its number, and the summary names the input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_file_dash_reads_standard_input() {
    use tokio::io::AsyncWriteExt;

    let Some(db) = TestDb::migrated("enqueue_file_dash_reads_standard_input").await else {
        return;
    };
    let mut command = db.command(&["enqueue", "--file", "-"]);
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("spawn drover");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(b"{\"kind\": \"noop\"}\nnot JSON\n{\"kind\": \"noop\", \"queue\": \"mail\"}\n")
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("drover enqueue --file - ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("2 enqueued"), "{stdout}");
    assert!(stderr.contains("line 2: "), "{stderr}");
    assert!(
        stderr.contains("1 line(s) of standard input rejected"),
        "{stderr}"
    );
    assert_eq!(db.count("queued").await, 2);
}

/// `drover enqueue` wakes idle workers before it exits: the store sends its wake-up (a NOTIFY
/// on `drover_jobs` naming the queue) after the commit, from a task, and a CLI process that
/// exited without closing its store lost it, so a worker found the job only at its next poll
/// (found by a breaker run: 9 of 16 CLI enqueues waited for the 1 s poll). Every one of five
/// enqueues, one job and a job file, is announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_wakes_idle_workers_before_the_command_exits() {
    let Some(db) = TestDb::migrated("enqueue_wakes_idle_workers_before_the_command_exits").await
    else {
        return;
    };
    let mut listener = sqlx::postgres::PgListener::connect_with(db.pool())
        .await
        .expect("listener");
    listener.listen("drover_jobs").await.expect("LISTEN");
    for n in 0..5 {
        let queue = format!("wake-{n}");
        if n % 2 == 0 {
            db.ok(&["enqueue", "noop", "--queue", &queue]).await;
        } else {
            let file = TempFile::new(
                "wake.jsonl",
                &format!("{{\"kind\": \"noop\", \"queue\": \"{queue}\"}}\n"),
            );
            db.ok(&["enqueue", "--file", file.arg()]).await;
        }
        let notification = tokio::time::timeout(WAIT, listener.recv())
            .await
            .unwrap_or_else(|_| panic!("no wake-up for queue {queue} after the command exited"))
            .expect("notification");
        assert_eq!(notification.payload(), queue);
    }
}

/// A worker names the queues it serves when it starts, and warns about each one that is
/// paused (it would otherwise sit there claiming nothing, with no word why).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_names_its_queues_and_warns_about_paused_ones() {
    let Some(db) = TestDb::migrated("a_worker_names_its_queues_and_warns_about_paused_ones").await
    else {
        return;
    };
    db.enqueue("noop", "{}", &["--queue", "mail"]).await;
    db.ok(&["queues", "pause", "mail"]).await;
    let mut worker = db.spawn(&["worker", "--queue", "default", "--queue", "mail"]);
    worker.worker_started().await;
    let start = worker.wait_for_line(" started on ", WAIT).await;
    assert!(start.contains("queues default, mail"), "{start}");
    let warning = worker.wait_for_line("queue mail is paused", WAIT).await;
    assert!(
        warning.starts_with("drover: warning: ")
            && warning.contains("until `drover queues resume mail`"),
        "{warning}"
    );
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
    assert!(
        !worker.stderr().contains("queue default is paused"),
        "{}",
        worker.stderr()
    );
}

/// `drover worker --json` writes its whole stderr as JSON lines, for a log collector: its own
/// lines (start, warnings, stop) and the runner's log events, each with a time, a level and
/// a message, the events' fields at the top level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_given_json_logs_one_json_object_a_line() {
    let Some(db) = TestDb::migrated("a_worker_given_json_logs_one_json_object_a_line").await else {
        return;
    };
    db.ok(&["queues", "pause", "mail"]).await;
    let mut worker = db.spawn(&[
        "worker", "--json", "--log", "info", "--queue", "default", "--queue", "mail",
    ]);
    let start = worker.wait_for_line(" started on ", WAIT).await;
    worker.wait_for_line("queue mail is paused", WAIT).await;
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
    let stderr = worker.stderr();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for line in &lines {
        let time = line["timestamp"]
            .as_str()
            .unwrap_or_else(|| panic!("{line}"));
        assert!(chrono::DateTime::parse_from_rfc3339(time).is_ok(), "{line}");
        assert!(
            ["INFO", "WARN"].contains(&line["level"].as_str().unwrap()),
            "{line}"
        );
        assert!(line["message"].is_string(), "{line}");
    }
    let start: Value = serde_json::from_str(&start).unwrap();
    let message = start["message"].as_str().unwrap();
    assert!(
        message.starts_with("worker ") && message.contains("queues default, mail"),
        "{start}"
    );
    let id = message.split(' ').nth(1).unwrap();
    let find = |message: &str| {
        lines
            .iter()
            .find(|line| line["message"] == message)
            .unwrap_or_else(|| panic!("no line {message:?} in:\n{stderr}"))
    };
    let warning = find("queue mail is paused: this worker claims none of its jobs until `drover queues resume mail`");
    assert_eq!(warning["level"], "WARN");
    // A runner event: its fields are top-level keys beside the message.
    let stopped = find("worker stopped");
    assert_eq!(stopped["worker_id"], id, "{stopped}");
    assert!(
        stopped["target"]
            .as_str()
            .unwrap()
            .starts_with("drover_runner"),
        "{stopped}"
    );
    assert!(
        lines.iter().any(|line| line["message"]
            .as_str()
            .unwrap()
            .starts_with("worker stopped: ")),
        "{stderr}"
    );
}

/// `drover serve --json` writes its lines on stderr as JSON too, the warning about
/// authentication being off at level WARN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_given_json_logs_one_json_object_a_line() {
    let Some(db) = TestDb::migrated("serve_given_json_logs_one_json_object_a_line").await else {
        return;
    };
    let mut server = db.spawn(&[
        "serve",
        "--json",
        "--insecure-no-auth",
        "--listen",
        "127.0.0.1:0",
    ]);
    let api: Value =
        serde_json::from_str(&server.wait_for_line(" on http://", WAIT).await).unwrap();
    assert_eq!(api["level"], "INFO", "{api}");
    assert!(
        api["message"]
            .as_str()
            .unwrap()
            .starts_with("API on http://127.0.0.1:"),
        "{api}"
    );
    server.signal(Signal::TERM);
    assert!(server.wait_exit(WAIT).await.success());
    let lines: Vec<Value> = server
        .stderr()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let warning = lines
        .iter()
        .find(|line| {
            line["message"]
                .as_str()
                .unwrap()
                .starts_with("authentication is OFF")
        })
        .unwrap_or_else(|| panic!("no warning in {lines:?}"));
    assert_eq!(warning["level"], "WARN");
    assert_eq!(lines.last().unwrap()["message"], "stopped", "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_set_list_clear_round_trip() {
    let Some(db) = TestDb::migrated("limits_set_list_clear_round_trip").await else {
        return;
    };
    let set = db
        .json(&[
            "limits",
            "set",
            "kind:email.send",
            "--max-running",
            "5",
            "--rate",
            "100/1m",
        ])
        .await;
    assert_eq!(set["key"], "kind:email.send", "{set}");
    assert_eq!(set["max_running"], 5);
    assert_eq!(set["rate"], json!({"count": 100, "period_ms": 60000}));
    db.ok(&["limits", "set", "customer:42", "--rate", "10/s"])
        .await;

    let list = db.json(&["limits", "list"]).await;
    let keys: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, vec!["customer:42", "kind:email.send"], "{list}");
    assert_eq!(list[1]["running"], 0);
    assert_eq!(list[0]["max_running"], Value::Null);
    let table = db.ok(&["limits", "list"]).await;
    assert!(
        table.contains("kind:email.send") && table.contains("100/1m"),
        "{table}"
    );

    let cleared = db.json(&["limits", "clear", "kind:email.send"]).await;
    assert_eq!(cleared["cleared"], "kind:email.send");
    let list = db.json(&["limits", "list"]).await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let missing = db.fails(&["limits", "clear", "kind:email.send"]).await;
    assert!(missing.contains("not found"), "{missing}");
    let empty = db.usage_error(&["limits", "set", "kind:x"]).await;
    assert!(empty.contains("--max-running"), "{empty}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_add_list_remove_round_trip() {
    let Some(db) = TestDb::migrated("schedules_add_list_remove_round_trip").await else {
        return;
    };
    let added = db
        .json(&[
            "schedules",
            "add",
            "nightly-report",
            "--cron",
            "0 2 * * *",
            "--timezone",
            "Europe/Berlin",
            "--kind",
            "report.build",
            "--args",
            r#"{"scope":"all"}"#,
            "--queue",
            "reports",
            "--priority",
            "3",
            "--max-attempts",
            "4",
        ])
        .await;
    assert_eq!(added["name"], "nightly-report", "{added}");
    assert_eq!(added["change"], "created", "{added}");

    // Adding it again as stored (a start-up script on every start) changes nothing; a new job
    // keeps its ticks going; a new timing starts its ticks now.
    let add = |cron: &'static str, scope: &'static str| {
        let args = format!(r#"{{"scope":"{scope}"}}"#);
        let db = &db;
        async move {
            db.json(&[
                "schedules",
                "add",
                "nightly-report",
                "--cron",
                cron,
                "--timezone",
                "Europe/Berlin",
                "--kind",
                "report.build",
                "--args",
                &args,
                "--queue",
                "reports",
                "--priority",
                "3",
                "--max-attempts",
                "4",
            ])
            .await
        }
    };
    let again = add("0  2 * * *", "all").await;
    assert_eq!(again["change"], "unchanged", "{again}");
    assert_eq!(again["created_at"], added["created_at"], "{again}");
    let text = db
        .ok(&[
            "schedules",
            "add",
            "nightly-report",
            "--cron",
            "0 2 * * *",
            "--timezone",
            "Europe/Berlin",
            "--kind",
            "report.build",
            "--args",
            r#"{"scope":"all"}"#,
            "--queue",
            "reports",
            "--priority",
            "3",
            "--max-attempts",
            "4",
        ])
        .await;
    assert!(text.contains("schedule nightly-report unchanged"), "{text}");
    let updated = add("0 2 * * *", "eu").await;
    assert_eq!(updated["change"], "updated", "{updated}");
    assert_eq!(updated["created_at"], added["created_at"], "{updated}");
    assert_eq!(updated["args"], json!({"scope": "eu"}), "{updated}");
    let rescheduled = add("0 3 * * *", "eu").await;
    assert_eq!(rescheduled["change"], "rescheduled", "{rescheduled}");
    assert_ne!(
        rescheduled["created_at"], added["created_at"],
        "{rescheduled}"
    );
    let restored = add("0 2 * * *", "all").await;
    assert_eq!(restored["change"], "rescheduled", "{restored}");

    let list = db.json(&["schedules", "list"]).await;
    let s = &list[0];
    assert_eq!(s["cron"], "0 2 * * *", "{list}");
    assert_eq!(s["timezone"], "Europe/Berlin");
    assert_eq!(s["kind"], "report.build");
    assert_eq!(s["args"], json!({"scope": "all"}));
    assert_eq!(s["queue"], "reports");
    assert_eq!(s["priority"], 3);
    assert_eq!(s["max_attempts"], 4);
    let next: chrono::DateTime<chrono::Utc> = s["next_tick_at"]
        .as_str()
        .expect("next tick")
        .parse()
        .unwrap();
    assert!(
        [0, 1].contains(&chrono::Timelike::hour(&next)) && chrono::Timelike::minute(&next) == 0,
        "02:00 in Berlin is 00:00 or 01:00 UTC: {next}"
    );
    let table = db.ok(&["schedules", "list"]).await;
    assert!(
        table.contains("nightly-report") && table.contains("Europe/Berlin"),
        "{table}"
    );

    let bad = db
        .usage_error(&[
            "schedules",
            "add",
            "x",
            "--cron",
            "not cron",
            "--kind",
            "noop",
        ])
        .await;
    assert!(bad.contains("--cron"), "{bad}");
    let bad = db
        .usage_error(&[
            "schedules",
            "add",
            "x",
            "--cron",
            "* * * * *",
            "--kind",
            "noop",
            "--timezone",
            "Mars/Base",
        ])
        .await;
    assert!(bad.contains("--timezone"), "{bad}");

    let removed = db.json(&["schedules", "remove", "nightly-report"]).await;
    assert_eq!(removed["removed"], "nightly-report");
    assert_eq!(db.json(&["schedules", "list"]).await, json!([]));
    let missing = db.fails(&["schedules", "remove", "nightly-report"]).await;
    assert!(missing.contains("not found"), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_metrics_count_per_queue_and_state() {
    let Some(db) = TestDb::migrated("snapshot_and_metrics_count_per_queue_and_state").await else {
        return;
    };
    db.enqueue("noop", "{}", &["--queue", "mail"]).await;
    db.enqueue("noop", "{}", &["--queue", "mail"]).await;
    db.enqueue("noop", "{}", &["--queue", "later", "--delay", "1h"])
        .await;
    let cancelled = db.enqueue("noop", "{}", &["--queue", "later"]).await;
    db.ok(&["jobs", "cancel", &cancelled]).await;

    let snapshot = db.json(&["snapshot"]).await;
    let queue = |name: &str| {
        snapshot["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["queue"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {snapshot}"))
            .clone()
    };
    let mail = queue("mail");
    assert_eq!(mail["counts"]["queued"], 2, "{snapshot}");
    assert_eq!(mail["ready"], 2);
    assert_eq!(mail["running"], 0);
    assert!(mail["oldest_ready_age_ms"].as_u64().is_some(), "{snapshot}");
    let later = queue("later");
    assert_eq!(later["counts"]["queued"], 1, "{snapshot}");
    assert_eq!(later["counts"]["cancelled"], 1, "{snapshot}");
    assert_eq!(later["ready"], 0);
    assert!(later["oldest_ready_age_ms"].is_null(), "{snapshot}");
    let table = db.ok(&["snapshot"]).await;
    assert!(
        table.contains("oldest ready") && table.contains("mail"),
        "{table}"
    );

    // No worker serves mail or later: their jobs are summed under queue="(other)".
    let metrics = db.ok(&["metrics"]).await;
    for line in [
        r#"drover_jobs{queue="(other)",state="queued"} 3"#,
        r#"drover_jobs{queue="(other)",state="cancelled"} 1"#,
        r#"drover_queue_paused{queue="(other)"} 0"#,
        "drover_queue_lag_seconds{queue=\"(other)\"}",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains(r#"queue="mail""#), "{metrics}");
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    // A paused queue has series of its own.
    db.ok(&["queues", "pause", "later"]).await;
    let metrics = db.ok(&["metrics"]).await;
    for line in [
        r#"drover_jobs{queue="(other)",state="queued"} 2"#,
        r#"drover_jobs{queue="later",state="queued"} 1"#,
        r#"drover_jobs{queue="later",state="cancelled"} 1"#,
        r#"drover_queue_paused{queue="later"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

/// A transaction left open (REPEATABLE READ with a read: it holds a snapshot, so vacuum
/// cannot clean the jobs table behind it) shows in `drover snapshot` (JSON and table) and
/// `drover metrics` with its age and pid; the dead row versions of an update of 12,000 jobs
/// stay through a VACUUM; a worker given `--warn-transaction-age 1s --warn-dead-rows 0.3`
/// warns about both, naming the pid and the remedy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_transaction_shows_in_snapshot_and_metrics_and_the_worker_warns() {
    let Some(db) =
        TestDb::migrated("a_long_transaction_shows_in_snapshot_and_metrics_and_the_worker_warns")
            .await
    else {
        return;
    };
    let mut reader = db.pool().acquire().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *reader)
        .await
        .unwrap();
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *reader)
        .await
        .unwrap();
    let _: i64 = sqlx::query_scalar("SELECT count(*) FROM drover.jobs")
        .fetch_one(&mut *reader)
        .await
        .unwrap();

    let vacuum = wait_until(
        "the transaction to be a second old in the snapshot",
        WAIT,
        || async {
            let snapshot = db.json(&["snapshot"]).await;
            let vacuum = snapshot["vacuum"].clone();
            let old = vacuum["oldest_transaction_age_ms"].as_u64().unwrap_or(0) >= 1000;
            (old && vacuum["oldest_transaction_pid"] == json!(pid)).then_some(vacuum)
        },
    )
    .await;
    assert!(vacuum["jobs_dead_rows"].is_u64(), "{vacuum}");
    assert!(vacuum["jobs_live_rows"].is_u64(), "{vacuum}");
    let table = db.ok(&["snapshot"]).await;
    assert!(
        table.contains("oldest open transaction: ") && table.contains(&format!("(pid {pid})")),
        "{table}"
    );
    assert!(table.contains("dead row versions"), "{table}");
    let metrics = db.ok(&["metrics"]).await;
    let age: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("drover_oldest_transaction_age_seconds "))
        .unwrap_or_else(|| panic!("no transaction age in:\n{metrics}"))
        .parse()
        .unwrap();
    assert!(age >= 1.0, "{metrics}");
    assert!(
        metrics.contains("drover_jobs_dead_rows_estimate "),
        "{metrics}"
    );

    let mut writer = db.pool().acquire().await.unwrap();
    for statement in [
        "INSERT INTO drover.jobs (id, kind, queue, tenant, args, run_at, state, max_attempts, finished_at) \
         SELECT gen_random_uuid(), 'noop', 'old', 'default', '{}', now(), 'succeeded', 1, now() \
         FROM generate_series(1, 12000)",
        "UPDATE drover.jobs SET priority = 1 WHERE queue = 'old'",
        "SELECT pg_stat_force_next_flush()",
        "VACUUM drover.jobs",
    ] {
        sqlx::query(statement).execute(&mut *writer).await.unwrap();
    }
    drop(writer);

    let worker = db.spawn(&[
        "worker",
        "--warn-transaction-age",
        "1s",
        "--warn-dead-rows",
        "0.3",
    ]);
    let line = worker
        .wait_for_line("oldest open transaction of the database", WAIT)
        .await;
    assert!(
        line.contains(&format!("pid {pid}"))
            && line.contains(&format!("pg_terminate_backend({pid})")),
        "{line}"
    );
    let line = worker.wait_for_line("drover.jobs holds about", WAIT).await;
    assert!(
        line.contains(" dead row versions (") && line.contains(&format!("pid {pid}")),
        "the cause is the open transaction: {line}"
    );
    sqlx::query("COMMIT").execute(&mut *reader).await.unwrap();
}

/// A job a worker claimed ahead of a free slot (running, not started) is told apart from one
/// whose handler started: `snapshot`, `queues list` and `metrics` count it as claimed, `jobs
/// get` and `jobs list` say it waits for a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_claimed_ahead_show_as_waiting_for_a_slot() {
    let Some(db) = TestDb::migrated("jobs_claimed_ahead_show_as_waiting_for_a_slot").await else {
        return;
    };
    let first = db.enqueue("noop", "{}", &["--queue", "mail"]).await;
    let second = db.enqueue("noop", "{}", &["--queue", "mail"]).await;
    let store = drover_store_postgres::PgStore::from_pool(db.pool().clone(), Default::default());
    let claimed = drover_core::JobStore::jobs_claim(
        &store,
        drover_core::ClaimJobs {
            worker: drover_core::WorkerId::parse("w").unwrap(),
            queues: vec![drover_core::QueueName::parse("mail").unwrap()],
            kinds: vec![drover_core::JobKind::parse("noop").unwrap()],
            limit: 2,
            start: 1,
            lease: Duration::from_secs(60),
        },
    )
    .await
    .unwrap();
    assert_eq!(claimed.jobs.len(), 2);

    let snapshot = db.json(&["snapshot"]).await;
    let mail = &snapshot["queues"][0];
    assert_eq!(mail["queue"], "mail", "{snapshot}");
    assert_eq!(
        (mail["running"].as_u64(), mail["claimed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(mail["counts"]["running"], 2, "{snapshot}");
    let table = db.ok(&["snapshot"]).await;
    assert!(table.contains("claimed"), "{table}");
    let queues = db.json(&["queues", "list"]).await;
    assert_eq!(
        (queues[0]["running"].as_u64(), queues[0]["claimed"].as_u64()),
        (Some(1), Some(1))
    );
    // Metrics label the queues a registered worker serves (others fold into "(other)").
    drover_core::JobStore::worker_register(
        &store,
        drover_core::WorkerRegistration {
            id: drover_core::WorkerId::parse("w").unwrap(),
            host: "host-a".to_owned(),
            pid: 1,
            queues: vec![drover_core::QueueName::parse("mail").unwrap()],
        },
    )
    .await
    .unwrap();
    let metrics = db.ok(&["metrics"]).await;
    assert!(
        metrics.contains(r#"drover_jobs_claimed{queue="mail"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"drover_jobs_running{queue="mail"} 1"#),
        "{metrics}"
    );

    let started = db.json(&["jobs", "get", &first]).await;
    assert_eq!(started["waiting_for_slot"], false);
    assert_eq!(started["started_at"], started["attempted_at"]);
    let waiting = db.json(&["jobs", "get", &second]).await;
    assert_eq!(waiting["state"], "running");
    assert_eq!(waiting["waiting_for_slot"], true);
    assert!(waiting["started_at"].is_null(), "{waiting}");
    let shown = db.ok(&["jobs", "get", &second]).await;
    assert!(shown.contains("waiting for a slot"), "{shown}");
    let page = db.json(&["jobs", "list", "--state", "running"]).await;
    assert_eq!(ids(&page), vec![second.clone(), first.clone()]);
    assert_eq!(page["jobs"][0]["waiting_for_slot"], true);
    assert_eq!(page["jobs"][1]["waiting_for_slot"], false);
    let listed = db.ok(&["jobs", "list", "--state", "running"]).await;
    assert!(listed.contains("waiting for a slot"), "{listed}");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_enqueue_reports_bad_lines_and_loads_the_rest() {
    let Some(db) = TestDb::migrated("bulk_enqueue_reports_bad_lines_and_loads_the_rest").await
    else {
        return;
    };
    // 250 lines in batches of 100: bad lines spread over the batches, a blank line (skipped),
    // and an idempotency conflict that makes the store refuse its whole batch (which is then
    // loaded job by job so only the conflicting line is rejected).
    let mut lines = Vec::new();
    let mut bad = Vec::new();
    for number in 1..=250usize {
        let line = match number {
            3 => "this is not JSON".to_owned(),
            50 => String::new(),
            120 => r#"{"kind": "bad kind!"}"#.to_owned(),
            130 => r#"{"kind": "noop", "idempotency_key": "k"}"#.to_owned(),
            131 => r#"{"kind": "sleep", "args": {"ms": 1}, "idempotency_key": "k"}"#.to_owned(),
            199 => r#"{"kind": "noop", "max_attempts": 0}"#.to_owned(),
            250 => r#"{"kind": "noop", "colour": "blue"}"#.to_owned(),
            n => format!(r#"{{"kind": "noop", "meta": {{"line": {n}}}}}"#),
        };
        if [3, 120, 131, 199, 250].contains(&number) {
            bad.push(number);
        }
        lines.push(line);
    }
    let file = TempFile::new("bulk.jsonl", &(lines.join("\n") + "\n"));
    // The rest loads, and the exit code (1) tells a script that some lines did not.
    let args = [
        "--json",
        "enqueue",
        "--file",
        file.arg(),
        "--batch-size",
        "100",
    ];
    let out = db.run(&args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("5 line(s) of"), "{stderr}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    let rejected: Vec<u64> = answer["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(
        rejected,
        bad.iter().map(|&n| n as u64).collect::<Vec<_>>(),
        "{answer}"
    );
    let by_line = |n: u64| {
        answer["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["line"] == n)
            .unwrap()["error"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(by_line(3).contains("not valid JSON"), "{answer}");
    assert!(by_line(120).contains("kind"), "{answer}");
    assert!(by_line(131).contains("conflict"), "{answer}");
    assert!(by_line(199).contains("max_attempts"), "{answer}");
    assert!(by_line(250).contains("colour"), "{answer}");
    let loaded = 250 - 1 - bad.len() as i64;
    assert_eq!(answer["created"], loaded, "{answer}");
    assert_eq!(db.count("queued").await, loaded);
    let line_7: i64 =
        sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE meta @> '{\"line\": 7}'")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(line_7, 1);

    // People get a summary on stdout and the bad lines on stderr; loading again replays the
    // idempotent line and creates the rest anew.
    let out = db.run(&["enqueue", "--file", file.arg()]).await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains(&format!(
            "{} enqueued, 1 replayed, 0 duplicate, 5 rejected",
            loaded - 1
        )),
        "{stdout}"
    );
    for n in &bad {
        assert!(
            stderr.contains(&format!("line {n}: ")),
            "line {n} missing from:\n{stderr}"
        );
    }
    // Per-job flags do not silently apply to a file.
    let out = db
        .run(&["enqueue", "--file", file.arg(), "--queue", "mail"])
        .await;
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

/// A file larger than the tenant's quota: the refused lines are reported in one line per rule
/// (the first line numbers and a count), not one line each; with `--wait-for-room` a stop
/// signal while the load waits ends it with the line to resume from, and with a worker making
/// room the whole file loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_larger_than_a_quota_is_summarised_or_loaded_as_room_frees() {
    let Some(db) = TestDb::migrated("a_file_larger_than_a_quota").await else {
        return;
    };
    let lines: Vec<String> = (1..=200)
        .map(|n| format!(r#"{{"kind": "noop", "meta": {{"line": {n}}}}}"#))
        .collect();
    let file = TempFile::new("over_quota.jsonl", &(lines.join("\n") + "\n"));
    let under_quota = |args: &[&str]| {
        let mut command = db.command(args);
        command
            .env("DROVER_MAX_TENANT_PENDING", "50")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    };

    // Refused lines: one summary line for the quota, with what to do about it.
    let out = under_quota(&["enqueue", "--file", file.arg(), "--batch-size", "20"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("50 enqueued, 0 replayed, 0 duplicate, 150 rejected"),
        "{stdout}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "a summary and the exit message:\n{stderr}");
    assert!(
        lines[0].starts_with(
            "drover: lines 51, 52, 53, 54, 55 and 145 more (150 lines): quota exceeded: max_tenant_pending of tenant default allows 50 pending jobs"
        ) && lines[0].ends_with("(--wait-for-room loads such lines as jobs finish and make room)"),
        "{stderr}"
    );
    assert!(lines[1].contains("150 line(s) of"), "{stderr}");
    assert_eq!(db.count("queued").await, 50);
    sqlx::query("DELETE FROM drover.jobs")
        .execute(db.pool())
        .await
        .unwrap();

    // Waiting for room with no worker: the first 50 load, then a stop signal ends the wait.
    let args = ["enqueue", "--file", file.arg(), "--wait-for-room"];
    let mut load = cli_support::Process::spawn(under_quota(&args), &args);
    wait_until("50 jobs loaded", WAIT, || async {
        (db.count("queued").await == 50).then_some(())
    })
    .await;
    load.signal(Signal::INT);
    let status = load.wait_exit(WAIT).await;
    assert_eq!(status.code(), Some(1), "{}", load.stderr());
    let stderr = load.stderr();
    assert!(
        stderr.contains(&format!(
            "interrupted at line 51 of {}: every line before 51 is settled",
            file.arg()
        )) && stderr.contains(&format!(
            "tail -n +51 {} | drover enqueue --file - --wait-for-room",
            file.arg()
        )),
        "{stderr}"
    );
    assert_eq!(db.count("queued").await, 50, "nothing more was sent");

    // With a worker making room, the whole file loads (and no bar is drawn on a pipe).
    let mut worker = db.spawn(&["worker", "--queue", "default"]);
    worker.worker_started().await;
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        under_quota(&["enqueue", "--file", file.arg(), "--wait-for-room"]).output(),
    )
    .await
    .expect("the load ends")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("200 enqueued, 0 replayed, 0 duplicate, 0 rejected"),
        "{stdout}"
    );
    assert!(stderr.is_empty(), "{stderr}");
    wait_until("every job to succeed", WAIT, || async {
        (db.count("succeeded").await == 250).then_some(())
    })
    .await;
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_enqueue_stopped_by_the_database_says_what_is_loaded_and_where_to_resume() {
    let Some(db) = TestDb::migrated(
        "bulk_enqueue_stopped_by_the_database_says_what_is_loaded_and_where_to_resume",
    )
    .await
    else {
        return;
    };
    // The database fails the batch holding line 150 as if it were shutting down (SQLSTATE
    // 57P01, a transient error: the load stops instead of rejecting lines).
    sqlx::raw_sql(
        r#"CREATE FUNCTION drover.fail_line_150() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
               IF NEW.meta->>'line' = '150' THEN
                   RAISE EXCEPTION 'injected shutdown' USING ERRCODE = '57P01';
               END IF;
               RETURN NEW;
           END $$;
           CREATE TRIGGER fail_line_150 BEFORE INSERT ON drover.jobs
               FOR EACH ROW EXECUTE FUNCTION drover.fail_line_150();"#,
    )
    .execute(db.pool())
    .await
    .unwrap();
    // Line 250 is malformed: found by parsing before the load, but never reached by it, so
    // it is not counted (it is reported when the rest is loaded).
    let lines: Vec<String> = (1..=300)
        .map(|n| match n {
            250 => "not JSON".to_owned(),
            n => format!(r#"{{"kind": "noop", "meta": {{"line": {n}}}}}"#),
        })
        .collect();
    let file = TempFile::new("stopped.jsonl", &(lines.join("\n") + "\n"));
    let out = db
        .run(&["enqueue", "--file", file.arg(), "--batch-size", "100"])
        .await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let error = cli_support::one_line_error(&out.stderr);
    // What is settled is counted; the batch in flight and where to resume are named.
    assert!(
        stdout.contains("100 enqueued, 0 replayed, 0 duplicate, 0 rejected"),
        "{stdout}"
    );
    assert!(error.contains("stopped at lines 101-200 of"), "{error}");
    assert!(
        error.contains("Every line before 101 is settled"),
        "{error}"
    );
    assert!(error.contains("no line after 200 was sent"), "{error}");
    assert!(
        error.contains(&format!("tail -n +201 {}", file.arg())),
        "{error}"
    );
    assert_eq!(db.count("queued").await, 100);
    let last: i64 = sqlx::query_scalar("SELECT max((meta->>'line')::bigint) FROM drover.jobs")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(last, 100);
    // Scripts get the same facts as JSON.
    let out = db
        .run(&[
            "--json",
            "enqueue",
            "--file",
            file.arg(),
            "--batch-size",
            "100",
        ])
        .await;
    assert_eq!(out.status.code(), Some(1));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    assert_eq!(answer["created"], 100, "{answer}");
    assert_eq!(answer["rejected"], json!([]), "{answer}");
    assert_eq!(
        answer["stopped"],
        json!({"in_flight_first_line": 101, "in_flight_last_line": 200, "resume_from_line": 201}),
        "{answer}"
    );
}

/// `drover jobs bulk`: a filter action without `--yes` prints how many jobs match and fails,
/// changing nothing; `--preview` only counts; `--yes` acts and reports what it did; `--id`
/// acts on those jobs at once; bad flags are usage errors naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_bulk_previews_then_acts_on_a_filter_or_ids() {
    let Some(db) = TestDb::migrated("jobs_bulk_previews_then_acts_on_a_filter_or_ids").await else {
        return;
    };
    let mut mail = Vec::new();
    for _ in 0..3 {
        mail.push(db.enqueue("noop", "{}", &["--queue", "mail"]).await);
    }
    let other = db.enqueue("noop", "{}", &["--queue", "other"]).await;

    let out = db.run(&["jobs", "bulk", "cancel", "--queue", "mail"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("3 job(s) match"), "{stdout}");
    assert!(
        stderr.contains("nothing changed") && stderr.contains("--yes"),
        "{stderr}"
    );
    assert_eq!(db.count("queued").await, 4);
    let preview = db
        .json(&["jobs", "bulk", "cancel", "--queue", "mail", "--preview"])
        .await;
    assert_eq!(
        preview,
        json!({"action": "cancel", "preview": true, "matched": 3, "more": false})
    );

    let done = db
        .json(&["jobs", "bulk", "cancel", "--queue", "mail", "--yes"])
        .await;
    assert_eq!(
        done,
        json!({"action": "cancel", "preview": false, "changed": 3, "skipped": 0, "not_found": 0})
    );
    assert_eq!(db.count("cancelled").await, 3);
    assert_eq!(db.job_row(&other).await.state, "queued");

    let line = db
        .ok(&["jobs", "bulk", "delete", "--id", &mail[0], "--id", &other])
        .await;
    assert!(
        line.contains("delete: 2 job(s) changed, 0 skipped"),
        "{line}"
    );
    assert_eq!(db.count("cancelled").await, 2);

    let bad = db
        .usage_error(&["jobs", "bulk", "explode", "--queue", "mail"])
        .await;
    assert!(bad.contains("cancel, retry or delete"), "{bad}");
    let bad = db
        .usage_error(&["jobs", "bulk", "retry", "--meta", "[1]", "--yes"])
        .await;
    assert!(bad.contains("--meta"), "{bad}");
    let bad = db
        .usage_error(&["jobs", "bulk", "retry", "--id", &other, "--queue", "mail"])
        .await;
    assert!(bad.contains("--queue"), "{bad}");
    let bad = db
        .usage_error(&["jobs", "bulk", "retry", "--id", &other, "--id", &other])
        .await;
    assert!(bad.contains("--id") && bad.contains("twice"), "{bad}");
    let bad = db
        .usage_error(&["jobs", "bulk", "cancel", "--preview", "--yes"])
        .await;
    assert!(bad.contains("--yes") && bad.contains("--preview"), "{bad}");
}

/// `drover jobs bulk --args`: the action touches only the jobs whose args contain the object
/// (jsonb containment, as `jobs list --args`), alone or with the other filters; a value that is
/// not JSON, or JSON but not an object, is a usage error naming `--args`, as for `jobs list`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_bulk_by_args_acts_only_on_matching_jobs() {
    let Some(db) = TestDb::migrated("jobs_bulk_by_args_acts_only_on_matching_jobs").await else {
        return;
    };
    let acme = [
        db.enqueue("noop", r#"{"customer": "acme", "n": 1}"#, &[])
            .await,
        db.enqueue(
            "noop",
            r#"{"customer": "acme", "n": 2}"#,
            &["--queue", "mail"],
        )
        .await,
    ];
    let others = [
        db.enqueue("noop", r#"{"customer": "globex"}"#, &[]).await,
        // Containment is from the top: an "acme" one level down does not match.
        db.enqueue("noop", r#"{"order": {"customer": "acme"}}"#, &[])
            .await,
        db.enqueue("noop", "[1, 2]", &[]).await,
    ];

    let filter = ["--args", r#"{"customer": "acme"}"#];
    let preview = db
        .json(&[&["jobs", "bulk", "cancel", "--preview"][..], &filter].concat())
        .await;
    assert_eq!(
        preview,
        json!({"action": "cancel", "preview": true, "matched": 2, "more": false})
    );
    // With another filter both apply.
    let preview = db
        .json(
            &[
                &["jobs", "bulk", "cancel", "--preview", "--queue", "mail"][..],
                &filter,
            ]
            .concat(),
        )
        .await;
    assert_eq!(preview["matched"], 1, "{preview}");

    let done = db
        .json(&[&["jobs", "bulk", "cancel", "--yes"][..], &filter].concat())
        .await;
    assert_eq!(
        done,
        json!({"action": "cancel", "preview": false, "changed": 2, "skipped": 0, "not_found": 0})
    );
    for id in &acme {
        assert_eq!(db.job_row(id).await.state, "cancelled", "{id}");
    }
    for id in &others {
        assert_eq!(db.job_row(id).await.state, "queued", "{id}");
    }

    let bad = db
        .usage_error(&["jobs", "bulk", "cancel", "--args", "{not json", "--yes"])
        .await;
    assert!(
        bad.starts_with("drover: invalid --args: not valid JSON"),
        "{bad}"
    );
    for not_an_object in ["[1]", r#""acme""#, "null"] {
        let bad = db
            .usage_error(&["jobs", "bulk", "cancel", "--args", not_an_object, "--yes"])
            .await;
        assert!(
            bad.starts_with("drover: invalid --args: ") && bad.contains("must be a JSON object"),
            "{not_an_object}: {bad}"
        );
        // The same words as `jobs list --args`.
        let listed = db
            .usage_error(&["jobs", "list", "--args", not_an_object])
            .await;
        assert_eq!(bad, listed);
    }
    let bad = db
        .usage_error(&["jobs", "bulk", "cancel", "--id", &others[0], "--args", "{}"])
        .await;
    assert!(bad.contains("--args"), "{bad}");
    assert_eq!(db.count("queued").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_old_finished_jobs_in_batches() {
    let Some(db) = TestDb::migrated("prune_deletes_old_finished_jobs_in_batches").await else {
        return;
    };
    let jobs = TempFile::new(
        "noops.jsonl",
        &format!("{}\n", [r#"{"kind": "noop"}"#; 7].join("\n")),
    );
    db.json(&["enqueue", "--file", jobs.arg()]).await;
    let mut worker = db.spawn(&["worker", "--slots", "4"]);
    worker.worker_started().await;
    wait_until("7 jobs to succeed", WAIT, || async {
        (db.count("succeeded").await == 7).then_some(())
    })
    .await;
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());

    // Five finished 8 days ago, two just now; one queued and one far in the future.
    sqlx::query(
        "UPDATE drover.jobs SET finished_at = now() - interval '8 days' \
         WHERE id IN (SELECT id FROM drover.jobs ORDER BY id LIMIT 5)",
    )
    .execute(db.pool())
    .await
    .unwrap();
    db.enqueue("noop", "{}", &["--queue", "idle"]).await;
    db.enqueue(
        "noop",
        "{}",
        &["--queue", "idle", "--run-at", "2099-01-01T00:00:00Z"],
    )
    .await;

    let pruned = db
        .json(&["prune", "--older-than", "7d", "--batch", "2"])
        .await;
    assert_eq!(pruned["deleted"], 5, "{pruned}");
    assert_eq!(pruned["older_than_seconds"], 7 * 24 * 3600);
    assert_eq!(db.count("succeeded").await, 2);
    assert_eq!(db.count("queued").await, 2);
    let line = db.ok(&["prune"]).await;
    assert!(
        line.starts_with("deleted 0 finished job(s) older than 7days"),
        "{line}"
    );
    let bad = db.usage_error(&["prune", "--batch", "0"]).await;
    assert!(
        bad.contains("--batch") && bad.contains("between 1 and 100000"),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_worker_whose_stderr_reader_is_gone() {
    let Some(db) = TestDb::migrated("sigterm_stops_a_worker_whose_stderr_reader_is_gone").await
    else {
        return;
    };
    // stderr goes to a reader that takes the start line and goes away (`drover worker 2>&1 |
    // head -1`): the shutdown message then fails to write.
    let mut command = db.command(&["worker", "--queue", "pipeq", "--heartbeat", "300ms"]);
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("spawn drover worker");
    let pid = child.id().expect("a running child");
    {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let first = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("a start line")
            .expect("read stderr");
        assert!(first.is_some(), "the worker wrote nothing");
    }
    wait_until("the worker to register", WAIT, || async {
        let list = db.json(&["workers", "list"]).await;
        list.as_array()
            .unwrap()
            .iter()
            .any(|w| w["pid"] == pid)
            .then_some(())
    })
    .await;
    let raw = rustix::process::Pid::from_raw(pid as i32).expect("a positive pid");
    rustix::process::kill_process(raw, Signal::TERM).expect("send SIGTERM");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the worker exits after SIGTERM although its stderr is closed")
        .expect("wait for drover");
    // A graceful stop: exit 0, not killed and not a panic on the closed pipe (101).
    assert_eq!(status.code(), Some(0), "{status:?}");
    // It deregistered on the way out: a graceful stop, not a crash.
    assert_eq!(db.json(&["workers", "list"]).await, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_stderr_is_closed_from_the_start_registers_and_runs_jobs() {
    let Some(db) =
        TestDb::migrated("a_worker_whose_stderr_is_closed_from_the_start_registers_and_runs_jobs")
            .await
    else {
        return;
    };
    let job = db.enqueue("sleep", r#"{"ms": 10}"#, &[]).await;
    // stderr is a pipe whose reading end is closed before the worker starts, so every write
    // to it fails (EPIPE): the pool warning (--db-connections 1), the start line and the log
    // lines (--log info) all hit it. Those writes panicked (`eprintln!`, and tracing's own
    // report of a failed write), so the worker died before it registered.
    let (read, write) = rustix::pipe::pipe().expect("a pipe");
    drop(read);
    let mut command = db.command(&[
        "--log",
        "info",
        "worker",
        "--queue",
        "default",
        "--heartbeat",
        "300ms",
        "--db-connections",
        "1",
    ]);
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(write));
    let mut child = command.spawn().expect("spawn drover worker");
    let pid = child.id().expect("a running child");
    wait_until("the worker to register", WAIT, || {
        let exited = child.try_wait().expect("poll the worker");
        let db = &db;
        async move {
            assert!(exited.is_none(), "the worker exited: {exited:?}");
            let list = db.json(&["workers", "list"]).await;
            list.as_array()
                .unwrap()
                .iter()
                .any(|w| w["pid"] == pid)
                .then_some(())
        }
    })
    .await;
    db.wait_jobs(&[&job], "succeeded", None, WAIT).await;
    let raw = rustix::process::Pid::from_raw(pid as i32).expect("a positive pid");
    rustix::process::kill_process(raw, Signal::TERM).expect("send SIGTERM");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the worker exits after SIGTERM")
        .expect("wait for drover");
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(db.json(&["workers", "list"]).await, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_list_shows_a_running_worker_until_it_stops() {
    let Some(db) = TestDb::migrated("workers_list_shows_a_running_worker_until_it_stops").await
    else {
        return;
    };
    assert_eq!(db.json(&["workers", "list"]).await, json!([]));
    let mut worker = db.spawn(&[
        "worker",
        "--queue",
        "default",
        "--queue",
        "mail",
        "--slots",
        "2",
        "--heartbeat",
        "300ms",
        "--lease",
        "5s",
    ]);
    let id = worker.worker_started().await;
    let row = wait_until("the worker to register", WAIT, || async {
        let list = db.json(&["workers", "list"]).await;
        list.as_array()
            .unwrap()
            .iter()
            .find(|w| w["id"] == id.as_str())
            .cloned()
    })
    .await;
    assert_eq!(row["pid"], worker.pid, "{row}");
    assert!(!row["host"].as_str().unwrap().is_empty(), "{row}");
    assert_eq!(row["queues"], json!(["default", "mail"]), "{row}");
    let started: chrono::DateTime<chrono::Utc> =
        row["started_at"].as_str().unwrap().parse().unwrap();
    // The heartbeat moves last_heartbeat_at forward.
    wait_until("a heartbeat after the start", WAIT, || async {
        let list = db.json(&["workers", "list"]).await;
        let beat: chrono::DateTime<chrono::Utc> =
            list[0]["last_heartbeat_at"].as_str()?.parse().ok()?;
        (beat > started).then_some(())
    })
    .await;
    let table = db.ok(&["workers", "list"]).await;
    for column in [
        "id",
        "host",
        "pid",
        "queues",
        "started",
        "last heartbeat",
        "default,mail",
    ] {
        assert!(table.contains(column), "{column} missing from:\n{table}");
    }
    assert!(table.contains(&id), "{table}");

    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
    assert!(
        worker.stderr().contains("drover: worker stopped: "),
        "{}",
        worker.stderr()
    );
    assert_eq!(db.json(&["workers", "list"]).await, json!([]));
    assert!(db
        .ok(&["workers", "list"])
        .await
        .contains("no workers registered"));
}

/// The seed's scenario: `--queue lq --slots 1 --pool long:lq:1:sleep` with three long `sleep`
/// jobs queued ahead of three `noop` jobs. The pool reserves `sleep` in `lq`, so the general
/// pool's slot runs the `noop` jobs at once while one `sleep` runs in the reserved pool and the
/// other two wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_reserving_a_kind_leaves_the_general_slots_to_the_other_kinds() {
    let Some(db) = TestDb::migrated("pool_reserving_a_kind_leaves_general_slots").await else {
        return;
    };
    let mut sleeps = Vec::new();
    for _ in 0..3 {
        // Far longer than the test: a sleep that finished would mean it ran in the general
        // pool's slot and the noop jobs waited for it.
        sleeps.push(
            db.enqueue("sleep", r#"{"ms": 600000}"#, &["--queue", "lq"])
                .await,
        );
    }
    let mut noops = Vec::new();
    for _ in 0..3 {
        noops.push(db.enqueue("noop", "{}", &["--queue", "lq"]).await);
    }
    let mut worker = db.spawn(&[
        "worker",
        "--queue",
        "lq",
        "--slots",
        "1",
        "--pool",
        "long:lq:1:sleep",
        "--shutdown-grace",
        "0s",
    ]);
    worker.worker_started().await;
    db.wait_jobs(&noops, "succeeded", None, WAIT).await;
    let mut states = Vec::new();
    for id in &sleeps {
        states.push(db.job_row(id).await.state);
    }
    states.sort();
    assert_eq!(
        states,
        ["queued", "queued", "running"],
        "{}",
        worker.stderr()
    );

    // Stopped without grace: the running sleep is released without spending its attempt.
    worker.signal(Signal::TERM);
    assert!(
        worker.wait_exit(WAIT).await.success(),
        "{}",
        worker.stderr()
    );
    db.wait_jobs(&sleeps, "queued", None, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_worker_runs_builtin_kinds_and_cancel_stops_a_running_job() {
    let Some(db) =
        TestDb::migrated("stock_worker_runs_builtin_kinds_and_cancel_stops_a_running_job").await
    else {
        return;
    };
    let noop = db.enqueue("noop", "{}", &[]).await;
    let sleep = db.enqueue("sleep", r#"{"ms": 50}"#, &[]).await;
    let fail_once = db.enqueue("fail", r#"{"fail_times": 1}"#, &[]).await;
    let fail_always = db
        .enqueue("fail", r#"{"fail_times": 5}"#, &["--max-attempts", "1"])
        .await;
    let long = db.enqueue("sleep", r#"{"ms": 600000}"#, &[]).await;
    let mut worker = db.spawn(&["worker", "--slots", "8"]);
    let id = worker.worker_started().await;
    assert!(
        worker.stderr().contains("kinds fail, noop, sleep"),
        "the stock worker ships noop, sleep and fail (exec only with --allow-exec): {}",
        worker.stderr()
    );

    db.wait_jobs(&[&long], "running", Some(&id), WAIT).await;
    let requested = db.json(&["jobs", "cancel", &long]).await;
    assert_eq!(requested["effect"], "requested", "{requested}");
    db.wait_jobs(&[&long], "cancelled", None, WAIT).await;

    db.wait_jobs(&[&noop, &sleep, &fail_once], "succeeded", None, WAIT)
        .await;
    db.wait_jobs(&[&fail_always], "failed", None, WAIT).await;
    let job = db.json(&["jobs", "get", &fail_once]).await;
    assert_eq!(job["attempt"], 2, "{job}");
    assert_eq!(job["result"], json!({"succeeded_on_attempt": 2}));
    assert_eq!(job["errors"][0]["attempt"], 1, "{job}");
    let job = db.json(&["jobs", "get", &fail_always]).await;
    assert_eq!(job["attempt"], 1, "{job}");
    let failed = db.json(&["jobs", "list", "--state", "failed"]).await;
    assert_eq!(ids(&failed), vec![fail_always.clone()]);

    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
    let stopped = worker.wait_for_line("worker stopped", WAIT).await;
    assert!(
        stopped.contains("succeeded 3") && stopped.contains("cancelled 1"),
        "{stopped}"
    );
}

/// `drover worker --delete-succeeded`: a job its handler completes is deleted (counted
/// succeeded by the worker, then "not found"), a failed job is kept as always.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_given_delete_succeeded_keeps_no_succeeded_jobs() {
    let Some(db) =
        TestDb::migrated("a_worker_given_delete_succeeded_keeps_no_succeeded_jobs").await
    else {
        return;
    };
    let noop = db.enqueue("noop", "{}", &[]).await;
    let fail_always = db
        .enqueue("fail", r#"{"fail_times": 5}"#, &["--max-attempts", "1"])
        .await;
    let mut worker = db.spawn(&["worker", "--slots", "1", "--delete-succeeded"]);
    worker.worker_started().await;
    // One slot, claim order: the noop job finishes before the failing one is claimed.
    db.wait_jobs(&[&fail_always], "failed", None, WAIT).await;
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
    let stopped = worker.wait_for_line("worker stopped", WAIT).await;
    assert!(
        stopped.contains("succeeded 1") && stopped.contains("failed 1"),
        "{stopped}"
    );
    let gone = db.fails(&["jobs", "get", &noop]).await;
    assert!(gone.contains("not found"), "{gone}");
    assert_eq!(db.count("succeeded").await, 0);
    assert_eq!(db.count("failed").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_only_on_a_worker_started_with_allow_exec() {
    let Some(db) = TestDb::migrated("exec_runs_only_on_a_worker_started_with_allow_exec").await
    else {
        return;
    };
    let echo = db
        .enqueue(
            "exec",
            r#"{"program": "/bin/echo", "args": ["hello", "drover"]}"#,
            &[],
        )
        .await;
    let marker = db.enqueue("noop", "{}", &[]).await;

    // Without --allow-exec the worker does not claim exec jobs at all.
    let mut plain = db.spawn(&["worker", "--slots", "2"]);
    let plain_id = plain.worker_started().await;
    assert!(!plain.stderr().contains("exec"), "{}", plain.stderr());
    db.wait_jobs(&[&marker], "succeeded", None, WAIT).await;
    assert_eq!(
        db.job_row(&echo).await,
        cli_support::JobRow {
            state: "queued".to_owned(),
            attempt: 0,
            lease_owner: None
        },
        "a worker without --allow-exec ({plain_id}) left the exec job alone"
    );
    plain.signal(Signal::TERM);
    assert!(plain.wait_exit(WAIT).await.success());

    // With it, the allowed program runs; another program is refused without a retry.
    let denied = db
        .enqueue(
            "exec",
            r#"{"program": "/bin/true"}"#,
            &["--max-attempts", "3"],
        )
        .await;
    // Output with a NUL byte and invalid UTF-8: stored with U+FFFD (jsonb refuses NUL).
    let nul = db
        .enqueue(
            "exec",
            r#"{"program": "/usr/bin/printf", "args": ["a\\000b\\377"]}"#,
            &["--max-attempts", "1"],
        )
        .await;
    // A failure keeps the output too (docs/cli.md, the `exec` kind): in the attempt's error.
    let failing = db
        .enqueue(
            "exec",
            r#"{"program": "/bin/sh", "args": ["-c", "echo partial; echo broken >&2; exit 3"]}"#,
            &["--max-attempts", "1"],
        )
        .await;
    let mut worker = db.spawn(&[
        "worker",
        "--slots",
        "2",
        "--allow-exec",
        "/bin/echo",
        "--allow-exec",
        "/usr/bin/printf",
        "--allow-exec",
        "/bin/sh",
    ]);
    worker.worker_started().await;
    assert!(
        worker.stderr().contains("kinds exec, fail, noop, sleep"),
        "{}",
        worker.stderr()
    );
    db.wait_jobs(&[&failing], "failed", None, WAIT).await;
    let job = db.json(&["jobs", "get", &failing]).await;
    assert_eq!(
        job["errors"][0]["message"],
        "/bin/sh exited with code 3; stdout: \"partial\\n\"; stderr: \"broken\\n\"",
        "{job}"
    );
    db.wait_jobs(&[&echo], "succeeded", None, WAIT).await;
    let job = db.json(&["jobs", "get", &echo]).await;
    assert_eq!(job["result"]["exit_code"], 0, "{job}");
    assert_eq!(job["result"]["stdout"], "hello drover\n", "{job}");
    assert_eq!(job["result"]["stderr"], "", "{job}");
    db.wait_jobs(&[&nul], "succeeded", None, WAIT).await;
    let job = db.json(&["jobs", "get", &nul]).await;
    assert_eq!(job["result"]["exit_code"], 0, "{job}");
    assert_eq!(job["result"]["stdout"], "a\u{FFFD}b\u{FFFD}", "{job}");
    db.wait_jobs(&[&denied], "failed", None, WAIT).await;
    let job = db.json(&["jobs", "get", &denied]).await;
    assert_eq!(job["attempt"], 1, "refused at once: {job}");
    let message = job["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("not allowed") && message.contains("--allow-exec"),
        "{message}"
    );
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
}

/// True while process `pid` runs (a killed process waiting to be reaped by its new parent, a
/// zombie, counts as gone).
fn running(pid: i32) -> bool {
    let Some(process) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    if rustix::process::test_kill_process(process).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last parenthesis.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_timeout_bounds_the_whole_run_and_kills_the_process_group() {
    let Some(db) =
        TestDb::migrated("exec_timeout_bounds_the_whole_run_and_kills_the_process_group").await
    else {
        return;
    };
    // The program exits at once, but the child it leaves in the background holds its stdout
    // open for 30 s: the 1 s timeout still applies, and the child is killed with it.
    let pid_file = TempFile::new("exec-background.pid", "");
    let args = json!({
        "program": "/bin/sh",
        "args": ["-c", "sleep 30 & echo $! > \"$1\"; echo started", "sh", pid_file.arg()],
        "timeout_ms": 1000,
    });
    let job = db
        .enqueue("exec", &args.to_string(), &["--max-attempts", "1"])
        .await;
    let mut worker = db.spawn(&["worker", "--slots", "1", "--allow-exec", "/bin/sh"]);
    worker.worker_started().await;
    db.wait_jobs(&[&job], "failed", None, Duration::from_secs(15))
        .await;
    let got = db.json(&["jobs", "get", &job]).await;
    let message = got["errors"][0]["message"].as_str().unwrap();
    // What it printed before the timeout is in the error.
    assert_eq!(
        message, "/bin/sh timed out after 1000 ms; stdout: \"started\\n\"; stderr: \"\"",
        "{got}"
    );
    let pid: i32 = std::fs::read_to_string(&pid_file.path)
        .unwrap()
        .trim()
        .parse()
        .expect("the program wrote its background child's PID");
    wait_until("the background child to be killed", WAIT, || async {
        (!running(pid)).then_some(())
    })
    .await;
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_sizes_are_checked_before_connecting_and_a_small_pool_warns_once() {
    let Some(db) =
        TestDb::migrated("worker_sizes_are_checked_before_connecting_and_a_small_pool_warns_once")
            .await
    else {
        return;
    };
    // Before, the database pool was sized (slots + 4) and allocated first: the process
    // aborted ("memory allocation of ... bytes failed", exit code 134).
    for (flag, value) in [
        ("--slots", "10000000000"),
        ("--db-connections", "4000000000"),
        ("--db-connections", "0"),
    ] {
        let out = db.run(&["worker", flag, value]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("between 1 and 10000"),
            "{flag} {value}: {stderr}"
        );
    }
    // A pool below slots + 2 is used as given, with one warning.
    let mut worker = db.spawn(&["worker", "--slots", "4", "--db-connections", "1"]);
    worker.worker_started().await;
    let jobs = [
        db.enqueue("noop", "{}", &[]).await,
        db.enqueue("sleep", r#"{"ms": 20}"#, &[]).await,
    ];
    db.wait_jobs(&jobs, "succeeded", None, WAIT).await;
    let stderr = worker.stderr();
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("slots + 2")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("--db-connections 1 is below slots + 2 = 6"),
        "{stderr}"
    );
    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
}

/// `GET path` on `addr` over plain HTTP/1.0; returns the whole response.
async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_pools_filter_kinds_and_serve_metrics() {
    let Some(db) = TestDb::migrated("worker_pools_filter_kinds_and_serve_metrics").await else {
        return;
    };
    // `main` serves default with 2 slots; pool `long` serves reports with 1 slot, sleep only.
    let mut worker = db.spawn(&[
        "worker",
        "--queue",
        "default",
        "--slots",
        "2",
        "--pool",
        "long:reports:1:sleep",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let id = worker.worker_started().await;
    assert!(
        worker.stderr().contains(": 3 slot(s)"),
        "{}",
        worker.stderr()
    );
    let metrics_line = worker
        .wait_for_line("drover: metrics on http://", WAIT)
        .await;
    let addr = metrics_line
        .trim_start_matches("drover: metrics on http://")
        .trim_end_matches("/metrics")
        .to_owned();
    assert!(
        !addr.ends_with(":0"),
        "the bound port is shown: {metrics_line}"
    );

    let noop_elsewhere = db.enqueue("noop", "{}", &["--queue", "reports"]).await;
    let sleep = db
        .enqueue("sleep", r#"{"ms": 10}"#, &["--queue", "reports"])
        .await;
    let noop = db.enqueue("noop", "{}", &[]).await;
    db.wait_jobs(&[&sleep, &noop], "succeeded", None, WAIT)
        .await;
    assert_eq!(
        db.job_row(&noop_elsewhere).await.state,
        "queued",
        "pool long of {id} runs only sleep"
    );
    let workers = db.json(&["workers", "list"]).await;
    assert_eq!(
        workers[0]["queues"],
        json!(["default", "reports"]),
        "{workers}"
    );

    let metrics = http_get(&addr, "/metrics").await;
    assert!(
        metrics.starts_with("HTTP/1.0 200") || metrics.starts_with("HTTP/1.1 200"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"drover_jobs{queue="reports",state="queued"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"drover_job_outcomes_total{kind="noop",outcome="succeeded"} 1"#),
        "{metrics}"
    );
    let ready = http_get(&addr, "/v1/ready").await;
    assert!(ready.contains(" 200 "), "{ready}");

    worker.signal(Signal::TERM);
    assert!(worker.wait_exit(WAIT).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_come_from_the_environment() {
    let Some(db) = TestDb::migrated("quotas_come_from_the_environment").await else {
        return;
    };
    let enqueue = |tenant: &'static str| {
        let mut command = db.command(&["enqueue", "noop", "--tenant", tenant]);
        command
            .env("DROVER_MAX_PENDING", "3")
            .env("DROVER_MAX_TENANT_PENDING", "2")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        async move { command.output().await.unwrap() }
    };
    assert!(enqueue("a").await.status.success());
    assert!(enqueue("a").await.status.success());
    let refused = enqueue("a").await;
    let line = cli_support::one_line_error(&refused.stderr);
    assert!(
        line.contains("quota exceeded: max_tenant_pending of tenant a"),
        "{line}"
    );
    assert!(enqueue("b").await.status.success());
    let refused = enqueue("c").await;
    let line = cli_support::one_line_error(&refused.stderr);
    assert!(
        line.contains("quota exceeded: max_pending allows 3"),
        "{line}"
    );
    // 0 turns a quota off.
    let mut command = db.command(&["enqueue", "noop", "--tenant", "a"]);
    command
        .env("DROVER_MAX_PENDING", "0")
        .env("DROVER_MAX_TENANT_PENDING", "none");
    assert!(command.output().await.unwrap().status.success());
    assert_eq!(db.count("queued").await, 4);
}

/// Workflows from the command line (docs/design.md section 10): `enqueue --workflow FILE`
/// stores a graph by name, `workflows list|get` show it (`get` as a tree under what each job
/// waits for), `jobs list --workflow` and `--state waiting` select its jobs, `enqueue
/// --depends-on` waits for a job, `workflows cancel|retry` act on the whole, and a worker then
/// runs it in order. A bad graph or a per-job flag beside `--workflow` stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_enqueue_show_cancel_and_retry() {
    let Some(db) = TestDb::migrated("workflows_enqueue_show_cancel_and_retry").await else {
        return;
    };
    let cycle = TempFile::new(
        "cycle.json",
        r#"{"jobs": [{"name": "a", "kind": "noop", "depends_on": ["b"]},
                    {"name": "b", "kind": "noop", "depends_on": ["a"]}]}"#,
    );
    let line = db.fails(&["enqueue", "--workflow", cycle.arg()]).await;
    assert!(
        line.contains("jobs") && line.contains("cycle") && line.contains("a -> b -> a"),
        "{line}"
    );
    let usage = db
        .usage_error(&["enqueue", "--workflow", cycle.arg(), "--queue", "q"])
        .await;
    assert!(usage.contains("--workflow"), "{usage}");
    assert_eq!(db.count("queued").await + db.count("waiting").await, 0);

    let file = TempFile::new(
        "workflow.json",
        r#"{"jobs": [
            {"name": "c", "kind": "noop", "depends_on": ["b"], "run_regardless": true},
            {"name": "b", "kind": "noop", "depends_on": ["a"]},
            {"name": "a", "kind": "noop", "args": {"step": 1}}
        ]}"#,
    );
    let answer = db.json(&["enqueue", "--workflow", file.arg()]).await;
    let id = answer["id"].as_str().expect("workflow id").to_owned();
    let job = |i: usize| answer["jobs"][i]["job"]["id"].as_str().unwrap().to_owned();
    let (c, b, a) = (job(0), job(1), job(2));
    assert_eq!(answer["jobs"][2]["job"]["state"], "queued", "{answer}");
    assert_eq!(answer["jobs"][1]["job"]["state"], "waiting", "{answer}");
    assert_eq!(answer["jobs"][0]["job"]["name"], "c", "{answer}");

    let list = db.json(&["workflows", "list"]).await;
    assert_eq!(list["workflows"][0]["id"], id.as_str(), "{list}");
    assert_eq!(list["workflows"][0]["state"], "running", "{list}");
    assert_eq!(
        list["workflows"][0]["counts"],
        json!({"queued": 1, "waiting": 2}),
        "{list}"
    );
    let table = db.ok(&["workflows", "list"]).await;
    assert!(
        table.contains(&id) && table.contains("1 workflow(s)"),
        "{table}"
    );

    let got = db.json(&["workflows", "get", &id]).await;
    assert_eq!(got["jobs"].as_array().unwrap().len(), 3, "{got}");
    let edges = got["edges"].as_array().unwrap();
    assert!(
        edges.contains(&json!({"job": "b", "depends_on": "a"}))
            && edges.contains(&json!({"job": "c", "depends_on": "b"})),
        "{got}"
    );
    let tree = db.ok(&["workflows", "get", &id]).await;
    let lines: Vec<&str> = tree.lines().collect();
    assert!(lines[0].starts_with(&format!("workflow {id}")), "{tree}");
    assert!(lines[1].starts_with("a [noop] queued"), "{tree}");
    assert!(lines[2].starts_with("  b [noop] waiting"), "{tree}");
    assert!(
        lines[3].starts_with("    c [noop] waiting (runs regardless)"),
        "{tree}"
    );

    let of_workflow = ids(&db.json(&["jobs", "list", "--workflow", &id]).await);
    assert_eq!(of_workflow.len(), 3);
    assert!([&a, &b, &c].iter().all(|j| of_workflow.contains(j)));
    let waiting = ids(&db
        .json(&["jobs", "list", "--workflow", &id, "--state", "waiting"])
        .await);
    assert_eq!(waiting.len(), 2);
    assert!(waiting.contains(&b) && waiting.contains(&c));
    assert!(ids(&db.json(&["jobs", "list", "--parent", &a]).await).is_empty());

    let after = db.json(&["enqueue", "noop", "--depends-on", &a]).await;
    assert_eq!(after["job"]["state"], "waiting", "{after}");
    assert_eq!(after["job"]["depends_on"], json!([a]), "{after}");
    let shown = db.ok(&["jobs", "get", &b]).await;
    assert!(shown.contains(&format!("{id} (as b)")), "{shown}");

    let cancel = db.json(&["workflows", "cancel", &id]).await;
    assert_eq!(cancel["jobs"], 3, "{cancel}");
    for job in [&a, &b, &c] {
        assert_eq!(db.job_row(job).await.state, "cancelled");
    }
    let outside = after["job"]["id"].as_str().unwrap();
    assert_eq!(
        db.job_row(outside).await.state,
        "cancelled",
        "a dependent outside the workflow follows its cancelled dependency"
    );
    let retried = db.ok(&["workflows", "retry", &id]).await;
    assert!(retried.contains("3 job(s) run again"), "{retried}");
    assert_eq!(db.job_row(&a).await.state, "queued");
    assert_eq!(db.job_row(&b).await.state, "waiting");

    let mut worker = db.spawn(&["worker", "--slots", "2"]);
    worker.worker_started().await;
    db.wait_jobs(&[&a, &b, &c], "succeeded", None, WAIT).await;
    worker.stop(WAIT).await;
    let done = db.json(&["workflows", "get", &id]).await;
    assert_eq!(done["state"], "succeeded", "{done}");
}

/// Operator commands are recorded in the audit log with the user (`DROVER_ACTOR`) and source
/// `cli`; `drover audit list` shows them newest first, filters and pages, and refuses a bad
/// filter before connecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_list_shows_operator_commands_with_their_user() {
    let Some(db) = TestDb::migrated("audit_list_shows_operator_commands_with_their_user").await
    else {
        return;
    };
    db.enqueue("noop", "{}", &["--queue", "mail"]).await;
    for args in [
        &["queues", "pause", "mail"][..],
        &["queues", "resume", "mail"],
        &["limits", "set", "kind:noop", "--max-running", "2"],
        &["limits", "clear", "kind:noop"],
        &["prune", "--older-than", "7d"],
    ] {
        let out = db
            .command(args)
            .env("DROVER_ACTOR", "alice")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    // A refused command records nothing.
    db.fails(&["limits", "clear", "kind:noop"]).await;

    let page = db.json(&["audit", "list"]).await;
    let entries = page["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "jobs.prune",
            "limit.clear",
            "limit.set",
            "queue.resume",
            "queue.pause"
        ],
        "{page}"
    );
    for entry in entries {
        assert_eq!(entry["actor"], "alice", "{entry}");
        assert_eq!(entry["source"], "cli", "{entry}");
    }
    assert_eq!(entries[2]["target"]["limit"], "kind:noop");
    assert_eq!(entries[2]["target"]["max_running"], 2);
    assert_eq!(entries[4]["target"]["queue"], "mail");

    let paused = db.json(&["audit", "list", "--action", "queue.pause"]).await;
    assert_eq!(paused["entries"].as_array().unwrap().len(), 1, "{paused}");
    let none = db.json(&["audit", "list", "--source", "api"]).await;
    assert_eq!(none["entries"], serde_json::json!([]), "{none}");
    let first = db.json(&["audit", "list", "--limit", "3"]).await;
    let next = first["next"].as_i64().unwrap_or_else(|| panic!("{first}"));
    let rest = db
        .json(&["audit", "list", "--before", &next.to_string()])
        .await;
    assert_eq!(rest["entries"].as_array().unwrap().len(), 2, "{rest}");
    assert!(rest["next"].is_null(), "{rest}");

    let table = db.ok(&["audit", "list"]).await;
    assert!(
        table.contains("alice") && table.contains("queue.pause") && table.contains("5 record(s)"),
        "{table}"
    );
    let bad = db
        .usage_error(&["audit", "list", "--action", "job.remove"])
        .await;
    assert!(bad.contains("--action"), "{bad}");
}

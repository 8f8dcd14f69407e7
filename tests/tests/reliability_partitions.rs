//! The simulator's checker (`drover_sim::check`, docs/simulation.md) on a run of real
//! processes on PostgreSQL: `drover-test-worker worker` processes on worker hosts of their own
//! (network namespaces joined by veth pairs with link-local addresses,
//! `reliability_support::netns`), the test's own PostgreSQL listening on this side of the
//! links (`reliability_support::private_pg`), producers enqueuing over the HTTP API of a
//! `drover-test-worker serve` process, an operator pausing and resuming a queue over it, and a
//! seeded fault schedule: SIGKILL of a worker (restarted after a moment), SIGSTOP past its
//! lease (then SIGCONT), a host's link cut (then healed), PostgreSQL restarted `fast` or
//! `immediate`. After the faults stop, every job must end; then the history, recorded from the
//! store's, the clients' and the handlers' side (`reliability_support::history`), goes
//! through the same checker as the simulator's, and through the reliability audit: 0
//! violations.
//!
//! Length: `DROVER_PARTITION_RUN_SECS` of faults (60 by default; the figures in RELIABILITY.md
//! are from 600), producers at `DROVER_PARTITION_RATE` jobs per second in all (250), the fault
//! schedule from `DROVER_PARTITION_SEED` (printed; random by default); `DROVER_PARTITION_PROGRESS`
//! prints the queued and running jobs per queue before each fault. Needs root for the
//! namespaces: without, it prints `SKIPPED ...` and passes unless `DROVER_REQUIRE_NETNS` is set
//! (`.ci/run`), when it fails; PostgreSQL binaries as the other private-instance tests.

mod reliability_support;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use drover_core::{JobId, JobState, JobStore, LimitKey, LimitPolicy};
use drover_sim::history::{Answer, EnqueueAns, EnqueueReq};
use drover_sim::Ev;
use drover_store_postgres::sqlx::types::Uuid;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reliability_support::history::{self, ClientLog};
use reliability_support::netns::{Host, Hosts};
use reliability_support::private_pg::PrivatePg;
use reliability_support::{audit, test_worker_bin, Db, Instrument, WorkerProcess};
use rustix::process::Signal;
use tokio_util::sync::CancellationToken;

/// Deadline of any wait on the loaded 2-core CI machine.
const WAIT: Duration = Duration::from_secs(300);

/// Worker hosts, each with one worker process.
const HOSTS: usize = 3;

/// The queues producers pick from; the operator pauses and resumes `reports`, and `mail` is
/// limited to six jobs running at once.
const QUEUES: [&str; 3] = ["default", "mail", "reports"];

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
        })
        .unwrap_or(default)
}

/// The worker on one host.
struct Worker {
    name: String,
    process: WorkerProcess,
}

fn spawn_worker(host: &Host, db: &Db) -> WorkerProcess {
    let args = [
        "worker",
        "--lease",
        "2s",
        "--heartbeat",
        "500ms",
        "--rescue-interval",
        "500ms",
        "--slots",
        "8",
        "--queue",
        "default",
        "--queue",
        "mail",
        "--queue",
        "reports",
    ];
    let mut command = host.command(&test_worker_bin());
    command
        .args(args)
        .env(
            "DROVER_DATABASE_URL",
            db.url.replacen("127.0.0.1", &host.gateway, 1),
        )
        .env_remove("RUST_LOG")
        .env("DROVER_MAX_PENDING", "0")
        .env("DROVER_MAX_TENANT_PENDING", "0")
        .env_remove("DROVER_MAX_CONCURRENT")
        .stdin(Stdio::null());
    WorkerProcess::spawn(command, &args)
}

/// One producer: enqueues `record` jobs over HTTP at `per_second`, each with an idempotency
/// key and retried until answered (a restart answers 503); every answer goes into the log.
/// Returns the answers that were neither an acknowledgement nor a 503.
async fn produce(
    api: String,
    name: String,
    per_second: f64,
    seed: u64,
    log: ClientLog,
    stop: CancellationToken,
) -> Vec<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("an HTTP client");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut unexpected = Vec::new();
    let mut n = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.is_cancelled() {
        tick.tick().await;
        n += 1;
        let key = format!("{name}-{n}");
        let queue = QUEUES[rng.gen_range(0..QUEUES.len())];
        let ms: u64 = rng.gen_range(0..20);
        // One job in 40 holds one of five unique keys: a second live one is a duplicate.
        let unique = (rng.gen_range(0..40) == 0).then(|| format!("u{}", rng.gen_range(0..5)));
        let mut body = serde_json::json!({
            "kind": "record",
            // Fenced: a run whose lease is gone records nothing (RELIABILITY.md, "What Drover
            // does not guarantee": a stalled handler's unfenced effect may land late).
            "args": {"ms": ms, "fenced": true},
            "queue": queue,
            "max_attempts": 25,
        });
        if let Some(u) = &unique {
            body["unique_key"] = serde_json::json!(u);
        }
        let req = EnqueueReq {
            tag: key.clone(),
            queue: queue.to_owned(),
            key: Some(key.clone()),
            unique,
            priority: 0,
            delay_ms: 0,
            max_attempts: 25,
            depends_on: Vec::new(),
            run_regardless: false,
            limit_keys: Vec::new(),
            kind: "record".to_owned(),
        };
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let answer = client
                .post(format!("{api}/v1/jobs"))
                .header("Idempotency-Key", &key)
                .json(&body)
                .send()
                .await;
            let status = answer.as_ref().map(|a| a.status().as_u16()).ok();
            match (answer, status) {
                (Ok(answer), Some(200 | 202)) => {
                    let body: serde_json::Value = answer.json().await.expect("a JSON answer");
                    let ans = EnqueueAns {
                        job: JobId(
                            body["job"]["id"]
                                .as_str()
                                .and_then(|id| Uuid::parse_str(id).ok())
                                .expect("the job's id"),
                        ),
                        status: body["status"].as_str().unwrap_or_default().to_owned(),
                        state: JobState::from_str(body["job"]["state"].as_str().unwrap_or("?"))
                            .expect("the job's state"),
                    };
                    log.record(
                        &name,
                        Ev::Enqueue {
                            jobs: vec![req.clone()],
                            fault: None,
                            answer: Answer::Ok(vec![ans]),
                        },
                    );
                    break;
                }
                (Ok(_), Some(503)) => {}
                (Ok(answer), _) => {
                    let status = answer.status();
                    let text = answer.text().await.unwrap_or_default();
                    unexpected.push(format!("{key}: {status} {text}"));
                    break;
                }
                // The API process stays up: a transport error is a timeout (a request stuck
                // behind a cut connection of the API's pool); the key makes a retry safe.
                (Err(_), _) => {}
            }
            if tokio::time::Instant::now() > deadline {
                unexpected.push(format!("{key}: never answered within {WAIT:?}"));
                break;
            }
            // Back off before retrying, as a client should.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    unexpected
}

/// Pauses or resumes `reports` over HTTP until answered; records the pause at its answer (it
/// holds from then on) and the resume when sent (claims may start from then on).
async fn pause_or_resume(client: &reqwest::Client, api: &str, log: &ClientLog, pause: bool) {
    let action = if pause { "pause" } else { "resume" };
    let sent = log.now();
    loop {
        let answer = client
            .post(format!("{api}/v1/queues/reports/{action}"))
            .send()
            .await;
        if let Ok(answer) = answer {
            if answer.status().is_success() {
                let body: serde_json::Value = answer.json().await.expect("a JSON answer");
                let changed = body["changed"].as_bool().expect("changed");
                if pause {
                    let ev = Ev::QueuePause {
                        queue: "reports".into(),
                        fault: None,
                        answer: Answer::Ok(changed),
                    };
                    log.record("operator", ev);
                } else {
                    let ev = Ev::QueueResume {
                        queue: "reports".into(),
                        fault: None,
                        answer: Answer::Ok(changed),
                    };
                    log.record_at(sent, "operator", ev);
                }
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The operator: pauses `reports` for 0.5-3 s every 3-10 s; leaves it resumed.
async fn operate(api: String, seed: u64, log: ClientLog, stop: CancellationToken) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("an HTTP client");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    while !stop.is_cancelled() {
        let wait = Duration::from_millis(rng.gen_range(3_000..10_000));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => break,
        }
        pause_or_resume(&client, &api, &log, true).await;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(500..3_000))).await;
        pause_or_resume(&client, &api, &log, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_frozen_and_partitioned_workers_and_postgres_restarts_break_no_rule() {
    const TEST: &str = "killed_frozen_and_partitioned_workers_and_postgres_restarts_break_no_rule";
    let run_secs = env_number("DROVER_PARTITION_RUN_SECS", 60);
    let rate = env_number("DROVER_PARTITION_RATE", 250).max(1);
    let seed = env_number("DROVER_PARTITION_SEED", rand::random::<u32>().into());
    eprintln!("{TEST}: seed {seed} (DROVER_PARTITION_SEED={seed} repeats the fault schedule), {run_secs} s of faults, {rate} jobs/s");

    let Some(hosts) = Hosts::create(TEST, HOSTS) else {
        return;
    };
    let Some(pg) = PrivatePg::start_listening(TEST, &hosts.gateways()).await else {
        return;
    };
    let db = Db::create(&pg.server(), TEST, Instrument::History).await;
    let log = ClientLog::new();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);

    // `mail` runs at most six jobs at once, cluster-wide (about 120 jobs/s: above its share).
    let store = db.store().await;
    let policy = LimitPolicy::new(LimitKey::parse("queue:mail").unwrap(), Some(6), None).unwrap();
    store.limit_set(policy).await.expect("set the mail limit");
    store.close().await;
    log.record(
        "operator",
        Ev::LimitSet {
            key: "queue:mail".into(),
            max_running: Some(6),
            rate: None,
            fault: None,
            answer: Answer::Ok(()),
        },
    );

    let mut workers = Vec::new();
    for (k, host) in hosts.hosts.iter().enumerate() {
        let process = spawn_worker(host, &db);
        process.worker_started().await;
        let name = format!("w{k}");
        log.record(&name, Ev::WorkerStart);
        workers.push(Worker { name, process });
    }
    let api_process = db.spawn(&["serve", "--insecure-no-auth", "--listen", "127.0.0.1:0"]);
    let line = api_process
        .wait_for_line("API on http://", Duration::from_secs(60))
        .await;
    let api = line
        .split("API on ")
        .nth(1)
        .and_then(|rest| rest.split("/v1").next())
        .expect("the API's address")
        .to_owned();

    let stop = CancellationToken::new();
    let producers: Vec<_> = (0..2)
        .map(|p| {
            tokio::spawn(produce(
                api.clone(),
                format!("producer{p}"),
                rate as f64 / 2.0,
                seed.wrapping_add(p + 1),
                log.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let operator = tokio::spawn(operate(
        api.clone(),
        seed.wrapping_add(9),
        log.clone(),
        stop.clone(),
    ));

    // The fault schedule: one fault at a time, 1-4 s apart.
    let mut faults: BTreeMap<&str, u32> = BTreeMap::new();
    let mut fault_log: Vec<String> = Vec::new();
    let end = tokio::time::Instant::now() + Duration::from_secs(run_secs);
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(1_000..4_000))).await;
        for worker in &mut workers {
            assert!(
                worker.process.is_running(),
                "{} exited on its own: {}",
                worker.name,
                worker.process.stderr()
            );
        }
        if std::env::var_os("DROVER_PARTITION_PROGRESS").is_some() {
            let per_queue: Vec<String> = drover_store_postgres::sqlx::query_scalar(
                "SELECT concat_ws(' ', queue, state, count(*)) FROM drover.jobs \
                 WHERE state IN ('queued', 'running') GROUP BY queue, state ORDER BY 1",
            )
            .fetch_all(db.pool())
            .await
            .unwrap_or_default();
            eprintln!("{} {}", chrono::Utc::now(), per_queue.join(", "));
        }
        let k = rng.gen_range(0..HOSTS);
        let roll = rng.gen_range(0..100);
        fault_log.push(format!("{} roll {roll} host {k}", chrono::Utc::now()));
        let worker = &mut workers[k];
        let host = &hosts.hosts[k];
        if roll < 30 {
            *faults.entry("SIGKILL of a worker").or_default() += 1;
            worker.process.signal(Signal::KILL);
            worker.process.wait_exit(WAIT).await;
            log.record(&worker.name, Ev::WorkerCrash);
            tokio::time::sleep(Duration::from_millis(rng.gen_range(200..2_000))).await;
            worker.process = spawn_worker(host, &db);
            log.record(&worker.name, Ev::WorkerStart);
        } else if roll < 55 {
            *faults
                .entry("SIGSTOP of a worker past its lease")
                .or_default() += 1;
            worker.process.signal(Signal::STOP);
            log.record(&worker.name, Ev::WorkerPause);
            tokio::time::sleep(Duration::from_millis(rng.gen_range(2_500..5_000))).await;
            worker.process.signal(Signal::CONT);
            log.record(&worker.name, Ev::WorkerUnpause);
        } else if roll < 80 {
            *faults
                .entry("network partition of a worker host")
                .or_default() += 1;
            host.partition();
            log.record(&worker.name, Ev::Partition);
            tokio::time::sleep(Duration::from_millis(rng.gen_range(2_500..6_000))).await;
            host.heal();
            log.record(&worker.name, Ev::Heal);
        } else {
            let mode = if rng.gen_bool(0.5) {
                "fast"
            } else {
                "immediate"
            };
            *faults
                .entry(if mode == "fast" {
                    "PostgreSQL restart (fast)"
                } else {
                    "PostgreSQL restart (immediate: a crash)"
                })
                .or_default() += 1;
            pg.restart(mode).await;
            log.record("postgres", Ev::DatabaseRestart { mode: mode.into() });
        }
    }
    log.record("sim", Ev::Quiet);

    stop.cancel();
    let mut unexpected = Vec::new();
    for producer in producers {
        unexpected.extend(producer.await.expect("a producer panicked"));
    }
    operator.await.expect("the operator panicked");
    assert!(
        unexpected.is_empty(),
        "answers other than an acknowledgement or 503:\n{}",
        unexpected.join("\n")
    );

    let deadline = tokio::time::Instant::now() + WAIT;
    while db.live().await > 0 {
        if tokio::time::Instant::now() > deadline {
            let stuck: Vec<String> = drover_store_postgres::sqlx::query_scalar(
                "SELECT concat_ws(' ', id, queue, state, 'attempt', attempt, 'token', fencing_token, \
                 'owner', lease_owner, 'lease', lease_expires_at, 'run_at', run_at, 'now', now(), \
                 'started', started_at, 'errors', errors::text) \
                 FROM drover.jobs WHERE state NOT IN ('succeeded', 'failed', 'cancelled') LIMIT 10",
            )
            .fetch_all(db.pool())
            .await
            .unwrap();
            let activity: Vec<String> = drover_store_postgres::sqlx::query_scalar(
                "SELECT concat_ws(' | ', pid, application_name, client_addr, state, wait_event_type, \
                 wait_event, xact_start, backend_start, left(regexp_replace(query, '\\s+', ' ', 'g'), 120)) \
                 FROM pg_stat_activity WHERE datname = current_database()",
            )
            .fetch_all(db.pool())
            .await
            .unwrap();
            let per_queue: Vec<String> = drover_store_postgres::sqlx::query_scalar(
                "SELECT concat_ws(' ', queue, state, count(*), min(run_at)) FROM drover.jobs \
                 GROUP BY queue, state ORDER BY 1",
            )
            .fetch_all(db.pool())
            .await
            .unwrap();
            eprintln!(
                "stuck: per queue:\n{}\nsessions:\n{}\nfault log:\n{}",
                per_queue.join("\n"),
                activity.join("\n"),
                fault_log.join("\n")
            );
            let tails: Vec<String> = workers
                .iter()
                .map(|w| {
                    let text = w.process.stderr();
                    let lines: Vec<&str> = text.lines().collect();
                    format!(
                        "{}:\n{}",
                        w.name,
                        lines[lines.len().saturating_sub(15)..].join("\n")
                    )
                })
                .collect();
            panic!(
                "seed {seed}: jobs not terminal {WAIT:?} after the faults stopped ({:?}):\n{}\n{}",
                db.states().await,
                stuck.join("\n"),
                tails.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for worker in &mut workers {
        assert!(
            worker.process.is_running(),
            "{} exited on its own: {}",
            worker.name,
            worker.process.stderr()
        );
        log.record(&worker.name, Ev::WorkerStop);
        worker.process.stop(WAIT).await;
        log.record(
            &worker.name,
            Ev::WorkerExit {
                asked: true,
                error: None,
            },
        );
    }

    let checked = history::check(&db, &log, true).await;
    let ids: Vec<Uuid> = checked.jobs.iter().map(|j| j.id.as_uuid()).collect();
    let audited = audit(&db, &ids).await;
    let count = |name: &str| {
        checked
            .history
            .iter()
            .filter(|r| {
                matches!(
                    (&r.ev, name),
                    (Ev::Claim { .. }, "claims")
                        | (Ev::Rescue { .. }, "rescues")
                        | (Ev::Finish { .. }, "finishes")
                        | (Ev::HandlerStart { .. }, "handler starts")
                        | (Ev::QueuePause { .. }, "pauses")
                )
            })
            .count()
    };
    eprintln!(
        "{TEST}: seed {seed}: {} jobs ({:?}), {} history records: {} claims, {} finishes, {} rescues, {} handler starts, {} pauses of `reports`; {} jobs ran more than once; faults {faults:?}; {} violation(s)",
        checked.jobs.len(),
        audited.states,
        checked.history.len(),
        count("claims"),
        count("finishes"),
        count("rescues"),
        count("handler starts"),
        count("pauses"),
        audited.jobs_run_more_than_once,
        checked.violations.len()
    );
    assert!(
        checked.violations.is_empty(),
        "seed {seed}: the checker found {}",
        checked.report()
    );
    // The recorded history feeds the rules: altered in three ways, it fails them.
    let caught = |history: Vec<drover_sim::Record>, rule: &str| {
        let found = drover_sim::check(&history, &checked.jobs, true);
        assert!(
            found.iter().any(|v| v.rule == rule),
            "an altered history was not caught by {rule:?}: {found:?}"
        );
    };
    let mut lost_finish = checked.history.clone();
    let last = lost_finish
        .iter()
        .rposition(|r| matches!(r.ev, Ev::Finish { .. }))
        .expect("a finish");
    lost_finish.remove(last);
    caught(lost_finish, "the final state disagrees with the history");
    let mut repeated_claim = checked.history.clone();
    let first = repeated_claim
        .iter()
        .position(|r| matches!(r.ev, Ev::Claim { .. }))
        .expect("a claim");
    repeated_claim.insert(first + 1, repeated_claim[first].clone());
    caught(repeated_claim, "a fencing token did not increase");
    let mut stale_finish = checked.history.clone();
    let finish = stale_finish
        .iter_mut()
        .find_map(|r| match &mut r.ev {
            Ev::Finish { items, .. } => Some(items),
            _ => None,
        })
        .expect("a finish");
    finish[0].token = drover_core::FencingToken(finish[0].token.0 - 1);
    caught(
        stale_finish,
        "a finish was accepted with a stale fencing token",
    );
    if !audited.violations.is_empty() {
        // The history of the jobs the audit names, to see what happened to them.
        let named: std::collections::BTreeSet<JobId> = audited
            .violations
            .iter()
            .flat_map(|v| v.split([' ', ';', ',']))
            .filter_map(|word| Uuid::parse_str(word).ok())
            .map(JobId)
            .take(5)
            .collect();
        eprintln!(
            "history of the jobs the audit names:\n{}",
            drover_sim::history::cut(&checked.history, &named)
        );
    }
    audited.assert_clean();
    assert!(
        faults.len() >= 3 || run_secs < 30,
        "too few kinds of fault ran: {faults:?}"
    );
    drop(api_process);
    drop(hosts);
}

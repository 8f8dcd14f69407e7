//! Runs the `drover-bench` binary end to end with tiny sizes: on the memory store always, and
//! on PostgreSQL (worker processes included) when `DROVER_TEST_DATABASE_URL` is set; without it
//! the PostgreSQL test skips, unless `DROVER_REQUIRE_POSTGRES` is set, when it fails instead.
//! The PostgreSQL run uses its own database, `drover_bench_smoke`, on that server (dropped and
//! recreated by the bench, dropped again at the end). Asserts outcomes (every scenario measured,
//! figures present, files written), never timings.

use std::path::Path;
use std::process::Command;

use drover_store_postgres::sqlx::{self, ConnectOptions, Connection};
use drover_tests::postgres::{skip_or_fail, Server, URL_VAR};
use serde_json::Value;

const SMOKE_DATABASE: &str = "drover_bench_smoke";

/// Runs the binary with `args`; returns its stdout and the JSON file it wrote.
fn run_bench(args: &[&str], database_url: Option<&str>, dir: &Path) -> (String, Value) {
    let out = dir.join("result.json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_drover-bench"));
    command.args(args).arg("--out").arg(&out);
    if let Some(url) = database_url {
        command.env("DROVER_BENCH_DATABASE_URL", url);
    }
    let output = command.output().expect("drover-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "drover-bench failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    (stdout, file)
}

/// Checks the JSON lines and the file of a run of `store` with process scenarios `workers` x
/// `slots` (scenario `process_<w>w` at 32 slots, `process_<w>w_<s>s` otherwise).
fn check_run(stdout: &str, file: &Value, store: &str, workers: &[usize], slots: &[usize]) {
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut scenarios = vec![
        "enqueue_single".to_owned(),
        "enqueue_batch".to_owned(),
        "latency".to_owned(),
        "fan_out".to_owned(),
        "fan_out_streamed".to_owned(),
        "chain".to_owned(),
    ];
    for s in slots {
        scenarios.extend(workers.iter().map(|w| match s {
            32 => format!("process_{w}w"),
            _ => format!("process_{w}w_{s}s"),
        }));
    }
    assert_eq!(lines.len(), scenarios.len(), "{stdout}");
    for line in &lines {
        assert_eq!(line["system"], "drover");
        assert_eq!(line["store"], store);
        assert!(line.get("error").is_none(), "{line}");
        assert_eq!(line["quotas"], "off (Quotas::unbounded)");
    }
    let summary = file["summary"].as_array().unwrap();
    for scenario in &scenarios {
        let entry = summary
            .iter()
            .find(|s| s["store"] == store && s["scenario"] == scenario.as_str())
            .unwrap_or_else(|| panic!("no summary for {scenario}: {file}"));
        let figure = match scenario.as_str() {
            "enqueue_single" | "enqueue_batch" => &entry["enqueue_per_s"]["median"],
            "latency" | "chain" => &entry["latency"]["max_ms"],
            _ => &entry["process_per_s"]["median"],
        };
        assert!(
            figure.as_f64().is_some_and(|v| v >= 0.0),
            "{scenario}: {entry}"
        );
    }
    assert!(file["machine"]["nproc"].as_u64().unwrap() >= 1);
    assert!(
        stdout.contains("scenario"),
        "the table is printed: {stdout}"
    );
}

#[test]
fn urls_get_the_smoke_database() {
    assert_eq!(
        Server::from_url("postgres://u:p@h:5432/test?sslmode=disable").url("x_bench"),
        "postgres://u:p@h:5432/x_bench?sslmode=disable"
    );
}

#[test]
fn memory_run_measures_every_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, file) = run_bench(
        &[
            "--store",
            "memory",
            "--jobs",
            "400",
            "--reps",
            "1",
            "--latency-jobs",
            "5",
            "--latency-rate",
            "200",
            "--workers",
            "1,2",
            "--slots",
            "32,8",
            "--fan-out",
            "200",
            "--chain",
            "30",
        ],
        None,
        dir.path(),
    );
    check_run(&stdout, &file, "memory", &[1, 2], &[32, 8]);
    assert!(file["postgres"].is_null());
}

#[test]
fn postgres_run_measures_every_scenario_with_worker_processes() {
    let Some(server) = Server::from_env().or_else(|| {
        skip_or_fail(
            "postgres test of drover-bench",
            &format!("{URL_VAR} is not set"),
        )
    }) else {
        return;
    };
    let smoke_url = server.url(SMOKE_DATABASE);
    let dir = tempfile::tempdir().unwrap();
    let (stdout, file) = run_bench(
        &[
            "--store",
            "postgres",
            "--jobs",
            "300",
            "--reps",
            "1",
            "--latency-jobs",
            "5",
            "--latency-rate",
            "100",
            "--workers",
            "1,2",
            "--slots",
            "8",
            "--fan-out",
            "200",
            "--chain",
            "30",
        ],
        Some(&smoke_url),
        dir.path(),
    );
    check_run(&stdout, &file, "postgres", &[1, 2], &[8]);
    let settings = &file["postgres"]["settings"];
    assert!(settings["fsync"].is_string(), "{file}");
    assert!(settings["synchronous_commit"].is_string(), "{file}");
    assert!(file["postgres"]["version"]
        .as_str()
        .unwrap()
        .starts_with("PostgreSQL"));

    // Leave no database behind.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut admin = server.admin.connect().await.unwrap();
        sqlx::raw_sql(&format!(
            "DROP DATABASE IF EXISTS {SMOKE_DATABASE} WITH (FORCE)"
        ))
        .execute(&mut admin)
        .await
        .unwrap();
        admin.close().await.unwrap();
    });
}

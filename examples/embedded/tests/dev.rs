//! The embedded example binary `shop-jobs` (docs/embedding.md) run for real: its own typed
//! handler works its jobs in the development mode, a job whose args do not match the typed
//! args fails at once without a retry, and the binary carries every `drover` command.
//!
//! Being an integration test of this package, it also makes `cargo test --workspace` build
//! `target/<profile>/shop-jobs`.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn shop_jobs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shop-jobs"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DROVER_DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run shop-jobs")
}

#[test]
fn dev_runs_the_typed_handler_and_fails_bad_args_without_retry() {
    let out = shop_jobs(&["dev", "--jobs", "jobs.jsonl", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    let render = &summary["kinds"]["invoice.render"];
    assert_eq!(render["jobs"], 4, "{summary}");
    assert_eq!(render["succeeded"], 3, "{summary}");
    assert_eq!(
        render["failed"], 1,
        "the line with a string invoice_id: {summary}"
    );
    assert_eq!(render["retried"], 0, "bad args are not retried: {summary}");
    assert_eq!(summary["total"], 4);
    assert_eq!(summary["unfinished"], 0);
}

#[test]
fn the_application_binary_has_every_drover_command() {
    let out = shop_jobs(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for command in [
        "migrate", "worker", "enqueue", "jobs", "queues", "workers", "dev", "serve",
    ] {
        assert!(help.contains(command), "{command} missing:\n{help}");
    }
    // Errors come out as the stock binary's: one line, non-zero exit.
    let out = shop_jobs(&[
        "--database-url",
        "postgres://nobody@127.0.0.1:1/x",
        "worker",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot reach the database"), "{stderr}");
}

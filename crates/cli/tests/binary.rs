//! The `drover` binary without PostgreSQL: `--help` of every command carries an example,
//! shell completions, the one-line errors for an unreachable or missing database, a closed
//! stdout, and `drover dev` (the in-memory development mode) on the example job files.
//!
//! Being an integration test of this crate, it also makes `cargo test --workspace` build
//! `target/<profile>/drover`, which the end-to-end tests in `tests/` run against PostgreSQL.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use clap::CommandFactory;
use serde_json::Value;

fn drover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(args)
        .env_remove("DROVER_DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run drover")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A file of the workspace's `examples/` folder.
fn example(name: &str) -> String {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", "examples", name]
        .iter()
        .collect();
    path.to_str().expect("UTF-8 path").to_owned()
}

/// Every command path of the grammar: `["jobs", "list"]`, `["migrate"]`, ...
fn command_paths(command: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
    for sub in command.get_subcommands() {
        let mut path = prefix.to_vec();
        path.push(sub.get_name().to_owned());
        if sub.has_subcommands() {
            command_paths(sub, &path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn help_of_every_command_has_an_example() {
    let mut paths = Vec::new();
    command_paths(&drover_cli::args::Cli::command(), &[], &mut paths);
    assert!(paths.len() >= 24, "{paths:?}");
    let mut seen = Vec::new();
    for path in std::iter::once(Vec::new()).chain(paths) {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = drover(&args);
        assert!(
            out.status.success(),
            "drover {args:?}: {}",
            text(&out.stderr)
        );
        let help = text(&out.stdout);
        assert!(
            help.contains("Example"),
            "drover {args:?} has no example:\n{help}"
        );
        assert!(help.contains("drover "), "{help}");
        seen.push(path.join(" "));
    }
    for command in [
        "migrate",
        "migrations list",
        "worker",
        "enqueue",
        "jobs list",
        "jobs get",
        "jobs cancel",
        "jobs retry",
        "queues list",
        "queues pause",
        "queues resume",
        "workers list",
        "limits list",
        "limits set",
        "limits clear",
        "schedules list",
        "schedules add",
        "schedules remove",
        "snapshot",
        "metrics",
        "prune",
        "serve",
        "dev",
        "completions",
    ] {
        assert!(
            seen.iter().any(|s| s == command),
            "{command} missing: {seen:?}"
        );
    }
}

#[test]
fn help_never_shows_the_database_url_from_the_environment() {
    let out = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["jobs", "list", "--help"])
        .env("DROVER_DATABASE_URL", "postgres://app:s3cret-pw@db/app")
        .output()
        .expect("run drover");
    assert!(out.status.success());
    assert!(
        !text(&out.stdout).contains("s3cret-pw"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn completions_print_a_script() {
    let out = drover(&["completions", "bash"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    assert!(script.contains("_drover()"), "{script}");
    assert!(script.contains("complete -F _drover"), "{script}");
    assert!(script.contains("worker") && script.contains("--allow-exec"));
    for shell in ["zsh", "fish"] {
        let out = drover(&["completions", shell]);
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
}

/// `--json` (a global flag) on a command whose output has one fixed format is a usage error,
/// wherever it stands on the line, not a flag silently ignored.
#[test]
fn json_is_refused_where_the_output_has_one_format() {
    for args in [
        &["metrics", "--json"][..],
        &["--json", "metrics"],
        &["completions", "bash", "--json"],
        &["--json", "completions", "zsh"],
    ] {
        let out = drover(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with("drover: --json does not apply to "),
            "{args:?}: {stderr}"
        );
    }
}

/// Checks one line `drover: ...` on stderr, nothing on stdout, exit code 1, and no panic.
fn one_line_failure(out: &Output) -> String {
    one_line_exiting(out, 1)
}

/// Checks one line `drover: ...` on stderr, nothing on stdout, exit code 2 (a usage error,
/// as clap's own), and no panic.
fn one_line_usage_error(out: &Output) -> String {
    one_line_exiting(out, 2)
}

fn one_line_exiting(out: &Output, code: i32) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("drover: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn unreachable_database_is_one_clear_line_and_a_non_zero_exit() {
    let out = drover(&[
        "--database-url",
        "postgres://nobody@127.0.0.1:1/x",
        "jobs",
        "list",
    ]);
    let line = one_line_failure(&out);
    assert!(
        line.contains("cannot reach the database at 127.0.0.1:1/x"),
        "{line}"
    );
    assert!(line.contains("check --database-url"), "{line}");

    // The same from DROVER_DATABASE_URL, for a worker; the password never shows.
    let out = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["worker", "--slots", "1"])
        .env(
            "DROVER_DATABASE_URL",
            "postgres://nobody:s3cret-pw@127.0.0.1:1/x",
        )
        .env_remove("RUST_LOG")
        .output()
        .expect("run drover");
    let line = one_line_failure(&out);
    assert!(line.contains("cannot reach"), "{line}");
    assert!(!line.contains("s3cret-pw"), "{line}");

    // A URL that is not one is a usage error (exit code 2), like any bad flag value.
    let out = drover(&["--database-url", "not a url", "snapshot"]);
    let line = one_line_usage_error(&out);
    assert!(line.contains("--database-url"), "{line}");

    // Another scheme is refused before connecting (the driver would read it as PostgreSQL's);
    // the URL (it may hold a password) is not echoed.
    for url in [
        "mysql://root:s3cret-pw@127.0.0.1:5432/test",
        "garbage://x",
        "127.0.0.1:5432/test",
    ] {
        let out = drover(&["--database-url", url, "jobs", "list"]);
        let line = one_line_usage_error(&out);
        assert!(
            line.contains("--database-url (or DROVER_DATABASE_URL)")
                && line.contains("postgres://"),
            "{url}: {line}"
        );
        assert!(!line.contains("s3cret-pw"), "{line}");
    }
}

#[test]
fn no_database_says_how_to_give_one() {
    for args in [
        &["jobs", "list"][..],
        &["migrate"],
        &["worker"],
        &["enqueue", "noop"],
    ] {
        let out = drover(args);
        // A setting the command needs is missing: a usage error, as a missing argument is.
        let line = one_line_usage_error(&out);
        assert!(
            line.contains("--database-url")
                && line.contains("DROVER_DATABASE_URL")
                && line.contains("drover dev"),
            "{args:?}: {line}"
        );
    }
}

#[test]
fn a_delay_past_the_bound_names_the_bound_in_days() {
    // humantime's year is 365.25 days; the bound is 100 years of 365 days, so "100y" is just
    // past it and the message must not read as a contradiction.
    let out = drover(&["enqueue", "noop", "--delay", "100y"]);
    let line = one_line_usage_error(&out);
    assert!(
        line.contains("invalid --delay: must be at most 36500 days"),
        "{line}"
    );
    assert!(line.contains("got 36525.00 days"), "{line}");
}

#[test]
fn usage_errors_exit_2() {
    let out = drover(&["jobs", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let out = drover(&["enqueue", "--file", "jobs.jsonl", "--queue", "mail"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "per-job flags do not apply to --file"
    );
    assert!(text(&out.stderr).contains("cannot be used with"));
    let out = drover(&["worker", "--lease", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("30s"), "{}", text(&out.stderr));
    // Sizes out of range are refused before anything is built or connected (a pool sized for
    // 10^10 slots once aborted the process allocating its database pool).
    for (flag, value, range) in [
        ("--slots", "10000000000", "between 1 and 10000"),
        ("--prefetch", "10001", "between 0 and 10000"),
        ("--db-connections", "0", "between 1 and 10000"),
        ("--db-connections", "4000000000", "between 1 and 10000"),
    ] {
        let out = drover(&[
            "--database-url",
            "postgres://nobody@127.0.0.1:1/x",
            "worker",
            flag,
            value,
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(range),
            "{flag} {value}: {stderr}"
        );
    }
    // Every flag value checked after clap parsed the command line is a usage error too (exit
    // code 2, as clap's own), found before connecting (the database URL here would refuse a
    // connection: exit code 1), with a message naming the flag and its rule. Values that may
    // be secrets (JSON args, a database URL) are not quoted.
    let url = "postgres://nobody@127.0.0.1:1/x";
    for (args, needles) in [
        (
            &["worker", "--pool", "long:reports:0"][..],
            &["--pool", "SLOTS must be between 1 and 10000"][..],
        ),
        (
            &["worker", "--pool", ":reports:1"],
            &["--pool", "NAME must not be empty"],
        ),
        (
            &["worker", "--max-concurrent", "0"],
            &["--max-concurrent", "between 1 and 1000000"],
        ),
        (
            &["worker", "--queue", "bad queue"],
            &["--queue", "may contain only"],
        ),
        (
            &["worker", "--queue", "q", "--queue", "q"],
            &["--queue", "lists queue q twice"],
        ),
        (
            &["worker", "--lease", "10ms"],
            &["--lease", "between 100 ms and 86400 s"],
        ),
        (
            &["worker", "--lease", "10s"],
            &["--heartbeat 15s (the default) must be at most a third of --lease 10s"],
        ),
        (
            &["worker", "--heartbeat", "30s"],
            &[
                "--heartbeat 30s must be at most a third of --lease 1m (the default) (at most 20s)",
                "one late heartbeat can let the lease expire",
            ],
        ),
        (
            &[
                "serve",
                "--insecure-no-auth",
                "--worker",
                "--lease",
                "2s",
                "--heartbeat",
                "1s",
            ],
            &["--heartbeat 1s must be at most a third of --lease 2s"],
        ),
        (
            &["dev", "--lease", "90s", "--heartbeat", "31s"],
            &["--heartbeat 31s must be at most a third of --lease 1m 30s"],
        ),
        (
            &["worker", "--heartbeat", "0s"],
            &["--heartbeat", "longer than zero"],
        ),
        (
            &["worker", "--warn-dead-rows", "1.5"],
            &["--warn-dead-rows", "from 0 to 1"],
        ),
        (
            &["worker", "--warn-dead-rows", "half"],
            &["--warn-dead-rows", "from 0 to 1"],
        ),
        (
            &["worker", "--warn-transaction-age", "soon"],
            &["--warn-transaction-age", "30s"],
        ),
        (
            &["migrate", "--lock-timeout", "0s"],
            &["--lock-timeout", "between 1 ms and 60 s"],
        ),
        (
            &["migrate", "--lock-timeout", "2m"],
            &["--lock-timeout", "between 1 ms and 60 s"],
        ),
        (
            &["migrate", "--lock-budget", "soon"],
            &["--lock-budget", "30s"],
        ),
        (
            &["worker", "--poll-interval", "0s"],
            &["--poll-interval", "longer than zero"],
        ),
        (
            &["worker", "--rescue-interval", "0s"],
            &["--rescue-interval", "longer than zero"],
        ),
        (
            &["worker", "--retention", "0s"],
            &["--retention", "longer than zero"],
        ),
        (
            &["worker", "--prune-limit", "0"],
            &["--prune-limit", "between 1 and 100000"],
        ),
        (
            &["worker", "--pool", "a:q:1:email.send"],
            &["--pool", "email.send, which has no registered handler"],
        ),
        (
            &["worker", "--pool", "a:q:1", "--pool", "a:r:1"],
            &["--pool", "defined twice"],
        ),
        (
            &["serve", "--worker", "--max-concurrent", "0"],
            &["--max-concurrent", "between 1 and 1000000"],
        ),
        (
            &["serve", "--insecure-no-auth", "--max-body-bytes", "0"],
            &["--max-body-bytes", "between 1024 and 1073741824"],
        ),
        (
            &[
                "serve",
                "--insecure-no-auth",
                "--max-body-bytes",
                "2000000000",
            ],
            &["--max-body-bytes", "between 1024 and 1073741824"],
        ),
        (
            &["enqueue", "noop", "--max-attempts", "0"],
            &["--max-attempts", "between 1 and 1000"],
        ),
        (
            &["enqueue", "noop", "--priority", "40000"],
            &["--priority", "between -32768 and 32767"],
        ),
        (&["enqueue", "bad kind"], &["KIND", "may contain only"]),
        (
            &["enqueue", "noop", "--queue", "a b"],
            &["--queue", "may contain only"],
        ),
        (
            &["enqueue", "noop", "--args", "{\"password\": \"s3cret-pw\""],
            &["--args", "not valid JSON"],
        ),
        (&["enqueue", "noop", "--meta", "[1]"], &["--meta", "object"]),
        (
            &["enqueue", "noop", "--run-at", "tomorrow"],
            &["--run-at", "RFC 3339"],
        ),
        (
            &["enqueue", "noop", "--limit-key", "a b"],
            &["--limit-key", "may contain only"],
        ),
        (
            &["enqueue", "--file", "jobs.jsonl", "--batch-size", "0"],
            &["--batch-size", "between 1 and 10000"],
        ),
        (
            &["jobs", "list", "--limit", "0"],
            &["--limit", "between 1 and 1000"],
        ),
        (
            &["jobs", "list", "--state", "sleeping"],
            &["--state", "must be one of"],
        ),
        (
            &["jobs", "list", "--kind", "bad kind"],
            &["--kind", "may contain only"],
        ),
        (&["jobs", "list", "--meta", "[1]"], &["--meta", "object"]),
        (&["jobs", "list", "--before", "nope"], &["--before", "UUID"]),
        (&["jobs", "get", "nope"], &["<ID>", "UUID"]),
        (&["jobs", "cancel", "nope"], &["<ID>", "UUID"]),
        (&["jobs", "retry", "nope"], &["<ID>", "UUID"]),
        (
            &["queues", "pause", "bad name"],
            &["<NAME>", "may contain only"],
        ),
        (
            &["queues", "resume", "bad name"],
            &["<NAME>", "may contain only"],
        ),
        (&["limits", "set", "k"], &["--max-running", "--rate"]),
        (
            &["limits", "set", "k", "--rate", "5/x"],
            &["--rate", "period unit"],
        ),
        (
            &["limits", "set", "k", "--max-running", "1000001"],
            &["--max-running", "between 0 and 1000000"],
        ),
        (
            &["limits", "set", "bad key", "--max-running", "1"],
            &["<KEY>", "may contain only"],
        ),
        (
            &["limits", "clear", "bad key"],
            &["<KEY>", "may contain only"],
        ),
        (
            &[
                "schedules",
                "add",
                "n",
                "--cron",
                "not cron",
                "--kind",
                "noop",
            ],
            &["--cron", "5 fields"],
        ),
        (
            &[
                "schedules",
                "add",
                "n",
                "--cron",
                "0 0 30 2 *",
                "--kind",
                "noop",
            ],
            &["--cron", "never fires"],
        ),
        (
            &[
                "schedules",
                "add",
                "n",
                "--cron",
                "@daily",
                "--kind",
                "noop",
                "--timezone",
                "Mars/Base",
            ],
            &["--timezone", "IANA"],
        ),
        (
            &[
                "schedules",
                "add",
                "n",
                "--cron",
                "@daily",
                "--kind",
                "noop",
                "--max-attempts",
                "0",
            ],
            &["--max-attempts", "between 1 and 1000"],
        ),
        (
            &[
                "schedules",
                "add",
                "n",
                "--cron",
                "@daily",
                "--kind",
                "noop",
                "--priority",
                "40000",
            ],
            &["--priority", "between -32768 and 32767"],
        ),
        (
            &[
                "schedules",
                "add",
                "bad name",
                "--cron",
                "@daily",
                "--kind",
                "noop",
            ],
            &["<NAME>", "may contain only"],
        ),
        (
            &["schedules", "remove", "bad name"],
            &["<NAME>", "may contain only"],
        ),
        (
            &["prune", "--batch", "0"],
            &["--batch", "between 1 and 100000"],
        ),
    ] {
        let mut all = vec!["--database-url", url];
        all.extend_from_slice(args);
        let out = drover(&all);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{args:?} should name {needle:?}: {stderr}"
            );
        }
        assert!(!stderr.contains("s3cret-pw"), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("cannot reach"),
            "checked before connecting: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // The quotas of the environment are settings like DROVER_MAX_CONCURRENT (read by clap).
    for (var, value) in [
        ("DROVER_MAX_PENDING", "lots"),
        ("DROVER_MAX_CONCURRENT", "0"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_drover"))
            .args(["--database-url", url, "worker"])
            .env(var, value)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("run drover");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {stderr}");
        assert!(stderr.contains(var), "the error names {var}: {stderr}");
    }
    // --tokens and --insecure-no-auth contradict each other.
    let out = drover(&["serve", "--insecure-no-auth", "--tokens", "/dev/null"]);
    let line = one_line_usage_error(&out);
    assert!(line.contains("contradict each other"), "{line}");

    // --allow-exec must name an executable regular file: a directory is refused at start-up
    // (it was accepted, and allowed nothing a job could run), by every command that takes it.
    for command in [
        &["worker"][..],
        &["dev"],
        &["serve", "--worker", "--insecure-no-auth"],
    ] {
        for (path, rule) in [
            ("/bin/", "not a directory"),
            ("/no/such/program", "no file is there"),
        ] {
            let mut args = command.to_vec();
            args.extend(["--allow-exec", path]);
            let out = drover(&args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(
                stderr.contains("--allow-exec")
                    && stderr.contains("must name an executable program file")
                    && stderr.contains(rule),
                "{args:?}: {stderr}"
            );
        }
    }

    // A bare program name would be searched in PATH: refused before anything starts.
    let out = drover(&["worker", "--allow-exec", "sh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--allow-exec")
            && text(&out.stderr).contains("a bare name would be searched in PATH"),
        "{}",
        text(&out.stderr)
    );
}

/// Runs `drover ARGS` (no database URL, no API tokens), killing it if it has not exited
/// within a minute: its exit status (`None` when it had to be killed) and stderr.
fn run_bounded(args: &[&str]) -> (Option<std::process::ExitStatus>, String) {
    use std::sync::mpsc;
    use std::time::Duration;
    let child = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(args)
        .env_remove("DROVER_DATABASE_URL")
        .env_remove("DROVER_API_TOKENS")
        .env_remove("DROVER_MAX_CONCURRENT")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run drover");
    let pid = child.id().to_string();
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output().expect("wait for drover");
        let _ = done_tx.send(());
        out
    });
    let killed = done_rx.recv_timeout(Duration::from_secs(60)).is_err();
    if killed {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    }
    let out = waiter.join().unwrap();
    ((!killed).then_some(out.status), text(&out.stderr))
}

#[test]
fn serve_refuses_worker_flags_without_worker_and_dev_refuses_database_flags() {
    // Without --worker, serve runs no worker: a worker flag would be ignored without a word
    // (`--allow-exec` looked like exec was on). Refused before anything listens.
    let serve = ["serve", "--insecure-no-auth", "--listen", "127.0.0.1:0"];
    for extra in [
        &["--allow-exec", "/bin/sh"][..],
        &["--queue", "mail"],
        &["--slots", "8"],
        &["--slots", "2", "--pool", "long:reports:1", "--lease", "2m"],
        &["--max-concurrent", "4"],
        &["--metrics-listen", "127.0.0.1:0"],
        &["--shutdown-grace", "1s"],
    ] {
        let mut args = serve.to_vec();
        args.extend_from_slice(extra);
        let (status, stderr) = run_bounded(&args);
        let status = status.unwrap_or_else(|| panic!("{extra:?}: serve started anyway:\n{stderr}"));
        assert_eq!(status.code(), Some(2), "{extra:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!("drover: {}", extra[0]))
                && stderr.contains("add --worker to run a worker in this process"),
            "{extra:?}: {stderr}"
        );
        assert!(!stderr.contains("API on"), "{stderr}");
    }
    let (status, stderr) = run_bounded(&[
        "serve",
        "--insecure-no-auth",
        "--queue",
        "a",
        "--slots",
        "3",
    ]);
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("drover: --queue, --slots are worker options"),
        "{stderr}"
    );

    // dev has no database: its pool flags and vacuum warnings would be ignored.
    for extra in [
        &["--db-connections", "3"][..],
        &["--pgbouncer"],
        &["--warn-transaction-age", "1m"],
        &["--warn-dead-rows", "0.2"],
    ] {
        let mut args = vec!["dev", "--json"];
        args.extend_from_slice(extra);
        let (status, stderr) = run_bounded(&args);
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "{extra:?}: {stderr}"
        );
        assert!(
            stderr.contains(extra[0]) && stderr.contains("does not apply to dev"),
            "{extra:?}: {stderr}"
        );
        assert!(
            !stderr.contains("in-memory development mode"),
            "nothing ran: {stderr}"
        );
    }
}

/// `drover serve --worker` sizes its database pool by the rule of `drover worker` and warns,
/// as the worker does, when the pool is below slots + 2 (the warning comes before connecting).
#[test]
fn serve_with_a_worker_warns_about_a_small_pool_as_the_worker_does() {
    let unreachable = "postgres://nobody@127.0.0.1:1/x";
    let warning = "drover: warning: --db-connections 10 is below slots + 2 = 202";
    let worker = drover(&[
        "--database-url",
        unreachable,
        "worker",
        "--slots",
        "200",
        "--db-connections",
        "10",
    ]);
    let serve = drover(&[
        "--database-url",
        unreachable,
        "serve",
        "--insecure-no-auth",
        "--listen",
        "127.0.0.1:0",
        "--worker",
        "--slots",
        "200",
        "--db-connections",
        "10",
    ]);
    for (command, out) in [("worker", worker), ("serve --worker", serve)] {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(stderr.contains(warning), "{command}: {stderr}");
        assert!(stderr.contains("cannot reach"), "{command}: {stderr}");
    }
}

/// `drover serve --worker --metrics-listen ADDR` and `drover dev --metrics-listen ADDR` serve
/// the worker's metrics there, as `drover worker --metrics-listen` does (the flag was silently
/// ignored).
#[cfg(unix)]
#[test]
fn serve_with_a_worker_and_dev_serve_metrics_listen() {
    use std::io::{BufRead, BufReader, Read, Write};

    for (command, last_start_line) in [
        (
            &["serve", "--insecure-no-auth", "--worker"][..],
            " started with ",
        ),
        (&["dev", "--json", "--quiet"], "still serving the API"),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_drover"))
            .args(command)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .env_remove("DROVER_DATABASE_URL")
            .env_remove("DROVER_API_TOKENS")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run drover");
        let guard = KillOnDrop(child.id());
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut seen = String::new();
        // The metrics address is announced before the worker starts: read up to the last
        // start line.
        loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).expect("read stderr");
            assert!(read > 0, "{command:?} exited before it started:\n{seen}");
            seen.push_str(&line);
            if line.contains(last_start_line) {
                break;
            }
        }
        let addr = seen
            .lines()
            .find_map(|l| l.strip_prefix("drover: metrics on http://"))
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("{command:?}: no metrics address:\n{seen}"))
            .to_owned();
        let mut stream =
            std::net::TcpStream::connect(&addr).expect("connect to the metrics address");
        stream
            .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(
            response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
            "{command:?}: {response}"
        );
        assert!(response.contains("drover_jobs"), "{command:?}: {response}");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success());
        stderr.read_to_string(&mut seen).expect("read stderr");
        let status = child.wait().expect("wait for drover");
        drop(guard);
        assert!(status.success(), "{command:?}: {status}\n{seen}");
    }
}

/// SIGKILLs a process when dropped, so a failed assertion leaves no server behind.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.0.to_string()])
                .status();
        }
    }
}

/// A pipe whose reading end is already closed: every write to the other end fails (EPIPE).
#[cfg(unix)]
fn closed_pipe() -> Stdio {
    let (read, write) = rustix::pipe::pipe().expect("a pipe");
    drop(read);
    Stdio::from(write)
}

/// One HTTP/1.0 exchange with `addr`: the status line's code and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_owned());
    Ok((code, body))
}

/// Calls `check` every 20 ms until it answers `Some` or `what` has not happened within a
/// minute (events of another process, seen only by asking it).
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// dev and serve write their start lines, warnings and summaries to stderr: with stderr
/// closed from the start, those writes fail, and they must not stop the work (they panicked
/// on the first one, `eprintln!`, before a job ran).
#[cfg(unix)]
#[test]
fn dev_and_serve_work_with_stderr_closed() {
    // dev: the whole run, the JSON summary on stdout, exit code 0.
    let out = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args([
            "--log",
            "info",
            "dev",
            "--json",
            "--jobs",
            &example("jobs.jsonl"),
        ])
        .env_remove("DROVER_DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stderr(closed_pipe())
        .output()
        .expect("run drover dev");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let summary: Value = serde_json::from_slice(&out.stdout).expect("the JSON summary");
    assert_eq!(summary["finished"], 225, "{summary}");

    // serve --worker: the API answers and its worker runs a job; SIGTERM stops it cleanly.
    let addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        probe.local_addr().unwrap().to_string()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args([
            "--log",
            "info",
            "serve",
            "--insecure-no-auth",
            "--worker",
            "--listen",
            &addr,
        ])
        .env_remove("DROVER_DATABASE_URL")
        .env_remove("DROVER_API_TOKENS")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .spawn()
        .expect("run drover serve");
    let guard = KillOnDrop(child.id());
    let (code, body) = wait_for("the API to accept a job", || {
        if let Some(status) = child.try_wait().expect("poll drover serve") {
            panic!("drover serve exited: {status}");
        }
        http(&addr, "POST", "/v1/jobs", r#"{"kind": "noop"}"#).ok()
    });
    assert_eq!(code, 202, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("a JSON answer");
    let id = answer["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no job id in {answer}"))
        .to_owned();
    wait_for("the worker to run the job", || {
        let (_, body) = http(&addr, "GET", &format!("/v1/jobs/{id}"), "").ok()?;
        (serde_json::from_str::<Value>(&body).ok()?["job"]["state"] == "succeeded").then_some(())
    });
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let status = child.wait().expect("wait for drover serve");
    drop(guard);
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn drover");
    // Close the reading end before drover writes (it is still starting up).
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for drover");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

fn dev(args: &[&str]) -> Value {
    dev_exiting(args, 0)
}

/// Runs `drover dev --json` and expects exit code `code` (1 when input lines were rejected:
/// the summary is printed all the same).
fn dev_exiting(args: &[&str], code: i32) -> Value {
    let mut all = vec!["dev", "--json"];
    all.extend_from_slice(args);
    let out = drover(&all);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains("in-memory development mode"), "{stderr}");
    if code != 0 {
        assert!(stderr.contains("input line(s) rejected"), "{stderr}");
    }
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {}", text(&out.stdout)))
}

fn counts(summary: &Value, kind: &str) -> [u64; 5] {
    let c = &summary["kinds"][kind];
    ["jobs", "succeeded", "failed", "retried", "cancelled"].map(|k| {
        c[k].as_u64()
            .unwrap_or_else(|| panic!("{kind}.{k}: {summary}"))
    })
}

#[test]
fn dev_runs_the_example_jobs_with_exact_outcomes_per_kind() {
    let summary = dev(&["--jobs", &example("jobs.jsonl")]);
    assert_eq!(summary["total"], 225, "{summary}");
    assert_eq!(summary["finished"], 225);
    assert_eq!(summary["unfinished"], 0);
    assert_eq!(summary["rejected"], serde_json::json!([]));
    assert_eq!(counts(&summary, "noop"), [110, 110, 0, 0, 0]);
    assert_eq!(counts(&summary, "sleep"), [70, 70, 0, 0, 0]);
    assert_eq!(counts(&summary, "fail"), [45, 30, 15, 60, 0]);
}

#[test]
fn dev_runs_the_demo_set() {
    let summary = dev(&[]);
    assert_eq!(summary["total"], 240, "{summary}");
    assert_eq!(summary["finished"], 240);
    assert_eq!(counts(&summary, "noop"), [100, 100, 0, 0, 0]);
    assert_eq!(counts(&summary, "sleep"), [90, 90, 0, 0, 0]);
    assert_eq!(counts(&summary, "fail"), [50, 30, 20, 65, 0]);
}

#[test]
fn dev_waits_for_room_when_a_file_holds_more_jobs_than_the_quotas_allow() {
    // 60 jobs of one tenant against a tenant quota of 5 and a global one of 8: every line is
    // enqueued as the worker makes room, none is rejected.
    let dir = std::env::temp_dir().join(format!("drover-dev-quota-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("many.jsonl");
    let lines: String = (0..60)
        .map(|i| format!("{{\"kind\": \"sleep\", \"args\": {{\"ms\": {}}}}}\n", i % 3))
        .collect();
    std::fs::write(&file, lines).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["dev", "--json", "--jobs", file.to_str().unwrap()])
        .env_remove("DROVER_DATABASE_URL")
        .env_remove("RUST_LOG")
        .env("DROVER_MAX_TENANT_PENDING", "5")
        .env("DROVER_MAX_PENDING", "8")
        .stdin(Stdio::null())
        .output()
        .expect("run drover");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["rejected"], serde_json::json!([]), "{summary}");
    assert_eq!(summary["total"], 60, "{summary}");
    assert_eq!(counts(&summary, "sleep"), [60, 60, 0, 0, 0]);
}

#[test]
fn dev_accounts_for_lines_answered_by_an_existing_job() {
    // Every line is accounted for: a repeated idempotency key is replayed, a repeated unique
    // key in the same batch is a duplicate; neither is a new job nor a rejected line.
    let dir = std::env::temp_dir().join(format!("drover-dev-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys.jsonl");
    std::fs::write(
        &file,
        concat!(
            "{\"kind\": \"noop\", \"idempotency_key\": \"k\"}\n",
            "{\"kind\": \"noop\", \"idempotency_key\": \"k\"}\n",
            "{\"kind\": \"sleep\", \"args\": {\"ms\": 1}, \"unique_key\": \"u\"}\n",
            "{\"kind\": \"sleep\", \"args\": {\"ms\": 1}, \"unique_key\": \"u\"}\n",
        ),
    )
    .unwrap();
    let summary = dev(&["--jobs", file.to_str().unwrap()]);
    assert_eq!(summary["total"], 2, "{summary}");
    assert_eq!(summary["replayed"], 1, "{summary}");
    assert_eq!(summary["duplicate"], 1, "{summary}");
    assert_eq!(summary["rejected"], serde_json::json!([]), "{summary}");
    let out = drover(&["dev", "--jobs", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("2 line(s) answered by an existing job (1 replayed, 1 duplicate)"),
        "{stdout}"
    );
}

#[test]
fn dev_reports_bad_lines_and_unknown_kinds_and_runs_the_rest() {
    let summary = dev_exiting(&["--jobs", &example("jobs-with-errors.jsonl")], 1);
    let lines: Vec<u64> = summary["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![3, 4, 5, 6], "{summary}");
    assert_eq!(summary["total"], 3);
    assert_eq!(summary["finished"], 3);

    // A kind no handler serves would never finish: it is rejected at once, not waited for.
    let dir = std::env::temp_dir().join(format!("drover-dev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("unknown.jsonl");
    std::fs::write(
        &file,
        "{\"kind\": \"noop\"}\n{\"kind\": \"email.send\"}\n{\"kind\": \"exec\", \"args\": {\"program\": \"/bin/echo\"}}\n",
    )
    .unwrap();
    let summary = dev_exiting(&["--jobs", file.to_str().unwrap(), "--max-wait", "60s"], 1);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(summary["total"], 1, "{summary}");
    assert_eq!(summary["unfinished"], 0, "{summary}");
    let rejected = summary["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 2, "{summary}");
    assert_eq!(rejected[0]["line"], 2);
    assert!(rejected[0]["error"]
        .as_str()
        .unwrap()
        .contains("no handler for kind email.send"));
    assert_eq!(rejected[1]["line"], 3);
    assert!(rejected[1]["error"]
        .as_str()
        .unwrap()
        .contains("--allow-exec"));
}

#[test]
fn a_log_filter_that_does_not_parse_is_refused() {
    let out = drover(&["--log", "foo=bar=baz[", "completions", "bash"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--log"), "{stderr}");
    assert!(stderr.contains("not a log filter"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing ran");

    let out = drover(&["--log", "info,drover_runner=debug", "completions", "bash"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!out.stdout.is_empty());

    // RUST_LOG may be meant for other programs too: passed over, and said so.
    let out = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["completions", "bash"])
        .env("RUST_LOG", "foo=bar=baz[")
        .stdin(Stdio::null())
        .output()
        .expect("run drover");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!out.stdout.is_empty());
    assert!(
        stderr.starts_with("drover: warning: RUST_LOG is not a log filter")
            && stderr.contains("logging at warn"),
        "{stderr}"
    );
}

/// A `DROVER_ACTOR` the audit log would refuse is a usage error before anything connects, not
/// a failure of the first operator write.
#[test]
fn a_drover_actor_that_is_no_actor_name_is_refused_before_connecting() {
    let out = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args([
            "--database-url",
            "postgres://app@127.0.0.1:1/app",
            "jobs",
            "cancel",
            "0190f8a4-5c3e-7b8e-9a1d-3f2e4c5b6a79",
        ])
        .env("DROVER_ACTOR", "x".repeat(201))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run drover");
    let line = one_line_usage_error(&out);
    assert!(
        line.contains("invalid DROVER_ACTOR: must be 1 to 200 bytes"),
        "{line}"
    );
}

/// `drover serve` on the memory store stops cleanly on SIGTERM and says what it finishes
/// meanwhile: the requests in flight without `--worker`, the running jobs with it.
#[cfg(unix)]
#[test]
fn serve_says_what_it_finishes_on_sigterm() {
    use std::io::{BufRead, BufReader, Read};
    use std::sync::mpsc;
    use std::time::Duration;

    for (extra, says, never) in [
        (&[][..], "finishing requests in flight", "running jobs"),
        (
            &["--worker"][..],
            "finishing running jobs",
            "requests in flight",
        ),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_drover"))
            .args(["serve", "--insecure-no-auth", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("DROVER_DATABASE_URL")
            .env_remove("DROVER_API_TOKENS")
            // A setting of the environment is no worker flag: serve without --worker starts.
            .env("DROVER_MAX_CONCURRENT", "4")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run drover serve");
        let pid = child.id().to_string();
        // Kills the server if it has not exited within a minute, so a hang fails the test.
        let (exited_tx, exited_rx) = mpsc::channel::<()>();
        let watchdog_pid = pid.clone();
        let watchdog = std::thread::spawn(move || {
            if exited_rx.recv_timeout(Duration::from_secs(60)).is_err() {
                let _ = Command::new("kill").args(["-KILL", &watchdog_pid]).status();
            }
        });
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).expect("read stderr");
            assert!(
                read > 0,
                "drover serve {extra:?} exited before listening:\n{seen}"
            );
            seen.push_str(&line);
            if line.contains("API on http://") {
                break;
            }
        }
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success());
        stderr.read_to_string(&mut seen).expect("read stderr");
        let status = child.wait().expect("wait for drover serve");
        let _ = exited_tx.send(());
        watchdog.join().unwrap();
        assert!(status.success(), "drover serve {extra:?}: {status}\n{seen}");
        assert!(seen.contains(says), "drover serve {extra:?}:\n{seen}");
        assert!(!seen.contains(never), "drover serve {extra:?}:\n{seen}");
        assert!(
            seen.contains("drover: stopped"),
            "drover serve {extra:?}:\n{seen}"
        );
    }
}

#[test]
fn malformed_api_tokens_are_usage_errors_that_never_quote_a_token() {
    // From the environment (serve, and dev with --listen) and from --tokens FILE: exit 2 before
    // anything listens, naming where the list came from and the entry at fault, never a token.
    let dir = std::env::temp_dir().join(format!("drover-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(
        &file,
        "s3cret-one-0123456789:acme:operator\ns3cret-two-0123456789:acme:admin\n",
    )
    .unwrap();
    let missing = dir.join("missing");
    let cases: Vec<(Vec<String>, Option<&str>, &str, &str)> = vec![
        (
            vec!["serve".into(), "--listen".into(), "127.0.0.1:0".into()],
            Some("s3cret-one-0123456789:acme"),
            "DROVER_API_TOKENS",
            "entry 1",
        ),
        (
            vec!["serve".into(), "--listen".into(), "127.0.0.1:0".into()],
            Some(","),
            "DROVER_API_TOKENS",
            "empty",
        ),
        (
            vec![
                "dev".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--quiet".into(),
            ],
            Some("s3cret-one-0123456789:acme:admin"),
            "DROVER_API_TOKENS",
            "entry 1",
        ),
        (
            vec![
                "serve".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--tokens".into(),
                file.display().to_string(),
            ],
            None,
            "--tokens",
            "entry 2",
        ),
        (
            vec![
                "serve".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--tokens".into(),
                missing.display().to_string(),
            ],
            None,
            "cannot read the token file",
            "missing",
        ),
    ];
    for (args, env_tokens, names, detail) in cases {
        let mut command = Command::new(env!("CARGO_BIN_EXE_drover"));
        command
            .args(&args)
            .env_remove("DROVER_DATABASE_URL")
            .env_remove("DROVER_API_TOKENS")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        if let Some(tokens) = env_tokens {
            command.env("DROVER_API_TOKENS", tokens);
        }
        let out = command.output().expect("run drover");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(names) && stderr.contains(detail),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("s3cret"),
            "{args:?} quoted a token: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

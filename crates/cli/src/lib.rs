//! The `drover` command line (docs/design.md section 7), as a library so that an
//! application binary with its own handlers gets the same `worker`, `serve`, `dev` and
//! operator commands in a few lines:
//!
//! ```no_run
//! use drover_core::JobKind;
//! use drover_runner::{Outcome, Registry};
//!
//! fn main() -> std::process::ExitCode {
//!     let mut registry = Registry::new();
//!     registry.register_fn(JobKind::parse("email.send").expect("valid kind"), |_ctx| async {
//!         Outcome::success()
//!     });
//!     drover_cli::run(registry)
//! }
//! ```
//!
//! Errors are printed as one line on stderr (`drover: ...`) with a non-zero exit code: 2 for
//! a usage error (a flag value that breaks its rule, contradictory or inapplicable flags,
//! found before anything is built or connected, as clap's own are), 1 for every other
//! failure; no panic, no stack of internals. A closed stdout (`drover jobs list --json | head`) ends the
//! command quietly with exit code 0.

// Every message on stderr goes through `output::say` (`errln!`), which a closed stderr cannot
// turn into a panic; stdout through `outln!`, which ends the command quietly.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod args;
pub mod builtin;
pub mod commands;
pub mod context;
pub mod env;
pub mod jsonl;
pub mod output;
pub mod process;
pub mod reference;
pub mod signals;
pub mod usage;
pub mod worker_flags;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use drover_runner::Registry;

use crate::output::errln;

/// What an embedding application adds to the command line: its handlers, and whether the
/// built-in kinds (`noop`, `sleep`, `fail`, and `exec` behind `--allow-exec`) are offered too.
pub struct Extensions {
    /// The application's handlers (and reconcilers, kind settings).
    pub registry: Registry,
    /// Register the built-in kinds as well.
    pub builtin_kinds: bool,
}

/// Runs the command line of the process with `registry`'s handlers (and without the built-in
/// kinds), and returns the exit code: 0 on success, 1 on an error (printed as one line), 2 on
/// a usage error.
pub fn run(registry: Registry) -> ExitCode {
    run_with(
        Extensions {
            registry,
            builtin_kinds: false,
        },
        std::env::args_os(),
    )
}

/// Runs the stock `drover` binary: the built-in kinds only.
pub fn run_stock() -> ExitCode {
    run_with(
        Extensions {
            registry: Registry::new(),
            builtin_kinds: true,
        },
        std::env::args_os(),
    )
}

/// Runs the command line given by `args` (the first is the program name).
pub fn run_with(extensions: Extensions, args: impl IntoIterator<Item = OsString>) -> ExitCode {
    // `--help` and `--version` are "errors" that print to stdout and succeed.
    let clap_exit = |e: clap::Error| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    };
    let matches = match args::Cli::command().try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) => return clap_exit(e),
    };
    let cli = match args::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    // Flags given on the command line that the command would not use: refused, not ignored.
    if let Some(message) = args::inapplicable(&matches) {
        errln!("drover: {message}");
        return ExitCode::from(2);
    }
    // `--json` on the commands that run until stopped: their stderr is a log, written as one
    // JSON object a line (the other commands print their results as JSON on stdout).
    let json_logs = cli.json
        && matches!(
            cli.command,
            args::Command::Worker(_) | args::Command::Serve(_)
        );
    if json_logs {
        output::log_json();
    }
    // OTLP export (docs/opentelemetry.md) for the commands that run until stopped, and for
    // `enqueue`'s publish spans (later attempts are a worker's setting: the default there).
    let telemetry_flags = match &cli.command {
        args::Command::Worker(w) => Some((w.otlp, w.trace_later_attempts)),
        args::Command::Serve(s) => Some((s.worker_args.otlp, s.worker_args.trace_later_attempts)),
        args::Command::Dev(d) => Some((d.worker_args.otlp, d.worker_args.trace_later_attempts)),
        args::Command::Enqueue(e) => Some((e.otlp, Default::default())),
        _ => None,
    };
    let telemetry = match telemetry_flags.filter(|(otlp, _)| env::otlp_wanted(*otlp)) {
        Some((_, later)) => match drover_telemetry::Telemetry::start(later) {
            Ok(telemetry) => Some(telemetry),
            Err(e) => {
                errln!("drover: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    init_tracing(cli.log.as_deref(), json_logs, telemetry.as_ref());
    if let Some(telemetry) = &telemetry {
        let _ = TELEMETRY.set(telemetry.clone());
    }
    let code = run_command(cli, extensions);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    code
}

/// The process's OTLP export, when on: the worker's metrics report to it too.
pub(crate) static TELEMETRY: std::sync::OnceLock<drover_telemetry::Telemetry> =
    std::sync::OnceLock::new();

/// Runs the parsed command on a new runtime; the exit code.
fn run_command(cli: args::Cli, extensions: Extensions) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("drover: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::dispatch(cli, extensions)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`| head`): stop quietly, like a shell filter.
        Err(e) if e.chain().any(|c| c.is::<output::OutputClosed>()) => ExitCode::SUCCESS,
        Err(e) if usage::is_usage(&e) => {
            output::say_failure(&format!("drover: {}", one_line(&e)));
            ExitCode::from(2)
        }
        Err(e) => {
            output::say_failure(&format!("drover: {}", one_line(&e)));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, without repeating a cause already in the message.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text.replace('\n', " ")
}

/// Logs to stderr at `filter` (`--log`, else `RUST_LOG` when it parses, else `warn`); with
/// `json`, one JSON object a line with the event's fields at the top level
/// (`{"timestamp":...,"level":"WARN","message":...,"job_id":...,"target":...}`). With
/// `telemetry`, spans and events at info and above also go to its OpenTelemetry layer,
/// whatever the log filter, and the log shows every line logged inside an attempt (a
/// handler's, within spans of its own too) with its `process` span and that span's
/// `trace_id`: in the text prefix, or in the `spans` list of a JSON line; a task a handler
/// spawns with `.in_current_span()` runs in the attempt's trace.
fn init_tracing(filter: Option<&str>, json: bool, telemetry: Option<&drover_telemetry::Telemetry>) {
    use tracing_subscriber::filter::{filter_fn, FilterExt, LevelFilter};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, Registry};
    let filter = filter.map(EnvFilter::new).unwrap_or_else(|| {
        EnvFilter::try_from_default_env().unwrap_or_else(|e| {
            // Set but not a filter: `--log` is refused (exit 2), but `RUST_LOG` may be meant
            // for other programs too, so it is only passed over, and said so.
            if std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty()) {
                errln!("drover: warning: RUST_LOG is not a log filter ({e}); logging at warn");
            }
            EnvFilter::new("warn")
        })
    });
    // With export on, the attempt spans pass the log filter whatever it says of their target
    // (only the spans: the log still gets the events the filter asks for).
    let exporting = telemetry.is_some();
    let attempts = filter_fn(move |meta| {
        exporting && meta.is_span() && meta.target() == drover_runner::telemetry::ATTEMPT_TARGET
    })
    .with_max_level_hint(if exporting {
        LevelFilter::INFO
    } else {
        LevelFilter::OFF
    });
    let filter = filter.or(attempts);
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr's reader is gone) is dropped: by default
        // tracing reports that with `eprintln!`, which panics in whatever task logged.
        .log_internal_errors(false);
    let logs: Box<dyn Layer<Registry> + Send + Sync> = if json {
        logs.json()
            .flatten_event(true)
            // With export on, a line carries the fields of the spans it is in: an attempt's
            // trace_id, also under the handler's own spans.
            .with_current_span(false)
            .with_span_list(exporting)
            .with_filter(filter)
            .boxed()
    } else {
        // Colours only on a terminal: log files and journald get plain text.
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed()
    };
    // The log records the attempt spans anyway: keeping the attempt's context with them
    // costs little more, and a task a handler spawns with `.in_current_span()` nests.
    let traces = telemetry.map(|telemetry| {
        telemetry
            .layer()
            .and_then(drover_telemetry::attempt_context_layer())
    });
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init();
}

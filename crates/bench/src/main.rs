//! `drover-bench`: Drover's benchmark harness (docs/design.md section 8). Not a test: it
//! asserts nothing about time, it measures and reports.
//!
//! Against PostgreSQL and against the memory store it measures
//! - enqueue throughput: one job per call from 8 concurrent producers, and batches of 1,000;
//! - end-to-end processing throughput of N no-op jobs enqueued beforehand, with 1, 2 and 4
//!   worker processes of 32 slots each (the reference configuration, BENCHMARKS.md) and of 1,000 slots
//!   each (large claims and outcome batches, as the peers' best configurations use up to 2,000
//!   workers); the memory store runs its workers in-process;
//! - enqueue-to-start latency (p50, p90, p99, max) of jobs enqueued one at a time at a steady
//!   rate while an idle worker waits on LISTEN/NOTIFY.
//!
//! Every PostgreSQL measurement runs on a freshly created database. Quotas are off
//! (`Quotas::unbounded()`), PostgreSQL's durability settings are whatever the server has (the
//! bench records them and warns when fsync or synchronous_commit is off). Output: one JSON line
//! per measurement on stdout (the field names of the peers' benchmark scripts), then a
//! table of medians; a JSON file with everything plus the machine and PostgreSQL settings.
//!
//! `drover-bench worker` is the child mode the bench spawns for multi-process runs; it is not
//! meant to be run by hand.

mod child;
mod dashboard;
mod enqueue;
mod latency;
mod machine;
mod options;
mod otlp_sink;
mod process;
mod report;
mod run;
mod stats;
mod target;
mod workflow;

use std::process::ExitCode;

use clap::Parser;

use crate::options::{Cli, Command};

/// mimalloc instead of the system allocator: a job's life allocates and frees many small
/// objects on both worker threads, and glibc's malloc spent about a quarter of the memory
/// store's processing time in its own bookkeeping (perf, BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The OpenTelemetry export while it is on: the bench's workers report their metrics to it
/// too, as `drover worker`'s do.
pub(crate) static TELEMETRY: std::sync::OnceLock<drover_telemetry::Telemetry> =
    std::sync::OnceLock::new();

fn main() -> ExitCode {
    let cli = Cli::parse();
    // With OTEL_EXPORTER_OTLP_ENDPOINT set, the in-process workers export their attempt spans
    // and metrics (BENCHMARKS.md, OpenTelemetry), as `drover worker` does.
    let telemetry = std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").map(|_| {
        drover_telemetry::Telemetry::start(drover_runner::telemetry::LaterAttempts::Link)
            .unwrap_or_else(|error| {
                eprintln!("drover-bench: {error}");
                std::process::exit(2)
            })
    });
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        use tracing_subscriber::Layer;
        let logs = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(
                tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("warn,sqlx::query=error")
                }),
            );
        let traces = telemetry.as_ref().map(drover_telemetry::Telemetry::layer);
        if let Some(telemetry) = &telemetry {
            let _ = TELEMETRY.set(telemetry.clone());
        }
        tracing_subscriber::registry()
            .with(logs)
            .with(traces)
            .init();
    }
    // The OTLP sink answers on one thread: it shares the machine with the run it receives
    // from, and a second worker would only be woken to look for work.
    let mut builder = if matches!(cli.command, Some(Command::OtlpSink(_))) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("drover-bench: cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Some(Command::Worker(args)) => runtime.block_on(child::run_worker(args)),
        Some(Command::Run(args)) => runtime.block_on(run::run(*args)),
        Some(Command::Dashboard(args)) => runtime.block_on(dashboard::run(args)),
        Some(Command::OtlpSink(args)) => runtime.block_on(otlp_sink::run(args)),
        None => runtime.block_on(run::run(cli.run)),
    };
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("drover-bench: {error}");
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}

//! Command-line options of `drover-bench` (clap): the `run` options (the default command), the
//! `worker` child mode, and the resolved [`Plan`] a run follows.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use drover_core::SucceededJobs;
use serde::Serialize;

/// Environment variable holding the PostgreSQL URL; the parent passes it to its worker
/// children this way so the URL (which may hold a password) never shows on a command line.
pub const DATABASE_URL_ENV: &str = "DROVER_BENCH_DATABASE_URL";
/// Default PostgreSQL URL: the local server, database `drover_bench` (dropped and recreated).
pub const DATABASE_URL_DEFAULT: &str = "postgres://postgres:postgres@127.0.0.1:5432/drover_bench";
/// The queue every benchmark job goes to.
pub const QUEUE: &str = "bench";
/// The kind of every benchmark job (a handler that succeeds at once).
pub const KIND: &str = "noop";

/// Jobs per throughput measurement in a full run (50,000 no-op jobs, BENCHMARKS.md).
pub const JOBS_DEFAULT: usize = 50_000;
/// Jobs per throughput measurement with `--quick`.
pub const JOBS_QUICK: usize = 2_000;
/// Repetitions of each measurement in a full run (medians are reported).
pub const REPS_DEFAULT: usize = 3;
/// Jobs of a latency measurement in a full run (1,000: BENCHMARKS.md, "What is measured").
pub const LATENCY_JOBS_DEFAULT: usize = 1_000;
/// Jobs of a latency measurement with `--quick`.
pub const LATENCY_JOBS_QUICK: usize = 100;

/// Children of the fan-out workload in a full run.
pub const FAN_OUT_DEFAULT: usize = 10_000;
/// Children of the fan-out workload with `--quick`.
pub const FAN_OUT_QUICK: usize = 500;
/// Jobs of the chain workload in a full run.
pub const CHAIN_DEFAULT: usize = 1_000;
/// Jobs of the chain workload with `--quick`.
pub const CHAIN_QUICK: usize = 100;

/// `drover-bench`: measure Drover's enqueue throughput, processing throughput and
/// enqueue-to-start latency on PostgreSQL and on the memory store.
#[derive(Debug, Parser)]
#[command(name = "drover-bench", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// `run` (the default) or the internal `worker` child mode.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options of `run` when no subcommand is given.
    #[command(flatten)]
    pub run: RunArgs,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the benchmarks (the default).
    Run(Box<RunArgs>),
    /// Internal: one worker process of a multi-process measurement. Reads the database URL
    /// from DROVER_BENCH_DATABASE_URL, prints `ready`, waits for `start` on stdin, prints
    /// `succeeded <count>` as jobs are recorded, stops on `stop` or end of input.
    Worker(WorkerArgs),
    /// The dashboard's page times on a large PostgreSQL table, and what ten open dashboards
    /// cost a worker (BENCHMARKS.md, "Dashboard")
    Dashboard(DashboardArgs),
    /// The local OTLP/HTTP receiver of the OpenTelemetry export measurement (BENCHMARKS.md,
    /// "OpenTelemetry export"): answers every export, and `GET /stats` with the spans that
    /// arrived since the last call
    OtlpSink(OtlpSinkArgs),
}

/// Options of `drover-bench otlp-sink`.
#[derive(Debug, Clone, Args)]
pub struct OtlpSinkArgs {
    /// Address to listen on (OTLP/HTTP's usual port by default).
    #[arg(long, default_value = "127.0.0.1:4318")]
    pub listen: std::net::SocketAddr,
}

/// Options of `drover-bench dashboard`.
#[derive(Debug, Clone, Args)]
pub struct DashboardArgs {
    /// PostgreSQL URL, as for `run`; its database is DROPPED and recreated.
    #[arg(long, env = DATABASE_URL_ENV, default_value = DATABASE_URL_DEFAULT, hide_env_values = true, hide_default_value = true)]
    pub database_url: String,
    /// Jobs in the table.
    #[arg(long, default_value_t = 1_000_000)]
    pub jobs: usize,
    /// Fetches of each page.
    #[arg(long, default_value_t = 20)]
    pub samples: usize,
    /// Rounds of processing alone and with ten dashboards open.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Where to write the JSON report.
    #[arg(long, default_value = "bench/results/drover-dashboard.json")]
    pub out: PathBuf,
}

/// Which store a measurement runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// `drover-store-postgres` on a fresh database per measurement.
    Postgres,
    /// `drover-store-memory`, a new store per measurement.
    Memory,
}

impl StoreKind {
    /// `postgres` or `memory`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Postgres => "postgres",
            StoreKind::Memory => "memory",
        }
    }
}

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// One job per enqueue call from `--producers` concurrent producers.
    EnqueueSingle,
    /// Batches of `--batch` jobs per enqueue call, one producer.
    EnqueueBatch,
    /// End-to-end processing of `--jobs` no-op jobs enqueued beforehand.
    Process,
    /// Enqueue-to-start latency on an idle worker.
    Latency,
    /// One parent fans out `--fan-out` no-op children and waits for them without a slot
    /// (docs/design.md section 10); the children are all stored before the first runs.
    FanOut,
    /// The same fan-out with the children running while their parent still enqueues the rest.
    FanOutStreamed,
    /// A workflow chain of `--chain` no-op jobs, each depending on the one before.
    Chain,
}

/// How the worker processes of a PostgreSQL processing measurement run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerMode {
    /// Separate OS processes (this binary in `worker` mode), as in production.
    Process,
    /// Worker instances inside the bench process (always the case for the memory store).
    InProcess,
}

/// Options of `drover-bench run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// PostgreSQL URL (default postgres://postgres:postgres@127.0.0.1:5432/drover_bench, or
    /// DROVER_BENCH_DATABASE_URL). Its database (which must have `bench` in its name) is
    /// DROPPED and recreated before every measurement.
    #[arg(long, env = DATABASE_URL_ENV, default_value = DATABASE_URL_DEFAULT, hide_env_values = true, hide_default_value = true)]
    pub database_url: String,
    /// Stores to measure (repeat or comma-separate); default both.
    #[arg(long = "store", value_delimiter = ',')]
    pub stores: Vec<StoreKind>,
    /// Workloads to run (repeat or comma-separate); default all.
    #[arg(long = "workload", value_delimiter = ',')]
    pub workloads: Vec<Workload>,
    /// Jobs per throughput measurement (default 50,000; 2,000 with --quick).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Repetitions of each measurement; medians are reported (default 3; 1 with --quick).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Concurrent producers of the one-job-per-call enqueue workload.
    #[arg(long, default_value_t = 8)]
    pub producers: usize,
    /// Jobs per call of the batch enqueue workload.
    #[arg(long, default_value_t = 1_000)]
    pub batch: usize,
    /// Worker counts of the processing workload (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4])]
    pub workers: Vec<usize>,
    /// Slots of each worker (one pool serving the `bench` queue), comma-separated: the
    /// processing workload runs once per value and worker count, the latency workload uses the
    /// first. 32 is the reference configuration (BENCHMARKS.md); with 1,000 slots a claim or a
    /// batch of outcomes carries up to 1,000 jobs (the peers are measured with up to 2,000 workers).
    #[arg(long, value_delimiter = ',', default_values_t = [32usize, 1_000])]
    pub slots: Vec<usize>,
    /// How PostgreSQL processing workers run.
    #[arg(long, value_enum, default_value_t = WorkerMode::Process)]
    pub worker_mode: WorkerMode,
    /// Jobs of the latency workload (default 1,000; 100 with --quick).
    #[arg(long)]
    pub latency_jobs: Option<usize>,
    /// Steady enqueue rate of the latency workload, jobs per second.
    #[arg(long, default_value_t = 50.0)]
    pub latency_rate: f64,
    /// Children of the fan-out workload (default 10,000; 500 with --quick).
    #[arg(long)]
    pub fan_out: Option<usize>,
    /// Jobs of the chain workload (default 1,000; 100 with --quick).
    #[arg(long)]
    pub chain: Option<usize>,
    /// Smoke-test sizes: 2,000 jobs, 1 repetition, 100 latency jobs (explicit flags win).
    #[arg(long)]
    pub quick: bool,
    /// Stores delete each job as its success is recorded (`SucceededJobs::Delete`, the
    /// worker's `--delete-succeeded`) instead of keeping it: processing scenarios are then
    /// named `..._delete` (graphile-worker deletes every completed job; Drover keeps them by
    /// default).
    #[arg(long)]
    pub delete_succeeded: bool,
    /// Every enqueued job carries meta `{"customer": "c<seq mod 1,000>"}` (as a fifth of the
    /// dashboard benchmark's jobs): the enqueue scenarios are then named `..._meta`.
    #[arg(long)]
    pub meta: bool,
    /// Where to write the JSON file (default bench/results/drover-bench-<UTC time>.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Free text recorded in the JSON file (e.g. the git commit).
    #[arg(long)]
    pub note: Option<String>,
}

/// Options of the `worker` child mode.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Slots of the worker's one pool.
    #[arg(long, default_value_t = 32)]
    pub slots: usize,
    /// Its store deletes succeeded jobs.
    #[arg(long)]
    pub delete_succeeded: bool,
}

/// A run's resolved settings, recorded in the JSON file.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Stores, in order.
    pub stores: Vec<StoreKind>,
    /// Workloads, in order.
    pub workloads: Vec<Workload>,
    /// Jobs per throughput measurement.
    pub jobs: usize,
    /// Repetitions.
    pub reps: usize,
    /// Producers of `enqueue_single`.
    pub producers: usize,
    /// Jobs per call of `enqueue_batch`.
    pub batch: usize,
    /// Worker counts of `process`.
    pub workers: Vec<usize>,
    /// Slots per worker: one processing configuration per value; latency uses the first.
    pub slots: Vec<usize>,
    /// PostgreSQL worker mode.
    pub worker_mode: WorkerMode,
    /// Jobs of `latency`.
    pub latency_jobs: usize,
    /// Enqueue rate of `latency`, jobs per second.
    pub latency_rate: f64,
    /// Children of `fan_out`.
    pub fan_out: usize,
    /// Jobs of `chain`.
    pub chain: usize,
    /// `--quick` was given.
    pub quick: bool,
    /// What stores do with succeeded jobs (`--delete-succeeded`).
    pub succeeded_jobs: SucceededJobs,
    /// Enqueued jobs carry meta (`--meta`).
    pub meta: bool,
}

impl Plan {
    /// Resolves `args` (defaults, `--quick`) and checks the numbers.
    ///
    /// # Errors
    /// `InvalidInput` naming the option: a count of zero, a rate that is not positive, more
    /// than 10,000 slots, a batch above the store's batch bound.
    pub fn resolve(args: &RunArgs) -> Result<Plan, drover_core::Error> {
        let pick = |explicit: Option<usize>, full: usize, quick: usize| {
            explicit.unwrap_or(if args.quick { quick } else { full })
        };
        let mut stores = if args.stores.is_empty() {
            vec![StoreKind::Postgres, StoreKind::Memory]
        } else {
            args.stores.clone()
        };
        stores.dedup();
        let mut workloads = if args.workloads.is_empty() {
            vec![
                Workload::EnqueueSingle,
                Workload::EnqueueBatch,
                Workload::Process,
                Workload::Latency,
                Workload::FanOut,
                Workload::FanOutStreamed,
                Workload::Chain,
            ]
        } else {
            args.workloads.clone()
        };
        workloads.sort();
        workloads.dedup();
        let plan = Plan {
            stores,
            workloads,
            jobs: pick(args.jobs, JOBS_DEFAULT, JOBS_QUICK),
            reps: pick(args.reps, REPS_DEFAULT, 1),
            producers: args.producers,
            batch: args.batch,
            workers: args.workers.clone(),
            slots: args.slots.clone(),
            worker_mode: args.worker_mode,
            latency_jobs: pick(args.latency_jobs, LATENCY_JOBS_DEFAULT, LATENCY_JOBS_QUICK),
            latency_rate: args.latency_rate,
            fan_out: pick(args.fan_out, FAN_OUT_DEFAULT, FAN_OUT_QUICK),
            chain: pick(args.chain, CHAIN_DEFAULT, CHAIN_QUICK),
            quick: args.quick,
            succeeded_jobs: SucceededJobs::delete_if(args.delete_succeeded),
            meta: args.meta,
        };
        plan.check()?;
        Ok(plan)
    }

    /// Slots of the latency workload's worker: the first `--slots` value.
    pub fn latency_slots(&self) -> usize {
        self.slots.first().copied().unwrap_or(32)
    }

    /// The scenario name of processing with `workers` workers of `slots` slots:
    /// `process_<w>w` at 32 slots (the reference configuration of BENCHMARKS.md, and the names
    /// of earlier runs), `process_<w>w_<s>s` otherwise; `_delete` added when stores delete
    /// succeeded jobs.
    pub fn process_scenario(&self, workers: usize, slots: usize) -> String {
        let name = if slots == 32 {
            format!("process_{workers}w")
        } else {
            format!("process_{workers}w_{slots}s")
        };
        match self.succeeded_jobs {
            SucceededJobs::Keep => name,
            SucceededJobs::Delete => format!("{name}_delete"),
        }
    }

    fn check(&self) -> Result<(), drover_core::Error> {
        use drover_core::Error;
        for (name, value) in [
            ("jobs", self.jobs),
            ("reps", self.reps),
            ("producers", self.producers),
            ("batch", self.batch),
            ("latency-jobs", self.latency_jobs),
        ] {
            if value == 0 {
                return Err(Error::invalid(name, "must be at least 1"));
            }
        }
        if self.workers.is_empty() || self.workers.contains(&0) {
            return Err(Error::invalid(
                "workers",
                "each worker count must be at least 1",
            ));
        }
        if self.slots.is_empty() || self.slots.contains(&0) {
            return Err(Error::invalid(
                "slots",
                "each slot count must be at least 1",
            ));
        }
        if self.slots.iter().any(|&s| s > drover_runner::SLOTS_MAX) {
            return Err(Error::invalid(
                "slots",
                format!("must be at most {}", drover_runner::SLOTS_MAX),
            ));
        }
        if self.batch > drover_core::store::ENQUEUE_BATCH_MAX {
            return Err(Error::invalid(
                "batch",
                format!("must be at most {}", drover_core::store::ENQUEUE_BATCH_MAX),
            ));
        }
        if !(self.latency_rate.is_finite() && self.latency_rate > 0.0) {
            return Err(Error::invalid("latency-rate", "must be a positive number"));
        }
        Ok(())
    }

    /// Time between two enqueues of the latency workload.
    pub fn latency_period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.latency_rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> RunArgs {
        let mut argv = vec!["drover-bench"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).unwrap().run
    }

    #[test]
    fn defaults_are_the_reference_configuration() {
        let plan = Plan::resolve(&parse(&[])).unwrap();
        assert_eq!(plan.stores, vec![StoreKind::Postgres, StoreKind::Memory]);
        assert_eq!(plan.workloads.len(), 7);
        assert_eq!((plan.fan_out, plan.chain), (10_000, 1_000));
        assert_eq!(plan.jobs, 50_000);
        assert_eq!(plan.reps, 3);
        assert_eq!(plan.producers, 8);
        assert_eq!(plan.batch, 1_000);
        assert_eq!(plan.workers, vec![1, 2, 4]);
        assert_eq!(plan.slots, vec![32, 1_000]);
        assert_eq!(plan.latency_slots(), 32);
        assert_eq!(plan.latency_jobs, 1_000);
        assert_eq!(plan.latency_period(), Duration::from_millis(20));
    }

    #[test]
    fn quick_shrinks_sizes_but_explicit_flags_win() {
        let plan = Plan::resolve(&parse(&["--quick", "--reps", "2"])).unwrap();
        assert_eq!(plan.jobs, 2_000);
        assert_eq!(plan.reps, 2);
        assert_eq!(plan.latency_jobs, 100);
    }

    #[test]
    fn lists_accept_commas_and_bad_numbers_are_refused() {
        let plan = Plan::resolve(&parse(&[
            "--store",
            "memory",
            "--workload",
            "process,latency",
            "--workers",
            "2,8",
        ]))
        .unwrap();
        assert_eq!(plan.stores, vec![StoreKind::Memory]);
        assert_eq!(plan.workloads, vec![Workload::Process, Workload::Latency]);
        assert_eq!(plan.workers, vec![2, 8]);

        let error = Plan::resolve(&parse(&["--jobs", "0"])).unwrap_err();
        assert!(error.to_string().contains("jobs"), "{error}");
        let error = Plan::resolve(&parse(&["--latency-rate", "0"])).unwrap_err();
        assert!(error.to_string().contains("latency-rate"), "{error}");
    }

    #[test]
    fn worker_mode_is_a_subcommand() {
        let cli = Cli::try_parse_from(["drover-bench", "worker", "--slots", "16"]).unwrap();
        match cli.command {
            Some(Command::Worker(args)) => assert_eq!(args.slots, 16),
            other => panic!("expected the worker command, got {other:?}"),
        }
    }
}

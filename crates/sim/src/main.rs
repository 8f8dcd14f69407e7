//! `drover-sim`: runs seeds of the deterministic simulator in parallel threads (each seed its
//! own runtime) and prints a summary; a failure prints its seed, the history of the offending
//! jobs and the command that replays it.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Parser;
use drover_sim::{history, run_seed, Options, SeedRun};

/// Deterministic simulation of Drover's runner over a fault-injecting store.
#[derive(Debug, Parser)]
#[command(name = "drover-sim", version)]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Jobs each client enqueues per seed.
    #[arg(long, default_value_t = 30)]
    jobs: u32,
    /// Simulated seconds with faults per seed.
    #[arg(long, default_value_t = 60)]
    fault_secs: u64,
    /// Multiplies every store fault probability (1: 3 % errors before, 3 % after, 5 % slow).
    #[arg(long, default_value_t = 1.0)]
    fault_scale: f64,
    /// Probability of an error before the write, per store call (overrides --fault-scale's).
    #[arg(long)]
    error_before: Option<f64>,
    /// Probability of an error after the commit, per store call (overrides --fault-scale's).
    #[arg(long)]
    error_after: Option<f64>,
    /// Probability of a slow call, per store call (overrides --fault-scale's).
    #[arg(long)]
    slow: Option<f64>,
    /// No worker crashes, pauses, graceful stops or clock jumps.
    #[arg(long)]
    no_chaos: bool,
    /// Workers per seed (default: 2-4 from the seed).
    #[arg(long)]
    workers: Option<usize>,
    /// Most runs spent shrinking each failure (0: print failures as they are).
    #[arg(long, default_value_t = 40)]
    shrink: usize,
    /// Let workers claim ahead (the runner then reads `std::time`: replays may differ).
    #[arg(long)]
    prefetch: bool,
    /// Threads (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print every seed's whole history as JSON lines.
    #[arg(long)]
    verbose: bool,
    /// Run each seed twice and report the first event where the histories differ.
    #[arg(long)]
    twice: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let base = drover_sim::FaultRates::default();
    let options = Options {
        jobs: args.jobs,
        fault_secs: args.fault_secs,
        prefetch: args.prefetch,
        rates: drover_sim::FaultRates {
            before: args.error_before.unwrap_or(base.before * args.fault_scale),
            after: args.error_after.unwrap_or(base.after * args.fault_scale),
            slow: args.slow.unwrap_or(base.slow * args.fault_scale),
            ..base
        },
        chaos: !args.no_chaos,
        workers: args.workers,
        ..Options::default()
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let next = Arc::new(AtomicU64::new(args.from));
    let end = args.from.saturating_add(args.seeds);
    let failed: Arc<Mutex<Vec<SeedRun>>> = Arc::default();
    let faults: Arc<Mutex<BTreeMap<&'static str, u64>>> = Arc::default();
    let totals = Arc::new(Mutex::new((0u64, 0u64, 0u64, 0f64)));
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (next, failed, faults, totals, options) = (
                Arc::clone(&next),
                Arc::clone(&failed),
                Arc::clone(&faults),
                Arc::clone(&totals),
                options.clone(),
            );
            let (verbose, twice, budget) = (args.verbose, args.twice, args.shrink);
            std::thread::spawn(move || loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= end {
                    return;
                }
                let run = run_seed(seed, &options);
                if twice {
                    let again = run_seed(seed, &options);
                    if let Some(at) = drover_sim::first_difference(&run, &again) {
                        eprintln!("seed {seed} is not deterministic: {at}");
                    }
                }
                if verbose {
                    print!("{}", history::to_json_lines(&run.end.history));
                }
                {
                    let mut f = faults.lock().unwrap_or_else(|e| e.into_inner());
                    for (kind, n) in &run.end.faults {
                        *f.entry(kind).or_default() += n;
                    }
                    let mut t = totals.lock().unwrap_or_else(|e| e.into_inner());
                    t.0 += 1;
                    t.1 += run.end.jobs.len() as u64;
                    t.2 += run.end.history.len() as u64;
                    t.3 += run.end.sim_secs;
                }
                if !run.violations.is_empty() {
                    let rules: Vec<&str> = run.violations.iter().map(|v| v.rule).collect();
                    eprintln!("seed {seed} failed: {}", rules.join("; "));
                    let (_, small) = drover_sim::shrink(&options, run, budget);
                    eprint!("{}", small.report());
                    failed.lock().unwrap_or_else(|e| e.into_inner()).push(small);
                }
            })
        })
        .collect();
    for worker in workers {
        if worker.join().is_err() {
            eprintln!("a simulation thread panicked");
            return ExitCode::FAILURE;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (seeds, jobs, events, sim_secs) = *totals.lock().unwrap_or_else(|e| e.into_inner());
    let failed = failed.lock().unwrap_or_else(|e| e.into_inner());
    println!(
        "seeds {}..{}: {seeds} run in {elapsed:.1} s ({:.1} seeds/s, {threads} threads), \
         {jobs} jobs, {events} events, {:.0} simulated hours",
        args.from,
        end,
        seeds as f64 / elapsed.max(1e-9),
        sim_secs / 3_600.0
    );
    let faults = faults.lock().unwrap_or_else(|e| e.into_inner());
    let list: Vec<String> = faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("faults injected: {}", list.join(", "));
    if !drover_sim::world::EXACT_REPLAY {
        println!(
            "note: built without --cfg tokio_unstable: a replay may take another path \
             (docs/adr/0012-simulation.md)"
        );
    }
    if failed.is_empty() {
        println!("failures: none");
        ExitCode::SUCCESS
    } else {
        let mut seeds: Vec<u64> = failed.iter().map(|r| r.seed).collect();
        seeds.sort_unstable();
        println!("failures: {} seed(s): {seeds:?}", seeds.len());
        ExitCode::FAILURE
    }
}

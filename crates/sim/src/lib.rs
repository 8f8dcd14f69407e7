//! Drover's deterministic simulator (docs/adr/0012-simulation.md): one seed builds a world of
//! real runner workers over the memory store behind a fault-injecting store, on tokio's paused
//! clock; the recorded history and the store's final state go through the [`checker`].
//!
//! ```no_run
//! let run = drover_sim::run_seed(7, &drover_sim::Options::default());
//! assert!(run.violations.is_empty(), "{}", run.report());
//! ```

pub mod checker;
pub mod clock;
pub mod faults;
pub mod history;
pub mod world;

use std::collections::BTreeSet;

pub use checker::{check, Violation};
pub use faults::FaultRates;
pub use history::{Ev, Record};
pub use world::{Options, WorldEnd};

use drover_core::JobId;

/// One seed's run: its world and what the checker found.
#[derive(Debug, Clone)]
pub struct SeedRun {
    /// The seed.
    pub seed: u64,
    /// What the world left behind.
    pub end: WorldEnd,
    /// Broken rules.
    pub violations: Vec<Violation>,
    /// The world it ran.
    pub options: Options,
}

/// Builds and runs the world of `seed`, then checks it.
pub fn run_seed(seed: u64, options: &Options) -> SeedRun {
    let end = world::run_world(seed, options);
    let violations = check(&end.history, &end.jobs, end.settled);
    SeedRun {
        seed,
        end,
        violations,
        options: options.clone(),
    }
}

impl SeedRun {
    /// The history cut to the events of the offending jobs (and the world's events: crashes,
    /// pauses, queue pauses), as JSON lines.
    pub fn short_history(&self) -> String {
        let jobs: BTreeSet<JobId> = self
            .violations
            .iter()
            .flat_map(|v| v.jobs.iter().copied())
            .collect();
        history::cut(&self.end.history, &jobs)
    }

    /// What a failure prints: the seed, the violations, the history cut to the offending jobs
    /// and the command that replays it.
    pub fn report(&self) -> String {
        let mut out = format!(
            "seed {} failed: {} violation(s)\n",
            self.seed,
            self.violations.len()
        );
        for v in &self.violations {
            out.push_str(&format!(
                "  {}: {:?} {} {}\n",
                v.rule,
                v.jobs,
                v.detail,
                v.t.map(|t| format!("(store clock {} ms)", t / 1_000))
                    .unwrap_or_default()
            ));
        }
        out.push_str("history of the offending jobs:\n");
        out.push_str(&self.short_history());
        out.push_str(&format!(
            "replay: {}\n",
            replay_command(self.seed, &self.options)
        ));
        out
    }
}

/// The smaller worlds tried when shrinking `options`: fewer jobs, a shorter faulty period,
/// rarer store faults, no crashes and pauses, fewer workers.
fn smaller(options: &Options) -> Vec<Options> {
    let mut out = Vec::new();
    if options.jobs > 1 {
        out.push(Options {
            jobs: options.jobs / 2,
            ..options.clone()
        });
    }
    if options.fault_secs > 5 {
        out.push(Options {
            fault_secs: options.fault_secs / 2,
            ..options.clone()
        });
    }
    if options.rates != FaultRates::none() {
        let r = options.rates;
        let half = |p: f64| if p < 0.005 { 0.0 } else { p / 2.0 };
        out.push(Options {
            rates: FaultRates {
                before: half(r.before),
                after: half(r.after),
                slow: half(r.slow),
                ..r
            },
            ..options.clone()
        });
    }
    if options.chaos {
        out.push(Options {
            chaos: false,
            ..options.clone()
        });
    }
    if options.workers.is_none_or(|n| n > 1) {
        out.push(Options {
            workers: Some(options.workers.map_or(2, |n| n - 1)),
            ..options.clone()
        });
    }
    out
}

/// Shrinks a failed run: tries smaller worlds of the same seed ([`Options`] with fewer jobs,
/// a shorter faulty period, rarer faults, no crashes, fewer workers) and keeps each that still
/// breaks one of the rules `run` broke, until none does (at most `budget` runs). Returns the
/// smallest options found and their run (`options` and `run` when nothing smaller failed).
pub fn shrink(options: &Options, run: SeedRun, budget: usize) -> (Options, SeedRun) {
    let rules: BTreeSet<&'static str> = run.violations.iter().map(|v| v.rule).collect();
    let (mut best, mut best_run) = (options.clone(), run);
    let mut tries = 0;
    'smaller: loop {
        for candidate in smaller(&best) {
            if tries >= budget {
                break 'smaller;
            }
            tries += 1;
            let again = run_seed(best_run.seed, &candidate);
            if again.violations.iter().any(|v| rules.contains(v.rule)) {
                best = candidate;
                best_run = again;
                continue 'smaller;
            }
        }
        break;
    }
    (best, best_run)
}

/// The `drover-sim` command that replays `seed` in the world `options` describes.
pub fn replay_command(seed: u64, options: &Options) -> String {
    let defaults = Options::default();
    let mut command = format!("drover-sim --seeds 1 --from {seed}");
    if options.jobs != defaults.jobs {
        command.push_str(&format!(" --jobs {}", options.jobs));
    }
    if options.fault_secs != defaults.fault_secs {
        command.push_str(&format!(" --fault-secs {}", options.fault_secs));
    }
    if options.rates != defaults.rates {
        let r = options.rates;
        command.push_str(&format!(
            " --error-before {} --error-after {} --slow {}",
            r.before, r.after, r.slow
        ));
    }
    if !options.chaos {
        command.push_str(" --no-chaos");
    }
    if let Some(n) = options.workers {
        command.push_str(&format!(" --workers {n}"));
    }
    if options.prefetch {
        command.push_str(" --prefetch");
    }
    command.push_str(" --verbose");
    command
}

/// Where two runs of one seed differ: the first differing history line of each, or `None`
/// when their histories and final states are the same byte for byte.
pub fn first_difference(a: &SeedRun, b: &SeedRun) -> Option<String> {
    let (ha, hb) = (
        history::to_json_lines(&a.end.history),
        history::to_json_lines(&b.end.history),
    );
    if ha == hb {
        let (ja, jb) = (
            serde_json::to_string(&a.end.jobs).unwrap_or_default(),
            serde_json::to_string(&b.end.jobs).unwrap_or_default(),
        );
        return (ja != jb).then(|| "same history, different final state".to_owned());
    }
    let (mut la, mut lb) = (ha.lines(), hb.lines());
    let mut i = 0;
    loop {
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => i += 1,
            (x, y) => {
                return Some(format!(
                    "line {i}:\n  {}\n  {}",
                    x.unwrap_or("<end>"),
                    y.unwrap_or("<end>")
                ))
            }
        }
    }
}

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
}

/// Builds and runs the world of `seed`, then checks it.
pub fn run_seed(seed: u64, options: &Options) -> SeedRun {
    let end = world::run_world(seed, options);
    let violations = check(&end.history, &end.jobs, end.settled);
    SeedRun {
        seed,
        end,
        violations,
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
        let kept: Vec<Record> = self
            .end
            .history
            .iter()
            .filter(|r| r.ev.is_world() || r.ev.jobs().iter().any(|j| jobs.contains(j)))
            .cloned()
            .collect();
        history::to_json_lines(&kept)
    }

    /// What a failure prints: the seed, the violations, the shortened history, the replay
    /// command.
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
            "replay: drover-sim --seeds 1 --from {} --verbose\n",
            self.seed
        ));
        out
    }
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

//! Results: one [`Measurement`] per repetition (printed as a JSON line with the field names of
//! the peer scripts: `enqueue_per_s`, `process_per_s`, `p50_ms`, `p90_ms`, `p99_ms`, `max_ms`,
//! plus `system`, `scenario`, `store`, and `peer`/`mode`/`config` so the peers' `summarize.py`
//! can tabulate them too), medians per scenario ([`Summary`]), the human table, and the JSON
//! file ([`RunFile`]).

use std::fmt::Write as _;
use std::path::Path;

use drover_core::Error;
use serde::Serialize;

use crate::machine::Machine;
use crate::options::{Plan, StoreKind};
use crate::stats::{median, Percentiles};
use crate::target::PgInfo;

/// The value of the `system` field.
pub const SYSTEM: &str = "drover";
/// How quotas were set, recorded in every measurement (quotas are off for benchmarks:
/// BENCHMARKS.md, "Method").
pub const QUOTAS: &str = "off (Quotas::unbounded)";

/// One repetition of one scenario on one store.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// Always `drover`.
    pub system: &'static str,
    /// `drover-postgres` or `drover-memory` (the peer scripts' grouping key).
    pub peer: String,
    /// `throughput` or `latency` (as the peer scripts).
    pub mode: &'static str,
    /// Human description of the configuration, e.g. `1 job/call, 8 producers`.
    pub config: String,
    /// `postgres` or `memory`.
    pub store: &'static str,
    /// `enqueue_single`, `enqueue_batch`, `process_1w`, `process_2w`, ... or `latency`.
    pub scenario: String,
    /// Repetition, from 1.
    pub rep: usize,
    /// Jobs measured.
    pub n: usize,
    /// Concurrent producers (enqueue scenarios).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producers: Option<usize>,
    /// Jobs per enqueue call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
    /// Worker processes (or in-process workers) and slots of each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// Slots per worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<usize>,
    /// `process` or `in-process`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_mode: Option<&'static str>,
    /// Enqueue time, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enqueue_s: Option<f64>,
    /// Enqueue throughput, jobs per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enqueue_per_s: Option<f64>,
    /// Processing time (workers told to start -> last job recorded succeeded), seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_s: Option<f64>,
    /// Processing throughput, jobs per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_per_s: Option<f64>,
    /// Worker processes only: start signal -> the first job recorded succeeded, seconds (the
    /// workers' start-up: connections, first statements, one claim and one finish).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_job_s: Option<f64>,
    /// Worker processes only: jobs per second between a tenth and nine tenths of the jobs
    /// recorded, without the start-up and the drain (a diagnostic; `process_per_s` is the
    /// figure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub middle_per_s: Option<f64>,
    /// Enqueue rate of the latency scenario, jobs per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Latency percentiles (enqueue call start -> handler start), milliseconds.
    #[serde(flatten)]
    pub latency: Option<Percentiles>,
    /// Fan-outs on PostgreSQL with `track_commit_timestamp = on`: the commit of the last
    /// child's finish to the parent's next claim, milliseconds (the wake-up alone, without the
    /// finish statement's own length, which `latency` includes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_after_commit_ms: Option<f64>,
    /// Always [`QUOTAS`].
    pub quotas: &'static str,
    /// 1-minute load average when the measurement started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load1: Option<f64>,
    /// Why the measurement failed, when it did (its figures are then absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Measurement {
    /// A measurement of `scenario` on `store` with every figure unset.
    pub fn new(store: StoreKind, scenario: impl Into<String>, config: impl Into<String>) -> Self {
        Measurement {
            system: SYSTEM,
            peer: format!("{SYSTEM}-{}", store.as_str()),
            mode: "throughput",
            config: config.into(),
            store: store.as_str(),
            scenario: scenario.into(),
            rep: 0,
            n: 0,
            producers: None,
            batch: None,
            workers: None,
            slots: None,
            worker_mode: None,
            enqueue_s: None,
            enqueue_per_s: None,
            process_s: None,
            process_per_s: None,
            first_job_s: None,
            middle_per_s: None,
            rate_per_s: None,
            latency: None,
            resume_after_commit_ms: None,
            quotas: QUOTAS,
            load1: crate::machine::load_average().map(|load| load[0]),
            error: None,
        }
    }

    /// The JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
    }
}

/// Medians over the repetitions of one scenario on one store.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// `postgres` or `memory`.
    pub store: &'static str,
    /// The scenario.
    pub scenario: String,
    /// Its configuration.
    pub config: String,
    /// Repetitions.
    pub runs: usize,
    /// Median enqueue throughput, with the smallest and largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enqueue_per_s: Option<Spread>,
    /// Median processing throughput, with the smallest and largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_per_s: Option<Spread>,
    /// Median of each latency percentile over the repetitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Percentiles>,
}

/// A median with the range it came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Spread> {
        Some(Spread {
            median: median(values)?,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }

    fn render(&self) -> String {
        if self.min == self.max {
            thousands(self.median)
        } else {
            format!(
                "{} ({}-{})",
                thousands(self.median),
                thousands(self.min),
                thousands(self.max)
            )
        }
    }
}

/// Groups `measurements` by store and scenario, in first-seen order, and takes medians.
pub fn summarize(measurements: &[Measurement]) -> Vec<Summary> {
    let mut keys: Vec<(&'static str, String)> = Vec::new();
    for m in measurements {
        let key = (m.store, m.scenario.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(store, scenario)| {
            let group: Vec<&Measurement> = measurements
                .iter()
                .filter(|m| m.store == store && m.scenario == scenario)
                .collect();
            let values = |f: fn(&Measurement) -> Option<f64>| -> Vec<f64> {
                group.iter().filter_map(|m| f(m)).collect()
            };
            let latency = {
                let of = |f: fn(&Percentiles) -> f64| {
                    median(
                        &group
                            .iter()
                            .filter_map(|m| m.latency.as_ref().map(f))
                            .collect::<Vec<_>>(),
                    )
                };
                match (
                    of(|p| p.p50_ms),
                    of(|p| p.p90_ms),
                    of(|p| p.p99_ms),
                    of(|p| p.max_ms),
                    of(|p| p.mean_ms),
                ) {
                    (Some(p50_ms), Some(p90_ms), Some(p99_ms), Some(max_ms), Some(mean_ms)) => {
                        Some(Percentiles {
                            p50_ms,
                            p90_ms,
                            p99_ms,
                            max_ms,
                            mean_ms,
                        })
                    }
                    _ => None,
                }
            };
            Summary {
                store,
                config: group.first().map(|m| m.config.clone()).unwrap_or_default(),
                runs: group.len(),
                enqueue_per_s: Spread::of(&values(|m| m.enqueue_per_s)),
                process_per_s: Spread::of(&values(|m| m.process_per_s)),
                latency,
                scenario,
            }
        })
        .collect()
}

/// The human table of `summaries`.
pub fn table(summaries: &[Summary]) -> String {
    let mut out = String::new();
    // The scenario and config columns are as wide as their longest entry (at least 15 and 38).
    let scenario_width = summaries
        .iter()
        .map(|s| s.scenario.len())
        .fold(15, usize::max);
    let config_width = summaries
        .iter()
        .map(|s| s.config.chars().count())
        .fold(38, usize::max);
    let _ = writeln!(
        out,
        "{:<9} {:<scenario_width$} {:<config_width$} {:>26} {:>26} {:>34} {:>4}",
        "store",
        "scenario",
        "config",
        "enqueue jobs/s",
        "process jobs/s",
        "latency ms p50 / p90 / p99 / max",
        "runs"
    );
    for s in summaries {
        let latency = s.latency.map_or_else(
            || "-".to_owned(),
            |p| {
                format!(
                    "{:.2} / {:.2} / {:.2} / {:.2}",
                    p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms
                )
            },
        );
        let _ = writeln!(
            out,
            "{:<9} {:<scenario_width$} {:<config_width$} {:>26} {:>26} {:>34} {:>4}",
            s.store,
            s.scenario,
            s.config,
            s.enqueue_per_s
                .map_or_else(|| "-".to_owned(), |v| v.render()),
            s.process_per_s
                .map_or_else(|| "-".to_owned(), |v| v.render()),
            latency,
            s.runs
        );
    }
    out
}

/// `12345.6` as `12,346`.
pub fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    if rounded < 0.0 {
        format!("-{grouped}")
    } else {
        grouped
    }
}

/// Everything a run produced, written as one JSON file.
#[derive(Debug, Serialize)]
pub struct RunFile {
    /// Always `drover`.
    pub system: &'static str,
    /// drover-bench's version.
    pub version: &'static str,
    /// `--note`.
    pub note: Option<String>,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC.
    pub finished_at: String,
    /// The resolved options.
    pub plan: Plan,
    /// Always [`QUOTAS`].
    pub quotas: &'static str,
    /// The machine.
    pub machine: Machine,
    /// 1, 5 and 15-minute load averages at the end.
    pub load_average_end: Option<[f64; 3]>,
    /// True when the machine was busy at the start (load average >= 1): figures are noisy.
    pub noisy: bool,
    /// The PostgreSQL server, when PostgreSQL was measured.
    pub postgres: Option<PgInfo>,
    /// Every repetition.
    pub measurements: Vec<Measurement>,
    /// Medians.
    pub summary: Vec<Summary>,
}

impl RunFile {
    /// Writes the file (pretty JSON), creating its directory.
    ///
    /// # Errors
    /// `Fatal` when the file cannot be written.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let io = |error: std::io::Error| Error::Fatal {
            message: format!("could not write {}", path.display()),
            source: Some(Box::new(error)),
        };
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|error| Error::Fatal {
            message: "could not serialize the results".to_owned(),
            source: Some(Box::new(error)),
        })?;
        std::fs::write(path, text + "\n").map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throughput(scenario: &str, rep: usize, process: f64) -> Measurement {
        let mut m = Measurement::new(StoreKind::Postgres, scenario, "1 worker x 32 slots");
        m.rep = rep;
        m.n = 100;
        m.process_per_s = Some(process);
        m
    }

    #[test]
    fn json_lines_use_the_peer_field_names() {
        let mut m = throughput("process_1w", 1, 1234.0);
        m.latency = Percentiles::of(&[1.0, 2.0, 3.0]);
        let value: serde_json::Value = serde_json::from_str(&m.json_line()).unwrap();
        assert_eq!(value["system"], "drover");
        assert_eq!(value["store"], "postgres");
        assert_eq!(value["scenario"], "process_1w");
        assert_eq!(value["process_per_s"], 1234.0);
        assert_eq!(value["p50_ms"], 2.0);
        assert_eq!(value["p99_ms"], 3.0);
        assert_eq!(value["quotas"], QUOTAS);
        assert!(value.get("enqueue_per_s").is_none());
    }

    #[test]
    fn summaries_take_medians_per_scenario_in_order() {
        let ms = vec![
            throughput("process_1w", 1, 100.0),
            throughput("process_2w", 1, 900.0),
            throughput("process_1w", 2, 300.0),
            throughput("process_1w", 3, 200.0),
        ];
        let summaries = summarize(&ms);
        assert_eq!(summaries.len(), 2);
        assert_eq!(summaries[0].scenario, "process_1w");
        assert_eq!(summaries[0].runs, 3);
        assert_eq!(
            summaries[0].process_per_s,
            Some(Spread {
                median: 200.0,
                min: 100.0,
                max: 300.0
            })
        );
        assert!(summaries[0].enqueue_per_s.is_none());
        let text = table(&summaries);
        assert!(text.contains("200 (100-300)"), "{text}");
        assert!(text.contains("900"), "{text}");
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1234.5), "1,235");
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(thousands(-4321.0), "-4,321");
    }
}

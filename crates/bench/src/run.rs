//! `drover-bench run`: the order of measurements, one store at a time; repetitions interleave
//! the workloads (rep 1 of each, then rep 2 of each, ...) so drift of a shared machine spreads
//! over all of them. Each measurement prints its JSON line as soon as it is taken; a failed
//! measurement is reported (JSON line with `error`) and the run goes on, exiting non-zero at
//! the end.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use drover_core::{Error, JobStore, SucceededJobs};

use crate::child::EXTRA_CONNECTIONS;
use crate::machine::{load_average, Machine};
use crate::options::{Plan, RunArgs, StoreKind, WorkerMode, Workload};
use crate::report::{summarize, table, thousands, Measurement, RunFile, QUOTAS};
use crate::stats::{per_second, Percentiles};
use crate::target::{memory_store_with, PgInfo, PgTarget};
use crate::{enqueue, latency, process, workflow};

/// Runs the plan of `args`, prints JSON lines and the table, writes the JSON file.
///
/// # Errors
/// `InvalidInput` for bad options; `Unavailable` when PostgreSQL cannot be reached at the
/// start; `Fatal` when a measurement failed (after all others ran) or the file cannot be
/// written.
pub async fn run(args: RunArgs) -> Result<(), Error> {
    let plan = Plan::resolve(&args)?;
    let machine = Machine::read();
    let started_at = Utc::now();
    let postgres = if plan.stores.contains(&StoreKind::Postgres) {
        let target = PgTarget::parse(&args.database_url)?.with_succeeded_jobs(plan.succeeded_jobs);
        let info = target.info().await?;
        Some((target, info))
    } else {
        None
    };
    let header = header(&plan, &machine, postgres.as_ref().map(|(_, info)| info));
    eprint!("{header}");

    let mut measurements = Vec::new();
    let mut failures = 0usize;
    for &store in &plan.stores {
        let target = postgres.as_ref().map(|(target, _)| target);
        let mut steps: Vec<(Workload, Option<Shape>)> = Vec::new();
        for &workload in &plan.workloads {
            match workload {
                Workload::Process => {
                    for &slots in &plan.slots {
                        steps.extend(
                            plan.workers
                                .iter()
                                .map(|&workers| (workload, Some(Shape { workers, slots }))),
                        );
                    }
                }
                Workload::Latency => {}
                _ => steps.push((workload, None)),
            }
        }
        let mut reps: Vec<(usize, Workload, Option<Shape>)> = Vec::new();
        for rep in 1..=plan.reps {
            reps.extend(
                steps
                    .iter()
                    .map(|&(workload, shape)| (rep, workload, shape)),
            );
        }
        if plan.workloads.contains(&Workload::Latency) {
            reps.extend((1..=plan.reps).map(|rep| (rep, Workload::Latency, None)));
        }
        for (rep, workload, workers) in reps {
            let mut m = describe(&plan, store, workload, workers);
            m.rep = rep;
            eprintln!(
                "[{}] {} {} rep {rep}/{} ...",
                Utc::now().format("%H:%M:%S"),
                store.as_str(),
                m.scenario,
                plan.reps
            );
            match measure(&plan, store, target, workload, workers, &mut m).await {
                Ok(()) => {}
                Err(error) => {
                    failures += 1;
                    eprintln!("  failed: {error}");
                    m.error = Some(error.to_string());
                }
            }
            println!("{}", m.json_line());
            measurements.push(m);
        }
    }

    let summary = summarize(&measurements);
    println!();
    print!("{header}");
    print!("{}", table(&summary));
    let file = RunFile {
        system: crate::report::SYSTEM,
        version: env!("CARGO_PKG_VERSION"),
        note: args.note.clone(),
        started_at: started_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        finished_at: Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true),
        noisy: machine.noisy(),
        plan,
        quotas: QUOTAS,
        machine,
        load_average_end: load_average(),
        postgres: postgres.map(|(_, info)| info),
        measurements,
        summary,
    };
    let path = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench/results").join(format!(
            "drover-bench-{}.json",
            started_at.format("%Y%m%dT%H%M%SZ")
        ))
    });
    file.write(&path)?;
    println!("(json: {})", path.display());
    if failures > 0 {
        return Err(Error::fatal(format!(
            "{failures} measurement(s) failed; see the errors above"
        )));
    }
    Ok(())
}

/// The lines printed above the table (and to stderr at the start).
fn header(plan: &Plan, machine: &Machine, postgres: Option<&PgInfo>) -> String {
    let mut out = format!(
        "drover-bench {} {} - {}\n",
        env!("CARGO_PKG_VERSION"),
        Utc::now().format("%Y-%m-%d %H:%M UTC"),
        machine.summary()
    );
    if machine.noisy() {
        out.push_str(
            "NOISY: the load average was 1 or more at the start; other work shared the CPU\n",
        );
    }
    if let Some(info) = postgres {
        out.push_str(&format!("PostgreSQL {}: {}\n", info.server, info.version));
        let settings: Vec<String> = info
            .settings
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        out.push_str(&format!("  {}\n", settings.join(" ")));
        if !info.durable() {
            out.push_str("WARNING: fsync or synchronous_commit is OFF: these figures are not comparable (BENCHMARKS.md's method requires PostgreSQL's default durability)\n");
        }
    }
    out.push_str(&format!(
        "jobs {} per throughput run, {} rep(s), quotas {QUOTAS}; latency: {} jobs at {} jobs/s\n",
        thousands(plan.jobs as f64),
        plan.reps,
        thousands(plan.latency_jobs as f64),
        plan.latency_rate
    ));
    out
}

/// The workers of a processing measurement: how many, and the slots of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    workers: usize,
    slots: usize,
}

impl Shape {
    /// `shape`, or one worker with the latency workload's slots.
    fn or_default(shape: Option<Shape>, plan: &Plan) -> Shape {
        shape.unwrap_or(Shape {
            workers: 1,
            slots: plan.latency_slots(),
        })
    }
}

/// A measurement record with its scenario name and configuration filled in.
fn describe(
    plan: &Plan,
    store: StoreKind,
    workload: Workload,
    shape: Option<Shape>,
) -> Measurement {
    let in_process = store == StoreKind::Memory || plan.worker_mode == WorkerMode::InProcess;
    let mut m = match workload {
        Workload::EnqueueSingle => {
            let mut m = Measurement::new(
                store,
                if plan.meta {
                    "enqueue_single_meta"
                } else {
                    "enqueue_single"
                },
                format!("1 job/call, {} producers", plan.producers),
            );
            m.producers = Some(plan.producers);
            m.batch = Some(1);
            m
        }
        Workload::EnqueueBatch => {
            let mut m = Measurement::new(
                store,
                if plan.meta {
                    "enqueue_batch_meta"
                } else {
                    "enqueue_batch"
                },
                format!("{} jobs/call, 1 producer", thousands(plan.batch as f64)),
            );
            m.producers = Some(1);
            m.batch = Some(plan.batch);
            m
        }
        Workload::Process => {
            let Shape { workers: w, slots } = Shape::or_default(shape, plan);
            let noun = match (in_process, w == 1) {
                (true, true) => "in-process worker",
                (true, false) => "in-process workers",
                (false, true) => "worker process",
                (false, false) => "worker processes",
            };
            let mut m = Measurement::new(
                store,
                plan.process_scenario(w, slots),
                format!(
                    "{w} {noun} x {} slots{}",
                    thousands(slots as f64),
                    match plan.succeeded_jobs {
                        SucceededJobs::Keep => "",
                        SucceededJobs::Delete => ", succeeded jobs deleted",
                    }
                ),
            );
            m.workers = Some(w);
            m.slots = Some(slots);
            m.worker_mode = Some(if in_process { "in-process" } else { "process" });
            m
        }
        Workload::Latency => {
            let mut m = Measurement::new(
                store,
                "latency",
                format!(
                    "1 idle in-process worker x {} slots, {} jobs/s",
                    plan.latency_slots(),
                    plan.latency_rate
                ),
            );
            m.mode = "latency";
            m.workers = Some(1);
            m.slots = Some(plan.latency_slots());
            m.worker_mode = Some("in-process");
            m.rate_per_s = Some(plan.latency_rate);
            m
        }
        Workload::FanOut | Workload::FanOutStreamed | Workload::Chain => {
            let (scenario, config) = if workload != Workload::Chain {
                let (scenario, children) = if workload == Workload::FanOut {
                    ("fan_out", "all stored before the first runs")
                } else {
                    (
                        "fan_out_streamed",
                        "running while the parent enqueues the rest",
                    )
                };
                (
                    scenario,
                    format!(
                        "1 parent, {} children ({children}), 1 in-process worker x {} slots; process = children/s, latency = last child's finish -> parent's claim",
                        thousands(plan.fan_out as f64),
                        plan.latency_slots()
                    ),
                )
            } else {
                (
                    "chain",
                    format!(
                        "{} jobs each after the one before, 1 in-process worker x {} slots; latency = a job's finish -> the next one's claim",
                        thousands(plan.chain as f64),
                        plan.latency_slots()
                    ),
                )
            };
            let mut m = Measurement::new(store, scenario, config);
            m.workers = Some(1);
            m.slots = Some(plan.latency_slots());
            m.worker_mode = Some("in-process");
            m
        }
    };
    m.n = match workload {
        Workload::Latency => plan.latency_jobs,
        Workload::FanOut | Workload::FanOutStreamed => plan.fan_out,
        Workload::Chain => plan.chain,
        _ => plan.jobs,
    };
    m
}

/// Takes one measurement into `m`.
async fn measure(
    plan: &Plan,
    store: StoreKind,
    target: Option<&PgTarget>,
    workload: Workload,
    shape: Option<Shape>,
    m: &mut Measurement,
) -> Result<(), Error> {
    let pg = match (store, target) {
        (StoreKind::Postgres, Some(target)) => {
            target.fresh().await?;
            Some(target)
        }
        (StoreKind::Postgres, None) => return Err(Error::fatal("no PostgreSQL target")),
        (StoreKind::Memory, _) => None,
    };
    m.load1 = load_average().map(|load| load[0]);
    let n = m.n;
    let connections = |wanted: usize| u32::try_from(wanted).unwrap_or(u32::MAX);
    let fresh = |wanted: usize| async move {
        match pg {
            Some(target) => {
                Ok::<(Arc<dyn JobStore>, Option<drover_store_postgres::PgStore>), Error>({
                    let store = target.store(connections(wanted)).await?;
                    (Arc::new(store.clone()) as Arc<dyn JobStore>, Some(store))
                })
            }
            None => Ok((memory_store_with(plan.succeeded_jobs), None)),
        }
    };
    match workload {
        Workload::EnqueueSingle => {
            let (handle, pool) = fresh(plan.producers + 2).await?;
            let took = enqueue::single(handle, n, plan.producers, plan.meta).await;
            close(pool).await;
            record_enqueue(m, n, took?);
        }
        Workload::EnqueueBatch => {
            let (handle, pool) = fresh(2).await?;
            let took = enqueue::batches(handle.as_ref(), n, plan.batch, plan.meta).await;
            close(pool).await;
            record_enqueue(m, n, took?);
        }
        Workload::Process => {
            let Shape { workers: w, slots } = Shape::or_default(shape, plan);
            let (handle, pool) = match (pg, plan.worker_mode) {
                (Some(_), WorkerMode::Process) => fresh(2).await?,
                _ => fresh(w * (slots + EXTRA_CONNECTIONS)).await?,
            };
            // Prefill, untimed, in batches of 1,000 (or --batch).
            enqueue::batches(handle.as_ref(), n, plan.batch, false).await?;
            let processed = match (pg, plan.worker_mode) {
                (Some(target), WorkerMode::Process) => {
                    process::processes(target, handle.as_ref(), n, w, slots).await
                }
                _ => process::in_process(Arc::clone(&handle), n, w, slots, plan.succeeded_jobs)
                    .await
                    .map(process::Processed::total),
            };
            close(pool).await;
            let processed = processed?;
            m.process_s = Some(seconds(processed.took));
            m.process_per_s = Some(per_second(n, processed.took.as_secs_f64()));
            m.first_job_s = processed.first_job.map(seconds);
            m.middle_per_s = processed.middle_per_s(n).map(f64::round);
        }
        Workload::Latency => {
            let slots = plan.latency_slots();
            let (worker_store, worker_pool) = fresh(slots + EXTRA_CONNECTIONS).await?;
            let (producer, producer_pool) = match pg {
                Some(_) => fresh(2).await?,
                None => (Arc::clone(&worker_store), None),
            };
            let samples =
                latency::measure(worker_store, producer, n, plan.latency_period(), slots).await;
            close(worker_pool).await;
            close(producer_pool).await;
            m.latency = Percentiles::of(&samples?);
        }
        Workload::FanOut | Workload::FanOutStreamed => {
            let slots = plan.latency_slots();
            let (handle, pool) = fresh(slots + EXTRA_CONNECTIONS).await?;
            let deadline = process::deadline_for(n);
            let streamed = workload == Workload::FanOutStreamed;
            let measured = workflow::fan_out(handle, n, slots, deadline, streamed).await;
            let committed = match (&measured, &pool) {
                (Ok(fan), Some(store)) => {
                    workflow::committed_at(store.pool(), fan.last_child).await
                }
                _ => None,
            };
            close(pool).await;
            let measured = measured?;
            m.process_s = Some(seconds(measured.took));
            m.process_per_s = Some(measured.children_per_s);
            m.latency = Percentiles::of(&[measured.resume_ms]);
            m.resume_after_commit_ms =
                committed.map(|at| workflow::millis_between(at, measured.resumed_at));
        }
        Workload::Chain => {
            let slots = plan.latency_slots();
            let (handle, pool) = fresh(slots + EXTRA_CONNECTIONS).await?;
            let deadline = process::deadline_for(n);
            let steps = workflow::chain(handle, n, slots, deadline).await;
            close(pool).await;
            m.latency = Percentiles::of(&steps?);
        }
    }
    Ok(())
}

fn record_enqueue(m: &mut Measurement, n: usize, took: Duration) {
    m.enqueue_s = Some(seconds(took));
    m.enqueue_per_s = Some(per_second(n, took.as_secs_f64()));
}

fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10_000.0
}

async fn close(pool: Option<drover_store_postgres::PgStore>) {
    if let Some(store) = pool {
        store.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Cli;
    use clap::Parser;

    fn plan(args: &[&str]) -> Plan {
        let mut argv = vec!["drover-bench"];
        argv.extend_from_slice(args);
        Plan::resolve(&Cli::try_parse_from(argv).unwrap().run).unwrap()
    }

    #[test]
    fn scenario_names_and_configs() {
        let p = plan(&[]);
        let shape = |workers, slots| Some(Shape { workers, slots });
        let m = describe(&p, StoreKind::Postgres, Workload::Process, shape(2, 32));
        assert_eq!(m.scenario, "process_2w");
        assert_eq!(m.config, "2 worker processes x 32 slots");
        let m = describe(&p, StoreKind::Postgres, Workload::Process, shape(4, 1000));
        assert_eq!(m.scenario, "process_4w_1000s");
        assert_eq!(m.config, "4 worker processes x 1,000 slots");
        let m = describe(&p, StoreKind::Memory, Workload::Process, shape(1, 32));
        assert_eq!(m.config, "1 in-process worker x 32 slots");
        let m = describe(&p, StoreKind::Memory, Workload::Process, shape(4, 32));
        assert_eq!(m.config, "4 in-process workers x 32 slots");
        let m = describe(&p, StoreKind::Postgres, Workload::EnqueueSingle, None);
        assert_eq!((m.scenario.as_str(), m.n), ("enqueue_single", 50_000));
        let m = describe(&p, StoreKind::Postgres, Workload::Latency, None);
        assert_eq!((m.mode, m.n), ("latency", 1_000));
    }

    #[tokio::test]
    async fn a_quick_memory_run_measures_every_workload() {
        let p = plan(&[
            "--store",
            "memory",
            "--jobs",
            "300",
            "--latency-jobs",
            "5",
            "--latency-rate",
            "500",
            "--workers",
            "1,2",
            "--slots",
            "8",
            "--fan-out",
            "100",
            "--chain",
            "20",
        ]);
        for (workload, workers) in [
            (Workload::EnqueueSingle, None),
            (Workload::EnqueueBatch, None),
            (
                Workload::Process,
                Some(Shape {
                    workers: 2,
                    slots: 8,
                }),
            ),
            (Workload::Latency, None),
            (Workload::FanOut, None),
            (Workload::FanOutStreamed, None),
            (Workload::Chain, None),
        ] {
            let mut m = describe(&p, StoreKind::Memory, workload, workers);
            measure(&p, StoreKind::Memory, None, workload, workers, &mut m)
                .await
                .unwrap();
            let value: serde_json::Value = serde_json::from_str(&m.json_line()).unwrap();
            let field = match workload {
                Workload::EnqueueSingle | Workload::EnqueueBatch => "enqueue_per_s",
                Workload::Process | Workload::FanOut | Workload::FanOutStreamed => "process_per_s",
                Workload::Latency | Workload::Chain => "p99_ms",
            };
            let figure = value[field].as_f64().unwrap();
            assert!(figure.is_finite() && figure >= 0.0, "{workload:?}: {value}");
            if field != "p99_ms" {
                assert!(figure > 0.0, "{workload:?}: {value}");
            }
        }
    }
}

//! `drover dev`: the development mode (docs/getting-started.md). Runs a worker on the in-memory store
//! (and says, once, that nothing persists), enqueues the jobs of a JSON Lines file or a
//! built-in demo set, shows progress, and ends with the outcomes per kind, wall time and
//! jobs/s (or one JSON object with `--json`). With `--listen` it also serves the HTTP API and
//! keeps running until Ctrl-C.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use drover_core::{Backoff, JobKind, JobState, NewJob, QueueName};
use drover_http::{ApiConfig, AuthMode, ProcessMetrics};
use drover_runner::{JobOutcome, KindConfig, Metrics, Registry};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Notify;

use crate::args::DevArgs;
use crate::commands::enqueue;
use crate::context::Ctx;
use crate::jsonl::{self, RejectedLine};
use crate::output::{self, errln, outln, table};
use crate::process::{Api, Process, ProcessKind};
use crate::worker_flags::worker_config;
use crate::{env, Extensions};

/// Outcomes of one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    /// Jobs of the kind enqueued.
    pub jobs: u64,
    /// Ended succeeded.
    pub succeeded: u64,
    /// Ended failed (attempts spent or discarded).
    pub failed: u64,
    /// Failed attempts that were retried.
    pub retried: u64,
    /// Ended cancelled.
    pub cancelled: u64,
}

/// The summary `drover dev` prints.
#[derive(Debug, Clone, Serialize)]
pub struct DevSummary {
    /// Outcomes per kind.
    pub kinds: BTreeMap<String, KindCounts>,
    /// Jobs enqueued.
    pub total: u64,
    /// Jobs that reached a terminal state.
    pub finished: u64,
    /// Jobs still queued or running when the run ended (`--max-wait` or Ctrl-C).
    pub unfinished: u64,
    /// From the first enqueue to the last outcome, in seconds.
    pub wall_seconds: f64,
    /// `finished / wall_seconds`.
    pub jobs_per_second: f64,
    /// Input lines answered with an existing job by their idempotency key (nothing new ran).
    pub replayed: u64,
    /// Input lines answered with the live job holding their unique key (nothing new ran; a
    /// line whose key holder had already finished makes a new job instead, so this count
    /// depends on timing).
    pub duplicate: u64,
    /// Input lines that were not enqueued, with their numbers.
    pub rejected: Vec<RejectedLine>,
}

/// Counts outcomes per kind as the worker reports them, and wakes the waiting command on each.
#[derive(Default)]
struct DevCounter {
    kinds: Mutex<BTreeMap<String, KindCounts>>,
    finished: AtomicU64,
    changed: Notify,
}

impl DevCounter {
    fn count(&self, kind: &JobKind, f: impl FnOnce(&mut KindCounts), terminal: bool) {
        {
            let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
            f(kinds.entry(kind.to_string()).or_default());
        }
        if terminal {
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
        self.changed.notify_waiters();
    }
}

struct DevMetrics {
    counter: Arc<DevCounter>,
    process: ProcessMetrics,
}

impl Metrics for DevMetrics {
    fn job_enqueued(&self, kind: &JobKind, queue: &QueueName) {
        self.process.job_enqueued(kind, queue);
    }

    fn job_started(&self, kind: &JobKind, queue: &QueueName) {
        self.process.job_started(kind, queue);
    }

    fn job_finished(
        &self,
        kind: &JobKind,
        queue: &QueueName,
        outcome: JobOutcome,
        duration: Duration,
    ) {
        self.process.job_finished(kind, queue, outcome, duration);
        match outcome {
            JobOutcome::Succeeded => self.counter.count(kind, |c| c.succeeded += 1, true),
            JobOutcome::Failed => self.counter.count(kind, |c| c.failed += 1, true),
            JobOutcome::Cancelled => self.counter.count(kind, |c| c.cancelled += 1, true),
            JobOutcome::Retried => self.counter.count(kind, |c| c.retried += 1, false),
            _ => {}
        }
    }

    fn job_rescued(&self, kind: &JobKind, queue: &QueueName, to: JobState) {
        self.process.job_rescued(kind, queue, to);
        match to {
            JobState::Failed => self.counter.count(kind, |c| c.failed += 1, true),
            JobState::Cancelled => self.counter.count(kind, |c| c.cancelled += 1, true),
            _ => {}
        }
    }
}

/// The built-in demo set: 240 jobs of every built-in kind over three queues; some fail and
/// retry, some fail for good.
pub fn demo_jobs() -> Vec<(usize, NewJob)> {
    let lines = (0..240).map(|i| match i {
        0..=99 => json!({"kind": "noop"}),
        100..=159 => json!({"kind": "sleep", "args": {"ms": 5 + (i * 7) % 45}}),
        160..=189 => json!({"kind": "fail", "args": {"fail_times": 1 + i % 2}, "max_attempts": 3}),
        190..=209 => {
            json!({"kind": "fail", "args": {"fail_times": 3}, "max_attempts": 2, "queue": "mail"})
        }
        _ => json!({"kind": "sleep", "args": {"ms": 20}, "queue": "reports", "priority": -1}),
    });
    lines
        .enumerate()
        .filter_map(|(i, v)| jsonl::parse_line(&v.to_string()).ok().map(|j| (i + 1, j)))
        .collect()
}

/// Splits off the jobs whose kind has no handler in `registry` (no worker of this process
/// would ever claim them), as rejected lines saying which kinds there are.
pub fn split_unhandled(
    jobs: Vec<(usize, NewJob)>,
    registry: &Registry,
) -> (Vec<(usize, NewJob)>, Vec<RejectedLine>) {
    let known = || {
        registry
            .kinds()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut kept = Vec::with_capacity(jobs.len());
    let mut rejected = Vec::new();
    for (line, job) in jobs {
        if registry.contains(&job.kind) {
            kept.push((line, job));
        } else if job.kind.as_str() == "exec" {
            rejected.push(RejectedLine::new(
                line,
                "kind exec runs only with --allow-exec PROGRAM",
            ));
        } else {
            rejected.push(RejectedLine::new(
                line,
                format!(
                    "no handler for kind {} in this binary (kinds: {})",
                    job.kind,
                    known()
                ),
            ));
        }
    }
    (kept, rejected)
}

/// Runs `drover dev`.
pub async fn run(ctx: &Ctx, args: DevArgs, extensions: Extensions) -> Result<()> {
    if ctx.database_url.is_some() {
        errln!("drover: dev always uses the in-memory store; the database URL is ignored");
    }
    let (jobs, mut rejected) = match &args.jobs {
        Some(path) => {
            let parsed = jsonl::read_path(path)?;
            (parsed.jobs, parsed.rejected)
        }
        None => (demo_jobs(), Vec::new()),
    };
    errln!("drover: in-memory development mode: nothing persists after exit");

    let mut queues: Vec<QueueName> = jobs.iter().map(|(_, j)| j.queue.clone()).collect();
    queues.push(QueueName::default_queue());
    queues.sort();
    queues.dedup();
    let mut config = worker_config(&args.worker_args, &queues);
    if args.worker_args.poll_interval.is_none() {
        // Retries become ready on their own clock; poll often so the demo does not idle.
        config.poll_interval = Duration::from_millis(50);
    }
    let mut registry = extensions.registry;
    crate::builtin::register(&mut registry, &args.worker_args.allow_exec);
    registry.set_default_config(KindConfig::default().with_backoff(Backoff {
        base: Duration::from_millis(50),
        cap: Duration::from_secs(2),
        jitter: 0.25,
    }));
    let process = Process::new(ctx, ProcessKind::Dev, &args.worker_args);
    let registry = Arc::new(registry);
    let mut process = process.worker(config, Arc::clone(&registry))?;
    // A job of a kind without a handler would wait until --max-wait; report it like a bad line.
    let (jobs, unhandled) = split_unhandled(jobs, &registry);
    rejected.extend(unhandled);
    if let Some(listen) = args.listen {
        let auth = match env::api_tokens() {
            // Parsed as serve parses it: a malformed list is a usage error naming
            // DROVER_API_TOKENS (exit 2).
            Some(_) => crate::commands::serve::auth_mode(None, false)?,
            None => {
                errln!(
                    "drover: API without authentication (set DROVER_API_TOKENS to require tokens)"
                );
                AuthMode::InsecureNoAuth
            }
        };
        process = process.api(Api {
            listen,
            auth,
            config: ApiConfig::default(),
        });
    }
    let counter = Arc::new(DevCounter::default());
    let counted = Arc::clone(&counter);
    let running = process
        .worker_metrics(move |process| {
            Arc::new(DevMetrics {
                counter: counted,
                process,
            })
        })
        .start()
        .await?;
    let shutdown = running.shutdown().clone();

    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + args.max_wait;
    // Quotas hold in dev mode too (DROVER_MAX_PENDING, DROVER_MAX_TENANT_PENDING): a file with
    // more jobs than they allow waits for this worker to make room instead of dropping lines.
    let loaded = enqueue::load(
        running.client(),
        jobs,
        1000,
        None,
        enqueue::OnQuota::Wait(enqueue::RoomWait {
            room: Some(&counter.changed),
            deadline: Some(deadline),
            interrupt: Some(&shutdown),
        }),
    )
    .await;
    if let Some(stopped) = loaded.stopped {
        return Err(anyhow!("{}", stopped.error));
    }
    if let Some(line) = loaded.interrupted_at {
        errln!("drover: interrupted: no line from {line} on was enqueued");
    }
    rejected.extend(loaded.rejected);
    rejected.sort_by_key(|r| r.line);
    for line in jsonl::report_rejected(&rejected, |_| None) {
        errln!("drover: {line}");
    }
    let total = loaded.created.len() as u64;
    {
        let mut kinds = counter.kinds.lock().unwrap_or_else(|e| e.into_inner());
        for job in &loaded.created {
            kinds.entry(job.kind.to_string()).or_default().jobs += 1;
        }
    }

    let bar = (!args.quiet && !ctx.json).then(|| {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} jobs done {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    loop {
        let changed = counter.changed.notified();
        let finished = counter.finished.load(Ordering::SeqCst);
        if let Some(bar) = &bar {
            bar.set_position(finished);
        }
        if finished >= total || shutdown.is_cancelled() {
            break;
        }
        tokio::select! {
            () = changed => {}
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => {
                errln!("drover: gave up waiting after {} (--max-wait)", humantime::format_duration(args.max_wait));
                break;
            }
        }
    }
    let wall = started.elapsed();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let finished = counter.finished.load(Ordering::SeqCst).min(total);
    let summary = DevSummary {
        kinds: counter
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
        total,
        finished,
        unfinished: total - finished,
        wall_seconds: wall.as_secs_f64(),
        jobs_per_second: if wall.as_secs_f64() > 0.0 {
            finished as f64 / wall.as_secs_f64()
        } else {
            0.0
        },
        replayed: loaded.replayed,
        duplicate: loaded.duplicate,
        rejected,
    };
    print_summary(ctx, &summary)?;

    if running.serves_api() && !shutdown.is_cancelled() {
        errln!("drover: still serving the API and working jobs; Ctrl-C to stop");
        running.wait().await;
    }
    running.stop().await?;
    if summary.rejected.is_empty() {
        Ok(())
    } else {
        // As `drover enqueue --file`: the good lines ran; the exit code still tells a script
        // that some were not.
        Err(anyhow!(
            "{} input line(s) rejected (listed above); every other line was run",
            summary.rejected.len()
        ))
    }
}

fn print_summary(ctx: &Ctx, s: &DevSummary) -> Result<()> {
    if ctx.json {
        return output::print_json(s);
    }
    let mut t = table(&[
        "kind",
        "jobs",
        "succeeded",
        "failed",
        "retried",
        "cancelled",
    ]);
    let mut sum = KindCounts::default();
    for (kind, c) in &s.kinds {
        t.add_row(vec![
            kind.clone(),
            c.jobs.to_string(),
            c.succeeded.to_string(),
            c.failed.to_string(),
            c.retried.to_string(),
            c.cancelled.to_string(),
        ]);
        sum.jobs += c.jobs;
        sum.succeeded += c.succeeded;
        sum.failed += c.failed;
        sum.retried += c.retried;
        sum.cancelled += c.cancelled;
    }
    t.add_row(vec![
        "total".to_owned(),
        sum.jobs.to_string(),
        sum.succeeded.to_string(),
        sum.failed.to_string(),
        sum.retried.to_string(),
        sum.cancelled.to_string(),
    ]);
    outln!("{t}")?;
    outln!(
        "{} jobs finished in {} ({:.0} jobs/s){}{}{}",
        s.finished,
        output::duration(Duration::from_secs_f64(s.wall_seconds)),
        s.jobs_per_second,
        if s.unfinished > 0 {
            format!(", {} unfinished", s.unfinished)
        } else {
            String::new()
        },
        if s.replayed + s.duplicate > 0 {
            format!(
                ", {} line(s) answered by an existing job ({} replayed, {} duplicate)",
                s.replayed + s.duplicate,
                s.replayed,
                s.duplicate
            )
        } else {
            String::new()
        },
        if s.rejected.is_empty() {
            String::new()
        } else {
            format!(", {} input line(s) rejected", s.rejected.len())
        },
    )?;
    Ok(())
}

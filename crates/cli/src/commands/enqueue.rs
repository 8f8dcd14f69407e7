//! `drover enqueue`: one job from flags, or a JSON Lines file in batches with a progress bar,
//! reporting bad lines by number and loading the rest.

use std::fs::File;
use std::io::BufReader;

use anyhow::{anyhow, Context, Result};
use drover_core::{EnqueueStatus, NewJob};
use drover_http::dto::EnqueueRequest;
use drover_http::Principal;
use serde_json::{json, Value};

use crate::args::EnqueueArgs;
use crate::context::{call, Ctx};
use crate::jsonl::{self, RejectedLine};
use crate::output::{outln, print_json};

/// Builds the job of a single-job `enqueue` from its flags, with the same rules as the HTTP API.
///
/// # Errors
/// A flag value that breaks its rule, naming the field.
pub fn job_from_flags(args: &EnqueueArgs) -> Result<NewJob> {
    let parse = |field: &str, text: &Option<String>| -> Result<Option<Value>> {
        text.as_deref()
            .map(|t| super::json_flag(field, t))
            .transpose()
    };
    let request = EnqueueRequest {
        kind: args
            .kind
            .clone()
            .ok_or_else(|| anyhow!("give a KIND or --file"))?,
        args: parse("args", &args.args)?,
        queue: args.queue.clone(),
        tenant: args.tenant.clone(),
        priority: args.priority,
        run_at: args.run_at.clone(),
        delay_ms: args
            .delay
            .map(|d| {
                if d > drover_core::job::DELAY_MAX {
                    return Err(anyhow!(
                        "invalid --delay: must be at most 100 years, got {}",
                        humantime::format_duration(d)
                    ));
                }
                Ok(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            })
            .transpose()?,
        max_attempts: args.max_attempts,
        unique_key: args.unique_key.clone(),
        limit_keys: (!args.limit_keys.is_empty()).then(|| args.limit_keys.clone()),
        meta: parse("meta", &args.meta)?,
        idempotency_key: args.idempotency_key.clone(),
    };
    let job = request
        .into_new_job(&Principal::insecure(), None)
        .map_err(|e| anyhow!("{}", e.message()))?;
    job.validate(&drover_core::SizeLimits::default())
        .map_err(|e| anyhow!("{e}"))?;
    Ok(job)
}

/// What [`load`] did.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Jobs created, in file order.
    pub created: Vec<drover_core::Job>,
    /// Lines answered as idempotent replays.
    pub replayed: u64,
    /// Lines answered as unique-key duplicates.
    pub duplicate: u64,
    /// Lines the store refused (conflict, quota, ...), with the reason.
    pub rejected: Vec<RejectedLine>,
}

fn refusal(e: &drover_core::Error) -> bool {
    !e.is_transient() && !matches!(e, drover_core::Error::Fatal { .. })
}

/// Enqueues numbered jobs in batches of `batch_size`. A batch the store refuses as a whole
/// because of one job (a conflict, a quota) is retried job by job, so every good line still
/// loads and each refused one is reported with its line number.
///
/// # Errors
/// Transient and fatal store errors (nothing more is loaded).
pub async fn load(
    store: &dyn drover_core::JobStore,
    jobs: Vec<(usize, NewJob)>,
    batch_size: usize,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<Loaded, drover_core::Error> {
    let mut loaded = Loaded::default();
    for chunk in jobs.chunks(batch_size.max(1)) {
        let batch: Vec<NewJob> = chunk.iter().map(|(_, j)| j.clone()).collect();
        let answers = match store.jobs_enqueue(batch).await {
            Ok(answers) => answers,
            Err(e) if refusal(&e) => {
                let mut answers = Vec::new();
                for (line, job) in chunk {
                    match store.job_enqueue(job.clone()).await {
                        Ok(a) => answers.push(a),
                        Err(e) if refusal(&e) => loaded.rejected.push(RejectedLine {
                            line: *line,
                            error: e.to_string(),
                        }),
                        Err(e) => return Err(e),
                    }
                }
                answers
            }
            Err(e) => return Err(e),
        };
        for a in answers {
            match a.status {
                EnqueueStatus::Created => loaded.created.push(a.job),
                EnqueueStatus::Replayed => loaded.replayed += 1,
                EnqueueStatus::Duplicate => loaded.duplicate += 1,
            }
        }
        if let Some(bar) = bar {
            bar.inc(chunk.len() as u64);
        }
    }
    Ok(loaded)
}

/// Runs `drover enqueue`.
pub async fn run(ctx: &Ctx, args: EnqueueArgs) -> Result<()> {
    if let Some(path) = args.file.clone() {
        return from_file(ctx, &path, args.batch_size).await;
    }
    let job = job_from_flags(&args)?;
    let store = ctx.store().await?;
    let answer = call(ctx, store.job_enqueue(job)).await?;
    if ctx.json {
        return print_json(&answer);
    }
    let what = match answer.status {
        EnqueueStatus::Created => "enqueued",
        EnqueueStatus::Replayed => "already enqueued with this idempotency key",
        EnqueueStatus::Duplicate => "a live job holds this unique key",
    };
    outln!(
        "{} job {} ({}, queue {}, state {})",
        what,
        answer.job.id,
        answer.job.kind,
        answer.job.queue,
        answer.job.state
    )?;
    Ok(())
}

async fn from_file(ctx: &Ctx, path: &std::path::Path, batch_size: usize) -> Result<()> {
    if batch_size == 0 || batch_size > 10_000 {
        return Err(anyhow!("invalid --batch-size: must be between 1 and 10000"));
    }
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let parsed = jsonl::read(BufReader::new(file))
        .with_context(|| format!("cannot read {}", path.display()))?;
    let store = ctx.store().await?;
    let mut rejected: Vec<RejectedLine> = parsed.rejected;
    let total = parsed.jobs.len() as u64;
    let bar = (!ctx.json).then(|| {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} jobs ({per_sec}) {elapsed}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let loaded = load(store.as_ref(), parsed.jobs, batch_size, bar.as_ref())
        .await
        .map_err(|e| ctx.explain(e))?;
    rejected.extend(loaded.rejected);
    let (created, replayed, duplicate) = (loaded.created.len(), loaded.replayed, loaded.duplicate);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    rejected.sort_by_key(|r| r.line);
    if ctx.json {
        print_json(&json!({
            "created": created,
            "replayed": replayed,
            "duplicate": duplicate,
            "rejected": rejected,
        }))?;
    } else {
        outln!(
            "{created} enqueued, {replayed} replayed, {duplicate} duplicate, {} rejected",
            rejected.len()
        )?;
        for r in &rejected {
            eprintln!("line {}: {}", r.line, r.error);
        }
    }
    if rejected.is_empty() {
        Ok(())
    } else {
        // The good lines are loaded; the exit code still tells a script that some were not.
        Err(anyhow!(
            "{} line(s) of {} rejected (listed above); every other line was loaded",
            rejected.len(),
            path.display()
        ))
    }
}

//! `drover enqueue`: one job from flags, or a JSON Lines file in batches with a progress bar,
//! reporting bad lines by number and loading the rest.

use anyhow::{anyhow, Result};
use drover_core::{EnqueueStatus, NewJob};
use drover_http::dto::EnqueueRequest;
use drover_http::Principal;
use serde_json::{json, Value};

use crate::args::EnqueueArgs;
use crate::context::{call, Ctx};
use crate::jsonl::{self, RejectedLine};
use crate::output::{errln, outln, print_json};
use crate::usage::{flag_error, usage};

/// The flag of each field of an enqueue request, for messages about a single-job `enqueue`.
const FLAGS: &[(&str, &str)] = &[
    ("kind", "KIND"),
    ("args", "--args"),
    ("queue", "--queue"),
    ("tenant", "--tenant"),
    ("priority", "--priority"),
    ("run_at", "--run-at"),
    ("delay_ms", "--delay"),
    ("max_attempts", "--max-attempts"),
    ("unique_key", "--unique-key"),
    ("limit_keys", "--limit-key"),
    ("meta", "--meta"),
    ("idempotency_key", "--idempotency-key"),
];

/// Builds the job of a single-job `enqueue` from its flags, with the same rules as the HTTP API.
///
/// # Errors
/// A usage error naming the flag whose value breaks its rule (the value is not quoted).
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
            .ok_or_else(|| usage("give a KIND or --file"))?,
        args: parse("args", &args.args)?,
        queue: args.queue.clone(),
        tenant: args.tenant.clone(),
        priority: args.priority,
        run_at: args.run_at.clone(),
        delay_ms: args
            .delay
            .map(|d| {
                if d > drover_core::job::DELAY_MAX {
                    return Err(usage(format!(
                        "invalid --delay: must be at most 36500 days (100 years of 365 days), got {:.2} days",
                        d.as_secs_f64() / 86_400.0
                    )));
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
        .map_err(|e| match e.field() {
            Some(field) => {
                let prefix = format!("invalid {field}: ");
                let reason = e.message().strip_prefix(&prefix).unwrap_or(e.message());
                flag_error(drover_core::Error::invalid(field, reason), FLAGS)
            }
            None => anyhow!("{}", e.message()),
        })?;
    job.validate(&drover_core::SizeLimits::default())
        .map_err(|e| flag_error(e, FLAGS))?;
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
    /// Set when a transient or fatal store error stopped the load before the end.
    pub stopped: Option<Stopped>,
}

/// Where a load stopped: every line before `first_line` was settled (created, answered or
/// rejected, as counted in [`Loaded`]); the lines `first_line..=last_line` were being written
/// when `error` came, so they may or may not be stored (a connection lost during a commit
/// cannot tell); no line after `last_line` was sent.
#[derive(Debug)]
pub struct Stopped {
    /// The error that stopped the load.
    pub error: drover_core::Error,
    /// First line (1-based) of the batch in flight.
    pub first_line: usize,
    /// Last line of the batch in flight.
    pub last_line: usize,
}

/// What [`load`] does with a job a pending quota refuses.
#[derive(Debug, Clone, Copy)]
pub enum OnQuota<'a> {
    /// Report its line as rejected (`drover enqueue --file`: an operator's load must not
    /// wait on workers that may not be running).
    Reject,
    /// Wait until `room` is notified (a job finished) and try again, until `deadline`; then
    /// reject it (`drover dev`, whose own worker makes the room).
    Wait {
        /// Notified when a job finishes.
        room: &'a tokio::sync::Notify,
        /// When to stop waiting.
        deadline: tokio::time::Instant,
    },
}

/// Longest wait for room before trying a quota-refused job again when no finish was noticed
/// (a notification can come between the refusal and the wait).
const ROOM_RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

fn refusal(e: &drover_core::Error) -> bool {
    !e.is_transient() && !matches!(e, drover_core::Error::Fatal { .. })
}

/// Enqueues numbered jobs in batches of `batch_size`. A batch the store refuses as a whole
/// because of one job (a conflict, a quota) is retried job by job, so every good line still
/// loads and each refused one is reported with its line number (or, with [`OnQuota::Wait`],
/// waits for room when a quota refused it).
///
/// A transient or fatal store error (connection lost, database down) stops the load: what was
/// settled before it is returned with [`Loaded::stopped`] saying which lines were in flight,
/// so the caller can tell the operator exactly where to resume. Nothing is retried
/// automatically: a batch whose commit was cut off may be stored already, and sending it again
/// would enqueue its jobs twice.
pub async fn load(
    store: &dyn drover_core::JobStore,
    jobs: Vec<(usize, NewJob)>,
    batch_size: usize,
    bar: Option<&indicatif::ProgressBar>,
    on_quota: OnQuota<'_>,
) -> Loaded {
    let mut loaded = Loaded::default();
    for chunk in jobs.chunks(batch_size.max(1)) {
        let first_line = chunk.first().map_or(0, |(line, _)| *line);
        let last_line = chunk.last().map_or(0, |(line, _)| *line);
        let stop = |error| Stopped {
            error,
            first_line,
            last_line,
        };
        let batch: Vec<NewJob> = chunk.iter().map(|(_, j)| j.clone()).collect();
        let answers = match store.jobs_enqueue(batch).await {
            Ok(answers) => answers,
            Err(e) if refusal(&e) => {
                let mut answers = Vec::new();
                for (line, job) in chunk {
                    match enqueue_one(store, job, on_quota).await {
                        Ok(a) => answers.push(a),
                        Err(e) if refusal(&e) => loaded.rejected.push(RejectedLine {
                            line: *line,
                            error: e.to_string(),
                        }),
                        Err(e) => {
                            // The lines before this one are settled.
                            count(&mut loaded, answers);
                            loaded.stopped = Some(Stopped {
                                error: e,
                                first_line: *line,
                                last_line: *line,
                            });
                            return loaded;
                        }
                    }
                }
                answers
            }
            Err(e) => {
                loaded.stopped = Some(stop(e));
                return loaded;
            }
        };
        count(&mut loaded, answers);
        if let Some(bar) = bar {
            bar.inc(chunk.len() as u64);
        }
    }
    loaded
}

fn count(loaded: &mut Loaded, answers: Vec<drover_core::Enqueued>) {
    for a in answers {
        match a.status {
            EnqueueStatus::Created => loaded.created.push(a.job),
            EnqueueStatus::Replayed => loaded.replayed += 1,
            EnqueueStatus::Duplicate => loaded.duplicate += 1,
        }
    }
}

/// Enqueues one job; with [`OnQuota::Wait`], a quota refusal waits for room and tries again
/// until the deadline.
async fn enqueue_one(
    store: &dyn drover_core::JobStore,
    job: &NewJob,
    on_quota: OnQuota<'_>,
) -> Result<drover_core::Enqueued, drover_core::Error> {
    loop {
        let waiting = match on_quota {
            OnQuota::Wait { room, deadline } if tokio::time::Instant::now() < deadline => {
                Some((room.notified(), deadline))
            }
            _ => None,
        };
        match (store.job_enqueue(job.clone()).await, waiting) {
            (Err(drover_core::Error::QuotaExceeded { .. }), Some((notified, deadline))) => {
                let recheck = (tokio::time::Instant::now() + ROOM_RECHECK).min(deadline);
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep_until(recheck) => {}
                }
            }
            (other, _) => return other,
        }
    }
}

/// `text` as one POSIX shell word: unchanged when it holds only characters no shell treats
/// specially, else in single quotes (a single quote inside written as `'\''`).
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%=".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
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
    let parsed = jsonl::read_path(path)?;
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
    let loaded = load(
        store.as_ref(),
        parsed.jobs,
        batch_size,
        bar.as_ref(),
        OnQuota::Reject,
    )
    .await;
    rejected.extend(loaded.rejected);
    if let Some(stopped) = &loaded.stopped {
        // Lines from the batch in flight on were never settled (bad lines among them were
        // found by parsing, ahead of the load): they are reported when the rest is loaded.
        rejected.retain(|r| r.line < stopped.first_line);
    }
    let (created, replayed, duplicate) = (loaded.created.len(), loaded.replayed, loaded.duplicate);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    rejected.sort_by_key(|r| r.line);
    if ctx.json {
        let stopped = loaded.stopped.as_ref().map(|s| {
            json!({
                "in_flight_first_line": s.first_line,
                "in_flight_last_line": s.last_line,
                "resume_from_line": s.last_line + 1,
            })
        });
        print_json(&json!({
            "created": created,
            "replayed": replayed,
            "duplicate": duplicate,
            "rejected": rejected,
            "stopped": stopped,
        }))?;
    } else {
        outln!(
            "{created} enqueued, {replayed} replayed, {duplicate} duplicate, {} rejected",
            rejected.len()
        )?;
        for r in &rejected {
            errln!("drover: line {}: {}", r.line, r.error);
        }
    }
    if let Some(stopped) = loaded.stopped {
        // Exactly what is settled and what is not, so the operator resumes without loading
        // a line twice or skipping one.
        let error = ctx.explain(stopped.error);
        let next = stopped.last_line + 1;
        let in_flight = if stopped.first_line == stopped.last_line {
            format!("line {}", stopped.first_line)
        } else {
            format!("lines {}-{}", stopped.first_line, stopped.last_line)
        };
        return Err(anyhow!(
            "stopped at {in_flight} of {file}: {error}. Every line before {first} is settled \
             (counted above); {in_flight} may or may not be stored (the write was cut off: \
             check with `drover jobs list` before sending {them} again); no line after {last} \
             was sent (resume with {resume})",
            file = jsonl::source_name(path),
            resume = if jsonl::is_stdin(path) {
                format!("the same input from line {next} on: `... | tail -n +{next} | drover enqueue --file -`")
            } else {
                format!(
                    "`tail -n +{next} {} | drover enqueue --file -`",
                    shell_quote(&path.display().to_string())
                )
            },
            first = stopped.first_line,
            last = stopped.last_line,
            them = if stopped.first_line == stopped.last_line {
                "it"
            } else {
                "them"
            },
        ));
    }
    if rejected.is_empty() {
        Ok(())
    } else {
        // The good lines are loaded; the exit code still tells a script that some were not.
        Err(anyhow!(
            "{} line(s) of {} rejected (listed above); every other line was loaded",
            rejected.len(),
            jsonl::source_name(path)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn paths_are_quoted_for_the_shell_only_when_needed() {
        assert_eq!(shell_quote("jobs/load-1.jsonl"), "jobs/load-1.jsonl");
        assert_eq!(shell_quote("my jobs.jsonl"), "'my jobs.jsonl'");
        assert_eq!(shell_quote("it's.jsonl"), "'it'\\''s.jsonl'");
        assert_eq!(shell_quote("$HOME/x"), "'$HOME/x'");
        assert_eq!(shell_quote(""), "''");
    }
}

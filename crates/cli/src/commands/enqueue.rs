//! `drover enqueue`: one job from flags, or a JSON Lines file in batches with a progress bar,
//! reporting bad lines by number (one line per rule broken) and loading the rest; with
//! `--wait-for-room`, lines a quota refuses wait for room instead. `--workflow FILE` enqueues
//! a workflow graph, the body of `POST /v1/workflows`, all or nothing (docs/design.md
//! section 10). Every path stores the caller's trace given in `TRACEPARENT`/`TRACESTATE` with
//! its jobs, as the HTTP API does the headers' (docs/opentelemetry.md).

use std::io::IsTerminal;

use anyhow::{anyhow, Result};
use drover_core::{EnqueueStatus, NewJob};
use drover_http::dto::EnqueueRequest;
use drover_http::Principal;
use drover_runner::Client;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::args::EnqueueArgs;
use crate::context::{call, Ctx};
use crate::env;
use crate::jsonl::{self, RejectedLine};
use crate::output::{errln, outln, print_json};
use crate::signals;
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
    ("depends_on", "--depends-on"),
    ("run_regardless", "--run-regardless"),
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
        depends_on: (!args.depends_on.is_empty())
            .then(|| args.depends_on.iter().map(ToString::to_string).collect()),
        run_regardless: args.run_regardless.then_some(true),
        name: None,
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
    /// Set when [`RoomWait::interrupt`] stopped the load: the first line not sent. Every line
    /// before it is settled; neither it nor any later line was sent.
    pub interrupted_at: Option<usize>,
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

/// What [`load`] does with jobs a pending quota refuses.
#[derive(Debug, Clone, Copy)]
pub enum OnQuota<'a> {
    /// Report their lines as rejected (`drover enqueue --file`: an operator's load must not
    /// wait on workers that may not be running).
    Reject,
    /// Wait for room and try again (`drover enqueue --file --wait-for-room`, and `drover dev`,
    /// whose own worker makes the room).
    Wait(RoomWait<'a>),
}

/// How [`OnQuota::Wait`] waits for a quota to have room.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoomWait<'a> {
    /// Notified when a job finishes (`drover dev`'s own worker); without it, or when no
    /// notification comes, the load tries again after a pause that grows from 100 ms to 1 s
    /// while the quota stays full.
    pub room: Option<&'a tokio::sync::Notify>,
    /// When to stop waiting and reject the refused lines instead; `None`: never.
    pub deadline: Option<tokio::time::Instant>,
    /// Fires to stop the load before the next batch is sent, or while it waits for room
    /// ([`Loaded::interrupted_at`]).
    pub interrupt: Option<&'a CancellationToken>,
}

impl RoomWait<'_> {
    fn waiting(&self) -> bool {
        self.deadline
            .is_none_or(|deadline| tokio::time::Instant::now() < deadline)
    }

    fn interrupted(&self) -> bool {
        self.interrupt.is_some_and(CancellationToken::is_cancelled)
    }

    /// Waits for a notification, `pause`, the deadline or the interrupt; `false` when
    /// interrupted.
    async fn pause(&self, pause: std::time::Duration) -> bool {
        let mut until = tokio::time::Instant::now() + pause;
        if let Some(deadline) = self.deadline {
            until = until.min(deadline);
        }
        let notified = async {
            match self.room {
                Some(room) => room.notified().await,
                None => std::future::pending().await,
            }
        };
        let interrupted = async {
            match self.interrupt {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = notified => true,
            () = tokio::time::sleep_until(until) => true,
            () = interrupted => false,
        }
    }
}

/// The first pause before trying again a job a quota refused, when no finish was noticed (a
/// notification can come between the refusal and the wait); it doubles while the quota stays
/// full, up to [`ROOM_RECHECK_MAX`].
const ROOM_RECHECK: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest pause between tries while a quota stays full.
const ROOM_RECHECK_MAX: std::time::Duration = std::time::Duration::from_secs(1);

fn refusal(e: &drover_core::Error) -> bool {
    !e.is_transient() && !matches!(e, drover_core::Error::Fatal { .. })
}

/// How one job (or the lines of a batch) ended in [`load`]'s loop.
enum Step {
    /// The store answered every job.
    Done,
    /// The store refused it for this reason (a rule, not a fault).
    Refused(drover_core::Error),
    /// A transient or fatal error: the load stops.
    Fault(drover_core::Error),
    /// The interrupt fired before it was sent.
    Interrupted,
}

/// Sends `jobs` as one batch; with [`OnQuota::Wait`], a quota refusal sends as many as the
/// quota has room for, or waits for room, until every job is in, the wait ends (its deadline:
/// then the refusal is returned) or the interrupt fires. Returns the answers of the jobs that
/// went in (the first ones, in order) and how it ended; `bar` advances as jobs go in.
async fn send_batch(
    client: &Client,
    jobs: &[NewJob],
    on_quota: OnQuota<'_>,
    bar: Option<&indicatif::ProgressBar>,
) -> (Vec<drover_core::Enqueued>, Step) {
    let mut answers = Vec::with_capacity(jobs.len());
    let mut rest = jobs;
    let mut take = rest.len();
    let mut pause = ROOM_RECHECK;
    while !rest.is_empty() {
        let waiting = match on_quota {
            OnQuota::Wait(wait) if wait.interrupted() => return (answers, Step::Interrupted),
            OnQuota::Wait(wait) if wait.waiting() => Some(wait),
            _ => None,
        };
        match (client.enqueue_many(rest[..take].to_vec()).await, waiting) {
            (Ok(done), _) => {
                if let Some(bar) = bar {
                    bar.inc(take as u64);
                    bar.set_message("");
                }
                answers.extend(done);
                rest = &rest[take..];
                take = rest.len();
                pause = ROOM_RECHECK;
            }
            (
                Err(drover_core::Error::QuotaExceeded {
                    quota,
                    current,
                    max,
                }),
                Some(wait),
            ) => {
                let room = usize::try_from(max.saturating_sub(current)).unwrap_or(usize::MAX);
                if room > 0 && room < take {
                    // Room for some: send those at once.
                    take = room;
                    continue;
                }
                if let Some(bar) = bar {
                    bar.set_message(format!(
                        "waiting for room: {quota} allows {max} pending jobs, {current} pending"
                    ));
                }
                if !wait.pause(pause).await {
                    return (answers, Step::Interrupted);
                }
                pause = (pause * 2).min(ROOM_RECHECK_MAX);
                take = rest.len();
            }
            (Err(e), _) if refusal(&e) => return (answers, Step::Refused(e)),
            (Err(e), _) => return (answers, Step::Fault(e)),
        }
    }
    (answers, Step::Done)
}

/// Enqueues numbered jobs in batches of `batch_size`. A batch the store refuses as a whole
/// because of one job (a conflict, a quota) is retried job by job, so every good line still
/// loads and each refused one is reported with its line number. With [`OnQuota::Wait`] a
/// quota refusal does not reject lines: the load sends as many jobs as the quota has room
/// for and waits for room for the rest, in file order (see [`RoomWait`]).
///
/// A transient or fatal store error (connection lost, database down) stops the load: what was
/// settled before it is returned with [`Loaded::stopped`] saying which lines were in flight,
/// so the caller can tell the operator exactly where to resume. Nothing is retried
/// automatically: a batch whose commit was cut off may be stored already, and sending it again
/// would enqueue its jobs twice.
pub async fn load(
    client: &Client,
    jobs: Vec<(usize, NewJob)>,
    batch_size: usize,
    bar: Option<&indicatif::ProgressBar>,
    on_quota: OnQuota<'_>,
) -> Loaded {
    let mut loaded = Loaded::default();
    for chunk in jobs.chunks(batch_size.max(1)) {
        let batch: Vec<NewJob> = chunk.iter().map(|(_, j)| j.clone()).collect();
        let (answers, step) = send_batch(client, &batch, on_quota, bar).await;
        // The lines answered so far are settled; `next` is the first that is not.
        let next = answers.len();
        count(&mut loaded, answers);
        let first_line = chunk[next..].first().map_or(0, |(line, _)| *line);
        let last_line = chunk.last().map_or(0, |(line, _)| *line);
        match step {
            Step::Done => continue,
            Step::Interrupted => {
                loaded.interrupted_at = Some(first_line);
                return loaded;
            }
            Step::Fault(error) => {
                loaded.stopped = Some(Stopped {
                    error,
                    first_line,
                    last_line,
                });
                return loaded;
            }
            Step::Refused(_) => {}
        }
        for (line, job) in &chunk[next..] {
            match send_batch(client, std::slice::from_ref(job), on_quota, bar).await {
                (answers, Step::Done) => count(&mut loaded, answers),
                (_, Step::Refused(e)) => {
                    loaded.rejected.push(RejectedLine::refused(*line, &e));
                    if let Some(bar) = bar {
                        bar.inc(1);
                    }
                }
                (_, Step::Interrupted) => {
                    loaded.interrupted_at = Some(*line);
                    return loaded;
                }
                (_, Step::Fault(error)) => {
                    // The lines before this one are settled.
                    loaded.stopped = Some(Stopped {
                        error,
                        first_line: *line,
                        last_line: *line,
                    });
                    return loaded;
                }
            }
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
        return from_file(ctx, &args, &path).await;
    }
    if let Some(path) = args.workflow.clone() {
        return workflow_from_file(ctx, &args, &path).await;
    }
    let mut job = job_from_flags(&args)?;
    job.trace_context = env::trace_context();
    let client = ctx.client().await?;
    let answer = call(ctx, client.enqueue(job)).await?;
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

/// Largest workflow file: 64 MiB (10,000 jobs with room for their args).
pub const WORKFLOW_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Reads and checks a workflow file (`-`: standard input): the body of `POST /v1/workflows`,
/// with the same rules (a local file is trusted like its operator, so `exec` is allowed).
///
/// # Errors
/// The file cannot be read or is too large; the first rule it breaks, naming the field
/// (`jobs[1].depends_on[0]`), as the HTTP API would.
pub fn read_workflow(path: &std::path::Path) -> Result<drover_core::NewWorkflow> {
    use std::io::Read;
    let source = jsonl::source_name(path);
    let mut bytes = Vec::new();
    let reader: Box<dyn Read> = if jsonl::is_stdin(path) {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(path).map_err(|e| anyhow!("cannot open {source}: {e}"))?)
    };
    reader
        .take(WORKFLOW_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow!("cannot read {source}: {e}"))?;
    if bytes.len() as u64 > WORKFLOW_FILE_BYTES_MAX {
        return Err(usage(format!(
            "{source} is larger than {} MiB; a workflow holds at most {} jobs",
            WORKFLOW_FILE_BYTES_MAX / 1024 / 1024,
            drover_core::job::WORKFLOW_JOBS_MAX
        )));
    }
    let request: drover_http::dto::WorkflowRequest = drover_http::extract::parse_json(&bytes)
        .map_err(|e| anyhow!("{source}: {}", e.message()))?;
    request
        .into_new_workflow(&Principal::insecure(), &drover_core::SizeLimits::default())
        .map_err(|e| anyhow!("{source}: {}", e.message()))
}

async fn workflow_from_file(ctx: &Ctx, args: &EnqueueArgs, path: &std::path::Path) -> Result<()> {
    let per_job = args.args.is_some()
        || args.queue.is_some()
        || args.priority.is_some()
        || args.run_at.is_some()
        || args.delay.is_some()
        || args.max_attempts.is_some()
        || args.idempotency_key.is_some()
        || args.unique_key.is_some()
        || args.tenant.is_some()
        || args.meta.is_some()
        || !args.limit_keys.is_empty()
        || !args.depends_on.is_empty();
    if per_job {
        return Err(usage(
            "the per-job flags do not apply to --workflow: give each job's fields in the file",
        ));
    }
    let mut workflow = read_workflow(path)?;
    if let Some(context) = env::trace_context() {
        for job in &mut workflow.jobs {
            job.job.trace_context = Some(context.clone());
        }
    }
    let client = ctx.client().await?;
    let answer = call(ctx, client.enqueue_workflow(workflow)).await?;
    if ctx.json {
        return print_json(&answer);
    }
    let created = answer
        .jobs
        .iter()
        .filter(|a| a.status == EnqueueStatus::Created)
        .count();
    outln!(
        "enqueued workflow {}: {} job(s), {} created",
        answer.id,
        answer.jobs.len(),
        created
    )?;
    for enqueued in &answer.jobs {
        let job = &enqueued.job;
        outln!(
            "  {} {} ({}, {}){}",
            job.name.as_deref().unwrap_or("-"),
            job.id,
            job.kind,
            job.state,
            match enqueued.status {
                EnqueueStatus::Created => "",
                EnqueueStatus::Replayed => ": already enqueued with this idempotency key",
                EnqueueStatus::Duplicate => ": a live job holds this unique key",
            }
        )?;
    }
    Ok(())
}

async fn from_file(ctx: &Ctx, args: &EnqueueArgs, path: &std::path::Path) -> Result<()> {
    let mut parsed = jsonl::read_path(path)?;
    let trace_context = env::trace_context();
    for (_, job) in &mut parsed.jobs {
        job.trace_context.clone_from(&trace_context);
    }
    let client = ctx.client().await?;
    let mut rejected: Vec<RejectedLine> = parsed.rejected;
    let total = parsed.jobs.len() as u64;
    // A bar only for people: not with --json, not when stderr is a file or a pipe.
    let bar = (!ctx.json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} jobs ({per_sec}) {elapsed} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let interrupt = CancellationToken::new();
    let on_quota = if args.wait_for_room {
        // A stop signal ends the load between batches or while it waits, with the line to
        // resume from.
        signals::shutdown_on_signals(interrupt.clone(), signals::Finishing::Load);
        OnQuota::Wait(RoomWait {
            interrupt: Some(&interrupt),
            ..RoomWait::default()
        })
    } else {
        OnQuota::Reject
    };
    let loaded = load(
        &client,
        parsed.jobs,
        args.batch_size,
        bar.as_ref(),
        on_quota,
    )
    .await;
    rejected.extend(loaded.rejected);
    // Lines from the first one not settled on (bad lines among them were found by parsing,
    // ahead of the load) are reported when the rest is loaded.
    let unsettled = loaded
        .stopped
        .as_ref()
        .map(|s| s.first_line)
        .or(loaded.interrupted_at);
    if let Some(first) = unsettled {
        rejected.retain(|r| r.line < first);
    }
    let (created, replayed, duplicate) = (loaded.created.len(), loaded.replayed, loaded.duplicate);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    rejected.sort_by_key(|r| r.line);
    let file = jsonl::source_name(path);
    let resume = |next: usize, wait: &str| {
        if jsonl::is_stdin(path) {
            format!("the same input from line {next} on: `... | tail -n +{next} | drover enqueue --file -{wait}`")
        } else {
            format!(
                "`tail -n +{next} {} | drover enqueue --file -{wait}`",
                shell_quote(&path.display().to_string())
            )
        }
    };
    if ctx.json {
        let stopped = loaded.stopped.as_ref().map(|s| {
            json!({
                "in_flight_first_line": s.first_line,
                "in_flight_last_line": s.last_line,
                "resume_from_line": s.last_line + 1,
            })
        });
        let interrupted = loaded
            .interrupted_at
            .map(|line| json!({"resume_from_line": line}));
        print_json(&json!({
            "created": created,
            "replayed": replayed,
            "duplicate": duplicate,
            "rejected": rejected,
            "stopped": stopped,
            "interrupted": interrupted,
        }))?;
    } else {
        outln!(
            "{created} enqueued, {replayed} replayed, {duplicate} duplicate, {} rejected",
            rejected.len()
        )?;
        // One line per rule broken, however many lines broke it.
        let hint = |r: &RejectedLine| {
            r.rule
                .starts_with("quota ")
                .then(|| "--wait-for-room loads such lines as jobs finish and make room".to_owned())
        };
        for line in jsonl::report_rejected(&rejected, hint) {
            errln!("drover: {line}");
        }
    }
    if let Some(next) = loaded.interrupted_at {
        return Err(anyhow!(
            "interrupted at line {next} of {file}: every line before {next} is settled \
             (counted above); no line from {next} on was sent (resume with {})",
            resume(next, " --wait-for-room")
        ));
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
        let wait = if args.wait_for_room {
            " --wait-for-room"
        } else {
            ""
        };
        return Err(anyhow!(
            "stopped at {in_flight} of {file}: {error}. Every line before {first} is settled \
             (counted above); {in_flight} may or may not be stored (the write was cut off: \
             check with `drover jobs list` before sending {them} again); no line after {last} \
             was sent (resume with {resume})",
            resume = resume(next, wait),
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
            "{} line(s) of {file} rejected (listed above); every other line was loaded",
            rejected.len(),
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

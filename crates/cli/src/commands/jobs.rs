//! `drover jobs list|get|cancel|retry|requeue|delete|bulk`.

use crate::args::{BulkArgs, JobsCommand, ListArgs};
use crate::context::{call, Ctx};
use crate::output::{self, outln, print_json, table};
use crate::usage::flag_error;
use anyhow::Result;
use drover_core::{BulkJobs, CancelEffect, Job, JobDetails, JobId, JobPage, ListJobs};
use serde::Serialize;
use serde_json::Value;

/// A job as `jobs get --json` prints it: the stored job and whether it waits in a worker's
/// backlog for a slot (running, claimed ahead, not started).
#[derive(Serialize)]
struct JobJson<'a> {
    #[serde(flatten)]
    job: &'a Job,
    waiting_for_slot: bool,
}

impl<'a> From<&'a Job> for JobJson<'a> {
    fn from(job: &'a Job) -> Self {
        JobJson {
            job,
            waiting_for_slot: job.is_waiting_for_slot(),
        }
    }
}

/// A page of `jobs list --json`.
#[derive(Serialize)]
struct PageJson<'a> {
    jobs: Vec<JobJson<'a>>,
    next: Option<JobId>,
}

/// When the job's handler started, as the tables show it.
fn started(job: &Job) -> String {
    if job.is_waiting_for_slot() {
        "waiting for a slot".to_owned()
    } else {
        output::opt_time(job.started_at)
    }
}

/// Runs a `jobs` subcommand.
pub async fn run(ctx: &Ctx, command: JobsCommand) -> Result<()> {
    // The flags are checked before connecting (clap checked the ids and names).
    let query = match &command {
        JobsCommand::List(args) => Some(list_query(args)?),
        _ => None,
    };
    let bulk = match &command {
        JobsCommand::Bulk(args) => Some(bulk_jobs(args)?),
        _ => None,
    };
    let client = ctx.client().await?;
    match command {
        JobsCommand::List(_) => {
            let query = query.unwrap_or_default();
            let details = query.details;
            let page = call(ctx, client.list(query)).await?;
            if ctx.json {
                return print_json(&listed_json(&page, details)?);
            }
            let mut t = table(&[
                "id", "kind", "queue", "tenant", "state", "attempt", "run at", "started",
                "finished",
            ]);
            for j in &page.jobs {
                t.add_row(vec![
                    j.id.to_string(),
                    j.kind.to_string(),
                    j.queue.to_string(),
                    j.tenant.to_string(),
                    j.state.to_string(),
                    format!("{}/{}", j.attempt, j.max_attempts),
                    output::time(j.run_at),
                    started(j),
                    output::opt_time(j.finished_at),
                ]);
            }
            outln!("{t}")?;
            match page.next {
                Some(next) => outln!("more: --before {next}")?,
                None => outln!("{} job(s)", page.jobs.len())?,
            }
        }
        JobsCommand::Get { id } => {
            let job = call(ctx, client.get(id)).await?;
            if ctx.json {
                return print_json(&JobJson::from(&job));
            }
            print_job(&job)?;
        }
        JobsCommand::Cancel { id } => {
            let outcome = call(ctx, client.cancel(id)).await?;
            if ctx.json {
                return print_json(&outcome);
            }
            match outcome.effect {
                CancelEffect::Cancelled => outln!("job {} cancelled", outcome.job.id)?,
                CancelEffect::Requested => outln!(
                    "job {} is running: its handler was asked to stop; it ends cancelled, or succeeded if the handler completes anyway",
                    outcome.job.id
                )?,
            }
        }
        JobsCommand::Retry { id } => {
            let job = call(ctx, client.retry(id)).await?;
            if ctx.json {
                return print_json(&job);
            }
            outln!(
                "job {} queued again (attempts reset: 0/{})",
                job.id,
                job.max_attempts
            )?;
        }
        JobsCommand::Delete { id } => {
            let job = call(ctx, client.delete(id)).await?;
            if ctx.json {
                return print_json(&JobJson::from(&job));
            }
            outln!("job {} deleted (it was {})", job.id, job.state)?;
        }
        JobsCommand::Bulk(args) => {
            let bulk = bulk.ok_or_else(|| anyhow::anyhow!("bulk action not built"))?;
            run_bulk(ctx, &client, args, bulk).await?;
        }
        JobsCommand::Requeue { id } => {
            let outcome = call(ctx, client.requeue(id)).await?;
            if ctx.json {
                return print_json(&outcome);
            }
            let job = &outcome.job;
            if outcome.changed {
                outln!(
                    "job {} is ready now (attempt {}/{} kept)",
                    job.id,
                    job.attempt,
                    job.max_attempts
                )?;
            } else {
                outln!(
                    "job {} was ready already (since {}); nothing changed",
                    job.id,
                    output::time(job.run_at)
                )?;
            }
        }
    }
    Ok(())
}

/// Turns `jobs bulk` flags into a bulk action (clap checked every flag but `--meta` and
/// `--args`).
///
/// # Errors
/// A usage error naming the flag: `--meta` or `--args` not a JSON object, more than 1,000
/// `--id`s, one given twice.
fn bulk_jobs(args: &BulkArgs) -> Result<BulkJobs> {
    let bulk = if args.ids.is_empty() {
        let filter = ListJobs {
            queue: args.queue.clone(),
            state: args.state,
            kind: args.kind.clone(),
            tenant: args.tenant.clone(),
            meta: args
                .meta
                .as_deref()
                .map(|m| super::json_flag("meta", m))
                .transpose()?,
            args: args
                .args
                .as_deref()
                .map(|m| super::json_flag("args", m))
                .transpose()?,
            workflow: args.workflow,
            parent: args.parent,
            ..ListJobs::default()
        };
        BulkJobs::filter(args.action, filter)
    } else {
        BulkJobs::ids(args.action, args.ids.clone())
    };
    bulk.validate().map_err(|e| {
        flag_error(
            e,
            &[
                ("ids", "--id"),
                ("filter.meta", "--meta"),
                ("filter.args", "--args"),
            ],
        )
    })?;
    Ok(bulk)
}

/// Runs `jobs bulk`: a preview with `--preview`, and for a filter without `--yes` (then it
/// fails, saying how to act); else the action.
async fn run_bulk(
    ctx: &Ctx,
    client: &drover_runner::Client,
    args: BulkArgs,
    bulk: BulkJobs,
) -> Result<()> {
    let action = args.action;
    let confirmed = args.yes || !args.ids.is_empty();
    if args.preview || !confirmed {
        let preview = call(ctx, client.bulk_preview(bulk)).await?;
        let at_least = if preview.more { "at least " } else { "" };
        if ctx.json {
            print_json(&serde_json::json!({
                "action": action,
                "preview": true,
                "matched": preview.matched,
                "more": preview.more,
            }))?;
        } else {
            outln!(
                "{at_least}{} job(s) match; {action} would act on each it applies to",
                preview.matched
            )?;
        }
        if args.preview {
            return Ok(());
        }
        anyhow::bail!(
            "nothing changed: a {action} of every job a filter matches needs --yes (or --preview to only count)"
        );
    }
    let outcome = call(ctx, client.bulk(bulk)).await?;
    if ctx.json {
        return print_json(&serde_json::json!({
            "action": action,
            "preview": false,
            "changed": outcome.changed,
            "skipped": outcome.skipped,
            "not_found": outcome.not_found,
        }));
    }
    outln!(
        "{action}: {} job(s) changed, {} skipped (the action does not apply to them), {} not found",
        outcome.changed,
        outcome.skipped,
        outcome.not_found
    )?;
    Ok(())
}

/// Turns `jobs list` flags into a store query (clap checked every flag but `--meta` and
/// `--args`).
///
/// # Errors
/// A usage error when `--meta` or `--args` is not a JSON object (named, the text not quoted).
pub fn list_query(args: &ListArgs) -> Result<ListJobs> {
    let query = ListJobs {
        queue: args.queue.clone(),
        state: args.state,
        kind: args.kind.clone(),
        tenant: args.tenant.clone(),
        meta: args
            .meta
            .as_deref()
            .map(|m| super::json_flag("meta", m))
            .transpose()?,
        args: args
            .args
            .as_deref()
            .map(|m| super::json_flag("args", m))
            .transpose()?,
        workflow: args.workflow,
        parent: args.parent,
        before: args.before,
        limit: args.limit,
        // The table shows none of the large fields; `--json` those `--include` names.
        details: args.include.unwrap_or(JobDetails::NONE),
    };
    query.validate().map_err(|e| {
        flag_error(
            e,
            &[("meta", "--meta"), ("args", "--args"), ("limit", "--limit")],
        )
    })?;
    Ok(query)
}

/// A page as `jobs list --json` prints it: `{"jobs": [...], "next": ...}`, each job as
/// `jobs get --json` prints it but without the large fields `details` leaves out.
fn listed_json(page: &JobPage, details: JobDetails) -> Result<Value> {
    let mut json = serde_json::to_value(PageJson {
        jobs: page.jobs.iter().map(JobJson::from).collect(),
        next: page.next,
    })?;
    let left_out: Vec<&str> = JobDetails::NAMES
        .into_iter()
        .filter(|name| !details.names().contains(name))
        .collect();
    if let Some(jobs) = json.get_mut("jobs").and_then(Value::as_array_mut) {
        for job in jobs.iter_mut().filter_map(Value::as_object_mut) {
            for name in &left_out {
                job.remove(*name);
            }
        }
    }
    Ok(json)
}

fn print_job(j: &Job) -> Result<()> {
    let mut t = table(&["field", "value"]);
    let rows: Vec<(&str, String)> = vec![
        ("id", j.id.to_string()),
        ("kind", j.kind.to_string()),
        ("queue", j.queue.to_string()),
        ("tenant", j.tenant.to_string()),
        ("state", j.state.to_string()),
        (
            "workflow",
            match (&j.workflow_id, &j.name) {
                (Some(w), Some(name)) => format!("{w} (as {name})"),
                (Some(w), None) => w.to_string(),
                (None, _) => "-".to_owned(),
            },
        ),
        (
            "parent",
            j.parent_id.map_or("-".to_owned(), |p| p.to_string()),
        ),
        (
            "depends on",
            if j.depends_on.is_empty() {
                "-".to_owned()
            } else {
                let ids: Vec<String> = j.depends_on.iter().map(ToString::to_string).collect();
                format!(
                    "{} ({} pending{})",
                    ids.join(", "),
                    j.pending_dependencies,
                    if j.run_regardless {
                        ", runs regardless"
                    } else {
                        ""
                    }
                )
            },
        ),
        ("live children", j.live_children.to_string()),
        ("attempt", format!("{}/{}", j.attempt, j.max_attempts)),
        ("priority", j.priority.to_string()),
        ("run at", output::time(j.run_at)),
        ("created", output::time(j.created_at)),
        ("attempted", output::opt_time(j.attempted_at)),
        ("started", started(j)),
        ("finished", output::opt_time(j.finished_at)),
        (
            "lease owner",
            j.lease_owner
                .as_ref()
                .map_or("-".to_owned(), ToString::to_string),
        ),
        ("lease expires", output::opt_time(j.lease_expires_at)),
        ("fencing token", j.fencing_token.to_string()),
        ("cancel requested", j.cancel_requested.to_string()),
        (
            "idempotency key",
            j.idempotency_key.clone().unwrap_or_else(|| "-".to_owned()),
        ),
        (
            "unique key",
            j.unique_key.clone().unwrap_or_else(|| "-".to_owned()),
        ),
        (
            "limit keys",
            if j.limit_keys.is_empty() {
                "-".to_owned()
            } else {
                j.limit_keys
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
        ("args", output::short(&j.args.to_string(), 400)),
        ("meta", output::short(&j.meta.to_string(), 400)),
        (
            "progress",
            j.progress
                .as_ref()
                .map_or("-".to_owned(), |p| output::short(&p.to_string(), 400)),
        ),
        (
            "result",
            j.result
                .as_ref()
                .map_or("-".to_owned(), |r| output::short(&r.to_string(), 400)),
        ),
    ];
    for (k, v) in rows {
        t.add_row(vec![k.to_owned(), v]);
    }
    outln!("{t}")?;
    if !j.errors.is_empty() {
        let mut e = table(&["attempt", "at", "error"]);
        for err in &j.errors {
            e.add_row(vec![
                err.attempt.to_string(),
                output::time(err.at),
                err.message.clone(),
            ]);
        }
        outln!("errors:\n{e}")?;
    }
    Ok(())
}

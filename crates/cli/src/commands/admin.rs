//! Operator commands: migrate, migrations, queues, workers, limits, schedules, snapshot,
//! metrics, prune, audit.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use chrono::{DateTime, Utc};
use drover_core::{
    JobState, LimitKey, LimitPolicy, ListAudit, NewSchedule, PruneJobs, QueueName, Rate,
    ScheduleChange, VacuumStatus,
};
use drover_runner::QueueSummary;
use serde::Serialize;
use serde_json::{json, Value};

use crate::args::{
    AuditListArgs, LimitsCommand, MigrateArgs, PruneArgs, QueuesCommand, SchedulesCommand,
};
use crate::context::{call, Ctx};
use crate::output::{self, errln, outln, print_json, table};
use crate::usage::flag_error;

/// `drover migrate`.
pub async fn migrate(ctx: &Ctx, args: MigrateArgs) -> Result<()> {
    let store = ctx.postgres(2, false).await?;
    let mut migrator = drover_store_postgres::Migrator::new();
    if let Some(lock_timeout) = args.lock_timeout {
        migrator = migrator.lock_timeout(lock_timeout);
    }
    if let Some(lock_budget) = args.lock_budget {
        migrator = migrator.lock_budget(lock_budget);
    }
    let applied = migrator
        .run(store.pool())
        .await
        .map_err(|e| ctx.explain(e))?;
    let all = drover_store_postgres::applied_versions(store.pool())
        .await
        .map_err(|e| ctx.explain(e))?;
    store.close().await;
    if ctx.json {
        return print_json(&json!({
            "applied_now": applied,
            "schema_version": all.iter().map(|m| m.version).max(),
        }));
    }
    if applied.is_empty() {
        outln!(
            "database is up to date (schema version {})",
            all.iter().map(|m| m.version).max().unwrap_or(0)
        )?;
    } else {
        outln!(
            "applied {} migration(s): {}",
            applied.len(),
            applied
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    Ok(())
}

/// `drover migrations list`: every migration this binary knows, applied or pending.
pub async fn migrations_list(ctx: &Ctx) -> Result<()> {
    let store = ctx.postgres(2, false).await?;
    let applied = drover_store_postgres::applied_versions(store.pool())
        .await
        .map_err(|e| ctx.explain(e))?;
    store.close().await;
    let rows: Vec<Value> = drover_store_postgres::migrations()
        .iter()
        .map(|m| {
            let done = applied.iter().find(|a| a.version == m.version);
            json!({
                "version": m.version,
                "name": m.name,
                "applied_at": done.map(|a| a.applied_at),
                "state": if done.is_some() { "applied" } else { "pending" },
            })
        })
        .collect();
    if ctx.json {
        return print_json(&rows);
    }
    let mut t = table(&["version", "name", "state", "applied at"]);
    for r in &rows {
        t.add_row(vec![
            r["version"].to_string(),
            r["name"].as_str().unwrap_or("").to_owned(),
            r["state"].as_str().unwrap_or("").to_owned(),
            r["applied_at"].as_str().unwrap_or("-").to_owned(),
        ]);
    }
    outln!("{t}")?;
    Ok(())
}

/// `drover queues list|pause|resume`.
pub async fn queues(ctx: &Ctx, command: QueuesCommand) -> Result<()> {
    let client = ctx.client().await?;
    match command {
        QueuesCommand::Pause { name } => {
            // Pausing a queue before its first job is allowed (ahead of a deploy), but a name
            // no job has used is more often a typo that leaves the real queue running: say so.
            let known = call(ctx, client.queue_known(&name)).await?;
            let change = call(ctx, client.queue_pause(name.clone())).await?;
            if !known {
                errln!(
                    "drover: warning: no job has used queue {name} yet; it is paused now, so workers will not claim jobs enqueued to it until `drover queues resume {name}` (check the name with `drover queues list`)"
                );
            }
            if ctx.json {
                return print_json(&change);
            }
            if change.changed {
                outln!(
                    "queue {} paused: no worker claims from it; running jobs finish",
                    change.queue.name
                )?;
            } else {
                outln!(
                    "queue {} was already paused; nothing changed",
                    change.queue.name
                )?;
            }
        }
        QueuesCommand::Resume { name: queue } => {
            // The client refuses a queue nobody has heard of and says whether the resume changed
            // anything (the HTTP API answers the same way).
            let change = match client.queue_resume(queue.clone()).await {
                Err(drover_core::Error::NotFound { .. }) => {
                    return Err(anyhow!(
                        "no queue named {queue}: it has no jobs and is not paused, so nothing was resumed; check the name with `drover queues list`"
                    ))
                }
                other => other.map_err(|e| ctx.explain(e))?,
            };
            if ctx.json {
                return print_json(&change);
            }
            if change.changed {
                outln!("queue {} resumed", change.queue.name)?;
            } else {
                outln!(
                    "queue {} was not paused; nothing changed",
                    change.queue.name
                )?;
            }
        }
        QueuesCommand::List => {
            let overview = call(ctx, client.queue_overview()).await?;
            let rows: Vec<QueueRow> = overview.queues.iter().map(QueueRow::from).collect();
            if ctx.json {
                // Through a JSON value, so the keys come out as they always have.
                return print_json(&serde_json::to_value(&rows)?);
            }
            let mut t = table(&[
                "queue", "paused", "queued", "ready", "running", "claimed", "lag",
            ]);
            for r in &rows {
                t.add_row(vec![
                    r.name.to_string(),
                    if r.paused { "yes" } else { "no" }.to_owned(),
                    r.queued.to_string(),
                    drover_core::queue::ready_text(r.ready, r.ready_at_least),
                    r.running.to_string(),
                    r.claimed.to_string(),
                    r.lag_seconds.map_or_else(
                        || "-".to_owned(),
                        |s| output::duration(Duration::from_secs_f64(s)),
                    ),
                ]);
            }
            outln!("{t}")?;
        }
    }
    Ok(())
}

/// A queue as `queues list` shows it: the queue view's row with the queued count and the lag
/// in seconds.
#[derive(Serialize)]
struct QueueRow<'a> {
    name: &'a QueueName,
    paused: bool,
    paused_at: Option<DateTime<Utc>>,
    queued: u64,
    ready: u64,
    ready_at_least: bool,
    running: u64,
    claimed: u64,
    lag_seconds: Option<f64>,
}

impl<'a> From<&'a QueueSummary> for QueueRow<'a> {
    fn from(queue: &'a QueueSummary) -> Self {
        QueueRow {
            name: &queue.name,
            paused: queue.paused,
            paused_at: queue.paused_at,
            queued: queue.count(JobState::Queued),
            ready: queue.ready,
            ready_at_least: queue.ready_at_least,
            running: queue.running,
            claimed: queue.claimed,
            lag_seconds: queue.lag_seconds(),
        }
    }
}

/// `drover workers list`.
pub async fn workers_list(ctx: &Ctx) -> Result<()> {
    let client = ctx.client().await?;
    let workers = call(ctx, client.workers()).await?;
    if ctx.json {
        return print_json(&workers);
    }
    let now = call(ctx, client.now()).await?;
    let mut t = table(&["id", "host", "pid", "queues", "started", "last heartbeat"]);
    for w in &workers {
        let ago = drover_core::clock::since(now, w.last_heartbeat_at);
        t.add_row(vec![
            w.id.to_string(),
            w.host.clone(),
            w.pid.to_string(),
            w.queues
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            output::time(w.started_at),
            format!("{} ago", output::duration(ago)),
        ]);
    }
    outln!("{t}")?;
    if workers.is_empty() {
        outln!("no workers registered")?;
    }
    Ok(())
}

/// `drover limits list|set|clear`.
pub async fn limits(ctx: &Ctx, command: LimitsCommand) -> Result<()> {
    match command {
        LimitsCommand::List => limits_list(ctx).await,
        LimitsCommand::Set {
            key,
            max_running,
            rate,
        } => limit_set(ctx, key, max_running, rate).await,
        LimitsCommand::Clear { key } => {
            let client = ctx.client().await?;
            call(ctx, client.limit_clear(key.clone())).await?;
            if ctx.json {
                return print_json(&json!({"cleared": key}));
            }
            outln!("limit {key} cleared; jobs it held are claimable again")
        }
    }
}

/// `drover limits list`.
async fn limits_list(ctx: &Ctx) -> Result<()> {
    let client = ctx.client().await?;
    let limits = call(ctx, client.limits()).await?;
    if ctx.json {
        return print_json(&limits);
    }
    let mut t = table(&["key", "max running", "running", "rate", "rate available"]);
    for l in &limits {
        t.add_row(vec![
            l.policy.key.to_string(),
            l.policy
                .max_running
                .map_or_else(|| "-".to_owned(), |m| m.to_string()),
            l.running.to_string(),
            l.policy
                .rate
                .map_or_else(|| "-".to_owned(), |r| r.to_string()),
            l.rate_available
                .map_or_else(|| "-".to_owned(), |r| r.to_string()),
        ]);
    }
    outln!("{t}")?;
    if limits.is_empty() {
        outln!("no limit policies")?;
    }
    Ok(())
}

/// `drover limits set`: the policy is checked before connecting (clap checked each flag).
async fn limit_set(
    ctx: &Ctx,
    key: LimitKey,
    max_running: Option<u32>,
    rate: Option<Rate>,
) -> Result<()> {
    let policy = LimitPolicy::new(key, max_running, rate)
        .map_err(|e| flag_error(e, &[("max_running", "--max-running"), ("rate", "--rate")]))?;
    let client = ctx.client().await?;
    let policy = call(ctx, client.limit_set(policy)).await?;
    if ctx.json {
        return print_json(&policy);
    }
    outln!("limit {} set", policy.key)?;
    Ok(())
}

fn parse_json_arg(field: &str, text: Option<String>) -> Result<Value> {
    match text {
        None => Ok(json!({})),
        Some(t) => super::json_flag(field, &t),
    }
}

/// `drover schedules list|add|remove`.
pub async fn schedules(ctx: &Ctx, command: SchedulesCommand) -> Result<()> {
    match command {
        SchedulesCommand::List => schedules_list(ctx).await,
        SchedulesCommand::Add {
            name,
            cron,
            kind,
            args,
            queue,
            timezone,
            priority,
            max_attempts,
        } => {
            let mut schedule = NewSchedule::new(name, cron, kind, parse_json_arg("args", args)?);
            schedule.timezone = timezone;
            if let Some(queue) = queue {
                schedule.queue = queue;
            }
            if let Some(priority) = priority {
                schedule.priority = priority;
            }
            if let Some(max_attempts) = max_attempts {
                schedule.max_attempts = max_attempts;
            }
            schedule_add(ctx, schedule).await
        }
        SchedulesCommand::Remove { name } => {
            let client = ctx.client().await?;
            call(ctx, client.schedule_remove(name.clone())).await?;
            if ctx.json {
                return print_json(&json!({"removed": name}));
            }
            outln!("schedule {name} removed")
        }
    }
}

/// `drover schedules list`.
async fn schedules_list(ctx: &Ctx) -> Result<()> {
    let client = ctx.client().await?;
    let schedules = call(ctx, client.schedules_list()).await?;
    let now = call(ctx, client.now()).await?;
    let rows: Vec<Value> = schedules
        .iter()
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
            v["next_tick_at"] = json!(s.next_tick(now));
            v
        })
        .collect();
    if ctx.json {
        return print_json(&rows);
    }
    let mut t = table(&[
        "name",
        "cron",
        "timezone",
        "kind",
        "queue",
        "last tick",
        "next tick",
    ]);
    for s in &schedules {
        t.add_row(vec![
            s.name.to_string(),
            s.cron.clone(),
            s.timezone.clone(),
            s.kind.to_string(),
            s.queue.to_string(),
            output::opt_time(s.last_tick_at),
            output::opt_time(s.next_tick(now)),
        ]);
    }
    outln!("{t}")?;
    if schedules.is_empty() {
        outln!("no schedules")?;
    }
    Ok(())
}

/// `drover schedules add`: the schedule is checked before connecting, against this host's
/// clock (the store checks it again against its own).
async fn schedule_add(ctx: &Ctx, schedule: NewSchedule) -> Result<()> {
    schedule
        .validate(chrono::Utc::now(), &drover_core::SizeLimits::default())
        .map_err(|e| {
            flag_error(
                e,
                &[
                    ("cron", "--cron"),
                    ("timezone", "--timezone"),
                    ("args", "--args"),
                    ("kind", "--kind"),
                    ("queue", "--queue"),
                    ("priority", "--priority"),
                    ("max_attempts", "--max-attempts"),
                ],
            )
        })?;
    let client = ctx.client().await?;
    let upsert = call(ctx, client.schedule_upsert(schedule)).await?;
    let now = call(ctx, client.now()).await?;
    if ctx.json {
        return print_json(&upsert);
    }
    let stored = &upsert.schedule;
    let what = match upsert.change {
        ScheduleChange::Created => "created",
        ScheduleChange::Unchanged => "unchanged (already stored so; its missed ticks still fire)",
        ScheduleChange::Updated => "updated (new job; its ticks go on)",
        ScheduleChange::Rescheduled => {
            "rescheduled (new timing: its ticks from now on fire, none missed before)"
        }
    };
    outln!(
        "schedule {} {what}; next tick {}",
        stored.name,
        output::opt_time(stored.next_tick(now))
    )?;
    Ok(())
}

/// `drover snapshot`.
pub async fn snapshot(ctx: &Ctx) -> Result<()> {
    let client = ctx.client().await?;
    let snapshot = call(ctx, client.snapshot()).await?;
    if ctx.json {
        return print_json(&snapshot);
    }
    // The running state split in two: handlers started, and jobs claimed ahead that wait
    // for a slot.
    let mut header = vec!["queue", "paused"];
    for state in JobState::ALL {
        if state == JobState::Running {
            header.extend(["running", "claimed"]);
        } else {
            header.push(state.as_str());
        }
    }
    header.extend(["ready", "oldest ready"]);
    let mut t = table(&header);
    for q in &snapshot.queues {
        let mut row = vec![
            q.queue.to_string(),
            if q.paused { "yes" } else { "no" }.to_owned(),
        ];
        for state in JobState::ALL {
            if state == JobState::Running {
                row.extend([q.running.to_string(), q.claimed.to_string()]);
            } else {
                row.push(q.count(state).to_string());
            }
        }
        row.push(q.ready_text());
        row.push(q.lag().map_or_else(|| "-".to_owned(), output::duration));
        t.add_row(row);
    }
    outln!("{t}")?;
    outln!("taken at {}", output::time(snapshot.taken_at))?;
    if let Some(vacuum) = &snapshot.vacuum {
        print_vacuum(vacuum)?;
    }
    Ok(())
}

/// The vacuum part of `drover snapshot`: what keeps the database from cleaning the jobs table.
fn print_vacuum(vacuum: &VacuumStatus) -> Result<()> {
    let transaction = match (
        vacuum.oldest_transaction_age(),
        vacuum.oldest_transaction_pid,
    ) {
        (Some(age), Some(pid)) => format!("{} (pid {pid})", output::duration(age)),
        (Some(age), None) => format!("{} (a prepared transaction)", output::duration(age)),
        (None, Some(pid)) => format!("pid {pid} (its start is hidden from this role)"),
        (None, None) => "none".to_owned(),
    };
    outln!("oldest open transaction: {transaction}")?;
    if let (Some(slot), Some(age)) = (&vacuum.replication_slot, vacuum.replication_slot_xmin_age) {
        outln!("replication slot holding the oldest horizon: {slot} ({age} transactions old)")?;
    }
    outln!(
        "jobs table: about {} dead row versions ({:.0} % of {} rows); last vacuum {}",
        vacuum.jobs_dead_rows,
        vacuum.dead_fraction() * 100.0,
        vacuum.jobs_dead_rows.saturating_add(vacuum.jobs_live_rows),
        vacuum
            .jobs_last_vacuum_at
            .map_or_else(|| "never".to_owned(), output::time)
    )?;
    Ok(())
}

/// `drover metrics`.
pub async fn metrics(ctx: &Ctx) -> Result<()> {
    let client = ctx.client().await?;
    let text = call(ctx, drover_http::metrics::scrape(&client, None)).await?;
    output::write_text(&text)
}

/// `drover prune`: deletes in batches until none is left, with a progress spinner.
pub async fn prune(ctx: &Ctx, args: PruneArgs) -> Result<()> {
    let client = ctx.client().await?;
    let started = Instant::now();
    let bar = (!ctx.json).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} pruned {pos} jobs ({per_sec}) {elapsed}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar
    });
    let mut total: u64 = 0;
    loop {
        let deleted = call(
            ctx,
            client.prune(PruneJobs {
                older_than: args.older_than,
                limit: args.batch,
            }),
        )
        .await?;
        total += deleted;
        if let Some(bar) = &bar {
            bar.set_position(total);
        }
        if deleted < u64::from(args.batch) {
            break;
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if ctx.json {
        return print_json(&json!({
            "deleted": total,
            "older_than_seconds": args.older_than.as_secs(),
            "seconds": started.elapsed().as_secs_f64(),
        }));
    }
    outln!(
        "deleted {total} finished job(s) older than {} in {}",
        humantime::format_duration(args.older_than),
        output::duration(started.elapsed())
    )?;
    Ok(())
}

/// `drover audit list`.
pub async fn audit_list(ctx: &Ctx, args: AuditListArgs) -> Result<()> {
    let client = ctx.client().await?;
    let page = call(
        ctx,
        client.audit(ListAudit {
            action: args.action,
            source: args.source,
            actor: args.actor,
            tenant: args.tenant,
            before: args.before,
            limit: args.limit,
        }),
    )
    .await?;
    if ctx.json {
        return print_json(&page);
    }
    let mut t = table(&[
        "id", "at", "actor", "source", "tenant", "action", "target", "jobs",
    ]);
    for e in &page.entries {
        t.add_row(vec![
            e.id.to_string(),
            output::time(e.at),
            e.actor.clone(),
            e.source.to_string(),
            e.tenant
                .as_ref()
                .map_or_else(|| "-".to_owned(), ToString::to_string),
            e.action.to_string(),
            e.target.to_string(),
            e.jobs.to_string(),
        ]);
    }
    outln!("{t}")?;
    match page.next {
        Some(next) => outln!("more: --before {next}"),
        None => outln!("{} record(s)", page.entries.len()),
    }
}

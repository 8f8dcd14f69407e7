//! The evacuate scenario (docs/design.md section 10): an `evacuate` parent moves every volume
//! off a host by fanning out one `migrate` child per volume to the `transfers` queue, which a
//! reserved pool serves; it waits for them without holding a slot, runs again when they all
//! ended, and rolls back when a migration failed for good. Plain `ping` jobs on the `default`
//! queue keep running meanwhile.
//!
//! ```bash
//! cargo run -p drover-example-evacuate -- --database-url $URL migrate
//! cargo run -p drover-example-evacuate -- --database-url $URL worker \
//!     --pool general:default:4 --pool transfers:transfers:2
//! cargo run -p drover-example-evacuate -- --database-url $URL enqueue evacuate \
//!     --args '{"host": "host-a", "volumes": ["v1", "v2", "v3"], "fail": ["v2"]}'
//! ```

use std::time::Duration;

use drover::core::Job;
use drover::{JobContext, JobKind, NewJob, Outcome, QueueName, Registry};
use serde::Deserialize;
use serde_json::json;

/// The queue the reserved pool serves.
const TRANSFERS: &str = "transfers";

/// The args of `evacuate`.
#[derive(Debug, Deserialize)]
struct Evacuate {
    host: String,
    volumes: Vec<String>,
    /// Volumes whose migration fails (to show the rollback).
    #[serde(default)]
    fail: Vec<String>,
    /// How long each migration takes, in milliseconds.
    #[serde(default = "default_millis")]
    millis: u64,
}

fn default_millis() -> u64 {
    50
}

/// The args of `migrate`.
#[derive(Debug, Deserialize)]
struct Migrate {
    host: String,
    volume: String,
    fail: bool,
    millis: u64,
}

/// First run: one `migrate` child per volume, then wait without a slot. A run that finds
/// children still live (its worker died between storing them and recording the wait) waits
/// again. Last run (every child succeeded; a failed one sends the job to the rollback hook
/// instead): done.
async fn evacuate(ctx: JobContext, args: Evacuate) -> Result<Outcome, drover::Error> {
    let children = ctx.children().await?;
    if children.iter().any(|child| !child.state.is_terminal()) {
        // Rescued after storing its children but before its wait was recorded: wait now.
        return Ok(Outcome::WaitForChildren);
    }
    if !children.is_empty() {
        ctx.step("done", json!({"migrated": children.len()}));
        return Ok(Outcome::success_with(json!({
            "host": args.host,
            "migrated": children.len(),
        })));
    }
    let kind = JobKind::parse("migrate")?;
    let queue = QueueName::parse(TRANSFERS)?;
    let jobs = args
        .volumes
        .iter()
        .map(|volume| {
            let child = json!({
                "host": args.host,
                "volume": volume,
                "fail": args.fail.contains(volume),
                "millis": args.millis,
            });
            // A unique key per volume: a parent that crashed after storing its children and
            // runs again finds them instead of storing them twice.
            NewJob::new(kind.clone(), child)
                .with_queue(queue.clone())
                .with_max_attempts(2)
                .with_unique_key(format!("migrate:{}:{volume}", args.host))
        })
        .collect();
    ctx.enqueue_children(jobs).await?;
    ctx.step("fan-out", json!({"children": args.volumes.len()}));
    Ok(Outcome::WaitForChildren)
}

/// Copies one volume; fails for good when told to.
async fn migrate(ctx: JobContext, args: Migrate) -> Outcome {
    let cancel = ctx.cancellation();
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(args.millis)) => {}
        () = cancel.cancelled() => return Outcome::cancelled("evacuation cancelled"),
    }
    if args.fail {
        return Outcome::discard(format!(
            "could not copy volume {} off {}",
            args.volume, args.host
        ));
    }
    Outcome::success_with(json!({"volume": args.volume, "from": args.host}))
}

/// Runs instead of `evacuate` when a migration failed for good: the volumes that moved are
/// moved back (here: recorded), and the evacuation fails naming the volumes that did not move.
async fn roll_back(ctx: JobContext, failed: Vec<Job>) -> Outcome {
    let volumes: Vec<String> = failed
        .iter()
        .filter_map(|job| {
            job.args
                .get("volume")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .collect();
    ctx.step("rollback", json!({"failed": volumes}));
    Outcome::discard(format!(
        "evacuation rolled back: {} migration(s) failed ({})",
        volumes.len(),
        volumes.join(", ")
    ))
}

fn main() -> std::process::ExitCode {
    let mut registry = Registry::new();
    let kind = |name: &str| JobKind::parse(name).expect("valid kind");
    registry.register_typed(kind("evacuate"), evacuate);
    registry.register_rollback_fn(kind("evacuate"), roll_back);
    registry.register_typed(kind("migrate"), migrate);
    registry.register_fn(kind("ping"), |_ctx: JobContext| async {
        Outcome::success()
    });
    drover::cli::run(registry)
}

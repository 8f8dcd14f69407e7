//! `drover-bench worker`: one worker process of a multi-process processing measurement. The
//! parent (`process.rs`) spawns it with the database URL in `DROVER_BENCH_DATABASE_URL`.
//!
//! Protocol, one word a line: the child connects and builds its worker, prints `ready`, waits
//! for `start` on stdin, runs the worker (one pool of `--slots` slots on the `bench` queue,
//! kind `noop`, quotas off) and prints `succeeded <count>` whenever its count of jobs recorded
//! succeeded grows (bursts coalesce into one line). On `stop` or end of stdin it shuts down
//! gracefully, prints `report succeeded=<n> claimed=<n>` and exits 0.

use std::sync::Arc;

use drover_core::{Error, JobStore, SucceededJobs};
use drover_runner::{CancellationToken, Metrics};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Stdout};

use crate::options::{WorkerArgs, DATABASE_URL_ENV};
use crate::process::{bench_worker, noop_registry, SucceededCounter};
use crate::target::PgTarget;

/// Connections beyond the slots a worker's pool may open (claim loop, completer, heartbeat,
/// maintenance; docs/design.md section 5 asks for at least slots + 2).
pub const EXTRA_CONNECTIONS: usize = 4;

/// Runs the child mode until `stop` or end of input.
///
/// # Errors
/// `InvalidInput` when the URL variable is missing; `Unavailable` when the database cannot be
/// reached; the worker's fatal error.
pub async fn run_worker(args: WorkerArgs) -> Result<(), Error> {
    let url = std::env::var(DATABASE_URL_ENV)
        .map_err(|_| Error::invalid(DATABASE_URL_ENV, "must hold the database URL"))?;
    let target =
        PgTarget::parse(&url)?.with_succeeded_jobs(SucceededJobs::delete_if(args.delete_succeeded));
    let connections = u32::try_from(args.slots + EXTRA_CONNECTIONS).unwrap_or(u32::MAX);
    let store = target.store(connections).await?;
    let counter = Arc::new(SucceededCounter::new(u64::MAX));
    let worker = bench_worker(
        Arc::new(store.clone()) as Arc<dyn JobStore>,
        noop_registry()?,
        args.slots,
        Arc::clone(&counter) as Arc<dyn Metrics>,
    )?;
    let mut stdout = tokio::io::stdout();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    say(&mut stdout, "ready").await?;
    match lines.next_line().await {
        Ok(Some(line)) if line.trim() == "start" => {}
        _ => {
            store.close().await;
            return Ok(());
        }
    }

    let shutdown = CancellationToken::new();
    let mut run = tokio::spawn(worker.run(shutdown.clone()));
    let mut reported = 0;
    let early_end = loop {
        tokio::select! {
            () = counter.changed.notified() => {
                let count = counter.count();
                if count != reported {
                    reported = count;
                    say(&mut stdout, &format!("succeeded {count}")).await?;
                }
            }
            line = lines.next_line() => match line {
                Ok(Some(line)) if line.trim() != "stop" => {}
                _ => break None,
            },
            ended = &mut run => break Some(ended),
        }
    };
    shutdown.cancel();
    let ended = match early_end {
        Some(ended) => ended,
        None => run.await,
    };
    let report =
        ended.map_err(|error| Error::fatal(format!("the worker task failed: {error}")))??;
    say(
        &mut stdout,
        &format!(
            "report succeeded={} claimed={}",
            report.succeeded, report.claimed
        ),
    )
    .await?;
    store.close().await;
    Ok(())
}

/// Writes one line to the parent and flushes it.
async fn say(stdout: &mut Stdout, line: &str) -> Result<(), Error> {
    let io = |error: std::io::Error| Error::Fatal {
        message: "could not write to the parent process".to_owned(),
        source: Some(Box::new(error)),
    };
    stdout
        .write_all(format!("{line}\n").as_bytes())
        .await
        .map_err(io)?;
    stdout.flush().await.map_err(io)
}

//! `drover worker`: builds the registry (the application's handlers plus the built-in kinds)
//! and the worker configuration from flags, connects, and runs until SIGTERM or Ctrl-C, then
//! closes the store only after the worker has written every result.

use std::sync::Arc;

use anyhow::Result;

use crate::args::WorkerArgs;
use crate::context::Ctx;
use crate::process::{Process, ProcessKind};
use crate::worker_flags::{registry, worker_config};
use crate::Extensions;

/// Runs `drover worker`.
pub async fn run(ctx: &Ctx, args: WorkerArgs, extensions: Extensions) -> Result<()> {
    // Everything the flags describe is checked before anything is built or connected.
    let config = worker_config(&args, &[]);
    let registry = Arc::new(registry(extensions, &args));
    let running = Process::new(ctx, ProcessKind::Worker, &args)
        .worker(config, registry)?
        .start()
        .await?;
    running.wait().await;
    running.stop().await
}

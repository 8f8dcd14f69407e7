//! `drover worker`: builds the registry (the application's handlers plus the built-in kinds)
//! and the worker configuration from flags, connects, and runs until SIGTERM or Ctrl-C, then
//! closes the store only after the worker has written every result.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use drover_core::{JobKind, JobStore, QueueName};
use drover_http::ProcessMetrics;
use drover_runner::{PoolConfig, Registry, Worker, WorkerConfig};
use tokio_util::sync::CancellationToken;

use crate::args::WorkerArgs;
use crate::context::Ctx;
use crate::Extensions;

/// Parses `NAME:QUEUE[,QUEUE...]:SLOTS[:KIND[,KIND...]]`.
///
/// # Errors
/// A message naming the bad part.
pub fn parse_pool(spec: &str) -> Result<PoolConfig> {
    let parts: Vec<&str> = spec.split(':').collect();
    if !(3..=4).contains(&parts.len()) {
        return Err(anyhow!(
            "invalid --pool {spec:?}: use NAME:QUEUE[,QUEUE...]:SLOTS[:KIND[,KIND...]], e.g. long:reports:1:report.build"
        ));
    }
    let queues = parts[1]
        .split(',')
        .map(|q| QueueName::parse(q).map_err(|e| anyhow!("invalid --pool {spec:?}: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let slots: usize = parts[2]
        .parse()
        .map_err(|_| anyhow!("invalid --pool {spec:?}: SLOTS must be a whole number"))?;
    let mut pool = PoolConfig::new(parts[0], queues, slots);
    if let Some(kinds) = parts.get(3) {
        let kinds = kinds
            .split(',')
            .map(|k| JobKind::parse(k).map_err(|e| anyhow!("invalid --pool {spec:?}: {e}")))
            .collect::<Result<Vec<_>>>()?;
        pool = pool.with_kinds(kinds);
    }
    Ok(pool)
}

/// The worker configuration the flags describe. Without `--queue` and `--pool` the worker
/// serves `default`.
///
/// # Errors
/// A bad pool spec or queue name.
pub fn worker_config(args: &WorkerArgs, default_queues: &[QueueName]) -> Result<WorkerConfig> {
    let mut pools = Vec::new();
    let mut queues = args
        .queues
        .iter()
        .map(|q| QueueName::parse(q.as_str()).map_err(|e| anyhow!("invalid --queue: {e}")))
        .collect::<Result<Vec<_>>>()?;
    if queues.is_empty() && args.pools.is_empty() {
        queues = if default_queues.is_empty() {
            vec![QueueName::default_queue()]
        } else {
            default_queues.to_vec()
        };
    }
    if !queues.is_empty() {
        pools.push(PoolConfig::new("main", queues, args.slots));
    }
    for spec in &args.pools {
        pools.push(parse_pool(spec)?);
    }
    if let Some(prefetch) = args.prefetch {
        for pool in &mut pools {
            pool.prefetch = Some(prefetch);
        }
    }
    let mut config = WorkerConfig::with_pools(pools);
    config.max_concurrent = args.max_concurrent;
    if let Some(d) = args.lease {
        config.lease = d;
    }
    if let Some(d) = args.heartbeat {
        config.heartbeat_interval = d;
    }
    match args.rescue_interval {
        Some(d) => config.rescue_interval = d,
        None if args.lease.is_some() => {
            config.rescue_interval = config.rescue_interval.min(config.lease);
        }
        None => {}
    }
    if let Some(d) = args.shutdown_grace {
        config.shutdown_grace = d;
    }
    if let Some(d) = args.retention {
        config.retention = d;
    }
    if let Some(n) = args.prune_limit {
        config.prune_limit = n;
    }
    if let Some(d) = args.poll_interval {
        config.poll_interval = d;
    }
    Ok(config)
}

/// The registry a worker runs: the application's handlers, plus the built-in kinds when the
/// binary ships them.
pub fn registry(extensions: Extensions, args: &WorkerArgs) -> Registry {
    let mut registry = extensions.registry;
    if extensions.builtin_kinds {
        crate::builtin::register(&mut registry, &args.allow_exec);
    }
    registry
}

/// What a process finishes after the first shutdown signal, for the message it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finishing {
    /// A worker runs in the process: it claims nothing more and finishes its running jobs.
    RunningJobs,
    /// Only the HTTP API runs: it finishes the requests in flight.
    Requests,
}

/// Cancels `token` on SIGTERM or Ctrl-C; a second signal exits at once (exit code 130).
/// `finishing` says what the process finishes meanwhile, in the message printed to stderr.
///
/// The signal handlers are installed before this returns and stay installed for the life of
/// the process, so a second signal sent the moment the first is acknowledged is never lost
/// (a handler installed afresh after the first signal would miss it).
pub fn shutdown_on_signals(token: CancellationToken, finishing: Finishing) {
    let mut signals = Signals::install();
    let (what, claims, left_behind) = match finishing {
        Finishing::RunningJobs => (
            "running jobs",
            "no new claims; ",
            "; unfinished jobs are rescued after their lease expires",
        ),
        Finishing::Requests => ("requests in flight", "", ""),
    };
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!("shutdown requested: {claims}finishing {what}");
        eprintln!("drover: shutting down: finishing {what} (signal again to exit at once)");
        token.cancel();
        signals.next().await;
        eprintln!("drover: second signal: exiting now{left_behind}");
        std::process::exit(130);
    });
}

/// The process's shutdown signals (SIGTERM and SIGINT on Unix, Ctrl-C elsewhere), each
/// registered once.
struct Signals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Self {
                terminate: signal(SignalKind::terminate()).ok(),
                interrupt: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// Waits for the next shutdown signal.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            if self.terminate.is_none() && self.interrupt.is_none() {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
            tokio::select! {
                () = recv(&mut self.terminate) => {}
                () = recv(&mut self.interrupt) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Serves `/metrics` and `/v1/ready` (and nothing else) on `addr` until `shutdown` fires, both
/// without a token: the worker has no token list, so `addr` should be one only the scraper
/// reaches (the metrics name every tenant's queues and kinds).
///
/// # Errors
/// The address cannot be bound.
pub async fn serve_metrics(
    addr: SocketAddr,
    store: Arc<dyn JobStore>,
    metrics: ProcessMetrics,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let router = drover_http::metrics_router(store, Some(metrics));
    // The bound address: with port 0 the system picked one.
    let bound = listener.local_addr().unwrap_or(addr);
    eprintln!("drover: metrics on http://{bound}/metrics");
    Ok(tokio::spawn(async move {
        if let Err(e) = drover_http::serve(listener, router, shutdown).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    }))
}

/// Runs `drover worker`.
pub async fn run(ctx: &Ctx, args: WorkerArgs, extensions: Extensions) -> Result<()> {
    let config = worker_config(&args, &[])?;
    let registry = Arc::new(registry(extensions, &args));
    let slots = config.max_running();
    // DESIGN.md section 5: a worker needs at least slots + 2 connections. The pool opens
    // connections only as they are used (claims, outcome writes and heartbeats are batched, so
    // far fewer are open in practice), so the default bound costs nothing.
    let needed = u32::try_from(slots).unwrap_or(u32::MAX).saturating_add(2);
    let connections = args.db_connections.unwrap_or(needed.saturating_add(2));
    if connections < needed {
        tracing::warn!(
            connections,
            slots,
            "the database pool is smaller than slots + 2 connections"
        );
        eprintln!(
            "drover: warning: --db-connections {connections} is below slots + 2 = {needed}; jobs may wait for a connection"
        );
    }
    let pg = ctx.postgres(connections, args.pgbouncer).await?;
    let store: Arc<dyn JobStore> = Arc::new(pg.clone());
    store.check_ready().await.map_err(|e| ctx.explain(e))?;
    let metrics = ProcessMetrics::default();
    let shutdown = CancellationToken::new();
    shutdown_on_signals(shutdown.clone(), Finishing::RunningJobs);
    let server = match args.metrics_listen {
        Some(addr) => {
            Some(serve_metrics(addr, store.clone(), metrics.clone(), shutdown.clone()).await?)
        }
        None => None,
    };
    let worker = Worker::new(store, registry.clone(), config)
        .map_err(|e| anyhow!("{e}"))?
        .metrics(Arc::new(metrics));
    let kinds: Vec<String> = registry.kinds().iter().map(ToString::to_string).collect();
    eprintln!(
        "drover: worker {} started on {}: {} slot(s), kinds {}",
        worker.id(),
        crate::context::describe_url(ctx.url()?),
        worker.config().max_running(),
        kinds.join(", ")
    );
    let report = worker.run(shutdown.clone()).await;
    shutdown.cancel();
    if let Some(server) = server {
        let _ = server.await;
    }
    pg.close().await;
    let report = report.map_err(|e| ctx.explain(e))?;
    eprintln!("drover: worker stopped: {report}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

    fn config(args: &[&str]) -> WorkerConfig {
        let cli = Cli::try_parse_from(std::iter::once("drover").chain(args.iter().copied()))
            .expect("valid flags");
        let Command::Worker(worker) = cli.command else {
            panic!("not a worker command");
        };
        worker_config(&worker, &[]).expect("valid worker flags")
    }

    #[test]
    fn slots_are_per_queue_and_pools_add_up() {
        let c = config(&["worker", "--queue", "a", "--queue", "b", "--slots", "8"]);
        assert_eq!(c.max_running(), 16);
        let c = config(&[
            "worker",
            "--queue",
            "default",
            "--slots",
            "2",
            "--pool",
            "long:reports:1:sleep",
        ]);
        assert_eq!(c.pools.len(), 2);
        assert_eq!(c.pools[0].queues, vec![QueueName::default_queue()]);
        assert_eq!(
            c.pools[1].kinds,
            Some(vec![JobKind::parse("sleep").unwrap()])
        );
        assert_eq!(c.max_running(), 3);
        let c = config(&["worker", "--pool", "long:reports:1"]);
        assert_eq!(c.pools.len(), 1, "a pool alone serves no default queue");
    }

    #[test]
    fn prefetch_defaults_to_eight_per_slot_and_applies_to_every_pool() {
        let c = config(&[
            "worker",
            "--queue",
            "a",
            "--slots",
            "4",
            "--pool",
            "long:reports:1",
        ]);
        assert_eq!(c.pools[0].prefetch_per_queue(), 32);
        assert_eq!(c.pools[1].prefetch_per_queue(), 8);
        let c = config(&["worker", "--slots", "300"]);
        assert_eq!(
            c.pools[0].prefetch_per_queue(),
            1_000,
            "at most 1,000 by default"
        );
        let c = config(&["worker", "--slots", "9500", "--prefetch", "2000"]);
        assert_eq!(
            c.pools[0].prefetch_per_queue(),
            500,
            "one claim stays within 10,000"
        );
        let c = config(&[
            "worker",
            "--queue",
            "a",
            "--prefetch",
            "0",
            "--pool",
            "long:reports:1",
        ]);
        assert!(c.pools.iter().all(|pool| pool.prefetch_per_queue() == 0));
    }

    #[test]
    fn a_short_lease_shortens_the_rescue_interval() {
        let default = config(&["worker"]);
        assert_eq!(default.rescue_interval, Duration::from_secs(15));
        let short = config(&["worker", "--lease", "2s", "--heartbeat", "500ms"]);
        assert_eq!(short.lease, Duration::from_secs(2));
        assert_eq!(short.heartbeat_interval, Duration::from_millis(500));
        assert_eq!(short.rescue_interval, Duration::from_secs(2));
        let long = config(&["worker", "--lease", "10m"]);
        assert_eq!(long.rescue_interval, Duration::from_secs(15));
        let explicit = config(&["worker", "--lease", "2s", "--rescue-interval", "300ms"]);
        assert_eq!(explicit.rescue_interval, Duration::from_millis(300));
    }

    #[test]
    fn bad_pool_specs_name_the_problem() {
        for (spec, needle) in [
            ("long", "NAME:QUEUE"),
            ("long:reports:x", "SLOTS"),
            ("long:bad queue:1", "--pool"),
            ("long:reports:1:bad kind", "--pool"),
        ] {
            let err = parse_pool(spec).unwrap_err().to_string();
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }
}

//! The one assembly of a long-running process. `drover worker`, `drover serve` (with or
//! without `--worker`) and `drover dev` each configure a [`Process`]: which store it opens (and
//! the size of its database pool, with the warning when the pool is too small for the worker),
//! the worker, the HTTP API and the metrics listener. [`Process::start`] opens and starts them
//! in one order (store, signals, API, metrics listener, worker) and [`Running::stop`] stops
//! them in the reverse one: the worker finishes or releases its jobs and writes their
//! outcomes, the servers finish the requests in flight, and the store is closed last, so its
//! wake-ups are sent before the process exits.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use drover_core::{JobKind, JobStore, QueueName};
use drover_http::{ApiConfig, ApiState, AuthMode, ProcessMetrics};
use drover_runner::{Client, Metrics, MetricsFanOut, Registry, Worker, WorkerConfig, WorkerReport};
use drover_store_postgres::PgStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::args::WorkerArgs;
use crate::context::Ctx;
use crate::output::errln;
use crate::signals::{shutdown_on_signals, Finishing};
use crate::{env, worker_flags};

/// Which command the process runs: it decides the store and the lines the process prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessKind {
    /// `drover worker`: PostgreSQL.
    Worker,
    /// `drover serve`: PostgreSQL, or without a database URL the in-memory store (said once).
    Serve,
    /// `drover dev`: the in-memory store (the command says so itself).
    Dev,
}

/// The HTTP API of a process.
pub struct Api {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// How callers authenticate.
    pub auth: AuthMode,
    /// The API's settings.
    pub config: ApiConfig,
}

/// Builds the worker's metrics from the process's counters (`drover dev` counts outcomes too).
type WorkerMetrics = Box<dyn FnOnce(ProcessMetrics) -> Arc<dyn Metrics> + Send>;

/// A process to start, configured by its command.
pub struct Process<'a> {
    ctx: &'a Ctx,
    kind: ProcessKind,
    flags: &'a WorkerArgs,
    kinds: Vec<JobKind>,
    worker: Option<(WorkerConfig, Arc<Registry>)>,
    api: Option<Api>,
    worker_metrics: Option<WorkerMetrics>,
}

impl<'a> Process<'a> {
    /// A process of `kind` with the worker flags `flags` (the store's settings and the pool's
    /// size come from them even without a worker), running nothing yet.
    pub fn new(ctx: &'a Ctx, kind: ProcessKind, flags: &'a WorkerArgs) -> Self {
        Process {
            ctx,
            kind,
            flags,
            kinds: Vec::new(),
            worker: None,
            api: None,
            worker_metrics: None,
        }
    }

    /// Names `kinds` in the process's metrics (the binary's kinds); every other kind is counted
    /// under `(other)`. A worker's registry names its kinds itself.
    #[must_use]
    pub fn metric_kinds(mut self, kinds: Vec<JobKind>) -> Self {
        self.kinds = kinds;
        self
    }

    /// Runs a worker with `config` and `registry`, checked against the flags first (before
    /// anything is built or connected).
    ///
    /// # Errors
    /// The first rule broken ([`worker_flags::check_config`]): a usage error naming the flag.
    pub fn worker(mut self, config: WorkerConfig, registry: Arc<Registry>) -> Result<Self> {
        worker_flags::check_config(&config, &registry, self.flags)?;
        self.kinds = registry.kinds();
        self.worker = Some((config, registry));
        Ok(self)
    }

    /// Serves the HTTP API.
    #[must_use]
    pub fn api(mut self, api: Api) -> Self {
        self.api = Some(api);
        self
    }

    /// Reports the worker's jobs to the metrics `build` makes of the process's counters
    /// (default: the counters themselves).
    #[must_use]
    pub fn worker_metrics(
        mut self,
        build: impl FnOnce(ProcessMetrics) -> Arc<dyn Metrics> + Send + 'static,
    ) -> Self {
        self.worker_metrics = Some(Box::new(build));
        self
    }

    /// Opens the store, installs the signal handlers, and starts the API, the metrics
    /// listener (`--metrics-listen`, beside a worker) and the worker, in that order.
    ///
    /// # Errors
    /// The store cannot be opened or is not migrated; an address cannot be bound; the worker
    /// cannot be built.
    pub async fn start(self) -> Result<Running<'a>> {
        let (store, postgres) = self.open_store().await?;
        store.check_ready().await.map_err(|e| self.ctx.explain(e))?;
        let shutdown = CancellationToken::new();
        let finishing = if self.worker.is_some() {
            Finishing::RunningJobs
        } else {
            Finishing::Requests
        };
        shutdown_on_signals(shutdown.clone(), finishing);
        let process = ProcessMetrics::new(self.kinds.clone());
        let metrics: Arc<dyn Metrics> = match self.worker_metrics {
            Some(build) => build(process.clone()),
            None => Arc::new(process.clone()),
        };
        // With OTLP export on, the same calls reach its instruments too.
        let metrics = match crate::TELEMETRY.get() {
            Some(telemetry) => {
                let queues = self
                    .worker
                    .as_ref()
                    .map(|(config, _)| config.queues())
                    .unwrap_or_default();
                Arc::new(MetricsFanOut(vec![
                    metrics,
                    telemetry.metrics(self.kinds, queues),
                ]))
            }
            None => metrics,
        };
        let mut running = Running {
            ctx: self.ctx,
            kind: self.kind,
            client: Client::new(Arc::clone(&store)).with_metrics(Arc::clone(&metrics)),
            store,
            postgres,
            shutdown,
            api: None,
            metrics_server: None,
            worker: None,
        };
        // From here on a failure stops what has started, and closes the store.
        match running
            .start(self.api, self.worker, self.flags, process, metrics)
            .await
        {
            Ok(()) => Ok(running),
            Err(e) => {
                let _ = running.finish().await;
                Err(e)
            }
        }
    }

    /// The store of the process, and the PostgreSQL store to close at the end if it is one.
    async fn open_store(&self) -> Result<(Arc<dyn JobStore>, Option<PgStore>)> {
        let memory = match self.kind {
            ProcessKind::Worker => false,
            ProcessKind::Serve => self.ctx.database_url.is_none(),
            ProcessKind::Dev => true,
        };
        if memory {
            if self.kind == ProcessKind::Serve {
                errln!("drover: in-memory development mode: no database URL given, nothing persists after exit");
            }
            let config = env::store_config_with(self.flags.succeeded_jobs())?;
            let store = drover_store_memory::MemoryStore::new(config);
            return Ok((Arc::new(store), None));
        }
        let slots = self.worker.as_ref().map(|(config, _)| config.max_running());
        let (connections, warning) =
            worker_flags::pool_size(self.flags.db_connections, slots, self.api.is_some());
        if let Some(warning) = warning {
            errln!("drover: warning: {warning}");
        }
        let postgres = self
            .ctx
            .postgres_with(
                connections,
                self.flags.pgbouncer,
                self.flags.succeeded_jobs(),
            )
            .await?;
        Ok((Arc::new(postgres.clone()), Some(postgres)))
    }
}

/// A started process.
pub struct Running<'a> {
    ctx: &'a Ctx,
    kind: ProcessKind,
    store: Arc<dyn JobStore>,
    postgres: Option<PgStore>,
    client: Client,
    shutdown: CancellationToken,
    api: Option<JoinHandle<std::io::Result<()>>>,
    metrics_server: Option<JoinHandle<()>>,
    worker: Option<JoinHandle<Result<WorkerReport, drover_core::Error>>>,
}

impl Running<'_> {
    async fn start(
        &mut self,
        api: Option<Api>,
        worker: Option<(WorkerConfig, Arc<Registry>)>,
        flags: &WorkerArgs,
        process: ProcessMetrics,
        metrics: Arc<dyn Metrics>,
    ) -> Result<()> {
        if let Some(api) = api {
            let listener = tokio::net::TcpListener::bind(api.listen)
                .await
                .with_context(|| format!("cannot listen on {}", api.listen))?;
            let state = ApiState::new(
                Arc::clone(&self.store),
                api.auth,
                api.config,
                Some(process.clone()),
            );
            let bound = listener.local_addr().unwrap_or(api.listen);
            errln!(
                "drover: API on http://{bound}/v1 (OpenAPI at /v1/openapi.json), dashboard on http://{bound}/"
            );
            let routes =
                drover_http::router(state.clone()).merge(drover_http::dashboard::router(state));
            self.api = Some(tokio::spawn(drover_http::serve(
                listener,
                routes,
                self.shutdown.clone(),
            )));
        }
        let Some((config, registry)) = worker else {
            return Ok(());
        };
        // The worker's own metrics address (`serve` refuses the flag without `--worker`).
        if let Some(addr) = flags.metrics_listen {
            self.metrics_server = Some(
                serve_metrics(
                    addr,
                    Arc::clone(&self.store),
                    process,
                    self.shutdown.clone(),
                )
                .await?,
            );
        }
        let worker = Worker::new(Arc::clone(&self.store), Arc::clone(&registry), config)
            .map_err(|e| anyhow!("{e}"))?
            .metrics(metrics);
        match self.kind {
            ProcessKind::Worker => {
                let kinds: Vec<String> = registry.kinds().iter().map(ToString::to_string).collect();
                errln!(
                    "drover: worker {} started on {}: {} slot(s), queues {}, kinds {}",
                    worker.id(),
                    crate::context::describe_url(self.ctx.url()?),
                    worker.config().max_running(),
                    served_queues(worker.config()),
                    kinds.join(", ")
                );
            }
            ProcessKind::Serve => errln!(
                "drover: worker {} started with {} slot(s), queues {}",
                worker.id(),
                worker.config().max_running(),
                served_queues(worker.config())
            ),
            ProcessKind::Dev => {}
        }
        warn_paused(self.store.as_ref(), worker.config()).await;
        let shutdown = self.shutdown.clone();
        self.worker = Some(tokio::spawn(async move {
            let report = worker.run(shutdown.clone()).await;
            // A worker that stopped on its own (a fatal store error) stops the process.
            shutdown.cancel();
            report
        }));
        Ok(())
    }

    /// The operator façade over the process's store, reporting to the process's metrics.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Fires on the first shutdown signal, or when the worker stops on its own.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Whether the process serves the HTTP API.
    pub fn serves_api(&self) -> bool {
        self.api.is_some()
    }

    /// Waits until the process is asked to stop.
    pub async fn wait(&self) {
        self.shutdown.cancelled().await;
    }

    /// Stops the process: the worker finishes (or releases) its jobs and writes their
    /// outcomes, then the API and the metrics listener finish their requests, then the store
    /// is closed; `worker` ends with its report, `serve` with `stopped`.
    ///
    /// # Errors
    /// The HTTP server's failure, else the worker's.
    pub async fn stop(self) -> Result<()> {
        let kind = self.kind;
        let report = self.finish().await?;
        match (kind, report) {
            (ProcessKind::Worker, Some(report)) => {
                crate::output::say(&format!("drover: worker stopped: {report}"));
            }
            (ProcessKind::Serve, _) => crate::output::say("drover: stopped"),
            _ => {}
        }
        Ok(())
    }

    /// [`Running::stop`] without its last line.
    async fn finish(self) -> Result<Option<WorkerReport>> {
        self.shutdown.cancel();
        let report = match self.worker {
            Some(worker) => worker
                .await
                .map(Some)
                .map_err(|e| anyhow!("the worker task failed: {e}")),
            None => Ok(None),
        };
        let served = match self.api {
            Some(api) => api
                .await
                .map_err(|e| anyhow!("the HTTP server task failed: {e}"))
                .and_then(|served| served.context("the HTTP server failed")),
            None => Ok(()),
        };
        if let Some(metrics_server) = self.metrics_server {
            let _ = metrics_server.await;
        }
        if let Some(postgres) = self.postgres {
            postgres.close().await;
        }
        served?;
        report?.transpose().map_err(|e| match self.kind {
            ProcessKind::Dev => anyhow!("{e}"),
            ProcessKind::Worker | ProcessKind::Serve => self.ctx.explain(e),
        })
    }
}

/// Serves `/metrics` and `/v1/ready` (and nothing else) on `addr` until `shutdown` fires, both
/// without a token: the worker has no token list, so `addr` should be one only the scraper
/// reaches (the metrics name every tenant's queues and kinds).
///
/// # Errors
/// The address cannot be bound.
async fn serve_metrics(
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
    errln!("drover: metrics on http://{bound}/metrics");
    Ok(tokio::spawn(async move {
        if let Err(e) = drover_http::serve(listener, router, shutdown).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    }))
}

/// The queues `config` serves (`WorkerConfig::queues`: pool order, each once), for the start
/// line: `mail, reports`.
fn served_queues(config: &WorkerConfig) -> String {
    let names: Vec<String> = config.queues().iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// The warnings for the served queues that are paused: a worker on a paused queue claims
/// nothing from it, which would otherwise look like a worker that does not work. One line per
/// queue, in the order of `WorkerConfig::queues`.
fn paused_warnings(config: &WorkerConfig, paused: &[QueueName]) -> Vec<String> {
    config
        .queues()
        .into_iter()
        .filter(|queue| paused.contains(queue))
        .map(|queue| {
            format!(
                "queue {queue} is paused: this worker claims none of its jobs until `drover queues resume {queue}`"
            )
        })
        .collect()
}

/// Prints [`paused_warnings`] for the queues the store lists as paused now (best effort: a
/// store that cannot answer is not a reason not to start; the worker's own logs say more).
async fn warn_paused(store: &dyn JobStore, config: &WorkerConfig) {
    let Ok(queues) = store.queues_list().await else {
        return;
    };
    let paused: Vec<QueueName> = queues
        .into_iter()
        .filter(|q| q.paused)
        .map(|q| q.name)
        .collect();
    for warning in paused_warnings(config, &paused) {
        errln!("drover: warning: {warning}");
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

    #[test]
    fn the_served_queues_are_named_once_and_the_paused_ones_warned_about() {
        let cli = Cli::try_parse_from([
            "drover",
            "worker",
            "--queue",
            "mail",
            "--queue",
            "reports",
            "--pool",
            "long:reports,exports:1:sleep",
        ])
        .expect("valid flags");
        let Command::Worker(worker) = cli.command else {
            panic!("not a worker command");
        };
        let c = crate::worker_flags::worker_config(&worker, &[]);
        assert_eq!(served_queues(&c), "mail, reports, exports");
        let paused = |names: &[&str]| -> Vec<QueueName> {
            names
                .iter()
                .map(|n| QueueName::parse(*n).unwrap())
                .collect()
        };
        assert!(paused_warnings(&c, &paused(&["other"])).is_empty());
        let warnings = paused_warnings(&c, &paused(&["exports", "other", "reports"]));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("queue reports is paused"),
            "{warnings:?}"
        );
        assert!(
            warnings[1].contains("until `drover queues resume exports`"),
            "{warnings:?}"
        );
    }
}

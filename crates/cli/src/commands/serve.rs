//! `drover serve`: the HTTP API, on PostgreSQL (or, without a database URL, on the in-memory
//! development store, which it says), optionally with a worker in the same process. On SIGTERM
//! or Ctrl-C the server finishes in-flight requests and the worker finishes or releases its
//! jobs; the store is closed last.

use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use drover_core::JobStore;
use drover_http::{ApiConfig, ApiState, ApiTokens, AuthMode, ProcessMetrics};
use drover_runner::Worker;
use tokio_util::sync::CancellationToken;

use crate::args::ServeArgs;
use crate::commands::worker;
use crate::context::Ctx;
use crate::output::errln;
use crate::usage::usage;
use crate::{env, Extensions};

/// The API's authentication from `--tokens FILE`, else `DROVER_API_TOKENS`; without either,
/// refuses to start unless `insecure` (`--insecure-no-auth`). Tokens and `--insecure-no-auth`
/// together are refused: one asks for authentication, the other turns it off, and neither
/// should silently win.
///
/// # Errors
/// Usage errors (exit code 2), naming `--tokens FILE` or `DROVER_API_TOKENS` and the entry at
/// fault but never a token: no tokens and not insecure; tokens and insecure; an unreadable
/// token file; a malformed or empty token list.
pub fn auth_mode(tokens_file: Option<&std::path::Path>, insecure: bool) -> Result<AuthMode> {
    if insecure {
        if tokens_file.is_some() {
            return Err(usage(
                "--tokens and --insecure-no-auth contradict each other: give --tokens FILE to require tokens, or --insecure-no-auth (development only) to turn authentication off, not both"
            ));
        }
        if env::api_tokens().is_some() {
            return Err(usage(
                "DROVER_API_TOKENS is set but --insecure-no-auth turns authentication off: unset DROVER_API_TOKENS, or drop --insecure-no-auth to require its tokens"
            ));
        }
    }
    // Where the tokens come from, for the errors (which never quote a token: they are secrets).
    let (spec, source) = match tokens_file {
        Some(path) => {
            let spec = std::fs::read_to_string(path).map_err(|e| {
                usage(format!(
                    "--tokens: cannot read the token file {}: {e}",
                    path.display()
                ))
            })?;
            (Some(spec), format!("--tokens {}", path.display()))
        }
        None => (env::api_tokens(), "DROVER_API_TOKENS".to_owned()),
    };
    match spec {
        Some(spec) => {
            let tokens = ApiTokens::parse(&spec).map_err(|e| usage(format!("{source}: {e}")))?;
            if tokens.is_empty() {
                return Err(usage(format!("{source}: the API token list is empty: give at least one token:tenant:role, or --insecure-no-auth for development")));
            }
            Ok(AuthMode::Tokens(tokens))
        }
        None if insecure => Ok(AuthMode::InsecureNoAuth),
        None => Err(usage(
            "no API tokens: set DROVER_API_TOKENS=token:tenant:role[,...] or pass --tokens FILE (for local development only: --insecure-no-auth)"
        )),
    }
}

/// Runs `drover serve`.
pub async fn run(ctx: &Ctx, args: ServeArgs, extensions: Extensions) -> Result<()> {
    let auth = auth_mode(args.tokens.as_deref(), args.insecure_no_auth)?;
    if matches!(auth, AuthMode::InsecureNoAuth) {
        errln!("drover: WARNING: authentication is OFF (--insecure-no-auth): every caller is an operator of every tenant");
    }
    // The worker's flags are checked before anything is built or connected.
    let config = worker::worker_config(&args.worker_args, &[]);
    // The binary's kinds, which the metrics name (with or without --worker).
    let kinds = worker::registry(extensions, &args.worker_args);
    let metrics = ProcessMetrics::new(kinds.kinds());
    let registry = if args.worker {
        let registry = Arc::new(kinds);
        worker::check_config(&config, &registry, &args.worker_args)?;
        Some(registry)
    } else {
        None
    };
    let (store, pg): (Arc<dyn JobStore>, _) = match &ctx.database_url {
        Some(_) => {
            let connections = args.worker_args.db_connections.unwrap_or_else(|| {
                let slots = if args.worker { config.max_running() } else { 0 };
                u32::try_from(slots)
                    .unwrap_or(u32::MAX)
                    .saturating_add(8)
                    .min(64)
            });
            let pg = ctx
                .postgres_with(
                    connections,
                    args.worker_args.pgbouncer,
                    args.worker_args.succeeded_jobs(),
                )
                .await?;
            (Arc::new(pg.clone()), Some(pg))
        }
        None => {
            errln!("drover: in-memory development mode: no database URL given, nothing persists after exit");
            let config = env::store_config_with(args.worker_args.succeeded_jobs())?;
            let memory = drover_store_memory::MemoryStore::new(config);
            (Arc::new(memory), None)
        }
    };
    if let Err(e) = store.check_ready().await {
        return Err(ctx.explain(e));
    }
    let shutdown = CancellationToken::new();
    let finishing = if args.worker {
        worker::Finishing::RunningJobs
    } else {
        worker::Finishing::Requests
    };
    worker::shutdown_on_signals(shutdown.clone(), finishing);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let state = ApiState::new(
        store.clone(),
        auth,
        ApiConfig {
            max_body_bytes: args.max_body_bytes,
            ..ApiConfig::default()
        },
        Some(metrics.clone()),
    );
    let router = drover_http::router(state);
    let bound = listener.local_addr().unwrap_or(args.listen);
    errln!("drover: API on http://{bound}/v1 (OpenAPI at /v1/openapi.json)");
    let server = tokio::spawn(drover_http::serve(listener, router, shutdown.clone()));
    // The worker's own metrics address, as `drover worker --metrics-listen` (without --worker
    // the flag is refused when the command line is parsed).
    let metrics_server = match args.worker_args.metrics_listen.filter(|_| args.worker) {
        Some(addr) => Some(
            worker::serve_metrics(addr, store.clone(), metrics.clone(), shutdown.clone()).await?,
        ),
        None => None,
    };
    let worker_result = if let Some(registry) = registry {
        let w = Worker::new(store.clone(), registry, config)
            .map_err(|e| anyhow!("{e}"))?
            .metrics(Arc::new(metrics));
        errln!(
            "drover: worker {} started with {} slot(s), queues {}",
            w.id(),
            w.config().max_running(),
            worker::served_queues(w.config())
        );
        worker::warn_paused(store.as_ref(), w.config()).await;
        let result = w.run(shutdown.clone()).await;
        shutdown.cancel();
        Some(result)
    } else {
        shutdown.cancelled().await;
        None
    };
    server
        .await
        .map_err(|e| anyhow!("the HTTP server task failed: {e}"))?
        .context("the HTTP server failed")?;
    if let Some(metrics_server) = metrics_server {
        let _ = metrics_server.await;
    }
    if let Some(pg) = pg {
        pg.close().await;
    }
    if let Some(result) = worker_result {
        result.map_err(|e| ctx.explain(e))?;
    }
    crate::output::say("drover: stopped");
    Ok(())
}

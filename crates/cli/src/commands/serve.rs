//! `drover serve`: the HTTP API, on PostgreSQL (or, without a database URL, on the in-memory
//! development store, which it says), optionally with a worker in the same process. On SIGTERM
//! or Ctrl-C the server finishes in-flight requests and the worker finishes or releases its
//! jobs; the store is closed last.

use std::sync::Arc;

use anyhow::Result;
use drover_http::{ApiConfig, ApiTokens, AuthMode};

use crate::args::ServeArgs;
use crate::context::Ctx;
use crate::output::errln;
use crate::process::{Api, Process, ProcessKind};
use crate::usage::usage;
use crate::worker_flags::{registry, worker_config};
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
    let config = worker_config(&args.worker_args, &[]);
    // The binary's kinds, which the metrics name (with or without --worker).
    let registry = registry(extensions, &args.worker_args);
    let mut process = Process::new(ctx, ProcessKind::Serve, &args.worker_args);
    process = if args.worker {
        process.worker(config, Arc::new(registry))?
    } else {
        process.metric_kinds(registry.kinds())
    };
    let running = process
        .api(Api {
            listen: args.listen,
            auth,
            config: ApiConfig {
                max_body_bytes: args.max_body_bytes,
                ..ApiConfig::default()
            },
        })
        .start()
        .await?;
    running.wait().await;
    running.stop().await
}

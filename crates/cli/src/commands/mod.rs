//! One module per command; [`dispatch`] routes a parsed command line to it.

pub mod admin;
pub mod dev;
pub mod enqueue;
pub mod jobs;
pub mod serve;
pub mod worker;
pub mod workflows;

use anyhow::Result;
use clap::CommandFactory;

use crate::args::{AuditCommand, Cli, Command};
use crate::context::Ctx;
use crate::Extensions;

/// Runs the parsed command line.
///
/// # Errors
/// Whatever the command reports; the caller prints it as one line.
pub async fn dispatch(cli: Cli, extensions: Extensions) -> Result<()> {
    let ctx = Ctx::new(cli.database_url.clone(), cli.json);
    let result = run(&ctx, cli, extensions).await;
    ctx.close().await;
    result
}

/// Runs the command of `cli` with `ctx` (which [`dispatch`] closes afterwards).
async fn run(ctx: &Ctx, cli: Cli, extensions: Extensions) -> Result<()> {
    match cli.command {
        Command::Migrate(args) => admin::migrate(ctx, args).await,
        Command::Migrations(_) => admin::migrations_list(ctx).await,
        Command::Worker(args) => worker::run(ctx, args, extensions).await,
        Command::Enqueue(args) => enqueue::run(ctx, args).await,
        Command::Jobs(command) => jobs::run(ctx, command).await,
        Command::Workflows(command) => workflows::run(ctx, command).await,
        Command::Queues(command) => admin::queues(ctx, command).await,
        Command::Workers(_) => admin::workers_list(ctx).await,
        Command::Audit(AuditCommand::List(args)) => admin::audit_list(ctx, args).await,
        Command::Limits(command) => admin::limits(ctx, command).await,
        Command::Schedules(command) => admin::schedules(ctx, command).await,
        Command::Snapshot => admin::snapshot(ctx).await,
        Command::Metrics => admin::metrics(ctx).await,
        Command::Prune(args) => admin::prune(ctx, args).await,
        Command::Serve(args) => serve::run(ctx, args, extensions).await,
        Command::Dev(args) => dev::run(ctx, args, extensions).await,
        Command::Completions { shell } => {
            let mut command = Cli::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "drover", &mut script);
            crate::output::write_text(&String::from_utf8_lossy(&script))
        }
    }
}

/// Parses the JSON text of a flag (`--args`, `--meta`): valid JSON whose integer literals fit
/// in 64 bits (the rule of `drover_core::json::check_integer_literals`, as over HTTP).
///
/// The text is never quoted in an error: args may hold secrets.
///
/// # Errors
/// A usage error: `invalid --FLAG: not valid JSON: ...`, or the path of an integer that does
/// not fit.
pub fn json_flag(flag: &str, text: &str) -> Result<serde_json::Value> {
    let value = serde_json::from_str(text).map_err(|e| {
        // A fault inside a string (a lone surrogate, a bad escape) is named with its rule, as
        // over HTTP.
        let fault = drover_http::extract::string_fault(&e, text)
            .or_else(|| drover_http::extract::depth_fault(&e));
        crate::usage::usage(match fault {
            Some(fault) => format!("invalid --{flag}: {fault}"),
            None => format!("invalid --{flag}: not valid JSON: {e}"),
        })
    })?;
    drover_core::json::check_integer_literals(text, flag)
        .map_err(|e| crate::usage::flag_error(e, &[(flag, &format!("--{flag}"))]))?;
    Ok(value)
}

//! The built-in kinds of the stock `drover` binary and of `drover dev` (issue #2 item 6,
//! DESIGN.md section 9):
//!
//! - `noop`: succeeds at once.
//! - `sleep` `{"ms": N}`: waits N milliseconds (at most 1 hour), stopping early on cancellation.
//! - `fail` `{"fail_times": N}`: fails its first N attempts, then succeeds.
//! - `exec` `{"program": P, "args": [..], "timeout_ms": N}`: runs an allowed program directly
//!   (never through a shell), with a timeout (default 60 s, at most 1 hour), and stores the exit
//!   code and the first KiB of stdout and stderr. Registered only when the worker is started
//!   with `--allow-exec PROGRAM`, and then only for the listed programs.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use drover_core::JobKind;
use drover_runner::{JobContext, Outcome, Registry};
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncReadExt;

/// Longest `sleep`.
pub const SLEEP_MAX_MS: u64 = 3_600_000;
/// Default `exec` timeout.
pub const EXEC_TIMEOUT_DEFAULT_MS: u64 = 60_000;
/// Longest `exec` timeout.
pub const EXEC_TIMEOUT_MAX_MS: u64 = 3_600_000;
/// Bytes of stdout and of stderr kept from `exec`.
pub const EXEC_OUTPUT_KEPT: usize = 1024;

fn kind(name: &str) -> JobKind {
    JobKind::parse(name).unwrap_or_else(|_| unreachable!("built-in kind names are valid"))
}

/// Args of `sleep`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SleepArgs {
    /// Milliseconds to sleep (0..=3,600,000).
    pub ms: u64,
}

/// Args of `fail`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailArgs {
    /// Attempts that fail before one succeeds.
    pub fail_times: u32,
}

/// Args of `exec`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// Program path; must be one of the `--allow-exec` programs.
    pub program: PathBuf,
    /// Arguments, passed as a list (no shell).
    #[serde(default)]
    pub args: Vec<String>,
    /// Timeout in milliseconds (default 60,000; at most 3,600,000).
    pub timeout_ms: Option<u64>,
}

/// Registers `noop`, `sleep`, `fail`, and `exec` when `allow_exec` is not empty; a kind the
/// registry already has (an application's own handler) is left alone.
pub fn register(registry: &mut Registry, allow_exec: &[PathBuf]) {
    if !registry.contains(&kind("noop")) {
        registry.register_fn(kind("noop"), |_ctx: JobContext| async {
            Outcome::success()
        });
    }
    if !registry.contains(&kind("sleep")) {
        register_sleep(registry);
    }
    if !registry.contains(&kind("fail")) {
        register_fail(registry);
    }
    if !allow_exec.is_empty() && !registry.contains(&kind("exec")) {
        let allowed: Arc<Vec<PathBuf>> =
            Arc::new(allow_exec.iter().map(|p| normalize(p)).collect());
        registry.register_typed(kind("exec"), move |ctx: JobContext, args: ExecArgs| {
            let allowed = allowed.clone();
            async move { exec(ctx, args, &allowed).await }
        });
    }
}

fn register_sleep(registry: &mut Registry) {
    registry.register_typed(
        kind("sleep"),
        |ctx: JobContext, args: SleepArgs| async move {
            if args.ms > SLEEP_MAX_MS {
                return Outcome::discard(format!("ms must be at most {SLEEP_MAX_MS}"));
            }
            let cancel = ctx.cancellation();
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(args.ms)) => Outcome::success(),
                () = cancel.cancelled() => Outcome::cancelled("sleep interrupted by cancellation"),
            }
        },
    );
}

fn register_fail(registry: &mut Registry) {
    registry.register_typed(kind("fail"), |ctx: JobContext, args: FailArgs| async move {
        let attempt = ctx.job().attempt;
        if i64::from(attempt) <= i64::from(args.fail_times) {
            Outcome::retry(format!(
                "planned failure {attempt} of {} (fail_times)",
                args.fail_times
            ))
        } else {
            Outcome::success_with(json!({"succeeded_on_attempt": attempt}))
        }
    });
}

/// The canonical form of a path when it exists, else the path as given.
fn normalize(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

async fn read_capped(mut reader: impl tokio::io::AsyncRead + Unpin) -> (Vec<u8>, bool) {
    let mut kept = Vec::with_capacity(EXEC_OUTPUT_KEPT);
    let mut buf = [0u8; 4096];
    let mut truncated = false;
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = EXEC_OUTPUT_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    truncated = true;
                }
            }
        }
    }
    (kept, truncated)
}

async fn exec(ctx: JobContext, args: ExecArgs, allowed: &[PathBuf]) -> Outcome {
    let program = normalize(&args.program);
    if !allowed.contains(&program) {
        return Outcome::discard(format!(
            "program {} is not allowed on this worker (start it with --allow-exec {})",
            args.program.display(),
            args.program.display()
        ));
    }
    let timeout_ms = args.timeout_ms.unwrap_or(EXEC_TIMEOUT_DEFAULT_MS);
    if timeout_ms == 0 || timeout_ms > EXEC_TIMEOUT_MAX_MS {
        return Outcome::discard(format!(
            "timeout_ms must be between 1 and {EXEC_TIMEOUT_MAX_MS}"
        ));
    }
    let mut child = match tokio::process::Command::new(&program)
        .args(&args.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return Outcome::retry(format!("cannot start {}: {e}", program.display())),
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_task = tokio::spawn(async move {
        match stdout {
            Some(s) => read_capped(s).await,
            None => (Vec::new(), false),
        }
    });
    let err_task = tokio::spawn(async move {
        match stderr {
            Some(s) => read_capped(s).await,
            None => (Vec::new(), false),
        }
    });
    let cancel = ctx.cancellation();
    let status = tokio::select! {
        status = child.wait() => status,
        () = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
            let _ = child.kill().await;
            return Outcome::retry(format!("{} timed out after {timeout_ms} ms", program.display()));
        }
        () = cancel.cancelled() => {
            let _ = child.kill().await;
            return Outcome::cancelled(format!("{} stopped by cancellation", program.display()));
        }
    };
    let (stdout, out_truncated) = out_task.await.unwrap_or_default();
    let (stderr, err_truncated) = err_task.await.unwrap_or_default();
    let status = match status {
        Ok(status) => status,
        Err(e) => return Outcome::retry(format!("waiting for {} failed: {e}", program.display())),
    };
    let result = json!({
        "exit_code": status.code(),
        "stdout": String::from_utf8_lossy(&stdout),
        "stderr": String::from_utf8_lossy(&stderr),
        "stdout_truncated": out_truncated,
        "stderr_truncated": err_truncated,
    });
    if status.success() {
        Outcome::Success {
            result: Some(result),
        }
    } else {
        Outcome::retry(format!(
            "{} exited with {}",
            program.display(),
            status
                .code()
                .map_or_else(|| "a signal".to_owned(), |c| format!("code {c}"))
        ))
    }
}

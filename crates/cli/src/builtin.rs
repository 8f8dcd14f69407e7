//! The built-in kinds of the stock `drover` binary and of `drover dev` (docs/design.md
//! section 9):
//!
//! - `noop`: succeeds at once.
//! - `sleep` `{"ms": N}`: waits N milliseconds (at most 1 hour), stopping early on cancellation.
//! - `fail` `{"fail_times": N}`: fails its first N attempts, then succeeds.
//! - `exec` `{"program": P, "args": [..], "timeout_ms": N}`: runs an allowed program directly
//!   (never through a shell), with a timeout (default 60 s, at most 1 hour), and stores the exit
//!   code and the first KiB of stdout and stderr as text (invalid UTF-8 and NUL bytes become
//!   U+FFFD): in the result on exit code 0; else (another exit code, a signal, the timeout, a
//!   cancellation) in the job's error message, as JSON strings after the reason
//!   (`... exited with code 3; stdout: "..."; stderr: "..."`). Registered only when the worker is started with `--allow-exec PROGRAM`, and then
//!   only for the listed programs: `P` must be one of those paths exactly (see [`ExecArgs`]).
//!   On Unix the program runs in a process group of its own, and the timeout and a
//!   cancellation bound the whole run, reading the output included: when either fires, when
//!   the run ends, and when the job's task is dropped (the runner aborts a handler that ignores
//!   its cancellation), every process still in the group is killed with SIGKILL.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use drover_core::JobKind;
use drover_runner::{JobContext, Outcome, Registry};
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

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
    /// Program path: allowed only when it is one of the `--allow-exec` paths, compared as text
    /// once `.` segments and repeated `/` are removed (`./scripts/x.sh`, `scripts/./x.sh` and
    /// `scripts//x.sh` are one path); symlinks are not resolved, so another path to the same
    /// file is refused. It runs exactly as given (it is the program's `argv[0]`, which
    /// multi-call programs such as `unxz` read). A bare name without a `/` is never run: the
    /// system would search it in `PATH`.
    pub program: PathBuf,
    /// Arguments, passed as a list (no shell).
    #[serde(default)]
    pub args: Vec<String>,
    /// Timeout in milliseconds (default 60,000; at most 3,600,000). It bounds the whole run:
    /// the program, what it started in its process group, and reading their output.
    pub timeout_ms: Option<u64>,
}

/// Registers `noop`, `sleep`, `fail`, and `exec` when `allow_exec` is not empty; a kind the
/// registry already has (an application's own handler) is left alone. A bare name in
/// `allow_exec` (no `/`; the command line refuses one, see [`parse_allow_exec`]) allows
/// nothing.
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
            Arc::new(allow_exec.iter().filter_map(|p| exec_path(p)).collect());
        registry.register_typed(kind("exec"), move |ctx: JobContext, args: ExecArgs| {
            let allowed = allowed.clone();
            async move { exec(ctx, args, &allowed).await }
        });
    }
}

/// Checks an `--allow-exec` value: a path, absolute or relative with a `/` in it, never a bare
/// name, that names a regular file the worker may execute (a symlink to one counts: the job
/// must still give this path, see [`ExecArgs::program`]). Checked when the command line is
/// parsed, so a worker never starts with an entry that could not run.
///
/// # Errors
/// The rule the value breaks (clap prefixes the flag): a bare name; a path that does not
/// exist or cannot be read; a directory or another file that is not a regular file; a file
/// without execute permission.
pub fn parse_allow_exec(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    if exec_path(&path).is_none() {
        return Err(
            "must be a path, absolute or relative like ./scripts/x.sh; a bare name would be searched in PATH"
                .to_owned(),
        );
    }
    let program = "must name an executable program file";
    let metadata = std::fs::metadata(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{program}, and no file is there"),
        _ => format!("{program}, and it cannot be read: {e}"),
    })?;
    if metadata.is_dir() {
        return Err(format!("{program}, not a directory"));
    }
    if !metadata.is_file() {
        return Err(format!(
            "{program}, not a special file (device, pipe or socket)"
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o111 == 0 {
            return Err(format!(
                "{program}, and this file has no execute permission"
            ));
        }
    }
    Ok(path)
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

/// A program path as `exec` compares it, by text alone: `.` segments and repeated `/`
/// removed, a relative path written with a leading `./`. Symlinks are not resolved. `None`
/// for a bare name (no `/`), which the system would search in `PATH`.
fn exec_path(path: &Path) -> Option<PathBuf> {
    if !path.as_os_str().as_encoded_bytes().contains(&b'/') {
        return None;
    }
    let mut lexical = PathBuf::new();
    if path.is_relative() {
        lexical.push(".");
    }
    for component in path.components() {
        if component != Component::CurDir {
            lexical.push(component);
        }
    }
    Some(lexical)
}

/// Captured output as stored text: invalid UTF-8 becomes U+FFFD, and so does NUL, which no
/// stored JSON may hold (PostgreSQL's `jsonb` refuses it, so every store does).
fn output_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).replace('\0', "\u{FFFD}")
}

/// The first [`EXEC_OUTPUT_KEPT`] bytes of one output stream of a run.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    /// More came than was kept.
    truncated: bool,
}

impl Captured {
    /// As stored text (see [`output_text`]).
    fn text(&self) -> String {
        output_text(&self.kept)
    }

    /// For an error message: `stdout: "..."` (a JSON string, so it stays on one line), marked
    /// when only the first bytes were kept.
    fn describe(&self, name: &str) -> String {
        let quoted = serde_json::Value::String(self.text()).to_string();
        if self.truncated {
            format!("{name} (first {EXEC_OUTPUT_KEPT} bytes): {quoted}")
        } else {
            format!("{name}: {quoted}")
        }
    }
}

/// What a failed run printed, for its error message: the same captured and truncated output
/// a success stores in its result.
fn output_summary(stdout: &Captured, stderr: &Captured) -> String {
    format!(
        "{}; {}",
        stdout.describe("stdout"),
        stderr.describe("stderr")
    )
}

/// Reads `reader` to its end into `into`, keeping the first [`EXEC_OUTPUT_KEPT`] bytes. What
/// was read stays in `into` when the read is stopped (a timeout, a cancellation).
async fn read_capped(reader: Option<impl AsyncRead + Unpin>, into: &mut Captured) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = EXEC_OUTPUT_KEPT.saturating_sub(into.kept.len());
                into.kept.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    into.truncated = true;
                }
            }
        }
    }
}

/// The process group of one `exec` run, whose leader is the program (started with
/// `process_group(0)`). Dropping it sends SIGKILL to every process still in the group: on
/// every way a run ends, including its future being dropped.
struct ProcessGroup {
    #[cfg(unix)]
    leader: Option<rustix::process::Pid>,
}

impl ProcessGroup {
    #[cfg_attr(not(unix), allow(unused_variables))]
    fn of(child: &tokio::process::Child) -> Self {
        ProcessGroup {
            #[cfg(unix)]
            leader: child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .and_then(rustix::process::Pid::from_raw),
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(leader) = self.leader {
            // After a clean end the group is usually empty already (ESRCH): nothing to do.
            let _ = rustix::process::kill_process_group(leader, rustix::process::Signal::KILL);
        }
    }
}

async fn exec(ctx: JobContext, args: ExecArgs, allowed: &[PathBuf]) -> Outcome {
    let program = args.program.display();
    let Some(path) = exec_path(&args.program) else {
        return Outcome::discard(format!(
            "program {program} is not allowed: a bare name would be searched in PATH; give the path listed with --allow-exec"
        ));
    };
    if !allowed.iter().any(|a| a.as_os_str() == path.as_os_str()) {
        return Outcome::discard(format!(
            "program {program} is not allowed on this worker (start it with --allow-exec {program})"
        ));
    }
    let timeout_ms = args.timeout_ms.unwrap_or(EXEC_TIMEOUT_DEFAULT_MS);
    if timeout_ms == 0 || timeout_ms > EXEC_TIMEOUT_MAX_MS {
        return Outcome::discard(format!(
            "timeout_ms must be between 1 and {EXEC_TIMEOUT_MAX_MS}"
        ));
    }
    run_program(
        &args.program,
        &args.args,
        Duration::from_millis(timeout_ms),
        &ctx.cancellation(),
    )
    .await
}

/// Why a run ended before its program did.
enum Stopped {
    TimedOut,
    Cancelled,
}

/// Runs `program` (as given) with `args` until it exits and its stdout and stderr close,
/// within `timeout` and until `cancel` fires; see the module doc.
async fn run_program(
    program: &Path,
    args: &[String],
    timeout: Duration,
    cancel: &CancellationToken,
) -> Outcome {
    let shown = program.display();
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Outcome::retry(format!("cannot start {shown}: {e}")),
    };
    // Declared after `child`, so dropped before it: whichever way this function ends, or
    // when its future is dropped, the whole group is killed (`kill_on_drop` reaches only the
    // program itself).
    let _group = ProcessGroup::of(&child);
    let (mut stdout, mut stderr) = (Captured::default(), Captured::default());
    let (stdout_pipe, stderr_pipe) = (child.stdout.take(), child.stderr.take());
    // The run ends when the program has exited AND its output has closed: a background
    // process holding stdout or stderr open keeps it going, under the same timeout. The
    // output read before a timeout or a cancellation is kept for the message.
    let ended = {
        let finished = async {
            let (status, (), ()) = tokio::join!(
                child.wait(),
                read_capped(stdout_pipe, &mut stdout),
                read_capped(stderr_pipe, &mut stderr)
            );
            status
        };
        tokio::select! {
            biased;
            status = finished => Ok(status),
            () = tokio::time::sleep(timeout) => Err(Stopped::TimedOut),
            () = cancel.cancelled() => Err(Stopped::Cancelled),
        }
    };
    let status = match ended {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => return Outcome::retry(format!("waiting for {shown} failed: {e}")),
        Err(Stopped::TimedOut) => {
            return Outcome::retry(format!(
                "{shown} timed out after {} ms; {}",
                timeout.as_millis(),
                output_summary(&stdout, &stderr)
            ));
        }
        Err(Stopped::Cancelled) => {
            return Outcome::cancelled(format!(
                "{shown} stopped by cancellation; {}",
                output_summary(&stdout, &stderr)
            ));
        }
    };
    if status.success() {
        Outcome::Success {
            result: Some(json!({
                "exit_code": status.code(),
                "stdout": stdout.text(),
                "stderr": stderr.text(),
                "stdout_truncated": stdout.truncated,
                "stderr_truncated": stderr.truncated,
            })),
        }
    } else {
        // docs/cli.md: the output is kept on a failure too, in the job's error.
        Outcome::retry(format!(
            "{shown} exited with {}; {}",
            status
                .code()
                .map_or_else(|| "a signal".to_owned(), |c| format!("code {c}")),
            output_summary(&stdout, &stderr)
        ))
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::future::Future;
    use std::path::Path;

    use chrono::Utc;
    use drover_core::{JobId, NewJob};
    use serde_json::Value;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// Deadline for events these tests wait on (a process starting, dying, being reaped).
    const WAIT: Duration = Duration::from_secs(10);

    /// One `exec` run with `args` on a registry whose allow-list is `allowed`: the token that
    /// cancels it, and the run.
    fn exec_job(
        allowed: &[&str],
        args: Value,
    ) -> (
        CancellationToken,
        impl Future<Output = Outcome> + Send + 'static,
    ) {
        let mut registry = Registry::new();
        let allowed: Vec<PathBuf> = allowed.iter().map(PathBuf::from).collect();
        register(&mut registry, &allowed);
        let handler = registry
            .handler(&kind("exec"))
            .expect("exec is registered")
            .clone();
        let job = NewJob::new(kind("exec"), args).into_job(JobId::new_v7(), Utc::now());
        let ctx = JobContext::detached(job);
        (ctx.cancellation(), async move { handler.run(ctx).await })
    }

    /// The PID a script wrote to `path`, once it is there.
    async fn read_pid(path: &Path) -> i32 {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(pid) = std::fs::read_to_string(path)
                .ok()
                .filter(|text| text.ends_with('\n'))
                .and_then(|text| text.trim().parse().ok())
            {
                return pid;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no PID in {} within {WAIT:?}",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// True while `pid` runs (a zombie waiting to be reaped by its new parent counts as gone).
    fn alive(pid: i32) -> bool {
        let Some(process) = rustix::process::Pid::from_raw(pid) else {
            return false;
        };
        if rustix::process::test_kill_process(process).is_err() {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // `pid (comm) S ...`: the state follows the last parenthesis.
            Ok(stat) => !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => true,
        }
    }

    /// Waits until `pid` is gone.
    async fn assert_gone(pid: i32, what: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while alive(pid) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: process {pid} still runs {WAIT:?} after the run ended"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills a background process a failed test left behind.
    struct Reap(i32);

    impl Drop for Reap {
        fn drop(&mut self) {
            if alive(self.0) {
                if let Some(pid) = rustix::process::Pid::from_raw(self.0) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
    }

    /// `sh -c SCRIPT sh PID_FILE` as `exec` args, with `timeout_ms` when given.
    fn sh(script: &str, pid_file: &Path, timeout_ms: Option<u64>) -> Value {
        let mut args = json!({
            "program": "/bin/sh",
            "args": ["-c", script, "sh", pid_file.to_str().expect("UTF-8 temp path")],
        });
        if let Some(ms) = timeout_ms {
            args["timeout_ms"] = json!(ms);
        }
        args
    }

    #[tokio::test]
    async fn exec_timeout_bounds_output_held_open_by_a_background_process() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        // The program exits at once; its background child keeps stdout open for 30 s.
        let (_, run) = exec_job(
            &["/bin/sh"],
            sh(
                "sleep 30 & echo $! > \"$1\"; echo started",
                &pid_file,
                Some(300),
            ),
        );
        let run = tokio::spawn(run);
        let pid = read_pid(&pid_file).await;
        let _reap = Reap(pid);
        let outcome = tokio::time::timeout(WAIT, run)
            .await
            .expect("the timeout bounds the whole run, reading the output included")
            .unwrap();
        // What the program printed before the timeout is kept in the message.
        assert!(
            matches!(&outcome, Outcome::Retry { message, .. }
                if message == "/bin/sh timed out after 300 ms; stdout: \"started\\n\"; stderr: \"\""),
            "{outcome:?}"
        );
        assert_gone(pid, "the background child of a timed-out program").await;
    }

    #[tokio::test]
    async fn exec_timeout_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let (_, run) = exec_job(
            &["/bin/sh"],
            sh("sleep 30 & echo $! > \"$1\"; wait", &pid_file, Some(300)),
        );
        let outcome = tokio::time::timeout(WAIT, run).await.expect("timed out");
        let pid = read_pid(&pid_file).await;
        let _reap = Reap(pid);
        assert!(
            matches!(&outcome, Outcome::Retry { message, .. } if message.contains("timed out")),
            "{outcome:?}"
        );
        assert_gone(pid, "the grandchild of a timed-out program").await;
    }

    #[tokio::test]
    async fn exec_cancellation_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let (cancel, run) = exec_job(
            &["/bin/sh"],
            sh("sleep 30 & echo $! > \"$1\"; wait", &pid_file, None),
        );
        let run = tokio::spawn(run);
        let pid = read_pid(&pid_file).await;
        let _reap = Reap(pid);
        cancel.cancel();
        let outcome = tokio::time::timeout(WAIT, run)
            .await
            .expect("cancellation stops the run")
            .unwrap();
        assert!(
            matches!(&outcome, Outcome::Cancelled { reason }
                if reason.starts_with("/bin/sh stopped by cancellation; stdout: ")),
            "{outcome:?}"
        );
        assert_gone(pid, "the grandchild of a cancelled program").await;
    }

    #[tokio::test]
    async fn dropping_an_exec_run_kills_the_whole_process_group() {
        // The runner drops a handler's future when it ignores its token past the cancel grace.
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let (_, run) = exec_job(
            &["/bin/sh"],
            sh("sleep 30 & echo $! > \"$1\"; wait", &pid_file, None),
        );
        let run = tokio::spawn(run);
        let pid = read_pid(&pid_file).await;
        let _reap = Reap(pid);
        run.abort();
        assert!(run.await.unwrap_err().is_cancelled());
        assert_gone(pid, "the grandchild of an aborted run").await;
    }

    #[tokio::test]
    async fn exec_runs_a_listed_path_as_given_and_no_other_path() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("sh-link");
        std::os::unix::fs::symlink("/bin/sh", &link).unwrap();
        let link = link.to_str().expect("UTF-8 temp path").to_owned();
        let dotted = format!("{}/./sh-link", dir.path().display());
        // `sh -c` without a command name sets $0 to argv[0]: the path the program ran as.
        let echo_argv0 = |program: &str| json!({"program": program, "args": ["-c", "echo \"$0\""]});

        for program in [&link, &dotted] {
            let (_, run) = exec_job(&[&link], echo_argv0(program));
            match run.await {
                Outcome::Success {
                    result: Some(result),
                } => {
                    assert_eq!(result["stdout"], format!("{program}\n"), "{result}");
                }
                other => panic!("{program}: {other:?}"),
            }
        }
        // Messages name the program as the job gave it.
        let (_, run) = exec_job(&[&link], json!({"program": link, "args": ["-c", "exit 3"]}));
        assert_eq!(
            run.await,
            Outcome::retry(format!(
                "{link} exited with code 3; stdout: \"\"; stderr: \"\""
            ))
        );
        // The symlink's target and another link to it are not listed.
        let other = dir.path().join("other-link");
        std::os::unix::fs::symlink("/bin/sh", &other).unwrap();
        for program in ["/bin/sh", other.to_str().unwrap()] {
            let (_, run) = exec_job(&[&link], echo_argv0(program));
            match run.await {
                Outcome::Discard { message } => assert_eq!(
                    message,
                    format!("program {program} is not allowed on this worker (start it with --allow-exec {program})")
                ),
                other => panic!("{program}: {other:?}"),
            }
        }
        // A bare name would be searched in PATH: never run, even when an embedding
        // application lists one (the command line refuses it at start).
        let (_, run) = exec_job(&["sh"], echo_argv0("sh"));
        match run.await {
            Outcome::Discard { message } => assert!(
                message.contains("not allowed") && message.contains("PATH"),
                "{message}"
            ),
            other => panic!("a bare name ran: {other:?}"),
        }
    }

    #[test]
    fn allow_exec_takes_paths_and_refuses_bare_names() {
        use clap::Parser;
        let parse = |value: &str| {
            crate::args::Cli::try_parse_from(["drover", "worker", "--allow-exec", value])
        };
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("report.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let script = script.to_str().expect("UTF-8 temp path").to_owned();
        let err = parse("sh").expect_err("a bare name");
        // A usage error (exit code 2) naming the flag and the rule.
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        let text = err.to_string();
        assert!(
            text.contains("--allow-exec")
                && text.contains("must be a path, absolute or relative like ./scripts/x.sh; a bare name would be searched in PATH"),
            "{text}"
        );
        let link = dir.path().join("report-link");
        std::os::unix::fs::symlink(&script, &link).unwrap();
        for path in ["/bin/sh", &script, link.to_str().unwrap()] {
            parse(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        // It must name an executable regular file: a directory (which a job's program could
        // never be), a missing path, a special file or a file without execute permission is
        // refused before the worker starts, a usage error (exit code 2).
        let plain = dir.path().join("notes.txt");
        std::fs::write(&plain, "text").unwrap();
        let dir_link = dir.path().join("dir-link");
        std::os::unix::fs::symlink("/bin", &dir_link).unwrap();
        for (path, rule) in [
            ("/bin/", "not a directory"),
            ("/bin", "not a directory"),
            ("./", "not a directory"),
            (dir_link.to_str().unwrap(), "not a directory"),
            ("./scripts/missing.sh", "no file is there"),
            ("/dev/null", "not a special file"),
            (plain.to_str().unwrap(), "no execute permission"),
        ] {
            let err = parse(path).expect_err(path);
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{path}"
            );
            let text = err.to_string();
            assert!(
                text.contains("--allow-exec")
                    && text.contains("must name an executable program file")
                    && text.contains(rule),
                "{path}: {text}"
            );
        }
        // Compared as text once `.` segments and repeated `/` go; nothing else is resolved.
        let lexical = |p: &str| exec_path(Path::new(p));
        assert_eq!(
            lexical("./scripts/report.sh"),
            lexical("scripts//./report.sh")
        );
        assert_eq!(lexical("/usr/bin/./xz"), lexical("/usr//bin/xz"));
        assert_ne!(lexical("/usr/bin/unxz"), lexical("/usr/bin/xz"));
        assert_ne!(lexical("/usr/bin/../bin/xz"), lexical("/usr/bin/xz"));
        assert_ne!(lexical("./xz"), lexical("/usr/bin/xz"));
        assert_eq!(lexical("sh"), None);
        assert_eq!(lexical(""), None);
    }

    #[tokio::test]
    async fn a_failed_exec_keeps_its_output_in_the_error() {
        // Exit code 3 after some output on both streams: one line, each stream as a JSON
        // string (newlines escaped, NUL and invalid UTF-8 as U+FFFD).
        let (_, run) = exec_job(
            &["/bin/sh"],
            json!({"program": "/bin/sh", "args": ["-c", "echo partial; printf 'bad\\000\\377\\n' >&2; exit 3"]}),
        );
        let Outcome::Retry { message, .. } = run.await else {
            panic!("exit code 3 is a retryable failure");
        };
        assert_eq!(
            message,
            "/bin/sh exited with code 3; stdout: \"partial\\n\"; stderr: \"bad\u{FFFD}\u{FFFD}\\n\""
        );
        // More than a KiB: the first KiB, marked as such.
        let (_, run) = exec_job(
            &["/bin/sh"],
            json!({"program": "/bin/sh", "args": ["-c", "head -c 5000 /dev/zero | tr '\\0' x >&2; exit 1"]}),
        );
        let Outcome::Retry { message, .. } = run.await else {
            panic!("exit code 1 is a retryable failure");
        };
        let kept = "x".repeat(EXEC_OUTPUT_KEPT);
        assert_eq!(
            message,
            format!(
                "/bin/sh exited with code 1; stdout: \"\"; stderr (first 1024 bytes): \"{kept}\""
            )
        );
        // Killed by a signal.
        let (_, run) = exec_job(
            &["/bin/sh"],
            json!({"program": "/bin/sh", "args": ["-c", "echo going; kill -9 $$"]}),
        );
        let Outcome::Retry { message, .. } = run.await else {
            panic!("a signal is a retryable failure");
        };
        assert_eq!(
            message,
            "/bin/sh exited with a signal; stdout: \"going\\n\"; stderr: \"\""
        );
    }

    #[tokio::test]
    async fn exec_output_with_nul_or_invalid_utf8_is_stored_with_replacement_characters() {
        let (_, run) = exec_job(
            &["/bin/sh"],
            json!({"program": "/bin/sh", "args": ["-c", "printf 'a\\000b'; printf 'x\\377y' >&2"]}),
        );
        let Outcome::Success {
            result: Some(result),
        } = run.await
        else {
            panic!("exit code 0 is a success");
        };
        assert_eq!(result["exit_code"], 0, "{result}");
        assert_eq!(result["stdout"], "a\u{FFFD}b", "{result}");
        assert_eq!(result["stderr"], "x\u{FFFD}y", "{result}");
        drover_core::json::check_value("result", &result, 1 << 20)
            .expect("a result every store accepts");
    }
}

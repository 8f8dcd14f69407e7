//! The process helpers of the tests that run real binaries (`drover`, `drover-test-worker`):
//! where a built binary is, a spawned [`Process`] whose stderr is collected line by line and
//! which is killed when dropped, and [`wait_until`] for states no event announces.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

/// How often [`wait_until`] checks its condition.
const POLL: Duration = Duration::from_millis(25);

/// A binary of this workspace in the profile folder that holds the running test executable
/// (`target/<profile>/<name>`).
///
/// # Panics
/// When it is missing, with `build`, the command that builds it.
pub fn built_binary(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/<name>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps");
    let path = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the {name} binary is missing at {}: run `{build}` (or `cargo test --workspace`, which builds it) first",
        path.display()
    );
    path
}

/// Polls `check` every 25 ms until it answers `Some`, and returns that. Only for conditions no
/// event can be awaited for (the database state of a job).
///
/// # Panics
/// When `timeout` passes first, naming `what`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Collected stderr lines of a process, and a wake-up for each new one.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    closed: Mutex<bool>,
    changed: Notify,
}

/// A spawned process whose stderr is collected line by line; SIGKILLed when dropped, so no
/// child outlives its test.
pub struct Process {
    child: tokio::process::Child,
    /// Its process id.
    pub pid: u32,
    what: String,
    stderr: Arc<Lines>,
}

impl Process {
    /// Spawns `command` with stdout discarded and stderr collected; `args`, its arguments,
    /// name it in messages after its program's file name.
    ///
    /// # Panics
    /// When it cannot be spawned.
    pub fn spawn(mut command: tokio::process::Command, args: &[&str]) -> Process {
        let program = Path::new(command.as_std().get_program())
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        let pid = child.id().expect("a running child has a pid");
        let lines = Arc::new(Lines::default());
        let stderr = child.stderr.take().expect("piped stderr");
        let collected = Arc::clone(&lines);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                collected.lines.lock().unwrap().push(line);
                collected.changed.notify_waiters();
            }
            *collected.closed.lock().unwrap() = true;
            collected.changed.notify_waiters();
        });
        Process {
            child,
            pid,
            what: format!("{program} {}", args.join(" ")),
            stderr: lines,
        }
    }

    /// Everything it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lines.lock().unwrap().join("\n")
    }

    /// How many stderr lines so far contain `needle`.
    pub fn count_lines(&self, needle: &str) -> usize {
        self.stderr
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// The stderr lines so far that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.stderr
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }

    /// Waits for a stderr line containing `needle` and returns it.
    ///
    /// # Panics
    /// When stderr closes or `timeout` passes first.
    pub async fn wait_for_line(&self, needle: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.stderr.changed.notified();
            if let Some(line) = self
                .stderr
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return line.clone();
            }
            assert!(
                !*self.stderr.closed.lock().unwrap(),
                "{} ended without printing {needle:?}; stderr:\n{}",
                self.what,
                self.stderr()
            );
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!(
                    "{} did not print {needle:?} within {timeout:?}; stderr:\n{}",
                    self.what,
                    self.stderr()
                );
            }
        }
    }

    /// Waits for a worker's `drover: worker ID started on ...` line and returns the id.
    ///
    /// # Panics
    /// When the line does not come within 60 s.
    pub async fn worker_started(&self) -> String {
        let line = self
            .wait_for_line(" started on ", Duration::from_secs(60))
            .await;
        line.strip_prefix("drover: worker ")
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("unexpected start line: {line}"))
            .to_owned()
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid as i32).expect("a positive pid");
        rustix::process::kill_process(pid, signal).expect("send a signal");
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its resident memory in KiB (`VmRSS` of `/proc/<pid>/status`), `None` once it exited.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// Waits for the process to exit, then for its stderr to be read to the end.
    ///
    /// # Panics
    /// When it does not exit within `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} did not exit within {timeout:?}; stderr:\n{}",
                    self.what,
                    self.stderr()
                )
            })
            .unwrap_or_else(|e| panic!("wait for {}: {e}", self.what));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let changed = self.stderr.changed.notified();
            if *self.stderr.closed.lock().unwrap() {
                break;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
        status
    }

    /// SIGTERM, then waits for a clean exit (code 0) and returns the worker's
    /// `drover: worker stopped: ` line.
    ///
    /// # Panics
    /// When it does not exit cleanly within `timeout`.
    pub async fn stop(&mut self, timeout: Duration) -> String {
        self.signal(rustix::process::Signal::TERM);
        let status = self.wait_exit(timeout).await;
        assert!(
            status.success(),
            "{} did not stop cleanly on SIGTERM: {status}; stderr:\n{}",
            self.what,
            self.stderr()
        );
        self.wait_for_line("drover: worker stopped: ", timeout)
            .await
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A stopped (SIGSTOP) process dies of SIGKILL too, but is continued first so nothing
        // lingers; an exited one is left alone (its pid may be another process's by now).
        if self.is_running() {
            if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
            }
        }
        let _ = self.child.start_kill();
    }
}

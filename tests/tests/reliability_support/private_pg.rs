//! A private PostgreSQL instance for the tests that restart or stop the database
//! (RELIABILITY.md): `initdb` into a temporary folder, `pg_ctl start` on a free port of
//! 127.0.0.1 with its own unix socket folder, `restart` (fast or immediate, the latter a crash
//! with recovery), `stop` and `start` again, and `pg_ctl stop -m immediate` plus removal of the
//! folder when the guard is dropped (instances of killed runs are swept after an hour). The shared server of `DROVER_TEST_DATABASE_URL` is never
//! touched: other tests use it at the same time.
//!
//! Durability is the default (`fsync` on); only `initdb` itself skips its final sync
//! (`--no-sync`), which concerns the template files, not the data under test.
//!
//! PostgreSQL refuses to run as root: as root, every command runs as the `postgres` user through
//! `runuser -u postgres --`, in a folder owned by that user. Binaries: `DROVER_TEST_PG_BINDIR`,
//! else the newest `/usr/lib/postgresql/<version>/bin`, else `pg_ctl` on the `PATH`. When the
//! environment cannot do this (no binaries; root without `runuser` or a `postgres` user) the
//! test skips, unless `DROVER_REQUIRE_POSTGRES` is set, when it fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::{skip_or_fail, Server};

/// A running private PostgreSQL; stopped (immediate) and deleted on drop.
pub struct PrivatePg {
    /// The temporary folder holding data, socket and log.
    root: PathBuf,
    bindir: PathBuf,
    /// The TCP port on 127.0.0.1.
    pub port: u16,
    as_postgres: bool,
    /// `listen_addresses`: 127.0.0.1 and any the test asked for.
    listen: String,
}

/// The folder of the PostgreSQL server binaries, if any is installed.
fn find_bindir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DROVER_TEST_PG_BINDIR") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|dir| dir.join("pg_ctl").is_file() && dir.join("initdb").is_file())
    })
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// Stops and deletes the instances that test runs killed before their guard could (their
/// folder name holds a uuid v7, whose timestamp is the creation time; see
/// [`drover_tests::leftovers`]).
fn sweep_leftovers(bindir: &Path, as_postgres: bool) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let leftover = name
            .to_str()
            .is_some_and(|n| drover_tests::leftovers::is_leftover(n, "drover-private-pg-"));
        if leftover {
            stop_immediately(bindir, &entry.path().join("data"), as_postgres);
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `pg_ctl stop -m immediate` on `data`, ignoring failures (it may not be running).
fn stop_immediately(bindir: &Path, data: &Path, as_postgres: bool) {
    let pg_ctl = bindir.join("pg_ctl");
    let mut command = if as_postgres {
        let mut command = std::process::Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(&pg_ctl);
        command
    } else {
        std::process::Command::new(&pg_ctl)
    };
    let _ = command
        .arg("-D")
        .arg(data)
        .args(["-w", "-t", "30", "stop", "-m", "immediate"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl PrivatePg {
    /// Creates and starts an instance, or `None` (after printing why) when this environment
    /// cannot run one and skipping is allowed.
    ///
    /// # Panics
    /// When it cannot run one and `DROVER_REQUIRE_POSTGRES` is set, or when `initdb` or
    /// `pg_ctl start` fail.
    pub async fn start(test: &str) -> Option<PrivatePg> {
        PrivatePg::start_listening(test, &[]).await
    }

    /// [`PrivatePg::start`], listening on `addresses` too (link-local addresses of the test's
    /// own network namespaces, `reliability_support::netns`), with trust authentication for
    /// 169.254.0.0/16.
    pub async fn start_listening(test: &str, addresses: &[String]) -> Option<PrivatePg> {
        let Some(bindir) = find_bindir() else {
            return skip_or_fail(
                test,
                "no PostgreSQL server binaries (initdb, pg_ctl) found for a private instance",
            );
        };
        let as_postgres = rustix::process::getuid().is_root();
        if as_postgres {
            let runuser = Path::new("/usr/sbin/runuser").is_file()
                || Path::new("/sbin/runuser").is_file()
                || Path::new("/usr/bin/runuser").is_file();
            let user = std::process::Command::new("id")
                .args(["-u", "postgres"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !runuser || !user {
                return skip_or_fail(
                    test,
                    "running as root without `runuser` and a `postgres` user, so PostgreSQL cannot be started",
                );
            }
        }
        sweep_leftovers(&bindir, as_postgres);
        let root = std::env::temp_dir().join(format!(
            "drover-private-pg-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(root.join("socket")).expect("create the private PG folder");
        if as_postgres {
            let status = std::process::Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&root)
                .status()
                .expect("run chown");
            assert!(status.success(), "chown of {} failed", root.display());
        }
        let pg = PrivatePg {
            root,
            bindir,
            port: free_port(),
            as_postgres,
            listen: std::iter::once("127.0.0.1".to_owned())
                .chain(addresses.iter().cloned())
                .collect::<Vec<_>>()
                .join(","),
        };
        let data = pg.data();
        pg.run(
            "initdb",
            &[
                "-D",
                data.to_str().expect("UTF-8 path"),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )
        .await;
        if !addresses.is_empty() {
            let hba = data.join("pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
            text.push_str("host all all 169.254.0.0/16 trust\n");
            std::fs::write(&hba, text).expect("write pg_hba.conf");
        }
        pg.pg_ctl(&["start", "-o", &pg.server_options()]).await;
        Some(pg)
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// Options of the server process: its port, socket folder, TCP on 127.0.0.1 (and the
    /// addresses the test asked for) only, and enough connections for a few workers.
    fn server_options(&self) -> String {
        format!(
            "-p {} -k {} -c listen_addresses={} -c max_connections=200 -c fsync=on",
            self.port,
            self.root.join("socket").display(),
            self.listen
        )
    }

    /// Runs a PostgreSQL binary (as the `postgres` user when we are root) and asserts success.
    async fn run(&self, program: &str, args: &[&str]) {
        let binary = self.bindir.join(program);
        let mut command = if self.as_postgres {
            let mut command = tokio::process::Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&binary);
            command
        } else {
            tokio::process::Command::new(&binary)
        };
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(120), command.output())
            .await
            .unwrap_or_else(|_| panic!("{program} {args:?} did not finish within 120 s"))
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        assert!(
            output.status.success(),
            "{program} {args:?} failed ({}): {}{}\nserver log:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.log_tail()
        );
    }

    /// `pg_ctl -D DATA -l LOG -w -t 60 ARGS`.
    async fn pg_ctl(&self, args: &[&str]) {
        let data = self.data();
        let log = self.root.join("server.log");
        let mut all = vec![
            "-D",
            data.to_str().expect("UTF-8 path"),
            "-l",
            log.to_str().expect("UTF-8 path"),
            "-w",
            "-t",
            "60",
        ];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all).await;
    }

    /// The last lines of the server log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The instance as a [`Server`] (user `postgres`, database `postgres` for administration).
    pub fn server(&self) -> Server {
        Server::from_url(&format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.port
        ))
    }

    /// Restarts the server: `fast` (clients disconnected, clean shutdown) or `immediate`
    /// (processes killed, crash recovery at start). Returns once it accepts connections again.
    pub async fn restart(&self, mode: &str) {
        self.pg_ctl(&["restart", "-m", mode, "-o", &self.server_options()])
            .await;
    }

    /// Stops the server (`fast` or `immediate`); it stays down until [`PrivatePg::start_again`].
    pub async fn stop(&self, mode: &str) {
        self.pg_ctl(&["stop", "-m", mode]).await;
    }

    /// Starts the stopped server again on the same port.
    pub async fn start_again(&self) {
        self.pg_ctl(&["start", "-o", &self.server_options()]).await;
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        stop_immediately(&self.bindir, &self.data(), self.as_postgres);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

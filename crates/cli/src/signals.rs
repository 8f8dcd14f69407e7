//! Shutdown signals: the first SIGTERM or Ctrl-C starts a graceful shutdown and says what the
//! process finishes; a second exits at once.

use tokio_util::sync::CancellationToken;

/// What a process finishes after the first shutdown signal, for the message it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finishing {
    /// A worker runs in the process: it claims nothing more and finishes its running jobs.
    RunningJobs,
    /// Only the HTTP API runs: it finishes the requests in flight.
    Requests,
    /// `drover enqueue --file --wait-for-room`: it sends no further line.
    Load,
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
        Finishing::Load => (
            "the batch in flight",
            "no further line is sent; ",
            "; the batch in flight may or may not be stored",
        ),
    };
    tokio::spawn(async move {
        signals.next().await;
        // Stop first, then say so: the message must never stand between a signal and the
        // shutdown (`eprintln!` panics when stderr's reader is gone, which ended this task and
        // left the process claiming jobs until SIGKILL).
        token.cancel();
        tracing::info!("shutdown requested: {claims}finishing {what}");
        crate::output::say(&format!(
            "drover: shutting down: finishing {what} (signal again to exit at once)"
        ));
        signals.next().await;
        crate::output::say(&format!("drover: second signal: exiting now{left_behind}"));
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

//! Wake-ups sent after commit (docs/design.md section 5: "LISTEN/NOTIFY wakes idle workers on
//! enqueue (payload small, coalesced)").
//!
//! Why not NOTIFY inside the enqueue: PostgreSQL serialises the commits of transactions that
//! sent a notification (`PreCommit_Notify` takes one cluster-wide lock and holds it until the
//! commit is flushed, so the queue of notifications stays in commit order). Concurrent
//! enqueues that notify therefore cannot share an fsync: pgbench with 8 clients measured
//! 1,800-2,000 one-row INSERT transactions/s alone against 310-410/s with a `pg_notify` in each.
//!
//! So the store's own autocommit enqueues commit WITHOUT notifying and hand the queues that got
//! ready jobs to this [`Notifier`]. A task sends, on one of the store's connections (usually the
//! one the enqueue just released, see connections.rs), one statement with a notification for
//! every distinct queue handed to it since its last send. A transaction that notifies gets a
//! transaction id and writes a commit record, so with the server's `synchronous_commit = on`
//! each send would wait for a WAL flush while holding the notify lock, and every wake-up would
//! cost an fsync between an enqueue's commit and the claim it triggers. The send's own
//! transaction therefore sets `synchronous_commit = off` (`set_config(..., true)`: that
//! transaction only): the jobs it announces were already committed and flushed by the enqueue,
//! and a notification is a best-effort hint that a crash may drop anyway (workers also poll),
//! so nothing durable is given up. The task sends at once
//! when it is idle; while a send is in flight (or within [`SPACING`] of the previous one) new
//! queues accumulate and go out together, so a burst of enqueues costs a few notifications,
//! not one each.
//!
//! Delivery stays best effort, like NOTIFY itself: workers also poll. A failed send is retried
//! with backoff until it succeeds or the store is closed. `enqueue_in`
//! (the caller's transaction) still notifies inside that transaction, because there the
//! wake-up must happen only if the caller commits, and only the caller knows when that is.
//!
//! The task starts on the first notification and runs until the store is closed
//! ([`Notifier::close`] sends what is pending first) or every clone of the store is dropped.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use drover_core::Error;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::connections::Connections;
use crate::error::SqlxResultExt;
use crate::listen::JOBS_CHANNEL;

/// Shortest time between the starts of two sends: queues handed over meanwhile wait for the
/// next one. Bounds the notifications of a busy producer to about a thousand a second (each
/// wakes every listening worker) at the price of at most this much extra latency under load;
/// an idle notifier sends at once.
pub(crate) const SPACING: Duration = Duration::from_millis(1);

const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How long [`Notifier::close`] waits for the last send.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The statement of one send: one notification per distinct queue, in a transaction that does
/// not wait for its commit record to be flushed (see the module docs).
const SEND: &str = "SELECT pg_notify($1, q) \
     FROM (SELECT set_config('synchronous_commit', 'off', true)) AS local_setting, \
          unnest($2::text[]) AS q";

/// What the store and the task share.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Woken when queues are added or the notifier is closed.
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Distinct queue names waiting for the next send (a set: a batch may name 100,000).
    queues: HashSet<String>,
    /// No more sends after the pending ones.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state inconsistent (it is a list of
        // names and a flag), so a poisoned lock is used as it is.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The after-commit notifier of one store (shared by its clones).
#[derive(Debug)]
pub(crate) struct Notifier {
    shared: Arc<Shared>,
    connections: Weak<Connections>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Notifier {
    /// A notifier sending on the store's `connections`. Starts nothing yet.
    pub(crate) fn new(connections: Weak<Connections>) -> Self {
        Notifier {
            shared: Arc::new(Shared::default()),
            connections,
            task: Mutex::new(None),
        }
    }

    /// Sends a `drover_jobs` notification for each of `queues` soon (at once when idle). Call
    /// only after the transaction that made their jobs ready has committed. Must be called
    /// inside a tokio runtime; never blocks.
    pub(crate) fn notify<'a>(&self, queues: impl IntoIterator<Item = &'a str>) {
        let mut added = false;
        {
            let mut state = self.shared.lock();
            if state.closed {
                return;
            }
            for queue in queues {
                if !state.queues.contains(queue) {
                    state.queues.insert(queue.to_owned());
                    added = true;
                }
            }
        }
        if !added {
            return;
        }
        self.ensure_task();
        self.shared.wake.notify_one();
    }

    /// Starts the task unless it runs (again after the runtime that ran it ended).
    fn ensure_task(&self) {
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        *task = Some(tokio::spawn(run(
            Arc::clone(&self.shared),
            self.connections.clone(),
        )));
    }

    /// Sends what is pending (one attempt) and stops the task; later notifications are dropped.
    pub(crate) async fn close(&self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            // The task ends by itself after its last send; a timeout only bounds a hung one.
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, task).await;
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

/// The task: waits for queues, sends them, repeats; ends once closed and flushed.
async fn run(shared: Arc<Shared>, connections: Weak<Connections>) {
    let mut last_send: Option<Instant> = None;
    let mut retry = RETRY_MIN;
    loop {
        let closed = {
            let state = shared.lock();
            if state.queues.is_empty() && state.closed {
                break;
            }
            if state.queues.is_empty() {
                None
            } else {
                Some(state.closed)
            }
        };
        let Some(closed) = closed else {
            shared.wake.notified().await;
            continue;
        };
        if !closed {
            // Only a send that follows another closely waits (a past deadline would still cost
            // a turn of the timer wheel, up to a millisecond).
            if let Some(next) = last_send.map(|last| last + SPACING) {
                if next > Instant::now() {
                    tokio::time::sleep_until(next).await;
                }
            }
        }
        let queues: Vec<String> = std::mem::take(&mut shared.lock().queues)
            .into_iter()
            .collect();
        if queues.is_empty() {
            continue;
        }
        last_send = Some(Instant::now());
        let Some(live) = connections.upgrade() else {
            break;
        };
        let sent = send(&live, &queues).await;
        drop(live);
        match sent {
            Ok(()) => retry = RETRY_MIN,
            Err(error) => {
                if closed {
                    tracing::debug!(%error, "last wake-up notification before close failed");
                    break;
                }
                tracing::debug!(%error, retry_in_ms = retry.as_millis() as u64, "sending wake-up notifications failed; retrying");
                shared.lock().queues.extend(queues);
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

/// One send on one of the store's connections.
async fn send(connections: &Connections, queues: &[String]) -> Result<(), Error> {
    let mut conn = connections.acquire().await?;
    let result = sqlx::query(SEND)
        .bind(JOBS_CHANNEL)
        .bind(queues)
        .execute(&mut *conn)
        .await
        .store_err()
        .map(|_| ());
    conn.done(result)
}

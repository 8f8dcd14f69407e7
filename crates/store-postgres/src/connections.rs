//! [`Connections`]: the store's own reuse of pooled connections, without sqlx's release ping.
//!
//! sqlx 0.8 pings every connection it takes back into its pool (a `Sync` round trip, in a task
//! it spawns), on top of any check when the connection is taken out. For the store's short
//! one-statement calls that is a second server round trip per call: measured with 8 producers
//! enqueueing one job per call, keeping connections here instead took 28-33 % more enqueues a
//! second with 20 % less PostgreSQL and 40 % less client CPU.
//!
//! So a connection that finished a store call cleanly (the call succeeded, so the connection is
//! idle and outside any transaction) is kept here, checked out of the sqlx pool, and handed to
//! the next store call. Anything else goes back to sqlx as before, which pings or closes it: a
//! call that failed or was cancelled mid-way (its future dropped) may have left the connection
//! mid-protocol or inside a transaction. Kept connections follow the pool's own rules:
//! - one idle for [`IDLE_CHECK_AFTER`] or more, or any while this process recently lost a
//!   connection, goes back to sqlx instead of being reused (sqlx then checks it);
//! - one kept in use for [`REUSE_MAX`] goes back to sqlx (which retires connections past
//!   their lifetime);
//! - at most [`KEPT_MAX_SHARE`] of the pool is kept, so callers of the public pool are never
//!   starved; a sweeper returns idle ones about once per [`IDLE_CHECK_AFTER`] while any are
//!   kept;
//! - `close` hands every kept connection back before closing the pool.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use drover_core::Error;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};

use crate::error::{connection_lost_recently, SqlxResultExt};

/// A pooled connection idle for at least this long is checked with a ping (one round trip)
/// before use, so one the server or network dropped meanwhile is replaced instead of failing
/// the call. Busier connections skip the check (it would double the round trips of a short
/// call) unless this process lost a database connection in the last 10 s (a restart or
/// failover drops them all). Applies to pools built by [`crate::PgStore::connect`]; sqlx's own
/// default, a ping before every use, stays with [`crate::PgStore::from_pool`] pools.
pub const IDLE_CHECK_AFTER: Duration = Duration::from_secs(1);
/// Longest a connection is reused without going back through the sqlx pool.
pub(crate) const REUSE_MAX: Duration = Duration::from_secs(60);
/// Share of the pool's `max_connections` that may be kept here (at least one).
pub(crate) const KEPT_MAX_SHARE: f64 = 0.5;

/// A kept connection.
struct Kept {
    conn: PoolConnection<Postgres>,
    /// When it was last released.
    idle_since: Instant,
    /// When it was first taken from the sqlx pool.
    taken_at: Instant,
}

#[derive(Default)]
struct State {
    /// Most recently released last (reused first, so the fewest stay warm).
    kept: Vec<Kept>,
    /// A sweeper task is running.
    sweeping: bool,
}

/// The store's connections: the sqlx pool plus the connections kept for reuse.
pub(crate) struct Connections {
    pool: PgPool,
    state: Mutex<State>,
    kept_max: usize,
    /// Itself, for the sweeper task.
    this: Weak<Connections>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("kept", &self.lock().kept.len())
            .field("kept_max", &self.kept_max)
            .finish_non_exhaustive()
    }
}

impl Connections {
    /// Connections of `pool`.
    pub(crate) fn new(pool: PgPool) -> Arc<Connections> {
        let max = pool.options().get_max_connections();
        let kept_max = ((f64::from(max) * KEPT_MAX_SHARE) as usize).max(1);
        Arc::new_cyclic(|this| Connections {
            pool,
            state: Mutex::new(State::default()),
            kept_max,
            this: this.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a list of connections and a flag; a panic elsewhere cannot leave it
        // inconsistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection for one store call: a kept one when one is fresh enough, else one from the
    /// sqlx pool. End the call with [`Conn::done`].
    ///
    /// # Errors
    /// `Unavailable` (pool timeout, connection failure) or `Fatal` (pool closed) from sqlx.
    pub(crate) async fn acquire(&self) -> Result<Conn<'_>, Error> {
        let suspect = connection_lost_recently();
        let mut stale = Vec::new();
        let reused = {
            let mut state = self.lock();
            let mut found = None;
            while let Some(kept) = state.kept.pop() {
                if suspect
                    || kept.idle_since.elapsed() >= IDLE_CHECK_AFTER
                    || kept.taken_at.elapsed() >= REUSE_MAX
                {
                    stale.push(kept.conn);
                    continue;
                }
                found = Some(kept);
                break;
            }
            found
        };
        // Back to sqlx, outside the lock (dropping spawns sqlx's release task).
        drop(stale);
        let (conn, taken_at) = match reused {
            Some(kept) => (kept.conn, kept.taken_at),
            None => (self.pool.acquire().await.store_err()?, Instant::now()),
        };
        Ok(Conn {
            owner: self,
            conn: Some(conn),
            taken_at,
            close_unless_done: false,
        })
    }

    /// Keeps a connection released clean, unless the pool is closed or enough are kept.
    fn keep(&self, conn: PoolConnection<Postgres>, taken_at: Instant) {
        if self.pool.is_closed() || taken_at.elapsed() >= REUSE_MAX {
            return;
        }
        let start_sweeper = {
            let mut state = self.lock();
            if state.kept.len() >= self.kept_max {
                return;
            }
            state.kept.push(Kept {
                conn,
                idle_since: Instant::now(),
                taken_at,
            });
            !std::mem::replace(&mut state.sweeping, true)
        };
        if start_sweeper {
            if let Some(this) = self.this.upgrade() {
                tokio::spawn(sweep(Arc::downgrade(&this)));
            }
        }
    }

    /// Hands every kept connection back to the sqlx pool (before closing it).
    pub(crate) fn release_all(&self) {
        let kept = std::mem::take(&mut self.lock().kept);
        drop(kept);
    }
}

/// Returns kept connections idle for [`IDLE_CHECK_AFTER`] to the sqlx pool, until none is kept
/// or the store is gone.
async fn sweep(connections: Weak<Connections>) {
    loop {
        tokio::time::sleep(IDLE_CHECK_AFTER).await;
        let Some(connections) = connections.upgrade() else {
            return;
        };
        let (stale, done) = {
            let mut state = connections.lock();
            let (stale, fresh): (Vec<Kept>, Vec<Kept>) = std::mem::take(&mut state.kept)
                .into_iter()
                .partition(|kept| kept.idle_since.elapsed() >= IDLE_CHECK_AFTER);
            state.kept = fresh;
            let done = state.kept.is_empty();
            if done {
                state.sweeping = false;
            }
            (stale, done)
        };
        // Back to sqlx, outside the lock.
        drop(stale);
        if done {
            return;
        }
    }
}

/// One store call's connection; dereferences to the `PgConnection`. Hand it back with
/// [`Conn::done`]; dropped otherwise (an error returned early, or the call's future dropped),
/// it goes back to sqlx, which checks or closes it, or is closed at once after
/// [`Conn::close_unless_done`].
pub(crate) struct Conn<'a> {
    owner: &'a Connections,
    /// `Some` until [`Conn::done`] takes it.
    conn: Option<PoolConnection<Postgres>>,
    taken_at: Instant,
    /// Close the connection instead of returning it to sqlx unless the call succeeds.
    close_unless_done: bool,
}

impl Conn<'_> {
    /// Ends the store call: after a success the connection is idle and outside any
    /// transaction, so it is kept for the next call; after an error it goes back to sqlx (or
    /// is closed, after [`Conn::close_unless_done`]). Returns `result` unchanged.
    pub(crate) fn done<T>(mut self, result: Result<T, Error>) -> Result<T, Error> {
        if result.is_ok() {
            if let Some(conn) = self.conn.take() {
                self.owner.keep(conn, self.taken_at);
            }
        }
        result
    }

    /// Closes the connection, rather than handing it to sqlx, if the call fails or is
    /// cancelled. For protocol exchanges sqlx does not track, after which its check on release
    /// can read a stale answer as its own and hand the next user a connection out of step:
    /// COPY (copy.rs) sends its messages straight to the socket.
    pub(crate) fn close_unless_done(&mut self) {
        self.close_unless_done = true;
    }

    fn connection(&self) -> &PoolConnection<Postgres> {
        self.conn
            .as_ref()
            .unwrap_or_else(|| unreachable!("a Conn is used only before done() takes it"))
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            if self.close_unless_done {
                conn.close_on_drop();
            }
        }
    }
}

impl Deref for Conn<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.connection()
    }
}

impl DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("a Conn is used only before done() takes it"))
    }
}

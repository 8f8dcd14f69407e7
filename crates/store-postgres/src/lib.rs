//! Drover's `JobStore` on PostgreSQL (docs/design.md section 5), built on sqlx.
//!
//! - [`PgStore`]: the store. Connect with [`PgStore::connect`] and [`PgOptions`], or wrap a pool
//!   with [`PgStore::from_pool`]; [`PgStore::enqueue_in`] enqueues inside the caller's own
//!   transaction.
//! - [`migrate()`] and [`applied_versions`]: Drover's own migrator for the numbered,
//!   forward-only files in `migrations/`, everything in schema `drover` (never `public`).
//! - SQL lives in `src/sql/*.sql`, one statement per file, bound parameters only; rows decode
//!   into private records converted into `core` types.
//!
//! Time is the database's `now()` everywhere (docs/design.md section 9). Driver errors become
//! `drover_core::Error` in exactly one function. Transitions on the worker hot path (claim,
//! heartbeat, finish) are single fenced statements over `unnest` arrays pinned to core's
//! `state::apply` table by the contract suite; rarer ones (cancel, retry, rescue, reconcile)
//! run `apply` itself on locked rows.
//!
//! Round trips per call (each call also takes a pooled connection; one idle for a second or
//! more, or any connection after this process lost one, is first checked with a `Sync` ping
//! so a connection killed while idle is replaced instead of failing the call; see
//! [`IDLE_CHECK_AFTER`]). Wake-ups of the store's own enqueues are sent after the commit by a
//! notifier task, off the caller's path (notify.rs). Connections of calls that succeeded are
//! kept for the next call instead of going back through sqlx, which pings each one it takes
//! back (connections.rs):
//!
//! | operation | round trips |
//! |---|---|
//! | enqueue, one job or a batch, no keys, no quotas | 1 (concurrent one-job calls share it: combine.rs) |
//! | enqueue with quotas (the default) | 4: BEGIN, advisory locks, insert + counts, COMMIT |
//! | enqueue, batch with keys, no quotas | 3: BEGIN, insert, COMMIT |
//! | ... when a key is already held | + 1 lookup |
//! | claim (no limit policy) | 1 |
//! | claim while limit policies exist, none reached | 1 (+1 for a one-queue claim: claim_queue.sql reports the policies, then claim_fast.sql) |
//! | claim that reaches a job under a limit policy | 6+: BEGIN, policies, running counts, candidate pages, update, COMMIT |
//! | heartbeat, finish (any batch size) | 1 |
//! | ... items of jobs with dependents, a parent or live children, stale ones, wait for children | + BEGIN, lock parents, lock, write, propagation rounds (3 each), freed queues, COMMIT |
//! | enqueue with dependencies, children, a workflow graph | BEGIN, [quota locks], lock dependencies, the insert lane's, clock, settle, edges, marks, COMMIT |
//! | workflow get, workflows list, jobs get | 2, 1, 1 |
//! | workflow cancel, retry | BEGIN, workflow, lock its jobs, [edges, checks], write, propagation or edges, COMMIT |
//! | rescue, cancel, reconcile, requeue | 4: BEGIN, lock, write, COMMIT (requeue of a ready job: no write); + propagation rounds when a job ended |
//! | operator retry | 5-6: BEGIN, [tenant, quota locks], lock, checks, write, COMMIT |
//! | operator delete | 5: BEGIN, lock, relations, delete, COMMIT |
//! | bulk action (cancel, retry, delete) | per step of 500 jobs: BEGIN, read, each job's operation's own, record, COMMIT |
//! | get, list, prune, queues, workers, limits, schedules, vacuum status | 1 (limits list 2) |
//! | snapshot | 2 (counts, vacuum status) |
//! | schedule upsert | 5: BEGIN, clock, lock, write, COMMIT (4 when unchanged: no write) |
//! | schedule fire | 4 + the enqueue's |

mod admin;
mod audit;
mod claim;
mod connections;
mod enqueue;
mod error;
mod lifecycle;
mod listen;
pub mod migrate;
mod notify;
mod outcome;
mod propagate;
mod records;
mod sql;
mod store;
mod transaction;
mod workflow;

pub use enqueue::COPY_MIN_JOBS;

/// The store's statements, for the test that prepares each against the migrated schema
/// (docs/adr/0003-sql-checked-by-a-test.md); not part of the API.
#[doc(hidden)]
pub mod statements {
    pub use crate::enqueue::{copy_empty_data, copy_statements};
    pub use crate::sql::ALL;
}
pub use listen::{CANCEL_CHANNEL, EVENT_BUFFER, JOBS_CHANNEL};
pub use migrate::{
    applied_versions, migrate, migrations, AppliedMigration, Migration, Migrator, Step, StepKind,
};
pub use store::{
    connect_options, PgOptions, PgStore, ACQUIRE_TIMEOUT_DEFAULT, APPLICATION_NAME,
    IDLE_CHECK_AFTER, MAX_CONNECTIONS_DEFAULT,
};

/// Re-exported so applications can name the pool and connection types `enqueue_in` takes.
pub use sqlx::{PgConnection, PgPool};

/// The sqlx this store is built on, re-exported so applications (and tests) use the same
/// version for their own transactions around [`PgStore::enqueue_in`].
pub use sqlx;

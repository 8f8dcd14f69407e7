//! Drover's worker runtime (docs/design.md section 6): a [`Registry`] of handlers by kind, a
//! [`Worker`] that runs pools of slots claiming and executing jobs from any
//! [`drover_core::JobStore`], heartbeats that extend leases and save progress, a batched
//! completer, maintenance (rescue of expired leases, reconcile sweep, cron schedules,
//! retention, vacuum warnings) and graceful shutdown; a [`Client`], the one operator façade
//! (enqueue, inspect, cancel, retry, requeue, pause, resume, the queue view); [`Metrics`] and an
//! `on_transition` hook for observability.
//!
//! The runner never names a concrete store: it takes `Arc<dyn JobStore>`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use drover_core::{JobKind, JobStore};
//! use drover_runner::{Outcome, Registry, Worker, WorkerConfig};
//! use serde::Deserialize;
//! use tokio_util::sync::CancellationToken;
//!
//! #[derive(Deserialize)]
//! struct Email { to: String }
//!
//! async fn serve(store: Arc<dyn JobStore>) -> Result<(), drover_core::Error> {
//!     let mut registry = Registry::new();
//!     registry.register_typed(JobKind::parse("email.send")?, |ctx, email: Email| async move {
//!         ctx.step("send", "connecting");
//!         let _ = email.to;
//!         Outcome::success()
//!     });
//!     let worker = Worker::new(store, Arc::new(registry), WorkerConfig::default())?;
//!     let shutdown = CancellationToken::new();
//!     let report = worker.run(shutdown).await?;
//!     println!("{} jobs succeeded", report.succeeded);
//!     Ok(())
//! }
//! ```

mod activity;
mod args;
mod backlog;
mod client;
mod completer;
mod config;
mod context;
mod executor;
mod handler;
mod health;
mod heartbeat;
mod maintenance;
mod metrics;
mod outcome;
mod producer;
pub mod progress;
mod registry;
mod running;
mod runtime;
pub mod telemetry;
mod worker;

pub use client::{BulkPreview, Client, QueueOverview, QueueSummary};
pub use config::{
    default_worker_id, heartbeat_interval_max, PoolConfig, WorkerConfig, CANCEL_GRACE_DEFAULT,
    COMPLETER_BATCH_DEFAULT, COMPLETER_BATCH_MAX, DEAD_ROWS_WARNING_DEFAULT, DEAD_ROWS_WARNING_MIN,
    FLUSH_TIMEOUT_DEFAULT, HEARTBEATS_PER_LEASE_MIN, MAINTENANCE_START_DELAY_DEFAULT,
    MAX_CONCURRENT_MAX, POLL_INTERVAL_DEFAULT, PREFETCH_DEFAULT_MAX, PREFETCH_DEFAULT_PER_SLOT,
    PREFETCH_MAX, PREFETCH_RUN_MAX, PRUNE_INTERVAL_DEFAULT, PRUNE_LIMIT_MAX,
    RECONCILE_INTERVAL_DEFAULT, RESCUE_INTERVAL_DEFAULT, SCHEDULE_INTERVAL_DEFAULT,
    SHUTDOWN_GRACE_DEFAULT, SLOTS_DEFAULT, SLOTS_MAX, STORE_RETRY_MAX_DEFAULT,
    STORE_RETRY_MIN_DEFAULT, TRANSACTION_AGE_WARNING_DEFAULT, VACUUM_CHECK_INTERVAL,
    VACUUM_WARNING_REPEAT, WORKER_STALE_AFTER_DEFAULT,
};
pub use context::JobContext;
/// What a pause or resume did (defined in `drover_core`; re-exported where it used to live).
pub use drover_core::QueueChange;
pub use handler::Handler;
pub use metrics::{
    JobOutcome, Metrics, MetricsFanOut, NoopMetrics, TransitionEvent, TransitionHook,
};
pub use outcome::Outcome;
pub use registry::{KindConfig, Reconciler, Registry, Rollback};
pub use running::CancelReason;
pub use runtime::WorkerReport;
pub use tokio_util::sync::CancellationToken;
pub use worker::Worker;

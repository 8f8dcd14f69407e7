//! Drover: durable background jobs for Rust services, with PostgreSQL as the source of truth.
//!
//! This facade re-exports the workspace's crates; cargo features pick what is compiled in:
//! `postgres` (the production store), `memory` (the development store), `http` (the API),
//! `cli` (the `drover` command line as a library). All are on by default.
//!
//! - [`core`]: the job model, the state machine, the [`JobStore`] contract and its errors.
//! - [`runner`]: handler registry, worker pools, heartbeats, maintenance, shutdown.
//! - [`postgres`] / [`memory`]: the stores.
//! - [`http`]: the axum API.
//! - [`cli`]: run the `drover` command line around your own handlers:
//!
//! ```no_run
//! use drover::{JobKind, Outcome, Registry};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Welcome { email: String }
//!
//! fn main() -> std::process::ExitCode {
//!     let mut registry = Registry::new();
//!     registry.register_typed(
//!         JobKind::parse("welcome.send").expect("valid kind"),
//!         |_ctx, args: Welcome| async move {
//!             println!("sending to {}", args.email);
//!             Outcome::success()
//!         },
//!     );
//!     drover::cli::run(registry)
//! }
//! ```

pub use drover_core as core;
pub use drover_runner as runner;

pub use drover_core::{
    Error, Job, JobId, JobKind, JobState, JobStore, NewJob, NewWorkflow, QueueName, RunAt,
    StoreConfig, TenantId, WorkflowId,
};
pub use drover_runner::{
    Client, Handler, JobContext, Outcome, PoolConfig, Registry, Rollback, Worker, WorkerConfig,
};

/// The PostgreSQL store (feature `postgres`).
#[cfg(feature = "postgres")]
pub use drover_store_postgres as postgres;

/// The in-memory store (feature `memory`).
#[cfg(feature = "memory")]
pub use drover_store_memory as memory;

/// The HTTP API (feature `http`).
#[cfg(feature = "http")]
pub use drover_http as http;

/// OTLP export of traces and metrics (`drover-telemetry`).
#[cfg(feature = "telemetry")]
pub use drover_telemetry as telemetry;

/// The Rust examples of the front page and of the embedding guide, compiled with the doc tests
/// so that they cannot drift from the API.
#[cfg(all(doctest, feature = "cli"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;

/// See [`ReadmeExamples`].
#[cfg(all(doctest, feature = "cli"))]
#[doc = include_str!("../../../docs/embedding.md")]
pub struct EmbeddingGuideExamples;

/// The `drover` command line as a library (feature `cli`): [`cli::run`] runs every command
/// with your handlers.
#[cfg(feature = "cli")]
pub mod cli {
    pub use drover_cli::{run, run_stock, run_with, Extensions};
}

//! Drover's [`JobStore`](drover_core::JobStore) in memory: the explicit development mode
//! (nothing survives a restart; docs/design.md section 2) and the benchmark baseline.
//!
//! [`MemoryStore`] keeps every job, key, queue, worker, limit and schedule behind one mutex and
//! moves jobs only with `drover_core::apply`, so it answers every operation exactly as the
//! contract suite in `tests/` requires of every store.

mod audit;
mod index;
mod inner;
mod store;
mod workflow;

pub use store::MemoryStore;

//! Drover's store contract suite (DESIGN.md sections 4 and 8).
//!
//! Every case is one `pub async fn(&dyn StoreFactory)` in [`cases`]; [`contract_suite!`] stamps
//! one `#[tokio::test]` per case for a store, so running the whole suite against a store takes
//! a few lines (see `tests/memory.rs` and `tests/postgres.rs`). When a store behaviour changes,
//! extend this suite, not one store's tests.

pub mod cases;
pub mod harness;

pub use harness::{run_case, Harness, StoreFactory};

/// Runs every contract case against one store: `contract_suite!("memory", Some(factory))`.
/// Keep this list in step with [`cases`].
#[macro_export]
macro_rules! contract_suite {
    ($store:literal, $factory:expr) => {
        $crate::contract_cases!($store, $factory;
            enqueue_defaults,
        );
    };
}

//! The contract cases, grouped by area. Each is a `pub async fn(&dyn StoreFactory)`, re-exported
//! flat so [`crate::contract_suite!`] can name it; names start with their area.

mod enqueue;

pub use enqueue::*;

use drover_core::{JobKind, NewJob, StoreConfig};
use serde_json::Value;

/// A job of `kind` with `args` and defaults elsewhere.
pub fn job(kind: &str, args: Value) -> NewJob {
    NewJob::new(JobKind::parse(kind).expect("valid kind"), args)
}

/// The default configuration with quotas off, for cases that do not test quotas.
pub fn unbounded() -> StoreConfig {
    StoreConfig {
        quotas: drover_core::Quotas::unbounded(),
        ..StoreConfig::default()
    }
}

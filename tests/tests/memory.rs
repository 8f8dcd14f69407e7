//! The store contract suite and the runner suite run against [`MemoryStore`] on a manual clock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use drover_core::{Clock, JobId, JobStore, ManualClock, StoreConfig};
use drover_store_memory::MemoryStore;
use drover_tests::{Harness, StoreFactory};

/// Opens memory stores whose clock starts at 2030-01-01T00:00:00Z and moves only when a case
/// advances it.
struct MemoryFactory;

impl MemoryFactory {
    fn new() -> Self {
        MemoryFactory
    }
}

struct MemoryHarness {
    store: Arc<MemoryStore>,
    clock: ManualClock,
}

#[async_trait]
impl Harness for MemoryHarness {
    fn store(&self) -> Arc<dyn JobStore> {
        self.store.clone()
    }

    async fn another_store(&self) -> Arc<dyn JobStore> {
        // One process's memory is the whole store: another handle is the same store.
        self.store.clone()
    }

    async fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    async fn advance_to(&self, at: DateTime<Utc>) {
        if at > self.clock.now() {
            self.clock.set(at);
        }
    }

    async fn forget_request_hash(&self, id: JobId) {
        self.store.test_forget_request_hash(id);
    }

    fn store_name(&self) -> &'static str {
        "memory"
    }
}

#[async_trait]
impl StoreFactory for MemoryFactory {
    async fn open(&self, config: StoreConfig) -> Box<dyn Harness> {
        let start = Utc
            .with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
            .single()
            .expect("a valid instant");
        let clock = ManualClock::new(start);
        let store = Arc::new(MemoryStore::with_clock(config, Arc::new(clock.clone())));
        Box::new(MemoryHarness { store, clock })
    }

    async fn cleanup(&self) {}
}

drover_tests::contract_suite!("memory", Some(MemoryFactory::new()));
drover_tests::runner_suite!("memory", Some(MemoryFactory::new()));

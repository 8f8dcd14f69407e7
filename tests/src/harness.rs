//! The seam between the contract suite and a store: a [`StoreFactory`] opens fresh, isolated
//! stores; a [`Harness`] wraps one and offers the few test-only powers a case needs (moving the
//! store's clock, faking a legacy row).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use drover_core::{JobId, JobStore, StoreConfig};

/// One isolated store under test.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The store.
    fn store(&self) -> Arc<dyn JobStore>;

    /// A second handle on the same data with its own resources, as another worker process
    /// would have (memory: the same store; PostgreSQL: a new connection pool).
    async fn another_store(&self) -> Arc<dyn JobStore>;

    /// Moves the store's clock forward by `d` (memory: the manual clock; PostgreSQL: every
    /// stored timestamp is shifted back by `d`, which the store cannot tell from time passing).
    async fn advance(&self, d: Duration);

    /// Erases the stored request hash of a job's idempotency key, as rows written before
    /// hashes were stored look.
    async fn forget_request_hash(&self, id: JobId);

    /// `memory` or `postgres`, for messages.
    fn store_name(&self) -> &'static str;
}

/// Opens fresh stores for one test.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// A fresh, empty, isolated store with `config`.
    async fn open(&self, config: StoreConfig) -> Box<dyn Harness>;

    /// Releases what `open` created (PostgreSQL: drops the test databases).
    async fn cleanup(&self);
}

/// A boxed case future.
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Runs one case against a factory, then cleans up. With no factory (PostgreSQL without
/// `DROVER_TEST_DATABASE_URL`) the case is skipped, unless `DROVER_REQUIRE_POSTGRES` is set,
/// in which case it fails: CI must never skip a PostgreSQL test.
pub async fn run_case<F, C>(factory: Option<F>, store: &str, case: &str, run: C)
where
    F: StoreFactory,
    C: for<'a> FnOnce(&'a dyn StoreFactory) -> CaseFuture<'a>,
{
    let Some(factory) = factory else {
        if std::env::var_os("DROVER_REQUIRE_POSTGRES").is_some() {
            panic!(
                "{store} test {case} cannot run: DROVER_TEST_DATABASE_URL is not set and DROVER_REQUIRE_POSTGRES forbids skipping"
            );
        }
        eprintln!("SKIPPED {store} test {case}: set DROVER_TEST_DATABASE_URL to run it");
        return;
    };
    run(&factory).await;
    factory.cleanup().await;
}

/// Stamps one `#[tokio::test]` per named case, each running the case against a fresh factory
/// from `$factory` (an expression of type `Option<impl StoreFactory>`).
///
/// ```ignore
/// drover_tests::contract_cases!("memory", MemoryFactory::new(); enqueue_defaults, claim_order);
/// ```
#[macro_export]
macro_rules! contract_cases {
    ($store:literal, $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::harness::run_case($factory, $store, stringify!($case), |f| {
                    Box::pin($crate::cases::$case(f))
                })
                .await;
            }
        )*
    };
}

//! The seam between the contract suite and a store: a [`StoreFactory`] opens fresh, isolated
//! stores; a [`Harness`] wraps one and offers the few test-only powers a case needs (moving the
//! store's clock, faking a legacy row).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
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

    /// Lets the store's clock reach `at` without touching stored timestamps. This default
    /// is for a clock that runs by itself, as PostgreSQL's does: it waits (polling `now()`)
    /// until the clock passes `at`, so keep `at` within a few seconds of now; a manual clock
    /// (memory) overrides it and jumps to `at` at once. Unlike [`Harness::advance`], instants
    /// the store derived from its clock and keeps outside timestamp columns (a schedule tick
    /// in its job's meta and unique key) stay comparable with the clock, so cases about cron
    /// ticks move time with this.
    ///
    /// # Panics
    /// When the clock has not reached `at` 10 s after the time that was left to wait.
    async fn advance_to(&self, at: DateTime<Utc>) {
        let store = self.store();
        let start = tokio::time::Instant::now();
        let mut deadline = None;
        loop {
            let now = store.now().await.expect("the store's clock");
            if now >= at {
                return;
            }
            let left = (at - now).to_std().unwrap_or(Duration::ZERO);
            let deadline = *deadline.get_or_insert(start + left + Duration::from_secs(10));
            assert!(
                tokio::time::Instant::now() < deadline,
                "the {} clock did not reach {at}",
                self.store_name()
            );
            tokio::time::sleep(left.min(Duration::from_millis(50))).await;
        }
    }

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
        crate::postgres::skip_or_fail::<()>(
            &format!("{store} test {case}"),
            &format!("{} is not set", crate::postgres::URL_VAR),
        );
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

/// Stamps one `#[tokio::test]` per named runner case, like [`contract_cases!`] but for
/// [`crate::runner_cases`].
///
/// ```ignore
/// drover_tests::runner_cases!("memory", Some(MemoryFactory::new()); runner_jobs_run_and_succeed);
/// ```
#[macro_export]
macro_rules! runner_cases {
    ($store:literal, $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::harness::run_case($factory, $store, stringify!($case), |f| {
                    Box::pin($crate::runner_cases::$case(f))
                })
                .await;
            }
        )*
    };
}

//! The [`Handler`] trait and the adapters behind [`crate::Registry::register_fn`] and
//! [`crate::Registry::register_typed`] (docs/design.md section 6).

use std::future::Future;
use std::marker::PhantomData;

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use crate::context::JobContext;
use crate::outcome::Outcome;

/// Runs jobs of one kind.
///
/// The handler should honour `ctx.cancellation()` (it fires on cancel request, lost lease,
/// shutdown and timeout) and must tolerate running the same job more than once: delivery is
/// at-least-once. A panic is caught and recorded as a retryable failure.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs one attempt of `ctx.job()` and says how it went.
    async fn run(&self, ctx: JobContext) -> Outcome;
}

/// A handler made from a closure returning a future whose output converts into an
/// [`Outcome`] (an `Outcome` itself, or a `Result<T: Serialize, E: Display>`).
pub(crate) struct FnHandler<F> {
    f: F,
}

impl<F> FnHandler<F> {
    pub(crate) fn new(f: F) -> Self {
        FnHandler { f }
    }
}

#[async_trait]
impl<F, Fut, O> Handler for FnHandler<F>
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + Send + 'static,
    O: Into<Outcome> + Send + 'static,
{
    async fn run(&self, ctx: JobContext) -> Outcome {
        (self.f)(ctx).await.into()
    }
}

/// A handler made from a closure taking the job's args deserialized into `A`; args that do
/// not deserialize fail the job without retry, naming the problem.
pub(crate) struct TypedHandler<A, F> {
    f: F,
    args: PhantomData<fn() -> A>,
}

impl<A, F> TypedHandler<A, F> {
    pub(crate) fn new(f: F) -> Self {
        TypedHandler {
            f,
            args: PhantomData,
        }
    }
}

#[async_trait]
impl<A, F, Fut, O> Handler for TypedHandler<A, F>
where
    A: DeserializeOwned + Send + 'static,
    F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + Send + 'static,
    O: Into<Outcome> + Send + 'static,
{
    async fn run(&self, ctx: JobContext) -> Outcome {
        match ctx.args::<A>() {
            Ok(args) => (self.f)(ctx, args).await.into(),
            Err(error) => Outcome::discard(error.to_string()),
        }
    }
}

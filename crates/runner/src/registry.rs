//! [`Registry`]: handlers, per-kind settings and reconcilers by [`JobKind`] (docs/design.md
//! section 6). A worker claims only the kinds registered here, so during a rolling deploy a
//! kind that only new code knows stays queued without spending attempts.
//!
//! Rollback hooks (docs/design.md section 10): a parent kind may register a [`Rollback`].
//! Before each run of a job of that kind the runner reads the job's children; when any ended
//! `failed` or `cancelled`, it calls the hook *instead of* the handler, with the context and
//! those children, and the hook's [`Outcome`] is the run's outcome (the kind's timeout,
//! cancellation and panic rules apply to it as to a handler). So a parent that fanned out
//! never resumes its normal path over a failed fan-out: the hook compensates, then usually
//! succeeds or discards; it may also enqueue compensating children and wait for them, and is
//! then called again on the next run (the failed children are still there; it reads
//! [`JobContext::children`] to see how far it got). Kinds without a hook pay nothing: their
//! handler runs and reads its children itself.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use drover_core::{Backoff, Job, JobKind, Resolution};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::context::JobContext;
use crate::handler::{FnHandler, Handler, TypedHandler};
use crate::outcome::Outcome;

/// Settings of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct KindConfig {
    /// Delay before retrying a failed attempt when the handler gives none: exponential with
    /// jitter, capped (default 1 s doubling, at most 1 h; docs/design.md section 3).
    pub backoff: Backoff,
    /// Longest run of one attempt; when it elapses the cancellation token fires and the
    /// attempt is recorded as a retryable failure "timed out after N ms". `None` (default):
    /// no timeout.
    pub timeout: Option<Duration>,
}

impl KindConfig {
    /// Sets the retry backoff.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the timeout of one attempt.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Drives a job interrupted by a crash (its lease expired while running) toward a terminal
/// state instead of a blind re-run (docs/design.md sections 1 and 3). A kind with a registered
/// reconciler is rescued to `reconciling`; the reconcile sweep then calls
/// [`Reconciler::reconcile`] until it resolves the job.
#[async_trait]
pub trait Reconciler: Send + Sync + 'static {
    /// Decides how the interrupted work ended. `Ok(Resolution::Succeeded)` or
    /// `Ok(Resolution::Failed { message })` end the job; `Ok(Resolution::Inconclusive)` or
    /// `Err(reason)` leave it reconciling for the next sweep (the reason is logged). Should
    /// honour `cancel`, which fires when the worker shuts down.
    async fn reconcile(&self, job: &Job, cancel: CancellationToken) -> Result<Resolution, String>;
}

/// Compensates for a parent's failed fan-out (see the module documentation): called instead
/// of the handler of a job whose children include some that ended `failed` or `cancelled`.
/// Must tolerate running more than once, like a handler.
#[async_trait]
pub trait Rollback: Send + Sync + 'static {
    /// Undoes what it must for `failed` (the children that ended failed or cancelled, oldest
    /// first) and says how the parent's run ended.
    async fn rollback(&self, ctx: JobContext, failed: Vec<Job>) -> Outcome;
}

/// A rollback hook made from a closure.
struct FnRollback<F>(F);

#[async_trait]
impl<F, Fut, O> Rollback for FnRollback<F>
where
    F: Fn(JobContext, Vec<Job>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + Send + 'static,
    O: Into<Outcome> + Send + 'static,
{
    async fn rollback(&self, ctx: JobContext, failed: Vec<Job>) -> Outcome {
        (self.0)(ctx, failed).await.into()
    }
}

/// Handlers, per-kind settings and reconcilers. Build it, wrap it in an `Arc`, hand it to
/// [`crate::Worker::new`]; it is not changed afterwards.
///
/// Registering a kind twice replaces the earlier handler (or reconciler).
#[derive(Default)]
pub struct Registry {
    handlers: HashMap<JobKind, Arc<dyn Handler>>,
    configs: HashMap<JobKind, KindConfig>,
    reconcilers: HashMap<JobKind, Arc<dyn Reconciler>>,
    rollbacks: HashMap<JobKind, Arc<dyn Rollback>>,
    default_config: KindConfig,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.kinds())
            .field("reconciler_kinds", &self.reconciler_kinds())
            .field("rollback_kinds", &self.rollback_kinds())
            .field("configs", &self.configs)
            .field("default_config", &self.default_config)
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Registers `handler` for `kind`.
    pub fn register(&mut self, kind: JobKind, handler: impl Handler) -> &mut Self {
        self.handlers.insert(kind, Arc::new(handler));
        self
    }

    /// Registers an already shared handler for `kind`.
    pub fn register_arc(&mut self, kind: JobKind, handler: Arc<dyn Handler>) -> &mut Self {
        self.handlers.insert(kind, handler);
        self
    }

    /// Registers a closure for `kind`: `|ctx| async move { ... }` returning an [`Outcome`] or
    /// a `Result<T: Serialize, E: Display>` (`Ok` = success with `T` as the result, `Err` =
    /// retryable failure with the error's text).
    pub fn register_fn<F, Fut, O>(&mut self, kind: JobKind, f: F) -> &mut Self
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + Send + 'static,
        O: Into<Outcome> + Send + 'static,
    {
        self.register(kind, FnHandler::new(f))
    }

    /// Registers a closure taking the job's args deserialized into `A`:
    /// `|ctx, args: EmailArgs| async move { ... }`. Args that do not deserialize fail the job
    /// at once without retry ([`Outcome::Discard`]) with a message such as
    /// `invalid args: do not match EmailArgs: missing field `to`` or
    /// `invalid args: do not match EmailArgs: at to: invalid type: integer, expected a string`,
    /// which never quotes a value of the args ([`JobContext::args`]).
    pub fn register_typed<A, F, Fut, O>(&mut self, kind: JobKind, f: F) -> &mut Self
    where
        A: DeserializeOwned + Send + 'static,
        F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + Send + 'static,
        O: Into<Outcome> + Send + 'static,
    {
        self.register(kind, TypedHandler::<A, F>::new(f))
    }

    /// Sets the settings of `kind` (backoff, timeout); kinds without settings use the default
    /// ([`Registry::set_default_config`]).
    pub fn configure(&mut self, kind: JobKind, config: KindConfig) -> &mut Self {
        self.configs.insert(kind, config);
        self
    }

    /// Sets the settings of every kind without its own ([`KindConfig::default`] unless set).
    pub fn set_default_config(&mut self, config: KindConfig) -> &mut Self {
        self.default_config = config;
        self
    }

    /// Registers the reconciler of `kind`.
    pub fn register_reconciler(&mut self, kind: JobKind, reconciler: impl Reconciler) -> &mut Self {
        self.reconcilers.insert(kind, Arc::new(reconciler));
        self
    }

    /// Registers the rollback hook of `kind` (see the module documentation).
    pub fn register_rollback(&mut self, kind: JobKind, rollback: impl Rollback) -> &mut Self {
        self.rollbacks.insert(kind, Arc::new(rollback));
        self
    }

    /// Registers a closure as the rollback hook of `kind`: `|ctx, failed| async move { ... }`
    /// returning an [`Outcome`] or a `Result<T: Serialize, E: Display>`.
    pub fn register_rollback_fn<F, Fut, O>(&mut self, kind: JobKind, f: F) -> &mut Self
    where
        F: Fn(JobContext, Vec<Job>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + Send + 'static,
        O: Into<Outcome> + Send + 'static,
    {
        self.register_rollback(kind, FnRollback(f))
    }

    /// The rollback hook of `kind`.
    pub fn rollback(&self, kind: &JobKind) -> Option<&Arc<dyn Rollback>> {
        self.rollbacks.get(kind)
    }

    /// The kinds with a rollback hook, sorted.
    pub fn rollback_kinds(&self) -> Vec<JobKind> {
        let sorted: BTreeSet<&JobKind> = self.rollbacks.keys().collect();
        sorted.into_iter().cloned().collect()
    }

    /// The handler of `kind`.
    pub fn handler(&self, kind: &JobKind) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(kind)
    }

    /// The settings of `kind`.
    pub fn config(&self, kind: &JobKind) -> KindConfig {
        self.configs
            .get(kind)
            .copied()
            .unwrap_or(self.default_config)
    }

    /// The reconciler of `kind`.
    pub fn reconciler(&self, kind: &JobKind) -> Option<&Arc<dyn Reconciler>> {
        self.reconcilers.get(kind)
    }

    /// True when a handler is registered for `kind`.
    pub fn contains(&self, kind: &JobKind) -> bool {
        self.handlers.contains_key(kind)
    }

    /// The kinds with a handler, sorted.
    pub fn kinds(&self) -> Vec<JobKind> {
        let sorted: BTreeSet<&JobKind> = self.handlers.keys().collect();
        sorted.into_iter().cloned().collect()
    }

    /// The kinds with a reconciler, sorted.
    pub fn reconciler_kinds(&self) -> Vec<JobKind> {
        let sorted: BTreeSet<&JobKind> = self.reconcilers.keys().collect();
        sorted.into_iter().cloned().collect()
    }
}

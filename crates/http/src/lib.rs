//! Drover's HTTP API (docs/design.md section 7): the network face of the queue for
//! services that do not link the Rust library.
//!
//! Build an [`ApiState`] around any `JobStore`, turn it into an axum `Router` with [`router`],
//! and run it with [`serve`] until a cancellation token fires. The OpenAPI document is generated
//! from the route handlers themselves ([`openapi`]) and served at `/v1/openapi.json`.
//!
//! Status codes: 202 enqueue committed; 200 replay/duplicate and reads; 400 invalid input
//! naming the field, or a query parameter on a route that takes none; 401 missing/wrong
//! token; 403 role or tenant not allowed; 404 unknown (or another tenant's) job, unknown
//! queue to resume (no jobs, not paused), unknown route; 405 method not allowed; 409
//! idempotency conflict or invalid transition; 413 body too large; 415 not JSON, or declared
//! in a charset other than UTF-8; 429 quota exceeded (with `Retry-After`); 503 store
//! unavailable (`unavailable`), not ready, or schema missing (`fatal`), on every route that
//! reads the store. Every error body has the shape of [`error::ErrorBody`], and each
//! operation of the OpenAPI document lists exactly the statuses it answers (checked by the
//! HTTP tests). The exception: a request hyper refuses while reading its head, before any
//! route sees it (a malformed request line or header: 400; more than 100 headers, or a head
//! over hyper's buffer of about 400 KiB: 431; a URI over 65,534 bytes: 414), gets hyper's own
//! answer, with no body. hyper writes those answers itself and offers no hook to give them
//! one (and `axum::serve` exposes none of its settings).
//!
//! Authentication ([`auth`]): bearer tokens mapping to a tenant and a role; `/v1/ready` and
//! `/v1/openapi.json` need none; `/metrics`, whose labels and counts span every tenant, needs a
//! token of tenant `*` (open only under [`AuthMode::InsecureNoAuth`], and on the worker's
//! [`metrics_router`]). The token is checked before anything else about a request, so a
//! caller without one gets 401 whatever else is wrong with the request. Tokens are kept as
//! digests, compared in constant time, and never logged: request tracing records method,
//! path, status and latency only, and the `Authorization` header is marked sensitive.

pub mod auth;
pub mod dashboard;
pub mod dto;
pub mod error;
pub mod extract;
pub mod integer;
pub mod metrics;
pub mod reference;
pub mod routes;

use std::sync::Arc;

use axum::Router;
use drover_core::{AuditSource, JobStore};
use drover_runner::Client;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{ApiTokens, AuthMode, Principal, Role, TenantScope};
pub use error::{ApiError, QuotaRequest};
pub use metrics::ProcessMetrics;

/// Default request body limit: 1 MiB.
pub const MAX_BODY_BYTES_DEFAULT: usize = 1024 * 1024;
/// Default `Retry-After` of a 429 answer, in seconds.
pub const RETRY_AFTER_SECS_DEFAULT: u64 = 5;
/// Default bound on the store check of `GET /v1/ready`: 2 s.
pub const READY_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(2);

/// Settings of the API. Build with `ApiConfig { field: value, ..ApiConfig::default() }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiConfig {
    /// Largest accepted request body, in bytes (default 1 MiB); larger ones get 413.
    pub max_body_bytes: usize,
    /// `Retry-After` seconds sent with 429 answers (default 5).
    pub retry_after_secs: u64,
    /// How long `GET /v1/ready` waits for the store before answering 503 (default 2 s; a
    /// database that is down can otherwise hold the probe for the pool's acquire timeout).
    pub ready_timeout: std::time::Duration,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_body_bytes: MAX_BODY_BYTES_DEFAULT,
            retry_after_secs: RETRY_AFTER_SECS_DEFAULT,
            ready_timeout: READY_TIMEOUT_DEFAULT,
        }
    }
}

/// What every handler shares: the store, the operator façade over it ([`Client`], which counts
/// enqueues in the process's metrics), authentication, settings and the process's metrics.
/// Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<StateInner>,
}

struct StateInner {
    client: Client,
    auth: AuthMode,
    config: ApiConfig,
    process_metrics: Option<ProcessMetrics>,
}

impl ApiState {
    /// State over `store` with `auth` and `config`; `process_metrics` adds this process's job
    /// counters to `/metrics` (when the server runs beside a worker).
    pub fn new(
        store: Arc<dyn JobStore>,
        auth: AuthMode,
        config: ApiConfig,
        process_metrics: Option<ProcessMetrics>,
    ) -> Self {
        let mut client = Client::new(Arc::clone(&store));
        if let Some(metrics) = &process_metrics {
            client = client.with_metrics(Arc::new(metrics.clone()));
        }
        ApiState {
            inner: Arc::new(StateInner {
                client,
                auth,
                config,
                process_metrics,
            }),
        }
    }

    /// The operator façade every route that reads or changes jobs and queues goes through.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The operator façade acting as `principal` from the API: every operator write of a
    /// route goes through it, so its audit record names the caller's token and tenant.
    pub fn client_for(&self, principal: &Principal) -> Client {
        self.inner
            .client
            .clone()
            .with_actor(principal.actor(AuditSource::Api))
    }

    /// How callers authenticate.
    pub fn auth(&self) -> &AuthMode {
        &self.inner.auth
    }

    /// Largest accepted body.
    pub fn max_body_bytes(&self) -> usize {
        self.inner.config.max_body_bytes
    }

    /// Bound on the readiness check.
    pub fn ready_timeout(&self) -> std::time::Duration {
        self.inner.config.ready_timeout
    }

    /// The process's job counters, if any.
    pub fn process_metrics(&self) -> Option<&ProcessMetrics> {
        self.inner.process_metrics.as_ref()
    }

    /// Maps a store error to its answer with this API's `Retry-After`.
    pub fn error(&self, e: drover_core::Error) -> ApiError {
        if !e.is_transient()
            && !matches!(
                e,
                drover_core::Error::InvalidInput { .. } | drover_core::Error::NotFound { .. }
            )
        {
            tracing::debug!(code = e.code(), "request refused");
        }
        ApiError::from_store(e, self.inner.config.retry_after_secs)
    }

    /// [`ApiState::error`] for `principal`'s `request`: a quota refusal worded for it, and
    /// without the cluster-wide counts for a caller of one tenant
    /// ([`ApiError::from_store_for`]). Every route that can meet a quota (enqueue, batch,
    /// retry) answers with this.
    pub fn error_for(
        &self,
        principal: &Principal,
        request: error::QuotaRequest,
        e: drover_core::Error,
    ) -> ApiError {
        if !matches!(e, drover_core::Error::QuotaExceeded { .. }) {
            return self.error(e);
        }
        tracing::debug!(code = e.code(), "request refused");
        ApiError::from_store_for(
            e,
            self.inner.config.retry_after_secs,
            &principal.scope,
            request,
        )
    }
}

struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Drover API",
        description = "Durable background jobs: enqueue, inspect, cancel, retry, requeue and delete jobs, one or many, and workflows of jobs; pause queues; the audit log of operator actions; readiness and metrics. Each operation lists the statuses the API answers. Before any operation sees a request, the HTTP layer itself answers, with an empty body, 400 to a malformed request line or header, 414 to a URI over 65,534 bytes, and 431 to more than 100 headers or a request head over about 400 KiB."
    ),
    modifiers(&BearerScheme),
    tags(
        (name = "jobs", description = "Enqueue and manage jobs"),
        (name = "workflows", description = "Graphs of jobs with dependencies, enqueued, cancelled and retried as one unit"),
        (name = "queues", description = "Queues: their counts and lag, pause and resume"),
        (name = "workers", description = "The worker processes that run jobs"),
        (name = "audit", description = "The audit log of operator actions"),
        (name = "system", description = "Readiness, metrics, this document")
    )
)]
struct ApiDoc;

fn api_router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(routes::jobs::enqueue_job, routes::jobs::list_jobs))
        .routes(routes!(routes::jobs::enqueue_batch))
        .routes(routes!(routes::jobs::bulk_jobs))
        .routes(routes!(routes::jobs::get_job, routes::jobs::delete_job))
        .routes(routes!(routes::jobs::cancel_job))
        .routes(routes!(routes::jobs::retry_job))
        .routes(routes!(routes::jobs::requeue_job))
        .routes(routes!(
            routes::workflows::enqueue_workflow,
            routes::workflows::list_workflows
        ))
        .routes(routes!(routes::workflows::get_workflow))
        .routes(routes!(routes::workflows::cancel_workflow))
        .routes(routes!(routes::workflows::retry_workflow))
        .routes(routes!(routes::queues::list_queues))
        .routes(routes!(routes::queues::pause_queue))
        .routes(routes!(routes::queues::resume_queue))
        .routes(routes!(routes::queues::list_workers))
        .routes(routes!(routes::audit::list_audit))
        .routes(routes!(routes::system::ready))
        .routes(routes!(routes::system::metrics))
        .routes(routes!(routes::system::openapi_json))
}

/// The OpenAPI 3.1 document of every route [`router`] serves, generated from the handlers'
/// `#[utoipa::path]` attributes (the router is built from the same list, so the two cannot
/// drift apart).
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().split_for_parts().1
}

/// [`openapi`], built once per process (served at `/v1/openapi.json`).
pub(crate) fn openapi_cached() -> &'static utoipa::openapi::OpenApi {
    static DOC: std::sync::OnceLock<utoipa::openapi::OpenApi> = std::sync::OnceLock::new();
    DOC.get_or_init(openapi)
}

/// The API's router: every route of [`openapi`] and nothing else; the bearer token of every
/// operation that lists the bearer scheme checked before anything else about the request (an
/// unauthenticated request answers 401 whatever its query, path, body or content type); JSON
/// answers in the shape of [`error::ErrorBody`] for unknown routes (404) and methods (405); 400
/// naming the parameter for a query parameter on a route whose operation documents none (every
/// route but `GET /v1/jobs`, which refuses parameters it does not know), and 400 naming `body`
/// for a body on a route that documents none; the `Authorization`
/// header marked sensitive, so nothing that prints headers can show a token; and request
/// tracing: a span per request with method and path (never the query, headers or body), a
/// debug event when it starts and an info event with status and latency when it ends.
pub fn router(state: ApiState) -> Router {
    let (router, _) = api_router().split_for_parts();
    finish(router, state)
}

/// Adds what every router of this crate has: authentication first, the refusal of query
/// parameters and bodies on routes that take none, the error shape for unknown routes and methods, the
/// sensitive headers and request tracing (see [`router`]).
fn finish(router: Router<ApiState>, state: ApiState) -> Router {
    router
        .route_layer(axum::middleware::from_fn(extract::refuse_query_parameters))
        .route_layer(axum::middleware::from_fn(extract::refuse_body))
        // Added last, so it runs first: no check of the request comes before the token's.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            extract::require_token,
        ))
        .fallback(|| async { ApiError::no_route() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(|request: &axum::http::Request<axum::body::Body>| {
                    tracing::info_span!(
                        "http",
                        method = %request.method(),
                        path = %request.uri().path(),
                    )
                })
                .on_response(
                    tower_http::trace::DefaultOnResponse::new()
                        .level(tracing::Level::INFO)
                        .latency_unit(tower_http::LatencyUnit::Millis),
                ),
        )
        .layer(
            tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer::new([
                axum::http::header::AUTHORIZATION,
                axum::http::header::PROXY_AUTHORIZATION,
                axum::http::header::COOKIE,
            ]),
        )
        .with_state(state)
}

/// A router of `/metrics` and `/v1/ready` only, both without a token, for a worker's
/// `--metrics-listen` address (which has no token list): it serves no route that reads or
/// changes jobs, but its metrics name every tenant's queues and kinds, so bind it to an address
/// only the scraper reaches. Other paths answer 404 in the error shape.
pub fn metrics_router(store: Arc<dyn JobStore>, process_metrics: Option<ProcessMetrics>) -> Router {
    // Every caller is an operator of every tenant here, which is safe only because this
    // router serves nothing but metrics and readiness.
    let state = ApiState::new(
        store,
        AuthMode::InsecureNoAuth,
        ApiConfig::default(),
        process_metrics,
    );
    let router = Router::new()
        .route("/metrics", axum::routing::get(routes::system::metrics))
        .route("/v1/ready", axum::routing::get(routes::system::ready));
    finish(router, state)
}

/// Serves `router` on `listener` until `shutdown` fires; then stops accepting connections
/// (the listener is closed at once), lets requests already received finish, closes idle
/// connections and returns. `drover serve` cancels the same token for its worker, so the
/// server and the worker stop together and the store is closed after both.
///
/// # Errors
/// The listener's I/O error.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

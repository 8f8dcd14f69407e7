//! Routes for probes, scrapers and tools: readiness and the OpenAPI document (no token; they
//! reveal nothing about jobs), and metrics (a token of tenant `*` when tokens are configured:
//! their labels and counts span every tenant).

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::auth::Principal;
use crate::dto::ReadyResponse;
use crate::error::{ApiError, ErrorBody};
use crate::ApiState;

/// Readiness: whether the store answers and its schema is migrated.
///
/// 200 only when the store answers and its schema is migrated; otherwise 503 with the reason
/// (`drover migrate` not run, store unreachable, or no answer within the ready timeout, 2 s by
/// default, so a probe gets an answer before its own timeout).
#[utoipa::path(
    get,
    path = "/v1/ready",
    tag = "system",
    responses(
        (status = 200, description = "Ready", body = ReadyResponse),
        (status = 400, description = "A query parameter (this route takes none)", body = ErrorBody),
        (status = 503, description = "Not ready, with the reason: store unavailable or too slow (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    )
)]
pub async fn ready(State(state): State<ApiState>) -> Result<Json<ReadyResponse>, ApiError> {
    let timeout = state.ready_timeout();
    let checked = tokio::time::timeout(timeout, state.client().check_ready()).await;
    match checked {
        Ok(Ok(())) => Ok(Json(ReadyResponse {
            status: "ready".to_owned(),
        })),
        Ok(Err(e)) => {
            let mut answer = ApiError::from_store(e, 1);
            if answer.status() != axum::http::StatusCode::SERVICE_UNAVAILABLE {
                answer = answer.into_unavailable();
            }
            Err(answer)
        }
        Err(_) => Err(ApiError::from_store(
            drover_core::Error::unavailable(format!(
                "the store did not answer within {} ms",
                timeout.as_millis()
            )),
            1,
        )),
    }
}

/// Prometheus metrics (OpenMetrics text).
///
/// Queue gauges from the store, plus this process's job counters when it runs jobs. Queues and
/// kinds callers made up have no series of their own: they are counted under `queue="(other)"`
/// and `kind="(other)"`.
///
/// Tokens of tenant `*` only: the labels name every tenant's queues and kinds and the values
/// count every tenant's jobs (Prometheus sends the token with `authorization` or
/// `bearer_token_file`). A server started with `--insecure-no-auth` serves them to anyone.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "system",
    responses(
        (status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String),
        (status = 400, description = "A query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "A token of one tenant (the metrics span every tenant)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn metrics(
    State(state): State<ApiState>,
    principal: Principal,
) -> Result<Response, ApiError> {
    principal.require_all_tenants("the metrics count the jobs of every tenant")?;
    let text = crate::metrics::scrape(state.client(), state.process_metrics())
        .await
        .map_err(|e| state.error(e))?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}

/// This OpenAPI document.
///
/// Generated from the route handlers.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "system",
    responses(
        (status = 200, description = "OpenAPI 3.1 document (JSON)", content_type = "application/json", body = Object),
        (status = 400, description = "A query parameter (this route takes none)", body = ErrorBody),
    )
)]
pub async fn openapi_json() -> Json<&'static utoipa::openapi::OpenApi> {
    Json(crate::openapi_cached())
}

//! `/v1/queues` and `/v1/workers` routes.

use axum::extract::State;
use axum::Json;
use drover_core::QueueName;

use crate::auth::{Principal, Role, TenantScope};
use crate::dto::{QueueListResponse, QueueStateResponse, QueueView, WorkerListResponse};
use crate::error::{ApiError, ErrorBody};
use crate::extract::PathParam;
use crate::ApiState;

/// List the queues with their counts and lag.
///
/// Every queue with its pause state, counts per state, ready jobs, running jobs (handler
/// started) and jobs claimed ahead (waiting in a worker's backlog for a slot), and lag, and
/// what keeps the database from cleaning the jobs table (`vacuum`).
///
/// Tokens of tenant `*` only: the counts span every tenant.
#[utoipa::path(
    get,
    path = "/v1/queues",
    tag = "queues",
    responses(
        (status = 200, description = "Queues by name", body = QueueListResponse),
        (status = 400, description = "A query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "A token of one tenant (the counts span every tenant)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_queues(
    State(state): State<ApiState>,
    principal: Principal,
) -> Result<Json<QueueListResponse>, ApiError> {
    principal.require_all_tenants("the queue list counts the jobs of every tenant")?;
    let overview = state
        .client()
        .queue_overview()
        .await
        .map_err(|e| state.error(e))?;
    Ok(Json(QueueListResponse {
        queues: overview.queues.iter().map(QueueView::from).collect(),
        vacuum: overview.vacuum.as_ref().map(Into::into),
    }))
}

fn queue_name(state: &ApiState, name: &str) -> Result<QueueName, ApiError> {
    QueueName::parse(name).map_err(|e| state.error(e))
}

/// Queues are shared by every tenant, so pausing or resuming one needs an operator of every
/// tenant (tenant `*`): a tenant-scoped operator could otherwise stop other tenants' work.
fn require_cluster_operator(principal: &Principal, action: &str) -> Result<(), ApiError> {
    if principal.role != Role::Operator {
        return Err(ApiError::forbidden(format!(
            "{action} needs the operator role"
        )));
    }
    if principal.scope != TenantScope::All {
        return Err(ApiError::forbidden(format!(
            "{action} affects every tenant: it needs an operator token for tenant *"
        )));
    }
    Ok(())
}

/// Pause a queue cluster-wide.
///
/// No worker claims from it; running jobs finish. A queue may be paused before its first job.
/// Pausing a paused queue changes nothing (`changed` false; it keeps its first `paused_at`).
///
/// Operators of tenant `*` only: the queue is shared by every tenant.
#[utoipa::path(
    post,
    path = "/v1/queues/{name}/pause",
    tag = "queues",
    params(("name" = String, Path, description = "Queue name, 1-64 of `A-Z a-z 0-9 _ . : -`")),
    responses(
        (status = 200, description = "Paused (changed true), or already paused (changed false)", body = QueueStateResponse),
        (status = 400, description = "Bad queue name, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Operator of every tenant required", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn pause_queue(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> Result<Json<QueueStateResponse>, ApiError> {
    require_cluster_operator(&principal, "pausing a queue")?;
    let queue = queue_name(&state, &name)?;
    let change = state
        .client_for(&principal)
        .queue_pause(queue)
        .await
        .map_err(|e| state.error(e))?;
    Ok(Json(change.into()))
}

/// Resume a paused queue.
///
/// A queue that is not paused changes nothing (`changed` false); a queue with no jobs that is
/// not paused is unknown (404), as `drover queues resume` refuses it: a typo must not look like
/// a resume.
///
/// Operators of tenant `*` only: the queue is shared by every tenant.
#[utoipa::path(
    post,
    path = "/v1/queues/{name}/resume",
    tag = "queues",
    params(("name" = String, Path, description = "Queue name, 1-64 of `A-Z a-z 0-9 _ . : -`")),
    responses(
        (status = 200, description = "Resumed (changed true), or not paused (changed false)", body = QueueStateResponse),
        (status = 400, description = "Bad queue name, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Operator of every tenant required", body = ErrorBody),
        (status = 404, description = "No such queue: it has no jobs and is not paused", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn resume_queue(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(name): PathParam,
) -> Result<Json<QueueStateResponse>, ApiError> {
    require_cluster_operator(&principal, "resuming a queue")?;
    let queue = queue_name(&state, &name)?;
    let change = state
        .client_for(&principal)
        .queue_resume(queue.clone())
        .await
        .map_err(|e| match e {
            drover_core::Error::NotFound { .. } => ApiError::queue_not_found(&queue),
            other => state.error(other),
        })?;
    Ok(Json(change.into()))
}

/// List the registered worker processes.
///
/// Tokens of tenant `*` only: workers serve every tenant.
#[utoipa::path(
    get,
    path = "/v1/workers",
    tag = "workers",
    responses(
        (status = 200, description = "Workers by id", body = WorkerListResponse),
        (status = 400, description = "A query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "A token of one tenant (workers serve every tenant)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_workers(
    State(state): State<ApiState>,
    principal: Principal,
) -> Result<Json<WorkerListResponse>, ApiError> {
    principal.require_all_tenants("the worker list shows workers of every tenant")?;
    let workers = state.client().workers().await.map_err(|e| state.error(e))?;
    Ok(Json(WorkerListResponse {
        workers: workers.into_iter().map(Into::into).collect(),
    }))
}

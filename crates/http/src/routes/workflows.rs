//! `/v1/workflows` routes (docs/design.md section 10): enqueue a graph of jobs as one unit,
//! list workflows, get one with its jobs and edges, cancel or retry one as a whole. Tenant
//! isolation as for jobs: another tenant's workflow answers 404 like a missing one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use drover_core::{EnqueueStatus, ListWorkflows, TenantId, Workflow, WorkflowId};

use crate::auth::{Principal, Role, TenantScope};
use crate::dto::{
    EnqueueResponse, WorkflowChangeResponse, WorkflowEnqueueResponse, WorkflowListResponse,
    WorkflowRequest, WorkflowResponse,
};
use crate::error::{ApiError, ErrorBody, QuotaRequest};
use crate::extract::{JsonBody, PathParam, QueryParams};
use crate::ApiState;

/// Fetches a workflow the caller may see; another tenant's answers 404 like a missing one.
async fn visible_workflow(
    state: &ApiState,
    principal: &Principal,
    id: &str,
) -> Result<Workflow, ApiError> {
    let id: WorkflowId = id.parse().map_err(|e| state.error(e))?;
    let workflow = match state.client().workflow(id).await {
        Ok(workflow) => workflow,
        Err(drover_core::Error::NotFound { .. }) => return Err(ApiError::workflow_not_found(id)),
        Err(e) => return Err(state.error(e)),
    };
    if !principal.scope.allows(&workflow.tenant) {
        return Err(ApiError::workflow_not_found(id));
    }
    Ok(workflow)
}

/// Enqueue a workflow: jobs with dependencies, as one unit.
///
/// The jobs are stored all or nothing under one new workflow id. Each job is an object like
/// `POST /v1/jobs` takes, plus a `name` unique in the workflow; its `depends_on` names jobs of
/// the workflow (or gives ids of stored jobs of the tenant). A job waits (`waiting`, without a
/// slot) until its dependencies are terminal, and is cancelled when one fails or is cancelled
/// unless it has `run_regardless`. The graph is checked first: a cycle, a dangling or repeated
/// name, or jobs of two tenants answer 400 naming the field. 202 when a job was created, else
/// 200.
///
/// Any token, as for `POST /v1/jobs`.
#[utoipa::path(
    post,
    path = "/v1/workflows",
    tag = "workflows",
    request_body = WorkflowRequest,
    responses(
        (status = 202, description = "Enqueued and committed", body = WorkflowEnqueueResponse),
        (status = 200, description = "Every job was a replay or duplicate", body = WorkflowEnqueueResponse),
        (status = 400, description = "Invalid input (field jobs or jobs[i].name, jobs[i].depends_on, ...): a cycle, a dangling or repeated name, an invalid job; or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not allowed for this token (field jobs[i].tenant or jobs[i].kind)", body = ErrorBody),
        (status = 409, description = "An idempotency key was used with a different request", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Body not declared as UTF-8 JSON (Content-Type: application/json, charset utf-8 if any)", body = ErrorBody),
        (status = 429, description = "Quota exceeded (with Retry-After)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn enqueue_workflow(
    State(state): State<ApiState>,
    principal: Principal,
    headers: axum::http::HeaderMap,
    JsonBody(request): JsonBody<WorkflowRequest>,
) -> Result<Response, ApiError> {
    let sizes = state.client().config().sizes;
    let mut workflow = request.into_new_workflow(&principal, &sizes)?;
    if let Some(context) = super::jobs::trace_headers(&headers) {
        for job in &mut workflow.jobs {
            job.job.trace_context = Some(context.clone());
        }
    }
    let answer = state
        .client()
        .enqueue_workflow(workflow)
        .await
        .map_err(|e| state.error_for(&principal, QuotaRequest::Enqueue, e))?;
    let created = answer
        .jobs
        .iter()
        .any(|a| a.status == EnqueueStatus::Created);
    let status = if created {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let body = WorkflowEnqueueResponse {
        id: answer.id.to_string(),
        jobs: answer.jobs.into_iter().map(EnqueueResponse::from).collect(),
    };
    Ok((status, Json(body)).into_response())
}

const LIST_PARAMS: [&str; 3] = ["tenant", "limit", "cursor"];

/// List workflows, newest first.
///
/// Each with its overall state and its jobs' counts per state; `cursor` is the previous page's
/// `next_cursor`.
///
/// Any token. A token of one tenant sees only its tenant's workflows; naming another `tenant`
/// answers 403.
#[utoipa::path(
    get,
    path = "/v1/workflows",
    tag = "workflows",
    params(
        ("tenant" = Option<String>, Query, description = "Only this tenant (all-tenant operators)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Page size, an integer 1..=1000 (default 50)"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of workflows", body = WorkflowListResponse),
        (status = 400, description = "Invalid or unknown parameter (the parameter is named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Another tenant", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_workflows(
    State(state): State<ApiState>,
    principal: Principal,
    params: QueryParams,
) -> Result<Json<WorkflowListResponse>, ApiError> {
    if let Some(unknown) = params.names().find(|k| !LIST_PARAMS.contains(k)) {
        return Err(ApiError::invalid(
            unknown.to_owned(),
            format!("unknown parameter; use one of {}", LIST_PARAMS.join(", ")),
        ));
    }
    let requested = params
        .get("tenant")
        .map(TenantId::parse)
        .transpose()
        .map_err(|e| state.error(e))?;
    let tenant = match (&principal.scope, requested) {
        (TenantScope::All, t) => t,
        (TenantScope::One(own), None) => Some(own.clone()),
        (TenantScope::One(own), Some(t)) if &t == own => Some(t),
        (TenantScope::One(_), Some(_)) => {
            return Err(ApiError::forbidden_field(
                "tenant",
                "this token may only list its own tenant's workflows",
            ))
        }
    };
    let mut query = ListWorkflows {
        tenant,
        ..ListWorkflows::default()
    };
    if let Some(l) = params.get("limit") {
        let max = i64::from(drover_core::store::LIST_LIMIT_MAX);
        let limit =
            crate::integer::within(l, 1, max).map_err(|rule| ApiError::invalid("limit", rule))?;
        query.limit = u32::try_from(limit).unwrap_or(drover_core::store::LIST_LIMIT_MAX);
    }
    if let Some(c) = params.get("cursor") {
        query.before = Some(c.parse::<WorkflowId>().map_err(|_| {
            ApiError::invalid("cursor", "must be the next_cursor of a previous page")
        })?);
    }
    let page = state
        .client()
        .workflows(query)
        .await
        .map_err(|e| state.error(e))?;
    Ok(Json(WorkflowListResponse {
        workflows: page.workflows.into_iter().map(Into::into).collect(),
        next_cursor: page.next.map(|id| id.to_string()),
    }))
}

/// Get a workflow with its jobs and dependency edges.
///
/// Its jobs (children included, without their large fields) and its dependency edges by name.
///
/// Any token. Another tenant's workflow answers 404, like a missing one.
#[utoipa::path(
    get,
    path = "/v1/workflows/{id}",
    tag = "workflows",
    params(("id" = String, Path, description = "Workflow id: a UUID")),
    responses(
        (status = 200, description = "The workflow", body = WorkflowResponse),
        (status = 400, description = "Malformed id, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such workflow for this tenant", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_workflow(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> Result<Json<WorkflowResponse>, ApiError> {
    let workflow = visible_workflow(&state, &principal, &id).await?;
    Ok(Json(WorkflowResponse {
        workflow: workflow.into(),
    }))
}

/// Cancel a workflow.
///
/// Every job not terminal, as a cancel of each (waiting and queued jobs end cancelled, running
/// ones are asked to stop), in one step. `jobs` counts those it reached.
///
/// Any token. Another tenant's workflow answers 404, like a missing one.
#[utoipa::path(
    post,
    path = "/v1/workflows/{id}/cancel",
    tag = "workflows",
    params(("id" = String, Path, description = "Workflow id: a UUID")),
    responses(
        (status = 200, description = "Cancelled (jobs: how many it reached, 0 when all were terminal)", body = WorkflowChangeResponse),
        (status = 400, description = "Malformed id, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such workflow for this tenant", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_workflow(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> Result<Json<WorkflowChangeResponse>, ApiError> {
    let workflow = visible_workflow(&state, &principal, &id).await?;
    let change = state
        .client_for(&principal)
        .cancel_workflow(workflow.id)
        .await
        .map_err(|e| state.error(e))?;
    Ok(Json(change.into()))
}

/// Retry a workflow's failed and cancelled jobs.
///
/// Every failed or cancelled job runs again, waiting again for those of its dependencies that
/// run again; quotas are checked again. `jobs` counts those retried.
///
/// Operators only (403 for another role). Another tenant's workflow answers 404.
#[utoipa::path(
    post,
    path = "/v1/workflows/{id}/retry",
    tag = "workflows",
    params(("id" = String, Path, description = "Workflow id: a UUID")),
    responses(
        (status = 200, description = "Retried (jobs: how many run again, 0 when none failed)", body = WorkflowChangeResponse),
        (status = 400, description = "Malformed id, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Operator role required", body = ErrorBody),
        (status = 404, description = "No such workflow for this tenant", body = ErrorBody),
        (status = 409, description = "A retried job's unique key is taken by a live job", body = ErrorBody),
        (status = 429, description = "Quota exceeded (with Retry-After)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn retry_workflow(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> Result<Json<WorkflowChangeResponse>, ApiError> {
    if principal.role != Role::Operator {
        return Err(ApiError::forbidden("retry needs the operator role"));
    }
    let workflow = visible_workflow(&state, &principal, &id).await?;
    let change = state
        .client_for(&principal)
        .retry_workflow(workflow.id)
        .await
        .map_err(|e| state.error_for(&principal, QuotaRequest::Retry, e))?;
    Ok(Json(change.into()))
}

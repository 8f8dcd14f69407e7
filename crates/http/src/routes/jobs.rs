//! `/v1/jobs` routes: enqueue (single and batch), list, get, delete, cancel, retry, requeue,
//! and the bulk actions.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use drover_core::{
    BulkAction, BulkJobs, EnqueueStatus, Job, JobDetails, JobId, JobKind, JobState, ListJobs,
    QueueName, TenantId, TraceContext,
};

use crate::auth::{Principal, Role, TenantScope};
use crate::dto::{
    BatchEnqueueRequest, BatchEnqueueResponse, BulkFilter, BulkRequest, BulkResponse,
    CancelResponse, EnqueueRequest, EnqueueResponse, JobListItem, JobListResponse, JobResponse,
    RequeueResponse, BATCH_MAX,
};
use crate::error::{ApiError, ErrorBody, QuotaRequest};
use crate::extract::{JsonBody, PathParam, QueryParams};
use crate::ApiState;

/// The `Idempotency-Key` header's value, if any.
fn idempotency_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    if headers.get_all("idempotency-key").iter().count() > 1 {
        return Err(ApiError::invalid(
            "idempotency_key",
            "the Idempotency-Key header is given more than once; send one key",
        ));
    }
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => v.to_str().map(|s| Some(s.to_owned())).map_err(|_| {
            ApiError::invalid(
                "idempotency_key",
                "the Idempotency-Key header must be visible ASCII",
            )
        }),
    }
}

/// The W3C trace context of the `traceparent` and `tracestate` headers, stored with the jobs
/// the request enqueues (docs/opentelemetry.md). As the W3C Trace Context specification asks
/// of a receiver, a malformed or repeated `traceparent` is ignored (the jobs start a trace of
/// their own) and a malformed `tracestate` is dropped: tracing headers never fail a request.
pub(crate) fn trace_headers(headers: &HeaderMap) -> Option<TraceContext> {
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok().map(str::trim),
            _ => None,
        }
    };
    let traceparent = one("traceparent")?;
    TraceContext::new(traceparent, one("tracestate").map(str::to_owned))
        .or_else(|_| TraceContext::new(traceparent, None))
        .ok()
}

/// Fetches a job the caller may see; another tenant's job answers 404 like a missing one.
/// `id` is a UUID in any form RFC 9562 and common tools write (hyphenated or not, any case,
/// `urn:uuid:` or `{...}`): every form names the same job, and answers show the canonical
/// one (hyphenated lowercase).
async fn visible_job(state: &ApiState, principal: &Principal, id: &str) -> Result<Job, ApiError> {
    let job_id: JobId = id.parse().map_err(|e| state.error(e))?;
    let job = match state.client().get(job_id).await {
        Ok(job) => job,
        Err(drover_core::Error::NotFound { .. }) => return Err(ApiError::job_not_found(job_id)),
        Err(e) => return Err(state.error(e)),
    };
    if !principal.scope.allows(&job.tenant) {
        return Err(ApiError::job_not_found(job_id));
    }
    Ok(job)
}

/// Enqueue one job.
///
/// 202 once committed; 200 for an idempotent replay (the stored job in its current state) or a
/// unique-key duplicate; 409 when the `Idempotency-Key` was used with a different request (or
/// stored without a request hash); 429 over a quota.
///
/// Any token. A token of one tenant enqueues for its own tenant only (another `tenant` answers
/// 403), and only operators may enqueue the `exec` kind.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    request_body = EnqueueRequest,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Replay key: the same key with the same request returns the stored job"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context the job's attempts descend from (ignored when malformed)"),
        ("tracestate" = Option<String>, Header, description = "W3C vendor trace state, kept with traceparent"),
    ),
    responses(
        (status = 202, description = "Enqueued and committed", body = EnqueueResponse),
        (status = 200, description = "Replay of an earlier request, or duplicate unique key", body = EnqueueResponse),
        (status = 400, description = "Invalid input (the field is named), or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not allowed for this token (field tenant or kind)", body = ErrorBody),
        (status = 409, description = "Idempotency key used with a different request", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Body not declared as UTF-8 JSON (Content-Type: application/json, charset utf-8 if any)", body = ErrorBody),
        (status = 429, description = "Quota exceeded (with Retry-After)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn enqueue_job(
    State(state): State<ApiState>,
    principal: Principal,
    headers: HeaderMap,
    JsonBody(request): JsonBody<EnqueueRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_header(&headers)?;
    let sizes = state.client().config().sizes;
    let mut job = request.into_valid_job(&principal, key, &sizes)?;
    job.trace_context = trace_headers(&headers);
    let answer = state
        .client()
        .enqueue(job)
        .await
        .map_err(|e| state.error_for(&principal, QuotaRequest::Enqueue, e))?;
    let status = match answer.status {
        EnqueueStatus::Created => StatusCode::ACCEPTED,
        EnqueueStatus::Replayed | EnqueueStatus::Duplicate => StatusCode::OK,
    };
    Ok((status, Json(EnqueueResponse::from(answer))).into_response())
}

/// Enqueue many jobs atomically (all or nothing).
///
/// 1 to 10,000 jobs, each an object like `POST /v1/jobs` takes. Each may carry its own
/// `idempotency_key`; the `Idempotency-Key` header is refused here. 202 when at least one job
/// was created, else 200.
///
/// Any token, as for `POST /v1/jobs`.
#[utoipa::path(
    post,
    path = "/v1/jobs/batch",
    tag = "jobs",
    request_body = BatchEnqueueRequest,
    responses(
        (status = 202, description = "Enqueued and committed", body = BatchEnqueueResponse),
        (status = 200, description = "Every job was a replay or duplicate", body = BatchEnqueueResponse),
        (status = 400, description = "Invalid input (field jobs[i].name), an Idempotency-Key header, or a query parameter (this route takes none)", body = ErrorBody),
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
pub async fn enqueue_batch(
    State(state): State<ApiState>,
    principal: Principal,
    headers: HeaderMap,
    JsonBody(request): JsonBody<BatchEnqueueRequest>,
) -> Result<Response, ApiError> {
    if headers.contains_key("idempotency-key") {
        return Err(ApiError::invalid(
            "idempotency_key",
            "a batch takes no Idempotency-Key header; give each job its own idempotency_key",
        ));
    }
    if request.jobs.is_empty() || request.jobs.len() > BATCH_MAX {
        return Err(ApiError::invalid(
            "jobs",
            format!(
                "must hold 1 to {BATCH_MAX} jobs, got {}",
                request.jobs.len()
            ),
        ));
    }
    let sizes = state.client().config().sizes;
    let trace_context = trace_headers(&headers);
    let jobs = request
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            item.into_valid_job(&principal, None, &sizes)
                .map(|mut job| {
                    job.trace_context.clone_from(&trace_context);
                    job
                })
                .map_err(|e| e.in_field(&format!("jobs[{i}]")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let answers = state
        .client()
        .enqueue_many(jobs)
        .await
        .map_err(|e| state.error_for(&principal, QuotaRequest::Enqueue, e))?;
    let created = answers.iter().any(|a| a.status == EnqueueStatus::Created);
    let status = if created {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let body = BatchEnqueueResponse {
        results: answers.into_iter().map(EnqueueResponse::from).collect(),
    };
    Ok((status, Json(body)).into_response())
}

const LIST_PARAMS: [&str; 11] = [
    "queue", "state", "kind", "tenant", "meta", "args", "workflow", "parent", "limit", "cursor",
    "include",
];

/// List jobs, newest first.
///
/// Summaries: without `args`, `result`, `errors` and `progress` unless `include` names them
/// (`GET /v1/jobs/{id}` shows the whole job). Filters combine with AND; `meta` and `args` are
/// JSON objects matched by containment; `workflow` and `parent` select a workflow's jobs or a
/// job's children; `cursor` is the previous page's `next_cursor`. An `args` search reads at
/// most 10,000 of the jobs the other filters select per request, so a page may hold fewer
/// jobs than `limit`, even none, with a `next_cursor` that searches on.
///
/// Any token. A token of one tenant sees only its tenant's jobs; naming another `tenant`
/// answers 403.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    params(
        ("queue" = Option<String>, Query, description = "Only this queue"),
        ("state" = Option<String>, Query, description = "Only jobs in this state: waiting (for dependencies or children), queued, running (leased: its handler started, or claimed ahead and waiting for a slot, see `waiting_for_slot`), reconciling, succeeded, failed or cancelled"),
        ("kind" = Option<String>, Query, description = "Only this kind"),
        ("tenant" = Option<String>, Query, description = "Only this tenant (all-tenant operators)"),
        ("meta" = Option<String>, Query, description = "JSON object the job's meta must contain"),
        ("args" = Option<String>, Query, description = "JSON object the job's args must contain (reads at most 10,000 jobs per request)"),
        ("workflow" = Option<String>, Query, description = "Only jobs of this workflow (its id)"),
        ("parent" = Option<String>, Query, description = "Only children of this job (its id)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Page size, an integer 1..=1000 (default 50)"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
        ("include" = Option<String>, Query, description = "The large fields each job carries, comma-separated: args, result, errors, progress, or all (default: none, summaries)"),
    ),
    responses(
        (status = 200, description = "A page of jobs", body = JobListResponse),
        (status = 400, description = "Invalid or unknown filter (the parameter is named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Another tenant", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_jobs(
    State(state): State<ApiState>,
    principal: Principal,
    params: QueryParams,
) -> Result<Json<JobListResponse>, ApiError> {
    // The first unknown parameter in request order, so the answer names the same one every
    // time.
    if let Some(unknown) = params.names().find(|k| !LIST_PARAMS.contains(k)) {
        return Err(ApiError::invalid(
            unknown.to_owned(),
            format!("unknown filter; use one of {}", LIST_PARAMS.join(", ")),
        ));
    }
    let store_err = |e| state.error(e);
    let mut query = ListJobs {
        details: JobDetails::NONE,
        ..ListJobs::default()
    };
    if let Some(q) = params.get("queue") {
        query.queue = Some(QueueName::parse(q).map_err(store_err)?);
    }
    if let Some(s) = params.get("state") {
        query.state = Some(s.parse::<JobState>().map_err(store_err)?);
    }
    if let Some(k) = params.get("kind") {
        query.kind = Some(JobKind::parse(k).map_err(store_err)?);
    }
    let requested_tenant = params
        .get("tenant")
        .map(TenantId::parse)
        .transpose()
        .map_err(store_err)?;
    query.tenant = match (&principal.scope, requested_tenant) {
        (TenantScope::All, t) => t,
        (TenantScope::One(own), None) => Some(own.clone()),
        (TenantScope::One(own), Some(t)) if &t == own => Some(t),
        (TenantScope::One(_), Some(_)) => {
            return Err(ApiError::forbidden_field(
                "tenant",
                "this token may only list its own tenant's jobs",
            ))
        }
    };
    for field in ["meta", "args"] {
        let Some(m) = params.get(field) else { continue };
        let value: serde_json::Value = serde_json::from_str(m).map_err(|e| {
            if let Some(fault) = crate::extract::string_fault(&e, m) {
                return ApiError::invalid(field, fault);
            }
            ApiError::invalid(
                field,
                format!(
                    "is not valid JSON ({}); give a JSON object, e.g. {{\"customer\":\"acme\"}}",
                    crate::extract::serde_reason(&e)
                ),
            )
        })?;
        drover_core::json::check_integer_literals(m, field).map_err(|e| state.error(e))?;
        match field {
            "meta" => query.meta = Some(value),
            _ => query.args = Some(value),
        }
    }
    if let Some(w) = params.get("workflow") {
        query.workflow = Some(w.parse::<drover_core::WorkflowId>().map_err(store_err)?);
    }
    if let Some(p) = params.get("parent") {
        query.parent = Some(
            p.parse::<JobId>()
                .map_err(|_| ApiError::invalid("parent", "must be a job id (a UUID)"))?,
        );
    }
    if let Some(l) = params.get("limit") {
        let max = i64::from(drover_core::store::LIST_LIMIT_MAX);
        let limit =
            crate::integer::within(l, 1, max).map_err(|rule| ApiError::invalid("limit", rule))?;
        query.limit = u32::try_from(limit).unwrap_or(drover_core::store::LIST_LIMIT_MAX);
    }
    if let Some(c) = params.get("cursor") {
        query.before = Some(c.parse::<JobId>().map_err(|_| {
            ApiError::invalid("cursor", "must be the next_cursor of a previous page")
        })?);
    }
    if let Some(include) = params.get("include") {
        query.details = JobDetails::parse_list("include", include).map_err(store_err)?;
    }
    let details = query.details;
    let page = state.client().list(query).await.map_err(store_err)?;
    Ok(Json(JobListResponse {
        jobs: page
            .jobs
            .into_iter()
            .map(|job| JobListItem::new(job, details))
            .collect(),
        next_cursor: page.next.map(|id| id.to_string()),
    }))
}

/// Get one job, whole.
///
/// Any token. Another tenant's job answers 404, like a missing one.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id: a UUID, hyphenated or not, any case, or as urn:uuid:... or {...}; answers show it hyphenated lowercase")),
    responses(
        (status = 200, description = "The job", body = JobResponse),
        (status = 400, description = "Malformed id, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such job for this tenant", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_job(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> Result<Json<JobResponse>, ApiError> {
    let job = visible_job(&state, &principal, &id).await?;
    Ok(Json(JobResponse { job: job.into() }))
}

/// Cancel, retry or delete many jobs, or count them first.
///
/// `action` (`cancel`, `retry` or `delete`) on the jobs `ids` (1 to 1,000) or on every job
/// `filter` matches (the filters of `GET /v1/jobs`): exactly one of the two. Each job goes
/// through its own operation, as `POST /v1/jobs/{id}/cancel`, `/retry` or `DELETE
/// /v1/jobs/{id}` would, 500 jobs a step (50 for a retry, so that the global quota lock a
/// retry step may hold never blocks enqueues for long); a job the action does not apply to
/// (a retry of a running job, a delete of a job a live job needs) is `skipped`, an id of no
/// job of the token's tenant `not_found`. One audit record (`jobs.cancel`, `jobs.retry`, `jobs.delete`)
/// names the ids or the filter and counts the jobs changed. With `preview`, nothing changes:
/// the answer says how many jobs match (`matched`, counting stops at 10,000 with `more`).
///
/// Any token may preview and cancel; retry and delete need the operator role (403). A token
/// of one tenant acts on its tenant's jobs only: a filter naming another tenant answers 403.
#[utoipa::path(
    post,
    path = "/v1/jobs/bulk",
    tag = "jobs",
    request_body = BulkRequest,
    responses(
        (status = 200, description = "Done, or counted (preview)", body = BulkResponse),
        (status = 400, description = "Invalid input (the field is named: action, ids, ids[i], filter.<field>), or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Operator role required (retry, delete), or another tenant (field filter.tenant)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Body not declared as UTF-8 JSON (Content-Type: application/json, charset utf-8 if any)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn bulk_jobs(
    State(state): State<ApiState>,
    principal: Principal,
    JsonBody(request): JsonBody<BulkRequest>,
) -> Result<Json<BulkResponse>, ApiError> {
    let store_err = |e| state.error(e);
    let action: BulkAction = request.action.parse().map_err(store_err)?;
    if !request.preview && action != BulkAction::Cancel && principal.role != Role::Operator {
        return Err(ApiError::forbidden(format!(
            "a bulk {action} needs the operator role"
        )));
    }
    let bulk = match (request.ids, request.filter) {
        (Some(ids), None) => {
            let ids = ids
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    id.parse::<JobId>().map_err(|_| {
                        ApiError::invalid(format!("ids[{i}]"), "must be a job id (a UUID)")
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            BulkJobs::ids(action, ids)
        }
        (None, Some(filter)) => BulkJobs::filter(action, bulk_filter(&state, &principal, filter)?),
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "filter",
                "give ids or a filter, not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::invalid(
                "ids",
                "give the jobs' ids, or a filter (\"filter\": {} for every job)",
            ))
        }
    };
    let client = state.client_for(&principal);
    if request.preview {
        let preview = client.bulk_preview(bulk).await.map_err(store_err)?;
        return Ok(Json(BulkResponse {
            action: action.to_string(),
            preview: true,
            matched: Some(preview.matched),
            more: Some(preview.more),
            changed: None,
            skipped: None,
            not_found: None,
        }));
    }
    let outcome = client.bulk(bulk).await.map_err(store_err)?;
    Ok(Json(BulkResponse {
        action: action.to_string(),
        preview: false,
        matched: None,
        more: None,
        changed: Some(outcome.changed),
        skipped: Some(outcome.skipped),
        not_found: Some(outcome.not_found),
    }))
}

/// The store filter of a bulk action's `filter`, each field checked as `GET /v1/jobs` checks
/// its parameter (errors name `filter.<field>`); a token of one tenant gets its own tenant, and
/// 403 for another.
fn bulk_filter(
    state: &ApiState,
    principal: &Principal,
    filter: BulkFilter,
) -> Result<ListJobs, ApiError> {
    let field = |e: drover_core::Error| state.error(e.in_field("filter"));
    let mut query = ListJobs::default();
    if let Some(q) = &filter.queue {
        query.queue = Some(QueueName::parse(q).map_err(field)?);
    }
    if let Some(s) = &filter.state {
        query.state = Some(s.parse::<JobState>().map_err(field)?);
    }
    if let Some(k) = &filter.kind {
        query.kind = Some(JobKind::parse(k).map_err(field)?);
    }
    let requested = filter
        .tenant
        .as_deref()
        .map(TenantId::parse)
        .transpose()
        .map_err(field)?;
    query.tenant = match (&principal.scope, requested) {
        (TenantScope::All, t) => t,
        (TenantScope::One(own), None) => Some(own.clone()),
        (TenantScope::One(own), Some(t)) if &t == own => Some(t),
        (TenantScope::One(_), Some(_)) => {
            return Err(ApiError::forbidden_field(
                "filter.tenant",
                "this token may only act on its own tenant's jobs",
            ))
        }
    };
    if let Some(w) = &filter.workflow {
        query.workflow =
            Some(w.parse::<drover_core::WorkflowId>().map_err(|_| {
                ApiError::invalid("filter.workflow", "must be a workflow id (a UUID)")
            })?);
    }
    if let Some(p) = &filter.parent {
        query.parent = Some(
            p.parse::<JobId>()
                .map_err(|_| ApiError::invalid("filter.parent", "must be a job id (a UUID)"))?,
        );
    }
    if let Some(meta) = filter.meta {
        drover_core::json::check_meta_filter(&meta)
            .map_err(|e| state.error(e.in_field("filter")))?;
        query.meta = Some(meta);
    }
    if let Some(args) = filter.args {
        drover_core::json::check_args_filter(&args)
            .map_err(|e| state.error(e.in_field("filter")))?;
        query.args = Some(args);
    }
    Ok(query)
}

/// Delete a job.
///
/// A waiting, queued or finished job is deleted with its idempotency key and its dependency
/// edges; the answer shows it as it was. 409 (`invalid_transition`) for a running or
/// reconciling job: cancel it first. 409 (`conflict`, naming the job in the way as
/// `details.existing_job_id`) for a job that retention keeps for live jobs: a job not finished
/// depends on it, it has live children, or it is a child of a parent not finished (or a live
/// child its parent still counts).
///
/// Operators only (403 for another role). Another tenant's job answers 404.
#[utoipa::path(
    delete,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id: a UUID, hyphenated or not, any case, or as urn:uuid:... or {...}; answers show it hyphenated lowercase")),
    responses(
        (status = 200, description = "Deleted; the job as it was", body = JobResponse),
        (status = 400, description = "Malformed id, a query parameter or a body (this route takes neither)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Operator role required", body = ErrorBody),
        (status = 404, description = "No such job for this tenant", body = ErrorBody),
        (status = 409, description = "The job is running or reconciling (cancel it first), or live jobs still need it", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete_job(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> Result<Json<JobResponse>, ApiError> {
    if principal.role != Role::Operator {
        return Err(ApiError::forbidden("delete needs the operator role"));
    }
    let job = visible_job(&state, &principal, &id).await?;
    let job = state
        .client_for(&principal)
        .delete(job.id)
        .await
        .map_err(|e| state.error(e))?;
    Ok(Json(JobResponse { job: job.into() }))
}

/// Cancel a job.
///
/// Waiting, queued or reconciling jobs end cancelled at once; a running job's handler is asked
/// to stop (it ends cancelled, or succeeded if it completes anyway). The cancel reaches the
/// job's children, and its dependents when it ends cancelled. 409 for a finished job.
///
/// Any token. Another tenant's job answers 404, like a missing one.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id: a UUID, hyphenated or not, any case, or as urn:uuid:... or {...}; answers show it hyphenated lowercase")),
    responses(
        (status = 200, description = "Cancelled or cancel requested", body = CancelResponse),
        (status = 400, description = "Malformed id, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such job for this tenant", body = ErrorBody),
        (status = 409, description = "The job already finished", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_job(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> Result<Json<CancelResponse>, ApiError> {
    let job = visible_job(&state, &principal, &id).await?;
    let outcome = state
        .client_for(&principal)
        .cancel(job.id)
        .await
        .map_err(|e| state.error(e))?;
    Ok(Json(CancelResponse::new(outcome.effect, outcome.job)))
}

/// Retry a finished job.
///
/// The job runs again with the same id and args, its attempt budget reset; quotas are checked
/// again. 409 for a job that is still waiting, queued, running or reconciling.
///
/// Operators only (403 for another role). Another tenant's job answers 404.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/retry",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id: a UUID, hyphenated or not, any case, or as urn:uuid:... or {...}; answers show it hyphenated lowercase")),
    responses(
        (status = 200, description = "Queued again", body = JobResponse),
        (status = 400, description = "Malformed id, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Operator role required", body = ErrorBody),
        (status = 404, description = "No such job for this tenant", body = ErrorBody),
        (status = 409, description = "The job is not finished, or its unique key is taken", body = ErrorBody),
        (status = 429, description = "Quota exceeded (with Retry-After)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn retry_job(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> Result<Json<JobResponse>, ApiError> {
    if principal.role != Role::Operator {
        return Err(ApiError::forbidden("retry needs the operator role"));
    }
    let job = visible_job(&state, &principal, &id).await?;
    let job = state
        .client_for(&principal)
        .retry(job.id)
        .await
        .map_err(|e| state.error_for(&principal, QuotaRequest::Retry, e))?;
    Ok(Json(JobResponse { job: job.into() }))
}

/// Make a queued job ready now.
///
/// A queued job waiting for its `run_at` (scheduled, a retry's backoff, a snooze) becomes ready
/// now, attempts kept, and its queue's workers are woken; a ready one is left as it is
/// (`changed` false). 409 for a running, reconciling or finished job (retry a finished one).
///
/// Operators only (403 for another role). Another tenant's job answers 404.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/requeue",
    tag = "jobs",
    params(("id" = String, Path, description = "Job id: a UUID, hyphenated or not, any case, or as urn:uuid:... or {...}; answers show it hyphenated lowercase")),
    responses(
        (status = 200, description = "Ready now, or ready already (changed false)", body = RequeueResponse),
        (status = 400, description = "Malformed id, or a query parameter (this route takes none)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Operator role required", body = ErrorBody),
        (status = 404, description = "No such job for this tenant", body = ErrorBody),
        (status = 409, description = "The job is not queued (running, reconciling or finished)", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn requeue_job(
    State(state): State<ApiState>,
    principal: Principal,
    PathParam(id): PathParam,
) -> Result<Json<RequeueResponse>, ApiError> {
    if principal.role != Role::Operator {
        return Err(ApiError::forbidden("requeue needs the operator role"));
    }
    let job = visible_job(&state, &principal, &id).await?;
    let outcome = state
        .client_for(&principal)
        .requeue(job.id)
        .await
        .map_err(|e| state.error(e))?;
    Ok(Json(RequeueResponse {
        changed: outcome.changed,
        job: outcome.job.into(),
    }))
}

//! `GET /v1/audit`: the audit log of operator actions, newest first (docs/audit.md).

use axum::extract::State;
use axum::Json;
use drover_core::{AuditAction, AuditSource, ListAudit, TenantId};

use crate::auth::{Principal, TenantScope};
use crate::dto::AuditListResponse;
use crate::error::{ApiError, ErrorBody};
use crate::extract::QueryParams;
use crate::ApiState;

const LIST_PARAMS: [&str; 6] = ["action", "source", "actor", "tenant", "limit", "cursor"];

/// List audit records, newest first.
///
/// Who did what to which jobs, queues, workflows, limits and schedules, from where. Filters
/// combine with AND; `cursor` is the previous page's `next_cursor`.
///
/// Any token. A token of one tenant sees only its tenant's records (actions of its own tokens,
/// and actions of all-tenant operators on one of its jobs); naming another `tenant` answers 403.
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "audit",
    params(
        ("action" = Option<String>, Query, description = "Only this action, such as job.cancel or queue.pause"),
        ("source" = Option<String>, Query, description = "Only from this source: dashboard, api, cli or library"),
        ("actor" = Option<String>, Query, description = "Only by this actor, such as token:0a1b2c3d"),
        ("tenant" = Option<String>, Query, description = "Only this tenant (all-tenant tokens; a token of one tenant sees its own)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Page size, an integer 1..=1000 (default 50)"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of audit records", body = AuditListResponse),
        (status = 400, description = "Invalid or unknown parameter (the parameter is named)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Another tenant", body = ErrorBody),
        (status = 503, description = "Store unavailable (unavailable, with Retry-After) or not migrated (fatal)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_audit(
    State(state): State<ApiState>,
    principal: Principal,
    params: QueryParams,
) -> Result<Json<AuditListResponse>, ApiError> {
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
                "this token may only list its own tenant's audit records",
            ))
        }
    };
    let mut query = ListAudit {
        tenant,
        ..ListAudit::default()
    };
    if let Some(action) = params.get("action") {
        query.action = Some(action.parse::<AuditAction>().map_err(|e| state.error(e))?);
    }
    if let Some(source) = params.get("source") {
        query.source = Some(source.parse::<AuditSource>().map_err(|e| state.error(e))?);
    }
    if let Some(actor) = params.get("actor") {
        query.actor = Some(actor.to_owned());
    }
    if let Some(l) = params.get("limit") {
        let max = i64::from(drover_core::store::LIST_LIMIT_MAX);
        let limit =
            crate::integer::within(l, 1, max).map_err(|rule| ApiError::invalid("limit", rule))?;
        query.limit = u32::try_from(limit).unwrap_or(drover_core::store::LIST_LIMIT_MAX);
    }
    if let Some(c) = params.get("cursor") {
        query.before = Some(c.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
            ApiError::invalid("cursor", "must be the next_cursor of a previous page")
        })?);
    }
    let page = state
        .client()
        .audit(query)
        .await
        .map_err(|e| state.error(e))?;
    Ok(Json(AuditListResponse {
        entries: page.entries.into_iter().map(Into::into).collect(),
        next_cursor: page.next.map(|id| id.to_string()),
    }))
}

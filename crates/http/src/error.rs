//! The API's one error shape: every error answer, whatever its status, has the body
//! `{"error": {"code": "...", "message": "...", "field": "..."?, "details": {...}?}}`.
//! `drover_core::Error` maps to statuses here and only here.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use drover_core::{Error, Quota};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::TenantScope;

/// What a request refused by a quota asked for, so the answer says what would pass it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaRequest {
    /// An enqueue (one job or a batch): new jobs.
    Enqueue,
    /// An operator retry: no new job, the same job queued again.
    Retry,
}

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable code: `invalid_input` (400), `unauthorized` (401), `forbidden` (403),
    /// `not_found` (404), `method_not_allowed` (405), `conflict`, `invalid_transition` and
    /// `lease_lost` (409), `payload_too_large` (413), `unsupported_media_type` (415),
    /// `quota_exceeded` (429), `unavailable` (503: the store did not answer; retry after
    /// `Retry-After`), `fatal` (503: the store cannot serve until an operator acts, e.g. its
    /// schema is missing; the message says what to do), `internal` (500: a store error this
    /// version does not know).
    pub code: String,
    /// Human-readable, safe to show (never args, tokens or passwords).
    pub message: String,
    /// The offending request field, for `invalid_input`, `forbidden` and `conflict`
    /// (`idempotency_key`, `unique_key`; `jobs[i].idempotency_key` in a batch); absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Extra facts: a quota's `limit` (`max_pending` or `max_tenant_pending`), `setting`
    /// (`DROVER_MAX_PENDING` or `DROVER_MAX_TENANT_PENDING`), `current`, `max` and `tenant`
    /// (`current` and `max` of the cluster-wide quota only for tokens of tenant `*`);
    /// a conflict's `existing_job_id`. Absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

/// An error answer: status, body and optional headers.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: Box<ErrorBody>,
    retry_after_secs: Option<u64>,
    bearer_challenge: bool,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: Box::new(ErrorBody {
                error: ErrorDetail {
                    code: code.to_owned(),
                    message: message.into(),
                    field: None,
                    details: None,
                },
            }),
            retry_after_secs: None,
            bearer_challenge: false,
        }
    }

    /// 400 `invalid_input` naming `field`.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        let field = field.into();
        let reason = reason.into();
        let mut e = Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            format!("invalid {field}: {reason}"),
        );
        e.body.error.field = Some(field);
        e
    }

    /// 401: missing or unknown bearer token.
    pub fn unauthorized() -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid bearer token (send Authorization: Bearer <token>)",
        );
        e.bearer_challenge = true;
        e
    }

    /// 403: the caller's role or tenant does not allow this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 403 naming the request field whose value the caller may not use (`kind` for `exec`
    /// enqueued by a producer, `tenant` for another tenant).
    pub fn forbidden_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::forbidden(message);
        e.body.error.field = Some(field.into());
        e
    }

    /// 404 for a job the caller may not see (same answer as a missing one), naming the id in
    /// its canonical form (hyphenated lowercase), whatever form the request used.
    pub fn job_not_found(id: drover_core::JobId) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("job {id} not found"),
        )
    }

    /// 404 for a workflow the caller may not see (same answer as a missing one).
    pub fn workflow_not_found(id: drover_core::WorkflowId) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("workflow {id} not found"),
        )
    }

    /// 404 for a queue that has no jobs and is not paused, so a resume has nothing to act on
    /// (`drover queues resume` refuses it alike): a typo must not look like a resume that left
    /// the real queue paused.
    pub fn queue_not_found(queue: &drover_core::QueueName) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "no queue named {queue}: it has no jobs and is not paused, so nothing was resumed; check the name with GET /v1/queues"
            ),
        )
    }

    /// 404 for an unknown route.
    pub fn no_route() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such route")
    }

    /// 413: the body is larger than the configured limit.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body is larger than {limit} bytes"),
        )
    }

    /// 415: the body is not declared as JSON.
    pub fn not_json() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with Content-Type: application/json",
        )
    }

    /// 415: the body is declared with a `Content-Encoding` other than `identity` (gzip, ...):
    /// the API reads bodies as sent and does not decompress them.
    pub fn encoded_body() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body uncompressed: Content-Encoding other than identity (gzip, br, deflate, ...) is not accepted",
        )
    }

    /// 415: the body is declared in a charset other than UTF-8 (`charset`, as sent, is quoted
    /// back when short).
    pub fn not_utf8(charset: &str) -> Self {
        let got = if charset.len() <= 40 {
            format!("charset={charset}")
        } else {
            "another charset".to_owned()
        };
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "the body must be UTF-8 JSON: send Content-Type: application/json without a charset or with charset=utf-8, not {got}"
            ),
        )
    }

    /// 405.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "method not allowed on this route",
        )
    }

    /// Prefixes the field of an answer that names one (`kind` becomes `jobs[3].kind`).
    pub fn in_field(mut self, prefix: &str) -> Self {
        if let Some(field) = self.body.error.field.take() {
            let prefixed = format!("{prefix}.{field}");
            if let Some(rest) = self
                .body
                .error
                .message
                .strip_prefix(&format!("invalid {field}:"))
            {
                self.body.error.message = format!("invalid {prefixed}:{rest}");
            }
            self.body.error.field = Some(prefixed);
        }
        self
    }

    /// Sets the `Retry-After` seconds of a 429 or 503 answer.
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// The same answer with status 503 (readiness reports every failure as not ready).
    pub fn into_unavailable(mut self) -> Self {
        self.status = StatusCode::SERVICE_UNAVAILABLE;
        self
    }

    /// The error's message.
    pub fn message(&self) -> &str {
        &self.body.error.message
    }

    /// The stable code (`invalid_input`, `forbidden`, ...).
    pub fn code(&self) -> &str {
        &self.body.error.code
    }

    /// The offending request field, when the error names one.
    pub fn field(&self) -> Option<&str> {
        self.body.error.field.as_deref()
    }

    /// The body this answer sends.
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// [`ApiError::from_store`] for a caller of `scope` whose request was `request`: a quota
    /// refusal is worded for that request and, for a caller of one tenant refused by the
    /// cluster-wide quota, shows no counts (see [`ApiError::quota_exceeded`]).
    pub fn from_store_for(
        error: Error,
        retry_after_secs: u64,
        scope: &TenantScope,
        request: QuotaRequest,
    ) -> Self {
        match error {
            Error::QuotaExceeded {
                quota,
                current,
                max,
            } => Self::quota_exceeded(&quota, current, max, scope, request, retry_after_secs),
            other => Self::from_store(other, retry_after_secs),
        }
    }

    /// 429 `quota_exceeded` with `Retry-After`: `quota` allows `max` pending jobs, `current`
    /// are pending, and `request` would pass it. Details: the quota's `limit`
    /// (`max_pending` or `max_tenant_pending`) and `setting` (`DROVER_MAX_PENDING` or
    /// `DROVER_MAX_TENANT_PENDING`), a tenant quota's `tenant`, and `current` and `max`;
    /// except that a caller of one tenant refused by the cluster-wide quota learns only that
    /// it has no room: the counts of every tenant's jobs are not its to see (docs/design.md
    /// section 7). A tenant quota's counts are the caller's own tenant's.
    pub fn quota_exceeded(
        quota: &Quota,
        current: u64,
        max: u64,
        scope: &TenantScope,
        request: QuotaRequest,
        retry_after_secs: u64,
    ) -> Self {
        let setting = match quota {
            Quota::Global => "DROVER_MAX_PENDING",
            Quota::Tenant(_) => "DROVER_MAX_TENANT_PENDING",
        };
        let redacted = matches!(quota, Quota::Global) && *scope != TenantScope::All;
        let message = match (redacted, request) {
            (true, QuotaRequest::Enqueue) => "quota exceeded: the cluster-wide limit on pending \
                jobs (max_pending) has no room for this request's jobs; try again later"
                .to_owned(),
            (true, QuotaRequest::Retry) => "quota exceeded: the cluster-wide limit on pending \
                jobs (max_pending) has no room to queue this job again; try again later"
                .to_owned(),
            (false, QuotaRequest::Enqueue) => Error::QuotaExceeded {
                quota: quota.clone(),
                current,
                max,
            }
            .to_string(),
            (false, QuotaRequest::Retry) => format!(
                "quota exceeded: {quota} allows {max} pending jobs and {current} are pending, \
                 so queuing this job again would pass it; retry it once fewer are pending"
            ),
        };
        let mut details = serde_json::json!({
            "limit": quota.setting(),
            "setting": setting,
        });
        if !redacted {
            details["current"] = Value::from(current);
            details["max"] = Value::from(max);
        }
        if let Quota::Tenant(t) = quota {
            details["tenant"] = Value::from(t.as_str());
        }
        let mut answer = Self::new(StatusCode::TOO_MANY_REQUESTS, "quota_exceeded", message);
        answer.body.error.details = Some(details);
        answer.with_retry_after(retry_after_secs)
    }

    /// Maps a store error to its answer (docs/design.md section 4, errors), with
    /// every fact of a quota refusal (for callers of every tenant; see
    /// [`ApiError::from_store_for`]).
    pub fn from_store(error: Error, retry_after_secs: u64) -> Self {
        match error {
            Error::InvalidInput { field, reason } => Self::invalid(field, reason),
            Error::NotFound { entity, id } => Self::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("{entity} {id} not found"),
            ),
            Error::Conflict {
                reason,
                existing,
                field,
            } => {
                let mut e = Self::new(StatusCode::CONFLICT, "conflict", reason);
                e.body.error.field = field;
                e.body.error.details =
                    existing.map(|id| serde_json::json!({"existing_job_id": id.to_string()}));
                e
            }
            Error::QuotaExceeded {
                quota,
                current,
                max,
            } => Self::quota_exceeded(
                &quota,
                current,
                max,
                &TenantScope::All,
                QuotaRequest::Enqueue,
                retry_after_secs,
            ),
            e @ Error::InvalidTransition { .. } => {
                Self::new(StatusCode::CONFLICT, "invalid_transition", e.to_string())
            }
            e @ Error::LeaseLost { .. } => {
                Self::new(StatusCode::CONFLICT, "lease_lost", e.to_string())
            }
            e @ Error::Unavailable { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                e.to_string(),
            )
            .with_retry_after(1),
            // A non-transient store failure such as a missing schema: the service cannot
            // serve until an operator acts (the message says how), so 503, like readiness.
            e @ Error::Fatal { .. } => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "fatal", e.to_string())
            }
            other => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                other.to_string(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(*self.body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.bearer_challenge {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

//! The API's wire types (request and response bodies) and their conversion to and from `core`
//! types. Requests are parsed strictly: unknown fields are refused, and every field error names
//! the field.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use drover_core::{
    CancelEffect, EnqueueStatus, Enqueued, Job, JobDetails, JobKind, LimitKey, NewJob, QueueName,
    RunAt, SizeLimits, TenantId, VacuumStatus, WorkerInfo,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use drover_runner::{QueueChange, QueueSummary};

use crate::auth::{Principal, Role, TenantScope};
use crate::error::ApiError;

/// The kind that runs programs; only operators may enqueue it over HTTP (docs/design.md section 9).
pub const EXEC_KIND: &str = "exec";

/// Smallest `priority`.
pub const PRIORITY_MIN: i64 = i16::MIN as i64;
/// Largest `priority`.
pub const PRIORITY_MAX: i64 = i16::MAX as i64;
/// Largest `delay_ms`: [`drover_core::job::DELAY_MAX`] (100 years).
pub const DELAY_MS_MAX: i64 = drover_core::job::DELAY_MAX.as_millis() as i64;
/// Smallest `max_attempts`.
pub const MAX_ATTEMPTS_MIN: i64 = drover_core::job::MAX_ATTEMPTS_MIN as i64;
/// Largest `max_attempts`.
pub const MAX_ATTEMPTS_MAX: i64 = drover_core::job::MAX_ATTEMPTS_MAX as i64;

/// A job to enqueue. Only `kind` is required. Integer fields take any JSON number whose value
/// is a whole number in the field's range (`-0`, `1e3`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// Handler name, 1-128 of `A-Z a-z 0-9 _ . : - /`.
    pub kind: String,
    /// Handler input, any JSON (default `{}`; `null` means the default), at most 256 KiB, no
    /// `\u0000`.
    #[schema(value_type = Option<Value>)]
    pub args: Option<Value>,
    /// Queue (default `default`), 1-64 of `A-Z a-z 0-9 _ . : -`.
    pub queue: Option<String>,
    /// Tenant; defaults to the caller's. A tenant-scoped token may only name its own.
    pub tenant: Option<String>,
    /// Smaller runs first, an integer -32768..=32767 (default 0).
    #[serde(
        default,
        deserialize_with = "crate::integer::optional::<_, PRIORITY_MIN, PRIORITY_MAX>"
    )]
    #[schema(minimum = -32768, maximum = 32767)]
    pub priority: Option<i64>,
    /// Absolute ready time, RFC 3339 (e.g. `2026-12-01T10:00:00Z`). Exclusive with `delay_ms`.
    pub run_at: Option<String>,
    /// Ready this many milliseconds after the store's clock at enqueue, an integer
    /// 0..=3153600000000 (100 years of 365 days). Exclusive with `run_at`.
    #[serde(
        default,
        deserialize_with = "crate::integer::optional::<_, 0, DELAY_MS_MAX>"
    )]
    #[schema(minimum = 0, maximum = 3153600000000i64)]
    pub delay_ms: Option<i64>,
    /// Attempt budget, an integer 1..=1000 (default 3).
    #[serde(
        default,
        deserialize_with = "crate::integer::optional::<_, MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX>"
    )]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_attempts: Option<i64>,
    /// Deduplication key among the tenant's live jobs.
    pub unique_key: Option<String>,
    /// Limit policy keys the job is subject to (at most 16).
    pub limit_keys: Option<Vec<String>>,
    /// Client metadata: a JSON object (default `{}`; `null` means the default), filterable with
    /// `meta` on `GET /v1/jobs`.
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
    /// Idempotency key for this job (batch items; single enqueues use the `Idempotency-Key`
    /// header, and if both are given they must be equal).
    pub idempotency_key: Option<String>,
    /// Jobs that must be terminal before this one runs (it waits meanwhile, without a slot):
    /// at most 1,000, none repeated. On `POST /v1/jobs` and its batch, ids of stored jobs of
    /// the same tenant. In a workflow (`POST /v1/workflows`), the names of jobs of the same
    /// workflow, or ids of stored jobs (an entry naming a job of the workflow is that job).
    pub depends_on: Option<Vec<String>>,
    /// Run even when a dependency failed or was cancelled (default false: the job is
    /// cancelled then, its error naming the dependency).
    pub run_regardless: Option<bool>,
    /// The job's name in its workflow: required in `POST /v1/workflows`, unique there;
    /// refused elsewhere.
    pub name: Option<String>,
}

impl crate::extract::RequestBody for EnqueueRequest {}

/// A workflow: jobs enqueued as one unit, all or nothing, under one new workflow id
/// (docs/design.md section 10).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowRequest {
    /// The jobs, 1..=10,000, each a JSON object like `POST /v1/jobs` takes plus its `name`;
    /// its `depends_on` names other jobs of the workflow (or ids of stored jobs), at most 1,000
    /// per job and 100,000 in the whole workflow. Every job is of one tenant; no cycle.
    #[serde(deserialize_with = "crate::extract::objects")]
    pub jobs: Vec<EnqueueRequest>,
}

impl crate::extract::RequestBody for WorkflowRequest {
    const SHAPE: &'static str = r#"a JSON object {"jobs": [...]} whose jobs are objects like POST /v1/jobs takes, each with a "name""#;
}

impl WorkflowRequest {
    /// Converts to a checked [`drover_core::NewWorkflow`] for `principal`: each job as
    /// [`EnqueueRequest::into_valid_job`] would, its `name` required, its `depends_on` split
    /// into names of the workflow's jobs and ids of stored jobs; then the graph check
    /// ([`drover_core::NewWorkflow::plan`]: unique names, no dangling name, no cycle, one
    /// tenant), so a bad graph is refused before the store is asked.
    ///
    /// # Errors
    /// 400 naming `jobs` or `jobs[i].<field>`; 403 as [`EnqueueRequest::into_new_job`].
    pub fn into_new_workflow(
        self,
        principal: &Principal,
        sizes: &SizeLimits,
    ) -> Result<drover_core::NewWorkflow, ApiError> {
        let len = self.jobs.len();
        if len == 0 || len > drover_core::job::WORKFLOW_JOBS_MAX {
            return Err(ApiError::invalid(
                "jobs",
                format!(
                    "must hold 1 to {} jobs, got {len}",
                    drover_core::job::WORKFLOW_JOBS_MAX
                ),
            ));
        }
        let names: std::collections::HashSet<String> =
            self.jobs.iter().filter_map(|j| j.name.clone()).collect();
        let mut workflow = drover_core::NewWorkflow::new();
        for (i, mut item) in self.jobs.into_iter().enumerate() {
            let at = |e: ApiError| e.in_field(&format!("jobs[{i}]"));
            let Some(name) = item.name.take() else {
                return Err(at(ApiError::invalid(
                    "name",
                    "is required: every job of a workflow has a name, unique in it",
                )));
            };
            let mut local = Vec::new();
            let mut stored = Vec::new();
            // Repeats are found here, where `k` is still the caller's index: the graph check
            // sees names and ids in two lists.
            let mut seen = std::collections::HashSet::new();
            for (k, entry) in item
                .depends_on
                .take()
                .unwrap_or_default()
                .into_iter()
                .enumerate()
            {
                let repeated = |entry: &str| {
                    at(ApiError::invalid(
                        format!("depends_on[{k}]"),
                        format!("must not repeat a job; {entry:?} appears twice"),
                    ))
                };
                if names.contains(&entry) {
                    if !seen.insert(Dependency::Named(entry.clone())) {
                        return Err(repeated(&entry));
                    }
                    local.push(entry);
                } else {
                    let id = entry.parse::<drover_core::JobId>().map_err(|_| {
                        at(ApiError::invalid(
                            format!("depends_on[{k}]"),
                            format!("names no job of the workflow and is not the id of a stored job: {entry:?}"),
                        ))
                    })?;
                    if !seen.insert(Dependency::Stored(id)) {
                        return Err(repeated(&entry));
                    }
                    stored.push(id);
                }
            }
            let mut job = item.into_new_job(principal, None).map_err(at)?;
            job.depends_on = stored;
            workflow.jobs.push(drover_core::WorkflowJob {
                name,
                job,
                depends_on: local,
            });
        }
        workflow.plan(sizes).map_err(store_err)?;
        Ok(workflow)
    }
}

/// One entry of a workflow job's `depends_on`, as [`WorkflowRequest::into_new_workflow`]
/// reads it.
#[derive(PartialEq, Eq, Hash)]
enum Dependency {
    /// A job of the workflow, by name.
    Named(String),
    /// A stored job, by id.
    Stored(drover_core::JobId),
}

/// Many jobs enqueued atomically.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchEnqueueRequest {
    /// The jobs, 1..=10,000, each a JSON object.
    #[serde(deserialize_with = "crate::extract::objects")]
    pub jobs: Vec<EnqueueRequest>,
}

impl crate::extract::RequestBody for BatchEnqueueRequest {
    const SHAPE: &'static str =
        r#"a JSON object {"jobs": [...]} whose jobs are objects like POST /v1/jobs takes"#;
}

/// A bulk action: `action` on the jobs `ids` or on every job `filter` matches (exactly one of
/// the two); with `preview`, only how many jobs it would act on.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// `cancel`, `retry` or `delete`.
    pub action: String,
    /// Job ids, 1 to 1,000, none repeated.
    pub ids: Option<Vec<String>>,
    /// The filters of `GET /v1/jobs` (every one optional; none matches every job of the
    /// token's scope).
    pub filter: Option<BulkFilter>,
    /// Count the jobs, change nothing (default false).
    #[serde(default)]
    pub preview: bool,
}

impl crate::extract::RequestBody for BulkRequest {
    const SHAPE: &'static str = r#"a JSON object {"action": "cancel", "ids": [...]} or {"action": "cancel", "filter": {...}}"#;
}

/// The filters of a bulk action, as `GET /v1/jobs` takes them; they combine with AND.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    /// Only jobs in this state.
    pub state: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this tenant (a token of one tenant may name its own only).
    pub tenant: Option<String>,
    /// Only jobs of this workflow (its id).
    pub workflow: Option<String>,
    /// Only children of this job (its id).
    pub parent: Option<String>,
    /// A JSON object the job's meta must contain.
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
    /// A JSON object the job's args must contain.
    #[schema(value_type = Option<Object>)]
    pub args: Option<Value>,
}

/// The answer to a bulk action: with `preview`, `matched` (and `more`); else `changed`,
/// `skipped` and `not_found`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BulkResponse {
    /// The action.
    pub action: String,
    /// True for a preview: nothing changed.
    pub preview: bool,
    /// Preview: jobs the action would act on (at least this many when `more`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched: Option<u64>,
    /// Preview: true when counting stopped at 10,000 with more to count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more: Option<bool>,
    /// Jobs the action changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed: Option<u64>,
    /// Jobs it does not apply to (their state, a live job that needs them, a quota, a unique
    /// key), left as they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
    /// Ids of no job of the token's tenant (or deleted meanwhile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_found: Option<u64>,
}

/// Largest batch accepted by `POST /v1/jobs/batch`.
pub const BATCH_MAX: usize = 10_000;

fn int_in<T: TryFrom<i64>>(field: &str, v: i64, lo: i64, hi: i64) -> Result<T, ApiError> {
    if v < lo || v > hi {
        return Err(ApiError::invalid(
            field,
            crate::integer::rule(lo, hi, &v.to_string()),
        ));
    }
    T::try_from(v)
        .map_err(|_| ApiError::invalid(field, crate::integer::rule(lo, hi, &v.to_string())))
}

fn store_err(e: drover_core::Error) -> ApiError {
    ApiError::from_store(e, 1)
}

impl EnqueueRequest {
    /// Converts to a `NewJob` for `principal`, with `header_key` from `Idempotency-Key`.
    /// Checks names, numbers and the role; the rules that need the store's size bounds are
    /// checked by [`EnqueueRequest::into_valid_job`].
    ///
    /// # Errors
    /// 400 naming the field; 403 naming `tenant` when the tenant is not the caller's, or
    /// `kind` when a producer enqueues `exec` (docs/design.md section 9).
    pub fn into_new_job(
        self,
        principal: &Principal,
        header_key: Option<String>,
    ) -> Result<NewJob, ApiError> {
        let kind = JobKind::parse(self.kind).map_err(store_err)?;
        if kind.as_str() == EXEC_KIND && principal.role != Role::Operator {
            return Err(ApiError::forbidden_field(
                "kind",
                "only the operator role may enqueue the exec kind",
            ));
        }
        // `null` means "not given" wherever the request comes from: serde already reads a JSON
        // `null` as `None`, and the CLI's `--args null` arrives as `Some(Null)`.
        let args = self
            .args
            .filter(|v| !v.is_null())
            .unwrap_or_else(|| Value::Object(Default::default()));
        let mut job = NewJob::new(kind, args);
        if let Some(queue) = self.queue {
            job.queue = QueueName::parse(queue).map_err(store_err)?;
        }
        job.tenant = resolve_tenant(principal, self.tenant)?;
        if let Some(p) = self.priority {
            job.priority = int_in("priority", p, PRIORITY_MIN, PRIORITY_MAX)?;
        }
        match (self.run_at, self.delay_ms) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "run_at",
                    "give run_at or delay_ms, not both",
                ))
            }
            (Some(at), None) => {
                let at = DateTime::parse_from_rfc3339(&at).map_err(|_| {
                    ApiError::invalid(
                        "run_at",
                        "must be an RFC 3339 instant such as 2026-12-01T10:00:00Z",
                    )
                })?;
                job.run_at = Some(RunAt::At(at.with_timezone(&Utc)));
            }
            (None, Some(ms)) => {
                let ms: u64 = int_in("delay_ms", ms, 0, DELAY_MS_MAX)?;
                job.run_at = Some(RunAt::After(Duration::from_millis(ms)));
            }
            (None, None) => {}
        }
        if let Some(m) = self.max_attempts {
            job.max_attempts = int_in("max_attempts", m, MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX)?;
        }
        job.unique_key = self.unique_key;
        if let Some(keys) = self.limit_keys {
            for (i, k) in keys.into_iter().enumerate() {
                let key = LimitKey::parse(k).map_err(|e| match e {
                    drover_core::Error::InvalidInput { reason, .. } => {
                        ApiError::invalid(format!("limit_keys[{i}]"), reason)
                    }
                    other => store_err(other),
                })?;
                // A key is a set member: naming it twice means the same as once.
                job = job.with_limit_key(key);
            }
        }
        if let Some(meta) = self.meta.filter(|v| !v.is_null()) {
            job.meta = meta;
        }
        if self.name.is_some() {
            return Err(ApiError::invalid(
                "name",
                "only a job of a workflow has a name; enqueue the workflow with POST /v1/workflows",
            ));
        }
        let depends_on = self.depends_on.unwrap_or_default();
        if depends_on.len() > drover_core::job::DEPENDENCIES_MAX {
            return Err(ApiError::invalid(
                "depends_on",
                format!(
                    "at most {} dependencies per job, got {}",
                    drover_core::job::DEPENDENCIES_MAX,
                    depends_on.len()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(depends_on.len());
        for (i, entry) in depends_on.iter().enumerate() {
            let id = entry.parse::<drover_core::JobId>().map_err(|_| {
                ApiError::invalid(
                    format!("depends_on[{i}]"),
                    "must be the id of a stored job (a UUID), or in a workflow the name of one of its jobs",
                )
            })?;
            if !seen.insert(id) {
                return Err(ApiError::invalid(
                    format!("depends_on[{i}]"),
                    format!("must not repeat a job; {id} appears twice"),
                ));
            }
            job.depends_on.push(id);
        }
        job.run_regardless = self.run_regardless.unwrap_or(false);
        job.idempotency_key = match (header_key, self.idempotency_key) {
            (Some(h), Some(b)) if h != b => {
                return Err(ApiError::invalid(
                    "idempotency_key",
                    "differs from the Idempotency-Key header",
                ))
            }
            (h, b) => h.or(b),
        };
        Ok(job)
    }
}

impl EnqueueRequest {
    /// [`EnqueueRequest::into_new_job`], then every rule [`NewJob::validate`] checks with the
    /// store's `sizes` (args and meta size, NUL characters, keys, `run_at` range), so an
    /// invalid job is refused with 400 before the store is asked.
    ///
    /// # Errors
    /// As [`EnqueueRequest::into_new_job`]; 400 naming the field `NewJob::validate` names.
    pub fn into_valid_job(
        self,
        principal: &Principal,
        header_key: Option<String>,
        sizes: &SizeLimits,
    ) -> Result<NewJob, ApiError> {
        let job = self.into_new_job(principal, header_key)?;
        job.validate(sizes).map_err(store_err)?;
        Ok(job)
    }
}

/// The tenant a request acts for: the caller's own, or for an all-tenant caller the one named
/// (default `default`).
///
/// # Errors
/// 400 for a malformed tenant; 403 when a tenant-scoped caller names another tenant.
pub fn resolve_tenant(
    principal: &Principal,
    requested: Option<String>,
) -> Result<TenantId, ApiError> {
    let requested = requested
        .map(TenantId::parse)
        .transpose()
        .map_err(store_err)?;
    match (&principal.scope, requested) {
        (TenantScope::One(own), None) => Ok(own.clone()),
        (TenantScope::One(own), Some(t)) if &t == own => Ok(t),
        (TenantScope::One(_), Some(_)) => Err(ApiError::forbidden_field(
            "tenant",
            "this token may only act for its own tenant",
        )),
        (TenantScope::All, requested) => Ok(requested.unwrap_or_default()),
    }
}

/// One failed attempt.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptErrorView {
    /// The attempt (1-based).
    pub attempt: i32,
    /// When.
    pub at: DateTime<Utc>,
    /// What went wrong.
    pub message: String,
}

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobView {
    /// UUID v7.
    pub id: String,
    /// Handler name.
    pub kind: String,
    /// Queue.
    pub queue: String,
    /// Tenant.
    pub tenant: String,
    /// `waiting` (for dependencies or children), `queued`, `running`, `reconciling`,
    /// `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// Handler input (any JSON).
    #[schema(value_type = Value)]
    pub args: Value,
    /// Client metadata.
    #[schema(value_type = Object)]
    pub meta: Value,
    /// Smaller runs first.
    pub priority: i16,
    /// Ready time.
    pub run_at: DateTime<Utc>,
    /// Claims counted so far.
    pub attempt: i32,
    /// Attempt budget.
    pub max_attempts: i32,
    /// Fencing token of the latest claim (0 before the first).
    pub fencing_token: i64,
    /// Worker holding the lease.
    pub lease_owner: Option<String>,
    /// Lease end.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// A cancel was requested while running.
    pub cancel_requested: bool,
    /// Handler result on success (any JSON), `null` otherwise.
    #[schema(value_type = Option<Value>)]
    pub result: Option<Value>,
    /// Failed attempts, newest last; also the claims an expired lease ended before their
    /// handler started, whose attempt was given back (the message says so).
    pub errors: Vec<AttemptErrorView>,
    /// Latest progress (any JSON), `null` when none was reported.
    #[schema(value_type = Option<Value>)]
    pub progress: Option<Value>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Unique key.
    pub unique_key: Option<String>,
    /// Explicit limit keys.
    pub limit_keys: Vec<String>,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
    /// Latest claim time.
    pub attempted_at: Option<DateTime<Utc>>,
    /// When the handler of the latest claim started: `null` before the first claim, while
    /// the job waits for a slot, and when the latest claim ended before its handler started.
    pub started_at: Option<DateTime<Utc>>,
    /// The job is `running` (leased) but waits in a worker's backlog for a slot: the worker
    /// claimed it ahead and its handler has not started.
    pub waiting_for_slot: bool,
    /// Terminal time.
    pub finished_at: Option<DateTime<Utc>>,
    /// The workflow the job belongs to.
    pub workflow_id: Option<String>,
    /// Its name in its workflow.
    pub name: Option<String>,
    /// The job that enqueued it as a child.
    pub parent_id: Option<String>,
    /// The jobs it waits for, as enqueued.
    pub depends_on: Vec<String>,
    /// Runs even when a dependency failed or was cancelled.
    pub run_regardless: bool,
    /// Dependencies not yet terminal.
    pub pending_dependencies: i32,
    /// Children not yet terminal.
    pub live_children: i32,
}

impl From<Job> for JobView {
    fn from(j: Job) -> Self {
        let waiting_for_slot = j.is_waiting_for_slot();
        JobView {
            id: j.id.to_string(),
            kind: j.kind.into(),
            queue: j.queue.into(),
            tenant: j.tenant.into(),
            state: j.state.as_str().to_owned(),
            args: j.args,
            meta: j.meta,
            priority: j.priority,
            run_at: j.run_at,
            attempt: j.attempt,
            max_attempts: j.max_attempts,
            fencing_token: j.fencing_token.0,
            lease_owner: j.lease_owner.map(String::from),
            lease_expires_at: j.lease_expires_at,
            cancel_requested: j.cancel_requested,
            result: j.result,
            errors: j
                .errors
                .into_iter()
                .map(|e| AttemptErrorView {
                    attempt: e.attempt,
                    at: e.at,
                    message: e.message,
                })
                .collect(),
            progress: j.progress,
            idempotency_key: j.idempotency_key,
            unique_key: j.unique_key,
            limit_keys: j.limit_keys.into_iter().map(String::from).collect(),
            created_at: j.created_at,
            attempted_at: j.attempted_at,
            started_at: j.started_at,
            waiting_for_slot,
            finished_at: j.finished_at,
            workflow_id: j.workflow_id.map(|id| id.to_string()),
            name: j.name,
            parent_id: j.parent_id.map(|id| id.to_string()),
            depends_on: j.depends_on.iter().map(ToString::to_string).collect(),
            run_regardless: j.run_regardless,
            pending_dependencies: j.pending_dependencies,
            live_children: j.live_children,
        }
    }
}

/// The answer to one enqueued job.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EnqueueResponse {
    /// `created` (202), `replayed` (same idempotency key and request: the stored job in its
    /// current state, 200) or `duplicate` (a live job holds the unique key, 200).
    pub status: String,
    /// The job.
    pub job: JobView,
}

impl From<Enqueued> for EnqueueResponse {
    fn from(e: Enqueued) -> Self {
        EnqueueResponse {
            status: match e.status {
                EnqueueStatus::Created => "created",
                EnqueueStatus::Replayed => "replayed",
                EnqueueStatus::Duplicate => "duplicate",
            }
            .to_owned(),
            job: e.job.into(),
        }
    }
}

/// The answer to a batch enqueue, in request order.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchEnqueueResponse {
    /// One answer per job.
    pub results: Vec<EnqueueResponse>,
}

/// A job in a list: the fields of [`JobView`], of which `args`, `result`, `errors` and
/// `progress` only when the list's `include` names them (absent otherwise, so a page of
/// summaries stays small).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobListItem {
    /// UUID v7.
    pub id: String,
    /// Handler name.
    pub kind: String,
    /// Queue.
    pub queue: String,
    /// Tenant.
    pub tenant: String,
    /// `waiting` (for dependencies or children), `queued`, `running`, `reconciling`,
    /// `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// Handler input (any JSON); only with `include=args`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>, required = false)]
    pub args: Option<Value>,
    /// Client metadata.
    #[schema(value_type = Object)]
    pub meta: Value,
    /// Smaller runs first.
    pub priority: i16,
    /// Ready time.
    pub run_at: DateTime<Utc>,
    /// Claims counted so far.
    pub attempt: i32,
    /// Attempt budget.
    pub max_attempts: i32,
    /// Fencing token of the latest claim (0 before the first).
    pub fencing_token: i64,
    /// Worker holding the lease.
    pub lease_owner: Option<String>,
    /// Lease end.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// A cancel was requested while running.
    pub cancel_requested: bool,
    /// Handler result on success (any JSON), `null` otherwise; only with `include=result`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>, required = false)]
    pub result: Option<Option<Value>>,
    /// Failed attempts, newest last; only with `include=errors`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub errors: Option<Vec<AttemptErrorView>>,
    /// Latest progress (any JSON), `null` when none was reported; only with
    /// `include=progress`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>, required = false)]
    pub progress: Option<Option<Value>>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Unique key.
    pub unique_key: Option<String>,
    /// Explicit limit keys.
    pub limit_keys: Vec<String>,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
    /// Latest claim time.
    pub attempted_at: Option<DateTime<Utc>>,
    /// When the handler of the latest claim started: `null` before the first claim, while
    /// the job waits for a slot, and when the latest claim ended before its handler started.
    pub started_at: Option<DateTime<Utc>>,
    /// The job is `running` (leased) but waits in a worker's backlog for a slot: the worker
    /// claimed it ahead and its handler has not started.
    pub waiting_for_slot: bool,
    /// Terminal time.
    pub finished_at: Option<DateTime<Utc>>,
    /// The workflow the job belongs to.
    pub workflow_id: Option<String>,
    /// Its name in its workflow.
    pub name: Option<String>,
    /// The job that enqueued it as a child.
    pub parent_id: Option<String>,
    /// The jobs it waits for, as enqueued.
    pub depends_on: Vec<String>,
    /// Runs even when a dependency failed or was cancelled.
    pub run_regardless: bool,
    /// Dependencies not yet terminal.
    pub pending_dependencies: i32,
    /// Children not yet terminal.
    pub live_children: i32,
}

impl JobListItem {
    /// The list's form of `job`, with the large fields `details` names.
    pub fn new(job: Job, details: JobDetails) -> Self {
        let view = JobView::from(job);
        JobListItem {
            id: view.id,
            kind: view.kind,
            queue: view.queue,
            tenant: view.tenant,
            state: view.state,
            args: details.args.then_some(view.args),
            meta: view.meta,
            priority: view.priority,
            run_at: view.run_at,
            attempt: view.attempt,
            max_attempts: view.max_attempts,
            fencing_token: view.fencing_token,
            lease_owner: view.lease_owner,
            lease_expires_at: view.lease_expires_at,
            cancel_requested: view.cancel_requested,
            result: details.result.then_some(view.result),
            errors: details.errors.then_some(view.errors),
            progress: details.progress.then_some(view.progress),
            idempotency_key: view.idempotency_key,
            unique_key: view.unique_key,
            limit_keys: view.limit_keys,
            created_at: view.created_at,
            attempted_at: view.attempted_at,
            started_at: view.started_at,
            waiting_for_slot: view.waiting_for_slot,
            finished_at: view.finished_at,
            workflow_id: view.workflow_id,
            name: view.name,
            parent_id: view.parent_id,
            depends_on: view.depends_on,
            run_regardless: view.run_regardless,
            pending_dependencies: view.pending_dependencies,
            live_children: view.live_children,
        }
    }
}

/// A page of jobs.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobListResponse {
    /// Jobs, newest first.
    pub jobs: Vec<JobListItem>,
    /// Pass as `cursor` to get the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// The answer to a cancel.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CancelResponse {
    /// `cancelled` (it was waiting, queued or reconciling) or `requested` (it is running; its
    /// handler was asked to stop).
    pub effect: String,
    /// What that means for the job.
    pub message: String,
    /// The job after the cancel.
    pub job: JobView,
}

impl CancelResponse {
    /// Builds the answer.
    pub fn new(effect: CancelEffect, job: Job) -> Self {
        let (effect, message) = match effect {
            CancelEffect::Cancelled => ("cancelled", "the job is cancelled"),
            CancelEffect::Requested => (
                "requested",
                "the job is running: its handler was asked to stop; it ends cancelled, or succeeded if the handler completes anyway",
            ),
        };
        CancelResponse {
            effect: effect.to_owned(),
            message: message.to_owned(),
            job: job.into(),
        }
    }
}

/// The answer to a requeue.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RequeueResponse {
    /// True when the job was waiting for its `run_at` (scheduled, a retry's backoff, a
    /// snooze) and is ready now; false when it was ready already, so nothing changed.
    pub changed: bool,
    /// The job after the requeue.
    pub job: JobView,
}

/// A job wrapped for single-job answers.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobResponse {
    /// The job.
    pub job: JobView,
}

/// A queue with its counts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueView {
    /// Name.
    pub name: String,
    /// Paused cluster-wide.
    pub paused: bool,
    /// When paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// Jobs per state.
    pub counts: BTreeMap<String, u64>,
    /// Ready queued jobs.
    pub ready: u64,
    /// `ready` is a lower bound: past 10,000 ready and 10,000 scheduled jobs in one priority,
    /// PostgreSQL counts ready jobs only so far.
    pub ready_at_least: bool,
    /// Running jobs whose handler started.
    pub running: u64,
    /// Jobs claimed ahead by a worker, waiting in its backlog for a slot (leased, so counted
    /// in `counts.running`, but not started).
    pub claimed: u64,
    /// Age of the oldest ready job, in seconds.
    pub lag_seconds: Option<f64>,
}

impl From<&QueueSummary> for QueueView {
    fn from(queue: &QueueSummary) -> Self {
        QueueView {
            name: queue.name.to_string(),
            paused: queue.paused,
            paused_at: queue.paused_at,
            counts: queue
                .counts
                .iter()
                .map(|(state, count)| (state.as_str().to_owned(), *count))
                .collect(),
            ready: queue.ready,
            ready_at_least: queue.ready_at_least,
            running: queue.running,
            claimed: queue.claimed,
            lag_seconds: queue.lag_seconds(),
        }
    }
}

/// All queues.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueListResponse {
    /// Queues by name.
    pub queues: Vec<QueueView>,
    /// What keeps the database from cleaning the jobs table; null for a store without vacuum
    /// (the in-memory store).
    pub vacuum: Option<VacuumView>,
}

/// What keeps the database from cleaning the jobs table (estimates from its statistics):
/// claims step over dead row versions until vacuum removes them, and an open transaction or
/// a replication slot keeps vacuum from removing the newer ones.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VacuumView {
    /// Age of the open transaction that holds back vacuum the most, in seconds; null when
    /// none is open (or its start is hidden from the store's role).
    pub oldest_transaction_age_seconds: Option<f64>,
    /// That transaction's backend process id; null for a prepared transaction.
    pub oldest_transaction_pid: Option<u32>,
    /// The replication slot holding the oldest horizon, if any.
    pub replication_slot: Option<String>,
    /// How many transactions old that slot's horizon is.
    pub replication_slot_xmin_age: Option<u64>,
    /// Estimated dead row versions in the jobs table.
    pub jobs_dead_rows: u64,
    /// Estimated live rows in the jobs table.
    pub jobs_live_rows: u64,
    /// When the jobs table was last vacuumed (null: not since the statistics were reset).
    pub jobs_last_vacuum_at: Option<DateTime<Utc>>,
}

impl From<&VacuumStatus> for VacuumView {
    fn from(status: &VacuumStatus) -> Self {
        VacuumView {
            oldest_transaction_age_seconds: status
                .oldest_transaction_age_ms
                .map(|ms| ms as f64 / 1000.0),
            oldest_transaction_pid: status.oldest_transaction_pid,
            replication_slot: status.replication_slot.clone(),
            replication_slot_xmin_age: status.replication_slot_xmin_age,
            jobs_dead_rows: status.jobs_dead_rows,
            jobs_live_rows: status.jobs_live_rows,
            jobs_last_vacuum_at: status.jobs_last_vacuum_at,
        }
    }
}

/// A queue's pause state after a pause or resume, and whether the request changed it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueStateResponse {
    /// Name.
    pub name: String,
    /// Paused.
    pub paused: bool,
    /// When paused (the first pause of a paused queue; a second pause keeps it).
    pub paused_at: Option<DateTime<Utc>>,
    /// False when the queue already was as asked (pausing a paused queue, resuming one that is
    /// not paused): nothing changed.
    pub changed: bool,
}

impl From<QueueChange> for QueueStateResponse {
    fn from(change: QueueChange) -> Self {
        let QueueChange { queue, changed } = change;
        QueueStateResponse {
            name: queue.name.into(),
            paused: queue.paused,
            paused_at: queue.paused_at,
            changed,
        }
    }
}

/// A registered worker.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkerView {
    /// Id (lease owner of its jobs).
    pub id: String,
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Queues it serves.
    pub queues: Vec<String>,
    /// Start time.
    pub started_at: DateTime<Utc>,
    /// Latest heartbeat.
    pub last_heartbeat_at: DateTime<Utc>,
}

impl From<WorkerInfo> for WorkerView {
    fn from(w: WorkerInfo) -> Self {
        WorkerView {
            id: w.id.into(),
            host: w.host,
            pid: w.pid,
            queues: w.queues.into_iter().map(String::from).collect(),
            started_at: w.started_at,
            last_heartbeat_at: w.last_heartbeat_at,
        }
    }
}

/// All workers.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkerListResponse {
    /// Workers by id.
    pub workers: Vec<WorkerView>,
}

/// The answer to `POST /v1/workflows`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowEnqueueResponse {
    /// The new workflow's id.
    pub id: String,
    /// Per job, in request order (a job whose unique key a live job holds answers
    /// `duplicate` with that job, and its dependents wait for it).
    pub jobs: Vec<EnqueueResponse>,
}

/// A workflow in a list: its counts, not its jobs.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowSummaryView {
    /// Id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
    /// Overall: `running` while a job is queued, running or reconciling, `waiting` when every
    /// live job waits, then `failed` if any failed, `cancelled` if any was cancelled, else
    /// `succeeded`.
    pub state: String,
    /// Its jobs (children included) per state; states without jobs are absent.
    pub counts: BTreeMap<String, u64>,
}

impl From<drover_core::WorkflowSummary> for WorkflowSummaryView {
    fn from(w: drover_core::WorkflowSummary) -> Self {
        WorkflowSummaryView {
            id: w.id.to_string(),
            tenant: w.tenant.to_string(),
            created_at: w.created_at,
            state: w.overall().as_str().to_owned(),
            counts: w
                .states
                .iter()
                .map(|(state, n)| (state.as_str().to_owned(), *n))
                .collect(),
        }
    }
}

/// A page of workflows.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowListResponse {
    /// Workflows, newest first.
    pub workflows: Vec<WorkflowSummaryView>,
    /// Pass as `cursor` to get the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// One edge of a workflow's graph: `job` waits for `depends_on`. Each end is the job's name in
/// the workflow, or its id when it has none (a child, or a stored job outside the workflow).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WorkflowEdge {
    /// The dependent.
    pub job: String,
    /// What it waits for.
    pub depends_on: String,
}

/// A workflow with its jobs and its graph.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowView {
    /// Id.
    pub id: String,
    /// Tenant.
    pub tenant: String,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
    /// Overall state, as in the list.
    pub state: String,
    /// Its jobs per state.
    pub counts: BTreeMap<String, u64>,
    /// Its jobs, children included, in creation order, without the large fields (`GET
    /// /v1/jobs/{id}` shows one whole; `GET /v1/jobs?workflow=ID&include=...` lists them).
    pub jobs: Vec<JobListItem>,
    /// Dependency edges, by name (see [`WorkflowEdge`]); children point at their parent with
    /// `parent_id`.
    pub edges: Vec<WorkflowEdge>,
}

impl From<drover_core::Workflow> for WorkflowView {
    fn from(w: drover_core::Workflow) -> Self {
        let label: std::collections::HashMap<drover_core::JobId, String> = w
            .jobs
            .iter()
            .map(|j| (j.id, j.name.clone().unwrap_or_else(|| j.id.to_string())))
            .collect();
        let name_of =
            |id: &drover_core::JobId| label.get(id).cloned().unwrap_or_else(|| id.to_string());
        let edges = w
            .jobs
            .iter()
            .flat_map(|j| {
                j.depends_on.iter().map(|d| WorkflowEdge {
                    job: name_of(&j.id),
                    depends_on: name_of(d),
                })
            })
            .collect();
        let mut states = BTreeMap::new();
        for job in &w.jobs {
            *states.entry(job.state).or_insert(0u64) += 1;
        }
        WorkflowView {
            id: w.id.to_string(),
            tenant: w.tenant.to_string(),
            created_at: w.created_at,
            state: drover_core::workflow::overall(&states).as_str().to_owned(),
            counts: states
                .iter()
                .map(|(state, n)| (state.as_str().to_owned(), *n))
                .collect(),
            jobs: w
                .jobs
                .into_iter()
                .map(|j| JobListItem::new(j, JobDetails::NONE))
                .collect(),
            edges,
        }
    }
}

/// A workflow wrapped for single answers.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowResponse {
    /// The workflow.
    pub workflow: WorkflowView,
}

/// What a workflow cancel or retry did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowChangeResponse {
    /// The workflow.
    pub id: String,
    /// How many of its jobs changed (cancelled or cancel requested; or run again).
    pub jobs: u64,
}

impl From<drover_core::WorkflowChange> for WorkflowChangeResponse {
    fn from(c: drover_core::WorkflowChange) -> Self {
        WorkflowChangeResponse {
            id: c.id.to_string(),
            jobs: c.jobs,
        }
    }
}

/// Readiness.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReadyResponse {
    /// `ready`.
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds the OpenAPI document gives the integer fields are the ones parsing enforces.
    #[test]
    fn documented_integer_bounds_are_the_enforced_ones() {
        let doc = serde_json::to_value(crate::openapi()).unwrap();
        let properties = &doc["components"]["schemas"]["EnqueueRequest"]["properties"];
        for (field, min, max) in [
            ("priority", PRIORITY_MIN, PRIORITY_MAX),
            ("delay_ms", 0, DELAY_MS_MAX),
            ("max_attempts", MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX),
        ] {
            let schema = &properties[field];
            assert_eq!(
                (schema["minimum"].as_i64(), schema["maximum"].as_i64()),
                (Some(min), Some(max)),
                "{field}: {schema}"
            );
            let at = |v: i64| format!(r#"{{"kind": "a", "{field}": {v}}}"#);
            assert!(crate::extract::parse_json::<EnqueueRequest>(at(min).as_bytes()).is_ok());
            assert!(crate::extract::parse_json::<EnqueueRequest>(at(max).as_bytes()).is_ok());
            assert!(crate::extract::parse_json::<EnqueueRequest>(at(min - 1).as_bytes()).is_err());
            assert!(crate::extract::parse_json::<EnqueueRequest>(at(max + 1).as_bytes()).is_err());
        }
    }

    /// A list item with every detail is the job as `GET /v1/jobs/{id}` shows it (so a field
    /// added to [`JobView`] must be added to [`JobListItem`] too); without details it is the
    /// same but for those four fields.
    #[test]
    fn list_items_show_the_fields_of_a_job_view() {
        let mut job = NewJob::new(JobKind::parse("k").unwrap(), serde_json::json!({"a": 1}))
            .into_job(drover_core::JobId::new_v7(), Utc::now());
        job.result = Some(serde_json::json!(2));
        let whole = serde_json::to_value(JobView::from(job.clone())).unwrap();
        let item = serde_json::to_value(JobListItem::new(job.clone(), JobDetails::ALL)).unwrap();
        assert_eq!(item, whole);
        let mut summary = whole.as_object().unwrap().clone();
        for field in JobDetails::NAMES {
            summary.remove(field);
        }
        let item = serde_json::to_value(JobListItem::new(job, JobDetails::NONE)).unwrap();
        assert_eq!(item, Value::Object(summary));
    }

    fn workflow(body: &str) -> Result<drover_core::NewWorkflow, ApiError> {
        let request: WorkflowRequest = crate::extract::parse_json(body.as_bytes())?;
        request.into_new_workflow(&Principal::insecure(), &SizeLimits::default())
    }

    fn field_of(e: &ApiError) -> String {
        e.field().unwrap_or_default().to_owned()
    }

    /// A workflow's `depends_on` names its jobs, or gives ids of stored jobs; the graph is
    /// checked before the store is asked, every error naming the job and the field.
    #[test]
    fn workflow_bodies_resolve_names_and_refuse_bad_graphs() {
        let stored = drover_core::JobId::new_v7();
        let ok = workflow(&format!(
            r#"{{"jobs": [
                {{"name": "b", "kind": "k", "depends_on": ["a", "{stored}"], "run_regardless": true}},
                {{"name": "a", "kind": "k", "args": {{"x": 1}}}}
            ]}}"#
        ))
        .unwrap();
        assert_eq!(ok.jobs[0].depends_on, ["a"]);
        assert_eq!(ok.jobs[0].job.depends_on, [stored]);
        assert!(ok.jobs[0].job.run_regardless);
        assert_eq!(ok.jobs[1].name, "a");

        let cycle = workflow(
            r#"{"jobs": [
                {"name": "a", "kind": "k", "depends_on": ["b"]},
                {"name": "b", "kind": "k", "depends_on": ["a"]}
            ]}"#,
        )
        .unwrap_err();
        assert_eq!(field_of(&cycle), "jobs");
        assert!(cycle.message().contains("cycle"), "{}", cycle.message());

        let dangling =
            workflow(r#"{"jobs": [{"name": "a", "kind": "k", "depends_on": ["nope"]}]}"#)
                .unwrap_err();
        assert_eq!(field_of(&dangling), "jobs[0].depends_on[0]");

        let unnamed = workflow(r#"{"jobs": [{"kind": "k"}]}"#).unwrap_err();
        assert_eq!(field_of(&unnamed), "jobs[0].name");

        let repeated =
            workflow(r#"{"jobs": [{"name": "a", "kind": "k"}, {"name": "a", "kind": "k"}]}"#)
                .unwrap_err();
        assert_eq!(field_of(&repeated), "jobs[1].name");

        let empty = workflow(r#"{"jobs": []}"#).unwrap_err();
        assert_eq!(field_of(&empty), "jobs");

        let unknown =
            workflow(r#"{"jobs": [{"name": "a", "kind": "k", "after": []}]}"#).unwrap_err();
        assert_eq!(field_of(&unknown), "jobs[0].after");
    }

    /// `POST /v1/jobs` takes dependencies by id and refuses a name.
    #[test]
    fn a_single_job_depends_on_ids_and_has_no_name() {
        let parse = |body: &str| {
            crate::extract::parse_json::<EnqueueRequest>(body.as_bytes())
                .unwrap()
                .into_new_job(&Principal::insecure(), None)
        };
        let id = drover_core::JobId::new_v7();
        let job = parse(&format!(r#"{{"kind": "k", "depends_on": ["{id}"]}}"#)).unwrap();
        assert_eq!(job.depends_on, [id]);
        let bad = parse(r#"{"kind": "k", "depends_on": ["a"]}"#).unwrap_err();
        assert_eq!(field_of(&bad), "depends_on[0]");
        let twice = parse(&format!(
            r#"{{"kind": "k", "depends_on": ["{id}", "{id}"]}}"#
        ))
        .unwrap_err();
        assert_eq!(field_of(&twice), "depends_on[1]");
        let named = parse(r#"{"kind": "k", "name": "a"}"#).unwrap_err();
        assert_eq!(field_of(&named), "name");
    }
}

/// One audit record: an operator action (docs/audit.md).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditEntryView {
    /// Increasing with every record.
    pub id: i64,
    /// When, by the store's clock.
    pub at: DateTime<Utc>,
    /// Who: `token:` and the first 8 hex digits of the token's SHA-256, a command-line user,
    /// `anonymous` without authentication, or an embedding application's name.
    pub actor: String,
    /// The actor's tenant, else the tenant of the job acted on; null for an action of an
    /// all-tenant actor on no one job.
    pub tenant: Option<String>,
    /// `job.cancel`, `job.retry`, `job.requeue`, `job.delete`, `queue.pause`, `queue.resume`,
    /// `workflow.cancel`, `workflow.retry`, `limit.set`, `limit.clear`, `schedule.upsert`,
    /// `schedule.remove`, `jobs.prune`, `jobs.cancel`, `jobs.retry` or `jobs.delete`.
    pub action: String,
    /// What it acted on: ids, names, a policy, a schedule's timing, a prune's retention.
    #[schema(value_type = Object)]
    pub target: Value,
    /// How many jobs it touched.
    pub jobs: u64,
    /// `dashboard`, `api`, `cli` or `library`.
    pub source: String,
}

impl From<drover_core::AuditEntry> for AuditEntryView {
    fn from(e: drover_core::AuditEntry) -> Self {
        AuditEntryView {
            id: e.id,
            at: e.at,
            actor: e.actor,
            tenant: e.tenant.map(|t| t.to_string()),
            action: e.action.as_str().to_owned(),
            target: e.target,
            jobs: e.jobs,
            source: e.source.as_str().to_owned(),
        }
    }
}

/// A page of the audit log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditListResponse {
    /// Records, newest first.
    pub entries: Vec<AuditEntryView>,
    /// Pass as `cursor` to get the next page; null on the last page.
    pub next_cursor: Option<String>,
}

//! The web dashboard (docs/dashboard.md, docs/adr/0014-dashboard.md): server-rendered HTML
//! from minijinja templates compiled into the binary, beside the API on `drover serve` and
//! `drover dev --listen`.
//!
//! - Login: an API token posted once becomes a session (a random id in an `HttpOnly`,
//!   `SameSite=Strict` cookie; the token itself is not kept); logout ends it. Under
//!   `--insecure-no-auth` every visitor is an operator of every tenant and every page says so.
//! - Every read and action goes through the runner's `Client`, scoped like the API: a token of
//!   one tenant sees only its jobs (another tenant's job answers 404, by URL too), producers
//!   may cancel, operators retry; actions are audited with source `dashboard`.
//! - Actions are posted forms carrying the session's CSRF token, compared in constant time; a
//!   post without it (a cross-site form) is refused with 403.
//! - Everything rendered is escaped by the template engine (auto-escape of `.html`); the only
//!   script is `assets/live.js`, served from this origin (the Content-Security-Policy allows no
//!   other and no inline script): it refreshes the page's `data-live` elements while the tab is
//!   visible.
//! - The queue overview and each jobs list are read once for every open dashboard showing
//!   them ([`shared`]); an action forgets the kept reads, so its result shows at once.

mod charts;
mod shared;
mod timeline;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use drover_core::{
    ActivityMinute, AuditSource, BulkAction, BulkJobs, Error, JobDetails, JobId, JobKind, JobPage,
    JobState, ListAudit, ListJobs, QueueName, TenantId,
};
use minijinja::{context, Environment, Value};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use crate::auth::{AuthMode, Principal, Role, TenantScope};
use crate::ApiState;
use drover_runner::{Client, QueueOverview};
use shared::SharedReads;

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "drover_session";

/// How long a session lasts after its login: 12 hours.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Jobs per page of the jobs list.
const PAGE: u32 = 50;

/// Most jobs of its workflow, and most children, a job's page lists (the rest are a link to
/// the jobs list filtered by workflow or parent).
const RELATED_SHOWN: u32 = 100;

pub use shared::{FRESH_FOR, REST_FACTOR};

/// The security headers of every dashboard answer: scripts, styles, images, fetches and forms
/// from this origin only (no inline script), never framed, never cached.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

/// What the overview page shows: the queues, and the workers' activity of the last hour.
struct Overview {
    queues: QueueOverview,
    activity: Vec<ActivityMinute>,
    /// When it was read (this process's clock): the charts' hour ends there.
    read_at: chrono::DateTime<chrono::Utc>,
}

/// A logged-in browser.
#[derive(Clone)]
struct Session {
    principal: Principal,
    csrf: String,
    expires: Instant,
}

/// The dashboard's state: the API's (its `Client` and authentication), the sessions and the
/// templates.
#[derive(Clone)]
struct Dashboard {
    api: ApiState,
    sessions: Arc<Mutex<HashMap<String, Session>>>,
    templates: Arc<Environment<'static>>,
    /// The CSRF token of every visitor under `--insecure-no-auth` (no sessions there).
    insecure_csrf: String,
    /// The queue overview, read for every open dashboard together (one key).
    overview: Arc<SharedReads<Arc<Overview>>>,
    /// The jobs lists, by their query (the viewer's tenant included).
    lists: Arc<SharedReads<Arc<JobPage>>>,
}

/// 244 random bits as hex: session ids and CSRF tokens.
fn random_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn templates() -> Environment<'static> {
    let mut env = Environment::new();
    for (name, source) in [
        ("base.html", include_str!("templates/base.html")),
        ("login.html", include_str!("templates/login.html")),
        ("overview.html", include_str!("templates/overview.html")),
        ("jobs.html", include_str!("templates/jobs.html")),
        ("job.html", include_str!("templates/job.html")),
        ("workers.html", include_str!("templates/workers.html")),
        ("audit.html", include_str!("templates/audit.html")),
        ("schedules.html", include_str!("templates/schedules.html")),
        ("limits.html", include_str!("templates/limits.html")),
        ("bulk.html", include_str!("templates/bulk.html")),
    ] {
        env.add_template(name, source)
            .expect("the dashboard's templates parse");
    }
    env
}

/// The dashboard's routes, on the API's state: `/`, `/login`, `/logout`, `/jobs`,
/// `/jobs/{id}`, `/jobs/{id}/cancel`, `/jobs/{id}/retry`, `/jobs/{id}/delete`, `/jobs/bulk`
/// (a filter action's confirmation, and every bulk action), `/queues/{name}/pause`,
/// `/queues/{name}/resume`, `/workers`, `/schedules`, `/limits`, `/audit`,
/// `/assets/dashboard.css` and `/assets/live.js`. Merge it with
/// [`crate::router`] to serve both.
pub fn router(state: ApiState) -> Router {
    let dashboard = Dashboard {
        api: state,
        sessions: Arc::new(Mutex::new(HashMap::new())),
        templates: Arc::new(templates()),
        insecure_csrf: random_token(),
        overview: Arc::new(SharedReads::new()),
        lists: Arc::new(SharedReads::new()),
    };
    Router::new()
        .route("/", get(overview))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/jobs", get(jobs))
        .route("/jobs/{id}", get(job))
        .route("/jobs/{id}/cancel", post(cancel))
        .route("/jobs/{id}/retry", post(retry))
        .route("/jobs/{id}/delete", post(delete))
        .route("/jobs/bulk", get(bulk_confirm).post(bulk))
        .route("/queues/{name}/pause", post(pause_queue))
        .route("/queues/{name}/resume", post(resume_queue))
        .route("/workers", get(workers))
        .route("/schedules", get(schedules))
        .route("/limits", get(limits))
        .route("/audit", get(audit))
        .route("/assets/dashboard.css", get(stylesheet))
        .route("/assets/live.js", get(script))
        .layer(axum::middleware::from_fn(security_headers))
        .with_state(dashboard)
}

async fn security_headers(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/dashboard.css"),
    )
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/live.js"),
    )
}

/// Who is looking: a session, every visitor under `--insecure-no-auth`, or nobody.
struct Viewer {
    principal: Principal,
    csrf: String,
    insecure: bool,
}

impl Dashboard {
    fn insecure(&self) -> bool {
        matches!(self.api.auth(), AuthMode::InsecureNoAuth)
    }

    fn viewer(&self, headers: &HeaderMap) -> Option<Viewer> {
        if self.insecure() {
            return Some(Viewer {
                principal: Principal::insecure(),
                csrf: self.insecure_csrf.clone(),
                insecure: true,
            });
        }
        let id = session_cookie(headers)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let session = sessions.get(&id)?.clone();
        if session.expires <= Instant::now() {
            sessions.remove(&id);
            return None;
        }
        Some(Viewer {
            principal: session.principal,
            csrf: session.csrf,
            insecure: false,
        })
    }

    fn render(&self, name: &str, viewer: Option<&Viewer>, extra: Value) -> Response {
        let base = match viewer {
            Some(v) => context! {
                who => format!("{} ({}, {})", v.principal.name, v.principal.role.as_str(), scope_text(&v.principal.scope)),
                csrf => v.csrf,
                insecure => v.insecure,
            },
            None => context! { insecure => self.insecure() },
        };
        let rendered = self
            .templates
            .get_template(name)
            .and_then(|t| t.render(context! { ..base, ..extra }));
        match rendered {
            Ok(html) => Html(html).into_response(),
            Err(e) => {
                tracing::warn!(template = name, error = %e, "dashboard page failed to render");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the page failed to render",
                )
                    .into_response()
            }
        }
    }

    /// The queue overview and the last hour's activity, shared by every open dashboard.
    async fn queue_overview(&self) -> Result<Arc<Overview>, Error> {
        self.overview
            .get("", || async {
                let client = self.api.client();
                let read_at = chrono::Utc::now();
                let since = read_at - chrono::TimeDelta::minutes(charts::MINUTES);
                let (queues, activity) =
                    tokio::try_join!(client.queue_overview(), client.activity(since))?;
                Ok(Arc::new(Overview {
                    queues,
                    activity,
                    read_at,
                }))
            })
            .await
    }

    /// A page of jobs, shared by every open dashboard asking for the same page.
    async fn list(&self, query: ListJobs) -> Result<Arc<JobPage>, Error> {
        let key = serde_json::to_string(&query)
            .map_err(|e| Error::fatal(format!("a jobs list query as JSON: {e}")))?;
        self.lists
            .get(&key, || async {
                self.api.client().list(query).await.map(Arc::new)
            })
            .await
    }

    /// Forgets the kept reads after an action, so the next page shows its result.
    fn acted(&self) {
        self.overview.forget();
        self.lists.forget();
    }

    fn error_page(&self, viewer: Option<&Viewer>, status: StatusCode, message: &str) -> Response {
        let mut page = self.render(
            "overview.html",
            viewer,
            context! { notice => message, queues => Value::from(()) },
        );
        *page.status_mut() = status;
        page
    }

    fn store_error(&self, viewer: &Viewer, e: Error) -> Response {
        let status = match &e {
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::InvalidInput { .. } => StatusCode::BAD_REQUEST,
            Error::InvalidTransition { .. } | Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        self.error_page(Some(viewer), status, &e.to_string())
    }
}

fn scope_text(scope: &TenantScope) -> String {
    match scope {
        TenantScope::One(tenant) => format!("tenant {tenant}"),
        TenantScope::All => "every tenant".to_owned(),
    }
}

fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_owned())
}

fn to_login() -> Response {
    Redirect::to("/login").into_response()
}

async fn login_form(State(d): State<Dashboard>, headers: HeaderMap) -> Response {
    if d.viewer(&headers).is_some() {
        return Redirect::to("/").into_response();
    }
    d.render("login.html", None, context! {})
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(d): State<Dashboard>, Form(form): Form<LoginForm>) -> Response {
    let principal = match d.api.auth() {
        AuthMode::InsecureNoAuth => return Redirect::to("/").into_response(),
        AuthMode::Tokens(tokens) => tokens.authenticate(&form.token),
    };
    let Some(principal) = principal else {
        let mut page = d.render(
            "login.html",
            None,
            context! { error => "That token is not valid." },
        );
        *page.status_mut() = StatusCode::UNAUTHORIZED;
        return page;
    };
    let id = random_token();
    {
        let mut sessions = d.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        sessions.retain(|_, s| s.expires > now);
        sessions.insert(
            id.clone(),
            Session {
                principal,
                csrf: random_token(),
                expires: now + SESSION_LIFETIME,
            },
        );
    }
    let cookie = format!(
        "{SESSION_COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION_LIFETIME.as_secs()
    );
    let mut response = Redirect::to("/").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize, Default)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// True when the form carries the viewer's CSRF token.
fn csrf_ok(viewer: &Viewer, form: &CsrfForm) -> bool {
    !form.csrf.is_empty() && bool::from(form.csrf.as_bytes().ct_eq(viewer.csrf.as_bytes()))
}

/// The `Client` an action of `viewer` goes through (the viewer as actor, source `dashboard`),
/// once the form carries the viewer's CSRF token; else the refusal page, and nothing is done.
fn acting_client(d: &Dashboard, viewer: &Viewer, form: &CsrfForm) -> Result<Client, Box<Response>> {
    if !csrf_ok(viewer, form) {
        return Err(Box::new(d.error_page(
            Some(viewer),
            StatusCode::FORBIDDEN,
            "This form did not come from this dashboard; nothing was done.",
        )));
    }
    Ok(d.api
        .client()
        .clone()
        .with_actor(viewer.principal.actor(AuditSource::Dashboard)))
}

async fn logout(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    if !csrf_ok(&viewer, &form) {
        return d.error_page(
            Some(&viewer),
            StatusCode::FORBIDDEN,
            "This form did not come from this dashboard.",
        );
    }
    if let Some(id) = session_cookie(&headers) {
        d.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }
    let mut response = to_login();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("drover_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    response
}

async fn overview(State(d): State<Dashboard>, headers: HeaderMap) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    if viewer.principal.scope != TenantScope::All {
        return d.render(
            "overview.html",
            Some(&viewer),
            context! { queues => Value::from(()) },
        );
    }
    let overview = match d.queue_overview().await {
        Ok(overview) => overview,
        Err(e) => return d.store_error(&viewer, e),
    };
    let charts = charts::charts(&overview.activity, overview.read_at);
    let queues: Vec<Value> = overview
        .queues
        .queues
        .iter()
        .map(|q| {
            let counts: Vec<u64> = JobState::ALL.iter().map(|s| q.count(*s)).collect();
            context! {
                name => q.name.as_str(),
                query => percent(q.name.as_str()),
                paused => q.paused,
                counts => counts,
                ready => q.ready_text(),
                lag => q.lag_seconds().map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s")),
            }
        })
        .collect();
    let states: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
    let can_pause = viewer.principal.role == Role::Operator;
    d.render(
        "overview.html",
        Some(&viewer),
        context! { queues, states, can_pause, charts },
    )
}

/// Pauses or resumes a queue for an operator of every tenant (queues are shared by all
/// tenants), through the `Client` as the HTTP API does, audited with source `dashboard`.
async fn queue_action(
    d: Dashboard,
    headers: HeaderMap,
    name: String,
    form: CsrfForm,
    pause: bool,
) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    let client = match acting_client(&d, &viewer, &form) {
        Ok(client) => client,
        Err(refused) => return *refused,
    };
    if viewer.principal.role != Role::Operator || viewer.principal.scope != TenantScope::All {
        return d.error_page(
            Some(&viewer),
            StatusCode::FORBIDDEN,
            "Pausing and resuming a queue affect every tenant: they need an operator token of tenant *.",
        );
    }
    let queue = match QueueName::parse(&name) {
        Ok(queue) => queue,
        Err(e) => return d.store_error(&viewer, e),
    };
    let done = if pause {
        client.queue_pause(queue).await
    } else {
        client.queue_resume(queue).await
    };
    d.acted();
    match done {
        Ok(_) => Redirect::to("/").into_response(),
        Err(e) => d.store_error(&viewer, e),
    }
}

async fn pause_queue(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    queue_action(d, headers, name, form, true).await
}

async fn resume_queue(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    queue_action(d, headers, name, form, false).await
}

/// A page of cluster-wide state (workers, schedules, limits: shared by every tenant), for a
/// token of tenant `*`; another token gets the page with a note instead of the list.
async fn cluster_page<T, F>(
    d: Dashboard,
    headers: HeaderMap,
    template: &str,
    read: impl FnOnce(Client) -> F,
) -> Response
where
    T: serde::Serialize,
    F: std::future::Future<Output = Result<T, Error>>,
{
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    if viewer.principal.scope != TenantScope::All {
        return d.render(
            template,
            Some(&viewer),
            context! { items => Value::from(()) },
        );
    }
    match read(d.api.client().clone()).await {
        Ok(items) => d.render(
            template,
            Some(&viewer),
            context! { items => Value::from_serialize(&items) },
        ),
        Err(e) => d.store_error(&viewer, e),
    }
}

async fn workers(State(d): State<Dashboard>, headers: HeaderMap) -> Response {
    cluster_page(d, headers, "workers.html", |client| async move {
        client.workers().await
    })
    .await
}

async fn schedules(State(d): State<Dashboard>, headers: HeaderMap) -> Response {
    cluster_page(d, headers, "schedules.html", |client| async move {
        client.schedules_list().await
    })
    .await
}

async fn limits(State(d): State<Dashboard>, headers: HeaderMap) -> Response {
    cluster_page(d, headers, "limits.html", |client| async move {
        client.limits().await
    })
    .await
}

#[derive(Deserialize, Default)]
struct AuditFilter {
    #[serde(default)]
    before: String,
}

/// The audit log, newest first: every tenant's records for tenant `*`, else the viewer's
/// tenant's, as `GET /v1/audit` scopes them.
async fn audit(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Query(filter): Query<AuditFilter>,
) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    let mut query = ListAudit {
        limit: PAGE,
        ..ListAudit::default()
    };
    if let TenantScope::One(tenant) = &viewer.principal.scope {
        query.tenant = Some(tenant.clone());
    }
    if !filter.before.is_empty() {
        match filter.before.parse::<i64>() {
            Ok(id) if id > 0 => query.before = Some(id),
            _ => {
                return d.error_page(
                    Some(&viewer),
                    StatusCode::BAD_REQUEST,
                    "before: must be the id of an audit record, as the Older link gives it.",
                )
            }
        }
    }
    let page = match d.api.client().audit(query).await {
        Ok(page) => page,
        Err(e) => return d.store_error(&viewer, e),
    };
    let entries: Vec<Value> = page
        .entries
        .iter()
        .map(|entry| {
            context! {
                at => entry.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                actor => entry.actor.as_str(),
                tenant => entry.tenant.as_ref().map_or("*", |t| t.as_str()),
                action => Value::from_serialize(entry.action),
                target => entry.target.to_string(),
                jobs => entry.jobs,
                source => Value::from_serialize(entry.source),
            }
        })
        .collect();
    d.render(
        "audit.html",
        Some(&viewer),
        context! { entries, next => page.next },
    )
}

#[derive(Deserialize, Default)]
struct JobFilter {
    #[serde(default)]
    state: String,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    workflow: String,
    #[serde(default)]
    parent: String,
    /// A JSON object the jobs' meta must contain.
    #[serde(default)]
    meta: String,
    /// A JSON object the jobs' args must contain.
    #[serde(default)]
    args: String,
    #[serde(default)]
    before: String,
}

async fn jobs(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Query(filter): Query<JobFilter>,
) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    let mut query = match filter_query(&filter) {
        Ok(query) => query,
        Err(e) => return d.store_error(&viewer, e),
    };
    query.limit = PAGE;
    query.details = JobDetails::NONE;
    let parsed: Result<(), Error> = (|| {
        if !filter.before.is_empty() {
            query.before = Some(job_id(&filter.before, "before")?);
        }
        Ok(())
    })();
    if let Err(e) = parsed {
        return d.store_error(&viewer, e);
    }
    if let TenantScope::One(tenant) = &viewer.principal.scope {
        if query.tenant.as_ref().is_some_and(|asked| asked != tenant) {
            return d.error_page(
                Some(&viewer),
                StatusCode::NOT_FOUND,
                &format!("This token sees the jobs of tenant {tenant} only."),
            );
        }
        query.tenant = Some(tenant.clone());
    }
    let page = match d.list(query).await {
        Ok(page) => page,
        Err(e) => return d.store_error(&viewer, e),
    };
    let next = page.next.map(|id| {
        let mut pairs = url_pairs(&filter);
        pairs.push(("before", id.to_string()));
        query_string(&pairs)
    });
    // This page again, for its live updates.
    let live_url = {
        let mut pairs = url_pairs(&filter);
        if !filter.before.is_empty() {
            pairs.push(("before", filter.before.clone()));
        }
        match query_string(&pairs) {
            query if query.is_empty() => "/jobs".to_owned(),
            query => format!("/jobs?{query}"),
        }
    };
    let states: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
    let filter_query = query_string(&url_pairs(&filter));
    d.render(
        "jobs.html",
        Some(&viewer),
        context! {
            jobs => Value::from_serialize(&page.jobs),
            next,
            live_url,
            states,
            filter => context! {
                state => filter.state,
                queue => filter.queue,
                kind => filter.kind,
                tenant => filter.tenant,
                workflow => filter.workflow,
                parent => filter.parent,
                meta => filter.meta,
                args => filter.args,
            },
            every_tenant => viewer.principal.scope == TenantScope::All,
            operator => viewer.principal.role == Role::Operator,
            filter_query,
        },
    )
}

/// A job id of a form or query field, or `InvalidInput` naming `field`.
fn job_id(text: &str, field: &str) -> Result<JobId, Error> {
    text.parse::<JobId>()
        .map_err(|_| Error::invalid(field, "must be a job id (a UUID)"))
}

/// The store filter of the jobs list's filter fields (empty ones unset), without its page.
fn filter_query(filter: &JobFilter) -> Result<ListJobs, Error> {
    let mut query = ListJobs::default();
    if !filter.state.is_empty() {
        query.state = Some(filter.state.parse()?);
    }
    if !filter.queue.is_empty() {
        query.queue = Some(QueueName::parse(filter.queue.as_str())?);
    }
    if !filter.kind.is_empty() {
        query.kind = Some(JobKind::parse(filter.kind.as_str())?);
    }
    if !filter.tenant.is_empty() {
        query.tenant = Some(TenantId::parse(filter.tenant.as_str())?);
    }
    if !filter.workflow.is_empty() {
        query.workflow = Some(filter.workflow.parse()?);
    }
    if !filter.parent.is_empty() {
        query.parent = Some(job_id(&filter.parent, "parent")?);
    }
    for (field, text, slot) in [
        ("meta", &filter.meta, &mut query.meta),
        ("args", &filter.args, &mut query.args),
    ] {
        if !text.is_empty() {
            *slot = Some(serde_json::from_str(text).map_err(|_| {
                Error::invalid(
                    field,
                    r#"must be a JSON object such as {"customer": "acme"}"#,
                )
            })?);
        }
    }
    Ok(query)
}

/// `text` percent-encoded for a query string.
fn percent(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// `pairs` as a query string, each value percent-encoded.
fn query_string(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", percent(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn url_pairs(filter: &JobFilter) -> Vec<(&'static str, String)> {
    [
        ("state", &filter.state),
        ("queue", &filter.queue),
        ("kind", &filter.kind),
        ("tenant", &filter.tenant),
        ("workflow", &filter.workflow),
        ("parent", &filter.parent),
        ("meta", &filter.meta),
        ("args", &filter.args),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k, v.clone()))
    .collect()
}

/// The job `id` as `viewer` may see it: another tenant's job is "not found".
async fn visible_job(
    d: &Dashboard,
    viewer: &Viewer,
    id: &str,
) -> Result<drover_core::Job, Response> {
    let not_found = || d.error_page(Some(viewer), StatusCode::NOT_FOUND, "No such job.");
    let Ok(id) = id.parse::<JobId>() else {
        return Err(not_found());
    };
    match d.api.client().get(id).await {
        Ok(job) if viewer.principal.scope.allows(&job.tenant) => Ok(job),
        Ok(_) | Err(Error::NotFound { .. }) => Err(not_found()),
        Err(e) => Err(d.store_error(viewer, e)),
    }
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

async fn job(State(d): State<Dashboard>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    let job = match visible_job(&d, &viewer, &id).await {
        Ok(job) => job,
        Err(page) => return page,
    };
    let related = |workflow, parent| ListJobs {
        workflow,
        parent,
        // A workflow's jobs and a parent's children are of its tenant; kept so regardless.
        tenant: Some(job.tenant.clone()),
        limit: RELATED_SHOWN,
        details: JobDetails::NONE,
        ..ListJobs::default()
    };
    let members = match job.workflow_id {
        Some(workflow) => match d.api.client().list(related(Some(workflow), None)).await {
            Ok(page) => Some(page),
            Err(e) => return d.store_error(&viewer, e),
        },
        None => None,
    };
    let children = match d.api.client().list(related(None, Some(job.id))).await {
        Ok(page) => page,
        Err(e) => return d.store_error(&viewer, e),
    };
    // The names of the listed workflow jobs, to show each one's dependencies by name.
    let names: HashMap<JobId, String> = members
        .iter()
        .flat_map(|page| &page.jobs)
        .map(|j| (j.id, j.name.clone().unwrap_or_else(|| j.id.to_string())))
        .collect();
    let related_rows = |jobs: &[drover_core::Job]| -> Vec<Value> {
        jobs.iter()
            .map(|j| {
                let waits_for: Vec<Value> = j
                    .depends_on
                    .iter()
                    .map(|dependency| context! {
                        id => dependency.to_string(),
                        label => names.get(dependency).cloned().unwrap_or_else(|| dependency.to_string()),
                    })
                    .collect();
                context! {
                    id => j.id.to_string(),
                    name => j.name.clone().unwrap_or_default(),
                    kind => j.kind.as_str(),
                    state => j.state.as_str(),
                    waits_for,
                    this => j.id == job.id,
                }
            })
            .collect()
    };
    let workflow = members.as_ref().map(|page| {
        context! {
            id => job.workflow_id.map(|w| w.to_string()),
            jobs => related_rows(&page.jobs),
            more => page.next.is_some(),
        }
    });
    let children = (!children.jobs.is_empty()).then(|| {
        context! {
            jobs => related_rows(&children.jobs),
            more => children.next.is_some(),
        }
    });
    d.render(
        "job.html",
        Some(&viewer),
        context! {
            job => Value::from_serialize(&job),
            args => pretty(&job.args),
            meta => pretty(&job.meta),
            result => job.result.as_ref().map(pretty),
            // Progress with a step history shows as a timeline, any other as it is.
            timeline => timeline::timeline(&job),
            progress => job.progress.as_ref().map(pretty),
            workflow,
            children,
            can_cancel => !job.state.is_terminal(),
            can_retry => viewer.principal.role == Role::Operator && job.state.is_terminal(),
            can_delete => viewer.principal.role == Role::Operator
                && !matches!(job.state, JobState::Running | JobState::Reconciling),
        },
    )
}

/// Which action a form posts.
#[derive(Clone, Copy)]
enum Action {
    Cancel,
    Retry,
    Delete,
}

async fn act(
    d: Dashboard,
    headers: HeaderMap,
    id: String,
    form: CsrfForm,
    action: Action,
) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    let client = match acting_client(&d, &viewer, &form) {
        Ok(client) => client,
        Err(refused) => return *refused,
    };
    if !matches!(action, Action::Cancel) && viewer.principal.role != Role::Operator {
        return d.error_page(
            Some(&viewer),
            StatusCode::FORBIDDEN,
            "Retrying and deleting need an operator token.",
        );
    }
    let job = match visible_job(&d, &viewer, &id).await {
        Ok(job) => job,
        Err(page) => return page,
    };
    let done = match action {
        Action::Cancel => client.cancel(job.id).await.map(drop),
        Action::Retry => client.retry(job.id).await.map(drop),
        Action::Delete => client.delete(job.id).await.map(drop),
    };
    d.acted();
    match done {
        Ok(()) if matches!(action, Action::Delete) => Redirect::to("/jobs").into_response(),
        Ok(()) => Redirect::to(&format!("/jobs/{}", job.id)).into_response(),
        Err(e) => d.store_error(&viewer, e),
    }
}

async fn cancel(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    act(d, headers, id, form, Action::Cancel).await
}

async fn retry(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    act(d, headers, id, form, Action::Retry).await
}

async fn delete(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    act(d, headers, id, form, Action::Delete).await
}

/// The refusal page of a bulk `action` the viewer's role may not take (retry and delete need
/// an operator), or none.
fn bulk_refused(d: &Dashboard, viewer: &Viewer, action: BulkAction) -> Option<Response> {
    (action != BulkAction::Cancel && viewer.principal.role != Role::Operator).then(|| {
        d.error_page(
            Some(viewer),
            StatusCode::FORBIDDEN,
            &format!("A bulk {action} needs an operator token."),
        )
    })
}

/// The query of the confirmation page of a bulk action on a filter: the action and the jobs
/// list's filter fields.
#[derive(Deserialize)]
struct BulkQuery {
    #[serde(default)]
    action: String,
    #[serde(flatten)]
    filter: JobFilter,
}

/// `GET /jobs/bulk?action=...&<filter>`: how many jobs the action would reach (a bounded
/// count, [`Client::bulk_preview`]), and the form that runs it. Changes nothing.
async fn bulk_confirm(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Query(query): Query<BulkQuery>,
) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    let prepared = query
        .action
        .parse::<BulkAction>()
        .and_then(|action| Ok((action, filter_query(&query.filter)?)));
    let (action, filter) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return d.store_error(&viewer, e),
    };
    if let Some(refused) = bulk_refused(&d, &viewer, action) {
        return refused;
    }
    let client = d
        .api
        .client()
        .clone()
        .with_actor(viewer.principal.actor(AuditSource::Dashboard));
    let preview = match client.bulk_preview(BulkJobs::filter(action, filter)).await {
        Ok(preview) => preview,
        Err(e) => return d.store_error(&viewer, e),
    };
    let pairs = url_pairs(&query.filter);
    let back = match query_string(&pairs) {
        q if q.is_empty() => "/jobs".to_owned(),
        q => format!("/jobs?{q}"),
    };
    let fields: Vec<Value> = pairs
        .iter()
        .map(|(name, value)| context! { name => *name, value => value })
        .collect();
    d.render(
        "bulk.html",
        Some(&viewer),
        context! {
            action => action.as_str(),
            matched => preview.matched,
            more => preview.more,
            fields,
            back,
        },
    )
}

/// The fields of a bulk action's form: the CSRF token, the action, and either the ids of the
/// jobs ticked in the list (`ids`, repeated) or the filter (`scope=filter` and the filter's
/// fields). Read by hand: a repeated field is not a serde sequence.
#[derive(Default)]
struct BulkForm {
    csrf: CsrfForm,
    action: String,
    ids: Vec<String>,
    by_filter: bool,
    filter: JobFilter,
}

impl BulkForm {
    fn parse(body: &[u8]) -> BulkForm {
        let mut form = BulkForm::default();
        for pair in body.split(|b| *b == b'&') {
            let mut parts = pair.splitn(2, |b| *b == b'=');
            let decode = |raw: Option<&[u8]>| {
                let spaced: Vec<u8> = raw
                    .unwrap_or_default()
                    .iter()
                    .map(|b| if *b == b'+' { b' ' } else { *b })
                    .collect();
                percent_encoding::percent_decode(&spaced)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            let (name, value) = (decode(parts.next()), decode(parts.next()));
            match name.as_str() {
                "csrf" => form.csrf.csrf = value,
                "action" => form.action = value,
                "ids" => form.ids.push(value),
                "scope" => form.by_filter = value == "filter",
                "state" => form.filter.state = value,
                "queue" => form.filter.queue = value,
                "kind" => form.filter.kind = value,
                "tenant" => form.filter.tenant = value,
                "workflow" => form.filter.workflow = value,
                "parent" => form.filter.parent = value,
                "meta" => form.filter.meta = value,
                "args" => form.filter.args = value,
                _ => {}
            }
        }
        form
    }
}

/// `POST /jobs/bulk`: runs a bulk action on the ticked jobs or on a filter (after its
/// confirmation page) through the viewer's `Client`, and shows what it did.
async fn bulk(State(d): State<Dashboard>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let Some(viewer) = d.viewer(&headers) else {
        return to_login();
    };
    let form = BulkForm::parse(&body);
    let client = match acting_client(&d, &viewer, &form.csrf) {
        Ok(client) => client,
        Err(refused) => return *refused,
    };
    let prepared = form.action.parse::<BulkAction>().and_then(|action| {
        let bulk = if form.by_filter {
            BulkJobs::filter(action, filter_query(&form.filter)?)
        } else {
            let ids = form
                .ids
                .iter()
                .map(|id| job_id(id, "ids"))
                .collect::<Result<Vec<_>, _>>()?;
            if ids.is_empty() {
                return Err(Error::invalid(
                    "ids",
                    "tick at least one job, or act on every job the filter matches",
                ));
            }
            BulkJobs::ids(action, ids)
        };
        Ok((action, bulk))
    });
    let (action, bulk) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return d.store_error(&viewer, e),
    };
    if let Some(refused) = bulk_refused(&d, &viewer, action) {
        return refused;
    }
    let outcome = client.bulk(bulk).await;
    d.acted();
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => return d.store_error(&viewer, e),
    };
    let back = match query_string(&url_pairs(&form.filter)) {
        q if q.is_empty() => "/jobs".to_owned(),
        q => format!("/jobs?{q}"),
    };
    d.render(
        "bulk.html",
        Some(&viewer),
        context! {
            action => action.as_str(),
            outcome => Value::from_serialize(outcome),
            back,
        },
    )
}

//! The web dashboard over real HTTP on the memory store (docs/dashboard.md): login with a
//! token into an `HttpOnly`, `SameSite=Strict` session, security headers and no script,
//! hostile text rendered as text, tenant scoping by URL, CSRF refusal of a cross-site form,
//! queue pause and resume for operators of every tenant, and actions audited with source
//! `dashboard`.

use std::sync::Arc;
use std::time::Duration;

use drover_core::{
    ActivityMinute, AuditSource, ClaimJobs, Finish, HeartbeatItem, HeartbeatJobs, JobState,
    JobStore, ListAudit, NewJob, QueueName, Retry, StoreConfig, TenantId, WorkerId,
};
use drover_http::auth::token_fingerprint;
use drover_http::{ApiConfig, ApiState, ApiTokens, AuthMode};
use drover_store_memory::MemoryStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const OPERATOR: &str = "dash-operator-secret-01";
const PRODUCER_A: &str = "dash-producer-a-secret-1";

/// A server of the API and the dashboard on a free port.
struct Server {
    base: String,
    store: Arc<dyn JobStore>,
    http: reqwest::Client,
    stop: CancellationToken,
}

impl Server {
    async fn start(auth: AuthMode) -> Server {
        let store: Arc<dyn JobStore> = Arc::new(MemoryStore::new(StoreConfig::default()));
        let state = ApiState::new(Arc::clone(&store), auth, ApiConfig::default(), None);
        let routes =
            drover_http::router(state.clone()).merge(drover_http::dashboard::router(state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        tokio::spawn(drover_http::serve(listener, routes, stop.clone()));
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Server {
            base,
            store,
            http,
            stop,
        }
    }

    async fn with_tokens() -> Server {
        let tokens = ApiTokens::parse(&format!(
            "{OPERATOR}:*:operator,{PRODUCER_A}:tenant-a:producer"
        ))
        .unwrap();
        Server::start(AuthMode::Tokens(tokens)).await
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> reqwest::Response {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = cookie {
            request = request.header("Cookie", cookie);
        }
        request.send().await.unwrap()
    }

    /// The body of the page at `path`.
    async fn page(&self, path: &str, cookie: Option<&str>) -> String {
        self.get(path, cookie).await.text().await.unwrap()
    }

    async fn post(
        &self,
        path: &str,
        cookie: Option<&str>,
        form: &[(&str, &str)],
    ) -> reqwest::Response {
        let body: String = form
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(cookie) = cookie {
            request = request.header("Cookie", cookie);
        }
        request.send().await.unwrap()
    }

    /// Logs in with `token`; returns the `Cookie` header value of the session.
    async fn login(&self, token: &str) -> String {
        let answer = self.post("/login", None, &[("token", token)]).await;
        assert_eq!(answer.status(), 303);
        let set = answer.headers()["set-cookie"].to_str().unwrap().to_owned();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        set.split(';').next().unwrap().to_owned()
    }

    async fn enqueue(&self, job: NewJob) -> drover_core::Job {
        self.store.job_enqueue(job).await.unwrap().job
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The page's one script is the dashboard's own, by URL: nothing inline.
fn assert_only_the_live_script(page: &str) {
    let tag = "<script src=\"/assets/live.js\" defer></script>";
    assert_eq!(page.to_lowercase().matches("<script").count(), 1, "{page}");
    assert!(page.contains(tag), "{page}");
}

/// The URL the element of `id` refreshes itself from (its `data-live`).
fn live_url(page: &str, id: &str) -> Option<String> {
    let start = page.find(&format!("<div id=\"{id}\" data-live=\""))?;
    let rest = &page[start..];
    let from = rest.find("data-live=\"")? + "data-live=\"".len();
    let to = from + rest[from..].find('"')?;
    // As the browser reads the attribute: minijinja escapes `/` and `&`.
    Some(rest[from..to].replace("&#x2f;", "/").replace("&amp;", "&"))
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The CSRF token a page's forms carry.
fn csrf_of(page: &str) -> String {
    let start = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token")
        + "name=\"csrf\" value=\"".len();
    page[start..].split('"').next().unwrap().to_owned()
}

fn job(kind: &str, args: serde_json::Value) -> NewJob {
    NewJob::new(drover_core::JobKind::parse(kind).unwrap(), args)
}

/// Without a session every page sends the browser to the login form; a bad token is refused
/// without a cookie; a good one opens a session whose pages carry the security headers and
/// no script; logout ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_opens_a_session_and_logout_ends_it() {
    let server = Server::with_tokens().await;
    server
        .enqueue(job("report.build", json!({})).with_queue(QueueName::parse("mail").unwrap()))
        .await;
    for path in ["/", "/jobs"] {
        let answer = server.get(path, None).await;
        assert_eq!(answer.status(), 303, "{path}");
        assert_eq!(answer.headers()["location"], "/login");
    }
    let form = server.get("/login", None).await;
    assert_eq!(form.status(), 200);
    let headers = form.headers().clone();
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe"),
        "scripts from this origin only, none inline: {csp}"
    );
    assert_eq!(headers["x-frame-options"], "DENY");
    let bad = server
        .post("/login", None, &[("token", "not-a-token-0000000000")])
        .await;
    assert_eq!(bad.status(), 401);
    assert!(bad.headers().get("set-cookie").is_none());

    let cookie = server.login(OPERATOR).await;
    let overview = server.get("/", Some(&cookie)).await;
    assert_eq!(overview.status(), 200);
    let page = overview.text().await.unwrap();
    assert!(
        page.contains("id=\"queues\"") && page.contains(">mail</a>"),
        "{page}"
    );
    assert!(page.contains(&token_fingerprint(OPERATOR)), "{page}");
    assert!(!page.contains(OPERATOR), "the token is never shown");
    assert_only_the_live_script(&page);
    for (query, shown) in [
        ("state=queued", true),
        ("state=failed", false),
        ("kind=report.build", true),
    ] {
        let list = server.get(&format!("/jobs?{query}"), Some(&cookie)).await;
        assert_eq!(list.status(), 200, "{query}");
        let list = list.text().await.unwrap();
        assert_eq!(list.contains("report.build</td>"), shown, "{query}: {list}");
    }
    let bad = server.get("/jobs?state=bogus", Some(&cookie)).await;
    assert_eq!(bad.status(), 400);
    let css = server.get("/assets/dashboard.css", None).await;
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");

    let csrf = csrf_of(&page);
    let out = server
        .post("/logout", Some(&cookie), &[("csrf", &csrf)])
        .await;
    assert_eq!(out.status(), 303);
    assert!(out.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    assert_eq!(
        server.get("/", Some(&cookie)).await.status(),
        303,
        "the session ended"
    );
}

/// Args, meta, an error message and a kind with markup, quotes and control characters show
/// as text: escaped, never as elements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_renders_as_text() {
    let server = Server::with_tokens().await;
    let hostile = "<script>alert(1)</script>\"'<img src=x onerror=alert(2)>\u{202e}";
    let mut new = job("evil.kind", json!({ "payload": hostile })).with_max_attempts(1);
    new.meta = json!({ "note": hostile });
    let created = server.enqueue(new).await;
    let claimed = server
        .store
        .jobs_claim(ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: vec![QueueName::default_queue()],
            kinds: vec![created.kind.clone()],
            limit: 1,
            start: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap()
        .jobs;
    // A step named with markup, in the timeline and as the latest detail.
    beat(
        &server,
        &claimed[0],
        json!({
            "step": hostile,
            "detail": hostile,
            "steps": [{"step": hostile, "at": "2026-12-01T10:00:00.000Z"}],
        }),
    )
    .await;
    server
        .store
        .job_finish(
            created.id,
            claimed[0].fencing_token,
            Finish::Failed {
                message: hostile.to_owned(),
                retry: Retry::After(Duration::ZERO),
            },
        )
        .await
        .unwrap();
    let cookie = server.login(OPERATOR).await;
    for path in [format!("/jobs/{}", created.id), "/jobs".to_owned()] {
        let answer = server.get(&path, Some(&cookie)).await;
        assert_eq!(answer.status(), 200, "{path}");
        let page = answer.text().await.unwrap();
        assert!(!page.contains("<script>alert"), "{path}: {page}");
        assert!(!page.contains("<img src=x"), "{path}: {page}");
        if path.starts_with("/jobs/") {
            assert!(
                page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
                "{page}"
            );
            assert!(
                page.contains("&lt;img src=x onerror=alert(2)&gt;"),
                "{page}"
            );
            assert!(
                page.contains("id=\"retry\""),
                "a failed job can be retried: {page}"
            );
            assert!(
                page.contains(
                    "<span class=\"step text\">&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"
                ),
                "the step's name as text: {page}"
            );
        }
    }
}

/// Saves `progress` for `job` (claimed) as a worker's heartbeat does.
async fn beat(server: &Server, job: &drover_core::Job, progress: serde_json::Value) {
    server
        .store
        .jobs_heartbeat(HeartbeatJobs {
            lease: Duration::from_secs(60),
            jobs: vec![HeartbeatItem {
                id: job.id,
                token: job.fencing_token,
                meta: None,
                progress: Some(progress),
                started: None,
            }],
        })
        .await
        .unwrap();
}

/// The text of the element of `id` (whose start tag ends in `>`) up to `end`.
fn element<'a>(page: &'a str, id: &str, end: &str) -> &'a str {
    let start = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}: {page}"));
    let rest = &page[start..];
    &rest[..rest
        .find(end)
        .unwrap_or_else(|| panic!("#{id} never ends: {page}"))]
}

/// The entries of the timeline `#timeline` as text: time, step and length, tags removed.
fn timeline_entries(page: &str) -> Vec<String> {
    element(page, "timeline", "</ol>")
        .split("<li")
        .skip(1)
        .map(|entry| {
            let mut text = String::new();
            let mut in_tag = true; // the rest of the `<li ...>` tag
            for c in entry.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => in_tag = false,
                    _ if !in_tag => text.push(c),
                    _ => {}
                }
            }
            text.trim().to_owned()
        })
        .collect()
}

/// A job whose progress has a step history (`JobContext::step`'s shape) shows it as a
/// timeline in order: each step's time, name and length (until the next step; the last one
/// ongoing while the job runs, until its finish once it finished), earlier dropped steps
/// counted, then the latest detail; progress of any other shape shows as JSON, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_page_shows_step_progress_as_a_timeline() {
    let server = Server::with_tokens().await;
    let kind = drover_core::JobKind::parse("report.build").unwrap();
    for _ in 0..3 {
        server.enqueue(job("report.build", json!({}))).await;
    }
    let claimed = server
        .store
        .jobs_claim(ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: vec![QueueName::default_queue()],
            kinds: vec![kind],
            limit: 3,
            start: 3,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap()
        .jobs;
    let [stepped, finished, other] = &claimed[..] else {
        panic!("three jobs claimed: {claimed:?}");
    };
    let steps = json!([
        {"step": "fetch", "at": "2026-12-01T10:00:01.000Z"},
        {"step": "parse", "at": "2026-12-01T10:00:02.500Z"},
        {"step": "upload", "at": "2026-12-01T10:00:02.750Z"},
    ]);
    beat(
        &server,
        stepped,
        json!({"step": "upload", "detail": {"done": 3, "of": 10}, "steps": steps, "steps_dropped": 7}),
    )
    .await;
    // The last step two hours before the job finishes (by the store's clock: now).
    let now = chrono::Utc::now();
    let ago = |seconds: i64| {
        (now - chrono::Duration::seconds(seconds))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    beat(
        &server,
        finished,
        json!({"step": "send", "detail": null, "steps": [
            {"step": "render", "at": ago(7200 + 90)},
            {"step": "send", "at": ago(7200)},
        ]}),
    )
    .await;
    server
        .store
        .job_finish(
            finished.id,
            finished.fencing_token,
            Finish::Succeeded { result: None },
        )
        .await
        .unwrap();
    beat(
        &server,
        other,
        json!({"step": "render", "detail": "page 1 of 2"}),
    )
    .await;
    let cookie = server.login(OPERATOR).await;

    let page = server
        .page(&format!("/jobs/{}", stepped.id), Some(&cookie))
        .await;
    assert_eq!(
        timeline_entries(&page),
        [
            "2026-12-01T10:00:01.000Z fetch 1.5 s",
            "2026-12-01T10:00:02.500Z parse 250 ms",
            "2026-12-01T10:00:02.750Z upload ongoing",
        ],
        "{page}"
    );
    assert!(
        page.contains("start=\"8\""),
        "numbered after the dropped: {page}"
    );
    assert!(
        element(&page, "steps-dropped", "</p>").contains("7 earlier step(s) not kept"),
        "{page}"
    );
    let detail = element(&page, "progress-detail", "</pre>");
    assert!(
        detail.contains("&quot;done&quot;: 3,"),
        "pretty JSON: {detail}"
    );
    assert!(!page.contains("id=\"progress\""), "{page}");
    assert_only_the_live_script(&page);

    let page = server
        .page(&format!("/jobs/{}", finished.id), Some(&cookie))
        .await;
    let entries = timeline_entries(&page);
    assert_eq!(entries.len(), 2, "{page}");
    assert!(entries[0].ends_with("render 1 min 30 s"), "{entries:?}");
    assert!(entries[1].ends_with("send 2 h 0 min"), "{entries:?}");
    assert!(!page.contains("id=\"steps-dropped\""), "{page}");

    let page = server
        .page(&format!("/jobs/{}", other.id), Some(&cookie))
        .await;
    assert!(!page.contains("id=\"timeline\""), "{page}");
    let progress = element(&page, "progress", "</pre>");
    assert!(
        progress.contains("&quot;step&quot;: &quot;render&quot;")
            && progress.contains("&quot;detail&quot;: &quot;page 1 of 2&quot;"),
        "{progress}"
    );
}

/// A producer of one tenant sees its jobs only (another tenant's job answers 404 by URL and
/// is not listed); a form without the session's CSRF token (a cross-site post) is refused and
/// changes nothing; with it the cancel goes through the Client and is audited with source
/// `dashboard`; a producer may not retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_scoped_and_actions_need_the_csrf_token() {
    let server = Server::with_tokens().await;
    let mut own = job("mine", json!({}));
    own.tenant = TenantId::parse("tenant-a").unwrap();
    let own = server.enqueue(own).await;
    let mut other = job("theirs", json!({}));
    other.tenant = TenantId::parse("tenant-b").unwrap();
    let other = server.enqueue(other).await;

    let cookie = server.login(PRODUCER_A).await;
    let list = server.page("/jobs", Some(&cookie)).await;
    assert!(list.contains(&own.id.to_string()), "{list}");
    assert!(!list.contains(&other.id.to_string()), "{list}");
    let foreign = server
        .get(&format!("/jobs/{}", other.id), Some(&cookie))
        .await;
    assert_eq!(foreign.status(), 404);
    let overview = server.page("/", Some(&cookie)).await;
    assert!(overview.contains("need a token of tenant *"), "{overview}");

    let page = server
        .page(&format!("/jobs/{}", own.id), Some(&cookie))
        .await;
    let csrf = csrf_of(&page);
    let cancel = format!("/jobs/{}/cancel", own.id);
    for form in [&[][..], &[("csrf", "forged")][..]] {
        let refused = server.post(&cancel, Some(&cookie), form).await;
        assert_eq!(refused.status(), 403, "{form:?}");
    }
    let foreign_cancel = server
        .post(
            &format!("/jobs/{}/cancel", other.id),
            Some(&cookie),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(foreign_cancel.status(), 404);
    assert_eq!(
        server.store.job_get(own.id).await.unwrap().state,
        JobState::Queued
    );
    assert_eq!(
        server.store.job_get(other.id).await.unwrap().state,
        JobState::Queued
    );

    let done = server
        .post(&cancel, Some(&cookie), &[("csrf", &csrf)])
        .await;
    assert_eq!(done.status(), 303);
    assert_eq!(
        server.store.job_get(own.id).await.unwrap().state,
        JobState::Cancelled
    );
    let retry = server
        .post(
            &format!("/jobs/{}/retry", own.id),
            Some(&cookie),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(retry.status(), 403, "a producer may not retry");

    let records = server
        .store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].source, AuditSource::Dashboard);
    assert_eq!(records[0].actor, token_fingerprint(PRODUCER_A));
    assert_eq!(
        records[0].tenant,
        Some(TenantId::parse("tenant-a").unwrap())
    );
}

/// Is `queue` paused in the store?
/// The overview charts the workers' activity of the last hour: runs ended per minute by
/// outcome, queue wait and run time; minutes older than the hour are left out, and a tenant's
/// token sees no charts (the activity spans every tenant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_charts_the_last_hour_of_activity() {
    let server = Server::with_tokens().await;
    let now = drover_core::activity::minute_of(server.store.now().await.unwrap());
    let mut recent = ActivityMinute::new(now, QueueName::parse("mail").unwrap());
    recent.succeeded = 40;
    recent.failed = 2;
    for _ in 0..42 {
        recent.wait.record(Duration::from_millis(30));
        recent.duration.record(Duration::from_millis(700));
    }
    let mut old = ActivityMinute::new(
        now - chrono::TimeDelta::minutes(90),
        QueueName::parse("mail").unwrap(),
    );
    old.succeeded = 1_000;
    server
        .store
        .activity_record(vec![old, recent])
        .await
        .unwrap();

    let cookie = server.login(OPERATOR).await;
    let page = server.page("/", Some(&cookie)).await;
    assert_only_the_live_script(&page);
    assert!(
        page.contains("<span id=\"runs-ended\">42</span> ended: 40 succeeded, 0 retried, 2 failed"),
        "{page}"
    );
    assert!(
        page.contains("median ≤ 50 ms, 95th percentile ≤ 50 ms"),
        "the wait: {page}"
    );
    assert!(
        page.contains("median ≤ 1 s, 95th percentile ≤ 1 s"),
        "the run time: {page}"
    );
    assert!(
        page.contains(&format!(
            "<title>{}: 42 ended (40 succeeded",
            now.format("%H:%M")
        )),
        "one bar for the minute: {page}"
    );
    assert_eq!(page.matches("<g class=\"bar\">").count(), 1, "{page}");
    assert_eq!(page.matches("<g class=\"range\">").count(), 2, "{page}");
    // The charts are part of the live region.
    let live = page.split("id=\"overview-live\"").nth(1).unwrap();
    assert!(live.contains("id=\"chart-runs\""));

    let producer = server.login(PRODUCER_A).await;
    let theirs = server.page("/", Some(&producer)).await;
    assert!(!theirs.contains("chart-runs"), "{theirs}");
}

async fn paused(server: &Server, queue: &str) -> bool {
    server
        .store
        .queues_list()
        .await
        .unwrap()
        .iter()
        .any(|q| q.name.as_str() == queue && q.paused)
}

/// An operator of every tenant pauses and resumes a queue from the overview (each form with
/// its CSRF token, each action audited with source `dashboard`); a tenant's token sees no such
/// form and is refused when it posts one; a forged form changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pauses_and_resumes_a_queue_from_the_overview() {
    let server = Server::with_tokens().await;
    server.enqueue(job("mine", json!({}))).await;
    let cookie = server.login(OPERATOR).await;
    let overview = server.page("/", Some(&cookie)).await;
    assert!(
        overview.contains("action=\"/queues/default/pause\""),
        "{overview}"
    );
    let csrf = csrf_of(&overview);

    let forged = server
        .post(
            "/queues/default/pause",
            Some(&cookie),
            &[("csrf", "forged")],
        )
        .await;
    assert_eq!(forged.status(), 403);
    assert!(!paused(&server, "default").await);

    let producer = server.login(PRODUCER_A).await;
    let theirs = server.page("/", Some(&producer)).await;
    assert!(!theirs.contains("/queues/"), "{theirs}");
    let producer_csrf = csrf_of(&theirs);
    let refused = server
        .post(
            "/queues/default/pause",
            Some(&producer),
            &[("csrf", &producer_csrf)],
        )
        .await;
    assert_eq!(refused.status(), 403);
    assert!(!paused(&server, "default").await);

    let done = server
        .post("/queues/default/pause", Some(&cookie), &[("csrf", &csrf)])
        .await;
    assert_eq!(done.status(), 303);
    assert!(paused(&server, "default").await);
    let overview = server.page("/", Some(&cookie)).await;
    assert!(
        overview.contains("action=\"/queues/default/resume\""),
        "{overview}"
    );
    let done = server
        .post("/queues/default/resume", Some(&cookie), &[("csrf", &csrf)])
        .await;
    assert_eq!(done.status(), 303);
    assert!(!paused(&server, "default").await);

    let records = server
        .store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    let actions: Vec<String> = records
        .iter()
        .map(|r| {
            serde_json::to_value(r.action)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(actions.contains(&"queue.pause".to_owned()), "{actions:?}");
    assert!(actions.contains(&"queue.resume".to_owned()), "{actions:?}");
    assert!(records
        .iter()
        .all(|r| r.source == AuditSource::Dashboard && r.actor == token_fingerprint(OPERATOR)));

    // The audit page: every record for tenant *, none of these for a tenant's token.
    let log = server.page("/audit", Some(&cookie)).await;
    assert!(
        log.contains("queue.pause") && log.contains("queue.resume"),
        "{log}"
    );
    let theirs = server.page("/audit", Some(&producer)).await;
    assert!(theirs.contains("No records."), "{theirs}");
    let bad = server.get("/audit?before=x", Some(&cookie)).await;
    assert_eq!(bad.status(), 400);
}

/// The workers page lists registered workers (their host name as text), the schedules and
/// limits pages their policies, for a token of tenant * only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_pages_list_workers_schedules_and_limits_for_every_tenants_token_only() {
    let server = Server::with_tokens().await;
    server
        .store
        .worker_register(drover_core::WorkerRegistration {
            id: WorkerId::parse("w-dash-1").unwrap(),
            host: "<b>host</b>".to_owned(),
            pid: 4242,
            queues: vec![QueueName::default_queue()],
        })
        .await
        .unwrap();
    let cookie = server.login(OPERATOR).await;
    let page = server.page("/workers", Some(&cookie)).await;
    assert!(page.contains("w-dash-1") && page.contains("4242"), "{page}");
    assert!(
        page.contains("&lt;b&gt;host&lt;") && !page.contains("<b>host"),
        "{page}"
    );
    let producer = server.login(PRODUCER_A).await;
    let theirs = server.page("/workers", Some(&producer)).await;
    assert!(!theirs.contains("w-dash-1"), "{theirs}");
    assert!(theirs.contains("needs a token of tenant *"), "{theirs}");

    // Schedules and limits: the same rule.
    server
        .store
        .limit_set(
            drover_core::LimitPolicy::new(
                drover_core::LimitKey::parse("kind:report").unwrap(),
                Some(3),
                None,
            )
            .unwrap(),
        )
        .await
        .unwrap();
    server
        .store
        .schedule_upsert(drover_core::NewSchedule::new(
            drover_core::ScheduleName::parse("nightly-report").unwrap(),
            "0 3 * * *",
            drover_core::JobKind::parse("report").unwrap(),
            json!({}),
        ))
        .await
        .unwrap();
    for (path, shown) in [("/limits", "kind:report"), ("/schedules", "nightly-report")] {
        let page = server.page(path, Some(&cookie)).await;
        assert!(page.contains(shown), "{path}: {page}");
        let theirs = server.page(path, Some(&producer)).await;
        assert!(!theirs.contains(shown), "{path}: {theirs}");
        assert!(
            theirs.contains("needs a token of tenant *"),
            "{path}: {theirs}"
        );
    }
}

/// Under `--insecure-no-auth` there is no login and every page says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_mode_says_so_on_every_page() {
    let server = Server::start(AuthMode::InsecureNoAuth).await;
    let created = server.enqueue(job("k", json!({}))).await;
    for path in [
        "/".to_owned(),
        "/jobs".to_owned(),
        format!("/jobs/{}", created.id),
    ] {
        let answer = server.get(&path, None).await;
        assert_eq!(answer.status(), 200, "{path}");
        let page = answer.text().await.unwrap();
        assert!(page.contains("id=\"insecure\""), "{path}: {page}");
        assert!(
            !page.contains("action=\"/logout\""),
            "no login, so no logout: {page}"
        );
    }
}

/// The overview, the jobs list (with its filter), a job and the workers page mark the parts
/// that update themselves with the URL to fetch them from; the script is served from the
/// binary and pauses while the tab is hidden; the queue overview is read once for every tab
/// within a second, and an action shows its effect at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_update_live_from_their_own_url() {
    let server = Server::with_tokens().await;
    let created = server
        .enqueue(job("report.build", json!({})).with_queue(QueueName::parse("mail").unwrap()))
        .await;
    let cookie = server.login(OPERATOR).await;
    let script = server.get("/assets/live.js", None).await;
    assert_eq!(script.status(), 200);
    assert_eq!(
        script.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let script = script.text().await.unwrap();
    assert!(
        script.contains("data-live") && script.contains("visibilityState"),
        "{script}"
    );
    for (path, id, url) in [
        ("/", "overview-live", "/".to_owned()),
        ("/jobs", "jobs-live", "/jobs".to_owned()),
        (
            "/jobs?state=queued&kind=report.build",
            "jobs-live",
            "/jobs?state=queued&kind=report%2Ebuild".to_owned(),
        ),
        (
            &format!("/jobs/{}", created.id),
            "job-live",
            format!("/jobs/{}", created.id),
        ),
        ("/workers", "workers-live", "/workers".to_owned()),
    ] {
        let page = server.page(path, Some(&cookie)).await;
        assert_only_the_live_script(&page);
        assert_eq!(
            live_url(&page, id).as_deref(),
            Some(url.as_str()),
            "{path}: {page}"
        );
    }
    // A tenant's token sees no queue table, so nothing of the overview updates.
    let producer = server.login(PRODUCER_A).await;
    assert_eq!(
        live_url(&server.page("/", Some(&producer)).await, "overview-live"),
        None
    );

    // One read of the queue overview serves every request within a second: a queue created
    // just after a read shows up at a later read, not at once.
    // Taken before the read: the read serves at least until a second after this.
    let read_at = std::time::Instant::now();
    let before = server.page("/", Some(&cookie)).await;
    server
        .enqueue(job("report.build", json!({})).with_queue(QueueName::parse("fresh").unwrap()))
        .await;
    let again = server.page("/", Some(&cookie)).await;
    if read_at.elapsed() < drover_http::dashboard::FRESH_FOR {
        assert!(
            !before.contains(">fresh</a>") && !again.contains(">fresh</a>"),
            "{again}"
        );
    }
    drover_tests::process::wait_until(
        "the overview to show the new queue",
        Duration::from_secs(10),
        || {
            let server = &server;
            let cookie = &cookie;
            async move {
                server
                    .page("/", Some(cookie))
                    .await
                    .contains(">fresh</a>")
                    .then_some(())
            }
        },
    )
    .await;
    // A pause through the dashboard shows at once.
    let csrf = csrf_of(&again);
    let done = server
        .post("/queues/fresh/pause", Some(&cookie), &[("csrf", &csrf)])
        .await;
    assert_eq!(done.status(), 303);
    let after = server.page("/", Some(&cookie)).await;
    assert!(after.contains("action=\"/queues/fresh/resume\""), "{after}");

    // So does each jobs list: a job enqueued just after a read shows at a later read.
    let fresh = QueueName::parse("fresh").unwrap();
    let read_at = std::time::Instant::now();
    let listed = server.page("/jobs?queue=fresh", Some(&cookie)).await;
    let second = server
        .enqueue(job("report.build", json!({})).with_queue(fresh))
        .await;
    let row = |page: &str, state: &str| {
        page.contains(&format!(
            "<a href=\"/jobs/{id}\">{id}</a></td><td class=\"text\">report.build</td><td>fresh</td><td>default</td><td>{state}</td>",
            id = second.id
        ))
    };
    let again = server.page("/jobs?queue=fresh", Some(&cookie)).await;
    if read_at.elapsed() < drover_http::dashboard::FRESH_FOR {
        assert!(!row(&listed, "queued") && !row(&again, "queued"), "{again}");
    }
    drover_tests::process::wait_until(
        "the jobs list to show the new job",
        Duration::from_secs(10),
        || {
            let server = &server;
            let cookie = &cookie;
            async move {
                row(
                    &server.page("/jobs?queue=fresh", Some(cookie)).await,
                    "queued",
                )
                .then_some(())
            }
        },
    )
    .await;
    // An action through the dashboard shows in the list at once.
    let done = server
        .post(
            &format!("/jobs/{}/cancel", second.id),
            Some(&cookie),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(done.status(), 303);
    let after = server.page("/jobs?queue=fresh", Some(&cookie)).await;
    assert!(row(&after, "cancelled"), "{after}");
}

/// The jobs list filters by tenant (a token of one tenant sees no other), workflow, parent
/// and meta and args containment, and names a bad filter; a job's page shows its workflow's jobs with
/// what each waits for, its parent and its children, each a link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_filter_by_workflow_parent_tenant_and_meta_and_a_job_shows_its_workflow() {
    let server = Server::with_tokens().await;
    let kind = |name: &str| drover_core::JobKind::parse(name).unwrap();
    let graph = drover_core::NewWorkflow::new()
        .job("extract", NewJob::new(kind("etl.extract"), json!({})), &[])
        .job(
            "transform",
            NewJob::new(kind("etl.transform"), json!({})),
            &["extract"],
        )
        .job(
            "load <b>",
            NewJob::new(kind("etl.load"), json!({})),
            &["extract", "transform"],
        );
    let workflow = server.store.workflow_enqueue(graph).await.unwrap();
    let id_of = |name: &str| {
        workflow
            .jobs
            .iter()
            .find(|e| e.job.name.as_deref() == Some(name))
            .unwrap()
            .job
            .id
    };
    let (extract, transform, load) = (id_of("extract"), id_of("transform"), id_of("load <b>"));
    let mut other = job("report.build", json!({"report": {"year": 2026}}));
    other.meta = json!({"customer": "acme", "region": "eu"});
    other.tenant = TenantId::parse("tenant-b").unwrap();
    let other = server.enqueue(other).await;
    // A parent with one child: claimed, it stores the child under its token.
    let parent = server.enqueue(job("fan.parent", json!({}))).await;
    let claimed = drover_tests::cases::claim(server.store.as_ref(), &["fan.parent"], 1).await;
    let child = server
        .store
        .children_enqueue(drover_core::EnqueueChildren {
            parent: parent.id,
            token: claimed[0].fencing_token,
            jobs: vec![job("fan.child", json!({}))],
        })
        .await
        .unwrap()[0]
        .job
        .id;

    let cookie = server.login(OPERATOR).await;
    let listed =
        |page: &str, id: drover_core::JobId| page.contains(&format!("href=\"/jobs/{id}\""));
    let wf = server
        .page(&format!("/jobs?workflow={}", workflow.id), Some(&cookie))
        .await;
    assert!(
        listed(&wf, extract) && listed(&wf, transform) && listed(&wf, load),
        "{wf}"
    );
    assert!(!listed(&wf, other.id) && !listed(&wf, parent.id), "{wf}");
    let children = server
        .page(&format!("/jobs?parent={}", parent.id), Some(&cookie))
        .await;
    assert!(
        listed(&children, child) && !listed(&children, parent.id),
        "{children}"
    );
    for query in [
        "tenant=tenant-b",
        "meta=%7B%22customer%22%3A%22acme%22%7D",
        "args=%7B%22report%22%3A%7B%22year%22%3A2026%7D%7D",
    ] {
        let page = server.page(&format!("/jobs?{query}"), Some(&cookie)).await;
        assert!(
            listed(&page, other.id) && !listed(&page, extract),
            "{query}: {page}"
        );
    }
    let none = server
        .page(
            "/jobs?meta=%7B%22customer%22%3A%22globex%22%7D",
            Some(&cookie),
        )
        .await;
    assert!(none.contains("No jobs match."), "{none}");
    for (query, field) in [
        ("meta=%5B1%5D", "meta"),
        ("meta=nope", "meta"),
        ("args=%5B1%5D", "args"),
        ("args=nope", "args"),
        ("workflow=nope", "workflow"),
        ("parent=nope", "parent"),
        ("before=nope", "before"),
        ("tenant=%20", "tenant"),
    ] {
        let answer = server.get(&format!("/jobs?{query}"), Some(&cookie)).await;
        assert_eq!(answer.status(), 400, "{query}");
        let page = answer.text().await.unwrap();
        let notice = page
            .split("<p class=\"notice\" id=\"notice\">")
            .nth(1)
            .and_then(|rest| rest.split("</p>").next())
            .unwrap_or_else(|| panic!("{query}: no notice: {page}"));
        assert!(notice.contains(field), "{query}: {notice}");
    }
    // A token of tenant-a asking for tenant-b's jobs sees none of them.
    let producer = server.login(PRODUCER_A).await;
    let answer = server.get("/jobs?tenant=tenant-b", Some(&producer)).await;
    assert_eq!(answer.status(), 404);
    let page = answer.text().await.unwrap();
    assert!(
        !listed(&page, other.id) && page.contains("tenant-a only"),
        "{page}"
    );
    assert!(!server
        .page("/jobs", Some(&producer))
        .await
        .contains("name=\"tenant\""));

    // The middle job's page: the workflow table, this job marked, each dependency by name.
    let page = server
        .page(&format!("/jobs/{transform}"), Some(&cookie))
        .await;
    assert!(page.contains("<table id=\"workflow\">"), "{page}");
    assert!(
        page.contains("<tr class=\"this\"><td class=\"text\">transform</td>"),
        "{page}"
    );
    assert!(
        page.contains("load &lt;b&gt;") && !page.contains("load <b>"),
        "{page}"
    );
    assert!(
        page.contains(&format!("<a href=\"/jobs/{extract}\" class=\"text\">extract</a>, <a href=\"/jobs/{transform}\" class=\"text\">transform</a>")),
        "load waits for extract and transform, by name: {page}"
    );
    assert!(page.contains("1 of 1 dependencies pending"), "{page}");
    // The parent's page lists its child; the child's page links its parent.
    let page = server
        .page(&format!("/jobs/{}", parent.id), Some(&cookie))
        .await;
    assert!(
        page.contains("<table id=\"children\">") && listed(&page, child),
        "{page}"
    );
    let page = server.page(&format!("/jobs/{child}"), Some(&cookie)).await;
    assert!(
        page.contains(&format!("id=\"parent\" href=\"/jobs/{}\"", parent.id)),
        "{page}"
    );
    assert!(!page.contains("<table id=\"children\">"), "{page}");
}

/// An operator deletes a job from its page (not a running one, and not as a producer); ticks
/// jobs in the list and cancels them; and retries every job a filter matches after a
/// confirmation page that says how many match. Each bulk action needs the CSRF token and is
/// audited once with source `dashboard`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_deletes_a_job_and_acts_on_selected_or_matching_jobs() {
    let server = Server::with_tokens().await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let mut new = job("bulk.job", json!({"n": n}));
        new.queue = QueueName::parse("bulk").unwrap();
        ids.push(server.enqueue(new).await.id.to_string());
    }
    let mut other = job("bulk.other", json!({}));
    other.tenant = TenantId::parse("tenant-a").unwrap();
    let other = server.enqueue(other).await;
    let running = server.enqueue(job("bulk.running", json!({}))).await;
    server
        .store
        .jobs_claim(ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: vec![QueueName::parse("default").unwrap()],
            kinds: vec![drover_core::JobKind::parse("bulk.running").unwrap()],
            limit: 1,
            start: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();

    // Delete from the job page: a producer has no button and is refused; a running job has
    // none either; an operator deletes the job and lands on the list.
    let producer = server.login(PRODUCER_A).await;
    let own = server
        .page(&format!("/jobs/{}", other.id), Some(&producer))
        .await;
    assert!(!own.contains("id=\"delete\""), "{own}");
    let refused = server
        .post(
            &format!("/jobs/{}/delete", other.id),
            Some(&producer),
            &[("csrf", &csrf_of(&own))],
        )
        .await;
    assert_eq!(refused.status(), 403);
    let cookie = server.login(OPERATOR).await;
    let page = server
        .page(&format!("/jobs/{}", running.id), Some(&cookie))
        .await;
    assert!(!page.contains("id=\"delete\""), "{page}");
    let csrf = csrf_of(&page);
    let kept = server
        .post(
            &format!("/jobs/{}/delete", running.id),
            Some(&cookie),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(kept.status(), 409);
    assert!(kept.text().await.unwrap().contains("cancel it first"));
    let page = server
        .page(&format!("/jobs/{}", other.id), Some(&cookie))
        .await;
    assert!(page.contains("id=\"delete\""), "{page}");
    let deleted = server
        .post(
            &format!("/jobs/{}/delete", other.id),
            Some(&cookie),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(deleted.status(), 303);
    assert_eq!(deleted.headers()["location"], "/jobs");
    assert!(server.store.job_get(other.id).await.is_err(), "deleted");

    // Tick two jobs in the list and cancel them.
    let list = server.page("/jobs?queue=bulk", Some(&cookie)).await;
    assert!(
        list.contains("name=\"ids\"") && list.contains("id=\"cancel-selected\""),
        "{list}"
    );
    assert!(list.contains("id=\"delete-matching\""), "{list}");
    let selected = [
        ("action", "cancel"),
        ("ids", ids[0].as_str()),
        ("ids", ids[1].as_str()),
    ];
    let forged = server.post("/jobs/bulk", Some(&cookie), &selected).await;
    assert_eq!(forged.status(), 403, "no CSRF token, nothing done");
    let csrf = csrf_of(&list);
    let none_ticked = server
        .post(
            "/jobs/bulk",
            Some(&cookie),
            &[("csrf", csrf.as_str()), ("action", "cancel")],
        )
        .await;
    assert_eq!(none_ticked.status(), 400);
    assert!(none_ticked
        .text()
        .await
        .unwrap()
        .contains("tick at least one job"));
    let mut form = vec![("csrf", csrf.as_str())];
    form.extend(selected);
    let done = server.post("/jobs/bulk", Some(&cookie), &form).await;
    assert_eq!(done.status(), 200);
    let done = done.text().await.unwrap();
    assert!(
        done.contains("cancel: 2 job(s) changed, 0 skipped"),
        "{done}"
    );
    let state = |id: &str| {
        let store = Arc::clone(&server.store);
        let id = id.parse().unwrap();
        async move { store.job_get(id).await.unwrap().state }
    };
    assert_eq!(state(&ids[0]).await, JobState::Cancelled);
    assert_eq!(state(&ids[2]).await, JobState::Queued);

    // Retry every cancelled job of the queue: the confirmation page counts them, then runs it.
    let confirm = server
        .get(
            "/jobs/bulk?action=retry&queue=bulk&state=cancelled",
            Some(&cookie),
        )
        .await;
    assert_eq!(confirm.status(), 200);
    let confirm = confirm.text().await.unwrap();
    assert!(confirm.contains("2 job(s) match this filter"), "{confirm}");
    assert_eq!(
        state(&ids[0]).await,
        JobState::Cancelled,
        "a preview changes nothing"
    );
    let run = server
        .post(
            "/jobs/bulk",
            Some(&cookie),
            &[
                ("csrf", &csrf_of(&confirm)),
                ("action", "retry"),
                ("scope", "filter"),
                ("queue", "bulk"),
                ("state", "cancelled"),
            ],
        )
        .await;
    assert_eq!(run.status(), 200);
    let run = run.text().await.unwrap();
    assert!(run.contains("retry: 2 job(s) changed"), "{run}");
    for id in &ids {
        assert_eq!(state(id).await, JobState::Queued);
    }
    let forbidden = server
        .get("/jobs/bulk?action=delete", Some(&producer))
        .await;
    assert_eq!(forbidden.status(), 403, "a producer may not delete");

    let records = server
        .store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    let actions: Vec<&str> = records.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(actions, ["jobs.retry", "jobs.cancel", "job.delete"]);
    assert!(records.iter().all(|r| r.source == AuditSource::Dashboard));
    assert_eq!(records[0].jobs, 2);
    let audit = server.page("/audit", Some(&cookie)).await;
    assert!(audit.contains("jobs.retry"), "{audit}");
}

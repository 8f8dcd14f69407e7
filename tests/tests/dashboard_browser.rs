//! The dashboard in a real browser: Debian's headless `chromium` driven by `chromedriver`
//! over WebDriver (fantoccini), against a `drover serve` process on PostgreSQL and a `drover
//! dev` process (the memory store). Without `chromedriver` on the PATH the tests print
//! `SKIPPED ...` (which `.ci/run` refuses; it installs `chromium` and `chromium-driver`). A
//! screenshot of every page visited is saved under
//! `$CARGO_TARGET_TMPDIR/dashboard-screenshots/`.

mod cli_support;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use cli_support::TestDb;
use drover_core::{
    AuditAction, AuditSource, ClaimJobs, Finish, JobState, JobStore, ListAudit, NewJob, QueueName,
    Retry, TenantId, WorkerId,
};
use drover_store_postgres::{PgOptions, PgStore};
use drover_tests::process::{wait_until, Process};
use fantoccini::{ClientBuilder, Locator};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const OPERATOR: &str = "browser-operator-secret-1";
const PRODUCER_A: &str = "browser-producer-a-secret";
const WAIT: Duration = Duration::from_secs(30);

/// `chromedriver` on a free port, killed when dropped.
struct Driver {
    url: String,
    _child: tokio::process::Child,
}

impl Driver {
    async fn start() -> Option<Driver> {
        let binary = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new(binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let status = format!("{url}/status");
        wait_until("chromedriver to answer", WAIT, || {
            let status = status.clone();
            async move {
                let answer = reqwest::get(&status).await.ok()?;
                answer.status().is_success().then_some(())
            }
        })
        .await;
        Some(Driver { url, _child: child })
    }
}

/// A server on a free port: the API and the dashboard, or any router.
async fn serve(router: axum::Router, stop: &CancellationToken) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(drover_http::serve(listener, router, stop.clone()));
    base
}

async fn screenshot(browser: &fantoccini::Client, name: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

async fn text_of(browser: &fantoccini::Client, css: &str) -> String {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Waits until the page shows an element matching the XPath `path`.
async fn wait_for(browser: &fantoccini::Client, path: &str) {
    browser
        .wait()
        .at_most(WAIT)
        .for_element(Locator::XPath(path))
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}

async fn log_in(browser: &fantoccini::Client, base: &str, token: &str) {
    browser.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(browser.current_url().await.unwrap().path(), "/login");
    browser
        .find(Locator::Css("#login input[name=token]"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    browser
        .find(Locator::Css("#login button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Id("who"))
        .await
        .expect("a logged-in page");
    assert_eq!(browser.current_url().await.unwrap().path(), "/");
}

/// The tokens both processes are started with.
fn tokens() -> String {
    format!("{OPERATOR}:*:operator,{PRODUCER_A}:tenant-a:producer")
}

/// The dashboard's address from a `drover serve` or `drover dev --listen` process's line.
async fn dashboard_of(process: &Process) -> String {
    let line = process.wait_for_line("dashboard on http://", WAIT).await;
    line.split("dashboard on ")
        .nth(1)
        .map(|rest| rest.trim().trim_end_matches('/').to_owned())
        .unwrap_or_else(|| panic!("the dashboard's address in {line:?}"))
}

/// A Chromium session, headless.
async fn browser_of(driver: &Driver) -> fantoccini::Client {
    let capabilities: serde_json::Map<String, serde_json::Value> = serde_json::from_value(json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"],
        },
    }))
    .unwrap();
    ClientBuilder::rustls()
        .expect("a TLS configuration")
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Against `drover serve` on PostgreSQL (the test reads and writes the same database through
/// a store of its own): log in; the overview lists the queue; a job enqueued, started and
/// finished while its page is open shows each change without a reload; a failed job with
/// hostile args and error shows them as text; Retry queues it again and is audited from the
/// dashboard; a bulk cancel of a filter's jobs goes through its confirmation page and shows in
/// the audit log; a form posted from another site does nothing; a producer of another tenant
/// cannot open the job by its URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_logs_in_retries_a_job_and_is_kept_to_its_tenant() {
    let Some(driver) = Driver::start().await else {
        println!(
            "SKIPPED a_browser_logs_in_retries_a_job_and_is_kept_to_its_tenant: no chromedriver (apt-get install chromium chromium-driver)"
        );
        return;
    };
    let Some(db) = TestDb::migrated("a_browser_logs_in_retries_a_job").await else {
        return;
    };
    let mut command = db.command(&["serve", "--listen", "127.0.0.1:0"]);
    command.env("DROVER_API_TOKENS", tokens());
    let serve_process = Process::spawn(command, &["serve"]);
    let base = dashboard_of(&serve_process).await;
    let store: Arc<dyn JobStore> = Arc::new(
        PgStore::connect(&db.url, PgOptions::default())
            .await
            .expect("a store on the test database"),
    );
    let stop = CancellationToken::new();

    // A failed job of tenant b with hostile text in its args and its error.
    let hostile = "<script>document.title='owned'</script>\"'<b>bold</b>";
    let mut new = NewJob::new(
        drover_core::JobKind::parse("report.build").unwrap(),
        json!({ "note": hostile }),
    )
    .with_queue(QueueName::parse("reports").unwrap())
    .with_max_attempts(1);
    new.tenant = TenantId::parse("tenant-b").unwrap();
    let job = store.job_enqueue(new).await.unwrap().job;
    let claimed = store
        .jobs_claim(ClaimJobs {
            worker: WorkerId::parse("w").unwrap(),
            queues: vec![job.queue.clone()],
            kinds: vec![job.kind.clone()],
            limit: 1,
            start: 1,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap()
        .jobs;
    store
        .job_finish(
            job.id,
            claimed[0].fencing_token,
            Finish::Failed {
                message: hostile.to_owned(),
                retry: Retry::After(Duration::ZERO),
            },
        )
        .await
        .unwrap();

    let browser = browser_of(&driver).await;
    let outcome = async {
        screenshot_login(&browser, &base).await;
        log_in(&browser, &base, OPERATOR).await;
        assert!(text_of(&browser, "#queues").await.contains("reports"));
        screenshot(&browser, "overview").await;
        // Pause the queue from its button, then resume it.
        browser.find(Locator::Css("#queues button.pause")).await.unwrap().click().await.unwrap();
        wait_for(&browser, "//table[@id='queues']//button[@class='resume']").await;
        assert!(store.queues_list().await.unwrap().iter().any(|q| q.paused));
        browser.find(Locator::Css("#queues button.resume")).await.unwrap().click().await.unwrap();
        wait_for(&browser, "//table[@id='queues']//button[@class='pause']").await;
        assert!(!store.queues_list().await.unwrap().iter().any(|q| q.paused));
        // Live updates: a job enqueued while the jobs list is open shows up without a
        // reload, and its page shows it start and succeed.
        browser.goto(&format!("{base}/jobs")).await.unwrap();
        let live = store
            .job_enqueue(
                NewJob::new(drover_core::JobKind::parse("mail.send").unwrap(), json!({}))
                    .with_queue(QueueName::parse("live").unwrap()),
            )
            .await
            .unwrap()
            .job;
        wait_for(&browser, &format!("//table[@id='jobs']//a[text()='{}']", live.id)).await;
        screenshot(&browser, "jobs-live").await;
        browser.goto(&format!("{base}/jobs/{}", live.id)).await.unwrap();
        wait_for(&browser, "//dd[@id='state' and text()='queued']").await;
        let running =
            drover_tests::cases::claim_from(store.as_ref(), &["live"], &["mail.send"], 1).await;
        wait_for(&browser, "//dd[@id='state' and text()='running']").await;
        store
            .job_finish(
                live.id,
                running[0].fencing_token,
                Finish::Succeeded { result: Some(json!({"sent": true})) },
            )
            .await
            .unwrap();
        wait_for(&browser, "//dd[@id='state' and text()='succeeded']").await;
        assert!(text_of(&browser, "#result").await.contains("sent"));
        for page in ["workers", "schedules", "limits", "audit"] {
            browser.goto(&format!("{base}/{page}")).await.unwrap();
            assert!(!text_of(&browser, &format!("#{page}")).await.is_empty());
            screenshot(&browser, page).await;
        }

        browser.goto(&format!("{base}/jobs?state=failed")).await.unwrap();
        assert!(text_of(&browser, "#jobs").await.contains(&job.id.to_string()));
        screenshot(&browser, "jobs").await;
        browser
            .find(Locator::LinkText(&job.id.to_string()))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for(&browser, "//dd[@id='state' and text()='failed']").await;
        let args = text_of(&browser, "#args").await;
        assert!(
            args.contains("<script>document.title='owned'</script>") && args.contains("<b>bold</b>"),
            "args as text (in JSON): {args}"
        );
        assert!(text_of(&browser, "#errors").await.contains(hostile), "error as text");
        assert!(browser.find_all(Locator::Css("#args b")).await.unwrap().is_empty());
        assert_ne!(browser.title().await.unwrap(), "owned", "no script ran");
        screenshot(&browser, "job").await;

        browser.find(Locator::Css("#retry")).await.unwrap().click().await.unwrap();
        wait_for(&browser, "//dd[@id='state' and text()='queued']").await;
        let records = store.audit_list(ListAudit::default()).await.unwrap().entries;
        let actions: Vec<_> = records.iter().map(|r| (r.action, r.source)).collect();
        assert_eq!(
            actions,
            [AuditAction::JobRetry, AuditAction::QueueResume, AuditAction::QueuePause]
                .map(|action| (action, AuditSource::Dashboard)),
            "newest first"
        );

        // Bulk cancel by filter: the list's link opens the confirmation page with the count,
        // its button cancels every match, and the audit log page shows the one record.
        let mut doomed = Vec::new();
        for n in 0..2 {
            let new = NewJob::new(drover_core::JobKind::parse("bulk.job").unwrap(), json!(n))
                .with_queue(QueueName::parse("bulkq").unwrap());
            doomed.push(store.job_enqueue(new).await.unwrap().job.id);
        }
        browser.goto(&format!("{base}/jobs?queue=bulkq")).await.unwrap();
        browser.find(Locator::Id("cancel-matching")).await.unwrap().click().await.unwrap();
        wait_for(&browser, "//p[@id='preview' and contains(text(), '2 job(s) match')]").await;
        screenshot(&browser, "bulk-confirm").await;
        browser.find(Locator::Id("confirm")).await.unwrap().click().await.unwrap();
        wait_for(&browser, "//p[@id='outcome' and contains(text(), 'cancel: 2 job(s) changed')]")
            .await;
        for id in &doomed {
            assert_eq!(store.job_get(*id).await.unwrap().state, JobState::Cancelled);
        }
        browser.goto(&format!("{base}/audit")).await.unwrap();
        wait_for(&browser, "//table[@id='audit']//td[text()='jobs.cancel']").await;
        screenshot(&browser, "audit-bulk").await;

        // A page of another origin (another port) posts a cancel form at the dashboard
        // without the session's CSRF token: nothing happens.
        let other_stop = stop.child_token();
        let page = format!(
            "<!doctype html><form method=post action=\"{base}/jobs/{}/cancel\"><input type=hidden name=csrf value=x><button id=go>go</button></form>",
            job.id
        );
        let evil = serve(
            axum::Router::new().route(
                "/",
                axum::routing::get(move || {
                    let page = page.clone();
                    async move { axum::response::Html(page) }
                }),
            ),
            &other_stop,
        )
        .await;
        browser.goto(&format!("{evil}/")).await.unwrap();
        browser.find(Locator::Id("go")).await.unwrap().click().await.unwrap();
        // Another port of the same host is the same site, so the cookie goes along; the
        // form's CSRF token is not the session's, so the dashboard refuses it.
        wait_for(
            &browser,
            "//p[@id='notice' and contains(text(), 'did not come from this dashboard')]",
        )
        .await;
        assert_eq!(store.job_get(job.id).await.unwrap().state, JobState::Queued);
        screenshot(&browser, "cross-site-refused").await;

        // Another tenant's producer: the job's URL answers "No such job."
        browser.goto(&format!("{base}/")).await.unwrap();
        browser.find(Locator::Css(".logout button")).await.unwrap().click().await.unwrap();
        wait_for(&browser, "//form[@id='login']").await;
        log_in(&browser, &base, PRODUCER_A).await;
        browser.goto(&format!("{base}/jobs/{}", job.id)).await.unwrap();
        wait_for(&browser, "//p[@id='notice' and text()='No such job.']").await;
        screenshot(&browser, "other-tenant").await;
    }
    .await;
    browser.close().await.unwrap();
    stop.cancel();
    outcome
}

async fn screenshot_login(browser: &fantoccini::Client, base: &str) {
    browser.goto(&format!("{base}/login")).await.unwrap();
    screenshot(browser, "login").await;
}

/// Against `drover dev --listen` (the memory store, its built-in kinds run by its own worker),
/// everything through the API and the browser: a job enqueued while the jobs list is open
/// shows up, runs and succeeds without a reload; a job that fails with hostile text in its
/// meta shows it as text; Retry from its page is audited as a dashboard action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_watches_drover_dev_run_a_job_and_retries_a_failed_one() {
    let Some(driver) = Driver::start().await else {
        println!(
            "SKIPPED a_browser_watches_drover_dev_run_a_job_and_retries_a_failed_one: no chromedriver (apt-get install chromium chromium-driver)"
        );
        return;
    };
    let mut command = tokio::process::Command::new(cli_support::drover_bin());
    command
        // Heartbeats every second bring the worker's activity to the overview's charts soon.
        .args(["dev", "--listen", "127.0.0.1:0", "--heartbeat", "1s"])
        .env("DROVER_API_TOKENS", tokens())
        .env_remove("DROVER_DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let dev = Process::spawn(command, &["dev"]);
    let base = dashboard_of(&dev).await;
    let api = reqwest::Client::new();
    let enqueue = |body: serde_json::Value| {
        let (api, base) = (api.clone(), base.clone());
        async move {
            let answer = api
                .post(format!("{base}/v1/jobs"))
                .bearer_auth(OPERATOR)
                .json(&body)
                .send()
                .await
                .expect("the API answers");
            assert_eq!(answer.status(), 202, "{body}");
            let answer: serde_json::Value = answer.json().await.unwrap();
            answer["job"]["id"].as_str().expect("an id").to_owned()
        }
    };

    let browser = browser_of(&driver).await;
    let outcome = async {
        log_in(&browser, &base, OPERATOR).await;
        browser.goto(&format!("{base}/jobs")).await.unwrap();
        let slow = enqueue(json!({"kind": "sleep", "args": {"ms": 6000}})).await;
        wait_for(
            &browser,
            &format!("//table[@id='jobs']//a[text()='{slow}']"),
        )
        .await;
        browser.goto(&format!("{base}/jobs/{slow}")).await.unwrap();
        wait_for(&browser, "//dd[@id='state' and text()='running']").await;
        wait_for(&browser, "//dd[@id='state' and text()='succeeded']").await;
        screenshot(&browser, "dev-job-succeeded").await;

        let hostile = "<script>document.title='owned'</script>\"'<b>bold</b>";
        let failing = enqueue(json!({
            "kind": "fail",
            "args": {"fail_times": 5},
            "meta": {"note": hostile},
            "max_attempts": 1,
        }))
        .await;
        browser
            .goto(&format!("{base}/jobs/{failing}"))
            .await
            .unwrap();
        wait_for(&browser, "//dd[@id='state' and text()='failed']").await;
        assert!(
            !text_of(&browser, "#errors tbody").await.is_empty(),
            "the failed attempt"
        );
        let meta = text_of(&browser, "#meta").await;
        assert!(
            meta.contains("<script>document.title='owned'</script>"),
            "meta as text: {meta}"
        );
        assert!(browser
            .find_all(Locator::Css("#meta b"))
            .await
            .unwrap()
            .is_empty());
        assert_ne!(browser.title().await.unwrap(), "owned", "no script ran");
        browser.goto(&format!("{base}/")).await.unwrap();
        assert!(text_of(&browser, "#queues").await.contains("default"));
        // The two runs reach the charts with a heartbeat, and the page shows them without a
        // reload: a bar in the runs chart, a range in each latency chart.
        wait_for(&browser, "//span[@id='runs-ended' and number(text()) >= 2]").await;
        for chart in ["chart-runs", "chart-wait", "chart-duration"] {
            let drawn = browser
                .find_all(Locator::Css(&format!("#{chart} svg g")))
                .await
                .unwrap();
            assert!(!drawn.is_empty(), "{chart} draws the runs");
        }
        screenshot(&browser, "dev-overview").await;
        browser
            .goto(&format!("{base}/jobs/{failing}"))
            .await
            .unwrap();
        browser
            .find(Locator::Css("#retry"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        // Retried, it runs again and fails its second attempt.
        wait_for(&browser, "//table[@id='errors']/tbody/tr[2]").await;
        let audit: serde_json::Value = api
            .get(format!("{base}/v1/audit"))
            .bearer_auth(OPERATOR)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let newest = &audit["entries"][0];
        assert_eq!(
            (newest["action"].as_str(), newest["source"].as_str()),
            (Some("job.retry"), Some("dashboard")),
            "{audit}"
        );
    }
    .await;
    browser.close().await.unwrap();
    outcome
}

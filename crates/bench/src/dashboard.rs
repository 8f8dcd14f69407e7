//! `drover-bench dashboard`: the dashboard's page times on a large PostgreSQL table, and what
//! ten open dashboards cost a worker (docs/dashboard.md, BENCHMARKS.md "Dashboard").
//!
//! | step | what it does |
//! |---|---|
//! | load | a fresh database, `--jobs` jobs enqueued in batches of 10,000: 8 kinds (one rare), 5 queues, 20 tenants, a fifth with meta `{"customer": ...}` |
//! | settle | an in-process worker runs the queues `default`, `mail` and `media` (kind `export.csv` fails), 1,000 jobs of `webhooks` are cancelled, `reports` and the rest stay queued; then `VACUUM ANALYZE` |
//! | pages | the API and the dashboard in this process, logged in as an operator of every tenant; the overview fetched `--samples` times every 2 s as an open dashboard does; the other pages `--samples` times each, in rounds 1.2 s apart so that no answer comes from a shared read; the overview's database read timed on its own through the `Client` |
//! | dashboards open | 150,000 no-op jobs processed by one worker process of 32 slots (this binary's `worker` mode, as `drover worker` runs beside `drover serve`), alone and with ten dashboards polling the overview and the jobs list every 2 s as `live.js` does; each after `VACUUM` and `CHECKPOINT`; the rate between a tenth and nine tenths recorded; alternated, medians |

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::{Error, JobKind, JobState, JobStore, ListJobs, NewJob, QueueName, TenantId};
use drover_http::{ApiConfig, ApiState, ApiTokens, AuthMode};
use drover_runner::{CancellationToken, JobContext, NoopMetrics, Outcome, PoolConfig, Registry};
use serde::Serialize;
use serde_json::json;

use crate::options::DashboardArgs;
use crate::stats::quantile;
use crate::target::PgTarget;

const KINDS: [&str; 8] = [
    "report.build",
    "mail.send",
    "image.resize",
    "invoice.render",
    "search.index",
    "webhook.deliver",
    "export.csv",
    "audit.rare",
];
const QUEUES: [&str; 5] = ["default", "mail", "media", "reports", "webhooks"];
/// The queues the settle step runs to the end.
const PROCESSED: [&str; 3] = ["default", "mail", "media"];
const TOKEN: &str = "bench-dashboard-operator-token";
const BATCH: usize = 10_000;
/// No-op jobs of each processing measurement.
const PROCESSED_JOBS: usize = 150_000;
/// How often each open dashboard refreshes (as `live.js`).
const REFRESH: Duration = Duration::from_secs(2);
/// Time between two fetches of a page being timed: longer than a shared read serves
/// ([`drover_http::dashboard::FRESH_FOR`], or four times a read of up to 300 ms).
const UNSHARED: Duration =
    drover_http::dashboard::FRESH_FOR.saturating_add(Duration::from_millis(200));

/// The times of one page.
#[derive(Debug, Serialize)]
pub struct PageTimes {
    /// What was fetched.
    pub page: String,
    /// Samples.
    pub samples: usize,
    /// Median, 95th percentile and slowest answer, milliseconds.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Size of the last answer, bytes.
    pub bytes: usize,
}

/// Everything the dashboard benchmark measured.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Jobs in the table.
    pub jobs: usize,
    /// Seconds to enqueue them, and to settle them.
    pub load_s: f64,
    /// Seconds of the settle step.
    pub settle_s: f64,
    /// The pages.
    pub pages: Vec<PageTimes>,
    /// No-op jobs per second of one worker alone, per round.
    pub alone_per_s: Vec<f64>,
    /// The same with ten dashboards open, per round.
    pub with_dashboards_per_s: Vec<f64>,
}

/// Runs the dashboard benchmark.
///
/// # Errors
/// A store or HTTP error.
pub async fn run(args: DashboardArgs) -> Result<(), Error> {
    let target = PgTarget::parse(&args.database_url)?;
    let started = Instant::now();
    target.fresh().await?;
    let store = target.store(40).await?;
    let shared: Arc<dyn JobStore> = Arc::new(store.clone());
    eprintln!("[dashboard] loading {} jobs", args.jobs);
    load(shared.as_ref(), args.jobs).await?;
    let load_s = started.elapsed().as_secs_f64();
    eprintln!("[dashboard] loaded in {load_s:.1} s; settling");
    let settling = Instant::now();
    settle(Arc::clone(&shared)).await?;
    sqlx_exec(&store, "VACUUM ANALYZE drover.jobs").await?;
    let settle_s = settling.elapsed().as_secs_f64();
    eprintln!("[dashboard] settled in {settle_s:.1} s; timing pages");

    let stop = CancellationToken::new();
    let base = serve(Arc::clone(&shared), &stop).await?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| Error::fatal(format!("HTTP client: {e}")))?;
    let cookie = log_in(&http, &base).await?;
    let pages = time_pages(&http, &base, &cookie, Arc::clone(&shared), args.samples).await?;
    for p in &pages {
        println!(
            "{:<60} p50 {:>8.1} ms  p95 {:>8.1} ms  max {:>8.1} ms  {:>7} bytes",
            p.page, p.p50_ms, p.p95_ms, p.max_ms, p.bytes
        );
    }

    let mut alone_per_s = Vec::new();
    let mut with_dashboards_per_s = Vec::new();
    for round in 1..=args.rounds {
        // Each round adds PROCESSED_JOBS jobs per measurement: alternate which goes first.
        let order = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for open in order {
            // Each measurement starts from a vacuumed table (this server may run no
            // autovacuum) and a fresh checkpoint (one falling inside a measurement of a few
            // seconds would cost it a third).
            sqlx_exec(&store, "VACUUM drover.jobs").await?;
            sqlx_exec(&store, "CHECKPOINT").await?;
            let rate =
                process_rate(&target, Arc::clone(&shared), &http, &base, &cookie, open).await?;
            eprintln!(
                "[dashboard] round {round}: {} dashboards open: {rate:.0} jobs/s",
                if open { 10 } else { 0 }
            );
            if open {
                with_dashboards_per_s.push(rate);
            } else {
                alone_per_s.push(rate);
            }
        }
    }
    stop.cancel();
    let report = Report {
        jobs: args.jobs,
        load_s,
        settle_s,
        pages,
        alone_per_s,
        with_dashboards_per_s,
    };
    let median = |v: &[f64]| crate::stats::median(v).unwrap_or(0.0);
    println!(
        "processing: alone {:.0} jobs/s, with ten dashboards {:.0} jobs/s ({:.1} %)",
        median(&report.alone_per_s),
        median(&report.with_dashboards_per_s),
        100.0 * median(&report.with_dashboards_per_s) / median(&report.alone_per_s).max(1.0)
    );
    let text =
        serde_json::to_string_pretty(&report).map_err(|e| Error::fatal(format!("report: {e}")))?;
    std::fs::write(&args.out, text)
        .map_err(|e| Error::fatal(format!("cannot write {}: {e}", args.out.display())))?;
    eprintln!("[dashboard] report: {}", args.out.display());
    store.close().await;
    Ok(())
}

/// Enqueues `n` jobs of the mix the module doc describes.
async fn load(store: &dyn JobStore, n: usize) -> Result<(), Error> {
    let kinds: Vec<JobKind> = KINDS
        .iter()
        .map(|k| JobKind::parse(*k))
        .collect::<Result<_, _>>()?;
    let queues: Vec<QueueName> = QUEUES
        .iter()
        .map(|q| QueueName::parse(*q))
        .collect::<Result<_, _>>()?;
    let tenants: Vec<TenantId> = (0..20)
        .map(|t| TenantId::parse(format!("t{t}")))
        .collect::<Result<_, _>>()?;
    let mut i = 0usize;
    while i < n {
        let batch: Vec<NewJob> = (i..n.min(i + BATCH))
            .map(|i| {
                // One job in a thousand is of the rare kind; the rest spread over the others.
                let kind = if i % 1_000 == 999 {
                    &kinds[7]
                } else {
                    &kinds[i % 7]
                };
                let mut job = NewJob::new(kind.clone(), json!({ "seq": i }))
                    .with_queue(queues[(i / 7) % QUEUES.len()].clone())
                    .with_max_attempts(1);
                job.tenant = tenants[(i / 35) % tenants.len()].clone();
                if i % 5 == 0 {
                    job.meta = json!({ "customer": format!("c{}", i % 1_000) });
                }
                job
            })
            .collect();
        i += batch.len();
        store.jobs_enqueue(batch).await?;
    }
    Ok(())
}

/// Runs the processed queues to the end and cancels 1,000 jobs of `webhooks`.
async fn settle(store: Arc<dyn JobStore>) -> Result<(), Error> {
    let mut registry = Registry::new();
    for kind in KINDS {
        let fails = kind == "export.csv";
        registry.register_fn(JobKind::parse(kind)?, move |_ctx: JobContext| async move {
            if fails {
                Outcome::discard("the export's target refused it")
            } else {
                Outcome::success()
            }
        });
    }
    let queues: Vec<QueueName> = PROCESSED
        .iter()
        .map(|q| QueueName::parse(*q))
        .collect::<Result<_, _>>()?;
    let config = drover_runner::WorkerConfig::with_pools(vec![PoolConfig::new(
        "settle",
        queues.clone(),
        64,
    )]);
    let worker = drover_runner::Worker::new(Arc::clone(&store), Arc::new(registry), config)?
        .metrics(Arc::new(NoopMetrics));
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(worker.run(shutdown.clone()));
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let snapshot = store.queue_snapshot().await?;
        let left: u64 = snapshot
            .queues
            .iter()
            .filter(|q| queues.contains(&q.queue))
            .map(|q| q.count(JobState::Queued) + q.count(JobState::Running))
            .sum();
        if left == 0 {
            break;
        }
    }
    shutdown.cancel();
    run.await
        .map_err(|e| Error::fatal(format!("the worker task failed: {e}")))??;
    let webhooks = store
        .jobs_list(ListJobs {
            queue: Some(QueueName::parse("webhooks")?),
            state: Some(JobState::Queued),
            limit: 1_000,
            details: drover_core::JobDetails::NONE,
            ..ListJobs::default()
        })
        .await?;
    for job in webhooks.jobs {
        store.job_cancel(job.id).await?;
    }
    Ok(())
}

async fn sqlx_exec(store: &drover_store_postgres::PgStore, sql: &str) -> Result<(), Error> {
    drover_store_postgres::sqlx::raw_sql(sql)
        .execute(store.pool())
        .await
        .map(drop)
        .map_err(|e| Error::fatal(format!("{sql}: {e}")))
}

/// The API and the dashboard on a free port of 127.0.0.1; returns the base URL.
async fn serve(store: Arc<dyn JobStore>, stop: &CancellationToken) -> Result<String, Error> {
    let tokens = ApiTokens::parse(&format!("{TOKEN}:*:operator"))
        .map_err(|e| Error::fatal(format!("tokens: {e}")))?;
    let state = ApiState::new(store, AuthMode::Tokens(tokens), ApiConfig::default(), None);
    let router = drover_http::router(state.clone()).merge(drover_http::dashboard::router(state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Error::fatal(format!("listen: {e}")))?;
    let base = format!(
        "http://{}",
        listener
            .local_addr()
            .map_err(|e| Error::fatal(e.to_string()))?
    );
    tokio::spawn(drover_http::serve(listener, router, stop.clone()));
    Ok(base)
}

/// Logs in; returns the session's `Cookie` header value.
async fn log_in(http: &reqwest::Client, base: &str) -> Result<String, Error> {
    let answer = http
        .post(format!("{base}/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .map_err(|e| Error::fatal(format!("login: {e}")))?;
    let cookie = answer
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .ok_or_else(|| Error::fatal("login set no cookie"))?;
    Ok(cookie.to_owned())
}

/// Fetches `path`; returns the time and the body's length.
async fn fetch(
    http: &reqwest::Client,
    base: &str,
    cookie: &str,
    path: &str,
) -> Result<(Duration, usize), Error> {
    let started = Instant::now();
    let answer = http
        .get(format!("{base}{path}"))
        .header("Cookie", cookie)
        .send()
        .await
        .map_err(|e| Error::fatal(format!("{path}: {e}")))?;
    let status = answer.status();
    let body = answer
        .bytes()
        .await
        .map_err(|e| Error::fatal(format!("{path}: {e}")))?;
    let took = started.elapsed();
    if !status.is_success() {
        return Err(Error::fatal(format!(
            "{path} answered {status}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    Ok((took, body.len()))
}

async fn time_pages(
    http: &reqwest::Client,
    base: &str,
    cookie: &str,
    store: Arc<dyn JobStore>,
    samples: usize,
) -> Result<Vec<PageTimes>, Error> {
    let newest = store
        .jobs_list(ListJobs {
            limit: 1_000,
            details: drover_core::JobDetails::NONE,
            ..ListJobs::default()
        })
        .await?;
    let some_ids: Vec<String> = newest
        .jobs
        .iter()
        .step_by(37)
        .map(|j| j.id.to_string())
        .collect();
    let deep = newest
        .jobs
        .last()
        .map(|j| j.id.to_string())
        .unwrap_or_default();
    let meta = "%7B%22customer%22%3A%22c40%22%7D";
    let mut paths: Vec<String> = vec!["/jobs".into()];
    for state in JobState::ALL {
        paths.push(format!("/jobs?state={}", state.as_str()));
    }
    paths.extend([
        "/jobs?queue=reports".to_owned(),
        "/jobs?kind=audit.rare".to_owned(),
        "/jobs?tenant=t7".to_owned(),
        format!("/jobs?meta={meta}"),
        "/jobs?state=succeeded&kind=audit.rare".to_owned(),
        "/jobs?state=failed&queue=media".to_owned(),
        format!("/jobs?state=succeeded&meta={meta}"),
        format!("/jobs?before={deep}"),
        "/workers".to_owned(),
    ]);
    let mut out = Vec::new();
    // What a read of the overview costs the database (a page that finds the shared read
    // outdated waits this long).
    let client = drover_runner::Client::new(Arc::clone(&store));
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        client.queue_overview().await?;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    out.push(summary(
        "queue overview, database read".to_owned(),
        times,
        0,
    ));
    // `/` as one open dashboard fetches it: every 2 s (most answers then find the shared
    // overview outdated, and wait for a read).
    let mut times = Vec::with_capacity(samples);
    let mut bytes = 0;
    for _ in 0..samples {
        tokio::time::sleep(REFRESH).await;
        let (took, size) = fetch(http, base, cookie, "/").await?;
        times.push(took.as_secs_f64() * 1_000.0);
        bytes = size;
    }
    out.push(summary("/".to_owned(), times, bytes));
    // The other pages in rounds, each page once a round, the rounds [`UNSHARED`] apart: a
    // page's shared read has expired when it is fetched again (as long as the read takes
    // under a quarter of that), so every sample reads the database.
    let mut times = vec![Vec::with_capacity(samples); paths.len()];
    let mut sizes = vec![0; paths.len()];
    for _ in 0..samples {
        let round = Instant::now();
        for (i, path) in paths.iter().enumerate() {
            let (took, size) = fetch(http, base, cookie, path).await?;
            times[i].push(took.as_secs_f64() * 1_000.0);
            sizes[i] = size;
        }
        tokio::time::sleep(UNSHARED.saturating_sub(round.elapsed())).await;
    }
    for ((path, times), bytes) in paths.iter().zip(times).zip(sizes) {
        out.push(summary(path.clone(), times, bytes));
    }
    let mut times = Vec::new();
    let mut bytes = 0;
    for i in 0..samples {
        let Some(id) = some_ids.get(i % some_ids.len().max(1)) else {
            break;
        };
        let (took, size) = fetch(http, base, cookie, &format!("/jobs/{id}")).await?;
        times.push(took.as_secs_f64() * 1_000.0);
        bytes = size;
    }
    out.push(summary("/jobs/{id}".to_owned(), times, bytes));
    Ok(out)
}

fn summary(page: String, mut times: Vec<f64>, bytes: usize) -> PageTimes {
    times.sort_by(f64::total_cmp);
    let at = |q: f64| (quantile(&times, q).unwrap_or(0.0) * 10.0).round() / 10.0;
    PageTimes {
        page,
        samples: times.len(),
        p50_ms: at(0.5),
        p95_ms: at(0.95),
        max_ms: at(1.0),
        bytes,
    }
}

/// No-op jobs per second of one worker process of 32 slots on queue `bench` (as `drover
/// worker` beside `drover serve`), with ten dashboards refreshing meanwhile when `open`.
async fn process_rate(
    target: &PgTarget,
    store: Arc<dyn JobStore>,
    http: &reqwest::Client,
    base: &str,
    cookie: &str,
    open: bool,
) -> Result<f64, Error> {
    const N: usize = PROCESSED_JOBS;
    let kind = JobKind::parse(crate::options::KIND)?;
    let queue = QueueName::parse(crate::options::QUEUE)?;
    // The worker process runs this queue's no-op kind.
    for start in (0..N).step_by(BATCH) {
        let batch = (start..N.min(start + BATCH))
            .map(|i| NewJob::new(kind.clone(), json!({ "i": i })).with_queue(queue.clone()))
            .collect();
        store.jobs_enqueue(batch).await?;
    }
    let stop = CancellationToken::new();
    let mut pollers = Vec::new();
    if open {
        for _ in 0..10 {
            let (http, base, cookie, stop) = (
                http.clone(),
                base.to_owned(),
                cookie.to_owned(),
                stop.clone(),
            );
            pollers.push(tokio::spawn(async move {
                while !stop.is_cancelled() {
                    for path in ["/", "/jobs"] {
                        let _ = fetch(&http, &base, &cookie, path).await;
                    }
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = tokio::time::sleep(REFRESH) => {}
                    }
                }
            }));
        }
    }
    let processed = crate::process::processes(target, store.as_ref(), N, 1, 32).await;
    stop.cancel();
    for poller in pollers {
        let _ = poller.await;
    }
    let processed = processed?;
    // The steady rate, without the process's start-up and the last jobs' drain.
    Ok(processed
        .middle_per_s(N)
        .unwrap_or(N as f64 / processed.took.as_secs_f64()))
}

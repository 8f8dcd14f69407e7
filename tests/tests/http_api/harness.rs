//! The harness of the HTTP API tests: a real server on a bound port over a memory or PostgreSQL
//! store, a reqwest client with the test tokens, raw HTTP/1.1 for what a client library hides
//! (chunked bodies, `Expect: 100-continue`, declared lengths), and one PostgreSQL database per
//! test.
//!
//! PostgreSQL isolation and the skip rule are the kit's (`drover_tests::postgres`): every test
//! gets a migrated database of its own (the readiness test also an empty one), dropped when the
//! test ends, panicked or not, so tests run in parallel.

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_core::{
    ClaimJobs, Finish, Job, JobId, JobKind, JobStore, QueueName, Quotas, Retry, StoreConfig,
    WorkerId,
};
use drover_http::{ApiConfig, ApiState, ApiTokens, AuthMode};
use drover_store_memory::MemoryStore;
use drover_store_postgres::sqlx::types::Uuid;
use drover_store_postgres::sqlx::{self, PgPool};
use drover_store_postgres::{PgOptions, PgStore};
pub use drover_tests::postgres::{Schema, Server, TestDatabase};
use futures::FutureExt;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Bound on any single wait in these tests (a hang fails instead of blocking CI).
pub const WAIT: Duration = Duration::from_secs(30);

/// Tenant of the `*_A` tokens.
pub const TENANT_A: &str = "tenant-a";
/// Tenant of the `*_B` tokens.
pub const TENANT_B: &str = "tenant-b";
/// Producer of tenant A.
pub const PRODUCER_A: &str = "producer-a-secret-0001";
/// Operator of tenant A only.
pub const OPERATOR_A: &str = "operator-a-secret-0001";
/// Producer of tenant B.
pub const PRODUCER_B: &str = "producer-b-secret-0001";
/// Operator of tenant B only.
pub const OPERATOR_B: &str = "operator-b-secret-0001";
/// Operator of every tenant.
pub const OPERATOR_ALL: &str = "operator-all-secret-01";

/// The token list every test server is started with (the `DROVER_API_TOKENS` format).
pub fn token_spec() -> String {
    format!(
        "{PRODUCER_A}:{TENANT_A}:producer,{OPERATOR_A}:{TENANT_A}:operator,\
         {PRODUCER_B}:{TENANT_B}:producer,{OPERATOR_B}:{TENANT_B}:operator,\
         {OPERATOR_ALL}:*:operator"
    )
}

/// A store configuration without quotas (tests that need quotas set them).
pub fn unbounded() -> StoreConfig {
    StoreConfig {
        quotas: Quotas::unbounded(),
        ..StoreConfig::default()
    }
}

/// A boxed case future.
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Which store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `MemoryStore`.
    Memory,
    /// `PgStore` on the test's own database.
    Postgres,
}

/// What one test may open: stores (on the test's database for PostgreSQL) and servers. Closes
/// everything it opened when the test ends.
pub struct Env {
    backend: Backend,
    database: Option<TestDatabase>,
    memory: Mutex<Vec<Arc<MemoryStore>>>,
    pg: Mutex<Vec<PgStore>>,
    servers: Mutex<Vec<CancellationToken>>,
}

impl Env {
    fn new(backend: Backend, database: Option<TestDatabase>) -> Self {
        Env {
            backend,
            database,
            memory: Mutex::new(Vec::new()),
            pg: Mutex::new(Vec::new()),
            servers: Mutex::new(Vec::new()),
        }
    }

    /// The test's database (PostgreSQL only).
    pub fn database(&self) -> Option<&TestDatabase> {
        self.database.as_ref()
    }

    /// A store with `config`: a fresh memory store, or a new pool on the test's PostgreSQL
    /// database (stores opened by one test share its data there).
    pub async fn store(&self, config: StoreConfig) -> Arc<dyn JobStore> {
        match self.backend {
            Backend::Memory => {
                let store = Arc::new(MemoryStore::new(config));
                self.memory.lock().unwrap().push(store.clone());
                store
            }
            Backend::Postgres => {
                let db = self.database.as_ref().expect("postgres env has a database");
                let store = PgStore::connect_with(
                    db.connect.clone(),
                    PgOptions {
                        config,
                        max_connections: 12,
                        ..PgOptions::default()
                    },
                )
                .await
                .expect("connect to the test database");
                self.pg.lock().unwrap().push(store.clone());
                Arc::new(store)
            }
        }
    }

    /// A server over `store` with the test tokens and `config`.
    pub async fn serve(&self, store: Arc<dyn JobStore>, config: ApiConfig) -> TestApi {
        let auth = AuthMode::Tokens(ApiTokens::parse(&token_spec()).expect("test tokens parse"));
        let api = TestApi::start(store, auth, config).await;
        self.servers.lock().unwrap().push(api.shutdown.clone());
        api
    }

    /// A store with `config` and a server over it with the default API settings.
    pub async fn api(&self, config: StoreConfig) -> TestApi {
        let store = self.store(config).await;
        self.serve(store, ApiConfig::default()).await
    }

    /// Erases the request hash stored with job `id`'s idempotency key, as rows written before
    /// hashes were stored look (PostgreSQL: `UPDATE drover.jobs SET request_hash = NULL`).
    pub async fn forget_request_hash(&self, id: JobId) {
        match self.backend {
            Backend::Memory => {
                for store in self.memory.lock().unwrap().iter() {
                    store.test_forget_request_hash(id);
                }
            }
            Backend::Postgres => {
                let pool = self.database.as_ref().expect("database").pool(2).await;
                let updated = execute_bound(
                    &pool,
                    "UPDATE drover.jobs SET request_hash = NULL WHERE id = $1",
                    id.as_uuid(),
                )
                .await;
                assert_eq!(updated, 1, "erase the request hash of {id}");
                pool.close().await;
            }
        }
    }

    async fn close(&self) {
        for token in self.servers.lock().unwrap().drain(..) {
            token.cancel();
        }
        let stores: Vec<PgStore> = self.pg.lock().unwrap().drain(..).collect();
        for store in stores {
            store.close().await;
        }
    }
}

/// Runs one `UPDATE`/`DELETE` with a UUID parameter; returns the rows affected (boxed, so the
/// callers' futures stay `Send` for every lifetime).
fn execute_bound<'a>(
    pool: &'a PgPool,
    statement: &'static str,
    id: Uuid,
) -> Pin<Box<dyn Future<Output = u64> + Send + 'a>> {
    Box::pin(async move {
        sqlx::query(statement)
            .bind(id)
            .execute(pool)
            .await
            .expect("run test statement")
            .rows_affected()
    })
}

/// Runs a case on a fresh memory store environment.
pub async fn run_memory<C>(case: C)
where
    C: for<'a> FnOnce(&'a Env) -> CaseFuture<'a>,
{
    let env = Env::new(Backend::Memory, None);
    let result = AssertUnwindSafe(case(&env)).catch_unwind().await;
    env.close().await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Runs a case on its own migrated PostgreSQL database, dropped afterwards.
pub async fn run_postgres<C>(name: &str, case: C)
where
    C: for<'a> FnOnce(&'a Env) -> CaseFuture<'a>,
{
    let Some(server) = Server::for_test(name) else {
        return;
    };
    let database = server.database(Schema::Migrated).await;
    let env = Env::new(Backend::Postgres, Some(database));
    let result = AssertUnwindSafe(case(&env)).catch_unwind().await;
    env.close().await;
    if let Some(db) = &env.database {
        db.drop_database().await;
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A running API server and a client for it.
pub struct TestApi {
    /// The bound address.
    pub addr: SocketAddr,
    /// The store behind it.
    pub store: Arc<dyn JobStore>,
    client: reqwest::Client,
    shutdown: CancellationToken,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

/// An HTTP answer: status, headers and the body as text and (when it parses) JSON.
#[derive(Debug)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: reqwest::header::HeaderMap,
    /// Body text.
    pub text: String,
    /// Body as JSON, `Null` when it is not JSON.
    pub json: Value,
}

impl Answer {
    /// The `job` of an enqueue, get or retry answer.
    pub fn job(&self) -> &Value {
        &self.json["job"]
    }

    /// The job id of an answer that holds a job.
    pub fn job_id(&self) -> String {
        self.job()["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no job id in {}", self.text))
            .to_owned()
    }

    /// Asserts the status, that the body has exactly the API's error shape
    /// (`{"error": {"code", "message", "field"?, "details"?}}`), the code, and the field.
    pub fn assert_error(&self, status: u16, code: &str, field: Option<&str>) -> &Self {
        assert_eq!(self.status, status, "status of {}", self.text);
        assert_error_shape(&self.json, &self.text);
        assert_eq!(self.json["error"]["code"], code, "code of {}", self.text);
        assert_eq!(
            self.json["error"]["field"].as_str(),
            field,
            "field of {}",
            self.text
        );
        self
    }

    /// The error message.
    pub fn message(&self) -> &str {
        self.json["error"]["message"].as_str().unwrap_or_default()
    }
}

/// Asserts that `json` is an error body of the one shape.
pub fn assert_error_shape(json: &Value, text: &str) {
    let root = json
        .as_object()
        .unwrap_or_else(|| panic!("error body is not a JSON object: {text}"));
    assert_eq!(root.len(), 1, "error body has only `error`: {text}");
    let error = root["error"]
        .as_object()
        .unwrap_or_else(|| panic!("`error` is an object: {text}"));
    assert!(error["code"].is_string(), "{text}");
    assert!(
        !error["message"].as_str().unwrap_or_default().is_empty(),
        "{text}"
    );
    for key in error.keys() {
        assert!(
            ["code", "message", "field", "details"].contains(&key.as_str()),
            "unexpected key {key} in {text}"
        );
    }
    if let Some(field) = error.get("field") {
        assert!(!field.as_str().unwrap_or_default().is_empty(), "{text}");
    }
}

impl TestApi {
    /// Binds 127.0.0.1 on a free port and serves the API over `store` until [`TestApi::stop`]
    /// or the end of the test.
    pub async fn start(store: Arc<dyn JobStore>, auth: AuthMode, config: ApiConfig) -> TestApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let shutdown = CancellationToken::new();
        let state = ApiState::new(store.clone(), auth, config, None);
        let server = tokio::spawn(drover_http::serve(
            listener,
            drover_http::router(state),
            shutdown.clone(),
        ));
        TestApi {
            addr,
            store,
            client: reqwest::Client::builder()
                .timeout(WAIT)
                .build()
                .expect("client"),
            shutdown,
            server: Some(server),
        }
    }

    /// The server's shutdown token.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Takes the server task (to await its end after cancelling the token).
    pub fn take_server(&mut self) -> JoinHandle<std::io::Result<()>> {
        self.server.take().expect("server task taken once")
    }

    /// `http://addr` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends a request built by `build` from the client, with `token` as bearer if given.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        build: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Answer {
        let mut request = self.client.request(method, self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = build(request).send().await.expect("send request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("read body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            text,
            json,
        }
    }

    /// `GET path`.
    pub async fn get(&self, token: Option<&str>, path: &str) -> Answer {
        self.send(reqwest::Method::GET, path, token, |r| r).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, token: Option<&str>, path: &str, body: &Value) -> Answer {
        self.send(reqwest::Method::POST, path, token, |r| r.json(body))
            .await
    }

    /// `POST path` without a body.
    pub async fn post_empty(&self, token: Option<&str>, path: &str) -> Answer {
        self.send(reqwest::Method::POST, path, token, |r| r).await
    }

    /// `POST /v1/jobs` with an `Idempotency-Key`.
    pub async fn enqueue_with_key(&self, token: &str, key: &str, body: &Value) -> Answer {
        self.send(reqwest::Method::POST, "/v1/jobs", Some(token), |r| {
            r.header("Idempotency-Key", key).json(body)
        })
        .await
    }

    /// `POST /v1/jobs`, asserting 202; returns the job id.
    pub async fn enqueue_ok(&self, token: &str, body: &Value) -> String {
        let answer = self.post(Some(token), "/v1/jobs", body).await;
        assert_eq!(answer.status, 202, "{}", answer.text);
        assert_eq!(answer.json["status"], "created", "{}", answer.text);
        answer.job_id()
    }

    /// The stored job, from the store directly.
    pub async fn stored(&self, id: &str) -> Job {
        self.store
            .job_get(id.parse().expect("job id"))
            .await
            .expect("job stored")
    }

    /// Every job of every tenant, from the store directly (at most 1,000).
    pub async fn all_jobs(&self) -> Vec<Job> {
        self.store
            .jobs_list(drover_core::ListJobs {
                limit: 1000,
                ..Default::default()
            })
            .await
            .expect("list jobs")
            .jobs
    }

    /// Claims job `id` through the store, as a worker would; answers it running.
    pub async fn claim(&self, id: &str) -> Job {
        let job = self.stored(id).await;
        let claimed = self
            .store
            .jobs_claim(ClaimJobs {
                worker: WorkerId::parse("test-worker").unwrap(),
                queues: vec![job.queue.clone()],
                kinds: vec![job.kind.clone()],
                limit: 100,
                start: 100,
                lease: Duration::from_secs(60),
            })
            .await
            .expect("claim")
            .jobs;
        claimed
            .into_iter()
            .find(|j| j.id == job.id)
            .expect("the job is claimed")
    }

    /// Runs job `id` to an end through the store, as a worker would: claims it and records
    /// `finish` (success, or a failure without retry).
    pub async fn run_job(&self, id: &str, succeed: bool) {
        let claimed = self.claim(id).await;
        let finish = if succeed {
            Finish::Succeeded {
                result: Some(serde_json::json!({"done": true})),
            }
        } else {
            Finish::Failed {
                message: "handler failed".to_owned(),
                retry: Retry::Never,
            }
        };
        self.store
            .job_finish(claimed.id, claimed.fencing_token, finish)
            .await
            .expect("finish");
    }

    /// Stops the server and waits for it to return.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            tokio::time::timeout(WAIT, server)
                .await
                .expect("server stops")
                .expect("server task")
                .expect("server result");
        }
    }
}

impl Drop for TestApi {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A kind.
pub fn kind(name: &str) -> JobKind {
    JobKind::parse(name).unwrap()
}

/// A queue.
pub fn queue(name: &str) -> QueueName {
    QueueName::parse(name).unwrap()
}

/// An answer read from a raw HTTP/1.1 exchange.
#[derive(Debug)]
pub struct RawAnswer {
    /// Status code.
    pub status: u16,
    /// Header lines, lowercase names.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl RawAnswer {
    /// The value of header `name` (lowercase), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Reads one HTTP/1.1 response (status line, headers, a `Content-Length` body) from `stream`.
pub async fn read_response(stream: &mut TcpStream) -> RawAnswer {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
            .await
            .expect("response in time")
            .expect("read response");
        assert!(n > 0, "connection closed before a response: {buffer:?}");
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line in {head}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = buffer[header_end..].to_vec();
    if status != 100 {
        let length: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while body.len() < length {
            let n = tokio::time::timeout(WAIT, stream.read(&mut chunk))
                .await
                .expect("body in time")
                .expect("read body");
            assert!(n > 0, "connection closed in the body");
            body.extend_from_slice(&chunk[..n]);
        }
    }
    RawAnswer {
        status,
        headers,
        body,
    }
}

/// Opens a connection to `addr` and writes `bytes`.
pub async fn raw_send(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(bytes).await.expect("write request");
    stream
}

/// Polls until a new connection to `addr` is refused (the server stopped listening).
pub async fn wait_until_refused(addr: SocketAddr) {
    let deadline = Instant::now() + WAIT;
    loop {
        match TcpStream::connect(addr).await {
            Err(_) => return,
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "the server still accepts connections"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Awaits `future` for at most [`WAIT`].
pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {WAIT:?}"))
}

/// Binds 127.0.0.1 on a free port and spawns `serve` (e.g. `drover_http::serve` of a router)
/// on it; cancel the returned token to stop it.
pub async fn serve_on_free_port<F, Fut>(serve: F) -> (SocketAddr, CancellationToken)
where
    F: FnOnce(TcpListener, CancellationToken) -> Fut,
    Fut: Future<Output = std::io::Result<()>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let shutdown = CancellationToken::new();
    tokio::spawn(serve(listener, shutdown.clone()));
    (addr, shutdown)
}

/// `GET path` over raw HTTP/1.1, with `token` as bearer if given.
pub async fn raw_get(addr: SocketAddr, path: &str, token: Option<&str>) -> RawAnswer {
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n{auth}Connection: close\r\n\r\n");
    let mut stream = raw_send(addr, request.as_bytes()).await;
    read_response(&mut stream).await
}

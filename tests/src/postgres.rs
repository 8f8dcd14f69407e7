//! The PostgreSQL test kit every test binary uses: the server of `DROVER_TEST_DATABASE_URL`, the
//! one rule for a test that cannot run ([`skip_or_fail`]), and a database per test.
//!
//! Without `DROVER_TEST_DATABASE_URL` a PostgreSQL test prints a line starting with `SKIPPED `
//! (which CI looks for) and passes, unless `DROVER_REQUIRE_POSTGRES` is set, when it fails: CI
//! must never skip a PostgreSQL test.
//!
//! Isolation: every [`TestDatabase`] is its own database `drover_t_<uuid v7 simple>`, dropped
//! `WITH (FORCE)` when the value is dropped (also when the test panics), so tests run in
//! parallel. A migrated one is a copy of the template database `drover_t_template_<checksum>`
//! that holds the migrated schema; the template is built once (under an advisory lock, so
//! parallel test processes agree) and reused while the migrations' checksum is unchanged.
//! Copying the template takes about 50 ms on a 2-core machine against about 70 ms for creating
//! an empty database and migrating it. Databases of killed runs are swept when older than
//! [`crate::leftovers::LEFTOVER_AGE`], templates of other migrations at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_store_postgres::migrations;
use drover_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use drover_store_postgres::sqlx::types::Uuid;
use drover_store_postgres::sqlx::{self, PgPool};
use futures::future::BoxFuture;

/// Environment variable naming the server (any database on it) the tests may use.
pub const URL_VAR: &str = "DROVER_TEST_DATABASE_URL";
/// Set (by CI) to make a test that would skip fail instead.
pub const REQUIRE_VAR: &str = "DROVER_REQUIRE_POSTGRES";
/// Prefix of the databases the tests create.
const DATABASE_PREFIX: &str = "drover_t_";
/// Prefix of the migrated templates.
const TEMPLATE_PREFIX: &str = "drover_t_template_";
/// Advisory lock key serializing template creation across test processes.
const TEMPLATE_LOCK: i64 = 0x6472_6f76_6572_7474; // "droverttt"
/// Whether this process already swept leftover databases.
static SWEPT: AtomicBool = AtomicBool::new(false);

/// Skips `subject` (for example `postgres test foo`) because of `why`: prints
/// `SKIPPED <subject>: <why>` and answers `None`, or fails when `DROVER_REQUIRE_POSTGRES` is set.
///
/// # Panics
/// When `DROVER_REQUIRE_POSTGRES` is set.
pub fn skip_or_fail<T>(subject: &str, why: &str) -> Option<T> {
    if std::env::var_os(REQUIRE_VAR).is_some() {
        panic!("{subject} cannot run: {why}, and {REQUIRE_VAR} forbids skipping");
    }
    eprintln!("SKIPPED {subject}: {why}");
    None
}

/// What a new test database holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// Nothing: an empty database, as before `drover migrate`.
    Empty,
    /// The migrated Drover schema (a copy of the template).
    Migrated,
}

/// A PostgreSQL server the tests create databases on.
#[derive(Clone)]
pub struct Server {
    /// Connect options of an administrative database on it.
    pub admin: PgConnectOptions,
    /// `postgres://user@host:port` (plus password, if any) without a database.
    url_base: String,
    /// The URL's query (`?...`), or empty.
    url_query: String,
}

impl Server {
    /// The server of `DROVER_TEST_DATABASE_URL`, or `None` when it is unset or empty.
    pub fn from_env() -> Option<Server> {
        let url = std::env::var(URL_VAR).ok().filter(|u| !u.is_empty())?;
        Some(Server::from_url(&url))
    }

    /// The server of `DROVER_TEST_DATABASE_URL` for `test`, or `None` after [`skip_or_fail`]
    /// printed why it skips.
    ///
    /// # Panics
    /// When the variable is unset and `DROVER_REQUIRE_POSTGRES` is set.
    pub fn for_test(test: &str) -> Option<Server> {
        Server::from_env().or_else(|| {
            skip_or_fail(
                &format!("postgres test {test}"),
                &format!("{URL_VAR} is not set"),
            )
        })
    }

    /// A server from the URL of any database on it.
    ///
    /// # Panics
    /// When `url` does not parse.
    pub fn from_url(url: &str) -> Server {
        let admin = drover_store_postgres::connect_options(url)
            .unwrap_or_else(|e| panic!("the test database URL does not parse: {e}"));
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (url, String::new()),
        };
        let authority = base.find("://").map_or(0, |i| i + 3);
        let path = base[authority..]
            .find('/')
            .map_or(base.len(), |i| i + authority);
        Server {
            admin,
            url_base: base[..path].to_owned(),
            url_query: query,
        }
    }

    /// The URL of database `name` on this server (user, password, host and query kept).
    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}{}", self.url_base, self.url_query)
    }

    /// A small pool on the administrative database.
    pub async fn admin_pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(self.admin.clone())
            .await
            .expect("connect to DROVER_TEST_DATABASE_URL")
    }

    /// A new database of one test holding `schema`; dropped with the value.
    pub async fn database(&self, schema: Schema) -> TestDatabase {
        let admin = self.admin_pool().await;
        if !SWEPT.swap(true, Ordering::SeqCst) {
            sweep(&admin).await;
        }
        let name = format!("{DATABASE_PREFIX}{}", Uuid::now_v7().simple());
        let statement = match schema {
            Schema::Empty => format!("CREATE DATABASE {}", ident(&name)),
            Schema::Migrated => {
                let template = self.ensure_template(&admin).await;
                format!(
                    "CREATE DATABASE {} TEMPLATE {}",
                    ident(&name),
                    ident(&template)
                )
            }
        };
        let mut tries = 0;
        loop {
            match execute(&admin, statement.clone()).await {
                Ok(()) => break,
                // 55006 "source database is being accessed by other users": try again briefly.
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some("55006") && tries < 300 =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("create test database: {e}"),
            }
        }
        admin.close().await;
        TestDatabase {
            connect: self.admin.clone().database(&name),
            url: self.url(&name),
            server: self.clone(),
            name,
            dropped: AtomicBool::new(false),
        }
    }

    /// Creates (once, across processes) the migrated template database; answers its name.
    async fn ensure_template(&self, admin: &PgPool) -> String {
        let name = template_name();
        // Published templates never change: only a missing one needs the lock.
        if database_exists(admin, name.clone()).await {
            return name;
        }
        let mut conn = admin.acquire().await.expect("admin connection");
        execute_on(
            &mut conn,
            format!("SELECT pg_advisory_lock({TEMPLATE_LOCK})"),
        )
        .await
        .expect("template lock");
        if !database_exists(admin, name.clone()).await {
            let building = format!("{name}_building");
            execute_on(
                &mut conn,
                format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", ident(&building)),
            )
            .await
            .expect("drop half-built template");
            execute_on(&mut conn, format!("CREATE DATABASE {}", ident(&building)))
                .await
                .expect("create template");
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect_with(self.admin.clone().database(&building))
                .await
                .expect("connect to template");
            drover_store_postgres::migrate(&pool)
                .await
                .expect("migrate template");
            pool.close().await;
            publish_template(&mut conn, &building, &name).await;
            // Like template0: nobody (not even autovacuum) connects to it, so copies never wait.
            execute_on(
                &mut conn,
                format!(
                    "ALTER DATABASE {} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
                    ident(&name)
                ),
            )
            .await
            .expect("seal template");
        }
        execute_on(
            &mut conn,
            format!("SELECT pg_advisory_unlock({TEMPLATE_LOCK})"),
        )
        .await
        .expect("template unlock");
        name
    }
}

/// One test's database; dropped `WITH (FORCE)` when the value is dropped.
pub struct TestDatabase {
    /// Its name, `drover_t_<uuid v7 simple>`.
    pub name: String,
    /// Connect options of the database itself.
    pub connect: PgConnectOptions,
    /// Its URL, handed to processes as `DROVER_DATABASE_URL`.
    pub url: String,
    server: Server,
    /// Whether [`TestDatabase::drop_database`] dropped it already.
    dropped: AtomicBool,
}

impl TestDatabase {
    /// The server the database is on.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// A pool of at most `connections` on the database, for SQL a test runs itself.
    pub async fn pool(&self, connections: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(self.connect.clone())
            .await
            .expect("connect to the test database")
    }

    /// Drops the database now, closing whatever connections remain.
    ///
    /// # Panics
    /// When the server refuses.
    pub async fn drop_database(&self) {
        if self.dropped.swap(true, Ordering::SeqCst) {
            return;
        }
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(self.server.admin.clone())
            .await
            .expect("connect to DROVER_TEST_DATABASE_URL");
        execute(&admin, drop_statement(&self.name))
            .await
            .expect("drop test database");
        admin.close().await;
    }
}

/// Drop runs in async tests and while unwinding: the database is dropped from a thread with a
/// runtime of its own (the test's runtime may be unwinding), and waited for.
impl Drop for TestDatabase {
    fn drop(&mut self) {
        if *self.dropped.get_mut() {
            return;
        }
        let admin = self.server.admin.clone();
        let statement = drop_statement(&self.name);
        let dropper = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(pool) = PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with(admin)
                    .await
                else {
                    return;
                };
                let _ = execute(&pool, statement).await;
                pool.close().await;
            });
        });
        let _ = dropper.join();
    }
}

fn drop_statement(name: &str) -> String {
    format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", ident(name))
}

/// The template's name for the migrations compiled into this binary.
fn template_name() -> String {
    use std::hash::{Hash, Hasher};
    let mut all = String::new();
    for migration in migrations() {
        all.push_str(&migration.checksum());
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    all.hash(&mut hasher);
    format!("{TEMPLATE_PREFIX}{:016x}", hasher.finish())
}

/// Drops test databases older than [`crate::leftovers::LEFTOVER_AGE`] (their UUID v7 holds the
/// creation time) and templates of other migrations.
async fn sweep(admin: &PgPool) {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'drover\\_t\\_%'")
            .fetch_all(admin)
            .await
            .expect("list test databases");
    let current = template_name();
    for name in names {
        let doomed = if let Some(rest) = name.strip_prefix(TEMPLATE_PREFIX) {
            name != current && !rest.ends_with("_building")
        } else {
            crate::leftovers::is_leftover(&name, DATABASE_PREFIX)
        };
        if doomed {
            // Templates must be unmarked before they can be dropped.
            let _ = execute(
                admin,
                format!("ALTER DATABASE {} WITH IS_TEMPLATE false", ident(&name)),
            )
            .await;
            let _ = execute(admin, drop_statement(&name)).await;
        }
    }
}

/// Runs one statement without parameters on `conn` (boxed, which keeps the callers' futures
/// `Send` for every lifetime, as `async_trait` requires).
pub fn execute_on(
    conn: &mut sqlx::PgConnection,
    statement: String,
) -> BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(async move {
        sqlx::query(&statement).execute(conn).await?;
        Ok(())
    })
}

/// Runs one statement without parameters on `pool` (boxed like [`execute_on`]).
pub fn execute(pool: &PgPool, statement: String) -> BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(async move {
        sqlx::query(&statement).execute(pool).await?;
        Ok(())
    })
}

/// Renames the migrated `building` database to `name`. A rename needs the database to have no
/// sessions, but a closed pool's backends exit a moment after the client let go (and
/// autovacuum may visit a new database): so connections are refused first, remaining
/// sessions are terminated, and a rename refused with 55006 (object in use) is tried again
/// until a deadline.
fn publish_template<'a>(
    conn: &'a mut sqlx::PgConnection,
    building: &'a str,
    name: &'a str,
) -> BoxFuture<'a, ()> {
    Box::pin(async move {
        execute_on(
            conn,
            format!(
                "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
                ident(building)
            ),
        )
        .await
        .expect("close the template to new sessions");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
            )
            .bind(building)
            .execute(&mut *conn)
            .await
            .expect("end the template's sessions");
            let renamed = execute_on(
                conn,
                format!(
                    "ALTER DATABASE {} RENAME TO {}",
                    ident(building),
                    ident(name)
                ),
            )
            .await;
            match renamed {
                Ok(()) => return,
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some("55006") && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("publish template: {e}"),
            }
        }
    })
}

/// Whether a database exists (boxed like [`execute_on`]).
fn database_exists(pool: &PgPool, name: String) -> BoxFuture<'_, bool> {
    Box::pin(async move {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(name)
            .fetch_one(pool)
            .await
            .expect("look up database")
    })
}

/// A double-quoted identifier; names here are generated (UUIDs, hex), never user input.
pub fn ident(name: &str) -> String {
    assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    format!("\"{name}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_everything_but_the_database() {
        let server = Server::from_url("postgres://u:p@h:5435/test?sslmode=disable");
        assert_eq!(
            server.url("drover_t_x"),
            "postgres://u:p@h:5435/drover_t_x?sslmode=disable"
        );
        let server = Server::from_url("postgres://h");
        assert_eq!(server.url("d"), "postgres://h/d");
    }
}

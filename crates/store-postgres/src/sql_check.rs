//! Every SQL statement of the store checked against the schema the migrations build (docs/adr,
//! "SQL checked by a test"): each statement of sql.rs is prepared (parsed, its names resolved,
//! its parameter and column types inferred) in a freshly migrated database, the statements the
//! store builds at run time (the COPY statements) are run with no rows, every `.sql` file is
//! part of some statement, and the statements the enqueue binds and decodes by hand answer the
//! parameter types and column names the Rust code uses. A failure names the file.
//!
//! Needs `DROVER_TEST_DATABASE_URL` (a server where the test may create a database); without
//! it the test skips, unless `DROVER_REQUIRE_POSTGRES` is set, when it fails instead.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Column, Connection, Executor, PgConnection, Postgres, TypeInfo};
use uuid::Uuid;

use crate::{enqueue, sql};

/// The PostgreSQL type name of a Rust type as sqlx binds it.
fn name<T: sqlx::Type<Postgres>>() -> String {
    T::type_info().name().to_owned()
}

/// The parameter types of the batch enqueue statements, from the Rust types `Columns::bind`
/// binds (enqueue_insert_rows.sql), then the counting flags, the tenants and the wake flag.
fn batch_parameters() -> Vec<String> {
    vec![
        name::<Vec<Uuid>>(),
        name::<Vec<&str>>(),
        name::<Vec<&str>>(),
        name::<Vec<&str>>(),
        name::<Vec<&Value>>(),
        name::<Vec<Option<&Value>>>(),
        name::<Vec<i16>>(),
        name::<Vec<Option<DateTime<Utc>>>>(),
        name::<Vec<Option<i64>>>(),
        name::<Vec<i32>>(),
        name::<Vec<Option<&str>>>(),
        name::<Vec<Option<&str>>>(),
        name::<Vec<Option<&str>>>(),
        name::<Vec<String>>(),
        name::<bool>(),
        name::<bool>(),
        name::<Vec<&str>>(),
        name::<bool>(),
    ]
}

/// The parameter types of enqueue_one.sql, from the Rust types `insert_one` binds.
fn one_parameters() -> Vec<String> {
    vec![
        name::<Uuid>(),
        name::<&str>(),
        name::<&str>(),
        name::<&str>(),
        name::<&Value>(),
        name::<&Value>(),
        name::<i16>(),
        name::<Option<DateTime<Utc>>>(),
        name::<Option<i64>>(),
        name::<i32>(),
        name::<Option<&str>>(),
        name::<Option<&str>>(),
        name::<Option<&str>>(),
        name::<Vec<&str>>(),
        name::<bool>(),
    ]
}

/// The columns `Inserted` decodes by name.
const INSERTED_COLUMNS: &[&str] = &[
    "id",
    "run_at",
    "created_at",
    "ready",
    "pending_before",
    "tenant_pending_before",
];

/// What each hand-bound statement must take and answer.
fn expected(text: &str) -> Option<(Vec<String>, Vec<&'static str>)> {
    if text == sql::ENQUEUE_INSERT {
        Some((batch_parameters(), INSERTED_COLUMNS.to_vec()))
    } else if text == sql::ENQUEUE_INSERT_KEYLESS {
        let mut columns = INSERTED_COLUMNS.to_vec();
        columns.push("inserted");
        Some((batch_parameters(), columns))
    } else if text == sql::ENQUEUE_ONE {
        Some((one_parameters(), INSERTED_COLUMNS.to_vec()))
    } else {
        None
    }
}

/// A database of its own on the test server, migrated; dropped by [`Scratch::drop_database`].
struct Scratch {
    admin: PgConnectOptions,
    name: String,
}

impl Scratch {
    /// `None` when no test server is configured and none is required.
    async fn create() -> Option<(Scratch, PgConnection)> {
        let url = match std::env::var("DROVER_TEST_DATABASE_URL") {
            Ok(url) => url,
            Err(_) if std::env::var_os("DROVER_REQUIRE_POSTGRES").is_some() => {
                panic!("DROVER_REQUIRE_POSTGRES is set but DROVER_TEST_DATABASE_URL is not")
            }
            Err(_) => {
                eprintln!("skipped: DROVER_TEST_DATABASE_URL is not set");
                return None;
            }
        };
        let admin: PgConnectOptions = url.parse().expect("DROVER_TEST_DATABASE_URL");
        let name = format!("drover_sql_{}", uuid::Uuid::now_v7().simple());
        let mut conn = PgConnection::connect_with(&admin)
            .await
            .expect("connect to the test server");
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create the scratch database");
        conn.close().await.ok();
        let options = admin.clone().database(&name);
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(options.clone())
            .await
            .expect("connect to the scratch database");
        crate::migrate(&pool).await.expect("migrate");
        pool.close().await;
        let conn = PgConnection::connect_with(&options)
            .await
            .expect("connect to the scratch database");
        Some((Scratch { admin, name }, conn))
    }

    async fn drop_database(self) {
        let mut conn = PgConnection::connect_with(&self.admin)
            .await
            .expect("connect to the test server");
        conn.execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str())
            .await
            .expect("drop the scratch database");
    }
}

/// The checks of one statement; the problems found, each naming `files`.
async fn check_statement(conn: &mut PgConnection, files: &str, text: &str) -> Vec<String> {
    let describe = match conn.describe(text).await {
        Ok(describe) => describe,
        Err(error) => return vec![format!("{files} does not prepare: {error}")],
    };
    let Some((parameters, columns)) = expected(text) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    let found: Vec<String> = match &describe.parameters {
        Some(sqlx::Either::Left(types)) => types.iter().map(|t| t.name().to_owned()).collect(),
        other => {
            return vec![format!("{files}: parameter types not described: {other:?}")];
        }
    };
    if found != parameters {
        problems.push(format!(
            "{files} takes parameters {found:?}, the code binds {parameters:?}"
        ));
    }
    let names: BTreeSet<&str> = describe.columns.iter().map(|c| c.name()).collect();
    for column in columns {
        if !names.contains(column) {
            problems.push(format!(
                "{files} answers no column `{column}` (it answers {names:?})"
            ));
        }
    }
    problems
}

/// Runs a COPY statement with no rows (binary header and trailer only) in a transaction that
/// is rolled back.
async fn check_copy(conn: &mut PgConnection, statement: &str) -> Result<(), sqlx::Error> {
    let mut tx = conn.begin().await?;
    let mut copy = tx.copy_in_raw(statement).await?;
    copy.send(enqueue::copy_empty_data()).await?;
    copy.finish().await?;
    tx.rollback().await
}

#[tokio::test]
async fn every_statement_prepares_against_the_migrated_schema() {
    let Some((scratch, mut conn)) = Scratch::create().await else {
        return;
    };
    let mut problems = Vec::new();
    for (files, text) in sql::ALL {
        problems.extend(check_statement(&mut conn, files, text).await);
    }
    for statement in enqueue::copy_statements() {
        if let Err(error) = check_copy(&mut conn, statement).await {
            problems.push(format!("copy.rs `{statement}` fails: {error}"));
        }
    }
    conn.close().await.ok();
    scratch.drop_database().await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Files that are scripts, not statements: several statements run in one simple query, which
/// cannot be prepared (the migrator runs its bootstrap before every migration, so every test
/// database runs it).
const SCRIPTS: &[&str] = &["migrations_bootstrap.sql"];

#[test]
fn every_sql_file_is_part_of_a_statement() {
    let used: BTreeSet<&str> = sql::ALL
        .iter()
        .flat_map(|(files, _)| files.split(" + "))
        .collect();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/sql");
    let mut unused = Vec::new();
    for entry in std::fs::read_dir(dir).expect("src/sql") {
        let name = entry.expect("src/sql entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".sql")
            && !used.contains(name.as_ref())
            && !SCRIPTS.contains(&name.as_ref())
        {
            unused.push(name.into_owned());
        }
    }
    assert!(
        unused.is_empty(),
        "not part of any statement in sql.rs: {unused:?}"
    );
}

#[test]
fn the_checked_statements_are_recognised() {
    for text in [
        sql::ENQUEUE_INSERT,
        sql::ENQUEUE_INSERT_KEYLESS,
        sql::ENQUEUE_ONE,
    ] {
        assert!(expected(text).is_some());
    }
    assert_eq!(enqueue::copy_statements().len(), 4);
}

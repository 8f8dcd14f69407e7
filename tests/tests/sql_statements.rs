//! Every SQL statement of the PostgreSQL store checked against the schema the migrations build
//! (docs/adr/0003-sql-checked-by-a-test.md): each statement is prepared (parsed, its names
//! resolved, its parameter and column types inferred) in a migrated test database, the COPY
//! statements the store builds are run with no rows, every `.sql` file is part of some
//! statement, and the statements the enqueue binds and decodes by hand answer the parameter
//! types and column names the Rust code uses. A failure names the file.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use drover_store_postgres::sqlx::{
    self, Column, Connection, Executor, PgConnection, Postgres, TypeInfo,
};
use drover_store_postgres::statements::{copy_empty_data, copy_statements, ALL};
use drover_tests::postgres::{Schema, Server};
use serde_json::Value;
use uuid::Uuid;

/// The PostgreSQL type name of a Rust type as sqlx binds it.
fn name<T: sqlx::Type<Postgres>>() -> String {
    T::type_info().name().to_owned()
}

/// The parameter types of the batch enqueue statements, from the Rust types `Columns::bind`
/// binds (enqueue_insert_rows.sql), then the counting flags, the tenants, the wake flag, the
/// family (workflow and parent) and the trace contexts.
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
        name::<Option<Uuid>>(),
        name::<Option<Uuid>>(),
        name::<Vec<Option<Value>>>(),
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
        name::<Option<Uuid>>(),
        name::<Option<Uuid>>(),
        name::<Option<Value>>(),
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

/// What each hand-bound statement must take and answer, by the first file it is joined from.
fn expected(files: &str) -> Option<(Vec<String>, Vec<&'static str>)> {
    match files.split(" + ").next() {
        Some("enqueue_insert.sql") => Some((batch_parameters(), INSERTED_COLUMNS.to_vec())),
        Some("enqueue_insert_keyless.sql") => {
            let mut columns = INSERTED_COLUMNS.to_vec();
            columns.push("inserted");
            Some((batch_parameters(), columns))
        }
        Some("enqueue_one.sql") => Some((one_parameters(), INSERTED_COLUMNS.to_vec())),
        _ => None,
    }
}

/// The checks of one statement; the problems found, each naming `files`.
async fn check_statement(conn: &mut PgConnection, files: &str, text: &str) -> Vec<String> {
    let describe = match conn.describe(text).await {
        Ok(describe) => describe,
        Err(error) => return vec![format!("{files} does not prepare: {error}")],
    };
    let Some((parameters, columns)) = expected(files) else {
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
    copy.send(copy_empty_data()).await?;
    copy.finish().await?;
    tx.rollback().await
}

#[tokio::test]
async fn every_statement_prepares_against_the_migrated_schema() {
    let Some(server) = Server::for_test("every_statement_prepares_against_the_migrated_schema")
    else {
        return;
    };
    let database = server.database(Schema::Migrated).await;
    let pool = database.pool(1).await;
    let mut conn = pool.acquire().await.expect("a connection");
    let mut problems = Vec::new();
    for (files, text) in ALL {
        problems.extend(check_statement(&mut conn, files, text).await);
    }
    for statement in copy_statements() {
        if let Err(error) = check_copy(&mut conn, statement).await {
            problems.push(format!("copy.rs `{statement}` fails: {error}"));
        }
    }
    drop(conn);
    pool.close().await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Files that are scripts, not statements: several statements run in one simple query, which
/// cannot be prepared (the migrator runs its bootstrap before every migration, so every test
/// database runs it).
const SCRIPTS: &[&str] = &["migrations_bootstrap.sql"];

#[test]
fn every_sql_file_is_part_of_a_statement() {
    let used: BTreeSet<&str> = ALL
        .iter()
        .flat_map(|(files, _)| files.split(" + "))
        .collect();
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/store-postgres/src/sql"
    );
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
    let checked = ALL
        .iter()
        .filter(|(files, _)| expected(files).is_some())
        .count();
    assert_eq!(checked, 3, "the three hand-bound enqueue statements");
    assert_eq!(copy_statements().len(), 4);
}

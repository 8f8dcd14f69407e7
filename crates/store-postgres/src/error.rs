//! The one place where sqlx errors become `drover_core::Error` (docs/design.md
//! section 5): transient trouble is `Unavailable` (retry with backoff), a missing or old schema
//! is `Fatal` telling the operator to run `drover migrate`, data PostgreSQL cannot store is
//! `InvalidInput`.
//!
//! Messages never include job args, SQL parameters, passwords or connection strings: database
//! messages are not pasted in, only the SQLSTATE code and the constraint name; data errors
//! (class 22) drop the driver error entirely because its text may quote the offending value.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use drover_core::{BoxError, Error};

/// The message of every "schema missing" error.
pub(crate) const NOT_MIGRATED: &str = "database schema is not migrated (run `drover migrate`)";

/// Maps a sqlx error to the contract's error (the only such mapping in this crate).
///
/// - connection refused/lost, I/O, TLS, protocol, pool timeout, `08xxx`, admin/crash shutdown
///   (`57P01`, `57P02`), cannot connect now (`57P03`), too many connections (`53300`), deadlock
///   (`40P01`), serialization failure (`40001`), lock not available (`55P03`), statement
///   cancelled (`57014`) -> [`Error::Unavailable`];
/// - missing schema, relation, column or function (`3F000`, `42P01`, `42703`, `42883`) ->
///   [`Error::Fatal`] saying to run `drover migrate`;
/// - unsupported Unicode escape / NUL in text (`22P05`, `22021`) and other data exceptions
///   (class `22`) -> [`Error::InvalidInput`];
/// - unique violation (`23505`) -> [`Error::Conflict`];
/// - anything else -> [`Error::Fatal`] with the SQLSTATE.
///
/// Errors that mean a connection was lost are also noted (see [`connection_lost_recently`]).
pub(crate) fn map_sqlx_error(error: sqlx::Error) -> Error {
    if connection_lost(&error) {
        note_connection_lost();
    }
    match error {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let constraint = db.constraint().map(str::to_owned);
            map_database_error(&code, constraint, Box::new(sqlx::Error::Database(db)))
        }
        sqlx::Error::Io(e) => unavailable("lost or could not open the database connection", e),
        sqlx::Error::Tls(e) => unavailable_boxed("TLS failure talking to the database", e),
        sqlx::Error::Protocol(_) => Error::unavailable("database protocol error"),
        sqlx::Error::PoolTimedOut => Error::unavailable(
            "timed out waiting for a database connection from the pool (pool too small or database down)",
        ),
        sqlx::Error::WorkerCrashed => Error::unavailable("database connection worker crashed"),
        sqlx::Error::BeginFailed => Error::unavailable("could not begin a database transaction"),
        sqlx::Error::PoolClosed => Error::fatal("the store was closed"),
        sqlx::Error::Configuration(_) => {
            Error::fatal("invalid database configuration (check the database URL)")
        }
        sqlx::Error::RowNotFound => Error::fatal("database returned no row where one was expected"),
        sqlx::Error::ColumnDecode { index, .. } => Error::fatal(format!(
            "could not decode database column {index} (schema newer or older than this binary?)"
        )),
        sqlx::Error::ColumnNotFound(column) => Error::Fatal {
            message: format!("database column {column} is missing; {NOT_MIGRATED}"),
            source: None,
        },
        sqlx::Error::TypeNotFound { type_name } => {
            Error::fatal(format!("database type {type_name} is missing; {NOT_MIGRATED}"))
        }
        sqlx::Error::Decode(_) => Error::fatal("could not decode a database value"),
        sqlx::Error::Encode(_) => Error::fatal("could not encode a query parameter"),
        other => Error::Fatal {
            message: "unexpected database driver error".to_owned(),
            source: Some(Box::new(other)),
        },
    }
}

/// Whether `error` is a deadlock (`40P01`) or serialization failure (`40001`) that
/// [`map_sqlx_error`] turned into `Unavailable`: the transaction was rolled back by the server
/// and may be tried again as a whole (transaction.rs, `retried!`).
pub(crate) fn is_write_conflict(error: &Error) -> bool {
    match error {
        Error::Unavailable { message, .. } => {
            message.ends_with("(SQLSTATE 40P01)") || message.ends_with("(SQLSTATE 40001)")
        }
        _ => false,
    }
}

/// Maps a server error by SQLSTATE.
fn map_database_error(code: &str, constraint: Option<String>, source: BoxError) -> Error {
    let transient = code.starts_with("08")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "53300" | "40P01" | "40001" | "55P03" | "57014"
        );
    if transient {
        let what = match code {
            "57P01" => "the database is shutting down (admin shutdown)",
            "57P02" => "the database crashed (crash shutdown)",
            "57P03" => "the database cannot accept connections yet",
            "53300" => "the database has too many connections",
            "40P01" => "deadlock detected",
            "40001" => "serialization failure",
            "55P03" => "lock not available",
            "57014" => "statement cancelled",
            _ => "database connection failure",
        };
        return Error::Unavailable {
            message: format!("{what} (SQLSTATE {code})"),
            source: Some(source),
        };
    }
    match code {
        "3F000" | "42P01" | "42703" | "42883" | "42704" => Error::Fatal {
            message: format!("{NOT_MIGRATED}: a drover object is missing (SQLSTATE {code})"),
            source: Some(source),
        },
        "22P05" | "22021" => Error::invalid(
            "json",
            "must not contain the NUL character (\\u0000) or text PostgreSQL cannot store",
        ),
        "23505" => Error::Conflict {
            reason: match constraint {
                Some(name) => format!("another job already holds this key ({name})"),
                None => "another row already holds this key".to_owned(),
            },
            existing: None,
            field: None,
        },
        _ if code.starts_with("22") => Error::invalid(
            "input",
            format!("PostgreSQL refused a value (SQLSTATE {code})"),
        ),
        _ => Error::Fatal {
            message: format!("database error (SQLSTATE {code})"),
            source: Some(source),
        },
    }
}

/// After a lost connection, how long every pooled connection is checked (pinged) before use,
/// whatever its idle time: the server may have dropped all of them (restart, failover,
/// `pg_terminate_backend`).
pub(crate) const CONNECTION_SUSPECT_WINDOW: Duration = Duration::from_secs(10);

/// When this process last saw a lost connection, in milliseconds since [`epoch`] plus one (0:
/// never).
static CONNECTION_LOST_AT_MS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// True for driver errors that mean the connection is gone (I/O, TLS, protocol, server
/// shutdown or connection-class SQLSTATE).
fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// Records that a connection was just lost.
pub(crate) fn note_connection_lost() {
    let ms = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX - 1);
    CONNECTION_LOST_AT_MS.store(ms.saturating_add(1), Ordering::Relaxed);
}

/// True when this process lost a database connection less than
/// [`CONNECTION_SUSPECT_WINDOW`] ago (any store: the hint is process-wide and only makes the
/// pools check connections more often).
pub(crate) fn connection_lost_recently() -> bool {
    let at = CONNECTION_LOST_AT_MS.load(Ordering::Relaxed);
    if at == 0 {
        return false;
    }
    let now = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX);
    now.saturating_sub(at - 1) < u64::try_from(CONNECTION_SUSPECT_WINDOW.as_millis()).unwrap_or(0)
}

fn unavailable(message: &str, source: std::io::Error) -> Error {
    Error::Unavailable {
        message: message.to_owned(),
        source: Some(Box::new(source)),
    }
}

fn unavailable_boxed(message: &str, source: BoxError) -> Error {
    Error::Unavailable {
        message: message.to_owned(),
        source: Some(source),
    }
}

/// Converts any sqlx result into the contract's result.
pub(crate) trait SqlxResultExt<T> {
    /// Maps the error with [`map_sqlx_error`].
    fn store_err(self) -> Result<T, Error>;
}

impl<T> SqlxResultExt<T> for Result<T, sqlx::Error> {
    fn store_err(self) -> Result<T, Error> {
        self.map_err(map_sqlx_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed() -> BoxError {
        Box::new(std::io::Error::other("x"))
    }

    #[test]
    fn codes_map_to_the_contract() {
        for code in ["57P01", "57P03", "40P01", "40001", "08006", "08001"] {
            assert!(
                map_database_error(code, None, boxed()).is_transient(),
                "{code}"
            );
        }
        for code in ["3F000", "42P01", "42883"] {
            let e = map_database_error(code, None, boxed());
            assert!(matches!(e, Error::Fatal { .. }), "{code}");
            assert!(e.to_string().contains("drover migrate"));
        }
        for code in ["22P05", "22021"] {
            assert!(matches!(
                map_database_error(code, None, boxed()),
                Error::InvalidInput { .. }
            ));
        }
        assert!(matches!(
            map_sqlx_error(sqlx::Error::PoolTimedOut),
            Error::Unavailable { .. }
        ));
        assert!(matches!(
            map_sqlx_error(sqlx::Error::Io(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused
            ))),
            Error::Unavailable { .. }
        ));
        assert!(connection_lost_recently(), "a lost connection is noted");
    }
}

//! What stood in a migration step's way: the sessions holding the oldest transactions, as
//! a lock failure names them, and what the operator can do.

use std::time::Duration;

use sqlx::PgConnection;

use crate::sql;

/// Most sessions a lock failure names.
const BLOCKERS_SHOWN: i64 = 3;

/// A session that may have held a lock a step waited for (migrate_blockers.sql).
#[derive(Debug, sqlx::FromRow)]
pub(super) struct Blocker {
    pid: i32,
    user_name: Option<String>,
    application_name: Option<String>,
    backend_type: Option<String>,
    state: Option<String>,
    transaction_age_ms: i64,
    holds_drover_lock: bool,
}

/// The sessions of this database whose transaction is older than `older_than`, those
/// holding a lock on a Drover table first; empty when none (or when they cannot be read).
pub(super) async fn blockers(conn: &mut PgConnection, older_than: Duration) -> Vec<Blocker> {
    let millis = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    sqlx::query_as::<_, Blocker>(sql::MIGRATE_BLOCKERS)
        .bind(millis)
        .bind(BLOCKERS_SHOWN)
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_default()
}

/// "blocked by pid 42 (...)": the sessions, never their query text (it may hold job data).
pub(super) fn describe(blockers: &[Blocker]) -> String {
    if blockers.is_empty() {
        return "no session visible to this role held a transaction open that long (the table is busy with short transactions, or a role with pg_read_all_stats would see more)".to_owned();
    }
    let sessions: Vec<String> = blockers
        .iter()
        .map(|b| {
            let mut facts = Vec::new();
            if b.backend_type
                .as_deref()
                .is_some_and(|t| t != "client backend")
            {
                facts.push(b.backend_type.clone().unwrap_or_default());
            }
            if let Some(user) = b.user_name.as_deref().filter(|u| !u.is_empty()) {
                facts.push(format!("user {user}"));
            }
            if let Some(app) = b.application_name.as_deref().filter(|a| !a.is_empty()) {
                facts.push(format!("application {app:?}"));
            }
            if let Some(state) = b.state.as_deref().filter(|s| !s.is_empty()) {
                facts.push(state.to_owned());
            }
            facts.push(format!(
                "transaction open {:.1} s",
                b.transaction_age_ms as f64 / 1000.0
            ));
            if b.holds_drover_lock {
                facts.push("holds a lock on a drover table".to_owned());
            }
            format!("pid {} ({})", b.pid, facts.join(", "))
        })
        .collect();
    format!("oldest transactions: {}", sessions.join("; "))
}

/// What the operator can do about `blockers`.
pub(super) fn remedy(blockers: &[Blocker]) -> String {
    match blockers.first() {
        Some(b) if b.backend_type.as_deref() == Some("autovacuum worker") => format!(
            "Wait for autovacuum to finish or cancel it (SELECT pg_cancel_backend({})), then run `drover migrate` again",
            b.pid
        ),
        Some(b) => format!(
            "End that transaction (SELECT pg_terminate_backend({})) or run `drover migrate` again once it has finished, or give it a larger --lock-budget",
            b.pid
        ),
        None => "Run `drover migrate` again at a quieter time, or give it a larger --lock-timeout"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_failure_names_the_oldest_transaction_and_the_remedy() {
        let blockers = vec![Blocker {
            pid: 4242,
            user_name: Some("report".to_owned()),
            application_name: Some("psql".to_owned()),
            backend_type: Some("client backend".to_owned()),
            state: Some("idle in transaction".to_owned()),
            transaction_age_ms: 61_500,
            holds_drover_lock: true,
        }];
        assert_eq!(
            describe(&blockers),
            "oldest transactions: pid 4242 (user report, application \"psql\", idle in transaction, transaction open 61.5 s, holds a lock on a drover table)"
        );
        assert!(remedy(&blockers).contains("pg_terminate_backend(4242)"));
        assert!(describe(&[]).contains("no session"));
    }
}

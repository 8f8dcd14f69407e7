//! Propagation (docs/design.md section 10): what follows, in the same transaction, when jobs end
//! or have their cancel requested: their dependents resolve, their parents count a live child
//! less, the live children of a cancelled job are cancelled, round after round. One loop over
//! core's `workflow::propagate`, used by every path that can end a job outside the one-statement
//! finish: the transactional finish (outcome.rs), cancel, rescue, reconcile and operator retry
//! (lifecycle.rs), children and workflow operations (workflow.rs).
//!
//! Each round reads the unresolved edges of the jobs that ended (propagate_edges.sql), locks the
//! jobs it changes in id order (propagate_lock.sql), applies core's round, writes the changed
//! jobs back (jobs_write.sql, which wakes queues of jobs that became ready and signals cancel
//! requests) and marks the applied edges resolved (edges_resolve.sql). Every read runs after the
//! rows it depends on are locked, so it sees every committed dependent.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use drover_core::workflow::{propagate as propagate_round, Dependency, Needs};
use drover_core::{Error, Job, JobId};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::lifecycle::{write_jobs, LockedJob};
use crate::sql;

/// Rounds after which the loop gives up: each round goes one level further along dependencies
/// or children, and a workflow holds at most 10,000 jobs; more would mean a stored cycle.
const ROUNDS_MAX: usize = 20_000;

/// What a propagation did.
#[derive(Debug, Default)]
pub(crate) struct Propagation {
    /// Jobs that ended (became terminal) or had their cancel requested because of it, each once.
    pub(crate) reached: BTreeSet<JobId>,
    /// Every job it wrote, as stored last.
    pub(crate) written: BTreeMap<JobId, Job>,
}

/// The distinct ids in the order every statement that locks several jobs takes them (id
/// order), so two such statements never deadlock on each other.
pub(crate) fn lock_order(ids: impl IntoIterator<Item = Uuid>) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Locks jobs by id (jobs_lock.sql, id order); ids of no job are left out. Returns them with
/// the transaction's clock (`None` when none was found).
pub(crate) async fn lock_jobs(
    conn: &mut PgConnection,
    ids: &[JobId],
) -> Result<(BTreeMap<JobId, Job>, Option<DateTime<Utc>>), Error> {
    let uuids = lock_order(ids.iter().map(|id| id.as_uuid()));
    let rows = sqlx::query_as::<_, LockedJob>(sql::JOBS_LOCK)
        .bind(&uuids)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let mut now = None;
    let mut jobs = BTreeMap::new();
    for row in rows {
        now = Some(row.db_now);
        let job = row.job.into_job()?;
        jobs.insert(job.id, job);
    }
    Ok((jobs, now))
}

/// Runs propagation to its end from `ended` (jobs already written back, each terminal or with a
/// cancel requested in this transaction), inside the caller's transaction.
///
/// # Errors
/// Store errors; `Fatal` when it does not end (a stored cycle).
pub(crate) async fn propagate(
    conn: &mut PgConnection,
    ended: Vec<Job>,
    now: DateTime<Utc>,
) -> Result<Propagation, Error> {
    let mut out = Propagation::default();
    let mut ended = ended;
    for _ in 0..ROUNDS_MAX {
        let needs = Needs::of(&ended);
        if needs.is_empty() {
            return Ok(out);
        }
        let edges = load_edges(conn, &needs.dependents_of).await?;
        let mut ids: Vec<Uuid> = edges.iter().map(|e| e.job.as_uuid()).collect();
        ids.extend(needs.parents.iter().map(|id| id.as_uuid()));
        ids.sort_unstable();
        ids.dedup();
        let parents: Vec<Uuid> = needs.children_of.iter().map(|id| id.as_uuid()).collect();
        let rows = if ids.is_empty() && parents.is_empty() {
            Vec::new()
        } else {
            sqlx::query_as::<_, LockedJob>(sql::PROPAGATE_LOCK)
                .bind(&ids)
                .bind(&parents)
                .fetch_all(&mut *conn)
                .await
                .store_err()?
        };
        let mut jobs = BTreeMap::new();
        for row in rows {
            let job = row.job.into_job()?;
            jobs.insert(job.id, job);
        }
        let round = propagate_round(&ended, &edges, &mut jobs, now);
        let changed: Vec<Job> = round
            .changed
            .iter()
            .filter_map(|id| jobs.get(id).cloned())
            .collect();
        let stored = if changed.is_empty() {
            Vec::new()
        } else {
            write_jobs(conn, &changed, true).await?
        };
        resolve_edges(conn, &round.resolved).await?;
        let mut next = Vec::with_capacity(round.ended.len());
        for job in stored {
            if round.ended.contains(&job.id) {
                out.reached.insert(job.id);
                next.push(job.clone());
            }
            out.written.insert(job.id, job);
        }
        ended = next;
    }
    Err(Error::fatal(
        "propagation did not end: the stored dependencies form a cycle",
    ))
}

/// The unresolved edges whose dependency is one of `ids` (propagate_edges.sql).
async fn load_edges(conn: &mut PgConnection, ids: &[JobId]) -> Result<Vec<Dependency>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let uuids: Vec<Uuid> = ids.iter().map(|id| id.as_uuid()).collect();
    let rows: Vec<(Uuid, Uuid)> = sqlx::query_as(sql::PROPAGATE_EDGES)
        .bind(&uuids)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    Ok(rows
        .into_iter()
        .map(|(dependency, job)| Dependency {
            job: JobId(job),
            dependency: JobId(dependency),
        })
        .collect())
}

/// Marks `edges` resolved (edges_resolve.sql).
async fn resolve_edges(conn: &mut PgConnection, edges: &[Dependency]) -> Result<(), Error> {
    if edges.is_empty() {
        return Ok(());
    }
    let dependencies: Vec<Uuid> = edges.iter().map(|e| e.dependency.as_uuid()).collect();
    let jobs: Vec<Uuid> = edges.iter().map(|e| e.job.as_uuid()).collect();
    sqlx::query(sql::EDGES_RESOLVE)
        .bind(&dependencies)
        .bind(&jobs)
        .execute(&mut *conn)
        .await
        .store_err()?;
    Ok(())
}

/// Whether `after` ended relative to `before`: became terminal, or had its cancel requested.
pub(crate) fn ended(before: &Job, after: &Job) -> bool {
    (!before.state.is_terminal() && after.state.is_terminal())
        || (!before.cancel_requested && after.cancel_requested)
}

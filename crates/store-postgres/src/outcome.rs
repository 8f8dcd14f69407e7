//! Worker writes on running jobs, batched and fenced (docs/design.md section 3; ADR 0001):
//! `jobs_heartbeat` and `jobs_finish`, one statement each over `unnest` arrays, whatever the
//! batch size (a finish whose items all succeeded, the common batch, uses the simpler
//! finish_succeeded.sql, or finish_succeeded_delete.sql when the store keeps no succeeded
//! jobs: `SucceededJobs::Delete`; a mixed batch then costs two statements in one transaction). An item is applied only while its job is running under the presented fencing
//! token with an unexpired lease by the database clock; every other item is answered
//! `LeaseLost` and changes nothing.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use drover_core::job::{truncate_message, ERRORS_KEPT};
use drover_core::{
    apply, Error, Event, Finish, FinishItem, FinishReply, HeartbeatItem, HeartbeatJobs,
    HeartbeatReply, Job, JobId, JobState, Retry, StoreConfig, SucceededJobs,
};
use serde_json::Value;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::lifecycle::write_jobs;
use crate::propagate::{self, lock_jobs};
use crate::records::{micros, parse_state};
use crate::sql;
use crate::transaction::{retried, runs_again};

/// Extends leases and saves meta/progress; answers per item in input order.
pub(crate) async fn heartbeat(
    conn: &mut PgConnection,
    config: &StoreConfig,
    heartbeat: HeartbeatJobs,
) -> Result<Vec<HeartbeatReply>, Error> {
    heartbeat.validate(&config.sizes)?;
    if heartbeat.jobs.is_empty() {
        return Ok(Vec::new());
    }
    // Rows are locked in id order, the order finish.sql uses too, so a worker's concurrent
    // heartbeat and finish batches never deadlock on each other's rows.
    let mut order: Vec<&HeartbeatItem> = heartbeat.jobs.iter().collect();
    order.sort_by_key(|j| j.id);
    let ids: Vec<Uuid> = order.iter().map(|j| j.id.as_uuid()).collect();
    let tokens: Vec<i64> = order.iter().map(|j| j.token.0).collect();
    let metas: Vec<Option<&Value>> = order.iter().map(|j| j.meta.as_ref()).collect();
    let progress: Vec<Option<&Value>> = order.iter().map(|j| j.progress.as_ref()).collect();
    let started: Vec<Option<i64>> = order.iter().map(|j| j.started.map(micros)).collect();
    type Row = (Uuid, bool, Option<i64>, Option<bool>, Option<DateTime<Utc>>);
    let rows: Vec<Row> = sqlx::query_as(sql::HEARTBEAT)
        .bind(&ids)
        .bind(&tokens)
        .bind(&metas)
        .bind(&progress)
        .bind(micros(heartbeat.lease))
        .bind(&started)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let answered: HashMap<Uuid, Row> = rows.into_iter().map(|row| (row.0, row)).collect();
    Ok(heartbeat
        .jobs
        .iter()
        .map(|item| match answered.get(&item.id.as_uuid()) {
            Some((_, true, ..)) => HeartbeatReply::Deferred { id: item.id },
            Some((_, false, Some(token), Some(cancel_requested), Some(until)))
                if *token == item.token.0 =>
            {
                HeartbeatReply::Extended {
                    id: item.id,
                    cancel_requested: *cancel_requested,
                    lease_expires_at: *until,
                }
            }
            _ => HeartbeatReply::LeaseLost { id: item.id },
        })
        .collect())
}

/// The common batch, every item a success with a distinct id, with finish_succeeded.sql, or
/// with `delete` finish_succeeded_delete.sql (`SucceededJobs::Delete`); `None` (nothing
/// written) for any other batch.
async fn finish_succeeded(
    conn: &mut PgConnection,
    items: &[&FinishItem],
    delete: bool,
) -> Result<Option<Finished>, Error> {
    let len = items.len();
    let mut ids = Vec::with_capacity(len);
    let mut tokens = Vec::with_capacity(len);
    let mut results: Vec<Option<&Value>> = Vec::with_capacity(len);
    let mut started: Vec<Option<i64>> = Vec::with_capacity(len);
    for item in items {
        let Finish::Succeeded { result } = &item.finish else {
            return Ok(None);
        };
        ids.push(item.id.as_uuid());
        tokens.push(item.token.0);
        results.push(result.as_ref());
        started.push(item.started.map(micros));
    }
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
        return Ok(None);
    }
    let query = if delete {
        // The results are not stored: the job is gone with them.
        sqlx::query_as(sql::FINISH_SUCCEEDED_DELETE)
            .bind(&ids)
            .bind(&tokens)
    } else {
        sqlx::query_as(sql::FINISH_SUCCEEDED)
            .bind(&ids)
            .bind(&tokens)
            .bind(&results)
            .bind(&started)
            .bind(parents(items))
    };
    let rows: Vec<(Uuid, Option<String>)> = query.fetch_all(&mut *conn).await.store_err()?;
    let mut freed_queues = Vec::new();
    let mut recorded = HashSet::with_capacity(rows.len());
    for (id, freed) in rows {
        recorded.insert(id);
        add_queue(&mut freed_queues, freed);
    }
    let replies = items
        .iter()
        .map(|item| {
            if recorded.contains(&item.id.as_uuid()) {
                FinishReply::Recorded {
                    id: item.id,
                    to: JobState::Succeeded,
                }
            } else {
                FinishReply::LeaseLost { id: item.id }
            }
        })
        .collect();
    Ok(Some(Finished {
        replies,
        freed_queues,
    }))
}

/// Items per one-statement finish when some name a parent (`FinishItem::parent`). A parent is
/// woken by the statement that records its last child, and the finish time of that child is
/// the statement's start; a statement of 1,000 children would hold the parent back by its whole
/// length (ADR 0004, decision 4). Plain batches stay one statement.
const CHILDREN_PER_STATEMENT: usize = 400;

/// The distinct parents the items name (`FinishItem::parent`), for the finish statements to lock
/// first; empty for a batch of plain jobs.
fn parents(items: &[&FinishItem]) -> Vec<Uuid> {
    propagate::lock_order(
        items
            .iter()
            .filter_map(|item| item.parent.map(|id| id.as_uuid())),
    )
}

/// What a finish recorded: answers per item in input order, and whom the recorded jobs that ran
/// under a `max_running` bound wake (each once) after commit.
#[derive(Default)]
pub(crate) struct Finished {
    /// Per item, in input order.
    pub(crate) replies: Vec<FinishReply>,
    /// Queues whose jobs freed a place of a `max_running` bound keyed by their queue, and `*`
    /// (`LIMITS_CHANGED_PAYLOAD`: every claim loop) for one keyed by kind or explicit key
    /// (finish.sql's `freed_queue`).
    pub(crate) freed_queues: Vec<String>,
}

/// Adds `queue` to `queues` unless it is `None` or already there (a batch names few queues).
fn add_queue(queues: &mut Vec<String>, queue: Option<String>) {
    if let Some(queue) = queue {
        if !queues.contains(&queue) {
            queues.push(queue);
        }
    }
}

/// Records finished runs; answers per item in input order, with the queues to wake.
///
/// The one-statement finishes record every item whose job has no dependents and no live
/// children (the statements test this on the row they lock, so a dependent or child stored
/// concurrently is never missed), and count a child that ended for its parent in the same
/// statement (finish_parents.sql). Under `SucceededJobs::Delete` a child's success keeps its row
/// for its parent to read, so it is left to the transactional finish. The items they leave
/// unrecorded (those jobs, and stale ones), and every `WaitForChildren`, go through
/// [`finish_locked`], which propagates. Of repeated ids only the first item counts, on either
/// path.
pub(crate) async fn finish(
    conn: &mut PgConnection,
    config: &StoreConfig,
    items: Vec<FinishItem>,
) -> Result<Finished, Error> {
    FinishItem::validate_batch(&items, &config.sizes)?;
    if items.is_empty() {
        return Ok(Finished::default());
    }
    let waits = |item: &FinishItem| matches!(item.finish, Finish::WaitForChildren);
    // Ids whose first item waits for its children skip the one-statement path altogether.
    let mut firsts = HashSet::with_capacity(items.len());
    let first: Vec<bool> = items.iter().map(|item| firsts.insert(item.id)).collect();
    let waiting: HashSet<JobId> = items
        .iter()
        .zip(&first)
        .filter(|(item, first)| **first && waits(item))
        .map(|(item, _)| item.id)
        .collect();
    let fast: Vec<usize> = (0..items.len())
        .filter(|&i| !waiting.contains(&items[i].id))
        .collect();
    let fast_items: Vec<&FinishItem> = fast.iter().map(|&i| &items[i]).collect();
    let mut replies: Vec<Option<FinishReply>> = vec![None; items.len()];
    let mut freed_queues = Vec::new();
    // A batch that counts down parents goes in statements of at most CHILDREN_PER_STATEMENT
    // items: the statement that records a parent's last child starts, and wakes it, sooner.
    let per_statement = if fast_items.iter().any(|item| item.parent.is_some()) {
        CHILDREN_PER_STATEMENT
    } else {
        fast_items.len().max(1)
    };
    for (positions, part) in fast
        .chunks(per_statement)
        .zip(fast_items.chunks(per_statement))
    {
        let finished = finish_fenced_retried(&mut *conn, config, part).await?;
        for queue in finished.freed_queues {
            add_queue(&mut freed_queues, Some(queue));
        }
        for (&i, reply) in positions.iter().zip(finished.replies) {
            replies[i] = Some(reply);
        }
    }
    let slow: Vec<usize> = (0..items.len())
        .filter(|&i| {
            first[i]
                && match &replies[i] {
                    None => true,
                    Some(reply) => matches!(reply, FinishReply::LeaseLost { .. }),
                }
        })
        .collect();
    if !slow.is_empty() {
        let (finished, moved) = finish_locked(&mut *conn, &items, &slow).await?;
        for queue in finished.freed_queues {
            add_queue(&mut freed_queues, Some(queue));
        }
        for (&i, reply) in slow.iter().zip(finished.replies) {
            replies[i] = Some(reply);
        }
        // Each reply names the state the batch leaves its job in: the transactional finish's
        // propagation may have moved a job after its own item recorded it (a leaf child whose
        // parent the batch cancelled ends cancelled, as it would one item at a time).
        for reply in replies.iter_mut().flatten() {
            if let FinishReply::Recorded { id, to } = reply {
                if let Some(state) = moved.get(id) {
                    *to = *state;
                }
            }
        }
    }
    let replies = items
        .iter()
        .zip(replies)
        .map(|(item, reply)| reply.unwrap_or(FinishReply::LeaseLost { id: item.id }))
        .collect();
    Ok(Finished {
        replies,
        freed_queues,
    })
}

/// [`finish_fenced`], run again on a deadlock ([`runs_again`]): a child's finish whose parent
/// the caller did not name locks the child, then its parent, where a parent's cancel locks the
/// parent, then its children, and PostgreSQL breaks such a deadlock by failing one of them.
async fn finish_fenced_retried(
    conn: &mut PgConnection,
    config: &StoreConfig,
    items: &[&FinishItem],
) -> Result<Finished, Error> {
    let mut tries = 0;
    loop {
        match finish_fenced(&mut *conn, config, items).await {
            Err(error) if runs_again(tries, &error) => tries += 1,
            other => return other,
        }
    }
}

/// The one-statement finishes (and the mixed batch with deletes: two statements in one
/// transaction); answers per item in order.
async fn finish_fenced(
    conn: &mut PgConnection,
    config: &StoreConfig,
    items: &[&FinishItem],
) -> Result<Finished, Error> {
    let delete = config.succeeded_jobs == SucceededJobs::Delete;
    if let Some(finished) = finish_succeeded(&mut *conn, items, delete).await? {
        return Ok(finished);
    }
    let succeeded = |item: &&FinishItem| matches!(item.finish, Finish::Succeeded { .. });
    if !delete || !items.iter().any(succeeded) {
        return finish_any(&mut *conn, items).await;
    }
    // A mixed batch whose successes delete their jobs: the first item of each id that is a
    // success goes to finish_succeeded_delete.sql, every other item (repeats included, which
    // then find their job gone or already finished: LeaseLost) to finish.sql afterwards, in
    // the same transaction.
    let mut seen = HashSet::with_capacity(items.len());
    let deleting: Vec<bool> = items
        .iter()
        .map(|item| seen.insert(item.id) && succeeded(item))
        .collect();
    let mut deletes = Vec::new();
    let mut others = Vec::new();
    for (item, deleting) in items.iter().copied().zip(deleting.iter().copied()) {
        if deleting {
            deletes.push(item);
        } else {
            others.push(item);
        }
    }
    // One transaction, so a fault between the two statements cannot leave the successes
    // deleted and the rest unrecorded (a retry of the batch would then answer the deleted
    // ones LeaseLost).
    let mut tx = Connection::begin(&mut *conn).await.store_err()?;
    let deleted = finish_succeeded(&mut tx, &deletes, true)
        .await?
        .ok_or_else(|| Error::fatal("a batch of distinct successes was refused"))?;
    let finished = finish_any(&mut tx, &others).await?;
    tx.commit().await.store_err()?;
    let mut freed_queues = deleted.freed_queues;
    for queue in finished.freed_queues {
        add_queue(&mut freed_queues, Some(queue));
    }
    let mut deleted = deleted.replies.into_iter();
    let mut finished = finished.replies.into_iter();
    let replies = deleting
        .into_iter()
        .map(|deleting| {
            if deleting {
                deleted.next()
            } else {
                finished.next()
            }
            .ok_or_else(|| Error::fatal("a finish answered fewer items than it was given"))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Finished {
        replies,
        freed_queues,
    })
}

/// Any batch with finish.sql (every outcome; of repeated ids the first item counts).
async fn finish_any(conn: &mut PgConnection, items: &[&FinishItem]) -> Result<Finished, Error> {
    if items.is_empty() {
        return Ok(Finished::default());
    }
    let len = items.len();
    let mut ids = Vec::with_capacity(len);
    let mut tokens = Vec::with_capacity(len);
    let mut outcomes = Vec::with_capacity(len);
    let mut results: Vec<Option<&Value>> = Vec::with_capacity(len);
    let mut messages: Vec<Option<String>> = Vec::with_capacity(len);
    let mut delays: Vec<Option<i64>> = Vec::with_capacity(len);
    let mut started: Vec<Option<i64>> = Vec::with_capacity(len);
    for item in items {
        ids.push(item.id.as_uuid());
        tokens.push(item.token.0);
        started.push(item.started.map(micros));
        let (outcome, result, message, delay) = match &item.finish {
            Finish::Succeeded { result } => ("succeeded", result.as_ref(), None, None),
            Finish::Failed { message, retry } => (
                "failed",
                None,
                Some(truncate_message(message)),
                match retry {
                    Retry::After(d) => Some(micros(*d)),
                    Retry::Never => None,
                },
            ),
            Finish::Snoozed { delay } => ("snoozed", None, None, Some(micros(*delay))),
            Finish::Released => ("released", None, None, None),
            Finish::Cancelled { message } => {
                ("cancelled", None, Some(truncate_message(message)), None)
            }
            // Never sent here (finish() routes it to finish_locked); answered LeaseLost if it
            // were, as an outcome this statement does not know.
            Finish::WaitForChildren => ("wait_for_children", None, None, None),
        };
        outcomes.push(outcome);
        results.push(result);
        messages.push(message);
        delays.push(delay);
    }
    let rows: Vec<(Uuid, String, Option<String>)> = sqlx::query_as(sql::FINISH)
        .bind(&ids)
        .bind(&tokens)
        .bind(&outcomes)
        .bind(&results)
        .bind(&messages)
        .bind(&delays)
        .bind(i32::try_from(ERRORS_KEPT).unwrap_or(i32::MAX))
        .bind(&started)
        .bind(parents(items))
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let mut freed_queues = Vec::new();
    let mut recorded = HashMap::with_capacity(rows.len());
    for (id, state, freed) in rows {
        recorded.insert(id, state);
        add_queue(&mut freed_queues, freed);
    }
    let replies = items
        .iter()
        .map(|item| {
            // Of repeated ids only the first item is recorded (finish.sql keeps the first).
            match recorded.remove(&item.id.as_uuid()) {
                Some(state) => Ok(FinishReply::Recorded {
                    id: item.id,
                    to: parse_state(&state)?,
                }),
                None => Ok(FinishReply::LeaseLost {
                    id: JobId(item.id.as_uuid()),
                }),
            }
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Finished {
        replies,
        freed_queues,
    })
}

/// The transactional finish (docs/design.md section 10): the items at `positions` (first items
/// of distinct ids) with their parents locked first (parents_lock.sql), then their rows in id
/// order, each applied with core's
/// `state::apply` (`LeaseLost` for a stale token or an expired lease, as the statements answer),
/// then propagated in the same transaction (propagate.rs). Tried again as a whole on a
/// deadlock. A success here keeps its row also under `SucceededJobs::Delete`: its dependents or
/// parent read it, and retention prunes it later.
///
/// Also answers the state propagation left each job it wrote in: the caller answers every
/// recorded item with the state the batch leaves its job in.
async fn finish_locked(
    conn: &mut PgConnection,
    items: &[FinishItem],
    positions: &[usize],
) -> Result<(Finished, HashMap<JobId, JobState>), Error> {
    retried!(conn, |tx| finish_locked_in(&mut tx, items, positions))
}

async fn finish_locked_in(
    conn: &mut PgConnection,
    items: &[FinishItem],
    positions: &[usize],
) -> Result<(Finished, HashMap<JobId, JobState>), Error> {
    let ids: Vec<JobId> = positions.iter().map(|&i| items[i].id).collect();
    let uuids: Vec<Uuid> = ids.iter().map(|id| id.as_uuid()).collect();
    let _parents: Vec<Uuid> = sqlx::query_scalar(sql::PARENTS_LOCK)
        .bind(&uuids)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let (jobs, now) = lock_jobs(&mut *conn, &ids).await?;
    let mut replies = Vec::with_capacity(positions.len());
    let mut changed = Vec::new();
    let mut before = Vec::new();
    for &i in positions {
        let item = &items[i];
        let lost = FinishReply::LeaseLost { id: item.id };
        let (Some(job), Some(now)) = (jobs.get(&item.id), now) else {
            replies.push(lost);
            continue;
        };
        let mut after = job.clone();
        let started = match item.started {
            Some(elapsed) => {
                let event = Event::Started {
                    token: item.token,
                    elapsed,
                };
                apply(&mut after, event, now).map(|_| ())
            }
            None => Ok(()),
        };
        let applied = started
            .and_then(|()| apply(&mut after, item.finish.clone().into_event(item.token), now));
        match applied {
            Ok(_) => {
                replies.push(FinishReply::Recorded {
                    id: item.id,
                    to: after.state,
                });
                before.push(job.clone());
                changed.push(after);
            }
            Err(_) => replies.push(lost),
        }
    }
    let (Some(now), false) = (now, changed.is_empty()) else {
        let finished = Finished {
            replies,
            freed_queues: Vec::new(),
        };
        return Ok((finished, HashMap::new()));
    };
    let stored = write_jobs(&mut *conn, &changed, false).await?;
    let ended: Vec<Job> = stored
        .iter()
        .filter(|job| {
            before
                .iter()
                .find(|b| b.id == job.id)
                .is_some_and(|b| propagate::ended(b, job))
        })
        .cloned()
        .collect();
    let propagation = propagate::propagate(&mut *conn, ended, now).await?;
    let recorded: Vec<Uuid> = stored.iter().map(|job| job.id.as_uuid()).collect();
    let rows: Vec<(Uuid, Option<String>)> = sqlx::query_as(sql::FINISH_FREED)
        .bind(&recorded)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let mut freed_queues = Vec::new();
    for (_, freed) in rows {
        add_queue(&mut freed_queues, freed);
    }
    let moved = propagation
        .written
        .iter()
        .map(|(id, job)| (*id, job.state))
        .collect();
    let finished = Finished {
        replies,
        freed_queues,
    };
    Ok((finished, moved))
}

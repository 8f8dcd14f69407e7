//! Group enqueue: concurrent one-job enqueues share one statement and one commit.
//!
//! An application's producers (request handlers, say) usually enqueue one job per call. Each
//! call on its own costs the server a statement, a transaction and a commit record, so with
//! many producers the server's CPU, not the disk, bounds the rate (pgbench with enqueue_one.sql
//! and 8 clients: about 7,400 a second on 2 cores). Here a one-job call waits in a queue
//! instead; at most [`FLUSHERS_MAX`] flusher tasks each take everything waiting (up to
//! [`BATCH_MAX`]) and insert it with the batch statement in one autocommit (as a batch enqueue
//! of those jobs would), then answer every caller. A lone producer finds no one waiting and is
//! flushed at once, so it gains nothing and loses about a task hand-off (microseconds).
//!
//! The contract is unchanged: every call returns only after its job is committed (or with the
//! error that refused it); validation still happens in the caller, so a rejected job never
//! reaches the queue. Only calls that cannot conflict are grouped: one job, no idempotency or
//! unique key. With quotas a group is admitted as a whole, as a batch is: one transaction
//! takes the quota locks once and counts the pending jobs once for all of it (one job at a
//! time, the locks are held through every commit, which serialized quota'd enqueues to about
//! 1,400 a second with 8 producers). If a grouped insert fails for any reason but an outage or
//! a missing schema (a quota it would pass, say), each of its jobs is inserted again on its
//! own, in the order the calls came, so each is admitted or refused by itself and one job can
//! never fail another. A caller that gave up (its future dropped) before its job was taken is
//! skipped, as if it had never called.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use drover_core::{Enqueued, Error, NewJob, StoreConfig};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::insert::{self, Batch, Family, Resolved, Wake};
use crate::connections::Connections;
use crate::notify::Notifier;

/// Most flushes in flight at once: while one waits for its commit, the next can insert.
pub(crate) const FLUSHERS_MAX: usize = 2;
/// Most jobs one flush inserts.
pub(crate) const BATCH_MAX: usize = 1_000;

/// A one-job enqueue waiting for a flush.
struct Waiting {
    job: NewJob,
    id: Uuid,
    reply: oneshot::Sender<Result<Enqueued, Error>>,
}

#[derive(Default)]
struct State {
    waiting: Vec<Waiting>,
    /// Flusher tasks running.
    flushers: usize,
}

/// The group enqueue of one store (shared by its clones).
pub(crate) struct Combiner {
    state: Mutex<State>,
    connections: Weak<Connections>,
    notifier: Arc<Notifier>,
    config: StoreConfig,
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Combiner")
            .field("waiting", &state.waiting.len())
            .field("flushers", &state.flushers)
            .finish_non_exhaustive()
    }
}

impl Combiner {
    pub(crate) fn new(
        connections: Weak<Connections>,
        notifier: Arc<Notifier>,
        config: StoreConfig,
    ) -> Self {
        Combiner {
            state: Mutex::new(State::default()),
            connections,
            notifier,
            config,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a list and a counter, consistent at every unlock: a poisoned lock is
        // used as it is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enqueues the one job of a prepared `batch` (`Lane::Group`) with whatever
    /// else is waiting; returns its answer once committed.
    ///
    /// # Errors
    /// Those of `JobStore::jobs_enqueue`; `Unavailable` also when the store was dropped first.
    pub(crate) async fn enqueue(self: &Arc<Self>, batch: Batch) -> Result<Enqueued, Error> {
        let (job, id) = batch
            .into_single()
            .ok_or_else(|| Error::fatal("group enqueue of a batch that is not one job"))?;
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut state = self.lock();
            state.waiting.push(Waiting { job, id, reply });
            let start = state.flushers < FLUSHERS_MAX;
            if start {
                state.flushers += 1;
            }
            start
        };
        if start {
            tokio::spawn(flush_loop(Arc::clone(self)));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(Error::unavailable("the enqueue was interrupted")))
    }

    /// Takes what is waiting (skipping callers that gave up), at most [`BATCH_MAX`]; `None` when
    /// nothing is, after which the flusher ends.
    fn take(&self, flusher: &mut FlusherGuard) -> Option<Vec<Waiting>> {
        let mut state = self.lock();
        state.waiting.retain(|waiting| !waiting.reply.is_closed());
        if state.waiting.is_empty() {
            state.flushers -= 1;
            flusher.counted = false;
            return None;
        }
        let n = state.waiting.len().min(BATCH_MAX);
        Some(state.waiting.drain(..n).collect())
    }

    /// Inserts `batch` in one statement, leaving it to the caller; the store's answers.
    async fn insert(&self, batch: &Batch) -> Result<Resolved, Error> {
        let connections = self
            .connections
            .upgrade()
            .ok_or_else(|| Error::unavailable("the store was closed"))?;
        let mut conn = connections.acquire().await?;
        let result = insert::enqueue_answers(
            &mut conn,
            &self.config,
            batch,
            Family::default(),
            Wake::AfterCommit,
        )
        .await;
        conn.done(result)
    }

    /// Turns the answers into jobs, sends the wake-ups (after the commit) and returns the
    /// answers in order.
    fn answered(&self, resolved: Resolved, batch: Batch) -> Result<Vec<Enqueued>, Error> {
        let enqueue = resolved.into_enqueue(batch)?;
        self.notifier
            .notify(enqueue.ready_queues.iter().map(String::as_str));
        Ok(enqueue.answers)
    }

    /// Flushes one group and answers its callers.
    async fn flush(&self, group: Vec<Waiting>) {
        let mut jobs = Vec::with_capacity(group.len());
        let mut ids = Vec::with_capacity(group.len());
        let mut replies = Vec::with_capacity(group.len());
        for waiting in group {
            jobs.push(waiting.job);
            ids.push(waiting.id);
            replies.push(waiting.reply);
        }
        let batch = Batch::keyless(jobs, ids);
        let error = match self.insert(&batch).await {
            Ok(resolved) => match self.answered(resolved, batch) {
                Ok(answers) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let _ = reply.send(Ok(answer));
                    }
                    return;
                }
                Err(error) => error,
            },
            Err(error)
                if replies.len() > 1
                    && !matches!(error, Error::Unavailable { .. } | Error::Fatal { .. }) =>
            {
                tracing::warn!(%error, jobs = replies.len(), "a grouped enqueue failed; inserting its jobs one by one");
                let (jobs, ids) = batch.into_parts();
                for ((job, id), reply) in jobs.into_iter().zip(ids).zip(replies) {
                    let _ = reply.send(self.insert_one(job, id).await);
                }
                return;
            }
            Err(error) => error,
        };
        fan_out(replies, error);
    }

    /// Inserts one job on its own (after its group failed).
    async fn insert_one(&self, job: NewJob, id: Uuid) -> Result<Enqueued, Error> {
        let single = Batch::keyless(vec![job], vec![id]);
        let resolved = self.insert(&single).await?;
        self.answered(resolved, single)?
            .pop()
            .ok_or_else(|| Error::fatal("enqueue answered no job"))
    }
}

/// Answers every caller of a group with `error`: itself for a group of one, else the same
/// outage (`Unavailable`) or failure (`Fatal`, also for anything else) for each.
fn fan_out(mut replies: Vec<oneshot::Sender<Result<Enqueued, Error>>>, error: Error) {
    if replies.len() == 1 {
        if let Some(reply) = replies.pop() {
            let _ = reply.send(Err(error));
        }
        return;
    }
    let each = |error: &Error| match error {
        Error::Unavailable { message, .. } => Error::unavailable(message.clone()),
        Error::Fatal { message, .. } => Error::fatal(message.clone()),
        other => Error::fatal(other.to_string()),
    };
    for reply in replies {
        let _ = reply.send(Err(each(&error)));
    }
}

/// Gives a flusher's place back if its task ends without doing so (a panic, or the runtime
/// dropping the task), so later enqueues start a new one instead of waiting forever.
struct FlusherGuard {
    combiner: Arc<Combiner>,
    counted: bool,
}

impl Drop for FlusherGuard {
    fn drop(&mut self) {
        if self.counted {
            self.combiner.lock().flushers -= 1;
        }
    }
}

/// A flusher task: flushes groups until nothing waits.
async fn flush_loop(combiner: Arc<Combiner>) {
    let mut guard = FlusherGuard {
        combiner: Arc::clone(&combiner),
        counted: true,
    };
    while let Some(group) = combiner.take(&mut guard) {
        combiner.flush(group).await;
    }
}

//! Enqueue (docs/design.md sections 3 and 4): every way a job gets into `drover.jobs`.
//!
//! A batch is validated once ([`Batch::prepare`]: the rules every store shares, ids and
//! request hashes assigned) and stored by one lane, chosen once ([`Lane::choose`]) from what
//! validation does not change:
//! - [`Lane::Group`] (combine.rs): one job without keys waits to share one batch statement and
//!   commit with the one-job enqueues of other callers.
//! - [`Lane::Copy`] (copy.rs): [`COPY_MIN_JOBS`] or more jobs, all ready at once, none with a
//!   key, no quota: binary `COPY`, the store's clock read while the batch is validated.
//! - [`Lane::Insert`] (insert.rs): anything else, with the batch statements, which resolve
//!   key conflicts and check quotas; inside it one statement is chosen per insert
//!   (enqueue_one.sql, enqueue_insert.sql or enqueue_insert_keyless.sql).
//!
//! An enqueue inside the caller's transaction (`PgStore::enqueue_in`) and a schedule's tick
//! always take the insert lane on the caller's connection: a group or a COPY commits on its own.
//!
//! A batch with links (a job with dependencies, a name or `run_regardless`) takes none of the
//! lanes: workflow.rs stores it in one transaction with its dependencies locked, and uses the
//! insert lane's statements inside it.

mod combine;
mod copy;
mod insert;

use drover_core::{Enqueued, Error, NewJob, StoreConfig};

use crate::admin;
use crate::connections::Connections;
use crate::notify::Notifier;

pub(crate) use combine::Combiner;
pub use copy::COPY_MIN_JOBS;
pub use copy::{empty_data as copy_empty_data, statements as copy_statements};
pub(crate) use insert::{
    enqueue, enqueue_answers, lock_quotas, lock_quotas_for, quota_lock_keys, Batch, Enqueue,
    Family, Wake,
};

/// How the store's own enqueue (`JobStore::jobs_enqueue`) stores a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// One job without an idempotency or unique key: grouped with concurrent ones.
    Group,
    /// At least [`COPY_MIN_JOBS`] jobs without run_at, keys and trace context, and no quota to
    /// check: nothing can conflict, and one instant of the store's clock dates every job.
    Copy,
    /// Everything else.
    Insert,
}

impl Lane {
    /// The lane for `jobs`. Validation ([`Batch::prepare`]) changes none of what this reads,
    /// so it answers the same before and after it.
    pub(crate) fn choose(jobs: &[NewJob], config: &StoreConfig) -> Lane {
        let keyless = |job: &NewJob| job.idempotency_key.is_none() && job.unique_key.is_none();
        match jobs {
            [job] if keyless(job) => Lane::Group,
            _ if jobs.len() >= COPY_MIN_JOBS
                && config.quotas.is_unbounded()
                && jobs.iter().all(|job| {
                    job.run_at.is_none() && keyless(job) && job.trace_context.is_none()
                }) =>
            {
                Lane::Copy
            }
            _ => Lane::Insert,
        }
    }
}

/// `JobStore::jobs_enqueue`: validates `jobs`, stores them by their [`Lane`] and, after the
/// commit, wakes the queues that got ready jobs.
///
/// # Errors
/// `InvalidInput` first when the batch is bad (whatever the database's state); otherwise those
/// of the lane.
pub(crate) async fn jobs_enqueue(
    connections: &Connections,
    combiner: &std::sync::Arc<Combiner>,
    notifier: &Notifier,
    config: &StoreConfig,
    jobs: Vec<NewJob>,
) -> Result<Vec<Enqueued>, Error> {
    if crate::workflow::linked(&jobs) {
        // Dependencies, names and run_regardless are stored by the linked path (workflow.rs).
        return crate::workflow::jobs_enqueue(connections, notifier, config, jobs).await;
    }
    let lane = Lane::choose(&jobs, config);
    // The COPY lane takes its connection before validating, to read the store's clock
    // meanwhile: join! polls in order, so the query is written to the socket before the
    // validation (synchronous) runs, and its round trip costs no time of its own.
    let mut copy_conn = match lane {
        Lane::Copy => Some(connections.acquire().await),
        Lane::Group | Lane::Insert => None,
    };
    let (batch, now) = match copy_conn.as_mut() {
        Some(Ok(conn)) => {
            let (now, batch) =
                tokio::join!(admin::now(conn), async { Batch::prepare(jobs, config) });
            (batch, Some(now))
        }
        _ => (Batch::prepare(jobs, config), None),
    };
    let batch = batch?;
    if lane == Lane::Group {
        return Ok(vec![combiner.enqueue(batch).await?]);
    }
    let mut conn = match copy_conn {
        Some(conn) => conn?,
        None => connections.acquire().await?,
    };
    let result = match now {
        Some(Ok(now)) => copy::enqueue(&mut conn, batch, now).await,
        Some(Err(error)) => Err(error),
        None => insert::enqueue(&mut conn, config, batch, Wake::AfterCommit).await,
    };
    let enqueue = conn.done(result)?;
    notifier.notify(enqueue.ready_queues.iter().map(String::as_str));
    Ok(enqueue.answers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_core::{JobKind, Quotas, RunAt};
    use serde_json::json;

    fn jobs(n: usize) -> Vec<NewJob> {
        let kind = JobKind::parse("k").unwrap();
        (0..n)
            .map(|_| NewJob::new(kind.clone(), json!({})))
            .collect()
    }

    #[test]
    fn lanes_are_chosen_by_size_keys_run_at_and_quotas() {
        let config = StoreConfig {
            quotas: Quotas::unbounded(),
            ..StoreConfig::default()
        };
        assert_eq!(Lane::choose(&jobs(1), &config), Lane::Group);
        assert_eq!(Lane::choose(&jobs(0), &config), Lane::Insert);
        assert_eq!(
            Lane::choose(&jobs(COPY_MIN_JOBS - 1), &config),
            Lane::Insert
        );
        assert_eq!(Lane::choose(&jobs(COPY_MIN_JOBS), &config), Lane::Copy);

        let mut keyed = jobs(1);
        keyed[0].idempotency_key = Some("a".into());
        assert_eq!(Lane::choose(&keyed, &config), Lane::Insert);
        let mut unique = jobs(1);
        unique[0].unique_key = Some("u".into());
        assert_eq!(Lane::choose(&unique, &config), Lane::Insert);

        let mut batch = jobs(COPY_MIN_JOBS);
        batch[7].unique_key = Some("u".into());
        assert_eq!(Lane::choose(&batch, &config), Lane::Insert);
        let mut batch = jobs(COPY_MIN_JOBS);
        batch[3].run_at = Some(RunAt::After(std::time::Duration::from_secs(1)));
        assert_eq!(Lane::choose(&batch, &config), Lane::Insert);
        let mut batch = jobs(COPY_MIN_JOBS);
        batch[5].trace_context = Some(
            drover_core::TraceContext::new(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                None,
            )
            .unwrap(),
        );
        assert_eq!(Lane::choose(&batch, &config), Lane::Insert);

        let quotas = StoreConfig::default();
        assert!(!quotas.quotas.is_unbounded());
        assert_eq!(Lane::choose(&jobs(COPY_MIN_JOBS), &quotas), Lane::Insert);
        // A single job is grouped under quotas too: a group is admitted as a whole.
        assert_eq!(Lane::choose(&jobs(1), &quotas), Lane::Group);
    }
}

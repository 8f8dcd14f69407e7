//! The producer: one claim loop per queue of each pool, and the event dispatcher that wakes
//! them (docs/design.md sections 3 and 6).
//!
//! A claim loop reserves capacity BEFORE it claims: at least one slot of its queue (waiting
//! for one when all are busy) plus any others free at that moment, and as many places of the
//! process-wide `max_concurrent` cap; then it asks the store for exactly that many jobs of its
//! queue and its kinds (`WorkerConfig::kinds_to_claim`: the pool's kind filter, or the kinds no
//! pool with a filter reserves in that queue), so it never claims a job it cannot start at
//! once. Unused places go back at once.
//!
//! Claim-ahead (`PoolConfig::prefetch`): while the loop's last job ran shorter than
//! `PREFETCH_RUN_MAX`, it also reserves its free claim-ahead places, so one claim takes the
//! jobs for the free slots plus up to `prefetch` more, which wait (leased, heartbeated) for a
//! slot in claim order in the loop's backlog (`backlog.rs`). The claim tells the store how many
//! start at once (`ClaimJobs::start`: the free slots), so only those get a start time; the
//! others get theirs when their handler starts (`running.rs`). For short jobs this keeps the
//! slots fed while the next claim is in flight and halves the claims per job; long jobs are
//! never held back from other workers this way. Shutdown releases waiting jobs at once
//! (backlog.rs).
//!
//! After a claim that filled its request (more jobs are likely waiting) it claims again as
//! soon as at least half of its slots (claiming ahead: of its claim-ahead places) are free, or
//! [`CLAIM_COOLDOWN`] after that claim returned, whichever comes first (at once when all are
//! free): claiming the moment one slot frees would make every full claim be followed by
//! claims of one job, each costing the store a whole round trip and commit. After a claim
//! that did not fill its request it sleeps until a store event for its queue, a `Resync`, or
//! the poll interval, and then claims as soon as one place is free; except that after a claim
//! that returned some jobs but fewer than it asked for, or none right after one that returned
//! jobs, made after a pause or a poll rather than on an event, it claims again after
//! [`RECLAIM_AFTER_PARTIAL`], doubling that pause after each empty claim until it reaches the
//! poll interval. Such a claim is what a limit policy gives: a rate admits one job per
//! `period / count` and no event says when; a `max_running` admits the next job when a running
//! one finishes, which the store announces (`JobsAvailable` for a queue's own policy,
//! `LimitsChanged` for others). So a rate of 10/s is not slowed to one claim
//! per poll interval, nor are jobs held by `max_running`. When the store says when a job a rate held back becomes
//! admissible (the claim's `retry_after`), the loop claims again then if that comes before its
//! next pause or poll, so a rate runs at its configured pace (even when the claim was made on
//! an event). After a busy queue drains it
//! costs a few empty claims over about twice the poll interval, and jobs enqueued now and then
//! (each claim on an event) none. An event does not end short pauses under way. It claims
//! nothing while the store is unhealthy.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use drover_core::{ClaimJobs, Claimed, JobKind, QueueName, StoreEvent};
use futures::StreamExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backlog::Backlog;
use crate::config::PREFETCH_RUN_MAX;
use crate::executor::{Reservation, Starter};
use crate::health::{classify, ErrorClass, RetryDelay};
use crate::running::CancelReason;
use crate::runtime::Runtime;

/// After a claim that filled its request, the longest a claim loop waits for half of its slots
/// to be free before claiming with what is free (see the module docs).
pub(crate) const CLAIM_COOLDOWN: Duration = Duration::from_millis(1);

/// After a claim that returned some jobs but fewer than it asked for, the first pause before
/// the loop claims again without an event (see the module docs).
pub(crate) const RECLAIM_AFTER_PARTIAL: Duration = Duration::from_millis(10);

/// One claim loop's fixed settings.
pub(crate) struct ClaimLoop {
    /// The pool's name, for logs.
    pub(crate) pool: String,
    /// The queue it claims from.
    pub(crate) queue: QueueName,
    /// Kinds it claims.
    pub(crate) kinds: Vec<JobKind>,
    /// Its slots (`slots_per_queue` of the pool).
    pub(crate) slots: Arc<Semaphore>,
    /// Most slots one claim reserves: the pool's `slots_per_queue`.
    pub(crate) max_batch: usize,
    /// Claim-ahead places (`PoolConfig::prefetch`) and the backlog where jobs claimed ahead
    /// wait; `None` when it is 0.
    pub(crate) ahead: Option<(Arc<Semaphore>, Arc<Backlog>)>,
    /// The number of claim-ahead places.
    pub(crate) prefetch: usize,
    /// The run time of the loop's last job, in microseconds (`u64::MAX` before the first).
    pub(crate) last_run_us: Arc<AtomicU64>,
    /// Woken by events for its queue.
    pub(crate) wake: Arc<Notify>,
}

/// Runs a claim loop until `stop` fires (or a fatal error).
pub(crate) async fn run_claim_loop(
    rt: Arc<Runtime>,
    spec: ClaimLoop,
    global: Option<Arc<Semaphore>>,
    starter: Starter,
    stop: CancellationToken,
) {
    let max_batch = spec
        .max_batch
        .clamp(1, drover_core::store::CLAIM_LIMIT_MAX as usize);
    let mut retry = RetryDelay::new(rt.config.store_retry_min, rt.config.store_retry_max);
    // Set after a claim that filled its request: gather slots until this deadline.
    let mut gather_until: Option<Instant> = None;
    // Set after a partial claim: the pause before claiming again without an event, doubled
    // after each empty claim until it reaches the poll interval.
    let mut reclaim_after: Option<Duration> = None;
    // Whether this claim follows a store event for the queue (not a pause or a poll).
    let mut after_event = false;
    // Whether the previous claim returned jobs (the queue was busy a moment ago).
    let mut claimed_before = false;
    loop {
        if stop.is_cancelled() {
            return;
        }
        if !rt.health.is_healthy() {
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = rt.health.wait_healthy() => {}
            }
        }
        if let Some((_, backlog)) = &spec.ahead {
            starter.start_waiting(&rt, backlog);
        }
        let reservation = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            reservation = reserve(&spec, global.as_ref(), max_batch, gather_until.take()) => reservation,
        };
        let Some(mut reservation) = reservation else {
            return;
        };
        if stop.is_cancelled() || !rt.health.is_healthy() {
            continue;
        }
        let limit = reservation.len();
        let claim = ClaimJobs {
            worker: rt.config.worker_id.clone(),
            queues: vec![spec.queue.clone()],
            kinds: spec.kinds.clone(),
            limit: u32::try_from(limit).unwrap_or(drover_core::store::CLAIM_LIMIT_MAX),
            // The jobs for the free slots start at once; the rest are claimed ahead.
            start: u32::try_from(reservation.slots()).unwrap_or(0),
            lease: rt.config.lease,
        };
        match rt.store.jobs_claim(claim).await {
            Ok(Claimed { jobs, retry_after }) => {
                retry.reset();
                let filled = !jobs.is_empty() && jobs.len() >= limit;
                reclaim_after = next_pause(
                    reclaim_after,
                    jobs.len(),
                    filled,
                    after_event,
                    claimed_before,
                    rt.config.poll_interval,
                );
                after_event = false;
                claimed_before = !jobs.is_empty();
                starter.start(
                    &rt,
                    jobs,
                    &mut reservation,
                    spec.ahead.as_ref().map(|(_, backlog)| backlog),
                );
                drop(reservation);
                if filled {
                    gather_until = Some(Instant::now() + CLAIM_COOLDOWN);
                    continue;
                }
                let pause = claim_pause(reclaim_after, retry_after, rt.config.poll_interval);
                tokio::select! {
                    biased;
                    () = stop.cancelled() => return,
                    () = spec.wake.notified() => after_event = true,
                    () = tokio::time::sleep(pause) => {}
                }
            }
            Err(error) => {
                drop(reservation);
                match classify(&error) {
                    ErrorClass::Transient => {
                        tracing::warn!(
                            pool = %spec.pool,
                            queue = %spec.queue,
                            error = %error,
                            "claim failed; claims paused until a heartbeat succeeds"
                        );
                        rt.health.mark_unhealthy();
                        // Give the heartbeat loop a moment before looking at health again.
                        tokio::select! {
                            biased;
                            () = stop.cancelled() => return,
                            () = tokio::time::sleep(retry.next_delay()) => {}
                        }
                    }
                    ErrorClass::Fatal => {
                        rt.fatal.report(error);
                        return;
                    }
                    ErrorClass::Other => {
                        rt.fatal.report(drover_core::Error::fatal(format!(
                            "the store refused a claim of pool {} queue {}: {error}",
                            spec.pool, spec.queue
                        )));
                        return;
                    }
                }
            }
        }
    }
}

/// The pause before claiming again without an event after a claim that returned `claimed`
/// jobs (`filled`: as many as asked; `after_event`: made on a store event, not after a pause
/// or a poll; `claimed_before`: the claim before it returned jobs), given the current one:
/// [`RECLAIM_AFTER_PARTIAL`] after a partial claim or after an empty claim that follows one
/// that returned jobs (a limit policy may hold the queue's next jobs: its rate frees when time
/// passes, with no event; its `max_running` when a job finishes, announced by the store),
/// doubled after
/// each further empty one, `None` (wait for an event or the poll interval) once it reaches
/// `poll`, after an empty claim on a queue already idle, or after a claim that filled its
/// request. A claim on an event starts no short pauses (jobs enqueued now and then: the next
/// event will come) but does not end those under way (an unrelated enqueue would otherwise
/// leave jobs a limit holds to the poll interval).
fn next_pause(
    current: Option<Duration>,
    claimed: usize,
    filled: bool,
    after_event: bool,
    claimed_before: bool,
    poll: Duration,
) -> Option<Duration> {
    let next = if filled || (after_event && current.is_none()) {
        return None;
    } else if claimed > 0 {
        RECLAIM_AFTER_PARTIAL
    } else if let Some(current) = current {
        current * 2
    } else if claimed_before {
        RECLAIM_AFTER_PARTIAL
    } else {
        return None;
    };
    (next < poll).then_some(next)
}

/// How long a claim loop sleeps (unless an event comes first) after a claim that did not fill
/// its request: the re-claim pause from [`next_pause`], the time until a job a rate held back
/// is admissible (the claim's `retry_after`), or the poll interval, whichever is shortest. The
/// rate's time makes the loop claim a rate-held job when the rate admits it instead of at the
/// next step of the doubling pauses (which gave a rate of 4/s claims ~333 ms apart, not 250);
/// the doubling pauses stay, for `max_running`, and because `retry_after` runs on the store's
/// clock.
fn claim_pause(
    reclaim_after: Option<Duration>,
    retry_after: Option<Duration>,
    poll: Duration,
) -> Duration {
    reclaim_after
        .unwrap_or(poll)
        .min(retry_after.unwrap_or(poll))
}

/// Whether a claim loop claims ahead now: it has claim-ahead places and its last job ran
/// shorter than [`PREFETCH_RUN_MAX`].
fn claims_ahead(spec: &ClaimLoop) -> Option<&(Arc<Semaphore>, Arc<Backlog>)> {
    let short = PREFETCH_RUN_MAX.as_micros() as u64;
    spec.ahead
        .as_ref()
        .filter(|_| spec.last_run_us.load(Ordering::Relaxed) < short)
}

/// Reserves at least one and at most `max` slots of the queue, plus (while it claims ahead)
/// its free claim-ahead places, and with a cap as many places of the process-wide semaphore.
/// Waits while none is free; with `gather_until`, waits until half of the `max` slots (or,
/// claiming ahead, half of the claim-ahead places) are free or that deadline passed,
/// whichever comes first. `None` if a semaphore was closed (never happens: they are not
/// closed).
async fn reserve(
    spec: &ClaimLoop,
    global: Option<&Arc<Semaphore>>,
    max: usize,
    gather_until: Option<Instant>,
) -> Option<Reservation> {
    let slots = &spec.slots;
    // Decided once per reservation: jobs finishing meanwhile may change the answer.
    let claiming_ahead = claims_ahead(spec);
    let (mut queue, mut ahead) = match claiming_ahead {
        None => (Some(first_slots(slots, max, gather_until).await?), None),
        Some((ahead, _)) => first_places(slots, ahead, spec.prefetch, gather_until).await?,
    };
    let held = queue.as_ref().map_or(0, |p| p.num_permits());
    let extra = slots.available_permits().min(max.saturating_sub(held));
    if extra > 0 {
        if let Ok(more) = Arc::clone(slots).try_acquire_many_owned(u32::try_from(extra).ok()?) {
            match &mut queue {
                Some(queue) => queue.merge(more),
                None => queue = Some(more),
            }
        }
    }
    if let Some((semaphore, _)) = claiming_ahead {
        let extra = semaphore.available_permits();
        if extra > 0 {
            if let Ok(more) =
                Arc::clone(semaphore).try_acquire_many_owned(u32::try_from(extra).ok()?)
            {
                match &mut ahead {
                    Some(ahead) => ahead.merge(more),
                    None => ahead = Some(more),
                }
            }
        }
    }
    let total = queue.as_ref().map_or(0, |p| p.num_permits())
        + ahead.as_ref().map_or(0, |p| p.num_permits());
    let global = match global {
        Some(global) => {
            let mut places = Arc::clone(global).acquire_owned().await.ok()?;
            let extra = global.available_permits().min(total.saturating_sub(1));
            if extra > 0 {
                if let Ok(more) =
                    Arc::clone(global).try_acquire_many_owned(u32::try_from(extra).ok()?)
                {
                    places.merge(more);
                }
            }
            // Give back what the cap does not cover: claim-ahead places first.
            let mut surplus = total.saturating_sub(places.num_permits());
            if let Some(ahead_places) = ahead.as_mut() {
                let cut = surplus.min(ahead_places.num_permits());
                if cut > 0 {
                    drop(ahead_places.split(cut));
                    surplus -= cut;
                }
            }
            if let (Some(queue), true) = (queue.as_mut(), surplus > 0) {
                drop(queue.split(surplus));
            }
            Some(places)
        }
        None => None,
    };
    let ahead = ahead.filter(|places| places.num_permits() > 0);
    let queue = queue.filter(|permit| permit.num_permits() > 0);
    let last_run_us = spec.ahead.as_ref().map(|_| Arc::clone(&spec.last_run_us));
    Some(Reservation::new(queue, ahead, global, last_run_us))
}

/// The first slots of a reservation: one, or with `gather_until` half of `max` unless that
/// deadline passes first (then one).
async fn first_slots(
    slots: &Arc<Semaphore>,
    max: usize,
    gather_until: Option<Instant>,
) -> Option<OwnedSemaphorePermit> {
    if let Some(deadline) = gather_until {
        if let Some(gathered) = gather(slots, max.div_ceil(2), deadline).await {
            return Some(gathered);
        }
    }
    Arc::clone(slots).acquire_owned().await.ok()
}

/// After a claim that filled its request: waits until `wanted` places of `semaphore` are free
/// (and takes them) or `deadline` passes; `None` when it passed, or when `wanted` is at most one
/// or that many are free already (the caller then simply takes what is free).
async fn gather(
    semaphore: &Arc<Semaphore>,
    wanted: usize,
    deadline: Instant,
) -> Option<OwnedSemaphorePermit> {
    if wanted <= 1 || semaphore.available_permits() >= wanted {
        return None;
    }
    let wanted = u32::try_from(wanted).ok()?;
    let gathered =
        tokio::time::timeout_at(deadline, Arc::clone(semaphore).acquire_many_owned(wanted))
            .await
            .ok()?
            .ok()?;
    // Jobs finishing at this moment are likely queued to run on this worker thread: let them
    // give back their places before the claim counts them.
    tokio::task::yield_now().await;
    Some(gathered)
}

/// The first places of a claim loop that claims ahead: with `gather_until`, half of its
/// claim-ahead places unless that deadline passes first; then (or without it) whichever of a
/// slot or a claim-ahead place frees first.
async fn first_places(
    slots: &Arc<Semaphore>,
    ahead: &Arc<Semaphore>,
    prefetch: usize,
    gather_until: Option<Instant>,
) -> Option<(Option<OwnedSemaphorePermit>, Option<OwnedSemaphorePermit>)> {
    if let Some(deadline) = gather_until {
        if let Some(gathered) = gather(ahead, prefetch.div_ceil(2), deadline).await {
            return Some((None, Some(gathered)));
        }
    }
    tokio::select! {
        biased;
        permit = Arc::clone(slots).acquire_owned() => Some((Some(permit.ok()?), None)),
        permit = Arc::clone(ahead).acquire_owned() => Some((None, Some(permit.ok()?))),
    }
}

/// Wakes claim loops from store events, and fires the token of a job whose cancel was
/// requested; re-subscribes (waking every loop) when the stream ends or fails. The loops are
/// woken in queue order (a `BTreeMap`, not a `HashMap` whose order differs per run), so a
/// simulated run replays exactly (docs/adr/0012-simulation.md).
pub(crate) async fn run_events(
    rt: Arc<Runtime>,
    wakers: BTreeMap<QueueName, Vec<Arc<Notify>>>,
    stop: CancellationToken,
) {
    let mut retry = RetryDelay::new(rt.config.store_retry_min, rt.config.store_retry_max);
    let wake_all = || {
        for notify in wakers.values().flatten() {
            notify.notify_one();
        }
    };
    let mut first = true;
    loop {
        let subscribed = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            subscribed = rt.store.subscribe() => subscribed,
        };
        let mut events = match subscribed {
            Ok(events) => {
                retry.reset();
                if !first {
                    wake_all();
                }
                first = false;
                events
            }
            Err(error) => {
                match classify(&error) {
                    ErrorClass::Fatal => {
                        rt.fatal.report(error);
                        return;
                    }
                    _ => {
                        tracing::warn!(error = %error, "subscribing to store events failed; polling meanwhile")
                    }
                }
                tokio::select! {
                    biased;
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(retry.next_delay()) => {}
                }
                continue;
            }
        };
        loop {
            let event = tokio::select! {
                biased;
                () = stop.cancelled() => return,
                event = events.next() => event,
            };
            match event {
                Some(StoreEvent::JobsAvailable { queue }) => {
                    if let Some(loops) = wakers.get(&queue) {
                        for notify in loops {
                            notify.notify_one();
                        }
                    }
                }
                Some(StoreEvent::CancelRequested { id }) => {
                    if let Some(job) = rt.running.get(&id) {
                        if !job.cancel.is_cancelled() {
                            tracing::info!(job_id = %id, "cancel requested: firing the handler's cancellation token");
                            rt.cancel_job(&job, CancelReason::CancelRequested);
                        }
                    }
                }
                Some(StoreEvent::Resync | StoreEvent::LimitsChanged) => wake_all(),
                None => break,
            }
        }
        // The stream ended: wait a poll interval before subscribing again, so a store whose
        // stream ends at once is not spun on.
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(rt.config.poll_interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_claim_reclaims_soon_and_empty_claims_back_off_to_the_poll_interval() {
        let poll = Duration::from_millis(100);
        let first = next_pause(None, 3, false, false, false, poll);
        assert_eq!(first, Some(RECLAIM_AFTER_PARTIAL));
        let mut pauses = Vec::new();
        let mut pause = first;
        let mut claimed_before = true;
        while let Some(p) = pause {
            pauses.push(p.as_millis());
            pause = next_pause(pause, 0, false, false, claimed_before, poll);
            claimed_before = false;
        }
        assert_eq!(pauses, vec![10, 20, 40, 80], "then the poll interval");
        // Jobs again: back to the short pause; a full claim or an idle loop: no pause.
        assert_eq!(
            next_pause(
                Some(Duration::from_millis(80)),
                1,
                false,
                false,
                false,
                poll
            ),
            Some(RECLAIM_AFTER_PARTIAL)
        );
        assert_eq!(
            next_pause(Some(RECLAIM_AFTER_PARTIAL), 5, true, false, true, poll),
            None
        );
        assert_eq!(next_pause(None, 0, false, false, false, poll), None);
        // An empty claim right after one that returned jobs (a full one: a limit policy may
        // hold the rest) starts the short pauses too.
        assert_eq!(
            next_pause(None, 0, false, false, true, poll),
            Some(RECLAIM_AFTER_PARTIAL)
        );
        // A claim on an event starts no short pauses, and ends none under way.
        assert_eq!(next_pause(None, 1, false, true, false, poll), None);
        assert_eq!(next_pause(None, 0, false, true, true, poll), None);
        assert_eq!(
            next_pause(Some(Duration::from_millis(20)), 0, false, true, true, poll),
            Some(Duration::from_millis(40))
        );
        assert_eq!(
            next_pause(Some(Duration::from_millis(20)), 1, false, true, false, poll),
            Some(RECLAIM_AFTER_PARTIAL)
        );
        // A poll interval at or under the short pause leaves the poll in charge.
        assert_eq!(
            next_pause(None, 1, false, false, false, RECLAIM_AFTER_PARTIAL),
            None
        );
        assert_eq!(
            next_pause(None, 0, false, false, true, RECLAIM_AFTER_PARTIAL),
            None
        );
    }

    #[test]
    fn a_rate_held_job_is_claimed_again_when_the_rate_admits_it() {
        let poll = Duration::from_secs(1);
        let ms = Duration::from_millis;
        // Doubling pauses 10, 20, 40, 80, 160 ms would claim at 10, 30, 70, 150, 310 ms for a
        // job a 4/s rate admits at 250 ms: the rate's time cuts the pause that would overshoot.
        let mut at = ms(0);
        let mut pause = next_pause(None, 1, false, false, false, poll);
        let admitted = ms(250);
        while at < admitted {
            let wait = claim_pause(pause, Some(admitted - at), poll);
            at += wait;
            pause = next_pause(pause, 0, false, false, false, poll);
        }
        assert_eq!(at, admitted, "claimed when the rate admits, not after");
        // No pause under way (a claim on an event): the rate's time alone, under the poll.
        assert_eq!(claim_pause(None, Some(ms(250)), poll), ms(250));
        assert_eq!(claim_pause(None, Some(ms(5_000)), poll), poll);
        // A shorter re-claim pause (for max_running) still comes first.
        assert_eq!(claim_pause(Some(ms(10)), Some(ms(250)), poll), ms(10));
        assert_eq!(claim_pause(Some(ms(40)), None, poll), ms(40));
        assert_eq!(claim_pause(None, None, poll), poll);
    }
}

//! Property tests of the state machine (docs/design.md sections 3 and 8): random sequences of
//! events, with current or stale fencing tokens and clock advances, are applied to one job
//! with `drover_core::apply` and checked against a small independent model of the table in
//! docs/design.md section 3, plus invariants: attempts stay within 0..=max_attempts, terminal
//! states are absorbing except for an operator retry, fencing tokens strictly increase across
//! claims, stale tokens are always rejected, release and snooze never spend an attempt, an
//! expired lease of a job whose handler never started gives its attempt back (at most
//! `UNSTARTED_RESCUES_MAX` times in a row), a recorded start is never before the claim, and an
//! error leaves the job unchanged.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use drover_core::job::ERRORS_KEPT;
use drover_core::state::UNSTARTED_RESCUES_MAX;
use drover_core::{
    apply, Error, Event, FencingToken, Job, JobId, JobKind, JobState, NewJob, Resolution, Retry,
    WorkerId,
};
use proptest::prelude::*;
use serde_json::json;

/// Which token a worker write presents.
#[derive(Debug, Clone, Copy)]
enum Token {
    /// The job's current token.
    Current,
    /// An older (or never issued) token: current minus 1..=3.
    Stale(i64),
}

/// A step of a random history.
#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    /// Lease length, and whether the job starts at once (false: claimed ahead).
    Claim(u64, bool),
    /// The handler of a job claimed ahead started this many ms ago.
    Started(Token, u64),
    Heartbeat(Token, u64),
    Complete(Token),
    Fail(Token, Option<u64>),
    Snooze(Token, u64),
    Release(Token),
    Cancelled(Token),
    LeaseExpired(bool),
    ReconcileClaim(u64),
    Reconciled(Token, u8),
    Cancel,
    Retry,
    Requeue,
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![
        3 => Just(Token::Current),
        1 => (1i64..=3).prop_map(Token::Stale),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let ms = 0u64..120_000;
    let lease = 100u64..90_000;
    prop_oneof![
        4 => ms.clone().prop_map(Step::Advance),
        4 => (lease.clone(), any::<bool>()).prop_map(|(l, s)| Step::Claim(l, s)),
        2 => (token(), 0u64..200_000).prop_map(|(t, e)| Step::Started(t, e)),
        2 => (token(), lease.clone()).prop_map(|(t, l)| Step::Heartbeat(t, l)),
        2 => token().prop_map(Step::Complete),
        3 => (token(), proptest::option::of(ms.clone())).prop_map(|(t, d)| Step::Fail(t, d)),
        2 => (token(), ms).prop_map(|(t, d)| Step::Snooze(t, d)),
        2 => token().prop_map(Step::Release),
        1 => token().prop_map(Step::Cancelled),
        3 => any::<bool>().prop_map(Step::LeaseExpired),
        2 => lease.prop_map(Step::ReconcileClaim),
        2 => (token(), 0u8..3).prop_map(|(t, r)| Step::Reconciled(t, r)),
        1 => Just(Step::Cancel),
        1 => Just(Step::Retry),
        1 => Just(Step::Requeue),
    ]
}

/// The model: the fields the table of docs/design.md section 3 talks about, time in ms from `t0`.
#[derive(Debug, Clone, PartialEq)]
struct Model {
    state: JobState,
    attempt: i32,
    max_attempts: i32,
    token: i64,
    lease_ends_ms: Option<i64>,
    run_at_ms: i64,
    cancel_requested: bool,
    /// The handler of the latest claim started (the job's `started_at` is set).
    started: bool,
    /// The job's errors, newest last: the attempt each names, and whether it records a lease
    /// that expired before the handler started.
    errors: Vec<(i32, bool)>,
}

/// What the model expects an event to do.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Ok,
    LeaseLost,
    InvalidTransition,
}

impl Model {
    fn holds(&self, token: i64, now: i64) -> bool {
        self.state == JobState::Running
            && self.token == token
            && self.lease_ends_ms.is_some_and(|end| end > now)
    }

    fn finish(&mut self, state: JobState) {
        self.state = state;
        self.lease_ends_ms = None;
    }

    fn requeue(&mut self, run_at: i64) {
        self.state = JobState::Queued;
        self.lease_ends_ms = None;
        self.run_at_ms = run_at;
    }

    fn push_error(&mut self, unstarted: bool) {
        self.errors.push((self.attempt, unstarted));
        if self.errors.len() > ERRORS_KEPT {
            self.errors.remove(0);
        }
    }

    /// Expired leases in a row that gave back the current attempt before the handler started.
    fn unstarted_rescues(&self) -> usize {
        self.errors
            .iter()
            .rev()
            .take_while(|(attempt, unstarted)| *unstarted && *attempt == self.attempt)
            .count()
    }

    /// Applies a step at `now`; worker-write tokens come resolved in `token`.
    fn step(&mut self, step: &Step, token: i64, now: i64) -> Expect {
        let ms = |d: u64| i64::try_from(d).unwrap();
        match *step {
            Step::Advance(_) => Expect::Ok,
            Step::Claim(lease, start) => {
                if self.state != JobState::Queued || self.run_at_ms > now {
                    return Expect::InvalidTransition;
                }
                self.state = JobState::Running;
                self.attempt += 1;
                self.token += 1;
                self.lease_ends_ms = Some(now + ms(lease));
                self.cancel_requested = false;
                self.started = start;
                Expect::Ok
            }
            Step::Started(..) => {
                if !self.holds(token, now) {
                    return Expect::LeaseLost;
                }
                self.started = true;
                Expect::Ok
            }
            Step::Heartbeat(_, lease) => {
                if !self.holds(token, now) {
                    return Expect::LeaseLost;
                }
                self.lease_ends_ms = Some(now + ms(lease));
                Expect::Ok
            }
            Step::Complete(_) => {
                if !self.holds(token, now) {
                    return Expect::LeaseLost;
                }
                self.finish(JobState::Succeeded);
                Expect::Ok
            }
            Step::Fail(_, retry) => {
                if !self.holds(token, now) {
                    return Expect::LeaseLost;
                }
                self.push_error(false);
                match retry {
                    _ if self.cancel_requested => self.finish(JobState::Cancelled),
                    Some(d) if self.attempt < self.max_attempts => self.requeue(now + ms(d)),
                    _ => self.finish(JobState::Failed),
                }
                Expect::Ok
            }
            Step::Snooze(..) | Step::Release(_) => {
                if !self.holds(token, now) {
                    return Expect::LeaseLost;
                }
                if self.cancel_requested {
                    self.finish(JobState::Cancelled);
                } else {
                    self.attempt = (self.attempt - 1).max(0);
                    self.requeue(now + ms(d_of(step)));
                }
                Expect::Ok
            }
            Step::Cancelled(_) => {
                if !self.holds(token, now) {
                    return Expect::LeaseLost;
                }
                self.push_error(false);
                self.finish(JobState::Cancelled);
                Expect::Ok
            }
            Step::LeaseExpired(reconciler) => {
                let expired = self.lease_ends_ms.is_some_and(|end| end <= now);
                if self.state != JobState::Running || !expired {
                    return Expect::InvalidTransition;
                }
                let unstarted = !self.started && !self.cancel_requested;
                if unstarted && self.unstarted_rescues() < UNSTARTED_RESCUES_MAX {
                    self.push_error(true);
                    self.attempt = (self.attempt - 1).max(0);
                    self.requeue(now);
                    return Expect::Ok;
                }
                self.push_error(false);
                if self.cancel_requested {
                    self.finish(JobState::Cancelled);
                } else if reconciler {
                    self.state = JobState::Reconciling;
                    self.lease_ends_ms = None;
                } else if self.attempt >= self.max_attempts {
                    self.finish(JobState::Failed);
                } else {
                    self.requeue(now);
                }
                Expect::Ok
            }
            Step::ReconcileClaim(lease) => {
                let free = self.lease_ends_ms.is_none_or(|end| end <= now);
                if self.state != JobState::Reconciling || !free {
                    return Expect::InvalidTransition;
                }
                self.token += 1;
                self.lease_ends_ms = Some(now + ms(lease));
                Expect::Ok
            }
            Step::Reconciled(_, verdict) => {
                let held = self.state == JobState::Reconciling
                    && self.token == token
                    && self.lease_ends_ms.is_some_and(|end| end > now);
                if !held {
                    return Expect::LeaseLost;
                }
                match verdict {
                    0 => self.finish(JobState::Succeeded),
                    1 => {
                        self.push_error(false);
                        self.finish(JobState::Failed);
                    }
                    _ => self.lease_ends_ms = None,
                }
                Expect::Ok
            }
            Step::Cancel => match self.state {
                JobState::Queued | JobState::Reconciling => {
                    self.finish(JobState::Cancelled);
                    Expect::Ok
                }
                JobState::Running => {
                    self.cancel_requested = true;
                    Expect::Ok
                }
                _ => Expect::InvalidTransition,
            },
            Step::Retry => {
                if !self.state.is_terminal() {
                    return Expect::InvalidTransition;
                }
                self.attempt = 0;
                self.cancel_requested = false;
                self.requeue(now);
                Expect::Ok
            }
            Step::Requeue => {
                if self.state != JobState::Queued {
                    return Expect::InvalidTransition;
                }
                self.run_at_ms = self.run_at_ms.min(now);
                Expect::Ok
            }
        }
    }
}

/// The delay of a snooze (0 for a release).
fn d_of(step: &Step) -> u64 {
    match step {
        Step::Snooze(_, d) => *d,
        _ => 0,
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).single().unwrap()
}

fn at(ms: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::milliseconds(ms)
}

fn ms_of(t: DateTime<Utc>) -> i64 {
    (t - t0()).num_milliseconds()
}

fn token_of(step: &Step) -> Option<Token> {
    match step {
        Step::Started(t, _)
        | Step::Heartbeat(t, _)
        | Step::Complete(t)
        | Step::Fail(t, _)
        | Step::Snooze(t, _)
        | Step::Release(t)
        | Step::Cancelled(t)
        | Step::Reconciled(t, _) => Some(*t),
        _ => None,
    }
}

fn event_of(step: &Step, token: FencingToken) -> Option<Event> {
    let worker = || WorkerId::parse("w").unwrap();
    let d = Duration::from_millis;
    Some(match *step {
        Step::Advance(_) => return None,
        Step::Claim(lease, start) => Event::Claim {
            worker: worker(),
            lease: d(lease),
            start,
        },
        Step::Started(_, elapsed) => Event::Started {
            token,
            elapsed: d(elapsed),
        },
        Step::Heartbeat(_, lease) => Event::Heartbeat {
            token,
            lease: d(lease),
            meta: Some(json!({"beat": true})),
            progress: Some(json!({"step": "x"})),
        },
        Step::Complete(_) => Event::Complete {
            token,
            result: Some(json!(1)),
        },
        Step::Fail(_, retry) => Event::Fail {
            token,
            message: "boom".into(),
            retry: retry.map_or(Retry::Never, |ms| Retry::After(d(ms))),
        },
        Step::Snooze(_, delay) => Event::Snooze {
            token,
            delay: d(delay),
        },
        Step::Release(_) => Event::Release { token },
        Step::Cancelled(_) => Event::Cancelled {
            token,
            message: "stopped".into(),
        },
        Step::LeaseExpired(reconciler) => Event::LeaseExpired { reconciler },
        Step::ReconcileClaim(lease) => Event::ReconcileClaim {
            worker: worker(),
            lease: d(lease),
        },
        Step::Reconciled(_, verdict) => Event::Reconciled {
            token,
            resolution: match verdict {
                0 => Resolution::Succeeded,
                1 => Resolution::Failed {
                    message: "not done".into(),
                },
                _ => Resolution::Inconclusive,
            },
        },
        Step::Cancel => Event::Cancel,
        Step::Retry => Event::Retry,
        Step::Requeue => Event::Requeue,
    })
}

fn run(max_attempts: i32, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut job: Job = NewJob::new(JobKind::parse("k").unwrap(), json!({}))
        .with_max_attempts(max_attempts)
        .into_job(JobId::new_v7(), t0());
    let mut model = Model {
        state: JobState::Queued,
        attempt: 0,
        max_attempts,
        token: 0,
        lease_ends_ms: None,
        run_at_ms: 0,
        cancel_requested: false,
        started: false,
        errors: Vec::new(),
    };
    let mut now: i64 = 0;
    let mut highest_claim_token = 0;
    for step in steps {
        if let Step::Advance(ms) = step {
            now += i64::try_from(*ms).unwrap();
            continue;
        }
        let token = match token_of(step) {
            Some(Token::Stale(back)) => job.fencing_token.0 - back,
            _ => job.fencing_token.0,
        };
        let event = event_of(step, FencingToken(token)).unwrap();
        let event_name = event.name();
        let before = job.clone();
        let expected = model.step(step, token, now);
        let result = apply(&mut job, event, at(now));

        // The result is the model's.
        let got = match &result {
            Ok(_) => Expect::Ok,
            Err(Error::LeaseLost { .. }) => Expect::LeaseLost,
            Err(Error::InvalidTransition { .. }) => Expect::InvalidTransition,
            Err(other) => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
        };
        prop_assert_eq!(got, expected, "step {:?} on {:?}", step, before.state);

        // A refusal names the job's state, and the jobs an event applies to (which its
        // message quotes) always include the state of a job it was applied to.
        if let Err(Error::InvalidTransition { from, event }) = &result {
            prop_assert_eq!(*from, before.state);
            prop_assert_eq!(*event, event_name);
        }
        if result.is_ok() {
            let applies_to = event_name.applies_to();
            prop_assert!(
                applies_to.contains(&before.state.to_string()),
                "{:?} applied to a {} job, but its message says it applies to {}",
                event_name,
                before.state,
                applies_to
            );
        }

        // An error leaves the job unchanged.
        if result.is_err() {
            prop_assert_eq!(&job, &before);
        }
        // A stale token is always rejected.
        if matches!(token_of(step), Some(Token::Stale(_))) {
            prop_assert!(result.is_err(), "stale token accepted: {:?}", step);
        }
        // Terminal states are absorbing except for an operator retry.
        if before.state.is_terminal() && !matches!(step, Step::Retry) {
            prop_assert!(result.is_err());
            prop_assert_eq!(job.state, before.state);
        }
        // Release and snooze never spend an attempt.
        if result.is_ok() && matches!(step, Step::Release(_) | Step::Snooze(..)) {
            prop_assert!(job.attempt < before.attempt || job.state == JobState::Cancelled);
        }
        // Fencing tokens never decrease and strictly increase across claims.
        prop_assert!(job.fencing_token >= before.fencing_token);
        if result.is_ok() && matches!(step, Step::Claim(..) | Step::ReconcileClaim(_)) {
            prop_assert!(job.fencing_token.0 > highest_claim_token);
            highest_claim_token = job.fencing_token.0;
        }
        // Attempts stay within 0..=max_attempts.
        prop_assert!(job.attempt >= 0 && job.attempt <= job.max_attempts);
        prop_assert!(job.errors.len() <= ERRORS_KEPT);
        prop_assert_eq!(job.finished_at.is_some(), job.state.is_terminal());

        // The job agrees with the model.
        prop_assert_eq!(job.state, model.state);
        prop_assert_eq!(job.attempt, model.attempt);
        prop_assert_eq!(job.fencing_token.0, model.token);
        prop_assert_eq!(job.lease_expires_at.map(ms_of), model.lease_ends_ms);
        prop_assert_eq!(job.cancel_requested, model.cancel_requested);
        prop_assert_eq!(job.started_at.is_some(), model.started);
        let errors: Vec<(i32, bool)> = job
            .errors
            .iter()
            .map(|e| {
                let unstarted = e
                    .message
                    .starts_with("lease expired before the handler started");
                (e.attempt, unstarted)
            })
            .collect();
        prop_assert_eq!(&errors, &model.errors);
        // A recorded start lies between the claim and now.
        if let Some(started) = job.started_at {
            prop_assert!(job.attempted_at.is_some_and(|claimed| started >= claimed));
            prop_assert!(started <= at(now));
        }
        // A job waits for a slot exactly while it is running without a recorded start.
        prop_assert_eq!(
            job.is_waiting_for_slot(),
            job.state == JobState::Running && !model.started
        );
        if job.state == JobState::Queued {
            prop_assert_eq!(ms_of(job.run_at), model.run_at_ms);
        }
        prop_assert_eq!(
            job.lease_owner.is_some(),
            model.lease_ends_ms.is_some(),
            "lease owner set exactly while a lease is held"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random histories agree with the model and keep every invariant.
    #[test]
    fn random_histories_follow_the_table(
        max_attempts in 1i32..=4,
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        run(max_attempts, &steps)?;
    }
}

/// A fixed history that exercises every row once, as a readable example of the model.
#[test]
fn every_row_once() {
    let steps = vec![
        Step::Claim(1000, true),
        Step::Heartbeat(Token::Current, 1000),
        Step::Fail(Token::Current, Some(0)),
        Step::Claim(1000, false),
        Step::Advance(10),
        Step::Started(Token::Current, 5),
        Step::Snooze(Token::Current, 10),
        Step::Advance(10),
        Step::Claim(1000, true),
        Step::Release(Token::Current),
        Step::Claim(50, false),
        Step::Advance(50),
        Step::LeaseExpired(false),
        Step::Claim(50, true),
        Step::Advance(50),
        Step::LeaseExpired(true),
        Step::ReconcileClaim(100),
        Step::Reconciled(Token::Current, 2),
        Step::ReconcileClaim(100),
        Step::Reconciled(Token::Current, 0),
        Step::Retry,
        Step::Claim(100, true),
        Step::Cancel,
        Step::Complete(Token::Stale(1)),
        Step::Cancelled(Token::Current),
        Step::Retry,
        Step::Cancel,
    ];
    run(3, &steps).unwrap();
}

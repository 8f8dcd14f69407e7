//! The checker: replays the history's committed answers (an answer the store gave, also when a
//! fault then hid it from the caller) and proves the rules below, then compares the history
//! with the store's final state.
//!
//! - no accepted job lost: every job the store created is in the final state, terminal;
//! - no job succeeded twice (between two operator retries);
//! - no finish accepted with a stale fencing token, no lease extended for one;
//! - no claim of a job the history holds terminal, tokens strictly increase per job;
//! - attempts never exceed `max_attempts`; each claim's attempt is the last one plus one, or
//!   the same after a snooze, a graceful release or the rescue of a run that never started;
//! - no job claimed from a queue between a committed pause and the next resume;
//! - no lease rescued before it expired;
//! - no worker stops unless asked to (transient store errors never stop one);
//! - an idempotency key always answers the same job;
//! - a unique key never has two live jobs;
//! - the final state agrees with the history: same terminal state, and a succeeded job's result
//!   is the one its last accepted run returned.

use std::collections::{BTreeMap, BTreeSet};

use drover_core::{FencingToken, Job, JobId, JobState};
use serde::Serialize;
use serde_json::Value;

use crate::history::{Answer, Ev, Record};

/// A broken rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    /// The rule, short.
    pub rule: &'static str,
    /// The jobs that break it.
    pub jobs: Vec<JobId>,
    /// What the checker saw.
    pub detail: String,
    /// When (simulated microseconds), for rules checked on the history.
    pub t: Option<i64>,
}

#[derive(Debug, Default)]
struct Track {
    live: bool,
    unique: Option<String>,
    max_attempts: i32,
    latest_token: Option<FencingToken>,
    /// Lease end known from the last claim or extending heartbeat; `None` when not leased.
    lease_until: Option<i64>,
    successes: u32,
    /// The attempt of the last claim (0 before the first, and after an operator retry).
    last_attempt: i32,
    /// Whether the run that ended last spent its attempt (a snooze and a graceful release
    /// give it back), so the next claim's attempt is one more or the same.
    spent: bool,
    /// The terminal state the history last gave the job, with a success's result.
    terminal: Option<(JobState, Option<Value>)>,
}

struct Checker {
    jobs: BTreeMap<JobId, Track>,
    keys: BTreeMap<String, JobId>,
    paused: BTreeSet<String>,
    out: Vec<Violation>,
}

impl Checker {
    fn violate(&mut self, rule: &'static str, jobs: Vec<JobId>, t: Option<i64>, detail: String) {
        self.out.push(Violation {
            rule,
            jobs,
            detail,
            t,
        });
    }

    fn live_holder(&self, unique: &str, except: JobId) -> Option<JobId> {
        self.jobs
            .iter()
            .find(|(id, tr)| **id != except && tr.live && tr.unique.as_deref() == Some(unique))
            .map(|(id, _)| *id)
    }

    fn end(&mut self, id: JobId, state: JobState, result: Option<Value>) {
        if let Some(tr) = self.jobs.get_mut(&id) {
            tr.lease_until = None;
            if state.is_terminal() {
                tr.live = false;
                tr.terminal = Some((state, result));
            }
        }
    }

    fn step(&mut self, rec: &Record) {
        let t = Some(rec.t);
        let now = rec.t;
        match &rec.ev {
            Ev::Enqueue {
                jobs,
                answer: Answer::Ok(answers),
                ..
            } => {
                for (req, ans) in jobs.iter().zip(answers) {
                    if ans.status == "created" {
                        if let Some(u) = &req.unique {
                            if let Some(other) = self.live_holder(u, ans.job) {
                                self.violate(
                                    "a unique key has two live jobs",
                                    vec![other, ans.job],
                                    t,
                                    format!(
                                        "unique key {u}: {other} live when {} was created",
                                        ans.job
                                    ),
                                );
                            }
                        }
                        self.jobs.insert(
                            ans.job,
                            Track {
                                live: true,
                                unique: req.unique.clone(),
                                max_attempts: req.max_attempts,
                                spent: true,
                                ..Track::default()
                            },
                        );
                    }
                    // A key is stored with the job it created; a replay answers that job. A
                    // duplicate (unique key held) stores nothing, its key included.
                    if let Some(key) = &req.key {
                        match (ans.status.as_str(), self.keys.get(key).copied()) {
                            ("created", None) => {
                                self.keys.insert(key.clone(), ans.job);
                            }
                            ("created", Some(first)) => self.violate(
                                "an idempotency key created two jobs",
                                vec![first, ans.job],
                                t,
                                format!("key {key}: {first} then {}", ans.job),
                            ),
                            ("replayed", Some(first)) if first != ans.job => self.violate(
                                "an idempotency key answered two jobs",
                                vec![first, ans.job],
                                t,
                                format!("key {key}: created {first}, replayed {}", ans.job),
                            ),
                            ("replayed", None) => self.violate(
                                "an idempotency key replayed a job it never created",
                                vec![ans.job],
                                t,
                                format!("key {key}"),
                            ),
                            _ => {}
                        }
                    }
                }
            }
            Ev::Claim {
                answer: Answer::Ok(claimed),
                ..
            } => {
                for c in claimed {
                    let paused = self.paused.contains(&c.queue);
                    let Some(tr) = self.jobs.get_mut(&c.job) else {
                        self.violate(
                            "a claim returned a job never created",
                            vec![c.job],
                            t,
                            String::new(),
                        );
                        continue;
                    };
                    let mut found: Vec<(&'static str, String)> = Vec::new();
                    if !tr.live {
                        found.push(("a terminal job was claimed", format!("{:?}", tr.terminal)));
                    }
                    if paused {
                        found.push((
                            "a job was claimed from a paused queue",
                            format!("queue {}", c.queue),
                        ));
                    }
                    if c.attempt > c.max_attempts || c.attempt > tr.max_attempts {
                        found.push((
                            "attempts exceeded max_attempts",
                            format!("attempt {} of {}", c.attempt, tr.max_attempts),
                        ));
                    }
                    if tr.latest_token.is_some_and(|last| c.token <= last) {
                        found.push((
                            "a fencing token did not increase",
                            format!("{:?} after {:?}", c.token, tr.latest_token),
                        ));
                    }
                    let expected = tr.last_attempt + i32::from(tr.spent);
                    if c.attempt != expected {
                        found.push((
                            "an attempt was counted wrongly",
                            format!(
                                "claimed as attempt {}, expected {expected} (last {}, spent: {})",
                                c.attempt, tr.last_attempt, tr.spent
                            ),
                        ));
                    }
                    tr.last_attempt = c.attempt;
                    tr.spent = true;
                    tr.latest_token = Some(c.token);
                    tr.lease_until = Some(c.lease_until);
                    for (rule, detail) in found {
                        self.violate(rule, vec![c.job], t, detail);
                    }
                }
            }
            Ev::Heartbeat {
                answer: Answer::Ok(beats),
                ..
            } => {
                for b in beats {
                    let Some(until) = b.lease_until else { continue };
                    let Some(tr) = self.jobs.get_mut(&b.job) else {
                        continue;
                    };
                    if tr.latest_token != Some(b.token) {
                        let detail = format!("{:?}, latest {:?}", b.token, tr.latest_token);
                        self.violate(
                            "a lease was extended for a stale token",
                            vec![b.job],
                            t,
                            detail,
                        );
                    } else {
                        tr.lease_until = Some(until);
                    }
                }
            }
            Ev::Finish {
                items,
                answer: Answer::Ok(replies),
                ..
            } => {
                for (item, reply) in items.iter().zip(replies) {
                    let Some(to) = reply else { continue };
                    let Some(tr) = self.jobs.get_mut(&item.job) else {
                        continue;
                    };
                    let mut found: Vec<(&'static str, String)> = Vec::new();
                    if tr.latest_token != Some(item.token) {
                        found.push((
                            "a finish was accepted with a stale fencing token",
                            format!("{:?}, latest claim {:?}", item.token, tr.latest_token),
                        ));
                    }
                    if !tr.live {
                        found.push((
                            "a finish was accepted for a terminal job",
                            format!("{:?}", tr.terminal),
                        ));
                    }
                    if *to == JobState::Succeeded {
                        tr.successes += 1;
                        if tr.successes > 1 {
                            found
                                .push(("a job succeeded twice", format!("token {:?}", item.token)));
                        }
                    }
                    tr.spent = !matches!(item.outcome.as_str(), "snoozed" | "released");
                    for (rule, detail) in found {
                        self.violate(rule, vec![item.job], t, detail);
                    }
                    let result = (*to == JobState::Succeeded)
                        .then(|| item.result.clone())
                        .flatten();
                    self.end(item.job, *to, result);
                }
            }
            // A cancel of a running job only requests it; its finish ends it.
            Ev::Cancel {
                job,
                answer: Answer::Ok(state),
                ..
            } if state.is_terminal() => self.end(*job, *state, None),
            Ev::Retry {
                job,
                answer: Answer::Ok(_),
                ..
            } => {
                let unique = self.jobs.get(job).and_then(|tr| tr.unique.clone());
                if let Some(u) = unique {
                    if let Some(other) = self.live_holder(&u, *job) {
                        self.violate(
                            "a unique key has two live jobs",
                            vec![other, *job],
                            t,
                            format!("unique key {u}: {other} live when {job} was retried"),
                        );
                    }
                }
                if let Some(tr) = self.jobs.get_mut(job) {
                    tr.live = true;
                    tr.last_attempt = 0;
                    tr.spent = true;
                    tr.successes = 0;
                    tr.terminal = None;
                    tr.lease_until = None;
                }
            }
            Ev::QueuePause {
                queue,
                answer: Answer::Ok(_),
                ..
            } => {
                self.paused.insert(queue.clone());
            }
            Ev::QueueResume {
                queue,
                answer: Answer::Ok(_),
                ..
            } => {
                self.paused.remove(queue);
            }
            Ev::Rescue {
                answer: Answer::Ok(rescued),
                ..
            } => {
                for (job, to, spent) in rescued {
                    if let Some(tr) = self.jobs.get_mut(job) {
                        tr.spent = *spent;
                    }
                    let lease = self.jobs.get(job).and_then(|tr| tr.lease_until);
                    if let Some(until) = lease {
                        if until > now {
                            self.violate(
                                "a live lease was rescued",
                                vec![*job],
                                t,
                                format!("lease ends {} us after the rescue", until - now),
                            );
                        }
                    }
                    self.end(*job, *to, None);
                }
            }
            Ev::WorkerExit {
                asked: false,
                error,
            } => {
                let detail = format!("{} stopped unasked: {error:?}", rec.who);
                self.violate("a worker stopped on its own", Vec::new(), t, detail);
            }
            _ => {}
        }
    }

    fn finish(&mut self, jobs: &[Job], settled: bool) {
        let stored: BTreeMap<JobId, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
        let ids: Vec<JobId> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(job) = stored.get(&id) else {
                self.violate(
                    "an accepted job was lost",
                    vec![id],
                    None,
                    "not in the store".into(),
                );
                continue;
            };
            if !job.state.is_terminal() {
                let why = if settled {
                    ""
                } else {
                    " (the quiet period ran out)"
                };
                self.violate(
                    "a job is not terminal once faults stopped",
                    vec![id],
                    None,
                    format!("{:?}{why}", job.state),
                );
                continue;
            }
            if job.attempt > job.max_attempts {
                self.violate(
                    "attempts exceeded max_attempts",
                    vec![id],
                    None,
                    format!("final attempt {} of {}", job.attempt, job.max_attempts),
                );
            }
            let terminal = self.jobs[&id].terminal.clone();
            match &terminal {
                None => self.violate(
                    "the final state disagrees with the history",
                    vec![id],
                    None,
                    format!("store {:?}, history: never terminal", job.state),
                ),
                Some((state, result)) => {
                    if *state != job.state {
                        self.violate(
                            "the final state disagrees with the history",
                            vec![id],
                            None,
                            format!("store {:?}, history {state:?}", job.state),
                        );
                    } else if *state == JobState::Succeeded && *result != job.result {
                        self.violate(
                            "a succeeded job's result is not its last accepted run's",
                            vec![id],
                            None,
                            format!("store {:?}, history {result:?}", job.result),
                        );
                    }
                }
            }
        }
        for job in jobs {
            if !self.jobs.contains_key(&job.id) {
                self.violate(
                    "the store holds a job the history never created",
                    vec![job.id],
                    None,
                    format!("{:?}", job.state),
                );
            }
        }
    }
}

/// Checks `history` and the store's final `jobs` (`settled`: every job was terminal before
/// the quiet period ran out); the violations in the order found.
pub fn check(history: &[Record], jobs: &[Job], settled: bool) -> Vec<Violation> {
    let mut checker = Checker {
        jobs: BTreeMap::new(),
        keys: BTreeMap::new(),
        paused: BTreeSet::new(),
        out: Vec::new(),
    };
    for rec in history {
        checker.step(rec);
    }
    checker.finish(jobs, settled);
    checker.out
}

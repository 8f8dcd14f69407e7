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
//!   is the one its last accepted run returned;
//! - workflows (docs/design.md section 10): no job claimed while one of its dependencies is
//!   not terminal, nor after one failed or was cancelled unless it runs regardless (such a
//!   dependent is cancelled), a new job waits exactly when a dependency is pending, a parent
//!   that waits for its children is claimed again only once every child is terminal, and no
//!   job stays waiting at the end; dependency ends and cancels of parents propagate as the
//!   store contract says, so the checker follows them;
//! - limits: a claim never makes more jobs of a key run than its `max_running`, and no window
//!   of a rate's period holds more claims than its count (counted from the policy's last set);
//! - each cron tick enqueues at most one job, and ticks fire in order;
//! - the pending-job quota is never exceeded by an accepted enqueue or retry;
//! - retention never deletes a job that is not terminal, that a live job depends on, a parent
//!   with live children or a child of a live parent.

use std::collections::{BTreeMap, BTreeSet};

use drover_core::{FencingToken, Job, JobId, JobState};
use serde::Serialize;
use serde_json::Value;

use crate::history::{Answer, EnqueueAns, EnqueueReq, Ev, Record};

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
    /// Claimed and not yet ended (finished, rescued).
    running: bool,
    /// Its idempotency key.
    key: Option<String>,
    /// The jobs it depends on.
    deps: Vec<JobId>,
    /// Dependencies not resolved yet.
    pending: BTreeSet<JobId>,
    /// A dependency that resolved failed or cancelled.
    failed_dep: Option<JobId>,
    run_regardless: bool,
    /// Every limit key it is subject to (explicit, `kind:` and `queue:`).
    limit_keys: Vec<String>,
    parent: Option<JobId>,
    children: Vec<JobId>,
    /// Its last run ended waiting for its children.
    waits_children: bool,
    /// Deleted by retention.
    pruned: bool,
}

/// A limit policy: max_running, rate (count, period in microseconds).
type Policy = (Option<u32>, Option<(u32, i64)>);

struct Checker {
    jobs: BTreeMap<JobId, Track>,
    keys: BTreeMap<String, JobId>,
    paused: BTreeSet<String>,
    /// Dependents by dependency.
    dependents: BTreeMap<JobId, Vec<JobId>>,
    /// Limit policies by key: max_running, rate (count, period in microseconds).
    limits: BTreeMap<String, Policy>,
    /// Claim times per rate-limited key since its policy was last set.
    claim_times: BTreeMap<String, Vec<i64>>,
    max_pending: Option<u64>,
    /// The jobs whose `running` is set (the limits' counts look only at these).
    running: BTreeSet<JobId>,
    /// Cron ticks that enqueued a job.
    fired: BTreeSet<(String, i64)>,
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

    /// A job's run or life ended in `state`; a terminal end propagates (docs/design.md
    /// section 10): its dependents resolve (cancelled when it did not succeed, unless they
    /// run regardless), and a cancelled job's children not running are cancelled too.
    fn end(&mut self, id: JobId, state: JobState, result: Option<Value>) {
        let Some(tr) = self.jobs.get_mut(&id) else {
            return;
        };
        tr.lease_until = None;
        tr.running = false;
        self.running.remove(&id);
        if !state.is_terminal() {
            return;
        }
        let was_live = tr.live;
        tr.live = false;
        tr.terminal = Some((state, result));
        if !was_live {
            return;
        }
        self.ended(id, state);
    }

    fn ended(&mut self, id: JobId, state: JobState) {
        let mut cancel = Vec::new();
        for x in self.dependents.get(&id).cloned().unwrap_or_default() {
            let Some(tr) = self.jobs.get_mut(&x) else {
                continue;
            };
            if !tr.pending.remove(&id) || state == JobState::Succeeded {
                continue;
            }
            tr.failed_dep = Some(id);
            if !tr.run_regardless && tr.live && !tr.running {
                cancel.push(x);
            }
        }
        if state == JobState::Cancelled {
            cancel.extend(self.children_to_cancel(id));
        }
        for x in cancel {
            self.end(x, JobState::Cancelled, None);
        }
    }

    /// The children of `id` a cancel of it cancels: those live and not running (a running
    /// one only gets its cancel requested).
    fn children_to_cancel(&self, id: JobId) -> Vec<JobId> {
        self.jobs
            .get(&id)
            .map(|tr| {
                tr.children
                    .iter()
                    .filter(|c| self.jobs.get(c).is_some_and(|c| c.live && !c.running))
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    fn live_count(&self) -> u64 {
        self.jobs.values().filter(|tr| tr.live).count() as u64
    }

    fn check_quota(&mut self, t: Option<i64>, what: &str) {
        // Counting is linear in the jobs seen: only when a quota is known.
        if let Some(max) = self.max_pending {
            let live = self.live_count();
            if live > max {
                let detail = format!("{live} pending jobs after {what}, quota {max}");
                self.violate("the pending-job quota was exceeded", Vec::new(), t, detail);
            }
        }
    }

    /// One job of an accepted enqueue (a batch, a graph, children, a cron tick).
    fn enqueued(
        &mut self,
        req: &EnqueueReq,
        ans: &EnqueueAns,
        t: Option<i64>,
        parent: Option<JobId>,
    ) {
        if ans.status == "created" {
            if let Some(u) = &req.unique {
                if let Some(other) = self.live_holder(u, ans.job) {
                    self.violate(
                        "a unique key has two live jobs",
                        vec![other, ans.job],
                        t,
                        format!("unique key {u}: {other} live when {} was created", ans.job),
                    );
                }
            }
            let pending: BTreeSet<JobId> = req
                .depends_on
                .iter()
                .filter(|d| self.jobs.get(d).is_some_and(|d| d.live))
                .copied()
                .collect();
            let failed_dep = req.depends_on.iter().copied().find(|d| {
                self.jobs.get(d).is_some_and(|d| {
                    !d.live
                        && matches!(
                            d.terminal,
                            Some((JobState::Failed | JobState::Cancelled, _))
                        )
                })
            });
            let cancelled = failed_dep.is_some() && !req.run_regardless;
            let expected = if cancelled {
                JobState::Cancelled
            } else if pending.is_empty() {
                JobState::Queued
            } else {
                JobState::Waiting
            };
            if ans.state != expected {
                self.violate(
                    "a new job's state disagrees with its dependencies",
                    vec![ans.job],
                    t,
                    format!(
                        "created {:?}, expected {expected:?} (pending {pending:?}, failed {failed_dep:?})",
                        ans.state
                    ),
                );
            }
            for d in &req.depends_on {
                self.dependents.entry(*d).or_default().push(ans.job);
            }
            let mut limit_keys = req.limit_keys.clone();
            limit_keys.push(format!("kind:{}", req.kind));
            limit_keys.push(format!("queue:{}", req.queue));
            let live = !ans.state.is_terminal();
            self.jobs.insert(
                ans.job,
                Track {
                    live,
                    unique: req.unique.clone(),
                    max_attempts: req.max_attempts,
                    spent: true,
                    terminal: (!live).then_some((ans.state, None)),
                    key: req.key.clone(),
                    deps: req.depends_on.clone(),
                    pending,
                    failed_dep,
                    run_regardless: req.run_regardless,
                    limit_keys,
                    parent,
                    ..Track::default()
                },
            );
            if let Some(p) = parent {
                if let Some(tr) = self.jobs.get_mut(&p) {
                    tr.children.push(ans.job);
                }
            }
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

    /// The rules of a claim of `job` at `now` that concern other jobs: dependencies,
    /// children, limits.
    fn claim_links(&mut self, job: JobId, now: i64) -> Vec<(&'static str, String)> {
        let mut found = Vec::new();
        let Some(tr) = self.jobs.get(&job) else {
            return found;
        };
        if !tr.pending.is_empty() {
            found.push((
                "a dependent started before its dependencies were terminal",
                format!("pending {:?}", tr.pending),
            ));
        }
        if let (Some(d), false) = (tr.failed_dep, tr.run_regardless) {
            found.push((
                "a dependent ran although a dependency failed",
                format!(
                    "dependency {d} ended {:?}",
                    self.jobs
                        .get(&d)
                        .and_then(|d| d.terminal.clone())
                        .map(|t| t.0)
                ),
            ));
        }
        if tr.waits_children {
            let live: Vec<JobId> = tr
                .children
                .iter()
                .filter(|c| self.jobs.get(c).is_some_and(|c| c.live))
                .copied()
                .collect();
            if !live.is_empty() {
                found.push((
                    "a parent resumed before its children were terminal",
                    format!("live children {live:?}"),
                ));
            }
        }
        for key in tr.limit_keys.clone() {
            let Some((max_running, rate)) = self.limits.get(&key).copied() else {
                continue;
            };
            if let Some(max) = max_running {
                let others = self
                    .running
                    .iter()
                    .filter(|id| **id != job)
                    .filter(|id| {
                        self.jobs
                            .get(id)
                            .is_some_and(|o| o.limit_keys.contains(&key))
                    })
                    .count();
                let running = others + 1;
                if running > max as usize {
                    found.push((
                        "max_running was exceeded",
                        format!("key {key}: {running} running, max_running {max}"),
                    ));
                }
            }
            if let Some((count, period)) = rate {
                let times = self.claim_times.entry(key.clone()).or_default();
                times.push(now);
                let n = times.len();
                if n > count as usize {
                    let first = times[n - 1 - count as usize];
                    if now - first < period {
                        found.push((
                            "a rate limit was exceeded",
                            format!(
                                "key {key}: {} claims within {} us, rate {count} per {period} us",
                                count + 1,
                                now - first
                            ),
                        ));
                    }
                }
            }
        }
        if let Some(tr) = self.jobs.get_mut(&job) {
            tr.waits_children = false;
            tr.running = true;
            self.running.insert(job);
        }
        found
    }

    /// Retention deleted `id`.
    fn pruned(&mut self, id: JobId, t: Option<i64>) {
        let Some(tr) = self.jobs.get(&id) else {
            return;
        };
        let mut found: Vec<(&'static str, String)> = Vec::new();
        if tr.live {
            found.push(("retention deleted a job not terminal", String::new()));
        }
        let waiting: Vec<JobId> = self
            .dependents
            .get(&id)
            .into_iter()
            .flatten()
            .filter(|x| self.jobs.get(x).is_some_and(|x| x.live))
            .copied()
            .collect();
        if !waiting.is_empty() {
            found.push((
                "retention deleted a job a live job depends on",
                format!("dependents {waiting:?}"),
            ));
        }
        let children: Vec<JobId> = tr
            .children
            .iter()
            .filter(|c| self.jobs.get(c).is_some_and(|c| c.live))
            .copied()
            .collect();
        if !children.is_empty() {
            found.push((
                "retention deleted a parent with live children",
                format!("children {children:?}"),
            ));
        }
        if let Some(p) = tr
            .parent
            .filter(|p| self.jobs.get(p).is_some_and(|p| p.live))
        {
            found.push((
                "retention deleted a child of a live parent",
                format!("parent {p}"),
            ));
        }
        let key = tr.key.clone();
        for (rule, detail) in found {
            self.violate(rule, vec![id], t, detail);
        }
        if let Some(tr) = self.jobs.get_mut(&id) {
            tr.pruned = true;
        }
        // Its idempotency key is free again.
        if let Some(key) = key {
            if self.keys.get(&key) == Some(&id) {
                self.keys.remove(&key);
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
            }
            | Ev::Workflow {
                jobs,
                answer: Answer::Ok(answers),
                ..
            } => {
                for (req, ans) in jobs.iter().zip(answers) {
                    self.enqueued(req, ans, t, None);
                }
                self.check_quota(t, "an enqueue");
            }
            Ev::Children {
                parent,
                jobs,
                answer: Answer::Ok(answers),
                ..
            } => {
                for (req, ans) in jobs.iter().zip(answers) {
                    self.enqueued(req, ans, t, Some(*parent));
                }
                self.check_quota(t, "children's enqueue");
            }
            Ev::Fire {
                schedule,
                tick,
                job,
                answer: Answer::Ok(Some(ans)),
                ..
            } => {
                if ans.status == "created" {
                    let last = self
                        .fired
                        .iter()
                        .filter(|(s, _)| s == schedule)
                        .map(|(_, t)| *t)
                        .max();
                    if !self.fired.insert((schedule.clone(), *tick)) {
                        self.violate(
                            "a cron tick was enqueued twice",
                            vec![ans.job],
                            t,
                            format!("schedule {schedule}, tick {} ms", tick / 1_000),
                        );
                    } else if last.is_some_and(|last| last > *tick) {
                        // A tick at or before the last fired one never fires (the scheduler
                        // fires missed ticks oldest first).
                        self.violate(
                            "a cron tick fired after a later one",
                            vec![ans.job],
                            t,
                            format!(
                                "schedule {schedule}, tick {} ms after tick {} ms",
                                tick / 1_000,
                                last.unwrap_or_default() / 1_000
                            ),
                        );
                    }
                }
                self.enqueued(job, ans, t, None);
                self.check_quota(t, "a cron tick");
            }
            Ev::LimitSet {
                key,
                max_running,
                rate,
                answer: Answer::Ok(()),
                ..
            } => {
                self.limits.insert(key.clone(), (*max_running, *rate));
                self.claim_times.remove(key);
            }
            Ev::Quota { max_pending } => self.max_pending = *max_pending,
            Ev::Prune {
                answer: Answer::Ok(deleted),
                ..
            } => {
                for id in deleted {
                    self.pruned(*id, t);
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
                    found.extend(self.claim_links(c.job, now));
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
                    tr.spent = !matches!(
                        item.outcome.as_str(),
                        "snoozed" | "released" | "wait_for_children"
                    );
                    tr.waits_children = item.outcome == "wait_for_children" && !to.is_terminal();
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
            } => {
                if state.is_terminal() {
                    self.end(*job, *state, None);
                } else {
                    // A running job's cancel is requested: its children not running end now.
                    for c in self.children_to_cancel(*job) {
                        self.end(c, JobState::Cancelled, None);
                    }
                }
            }
            Ev::Retry {
                job,
                answer: Answer::Ok(after),
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
                let live: BTreeSet<JobId> = self
                    .jobs
                    .get(job)
                    .map(|tr| tr.deps.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|d| self.jobs.get(d).is_some_and(|d| d.live))
                    .collect();
                if let Some(tr) = self.jobs.get_mut(job) {
                    tr.live = true;
                    tr.last_attempt = 0;
                    tr.spent = true;
                    tr.successes = 0;
                    tr.terminal = None;
                    tr.lease_until = None;
                    tr.running = false;
                    tr.pending = live;
                    tr.failed_dep = None;
                    tr.waits_children = false;
                }
                self.running.remove(job);
                if after.is_terminal() {
                    self.end(*job, *after, None);
                }
                self.check_quota(t, "a retry");
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
            if self.jobs[&id].pruned {
                continue;
            }
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
                let rule = if job.state == JobState::Waiting {
                    "a job stayed waiting once faults stopped"
                } else {
                    "a job is not terminal once faults stopped"
                };
                self.violate(rule, vec![id], None, format!("{:?}{why}", job.state));
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
        dependents: BTreeMap::new(),
        limits: BTreeMap::new(),
        claim_times: BTreeMap::new(),
        max_pending: None,
        running: BTreeSet::new(),
        fired: BTreeSet::new(),
        out: Vec::new(),
    };
    for rec in history {
        checker.step(rec);
    }
    checker.finish(jobs, settled);
    checker.out
}

//! Property tests of the workflow rules (docs/design.md section 10): random graphs of
//! dependencies, and random parents with children, are driven through `settle_new`, `apply`
//! and rounds of `propagate` by a tiny store model that does what both stores do (keep the
//! unresolved edges, load what `Needs` asks for, write back what changed), with random
//! enqueue, finish and cancel orders and outcomes, finishes batched as a store batches them.
//!
//! Checked after every step: a job is never queued or run while one of its dependencies is
//! not terminal; no job waits once every dependency is terminal; each edge resolves exactly
//! once and each job is queued at most once; a dependency that failed or was cancelled has
//! cancelled every dependent not enqueued to run regardless, transitively; a parent's live
//! children are exactly its children not terminal; a parent waiting for children waits
//! exactly while it has live ones; a cancelled parent leaves no child queued or waiting.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use drover_core::workflow::{propagate, settle_new, Dependency, Needs};
use drover_core::{
    apply, Event, FencingToken, Job, JobId, JobKind, JobState, NewJob, Retry, WorkerId,
};
use proptest::prelude::*;
use serde_json::json;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap()
}

fn id(n: usize) -> JobId {
    JobId(uuid::Uuid::from_u128(n as u128 + 1))
}

/// How a job's run ends.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Succeed,
    Fail,
    Cancelled,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        6 => Just(Outcome::Succeed),
        2 => Just(Outcome::Fail),
        1 => Just(Outcome::Cancelled),
    ]
}

/// One job of a random graph: its dependencies (indices of earlier jobs, so no cycle),
/// whether it runs regardless, and how its run ends.
#[derive(Debug, Clone)]
struct Node {
    deps: Vec<usize>,
    regardless: bool,
    outcome: Outcome,
}

fn graph() -> impl Strategy<Value = Vec<Node>> {
    (1usize..14).prop_flat_map(|n| {
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<usize>(), 0..4),
                proptest::bool::weighted(0.25),
                outcome(),
            ),
            n,
        )
        .prop_map(|raw| {
            raw.into_iter()
                .enumerate()
                .map(|(i, (picks, regardless, outcome))| {
                    let mut deps: Vec<usize> = if i == 0 {
                        Vec::new()
                    } else {
                        picks.into_iter().map(|p| p % i).collect()
                    };
                    deps.sort_unstable();
                    deps.dedup();
                    Node {
                        deps,
                        regardless,
                        outcome,
                    }
                })
                .collect()
        })
    })
}

/// A step of a random history: enqueue the next job of the graph, finish some of the
/// queued jobs in one batch (picked by these numbers), or cancel a job not terminal.
#[derive(Debug, Clone)]
enum Step {
    Enqueue,
    Finish(Vec<usize>),
    Cancel(usize),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            4 => Just(Step::Enqueue),
            4 => proptest::collection::vec(any::<usize>(), 1..4).prop_map(Step::Finish),
            1 => any::<usize>().prop_map(Step::Cancel),
        ],
        0..40,
    )
}

/// The store model: jobs, edges (all, and the unresolved ones), and what was observed.
#[derive(Default)]
struct Model {
    jobs: BTreeMap<JobId, Job>,
    dependents: HashMap<JobId, Vec<JobId>>,
    children: HashMap<JobId, Vec<JobId>>,
    unresolved: BTreeSet<Dependency>,
    resolved: BTreeSet<Dependency>,
    queued: HashMap<JobId, u32>,
    /// Parents whose handler asked to wait for their children (until they run again).
    waits_for_children: BTreeSet<JobId>,
}

impl Model {
    fn now(&self) -> DateTime<Utc> {
        t0()
    }

    /// Stores a new job: settled against its stored dependencies.
    fn enqueue(&mut self, mut job: Job) -> Result<(), TestCaseError> {
        let deps: Vec<Job> = job
            .depends_on
            .iter()
            .map(|d| self.jobs[d].clone())
            .collect();
        let pending = settle_new(&mut job, &deps, self.now()).expect("known dependencies");
        for edge in &pending {
            prop_assert!(self.unresolved.insert(*edge));
        }
        for dependency in &job.depends_on {
            self.dependents.entry(*dependency).or_default().push(job.id);
        }
        if let Some(parent) = job.parent_id {
            self.children.entry(parent).or_default().push(job.id);
        }
        if job.state == JobState::Queued {
            *self.queued.entry(job.id).or_default() += 1;
        }
        self.jobs.insert(job.id, job);
        Ok(())
    }

    /// Claims a queued job, checking it may run.
    fn claim(&mut self, id: JobId) -> Result<FencingToken, TestCaseError> {
        for dependency in &self.jobs[&id].depends_on {
            prop_assert!(
                self.jobs[dependency].state.is_terminal(),
                "{id} runs before its dependency {dependency} is terminal"
            );
        }
        let job = self.jobs.get_mut(&id).unwrap();
        let claim = Event::Claim {
            worker: WorkerId::parse("w").unwrap(),
            lease: Duration::from_secs(60),
            start: true,
        };
        apply(job, claim, t0()).unwrap();
        self.waits_for_children.remove(&id);
        Ok(job.fencing_token)
    }

    /// The store's loop: rounds of `propagate` from the jobs `ended`, each edge resolved once.
    fn propagate(&mut self, ended: Vec<JobId>) -> Result<(), TestCaseError> {
        let mut ended: Vec<Job> = ended.iter().map(|i| self.jobs[i].clone()).collect();
        loop {
            let needs = Needs::of(&ended);
            if needs.is_empty() {
                return Ok(());
            }
            let mut edges = Vec::new();
            let mut loaded = BTreeMap::new();
            for dependency in &needs.dependents_of {
                for dependent in self.dependents.get(dependency).into_iter().flatten() {
                    let edge = Dependency {
                        job: *dependent,
                        dependency: *dependency,
                    };
                    if self.unresolved.contains(&edge) {
                        edges.push(edge);
                        loaded.insert(*dependent, self.jobs[dependent].clone());
                    }
                }
            }
            for parent in &needs.parents {
                loaded.insert(*parent, self.jobs[parent].clone());
            }
            for parent in &needs.children_of {
                for child in self.children.get(parent).into_iter().flatten() {
                    let job = &self.jobs[child];
                    if !job.state.is_terminal() && !job.cancel_requested {
                        loaded.insert(*child, job.clone());
                    }
                }
            }
            let out = propagate(&ended, &edges, &mut loaded, t0());
            for edge in &out.resolved {
                prop_assert!(self.unresolved.remove(edge), "edge {edge:?} resolved twice");
                prop_assert!(self.resolved.insert(*edge), "edge {edge:?} resolved twice");
            }
            for changed in &out.changed {
                let job = loaded.remove(changed).unwrap();
                let before = self.jobs[changed].state;
                if before != JobState::Queued && job.state == JobState::Queued {
                    *self.queued.entry(job.id).or_default() += 1;
                }
                self.jobs.insert(job.id, job);
            }
            ended = out.ended.iter().map(|i| self.jobs[i].clone()).collect();
        }
    }

    /// An operator's cancel, propagated.
    fn cancel(&mut self, id: JobId) -> Result<(), TestCaseError> {
        let job = self.jobs.get_mut(&id).unwrap();
        if apply(job, Event::Cancel, t0()).is_ok() {
            self.propagate(vec![id])?;
        }
        Ok(())
    }

    /// Checks the invariants that hold between any two steps.
    fn check(&self, regardless_of: &dyn Fn(JobId) -> bool) -> Result<(), TestCaseError> {
        for job in self.jobs.values() {
            let deps: Vec<&Job> = job.depends_on.iter().map(|d| &self.jobs[d]).collect();
            let all_terminal = deps.iter().all(|d| d.state.is_terminal());
            if matches!(job.state, JobState::Queued | JobState::Running) {
                prop_assert!(
                    all_terminal,
                    "{} is {} before its dependencies end",
                    job.id,
                    job.state
                );
            }
            if job.state == JobState::Waiting {
                let waits_on_children =
                    self.waits_for_children.contains(&job.id) && job.live_children > 0;
                prop_assert!(
                    !all_terminal || waits_on_children,
                    "{} still waits though every dependency is terminal",
                    job.id
                );
                let pending = deps.iter().filter(|d| !d.state.is_terminal()).count();
                prop_assert_eq!(job.pending_dependencies as usize, pending);
            }
            let failed_dep = deps
                .iter()
                .any(|d| matches!(d.state, JobState::Failed | JobState::Cancelled));
            if failed_dep && !regardless_of(job.id) {
                prop_assert_eq!(
                    job.state,
                    JobState::Cancelled,
                    "{} survives a failed dependency",
                    job.id
                );
            }
            if matches!(job.state, JobState::Succeeded | JobState::Failed) && !regardless_of(job.id)
            {
                prop_assert!(deps.iter().all(|d| d.state == JobState::Succeeded));
            }
            let live = self
                .children
                .get(&job.id)
                .into_iter()
                .flatten()
                .filter(|c| !self.jobs[*c].state.is_terminal())
                .count();
            prop_assert_eq!(
                job.live_children as usize,
                live,
                "live children of {}",
                job.id
            );
            if job.state == JobState::Cancelled {
                for child in self.children.get(&job.id).into_iter().flatten() {
                    let child = &self.jobs[child];
                    prop_assert!(
                        child.state.is_terminal() || child.cancel_requested,
                        "a child of a cancelled parent is {}",
                        child.state
                    );
                }
            }
            if !job.depends_on.is_empty() {
                let times = self.queued.get(&job.id).copied().unwrap_or(0);
                prop_assert!(times <= 1, "{} queued {} times", job.id, times);
            }
        }
        for edge in &self.unresolved {
            prop_assert!(
                !self.jobs[&edge.dependency].state.is_terminal()
                    || self.jobs[&edge.job].state != JobState::Waiting
            );
        }
        Ok(())
    }
}

/// Finishes a running job with `outcome`.
fn end(job: &mut Job, token: FencingToken, outcome: Outcome) {
    let event = match outcome {
        Outcome::Succeed => Event::Complete {
            token,
            result: None,
        },
        Outcome::Fail => Event::Fail {
            token,
            message: "boom".into(),
            retry: Retry::Never,
        },
        Outcome::Cancelled => Event::Cancelled {
            token,
            message: "stopped".into(),
        },
    };
    apply(job, event, t0()).unwrap();
}

fn new_job(n: usize) -> NewJob {
    NewJob::new(JobKind::parse("k").unwrap(), json!(n))
}

fn run_graph(nodes: &[Node], steps: &[Step]) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    let regardless: BTreeSet<JobId> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.regardless)
        .map(|(i, _)| id(i))
        .collect();
    let regardless_of = |j: JobId| regardless.contains(&j);
    let mut next = 0;
    let enqueue = |model: &mut Model, i: usize| -> Result<(), TestCaseError> {
        let mut new = new_job(i);
        for d in &nodes[i].deps {
            new = new.with_dependency(id(*d));
        }
        if nodes[i].regardless {
            new = new.run_regardless();
        }
        model.enqueue(new.into_job(id(i), t0()))
    };
    let finish = |model: &mut Model, picked: &[JobId]| -> Result<(), TestCaseError> {
        for job in picked {
            let token = model.claim(*job)?;
            let index = (job.0.as_u128() - 1) as usize;
            end(
                model.jobs.get_mut(job).unwrap(),
                token,
                nodes[index].outcome,
            );
        }
        // One batch: one propagation from all of them.
        model.propagate(picked.to_vec())
    };
    for step in steps {
        match step {
            Step::Enqueue if next < nodes.len() => {
                enqueue(&mut model, next)?;
                next += 1;
            }
            Step::Enqueue => {}
            Step::Finish(picks) => {
                let queued: Vec<JobId> = model
                    .jobs
                    .values()
                    .filter(|j| j.state == JobState::Queued)
                    .map(|j| j.id)
                    .collect();
                if queued.is_empty() {
                    continue;
                }
                let mut picked: Vec<JobId> =
                    picks.iter().map(|p| queued[p % queued.len()]).collect();
                picked.sort();
                picked.dedup();
                finish(&mut model, &picked)?;
            }
            Step::Cancel(pick) => {
                let live: Vec<JobId> = model
                    .jobs
                    .values()
                    .filter(|j| !j.state.is_terminal())
                    .map(|j| j.id)
                    .collect();
                if !live.is_empty() {
                    model.cancel(live[pick % live.len()])?;
                }
            }
        }
        model.check(&regardless_of)?;
    }
    // Then enqueue the rest and run everything to the end.
    while next < nodes.len() {
        enqueue(&mut model, next)?;
        next += 1;
        model.check(&regardless_of)?;
    }
    loop {
        let queued: Vec<JobId> = model
            .jobs
            .values()
            .filter(|j| j.state == JobState::Queued)
            .map(|j| j.id)
            .collect();
        if queued.is_empty() {
            break;
        }
        finish(&mut model, &queued)?;
        model.check(&regardless_of)?;
    }
    for job in model.jobs.values() {
        prop_assert!(job.state.is_terminal(), "{} ends {}", job.id, job.state);
    }
    prop_assert!(model.unresolved.is_empty(), "every edge resolved");
    // Every edge whose dependency was not terminal when its dependent was enqueued resolved
    // exactly once (the sets refuse a second time); the others resolved at enqueue.
    Ok(())
}

/// A step of a parent's life: its handler stores children, waits for them, or a child or
/// the parent changes.
#[derive(Debug, Clone)]
enum FamilyStep {
    /// The running parent stores this many children.
    AddChildren(usize),
    /// The running parent waits for its children.
    Wait,
    /// The running parent succeeds.
    Complete,
    /// Some of the queued children finish in one batch.
    FinishChildren(Vec<usize>, Outcome),
    /// A queued parent runs again.
    ClaimParent,
    /// A child is claimed and left running.
    ClaimChild(usize),
    /// The parent is cancelled by an operator.
    CancelParent,
    /// A running child ends (released after a cancel request, or with an outcome).
    EndRunningChild(usize, Outcome),
}

fn family_steps() -> impl Strategy<Value = Vec<FamilyStep>> {
    proptest::collection::vec(
        prop_oneof![
            3 => (0usize..4).prop_map(FamilyStep::AddChildren),
            3 => Just(FamilyStep::Wait),
            1 => Just(FamilyStep::Complete),
            4 => (proptest::collection::vec(any::<usize>(), 1..4), outcome())
                .prop_map(|(p, o)| FamilyStep::FinishChildren(p, o)),
            3 => Just(FamilyStep::ClaimParent),
            2 => any::<usize>().prop_map(FamilyStep::ClaimChild),
            1 => Just(FamilyStep::CancelParent),
            2 => (any::<usize>(), outcome()).prop_map(|(p, o)| FamilyStep::EndRunningChild(p, o)),
        ],
        0..40,
    )
}

fn run_family(steps: &[FamilyStep]) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    let parent = id(0);
    model.enqueue(new_job(0).into_job(parent, t0()))?;
    let mut token = Some(model.claim(parent)?);
    let mut next = 1;
    let mut running_children: BTreeMap<JobId, FencingToken> = BTreeMap::new();
    let none = |_: JobId| false;
    let of_state = |model: &Model, state: JobState| -> Vec<JobId> {
        model
            .children
            .get(&parent)
            .into_iter()
            .flatten()
            .filter(|c| model.jobs[*c].state == state)
            .copied()
            .collect()
    };
    for step in steps {
        let parent_running = model.jobs[&parent].state == JobState::Running;
        match step {
            FamilyStep::AddChildren(n) if parent_running => {
                let t = token.expect("a running parent has a token");
                let job = model.jobs.get_mut(&parent).unwrap();
                let added = Event::ChildrenAdded {
                    token: Some(t),
                    count: *n as u32,
                };
                apply(job, added, t0()).unwrap();
                for _ in 0..*n {
                    let mut child = new_job(next).into_job(id(next), t0());
                    child.parent_id = Some(parent);
                    model.enqueue(child)?;
                    next += 1;
                }
            }
            FamilyStep::Wait | FamilyStep::Complete if parent_running => {
                let t = token.take().expect("a running parent has a token");
                let job = model.jobs.get_mut(&parent).unwrap();
                let event = if matches!(step, FamilyStep::Wait) {
                    Event::WaitForChildren { token: t }
                } else {
                    Event::Complete {
                        token: t,
                        result: None,
                    }
                };
                apply(job, event, t0()).unwrap();
                if matches!(step, FamilyStep::Wait) {
                    model.waits_for_children.insert(parent);
                    let job = &model.jobs[&parent];
                    if job.state != JobState::Cancelled {
                        let live = job.live_children > 0;
                        prop_assert_eq!(
                            job.state,
                            if live {
                                JobState::Waiting
                            } else {
                                JobState::Queued
                            }
                        );
                    }
                }
                if model.jobs[&parent].state.is_terminal() {
                    model.propagate(vec![parent])?;
                }
            }
            FamilyStep::ClaimParent if model.jobs[&parent].state == JobState::Queued => {
                token = Some(model.claim(parent)?);
            }
            FamilyStep::FinishChildren(picks, outcome) => {
                let queued = of_state(&model, JobState::Queued);
                if queued.is_empty() {
                    continue;
                }
                let mut picked: Vec<JobId> =
                    picks.iter().map(|p| queued[p % queued.len()]).collect();
                picked.sort();
                picked.dedup();
                for child in &picked {
                    let t = model.claim(*child)?;
                    end(model.jobs.get_mut(child).unwrap(), t, *outcome);
                }
                model.propagate(picked)?;
            }
            FamilyStep::ClaimChild(pick) => {
                let queued = of_state(&model, JobState::Queued);
                if !queued.is_empty() {
                    let child = queued[pick % queued.len()];
                    let t = model.claim(child)?;
                    running_children.insert(child, t);
                }
            }
            FamilyStep::EndRunningChild(pick, outcome) => {
                let running: Vec<JobId> = running_children.keys().copied().collect();
                if !running.is_empty() {
                    let child = running[pick % running.len()];
                    let t = running_children.remove(&child).unwrap();
                    end(model.jobs.get_mut(&child).unwrap(), t, *outcome);
                    model.propagate(vec![child])?;
                }
            }
            FamilyStep::CancelParent => {
                model.cancel(parent)?;
                let waiting_or_queued =
                    [JobState::Waiting, JobState::Queued].map(|s| of_state(&model, s).len());
                let parent_job = &model.jobs[&parent];
                if parent_job.state == JobState::Cancelled || parent_job.cancel_requested {
                    prop_assert_eq!(waiting_or_queued, [0, 0], "the cancel reaches every child");
                }
            }
            _ => {}
        }
        model.check(&none)?;
        // A parent that waits for its children is queued exactly when it has none live.
        let job = &model.jobs[&parent];
        if model.waits_for_children.contains(&parent) && !job.state.is_terminal() {
            prop_assert_eq!(job.state == JobState::Waiting, job.live_children > 0);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_graphs_resolve_every_dependency_once(nodes in graph(), steps in steps()) {
        run_graph(&nodes, &steps)?;
    }

    #[test]
    fn random_families_count_live_children_exactly(steps in family_steps()) {
        run_family(&steps)?;
    }
}

//! Workflows (docs/design.md section 10): jobs that wait for other jobs, parents that wait for
//! the children they enqueued, and graphs enqueued as one unit.
//!
//! Rules, the same for every store:
//!
//! | situation | what happens | where |
//! |---|---|---|
//! | enqueue with dependencies, none terminal | `waiting`, `pending_dependencies` = their number | [`settle_new`] |
//! | enqueue with a dependency already terminal | resolved at once, as below | [`settle_new`] |
//! | a dependency ends `succeeded` | one fewer pending; `queued` at 0 | [`propagate`], [`crate::Event::DependencyResolved`] |
//! | a dependency ends `failed` or `cancelled` | the dependent is `cancelled` naming it, unless `run_regardless` | same |
//! | a child ends | the parent has one fewer live child; a waiting parent with none is `queued` | [`propagate`], [`crate::Event::ChildFinished`] |
//! | a job is cancelled (or its cancel requested) | its waiting and queued children are cancelled, its running ones signalled | [`propagate`] |
//! | a job ends `cancelled` through any of these | its own dependents and children follow, round after round | the store's loop over [`propagate`] |
//!
//! Each edge "job waits for dependency" is resolved exactly once: the store marks it resolved in
//! the same atomic step as it applies it, so a dependency that finishes again after an operator
//! retry does not count twice. Work is proportional to the edges and children touched: a
//! fan-out of n children costs n decrements of one counter, a chain one resolution per link.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::job::{
    check_dependencies, Job, JobId, NewJob, SizeLimits, WorkflowId, DEPENDENCIES_MAX,
    WORKFLOW_DEPENDENCIES_MAX, WORKFLOW_JOBS_MAX,
};
use crate::names::check_job_name;
use crate::state::{apply, Event, JobState};

/// One stored dependency edge: `job` waits for `dependency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dependency {
    /// The dependent job.
    pub job: JobId,
    /// The job it waits for.
    pub dependency: JobId,
}

/// Decides the state of a new job with dependencies, before it is stored: `dependencies` are
/// the stored jobs its `depends_on` names (in any order; the store looked them up, and locked
/// them so none ends meanwhile). Each one already terminal is resolved at once
/// ([`crate::Event::DependencyResolved`]); the job is `waiting` while any is pending, `queued`
/// when none is, `cancelled` when one failed (unless it runs regardless). Returns the edges the
/// store must keep unresolved; empty for a job without dependencies, which stays as it is.
///
/// # Errors
/// [`Error::InvalidInput`] naming `depends_on` when an id names no stored job of the job's
/// tenant (a job of another tenant answers the same, so ids of other tenants stay unknown).
pub fn settle_new(
    job: &mut Job,
    dependencies: &[Job],
    now: DateTime<Utc>,
) -> Result<Vec<Dependency>, Error> {
    if job.depends_on.is_empty() {
        return Ok(Vec::new());
    }
    let found: HashMap<JobId, &Job> = dependencies
        .iter()
        .filter(|d| d.tenant == job.tenant)
        .map(|d| (d.id, d))
        .collect();
    let mut ordered = Vec::with_capacity(job.depends_on.len());
    for id in &job.depends_on {
        match found.get(id) {
            Some(dependency) => ordered.push(*dependency),
            None => {
                return Err(Error::invalid(
                    "depends_on",
                    format!("names no job of tenant {}: {id}", job.tenant),
                ))
            }
        }
    }
    job.state = JobState::Waiting;
    job.pending_dependencies = i32::try_from(ordered.len()).unwrap_or(i32::MAX);
    let mut pending = Vec::new();
    for dependency in ordered {
        if dependency.state.is_terminal() {
            let event = Event::DependencyResolved {
                dependency: dependency.id,
                state: dependency.state,
            };
            apply(job, event, now)?;
            if job.state == JobState::Cancelled {
                return Ok(Vec::new());
            }
        } else {
            pending.push(Dependency {
                job: job.id,
                dependency: dependency.id,
            });
        }
    }
    Ok(pending)
}

/// What a store loads, and locks, for one round of [`propagate`] after the jobs `ended`
/// changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Jobs that became terminal: load the unresolved edges whose `dependency` is one of these,
    /// and their dependents.
    pub dependents_of: Vec<JobId>,
    /// Parents of jobs that became terminal: load them.
    pub parents: Vec<JobId>,
    /// Jobs cancelled or with a cancel requested that have live children: load their children
    /// that are not terminal.
    pub children_of: Vec<JobId>,
}

impl Needs {
    /// What to load after `ended` changed (each became terminal, or had its cancel requested,
    /// in the step before).
    pub fn of(ended: &[Job]) -> Needs {
        let mut needs = Needs::default();
        for job in ended {
            if job.state.is_terminal() {
                needs.dependents_of.push(job.id);
                if let Some(parent) = job.parent_id {
                    needs.parents.push(parent);
                }
            }
            let cancelling = job.state == JobState::Cancelled || job.cancel_requested;
            if cancelling && job.live_children > 0 {
                needs.children_of.push(job.id);
            }
        }
        needs.parents.sort();
        needs.parents.dedup();
        needs
    }

    /// True when there is nothing to load: propagation is over.
    pub fn is_empty(&self) -> bool {
        self.dependents_of.is_empty() && self.parents.is_empty() && self.children_of.is_empty()
    }
}

/// What one round of [`propagate`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Propagated {
    /// Edges applied in this round: the store marks them resolved.
    pub resolved: Vec<Dependency>,
    /// Jobs of the loaded set that changed: the store writes them back.
    pub changed: BTreeSet<JobId>,
    /// Jobs that became terminal or had their cancel requested in this round: the next round's
    /// `ended`.
    pub ended: Vec<JobId>,
}

/// One round of propagation: applies the ends of `ended` to what the store loaded for
/// [`Needs::of`] (`edges`: the unresolved edges whose dependency ended; `jobs`: their
/// dependents, the parents and the live children, by id). Dependents resolve
/// ([`crate::Event::DependencyResolved`]), parents count a child less
/// ([`crate::Event::ChildFinished`]), children of a cancelled job are cancelled
/// ([`crate::Event::Cancel`]). A job no longer in the state an event needs (a dependent an
/// operator cancelled meanwhile) is left as it is; its edge is resolved all the same.
pub fn propagate(
    ended: &[Job],
    edges: &[Dependency],
    jobs: &mut BTreeMap<JobId, Job>,
    now: DateTime<Utc>,
) -> Propagated {
    let mut out = Propagated::default();
    let ended_by_id: HashMap<JobId, &Job> = ended.iter().map(|j| (j.id, j)).collect();
    for edge in edges {
        let Some(dependency) = ended_by_id.get(&edge.dependency) else {
            continue;
        };
        if !dependency.state.is_terminal() {
            continue;
        }
        out.resolved.push(*edge);
        let event = Event::DependencyResolved {
            dependency: edge.dependency,
            state: dependency.state,
        };
        apply_to(jobs, edge.job, event, now, &mut out);
    }
    for job in ended {
        if let (true, Some(parent)) = (job.state.is_terminal(), job.parent_id) {
            apply_to(jobs, parent, Event::ChildFinished, now, &mut out);
        }
    }
    let cancelling: BTreeSet<JobId> = ended
        .iter()
        .filter(|j| j.state == JobState::Cancelled || j.cancel_requested)
        .map(|j| j.id)
        .collect();
    let children: Vec<JobId> = jobs
        .values()
        .filter(|j| !j.state.is_terminal() && !j.cancel_requested)
        .filter(|j| j.parent_id.is_some_and(|p| cancelling.contains(&p)))
        .map(|j| j.id)
        .collect();
    for child in children {
        apply_to(jobs, child, Event::Cancel, now, &mut out);
    }
    out
}

/// Applies `event` to the loaded job `id`, noting what changed and what ended.
fn apply_to(
    jobs: &mut BTreeMap<JobId, Job>,
    id: JobId,
    event: Event,
    now: DateTime<Utc>,
    out: &mut Propagated,
) {
    let Some(job) = jobs.get_mut(&id) else {
        return;
    };
    let before = (job.state, job.cancel_requested);
    if apply(job, event, now).is_ok() {
        out.changed.insert(id);
        let became_terminal = !before.0.is_terminal() && job.state.is_terminal();
        let newly_requested = !before.1 && job.cancel_requested;
        if became_terminal || newly_requested {
            out.ended.push(id);
        }
    }
}

/// One job of a workflow graph: a local `name`, the job, and the local names of the jobs of
/// the graph it depends on (besides any stored jobs its own `depends_on` names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowJob {
    /// Unique within the graph; stored as the job's [`Job::name`].
    pub name: String,
    /// The job.
    pub job: NewJob,
    /// Names of jobs of the same graph this one waits for.
    #[serde(default)]
    pub depends_on: Vec<String>,
}

/// A graph of jobs enqueued as one unit, all or nothing
/// ([`crate::JobStore::workflow_enqueue`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewWorkflow {
    /// The jobs, in any order (dependencies by name may point forward).
    pub jobs: Vec<WorkflowJob>,
}

/// A job of a checked graph, in an order where every job comes after the jobs of the graph it
/// depends on ([`NewWorkflow::plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedJob {
    /// Its position in [`NewWorkflow::jobs`].
    pub index: usize,
    /// Positions of the graph's jobs it depends on.
    pub depends_on: Vec<usize>,
}

impl NewWorkflow {
    /// An empty graph.
    pub fn new() -> Self {
        NewWorkflow::default()
    }

    /// Adds a job named `name` that depends on the graph's jobs named `depends_on`.
    pub fn job(mut self, name: impl Into<String>, job: NewJob, depends_on: &[&str]) -> Self {
        self.jobs.push(WorkflowJob {
            name: name.into(),
            job,
            depends_on: depends_on.iter().map(|s| s.to_string()).collect(),
        });
        self
    }

    /// Checks the graph before anything is stored and orders it: at least one and at most
    /// [`WORKFLOW_JOBS_MAX`] jobs and [`WORKFLOW_DEPENDENCIES_MAX`] dependencies in all; each
    /// job valid ([`NewJob::validate`]) with a valid, unique name; every job of the tenant of
    /// the first; every local dependency naming a job of the graph, none repeated, at most
    /// [`DEPENDENCIES_MAX`] dependencies per job with its stored ones; and no cycle. Returns
    /// the jobs in dependency order (among independent jobs, input order). Time and memory
    /// grow with jobs plus dependencies.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `jobs`, or `jobs[i].<field>` for the first bad job
    /// (`jobs[i].depends_on[k]` for its k-th local dependency).
    pub fn plan(&self, sizes: &SizeLimits) -> Result<Vec<PlannedJob>, Error> {
        let len = self.jobs.len();
        if len == 0 || len > WORKFLOW_JOBS_MAX {
            return Err(Error::invalid(
                "jobs",
                format!("a workflow holds 1 to {WORKFLOW_JOBS_MAX} jobs, got {len}"),
            ));
        }
        let dependencies: usize = self
            .jobs
            .iter()
            .map(|entry| entry.depends_on.len() + entry.job.depends_on.len())
            .sum();
        if dependencies > WORKFLOW_DEPENDENCIES_MAX {
            return Err(Error::invalid(
                "jobs",
                format!(
                    "a workflow holds at most {WORKFLOW_DEPENDENCIES_MAX} dependencies in all \
                     (local and stored), got {dependencies}"
                ),
            ));
        }
        let at = |i: usize, e: Error| e.in_batch_item(i, usize::MAX);
        let mut by_name: HashMap<&str, usize> = HashMap::with_capacity(len);
        let tenant = &self.jobs[0].job.tenant;
        for (i, entry) in self.jobs.iter().enumerate() {
            check_job_name("name", &entry.name).map_err(|e| at(i, e))?;
            entry.job.validate(sizes).map_err(|e| at(i, e))?;
            if &entry.job.tenant != tenant {
                return Err(at(
                    i,
                    Error::invalid(
                        "tenant",
                        format!("must be the tenant of the workflow's first job ({tenant})"),
                    ),
                ));
            }
            if by_name.insert(entry.name.as_str(), i).is_some() {
                return Err(at(
                    i,
                    Error::invalid(
                        "name",
                        format!("must be unique in the workflow; {:?} repeats", entry.name),
                    ),
                ));
            }
        }
        let mut edges: Vec<Vec<usize>> = Vec::with_capacity(len);
        // last_named_by[j] == i: job i already named job j (a repeat), without a set per job.
        let mut last_named_by = vec![usize::MAX; len];
        for (i, entry) in self.jobs.iter().enumerate() {
            let mut local = Vec::with_capacity(entry.depends_on.len());
            for (k, name) in entry.depends_on.iter().enumerate() {
                let field = || format!("depends_on[{k}]");
                let Some(&j) = by_name.get(name.as_str()) else {
                    return Err(at(
                        i,
                        Error::invalid(field(), format!("names no job of the workflow: {name:?}")),
                    ));
                };
                if last_named_by[j] == i {
                    return Err(at(
                        i,
                        Error::invalid(
                            field(),
                            format!("must not repeat a job; {name:?} appears twice"),
                        ),
                    ));
                }
                last_named_by[j] = i;
                local.push(j);
            }
            let total = local.len() + entry.job.depends_on.len();
            if total > DEPENDENCIES_MAX {
                return Err(at(
                    i,
                    Error::invalid(
                        "depends_on",
                        format!("at most {DEPENDENCIES_MAX} dependencies per job, got {total}"),
                    ),
                ));
            }
            check_dependencies(&entry.job.depends_on).map_err(|e| at(i, e))?;
            edges.push(local);
        }
        order(&self.jobs, &edges)
    }
}

/// Kahn's algorithm over the local edges; a job left over is on a cycle, which the error
/// spells out by name.
fn order(jobs: &[WorkflowJob], edges: &[Vec<usize>]) -> Result<Vec<PlannedJob>, Error> {
    let len = jobs.len();
    let mut waiting_on: Vec<usize> = edges.iter().map(Vec::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); len];
    for (i, deps) in edges.iter().enumerate() {
        for &d in deps {
            dependents[d].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..len).filter(|&i| waiting_on[i] == 0).collect();
    let mut planned = Vec::with_capacity(len);
    while let Some(i) = ready.pop_first() {
        planned.push(PlannedJob {
            index: i,
            depends_on: edges[i].clone(),
        });
        for &d in &dependents[i] {
            waiting_on[d] -= 1;
            if waiting_on[d] == 0 {
                ready.insert(d);
            }
        }
    }
    if planned.len() < len {
        return Err(Error::invalid("jobs", cycle_rule(jobs, edges, &waiting_on)));
    }
    Ok(planned)
}

/// Most names a cycle error spells out: the first ones and the last two.
const CYCLE_NAMES_SHOWN: usize = 8;

/// Names one cycle among the jobs still waiting after [`order`]: walks dependencies from one
/// of them until a job repeats.
fn cycle_rule(jobs: &[WorkflowJob], edges: &[Vec<usize>], waiting_on: &[usize]) -> String {
    let Some(start) = (0..jobs.len()).find(|&i| waiting_on[i] > 0) else {
        return "must not have a cycle".to_string();
    };
    let mut path = vec![start];
    // Where each job sits on the path, so the walk stays linear in the graph's size.
    let mut on_path = vec![usize::MAX; jobs.len()];
    on_path[start] = 0;
    let mut at = start;
    while let Some(&next) = edges[at].iter().find(|&&d| waiting_on[d] > 0) {
        if on_path[next] != usize::MAX {
            let names: Vec<&str> = path[on_path[next]..]
                .iter()
                .chain(std::iter::once(&next))
                .map(|&i| jobs[i].name.as_str())
                .collect();
            // A long cycle is named by its ends, so the message stays short.
            let shown = if names.len() > CYCLE_NAMES_SHOWN {
                let head = names[..CYCLE_NAMES_SHOWN - 2].join(" -> ");
                let tail = names[names.len() - 2..].join(" -> ");
                let left_out = names.len() - CYCLE_NAMES_SHOWN;
                format!("{head} -> ... ({left_out} more) -> {tail}")
            } else {
                names.join(" -> ")
            };
            return format!("must not have a cycle; {shown} (each waits for the next)");
        }
        on_path[next] = path.len();
        path.push(next);
        at = next;
    }
    "must not have a cycle".to_string()
}

/// The answer to [`crate::JobStore::workflow_enqueue`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnqueuedWorkflow {
    /// The new workflow's id.
    pub id: WorkflowId,
    /// Per job of the graph, in input order: what happened (a job whose unique key a live job
    /// holds answers that job, `duplicate`, and its dependents wait for it).
    pub jobs: Vec<crate::Enqueued>,
}

/// The workflow a graph enqueue answers: `id`, unless no job was created (every one replayed
/// an idempotency key or met a unique key's holder): then the workflow of the first job
/// answered, so a client's resent graph gets the workflow it created before. A store that
/// created no job stores no workflow row either.
pub fn answered_workflow(id: WorkflowId, answers: &[crate::Enqueued]) -> WorkflowId {
    if answers
        .iter()
        .any(|a| a.status == crate::EnqueueStatus::Created)
    {
        return id;
    }
    answers.iter().find_map(|a| a.job.workflow_id).unwrap_or(id)
}

/// A workflow as stored: every job that carries its id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    /// The id.
    pub id: WorkflowId,
    /// Its tenant (the tenant of its jobs).
    pub tenant: crate::TenantId,
    /// When it was enqueued (store clock).
    pub created_at: DateTime<Utc>,
    /// Its jobs, children included, by id (creation order).
    pub jobs: Vec<Job>,
}

/// One workflow in a list: counts, not jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowSummary {
    /// The id.
    pub id: WorkflowId,
    /// Its tenant.
    pub tenant: crate::TenantId,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// How many of its jobs (children included) are in each state; states without jobs are
    /// left out.
    pub states: BTreeMap<JobState, u64>,
}

impl WorkflowSummary {
    /// The workflow's overall state: `running` while any job is not terminal (`waiting`
    /// when all live ones wait), else `failed` when any job failed, `cancelled` when any was
    /// cancelled, `succeeded` when all succeeded.
    pub fn overall(&self) -> JobState {
        overall(&self.states)
    }
}

/// See [`WorkflowSummary::overall`].
pub fn overall(states: &BTreeMap<JobState, u64>) -> JobState {
    let has = |s: JobState| states.get(&s).is_some_and(|&n| n > 0);
    let live = [JobState::Queued, JobState::Running, JobState::Reconciling];
    if live.into_iter().any(has) {
        JobState::Running
    } else if has(JobState::Waiting) {
        JobState::Waiting
    } else if has(JobState::Failed) {
        JobState::Failed
    } else if has(JobState::Cancelled) {
        JobState::Cancelled
    } else {
        JobState::Succeeded
    }
}

/// Filters and page of [`crate::JobStore::workflows_list`], newest first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ListWorkflows {
    /// Only this tenant's workflows.
    pub tenant: Option<crate::TenantId>,
    /// Keyset cursor: only workflows with an id smaller than this.
    pub before: Option<WorkflowId>,
    /// Page size, 1..=1,000 (default 50 when 0).
    pub limit: u32,
}

impl ListWorkflows {
    /// Checks the page size.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `limit` above 1,000.
    pub fn validate(&self) -> Result<(), Error> {
        if self.limit != 0 {
            crate::bounds::check_range("limit", self.limit, 1, crate::bounds::LIST_LIMIT_MAX)?;
        }
        Ok(())
    }

    /// The effective page size.
    pub fn page_size(&self) -> u32 {
        if self.limit == 0 {
            crate::bounds::LIST_LIMIT_DEFAULT
        } else {
            self.limit.min(crate::bounds::LIST_LIMIT_MAX)
        }
    }
}

/// One page of workflows, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowPage {
    /// The workflows, by id descending.
    pub workflows: Vec<WorkflowSummary>,
    /// Cursor for the next page, `None` on the last page.
    pub next: Option<WorkflowId>,
}

/// What a workflow-wide cancel or retry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowChange {
    /// The workflow.
    pub id: WorkflowId,
    /// How many of its jobs the operation changed (cancelled, cancel-requested, or retried).
    pub jobs: u64,
}

/// Children to store for a running parent ([`crate::JobStore::children_enqueue`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueChildren {
    /// The parent.
    pub parent: JobId,
    /// The token of the parent's claim: a stale parent stores nothing.
    pub token: crate::FencingToken,
    /// The children (each of the parent's tenant); at most
    /// [`crate::job::CHILDREN_MAX`] live children per parent in all.
    pub jobs: Vec<NewJob>,
}

/// Plans an operator retry of the terminal jobs `retried` (every failed or cancelled job of a
/// workflow, or one job): each runs again with [`crate::Event::Retry`]. `jobs` holds the
/// retried jobs, their parents and their dependencies as stored (inside the workflow or not;
/// one missing was pruned, so it ended); `edges` every stored edge whose job is retried. A
/// retried job's edges to a dependency that is not terminal after the retry (live, or retried
/// too) become unresolved again and count as pending; a retried child adds a live child to its
/// parent first, so a retried parent waits for its retried children. Returns the ids changed
/// and the edges to store as unresolved.
pub fn plan_retry(
    retried: &BTreeSet<JobId>,
    jobs: &mut BTreeMap<JobId, Job>,
    edges: &[Dependency],
    now: DateTime<Utc>,
) -> (BTreeSet<JobId>, Vec<Dependency>) {
    let mut changed = retried.clone();
    let mut unresolved = Vec::new();
    for id in retried {
        let parent = jobs.get(id).and_then(|j| j.parent_id);
        if let Some(parent) = parent.and_then(|p| jobs.get_mut(&p)) {
            let event = Event::ChildrenAdded {
                token: None,
                count: 1,
            };
            if apply(parent, event, now).is_ok() {
                changed.insert(parent.id);
            }
        }
    }
    // Edges by dependent, so a large workflow costs its edges once, not once per retried job.
    let mut by_job: HashMap<JobId, Vec<&Dependency>> = HashMap::new();
    for edge in edges.iter().filter(|e| retried.contains(&e.job)) {
        by_job.entry(edge.job).or_default().push(edge);
    }
    for id in retried {
        let mut pending = 0;
        for &edge in by_job.get(id).map_or(&[][..], Vec::as_slice) {
            let live_after = retried.contains(&edge.dependency)
                || jobs
                    .get(&edge.dependency)
                    .is_some_and(|d| !d.state.is_terminal());
            if live_after {
                pending += 1;
                unresolved.push(*edge);
            }
        }
        if let Some(job) = jobs.get_mut(id) {
            job.pending_dependencies = pending;
            // A retried job is terminal, so Retry applies.
            let _ = apply(job, Event::Retry, now);
        }
    }
    (changed, unresolved)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::TimeZone;
    use serde_json::json;

    use super::*;
    use crate::names::{JobKind, TenantId, WorkerId};
    use crate::state::dependency_failed_message;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap()
    }

    fn new_job(kind: &str) -> NewJob {
        NewJob::new(JobKind::parse(kind).unwrap(), json!({}))
    }

    /// A stored job in `state` (ids count up from 1 so tests read).
    fn stored(n: u128, state: JobState) -> Job {
        let mut job = new_job("k").into_job(JobId(uuid::Uuid::from_u128(n)), t0());
        job.state = state;
        if state.is_terminal() {
            job.finished_at = Some(t0());
        }
        job
    }

    fn id(n: u128) -> JobId {
        JobId(uuid::Uuid::from_u128(n))
    }

    /// A new job (id `n`) depending on `deps`.
    fn dependent(n: u128, deps: &[u128]) -> Job {
        let mut job = stored(n, JobState::Queued);
        job.depends_on = deps.iter().map(|d| id(*d)).collect();
        job
    }

    /// Starts `job` under a lease (as a claim does).
    fn run(job: &mut Job) -> crate::FencingToken {
        let claim = Event::Claim {
            worker: WorkerId::parse("w").unwrap(),
            lease: Duration::from_secs(30),
            start: true,
        };
        apply(job, claim, t0()).unwrap();
        job.fencing_token
    }

    fn invalid_field(result: Result<impl std::fmt::Debug, Error>) -> (String, String) {
        match result {
            Err(Error::InvalidInput { field, reason }) => (field, reason),
            other => panic!("expected InvalidInput, got {other:?}"),
        }
    }

    fn graph(entries: &[(&str, &[&str])]) -> NewWorkflow {
        entries.iter().fold(NewWorkflow::new(), |g, (name, deps)| {
            g.job(*name, new_job("k"), deps)
        })
    }

    fn order_of(workflow: &NewWorkflow) -> Vec<&str> {
        workflow
            .plan(&SizeLimits::default())
            .unwrap()
            .iter()
            .map(|p| workflow.jobs[p.index].name.as_str())
            .collect()
    }

    #[test]
    fn plan_orders_dependencies_first_and_takes_the_first_ready_job_in_input_order() {
        let g = graph(&[
            ("report", &["fetch", "parse"]),
            ("fetch", &[]),
            ("parse", &["fetch"]),
            ("other", &[]),
        ]);
        assert_eq!(order_of(&g), ["fetch", "parse", "report", "other"]);
        let independent = graph(&[("c", &[]), ("a", &[]), ("b", &[])]);
        assert_eq!(order_of(&independent), ["c", "a", "b"]);
        let plan = g.plan(&SizeLimits::default()).unwrap();
        let report = plan.iter().find(|p| p.index == 0).unwrap();
        assert_eq!(report.depends_on, vec![1, 2]);
    }

    #[test]
    fn plan_refuses_a_dangling_or_repeated_name() {
        let dangling = graph(&[("a", &[]), ("b", &["a", "nope"])]);
        let (field, reason) = invalid_field(dangling.plan(&SizeLimits::default()));
        assert_eq!(field, "jobs[1].depends_on[1]");
        assert!(reason.contains("\"nope\""), "{reason}");
        let repeated = graph(&[("a", &[]), ("b", &[]), ("a", &[])]);
        let (field, reason) = invalid_field(repeated.plan(&SizeLimits::default()));
        assert_eq!(field, "jobs[2].name");
        assert!(reason.contains("\"a\""), "{reason}");
        let twice = graph(&[("a", &[]), ("b", &["a", "a"])]);
        assert_eq!(
            invalid_field(twice.plan(&SizeLimits::default())).0,
            "jobs[1].depends_on[1]"
        );
        // A repeat is per job: two jobs may name the same dependency.
        let shared = graph(&[("a", &[]), ("b", &["a"]), ("c", &["a"])]);
        assert!(shared.plan(&SizeLimits::default()).is_ok());
        let bad_name = graph(&[("", &[])]);
        assert_eq!(
            invalid_field(bad_name.plan(&SizeLimits::default())).0,
            "jobs[0].name"
        );
    }

    #[test]
    fn plan_names_the_cycle() {
        let g = graph(&[
            ("start", &[]),
            ("a", &["start", "c"]),
            ("b", &["a"]),
            ("c", &["b"]),
            ("after", &["c"]),
        ]);
        let (field, reason) = invalid_field(g.plan(&SizeLimits::default()));
        assert_eq!(field, "jobs");
        assert!(reason.contains("a -> c -> b -> a"), "{reason}");
        let itself = graph(&[("x", &["x"])]);
        let (_, reason) = invalid_field(itself.plan(&SizeLimits::default()));
        assert!(reason.contains("x -> x"), "{reason}");
        // A long cycle is named by its ends only.
        let mut long = NewWorkflow::new();
        for i in 0..1_000 {
            let before = format!("n{}", (i + 999) % 1_000);
            long = long.job(format!("n{i}"), new_job("k"), &[before.as_str()]);
        }
        let (_, reason) = invalid_field(long.plan(&SizeLimits::default()));
        assert!(reason.contains("(993 more)"), "{reason}");
        assert!(reason.len() < 200, "{reason}");
    }

    #[test]
    fn plan_refuses_another_tenant() {
        let mut g = graph(&[("a", &[]), ("b", &["a"])]);
        g.jobs[1].job.tenant = TenantId::parse("other").unwrap();
        let (field, reason) = invalid_field(g.plan(&SizeLimits::default()));
        assert_eq!(field, "jobs[1].tenant");
        assert!(reason.contains("default"), "{reason}");
    }

    #[test]
    fn plan_bounds_the_number_of_jobs() {
        assert_eq!(
            invalid_field(NewWorkflow::new().plan(&SizeLimits::default())).0,
            "jobs"
        );
        let mut big = NewWorkflow::new();
        for i in 0..=WORKFLOW_JOBS_MAX {
            big = big.job(format!("j{i}"), new_job("k"), &[]);
        }
        let (field, reason) = invalid_field(big.plan(&SizeLimits::default()));
        assert_eq!(field, "jobs");
        assert!(reason.contains("10001"), "{reason}");
        big.jobs.pop();
        assert_eq!(
            big.plan(&SizeLimits::default()).unwrap().len(),
            WORKFLOW_JOBS_MAX
        );
    }

    #[test]
    fn plan_counts_stored_dependencies_in_the_bound() {
        let names: Vec<String> = (0..600).map(|i| format!("d{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut ok = NewWorkflow::new();
        for name in &names {
            ok = ok.job(name.clone(), new_job("k"), &[]);
        }
        let mut last = new_job("k");
        for n in 0..400 {
            last = last.with_dependency(id(10_000 + n));
        }
        let fits = ok.clone().job("last", last.clone(), &refs);
        assert!(fits.plan(&SizeLimits::default()).is_ok(), "600 + 400 fit");
        let over = ok.job("last", last.with_dependency(id(1)), &refs);
        let (field, reason) = invalid_field(over.plan(&SizeLimits::default()));
        assert_eq!(field, "jobs[600].depends_on");
        assert!(reason.contains("1001"), "{reason}");
    }

    #[test]
    fn plan_prefixes_a_bad_job_field_with_its_position() {
        let mut g = graph(&[("a", &[]), ("b", &[]), ("c", &["a"])]);
        g.jobs[2].job.max_attempts = 0;
        assert_eq!(
            invalid_field(g.plan(&SizeLimits::default())).0,
            "jobs[2].max_attempts"
        );
        let mut one = graph(&[("a", &[])]);
        one.jobs[0].job.max_attempts = 0;
        assert_eq!(
            invalid_field(one.plan(&SizeLimits::default())).0,
            "jobs[0].max_attempts",
            "a graph of one job is prefixed too"
        );
    }

    #[test]
    fn settle_new_queues_a_job_whose_dependencies_all_succeeded() {
        let deps = [
            stored(1, JobState::Succeeded),
            stored(2, JobState::Succeeded),
        ];
        let mut job = dependent(10, &[1, 2]);
        let edges = settle_new(&mut job, &deps, t0()).unwrap();
        assert!(edges.is_empty());
        assert_eq!((job.state, job.pending_dependencies), (JobState::Queued, 0));
    }

    #[test]
    fn settle_new_waits_for_the_dependencies_not_terminal() {
        let deps = [
            stored(1, JobState::Succeeded),
            stored(2, JobState::Running),
            stored(3, JobState::Waiting),
        ];
        let mut job = dependent(10, &[3, 1, 2]);
        let edges = settle_new(&mut job, &deps, t0()).unwrap();
        assert_eq!(
            (job.state, job.pending_dependencies),
            (JobState::Waiting, 2)
        );
        assert_eq!(
            edges,
            vec![
                Dependency {
                    job: id(10),
                    dependency: id(3)
                },
                Dependency {
                    job: id(10),
                    dependency: id(2)
                },
            ]
        );
    }

    #[test]
    fn settle_new_cancels_on_a_failed_dependency_unless_run_regardless() {
        let deps = [stored(1, JobState::Running), stored(2, JobState::Failed)];
        let mut job = dependent(10, &[1, 2]);
        let edges = settle_new(&mut job, &deps, t0()).unwrap();
        assert!(edges.is_empty(), "a cancelled job waits for nothing");
        assert_eq!(job.state, JobState::Cancelled);
        assert_eq!(job.finished_at, Some(t0()));
        assert_eq!(
            job.errors.last().unwrap().message,
            dependency_failed_message(id(2), JobState::Failed)
        );

        let mut regardless = dependent(11, &[2]);
        regardless.run_regardless = true;
        assert!(settle_new(&mut regardless, &deps, t0()).unwrap().is_empty());
        assert_eq!(regardless.state, JobState::Queued);
        let cancelled = [stored(3, JobState::Cancelled), stored(1, JobState::Running)];
        let mut waits = dependent(12, &[3, 1]);
        waits.run_regardless = true;
        assert_eq!(settle_new(&mut waits, &cancelled, t0()).unwrap().len(), 1);
        assert_eq!(
            (waits.state, waits.pending_dependencies),
            (JobState::Waiting, 1)
        );
    }

    #[test]
    fn settle_new_refuses_unknown_and_foreign_ids_alike() {
        let mut foreign = stored(1, JobState::Succeeded);
        foreign.tenant = TenantId::parse("other").unwrap();
        for deps in [vec![], vec![foreign]] {
            let mut job = dependent(10, &[1]);
            let (field, reason) = invalid_field(settle_new(&mut job, &deps, t0()));
            assert_eq!(field, "depends_on");
            assert!(reason.contains(&id(1).to_string()), "{reason}");
        }
    }

    #[test]
    fn settle_new_leaves_a_job_without_dependencies_alone() {
        let mut job = stored(1, JobState::Queued);
        assert!(settle_new(&mut job, &[], t0()).unwrap().is_empty());
        assert_eq!(job.state, JobState::Queued);
    }

    /// Runs the store's loop over `propagate` on an in-memory map: every job in `all`, edges
    /// `unresolved`; returns every job that ended in the rounds after the first.
    fn run_rounds(
        all: &mut BTreeMap<JobId, Job>,
        unresolved: &mut BTreeSet<Dependency>,
        first: Vec<JobId>,
    ) -> Vec<JobId> {
        let mut cascaded = Vec::new();
        let mut ended: Vec<Job> = first.iter().map(|i| all[i].clone()).collect();
        loop {
            let needs = Needs::of(&ended);
            if needs.is_empty() {
                return cascaded;
            }
            let edges: Vec<Dependency> = unresolved
                .iter()
                .filter(|e| needs.dependents_of.contains(&e.dependency))
                .copied()
                .collect();
            let mut loaded: BTreeMap<JobId, Job> = all
                .values()
                .filter(|j| {
                    edges.iter().any(|e| e.job == j.id)
                        || needs.parents.contains(&j.id)
                        || j.parent_id.is_some_and(|p| needs.children_of.contains(&p))
                })
                .map(|j| (j.id, j.clone()))
                .collect();
            let out = propagate(&ended, &edges, &mut loaded, t0());
            for edge in &out.resolved {
                assert!(unresolved.remove(edge), "an edge resolves once");
            }
            for changed in &out.changed {
                all.insert(*changed, loaded[changed].clone());
            }
            cascaded.extend(out.ended.iter().copied());
            ended = out.ended.iter().map(|i| all[i].clone()).collect();
        }
    }

    fn store_of(jobs: Vec<Job>) -> (BTreeMap<JobId, Job>, BTreeSet<Dependency>) {
        let mut all: BTreeMap<JobId, Job> = BTreeMap::new();
        let mut unresolved = BTreeSet::new();
        for mut job in jobs {
            if !job.depends_on.is_empty() && job.state == JobState::Queued {
                let deps: Vec<Job> = job.depends_on.iter().map(|d| all[d].clone()).collect();
                unresolved.extend(settle_new(&mut job, &deps, t0()).unwrap());
            }
            all.insert(job.id, job);
        }
        (all, unresolved)
    }

    #[test]
    fn propagate_queues_a_chain_one_link_at_a_time() {
        let (mut all, mut unresolved) = store_of(vec![
            stored(1, JobState::Queued),
            dependent(2, &[1]),
            dependent(3, &[2]),
        ]);
        assert_eq!(all[&id(3)].state, JobState::Waiting);
        let token = run(all.get_mut(&id(1)).unwrap());
        apply(
            all.get_mut(&id(1)).unwrap(),
            Event::Complete {
                token,
                result: None,
            },
            t0(),
        )
        .unwrap();
        assert!(run_rounds(&mut all, &mut unresolved, vec![id(1)]).is_empty());
        assert_eq!(all[&id(2)].state, JobState::Queued);
        assert_eq!(all[&id(3)].state, JobState::Waiting);
        assert_eq!(unresolved.len(), 1);
    }

    #[test]
    fn propagate_queues_a_fan_in_when_both_end_in_one_round() {
        let (mut all, mut unresolved) = store_of(vec![
            stored(1, JobState::Queued),
            stored(2, JobState::Queued),
            dependent(3, &[1, 2]),
        ]);
        for n in [1, 2] {
            let job = all.get_mut(&id(n)).unwrap();
            let token = run(job);
            apply(
                job,
                Event::Complete {
                    token,
                    result: None,
                },
                t0(),
            )
            .unwrap();
        }
        run_rounds(&mut all, &mut unresolved, vec![id(1), id(2)]);
        let fan_in = &all[&id(3)];
        assert_eq!(
            (fan_in.state, fan_in.pending_dependencies),
            (JobState::Queued, 0)
        );
        assert!(unresolved.is_empty());
    }

    #[test]
    fn propagate_cancels_dependents_round_after_round_but_not_run_regardless() {
        let mut regardless = dependent(4, &[2]);
        regardless.run_regardless = true;
        let (mut all, mut unresolved) = store_of(vec![
            stored(1, JobState::Queued),
            dependent(2, &[1]),
            dependent(3, &[2]),
            regardless,
        ]);
        apply(all.get_mut(&id(1)).unwrap(), Event::Cancel, t0()).unwrap();
        let cascaded = run_rounds(&mut all, &mut unresolved, vec![id(1)]);
        assert_eq!(cascaded, vec![id(2), id(3)]);
        assert_eq!(all[&id(3)].state, JobState::Cancelled);
        assert!(all[&id(3)].errors[0].message.contains(&id(2).to_string()));
        assert_eq!(all[&id(4)].state, JobState::Queued);
    }

    #[test]
    fn propagate_cancels_children_and_signals_running_ones() {
        let mut parent = stored(1, JobState::Queued);
        parent.live_children = 3;
        let mut children = Vec::new();
        for (n, state) in [
            (2, JobState::Queued),
            (3, JobState::Waiting),
            (4, JobState::Running),
        ] {
            let mut child = stored(n, state);
            child.parent_id = Some(id(1));
            children.push(child);
        }
        let mut done = stored(5, JobState::Succeeded);
        done.parent_id = Some(id(1));
        let (mut all, mut unresolved) = store_of(vec![parent]);
        for child in children.into_iter().chain([done]) {
            all.insert(child.id, child);
        }
        apply(all.get_mut(&id(1)).unwrap(), Event::Cancel, t0()).unwrap();
        let cascaded = run_rounds(&mut all, &mut unresolved, vec![id(1)]);
        assert_eq!(cascaded.len(), 3);
        assert_eq!(all[&id(2)].state, JobState::Cancelled);
        assert_eq!(all[&id(3)].state, JobState::Cancelled);
        assert!(all[&id(4)].cancel_requested && all[&id(4)].state == JobState::Running);
        assert_eq!(all[&id(5)].state, JobState::Succeeded);
        assert_eq!(
            all[&id(1)].live_children,
            1,
            "the running child is still live"
        );
    }

    #[test]
    fn propagate_queues_a_waiting_parent_after_its_last_child() {
        let mut parent = stored(1, JobState::Queued);
        let token = run(&mut parent);
        apply(
            &mut parent,
            Event::ChildrenAdded {
                token: Some(token),
                count: 2,
            },
            t0(),
        )
        .unwrap();
        apply(&mut parent, Event::WaitForChildren { token }, t0()).unwrap();
        assert_eq!(parent.state, JobState::Waiting);
        let (mut all, mut unresolved) = store_of(vec![parent]);
        for n in [2, 3] {
            let mut child = stored(n, JobState::Succeeded);
            child.parent_id = Some(id(1));
            all.insert(child.id, child);
        }
        run_rounds(&mut all, &mut unresolved, vec![id(2)]);
        assert_eq!(
            (all[&id(1)].state, all[&id(1)].live_children),
            (JobState::Waiting, 1)
        );
        run_rounds(&mut all, &mut unresolved, vec![id(3)]);
        assert_eq!(
            (all[&id(1)].state, all[&id(1)].live_children),
            (JobState::Queued, 0)
        );
    }

    #[test]
    fn propagate_resolves_the_edge_of_a_dependent_cancelled_meanwhile() {
        let (mut all, mut unresolved) =
            store_of(vec![stored(1, JobState::Queued), dependent(2, &[1])]);
        apply(all.get_mut(&id(2)).unwrap(), Event::Cancel, t0()).unwrap();
        apply(all.get_mut(&id(1)).unwrap(), Event::Cancel, t0()).unwrap();
        let cascaded = run_rounds(&mut all, &mut unresolved, vec![id(1)]);
        assert!(cascaded.is_empty());
        assert!(unresolved.is_empty(), "resolved all the same");
        assert_eq!(all[&id(2)].errors.len(), 0, "left as it was");
    }

    #[test]
    fn needs_of_asks_for_dependents_parents_and_children() {
        let mut ended = stored(1, JobState::Cancelled);
        ended.parent_id = Some(id(9));
        ended.live_children = 2;
        let mut requested = stored(2, JobState::Running);
        requested.cancel_requested = true;
        requested.live_children = 1;
        let mut sibling = stored(3, JobState::Succeeded);
        sibling.parent_id = Some(id(9));
        let needs = Needs::of(&[ended, requested, sibling]);
        assert_eq!(needs.dependents_of, vec![id(1), id(3)]);
        assert_eq!(needs.parents, vec![id(9)]);
        assert_eq!(needs.children_of, vec![id(1), id(2)]);
        assert!(Needs::of(&[stored(4, JobState::Queued)]).is_empty());
    }

    #[test]
    fn plan_retry_waits_again_for_dependencies_that_run_again() {
        let mut jobs = BTreeMap::new();
        let failed = stored(1, JobState::Failed);
        let mut after_failed = stored(2, JobState::Cancelled);
        after_failed.depends_on = vec![id(1)];
        let succeeded = stored(3, JobState::Succeeded);
        let mut after_succeeded = stored(4, JobState::Cancelled);
        after_succeeded.depends_on = vec![id(3)];
        let mut parent = stored(5, JobState::Succeeded);
        parent.live_children = 0;
        let mut child = stored(6, JobState::Failed);
        child.parent_id = Some(id(5));
        for job in [
            failed,
            after_failed,
            succeeded,
            after_succeeded,
            parent,
            child,
        ] {
            jobs.insert(job.id, job);
        }
        let edges = [
            Dependency {
                job: id(2),
                dependency: id(1),
            },
            Dependency {
                job: id(4),
                dependency: id(3),
            },
        ];
        let retried: BTreeSet<JobId> = [id(1), id(2), id(4), id(6)].into_iter().collect();
        let (changed, unresolved) = plan_retry(&retried, &mut jobs, &edges, t0());
        assert_eq!(
            changed.into_iter().collect::<Vec<_>>(),
            vec![id(1), id(2), id(4), id(5), id(6)]
        );
        assert_eq!(unresolved, vec![edges[0]]);
        assert_eq!(jobs[&id(1)].state, JobState::Queued);
        assert_eq!(
            (jobs[&id(2)].state, jobs[&id(2)].pending_dependencies),
            (JobState::Waiting, 1)
        );
        assert_eq!(jobs[&id(3)].state, JobState::Succeeded);
        assert_eq!(
            (jobs[&id(4)].state, jobs[&id(4)].pending_dependencies),
            (JobState::Queued, 0)
        );
        assert_eq!(jobs[&id(5)].live_children, 1);
        assert_eq!(jobs[&id(6)].state, JobState::Queued);
    }

    #[test]
    fn plan_retry_counts_live_dependencies_outside_and_waits_for_retried_children() {
        let mut jobs = BTreeMap::new();
        // A job cancelled by one failed dependency while another, outside, still runs.
        let mut dependent = stored(1, JobState::Cancelled);
        dependent.depends_on = vec![id(2), id(3)];
        let outside_running = stored(2, JobState::Running);
        let failed = stored(3, JobState::Failed);
        // A failed parent whose failed child is retried with it.
        let parent = stored(4, JobState::Failed);
        let mut child = stored(5, JobState::Failed);
        child.parent_id = Some(id(4));
        for job in [dependent, outside_running, failed, parent, child] {
            jobs.insert(job.id, job);
        }
        let edges = [
            Dependency {
                job: id(1),
                dependency: id(2),
            },
            Dependency {
                job: id(1),
                dependency: id(3),
            },
        ];
        let retried: BTreeSet<JobId> = [id(1), id(3), id(4), id(5)].into_iter().collect();
        let (_, unresolved) = plan_retry(&retried, &mut jobs, &edges, t0());
        assert_eq!(unresolved, edges.to_vec());
        assert_eq!(
            (jobs[&id(1)].state, jobs[&id(1)].pending_dependencies),
            (JobState::Waiting, 2)
        );
        assert_eq!(
            (jobs[&id(4)].state, jobs[&id(4)].live_children),
            (JobState::Waiting, 1),
            "a retried parent waits for its retried child"
        );
        assert_eq!(jobs[&id(5)].state, JobState::Queued);
    }
}

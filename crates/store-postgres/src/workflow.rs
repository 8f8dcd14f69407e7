//! Workflows on PostgreSQL (docs/design.md section 10; ADR 0004): enqueue with dependencies,
//! children of a running parent, workflow graphs, and the workflow-wide reads, cancel and retry.
//!
//! Every enqueue that links jobs (dependencies, a parent, a workflow, a name, `run_regardless`)
//! takes one transaction, tried again as a whole on a deadlock: the quota locks, the dependency
//! rows `FOR UPDATE` in id order (so none ends unseen meanwhile: its finish waits for the lock,
//! then sees `has_dependents`), the insert of the enqueue lanes (insert.rs: the same key and
//! quota rules, the jobs stored queued with their workflow and parent), then core's
//! `workflow::settle_new` per job in graph order and one update that settles the jobs with
//! dependencies, names, flags or dependents (enqueue_settle.sql; a plain child needs none), the
//! edges
//! (edges_insert.sql) and `has_dependents` on the dependencies still pending
//! (dependents_mark.sql). Jobs without links keep the enqueue lanes of enqueue/mod.rs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use drover_core::error::Entity;
use drover_core::job::CHILDREN_MAX;
use drover_core::workflow::{
    plan_retry, settle_new, Dependency, EnqueueChildren, EnqueuedWorkflow, ListWorkflows,
    NewWorkflow, Workflow, WorkflowChange, WorkflowPage, WorkflowSummary,
};
use drover_core::{
    apply, EnqueueStatus, Enqueued, Error, Event, Job, JobId, JobState, NewJob, Quota, StoreConfig,
    TenantId, WorkflowId,
};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::admin;
use crate::connections::Connections;
use crate::enqueue::{enqueue_answers, lock_quotas_for, Batch, Enqueue, Family, Wake};
use crate::error::SqlxResultExt;
use crate::lifecycle::{lock_job, read_job, write_job, write_jobs, LockedJob};
use crate::notify::Notifier;
use crate::propagate::{ended, lock_jobs, propagate};
use crate::records::{into_jobs, parse_state, JobRecord};
use crate::sql;
use crate::transaction::retried;

/// How the jobs of a batch are linked beyond their own `depends_on`.
pub(crate) struct Links {
    /// The workflow every job joins.
    workflow: Option<WorkflowId>,
    /// The parent of every job.
    parent: Option<JobId>,
    /// Per batch position, the positions of the batch's jobs it waits for (a graph's names).
    local: Vec<Vec<usize>>,
    /// The order jobs are settled in: each after the batch's jobs it waits for.
    order: Vec<usize>,
    /// The batch length errors are labelled by (`jobs[i].` beyond one job; a graph's jobs
    /// always, as `NewWorkflow::plan` names them).
    label_len: usize,
}

impl Links {
    /// Jobs linked only by their own dependencies, names and flags.
    fn plain(len: usize, parent: Option<JobId>, workflow: Option<WorkflowId>) -> Links {
        Links {
            workflow,
            parent,
            local: vec![Vec::new(); len],
            order: (0..len).collect(),
            label_len: len,
        }
    }
}

/// Whether an enqueue of `jobs` takes the linked path: some job has dependencies, a name or
/// `run_regardless`, which the enqueue lanes do not store.
pub(crate) fn linked(jobs: &[NewJob]) -> bool {
    jobs.iter()
        .any(|job| !job.depends_on.is_empty() || job.name.is_some() || job.run_regardless)
}

/// `JobStore::jobs_enqueue` of a batch with links: one transaction on a connection of the
/// store, wake-ups after the commit.
pub(crate) async fn jobs_enqueue(
    connections: &Connections,
    notifier: &Notifier,
    config: &StoreConfig,
    jobs: Vec<NewJob>,
) -> Result<Vec<Enqueued>, Error> {
    let batch = Batch::prepare(jobs, config)?;
    let links = Links::plain(batch.jobs().len(), None, None);
    let mut conn = connections.acquire().await?;
    let result = retried!(conn, |tx| enqueue_linked(
        &mut tx,
        config,
        &batch,
        &links,
        Wake::AfterCommit
    ));
    let enqueue = conn.done(result)?;
    notifier.notify(enqueue.ready_queues.iter().map(String::as_str));
    Ok(enqueue.answers)
}

/// `PgStore::enqueue_in` of a batch with links, in a savepoint of the caller's transaction.
pub(crate) async fn enqueue_in(
    conn: &mut PgConnection,
    config: &StoreConfig,
    batch: Batch,
) -> Result<Vec<Enqueued>, Error> {
    let links = Links::plain(batch.jobs().len(), None, None);
    let result = retried!(conn, |tx| enqueue_linked(
        &mut tx,
        config,
        &batch,
        &links,
        Wake::InTransaction
    ));
    result.map(|enqueue| enqueue.answers)
}

/// What settling one created job decided, to write back.
struct Settled {
    position: usize,
    /// Its dependencies still pending.
    pending: Vec<JobId>,
}

/// Enqueues `batch` with `links` inside the caller's transaction (see the module
/// documentation); answers per job in input order, with the queues to wake after the commit
/// (`Wake::AfterCommit`).
async fn enqueue_linked(
    conn: &mut PgConnection,
    config: &StoreConfig,
    batch: &Batch,
    links: &Links,
    wake: Wake,
) -> Result<Enqueue, Error> {
    let jobs = batch.jobs();
    let len = jobs.len();
    if len == 0 {
        return Ok(Enqueue {
            answers: Vec::new(),
            ready_queues: Vec::new(),
        });
    }
    lock_quotas_for(conn, config, jobs.iter().map(|j| &j.tenant)).await?;
    let named: Vec<JobId> = jobs
        .iter()
        .flat_map(|j| j.depends_on.iter().copied())
        .collect();
    let (mut stored, _) = lock_jobs(conn, &named).await?;
    let family = Family {
        workflow: links.workflow.map(|w| w.as_uuid()),
        parent: links.parent.map(|p| p.as_uuid()),
    };
    let mut enqueue = enqueue_answers(conn, config, batch, family, wake)
        .await?
        .into_enqueue_cloned(batch)?;
    let now = admin::now(conn).await?;
    let created = |answer: &Enqueued| answer.status == EnqueueStatus::Created;
    // Jobs a graph's job waits for that answered with a stored job (a replay, or the holder of
    // a unique key): dependents wait for that job, locked like any dependency.
    let holders: Vec<JobId> = links
        .local
        .iter()
        .flatten()
        .filter(|&&p| !created(&enqueue.answers[p]))
        .map(|&p| enqueue.answers[p].job.id)
        .collect();
    if !holders.is_empty() {
        let (locked, _) = lock_jobs(conn, &holders).await?;
        stored.extend(locked);
    }
    let position: HashMap<JobId, usize> = enqueue
        .answers
        .iter()
        .enumerate()
        .filter(|(_, answer)| created(answer))
        .map(|(i, answer)| (answer.job.id, i))
        .collect();
    let mut done = vec![false; len];
    let mut settled = Vec::new();
    for &i in &links.order {
        if !created(&enqueue.answers[i]) {
            done[i] = true;
            continue;
        }
        let mut ids = enqueue.answers[i].job.depends_on.clone();
        let mut named: std::collections::HashSet<JobId> = ids.iter().copied().collect();
        for &p in &links.local[i] {
            let id = enqueue.answers[p].job.id;
            if named.insert(id) {
                ids.push(id);
            }
        }
        let mut dependencies = Vec::with_capacity(ids.len());
        for id in &ids {
            match position.get(id) {
                Some(&p) if !done[p] => {
                    return Err(Error::invalid(
                        "jobs",
                        format!(
                            "must not have a cycle; jobs[{i}] would wait for jobs[{p}], which waits for it through the job its unique key answered"
                        ),
                    ))
                }
                Some(&p) => dependencies.push(enqueue.answers[p].job.clone()),
                None => {
                    if let Some(job) = stored.get(id) {
                        dependencies.push(job.clone());
                    }
                }
            }
        }
        let job = &mut enqueue.answers[i].job;
        job.workflow_id = links.workflow;
        job.parent_id = links.parent;
        job.depends_on = ids;
        let pending =
            settle_new(job, &dependencies, now).map_err(|e| e.in_batch_item(i, links.label_len))?;
        done[i] = true;
        settled.push(Settled {
            position: i,
            pending: pending.into_iter().map(|edge| edge.dependency).collect(),
        });
    }
    write_settled(conn, &mut enqueue.answers, &settled, &position).await?;
    if wake == Wake::AfterCommit {
        enqueue.ready_queues = ready_queues(&enqueue.answers, now);
    }
    Ok(enqueue)
}

/// Writes what [`enqueue_linked`] settled: the jobs (enqueue_settle.sql), their edges
/// (edges_insert.sql) and the stored dependencies that now have a pending dependent
/// (dependents_mark.sql).
async fn write_settled(
    conn: &mut PgConnection,
    answers: &mut [Enqueued],
    settled: &[Settled],
    position: &HashMap<JobId, usize>,
) -> Result<(), Error> {
    let mut edge_dependencies = Vec::new();
    let mut edge_jobs = Vec::new();
    let mut edge_resolved = Vec::new();
    let mut depended_on = vec![false; answers.len()];
    let mut marks = Vec::new();
    for one in settled {
        let job = &answers[one.position].job;
        let pending: std::collections::HashSet<&JobId> = one.pending.iter().collect();
        for dependency in &job.depends_on {
            edge_dependencies.push(dependency.as_uuid());
            edge_jobs.push(job.id.as_uuid());
            edge_resolved.push(!pending.contains(dependency));
        }
        for dependency in &one.pending {
            match position.get(dependency) {
                Some(&p) => depended_on[p] = true,
                None => marks.push(dependency.as_uuid()),
            }
        }
    }
    let mut rows = SettleRows::default();
    for one in settled {
        let job = &answers[one.position].job;
        // The insert stored the workflow and the parent (`Family`): a job without
        // dependencies, name or dependents is stored as it should be already.
        let linked = !job.depends_on.is_empty()
            || job.name.is_some()
            || job.run_regardless
            || depended_on[one.position];
        if linked {
            rows.push(job, depended_on[one.position])?;
        }
    }
    if !rows.ids.is_empty() {
        rows.write(conn).await?;
    }
    if !edge_jobs.is_empty() {
        sqlx::query(sql::EDGES_INSERT)
            .bind(&edge_dependencies)
            .bind(&edge_jobs)
            .bind(&edge_resolved)
            .execute(&mut *conn)
            .await
            .store_err()?;
    }
    if !marks.is_empty() {
        marks.sort_unstable();
        marks.dedup();
        sqlx::query(sql::DEPENDENTS_MARK)
            .bind(&marks)
            .execute(&mut *conn)
            .await
            .store_err()?;
    }
    Ok(())
}

/// The columns of enqueue_settle.sql, one array each.
#[derive(Default)]
struct SettleRows<'a> {
    ids: Vec<Uuid>,
    states: Vec<&'static str>,
    pending: Vec<i32>,
    run_ats: Vec<DateTime<Utc>>,
    finished: Vec<Option<DateTime<Utc>>>,
    errors: Vec<Value>,
    workflows: Vec<Option<Uuid>>,
    names: Vec<Option<&'a str>>,
    parents: Vec<Option<Uuid>>,
    depends_on: Vec<String>,
    run_regardless: Vec<bool>,
    has_dependents: Vec<bool>,
}

impl<'a> SettleRows<'a> {
    fn push(&mut self, job: &'a Job, has_dependents: bool) -> Result<(), Error> {
        self.ids.push(job.id.as_uuid());
        self.states.push(job.state.as_str());
        self.pending.push(job.pending_dependencies);
        self.run_ats.push(job.run_at);
        self.finished.push(job.finished_at);
        self.errors.push(
            serde_json::to_value(&job.errors)
                .map_err(|_| Error::fatal("could not encode a job's error list"))?,
        );
        self.workflows.push(job.workflow_id.map(|w| w.as_uuid()));
        self.names.push(job.name.as_deref());
        self.parents.push(job.parent_id.map(|p| p.as_uuid()));
        self.depends_on.push(
            job.depends_on
                .iter()
                .map(JobId::to_string)
                .collect::<Vec<_>>()
                .join(","),
        );
        self.run_regardless.push(job.run_regardless);
        self.has_dependents.push(has_dependents);
        Ok(())
    }

    async fn write(&self, conn: &mut PgConnection) -> Result<(), Error> {
        sqlx::query(sql::ENQUEUE_SETTLE)
            .bind(&self.ids)
            .bind(&self.states)
            .bind(&self.pending)
            .bind(&self.run_ats)
            .bind(&self.finished)
            .bind(&self.errors)
            .bind(&self.workflows)
            .bind(&self.names)
            .bind(&self.parents)
            .bind(&self.depends_on)
            .bind(&self.run_regardless)
            .bind(&self.has_dependents)
            .execute(&mut *conn)
            .await
            .store_err()?;
        Ok(())
    }
}

/// The distinct queues of created jobs that are ready at `now`.
fn ready_queues(answers: &[Enqueued], now: DateTime<Utc>) -> Vec<String> {
    let mut seen = HashSet::new();
    answers
        .iter()
        .filter(|a| a.status == EnqueueStatus::Created && a.job.is_ready(now))
        .map(|a| a.job.queue.as_str())
        .filter(|queue| seen.insert(*queue))
        .map(str::to_owned)
        .collect()
}

/// `JobStore::children_enqueue`: one transaction that locks the parent, checks its lease
/// (`ChildrenAdded`, fenced), enqueues the children linked to it and counts the new live ones.
pub(crate) async fn children_enqueue(
    connections: &Connections,
    notifier: &Notifier,
    config: &StoreConfig,
    children: EnqueueChildren,
) -> Result<Vec<Enqueued>, Error> {
    let EnqueueChildren {
        parent,
        token,
        jobs,
    } = children;
    let batch = Batch::prepare(jobs, config)?;
    let mut conn = connections.acquire().await?;
    let result = retried!(conn, |tx| children_in(
        &mut tx, config, &batch, parent, token
    ));
    let enqueue = conn.done(result)?;
    notifier.notify(enqueue.ready_queues.iter().map(String::as_str));
    Ok(enqueue.answers)
}

async fn children_in(
    conn: &mut PgConnection,
    config: &StoreConfig,
    batch: &Batch,
    parent: JobId,
    token: drover_core::FencingToken,
) -> Result<Enqueue, Error> {
    let jobs = batch.jobs();
    let len = jobs.len();
    lock_quotas_for(conn, config, jobs.iter().map(|j| &j.tenant)).await?;
    // The children are inserted before the parent is locked: its children's finishes count
    // down on the parent row, and the insert of a large batch would hold them up for its whole
    // length (ADR 0004, decision 4). The rows stay invisible until the commit, and the fenced
    // check under the lock below rolls them back with the transaction when the lease was lost
    // meanwhile. Tenant and workflow never change, so an unlocked read supplies them.
    let (unlocked, read_at) = read_job(conn, parent).await?;
    // The lease first: a stale parent stores nothing, whatever its children.
    check_children_added(&unlocked, token, read_at)?;
    for (i, job) in jobs.iter().enumerate() {
        if job.tenant != unlocked.tenant {
            return Err(Error::invalid(
                "tenant",
                format!(
                    "a child must have its parent's tenant ({})",
                    unlocked.tenant
                ),
            )
            .in_batch_item(i, len));
        }
    }
    let links = Links::plain(len, Some(parent), unlocked.workflow_id);
    let enqueue = enqueue_linked(conn, config, batch, &links, Wake::AfterCommit).await?;
    let created: Vec<Uuid> = enqueue
        .answers
        .iter()
        .filter(|a| a.status == EnqueueStatus::Created)
        .map(|a| a.job.id.as_uuid())
        .collect();
    if !created.is_empty() {
        sqlx::query(sql::CHILDREN_LINK)
            .bind(parent.as_uuid())
            .bind(&created)
            .execute(&mut *conn)
            .await
            .store_err()?;
    }
    let (mut parent_job, now) = lock_job(conn, parent).await?;
    check_children_added(&parent_job, token, now)?;
    let live = enqueue
        .answers
        .iter()
        .filter(|a| a.status == EnqueueStatus::Created && !a.job.state.is_terminal())
        .count();
    let after = usize::try_from(parent_job.live_children.max(0)).unwrap_or(0) + live;
    if after > CHILDREN_MAX {
        return Err(Error::invalid(
            "jobs",
            format!(
                "a parent has at most {CHILDREN_MAX} live children; {} live, {live} more",
                parent_job.live_children
            ),
        ));
    }
    if live > 0 {
        apply(
            &mut parent_job,
            Event::ChildrenAdded {
                token: Some(token),
                count: u32::try_from(live).unwrap_or(u32::MAX),
            },
            now,
        )?;
        write_job(conn, &parent_job, false).await?;
    }
    Ok(enqueue)
}

/// Core's fenced check of `ChildrenAdded` on a copy: the parent still runs under `token`.
fn check_children_added(
    parent: &Job,
    token: drover_core::FencingToken,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let mut check = parent.clone();
    apply(
        &mut check,
        Event::ChildrenAdded {
            token: Some(token),
            count: 0,
        },
        now,
    )?;
    Ok(())
}

/// `JobStore::workflow_enqueue`: the graph checked ([`NewWorkflow::plan`]) before anything is
/// stored, then the workflow row and its jobs in one transaction.
pub(crate) async fn workflow_enqueue(
    connections: &Connections,
    notifier: &Notifier,
    config: &StoreConfig,
    workflow: NewWorkflow,
) -> Result<EnqueuedWorkflow, Error> {
    let plan = workflow.plan(&config.sizes)?;
    let mut local = vec![Vec::new(); workflow.jobs.len()];
    let mut order = Vec::with_capacity(plan.len());
    for planned in plan {
        local[planned.index] = planned.depends_on;
        order.push(planned.index);
    }
    let tenant = workflow.jobs[0].job.tenant.clone();
    let jobs: Vec<NewJob> = workflow
        .jobs
        .into_iter()
        .map(|entry| {
            let mut job = entry.job;
            job.name = Some(entry.name);
            job
        })
        .collect();
    let batch = Batch::prepare(jobs, config)?;
    let id = WorkflowId::new_v7();
    let links = Links {
        workflow: Some(id),
        parent: None,
        local,
        order,
        label_len: usize::MAX,
    };
    let mut conn = connections.acquire().await?;
    let result = retried!(conn, |tx| workflow_in(
        &mut tx, config, &batch, &links, &tenant
    ));
    let enqueue = conn.done(result)?;
    notifier.notify(enqueue.ready_queues.iter().map(String::as_str));
    let id = drover_core::workflow::answered_workflow(id, &enqueue.answers);
    Ok(EnqueuedWorkflow {
        id,
        jobs: enqueue.answers,
    })
}

async fn workflow_in(
    conn: &mut PgConnection,
    config: &StoreConfig,
    batch: &Batch,
    links: &Links,
    tenant: &TenantId,
) -> Result<Enqueue, Error> {
    let id = links
        .workflow
        .ok_or_else(|| Error::fatal("a workflow enqueue without a workflow id"))?;
    sqlx::query(sql::WORKFLOW_INSERT)
        .bind(id.as_uuid())
        .bind(tenant.as_str())
        .execute(&mut *conn)
        .await
        .store_err()?;
    let enqueue = enqueue_linked(conn, config, batch, links, Wake::AfterCommit).await?;
    if !enqueue
        .answers
        .iter()
        .any(|a| a.status == EnqueueStatus::Created)
    {
        sqlx::query(sql::WORKFLOW_FORGET)
            .bind(id.as_uuid())
            .execute(&mut *conn)
            .await
            .store_err()?;
    }
    Ok(enqueue)
}

/// `JobStore::jobs_get`: one statement, answered in the order asked.
pub(crate) async fn jobs_get(conn: &mut PgConnection, ids: Vec<JobId>) -> Result<Vec<Job>, Error> {
    drover_core::bounds::check_ids_len(ids.len())?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let uuids: Vec<Uuid> = ids.iter().map(|id| id.as_uuid()).collect();
    let records = sqlx::query_as::<_, JobRecord>(sql::JOBS_GET)
        .bind(&uuids)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let found: HashMap<JobId, Job> = into_jobs(records)?
        .into_iter()
        .map(|job| (job.id, job))
        .collect();
    Ok(ids.iter().filter_map(|id| found.get(id).cloned()).collect())
}

/// A row of drover.workflows.
#[derive(sqlx::FromRow)]
struct WorkflowRecord {
    id: Uuid,
    tenant: String,
    created_at: DateTime<Utc>,
}

impl WorkflowRecord {
    fn tenant(&self) -> Result<TenantId, Error> {
        TenantId::parse(self.tenant.clone()).map_err(|_| Error::fatal("stored tenant is invalid"))
    }
}

fn workflow_not_found(id: WorkflowId) -> Error {
    Error::NotFound {
        entity: Entity::Workflow,
        id: id.to_string(),
    }
}

async fn workflow_row(conn: &mut PgConnection, id: WorkflowId) -> Result<WorkflowRecord, Error> {
    sqlx::query_as::<_, WorkflowRecord>(sql::WORKFLOW_GET)
        .bind(id.as_uuid())
        .fetch_optional(&mut *conn)
        .await
        .store_err()?
        .ok_or_else(|| workflow_not_found(id))
}

/// `JobStore::workflow_get`: the row, then its jobs (two statements; a job enqueued between
/// them is shown, none is missed).
pub(crate) async fn workflow_get(
    conn: &mut PgConnection,
    id: WorkflowId,
) -> Result<Workflow, Error> {
    let row = workflow_row(conn, id).await?;
    let records = sqlx::query_as::<_, JobRecord>(sql::WORKFLOW_JOBS)
        .bind(id.as_uuid())
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    Ok(Workflow {
        id,
        tenant: row.tenant()?,
        created_at: row.created_at,
        jobs: into_jobs(records)?,
    })
}

/// A row of workflows_list.sql.
#[derive(sqlx::FromRow)]
struct SummaryRow {
    #[sqlx(flatten)]
    workflow: WorkflowRecord,
    counts: Value,
}

/// `JobStore::workflows_list`: one statement, one row more than the page for the cursor.
pub(crate) async fn workflows_list(
    conn: &mut PgConnection,
    query: ListWorkflows,
) -> Result<WorkflowPage, Error> {
    query.validate()?;
    let page = query.page_size();
    let rows = sqlx::query_as::<_, SummaryRow>(sql::WORKFLOWS_LIST)
        .bind(query.tenant.as_ref().map(|t| t.as_str()))
        .bind(query.before.map(|w| w.as_uuid()))
        .bind(i64::from(page) + 1)
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let mut workflows = Vec::with_capacity(rows.len());
    for row in rows {
        let mut states = BTreeMap::new();
        if let Value::Object(map) = &row.counts {
            for (state, n) in map {
                states.insert(parse_state(state)?, n.as_u64().unwrap_or(0));
            }
        }
        workflows.push(WorkflowSummary {
            id: WorkflowId(row.workflow.id),
            tenant: row.workflow.tenant()?,
            created_at: row.workflow.created_at,
            states,
        });
    }
    let page = usize::try_from(page).unwrap_or(usize::MAX);
    let next = if workflows.len() > page {
        workflows.truncate(page);
        workflows.last().map(|w| w.id)
    } else {
        None
    };
    Ok(WorkflowPage { workflows, next })
}

/// Locks every job of workflow `id` (id order); `NotFound` for an unknown workflow.
async fn lock_workflow(
    conn: &mut PgConnection,
    id: WorkflowId,
) -> Result<(WorkflowRecord, BTreeMap<JobId, Job>, DateTime<Utc>), Error> {
    let row = workflow_row(conn, id).await?;
    let locked = sqlx::query_as::<_, LockedJob>(sql::WORKFLOW_LOCK)
        .bind(id.as_uuid())
        .fetch_all(&mut *conn)
        .await
        .store_err()?;
    let mut now = None;
    let mut jobs = BTreeMap::new();
    for row in locked {
        now = Some(row.db_now);
        let job = row.job.into_job()?;
        jobs.insert(job.id, job);
    }
    let now = match now {
        Some(now) => now,
        None => admin::now(conn).await?,
    };
    Ok((row, jobs, now))
}

/// `JobStore::workflow_cancel`: every job not terminal cancelled (or its cancel requested), then
/// propagated, in one transaction.
pub(crate) async fn workflow_cancel(
    conn: &mut PgConnection,
    id: WorkflowId,
) -> Result<WorkflowChange, Error> {
    retried!(conn, |tx| workflow_cancel_in(&mut tx, id))
}

pub(crate) async fn workflow_cancel_in(
    conn: &mut PgConnection,
    id: WorkflowId,
) -> Result<WorkflowChange, Error> {
    let (_, jobs, now) = lock_workflow(conn, id).await?;
    let mut changed = Vec::new();
    for job in jobs.values() {
        if job.state.is_terminal() {
            continue;
        }
        let mut after = job.clone();
        if apply(&mut after, Event::Cancel, now).is_ok() && ended(job, &after) {
            changed.push(after);
        }
    }
    let count = changed.len() as u64;
    if !changed.is_empty() {
        let stored = write_jobs(conn, &changed, true).await?;
        propagate(conn, stored, now).await?;
    }
    Ok(WorkflowChange { id, jobs: count })
}

/// `JobStore::workflow_retry`: every failed or cancelled job runs again
/// ([`plan_retry`]), waiting again for its dependencies that run again; quotas and unique keys
/// checked as an operator retry checks them, for all of them together.
pub(crate) async fn workflow_retry(
    conn: &mut PgConnection,
    config: &StoreConfig,
    id: WorkflowId,
) -> Result<WorkflowChange, Error> {
    retried!(conn, |tx| workflow_retry_in(&mut tx, config, id))
}

pub(crate) async fn workflow_retry_in(
    conn: &mut PgConnection,
    config: &StoreConfig,
    id: WorkflowId,
) -> Result<WorkflowChange, Error> {
    // Quota locks before the rows, as every enqueue and retry takes them.
    let row = workflow_row(conn, id).await?;
    let tenant = row.tenant()?;
    lock_quotas_for(conn, config, std::iter::once(&tenant)).await?;
    let (_, mut jobs, now) = lock_workflow(conn, id).await?;
    let retried: BTreeSet<JobId> = jobs
        .values()
        .filter(|j| matches!(j.state, JobState::Failed | JobState::Cancelled))
        .map(|j| j.id)
        .collect();
    if retried.is_empty() {
        return Ok(WorkflowChange { id, jobs: 0 });
    }
    check_retry(conn, config, &tenant, &jobs, &retried).await?;
    retry_linked(conn, &retried, &mut jobs, now).await?;
    Ok(WorkflowChange {
        id,
        jobs: retried.len() as u64,
    })
}

/// Runs the terminal jobs `retried` again with [`plan_retry`] inside the caller's transaction,
/// after its quota and unique-key checks: `jobs` holds them locked (and may hold more); their
/// parents and dependencies not in it are locked and added (a dependency outside the workflow
/// counts as much as one inside); the changed jobs are written back and the edges to
/// dependencies that run again reopened.
pub(crate) async fn retry_linked(
    conn: &mut PgConnection,
    retried: &BTreeSet<JobId>,
    jobs: &mut BTreeMap<JobId, Job>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let mut edges = Vec::new();
    let mut missing = Vec::new();
    for id in retried {
        let Some(job) = jobs.get(id) else {
            continue;
        };
        for dependency in &job.depends_on {
            edges.push(Dependency {
                job: *id,
                dependency: *dependency,
            });
        }
        let related = job.depends_on.iter().copied().chain(job.parent_id);
        missing.extend(related.filter(|other| !jobs.contains_key(other)));
    }
    missing.sort_unstable();
    missing.dedup();
    if !missing.is_empty() {
        let (locked, _) = lock_jobs(conn, &missing).await?;
        jobs.extend(locked);
    }
    let (changed, unresolved) = plan_retry(retried, jobs, &edges, now);
    let changed: Vec<Job> = changed
        .iter()
        .filter_map(|id| jobs.get(id).cloned())
        .collect();
    write_jobs(conn, &changed, false).await?;
    if !unresolved.is_empty() {
        let dependencies: Vec<Uuid> = unresolved.iter().map(|e| e.dependency.as_uuid()).collect();
        let dependents: Vec<Uuid> = unresolved.iter().map(|e| e.job.as_uuid()).collect();
        sqlx::query(sql::EDGES_REOPEN)
            .bind(&dependencies)
            .bind(&dependents)
            .execute(&mut *conn)
            .await
            .store_err()?;
        let mut marks = dependencies;
        marks.sort_unstable();
        marks.dedup();
        sqlx::query(sql::DEPENDENTS_MARK)
            .bind(&marks)
            .execute(&mut *conn)
            .await
            .store_err()?;
    }
    Ok(())
}

/// The checks of an operator retry for the `retried` jobs together (retry_check.sql): the
/// quotas with all of them added, then no live job other than them holding one's unique key.
async fn check_retry(
    conn: &mut PgConnection,
    config: &StoreConfig,
    tenant: &TenantId,
    jobs: &BTreeMap<JobId, Job>,
    retried: &BTreeSet<JobId>,
) -> Result<(), Error> {
    let keyed: Vec<&Job> = retried
        .iter()
        .filter_map(|id| jobs.get(id))
        .filter(|j| j.unique_key.is_some())
        .collect();
    let mut counts = None;
    let mut holders = Vec::new();
    let probes: Vec<(Option<&str>, Uuid)> = if keyed.is_empty() {
        vec![(None, Uuid::nil())]
    } else {
        keyed
            .iter()
            .map(|j| (j.unique_key.as_deref(), j.id.as_uuid()))
            .collect()
    };
    for (key, id) in probes {
        let (global, tenant_pending, holder): (i64, i64, Option<Uuid>) =
            sqlx::query_as(sql::RETRY_CHECK)
                .bind(tenant.as_str())
                .bind(key)
                .bind(id)
                .fetch_one(&mut *conn)
                .await
                .store_err()?;
        counts.get_or_insert((global, tenant_pending));
        if let Some(holder) = holder {
            holders.push(JobId(holder));
        }
    }
    let (global, tenant_pending) = counts.unwrap_or((0, 0));
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let adding = retried.len() as u64;
    let quotas = config.quotas;
    if let Some(max) = quotas.max_pending {
        if count(global).saturating_add(adding) > max {
            return Err(Error::QuotaExceeded {
                quota: Quota::Global,
                current: count(global),
                max,
            });
        }
    }
    if let Some(max) = quotas.max_tenant_pending {
        if count(tenant_pending).saturating_add(adding) > max {
            return Err(Error::QuotaExceeded {
                quota: Quota::Tenant(tenant.as_str().to_owned()),
                current: count(tenant_pending),
                max,
            });
        }
    }
    // A holder that is itself retried is not live yet; any other live holder refuses.
    if let Some(holder) = holders.into_iter().find(|h| !retried.contains(h)) {
        return Err(Error::unique_key_held(holder));
    }
    Ok(())
}

//! Workflows (docs/design.md section 10): dependencies resolved in the step that ends them,
//! children a parent waits for without a lease, graphs enqueued as one unit, and the cancel,
//! retry and retention rules that span jobs.

use std::sync::Arc;
use std::time::Duration;

use drover_core::job::{DEPENDENCIES_MAX, WORKFLOW_DEPENDENCIES_MAX};
use drover_core::{
    CancelEffect, EnqueueChildren, EnqueueStatus, Entity, Error, EventStream, Finish, FinishItem,
    FinishReply, Job, JobDetails, JobId, JobState, JobStore, ListJobs, ListWorkflows, NewJob,
    NewWorkflow, PruneJobs, Quota, RescueExpired, Retry, StoreConfig, StoreEvent, SucceededJobs,
};
use futures::StreamExt;
use serde_json::json;

use super::{
    all_jobs, claim, claim_from, complete, enqueue, expect_invalid, expect_lease_lost,
    expect_not_found, expect_quota_exceeded, failed_job, finish, job, queue, stale, start, tenant,
    unbounded, with_quotas, within, LEASE,
};
use crate::StoreFactory;

const HOUR: Duration = Duration::from_secs(3600);

/// The state of job `id`.
async fn state_of(store: &dyn JobStore, id: JobId) -> JobState {
    store.job_get(id).await.expect("get").state
}

/// How many jobs the store holds.
async fn count(store: &dyn JobStore) -> usize {
    all_jobs(store).await.len()
}

/// Fails job `running` for good (no retry).
async fn fail(store: &dyn JobStore, running: &Job) {
    let to = finish(
        store,
        running,
        Finish::Failed {
            message: "boom".into(),
            retry: Retry::Never,
        },
    )
    .await;
    assert_eq!(to, JobState::Failed);
}

/// Stores `jobs` as children of the running `parent` and expects each to be created.
async fn children(store: &dyn JobStore, parent: &Job, jobs: Vec<NewJob>) -> Vec<Job> {
    let answers = store
        .children_enqueue(EnqueueChildren {
            parent: parent.id,
            token: parent.fencing_token,
            jobs,
        })
        .await
        .expect("children stored");
    answers
        .into_iter()
        .map(|a| {
            assert_eq!(a.status, EnqueueStatus::Created);
            assert_eq!(a.job.parent_id, Some(parent.id));
            a.job
        })
        .collect()
}

/// The children of `parent`, whole, oldest first.
async fn children_of(store: &dyn JobStore, parent: JobId) -> Vec<Job> {
    let mut jobs = super::all_pages(
        store,
        ListJobs {
            parent: Some(parent),
            details: JobDetails::ALL,
            limit: 1000,
            ..ListJobs::default()
        },
    )
    .await;
    jobs.reverse();
    jobs
}

/// Waits up to 10 s for an event matching `wanted`, skipping others.
async fn wait_for(events: &mut EventStream, wanted: impl Fn(&StoreEvent) -> bool, what: &str) {
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if wanted(&event) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "expected event: {what}");
}

/// Finishes `jobs` (claimed) with `finish`, in one batch, and expects every item recorded.
async fn finish_all(store: &dyn JobStore, jobs: &[Job], outcome: Finish) {
    let items = jobs
        .iter()
        .map(|j| FinishItem {
            parent: j.parent_id,
            id: j.id,
            token: j.fencing_token,
            finish: outcome.clone(),
            started: None,
        })
        .collect();
    let replies = store.jobs_finish(items).await.expect("finish");
    assert!(
        replies
            .iter()
            .all(|r| matches!(r, FinishReply::Recorded { .. })),
        "every finish recorded"
    );
}

/// A dependency already terminal resolves at enqueue: succeeded -> the dependent is queued
/// (claimable at once); failed -> cancelled with an error naming it; failed with
/// `run_regardless` -> queued.
pub async fn workflows_dependency_on_a_finished_job_resolves_at_enqueue(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let done = start(&*store, job("a", json!(1))).await;
    complete(&*store, &done).await;
    let bad = failed_job(&*store, job("b", json!(1))).await;

    let after_done = enqueue(&*store, job("d1", json!(1)).with_dependency(done.id)).await;
    assert_eq!(after_done.state, JobState::Queued);
    assert_eq!(after_done.depends_on, vec![done.id]);
    assert_eq!(after_done.pending_dependencies, 0);
    assert_eq!(claim(&*store, &["d1"], 10).await.len(), 1);

    let after_bad = enqueue(
        &*store,
        job("d2", json!(1))
            .with_dependency(done.id)
            .with_dependency(bad.id),
    )
    .await;
    assert_eq!(after_bad.state, JobState::Cancelled);
    assert!(after_bad.finished_at.is_some());
    let message = &after_bad.errors.last().expect("an error").message;
    assert!(
        message.contains(&bad.id.to_string()),
        "the error names the dependency: {message}"
    );
    assert!(claim(&*store, &["d2"], 10).await.is_empty());

    let regardless = enqueue(
        &*store,
        job("d3", json!(1)).with_dependency(bad.id).run_regardless(),
    )
    .await;
    assert_eq!(regardless.state, JobState::Queued);
    assert!(regardless.run_regardless);
    assert_eq!(claim(&*store, &["d3"], 10).await.len(), 1);
}

/// A waiting job is never claimed nor rescued; a dependency that a rescue fails for good
/// cancels it in the same step.
pub async fn workflows_waiting_job_is_never_claimed_nor_rescued(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("a", json!(1)).with_max_attempts(1)).await;
    let waiting = enqueue(&*store, job("w", json!(1)).with_dependency(running.id)).await;
    assert_eq!(waiting.state, JobState::Waiting);
    assert_eq!(waiting.pending_dependencies, 1);
    assert!(waiting.lease_expires_at.is_none());
    assert!(claim(&*store, &["w"], 10).await.is_empty());

    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: Vec::new(),
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(rescued.len(), 1, "only the running job is rescued");
    assert_eq!(
        (rescued[0].id, rescued[0].to),
        (running.id, JobState::Failed)
    );
    let cancelled = store.job_get(waiting.id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert!(cancelled
        .errors
        .last()
        .unwrap()
        .message
        .contains(&running.id.to_string()));
    assert!(claim(&*store, &["w"], 10).await.is_empty());
}

/// Waiting jobs show as `waiting` in the snapshot (not running) and count toward quotas.
pub async fn workflows_waiting_jobs_count_in_snapshot_and_quotas(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(3), None)).await;
    let store = h.store();
    let first = enqueue(&*store, job("a", json!(1))).await;
    enqueue(&*store, job("w", json!(1)).with_dependency(first.id)).await;
    enqueue(&*store, job("w", json!(2)).with_dependency(first.id)).await;
    let snapshot = store.queue_snapshot().await.unwrap();
    let default = snapshot
        .queues
        .iter()
        .find(|q| q.queue.as_str() == "default")
        .expect("the default queue");
    assert_eq!(default.count(JobState::Waiting), 2);
    assert_eq!(default.count(JobState::Queued), 1);
    assert_eq!(default.running, 0);
    assert_eq!(default.ready, 1);
    expect_quota_exceeded(
        store.job_enqueue(job("x", json!(1))).await,
        Quota::Global,
        3,
        3,
    );
}

/// The finish of the last dependency queues the dependent in the same call: claimable as soon
/// as `jobs_finish` returns, without moving the clock, and announced with `JobsAvailable` for
/// its queue.
pub async fn workflows_last_dependency_finish_queues_the_dependent_at_once(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = start(&*store, job("a", json!(1))).await;
    let b = start(&*store, job("b", json!(1))).await;
    let dependent = enqueue(
        &*store,
        job("d", json!(1))
            .with_queue(queue("after"))
            .with_dependency(a.id)
            .with_dependency(b.id),
    )
    .await;
    assert_eq!(dependent.pending_dependencies, 2);
    complete(&*store, &a).await;
    let half = store.job_get(dependent.id).await.unwrap();
    assert_eq!(
        (half.state, half.pending_dependencies),
        (JobState::Waiting, 1)
    );
    assert!(claim_from(&*store, &["after"], &["d"], 10).await.is_empty());

    let mut events = store.subscribe().await.unwrap();
    complete(&*store, &b).await;
    let claimed = claim_from(&*store, &["after"], &["d"], 10).await;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, dependent.id);
    wait_for(
        &mut events,
        |e| matches!(e, StoreEvent::JobsAvailable { queue } if queue.as_str() == "after"),
        "JobsAvailable for the dependent's queue",
    )
    .await;
}

/// A failed dependency cancels its dependents, three deep, each naming the job it waited for;
/// a dependent enqueued with `run_regardless` runs instead.
pub async fn workflows_failed_dependency_cancels_the_chain_but_not_run_regardless(
    f: &dyn StoreFactory,
) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let root = start(&*store, job("root", json!(1)).with_max_attempts(1)).await;
    let b = enqueue(&*store, job("b", json!(1)).with_dependency(root.id)).await;
    let c = enqueue(&*store, job("c", json!(1)).with_dependency(b.id)).await;
    let d = enqueue(&*store, job("d", json!(1)).with_dependency(c.id)).await;
    let regardless = enqueue(
        &*store,
        job("r", json!(1)).with_dependency(root.id).run_regardless(),
    )
    .await;
    fail(&*store, &root).await;
    for (cancelled, cause) in [(b.id, root.id), (c.id, b.id), (d.id, c.id)] {
        let got = store.job_get(cancelled).await.unwrap();
        assert_eq!(got.state, JobState::Cancelled, "{cancelled} is cancelled");
        let message = &got.errors.last().expect("an error").message;
        assert!(message.contains(&cause.to_string()), "{message}");
    }
    assert_eq!(state_of(&*store, regardless.id).await, JobState::Queued);
    assert_eq!(claim(&*store, &["r"], 10).await.len(), 1);
    assert!(claim(&*store, &["b", "c", "d"], 10).await.is_empty());
}

/// Two workers finish the last two dependencies at the same time, through separate store
/// handles: the dependent is queued exactly once and claimed once.
pub async fn workflows_concurrent_finishes_of_the_last_two_dependencies_queue_once(
    f: &dyn StoreFactory,
) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let other = h.another_store().await;
    for round in 0..20 {
        let a = start(&*store, job("a", json!(round))).await;
        let b = start(&*store, job("b", json!(round))).await;
        let dependent = enqueue(
            &*store,
            job("d", json!(round))
                .with_dependency(a.id)
                .with_dependency(b.id),
        )
        .await;
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let tasks = [(store.clone(), a), (other.clone(), b)].map(|(s, j)| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                s.job_finish(j.id, j.fencing_token, Finish::Succeeded { result: None })
                    .await
            })
        });
        for task in tasks {
            let to = within("a concurrent finish", task).await.unwrap().unwrap();
            assert_eq!(to, JobState::Succeeded);
        }
        let queued = store.job_get(dependent.id).await.unwrap();
        assert_eq!(
            (queued.state, queued.pending_dependencies),
            (JobState::Queued, 0),
            "round {round}"
        );
        let claimed = claim(&*store, &["d"], 10).await;
        assert_eq!(claimed.len(), 1, "round {round}: claimed once");
        assert!(claim(&*store, &["d"], 10).await.is_empty());
        complete(&*store, &claimed[0]).await;
    }
}

/// An unknown id, the id of another tenant's job, or more than 1,000 dependencies is
/// `InvalidInput` on `depends_on`, and nothing of the batch is stored.
pub async fn workflows_unknown_or_foreign_dependency_is_invalid_and_stores_nothing(
    f: &dyn StoreFactory,
) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let foreign = enqueue(&*store, job("a", json!(1)).with_tenant(tenant("other"))).await;
    let before = count(&*store).await;
    expect_invalid(
        store
            .job_enqueue(job("d", json!(1)).with_dependency(JobId::new_v7()))
            .await,
        "depends_on",
    );
    expect_invalid(
        store
            .job_enqueue(job("d", json!(1)).with_dependency(foreign.id))
            .await,
        "depends_on",
    );
    expect_invalid(
        store
            .jobs_enqueue(vec![
                job("d", json!(1)),
                job("d", json!(2)).with_dependency(foreign.id),
            ])
            .await,
        "jobs[1].depends_on",
    );
    let too_many = (0..=1_000).fold(job("d", json!(4)), |j, _| {
        j.with_dependency(JobId::new_v7())
    });
    expect_invalid(store.job_enqueue(too_many).await, "depends_on");
    assert_eq!(count(&*store).await, before, "nothing stored");
    // The other tenant's own job may depend on it.
    let same = enqueue(
        &*store,
        job("d", json!(3))
            .with_tenant(tenant("other"))
            .with_dependency(foreign.id),
    )
    .await;
    assert_eq!(same.state, JobState::Waiting);
}

/// A graph is stored with its names, one workflow id on every job, dependencies by name
/// resolved to ids (plus stored ids it names), roots queued and the rest waiting.
pub async fn workflows_graph_enqueue_stores_names_ids_and_dependencies(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let stored = enqueue(&*store, job("pre", json!(1))).await;
    // Listed before the jobs it depends on: the order of the input does not matter.
    let graph = NewWorkflow::new()
        .job("report", job("report", json!(3)), &["fetch", "parse"])
        .job("fetch", job("fetch", json!(1)), &[])
        .job(
            "parse",
            job("parse", json!(2)).with_dependency(stored.id),
            &["fetch"],
        );
    let enqueued = store.workflow_enqueue(graph).await.unwrap();
    assert_eq!(enqueued.jobs.len(), 3);
    let [report, fetch, parse] = [0, 1, 2].map(|i| enqueued.jobs[i].job.clone());
    for (answer, name) in enqueued.jobs.iter().zip(["report", "fetch", "parse"]) {
        assert_eq!(answer.status, EnqueueStatus::Created);
        assert_eq!(answer.job.workflow_id, Some(enqueued.id));
        assert_eq!(answer.job.name.as_deref(), Some(name));
    }
    assert_eq!(fetch.state, JobState::Queued);
    assert_eq!(parse.state, JobState::Waiting);
    assert_eq!(parse.pending_dependencies, 2);
    let mut parse_deps = parse.depends_on.clone();
    parse_deps.sort();
    let mut want = vec![fetch.id, stored.id];
    want.sort();
    assert_eq!(parse_deps, want);
    assert_eq!(report.state, JobState::Waiting);
    let mut report_deps = report.depends_on.clone();
    report_deps.sort();
    let mut want = vec![fetch.id, parse.id];
    want.sort();
    assert_eq!(report_deps, want);
    assert_eq!(store.job_get(report.id).await.unwrap(), report);

    let listed = super::all_pages(
        &*store,
        ListJobs {
            workflow: Some(enqueued.id),
            ..ListJobs::default()
        },
    )
    .await;
    assert_eq!(listed.len(), 3);

    // Run it through: fetch, then pre and parse, then report.
    let fetched = claim(&*store, &["fetch"], 1).await.remove(0);
    complete(&*store, &fetched).await;
    assert_eq!(state_of(&*store, parse.id).await, JobState::Waiting);
    let pre = claim(&*store, &["pre"], 1).await.remove(0);
    complete(&*store, &pre).await;
    let parsed = claim(&*store, &["parse"], 1).await.remove(0);
    complete(&*store, &parsed).await;
    let reported = claim(&*store, &["report"], 1).await;
    assert_eq!(reported.len(), 1);
    assert_eq!(reported[0].id, report.id);
}

/// A cycle, a dangling name, a repeated name or a bad job is `InvalidInput` naming it, and
/// nothing is stored.
pub async fn workflows_bad_graph_is_invalid_and_stores_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let cycle = NewWorkflow::new()
        .job("a", job("k", json!(1)), &["c"])
        .job("b", job("k", json!(2)), &["a"])
        .job("c", job("k", json!(3)), &["b"])
        .job("d", job("k", json!(4)), &[]);
    match store.workflow_enqueue(cycle).await {
        Err(Error::InvalidInput {
            field,
            reason: rule,
        }) => {
            assert_eq!(field, "jobs");
            assert!(rule.contains("cycle"), "{rule}");
            for name in ["a", "b", "c"] {
                assert!(rule.contains(name), "the rule names the cycle: {rule}");
            }
        }
        other => panic!("expected InvalidInput for a cycle, got {other:?}"),
    }
    let dangling = NewWorkflow::new().job("a", job("k", json!(1)), &[]).job(
        "b",
        job("k", json!(2)),
        &["nope"],
    );
    expect_invalid(
        store.workflow_enqueue(dangling).await,
        "jobs[1].depends_on[0]",
    );
    let named_twice = NewWorkflow::new()
        .job("a", job("k", json!(1)), &[])
        .job("b", job("k", json!(2)), &[])
        .job("c", job("k", json!(3)), &["b", "a", "b"]);
    expect_invalid(
        store.workflow_enqueue(named_twice).await,
        "jobs[2].depends_on[2]",
    );
    let stored_twice = {
        // Set directly: `with_dependency` skips an id it already holds.
        let id = JobId::new_v7();
        let mut twice = job("k", json!(1));
        twice.depends_on = vec![JobId::new_v7(), id, id];
        NewWorkflow::new().job("a", twice, &[])
    };
    expect_invalid(
        store.workflow_enqueue(stored_twice).await,
        "jobs[0].depends_on[2]",
    );
    // The graph's bound on dependencies in all: 101 joins each waiting for the same 1,000
    // jobs are 101,000 dependencies, each join within its own bound of 1,000.
    let heads: Vec<String> = (0..DEPENDENCIES_MAX).map(|i| format!("head-{i}")).collect();
    let head_names: Vec<&str> = heads.iter().map(String::as_str).collect();
    let mut wide = NewWorkflow::new();
    for name in &heads {
        wide = wide.job(name.clone(), job("k", json!(0)), &[]);
    }
    let joins = WORKFLOW_DEPENDENCIES_MAX / DEPENDENCIES_MAX + 1;
    for i in 0..joins {
        wide = wide.job(format!("join-{i}"), job("k", json!(i)), &head_names);
    }
    match store.workflow_enqueue(wide).await {
        Err(Error::InvalidInput { field, reason }) => {
            assert_eq!(field, "jobs");
            assert!(
                reason.contains(&format!("got {}", joins * DEPENDENCIES_MAX)),
                "{reason}"
            );
        }
        other => panic!("expected InvalidInput for too many dependencies, got {other:?}"),
    }
    let repeated =
        NewWorkflow::new()
            .job("a", job("k", json!(1)), &[])
            .job("a", job("k", json!(2)), &[]);
    expect_invalid(store.workflow_enqueue(repeated).await, "jobs[1].name");
    let bad_job = NewWorkflow::new().job("a", job("k", json!(1)), &[]).job(
        "b",
        job("k", json!(2)).with_max_attempts(0),
        &["a"],
    );
    expect_invalid(
        store.workflow_enqueue(bad_job).await,
        "jobs[1].max_attempts",
    );
    let unknown = NewWorkflow::new().job("a", job("k", json!(1)), &[]).job(
        "b",
        job("k", json!(2)).with_dependency(JobId::new_v7()),
        &["a"],
    );
    expect_invalid(store.workflow_enqueue(unknown).await, "jobs[1].depends_on");
    expect_invalid(store.workflow_enqueue(NewWorkflow::new()).await, "jobs");
    assert_eq!(count(&*store).await, 0, "nothing stored");
    let page = store
        .workflows_list(ListWorkflows::default())
        .await
        .unwrap();
    assert!(page.workflows.is_empty());
}

/// A graph is all or nothing: a quota it would pass, or a conflict on one job's idempotency
/// key, stores none of its jobs.
pub async fn workflows_graph_is_all_or_nothing(f: &dyn StoreFactory) {
    let h = f.open(with_quotas(Some(3), None)).await;
    let store = h.store();
    let keyed = enqueue(&*store, job("k", json!(1)).with_idempotency_key("key")).await;
    let too_big = NewWorkflow::new()
        .job("a", job("k", json!(1)), &[])
        .job("b", job("k", json!(2)), &["a"])
        .job("c", job("k", json!(3)), &["a"]);
    expect_quota_exceeded(store.workflow_enqueue(too_big).await, Quota::Global, 1, 3);
    let conflict = NewWorkflow::new().job("a", job("k", json!(1)), &[]).job(
        "b",
        job("k", json!(2)).with_idempotency_key("key"),
        &["a"],
    );
    match store.workflow_enqueue(conflict).await {
        Err(Error::Conflict { existing, .. }) => assert_eq!(existing, Some(keyed.id)),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(count(&*store).await, 1, "nothing stored");
    let fits =
        NewWorkflow::new()
            .job("a", job("k", json!(1)), &[])
            .job("b", job("k", json!(2)), &["a"]);
    store.workflow_enqueue(fits).await.unwrap();
    assert_eq!(count(&*store).await, 3);
}

/// A job of a graph whose unique key a live job holds answers that job (`duplicate`), and the
/// graph's jobs that depend on it by name wait for that job.
pub async fn workflows_duplicate_in_a_graph_is_waited_for(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let holder = start(&*store, job("u", json!(1)).with_unique_key("once")).await;
    let graph = NewWorkflow::new()
        .job("a", job("u", json!(2)).with_unique_key("once"), &[])
        .job("b", job("b", json!(1)), &["a"]);
    let enqueued = store.workflow_enqueue(graph).await.unwrap();
    assert_eq!(enqueued.jobs[0].status, EnqueueStatus::Duplicate);
    assert_eq!(enqueued.jobs[0].job.id, holder.id);
    // The answer is the holder as stored: not a job of the new workflow, so without its name.
    assert_eq!(enqueued.jobs[0].job.name, None);
    assert_eq!(enqueued.jobs[0].job.workflow_id, holder.workflow_id);
    let b = &enqueued.jobs[1].job;
    assert_eq!(b.state, JobState::Waiting);
    assert_eq!(b.depends_on, vec![holder.id]);
    complete(&*store, &holder).await;
    assert_eq!(state_of(&*store, b.id).await, JobState::Queued);
}

/// Children are stored under the parent's valid lease, with its id and workflow; a stale or
/// expired token is `LeaseLost` and stores nothing; a child of another tenant is refused.
pub async fn workflows_children_are_fenced_by_the_parent_lease(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let graph = NewWorkflow::new().job("p", job("parent", json!(1)), &[]);
    let workflow = store.workflow_enqueue(graph).await.unwrap().id;
    let parent = claim(&*store, &["parent"], 1).await.remove(0);
    let kids = children(
        &*store,
        &parent,
        vec![job("child", json!(1)), job("child", json!(2))],
    )
    .await;
    assert_eq!(kids.len(), 2);
    for kid in &kids {
        assert_eq!(kid.workflow_id, Some(workflow));
        assert_eq!(kid.state, JobState::Queued);
    }
    assert_eq!(store.job_get(parent.id).await.unwrap().live_children, 2);
    let before = count(&*store).await;
    expect_lease_lost(
        store
            .children_enqueue(EnqueueChildren {
                parent: parent.id,
                token: stale(parent.fencing_token),
                jobs: vec![job("child", json!(3))],
            })
            .await,
    );
    expect_invalid(
        store
            .children_enqueue(EnqueueChildren {
                parent: parent.id,
                token: parent.fencing_token,
                jobs: vec![
                    job("child", json!(4)),
                    job("child", json!(5)).with_tenant(tenant("other")),
                ],
            })
            .await,
        "jobs[1].tenant",
    );
    expect_not_found(
        store
            .children_enqueue(EnqueueChildren {
                parent: JobId::new_v7(),
                token: parent.fencing_token,
                jobs: vec![job("child", json!(6))],
            })
            .await,
    );
    h.advance(LEASE + Duration::from_secs(1)).await;
    expect_lease_lost(
        store
            .children_enqueue(EnqueueChildren {
                parent: parent.id,
                token: parent.fencing_token,
                jobs: vec![job("child", json!(7))],
            })
            .await,
    );
    assert_eq!(count(&*store).await, before, "nothing stored");
    assert_eq!(store.job_get(parent.id).await.unwrap().live_children, 2);
}

/// `WaitForChildren` leaves the parent waiting without a lease and gives its attempt back;
/// the last child's finish queues it, claimable at once.
pub async fn workflows_parent_waits_for_children_and_resumes_after_the_last(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let parent = start(
        &*store,
        job("parent", json!(1)).with_queue(queue("parents")),
    )
    .await;
    assert_eq!(parent.attempt, 1);
    children(
        &*store,
        &parent,
        vec![job("child", json!(1)), job("child", json!(2))],
    )
    .await;
    let to = finish(&*store, &parent, Finish::WaitForChildren).await;
    assert_eq!(to, JobState::Waiting);
    let waiting = store.job_get(parent.id).await.unwrap();
    assert_eq!(waiting.attempt, 0, "the attempt is given back");
    assert!(waiting.lease_expires_at.is_none() && waiting.lease_owner.is_none());
    assert_eq!(waiting.live_children, 2);
    assert!(claim_from(&*store, &["parents"], &["parent"], 10)
        .await
        .is_empty());

    let kids = claim(&*store, &["child"], 10).await;
    assert_eq!(kids.len(), 2);
    complete(&*store, &kids[0]).await;
    assert_eq!(state_of(&*store, parent.id).await, JobState::Waiting);
    let mut events = store.subscribe().await.unwrap();
    complete(&*store, &kids[1]).await;
    let again = claim_from(&*store, &["parents"], &["parent"], 10).await;
    assert_eq!(again.len(), 1, "the parent runs again at once");
    wait_for(
        &mut events,
        |e| matches!(e, StoreEvent::JobsAvailable { queue } if queue.as_str() == "parents"),
        "JobsAvailable for the parent's queue",
    )
    .await;
    assert_eq!(again[0].attempt, 1);
    assert_eq!(again[0].live_children, 0);
}

/// A parent that waits for children without any (an empty fan-out) is queued at once.
pub async fn workflows_empty_fan_out_resumes_at_once(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let parent = start(&*store, job("parent", json!(1))).await;
    let to = finish(&*store, &parent, Finish::WaitForChildren).await;
    assert_eq!(to, JobState::Queued);
    let again = claim(&*store, &["parent"], 10).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 1, "the attempt was given back");
}

/// The parent runs again after its children and reads their outcomes: states, results and
/// errors, through `jobs_list` filtered by parent. A child's failure does not fail it.
pub async fn workflows_parent_reads_its_children_outcomes(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let parent = start(&*store, job("parent", json!(1))).await;
    let kids = children(
        &*store,
        &parent,
        vec![
            job("ok", json!(1)),
            job("bad", json!(2)).with_max_attempts(1),
            job("gone", json!(3)),
        ],
    )
    .await;
    finish(&*store, &parent, Finish::WaitForChildren).await;
    let ok = claim(&*store, &["ok"], 1).await.remove(0);
    finish(
        &*store,
        &ok,
        Finish::Succeeded {
            result: Some(json!({"moved": 7})),
        },
    )
    .await;
    let bad = claim(&*store, &["bad"], 1).await.remove(0);
    fail(&*store, &bad).await;
    assert_eq!(state_of(&*store, parent.id).await, JobState::Waiting);
    let cancelled = store.job_cancel(kids[2].id).await.unwrap();
    assert_eq!(cancelled.effect, CancelEffect::Cancelled);
    assert_eq!(state_of(&*store, parent.id).await, JobState::Queued);

    let again = claim(&*store, &["parent"], 1).await.remove(0);
    let read = children_of(&*store, again.id).await;
    assert_eq!(
        read.iter().map(|j| j.id).collect::<Vec<_>>(),
        kids.iter().map(|j| j.id).collect::<Vec<_>>()
    );
    assert_eq!(read[0].state, JobState::Succeeded);
    assert_eq!(read[0].result, Some(json!({"moved": 7})));
    assert_eq!(read[1].state, JobState::Failed);
    assert_eq!(read[1].errors.last().unwrap().message, "boom");
    assert_eq!(read[2].state, JobState::Cancelled);
    complete(&*store, &again).await;
}

/// Cancelling a waiting parent cancels its waiting and queued children and requests the cancel
/// of its running one (a `CancelRequested` event), counted in `cascaded`.
pub async fn workflows_cancel_of_a_parent_cascades_to_its_children(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let blocker = enqueue(&*store, job("blocker", json!(1))).await;
    let parent = start(&*store, job("parent", json!(1))).await;
    let kids = children(
        &*store,
        &parent,
        vec![
            job("run", json!(1)),
            job("queued", json!(2)),
            job("wait", json!(3)).with_dependency(blocker.id),
        ],
    )
    .await;
    assert_eq!(kids[2].state, JobState::Waiting);
    finish(&*store, &parent, Finish::WaitForChildren).await;
    let running = claim(&*store, &["run"], 1).await.remove(0);

    let mut events = store.subscribe().await.unwrap();
    let outcome = store.job_cancel(parent.id).await.unwrap();
    assert_eq!(outcome.effect, CancelEffect::Cancelled);
    assert_eq!(outcome.job.state, JobState::Cancelled);
    assert_eq!(outcome.cascaded, 3);
    assert_eq!(state_of(&*store, kids[1].id).await, JobState::Cancelled);
    assert_eq!(state_of(&*store, kids[2].id).await, JobState::Cancelled);
    let signalled = store.job_get(running.id).await.unwrap();
    assert_eq!(signalled.state, JobState::Running);
    assert!(signalled.cancel_requested);
    let beat = store
        .jobs_heartbeat(drover_core::HeartbeatJobs {
            lease: LEASE,
            jobs: vec![drover_core::HeartbeatItem {
                id: running.id,
                token: running.fencing_token,
                meta: None,
                progress: None,
                started: None,
            }],
        })
        .await
        .unwrap();
    assert!(
        matches!(
            beat.as_slice(),
            [drover_core::HeartbeatReply::Extended {
                cancel_requested: true,
                ..
            }]
        ),
        "the running child's heartbeat reports the request: {beat:?}"
    );
    let id = running.id;
    wait_for(
        &mut events,
        |e| matches!(e, StoreEvent::CancelRequested { id: got } if *got == id),
        "CancelRequested for the running child",
    )
    .await;
    assert!(claim(&*store, &["queued", "wait", "parent"], 10)
        .await
        .is_empty());
    // The running child's handler stops: it ends cancelled.
    let to = finish(&*store, &running, Finish::Released).await;
    assert_eq!(to, JobState::Cancelled);
    assert_eq!(state_of(&*store, blocker.id).await, JobState::Queued);
}

/// Cancelling a dependency cancels its dependents and theirs (counted in `cascaded`), but not
/// one that runs regardless.
pub async fn workflows_cancel_of_a_dependency_propagates(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = enqueue(&*store, job("a", json!(1))).await;
    let b = enqueue(&*store, job("b", json!(1)).with_dependency(a.id)).await;
    let c = enqueue(&*store, job("c", json!(1)).with_dependency(b.id)).await;
    let r = enqueue(
        &*store,
        job("r", json!(1)).with_dependency(b.id).run_regardless(),
    )
    .await;
    let outcome = store.job_cancel(a.id).await.unwrap();
    assert_eq!(outcome.effect, CancelEffect::Cancelled);
    assert_eq!(outcome.cascaded, 2, "b and c");
    assert_eq!(state_of(&*store, b.id).await, JobState::Cancelled);
    assert_eq!(state_of(&*store, c.id).await, JobState::Cancelled);
    assert_eq!(state_of(&*store, r.id).await, JobState::Queued);
}

/// Retention keeps a finished dependency of a waiting job, a finished parent with live
/// children, and a finished child of a live parent; once all is terminal it deletes them.
pub async fn workflows_prune_keeps_jobs_live_jobs_need(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let prune = PruneJobs {
        older_than: HOUR,
        limit: 1000,
    };
    // A finished dependency of a job that still waits (for x).
    let a = start(&*store, job("a", json!(1))).await;
    complete(&*store, &a).await;
    let x = enqueue(&*store, job("x", json!(1))).await;
    let b = enqueue(
        &*store,
        job("b", json!(1))
            .with_dependency(a.id)
            .with_dependency(x.id),
    )
    .await;
    assert_eq!(b.state, JobState::Waiting);
    // A parent that finished while its child is live.
    let p = start(&*store, job("p", json!(1))).await;
    let child = children(&*store, &p, vec![job("c", json!(1))])
        .await
        .remove(0);
    complete(&*store, &p).await;
    assert_eq!(store.job_get(p.id).await.unwrap().live_children, 1);
    // A finished child of a parent that is not terminal.
    let q = start(&*store, job("q", json!(1))).await;
    children(&*store, &q, vec![job("d", json!(1))]).await;
    finish(&*store, &q, Finish::WaitForChildren).await;
    let d = claim(&*store, &["d"], 1).await.remove(0);
    complete(&*store, &d).await;
    assert_eq!(state_of(&*store, q.id).await, JobState::Queued);

    h.advance(2 * HOUR).await;
    assert_eq!(store.jobs_prune(prune).await.unwrap(), 0);
    for id in [a.id, p.id, d.id] {
        store.job_get(id).await.expect("kept");
    }

    store.job_cancel(x.id).await.unwrap();
    assert_eq!(state_of(&*store, b.id).await, JobState::Cancelled);
    let c = claim(&*store, &["c"], 1).await.remove(0);
    assert_eq!(c.id, child.id);
    complete(&*store, &c).await;
    let q = claim(&*store, &["q"], 1).await.remove(0);
    complete(&*store, &q).await;
    h.advance(2 * HOUR).await;
    assert_eq!(store.jobs_prune(prune).await.unwrap(), 7);
    assert_eq!(count(&*store).await, 0);
}

/// With delete-on-success, a success of a job that has dependents, or of a child, keeps its
/// row (its result is read); retention deletes it later. A plain success is deleted.
pub async fn workflows_delete_succeeded_keeps_a_dependency_and_a_child(f: &dyn StoreFactory) {
    let h = f
        .open(StoreConfig {
            succeeded_jobs: SucceededJobs::Delete,
            ..unbounded()
        })
        .await;
    let store = h.store();
    let plain = start(&*store, job("plain", json!(1))).await;
    complete(&*store, &plain).await;
    expect_not_found(store.job_get(plain.id).await);

    let a = start(&*store, job("a", json!(1))).await;
    let b = enqueue(&*store, job("b", json!(1)).with_dependency(a.id)).await;
    finish(
        &*store,
        &a,
        Finish::Succeeded {
            result: Some(json!("for b")),
        },
    )
    .await;
    let kept = store.job_get(a.id).await.expect("kept for its dependent");
    assert_eq!(kept.state, JobState::Succeeded);
    assert_eq!(kept.result, Some(json!("for b")));

    let parent = start(&*store, job("parent", json!(1))).await;
    let kid = children(&*store, &parent, vec![job("kid", json!(1))])
        .await
        .remove(0);
    finish(&*store, &parent, Finish::WaitForChildren).await;
    let kid_run = claim(&*store, &["kid"], 1).await.remove(0);
    complete(&*store, &kid_run).await;
    store
        .job_get(kid.id)
        .await
        .expect("a child's success is kept");

    let b_run = claim(&*store, &["b"], 1).await.remove(0);
    assert_eq!(b_run.id, b.id);
    complete(&*store, &b_run).await;
    expect_not_found(store.job_get(b.id).await);
    let parent_run = claim(&*store, &["parent"], 1).await.remove(0);
    complete(&*store, &parent_run).await;
    expect_not_found(store.job_get(parent.id).await);

    h.advance(2 * HOUR).await;
    let pruned = store
        .jobs_prune(PruneJobs {
            older_than: HOUR,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(pruned, 2, "a and the child");
    expect_not_found(store.job_get(a.id).await);
}

/// `workflow_get` answers every job of a workflow, children included; `workflows_list` pages
/// newest first with counts per state; an unknown workflow is `NotFound` (entity workflow).
pub async fn workflows_get_and_list(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let first = store
        .workflow_enqueue(NewWorkflow::new().job("one", job("one", json!(1)), &[]))
        .await
        .unwrap();
    let second = store
        .workflow_enqueue(NewWorkflow::new().job("a", job("a", json!(1)), &[]).job(
            "b",
            job("b", json!(1)),
            &["a"],
        ))
        .await
        .unwrap();
    let third = store
        .workflow_enqueue(NewWorkflow::new().job(
            "t",
            job("t", json!(1)).with_tenant(tenant("acme")),
            &[],
        ))
        .await
        .unwrap();
    assert!(first.id < second.id && second.id < third.id);

    let parent = claim(&*store, &["a"], 1).await.remove(0);
    let kid = children(&*store, &parent, vec![job("kid", json!(1))])
        .await
        .remove(0);
    let got = store.workflow_get(second.id).await.unwrap();
    assert_eq!(got.id, second.id);
    assert_eq!(got.tenant.as_str(), "default");
    let mut ids: Vec<JobId> = got.jobs.iter().map(|j| j.id).collect();
    ids.sort();
    let mut want = vec![second.jobs[0].job.id, second.jobs[1].job.id, kid.id];
    want.sort();
    assert_eq!(ids, want);
    match store.workflow_get(drover_core::WorkflowId::new_v7()).await {
        Err(Error::NotFound { entity, .. }) => assert_eq!(entity, Entity::Workflow),
        other => panic!("expected NotFound, got {other:?}"),
    }

    let page = store
        .workflows_list(ListWorkflows {
            limit: 2,
            ..ListWorkflows::default()
        })
        .await
        .unwrap();
    assert_eq!(
        page.workflows.iter().map(|w| w.id).collect::<Vec<_>>(),
        vec![third.id, second.id]
    );
    let counts = &page.workflows[1].states;
    assert_eq!(counts.get(&JobState::Running), Some(&1));
    assert_eq!(counts.get(&JobState::Waiting), Some(&1));
    assert_eq!(counts.get(&JobState::Queued), Some(&1));
    assert_eq!(page.workflows[1].overall(), JobState::Running);
    assert_eq!(page.next, Some(second.id));
    let rest = store
        .workflows_list(ListWorkflows {
            limit: 2,
            before: page.next,
            ..ListWorkflows::default()
        })
        .await
        .unwrap();
    assert_eq!(
        rest.workflows.iter().map(|w| w.id).collect::<Vec<_>>(),
        vec![first.id]
    );
    assert_eq!(rest.next, None);
    let acme = store
        .workflows_list(ListWorkflows {
            tenant: Some(tenant("acme")),
            ..ListWorkflows::default()
        })
        .await
        .unwrap();
    assert_eq!(
        acme.workflows.iter().map(|w| w.id).collect::<Vec<_>>(),
        vec![third.id]
    );
    expect_invalid(
        store
            .workflows_list(ListWorkflows {
                limit: 1001,
                ..ListWorkflows::default()
            })
            .await,
        "limit",
    );
}

/// `workflow_cancel` cancels every job not terminal (a running one is signalled);
/// `workflow_retry` runs the failed and cancelled ones again, each waiting again for its
/// dependencies that run again.
pub async fn workflows_cancel_and_retry_as_a_whole(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let chain = store
        .workflow_enqueue(
            NewWorkflow::new()
                .job("a", job("a", json!(1)).with_max_attempts(1), &[])
                .job("b", job("b", json!(1)), &["a"])
                .job("c", job("c", json!(1)), &["b"]),
        )
        .await
        .unwrap();
    let [a, b, c] = [0, 1, 2].map(|i| chain.jobs[i].job.id);
    let running = claim(&*store, &["a"], 1).await.remove(0);
    fail(&*store, &running).await;
    assert_eq!(state_of(&*store, b).await, JobState::Cancelled);
    assert_eq!(state_of(&*store, c).await, JobState::Cancelled);

    let retried = store.workflow_retry(chain.id).await.unwrap();
    assert_eq!((retried.id, retried.jobs), (chain.id, 3));
    assert_eq!(state_of(&*store, a).await, JobState::Queued);
    let b_job = store.job_get(b).await.unwrap();
    assert_eq!(
        (b_job.state, b_job.pending_dependencies),
        (JobState::Waiting, 1)
    );
    assert_eq!(state_of(&*store, c).await, JobState::Waiting);
    let again = claim(&*store, &["a"], 1).await.remove(0);
    complete(&*store, &again).await;
    assert_eq!(state_of(&*store, b).await, JobState::Queued);
    let b_run = claim(&*store, &["b"], 1).await.remove(0);
    complete(&*store, &b_run).await;
    let c_run = claim(&*store, &["c"], 1).await.remove(0);
    complete(&*store, &c_run).await;
    assert_eq!(
        store.workflow_retry(chain.id).await.unwrap().jobs,
        0,
        "nothing failed"
    );

    let other = store
        .workflow_enqueue(NewWorkflow::new().job("x", job("x", json!(1)), &[]).job(
            "y",
            job("y", json!(1)),
            &["x"],
        ))
        .await
        .unwrap();
    let x = claim(&*store, &["x"], 1).await.remove(0);
    let cancelled = store.workflow_cancel(other.id).await.unwrap();
    assert_eq!(cancelled.jobs, 2);
    assert!(store.job_get(x.id).await.unwrap().cancel_requested);
    assert_eq!(
        state_of(&*store, other.jobs[1].job.id).await,
        JobState::Cancelled
    );
    expect_not_found(
        store
            .workflow_cancel(drover_core::WorkflowId::new_v7())
            .await,
    );
    expect_not_found(
        store
            .workflow_retry(drover_core::WorkflowId::new_v7())
            .await,
    );
}

/// An operator retry of a finished child makes it a live child of its parent again: the
/// parent waits for it when it next waits for its children.
pub async fn workflows_retry_of_a_child_counts_it_live_again(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let parent = start(&*store, job("parent", json!(1))).await;
    let kid = children(
        &*store,
        &parent,
        vec![job("kid", json!(1)).with_max_attempts(1)],
    )
    .await
    .remove(0);
    finish(&*store, &parent, Finish::WaitForChildren).await;
    let run = claim(&*store, &["kid"], 1).await.remove(0);
    fail(&*store, &run).await;
    let queued = store.job_get(parent.id).await.unwrap();
    assert_eq!((queued.state, queued.live_children), (JobState::Queued, 0));
    store.job_retry(kid.id).await.unwrap();
    assert_eq!(store.job_get(parent.id).await.unwrap().live_children, 1);
    let parent_run = claim(&*store, &["parent"], 1).await.remove(0);
    let to = finish(&*store, &parent_run, Finish::WaitForChildren).await;
    assert_eq!(to, JobState::Waiting);
    let run = claim(&*store, &["kid"], 1).await.remove(0);
    complete(&*store, &run).await;
    assert_eq!(state_of(&*store, parent.id).await, JobState::Queued);
}

/// Children in a paused queue wait there; the parent resumes only after the queue is resumed
/// and they finish.
pub async fn workflows_paused_queue_holds_children(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.queue_pause(queue("slow")).await.unwrap();
    let parent = start(&*store, job("parent", json!(1))).await;
    children(
        &*store,
        &parent,
        vec![
            job("kid", json!(1)).with_queue(queue("slow")),
            job("kid", json!(2)).with_queue(queue("slow")),
            job("fast", json!(3)),
        ],
    )
    .await;
    finish(&*store, &parent, Finish::WaitForChildren).await;
    let fast = claim(&*store, &["fast"], 1).await.remove(0);
    complete(&*store, &fast).await;
    assert!(claim_from(&*store, &["slow"], &["kid"], 10)
        .await
        .is_empty());
    h.advance(HOUR).await;
    assert_eq!(state_of(&*store, parent.id).await, JobState::Waiting);
    store.queue_resume(queue("slow")).await.unwrap();
    let kids = claim_from(&*store, &["slow"], &["kid"], 10).await;
    assert_eq!(kids.len(), 2);
    complete(&*store, &kids[0]).await;
    assert_eq!(state_of(&*store, parent.id).await, JobState::Waiting);
    complete(&*store, &kids[1]).await;
    assert_eq!(claim(&*store, &["parent"], 1).await.len(), 1);
}

/// A worker dies after storing children and before `WaitForChildren`: the parent's lease
/// expires, it is rescued and runs again; its children enqueued again with unique keys answer
/// the stored ones (no duplicate, no extra live child), and it then waits for them.
pub async fn workflows_crash_between_children_and_wait_is_rescued(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let kids_of = || {
        vec![
            job("kid", json!(1)).with_unique_key("kid-1"),
            job("kid", json!(2)).with_unique_key("kid-2"),
        ]
    };
    let parent = start(&*store, job("parent", json!(1)).with_max_attempts(3)).await;
    let first = children(&*store, &parent, kids_of()).await;
    // The worker dies here.
    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: Vec::new(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(rescued.len(), 1);
    assert_eq!(
        (rescued[0].id, rescued[0].to),
        (parent.id, JobState::Queued)
    );
    expect_lease_lost(
        store
            .job_finish(parent.id, parent.fencing_token, Finish::WaitForChildren)
            .await,
    );

    let again = claim(&*store, &["parent"], 1).await.remove(0);
    let answers = store
        .children_enqueue(EnqueueChildren {
            parent: again.id,
            token: again.fencing_token,
            jobs: kids_of(),
        })
        .await
        .unwrap();
    for (answer, stored) in answers.iter().zip(&first) {
        assert_eq!(answer.status, EnqueueStatus::Duplicate);
        assert_eq!(answer.job.id, stored.id);
    }
    assert_eq!(store.job_get(parent.id).await.unwrap().live_children, 2);
    assert_eq!(children_of(&*store, parent.id).await.len(), 2);
    let to = finish(&*store, &again, Finish::WaitForChildren).await;
    assert_eq!(to, JobState::Waiting);
    let kids = claim(&*store, &["kid"], 10).await;
    assert_eq!(kids.len(), 2);
    finish_all(&*store, &kids, Finish::Succeeded { result: None }).await;
    let last = claim(&*store, &["parent"], 1).await;
    assert_eq!(last.len(), 1);
    complete(&*store, &last[0]).await;
    assert_eq!(count(&*store).await, 3);
}

/// A chain 1,000 deep runs through, one link at a time, each link claimable as soon as the
/// one before finished.
pub async fn workflows_chain_of_a_thousand_completes(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    const DEPTH: usize = 1_000;
    let names: Vec<String> = (0..DEPTH).map(|i| format!("s{i}")).collect();
    let mut graph = NewWorkflow::new();
    for (i, name) in names.iter().enumerate() {
        let before: Vec<&str> = if i == 0 {
            Vec::new()
        } else {
            vec![names[i - 1].as_str()]
        };
        graph = graph.job(name.clone(), job("step", json!(i)), &before);
    }
    let enqueued = store.workflow_enqueue(graph).await.unwrap();
    assert_eq!(enqueued.jobs.len(), DEPTH);
    for (i, name) in names.iter().enumerate() {
        let claimed = claim(&*store, &["step"], 10).await;
        assert_eq!(claimed.len(), 1, "link {i}: exactly one link is ready");
        assert_eq!(claimed[0].name.as_deref(), Some(name.as_str()));
        complete(&*store, &claimed[0]).await;
    }
    let summary = store
        .workflows_list(ListWorkflows::default())
        .await
        .unwrap()
        .workflows
        .remove(0);
    assert_eq!(
        summary.states.get(&JobState::Succeeded),
        Some(&(DEPTH as u64))
    );
    assert_eq!(summary.overall(), JobState::Succeeded);
}

/// A parent fans out 10,000 children (the bound: one more is refused) and waits; they run in
/// big batches; the last one's finish queues the parent.
pub async fn workflows_fan_out_of_ten_thousand_children_completes(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    const CHILDREN: usize = 10_000;
    let parent = start(&*store, job("parent", json!(1))).await;
    let kids: Vec<NewJob> = (0..CHILDREN).map(|i| job("kid", json!(i))).collect();
    let answers = store
        .children_enqueue(EnqueueChildren {
            parent: parent.id,
            token: parent.fencing_token,
            jobs: kids,
        })
        .await
        .unwrap();
    assert_eq!(answers.len(), CHILDREN);
    // One more live child than the bound is refused, and stores nothing.
    expect_invalid(
        store
            .children_enqueue(EnqueueChildren {
                parent: parent.id,
                token: parent.fencing_token,
                jobs: vec![job("kid", json!("one too many"))],
            })
            .await,
        "jobs",
    );
    assert_eq!(
        store.job_get(parent.id).await.unwrap().live_children,
        10_000
    );
    let snapshot = store.queue_snapshot().await.unwrap();
    assert_eq!(snapshot.queues[0].count(JobState::Queued), CHILDREN as u64);
    let to = finish(&*store, &parent, Finish::WaitForChildren).await;
    assert_eq!(to, JobState::Waiting);
    let mut done = 0;
    while done < CHILDREN {
        let batch = claim(&*store, &["kid"], 2_500).await;
        assert!(!batch.is_empty(), "children left to claim after {done}");
        assert_eq!(state_of(&*store, parent.id).await, JobState::Waiting);
        finish_all(&*store, &batch, Finish::Succeeded { result: None }).await;
        done += batch.len();
    }
    assert_eq!(done, CHILDREN);
    let again = claim(&*store, &["parent"], 1).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].live_children, 0);
}

/// A job that a rescue or a reconcile ends propagates in the same step: a child a rescue
/// fails for good resumes its waiting parent; a dependency a reconciler resolves failed
/// cancels its dependent, one resolved succeeded queues its dependent.
pub async fn workflows_rescue_and_reconcile_ends_propagate(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let parent = start(&*store, job("parent", json!(1))).await;
    let kid = children(
        &*store,
        &parent,
        vec![job("kid", json!(1)).with_max_attempts(1)],
    )
    .await
    .remove(0);
    finish(&*store, &parent, Finish::WaitForChildren).await;
    let kid_run = claim(&*store, &["kid"], 1).await.remove(0);
    assert_eq!(kid_run.id, kid.id);
    let bad = start(&*store, job("recon", json!(1))).await;
    let good = start(&*store, job("recon", json!(2))).await;
    let after_bad = enqueue(&*store, job("after", json!(1)).with_dependency(bad.id)).await;
    let after_good = enqueue(&*store, job("after", json!(2)).with_dependency(good.id)).await;

    h.advance(LEASE + Duration::from_secs(1)).await;
    let rescued = store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: vec![super::kind("recon")],
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(rescued.len(), 3);
    assert_eq!(state_of(&*store, kid.id).await, JobState::Failed);
    assert_eq!(state_of(&*store, parent.id).await, JobState::Queued);
    assert_eq!(state_of(&*store, after_bad.id).await, JobState::Waiting);

    let sweep = store
        .jobs_claim_reconciling(drover_core::ClaimReconciling {
            worker: super::worker("sweeper"),
            kinds: vec![super::kind("recon")],
            limit: 10,
            lease: LEASE,
        })
        .await
        .unwrap();
    assert_eq!(sweep.len(), 2);
    for held in sweep {
        let resolution = if held.id == bad.id {
            drover_core::Resolution::Failed {
                message: "not done".into(),
            }
        } else {
            drover_core::Resolution::Succeeded
        };
        store
            .job_reconcile(held.id, held.fencing_token, resolution)
            .await
            .unwrap();
    }
    assert_eq!(state_of(&*store, after_bad.id).await, JobState::Cancelled);
    assert_eq!(state_of(&*store, after_good.id).await, JobState::Queued);
    assert_eq!(claim(&*store, &["after"], 10).await.len(), 1);
}

/// `jobs_get` answers the stored jobs among the ids, in the order asked, and refuses more
/// than 1,000 ids.
pub async fn workflows_jobs_get_answers_in_the_order_asked(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = enqueue(&*store, job("k", json!(1))).await;
    let b = enqueue(&*store, job("k", json!(2))).await;
    let got = store
        .jobs_get(vec![b.id, JobId::new_v7(), a.id])
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![b.id, a.id]
    );
    assert_eq!(got[1], a);
    assert!(store.jobs_get(Vec::new()).await.unwrap().is_empty());
    let many: Vec<JobId> = (0..1_001).map(|_| JobId::new_v7()).collect();
    expect_invalid(store.jobs_get(many).await, "ids");
}

/// A retry waits for what still runs or runs again: a workflow retry counts a live dependency
/// outside the workflow; a job retry of a job cancelled by one failed dependency waits for its
/// other, live one; a retried parent waits for its retried children instead of running beside
/// them.
pub async fn workflows_retry_waits_for_live_dependencies_and_retried_children(
    f: &dyn StoreFactory,
) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    // A job outside any workflow that stays live throughout.
    let outside = enqueue(&*store, job("outside", json!(1))).await;
    let graph = store
        .workflow_enqueue(
            NewWorkflow::new()
                .job("a", job("a", json!(1)).with_max_attempts(1), &[])
                .job("k", job("k", json!(1)).with_dependency(outside.id), &["a"]),
        )
        .await
        .unwrap();
    let k = graph.jobs[1].job.id;
    let run = claim(&*store, &["a"], 1).await.remove(0);
    fail(&*store, &run).await;
    assert_eq!(state_of(&*store, k).await, JobState::Cancelled);
    assert_eq!(store.workflow_retry(graph.id).await.unwrap().jobs, 2);
    let waiting = store.job_get(k).await.unwrap();
    assert_eq!(
        (waiting.state, waiting.pending_dependencies),
        (JobState::Waiting, 2),
        "waits for its retried dependency and for the live one outside"
    );
    let again = claim(&*store, &["a"], 1).await.remove(0);
    complete(&*store, &again).await;
    let waiting = store.job_get(k).await.unwrap();
    assert_eq!(
        (waiting.state, waiting.pending_dependencies),
        (JobState::Waiting, 1)
    );
    assert!(claim(&*store, &["k"], 1).await.is_empty());
    let outside_run = claim(&*store, &["outside"], 1).await.remove(0);
    complete(&*store, &outside_run).await;
    assert_eq!(state_of(&*store, k).await, JobState::Queued);

    // A job retry: cancelled by a failed dependency while another still runs.
    let failing = enqueue(&*store, job("f", json!(1)).with_max_attempts(1)).await;
    let slow = enqueue(&*store, job("slow", json!(1))).await;
    let joined = enqueue(
        &*store,
        job("j", json!(1))
            .with_dependency(failing.id)
            .with_dependency(slow.id),
    )
    .await;
    let slow_run = claim(&*store, &["slow"], 1).await.remove(0);
    let failing_run = claim(&*store, &["f"], 1).await.remove(0);
    fail(&*store, &failing_run).await;
    assert_eq!(state_of(&*store, joined.id).await, JobState::Cancelled);
    let retried = store.job_retry(joined.id).await.unwrap();
    assert_eq!(
        (retried.state, retried.pending_dependencies),
        (JobState::Waiting, 1),
        "waits for its dependency still running"
    );
    assert!(claim(&*store, &["j"], 1).await.is_empty());
    complete(&*store, &slow_run).await;
    assert_eq!(state_of(&*store, joined.id).await, JobState::Queued);

    // A workflow retry of a failed parent and its failed child.
    let family = store
        .workflow_enqueue(NewWorkflow::new().job("p", job("p", json!(1)).with_max_attempts(1), &[]))
        .await
        .unwrap();
    let parent_run = claim(&*store, &["p"], 1).await.remove(0);
    let child = children(
        &*store,
        &parent_run,
        vec![job("c", json!(1)).with_max_attempts(1)],
    )
    .await
    .remove(0);
    assert_eq!(
        finish(&*store, &parent_run, Finish::WaitForChildren).await,
        JobState::Waiting
    );
    let child_run = claim(&*store, &["c"], 1).await.remove(0);
    fail(&*store, &child_run).await;
    let resumed = claim(&*store, &["p"], 1).await.remove(0);
    fail(&*store, &resumed).await;
    assert_eq!(store.workflow_retry(family.id).await.unwrap().jobs, 2);
    let parent = store.job_get(family.jobs[0].job.id).await.unwrap();
    assert_eq!(
        (parent.state, parent.live_children),
        (JobState::Waiting, 1),
        "the retried parent waits for its retried child"
    );
    assert!(claim(&*store, &["p"], 1).await.is_empty());
    let child_again = claim(&*store, &["c"], 1).await.remove(0);
    assert_eq!(child_again.id, child.id);
    complete(&*store, &child_again).await;
    assert_eq!(
        state_of(&*store, family.jobs[0].job.id).await,
        JobState::Queued
    );
}

/// A graph sent again with the same idempotency keys (a client retrying after a timeout)
/// answers the workflow it created the first time, every job replayed, and stores no empty
/// workflow beside it.
pub async fn workflows_resent_graph_answers_the_first_workflow(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let graph = || {
        NewWorkflow::new()
            .job("a", job("a", json!(1)).with_idempotency_key("ik-a"), &[])
            .job("b", job("b", json!(1)).with_idempotency_key("ik-b"), &["a"])
    };
    let first = store.workflow_enqueue(graph()).await.unwrap();
    let again = store.workflow_enqueue(graph()).await.unwrap();
    assert_eq!(again.id, first.id);
    assert!(again
        .jobs
        .iter()
        .all(|a| a.status == EnqueueStatus::Replayed));
    let page = store
        .workflows_list(drover_core::ListWorkflows::default())
        .await
        .unwrap();
    assert_eq!(page.workflows.len(), 1, "no empty workflow was stored");
    assert_eq!(store.workflow_get(first.id).await.unwrap().jobs.len(), 2);
}

/// A finish batch answers each item with the state the batch leaves its job in, the same as
/// the items one at a time: a parent whose cancel was requested waits for its children and so
/// ends cancelled, which cancels its running child; that child's failure, later in the same
/// batch, answers `cancelled` (not `queued`, the state its own item alone would give).
pub async fn workflows_batched_finish_answers_the_state_its_propagation_left(f: &dyn StoreFactory) {
    for together in [true, false] {
        let h = f.open(unbounded()).await;
        let store = h.store();
        let parent = start(&*store, job("parent", json!(1))).await;
        let requested = store.job_cancel(parent.id).await.unwrap();
        assert_eq!(requested.job.state, JobState::Running);
        children(&*store, &parent, vec![job("child", json!(2))]).await;
        let child = claim(&*store, &["child"], 1).await.remove(0);
        let items = vec![
            FinishItem {
                parent: None,
                id: parent.id,
                token: parent.fencing_token,
                finish: Finish::WaitForChildren,
                started: None,
            },
            FinishItem {
                parent: None,
                id: child.id,
                token: child.fencing_token,
                finish: Finish::Failed {
                    message: "boom".into(),
                    retry: Retry::After(Duration::ZERO),
                },
                started: None,
            },
        ];
        let replies = if together {
            store.jobs_finish(items).await.unwrap()
        } else {
            let mut replies = Vec::new();
            for item in items {
                replies.extend(store.jobs_finish(vec![item]).await.unwrap());
            }
            replies
        };
        assert_eq!(
            replies,
            vec![
                FinishReply::Recorded {
                    id: parent.id,
                    to: JobState::Cancelled
                },
                FinishReply::Recorded {
                    id: child.id,
                    to: JobState::Cancelled
                },
            ],
            "together: {together}"
        );
        assert_eq!(state_of(&*store, child.id).await, JobState::Cancelled);
        assert_eq!(state_of(&*store, parent.id).await, JobState::Cancelled);
    }
}

/// A rescue answers each job with the state the rescue leaves it in: a parent whose cancel
/// was requested ends cancelled when its lease expires, which cancels its child whose lease
/// expired in the same rescue (answered `cancelled`, not the `queued` its own expiry gives).
pub async fn workflows_rescue_answers_the_state_its_propagation_left(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let parent = start(&*store, job("parent", json!(1))).await;
    let requested = store.job_cancel(parent.id).await.unwrap();
    assert_eq!(requested.job.state, JobState::Running);
    let kid = children(&*store, &parent, vec![job("kid", json!(1))])
        .await
        .remove(0);
    let kid_run = claim(&*store, &["kid"], 1).await.remove(0);
    assert_eq!(kid_run.id, kid.id);

    h.advance(LEASE + Duration::from_secs(1)).await;
    let mut rescued = store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: Vec::new(),
            limit: 10,
        })
        .await
        .unwrap();
    rescued.sort_by_key(|r| r.id);
    let answered: Vec<(JobId, JobState)> = rescued.iter().map(|r| (r.id, r.to)).collect();
    assert_eq!(
        answered,
        vec![
            (parent.id, JobState::Cancelled),
            (kid.id, JobState::Cancelled)
        ]
    );
    assert_eq!(state_of(&*store, kid.id).await, JobState::Cancelled);
    assert_eq!(state_of(&*store, parent.id).await, JobState::Cancelled);
}

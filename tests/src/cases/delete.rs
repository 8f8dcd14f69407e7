//! Operator delete (docs/design.md section 10, "delete"): a job that is not running or
//! reconciling goes with its key and edges, recorded in the audit log; a running one is
//! refused (cancel it first), and so are the jobs retention keeps for live jobs.

use drover_core::{
    Actor, AuditAction, AuditSource, EnqueueChildren, EnqueueStatus, Error, EventName, Finish,
    JobState, ListAudit, ListJobs, Operated, Operation, RescueExpired,
};
use serde_json::json;

use super::{
    all_jobs, claim, complete, enqueue, expect_invalid_transition, expect_not_found, failed_job,
    job, kind, start, unbounded, LEASE,
};
use crate::StoreFactory;

/// Expects the `Conflict` of a delete the workflow rules refuse, naming `existing`.
#[track_caller]
fn expect_kept<T: std::fmt::Debug>(
    result: drover_core::Result<T>,
    rule: &str,
    existing: Option<drover_core::JobId>,
) {
    match result {
        Err(Error::Conflict {
            reason,
            existing: got,
            ..
        }) => {
            assert!(reason.contains(rule), "{reason} should say {rule}");
            assert!(reason.ends_with("retention keeps it too"), "{reason}");
            assert_eq!(got, existing, "{reason}");
        }
        other => panic!("expected a Conflict ({rule}), got {other:?}"),
    }
}

/// A waiting, queued, succeeded, failed or cancelled job is deleted: it is gone, its
/// idempotency key is free again, and the delete is recorded (`job.delete`, the job, 1).
pub async fn delete_removes_a_job_that_is_not_running(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let queued = enqueue(&*store, job("q", json!(1)).with_idempotency_key("key")).await;
    let succeeded = start(&*store, job("s", json!(1))).await;
    complete(&*store, &succeeded).await;
    let failed = failed_job(&*store, job("f", json!(1))).await;
    let cancelled = enqueue(&*store, job("c", json!(1))).await;
    store.job_cancel(cancelled.id).await.unwrap();
    let blocker = enqueue(&*store, job("b", json!(1))).await;
    let waiting = enqueue(&*store, job("w", json!(1)).with_dependency(blocker.id)).await;
    assert_eq!(waiting.state, JobState::Waiting);
    let ops = Actor::new("ops", AuditSource::Cli);
    for (id, state) in [
        (queued.id, JobState::Queued),
        (succeeded.id, JobState::Succeeded),
        (failed.id, JobState::Failed),
        (cancelled.id, JobState::Cancelled),
        (waiting.id, JobState::Waiting),
    ] {
        match store
            .operate(Operation::JobDelete(id), ops.clone())
            .await
            .unwrap()
        {
            Operated::JobDelete(job) => assert_eq!((job.id, job.state), (id, state)),
            other => panic!("{other:?}"),
        }
        expect_not_found(store.job_get(id).await);
        expect_not_found(store.job_delete(id).await);
    }
    let again = store
        .job_enqueue(job("q", json!(2)).with_idempotency_key("key"))
        .await
        .unwrap();
    assert_eq!(again.status, EnqueueStatus::Created, "the key is free");
    // The deleted waiting job's edge went with it: its dependency ends without reaching it.
    let b = claim(&*store, &["b"], 1).await.remove(0);
    complete(&*store, &b).await;
    let left: Vec<_> = all_jobs(&*store).await.into_iter().map(|j| j.id).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&blocker.id) && left.contains(&again.job.id));

    let records = store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    assert_eq!(records.len(), 5);
    for (entry, id) in records.iter().rev().zip([queued.id, succeeded.id]) {
        assert_eq!(entry.action, AuditAction::JobDelete);
        assert_eq!(entry.target, json!({ "job": id.to_string() }));
        assert_eq!(entry.jobs, 1);
        assert_eq!(entry.tenant.as_ref(), Some(&queued.tenant));
    }
}

/// A running or reconciling job is refused with `InvalidTransition` (event `delete`) telling
/// the operator to cancel it first; it stays, and nothing is recorded.
pub async fn delete_of_a_running_or_reconciling_job_is_refused(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("r", json!(1))).await;
    let ops = Actor::new("ops", AuditSource::Cli);
    let refused = store
        .operate(Operation::JobDelete(running.id), ops.clone())
        .await;
    match &refused {
        Err(err @ Error::InvalidTransition { from, event }) => {
            assert_eq!((*from, *event), (JobState::Running, EventName::Delete));
            assert!(err.to_string().contains("cancel it first"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.job_get(running.id).await.unwrap(), running);
    h.advance(LEASE + std::time::Duration::from_secs(1)).await;
    store
        .jobs_rescue_expired(RescueExpired {
            reconciler_kinds: vec![kind("r")],
            limit: 10,
        })
        .await
        .unwrap();
    expect_invalid_transition(store.job_delete(running.id).await, JobState::Reconciling);
    assert!(store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries
        .is_empty());
    expect_not_found(store.job_delete(drover_core::JobId::new_v7()).await);
}

/// The jobs retention keeps are refused, naming the job in the way: a dependency (finished or
/// not) of a job not terminal, a parent with live children, a live child of a parent and a
/// finished child of a parent not terminal. Once the live jobs end they may go.
pub async fn delete_keeps_the_jobs_live_jobs_need(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let done = start(&*store, job("a", json!(1))).await;
    complete(&*store, &done).await;
    let live = enqueue(&*store, job("x", json!(1))).await;
    let dependent = enqueue(
        &*store,
        job("d", json!(1))
            .with_dependency(done.id)
            .with_dependency(live.id),
    )
    .await;
    expect_kept(
        store.job_delete(done.id).await,
        "depends on",
        Some(dependent.id),
    );
    expect_kept(
        store.job_delete(live.id).await,
        "depends on",
        Some(dependent.id),
    );

    let parent = start(&*store, job("p", json!(1))).await;
    let children = store
        .children_enqueue(EnqueueChildren {
            parent: parent.id,
            token: parent.fencing_token,
            jobs: vec![job("c", json!(1)), job("c", json!(2))],
        })
        .await
        .unwrap();
    let (first, second) = (children[0].job.id, children[1].job.id);
    let to = store
        .job_finish(parent.id, parent.fencing_token, Finish::WaitForChildren)
        .await
        .unwrap();
    assert_eq!(to, JobState::Waiting);
    expect_kept(store.job_delete(parent.id).await, "2 live children", None);
    expect_kept(
        store.job_delete(first).await,
        "child of job",
        Some(parent.id),
    );
    let c = claim(&*store, &["c"], 1).await.remove(0);
    complete(&*store, &c).await;
    expect_kept(
        store.job_delete(c.id).await,
        "while that parent is waiting",
        Some(parent.id),
    );
    let c = claim(&*store, &["c"], 1).await.remove(0);
    assert!([first, second].contains(&c.id));
    complete(&*store, &c).await;
    let p = claim(&*store, &["p"], 1).await.remove(0);
    complete(&*store, &p).await;
    for id in [first, second, parent.id] {
        store
            .job_delete(id)
            .await
            .expect("deleted once the family ended");
    }

    store.job_cancel(live.id).await.unwrap();
    assert_eq!(
        store.job_get(dependent.id).await.unwrap().state,
        JobState::Cancelled
    );
    for id in [done.id, live.id, dependent.id] {
        store
            .job_delete(id)
            .await
            .expect("deleted once its dependent ended");
    }
    assert!(all_jobs(&*store).await.is_empty());
}

/// Both stores agree on what a delete leaves: a deleted finished parent takes its links to its
/// children with it (its children stay, listed under no parent), as retention does; a
/// dependency two live jobs need is refused naming the one of smallest id.
pub async fn delete_of_a_parent_or_dependency_agrees_across_stores(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let parent = start(&*store, job("p", json!(1))).await;
    let children = store
        .children_enqueue(EnqueueChildren {
            parent: parent.id,
            token: parent.fencing_token,
            jobs: vec![job("c", json!(1)), job("c", json!(2))],
        })
        .await
        .unwrap();
    store
        .job_finish(parent.id, parent.fencing_token, Finish::WaitForChildren)
        .await
        .unwrap();
    for _ in 0..2 {
        let c = claim(&*store, &["c"], 1).await.remove(0);
        complete(&*store, &c).await;
    }
    let p = claim(&*store, &["p"], 1).await.remove(0);
    complete(&*store, &p).await;
    let under = |parent| ListJobs {
        parent: Some(parent),
        ..ListJobs::default()
    };
    assert_eq!(
        store.jobs_list(under(parent.id)).await.unwrap().jobs.len(),
        2
    );
    store.job_delete(parent.id).await.unwrap();
    assert!(
        store
            .jobs_list(under(parent.id))
            .await
            .unwrap()
            .jobs
            .is_empty(),
        "no children listed under a deleted parent"
    );
    for child in &children {
        assert_eq!(
            store.job_get(child.job.id).await.unwrap().state,
            JobState::Succeeded
        );
    }

    let done = start(&*store, job("a", json!(1))).await;
    complete(&*store, &done).await;
    let mut dependents: Vec<_> = store
        .jobs_enqueue(
            (0..5)
                .map(|i| job("d", json!(i)).with_dependency(done.id))
                .collect(),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.job.id)
        .collect();
    dependents.sort_unstable();
    match store.job_delete(done.id).await {
        Err(Error::Conflict { existing, .. }) => assert_eq!(existing, Some(dependents[0])),
        other => panic!("{other:?}"),
    }
}

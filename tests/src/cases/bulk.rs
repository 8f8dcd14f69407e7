//! Bulk actions (docs/design.md section 7): cancel, retry or delete a list of ids or every job
//! a filter matches, job by job through each job's own operation, in steps; what the action
//! does not apply to is skipped; one audit record counts the jobs changed; an actor of one
//! tenant touches its own tenant's jobs only.

use drover_core::bounds::{BULK_CHUNK, BULK_IDS_MAX};
use drover_core::{
    Actor, AuditAction, AuditSource, BulkAction, BulkJobs, BulkOutcome, JobId, JobState, ListAudit,
    ListJobs, Operated, Operation,
};
use serde_json::json;

use super::{all_jobs, enqueue, expect_invalid, failed_job, job, queue, start, tenant, unbounded};
use crate::StoreFactory;

fn ops() -> Actor {
    Actor::new("ops", AuditSource::Cli)
}

async fn bulk(
    store: &dyn drover_core::JobStore,
    bulk: BulkJobs,
    actor: Actor,
) -> drover_core::Result<BulkOutcome> {
    match store.operate(Operation::JobsBulk(bulk), actor).await? {
        Operated::JobsBulk(outcome) => Ok(outcome),
        other => panic!("{other:?}"),
    }
}

/// A list of ids: each job the action applies to is changed, the others are skipped, unknown
/// ids are counted as not found; one record names the ids and counts the jobs changed.
pub async fn bulk_by_ids_changes_what_applies_and_skips_the_rest(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let queued = enqueue(&*store, job("q", json!(1))).await;
    let running = start(&*store, job("r", json!(1))).await;
    let failed = failed_job(&*store, job("f", json!(1))).await;
    let unknown = JobId::new_v7();
    let ids = vec![queued.id, running.id, failed.id, unknown];

    let retried = bulk(
        &*store,
        BulkJobs::ids(BulkAction::Retry, ids.clone()),
        ops(),
    )
    .await
    .unwrap();
    assert_eq!(
        retried,
        BulkOutcome {
            changed: 1,
            skipped: 2,
            not_found: 1,
            ..BulkOutcome::default()
        }
    );
    assert_eq!(
        store.job_get(failed.id).await.unwrap().state,
        JobState::Queued
    );
    let cancelled = bulk(
        &*store,
        BulkJobs::ids(BulkAction::Cancel, ids.clone()),
        ops(),
    )
    .await
    .unwrap();
    assert_eq!((cancelled.changed, cancelled.not_found), (3, 1));
    assert!(store.job_get(running.id).await.unwrap().cancel_requested);
    let deleted = bulk(
        &*store,
        BulkJobs::ids(BulkAction::Delete, ids.clone()),
        ops(),
    )
    .await
    .unwrap();
    assert_eq!(
        deleted,
        BulkOutcome {
            changed: 2,
            skipped: 1,
            not_found: 1,
            ..BulkOutcome::default()
        },
        "the running job stays"
    );
    let left: Vec<JobId> = all_jobs(&*store).await.iter().map(|j| j.id).collect();
    assert_eq!(left, vec![running.id]);

    let records = store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    let seen: Vec<(AuditAction, u64)> = records.iter().rev().map(|e| (e.action, e.jobs)).collect();
    assert_eq!(
        seen,
        [
            (AuditAction::JobsRetry, 1),
            (AuditAction::JobsCancel, 3),
            (AuditAction::JobsDelete, 2)
        ]
    );
    let named: Vec<String> = ids.iter().map(ToString::to_string).collect();
    assert_eq!(records[0].target, json!({ "ids": named }));
    assert_eq!(
        records[0].tenant,
        Some(tenant("default")),
        "an actor of every tenant, many jobs of one tenant"
    );
}

/// A filter: every matching job is reached across several steps (more than one chunk), and
/// only those; the record names the filter.
pub async fn bulk_by_filter_reaches_every_match_in_steps(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let n = BULK_CHUNK as usize * 2 + 7;
    let batch = (0..n)
        .map(|i| job("b", json!(i)).with_queue(queue("bulk")))
        .chain((0..3).map(|i| job("b", json!(i)).with_queue(queue("other"))))
        .collect();
    store.jobs_enqueue(batch).await.unwrap();
    let filter = ListJobs {
        queue: Some(queue("bulk")),
        state: Some(JobState::Queued),
        ..ListJobs::default()
    };
    let cancelled = bulk(
        &*store,
        BulkJobs::filter(BulkAction::Cancel, filter.clone()),
        ops(),
    )
    .await
    .unwrap();
    assert_eq!(
        cancelled,
        BulkOutcome {
            changed: n as u64,
            ..BulkOutcome::default()
        }
    );
    let again = bulk(&*store, BulkJobs::filter(BulkAction::Cancel, filter), ops())
        .await
        .unwrap();
    assert_eq!(again, BulkOutcome::default(), "nothing matches any more");
    let deleted = bulk(
        &*store,
        BulkJobs::filter(
            BulkAction::Delete,
            ListJobs {
                state: Some(JobState::Cancelled),
                ..ListJobs::default()
            },
        ),
        ops(),
    )
    .await
    .unwrap();
    assert_eq!(deleted.changed, n as u64);
    let left = all_jobs(&*store).await;
    assert_eq!(left.len(), 3);
    assert!(left
        .iter()
        .all(|j| j.queue == queue("other") && j.state == JobState::Queued));
    let records = store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    assert_eq!(records.len(), 3);
    assert_eq!(records[2].action, AuditAction::JobsCancel);
    assert_eq!(records[2].jobs, n as u64, "one record for every step");
    assert_eq!(
        records[2].target,
        json!({"filter": {"state": "queued", "queue": "bulk"}})
    );
}

/// An actor of one tenant touches its own tenant's jobs only: a filter without a tenant gets
/// the actor's, one naming another is refused, and another tenant's ids are not found.
pub async fn bulk_is_scoped_to_the_actors_tenant(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mine = enqueue(&*store, job("k", json!(1)).with_tenant(tenant("a"))).await;
    let theirs = enqueue(&*store, job("k", json!(1)).with_tenant(tenant("b"))).await;
    let actor = ops().for_tenant(tenant("a"));
    let by_ids = bulk(
        &*store,
        BulkJobs::ids(BulkAction::Cancel, vec![theirs.id]),
        actor.clone(),
    )
    .await
    .unwrap();
    assert_eq!((by_ids.changed, by_ids.not_found), (0, 1));
    let everything = bulk(
        &*store,
        BulkJobs::filter(BulkAction::Cancel, ListJobs::default()),
        actor.clone(),
    )
    .await
    .unwrap();
    assert_eq!(everything.changed, 1);
    assert_eq!(
        store.job_get(mine.id).await.unwrap().state,
        JobState::Cancelled
    );
    assert_eq!(
        store.job_get(theirs.id).await.unwrap().state,
        JobState::Queued
    );
    let other = ListJobs {
        tenant: Some(tenant("b")),
        ..ListJobs::default()
    };
    expect_invalid(
        bulk(&*store, BulkJobs::filter(BulkAction::Cancel, other), actor).await,
        "filter.tenant",
    );
    let records = store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    assert_eq!(records.len(), 2, "a refused action records nothing");
    assert_eq!(records[0].tenant, Some(tenant("a")));
    assert_eq!(records[0].target, json!({"filter": {"tenant": "a"}}));
}

/// More than 1,000 ids, none, or one twice are refused naming `ids`; nothing changes.
pub async fn bulk_rejects_a_bad_selection(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let queued = enqueue(&*store, job("k", json!(1))).await;
    let many: Vec<JobId> = std::iter::once(queued.id)
        .chain((0..BULK_IDS_MAX).map(|_| JobId::new_v7()))
        .collect();
    for ids in [many, vec![], vec![queued.id, queued.id]] {
        expect_invalid(
            bulk(&*store, BulkJobs::ids(BulkAction::Cancel, ids), ops()).await,
            "ids",
        );
    }
    let bad_meta = ListJobs {
        meta: Some(json!("x")),
        ..ListJobs::default()
    };
    expect_invalid(
        bulk(
            &*store,
            BulkJobs::filter(BulkAction::Delete, bad_meta),
            ops(),
        )
        .await,
        "filter.meta",
    );
    assert_eq!(
        store.job_get(queued.id).await.unwrap().state,
        JobState::Queued
    );
    assert!(store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries
        .is_empty());
}

/// A bulk cancel's record counts the jobs its cancels reached (dependents cancelled with
/// them), as a single `job.cancel` counts 1 + cascaded; a dependent also selected is counted
/// once.
pub async fn bulk_cancel_counts_the_jobs_it_cascades_to(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = enqueue(&*store, job("a", json!(1))).await;
    let b = enqueue(&*store, job("b", json!(1)).with_dependency(a.id)).await;
    let c = enqueue(&*store, job("c", json!(1)).with_dependency(b.id)).await;
    let d = enqueue(&*store, job("d", json!(1))).await;
    let outcome = bulk(
        &*store,
        BulkJobs::ids(BulkAction::Cancel, vec![a.id, c.id, d.id]),
        ops(),
    )
    .await
    .unwrap();
    assert_eq!(
        outcome,
        BulkOutcome {
            changed: 2,
            skipped: 1,
            not_found: 0,
            cascaded: 2
        },
        "a reaches b and c; c is then cancelled already"
    );
    for id in [a.id, b.id, c.id, d.id] {
        assert_eq!(store.job_get(id).await.unwrap().state, JobState::Cancelled);
    }
    let records = store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    assert_eq!(
        records
            .iter()
            .map(|e| (e.action, e.jobs))
            .collect::<Vec<_>>(),
        [(AuditAction::JobsCancel, 4)]
    );
}

/// An actor of every tenant acting on one tenant's jobs is recorded with that tenant (visible
/// in the tenant's audit log): the filter's tenant, or the tenant all the ids' jobs share; ids
/// of jobs of several tenants are recorded with none.
pub async fn bulk_of_one_tenants_jobs_is_recorded_with_that_tenant(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let acme = [
        enqueue(&*store, job("a", json!(1)).with_tenant(tenant("acme"))).await,
        enqueue(&*store, job("a", json!(2)).with_tenant(tenant("acme"))).await,
    ];
    let other = enqueue(&*store, job("o", json!(1)).with_tenant(tenant("other"))).await;

    let by_filter = ListJobs {
        tenant: Some(tenant("acme")),
        ..ListJobs::default()
    };
    bulk(
        &*store,
        BulkJobs::filter(BulkAction::Cancel, by_filter),
        ops(),
    )
    .await
    .unwrap();
    bulk(
        &*store,
        BulkJobs::ids(
            BulkAction::Retry,
            vec![acme[0].id, acme[1].id, JobId::new_v7()],
        ),
        ops(),
    )
    .await
    .unwrap();
    bulk(
        &*store,
        BulkJobs::ids(BulkAction::Cancel, vec![acme[0].id, other.id]),
        ops(),
    )
    .await
    .unwrap();

    let records = store
        .audit_list(ListAudit::default())
        .await
        .unwrap()
        .entries;
    let tenants: Vec<_> = records.iter().rev().map(|e| e.tenant.clone()).collect();
    assert_eq!(tenants, [Some(tenant("acme")), Some(tenant("acme")), None]);
    let acme_log = store
        .audit_list(ListAudit {
            tenant: Some(tenant("acme")),
            ..ListAudit::default()
        })
        .await
        .unwrap()
        .entries;
    assert_eq!(acme_log.len(), 2);
}

/// A bulk action's scope is read by `jobs_tenants`: the tenant of each stored job among the
/// ids, ids of no job left out, no large field read; over 1,000 ids is refused.
pub async fn bulk_scope_reads_only_ids_and_tenants(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let acme = enqueue(&*store, job("a", json!(1)).with_tenant(tenant("acme"))).await;
    let plain = enqueue(&*store, job("p", json!(1))).await;
    let mut found = store
        .jobs_tenants(vec![plain.id, JobId::new_v7(), acme.id])
        .await
        .unwrap();
    found.sort_by_key(|(id, _)| *id);
    let mut expected = vec![(acme.id, tenant("acme")), (plain.id, tenant("default"))];
    expected.sort_by_key(|(id, _)| *id);
    assert_eq!(found, expected);
    expect_invalid(
        store
            .jobs_tenants(vec![JobId::new_v7(); BULK_IDS_MAX + 1])
            .await,
        "ids",
    );
}

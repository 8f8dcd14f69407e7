//! The audit log (docs/audit.md): `operate` runs an operator write and stores its record in
//! the same step; a refused write stores none; the list pages newest first and filters; the
//! retention prune deletes only old records, a bounded number at a time.

use std::time::Duration;

use drover_core::{
    Actor, AuditAction, AuditEntry, AuditSource, CancelEffect, JobState, JobStore, LimitPolicy,
    ListAudit, NewSchedule, Operated, Operation, PruneAudit, PruneJobs, ScheduleName, WorkflowId,
};
use serde_json::json;

use super::{
    enqueue, expect_invalid, expect_invalid_transition, expect_not_found, job, kind, limit_key,
    queue, start, tenant, unbounded,
};
use crate::StoreFactory;

const HOUR: Duration = Duration::from_secs(3600);

fn operator() -> Actor {
    Actor::new("token:0a1b2c3d", AuditSource::Api)
}

async fn records(store: &dyn JobStore, query: ListAudit) -> Vec<AuditEntry> {
    store.audit_list(query).await.unwrap().entries
}

async fn every_record(store: &dyn JobStore) -> Vec<AuditEntry> {
    records(store, ListAudit::default()).await
}

/// Every operation is recorded once, newest first, with its action, target, the jobs it
/// touched, who and from where, dated by the store's clock between the calls around it; the
/// write itself behaves as its own method.
pub async fn audit_every_operation_is_recorded_with_its_write(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let queued = enqueue(&*store, job("a.queued", json!({"secret": 1}))).await;
    let running = start(&*store, job("a.running", json!(1))).await;
    let delayed = enqueue(
        &*store,
        job("a.later", json!(1)).with_run_at(drover_core::RunAt::After(HOUR)),
    )
    .await;
    let policy = LimitPolicy::new(limit_key("mail"), Some(2), None).unwrap();
    let schedule = NewSchedule::new(
        ScheduleName::parse("nightly").unwrap(),
        "0 3 * * *".to_owned(),
        kind("report"),
        json!({"secret": 2}),
    );
    let before = store.now().await.unwrap();
    let actor = operator().for_tenant(tenant("acme"));
    let cli = Actor::new("ops", AuditSource::Cli);
    let operations = [
        (Operation::JobCancel(queued.id), &cli),
        (Operation::JobRetry(queued.id), &cli),
        (Operation::JobCancel(running.id), &actor),
        (Operation::JobRequeue(delayed.id), &cli),
        (Operation::QueuePause(queue("mail")), &cli),
        (Operation::QueueResume(queue("mail")), &cli),
        (Operation::LimitSet(policy.clone()), &cli),
        (Operation::LimitClear(policy.key.clone()), &cli),
        (Operation::ScheduleUpsert(schedule), &cli),
        (
            Operation::ScheduleRemove(ScheduleName::parse("nightly").unwrap()),
            &cli,
        ),
        (
            Operation::JobsPrune(PruneJobs {
                older_than: HOUR,
                limit: 10,
            }),
            &cli,
        ),
    ];
    let mut answers = Vec::new();
    for (operation, by) in operations.iter().cloned() {
        answers.push(store.operate(operation, by.clone()).await.unwrap());
    }
    let after = store.now().await.unwrap();
    match &answers[0] {
        Operated::JobCancel(outcome) => {
            assert_eq!(outcome.effect, CancelEffect::Cancelled);
            assert_eq!(outcome.job.state, JobState::Cancelled);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&answers[1], Operated::JobRetry(job) if job.state == JobState::Queued));
    assert!(matches!(&answers[2], Operated::JobCancel(o) if o.effect == CancelEffect::Requested));
    assert!(matches!(&answers[3], Operated::JobRequeue(o) if o.changed));
    assert!(matches!(&answers[4], Operated::QueuePause(c) if c.changed && c.queue.paused));
    assert_eq!(store.limits_list().await.unwrap(), vec![]);
    assert_eq!(store.schedules_list().await.unwrap(), vec![]);

    let stored = every_record(&*store).await;
    let actions: Vec<AuditAction> = stored.iter().rev().map(|e| e.action).collect();
    let expected: Vec<AuditAction> = operations.iter().map(|(o, _)| o.action()).collect();
    assert_eq!(actions, expected, "one record per operation, newest first");
    assert!(stored.windows(2).all(|w| w[0].id > w[1].id), "{stored:?}");
    for (entry, (operation, by)) in stored.iter().rev().zip(&operations) {
        assert_eq!(entry.target, operation.target(), "{entry:?}");
        assert_eq!((&entry.actor, entry.source), (&by.name, by.source));
        assert!(before <= entry.at && entry.at <= after, "{entry:?}");
        assert!(
            !entry.target.to_string().contains("secret"),
            "args stay out of the log: {entry:?}"
        );
    }
    let by_action = |action: AuditAction| {
        stored
            .iter()
            .filter(|e| e.action == action)
            .map(|e| (e.jobs, e.tenant.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        by_action(AuditAction::JobCancel),
        [(1, Some(tenant("acme"))), (1, Some(queued.tenant.clone()))],
        "the actor's tenant, else the job's"
    );
    assert_eq!(
        by_action(AuditAction::JobRequeue),
        [(1, Some(delayed.tenant))]
    );
    assert_eq!(by_action(AuditAction::QueuePause), [(0, None)]);
    assert_eq!(by_action(AuditAction::JobsPrune), [(0, None)]);
    assert_eq!(
        stored[0].target,
        json!({"older_than_ms": 3_600_000, "limit": 10})
    );
}

/// A refused write stores no record, and a record is refused with its write: an unknown job, a
/// refused transition, an unknown workflow, limit or schedule, and an invalid actor (then the
/// job is left as it was).
pub async fn audit_a_refused_operation_records_nothing(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let queued = enqueue(&*store, job("k", json!(1))).await;
    expect_not_found(
        store
            .operate(
                Operation::JobCancel(drover_core::JobId::new_v7()),
                operator(),
            )
            .await,
    );
    expect_invalid_transition(
        store
            .operate(Operation::JobRetry(queued.id), operator())
            .await,
        JobState::Queued,
    );
    expect_not_found(
        store
            .operate(Operation::WorkflowCancel(WorkflowId::new_v7()), operator())
            .await,
    );
    expect_not_found(
        store
            .operate(Operation::LimitClear(limit_key("none")), operator())
            .await,
    );
    expect_not_found(
        store
            .operate(
                Operation::ScheduleRemove(ScheduleName::parse("none").unwrap()),
                operator(),
            )
            .await,
    );
    expect_invalid(
        store
            .operate(
                Operation::JobsPrune(PruneJobs {
                    older_than: HOUR,
                    limit: 0,
                }),
                operator(),
            )
            .await,
        "limit",
    );
    for name in ["", "a\u{7}b"] {
        expect_invalid(
            store
                .operate(
                    Operation::JobCancel(queued.id),
                    Actor::new(name, AuditSource::Library),
                )
                .await,
            "actor",
        );
    }
    assert_eq!(
        store.job_get(queued.id).await.unwrap().state,
        JobState::Queued,
        "a refused actor cancels nothing"
    );
    assert_eq!(every_record(&*store).await, vec![]);
}

/// The list filters by action, source, actor and tenant (combined with AND) and pages newest
/// first by keyset without repeats; a page size outside 1..=1000 is refused naming `limit`.
pub async fn audit_list_filters_and_pages(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let acme = operator().for_tenant(tenant("acme"));
    let cli = Actor::new("ops", AuditSource::Cli);
    for i in 0..7 {
        let (name, by) = if i % 2 == 0 {
            ("q", &acme)
        } else {
            ("r", &cli)
        };
        store
            .operate(Operation::QueuePause(queue(name)), by.clone())
            .await
            .unwrap();
        store
            .operate(Operation::QueueResume(queue(name)), by.clone())
            .await
            .unwrap();
    }
    assert_eq!(every_record(&*store).await.len(), 14);
    let count = |query: ListAudit| {
        let store = store.clone();
        async move { records(&*store, query).await.len() }
    };
    assert_eq!(
        count(ListAudit {
            action: Some(AuditAction::QueuePause),
            ..ListAudit::default()
        })
        .await,
        7
    );
    assert_eq!(
        count(ListAudit {
            source: Some(AuditSource::Cli),
            ..ListAudit::default()
        })
        .await,
        6
    );
    assert_eq!(
        count(ListAudit {
            tenant: Some(tenant("acme")),
            action: Some(AuditAction::QueueResume),
            ..ListAudit::default()
        })
        .await,
        4
    );
    assert_eq!(
        count(ListAudit {
            actor: Some("ops".to_owned()),
            source: Some(AuditSource::Api),
            ..ListAudit::default()
        })
        .await,
        0
    );
    let mut seen = Vec::new();
    let mut query = ListAudit {
        source: Some(AuditSource::Api),
        limit: 3,
        ..ListAudit::default()
    };
    loop {
        let page = store.audit_list(query.clone()).await.unwrap();
        assert!(page.entries.len() <= 3);
        seen.extend(page.entries.iter().map(|e| e.id));
        match page.next {
            Some(next) => query.before = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 8, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");
    for limit in [1_001, u32::MAX] {
        expect_invalid(
            store
                .audit_list(ListAudit {
                    limit,
                    ..ListAudit::default()
                })
                .await,
            "limit",
        );
    }
}

/// Retention deletes records older than the cutoff by the store's clock, at most `limit` a
/// call, and keeps newer ones; a bad limit is refused naming it.
pub async fn audit_prune_deletes_only_old_records(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    for name in ["a", "b", "c"] {
        store
            .operate(Operation::QueuePause(queue(name)), operator())
            .await
            .unwrap();
    }
    h.advance(2 * HOUR).await;
    store
        .operate(Operation::QueuePause(queue("d")), operator())
        .await
        .unwrap();
    let prune = |limit| PruneAudit {
        older_than: HOUR,
        limit,
    };
    assert_eq!(store.audit_prune(prune(2)).await.unwrap(), 2);
    assert_eq!(store.audit_prune(prune(100)).await.unwrap(), 1);
    assert_eq!(store.audit_prune(prune(100)).await.unwrap(), 0);
    let kept = every_record(&*store).await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].target, json!({"queue": "d"}));
    for limit in [0, 100_001] {
        expect_invalid(store.audit_prune(prune(limit)).await, "limit");
    }
}

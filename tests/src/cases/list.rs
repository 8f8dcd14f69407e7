//! Listing and fetching jobs: filters, meta containment, keyset pagination, bad filters.

use std::collections::HashSet;

use drover_core::{
    Finish, HeartbeatItem, HeartbeatJobs, HeartbeatReply, Job, JobDetails, JobId, JobState,
    ListJobs,
};
use serde_json::{json, Value};

use super::{
    all_pages, claim, complete, enqueue, expect_invalid, expect_not_found, failed_job, job, kind,
    queue, start, tenant, unbounded,
};
use crate::StoreFactory;

/// Each filter (queue, state, kind, tenant) selects exactly the matching jobs, and filters
/// combine with AND.
pub async fn list_filters_by_queue_state_kind_tenant(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let a = enqueue(
        &*store,
        job("a", json!(1))
            .with_queue(queue("qa"))
            .with_tenant(tenant("t1")),
    )
    .await;
    let b = enqueue(
        &*store,
        job("b", json!(1))
            .with_queue(queue("qa"))
            .with_tenant(tenant("t2")),
    )
    .await;
    let c = enqueue(&*store, job("a", json!(1)).with_tenant(tenant("t2"))).await;
    let running = claim(&*store, &["a"], 1).await.remove(0);
    assert_eq!(running.id, c.id);
    let ids = |query: ListJobs| {
        let store = store.clone();
        async move {
            let page = store.jobs_list(query).await.unwrap();
            page.jobs.into_iter().map(|j| j.id).collect::<Vec<JobId>>()
        }
    };
    assert_eq!(
        ids(ListJobs {
            queue: Some(queue("qa")),
            ..ListJobs::default()
        })
        .await,
        vec![b.id, a.id]
    );
    assert_eq!(
        ids(ListJobs {
            state: Some(JobState::Running),
            ..ListJobs::default()
        })
        .await,
        vec![c.id]
    );
    assert_eq!(
        ids(ListJobs {
            kind: Some(kind("a")),
            ..ListJobs::default()
        })
        .await,
        vec![c.id, a.id]
    );
    assert_eq!(
        ids(ListJobs {
            tenant: Some(tenant("t2")),
            ..ListJobs::default()
        })
        .await,
        vec![c.id, b.id]
    );
    assert_eq!(
        ids(ListJobs {
            tenant: Some(tenant("t2")),
            queue: Some(queue("qa")),
            ..ListJobs::default()
        })
        .await,
        vec![b.id]
    );
    assert!(ids(ListJobs {
        state: Some(JobState::Failed),
        ..ListJobs::default()
    })
    .await
    .is_empty());
}

/// Kind and tenant filters select exactly the matching jobs in every state, live and finished,
/// alone, together, beside a queue or state filter and across pages. A kind and a tenant that
/// share a name, and a kind that looks like a tenant filter (`t:t1`), never match each other
/// (the PostgreSQL store tests kind and tenant of finished jobs together in one index).
pub async fn list_filters_finished_jobs_by_kind_and_tenant(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let succeeded_a = start(
        &*store,
        job("a", json!(1))
            .with_queue(queue("qa"))
            .with_tenant(tenant("t1")),
    )
    .await;
    complete(&*store, &succeeded_a).await;
    let succeeded_b = start(&*store, job("b", json!(2)).with_tenant(tenant("a"))).await;
    complete(&*store, &succeeded_b).await;
    let failed_a = failed_job(&*store, job("a", json!(3)).with_tenant(tenant("t2"))).await;
    let cancelled = enqueue(&*store, job("t:t1", json!(4)).with_tenant(tenant("t1"))).await;
    store.job_cancel(cancelled.id).await.unwrap();
    let queued_a = enqueue(&*store, job("a", json!(5)).with_tenant(tenant("t1"))).await;
    let ids = |query: ListJobs| {
        let store = store.clone();
        async move {
            let page = store.jobs_list(query).await.unwrap();
            page.jobs.into_iter().map(|j| j.id).collect::<Vec<JobId>>()
        }
    };
    let by = |kind_name: Option<&str>, tenant_name: Option<&str>| ListJobs {
        kind: kind_name.map(kind),
        tenant: tenant_name.map(tenant),
        ..ListJobs::default()
    };
    assert_eq!(
        ids(by(Some("a"), None)).await,
        vec![queued_a.id, failed_a.id, succeeded_a.id]
    );
    assert_eq!(
        ids(by(None, Some("t1"))).await,
        vec![queued_a.id, cancelled.id, succeeded_a.id]
    );
    assert_eq!(
        ids(by(Some("a"), Some("t1"))).await,
        vec![queued_a.id, succeeded_a.id]
    );
    assert_eq!(ids(by(None, Some("a"))).await, vec![succeeded_b.id]);
    assert_eq!(ids(by(Some("t:t1"), None)).await, vec![cancelled.id]);
    assert!(ids(by(Some("t1"), None)).await.is_empty());
    assert!(ids(by(Some("b"), Some("t1"))).await.is_empty());
    assert_eq!(
        ids(ListJobs {
            state: Some(JobState::Succeeded),
            ..by(Some("a"), None)
        })
        .await,
        vec![succeeded_a.id]
    );
    assert_eq!(
        ids(ListJobs {
            state: Some(JobState::Failed),
            ..by(None, Some("t2"))
        })
        .await,
        vec![failed_a.id]
    );
    assert!(ids(ListJobs {
        state: Some(JobState::Failed),
        ..by(None, Some("t1"))
    })
    .await
    .is_empty());
    assert_eq!(
        ids(ListJobs {
            queue: Some(queue("qa")),
            ..by(Some("a"), Some("t1"))
        })
        .await,
        vec![succeeded_a.id]
    );
    let paged: Vec<JobId> = all_pages(
        &*store,
        ListJobs {
            limit: 1,
            ..by(Some("a"), None)
        },
    )
    .await
    .into_iter()
    .map(|j| j.id)
    .collect();
    assert_eq!(paged, vec![queued_a.id, failed_a.id, succeeded_a.id]);
}

/// The meta filter follows jsonb containment: nested objects, array elements, any order.
pub async fn list_filters_by_meta_containment(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let acme = enqueue(
        &*store,
        job("k", json!(1)).with_meta(json!({
            "customer": "acme", "tags": ["red", "blue"], "nested": {"x": 1, "y": {"z": true}}
        })),
    )
    .await;
    let other = enqueue(
        &*store,
        job("k", json!(2)).with_meta(json!({"customer": "globex", "tags": ["red"]})),
    )
    .await;
    let by_meta = |meta: Value| {
        let store = store.clone();
        async move {
            let query = ListJobs {
                meta: Some(meta),
                ..ListJobs::default()
            };
            let page = store.jobs_list(query).await.unwrap();
            page.jobs.into_iter().map(|j| j.id).collect::<Vec<JobId>>()
        }
    };
    assert_eq!(by_meta(json!({"customer": "acme"})).await, vec![acme.id]);
    assert_eq!(
        by_meta(json!({"nested": {"y": {"z": true}}})).await,
        vec![acme.id]
    );
    assert_eq!(by_meta(json!({"tags": ["blue"]})).await, vec![acme.id]);
    assert_eq!(
        by_meta(json!({"tags": ["red"]})).await,
        vec![other.id, acme.id]
    );
    assert_eq!(
        by_meta(json!({"tags": ["blue", "red"]})).await,
        vec![acme.id]
    );
    assert_eq!(by_meta(json!({})).await, vec![other.id, acme.id]);
    assert!(by_meta(json!({"tags": ["green"]})).await.is_empty());
    assert!(by_meta(json!({"customer": "ACME"})).await.is_empty());
    assert!(by_meta(json!({"nested": {"x": "1"}})).await.is_empty());
}

/// The meta filter reaches finished jobs the same way: succeeded, failed and cancelled jobs
/// with meta match a filter they contain, jobs without meta (`{}`) match only the empty filter,
/// and each filter combines with a state filter.
pub async fn list_filters_finished_jobs_by_meta(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let done_acme = start(
        &*store,
        job("m1", json!(1)).with_meta(json!({"customer": "acme"})),
    )
    .await;
    complete(&*store, &done_acme).await;
    let done_bare = start(&*store, job("m2", json!(2))).await;
    complete(&*store, &done_bare).await;
    let failed_acme = failed_job(
        &*store,
        job("m3", json!(3)).with_meta(json!({"customer": "acme", "n": 1})),
    )
    .await;
    let failed_globex = failed_job(
        &*store,
        job("m4", json!(4)).with_meta(json!({"customer": "globex"})),
    )
    .await;
    let cancelled_acme = enqueue(
        &*store,
        job("m5", json!(5)).with_meta(json!({"customer": "acme"})),
    )
    .await;
    store.job_cancel(cancelled_acme.id).await.unwrap();
    let queued_acme = enqueue(
        &*store,
        job("m6", json!(6)).with_meta(json!({"customer": "acme"})),
    )
    .await;
    let list = |meta: Value, state: Option<JobState>| {
        let store = store.clone();
        async move {
            let query = ListJobs {
                meta: Some(meta),
                state,
                ..ListJobs::default()
            };
            let page = store.jobs_list(query).await.unwrap();
            page.jobs.into_iter().map(|j| j.id).collect::<Vec<JobId>>()
        }
    };
    assert_eq!(
        list(json!({"customer": "acme"}), None).await,
        vec![
            queued_acme.id,
            cancelled_acme.id,
            failed_acme.id,
            done_acme.id
        ]
    );
    assert_eq!(
        list(json!({"customer": "acme"}), Some(JobState::Succeeded)).await,
        vec![done_acme.id]
    );
    assert_eq!(
        list(json!({"customer": "acme"}), Some(JobState::Failed)).await,
        vec![failed_acme.id]
    );
    assert_eq!(
        list(json!({"customer": "acme"}), Some(JobState::Cancelled)).await,
        vec![cancelled_acme.id]
    );
    assert_eq!(list(json!({"n": 1}), None).await, vec![failed_acme.id]);
    assert_eq!(
        list(json!({}), None).await,
        vec![
            queued_acme.id,
            cancelled_acme.id,
            failed_globex.id,
            failed_acme.id,
            done_bare.id,
            done_acme.id
        ]
    );
    assert_eq!(
        list(json!({}), Some(JobState::Succeeded)).await,
        vec![done_bare.id, done_acme.id]
    );
    assert!(list(json!({"customer": "initech"}), None).await.is_empty());
}

/// Keyset pagination walks every job exactly once, newest first, and the last page has no
/// cursor.
pub async fn list_paginates_newest_first(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let created: Vec<JobId> = store
        .jobs_enqueue((0..23).map(|n| job("k", json!(n))).collect())
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.job.id)
        .collect();
    let mut seen = Vec::new();
    let mut before = None;
    let mut pages = 0;
    loop {
        let page = store
            .jobs_list(ListJobs {
                before,
                limit: 5,
                ..ListJobs::default()
            })
            .await
            .unwrap();
        pages += 1;
        assert!(page.jobs.len() <= 5);
        seen.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(next) => {
                assert_eq!(Some(next), page.jobs.last().map(|j| j.id));
                before = Some(next);
            }
            None => break,
        }
        assert!(pages < 10, "pagination terminates");
    }
    let mut newest_first = created.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 23);
}

/// A limit of 0 means the default page size of 50.
pub async fn list_default_page_size(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store
        .jobs_enqueue((0..55).map(|n| job("k", json!(n))).collect())
        .await
        .unwrap();
    let page = store.jobs_list(ListJobs::default()).await.unwrap();
    assert_eq!(page.jobs.len(), 50);
    assert!(page.next.is_some());
}

/// A meta filter that is not an object, or a limit above 1,000, is refused.
pub async fn list_rejects_bad_filter(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let meta = |m: Value| ListJobs {
        meta: Some(m),
        ..ListJobs::default()
    };
    expect_invalid(store.jobs_list(meta(json!([1]))).await, "meta");
    expect_invalid(store.jobs_list(meta(json!("acme"))).await, "meta");
    expect_invalid(store.jobs_list(meta(json!({"k": "\u{0}"}))).await, "meta");
    let args = |a: Value| ListJobs {
        args: Some(a),
        ..ListJobs::default()
    };
    expect_invalid(store.jobs_list(args(json!([1]))).await, "args");
    expect_invalid(store.jobs_list(args(json!(7))).await, "args");
    expect_invalid(store.jobs_list(args(json!({"k": "\u{0}"}))).await, "args");
    expect_invalid(
        store
            .jobs_list(ListJobs {
                limit: 1001,
                ..ListJobs::default()
            })
            .await,
        "limit",
    );
}

/// Fetching an unknown job is `NotFound`.
pub async fn list_get_unknown_is_not_found(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_not_found(store.job_get(JobId::new_v7()).await);
}

/// A list of summaries (`JobDetails::NONE`) carries every field of the jobs but args, result,
/// errors and progress, which come back empty; a list asking for some of them carries those;
/// the default list carries whole jobs, as `job_get` returns them.
pub async fn list_summaries_leave_out_args_result_errors_and_progress(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("report", json!({"rows": "x".repeat(3_000)}))).await;
    let beat = store
        .jobs_heartbeat(HeartbeatJobs {
            lease: super::LEASE,
            jobs: vec![HeartbeatItem {
                id: running.id,
                token: running.fencing_token,
                meta: None,
                progress: Some(json!({"step": 3})),
                started: None,
            }],
        })
        .await
        .unwrap();
    assert!(matches!(beat[0], HeartbeatReply::Extended { .. }));
    super::finish(
        &*store,
        &running,
        Finish::Succeeded {
            result: Some(json!({"pages": 12})),
        },
    )
    .await;
    let failed = failed_job(&*store, job("flaky", json!({"n": 1}))).await;
    let queued = enqueue(&*store, job("later", json!([1, 2, 3]))).await;
    let mut whole = Vec::new();
    for id in [queued.id, failed.id, running.id] {
        whole.push(store.job_get(id).await.unwrap());
    }
    assert!(whole[1].errors.len() == 1 && whole[2].progress.is_some() && whole[2].result.is_some());

    let some = |args, result, errors, progress| JobDetails {
        args,
        result,
        errors,
        progress,
    };
    for details in [
        JobDetails::NONE,
        some(true, false, false, false),
        some(false, true, true, false),
        some(false, false, false, true),
        JobDetails::ALL,
    ] {
        let page = store
            .jobs_list(ListJobs {
                details,
                ..ListJobs::default()
            })
            .await
            .unwrap();
        let expected: Vec<Job> = whole
            .iter()
            .map(|job| {
                let mut job = job.clone();
                details.strip(&mut job);
                job
            })
            .collect();
        assert_eq!(page.jobs, expected, "{details:?}");
    }
    let default = store.jobs_list(ListJobs::default()).await.unwrap();
    assert_eq!(default.jobs, whole, "whole jobs unless asked otherwise");
}

/// An args filter keeps the jobs whose args contain it, newest first, with the other filters
/// and the details asked for; a page reads at most `ARGS_SEARCH_WINDOW` jobs, so a match
/// older than that comes on a later page (after one without it), and following `next` finds
/// every match exactly once.
pub async fn list_searches_args_by_containment_in_bounded_pages(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let order = |n: u64, customer: &str| {
        job(
            "shop.order",
            json!({"order": n, "customer": {"name": customer}, "lines": [n, 1]}),
        )
    };
    let oldest = enqueue(&*store, order(1, "acme")).await;
    let window = drover_core::search::ARGS_SEARCH_WINDOW as usize;
    store
        .jobs_enqueue((0..window).map(|n| job("other", json!({"n": n}))).collect())
        .await
        .unwrap();
    let mut acme = vec![oldest.id];
    for n in 2..6 {
        let customer = if n % 2 == 0 { "acme" } else { "globex" };
        let id = enqueue(&*store, order(n, customer)).await.id;
        if customer == "acme" {
            acme.push(id);
        }
    }
    enqueue(&*store, job("shop.order", json!("acme"))).await;
    acme.reverse();

    let search = |limit: u32| ListJobs {
        args: Some(json!({"customer": {"name": "acme"}})),
        limit,
        details: drover_core::JobDetails::NONE,
        ..ListJobs::default()
    };
    let page = store.jobs_list(search(1)).await.unwrap();
    let ids: Vec<JobId> = page.jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, acme[..1], "newest first, a full page");
    assert_eq!(
        page.next,
        Some(acme[0]),
        "a full page goes on after its last job"
    );
    assert!(
        page.jobs.iter().all(|j| j.args.is_null()),
        "summaries, as asked"
    );
    // The next match is within the window; the oldest is past it.
    let rest = store
        .jobs_list(ListJobs {
            before: page.next,
            ..search(50)
        })
        .await
        .unwrap();
    assert_eq!(
        rest.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        acme[1..2]
    );
    let last_read = rest.next.expect("the window ended before the table did");
    assert!(
        last_read < acme[1] && last_read > acme[2],
        "the search goes on from the last job it read"
    );
    let all: Vec<JobId> = all_pages(&*store, search(50))
        .await
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(all, acme, "every match once, in order");
    let with_details = store
        .jobs_list(ListJobs {
            args: Some(json!({"lines": [3]})),
            ..ListJobs::default()
        })
        .await
        .unwrap();
    assert_eq!(with_details.jobs.len(), 1);
    assert_eq!(
        with_details.jobs[0].args["order"],
        json!(3),
        "whole jobs by default"
    );
    let none = store
        .jobs_list(ListJobs {
            args: Some(json!({"customer": {"name": "acme"}})),
            kind: Some(drover_core::JobKind::parse("other").unwrap()),
            ..ListJobs::default()
        })
        .await
        .unwrap();
    assert!(none.jobs.is_empty(), "other filters still apply");

    // A bulk action by an args filter acts on the matches only, past the window too.
    let cancelled = match store
        .operate(
            drover_core::Operation::JobsBulk(drover_core::BulkJobs::filter(
                drover_core::BulkAction::Cancel,
                ListJobs {
                    args: Some(json!({"customer": {"name": "acme"}})),
                    ..ListJobs::default()
                },
            )),
            drover_core::Actor::new("ops", drover_core::AuditSource::Cli),
        )
        .await
        .unwrap()
    {
        drover_core::Operated::JobsBulk(outcome) => outcome,
        other => panic!("{other:?}"),
    };
    assert_eq!(cancelled.changed, 3, "{cancelled:?}");
    let states: Vec<JobState> = all_pages(&*store, ListJobs::default())
        .await
        .iter()
        .filter(|j| j.state == JobState::Cancelled)
        .map(|j| j.state)
        .collect();
    assert_eq!(states.len(), 3, "only the matches were cancelled");
}

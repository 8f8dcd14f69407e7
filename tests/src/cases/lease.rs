//! Leases and heartbeats: extension, saved meta and progress, cancel requests, and
//! `LeaseLost` per item for stale tokens and expired leases.

use std::time::Duration;

use drover_core::{
    Error, HeartbeatItem, HeartbeatJobs, HeartbeatReply, Job, JobState, JobStore, SizeLimits,
    StoreConfig,
};
use serde_json::{json, Value};

use super::{complete, expect_invalid, job, stale, start, unbounded, LEASE};
use crate::StoreFactory;

fn beat(job: &Job) -> HeartbeatItem {
    HeartbeatItem {
        started: None,
        id: job.id,
        token: job.fencing_token,
        meta: None,
        progress: None,
    }
}

async fn heartbeat(store: &dyn JobStore, items: Vec<HeartbeatItem>) -> Vec<HeartbeatReply> {
    store
        .jobs_heartbeat(HeartbeatJobs {
            lease: LEASE,
            jobs: items,
        })
        .await
        .expect("heartbeat")
}

/// A heartbeat moves the lease end to now + lease, so the job outlives its first lease.
pub async fn lease_heartbeat_extends_lease(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    h.advance(Duration::from_secs(20)).await;
    let before = store.now().await.unwrap();
    let replies = heartbeat(&*store, vec![beat(&running)]).await;
    let after = store.now().await.unwrap();
    match &replies[..] {
        [HeartbeatReply::Extended {
            id,
            cancel_requested: false,
            lease_expires_at,
        }] => {
            assert_eq!(*id, running.id);
            let lease = chrono::Duration::from_std(LEASE).unwrap();
            assert!(*lease_expires_at >= before + lease && *lease_expires_at <= after + lease);
            let stored = store.job_get(running.id).await.unwrap();
            assert_eq!(stored.lease_expires_at, Some(*lease_expires_at));
        }
        other => panic!("expected one Extended, got {other:?}"),
    }
    h.advance(Duration::from_secs(20)).await;
    complete(&*store, &running).await;
}

/// A heartbeat saves the handler's meta and progress.
pub async fn lease_heartbeat_saves_meta_and_progress(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1)).with_meta(json!({"a": 1}))).await;
    let mut item = beat(&running);
    item.meta = Some(json!({"a": 2, "b": [1]}));
    item.progress = Some(json!({"step": "upload", "detail": {"done": 3, "of": 10}}));
    heartbeat(&*store, vec![item]).await;
    let stored = store.job_get(running.id).await.unwrap();
    assert_eq!(stored.meta, json!({"a": 2, "b": [1]}));
    assert_eq!(
        stored.progress,
        Some(json!({"step": "upload", "detail": {"done": 3, "of": 10}}))
    );
    // A heartbeat without meta or progress keeps them.
    heartbeat(&*store, vec![beat(&running)]).await;
    let again = store.job_get(running.id).await.unwrap();
    assert_eq!((again.meta, again.progress), (stored.meta, stored.progress));
}

/// A heartbeat tells the worker that a cancel was requested.
pub async fn lease_heartbeat_reports_cancel_requested(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    store.job_cancel(running.id).await.unwrap();
    match &heartbeat(&*store, vec![beat(&running)]).await[..] {
        [HeartbeatReply::Extended {
            cancel_requested: true,
            ..
        }] => {}
        other => panic!("expected Extended with cancel_requested, got {other:?}"),
    }
}

/// A stale token, an unknown job or a finished job answer `LeaseLost` for that item only;
/// the others in the batch are extended, in input order.
pub async fn lease_heartbeat_stale_token_is_lease_lost_per_item(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let good = start(&*store, job("a", json!(1))).await;
    let other = start(&*store, job("b", json!(2))).await;
    let done = start(&*store, job("c", json!(3))).await;
    complete(&*store, &done).await;
    let mut stale_item = beat(&other);
    stale_item.token = stale(other.fencing_token);
    stale_item.meta = Some(json!({"overwritten": true}));
    let unknown = HeartbeatItem {
        started: None,
        id: drover_core::JobId::new_v7(),
        token: good.fencing_token,
        meta: None,
        progress: None,
    };
    let unknown_id = unknown.id;
    let replies = heartbeat(&*store, vec![stale_item, beat(&good), beat(&done), unknown]).await;
    assert_eq!(replies.len(), 4);
    assert!(matches!(replies[0], HeartbeatReply::LeaseLost { id } if id == other.id));
    assert!(matches!(replies[1], HeartbeatReply::Extended { id, .. } if id == good.id));
    assert!(matches!(replies[2], HeartbeatReply::LeaseLost { id } if id == done.id));
    assert!(matches!(replies[3], HeartbeatReply::LeaseLost { id } if id == unknown_id));
    assert_eq!(
        store.job_get(other.id).await.unwrap(),
        other,
        "a stale heartbeat changes nothing"
    );
    assert_eq!(
        store.job_get(done.id).await.unwrap().state,
        JobState::Succeeded
    );
}

/// A heartbeat after the lease expired is `LeaseLost`, even before any rescue.
pub async fn lease_heartbeat_after_expiry_is_lease_lost(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    h.advance(LEASE + Duration::from_secs(1)).await;
    match &heartbeat(&*store, vec![beat(&running)]).await[..] {
        [HeartbeatReply::LeaseLost { id }] => assert_eq!(*id, running.id),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(
        store.job_get(running.id).await.unwrap().state,
        JobState::Running
    );
}

/// A bad lease or a meta that is not an object is refused (`jobs[i].meta` in batches).
pub async fn lease_heartbeat_rejects_bad_input(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    let zero = HeartbeatJobs {
        lease: Duration::ZERO,
        jobs: vec![beat(&running)],
    };
    expect_invalid(store.jobs_heartbeat(zero).await, "lease");
    let mut bad = beat(&running);
    bad.meta = Some(Value::from(3));
    let one = HeartbeatJobs {
        lease: LEASE,
        jobs: vec![bad.clone()],
    };
    expect_invalid(store.jobs_heartbeat(one).await, "meta");
    let two = HeartbeatJobs {
        lease: LEASE,
        jobs: vec![beat(&running), bad],
    };
    expect_invalid(store.jobs_heartbeat(two).await, "jobs[1].meta");
    let mut nul = beat(&running);
    nul.meta = Some(json!({"k": "\u{0}"}));
    let one = HeartbeatJobs {
        lease: LEASE,
        jobs: vec![nul],
    };
    expect_invalid(store.jobs_heartbeat(one).await, "meta");
    assert_eq!(store.job_get(running.id).await.unwrap(), running);
}

/// Meta and progress saved by a heartbeat are bounded by the store's meta bound
/// (`SizeLimits::max_meta_bytes`), on every store.
pub async fn lease_heartbeat_bounds_meta_and_progress_by_the_meta_bound(f: &dyn StoreFactory) {
    let config = StoreConfig {
        sizes: SizeLimits {
            max_meta_bytes: 64,
            ..SizeLimits::default()
        },
        ..unbounded()
    };
    let h = f.open(config).await;
    let store = h.store();
    let running = start(&*store, job("k", json!(1))).await;
    let big = json!({"detail": "x".repeat(100)});
    let mut item = beat(&running);
    item.progress = Some(big.clone());
    let one = HeartbeatJobs {
        lease: LEASE,
        jobs: vec![item.clone()],
    };
    expect_invalid(store.jobs_heartbeat(one).await, "progress");
    let two = HeartbeatJobs {
        lease: LEASE,
        jobs: vec![beat(&running), item],
    };
    expect_invalid(store.jobs_heartbeat(two).await, "jobs[1].progress");
    let mut item = beat(&running);
    item.meta = Some(big);
    let one = HeartbeatJobs {
        lease: LEASE,
        jobs: vec![item],
    };
    expect_invalid(store.jobs_heartbeat(one).await, "meta");
    // Nesting is bounded too (drover_core::json::JSON_DEPTH_MAX, 100), whatever the size.
    let mut deep = json!(1);
    for _ in 0..=drover_core::json::JSON_DEPTH_MAX {
        deep = json!([deep]);
    }
    for field in ["progress", "meta"] {
        let mut item = beat(&running);
        if field == "progress" {
            item.progress = Some(deep.clone());
        } else {
            item.meta = Some(json!({ "d": deep.clone() }));
        }
        let one = HeartbeatJobs {
            lease: LEASE,
            jobs: vec![item],
        };
        match store.jobs_heartbeat(one).await {
            Err(Error::InvalidInput { field: got, reason }) => {
                assert_eq!(got, field);
                assert!(reason.contains("deep"), "{reason}");
            }
            other => panic!("{field}: {other:?}"),
        }
    }
    let mut small = beat(&running);
    small.progress = Some(json!({"step": "s"}));
    heartbeat(&*store, vec![small]).await;
    assert_eq!(
        store.job_get(running.id).await.unwrap().progress,
        Some(json!({"step": "s"}))
    );
}

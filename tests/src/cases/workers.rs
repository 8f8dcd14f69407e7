//! Worker registry: register, heartbeat, list, deregister, prune stale workers.

use std::time::Duration;

use drover_core::{WorkerId, WorkerRegistration};

use super::{expect_not_found, queue, unbounded, worker};
use crate::StoreFactory;

fn registration(id: &str) -> WorkerRegistration {
    WorkerRegistration {
        id: worker(id),
        host: "host-a".into(),
        pid: 4242,
        queues: vec![queue("default"), queue("mail")],
    }
}

/// A host name is never refused: every store keeps it with NUL characters replaced by U+FFFD
/// and cut to 255 bytes at a character boundary.
pub async fn workers_host_name_is_stored_sanitized(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let mut nul = registration("w-nul");
    nul.host = "rack\u{0}7".into();
    let info = store.worker_register(nul).await.unwrap();
    assert_eq!(info.host, "rack\u{fffd}7");
    let mut long = registration("w-long");
    long.host = "é".repeat(200);
    let info = store.worker_register(long).await.unwrap();
    assert_eq!(info.host, "é".repeat(127));
    let listed = store.workers_list().await.unwrap();
    let hosts: Vec<&str> = listed.iter().map(|w| w.host.as_str()).collect();
    assert_eq!(hosts, vec![&*"é".repeat(127), "rack\u{fffd}7"]);
}

/// A registered worker is listed with its details; heartbeats move its heartbeat time; a
/// deregistered one is gone.
pub async fn workers_register_heartbeat_list_deregister(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let info = store.worker_register(registration("w-b")).await.unwrap();
    assert_eq!((info.host.as_str(), info.pid), ("host-a", 4242));
    assert_eq!(info.queues, vec![queue("default"), queue("mail")]);
    assert_eq!(info.started_at, info.last_heartbeat_at);
    store.worker_register(registration("w-a")).await.unwrap();
    let ids: Vec<WorkerId> = store
        .workers_list()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(ids, vec![worker("w-a"), worker("w-b")], "listed by id");

    h.advance(Duration::from_secs(10)).await;
    store.worker_heartbeat(worker("w-b")).await.unwrap();
    let b = store.workers_list().await.unwrap().remove(1);
    assert!(b.last_heartbeat_at - b.started_at >= chrono::Duration::seconds(10));

    store.worker_deregister(worker("w-b")).await.unwrap();
    store.worker_deregister(worker("w-b")).await.unwrap();
    let ids: Vec<WorkerId> = store
        .workers_list()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(ids, vec![worker("w-a")]);
}

/// Workers whose last heartbeat is too old are pruned; their next heartbeat is `NotFound`.
pub async fn workers_prune_stale(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    store.worker_register(registration("old")).await.unwrap();
    store.worker_register(registration("alive")).await.unwrap();
    h.advance(Duration::from_secs(60)).await;
    store.worker_heartbeat(worker("alive")).await.unwrap();
    assert_eq!(
        store.workers_prune(Duration::from_secs(30)).await.unwrap(),
        1
    );
    let ids: Vec<WorkerId> = store
        .workers_list()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(ids, vec![worker("alive")]);
    expect_not_found(store.worker_heartbeat(worker("old")).await);
}

/// A heartbeat from a worker never registered is `NotFound`.
pub async fn workers_heartbeat_unknown_is_not_found(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    expect_not_found(store.worker_heartbeat(worker("ghost")).await);
}

//! Queues: pause and resume (idempotent, cluster-wide) and the queue list.

use drover_core::QueueInfo;
use serde_json::json;

use super::{enqueue, job, queue, unbounded};
use crate::StoreFactory;

/// Pausing twice keeps the first pause time; resuming twice is harmless.
pub async fn queues_pause_resume_idempotent(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let first = store.queue_pause(queue("mail")).await.unwrap();
    assert!(first.paused);
    assert!(first.paused_at.is_some());
    let second = store.queue_pause(queue("mail")).await.unwrap();
    assert_eq!(second, first);
    let resumed = store.queue_resume(queue("mail")).await.unwrap();
    assert_eq!((resumed.paused, resumed.paused_at), (false, None));
    let again = store.queue_resume(queue("mail")).await.unwrap();
    assert_eq!(again, resumed);
}

/// The list holds every queue with jobs or a pause, by name, with its pause state.
pub async fn queues_list_shows_queues_with_jobs_or_pause(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    enqueue(&*store, job("k", json!(1)).with_queue(queue("zeta"))).await;
    enqueue(&*store, job("k", json!(1)).with_queue(queue("alpha"))).await;
    store.queue_pause(queue("mid")).await.unwrap();
    let list: Vec<QueueInfo> = store.queues_list().await.unwrap();
    let names: Vec<&str> = list.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, vec!["alpha", "mid", "zeta"]);
    assert_eq!(
        list.iter().map(|q| q.paused).collect::<Vec<_>>(),
        vec![false, true, false]
    );
}

/// Resuming leaves nothing behind: a queue resumed without ever having jobs (a typo, say), or
/// paused and resumed while empty, is not listed; one with jobs is listed unpaused.
pub async fn queues_resume_of_an_empty_queue_leaves_no_entry(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let resumed = store.queue_resume(queue("typo")).await.unwrap();
    assert_eq!(
        (resumed.name.as_str(), resumed.paused, resumed.paused_at),
        ("typo", false, None)
    );
    store.queue_pause(queue("empty")).await.unwrap();
    store.queue_resume(queue("empty")).await.unwrap();
    enqueue(&*store, job("k", json!(1)).with_queue(queue("busy"))).await;
    store.queue_pause(queue("busy")).await.unwrap();
    store.queue_resume(queue("busy")).await.unwrap();
    let list: Vec<QueueInfo> = store.queues_list().await.unwrap();
    let listed: Vec<(&str, bool)> = list.iter().map(|q| (q.name.as_str(), q.paused)).collect();
    assert_eq!(listed, vec![("busy", false)]);
}

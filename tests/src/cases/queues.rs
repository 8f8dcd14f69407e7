//! Queues: pause and resume (idempotent, cluster-wide) and the queue list.

use drover_core::QueueInfo;
use serde_json::json;

use super::{enqueue, job, queue, unbounded};
use crate::StoreFactory;

/// Pausing twice keeps the first pause time; resuming twice is harmless. Each answer says
/// whether that call changed the queue.
pub async fn queues_pause_resume_idempotent(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let first = store.queue_pause(queue("mail")).await.unwrap();
    assert!(first.changed);
    assert!(first.queue.paused);
    assert!(first.queue.paused_at.is_some());
    let second = store.queue_pause(queue("mail")).await.unwrap();
    assert!(!second.changed);
    assert_eq!(second.queue, first.queue, "the first pause time is kept");
    let resumed = store.queue_resume(queue("mail")).await.unwrap();
    assert!(resumed.changed);
    assert_eq!(
        (resumed.queue.paused, resumed.queue.paused_at),
        (false, None)
    );
    let again = store.queue_resume(queue("mail")).await.unwrap();
    assert!(!again.changed);
    assert_eq!(again.queue, resumed.queue);
    let repaused = store.queue_pause(queue("mail")).await.unwrap();
    assert!(repaused.changed, "a resumed queue is paused again");
}

/// Of concurrent pauses of one unpaused queue exactly one says it changed the queue, and of
/// concurrent resumes of the paused queue exactly one; every answer shows the queue as the
/// call left it. Repeated rounds, on a queue with a stored row and on one without.
pub async fn queues_racing_pauses_and_resumes_change_it_once(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    enqueue(&*store, job("k", json!(1)).with_queue(queue("busy"))).await;
    for name in ["busy", "fresh"] {
        for round in 0..5 {
            let pauses = (0..8).map(|_| store.queue_pause(queue(name)));
            let answers = futures::future::join_all(pauses).await;
            let answers: Vec<_> = answers.into_iter().map(Result::unwrap).collect();
            let changed = answers.iter().filter(|a| a.changed).count();
            assert_eq!(changed, 1, "{name} round {round}: pauses that changed it");
            let first = answers.iter().find(|a| a.changed).unwrap();
            for answer in &answers {
                assert!(answer.queue.paused, "{name} round {round}: {answer:?}");
                assert_eq!(answer.queue.paused_at, first.queue.paused_at);
            }
            let resumes = (0..8).map(|_| store.queue_resume(queue(name)));
            let answers = futures::future::join_all(resumes).await;
            let answers: Vec<_> = answers.into_iter().map(Result::unwrap).collect();
            let changed = answers.iter().filter(|a| a.changed).count();
            assert_eq!(changed, 1, "{name} round {round}: resumes that changed it");
            assert!(answers.iter().all(|a| !a.queue.paused));
        }
    }
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
        (
            resumed.queue.name.as_str(),
            resumed.queue.paused,
            resumed.queue.paused_at,
            resumed.changed
        ),
        ("typo", false, None, false)
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

//! Enqueue: defaults, validation, idempotency keys, unique keys, quotas, batches.

use drover_core::{EnqueueStatus, JobState};
use serde_json::json;

use super::{job, unbounded};
use crate::StoreFactory;

/// A job enqueued with only kind and args takes the defaults of DESIGN.md section 3.
pub async fn enqueue_defaults(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let now = store.now().await.unwrap();
    let answer = store.job_enqueue(job("email.send", json!({"to": "a@example.com"}))).await.unwrap();
    assert_eq!(answer.status, EnqueueStatus::Created);
    let j = answer.job;
    assert_eq!(j.state, JobState::Queued);
    assert_eq!((j.queue.as_str(), j.tenant.as_str()), ("default", "default"));
    assert_eq!((j.attempt, j.max_attempts, j.priority), (0, 3, 0));
    assert_eq!(j.args, json!({"to": "a@example.com"}));
    assert_eq!(j.meta, json!({}));
    assert!(j.run_at >= now && j.created_at >= now, "run_at defaults to the store's now");
    assert_eq!(store.job_get(j.id).await.unwrap(), j, "get returns what enqueue returned");
}

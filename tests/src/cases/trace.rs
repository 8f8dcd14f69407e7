//! The W3C trace context stored with a job (docs/opentelemetry.md): kept as given by every
//! enqueue path, answered by claims, reads and lists, and never changed by a transition, so
//! retries and operator retries keep it.

use drover_core::{
    EnqueueChildren, Finish, Job, JobState, NewWorkflow, Retry, TraceContext, WorkflowJob,
};
use serde_json::json;

use super::{all_jobs, claim, enqueue, finish, job, start, unbounded};
use crate::StoreFactory;

fn context(n: u8) -> TraceContext {
    TraceContext::new(
        format!("00-4bf92f3577b34da6a3ce929d0e0e47{n:02x}-00f067aa0ba902b7-01"),
        (n % 2 == 0).then(|| format!("drover=n{n}")),
    )
    .expect("a valid trace context")
}

/// A job's trace context comes back from its enqueue, get and claim, and stays through a
/// failure that is retried, a failure that ends it and an operator retry; a job enqueued
/// without one has none.
pub async fn trace_context_survives_retries_and_operator_retry(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let plain = enqueue(&*store, job("plain", json!({}))).await;
    assert_eq!(plain.trace_context, None);
    let traced = job("traced", json!({})).with_trace_context(context(2));
    let running = start(&*store, traced.with_max_attempts(2)).await;
    assert_eq!(
        running.trace_context,
        Some(context(2)),
        "the claim answers it"
    );
    let fail = |retry| Finish::Failed {
        message: "boom".into(),
        retry,
    };
    let to = finish(
        &*store,
        &running,
        fail(Retry::After(std::time::Duration::ZERO)),
    )
    .await;
    assert_eq!(to, JobState::Queued);
    let stored = store.job_get(running.id).await.unwrap();
    assert_eq!(stored.trace_context, Some(context(2)), "kept by a retry");
    let again = claim(&*store, &["traced"], 1).await;
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].attempt, again[0].trace_context.clone()),
        (2, Some(context(2)))
    );
    assert_eq!(
        finish(&*store, &again[0], fail(Retry::Never)).await,
        JobState::Failed
    );
    let retried = store.job_retry(running.id).await.unwrap();
    assert_eq!(
        retried.trace_context,
        Some(context(2)),
        "kept by an operator retry"
    );
    let third = claim(&*store, &["traced"], 1).await;
    assert_eq!(third[0].trace_context, Some(context(2)));
}

/// Every enqueue path stores the context it was given: a batch large enough for the bulk lane,
/// a mixed batch, a workflow graph and children; lists answer it too.
pub async fn trace_context_stored_by_every_enqueue_path(f: &dyn StoreFactory) {
    let h = f.open(unbounded()).await;
    let store = h.store();
    let large: Vec<_> = (0..70u8)
        .map(|n| job("large", json!({ "n": n })).with_trace_context(context(n)))
        .collect();
    let answers = store.jobs_enqueue(large).await.unwrap();
    for (n, answer) in answers.iter().enumerate() {
        assert_eq!(answer.job.trace_context, Some(context(n as u8)));
        let stored = store.job_get(answer.job.id).await.unwrap();
        assert_eq!(stored.trace_context, Some(context(n as u8)));
    }
    let mixed = vec![
        job("mixed", json!({})).with_trace_context(context(100)),
        job("mixed", json!({})),
    ];
    let answers = store.jobs_enqueue(mixed).await.unwrap();
    let mut stored = Vec::new();
    for answer in &answers {
        stored.push(store.job_get(answer.job.id).await.unwrap().trace_context);
    }
    assert_eq!(stored, vec![Some(context(100)), None]);
    let graph = NewWorkflow {
        jobs: vec![WorkflowJob {
            name: "only".into(),
            job: job("graph", json!({})).with_trace_context(context(101)),
            depends_on: Vec::new(),
        }],
    };
    let workflow = store.workflow_enqueue(graph).await.unwrap();
    let member = store.job_get(workflow.jobs[0].job.id).await.unwrap();
    assert_eq!(member.trace_context, Some(context(101)));
    let parent = start(&*store, job("parent", json!({}))).await;
    let children = store
        .children_enqueue(EnqueueChildren {
            parent: parent.id,
            token: parent.fencing_token,
            jobs: vec![job("child", json!({})).with_trace_context(context(102))],
        })
        .await
        .unwrap();
    let child = store.job_get(children[0].job.id).await.unwrap();
    assert_eq!(child.trace_context, Some(context(102)));
    let listed: Vec<Job> = all_jobs(&*store).await;
    let listed_child = listed.iter().find(|j| j.id == child.id).unwrap();
    assert_eq!(
        listed_child.trace_context,
        Some(context(102)),
        "lists answer it"
    );
}

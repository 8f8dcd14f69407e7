//! Workflows on PostgreSQL only (docs/design.md section 10): races the contract suite cannot
//! stage through one store (two pools finishing the last two dependencies of a job at once, an
//! enqueue racing its dependency's finish), the rows the store keeps (edges resolved once,
//! `has_dependents`), and a fan-out of 10,000 children, timed.
//!
//! Needs `DROVER_TEST_DATABASE_URL`; without it every test skips, unless
//! `DROVER_REQUIRE_POSTGRES` is set, when they fail instead. Each test works in a database of its
//! own copied from the kit's migrated template (`drover_tests::postgres`), dropped at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_core::workflow::{EnqueueChildren, ListWorkflows, NewWorkflow};
use drover_core::{
    ClaimJobs, EnqueueStatus, Finish, FinishItem, FinishReply, Job, JobId, JobKind, JobState,
    JobStore, ListJobs, NewJob, PruneJobs, QueueName, Quotas, Retry, StoreConfig, WorkerId,
};
use drover_store_postgres::sqlx::{self, PgPool};
use drover_store_postgres::{PgOptions, PgStore};
use drover_tests::postgres::{Schema, Server, TestDatabase};
use serde_json::json;

/// A store on a fresh migrated database, and a second store (its own pool) on the same one.
struct Db {
    database: TestDatabase,
    store: Arc<PgStore>,
}

impl Db {
    async fn open(test: &str) -> Option<Db> {
        let server = Server::for_test(test)?;
        let database = server.database(Schema::Migrated).await;
        let store = Arc::new(Self::connect(&database).await);
        Some(Db { database, store })
    }

    async fn connect(database: &TestDatabase) -> PgStore {
        PgStore::connect_with(
            database.connect.clone(),
            PgOptions {
                config: StoreConfig {
                    quotas: Quotas::unbounded(),
                    ..StoreConfig::default()
                },
                max_connections: 8,
                ..PgOptions::default()
            },
        )
        .await
        .expect("connect to the test database")
    }

    async fn another(&self) -> Arc<PgStore> {
        Arc::new(Self::connect(&self.database).await)
    }

    fn pool(&self) -> &PgPool {
        self.store.pool()
    }

    async fn close(self) {
        self.store.close().await;
        self.database.drop_database().await;
    }
}

fn work() -> NewJob {
    NewJob::new(JobKind::parse("work").unwrap(), json!({}))
}

fn claim(limit: u32) -> ClaimJobs {
    ClaimJobs {
        worker: WorkerId::parse("w").unwrap(),
        queues: vec![QueueName::default_queue()],
        kinds: vec![JobKind::parse("work").unwrap()],
        limit,
        start: limit,
        lease: Duration::from_secs(60),
    }
}

/// Claims exactly the jobs `ids` (each ready, nothing else ready).
async fn claim_all(store: &PgStore, n: usize) -> Vec<Job> {
    let mut jobs = Vec::new();
    while jobs.len() < n {
        let limit = u32::try_from((n - jobs.len()).min(1_000)).unwrap();
        let claimed = store.jobs_claim(claim(limit)).await.unwrap().jobs;
        assert!(!claimed.is_empty(), "{} of {n} claimed", jobs.len());
        jobs.extend(claimed);
    }
    jobs
}

fn success(job: &Job) -> FinishItem {
    FinishItem {
        parent: job.parent_id,
        id: job.id,
        token: job.fencing_token,
        finish: Finish::Succeeded {
            result: Some(json!({"done": true})),
        },
        started: None,
    }
}

async fn edges(pool: &PgPool, job: JobId) -> Vec<(JobId, bool)> {
    let rows: Vec<(sqlx::types::Uuid, bool)> = sqlx::query_as(
        "SELECT depends_on_id, resolved FROM drover.job_dependencies WHERE job_id = $1 ORDER BY depends_on_id",
    )
    .bind(job.as_uuid())
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter().map(|(id, r)| (JobId(id), r)).collect()
}

async fn has_dependents(pool: &PgPool, job: JobId) -> bool {
    sqlx::query_scalar("SELECT has_dependents FROM drover.jobs WHERE id = $1")
        .bind(job.as_uuid())
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A dependent waits, and is queued by the finish that ends its last dependency, in that same
/// call; the edge is resolved once and the dependency is marked as having dependents (so its
/// finish left the one-statement path). A failed dependency cancels its dependent naming it,
/// and a cancelled one cancels the dependent's own dependents in the same step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependents_follow_their_dependencies_in_the_same_finish() {
    let Some(db) = Db::open("dependents_follow_their_dependencies_in_the_same_finish").await else {
        return;
    };
    let store = &db.store;
    let a = store.job_enqueue(work()).await.unwrap().job;
    let b = store
        .job_enqueue(work().with_dependency(a.id))
        .await
        .unwrap()
        .job;
    assert_eq!(b.state, JobState::Waiting);
    assert_eq!(b.pending_dependencies, 1);
    assert_eq!(store.job_get(b.id).await.unwrap().depends_on, vec![a.id]);
    assert!(has_dependents(db.pool(), a.id).await);
    assert_eq!(edges(db.pool(), b.id).await, vec![(a.id, false)]);

    let running = claim_all(store, 1).await;
    assert_eq!(running[0].id, a.id, "the waiting job is not claimable");
    let replies = store.jobs_finish(vec![success(&running[0])]).await.unwrap();
    assert_eq!(
        replies,
        vec![FinishReply::Recorded {
            id: a.id,
            to: JobState::Succeeded
        }]
    );
    let b = store.job_get(b.id).await.unwrap();
    assert_eq!((b.state, b.pending_dependencies), (JobState::Queued, 0));
    assert_eq!(edges(db.pool(), b.id).await, vec![(a.id, true)]);
    let a = store.job_get(a.id).await.unwrap();
    assert_eq!(a.result, Some(json!({"done": true})));

    // A failure cancels the dependent, which cancels its own dependent in the same step; one
    // that runs regardless is queued.
    let running = claim_all(store, 1).await;
    assert_eq!(running[0].id, b.id);
    let c = store
        .job_enqueue(work().with_dependency(b.id))
        .await
        .unwrap()
        .job;
    let d = store
        .job_enqueue(work().with_dependency(c.id))
        .await
        .unwrap()
        .job;
    let e = store
        .job_enqueue(work().with_dependency(c.id).run_regardless())
        .await
        .unwrap()
        .job;
    let failed = FinishItem {
        parent: None,
        id: b.id,
        token: running[0].fencing_token,
        finish: Finish::Failed {
            message: "boom".into(),
            retry: Retry::Never,
        },
        started: None,
    };
    store.jobs_finish(vec![failed]).await.unwrap();
    let c = store.job_get(c.id).await.unwrap();
    assert_eq!(c.state, JobState::Cancelled);
    assert!(
        c.errors[0].message.contains(&b.id.to_string()),
        "{:?}",
        c.errors
    );
    assert_eq!(
        store.job_get(d.id).await.unwrap().state,
        JobState::Cancelled
    );
    assert_eq!(store.job_get(e.id).await.unwrap().state, JobState::Queued);

    // Enqueued after its dependency ended: settled at once.
    let late = store
        .job_enqueue(work().with_dependency(a.id))
        .await
        .unwrap()
        .job;
    assert_eq!(late.state, JobState::Queued);
    let doomed = store
        .job_enqueue(work().with_dependency(b.id))
        .await
        .unwrap()
        .job;
    assert_eq!(doomed.state, JobState::Cancelled);
    assert_eq!(edges(db.pool(), doomed.id).await, vec![(b.id, true)]);
    db.close().await;
}

/// The last two dependencies of a job finish at the same instant through two pools: whichever
/// commits second sees the first one's resolution (the dependent's row lock orders them), so
/// the dependent is queued exactly once with no dependency pending, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn last_two_dependencies_finishing_at_once_queue_the_dependent() {
    let Some(db) = Db::open("last_two_dependencies_finishing_at_once_queue_the_dependent").await
    else {
        return;
    };
    let other = db.another().await;
    for _ in 0..40 {
        let a1 = db.store.job_enqueue(work()).await.unwrap().job;
        let a2 = db.store.job_enqueue(work()).await.unwrap().job;
        let b = db
            .store
            .job_enqueue(work().with_dependency(a1.id).with_dependency(a2.id))
            .await
            .unwrap()
            .job;
        assert_eq!((b.state, b.pending_dependencies), (JobState::Waiting, 2));
        let running = claim_all(&db.store, 2).await;
        let (first, second) = (success(&running[0]), success(&running[1]));
        let s1 = db.store.clone();
        let s2 = other.clone();
        let t1 = tokio::spawn(async move { s1.jobs_finish(vec![first]).await.unwrap() });
        let t2 = tokio::spawn(async move { s2.jobs_finish(vec![second]).await.unwrap() });
        for replies in [t1.await.unwrap(), t2.await.unwrap()] {
            assert!(
                matches!(replies[0], FinishReply::Recorded { .. }),
                "{replies:?}"
            );
        }
        let b = db.store.job_get(b.id).await.unwrap();
        assert_eq!((b.state, b.pending_dependencies), (JobState::Queued, 0));
        assert!(edges(db.pool(), b.id).await.iter().all(|(_, r)| *r));
        // Out of the next round's way.
        let next = claim_all(&db.store, 1).await;
        assert_eq!(next[0].id, b.id);
        db.store.jobs_finish(vec![success(&next[0])]).await.unwrap();
    }
    other.close().await;
    db.close().await;
}

/// An enqueue naming a running dependency races that dependency's finish: either the enqueue
/// locks it first (the finish then sees `has_dependents` and resolves the edge) or the finish
/// commits first (the enqueue sees it terminal and settles at once). Never a dependent left
/// waiting for a job that ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enqueue_racing_its_dependency_finish_never_waits_forever() {
    let Some(db) = Db::open("enqueue_racing_its_dependency_finish_never_waits_forever").await
    else {
        return;
    };
    let other = db.another().await;
    let mut settled_at_enqueue = 0;
    for _ in 0..40 {
        let a = db.store.job_enqueue(work()).await.unwrap().job;
        let running = claim_all(&db.store, 1).await;
        let item = success(&running[0]);
        let finisher = db.store.clone();
        let enqueuer = other.clone();
        let finish = tokio::spawn(async move { finisher.jobs_finish(vec![item]).await.unwrap() });
        let enqueue = tokio::spawn(async move {
            enqueuer
                .job_enqueue(work().with_dependency(a.id))
                .await
                .unwrap()
                .job
        });
        let replies = finish.await.unwrap();
        assert!(matches!(replies[0], FinishReply::Recorded { .. }));
        let b = enqueue.await.unwrap();
        if b.state == JobState::Queued {
            settled_at_enqueue += 1;
        }
        let b = db.store.job_get(b.id).await.unwrap();
        assert_eq!((b.state, b.pending_dependencies), (JobState::Queued, 0));
        let next = claim_all(&db.store, 1).await;
        assert_eq!(next[0].id, b.id);
        db.store.jobs_finish(vec![success(&next[0])]).await.unwrap();
    }
    eprintln!("{settled_at_enqueue} of 40 enqueues saw the dependency ended");
    other.close().await;
    db.close().await;
}

/// A parent enqueues 10,000 children under its lease and waits for them without a slot; the
/// children finish in batches of 1,000 and the last one queues the parent in its own finish.
/// Each child costs one decrement of the parent's counter: the time per batch stays flat.
/// Each child has one link to its parent, deleted by retention with the child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_of_10000_children_resumes_the_parent_once() {
    let Some(db) = Db::open("fan_out_of_10000_children_resumes_the_parent_once").await else {
        return;
    };
    let store = &db.store;
    let parent = store
        .job_enqueue(NewJob::new(JobKind::parse("parent").unwrap(), json!({})))
        .await
        .unwrap()
        .job;
    let mut claim_parent = claim(1);
    claim_parent.kinds = vec![JobKind::parse("parent").unwrap()];
    let running = store.jobs_claim(claim_parent.clone()).await.unwrap().jobs;
    let token = running[0].fencing_token;
    let started = Instant::now();
    let children: Vec<NewJob> = (0..10_000).map(|_| work()).collect();
    let answers = store
        .children_enqueue(EnqueueChildren {
            parent: parent.id,
            token,
            jobs: children,
        })
        .await
        .unwrap();
    let enqueued = started.elapsed();
    assert_eq!(answers.len(), 10_000);
    assert!(answers.iter().all(|a| a.job.parent_id == Some(parent.id)));
    assert_eq!(
        store.job_get(parent.id).await.unwrap().live_children,
        10_000
    );
    // One more is over the bound and stores nothing.
    let refused = store
        .children_enqueue(EnqueueChildren {
            parent: parent.id,
            token,
            jobs: vec![work()],
        })
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("10000"), "{refused}");

    let waiting = store
        .jobs_finish(vec![FinishItem {
            parent: None,
            id: parent.id,
            token,
            finish: Finish::WaitForChildren,
            started: None,
        }])
        .await
        .unwrap();
    assert_eq!(
        waiting,
        vec![FinishReply::Recorded {
            id: parent.id,
            to: JobState::Waiting
        }]
    );
    let mut batches = Vec::new();
    let finishing = Instant::now();
    for _ in 0..10 {
        let jobs = claim_all(store, 1_000).await;
        let items: Vec<FinishItem> = jobs.iter().map(success).collect();
        let batch = Instant::now();
        let replies = store.jobs_finish(items).await.unwrap();
        batches.push(batch.elapsed());
        assert!(replies.iter().all(|r| matches!(
            r,
            FinishReply::Recorded {
                to: JobState::Succeeded,
                ..
            }
        )));
    }
    let parent_after = store.job_get(parent.id).await.unwrap();
    assert_eq!(
        (parent_after.state, parent_after.live_children),
        (JobState::Queued, 0)
    );
    assert_eq!(parent_after.attempt, 0, "waiting gave the attempt back");
    let page = store
        .jobs_list(ListJobs {
            parent: Some(parent.id),
            limit: 1_000,
            ..ListJobs::default()
        })
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 1_000);
    eprintln!(
        "10,000 children: enqueued in {:.0} ms; finished in {:.0} ms, per 1,000-job batch {:?} ms",
        enqueued.as_secs_f64() * 1e3,
        finishing.elapsed().as_secs_f64() * 1e3,
        batches.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
    );
    let again = store.jobs_claim(claim_parent).await.unwrap().jobs;
    assert_eq!(again[0].id, parent.id, "the parent runs again");

    // One link per child, kept while the parent lives (retention keeps a child whose parent
    // is not terminal), deleted with each child.
    let links = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM drover.job_children WHERE parent_id = $1",
        )
        .bind(parent.id.as_uuid())
        .fetch_one(db.pool())
        .await
        .unwrap()
    };
    assert_eq!(links().await, 10_000);
    let prune = || PruneJobs {
        older_than: Duration::ZERO,
        limit: 20_000,
    };
    assert_eq!(store.jobs_prune(prune()).await.unwrap(), 0);
    assert_eq!(links().await, 10_000);
    store.jobs_finish(vec![success(&again[0])]).await.unwrap();
    assert_eq!(store.jobs_prune(prune()).await.unwrap(), 10_001);
    assert_eq!(
        links().await,
        0,
        "the links of pruned children go with them"
    );
    db.close().await;
}

/// A workflow graph is stored as one unit, read back with its jobs and counts, cancelled (its
/// running job signalled, the rest cancelled) and retried (each job waiting again for its
/// dependencies that run again); retention keeps what a live job still needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_enqueue_get_list_cancel_retry_and_prune() {
    let Some(db) = Db::open("workflow_enqueue_get_list_cancel_retry_and_prune").await else {
        return;
    };
    let store = &db.store;
    let graph = NewWorkflow::new()
        .job("report", work(), &["extract", "transform"])
        .job("extract", work(), &[])
        .job("transform", work(), &["extract"]);
    let enqueued = store.workflow_enqueue(graph).await.unwrap();
    let states: Vec<JobState> = enqueued.jobs.iter().map(|a| a.job.state).collect();
    assert_eq!(
        states,
        vec![JobState::Waiting, JobState::Queued, JobState::Waiting]
    );
    let report = enqueued.jobs[0].job.clone();
    let extract = enqueued.jobs[1].job.clone();
    assert_eq!(report.depends_on.len(), 2);
    let workflow = store.workflow_get(enqueued.id).await.unwrap();
    assert_eq!(workflow.jobs.len(), 3);
    assert!(workflow
        .jobs
        .iter()
        .all(|j| j.workflow_id == Some(enqueued.id)));
    assert_eq!(
        workflow
            .jobs
            .iter()
            .find(|j| j.id == report.id)
            .unwrap()
            .name
            .as_deref(),
        Some("report")
    );
    let page = store
        .workflows_list(ListWorkflows::default())
        .await
        .unwrap();
    assert_eq!(page.workflows.len(), 1);
    assert_eq!(page.workflows[0].states.get(&JobState::Waiting), Some(&2));
    let listed = store
        .jobs_list(ListJobs {
            workflow: Some(enqueued.id),
            ..ListJobs::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.jobs.len(), 3);

    let running = claim_all(store, 1).await;
    assert_eq!(running[0].id, extract.id);
    let change = store.workflow_cancel(enqueued.id).await.unwrap();
    assert_eq!(change.jobs, 3);
    let after = store.workflow_get(enqueued.id).await.unwrap();
    let extract_now = after.jobs.iter().find(|j| j.id == extract.id).unwrap();
    assert!(extract_now.cancel_requested && extract_now.state == JobState::Running);
    let cancelled = FinishItem {
        parent: None,
        id: extract.id,
        token: running[0].fencing_token,
        finish: Finish::Cancelled {
            message: "stopped".into(),
        },
        started: None,
    };
    store.jobs_finish(vec![cancelled]).await.unwrap();
    let summary = store
        .workflows_list(ListWorkflows::default())
        .await
        .unwrap();
    assert_eq!(summary.workflows[0].overall(), JobState::Cancelled);

    let retried = store.workflow_retry(enqueued.id).await.unwrap();
    assert_eq!(retried.jobs, 3);
    let after = store.workflow_get(enqueued.id).await.unwrap();
    let state_of = |id: JobId| after.jobs.iter().find(|j| j.id == id).unwrap().clone();
    assert_eq!(state_of(extract.id).state, JobState::Queued);
    let report_now = state_of(report.id);
    assert_eq!(
        (report_now.state, report_now.pending_dependencies),
        (JobState::Waiting, 2)
    );
    // Run it through.
    for _ in 0..3 {
        let jobs = claim_all(store, 1).await;
        store.jobs_finish(vec![success(&jobs[0])]).await.unwrap();
    }
    let done = store
        .workflows_list(ListWorkflows::default())
        .await
        .unwrap();
    assert_eq!(done.workflows[0].overall(), JobState::Succeeded);

    // Retention: a finished dependency of a live job stays.
    let keep = store.job_enqueue(work()).await.unwrap().job;
    let running = claim_all(store, 1).await;
    store.jobs_finish(vec![success(&running[0])]).await.unwrap();
    let waiter = store
        .job_enqueue(work().with_dependency(keep.id).with_dependency(report.id))
        .await
        .unwrap()
        .job;
    assert_eq!(waiter.state, JobState::Queued);
    let blocker = store.job_enqueue(work()).await.unwrap().job;
    let held = store
        .job_enqueue(work().with_dependency(keep.id).with_dependency(blocker.id))
        .await
        .unwrap()
        .job;
    assert_eq!(held.state, JobState::Waiting);
    let pruned = store
        .jobs_prune(PruneJobs {
            older_than: Duration::ZERO,
            limit: 1_000,
        })
        .await
        .unwrap();
    // extract and transform go; report stays for the queued waiter, keep for the waiting one.
    assert_eq!(pruned, 2);
    assert!(
        store.job_get(keep.id).await.is_ok(),
        "a waiting job depends on it"
    );
    assert!(
        store.job_get(report.id).await.is_ok(),
        "a queued job depends on it"
    );
    assert!(store.job_get(extract.id).await.is_err());
    assert!(
        edges(db.pool(), waiter.id).await.len() == 2,
        "the edges of live jobs stay"
    );
    let gone: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM drover.job_dependencies WHERE depends_on_id = $1 OR job_id = $1",
    )
    .bind(extract.id.as_uuid())
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(gone, 0, "the edges of pruned jobs go with them");
    db.close().await;
}

/// Cancelling a waiting parent cancels its waiting and queued children and signals its running
/// ones; the cascade is counted, and the parent's live children stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_cascades_to_children() {
    let Some(db) = Db::open("cancel_cascades_to_children").await else {
        return;
    };
    let store = &db.store;
    let parent = store
        .job_enqueue(NewJob::new(JobKind::parse("parent").unwrap(), json!({})))
        .await
        .unwrap()
        .job;
    let mut claim_parent = claim(1);
    claim_parent.kinds = vec![JobKind::parse("parent").unwrap()];
    let token = store.jobs_claim(claim_parent).await.unwrap().jobs[0].fencing_token;
    let answers = store
        .children_enqueue(EnqueueChildren {
            parent: parent.id,
            token,
            jobs: (0..3).map(|_| work()).collect(),
        })
        .await
        .unwrap();
    assert!(answers.iter().all(|a| a.status == EnqueueStatus::Created));
    let child = claim_all(store, 1).await.remove(0);
    store
        .jobs_finish(vec![FinishItem {
            parent: None,
            id: parent.id,
            token,
            finish: Finish::WaitForChildren,
            started: None,
        }])
        .await
        .unwrap();
    let outcome = store.job_cancel(parent.id).await.unwrap();
    assert_eq!(outcome.job.state, JobState::Cancelled);
    assert_eq!(outcome.cascaded, 3);
    let children: Vec<Job> = store
        .jobs_get(answers.iter().map(|a| a.job.id).collect())
        .await
        .unwrap();
    let running: Vec<&Job> = children.iter().filter(|c| c.id == child.id).collect();
    assert!(running[0].cancel_requested && running[0].state == JobState::Running);
    assert_eq!(
        children
            .iter()
            .filter(|c| c.state == JobState::Cancelled)
            .count(),
        2
    );
    assert_eq!(store.job_get(parent.id).await.unwrap().live_children, 1);
    store
        .jobs_finish(vec![FinishItem {
            parent: None,
            id: child.id,
            token: child.fencing_token,
            finish: Finish::Cancelled {
                message: "stopped".into(),
            },
            started: None,
        }])
        .await
        .unwrap();
    assert_eq!(store.job_get(parent.id).await.unwrap().live_children, 0);
    db.close().await;
}

/// A parent's cancel (parent, then its children) races its children's finishes (each child,
/// then the parent) through two pools: the lock orders differ, so PostgreSQL may fail one of
/// them with a deadlock, which runs again. Every call succeeds, and the parent's count of live
/// children ends exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parent_cancel_racing_child_finishes_keeps_counts_exact() {
    let Some(db) = Db::open("parent_cancel_racing_child_finishes_keeps_counts_exact").await else {
        return;
    };
    let other = db.another().await;
    let mut claim_parent = claim(1);
    claim_parent.kinds = vec![JobKind::parse("parent").unwrap()];
    for _ in 0..10 {
        let parent = db
            .store
            .job_enqueue(NewJob::new(JobKind::parse("parent").unwrap(), json!({})))
            .await
            .unwrap()
            .job;
        let token = db
            .store
            .jobs_claim(claim_parent.clone())
            .await
            .unwrap()
            .jobs[0]
            .fencing_token;
        db.store
            .children_enqueue(EnqueueChildren {
                parent: parent.id,
                token,
                jobs: (0..40).map(|_| work()).collect(),
            })
            .await
            .unwrap();
        let children = claim_all(&db.store, 40).await;
        let canceller = db.store.clone();
        let cancel = tokio::spawn(async move { canceller.job_cancel(parent.id).await.unwrap() });
        let mut finishes = Vec::new();
        for chunk in children.chunks(5) {
            let items: Vec<FinishItem> = chunk.iter().map(success).collect();
            let store = other.clone();
            finishes.push(tokio::spawn(async move {
                store.jobs_finish(items).await.unwrap()
            }));
        }
        let outcome = cancel.await.unwrap();
        assert!(outcome.job.cancel_requested);
        for finish in finishes {
            for reply in finish.await.unwrap() {
                assert!(matches!(reply, FinishReply::Recorded { .. }), "{reply:?}");
            }
        }
        let parent = db.store.job_get(parent.id).await.unwrap();
        assert_eq!(parent.live_children, 0);
        let finished = FinishItem {
            parent: None,
            id: parent.id,
            token,
            finish: Finish::Cancelled {
                message: "stopped".into(),
            },
            started: None,
        };
        db.store.jobs_finish(vec![finished]).await.unwrap();
    }
    other.close().await;
    db.close().await;
}

/// A job with a dependency enqueued inside the caller's own transaction is stored, with its
/// edge and its dependency's mark, only if that transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linked_enqueue_in_the_callers_transaction_follows_it() {
    let Some(db) = Db::open("linked_enqueue_in_the_callers_transaction_follows_it").await else {
        return;
    };
    use drover_store_postgres::sqlx::Connection;
    let a = db.store.job_enqueue(work()).await.unwrap().job;
    let mut conn = db.pool().acquire().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let rolled = db
        .store
        .enqueue_in(&mut tx, vec![work().with_dependency(a.id)])
        .await
        .unwrap();
    assert_eq!(rolled[0].job.state, JobState::Waiting);
    tx.rollback().await.unwrap();
    assert!(db.store.job_get(rolled[0].job.id).await.is_err());
    assert!(!has_dependents(db.pool(), a.id).await);
    assert!(edges(db.pool(), rolled[0].job.id).await.is_empty());

    let mut tx = conn.begin().await.unwrap();
    let kept = db
        .store
        .enqueue_in(&mut tx, vec![work().with_dependency(a.id).with_name("b")])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let b = db.store.job_get(kept[0].job.id).await.unwrap();
    assert_eq!((b.state, b.name.as_deref()), (JobState::Waiting, Some("b")));
    assert!(has_dependents(db.pool(), a.id).await);
    assert_eq!(edges(db.pool(), b.id).await, vec![(a.id, false)]);
    drop(conn);
    db.close().await;
}

/// A graph of 10,000 jobs (one root, 9,999 jobs waiting for it) is stored in one call, and the
/// root's finish queues all 9,999 in its own transaction: one edge resolved each. Timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_of_10000_jobs_is_released_by_one_finish() {
    let Some(db) = Db::open("workflow_of_10000_jobs_is_released_by_one_finish").await else {
        return;
    };
    let store = &db.store;
    let mut graph = NewWorkflow::new().job("root", work(), &[]);
    for n in 1..10_000 {
        graph = graph.job(format!("leaf{n}"), work(), &["root"]);
    }
    let started = Instant::now();
    let enqueued = store.workflow_enqueue(graph).await.unwrap();
    let enqueue = started.elapsed();
    assert_eq!(enqueued.jobs.len(), 10_000);
    assert!(enqueued.jobs[1..]
        .iter()
        .all(|a| a.job.state == JobState::Waiting));
    let root = claim_all(store, 1).await;
    assert_eq!(root[0].id, enqueued.jobs[0].job.id);
    let started = Instant::now();
    store.jobs_finish(vec![success(&root[0])]).await.unwrap();
    let finish = started.elapsed();
    let page = store
        .workflows_list(ListWorkflows::default())
        .await
        .unwrap();
    assert_eq!(
        page.workflows[0].states.get(&JobState::Queued),
        Some(&9_999)
    );
    let unresolved: i64 =
        sqlx::query_scalar("SELECT count(*) FROM drover.job_dependencies WHERE NOT resolved")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(unresolved, 0);
    eprintln!(
        "10,000-job workflow: enqueued in {:.0} ms; the root's finish queued 9,999 in {:.0} ms",
        enqueue.as_secs_f64() * 1e3,
        finish.as_secs_f64() * 1e3
    );
    db.close().await;
}

/// A heartbeat never waits for a row another transaction holds (a finish still propagating
/// through a long workflow, an operator's cancel): that job is answered `Deferred` with nothing
/// changed, and the batch's other jobs are extended and their updates saved at once. Once the
/// row is free, the same job is extended again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_skips_a_held_row_and_extends_the_rest() {
    use drover_core::{HeartbeatItem, HeartbeatJobs, HeartbeatReply};
    use drover_store_postgres::sqlx::Connection;
    let Some(db) = Db::open("heartbeat_skips_a_held_row_and_extends_the_rest").await else {
        return;
    };
    db.store.job_enqueue(work()).await.unwrap();
    db.store.job_enqueue(work()).await.unwrap();
    let jobs = claim_all(&db.store, 2).await;
    let (held, free) = (&jobs[0], &jobs[1]);
    let beat = |job: &Job, progress: i64| HeartbeatItem {
        id: job.id,
        token: job.fencing_token,
        meta: None,
        progress: Some(json!({ "step": progress })),
        started: None,
    };
    let lease = Duration::from_secs(600);

    let mut holder = db.pool().acquire().await.unwrap();
    let mut tx = holder.begin().await.unwrap();
    sqlx::query("SELECT id FROM drover.jobs WHERE id = $1 FOR UPDATE")
        .bind(held.id.as_uuid())
        .execute(&mut *tx)
        .await
        .unwrap();
    // A guard against a hang, not a timing: a heartbeat that waited for the row would wait
    // until the rollback below, which never comes first.
    let replies = tokio::time::timeout(
        Duration::from_secs(60),
        db.store.jobs_heartbeat(HeartbeatJobs {
            lease,
            jobs: vec![beat(held, 1), beat(free, 1)],
        }),
    )
    .await
    .expect("the heartbeat waited for the held row")
    .unwrap();
    assert_eq!(replies[0], HeartbeatReply::Deferred { id: held.id });
    assert!(
        matches!(replies[1], HeartbeatReply::Extended { id, .. } if id == free.id),
        "{replies:?}"
    );
    tx.rollback().await.unwrap();
    drop(holder);
    let stored_held = db.store.job_get(held.id).await.unwrap();
    assert_eq!(stored_held.lease_expires_at, held.lease_expires_at);
    assert_eq!(stored_held.progress, None);
    let stored_free = db.store.job_get(free.id).await.unwrap();
    assert_eq!(stored_free.progress, Some(json!({ "step": 1 })));
    assert!(stored_free.lease_expires_at > free.lease_expires_at);

    let replies = db
        .store
        .jobs_heartbeat(HeartbeatJobs {
            lease,
            jobs: vec![beat(held, 2)],
        })
        .await
        .unwrap();
    assert!(
        matches!(replies[0], HeartbeatReply::Extended { id, .. } if id == held.id),
        "{replies:?}"
    );
    assert_eq!(
        db.store.job_get(held.id).await.unwrap().progress,
        Some(json!({ "step": 2 }))
    );
    db.close().await;
}

/// `children_enqueue` inserts the children before it locks the parent (ADR 0004, decision 4),
/// so the fenced check under that lock is what keeps a parent whose lease ended meanwhile from
/// storing any: here the lease expires while the call waits for the parent's row, and the call
/// fails with every child rolled back and the parent's count unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_stored_while_the_parents_lease_ends_are_rolled_back() {
    use drover_store_postgres::sqlx::Connection;
    let Some(db) = Db::open("children_stored_while_the_parents_lease_ends_are_rolled_back").await
    else {
        return;
    };
    let store = Arc::new(db.store.clone());
    let parent = store
        .job_enqueue(NewJob::new(JobKind::parse("parent").unwrap(), json!({})))
        .await
        .unwrap()
        .job;
    let mut claim_parent = claim(1);
    claim_parent.kinds = vec![JobKind::parse("parent").unwrap()];
    let token = store.jobs_claim(claim_parent).await.unwrap().jobs[0].fencing_token;

    let mut holder = db.pool().acquire().await.unwrap();
    let mut tx = holder.begin().await.unwrap();
    sqlx::query("SELECT id FROM drover.jobs WHERE id = $1 FOR UPDATE")
        .bind(parent.id.as_uuid())
        .execute(&mut *tx)
        .await
        .unwrap();
    let adding = tokio::spawn({
        let store = Arc::clone(&store);
        async move {
            store
                .children_enqueue(EnqueueChildren {
                    parent: parent.id,
                    token,
                    jobs: (0..3).map(|_| work()).collect(),
                })
                .await
        }
    });
    // The call waits for the parent's row lock, its children already inserted: its backend
    // holds the insert's lock on the table (a lock taken first would hold only ROW SHARE).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity a \
             JOIN pg_locks l ON l.pid = a.pid AND l.granted AND l.mode = 'RowExclusiveLock' \
             JOIN pg_class c ON c.oid = l.relation AND c.relname = 'jobs' \
             WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'",
        )
        .fetch_one(db.pool())
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "children_enqueue never waited for the parent after inserting"
        );
        tokio::task::yield_now().await;
    }
    sqlx::query(
        "UPDATE drover.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
    )
    .bind(parent.id.as_uuid())
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    drop(holder);

    let refused = adding.await.unwrap().unwrap_err();
    assert!(
        matches!(refused, drover_core::Error::LeaseLost { .. }),
        "{refused:?}"
    );
    let children: i64 = sqlx::query_scalar("SELECT count(*) FROM drover.jobs WHERE parent_id = $1")
        .bind(parent.id.as_uuid())
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(children, 0, "no child of the refused call is stored");
    assert_eq!(store.job_get(parent.id).await.unwrap().live_children, 0);
    db.close().await;
}

//! [`JobContext`]: what a handler gets for one run of a job (docs/design.md section 6): the job,
//! its args, the fencing token of this run, a cancellation token and best-effort progress and
//! meta updates that the heartbeat saves; and the workflow reads and writes of docs/design.md
//! section 10: enqueue children fenced by this run's lease, read the children's and the
//! dependencies' outcomes.

use std::sync::Arc;

use drover_core::job::CHILDREN_MAX;
use drover_core::{
    EnqueueChildren, EnqueueStatus, Enqueued, Error, FencingToken, Job, JobState, JobStore,
    ListJobs, NewJob, SizeLimits, TenantId,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::running::{CancelReason, JobShared};
use crate::telemetry;

/// What a context reaches beyond its job: the store (children, dependencies) and the metrics
/// (new children, failed children). One per worker, shared by every context.
pub(crate) struct Links {
    pub(crate) store: Arc<dyn JobStore>,
    pub(crate) metrics: Arc<dyn Metrics>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links").finish_non_exhaustive()
    }
}

/// The handler's view of one run of a job. Cheap to clone; clones share the same run.
///
/// Inside a worker the context is connected to the runner: [`JobContext::step`] and
/// [`JobContext::set_meta`] are saved by the next heartbeat (at the latest after one heartbeat
/// interval, 15 s by default; a step also asks for an early heartbeat, at most once per second
/// per process), and the cancellation token fires when the job is cancelled, its lease is lost,
/// the worker shuts down or the kind's timeout elapses. [`JobContext::detached`] builds one
/// without a runner for handler unit tests.
#[derive(Debug, Clone)]
pub struct JobContext {
    shared: Arc<JobShared>,
    links: Option<Arc<Links>>,
}

impl JobContext {
    pub(crate) fn from_shared(shared: Arc<JobShared>, links: Option<Arc<Links>>) -> Self {
        JobContext { shared, links }
    }

    /// A context not connected to any runner, for handler unit tests: progress and meta are
    /// kept in memory (read them back with [`JobContext::progress`] and [`JobContext::meta`]),
    /// and the token fires only when the test cancels it (`ctx.cancellation().cancel()`).
    /// Meta is checked against the default size bound (256 KiB).
    pub fn detached(job: Job) -> Self {
        JobContext::from_shared(
            Arc::new(JobShared::new(
                job,
                CancellationToken::new(),
                None,
                SizeLimits::default().max_meta_bytes,
            )),
            None,
        )
    }

    /// A detached context ([`JobContext::detached`]) whose workflow calls
    /// ([`JobContext::enqueue_children`], [`JobContext::children`],
    /// [`JobContext::dependencies`]) reach `store`, for handler tests against a real store
    /// (give it a job the test claimed there, so its fencing token is current).
    pub fn detached_with_store(job: Job, store: Arc<dyn JobStore>) -> Self {
        let mut ctx = JobContext::detached(job);
        ctx.links = Some(Arc::new(Links {
            store,
            metrics: Arc::new(crate::metrics::NoopMetrics),
        }));
        ctx
    }

    fn links(&self) -> Result<&Links, Error> {
        self.links.as_deref().ok_or_else(|| {
            Error::fatal(
                "this job context has no store: build it with JobContext::detached_with_store",
            )
        })
    }

    /// Enqueues `children` of this job in one atomic step with a write fenced by this run's
    /// lease ([`JobStore::children_enqueue`]): each carries this job as its parent and this
    /// job's workflow id. Children share the parent's tenant: a child left at the default
    /// tenant gets the parent's. Return [`crate::Outcome::WaitForChildren`] afterwards to wait
    /// for them without holding the slot (docs/design.md section 10). Answers per child in
    /// input order.
    ///
    /// # Errors
    /// `LeaseLost` when this run's lease is no longer current (nothing stored: stop working);
    /// `InvalidInput` naming `jobs[i].<field>`, or `jobs` past [`CHILDREN_MAX`] live children;
    /// `Conflict`; `QuotaExceeded`; `Unavailable`.
    pub async fn enqueue_children(&self, children: Vec<NewJob>) -> Result<Vec<Enqueued>, Error> {
        let links = self.links()?;
        let job = &self.shared.job;
        let jobs = children
            .into_iter()
            .map(|mut child| {
                if child.tenant == TenantId::default() {
                    child.tenant = job.tenant.clone();
                }
                if child.trace_context.is_none() {
                    // Children descend from this run's span when spans are on, else share
                    // the parent's stored context (docs/adr/0013-trace-context.md).
                    child.trace_context = telemetry::spans()
                        .and_then(|_| telemetry::capture_current())
                        .or_else(|| job.trace_context.clone());
                }
                child
            })
            .collect();
        let enqueued = links
            .store
            .children_enqueue(EnqueueChildren {
                parent: job.id,
                token: job.fencing_token,
                jobs,
            })
            .await?;
        for answer in &enqueued {
            if answer.status == EnqueueStatus::Created {
                links
                    .metrics
                    .job_enqueued(&answer.job.kind, &answer.job.queue);
            }
        }
        Ok(enqueued)
    }

    /// This job's children as stored now, oldest first, with their results, errors and
    /// states: what a parent that waited for them reads when it runs again. At most the
    /// newest [`CHILDREN_MAX`] of them. The first call of a run counts each child that ended
    /// `failed` or `cancelled` in [`Metrics::child_failed`].
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn children(&self) -> Result<Vec<Job>, Error> {
        let links = self.links()?;
        let job = &self.shared.job;
        let mut children = Vec::new();
        let mut before = None;
        loop {
            let page = links
                .store
                .jobs_list(ListJobs {
                    parent: Some(job.id),
                    tenant: Some(job.tenant.clone()),
                    before,
                    limit: drover_core::store::LIST_LIMIT_MAX,
                    ..ListJobs::default()
                })
                .await?;
            children.extend(page.jobs);
            match page.next {
                Some(next) if children.len() < CHILDREN_MAX => before = Some(next),
                _ => break,
            }
        }
        children.truncate(CHILDREN_MAX);
        children.reverse();
        if self.shared.first_children_observation() {
            for _ in children.iter().filter(|c| ended_badly(c)) {
                links.metrics.child_failed(&job.kind);
            }
        }
        Ok(children)
    }

    /// The jobs this one depends on ([`Job::depends_on`]), in that order, with their results:
    /// what a dependent reads of the work it waited for. A dependency deleted since (by
    /// retention, long after it ended) is left out.
    ///
    /// # Errors
    /// `Unavailable`, `Fatal`.
    pub async fn dependencies(&self) -> Result<Vec<Job>, Error> {
        let depends_on = &self.shared.job.depends_on;
        if depends_on.is_empty() {
            return Ok(Vec::new());
        }
        self.links()?.store.jobs_get(depends_on.clone()).await
    }

    /// The job as claimed for this run (state running, `attempt` counting this run).
    pub fn job(&self) -> &Job {
        &self.shared.job
    }

    /// The job's args deserialized into `A`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] with field `args` saying where and why they do not fit `A`
    /// (`do not match SleepArgs: at ms: invalid type: string, expected u64`): the path, the
    /// kind of problem and what the type expects, never a value from the args (docs/design.md
    /// section 9). Field names are shown; see `args::decode` in this crate for the rules.
    pub fn args<A: DeserializeOwned>(&self) -> Result<A, Error> {
        crate::args::decode(&self.shared.job.args)
    }

    /// The fencing token of this run; every write the runner makes for the job presents it.
    pub fn fencing_token(&self) -> FencingToken {
        self.shared.job.fencing_token
    }

    /// The run's cancellation token (a clone: await `cancelled()` on it in a `select!`).
    pub fn cancellation(&self) -> CancellationToken {
        self.shared.cancel.clone()
    }

    /// True once the cancellation token fired.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel.is_cancelled()
    }

    /// Why the token fired, when the runner fired it; `None` before, or when a test cancelled
    /// a detached context's token directly.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.shared.reason()
    }

    /// Records progress `{"step": name, "detail": detail, "steps": [{"step", "at"}, ...]}`:
    /// the latest step with its detail, and the names of this run's last
    /// [`STEPS_MAX`](crate::progress::STEPS_MAX) steps with the worker's time of each (RFC 3339
    /// UTC, milliseconds; older ones counted in `"steps_dropped"`), which the dashboard shows
    /// as a timeline ([`crate::progress`]). Best effort: a lost heartbeat loses it, it never
    /// fails the job. Saved as the job's `progress` by the next heartbeat. Never put secrets
    /// or args in it: operators see it.
    pub fn step(&self, name: &str, detail: impl Into<Value>) {
        let detail = detail.into();
        // The time is read under the progress lock, so the history's order is the times'.
        self.shared.update_progress(|previous| {
            crate::progress::after_step(previous, name, detail, chrono::Utc::now())
        });
    }

    /// The latest progress recorded with [`JobContext::step`] during this run.
    pub fn progress(&self) -> Option<Value> {
        self.shared.progress()
    }

    /// Replaces the job's meta object; saved by the next heartbeat (and before the outcome is
    /// written).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] with field `meta` when `meta` is not a JSON object, holds a NUL
    /// character or is larger than the store's meta bound; nothing is recorded then.
    pub fn set_meta(&self, meta: Value) -> Result<(), Error> {
        if !meta.is_object() {
            return Err(Error::invalid("meta", "must be a JSON object"));
        }
        drover_core::json::check_value("meta", &meta, self.shared.max_meta_bytes)?;
        self.shared.set_meta(meta);
        Ok(())
    }

    /// The job's current meta: the last [`JobContext::set_meta`] of this run, else the meta
    /// the job was claimed with.
    pub fn meta(&self) -> Value {
        self.shared.meta()
    }
}

/// A child that ended without success: what a parent's rollback hook hears about.
pub(crate) fn ended_badly(job: &Job) -> bool {
    matches!(job.state, JobState::Failed | JobState::Cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use drover_core::{JobId, JobKind, NewJob};
    use serde::Deserialize;
    use serde_json::json;

    fn job(args: Value) -> Job {
        NewJob::new(JobKind::parse("email.send").unwrap(), args)
            .into_job(JobId::new_v7(), Utc::now())
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Email {
        to: String,
    }

    #[test]
    fn args_deserialize_or_name_the_problem() {
        let ctx = JobContext::detached(job(json!({"to": "a@example.com"})));
        assert_eq!(
            ctx.args::<Email>().unwrap(),
            Email {
                to: "a@example.com".into()
            }
        );
        let bad = JobContext::detached(job(json!({"recipient": "secret@example.com"})));
        let err = bad.args::<Email>().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("Email"), "{text}");
        assert!(text.contains("missing field `to`"), "{text}");
        assert!(!text.contains("secret@example.com"), "{text}");
        let wrong = JobContext::detached(job(json!({"to": ["secret@example.com"]})));
        let text = wrong.args::<Email>().unwrap_err().to_string();
        assert!(
            text.ends_with("do not match Email: at to: invalid type: sequence, expected a string"),
            "{text}"
        );
        assert!(!text.contains("secret@example.com"), "{text}");
    }

    #[test]
    fn detached_context_keeps_progress_meta_and_cancellation() {
        let ctx = JobContext::detached(job(json!({})));
        assert!(ctx.progress().is_none());
        ctx.step("download", "3 of 10");
        let progress = ctx.progress().unwrap();
        assert_eq!(progress["step"], "download");
        assert_eq!(progress["detail"], "3 of 10");
        assert_eq!(progress["steps"][0]["step"], "download");
        assert!(ctx.set_meta(json!([1])).is_err());
        ctx.set_meta(json!({"phase": "upload"})).unwrap();
        assert_eq!(ctx.meta(), json!({"phase": "upload"}));
        assert!(!ctx.is_cancelled());
        ctx.cancellation().cancel();
        assert!(ctx.is_cancelled());
        assert_eq!(ctx.cancel_reason(), None);
    }

    /// `step` keeps this run's last 50 steps, oldest first, each with its time; older ones
    /// are counted as dropped, and only the latest step keeps its detail.
    #[test]
    fn steps_keep_a_bounded_history_with_the_latest_detail() {
        let ctx = JobContext::detached(job(json!({})));
        let before = Utc::now();
        for i in 0..51 {
            ctx.step(&format!("step {i}"), json!({"i": i}));
        }
        let after = Utc::now();
        let progress = ctx.progress().unwrap();
        assert_eq!(progress["step"], "step 50");
        assert_eq!(progress["detail"], json!({"i": 50}));
        assert_eq!(progress["steps_dropped"], 1);
        let steps = progress["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 50);
        assert!(
            steps.iter().all(|s| s.get("detail").is_none()),
            "{progress}"
        );
        let history = crate::progress::history(&progress).unwrap();
        let names: Vec<&str> = history.steps.iter().map(|s| s.step.as_str()).collect();
        let expected: Vec<String> = (1..51).map(|i| format!("step {i}")).collect();
        assert_eq!(names, expected);
        // Times are the worker's clock at millisecond precision, in order.
        let floor = before - chrono::Duration::milliseconds(1);
        assert!(history.steps.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(history.steps[0].at >= floor && history.steps[49].at <= after);
        let at = steps[0]["at"].as_str().unwrap();
        assert!(
            at.ends_with('Z') && at.len() == "2026-12-01T10:00:00.000Z".len(),
            "{at}"
        );
    }

    /// With spans off, children share the parent's stored trace context; a child given its
    /// own keeps it.
    #[tokio::test]
    async fn children_inherit_the_parents_trace_context() {
        use drover_core::{ClaimJobs, JobStore, QueueName, TraceContext, WorkerId};
        use std::time::Duration;
        let store: Arc<dyn JobStore> = Arc::new(drover_store_memory::MemoryStore::new(
            drover_core::StoreConfig::default(),
        ));
        let parent_context = TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            None,
        )
        .unwrap();
        let own = TraceContext::new(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            None,
        )
        .unwrap();
        let kind = JobKind::parse("fan.out").unwrap();
        store
            .job_enqueue(
                NewJob::new(kind.clone(), json!({})).with_trace_context(parent_context.clone()),
            )
            .await
            .unwrap();
        let claimed = store
            .jobs_claim(ClaimJobs {
                queues: vec![QueueName::default_queue()],
                kinds: vec![kind.clone()],
                limit: 1,
                start: 1,
                worker: WorkerId::parse("w").unwrap(),
                lease: Duration::from_secs(60),
            })
            .await
            .unwrap()
            .jobs;
        let ctx = JobContext::detached_with_store(claimed[0].clone(), Arc::clone(&store));
        let child = |context: Option<TraceContext>| {
            let mut job = NewJob::new(JobKind::parse("child").unwrap(), json!({}));
            job.trace_context = context;
            job
        };
        let answers = ctx
            .enqueue_children(vec![child(None), child(Some(own.clone()))])
            .await
            .unwrap();
        assert_eq!(answers[0].job.trace_context, Some(parent_context));
        assert_eq!(answers[1].job.trace_context, Some(own));
    }
}

//! [`JobContext`]: what a handler gets for one run of a job (docs/design.md section 6): the job,
//! its args, the fencing token of this run, a cancellation token and best-effort progress and
//! meta updates that the heartbeat saves.

use std::sync::Arc;

use drover_core::{Error, FencingToken, Job, SizeLimits};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::running::{CancelReason, JobShared};

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
}

impl JobContext {
    pub(crate) fn from_shared(shared: Arc<JobShared>) -> Self {
        JobContext { shared }
    }

    /// A context not connected to any runner, for handler unit tests: progress and meta are
    /// kept in memory (read them back with [`JobContext::progress`] and [`JobContext::meta`]),
    /// and the token fires only when the test cancels it (`ctx.cancellation().cancel()`).
    /// Meta is checked against the default size bound (256 KiB).
    pub fn detached(job: Job) -> Self {
        JobContext::from_shared(Arc::new(JobShared::new(
            job,
            CancellationToken::new(),
            None,
            SizeLimits::default().max_meta_bytes,
        )))
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

    /// Records progress `{"step": name, "detail": detail}` (best effort: a lost heartbeat
    /// loses it, it never fails the job). Saved as the job's `progress` by the next heartbeat.
    /// Never put secrets or args in it: operators see it.
    pub fn step(&self, name: &str, detail: impl Into<Value>) {
        self.shared
            .set_progress(json!({"step": name, "detail": detail.into()}));
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use drover_core::{JobId, JobKind, NewJob};
    use serde::Deserialize;

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
        assert_eq!(
            ctx.progress(),
            Some(json!({"step": "download", "detail": "3 of 10"}))
        );
        assert!(ctx.set_meta(json!([1])).is_err());
        ctx.set_meta(json!({"phase": "upload"})).unwrap();
        assert_eq!(ctx.meta(), json!({"phase": "upload"}));
        assert!(!ctx.is_cancelled());
        ctx.cancellation().cancel();
        assert!(ctx.is_cancelled());
        assert_eq!(ctx.cancel_reason(), None);
    }
}

//! The simulator's history (`drover_sim::history`) recorded from a run of real processes on
//! PostgreSQL, for the simulator's checker (`drover_sim::check`): the store's side from the
//! database itself, the clients' and handlers' sides from what they saw.
//!
//! | Side | Source | Records |
//! |---|---|---|
//! | store | `job_history`: a trigger on `drover.jobs` writes one row per insert and per change of state, fencing token or lease, in the job's own transaction | enqueue (as stored), claim, heartbeat, finish, rescue |
//! | clients | [`ClientLog`]: the HTTP producers' and the operator's calls and answers | enqueue answers (replayed, duplicate), pause, resume, limit set |
//! | handlers | `side_effects`: the `record` kind's row, written first thing in the handler | handler start |
//! | world | the test's fault schedule | worker start, crash (SIGKILL), pause (SIGSTOP), partition, heal, PostgreSQL restart, exit |
//!
//! Times are microseconds since the run's base instant, from one clock (the database server
//! and the test run on one host). A claim is placed at its statement's start (its snapshot is
//! taken after it: a claim placed after a pause's answer saw the pause); everything else at
//! the moment its row changed. Per job, records keep the order of the rows (row locks order
//! a job's transitions), each no earlier than the one before.
//!
//! What cannot be derived is not invented: a finish's fencing token is the one the handler
//! wrote into its result for a success (`{"token": ..}` of the `record` kind), else the row's;
//! a running-to-queued change is a rescue when the store wrote its lease-expired error, a
//! graceful release or snooze when the attempt was given back, else a failed attempt to retry.
//! A row change the adapter does not know fails the test instead of being dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use drover_core::{FencingToken, Job, JobId, JobState, JobStore};
use drover_sim::history::{
    cut, Answer, Beat, ClaimedJob, EnqueueAns, EnqueueReq, FinishReq, Record,
};
use drover_sim::{Ev, Violation};
use drover_store_postgres::sqlx::{self, types::Uuid, Row as _};

use super::Db;

/// The store-side recording: a table and a trigger, installed next to the test
/// instrumentation.
pub const HISTORY_DDL: &str = r#"
CREATE TABLE public.job_history (
    id               bigserial   PRIMARY KEY,
    job_id           uuid        NOT NULL,
    from_state       text,
    to_state         text        NOT NULL,
    queue            text        NOT NULL,
    fencing_token    bigint      NOT NULL,
    old_attempt      integer,
    attempt          integer     NOT NULL,
    max_attempts     integer     NOT NULL,
    lease_owner      text,
    lease_expires_at timestamptz,
    idempotency_key  text,
    result           jsonb,
    new_error        text,
    statement_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    at               timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION public.record_job_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO public.job_history (job_id, from_state, to_state, queue, fencing_token,
            old_attempt, attempt, max_attempts, lease_owner, lease_expires_at, idempotency_key,
            result, new_error)
        VALUES (NEW.id, NULL, NEW.state, NEW.queue, NEW.fencing_token, NULL, NEW.attempt,
            NEW.max_attempts, NEW.lease_owner, NEW.lease_expires_at, NEW.idempotency_key,
            NEW.result, NULL);
    ELSIF NEW.state IS DISTINCT FROM OLD.state
        OR NEW.fencing_token IS DISTINCT FROM OLD.fencing_token
        OR NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN
        INSERT INTO public.job_history (job_id, from_state, to_state, queue, fencing_token,
            old_attempt, attempt, max_attempts, lease_owner, lease_expires_at, idempotency_key,
            result, new_error)
        VALUES (NEW.id, OLD.state, NEW.state, NEW.queue, NEW.fencing_token, OLD.attempt,
            NEW.attempt, NEW.max_attempts, coalesce(NEW.lease_owner, OLD.lease_owner),
            NEW.lease_expires_at, NEW.idempotency_key, NEW.result,
            CASE WHEN NEW.errors IS DISTINCT FROM OLD.errors THEN NEW.errors->-1->>'message' END);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER record_job_history AFTER INSERT OR UPDATE ON drover.jobs
    FOR EACH ROW EXECUTE FUNCTION public.record_job_history();
"#;

/// Microseconds since the Unix epoch, now.
pub fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// The clients' and the world's records, shared by the test's tasks.
#[derive(Clone)]
pub struct ClientLog {
    /// The run's base instant, microseconds since the Unix epoch.
    pub base: i64,
    records: Arc<Mutex<Vec<Record>>>,
}

impl ClientLog {
    /// An empty log whose base instant is now.
    pub fn new() -> ClientLog {
        ClientLog {
            base: unix_us(),
            records: Arc::default(),
        }
    }

    /// Microseconds since the base instant, now.
    pub fn now(&self) -> i64 {
        unix_us() - self.base
    }

    /// Records `ev` by `who` at `t` (microseconds since the base instant).
    pub fn record_at(&self, t: i64, who: &str, ev: Ev) {
        let record = Record {
            t,
            who: who.to_owned(),
            ev,
        };
        self.records.lock().expect("client log").push(record);
    }

    /// Records `ev` by `who` now.
    pub fn record(&self, who: &str, ev: Ev) {
        self.record_at(self.now(), who, ev);
    }

    fn take(&self) -> Vec<Record> {
        std::mem::take(&mut *self.records.lock().expect("client log"))
    }
}

/// A `job_history` row.
struct Row {
    id: i64,
    job_id: Uuid,
    from_state: Option<String>,
    to_state: String,
    queue: String,
    fencing_token: i64,
    old_attempt: Option<i32>,
    attempt: i32,
    max_attempts: i32,
    lease_owner: Option<String>,
    lease_until: Option<i64>,
    idempotency_key: Option<String>,
    result: Option<serde_json::Value>,
    new_error: Option<String>,
    statement_at: i64,
    at: i64,
}

fn state(text: &str) -> JobState {
    JobState::from_str(text).unwrap_or_else(|e| panic!("state {text:?} in job_history: {e}"))
}

/// What the checker found, and the material to explain it.
pub struct Checked {
    /// The history, in order.
    pub history: Vec<Record>,
    /// The jobs as stored at the end.
    pub jobs: Vec<Job>,
    /// The checker's findings.
    pub violations: Vec<Violation>,
}

impl Checked {
    /// The violations, and the history cut to their jobs (at most 200 lines of it).
    pub fn report(&self) -> String {
        let mut out = format!("{} violation(s)\n", self.violations.len());
        for v in self.violations.iter().take(20) {
            out.push_str(&format!(
                "  {}: {:?} {} (t {:?} us)\n",
                v.rule, v.jobs, v.detail, v.t
            ));
        }
        let jobs: BTreeSet<JobId> = self
            .violations
            .iter()
            .take(5)
            .flat_map(|v| v.jobs.iter().copied())
            .collect();
        out.push_str("history of the first offending jobs:\n");
        for line in cut(&self.history, &jobs).lines().take(200) {
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// Reads the store's side and the handlers' side from `db`, merges them with `log`, reads the
/// final state and runs the simulator's checker (`settled`: every job was terminal in time).
///
/// # Panics
/// On a database error, or on a row change the adapter does not know.
pub async fn check(db: &Db, log: &ClientLog, settled: bool) -> Checked {
    let base = log.base;
    let rows: Vec<Row> = sqlx::query(
        "SELECT id, job_id, from_state, to_state, queue, fencing_token, old_attempt, attempt, \
         max_attempts, lease_owner, \
         (extract(epoch FROM lease_expires_at) * 1000000)::bigint AS lease_until, \
         idempotency_key, result, new_error, \
         (extract(epoch FROM statement_at) * 1000000)::bigint - $1 AS statement_at, \
         (extract(epoch FROM at) * 1000000)::bigint - $1 AS at \
         FROM public.job_history ORDER BY id",
    )
    .bind(base)
    .fetch_all(db.pool())
    .await
    .expect("read job_history")
    .into_iter()
    .map(|r| Row {
        id: r.get("id"),
        job_id: r.get("job_id"),
        from_state: r.get("from_state"),
        to_state: r.get("to_state"),
        queue: r.get("queue"),
        fencing_token: r.get("fencing_token"),
        old_attempt: r.get("old_attempt"),
        attempt: r.get("attempt"),
        max_attempts: r.get("max_attempts"),
        lease_owner: r.get("lease_owner"),
        lease_until: r.get("lease_until"),
        idempotency_key: r.get("idempotency_key"),
        result: r.get("result"),
        new_error: r.get("new_error"),
        statement_at: r.get("statement_at"),
        at: r.get("at"),
    })
    .collect();

    // The clients' records: a created answer is replaced by the store's own insert (placed
    // when the row was written); a request is found by its idempotency key.
    let client = log.take();
    let mut requests: BTreeMap<String, EnqueueReq> = BTreeMap::new();
    let mut answered_created: BTreeMap<JobId, Record> = BTreeMap::new();
    let mut out: Vec<(i64, u8, i64, Record)> = Vec::new();
    for (n, record) in client.into_iter().enumerate() {
        if let Ev::Enqueue {
            jobs,
            answer: Answer::Ok(answers),
            ..
        } = &record.ev
        {
            for req in jobs {
                if let Some(key) = &req.key {
                    requests.entry(key.clone()).or_insert_with(|| req.clone());
                }
            }
            if let [ans] = answers.as_slice() {
                if ans.status == "created" {
                    answered_created.insert(ans.job, record);
                    continue;
                }
            }
        }
        out.push((record.t, 1, n as i64, record));
    }

    let mut last_t: BTreeMap<Uuid, i64> = BTreeMap::new();
    for row in rows {
        let job = JobId(row.job_id);
        let to = state(&row.to_state);
        let claim = row.to_state == "running" && row.from_state.as_deref() != Some("running");
        let mut t = if claim { row.statement_at } else { row.at };
        let previous = last_t.get(&row.job_id).copied();
        if let Some(p) = previous {
            t = t.max(p);
        }
        last_t.insert(row.job_id, t);
        let lease_until = row.lease_until.map(|us| us - base);
        let who = row.lease_owner.clone().unwrap_or_else(|| "store".into());
        let ev = match (row.from_state.as_deref(), row.to_state.as_str()) {
            (None, _) => {
                let Some(req) = row
                    .idempotency_key
                    .as_ref()
                    .and_then(|k| requests.get(k))
                    .cloned()
                else {
                    // No client asked for it: the checker reports a job it never created.
                    continue;
                };
                if let Some(answer) = answered_created.get(&job) {
                    let same_key = matches!(&answer.ev, Ev::Enqueue { jobs, .. }
                        if jobs.first().and_then(|r| r.key.as_ref()) == row.idempotency_key.as_ref());
                    if same_key {
                        answered_created.remove(&job);
                    }
                }
                Ev::Enqueue {
                    jobs: vec![req],
                    fault: None,
                    answer: Answer::Ok(vec![EnqueueAns {
                        job,
                        status: "created".into(),
                        state: to,
                    }]),
                }
            }
            (Some("running"), "running") => {
                let Some(until) = lease_until else {
                    panic!("job_history row {}: running without a lease", row.id);
                };
                Ev::Heartbeat {
                    fault: None,
                    answer: Answer::Ok(vec![Beat {
                        job,
                        token: FencingToken(row.fencing_token),
                        lease_until: Some(until),
                    }]),
                }
            }
            (Some(_), "running") => Ev::Claim {
                fault: None,
                answer: Answer::Ok(vec![ClaimedJob {
                    job,
                    queue: row.queue.clone(),
                    token: FencingToken(row.fencing_token),
                    attempt: row.attempt,
                    max_attempts: row.max_attempts,
                    lease_until: lease_until.unwrap_or_else(|| {
                        panic!("job_history row {}: a claim without a lease", row.id)
                    }),
                }]),
            },
            (Some("running"), _) => {
                let rescued = row
                    .new_error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("lease expired"));
                let old_attempt = row.old_attempt.unwrap_or(row.attempt);
                if rescued {
                    Ev::Rescue {
                        fault: None,
                        answer: Answer::Ok(vec![(job, to, row.attempt == old_attempt)]),
                    }
                } else {
                    let outcome = match to {
                        JobState::Succeeded => "succeeded",
                        JobState::Failed => "failed",
                        JobState::Cancelled => "cancelled",
                        JobState::Waiting => "wait_for_children",
                        JobState::Queued if row.attempt < old_attempt => "released",
                        JobState::Queued => "failed",
                        other => panic!("job_history row {}: running -> {other:?}", row.id),
                    };
                    let token = row
                        .result
                        .as_ref()
                        .and_then(|r| r.get("token"))
                        .and_then(serde_json::Value::as_i64)
                        .filter(|_| to == JobState::Succeeded)
                        .unwrap_or(row.fencing_token);
                    Ev::Finish {
                        items: vec![FinishReq {
                            job,
                            token: FencingToken(token),
                            outcome: outcome.into(),
                            result: row.result.clone().filter(|_| to == JobState::Succeeded),
                        }],
                        fault: None,
                        answer: Answer::Ok(vec![Some(to)]),
                    }
                }
            }
            (Some(from), to) => panic!(
                "job_history row {}: the adapter does not know {from} -> {to}",
                row.id
            ),
        };
        out.push((t, 0, row.id, Record { t, who, ev }));
    }
    // A created answer the store has no insert for stays as the client saw it: the checker
    // then finds the job lost (or a key that created two jobs).
    for (_, record) in answered_created {
        out.push((record.t, 1, i64::MAX, record));
    }

    let effects: Vec<(Uuid, i32, i64, i32, i64)> = sqlx::query_as(
        "SELECT job_id, attempt, fencing_token, pid, \
         (extract(epoch FROM started_at) * 1000000)::bigint - $1 FROM public.side_effects ORDER BY id",
    )
    .bind(base)
    .fetch_all(db.pool())
    .await
    .expect("read side_effects");
    for (job, attempt, token, pid, t) in effects {
        let record = Record {
            t,
            who: format!("pid {pid}"),
            ev: Ev::HandlerStart {
                job: JobId(job),
                attempt,
                token: FencingToken(token),
            },
        };
        out.push((t, 2, 0, record));
    }
    out.sort_by_key(|(t, side, id, _)| (*t, *side, *id));
    let history: Vec<Record> = out.into_iter().map(|(_, _, _, r)| r).collect();

    let store = db.store().await;
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM drover.jobs ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("list job ids");
    let mut jobs = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(1_000) {
        let chunk: Vec<JobId> = chunk.iter().map(|id| JobId(*id)).collect();
        jobs.extend(store.jobs_get(chunk).await.expect("read the final jobs"));
    }
    store.close().await;
    let violations = drover_sim::check(&history, &jobs, settled);
    Checked {
        history,
        jobs,
        violations,
    }
}

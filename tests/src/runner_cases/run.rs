//! Running jobs: handlers run and their results are stored, typed args deserialize (and bad
//! args fail without retry), and only registered kinds are claimed (docs/design.md section 6).

use std::collections::BTreeSet;

use std::sync::Arc;
use std::time::Duration;

use drover_core::{JobState, LimitKey, LimitPolicy, ListJobs, NewJob, QueueName, Rate};
use drover_runner::{Outcome, PoolConfig, Registry, TransitionEvent};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, Semaphore};

use super::{config, within, Rig, Running};
use crate::cases::kind;
use crate::StoreFactory;

/// 50 jobs run once each and succeed with their handler's result; the transition hook sees
/// each go running -> succeeded; the report counts them; the worker deregisters on stop.
pub async fn runner_jobs_run_and_succeed(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let mut registry = Registry::new();
    registry.register_fn(kind("add"), |ctx| async move {
        let n = ctx.job().args["n"].as_i64().unwrap_or(0);
        Ok::<_, String>(json!({"double": n * 2}))
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<TransitionEvent>();
    let worker = rig
        .worker(registry, config("w1"))
        .await
        .on_transition(move |event| {
            let _ = tx.send(event.clone());
        });
    let running = Running::spawn(worker);
    let mut ids = Vec::new();
    for n in 0..50 {
        ids.push(rig.enqueue(NewJob::new(kind("add"), json!({"n": n}))).await);
    }
    let mut succeeded = BTreeSet::new();
    while succeeded.len() < ids.len() {
        let event = within("a succeeded transition", rx.recv())
            .await
            .expect("the worker is running");
        if event.to == JobState::Succeeded {
            assert_eq!(event.from, JobState::Running);
            succeeded.insert(event.job_id);
        }
    }
    assert_eq!(succeeded, ids.iter().copied().collect());
    for (n, id) in ids.iter().enumerate() {
        let job = rig.job(*id).await;
        assert_eq!(job.state, JobState::Succeeded);
        assert_eq!(job.attempt, 1);
        assert_eq!(job.result, Some(json!({"double": n as i64 * 2})));
        assert!(job.lease_owner.is_none());
    }
    let report = running.stop().await;
    assert_eq!(report.claimed, 50);
    assert_eq!(report.succeeded, 50);
    assert_eq!(report.unwritten, 0);
    let line = report.to_string();
    assert!(
        line.starts_with("worker w1: claimed 50, succeeded 50,"),
        "{line}"
    );
    assert!(
        rig.store.workers_list().await.unwrap().is_empty(),
        "the worker deregistered on the way out"
    );
}

#[derive(Debug, Deserialize)]
struct Email {
    to: String,
    #[serde(default)]
    cc: Vec<String>,
}

/// A typed handler gets its args deserialized; args that do not deserialize fail the job at
/// once (no retry) with a message naming the type and the field, never the args' values.
pub async fn runner_typed_args_run_and_bad_args_fail_without_retry(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let mut registry = Registry::new();
    registry.register_typed(kind("email.send"), |_ctx, email: Email| async move {
        Outcome::success_with(
            json!({"recipients": 1 + email.cc.len(), "domain": email.to.split('@').nth(1)}),
        )
    });
    let running = rig.start(registry, config("w1")).await;
    let good = rig
        .enqueue(NewJob::new(
            kind("email.send"),
            json!({"to": "a@example.com", "cc": ["b@example.com"]}),
        ))
        .await;
    let bad = rig
        .enqueue(NewJob::new(
            kind("email.send"),
            json!({"recipient": "secret@example.com"}),
        ))
        .await;
    // Wrong types: serde's own messages would quote the values.
    let wrong = rig
        .enqueue(NewJob::new(
            kind("email.send"),
            json!({"to": "a@example.com", "cc": ["b@example.com", 987654321]}),
        ))
        .await;
    let wrong_top = rig
        .enqueue(NewJob::new(kind("email.send"), json!("ARGSECRET_VALUE")))
        .await;
    let job = rig.wait_state(good, JobState::Succeeded).await;
    assert_eq!(
        job.result,
        Some(json!({"recipients": 2, "domain": "example.com"}))
    );
    let job = rig.wait_state(bad, JobState::Failed).await;
    assert_eq!(job.attempt, 1, "bad args are not retried");
    assert_eq!(job.max_attempts, 3);
    let message = &job.errors[0].message;
    assert!(message.contains("invalid args"), "{message}");
    assert!(message.contains("Email"), "{message}");
    assert!(message.contains("missing field `to`"), "{message}");
    assert!(!message.contains("secret@example.com"), "{message}");
    let job = rig.wait_state(wrong, JobState::Failed).await;
    let message = &job.errors[0].message;
    assert!(!message.contains("987654321"), "{message}");
    assert_eq!(
        message,
        "invalid args: do not match Email: at cc[1]: invalid type: integer, expected a string"
    );
    let job = rig.wait_state(wrong_top, JobState::Failed).await;
    let message = &job.errors[0].message;
    assert!(!message.contains("ARGSECRET_VALUE"), "{message}");
    assert_eq!(
        message,
        "invalid args: do not match Email: invalid type: string, expected struct Email"
    );
    running.stop().await;
}

/// A kind no handler is registered for (a rolling deploy: only new code knows it) stays
/// queued, never claimed, no attempt spent, while registered kinds run.
pub async fn runner_only_registered_kinds_are_claimed(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let mut registry = Registry::new();
    registry.register_fn(kind("known"), |_ctx| async { Outcome::success() });
    let running = rig.start(registry, config("w1")).await;
    let unknown = rig
        .enqueue(NewJob::new(kind("only.in.new.code"), json!({})))
        .await;
    let known = rig.enqueue(NewJob::new(kind("known"), json!({}))).await;
    rig.wait_state(known, JobState::Succeeded).await;
    let report = running.stop().await;
    assert_eq!(report.claimed, 1);
    let job = rig.job(unknown).await;
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.attempt, 0);
    assert_eq!(job.fencing_token.0, 0, "never claimed");
    assert!(job.attempted_at.is_none());
}

/// Sets the policy both rate cases use: jobs of kind `paced` at most one per 10 s.
async fn pace_one_per_10s(rig: &Rig) {
    rig.store
        .limit_set(
            LimitPolicy::new(
                LimitKey::parse("kind:paced").unwrap(),
                None,
                Some(Rate::new(1, Duration::from_secs(10)).unwrap()),
            )
            .unwrap(),
        )
        .await
        .unwrap();
}

/// A job a rate holds back sends no event when the rate allows it again, so after a claim
/// that returned fewer jobs than it asked for the claim loop claims again soon, without
/// waiting for the poll interval (here an hour): three jobs under `1/10s` run one per 10 s of
/// the store's clock.
pub async fn runner_jobs_held_by_a_rate_run_without_waiting_for_the_poll(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    pace_one_per_10s(&rig).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(
            rig.enqueue(NewJob::new(kind("paced"), json!({"n": n})))
                .await,
        );
    }
    let mut registry = Registry::new();
    registry.register_fn(kind("paced"), |_ctx| async { Ok::<_, String>(json!(null)) });
    let mut config = config("w1");
    config.poll_interval = Duration::from_secs(3600);
    let running = rig.start(registry, config).await;
    let mut done = 0;
    for _ in 0..3 {
        let finished = rig
            .wait_list(
                ListJobs::default(),
                "the next paced job to succeed",
                |jobs| {
                    jobs.iter()
                        .filter(|j| j.state == JobState::Succeeded)
                        .count()
                        > done
                },
            )
            .await;
        let succeeded = finished
            .iter()
            .filter(|j| j.state == JobState::Succeeded)
            .count();
        assert_eq!(succeeded, done + 1, "one job per 10 s of the store's clock");
        done = succeeded;
        rig.h.advance(Duration::from_secs(10)).await;
    }
    let report = running.stop().await;
    assert_eq!(report.succeeded, 3);
}

/// A job a `max_running` policy holds back sends no event when a running job under that
/// policy finishes, so after a claim that filled every slot and an empty one after it (the
/// slot freed by a quick job, the next job held by the policy), the claim loop claims again
/// soon, not at the poll interval (here an hour): the held job starts once the job holding
/// the policy has finished (found by a breaker run: with a `max_running 3` policy, jobs ran
/// only at each 1 s poll).
pub async fn runner_jobs_held_by_max_running_start_when_the_holder_finishes(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    rig.store
        .limit_set(LimitPolicy::new(LimitKey::parse("kind:held").unwrap(), Some(1), None).unwrap())
        .await
        .unwrap();
    let holder = rig
        .enqueue(NewJob::new(kind("held"), json!({"n": 1})))
        .await;
    let quick = rig.enqueue(NewJob::new(kind("quick"), json!({}))).await;
    let held = rig
        .enqueue(NewJob::new(kind("held"), json!({"n": 2})))
        .await;
    // `held` jobs wait for a permit from the test; `quick` succeeds at once.
    let permits = Arc::new(Semaphore::new(0));
    let mut registry = Registry::new();
    let gate = permits.clone();
    registry.register_fn(kind("held"), move |_ctx| {
        let gate = gate.clone();
        async move {
            gate.acquire().await.expect("open gate").forget();
            Ok::<_, String>(json!(null))
        }
    });
    registry.register_fn(kind("quick"), |_ctx| async { Ok::<_, String>(json!(null)) });
    let mut config = config("w1");
    config.poll_interval = Duration::from_secs(3600);
    config.pools = vec![
        PoolConfig::new("main", vec![QueueName::parse("default").unwrap()], 2).with_prefetch(0),
    ];
    let running = rig.start(registry, config).await;
    rig.wait_state(quick, JobState::Succeeded).await;
    assert_eq!(
        rig.job(held).await.state,
        JobState::Queued,
        "held back by max_running 1"
    );
    permits.add_permits(2);
    let done = rig.wait_state(held, JobState::Succeeded).await;
    let first = rig.job(holder).await;
    assert_eq!(first.state, JobState::Succeeded);
    assert!(
        done.attempted_at.expect("started") >= first.finished_at.expect("finished"),
        "the held job started before the job holding the policy finished"
    );
    let report = running.stop().await;
    assert_eq!(report.succeeded, 3);
}

/// An event does not end the short re-claim pauses under way: while a rate holds a job, a job
/// of another kind enqueued on the same queue wakes the loop and is claimed, and the held job
/// still runs once the rate allows it, without waiting for the poll interval (here an hour).
/// The claim after that event returned fewer jobs than it asked for, which alone would leave
/// the loop waiting for the next event.
pub async fn runner_an_event_does_not_leave_rate_held_jobs_to_the_poll(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    pace_one_per_10s(&rig).await;
    let first = rig
        .enqueue(NewJob::new(kind("paced"), json!({"n": 0})))
        .await;
    let held = rig
        .enqueue(NewJob::new(kind("paced"), json!({"n": 1})))
        .await;
    let mut registry = Registry::new();
    registry.register_fn(kind("paced"), |_ctx| async { Ok::<_, String>(json!(null)) });
    registry.register_fn(kind("other"), |_ctx| async { Ok::<_, String>(json!(null)) });
    let mut config = config("w1");
    config.poll_interval = Duration::from_secs(3600);
    let running = rig.start(registry, config).await;
    rig.wait_state(first, JobState::Succeeded).await;
    let other = rig.enqueue(NewJob::new(kind("other"), json!({}))).await;
    rig.wait_state(other, JobState::Succeeded).await;
    assert_eq!(
        rig.job(held).await.state,
        JobState::Queued,
        "held by the rate"
    );
    rig.h.advance(Duration::from_secs(10)).await;
    rig.wait_state(held, JobState::Succeeded).await;
    let report = running.stop().await;
    assert_eq!(report.succeeded, 3);
}

/// The runs a worker ends reach the store's activity with its heartbeats: by outcome, with a
/// queue wait for each start and a run time for each end (docs/design.md, "Activity").
pub async fn runner_ended_runs_reach_the_activity_with_the_heartbeat(f: &dyn StoreFactory) {
    let rig = Rig::open(f).await;
    let since = rig.h.store().now().await.unwrap() - chrono::TimeDelta::minutes(5);
    let mut registry = Registry::new();
    registry.register_fn(
        kind("ok"),
        |_ctx| async move { Ok::<_, String>(json!(null)) },
    );
    registry.register_fn(
        kind("flaky"),
        |_ctx| async move { Outcome::retry("not yet") },
    );
    let running = rig.start(registry, config("w1")).await;
    for _ in 0..3 {
        rig.enqueue(NewJob::new(kind("ok"), json!({}))).await;
    }
    rig.enqueue(NewJob::new(kind("flaky"), json!({}))).await;

    let total = |activity: &[drover_core::ActivityMinute]| {
        let mut sum = drover_core::ActivityMinute::new(since, QueueName::default_queue());
        activity.iter().for_each(|m| sum.add(m));
        sum
    };
    let activity = rig
        .wait_activity(since, "3 successes and a retry", |a| {
            let sum = total(a);
            sum.succeeded == 3 && sum.retried == 1
        })
        .await;
    assert!(activity
        .iter()
        .all(|m| m.queue == QueueName::default_queue()));
    let sum = total(&activity);
    assert_eq!(
        (sum.ended(), sum.wait.count(), sum.duration.count()),
        (4, 4, 4),
        "{activity:#?}"
    );
    running.stop().await;
}

//! The simulator's own guarantees: a seed replays byte for byte, and a bounded sweep of the
//! real runner over the faulty memory store breaks no rule.

use std::time::Instant;

use drover_sim::{first_difference, history, run_seed, Ev, Options};

#[test]
#[cfg_attr(
    not(tokio_unstable),
    ignore = "exact replay needs tokio's seeded select! RNG: RUSTFLAGS=\"--cfg tokio_unstable\""
)]
fn the_same_seed_gives_the_same_history_byte_for_byte() {
    let options = Options::default();
    for seed in [0, 1, 42, 1_000_003] {
        let a = run_seed(seed, &options);
        let b = run_seed(seed, &options);
        assert!(
            a.end.history.len() > 50,
            "seed {seed}: a history worth comparing"
        );
        assert_eq!(
            history::to_json_lines(&a.end.history),
            history::to_json_lines(&b.end.history),
            "seed {seed}: {:?}",
            first_difference(&a, &b)
        );
        assert_eq!(first_difference(&a, &b), None, "seed {seed}");
    }
}

/// The CI sweep: 2,000 seeds (`DROVER_SIM_SEEDS` sets another count), on every core.
#[test]
fn a_sweep_of_2000_seeds_breaks_no_rule() {
    let seeds: u64 = std::env::var("DROVER_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let options = Options::default();
    let started = Instant::now();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let next = std::sync::atomic::AtomicU64::new(0);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (options, next) = (&options, &next);
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if seed >= seeds {
                            return failures;
                        }
                        let run = run_seed(seed, options);
                        if !run.violations.is_empty() {
                            failures.push(drover_sim::shrink(options, run, 20).1.report());
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|_| vec!["a seed panicked".into()]))
            .collect()
    });
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{seeds} seeds in {secs:.1} s ({:.1} seeds/s, {threads} threads)",
        seeds as f64 / secs
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_world_injects_every_kind_of_fault_and_settles() {
    const KINDS: [&str; 8] = [
        "error_before_write",
        "error_after_commit",
        "slow_before",
        "slow_after",
        "worker_crash",
        "worker_pause",
        "worker_graceful_stop",
        "clock_jump",
    ];
    // The first of the early seeds whose world injects every kind (which one depends on the
    // runner's timing, so the seed is searched for, not fixed).
    let run = (0..50)
        .map(|seed| run_seed(seed, &Options::default()))
        .find(|run| {
            KINDS
                .iter()
                .all(|kind| run.end.faults.get(*kind).copied().unwrap_or(0) > 0)
        })
        .expect("one of seeds 0..50 injects every kind of fault");
    assert!(run.end.settled, "every job terminal in the quiet period");
    // Jobs created (retention deletes many before the end, so the store's count is less).
    let created = run
        .end
        .history
        .iter()
        .flat_map(|r| match &r.ev {
            Ev::Enqueue { answer, .. }
            | Ev::Workflow { answer, .. }
            | Ev::Children { answer, .. } => answer.ok().cloned().unwrap_or_default(),
            Ev::Fire { answer, .. } => answer.ok().cloned().flatten().into_iter().collect(),
            _ => Vec::new(),
        })
        .filter(|a| a.status == "created")
        .count();
    assert!(created >= 10, "{created} jobs created");
    assert!(run.violations.is_empty(), "{}", run.report());
}

/// The features of `run`'s world its history lacks.
fn missing_features(run: &drover_sim::SeedRun) -> Vec<&'static str> {
    let has = |f: &dyn Fn(&Ev) -> bool| run.end.history.iter().any(|r| f(&r.ev));
    let ok = |a: &history::Answer<Vec<history::EnqueueAns>>| a.ok().is_some_and(|a| !a.is_empty());
    let mut missing = Vec::new();
    let mut want = |name, found: bool| {
        if !found {
            missing.push(name);
        }
    };
    want(
        "a graph",
        has(&|e| matches!(e, Ev::Workflow { answer, .. } if ok(answer))),
    );
    want(
        "children",
        has(&|e| matches!(e, Ev::Children { answer, .. } if ok(answer))),
    );
    want(
        "a job with dependencies",
        has(&|e| {
            matches!(e, Ev::Enqueue { jobs, answer, .. }
                if ok(answer) && jobs.iter().any(|j| !j.depends_on.is_empty()))
        }),
    );
    want(
        "a parent waiting",
        has(&|e| {
            matches!(e, Ev::Finish { items, .. }
                if items.iter().any(|i| i.outcome == "wait_for_children"))
        }),
    );
    want(
        "a cron tick",
        has(&|e| {
            matches!(
                e,
                Ev::Fire {
                    answer: history::Answer::Ok(Some(_)),
                    ..
                }
            )
        }),
    );
    want(
        "a retention pass",
        has(&|e| matches!(e, Ev::Prune { answer: history::Answer::Ok(d), .. } if !d.is_empty())),
    );
    want(
        "a limit policy",
        has(&|e| {
            matches!(
                e,
                Ev::LimitSet {
                    answer: history::Answer::Ok(()),
                    ..
                }
            )
        }),
    );
    want(
        "the quota",
        has(&|e| {
            matches!(
                e,
                Ev::Quota {
                    max_pending: Some(_)
                }
            )
        }),
    );
    missing
}

#[test]
fn a_world_exercises_every_feature_the_checker_checks() {
    let run = (0..20)
        .map(|seed| run_seed(seed, &Options::default()))
        .find(|run| missing_features(run).is_empty())
        .expect("one of seeds 0..20 has graphs, children, dependencies, ticks, retention, limits and a quota");
    assert!(run.violations.is_empty(), "{}", run.report());
}

//! What the worker flags (`WorkerArgs`) configure, for every command that runs a worker
//! (`worker`, `serve --worker`, `dev`): the worker configuration, its checks across flags
//! worded with the flags, the registry, and the size of the database pool.

use anyhow::{anyhow, Result};
use drover_core::QueueName;
use drover_runner::{
    heartbeat_interval_max, PoolConfig, Registry, WorkerConfig, HEARTBEATS_PER_LEASE_MIN,
};

use crate::args::{WorkerArgs, DB_CONNECTIONS_MAX};
use crate::usage::{flag_error, usage};
use crate::Extensions;

/// The worker configuration the flags describe (clap has checked each value). Without
/// `--queue` and `--pool` the worker serves `default_queues`, or `default` when that is empty.
/// [`check_config`] checks the rules across flags.
pub fn worker_config(args: &WorkerArgs, default_queues: &[QueueName]) -> WorkerConfig {
    let mut pools = Vec::new();
    let mut queues = args.queues.clone();
    if queues.is_empty() && args.pools.is_empty() {
        queues = if default_queues.is_empty() {
            vec![QueueName::default_queue()]
        } else {
            default_queues.to_vec()
        };
    }
    if !queues.is_empty() {
        pools.push(PoolConfig::new("main", queues, args.slots));
    }
    pools.extend(args.pools.iter().cloned());
    if let Some(prefetch) = args.prefetch {
        for pool in &mut pools {
            pool.prefetch = Some(prefetch);
        }
    }
    let mut config = WorkerConfig::with_pools(pools);
    config.max_concurrent = args.max_concurrent;
    if let Some(d) = args.lease {
        config.lease = d;
    }
    if let Some(d) = args.heartbeat {
        config.heartbeat_interval = d;
    }
    match args.rescue_interval {
        Some(d) => config.rescue_interval = d,
        None if args.lease.is_some() => {
            config.rescue_interval = config.rescue_interval.min(config.lease);
        }
        None => {}
    }
    if let Some(d) = args.shutdown_grace {
        config.shutdown_grace = d;
    }
    if let Some(d) = args.retention {
        config.retention = d;
    }
    if let Some(d) = args.audit_retention {
        config.audit_retention = d;
    }
    if let Some(n) = args.prune_limit {
        config.prune_limit = n;
    }
    if let Some(d) = args.poll_interval {
        config.poll_interval = d;
    }
    if let Some(d) = args.warn_transaction_age {
        config.transaction_age_warning = (!d.is_zero()).then_some(d);
    }
    if let Some(fraction) = args.warn_dead_rows {
        config.dead_rows_warning = (fraction > 0.0).then_some(fraction);
    }
    config
}

/// Checks `config`, built from `args` by [`worker_config`], against `registry` before anything
/// is built or connected. A rule the flags break is a usage error (exit code 2) naming the
/// flag; a rule the embedding application breaks (a kind's zero timeout, no handler at all)
/// stays an ordinary error.
///
/// # Errors
/// The first rule broken.
pub fn check_config(config: &WorkerConfig, registry: &Registry, args: &WorkerArgs) -> Result<()> {
    let shown = |d: std::time::Duration, given: bool| {
        let d = humantime::format_duration(d);
        if given {
            d.to_string()
        } else {
            format!("{d} (the default)")
        }
    };
    if config.worker_stale_after <= config.heartbeat_interval {
        return Err(usage(format!(
            "--heartbeat {} must be shorter than {}: a worker whose last heartbeat is older is removed from the worker list",
            shown(config.heartbeat_interval, true),
            humantime::format_duration(config.worker_stale_after),
        )));
    }
    let Err(e) = config.validate(registry) else {
        return Ok(());
    };
    let drover_core::Error::InvalidInput { field, reason } = &e else {
        return Err(anyhow!("{e}"));
    };
    if field == "heartbeat_interval" && !config.heartbeat_interval.is_zero() {
        // The runner's rule between the two settings, worded with both flags.
        return Err(usage(format!(
            "--heartbeat {} must be at most a third of --lease {} (at most {}): with fewer than {HEARTBEATS_PER_LEASE_MIN} heartbeats per lease, one late heartbeat can let the lease expire under a running job and the job run twice",
            shown(config.heartbeat_interval, args.heartbeat.is_some()),
            shown(config.lease, args.lease.is_some()),
            // Whole milliseconds, rounded down: still within the rule.
            humantime::format_duration(std::time::Duration::from_millis(
                u64::try_from(heartbeat_interval_max(config.lease).as_millis()).unwrap_or(u64::MAX)
            )),
        )));
    }
    // The pool of --queue/--slots comes first when there is one; the --pool pools follow.
    let from_queue_flags = config.pools.len() > args.pools.len();
    let pool = field
        .strip_prefix("pools[")
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(index, _)| index.parse::<usize>().ok())
        .and_then(|index| Some((index, config.pools.get(index)?)));
    if let Some((index, pool)) = pool {
        if field.ends_with(".kinds") && pool.kinds.is_none() {
            // No kind filter was given: the binary registers no handler (its own fault).
            return Err(anyhow!("{e}"));
        }
        if field.ends_with(".name") && from_queue_flags && pool.name == config.pools[0].name {
            return Err(usage(format!(
                "invalid --pool: the pool name {:?} is taken by the pool of --queue; give the --pool another name",
                pool.name
            )));
        }
        let flag = if from_queue_flags && index == 0 {
            "--queue"
        } else {
            "--pool"
        };
        let known = if field.ends_with(".kinds") {
            let kinds: Vec<String> = registry.kinds().iter().map(ToString::to_string).collect();
            format!(" (kinds: {})", kinds.join(", "))
        } else {
            String::new()
        };
        return Err(usage(format!("invalid {flag}: {reason}{known}")));
    }
    Err(flag_error(
        e,
        &[
            ("max_concurrent", "--max-concurrent"),
            ("lease", "--lease"),
            ("heartbeat_interval", "--heartbeat"),
            ("poll_interval", "--poll-interval"),
            ("rescue_interval", "--rescue-interval"),
            ("retention", "--retention"),
            ("audit_retention", "--audit-retention"),
            ("prune_limit", "--prune-limit"),
        ],
    ))
}

/// The registry a worker runs: the application's handlers, plus the built-in kinds when the
/// binary ships them.
pub fn registry(extensions: Extensions, args: &WorkerArgs) -> Registry {
    let mut registry = extensions.registry;
    if extensions.builtin_kinds {
        crate::builtin::register(&mut registry, &args.allow_exec);
    }
    registry
}

/// Connections the HTTP API adds to a process's default database pool, for the requests in
/// flight (`drover serve`, with or without a worker).
pub const API_CONNECTIONS: u32 = 8;

/// The database pool of a process: `--db-connections` (`db_connections`), else what its worker
/// running up to `slots` jobs at once needs, slots + 2 (docs/design.md section 5), with 2 to spare,
/// plus [`API_CONNECTIONS`] when it serves the HTTP API, up to [`DB_CONNECTIONS_MAX`]; and the
/// warning to print once when a worker runs on a pool below slots + 2. The pool opens
/// connections only as they are used (claims, outcome writes and heartbeats are batched, so far
/// fewer are open in practice), so the default bound costs nothing.
pub fn pool_size(
    db_connections: Option<u32>,
    slots: Option<usize>,
    api: bool,
) -> (u32, Option<String>) {
    let needed = slots.map(|slots| u32::try_from(slots).unwrap_or(u32::MAX).saturating_add(2));
    let connections = db_connections.unwrap_or_else(|| {
        let worker = needed.map_or(0, |needed| needed.saturating_add(2));
        let api = if api { API_CONNECTIONS } else { 0 };
        worker.saturating_add(api).min(DB_CONNECTIONS_MAX)
    });
    let warning = needed
        .filter(|needed| connections < *needed)
        .map(|needed| match db_connections {
            Some(_) => format!(
                "--db-connections {connections} is below slots + 2 = {needed}; jobs may wait for a connection"
            ),
            None => format!(
                "the database pool of {connections} connections (the most --db-connections allows) is below slots + 2 = {needed}; jobs may wait for a connection"
            ),
        });
    (connections, warning)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use drover_core::JobKind;

    use super::*;
    use crate::args::{Cli, Command};

    fn config(args: &[&str]) -> WorkerConfig {
        let cli = Cli::try_parse_from(std::iter::once("drover").chain(args.iter().copied()))
            .expect("valid flags");
        let Command::Worker(worker) = cli.command else {
            panic!("not a worker command");
        };
        worker_config(&worker, &[])
    }

    #[test]
    fn slots_are_per_queue_and_pools_add_up() {
        let c = config(&["worker", "--queue", "a", "--queue", "b", "--slots", "8"]);
        assert_eq!(c.max_running(), 16);
        let c = config(&[
            "worker",
            "--queue",
            "default",
            "--slots",
            "2",
            "--pool",
            "long:reports:1:sleep",
        ]);
        assert_eq!(c.pools.len(), 2);
        assert_eq!(c.pools[0].queues, vec![QueueName::default_queue()]);
        assert_eq!(
            c.pools[1].kinds,
            Some(vec![JobKind::parse("sleep").unwrap()])
        );
        assert_eq!(c.max_running(), 3);
        let c = config(&["worker", "--pool", "long:reports:1"]);
        assert_eq!(c.pools.len(), 1, "a pool alone serves no default queue");
    }

    #[test]
    fn prefetch_defaults_to_eight_per_slot_and_applies_to_every_pool() {
        let c = config(&[
            "worker",
            "--queue",
            "a",
            "--slots",
            "4",
            "--pool",
            "long:reports:1",
        ]);
        assert_eq!(c.pools[0].prefetch_per_queue(), 32);
        assert_eq!(c.pools[1].prefetch_per_queue(), 8);
        let c = config(&["worker", "--slots", "300"]);
        assert_eq!(
            c.pools[0].prefetch_per_queue(),
            1_000,
            "at most 1,000 by default"
        );
        let c = config(&["worker", "--slots", "9500", "--prefetch", "2000"]);
        assert_eq!(
            c.pools[0].prefetch_per_queue(),
            500,
            "one claim stays within 10,000"
        );
        let c = config(&[
            "worker",
            "--queue",
            "a",
            "--prefetch",
            "0",
            "--pool",
            "long:reports:1",
        ]);
        assert!(c.pools.iter().all(|pool| pool.prefetch_per_queue() == 0));
    }

    #[test]
    fn a_short_lease_shortens_the_rescue_interval() {
        let default = config(&["worker"]);
        assert_eq!(default.rescue_interval, Duration::from_secs(15));
        let short = config(&["worker", "--lease", "2s", "--heartbeat", "500ms"]);
        assert_eq!(short.lease, Duration::from_secs(2));
        assert_eq!(short.heartbeat_interval, Duration::from_millis(500));
        assert_eq!(short.rescue_interval, Duration::from_secs(2));
        let long = config(&["worker", "--lease", "10m"]);
        assert_eq!(long.rescue_interval, Duration::from_secs(15));
        let explicit = config(&["worker", "--lease", "2s", "--rescue-interval", "300ms"]);
        assert_eq!(explicit.rescue_interval, Duration::from_millis(300));
    }

    #[test]
    fn slots_prefetch_and_db_connections_are_checked_at_parse_time() {
        let parse = |flag: &str, value: &str| {
            Cli::try_parse_from(["drover", "worker", flag, value])
                .map(|_| ())
                .map_err(|e| (e.kind(), e.to_string()))
        };
        for (flag, value, rule) in [
            ("--slots", "0", "between 1 and 10000"),
            ("--slots", "10001", "between 1 and 10000"),
            ("--slots", "10000000000", "between 1 and 10000"),
            ("--prefetch", "10001", "between 0 and 10000"),
            ("--db-connections", "0", "between 1 and 10000"),
            ("--db-connections", "10001", "between 1 and 10000"),
            ("--db-connections", "4000000000", "between 1 and 10000"),
        ] {
            let (kind, message) = parse(flag, value).expect_err(value);
            // A usage error: exit code 2, like every flag clap refuses.
            assert_eq!(kind, clap::error::ErrorKind::ValueValidation, "{message}");
            assert!(
                message.contains(flag) && message.contains(rule),
                "{flag} {value}: {message}"
            );
        }
        for (flag, value) in [
            ("--slots", "1"),
            ("--slots", "10000"),
            ("--prefetch", "0"),
            ("--prefetch", "10000"),
            ("--db-connections", "1"),
            ("--db-connections", "10000"),
        ] {
            parse(flag, value).unwrap_or_else(|e| panic!("{flag} {value}: {e:?}"));
        }
    }

    #[test]
    fn the_database_pool_fits_the_slots_within_its_bound() {
        // A worker: slots + 4.
        assert_eq!(pool_size(None, Some(8), false), (12, None));
        let (connections, warning) = pool_size(None, Some(1_000_000), false);
        assert_eq!(connections, crate::args::DB_CONNECTIONS_MAX);
        assert!(warning.is_some_and(|w| w.contains("1000002")));
        assert_eq!(pool_size(Some(10), Some(8), false), (10, None));
        let (connections, warning) = pool_size(Some(1), Some(8), false);
        assert_eq!(connections, 1, "as given, not raised");
        let warning = warning.expect("a warning");
        assert!(
            warning.contains("--db-connections 1") && warning.contains("slots + 2 = 10"),
            "{warning}"
        );
        // The API alone: its own connections, and no worker to warn about.
        assert_eq!(pool_size(None, None, true), (API_CONNECTIONS, None));
        assert_eq!(pool_size(Some(1), None, true), (1, None));
    }

    #[test]
    fn a_worker_beside_the_api_gets_the_same_pool_rule_and_warning() {
        // The worker's pool plus the API's, with no lower bound than the worker's own.
        assert_eq!(pool_size(None, Some(8), true), (12 + API_CONNECTIONS, None));
        let (connections, warning) = pool_size(None, Some(200), true);
        assert!(connections >= 202, "{connections}: below slots + 2");
        assert_eq!(warning, None);
        let (connections, warning) = pool_size(Some(10), Some(200), true);
        assert_eq!(connections, 10);
        assert!(
            warning.is_some_and(|w| w.contains("--db-connections 10 is below slots + 2 = 202")),
            "the warning of drover worker"
        );
    }

    #[test]
    fn every_worker_flag_value_is_checked_at_parse_time_with_its_rule() {
        for (args, rule) in [
            (&["--max-concurrent", "0"][..], "between 1 and 1000000"),
            (
                &["--max-concurrent", "18446744073709551615"],
                "between 1 and 1000000",
            ),
            (&["--queue", "bad queue"], "may contain only"),
            (&["--lease", "10ms"], "between 100 ms and 86400 s"),
            (&["--lease", "2d"], "between 100 ms and 86400 s"),
            (&["--heartbeat", "0s"], "longer than zero"),
            (&["--rescue-interval", "0s"], "longer than zero"),
            (&["--poll-interval", "0ms"], "longer than zero"),
            (&["--retention", "0s"], "longer than zero"),
            (&["--audit-retention", "0s"], "longer than zero"),
            (&["--prune-limit", "0"], "between 1 and 100000"),
            (&["--prune-limit", "100001"], "between 1 and 100000"),
        ] {
            let err =
                Cli::try_parse_from(["drover", "worker"].into_iter().chain(args.iter().copied()))
                    .expect_err(args[1]);
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{err}");
            let text = err.to_string();
            assert!(
                text.contains(args[0]) && text.contains(rule),
                "{args:?}: {text}"
            );
        }
        for args in [
            &["--max-concurrent", "1"][..],
            &["--max-concurrent", "1000000"],
        ] {
            let c = config(&["worker", args[0], args[1]]);
            assert!(c.max_concurrent.is_some());
        }
    }

    #[test]
    fn vacuum_warning_flags_set_their_thresholds_and_zero_turns_them_off() {
        let defaults = config(&["worker"]);
        assert_eq!(
            defaults.transaction_age_warning,
            Some(drover_runner::TRANSACTION_AGE_WARNING_DEFAULT)
        );
        assert_eq!(
            defaults.dead_rows_warning,
            Some(drover_runner::DEAD_ROWS_WARNING_DEFAULT)
        );
        let set = config(&[
            "worker",
            "--warn-transaction-age",
            "90s",
            "--warn-dead-rows",
            "0.25",
        ]);
        assert_eq!(
            set.transaction_age_warning,
            Some(std::time::Duration::from_secs(90))
        );
        assert_eq!(set.dead_rows_warning, Some(0.25));
        let off = config(&[
            "worker",
            "--warn-transaction-age",
            "0s",
            "--warn-dead-rows",
            "0",
        ]);
        assert_eq!(
            (off.transaction_age_warning, off.dead_rows_warning),
            (None, None)
        );
    }

    /// `check_config` on the stock registry for `drover worker ARGS`.
    fn check(args: &[&str]) -> Result<()> {
        let cli = Cli::try_parse_from(["drover", "worker"].into_iter().chain(args.iter().copied()))
            .expect("each value is valid");
        let Command::Worker(worker) = cli.command else {
            panic!("not a worker command");
        };
        let mut registry = Registry::new();
        crate::builtin::register(&mut registry, &[]);
        check_config(&worker_config(&worker, &[]), &registry, &worker)
    }

    #[test]
    fn rules_across_worker_flags_are_usage_errors_naming_the_flags() {
        for (args, needle) in [
            (
                &["--lease", "10s"][..],
                "--heartbeat 15s (the default) must be at most a third of --lease 10s (at most 3s 333ms): with fewer than 3 heartbeats per lease, one late heartbeat can let the lease expire",
            ),
            (
                &["--lease", "5s", "--heartbeat", "5s"],
                "--heartbeat 5s must be at most a third of --lease 5s",
            ),
            (
                &["--heartbeat", "30s"],
                "--heartbeat 30s must be at most a third of --lease 1m (the default) (at most 20s)",
            ),
            (
                &["--lease", "2s", "--heartbeat", "1s"],
                "--heartbeat 1s must be at most a third of --lease 2s (at most 666ms)",
            ),
            (
                &["--lease", "10m", "--heartbeat", "3m"],
                "--heartbeat 3m must be shorter than 2m",
            ),
            (
                &["--pool", "a:q:1", "--pool", "a:r:1"],
                "invalid --pool: pool \"a\" is defined twice",
            ),
            (
                &["--queue", "x", "--pool", "main:q:1"],
                "the pool name \"main\" is taken by the pool of --queue",
            ),
            (&["--queue", "x", "--queue", "x"], "invalid --queue: pool \"main\" lists queue x twice"),
            (&["--pool", "a:q,q:1"], "invalid --pool: pool \"a\" lists queue q twice"),
            (
                &["--queue", "lq", "--pool", "long:lq:1:fail,noop,sleep"],
                "invalid --queue: pool \"main\" has no kind to claim in queue lq: pools with a kind filter reserve every registered kind there",
            ),
            (
                &["--pool", "a:q:1:email.send"],
                "invalid --pool: pool \"a\" names kind email.send, which has no registered handler (kinds: fail, noop, sleep)",
            ),
        ] {
            let err = check(args).expect_err(args[1]);
            assert!(crate::usage::is_usage(&err), "{args:?}: exit code 2 for {err}");
            assert!(err.to_string().contains(needle), "{args:?}: {err}");
        }
        check(&["--lease", "2s", "--heartbeat", "500ms"]).expect("valid");
        check(&["--heartbeat", "20s"]).expect("a third of the default lease");
        check(&["--lease", "3s", "--heartbeat", "1s"]).expect("exactly a third");
        check(&["--queue", "x", "--pool", "other:q:1:sleep"]).expect("valid");
        check(&["--queue", "lq", "--pool", "long:lq:1:sleep"]).expect("valid");

        // A registry without handlers is the embedding application's fault, not the flags'.
        let cli = Cli::try_parse_from(["drover", "worker"]).unwrap();
        let Command::Worker(worker) = cli.command else {
            panic!("not a worker command");
        };
        let err = check_config(&worker_config(&worker, &[]), &Registry::new(), &worker)
            .expect_err("no kind to claim");
        assert!(!crate::usage::is_usage(&err), "{err}");
    }
}

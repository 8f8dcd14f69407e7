//! The reference table of docs/configuration.md against the binary: every flag of every
//! command (clap's definitions), every variable clap reads (`env = ...`) and every `DROVER_*`
//! name in the crates' sources has its row; every row names flags, variables and commands that
//! exist; clap's defaults, the defaults the code applies and the `A..=B` bounds match the
//! table. Each failure names the flag or variable and what to change.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Arg, ArgAction, Command, CommandFactory, Parser};
use drover_cli::args::Cli;

/// Variables only tests, benchmarks and the simulator read: named in the page's note on them,
/// not in the table.
const TEST_ONLY: &[&str] = &[
    "DROVER_TEST_DATABASE_URL",
    "DROVER_REQUIRE_POSTGRES",
    "DROVER_TEST_PG_BINDIR",
    "DROVER_TEST_SIDE_EFFECTS_ASYNC",
    "DROVER_TEST_SIDE_EFFECT_CONNECTIONS",
    "DROVER_SOAK",
    "DROVER_LOAD_SECS",
    "DROVER_EXACTLY_ONCE_JOBS",
    "DROVER_BENCH_DATABASE_URL",
    "DROVER_SIM_SEEDS",
    "DROVER_WRITE_REFERENCE",
];

const FIX: &str = "fix the table in docs/configuration.md";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn page() -> String {
    std::fs::read_to_string(root().join("docs/configuration.md")).expect("docs/configuration.md")
}

/// One row of the table.
#[derive(Debug)]
struct Row {
    /// Line number in the page.
    line: usize,
    /// `--slots` for `--slots N`.
    flags: Vec<String>,
    /// `DROVER_*` names.
    variables: Vec<String>,
    /// Command paths: `drover` for the top level, `worker`, `jobs list`.
    commands: Vec<String>,
    default: String,
    bounds: String,
}

/// The text of each code span of `text`, in order.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(ToOwned::to_owned)
        .collect()
}

/// The cells of a table line, with `\|` read as `|`.
fn cells(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line.trim().trim_start_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
    }
    if !cell.trim().is_empty() {
        cells.push(cell.trim().to_owned());
    }
    cells
}

fn is_variable(name: &str) -> bool {
    name.strip_prefix("DROVER_").is_some_and(|rest| {
        rest.starts_with(|c: char| c.is_ascii_uppercase() || c.is_ascii_digit())
            && rest
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// The reference table: the one whose header starts with `setting`.
fn table(page: &str) -> Vec<Row> {
    let lines: Vec<&str> = page.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.starts_with("| setting |"))
        .expect("docs/configuration.md has a table whose header starts with `| setting |`");
    let header = cells(lines[start]);
    let column = |name: &str| {
        header
            .iter()
            .position(|cell| cell == name)
            .unwrap_or_else(|| panic!("the table's header has no column `{name}`: {header:?}"))
    };
    let (setting, commands, default, bounds) = (
        column("setting"),
        column("commands"),
        column("default"),
        column("bounds"),
    );
    column("what");
    column("unit");
    let mut rows = Vec::new();
    for (index, line) in lines.iter().enumerate().skip(start + 2) {
        if !line.starts_with('|') {
            break;
        }
        let row = cells(line);
        assert_eq!(
            row.len(),
            header.len(),
            "docs/configuration.md line {}: {} cells, the header has {}",
            index + 1,
            row.len(),
            header.len()
        );
        let names = code_spans(&row[setting]);
        rows.push(Row {
            line: index + 1,
            flags: names
                .iter()
                .filter(|name| name.starts_with("--"))
                .map(|name| {
                    name.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect(),
            variables: names
                .iter()
                .filter(|name| is_variable(name))
                .cloned()
                .collect(),
            // `serve --worker` is the command `serve`, taking the flag with `--worker`; a span
            // in capitals (`DROVER_MAX_PENDING`) names a setting, not a command.
            commands: code_spans(&row[commands])
                .iter()
                .filter(|span| span.starts_with(|c: char| c.is_ascii_lowercase()))
                .map(|span| {
                    span.split_whitespace()
                        .take_while(|word| !word.starts_with('-'))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect(),
            default: row[default].clone(),
            bounds: row[bounds].clone(),
        });
    }
    rows
}

/// `--help` and `--version`, which clap adds to every command.
fn is_builtin(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Help | ArgAction::Version)
        || matches!(arg.get_id().as_str(), "help" | "version")
}

/// Every command with its path (`drover`, `worker`, `jobs list`), depth first.
fn commands() -> Vec<(String, Command)> {
    fn walk(command: &Command, path: &str, out: &mut Vec<(String, Command)>) {
        out.push((path.to_owned(), command.clone()));
        for sub in command.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            let sub_path = if path == "drover" {
                sub.get_name().to_owned()
            } else {
                format!("{path} {}", sub.get_name())
            };
            walk(sub, &sub_path, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), "drover", &mut out);
    out
}

/// The long flags of `command` that the table documents: not hidden, not clap's own.
fn flags(command: &Command) -> Vec<&Arg> {
    command
        .get_arguments()
        .filter(|arg| arg.get_long().is_some() && !arg.is_hide_set() && !is_builtin(arg))
        .collect()
}

/// The `DROVER_*` names in the Rust sources under `crates/*/src`.
fn source_variables() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let mut rest = text.as_str();
                while let Some(at) = rest.find("DROVER_") {
                    let name: String = rest[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if is_variable(&name) {
                        out.insert(name);
                    }
                    rest = &rest[at + "DROVER_".len()..];
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    let crates = root().join("crates");
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let src = entry.expect("a directory entry").path().join("src");
        if src.is_dir() {
            walk(&src, &mut out);
        }
    }
    out
}

/// Whether `documented` (from the table) and `code` are the same value: as written, or with
/// thousands separators, or as the same duration or number.
fn same_value(documented: &str, code: &str) -> bool {
    let documented = documented.trim();
    let code = code.trim();
    if documented == code || documented.replace(',', "") == code.replace(',', "") {
        return true;
    }
    if let (Ok(a), Ok(b)) = (
        humantime::parse_duration(documented),
        humantime::parse_duration(code),
    ) {
        return a == b;
    }
    matches!(
        (documented.parse::<f64>(), code.parse::<f64>()),
        (Ok(a), Ok(b)) if a == b
    )
}

/// The value a cell starts with, in code font: `` `8` `` in "`8`; `dev`: 4".
fn leading_value(cell: &str) -> Option<String> {
    cell.trim_start()
        .starts_with('`')
        .then(|| code_spans(cell).into_iter().next())
        .flatten()
}

/// The rows for `flag` of the command at `path`.
/// The problem when `row`'s default column does not start with `default`, which `source`
/// (clap, the code) applies to `setting`.
fn default_mismatch(row: &Row, setting: &str, default: &str, source: &str) -> Option<String> {
    match leading_value(&row.default) {
        Some(documented) if same_value(&documented, default) => None,
        documented => Some(format!(
            "line {}: {setting} defaults to {default} in {source}, the table says {}: start the default column with `{default}` ({FIX})",
            row.line,
            documented.map_or_else(|| format!("{:?}", row.default), |d| format!("`{d}`")),
        )),
    }
}

fn rows_for<'a>(rows: &'a [Row], path: &str, flag: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|row| row.flags.iter().any(|f| f == flag) && row.commands.iter().any(|c| c == path))
        .collect()
}

#[test]
fn every_flag_and_variable_has_one_row_that_matches_the_binary() {
    let page = page();
    let rows = table(&page);
    let commands = commands();
    let globals: Vec<String> = commands[0]
        .1
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .filter_map(|arg| Some(format!("--{}", arg.get_long()?)))
        .collect();
    let mut problems = Vec::new();

    // Rows name commands, flags and variables that exist.
    let has_flag = |path: &str, flag: &str| {
        globals.iter().any(|g| g == flag)
            || commands.iter().any(|(p, command)| {
                p == path
                    && flags(command).iter().any(|arg| {
                        arg.get_long()
                            .is_some_and(|long| format!("--{long}") == flag)
                    })
            })
    };
    let clap_variables: BTreeSet<String> = commands
        .iter()
        .flat_map(|(_, command)| flags(command))
        .filter_map(|arg| Some(arg.get_env()?.to_string_lossy().into_owned()))
        .collect();
    let source_variables = source_variables();
    for row in &rows {
        for path in &row.commands {
            if !commands.iter().any(|(p, _)| p == path) {
                problems.push(format!(
                    "line {}: `{path}` in the commands column is not a drover command: {FIX}",
                    row.line
                ));
            }
        }
        for flag in &row.flags {
            if !commands.iter().any(|(path, _)| has_flag(path, flag)) {
                problems.push(format!(
                    "line {}: no command has {flag}: remove the row or correct the flag ({FIX})",
                    row.line
                ));
                continue;
            }
            if row.commands.is_empty() {
                problems.push(format!(
                    "line {}: {flag} has no command in code font in the commands column ({FIX})",
                    row.line
                ));
            }
            for path in &row.commands {
                if commands.iter().any(|(p, _)| p == path) && !has_flag(path, flag) {
                    problems.push(format!(
                        "line {}: `drover {path}` has no {flag}: take `{path}` out of the row's commands column ({FIX})",
                        row.line
                    ));
                }
            }
        }
        for variable in &row.variables {
            if !clap_variables.contains(variable) && !source_variables.contains(variable) {
                problems.push(format!(
                    "line {}: nothing reads {variable} (no clap `env`, no `DROVER_*` name under crates/*/src): remove it from the row ({FIX})",
                    row.line
                ));
            }
        }
    }

    // Every flag of every command has exactly one row, with its variable and its default.
    for (path, command) in &commands {
        for arg in flags(command) {
            let flag = format!("--{}", arg.get_long().unwrap_or_default());
            let at = if path == "drover" {
                "drover".to_owned()
            } else {
                format!("drover {path}")
            };
            let found = rows_for(&rows, path, &flag);
            let row = match found.as_slice() {
                [row] => *row,
                [] => {
                    let elsewhere: Vec<String> = rows
                        .iter()
                        .filter(|row| row.flags.contains(&flag))
                        .map(|row| row.line.to_string())
                        .collect();
                    problems.push(if elsewhere.is_empty() {
                        format!("{flag} of `{at}` has no row: add one with `{flag} ...` in the setting column and `{path}` in the commands column ({FIX})")
                    } else {
                        format!("{flag} of `{at}` has no row: add `{path}` to the commands column of the row at line {} or add a row ({FIX})", elsewhere.join(", "))
                    });
                    continue;
                }
                several => {
                    let lines: Vec<String> =
                        several.iter().map(|row| row.line.to_string()).collect();
                    problems.push(format!(
                        "{flag} of `{at}` has several rows (lines {}): keep `{path}` in one ({FIX})",
                        lines.join(", ")
                    ));
                    continue;
                }
            };
            if let Some(variable) = arg.get_env() {
                let variable = variable.to_string_lossy();
                if !row.variables.iter().any(|v| *v == variable) {
                    problems.push(format!(
                        "line {}: {flag} of `{at}` is also set by {variable}: name `{variable}` in the row's setting column ({FIX})",
                        row.line
                    ));
                }
            }
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|value| value.to_string_lossy().into_owned())
                .collect();
            if !defaults.is_empty() {
                let default = defaults.join(",");
                problems.extend(default_mismatch(
                    row,
                    &format!("{flag} of `{at}`"),
                    &default,
                    "clap",
                ));
            }
        }
    }

    // Every variable clap or the sources read has its row; test-only ones are in the note.
    let documented: BTreeSet<&String> = rows.iter().flat_map(|row| &row.variables).collect();
    let read: BTreeSet<&String> = clap_variables.iter().chain(&source_variables).collect();
    for variable in read {
        if TEST_ONLY.contains(&variable.as_str()) {
            continue;
        }
        if !documented.contains(variable) {
            problems.push(format!(
                "{variable} is read (clap `env` or a `DROVER_*` name under crates/*/src) but has no row: add one, or add it to TEST_ONLY in crates/cli/tests/configuration.rs and the page's note if only tests read it ({FIX})"
            ));
        }
    }
    let note = page
        .split("\n## Tests and benchmarks\n")
        .nth(1)
        .expect("docs/configuration.md has a section `## Tests and benchmarks`");
    for variable in TEST_ONLY {
        if !note.contains(&format!("`{variable}`")) {
            problems.push(format!(
                "{variable} (read only by tests) is not named in the section `Tests and benchmarks` of docs/configuration.md: name it there"
            ));
        }
    }

    assert!(
        problems.is_empty(),
        "docs/configuration.md differs from the binary:\n- {}",
        problems.join("\n- ")
    );
}

/// The row of `setting` (a flag or a variable) for the command at `path`.
fn row_of<'a>(rows: &'a [Row], path: &str, setting: &str) -> &'a Row {
    let found: Vec<&Row> = if setting.starts_with("--") {
        rows_for(rows, path, setting)
    } else {
        rows.iter()
            .filter(|row| row.variables.iter().any(|v| v == setting))
            .collect()
    };
    match found.as_slice() {
        [row] => row,
        _ => panic!(
            "{setting} of `{path}`: {} rows in docs/configuration.md",
            found.len()
        ),
    }
}

/// The defaults the code applies when a flag without a clap default is not given.
#[test]
fn the_defaults_the_code_applies_are_the_tables() {
    let rows = table(&page());
    let Ok(Cli {
        command: drover_cli::args::Command::Worker(worker),
        ..
    }) = Cli::try_parse_from(["drover", "worker"])
    else {
        panic!("`drover worker` parses");
    };
    let config = drover_cli::worker_flags::worker_config(&worker, &[]);
    let Ok(Cli {
        command: drover_cli::args::Command::Enqueue(enqueue),
        ..
    }) = Cli::try_parse_from(["drover", "enqueue", "noop"])
    else {
        panic!("`drover enqueue noop` parses");
    };
    let job = drover_cli::commands::enqueue::job_from_flags(&enqueue).expect("a job");
    let schedule = drover_core::NewSchedule::new(
        drover_core::ScheduleName::parse("s").expect("a name"),
        "* * * * *",
        job.kind.clone(),
        serde_json::json!({}),
    );
    let duration = |d: Duration| humantime::format_duration(d).to_string();
    let expected: Vec<(&str, &str, String)> = vec![
        ("worker", "--lease", duration(config.lease)),
        ("worker", "--heartbeat", duration(config.heartbeat_interval)),
        (
            "worker",
            "--rescue-interval",
            duration(config.rescue_interval),
        ),
        (
            "worker",
            "--shutdown-grace",
            duration(config.shutdown_grace),
        ),
        ("worker", "--retention", duration(config.retention)),
        (
            "worker",
            "--audit-retention",
            duration(config.audit_retention),
        ),
        ("worker", "--prune-limit", config.prune_limit.to_string()),
        ("worker", "--poll-interval", duration(config.poll_interval)),
        (
            "worker",
            "--warn-transaction-age",
            duration(config.transaction_age_warning.expect("on by default")),
        ),
        (
            "worker",
            "--warn-dead-rows",
            config.dead_rows_warning.expect("on by default").to_string(),
        ),
        (
            "migrate",
            "--lock-timeout",
            duration(drover_store_postgres::migrate::LOCK_TIMEOUT_DEFAULT),
        ),
        (
            "migrate",
            "--lock-budget",
            duration(drover_store_postgres::migrate::LOCK_BUDGET_DEFAULT),
        ),
        ("enqueue", "--args", job.args.to_string()),
        ("enqueue", "--meta", job.meta.to_string()),
        ("enqueue", "--queue", job.queue.to_string()),
        ("enqueue", "--tenant", job.tenant.to_string()),
        ("enqueue", "--priority", job.priority.to_string()),
        ("enqueue", "--max-attempts", job.max_attempts.to_string()),
        ("schedules add", "--queue", schedule.queue.to_string()),
        ("schedules add", "--priority", schedule.priority.to_string()),
        (
            "schedules add",
            "--max-attempts",
            schedule.max_attempts.to_string(),
        ),
        ("schedules add", "--timezone", schedule.timezone.clone()),
        (
            "",
            "DROVER_MAX_PENDING",
            drover_core::store::MAX_PENDING_DEFAULT.to_string(),
        ),
        (
            "",
            "DROVER_MAX_TENANT_PENDING",
            drover_core::store::MAX_TENANT_PENDING_DEFAULT.to_string(),
        ),
    ];
    let mut problems = Vec::new();
    for (path, setting, code) in expected {
        let row = row_of(&rows, path, setting);
        problems.extend(default_mismatch(row, setting, &code, "the code"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A bound as the table writes it: whole numbers or durations.
#[derive(Debug, Clone, Copy)]
enum Bound {
    Integer(i128),
    Duration(Duration),
}

fn bound(text: &str) -> Option<Bound> {
    let digits = text.replace(',', "");
    if let Ok(n) = digits.parse::<i128>() {
        return Some(Bound::Integer(n));
    }
    humantime::parse_duration(text).ok().map(Bound::Duration)
}

/// `bound` as a flag takes it: a whole number without separators, a duration as written.
fn written(bound: Bound, text: &str) -> String {
    match bound {
        Bound::Integer(n) => n.to_string(),
        Bound::Duration(_) => text.to_owned(),
    }
}

/// A value just outside `bound`, below (`-1`) or above (`+1`) it; `None` below zero for a
/// duration.
fn beyond(bound: Bound, step: i8) -> Option<String> {
    match bound {
        Bound::Integer(n) => Some((n + i128::from(step)).to_string()),
        Bound::Duration(d) if step < 0 => d
            .checked_sub(Duration::from_millis(1))
            .map(|d| format!("{}ms", d.as_millis())),
        Bound::Duration(d) => Some(format!("{}ms", (d + Duration::from_secs(1)).as_millis())),
    }
}

/// The bounds `A..=B` a row's bounds column starts with hold for each of its flags and
/// commands: clap takes A and B, and refuses a value just outside.
#[test]
fn the_bounds_in_the_table_are_the_binarys() {
    let rows = table(&page());
    let mut checked = 0;
    let mut problems = Vec::new();
    for row in &rows {
        let Some(range) = leading_value(&row.bounds) else {
            continue;
        };
        let Some((low, high)) = range.split_once("..=") else {
            continue;
        };
        let (Some(min), Some(max)) = (bound(low), bound(high)) else {
            problems.push(format!(
                "line {}: cannot read the bounds `{range}`: write whole numbers or durations, `A..=B`",
                row.line
            ));
            continue;
        };
        for flag in &row.flags {
            for path in &row.commands {
                let value_refused = |value: &str| {
                    let mut argv = vec!["drover".to_owned()];
                    if path != "drover" {
                        argv.extend(path.split(' ').map(ToOwned::to_owned));
                    }
                    argv.push(format!("{flag}={value}"));
                    match Cli::command().try_get_matches_from(&argv) {
                        Ok(_) => None,
                        Err(e) => matches!(
                            e.kind(),
                            ErrorKind::ValueValidation | ErrorKind::InvalidValue
                        )
                        .then(|| e.to_string()),
                    }
                };
                for value in [written(min, low), written(max, high)] {
                    if let Some(error) = value_refused(&value) {
                        problems.push(format!(
                            "line {}: `drover {path}` refuses {flag}={value}, which the bounds `{range}` allow: {error}",
                            row.line
                        ));
                    }
                }
                for value in [beyond(min, -1), beyond(max, 1)].into_iter().flatten() {
                    if value_refused(&value).is_none() {
                        problems.push(format!(
                            "line {}: `drover {path}` takes {flag}={value}, outside the bounds `{range}`: correct the bounds ({FIX})",
                            row.line
                        ));
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 20, "only {checked} bounds were checked");
}

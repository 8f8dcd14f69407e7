//! The command-line reference page (`docs/cli-reference.md`), rendered from the clap
//! definitions in [`crate::args`] so it cannot drift from the binary: a test compares the
//! committed page with [`markdown`] and fails when they differ.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

use crate::args::Cli;

/// The whole reference page, one section per command (depth first, in definition order).
pub fn markdown() -> String {
    let mut page = String::from(
        "# Command-line reference\n\n\
         Every `drover` command with its flags, as the binary defines them (this page is \
         generated from `crates/cli/src/args.rs`; a test fails when the two differ, and \
         `DROVER_WRITE_REFERENCE=1 cargo test -p drover-cli --test reference` writes it \
         again). The options of the top-level `drover` apply to every command. \
         [The command line](cli.md) shows them at work; [Configuration](configuration.md) \
         gives every setting's default, unit and bounds in one table, with the environment \
         variables.\n",
    );
    let root = Cli::command();
    section(&mut page, &root, "drover");
    page
}

fn section(page: &mut String, command: &Command, path: &str) {
    let _ = write!(page, "\n## `{path}`\n\n");
    let about = command
        .get_long_about()
        .or(command.get_about())
        .map(|about| about.to_string())
        .unwrap_or_default();
    if !about.is_empty() {
        let _ = write!(page, "{}\n\n", one_paragraph(&about));
    }
    let arguments: Vec<&Arg> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set() && !is_builtin(arg))
        .collect();
    if !arguments.is_empty() {
        page.push_str("| argument | value | default | variable | meaning |\n");
        page.push_str("|---|---|---|---|---|\n");
        for arg in arguments {
            row(page, arg);
        }
    }
    let subcommands: Vec<&Command> = command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
        .collect();
    if !subcommands.is_empty() {
        let names: Vec<String> = subcommands
            .iter()
            .map(|sub| format!("`{}`", sub.get_name()))
            .collect();
        let _ = write!(page, "\nCommands: {}.\n", names.join(", "));
    }
    for sub in subcommands {
        section(page, sub, &format!("{path} {}", sub.get_name()));
    }
}

/// `--help` and `--version`, which clap adds to every command.
fn is_builtin(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Help | ArgAction::Version)
        || matches!(arg.get_id().as_str(), "help" | "version")
}

fn row(page: &mut String, arg: &Arg) {
    let name = match (arg.get_long(), arg.get_short()) {
        (Some(long), Some(short)) => format!("`-{short}`, `--{long}`"),
        (Some(long), None) => format!("`--{long}`"),
        (None, Some(short)) => format!("`-{short}`"),
        (None, None) => format!("`{}` (positional)", value_names(arg).unwrap_or_default()),
    };
    let takes_value = !matches!(
        arg.get_action(),
        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
    );
    let value = if takes_value && (arg.get_long().is_some() || arg.get_short().is_some()) {
        value_names(arg)
            .map(|names| format!("`{names}`"))
            .unwrap_or_default()
    } else {
        String::new()
    };
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|value| value.to_string_lossy().into_owned())
        .collect();
    let default = if defaults.is_empty() {
        String::new()
    } else {
        format!("`{}`", defaults.join(","))
    };
    let variable = arg
        .get_env()
        .map(|name| format!("`{}`", name.to_string_lossy()))
        .unwrap_or_default();
    let mut meaning = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|help| one_paragraph(&help.to_string()))
        .unwrap_or_default();
    if !meaning.is_empty() && !meaning.ends_with('.') {
        meaning.push('.');
    }
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|choice| !choice.is_hide_set())
        .map(|choice| format!("`{}`", choice.get_name()))
        .collect();
    if !choices.is_empty() && takes_value {
        let _ = write!(meaning, " One of {}.", choices.join(", "));
    }
    if arg.is_required_set() {
        meaning.push_str(" Required.");
    }
    if matches!(arg.get_action(), ArgAction::Append) {
        meaning.push_str(" May be given more than once.");
    }
    let _ = writeln!(
        page,
        "| {} | {} | {} | {} | {} |",
        cell(&name),
        cell(&value),
        cell(&default),
        cell(&variable),
        cell(meaning.trim())
    );
}

fn value_names(arg: &Arg) -> Option<String> {
    arg.get_value_names().map(|names| {
        names
            .iter()
            .map(|name| name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// Help text as one line of Markdown: paragraphs and wrapped lines joined by spaces, and
/// placeholders such as `<queue>` kept as text rather than read as HTML tags.
fn one_paragraph(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A table cell: the column separator escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

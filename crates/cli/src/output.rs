//! Output for people (comfy-table tables) and for scripts (`--json`: one JSON document on
//! stdout). Everything on stdout goes through [`write_text`] (or the crate's `outln!`), so a
//! closed pipe (`drover jobs list --json | head`) ends the command quietly instead of
//! panicking.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use comfy_table::{presets, ColumnConstraint, ContentArrangement, Row, Table, Width};
use serde::Serialize;

/// Narrowest terminal a table is fitted to: below it (or when the terminal reports a width of
/// 0, as a pseudo-terminal without a size does) tables are printed at their natural width.
const FIT_WIDTH_MIN: u16 = 40;

/// Longest word a column is kept wide enough for; longer words (a long error token) may wrap.
const WORD_KEPT_MAX: usize = 64;

/// A table for people (comfy-table), sized to the terminal, that never splits a word: a job
/// id, a time, a queue name stays on one line so it can be copied, and only text with spaces
/// (error messages, JSON) wraps. Wider than the terminal rather than breaking an id.
#[derive(Debug, Clone)]
pub struct TextTable {
    table: Table,
}

impl TextTable {
    /// Adds a row (cells in header order), each cell through [`printable`]: text from jobs
    /// (args, meta, error messages) never drives the operator's terminal.
    pub fn add_row<S: AsRef<str>>(&mut self, row: impl IntoIterator<Item = S>) -> &mut Self {
        let cells: Vec<String> = row
            .into_iter()
            .map(|cell| printable(cell.as_ref()))
            .collect();
        self.table.add_row(Row::from(cells));
        self
    }

    /// The table as printed: each column at least as wide as its longest word (up to
    /// [`WORD_KEPT_MAX`] characters); on a terminal narrower than [`FIT_WIDTH_MIN`], unfitted.
    fn fitted(&self) -> Table {
        let mut table = self.table.clone();
        if table.width().is_some_and(|width| width < FIT_WIDTH_MIN) {
            table.set_content_arrangement(ContentArrangement::Disabled);
            return table;
        }
        let mut longest = vec![0; table.column_count()];
        let header = table.header().into_iter();
        for row in header.chain(table.row_iter()) {
            for (i, cell) in row.cell_iter().enumerate() {
                let word = cell
                    .content()
                    .split_whitespace()
                    .map(|word| word.chars().count())
                    .max()
                    .unwrap_or(0);
                longest[i] = longest[i].max(word.min(WORD_KEPT_MAX));
            }
        }
        for (column, word) in table.column_iter_mut().zip(longest) {
            // The constraint counts the cell's padding too (one space each side).
            let width = u16::try_from(word + 2).unwrap_or(u16::MAX);
            column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(width)));
        }
        table
    }

    /// Fixes the width instead of reading the terminal's (tests).
    #[cfg(test)]
    fn with_width(mut self, width: u16) -> Self {
        self.table.set_width(width);
        self
    }
}

impl fmt::Display for TextTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fitted().fmt(f)
    }
}

/// `text` with every character that could drive or mislead a terminal written as a `\u{...}`
/// escape: control characters other than a line feed (ESC, BEL, CR, ...) and the Unicode
/// bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), which can
/// make a line display in an order other than its own.
pub fn printable(text: &str) -> String {
    let hidden = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(hidden) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// A table with the given header, sized to the terminal without splitting words
/// ([`TextTable`]).
pub fn table(header: &[&str]) -> TextTable {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    TextTable { table: t }
}

/// Stdout was closed by the reader (a pipe to `head`, a pager that quit): the command stops
/// and the process exits 0 without a message, as a shell filter would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputClosed;

impl fmt::Display for OutputClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for OutputClosed {}

/// Writes `text` to stdout and flushes it.
///
/// # Errors
/// [`OutputClosed`] when the reader closed the pipe; another write error as a message.
pub fn write_text(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(OutputClosed.into()),
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

/// Writes formatted text and a newline to stdout (what `outln!` expands to).
///
/// # Errors
/// As [`write_text`].
pub fn write_line(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut text = args.to_string();
    text.push('\n');
    write_text(&text)
}

/// `println!` that returns `anyhow::Result<()>` instead of panicking on a closed stdout.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_line(::std::format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes a line to stderr, ignoring a failure (a closed pipe, a full disk): every message
/// the CLI writes to stderr goes through here (or `errln!`), so that a worker, server or dev
/// run whose stderr reader is gone (`drover worker 2>&1 | head -1`, a closed descriptor)
/// keeps working instead of panicking on the write, as `eprintln!` does. The crate denies
/// `eprintln!` and `println!` (clippy's `print_stderr` and `print_stdout`).
///
/// After [`log_json`] (`drover worker --json`, `drover serve --json`) each line goes out as
/// one JSON object instead, in the shape of the log lines (see [`json_line`]).
pub fn say(line: &str) {
    say_at(None, line);
}

/// [`say`] for the message a command fails with: level `ERROR` after [`log_json`].
pub fn say_failure(line: &str) {
    say_at(Some("ERROR"), line);
}

fn say_at(level: Option<&'static str>, line: &str) {
    use std::io::Write;
    if JSON_STDERR.get().copied().unwrap_or(false) {
        let _ = writeln!(std::io::stderr(), "{}", json_line(line, level, Utc::now()));
    } else {
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

/// Set once, by [`log_json`].
static JSON_STDERR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Makes [`say`] write JSON objects from now on: for the long-running commands given
/// `--json`, whose stderr is a log that a collector reads line by line.
pub fn log_json() {
    let _ = JSON_STDERR.set(true);
}

/// One stderr line as a JSON object in the shape tracing's JSON log lines have (flattened):
/// `{"timestamp":"2026-12-04T03:43:09.123456Z","level":"INFO","message":"...","target":"drover"}`.
/// The `drover: ` prefix is dropped; without a `level` given, a line that starts `warning: `
/// (any case) after it is level `WARN` (that word dropped too) and any other `INFO`.
pub fn json_line(line: &str, level: Option<&'static str>, at: DateTime<Utc>) -> String {
    let text = line.strip_prefix("drover: ").unwrap_or(line);
    let (level, message) = match (level, text.split_once(": ")) {
        (Some(level), _) => (level, text),
        (None, Some((word, rest))) if word.eq_ignore_ascii_case("warning") => ("WARN", rest),
        (None, _) => ("INFO", text),
    };
    // Written by hand to keep tracing's key order (serde_json's map would sort the keys).
    let string = |text: &str| serde_json::Value::from(text).to_string();
    format!(
        "{{\"timestamp\":{},\"level\":{},\"message\":{},\"target\":\"drover\"}}",
        string(&at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        string(level),
        string(message),
    )
}

/// `eprintln!` that ignores a failure to write (see [`say`]).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::say(&::std::format!($($arg)*))
    };
}
pub(crate) use errln;

/// Prints `value` as pretty JSON on stdout.
///
/// # Errors
/// As [`write_text`].
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    write_text(&text)
}

/// An instant as `2026-11-29 10:34:54Z`.
pub fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// An optional instant, `-` when absent.
pub fn opt_time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "-".to_owned(), time)
}

/// A duration rounded for people: `850ms`, `12.3s`, `4m 05s`, `2h 10m`, `3d 4h`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    if ms < 1000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d {}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// Shortens text to `max` characters with an ellipsis.
pub fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "01a23560-7fa8-73f0-b140-52ceab112f1f";

    fn parsed(line: &str, level: Option<&'static str>) -> serde_json::Value {
        let at = DateTime::parse_from_rfc3339("2026-12-04T03:43:09.5Z")
            .unwrap()
            .with_timezone(&Utc);
        serde_json::from_str(&json_line(line, level, at)).unwrap()
    }

    #[test]
    fn table_cells_escape_terminal_controls_and_bidi_overrides() {
        assert_eq!(
            printable("plain text, é, 日本\nline"),
            "plain text, é, 日本\nline"
        );
        assert_eq!(
            printable("a\u{1b}[31mred\u{7}\rb\u{202e}cba\u{2066}\u{200f}"),
            "a\\u{001b}[31mred\\u{0007}\\u{000d}b\\u{202e}cba\\u{2066}\\u{200f}"
        );
        let mut t = table(&["k", "v"]).with_width(200);
        t.add_row(vec!["meta".to_owned(), "{\"m\":\"x\u{202e}y\"}".to_owned()]);
        let shown = t.to_string();
        assert!(
            shown.contains("x\\u{202e}y") && !shown.contains('\u{202e}'),
            "{shown}"
        );
    }

    #[test]
    fn json_lines_carry_time_level_and_the_message_without_its_prefixes() {
        assert_eq!(
            parsed("drover: worker w-1 started on db: 2 slot(s)", None),
            serde_json::json!({
                "timestamp": "2026-12-04T03:43:09.500000Z",
                "level": "INFO",
                "message": "worker w-1 started on db: 2 slot(s)",
                "target": "drover",
            })
        );
        let warning = parsed("drover: warning: queue mail is paused: \"x\"", None);
        assert_eq!(warning["level"], "WARN");
        assert_eq!(warning["message"], "queue mail is paused: \"x\"");
        assert_eq!(
            parsed("drover: WARNING: authentication is OFF", None)["level"],
            "WARN"
        );
        let failure = parsed("drover: cannot connect: refused", Some("ERROR"));
        assert_eq!(failure["level"], "ERROR");
        assert_eq!(failure["message"], "cannot connect: refused");
        assert_eq!(parsed("no prefix", None)["message"], "no prefix");
        let at = DateTime::parse_from_rfc3339("2026-12-04T03:43:09Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            json_line("drover: a \"quoted\"\tline", None, at),
            r#"{"timestamp":"2026-12-04T03:43:09.000000Z","level":"INFO","message":"a \"quoted\"\tline","target":"drover"}"#
        );
    }

    fn jobs_table(width: u16) -> String {
        let mut t = table(&["id", "kind", "queue", "state", "run at", "error"]).with_width(width);
        t.add_row(vec![
            ID,
            "email.send",
            "mail",
            "queued",
            "2026-12-02T06:15:00Z",
            "the mail server refused the message: 550 mailbox unavailable for this recipient",
        ]);
        t.to_string()
    }

    #[test]
    fn a_narrow_terminal_wraps_text_but_never_splits_a_word() {
        // 110 columns: every word fits, so only the error message wraps, inside the width.
        let text = jobs_table(110);
        for word in [ID, "2026-12-02T06:15:00Z", "email.send", "unavailable"] {
            assert!(text.contains(word), "{word} is split:\n{text}");
        }
        assert!(text.lines().count() > 5, "the error wrapped:\n{text}");
        assert!(
            text.lines().all(|line| line.chars().count() <= 110),
            "{text}"
        );
        // 80 columns cannot hold the words side by side: the table is wider, the id whole.
        let text = jobs_table(80);
        assert!(text.contains(ID), "the id is split:\n{text}");
        assert!(text.contains("2026-12-02T06:15:00Z"), "{text}");
    }

    #[test]
    fn a_terminal_without_a_width_gets_the_table_unfitted() {
        for width in [0, 10] {
            let text = jobs_table(width);
            assert!(text.contains(ID), "width {width}:\n{text}");
            assert!(
                text.contains("550 mailbox unavailable for this recipient"),
                "width {width}: {text}"
            );
        }
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(duration(Duration::from_secs(245)), "4m 05s");
        assert_eq!(duration(Duration::from_secs(7800)), "2h 10m");
        assert_eq!(
            duration(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d 4h"
        );
        assert_eq!(short("abcdef", 4), "abc…");
    }
}

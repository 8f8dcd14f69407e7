//! Output for people (comfy-table tables) and for scripts (`--json`: one JSON document on
//! stdout). Everything on stdout goes through [`write_text`] (or the crate's `outln!`), so a
//! closed pipe (`drover jobs list --json | head`) ends the command quietly instead of
//! panicking.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use comfy_table::{presets, ContentArrangement, Table};
use serde::Serialize;

/// A table with the given header, sized to the terminal.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    t
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
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
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

//! JSON Lines job files (`drover enqueue --file`, `drover dev --jobs`): one job object per
//! line with the fields of the HTTP API's enqueue request (kind, args, queue, priority,
//! run_at or delay_ms, max_attempts, idempotency_key, unique_key, limit_keys, meta, tenant).
//! Blank lines are skipped; a bad line is reported with its number and the rest still load.

use std::io::BufRead;
use std::path::Path;

use anyhow::Context;

use drover_core::NewJob;
use drover_http::dto::EnqueueRequest;
use drover_http::Principal;
use serde::Serialize;

/// Where a job file is read from: `-` means standard input (`... | drover enqueue --file -`).
pub fn is_stdin(path: &Path) -> bool {
    path == Path::new("-")
}

/// A job file's name for messages: its path, or "standard input" for `-`.
pub fn source_name(path: &Path) -> String {
    if is_stdin(path) {
        "standard input".to_owned()
    } else {
        path.display().to_string()
    }
}

/// Reads the job file at `path`, or standard input when `path` is `-` (see [`read`]).
///
/// # Errors
/// The file cannot be opened or read (the message names it).
pub fn read_path(path: &Path) -> anyhow::Result<JobFile> {
    if is_stdin(path) {
        return read(std::io::stdin().lock()).context("cannot read standard input");
    }
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    read(std::io::BufReader::new(file)).with_context(|| format!("cannot read {}", path.display()))
}

/// A line that could not become a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RejectedLine {
    /// 1-based line number.
    pub line: usize,
    /// Why.
    pub error: String,
    /// The rule the line broke, for grouping lines refused for the same reason (see
    /// [`report_rejected`]): the message itself, except where the message carries counts
    /// that change from line to line (a quota's pending jobs).
    #[serde(skip)]
    pub rule: String,
}

impl RejectedLine {
    /// Line `line`, rejected for `error`.
    pub fn new(line: usize, error: impl Into<String>) -> Self {
        let error = error.into();
        RejectedLine {
            line,
            rule: error.clone(),
            error,
        }
    }

    /// Line `line`, which the store refused with `error`: refusals by one quota share a rule
    /// whatever the counts in their messages.
    pub fn refused(line: usize, error: &drover_core::Error) -> Self {
        let mut rejected = RejectedLine::new(line, error.to_string());
        if let drover_core::Error::QuotaExceeded { quota, max, .. } = error {
            rejected.rule = format!("quota {quota} {max}");
        }
        rejected
    }
}

/// How many line numbers [`report_rejected`] shows for a rule that many lines broke.
pub const REJECTED_LINES_SHOWN: usize = 5;

/// The rejected lines as one message per rule they broke, in the order of each rule's first
/// line: `line 7: REASON` for a rule one line broke, else `lines 51, 52, 53, 54, 55 and 145
/// more (150 lines): REASON` (the first [`REJECTED_LINES_SHOWN`] numbers; REASON is the first
/// line's message). `hint` says what to do about a rule, when there is something to say.
pub fn report_rejected(
    rejected: &[RejectedLine],
    hint: impl Fn(&RejectedLine) -> Option<String>,
) -> Vec<String> {
    let mut sorted: Vec<&RejectedLine> = rejected.iter().collect();
    sorted.sort_by_key(|r| r.line);
    let mut groups: Vec<(&RejectedLine, Vec<usize>)> = Vec::new();
    let mut by_rule: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for r in sorted {
        match by_rule.get(r.rule.as_str()) {
            Some(&group) => groups[group].1.push(r.line),
            None => {
                by_rule.insert(r.rule.as_str(), groups.len());
                groups.push((r, vec![r.line]));
            }
        }
    }
    groups
        .into_iter()
        .map(|(first, lines)| {
            let hint = hint(first).map(|h| format!(" ({h})")).unwrap_or_default();
            if let [line] = lines[..] {
                return format!("line {line}: {}{hint}", first.error);
            }
            let shown: Vec<String> = lines
                .iter()
                .take(REJECTED_LINES_SHOWN)
                .map(ToString::to_string)
                .collect();
            let more = lines.len().saturating_sub(REJECTED_LINES_SHOWN);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!(
                "lines {}{more} ({} lines): {}{hint}",
                shown.join(", "),
                lines.len(),
                first.error
            )
        })
        .collect()
}

/// A parsed file: the jobs with their line numbers, and the rejected lines.
#[derive(Debug, Default)]
pub struct JobFile {
    /// Jobs in file order, with their line numbers.
    pub jobs: Vec<(usize, NewJob)>,
    /// Lines that were not valid jobs.
    pub rejected: Vec<RejectedLine>,
}

/// Parses one line into a job. Local files are trusted like the operator who runs them, so
/// `exec` jobs are allowed here (the worker still needs `--allow-exec`).
///
/// # Errors
/// A message naming the field, as the HTTP API would.
pub fn parse_line(text: &str) -> Result<NewJob, String> {
    let request: EnqueueRequest =
        drover_http::extract::parse_json(text.as_bytes()).map_err(|e| api_message(&e))?;
    let job = request
        .into_new_job(&Principal::insecure(), None)
        .map_err(|e| api_message(&e))?;
    job.validate(&drover_core::SizeLimits::default())
        .map_err(|e| e.to_string())?;
    Ok(job)
}

/// The API's message, reworded for a line of a file where the API speaks of a request body
/// (`the line is not valid JSON (column 2)` rather than `invalid body: ... (line 1, ...)`).
fn api_message(e: &drover_http::ApiError) -> String {
    let message = e.message();
    if e.field() != Some("body") {
        return message.to_owned();
    }
    let reason = message.strip_prefix("invalid body: ").unwrap_or(message);
    let reason = reason.replace("(line 1, column", "(column");
    if ["is ", "must ", "nests "]
        .iter()
        .any(|verb| reason.starts_with(verb))
    {
        format!("the line {reason}")
    } else {
        format!("the line is not a job: {reason}")
    }
}

/// Longest line of a job file, in bytes: 4 MiB, four times the HTTP API's default request
/// body ([`drover_http::MAX_BODY_BYTES_DEFAULT`]), room for args and meta at their size bounds
/// written with escapes. A longer line is refused with its number, never held in memory whole
/// (`--file /dev/zero` is one endless line).
pub const LINE_BYTES_MAX: usize = 4 * drover_http::MAX_BODY_BYTES_DEFAULT;

/// Reads the next line (without its `\n`) into `line`, keeping at most
/// [`LINE_BYTES_MAX`] bytes: `Some(true)` when the line was longer (its bytes are skipped up to
/// the next line, and `line` is left empty), `Some(false)` for a line read whole, `None` at
/// the end of the input.
fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut too_long = false;
    let mut read_any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(read_any.then_some(too_long));
        }
        read_any = true;
        let end = available.iter().position(|&b| b == b'\n');
        let piece = &available[..end.unwrap_or(available.len())];
        if !too_long {
            if line.len() + piece.len() > LINE_BYTES_MAX {
                too_long = true;
                line.clear();
                line.shrink_to_fit();
            } else {
                line.extend_from_slice(piece);
            }
        }
        let used = piece.len() + usize::from(end.is_some());
        reader.consume(used);
        if end.is_some() {
            return Ok(Some(too_long));
        }
    }
}

/// Reads a whole file of jobs.
///
/// # Errors
/// The file cannot be read (a line that is not UTF-8, or longer than [`LINE_BYTES_MAX`], is
/// rejected, not fatal).
pub fn read(mut reader: impl BufRead) -> std::io::Result<JobFile> {
    let mut file = JobFile::default();
    let mut bytes = Vec::new();
    let mut number = 0;
    while let Some(too_long) = next_line(&mut reader, &mut bytes)? {
        number += 1;
        if too_long {
            file.rejected.push(RejectedLine::new(
                number,
                format!(
                    "the line is longer than {LINE_BYTES_MAX} bytes (4 MiB), the most a job line may be"
                ),
            ));
            continue;
        }
        let Ok(text) = std::str::from_utf8(&bytes) else {
            file.rejected
                .push(RejectedLine::new(number, "not valid UTF-8"));
            continue;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match parse_line(text) {
            Ok(job) => file.jobs.push((number, job)),
            Err(error) => file.rejected.push(RejectedLine::new(number, error)),
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_refused_by_one_rule_are_reported_once() {
        let quota = |current| drover_core::Error::QuotaExceeded {
            quota: drover_core::Quota::Tenant("acme".to_owned()),
            current,
            max: 50,
        };
        let mut rejected = vec![RejectedLine::new(3, "not valid UTF-8")];
        // The counts in the quota's message change from line to line; the rule does not.
        rejected.extend(
            (51..=200).map(|line| RejectedLine::refused(line, &quota(50 + line as u64 % 2))),
        );
        rejected.push(RejectedLine::new(9, "not valid UTF-8"));
        rejected.push(RejectedLine::new(4, "invalid kind"));
        let hint = |r: &RejectedLine| r.error.contains("quota").then(|| "wait".to_owned());
        let report = report_rejected(&rejected, hint);
        assert_eq!(
            report,
            vec![
                "lines 3, 9 (2 lines): not valid UTF-8".to_owned(),
                "line 4: invalid kind".to_owned(),
                format!(
                    "lines 51, 52, 53, 54, 55 and 145 more (150 lines): {} (wait)",
                    quota(51)
                ),
            ]
        );
        assert!(report_rejected(&[], hint).is_empty());
    }

    #[test]
    fn reports_bad_lines_and_keeps_the_rest() {
        let text = b"{\"kind\": \"noop\"}\n\nnot json\n{\"kind\": \"sleep\", \"args\": {\"ms\": 5}, \"max_attempts\": 0}\n{\"kind\": \"a b\"}\n\xff\xfe\n{\"kind\": \"fail\", \"args\": {\"fail_times\": 1}, \"queue\": \"q\"}\n";
        let file = read(&text[..]).unwrap();
        assert_eq!(file.jobs.len(), 2);
        assert_eq!(file.jobs[0].0, 1);
        assert_eq!(file.jobs[1].0, 7);
        assert_eq!(file.jobs[1].1.queue.as_str(), "q");
        let lines: Vec<usize> = file.rejected.iter().map(|r| r.line).collect();
        assert_eq!(lines, vec![3, 4, 5, 6]);
        assert!(
            file.rejected[0]
                .error
                .starts_with("the line is not valid JSON: expected ident (column "),
            "{:?}",
            file.rejected[0]
        );
        assert!(
            file.rejected[1].error.contains("max_attempts"),
            "{:?}",
            file.rejected[1]
        );
        assert!(
            file.rejected[2].error.contains("kind"),
            "{:?}",
            file.rejected[2]
        );
    }

    /// A line longer than the bound is refused by number without being held whole, and the
    /// lines after it still load; the last line may lack its newline.
    #[test]
    fn an_overlong_line_is_refused_and_the_rest_still_load() {
        let mut text = b"{\"kind\": \"noop\"}\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', LINE_BYTES_MAX + 1));
        text.extend_from_slice(b"\n{\"kind\": \"sleep\"}\n");
        text.extend(std::iter::repeat_n(b' ', LINE_BYTES_MAX));
        text.extend_from_slice(b"\n{\"kind\": \"fail\"}");
        // A small buffer, so lines arrive in many pieces.
        let file = read(std::io::BufReader::with_capacity(1000, &text[..])).unwrap();
        let lines: Vec<usize> = file.jobs.iter().map(|(line, _)| *line).collect();
        assert_eq!(
            lines,
            vec![1, 3, 5],
            "a blank line of exactly the bound is skipped"
        );
        assert_eq!(file.rejected.len(), 1);
        assert_eq!(file.rejected[0].line, 2);
        assert!(
            file.rejected[0].error.contains("longer than 4194304 bytes"),
            "{:?}",
            file.rejected
        );
        // An endless line ends with the input, refused, in bounded memory.
        let endless = std::io::Read::take(std::io::repeat(b'{'), 3 * LINE_BYTES_MAX as u64);
        let file = read(std::io::BufReader::new(endless)).unwrap();
        assert!(file.jobs.is_empty());
        assert_eq!(file.rejected.len(), 1);
    }

    /// A line nested deeper than serde_json parses (128) is refused with Drover's own rule,
    /// as one nested 101 deep is, not with the parser's "recursion limit exceeded".
    #[test]
    fn a_line_nested_too_deep_is_told_the_depth_rule() {
        for depth in [101, 127, 128, 200, 5000] {
            let args = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let text = format!("{{\"kind\": \"noop\", \"args\": {args}}}\n");
            let file = read(text.as_bytes()).unwrap();
            assert!(file.jobs.is_empty(), "{depth}");
            let error = &file.rejected[0].error;
            assert!(
                error.contains("nests arrays and objects more than 100 deep"),
                "{depth}: {error}"
            );
            assert!(!error.contains("recursion"), "{depth}: {error}");
        }
        let flag =
            crate::commands::json_flag("args", &format!("{}{}", "[".repeat(300), "]".repeat(300)));
        let message = format!("{:#}", flag.unwrap_err());
        assert_eq!(
            message,
            "invalid --args: nests arrays and objects more than 100 deep; the limit is 100"
        );
    }
}

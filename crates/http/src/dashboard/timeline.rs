//! The job page's progress timeline: the steps a run recorded with `JobContext::step`
//! ([`drover_runner::progress`]), each with its time and how long it lasted, and the latest
//! step's detail. Progress without a step history is shown as it is, by the caller.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use drover_core::{Job, JobState};
use minijinja::{context, Value};

/// The timeline of `job`'s progress, for job.html: `steps` (each `at`, `step`, `lasted`,
/// `ongoing`), `dropped` (older steps not kept) and `detail` (the latest, pretty JSON);
/// `None` when its progress has no step history.
pub(super) fn timeline(job: &Job) -> Option<Value> {
    let progress = job.progress.as_ref()?;
    let history = drover_runner::progress::history(progress)?;
    // A step lasts until the next one; the last until the job finished, or on while it runs.
    let running = matches!(job.state, JobState::Running);
    let ends = history
        .steps
        .iter()
        .skip(1)
        .map(|next| Some(next.at))
        .chain(std::iter::once(if running {
            None
        } else {
            job.finished_at
        }));
    let steps: Vec<Value> = history
        .steps
        .iter()
        .zip(ends)
        .enumerate()
        .map(|(index, (record, end))| {
            let last = index + 1 == history.steps.len();
            let lasted = match end {
                Some(end) => lasted(drover_core::clock::since(end, record.at)),
                None if last && running => "ongoing".to_owned(),
                // The run ended without finishing the job (a retry, a snooze): no end known.
                None => "-".to_owned(),
            };
            context! {
                at => time(record.at),
                step => record.step.clone(),
                lasted,
                ongoing => last && running,
            }
        })
        .collect();
    let detail = progress
        .get("detail")
        .map(|detail| serde_json::to_string_pretty(detail).unwrap_or_default());
    Some(context! {
        steps,
        dropped => history.dropped,
        first => history.dropped + 1,
        detail,
    })
}

/// An instant as the history stores it: RFC 3339 UTC with milliseconds.
fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A step's length: `850 ms`, `4.2 s`, `3 min 5 s`, `2 h 0 min`.
fn lasted(length: Duration) -> String {
    let seconds = length.as_secs();
    if length < Duration::from_secs(1) {
        format!("{} ms", length.as_millis())
    } else if seconds < 60 {
        // Tenths, rounded down, so a step is never shown longer than it was.
        format!("{}.{} s", seconds, length.subsec_millis() / 100)
    } else if seconds < 3600 {
        format!("{} min {} s", seconds / 60, seconds % 60)
    } else {
        format!("{} h {} min", seconds / 3600, seconds % 3600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use drover_core::{JobId, JobKind, NewJob};
    use serde_json::json;

    #[test]
    fn lengths_read_in_the_largest_fitting_units() {
        let ms = Duration::from_millis;
        assert_eq!(lasted(ms(0)), "0 ms");
        assert_eq!(lasted(ms(999)), "999 ms");
        assert_eq!(lasted(ms(1000)), "1.0 s");
        assert_eq!(lasted(ms(4_290)), "4.2 s");
        assert_eq!(lasted(ms(59_999)), "59.9 s");
        assert_eq!(lasted(ms(185_000)), "3 min 5 s");
        assert_eq!(lasted(ms(7_260_000)), "2 h 1 min");
    }

    fn job_with(progress: serde_json::Value, state: JobState) -> Job {
        let start = Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap();
        let mut job =
            NewJob::new(JobKind::parse("k").unwrap(), json!({})).into_job(JobId::new_v7(), start);
        job.progress = Some(progress);
        job.state = state;
        if state.is_terminal() {
            job.finished_at = Some(start + chrono::Duration::seconds(10));
        }
        job
    }

    fn lengths(timeline: &Value) -> Vec<String> {
        timeline
            .get_attr("steps")
            .unwrap()
            .try_iter()
            .unwrap()
            .map(|s| s.get_attr("lasted").unwrap().to_string())
            .collect()
    }

    #[test]
    fn steps_last_until_the_next_then_until_the_finish_or_on() {
        let progress = json!({
            "step": "upload", "detail": {"done": 3},
            "steps": [
                {"step": "fetch", "at": "2026-12-01T10:00:01.000Z"},
                {"step": "parse", "at": "2026-12-01T10:00:02.500Z"},
                {"step": "upload", "at": "2026-12-01T10:00:02.750Z"},
            ],
        });
        let running = timeline(&job_with(progress.clone(), JobState::Running)).unwrap();
        assert_eq!(lengths(&running), ["1.5 s", "250 ms", "ongoing"]);
        let finished = timeline(&job_with(progress.clone(), JobState::Succeeded)).unwrap();
        assert_eq!(lengths(&finished), ["1.5 s", "250 ms", "7.2 s"]);
        let queued = timeline(&job_with(progress, JobState::Queued)).unwrap();
        assert_eq!(lengths(&queued), ["1.5 s", "250 ms", "-"]);
        assert_eq!(
            queued.get_attr("detail").unwrap().to_string(),
            "{\n  \"done\": 3\n}"
        );
    }

    #[test]
    fn progress_without_a_step_history_has_no_timeline() {
        for other in [
            json!({"step": "x", "detail": 1}),
            json!({"steps": "many"}),
            json!({"steps": [{"step": "x", "at": "yesterday"}]}),
            json!([1, 2]),
        ] {
            assert!(
                timeline(&job_with(other.clone(), JobState::Running)).is_none(),
                "{other}"
            );
        }
    }
}

//! The shape of the progress [`crate::JobContext::step`] records: the latest step's name and
//! detail, and the run's recent steps with the worker's time of each, so a reader (the
//! dashboard's job page) can show them as a timeline:
//!
//! ```json
//! {"step": "upload", "detail": {"done": 3, "of": 10},
//!  "steps": [{"step": "download", "at": "2026-12-01T10:00:00.000Z"},
//!            {"step": "upload", "at": "2026-12-01T10:00:04.250Z"}],
//!  "steps_dropped": 2}
//! ```
//!
//! - `steps` holds at most [`STEPS_MAX`] steps of this run, oldest first; older ones are
//!   dropped and counted in `steps_dropped` (absent while none is).
//! - Only the latest step keeps its detail, and the history keeps at most
//!   [`STEP_NAME_MAX_BYTES`] of each name, so the history's size is bounded.
//! - `at` is RFC 3339 in UTC with milliseconds, from the worker's clock.
//!
//! Progress written otherwise (older workers wrote `{"step", "detail"}` alone) has no
//! [`history`].

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

/// Most steps a run's progress keeps.
pub const STEPS_MAX: usize = 50;

/// Most bytes of a step's name the history keeps (the latest step's `step` keeps it whole), so
/// the history stays far below the store's size bound: 50 steps take at most about 12 KiB.
pub const STEP_NAME_MAX_BYTES: usize = 200;

/// One step of a run's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    /// The step's name.
    pub step: String,
    /// When the worker recorded it.
    pub at: DateTime<Utc>,
}

/// The history a progress value carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// The kept steps, oldest first.
    pub steps: Vec<StepRecord>,
    /// Older steps of the run that were dropped.
    pub dropped: u64,
}

/// The progress after step `name` with `detail` at `at`, given the run's `previous` progress
/// (`None` for the run's first step; a value of another shape starts a new history).
pub(crate) fn after_step(
    previous: Option<Value>,
    name: &str,
    detail: Value,
    at: DateTime<Utc>,
) -> Value {
    let mut previous = match previous {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let mut steps = match previous.remove("steps") {
        Some(Value::Array(steps)) => steps,
        _ => Vec::new(),
    };
    let mut dropped = previous
        .get("steps_dropped")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    steps.push(json!({
        "step": drover_core::job::stored_text(name, STEP_NAME_MAX_BYTES),
        "at": at.to_rfc3339_opts(SecondsFormat::Millis, true),
    }));
    if steps.len() > STEPS_MAX {
        let excess = steps.len() - STEPS_MAX;
        steps.drain(..excess);
        dropped += excess as u64;
    }
    let mut progress = json!({"step": name, "detail": detail, "steps": steps});
    if dropped > 0 {
        progress["steps_dropped"] = dropped.into();
    }
    progress
}

/// The history of `progress` when it has one: a `steps` array whose every entry is an object
/// with a string `step` and an RFC 3339 `at`; `None` for any other value.
pub fn history(progress: &Value) -> Option<History> {
    let steps = progress
        .get("steps")?
        .as_array()?
        .iter()
        .map(|entry| {
            Some(StepRecord {
                step: entry.get("step")?.as_str()?.to_owned(),
                at: DateTime::parse_from_rfc3339(entry.get("at")?.as_str()?)
                    .ok()?
                    .with_timezone(&Utc),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let dropped = progress
        .get("steps_dropped")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some(History { steps, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(second: u32, millis: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, second).unwrap()
            + chrono::Duration::milliseconds(i64::from(millis))
    }

    #[test]
    fn a_first_step_starts_the_history_with_a_millisecond_utc_time() {
        let progress = after_step(None, "download", json!("3 of 10"), at(5, 250));
        assert_eq!(
            progress,
            json!({
                "step": "download",
                "detail": "3 of 10",
                "steps": [{"step": "download", "at": "2026-12-01T10:00:05.250Z"}],
            })
        );
        // Progress of another shape (an older worker's) starts a new history.
        let old = json!({"step": "x", "detail": 1});
        let progress = after_step(Some(old), "upload", json!(null), at(6, 0));
        assert_eq!(
            progress["steps"],
            json!([{"step": "upload", "at": "2026-12-01T10:00:06.000Z"}])
        );
        assert_eq!(history(&json!({"step": "x", "detail": 1})), None);
        assert_eq!(history(&json!({"steps": [{"step": "x"}]})), None);
        assert_eq!(
            history(&json!({"steps": [{"step": 1, "at": "2026-12-01T10:00:06Z"}]})),
            None
        );
    }

    #[test]
    fn the_history_keeps_a_bounded_part_of_each_name() {
        let long = "é".repeat(STEP_NAME_MAX_BYTES);
        let progress = after_step(None, &long, json!(null), at(1, 0));
        assert_eq!(progress["step"], json!(long), "the latest step is whole");
        let kept = progress["steps"][0]["step"].as_str().unwrap();
        assert!(
            kept.len() <= STEP_NAME_MAX_BYTES && long.starts_with(kept),
            "{kept}"
        );
        let mut progress = None;
        for i in 0..STEPS_MAX as u32 {
            progress = Some(after_step(progress, &long, json!(null), at(i % 60, 0)));
        }
        let size = serde_json::to_string(&progress).unwrap().len();
        assert!(size < 16 * 1024, "{size} bytes");
    }

    #[test]
    fn the_history_keeps_the_last_50_steps_in_order_and_counts_the_dropped() {
        let mut progress = None;
        for i in 0..53u32 {
            let next = after_step(
                progress.take(),
                &format!("step {i}"),
                json!({"i": i}),
                at(0, i),
            );
            progress = Some(next);
        }
        let progress = progress.unwrap();
        assert_eq!(progress["step"], "step 52");
        assert_eq!(progress["detail"], json!({"i": 52}));
        assert_eq!(progress["steps_dropped"], 3);
        let steps = progress["steps"].as_array().unwrap();
        assert_eq!(steps.len(), STEPS_MAX);
        // Only the latest step has a detail; the entries are exactly {step, at}.
        for entry in steps {
            assert_eq!(entry.as_object().unwrap().len(), 2, "{entry}");
        }
        let read = history(&progress).unwrap();
        assert_eq!(read.dropped, 3);
        let names: Vec<String> = read.steps.iter().map(|s| s.step.clone()).collect();
        let expected: Vec<String> = (3..53).map(|i| format!("step {i}")).collect();
        assert_eq!(names, expected);
        assert_eq!(read.steps[0].at, at(0, 3));
        assert_eq!(read.steps[49].at, at(0, 52));
    }

    #[test]
    fn fifty_steps_drop_none() {
        let mut progress = None;
        for i in 0..50u32 {
            progress = Some(after_step(progress.take(), "s", json!(i), at(0, i)));
        }
        let progress = progress.unwrap();
        assert!(progress.get("steps_dropped").is_none(), "{progress}");
        assert_eq!(history(&progress).unwrap().steps.len(), 50);
    }
}

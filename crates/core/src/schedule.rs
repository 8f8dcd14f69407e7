//! Cron schedules (docs/design.md sections 6 and 9): parsing, tick computation in a named time zone,
//! and the job each tick enqueues.
//!
//! Ticks are computed on wall-clock time in the schedule's zone, then mapped to instants:
//! a wall-clock time that occurs twice (autumn) fires once, at its first occurrence; a time
//! skipped by a spring gap fires once, at the first instant after the gap.
//!
//! Missed ticks: a tick at most [`CATCH_UP_GRACE`] old still fires, oldest first, so a
//! scheduler pass that runs a little late (passes are about a second apart, with jitter) never
//! skips the tick of a schedule that fires every second. After longer downtime only the latest
//! missed tick is due ("at most one catch-up", never a burst).
//!
//! Writing a schedule ([`Schedule::upsert`], the one rule both stores apply under their lock;
//! "timing" is the cron expression and the zone as stored, "job" the kind, args, queue,
//! priority and attempts):
//!
//! | stored | written | [`ScheduleChange`] | ticks that fire afterwards |
//! |---|---|---|---|
//! | none | any | `Created` | those after now |
//! | same timing and job | the same | `Unchanged` (nothing written) | as if left alone: ticks missed meanwhile still fire |
//! | same timing | another job | `Updated` | as if left alone, with the new job |
//! | other timing | any | `Rescheduled` | the new timing's ticks after now; none before the change |
//!
//! No write moves the last fired tick (`last_tick_at`) backwards, and a tick fires only while
//! the schedule still has the timing it was computed from ([`Schedule::fire`]), so no write
//! makes a tick fire twice.

use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::Error;
use crate::job::{NewJob, SizeLimits, MAX_ATTEMPTS_DEFAULT};
use crate::json;
use crate::names::{JobKind, QueueName, ScheduleName};

/// Longest accepted cron expression, in bytes.
pub const CRON_MAX_LEN: usize = 256;
/// Most ticks examined in one computation before giving up (guards pathological patterns).
const SEARCH_STEPS_MAX: usize = 100_000;
/// How old a missed tick may be and still fire on its own ([`CronSpec::due`]): 10 s, ten
/// scheduler passes. Ticks older than this were missed by downtime (no worker, a database
/// outage, a full quota) and collapse into one catch-up.
pub const CATCH_UP_GRACE: Duration = Duration::from_secs(10);

/// The stored form of a cron expression: its fields separated by single spaces, without
/// leading or trailing space.
fn normalized(expr: &str) -> String {
    expr.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The fields of a 5-field expression, in order, with the values each takes; a 6-field one has
/// [`SECOND_FIELD`] first.
const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of month", "1-31 or L"),
    ("month", "1-12 or JAN-DEC"),
    ("day of week", "0-7 or SUN-SAT, 0 and 7 both Sunday"),
];
/// The nicknames the cron library accepts in place of the fields.
const NICKNAMES: [&str; 6] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];
/// The leading field of a 6-field expression.
const SECOND_FIELD: (&str, &str) = ("second", "0-59");

/// Parses with the cron library: 5 fields, or 6 with leading seconds, or a nickname such as
/// `@daily`.
fn parse_pattern(expr: &str) -> Result<croner::Cron, croner::errors::CronError> {
    croner::Cron::new(expr).with_seconds_optional().parse()
}

/// Why `expr` does not parse, naming the field at fault where one field alone is (its position,
/// name and value, the library's reason and the values the field takes); else the count of
/// fields expected, or the library's reason when only the combination is wrong.
fn explain(expr: &str, error: &croner::errors::CronError) -> String {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.first().is_some_and(|first| first.starts_with('@')) {
        return format!(
            "{expr:?} is not a known nickname: use {}",
            NICKNAMES.join(", ")
        );
    }
    let names: Vec<(&str, &str)> = match fields.len() {
        5 => FIELDS.to_vec(),
        6 => std::iter::once(SECOND_FIELD).chain(FIELDS).collect(),
        count => {
            return format!(
                "must have 5 fields (minute hour day-of-month month day-of-week), or 6 with a \
                 leading second, or be a nickname such as @daily; got {count} field(s)"
            )
        }
    };
    for (position, (value, (name, takes))) in fields.iter().zip(&names).enumerate() {
        // The field alone, every other field `*`: the first that fails on its own is at fault.
        let alone: Vec<&str> = (0..fields.len())
            .map(|i| if i == position { *value } else { "*" })
            .collect();
        if let Err(own) = parse_pattern(&alone.join(" ")) {
            let own = library_reason(&own).to_lowercase();
            let seconds = if fields.len() == 6 {
                " (with 6 fields the first is the second)"
            } else {
                ""
            };
            return format!(
                "field {} ({name}) is {value:?}: {own}; the {name} field takes {takes}, lists (a,b), ranges (a-b) and steps (*/n){seconds}",
                position + 1
            );
        }
    }
    format!("is not a valid cron expression: {}", library_reason(error))
}

/// The cron library's reason without its category prefix and final full stop.
fn library_reason(error: &croner::errors::CronError) -> String {
    let text = error.to_string();
    text.trim_start_matches("Component error: ")
        .trim_start_matches("Invalid pattern: ")
        .trim_end_matches('.')
        .to_owned()
}

/// A parsed cron expression bound to a time zone.
#[derive(Debug, Clone)]
pub struct CronSpec {
    expr: String,
    zone: Tz,
    cron: croner::Cron,
}

impl CronSpec {
    /// Parses a 5-field (`min hour day month weekday`) or 6-field (with leading seconds) cron
    /// expression and an IANA time zone name such as `Europe/Berlin` or `UTC`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] with field `cron` for a bad expression, `timezone` for an unknown
    /// zone.
    pub fn parse(expr: &str, timezone: &str) -> Result<Self, Error> {
        if expr.trim().is_empty() {
            return Err(Error::invalid("cron", "must not be empty"));
        }
        if expr.len() > CRON_MAX_LEN || expr.chars().any(char::is_control) {
            return Err(Error::invalid(
                "cron",
                format!("must be at most {CRON_MAX_LEN} bytes without control characters"),
            ));
        }
        let cron = parse_pattern(expr).map_err(|e| Error::invalid("cron", explain(expr, &e)))?;
        let zone: Tz = timezone.parse().map_err(|_| {
            Error::invalid(
                "timezone",
                "must be an IANA time zone name such as UTC or Europe/Berlin",
            )
        })?;
        Ok(CronSpec {
            expr: normalized(expr),
            zone,
            cron,
        })
    }

    /// The expression in its stored form: its fields as given, separated by single spaces
    /// (leading and trailing space dropped), so `" 0  9 * * 1 "` is kept as `"0 9 * * 1"`.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The zone.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The next wall-clock time strictly after `naive` that matches the pattern.
    fn next_naive(&self, naive: NaiveDateTime) -> Option<NaiveDateTime> {
        let proxy = Utc.from_utc_datetime(&naive);
        self.cron
            .find_next_occurrence(&proxy, false)
            .ok()
            .map(|t| t.naive_utc())
    }

    /// Maps a matching wall-clock time to the instant it fires (see the module doc).
    fn instant_of(&self, naive: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.zone.from_local_datetime(&naive) {
            LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
            LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
            LocalResult::None => {
                // In a gap: the first instant after it. Walk forward minute by minute to the
                // first valid wall-clock time (gaps are at most a few hours), then take the
                // start of that wall-clock minute.
                let mut probe = naive;
                for _ in 0..(48 * 60) {
                    probe = probe.checked_add_signed(chrono::Duration::minutes(1))?;
                    let floor = probe.date().and_hms_opt(
                        chrono::Timelike::hour(&probe),
                        chrono::Timelike::minute(&probe),
                        0,
                    )?;
                    if let LocalResult::Single(t) | LocalResult::Ambiguous(t, _) =
                        self.zone.from_local_datetime(&floor)
                    {
                        return Some(t.with_timezone(&Utc));
                    }
                }
                None
            }
        }
    }

    /// The first tick strictly after `after`, or `None` when the pattern never fires again
    /// (e.g. `0 0 30 2 *`, February 30th).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Start one hour of wall-clock time early so ticks of a repeated (autumn) hour are
        // not skipped, then discard candidates not after `after`.
        use chrono::{Offset, SubsecRound};
        // Ticks fall on whole seconds: search from the whole second at or before `after`.
        let floor = after.trunc_subsecs(0);
        let local = floor.with_timezone(&self.zone);
        let earlier = (floor - chrono::Duration::hours(3)).with_timezone(&self.zone);
        let same_offset = local.offset().fix() == earlier.offset().fix();
        let mut naive = if same_offset {
            local.naive_local()
        } else {
            local
                .naive_local()
                .checked_sub_signed(chrono::Duration::hours(3))?
        };
        for _ in 0..SEARCH_STEPS_MAX {
            naive = self.next_naive(naive)?;
            if let Some(at) = self.instant_of(naive) {
                if at > after {
                    return Some(at);
                }
            }
        }
        None
    }

    /// The tick to fire at `now` after the last fired one (`after`), if any: the earliest tick
    /// in `(after, now]` when it is at most `grace` old, so ticks that a late scheduler pass
    /// would otherwise skip fire one by one, oldest first; otherwise (downtime) the latest tick
    /// in `(after, now]`, the one catch-up ([`CronSpec::latest_due`]). The scheduler passes
    /// [`CATCH_UP_GRACE`].
    pub fn due(
        &self,
        after: DateTime<Utc>,
        now: DateTime<Utc>,
        grace: Duration,
    ) -> Option<DateTime<Utc>> {
        let first = self.next_after(after)?;
        if first > now {
            return None;
        }
        if crate::clock::since(now, first) <= grace {
            return Some(first);
        }
        Some(self.latest_from(first, after, now))
    }

    /// The latest tick in `(after, now]`, if any: the one tick to fire now. Older missed
    /// ticks are skipped, so a schedule that was down for a week fires once, not once per
    /// missed tick.
    pub fn latest_due(&self, after: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let first = self.next_after(after)?;
        if first > now {
            return None;
        }
        Some(self.latest_from(first, after, now))
    }

    /// The latest tick in `(after, now]`, given `first`, the first tick after `after`, which
    /// is at or before `now`.
    fn latest_from(
        &self,
        first: DateTime<Utc>,
        after: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> DateTime<Utc> {
        // Search a window before `now` that widens until it holds a tick; the first window
        // with one gives the latest tick after a short forward walk.
        for window in [
            Duration::from_secs(2),
            Duration::from_secs(120),
            Duration::from_secs(7200),
            Duration::from_secs(2 * 86_400),
            Duration::from_secs(62 * 86_400),
            Duration::from_secs(800 * 86_400),
        ] {
            let start = crate::clock::sub(now, window).max(after);
            if let Some(latest) = self.walk_to(start, now) {
                return latest;
            }
            if start == after {
                break;
            }
        }
        self.walk_to(first - chrono::Duration::nanoseconds(1), now)
            .unwrap_or(first)
    }

    /// The last tick in `(start, now]` found by walking forward, `None` when there is none.
    fn walk_to(&self, start: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut latest = None;
        let mut cursor = start;
        for _ in 0..SEARCH_STEPS_MAX {
            match self.next_after(cursor) {
                Some(t) if t <= now => {
                    latest = Some(t);
                    cursor = t;
                }
                _ => return latest,
            }
        }
        latest
    }
}

/// A schedule to create or replace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewSchedule {
    /// Unique name.
    pub name: ScheduleName,
    /// Cron expression, 5 or 6 fields.
    pub cron: String,
    /// IANA zone the expression is read in (default `UTC`).
    pub timezone: String,
    /// Kind of the jobs it enqueues.
    pub kind: JobKind,
    /// Args of the jobs it enqueues.
    pub args: Value,
    /// Queue of the jobs it enqueues.
    pub queue: QueueName,
    /// Priority of the jobs it enqueues.
    pub priority: i16,
    /// Attempt budget of the jobs it enqueues.
    pub max_attempts: i32,
}

impl NewSchedule {
    /// A schedule with queue `default`, zone `UTC`, priority 0 and 3 attempts.
    pub fn new(name: ScheduleName, cron: impl Into<String>, kind: JobKind, args: Value) -> Self {
        NewSchedule {
            name,
            cron: cron.into(),
            timezone: "UTC".to_owned(),
            kind,
            args,
            queue: QueueName::default_queue(),
            priority: 0,
            max_attempts: MAX_ATTEMPTS_DEFAULT,
        }
    }

    /// Checks the expression, the zone, that it fires at least once after `now`, and the job
    /// fields. Stores keep the returned spec's [`CronSpec::expr`] (the normalized expression).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `cron` (bad, or never fires), `timezone`, `args` or
    /// `max_attempts`.
    pub fn validate(&self, now: DateTime<Utc>, sizes: &SizeLimits) -> Result<CronSpec, Error> {
        let spec = CronSpec::parse(&self.cron, &self.timezone)?;
        if spec.next_after(now).is_none() {
            return Err(Error::invalid(
                "cron",
                "never fires (no matching date exists, e.g. February 30th)",
            ));
        }
        let probe = NewJob::new(self.kind.clone(), self.args.clone())
            .with_queue(self.queue.clone())
            .with_priority(self.priority)
            .with_max_attempts(self.max_attempts);
        probe.validate(sizes)?;
        json::check_value("args", &self.args, sizes.max_args_bytes)?;
        Ok(spec)
    }
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Unique name.
    pub name: ScheduleName,
    /// Cron expression.
    pub cron: String,
    /// IANA zone.
    pub timezone: String,
    /// Kind of the jobs it enqueues.
    pub kind: JobKind,
    /// Args of the jobs it enqueues.
    pub args: Value,
    /// Queue of the jobs it enqueues.
    pub queue: QueueName,
    /// Priority of the jobs it enqueues.
    pub priority: i16,
    /// Attempt budget of the jobs it enqueues.
    pub max_attempts: i32,
    /// When it was created or its timing (cron, zone) last changed; ticks at or before this
    /// never fire. An upsert that changes nothing, or only the job, keeps it.
    pub created_at: DateTime<Utc>,
    /// The latest tick that enqueued a job. Only firing moves it, and only forward.
    pub last_tick_at: Option<DateTime<Utc>>,
}

/// What an upsert did to a schedule ([`Schedule::upsert`] decides it; see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleChange {
    /// No schedule had the name: it was created; ticks after now fire.
    Created,
    /// The schedule was stored exactly so: nothing was written, and ticks missed meanwhile
    /// still fire, as for a schedule left alone.
    Unchanged,
    /// Only the job it enqueues changed (kind, args, queue, priority, attempts): its ticks go
    /// on, missed ones firing with the new job.
    Updated,
    /// Its cron expression or zone changed: ticks of the new timing after now fire, none before
    /// the change; the last fired tick is kept.
    Rescheduled,
}

impl ScheduleChange {
    /// The change's name as shown: `created`, `unchanged`, `updated`, `rescheduled`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleChange::Created => "created",
            ScheduleChange::Unchanged => "unchanged",
            ScheduleChange::Updated => "updated",
            ScheduleChange::Rescheduled => "rescheduled",
        }
    }
}

/// The answer to [`crate::JobStore::schedule_upsert`]: the schedule as stored after the call,
/// and what the call changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleUpsert {
    /// The schedule as stored.
    #[serde(flatten)]
    pub schedule: Schedule,
    /// What changed.
    pub change: ScheduleChange,
}

impl Schedule {
    /// Builds the stored form of `new` at `now` (the cron expression normalized as
    /// [`CronSpec::expr`] gives it, the numbers of `args` as PostgreSQL's `jsonb` gives them
    /// back: [`json::normalize_numbers`]).
    pub fn from_new(new: NewSchedule, now: DateTime<Utc>) -> Self {
        Schedule {
            name: new.name,
            cron: normalized(&new.cron),
            timezone: new.timezone,
            kind: new.kind,
            args: json::normalized(new.args),
            queue: new.queue,
            priority: new.priority,
            max_attempts: new.max_attempts,
            created_at: now,
            last_tick_at: None,
        }
    }

    /// The schedule stored after writing `new` (validated) at `now` over `stored`, the
    /// schedule of that name if any: the rule of the module doc. `Unchanged` answers `stored`
    /// itself, so a store writes nothing; otherwise `last_tick_at` is kept, `created_at` too
    /// unless the timing changed (then it is `now`).
    pub fn upsert(
        stored: Option<Schedule>,
        new: NewSchedule,
        now: DateTime<Utc>,
    ) -> ScheduleUpsert {
        let written = Schedule::from_new(new, now);
        let Some(stored) = stored else {
            return ScheduleUpsert {
                schedule: written,
                change: ScheduleChange::Created,
            };
        };
        let (schedule, change) = if written.timing() != stored.timing() {
            let schedule = Schedule {
                last_tick_at: stored.last_tick_at,
                ..written
            };
            (schedule, ScheduleChange::Rescheduled)
        } else if written.job() != stored.job() {
            let schedule = Schedule {
                created_at: stored.created_at,
                last_tick_at: stored.last_tick_at,
                ..written
            };
            (schedule, ScheduleChange::Updated)
        } else {
            (stored, ScheduleChange::Unchanged)
        };
        ScheduleUpsert { schedule, change }
    }

    /// When it fires: the cron expression and zone as stored.
    fn timing(&self) -> (&str, &str) {
        (&self.cron, &self.timezone)
    }

    /// What a tick enqueues.
    fn job(&self) -> (&JobKind, &Value, &QueueName, i16, i32) {
        (
            &self.kind,
            &self.args,
            &self.queue,
            self.priority,
            self.max_attempts,
        )
    }

    /// The request to fire `tick` of this schedule as read: its job
    /// ([`Schedule::job_for_tick`]) and its `created_at`, so the store fires the tick only while
    /// the schedule keeps this timing.
    pub fn fire(&self, tick: DateTime<Utc>) -> FireSchedule {
        FireSchedule {
            name: self.name.clone(),
            created_at: self.created_at,
            tick,
            job: self.job_for_tick(tick),
        }
    }

    /// The parsed expression.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the stored expression or zone no longer parses.
    pub fn spec(&self) -> Result<CronSpec, Error> {
        CronSpec::parse(&self.cron, &self.timezone)
    }

    /// The tick to fire at `now`, if any, among the ticks after both `created_at` and
    /// `last_tick_at`, at or before `now`: the earliest when it is at most [`CATCH_UP_GRACE`]
    /// old, else the latest ([`CronSpec::due`]). Firing it and asking again gives the next.
    pub fn due_tick(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let after = self
            .last_tick_at
            .map_or(self.created_at, |t| t.max(self.created_at));
        self.spec().ok()?.due(after, now, CATCH_UP_GRACE)
    }

    /// The next tick after `now` (for `schedules list`).
    pub fn next_tick(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let after = self.last_tick_at.map_or(now, |t| t.max(now));
        self.spec().ok()?.next_after(after)
    }

    /// The job a tick enqueues: the schedule's kind, args, queue, priority and attempts, unique
    /// key `schedule:<name>:<tick>` and meta `{"schedule": name, "tick": tick}`.
    pub fn job_for_tick(&self, tick: DateTime<Utc>) -> NewJob {
        let tick_text = tick.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        NewJob::new(self.kind.clone(), self.args.clone())
            .with_queue(self.queue.clone())
            .with_priority(self.priority)
            .with_max_attempts(self.max_attempts)
            .with_unique_key(format!("schedule:{}:{tick_text}", self.name))
            .with_meta(json!({"schedule": self.name.as_str(), "tick": tick_text}))
    }
}

/// Fire one schedule tick ([`crate::JobStore::schedule_fire`]): atomically advance the
/// schedule's last tick and enqueue its job. Build it with [`Schedule::fire`] from the
/// schedule as read.
#[derive(Debug, Clone, PartialEq)]
pub struct FireSchedule {
    /// The schedule.
    pub name: ScheduleName,
    /// The schedule's `created_at` as read (when its timing was last set): the tick fires only
    /// while the schedule still has it and only if it is later, so a tick computed from a
    /// timing that was changed since (or from a schedule removed and added again) never
    /// fires.
    pub created_at: DateTime<Utc>,
    /// The tick being fired.
    pub tick: DateTime<Utc>,
    /// The job to enqueue (normally `Schedule::job_for_tick`).
    pub job: NewJob,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// The reason of a refused expression (field `cron`).
    fn cron_error(expr: &str) -> String {
        match CronSpec::parse(expr, "UTC") {
            Err(Error::InvalidInput { field, reason }) => {
                assert_eq!(field, "cron");
                reason
            }
            other => panic!("{expr:?} was not refused as cron: {other:?}"),
        }
    }

    #[test]
    fn cron_errors_name_the_field_at_fault() {
        for (expr, says) in [
            ("61 * * * *", "field 1 (minute) is \"61\": number out of bounds; the minute field takes 0-59"),
            ("0 24 * * *", "field 2 (hour) is \"24\""),
            ("0 9 32 * *", "field 3 (day of month) is \"32\""),
            ("0 9 * 13 *", "field 4 (month) is \"13\""),
            ("0 9 * * 8", "field 5 (day of week) is \"8\""),
            ("0 9 * * MON-FRX", "field 5 (day of week) is \"MON-FRX\""),
            ("*/0 * * * *", "field 1 (minute) is \"*/0\": step cannot be zero"),
            ("1-60 * * * *", "field 1 (minute) is \"1-60\""),
            // Six fields: the first is the second.
            ("60 0 9 * * *", "field 1 (second) is \"60\""),
            ("0 0 9 * * 2026", "field 6 (day of week) is \"2026\""),
            // A trailing year (7 fields) or too few fields: the count is wrong.
            ("0 0 9 1 1 * 2026", "must have 5 fields (minute hour day-of-month month day-of-week), or 6 with a leading second"),
            ("* * *", "got 3 field(s)"),
            ("not cron", "got 2 field(s)"),
        ] {
            let reason = cron_error(expr);
            assert!(reason.contains(says), "{expr:?}: {reason}");
        }
        assert!(cron_error("0 0 9 * * 2026").contains("(with 6 fields the first is the second)"));
        assert!(!cron_error("0 9 * * 8").contains("with 6 fields"));
        // An unknown nickname lists the known ones, each of which parses.
        let reason = cron_error("@fortnightly");
        assert!(
            reason.contains("\"@fortnightly\" is not a known nickname: use @yearly"),
            "{reason}"
        );
        for nickname in NICKNAMES {
            assert!(CronSpec::parse(nickname, "UTC").is_ok(), "{nickname}");
        }
        // Valid expressions of every shape still parse.
        for expr in [
            "0 9 * * MON-FRI",
            "0 9 L * *",
            "0 9 * * 5#3",
            "*/15 * * * * *",
            "0 0 9 1,15 JAN-MAR 0",
        ] {
            assert!(CronSpec::parse(expr, "UTC").is_ok(), "{expr}");
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert!(CronSpec::parse("not cron", "UTC").is_err());
        assert!(CronSpec::parse("* * * * *", "Mars/Olympus").is_err());
        assert!(CronSpec::parse("", "UTC").is_err());
        let never = NewSchedule::new(
            ScheduleName::parse("s").unwrap(),
            "0 0 30 2 *",
            JobKind::parse("k").unwrap(),
            json!({}),
        );
        let err = never.validate(utc("2026-01-01T00:00:00Z"), &SizeLimits::default());
        assert!(matches!(err, Err(Error::InvalidInput { ref field, .. }) if field == "cron"));
    }

    #[test]
    fn autumn_repeated_hour_fires_once() {
        // Europe/Berlin: 2026-10-25 03:00 CEST -> 02:00 CET; 02:30 occurs twice.
        let spec = CronSpec::parse("30 2 * * *", "Europe/Berlin").unwrap();
        let first = spec.next_after(utc("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(first, utc("2026-10-25T00:30:00Z"));
        let second = spec.next_after(first).unwrap();
        assert_eq!(second, utc("2026-10-26T01:30:00Z"));
    }

    #[test]
    fn spring_gap_fires_once_after_the_gap() {
        // Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 02:30 does not exist.
        let spec = CronSpec::parse("30 2 * * *", "Europe/Berlin").unwrap();
        let t = spec.next_after(utc("2026-03-28T12:00:00Z")).unwrap();
        assert_eq!(t, utc("2026-03-29T01:00:00Z")); // 03:00 CEST
        let next = spec.next_after(t).unwrap();
        assert_eq!(next, utc("2026-03-30T00:30:00Z"));
        // Every minute through the gap: the skipped hour collapses into one tick at 03:00.
        let every = CronSpec::parse("* * * * *", "Europe/Berlin").unwrap();
        let a = every.next_after(utc("2026-03-29T00:58:30Z")).unwrap();
        assert_eq!(a, utc("2026-03-29T00:59:00Z"));
        let b = every.next_after(a).unwrap();
        assert_eq!(b, utc("2026-03-29T01:00:00Z"));
        let c = every.next_after(b).unwrap();
        assert_eq!(c, utc("2026-03-29T01:01:00Z"));
    }

    #[test]
    fn ticks_missed_within_the_grace_fire_one_by_one_oldest_first() {
        // A pass at :58.007 after the one that fired :56 (found by a breaker run: :57 was
        // never enqueued).
        let seconds = CronSpec::parse("* * * * * *", "UTC").unwrap();
        let now = utc("2026-05-08T10:12:58.007Z");
        let mut after = utc("2026-05-08T10:12:56Z");
        let mut fired = Vec::new();
        while let Some(tick) = seconds.due(after, now, CATCH_UP_GRACE) {
            fired.push(tick);
            after = tick;
        }
        assert_eq!(
            fired,
            vec![utc("2026-05-08T10:12:57Z"), utc("2026-05-08T10:12:58Z")]
        );
        // Exactly at the grace, still one by one; one second more, the latest only.
        let after = utc("2026-05-08T10:00:00Z");
        let at_grace = utc("2026-05-08T10:00:11Z");
        assert_eq!(
            seconds.due(after, at_grace, CATCH_UP_GRACE),
            Some(utc("2026-05-08T10:00:01Z"))
        );
        let past_grace = utc("2026-05-08T10:00:12Z");
        assert_eq!(
            seconds.due(after, past_grace, CATCH_UP_GRACE),
            Some(past_grace)
        );
        // A minute schedule whose pass came half a second late fires that tick.
        let minutes = CronSpec::parse("* * * * *", "UTC").unwrap();
        assert_eq!(
            minutes.due(
                utc("2026-05-08T10:00:00Z"),
                utc("2026-05-08T10:01:00.500Z"),
                CATCH_UP_GRACE
            ),
            Some(utc("2026-05-08T10:01:00Z"))
        );
        // Nothing due: nothing fires.
        assert_eq!(
            minutes.due(
                utc("2026-05-08T10:01:00Z"),
                utc("2026-05-08T10:01:59Z"),
                CATCH_UP_GRACE
            ),
            None
        );
        // Downtime: a week of hourly ticks collapses into the latest.
        let hourly = CronSpec::parse("0 * * * *", "UTC").unwrap();
        assert_eq!(
            hourly.due(
                utc("2026-05-01T00:00:00Z"),
                utc("2026-05-08T10:30:00Z"),
                CATCH_UP_GRACE
            ),
            Some(utc("2026-05-08T10:00:00Z"))
        );
    }

    #[test]
    fn due_tick_fires_every_tick_of_a_late_pass_and_starts_after_creation() {
        let mut schedule = Schedule {
            name: ScheduleName::parse("every-second").unwrap(),
            cron: "* * * * * *".to_owned(),
            timezone: "UTC".to_owned(),
            kind: JobKind::parse("noop").unwrap(),
            args: json!({}),
            queue: QueueName::parse("default").unwrap(),
            priority: 0,
            max_attempts: 1,
            created_at: utc("2026-05-08T10:00:00.300Z"),
            last_tick_at: None,
        };
        let now = utc("2026-05-08T10:00:03.900Z");
        let mut fired = Vec::new();
        while let Some(tick) = schedule.due_tick(now) {
            fired.push(tick);
            schedule.last_tick_at = Some(tick);
        }
        assert_eq!(
            fired,
            vec![
                utc("2026-05-08T10:00:01Z"),
                utc("2026-05-08T10:00:02Z"),
                utc("2026-05-08T10:00:03Z")
            ]
        );
    }

    /// An hourly schedule stored at 08:00:00.5, last fired at 09:00.
    fn hourly_fired_at_nine() -> Schedule {
        let mut stored = Schedule::from_new(
            NewSchedule::new(
                ScheduleName::parse("hourly").unwrap(),
                "0 * * * *",
                JobKind::parse("report").unwrap(),
                json!({"scope": "all", "pages": 2}),
            ),
            utc("2026-05-08T08:00:00.500Z"),
        );
        stored.last_tick_at = Some(utc("2026-05-08T09:00:00Z"));
        stored
    }

    fn hourly_written() -> NewSchedule {
        NewSchedule::new(
            ScheduleName::parse("hourly").unwrap(),
            "0 * * * *",
            JobKind::parse("report").unwrap(),
            json!({"scope": "all", "pages": 2}),
        )
    }

    #[test]
    fn writing_the_stored_schedule_again_changes_nothing_and_its_missed_tick_still_fires() {
        let stored = hourly_fired_at_nine();
        // Down from 09:30 to 12:10: the deploy writes the same schedule again, spelled
        // differently (spaces in the expression, the keys of args in another order).
        let now = utc("2026-05-08T12:10:00Z");
        let mut again = hourly_written();
        again.cron = " 0  * * * * ".into();
        again.args = serde_json::from_str(r#"{"pages": 2, "scope": "all"}"#).unwrap();
        let upsert = Schedule::upsert(Some(stored.clone()), again, now);
        assert_eq!(upsert.change, ScheduleChange::Unchanged);
        assert_eq!(upsert.schedule, stored);
        assert_eq!(
            upsert.schedule.due_tick(now),
            Some(utc("2026-05-08T12:00:00Z")),
            "the missed tick fires as for a schedule left alone"
        );
    }

    #[test]
    fn a_new_job_keeps_the_ticks_going_and_a_new_timing_starts_after_the_change() {
        let stored = hourly_fired_at_nine();
        let now = utc("2026-05-08T12:10:00Z");
        let mut new_job = hourly_written();
        new_job.args = json!({"scope": "eu"});
        new_job.priority = 5;
        let upsert = Schedule::upsert(Some(stored.clone()), new_job, now);
        assert_eq!(upsert.change, ScheduleChange::Updated);
        assert_eq!(
            (upsert.schedule.created_at, upsert.schedule.last_tick_at),
            (stored.created_at, stored.last_tick_at)
        );
        assert_eq!(
            (&upsert.schedule.args, upsert.schedule.priority),
            (&json!({"scope": "eu"}), 5)
        );
        assert_eq!(
            upsert.schedule.due_tick(now),
            Some(utc("2026-05-08T12:00:00Z"))
        );

        for (cron, timezone) in [("30 * * * *", "UTC"), ("0 * * * *", "Europe/Berlin")] {
            let mut new_timing = hourly_written();
            new_timing.cron = cron.into();
            new_timing.timezone = timezone.into();
            let upsert = Schedule::upsert(Some(stored.clone()), new_timing, now);
            assert_eq!(
                upsert.change,
                ScheduleChange::Rescheduled,
                "{cron} {timezone}"
            );
            assert_eq!(
                (upsert.schedule.created_at, upsert.schedule.last_tick_at),
                (now, stored.last_tick_at)
            );
            // No tick of either timing before the change fires; the next one after it does.
            assert_eq!(upsert.schedule.due_tick(now), None);
            let next = upsert.schedule.next_tick(now).unwrap();
            assert!(next > now, "{next}");
            assert_eq!(upsert.schedule.due_tick(next), Some(next));
        }
    }

    #[test]
    fn a_new_schedule_fires_after_its_creation_and_fire_carries_its_timing() {
        let now = utc("2026-05-08T12:10:00Z");
        let upsert = Schedule::upsert(None, hourly_written(), now);
        assert_eq!(upsert.change, ScheduleChange::Created);
        assert_eq!(
            (upsert.schedule.created_at, upsert.schedule.last_tick_at),
            (now, None)
        );
        let tick = utc("2026-05-08T13:00:00Z");
        let fire = upsert.schedule.fire(tick);
        assert_eq!(
            (&fire.name, fire.created_at, fire.tick),
            (&upsert.schedule.name, now, tick)
        );
        assert_eq!(fire.job, upsert.schedule.job_for_tick(tick));
        assert_eq!(ScheduleChange::Rescheduled.as_str(), "rescheduled");
    }

    #[test]
    fn catch_up_is_the_latest_missed_tick_only() {
        let spec = CronSpec::parse("0 * * * *", "UTC").unwrap();
        let due = spec.latest_due(utc("2026-05-01T00:00:00Z"), utc("2026-05-08T10:30:00Z"));
        assert_eq!(due, Some(utc("2026-05-08T10:00:00Z")));
        assert_eq!(
            spec.latest_due(utc("2026-05-08T10:00:00Z"), utc("2026-05-08T10:59:59Z")),
            None
        );
        let monthly = CronSpec::parse("0 0 1 * *", "UTC").unwrap();
        assert_eq!(
            monthly.latest_due(utc("2025-01-15T00:00:00Z"), utc("2026-05-08T10:30:00Z")),
            Some(utc("2026-05-01T00:00:00Z"))
        );
        let seconds = CronSpec::parse("* * * * * *", "UTC").unwrap();
        assert_eq!(
            seconds.latest_due(utc("2026-05-01T00:00:00Z"), utc("2026-05-08T10:30:00.500Z")),
            Some(utc("2026-05-08T10:30:00Z"))
        );
    }
}

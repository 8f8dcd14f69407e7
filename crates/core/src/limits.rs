//! Limit policies (docs/design.md section 4, Limits): cluster-wide bounds per key on how many jobs run
//! at once (`max_running`) and how many claims happen per period (`rate`).
//!
//! The admission rule is pure and shared: both stores feed [`Admission`] the policies, the
//! current running counts and the rate state, and claim only the candidates it admits, in
//! order, without touching the rest. Rates use GCRA (the generic cell rate algorithm) without
//! burst tolerance: one timestamp per policy ("theoretical arrival time"), one claim at most
//! every `period / count` (rounded up to the microsecond), so that ANY window of one period
//! holds at most `count` claims, as docs/design.md section 4 states the rule ("at most N claims per
//! period"). A burst tolerance would let a full burst at the end of one period be followed by
//! the steady rate, nearly `2 x count` claims within one period.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::bounds::range_rule;
use crate::error::Error;
use crate::names::LimitKey;

/// Largest accepted `max_running`.
pub const MAX_RUNNING_MAX: u32 = 1_000_000;
/// Largest accepted rate count.
pub const RATE_COUNT_MAX: u32 = 1_000_000;
/// Shortest accepted rate period.
pub const RATE_PERIOD_MIN: Duration = Duration::from_millis(1);
/// Longest accepted rate period: 1 day.
pub const RATE_PERIOD_MAX: Duration = Duration::from_secs(24 * 3600);

/// At most `count` claims per `period`, written `N/PERIOD` (`10/s`, `100/1m`, `5/30s`,
/// `1000/h`, `2/500ms`, `50/d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    /// Claims allowed per period, 1..=1,000,000.
    pub count: u32,
    /// The period, 1 ms..=1 day.
    #[serde(with = "crate::job::duration_ms", rename = "period_ms")]
    pub period: Duration,
}

impl Rate {
    /// Validates a rate, its period in whole milliseconds (a finer period is floored to the
    /// millisecond, as every store keeps it: PostgreSQL stores `rate_period_ms`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] with field `rate` when count or period is out of bounds.
    pub fn new(count: u32, period: Duration) -> Result<Self, Error> {
        let period = Duration::from_millis(u64::try_from(period.as_millis()).unwrap_or(u64::MAX));
        if count == 0 || count > RATE_COUNT_MAX {
            return Err(Error::invalid(
                "rate",
                format!("count {}", range_rule(1, RATE_COUNT_MAX, count)),
            ));
        }
        if !(RATE_PERIOD_MIN..=RATE_PERIOD_MAX).contains(&period) {
            return Err(Error::invalid("rate", "period must be between 1ms and 1d"));
        }
        Ok(Rate { count, period })
    }

    /// Least time between two claims: `period / count` rounded UP to whole microseconds (the
    /// precision every store keeps instants in), so `count` intervals never add up to less
    /// than the period.
    pub fn emission_interval(&self) -> chrono::Duration {
        let micros = self
            .period
            .as_micros()
            .div_ceil(u128::from(self.count.max(1)));
        chrono::Duration::microseconds(i64::try_from(micros).unwrap_or(i64::MAX))
    }

    /// GCRA without burst tolerance: one more claim is allowed at `now` when the stored
    /// theoretical arrival time `tat` (the earliest instant of the next claim) is not after
    /// `now`; returns the new `tat` to store (`now` + the emission interval), or `None` when
    /// the claim must wait.
    pub fn admit(&self, tat: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if tat.is_some_and(|tat| tat > now) {
            return None;
        }
        Some(now + self.emission_interval())
    }

    /// The GCRA time a policy keeps when its rate changes from `old` to `self` (`limits set` on
    /// an existing key): the last counted claim (`tat` less the old interval) plus the new
    /// interval, so the next claim comes one new interval after the last one whichever way the
    /// rate changed (kept as it was, a change from 1/h to 10/s held the key's jobs for up to an
    /// hour, and one from 10/s to 1/h let one more claim through 100 ms later). When the policy
    /// had no rate, a time left from an earlier one is kept but cut to `now` + the new
    /// interval. `None` (no claim counted yet) stays `None`. Both stores apply this rule.
    pub fn replacing(
        &self,
        old: Option<Rate>,
        tat: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let tat = tat?;
        Some(match old {
            Some(old) => tat - old.emission_interval() + self.emission_interval(),
            None => tat.min(now + self.emission_interval()),
        })
    }

    /// How many claims the rate allows at `now` given `tat` (for `limits list`): 1 or 0.
    pub fn available(&self, tat: Option<DateTime<Utc>>, now: DateTime<Utc>) -> u32 {
        u32::from(self.admit(tat, now).is_some())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.period.as_millis();
        if ms % 86_400_000 == 0 {
            write!(f, "{}/{}d", self.count, ms / 86_400_000)
        } else if ms % 3_600_000 == 0 {
            write!(f, "{}/{}h", self.count, ms / 3_600_000)
        } else if ms % 60_000 == 0 {
            write!(f, "{}/{}m", self.count, ms / 60_000)
        } else if ms % 1000 == 0 {
            write!(f, "{}/{}s", self.count, ms / 1000)
        } else {
            write!(f, "{}/{}ms", self.count, ms)
        }
    }
}

impl FromStr for Rate {
    type Err = Error;

    /// Parses `N/PERIOD`, where PERIOD is an optional whole number followed by `ms`, `s`, `m`,
    /// `h` or `d`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] with field `rate` for any other text or out-of-bounds values.
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || {
            Error::invalid(
                "rate",
                "must look like N/PERIOD, e.g. 10/s, 100/1m, 5/30s, 2/500ms",
            )
        };
        let (count, period) = s.trim().split_once('/').ok_or_else(bad)?;
        let count = count.trim();
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        // All digits: a count too large for any integer is out of range, not malformed.
        let count: u32 = match count.parse::<u64>() {
            Ok(n) if (1..=u64::from(RATE_COUNT_MAX)).contains(&n) => n as u32,
            _ => {
                return Err(Error::invalid(
                    "rate",
                    format!("count {}", range_rule(1, RATE_COUNT_MAX, count)),
                ))
            }
        };
        let period = period.trim();
        let split = period.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (number, unit) = period.split_at(split);
        let number: u64 = if number.is_empty() {
            1
        } else {
            // All digits (split above): too large is out of range, not malformed.
            number.parse().unwrap_or(u64::MAX)
        };
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            other => {
                return Err(Error::invalid(
                    "rate",
                    format!(
                        "period unit must be ms, s, m, h or d (a period from 1ms to 1d, e.g. 10/s, 100/1m, 5/30s), got {other:?}"
                    ),
                ))
            }
        };
        let ms = number.saturating_mul(unit_ms);
        Rate::new(count, Duration::from_millis(ms))
    }
}

/// A limit policy: a key and at least one bound.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitPolicy {
    /// The key jobs name in `limit_keys`, or `kind:<kind>` / `queue:<queue>`.
    pub key: LimitKey,
    /// Jobs with this key running at once across all workers (0 holds them all).
    pub max_running: Option<u32>,
    /// Claims of jobs with this key per period.
    pub rate: Option<Rate>,
}

impl LimitPolicy {
    /// Validates a policy; its rate is rebuilt with [`Rate::new`] (period in whole
    /// milliseconds), so both stores keep the same policy.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when neither bound is given (field `limit`) or `max_running` is
    /// above 1,000,000 (field `max_running`).
    pub fn new(key: LimitKey, max_running: Option<u32>, rate: Option<Rate>) -> Result<Self, Error> {
        if max_running.is_none() && rate.is_none() {
            return Err(Error::invalid(
                "limit",
                "give at least one of max_running and rate",
            ));
        }
        if let Some(m) = max_running {
            if m > MAX_RUNNING_MAX {
                return Err(Error::invalid(
                    "max_running",
                    format!("must be at most {MAX_RUNNING_MAX}, got {m}"),
                ));
            }
        }
        let rate = rate.map(|r| Rate::new(r.count, r.period)).transpose()?;
        Ok(LimitPolicy {
            key,
            max_running,
            rate,
        })
    }

    /// The policy checked and in the form every store keeps ([`LimitPolicy::new`]): what
    /// `limit_set` calls on a policy a caller built field by field.
    ///
    /// # Errors
    /// Those of [`LimitPolicy::new`].
    pub fn validated(self) -> Result<Self, Error> {
        LimitPolicy::new(self.key, self.max_running, self.rate)
    }
}

/// A policy with its current usage, as `limits list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitStatus {
    /// The policy.
    #[serde(flatten)]
    pub policy: LimitPolicy,
    /// Jobs with the key running now.
    pub running: u64,
    /// Claims the rate allows right now, 1 or 0 (claims are spaced `period / count` apart;
    /// `None` without a rate).
    pub rate_available: Option<u32>,
}

/// A policy's state as the claim sees it: the policy, jobs running under it, its GCRA time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitState {
    /// The policy.
    pub policy: LimitPolicy,
    /// Jobs with this key running now.
    pub running: u64,
    /// GCRA theoretical arrival time, `None` when no claim has been counted yet.
    pub rate_tat: Option<DateTime<Utc>>,
}

/// Greedy, order-preserving admission of claim candidates under limit policies.
///
/// Feed it every policy's state, then call [`Admission::try_admit`] with each candidate's
/// effective keys in claim order; it admits a candidate only when every policy on its keys
/// allows one more, and counts it against them. Keys without a policy are unlimited.
#[derive(Debug, Clone)]
pub struct Admission {
    now: DateTime<Utc>,
    states: HashMap<LimitKey, LimitState>,
    touched: Vec<LimitKey>,
    retry_at: Option<DateTime<Utc>>,
}

impl Admission {
    /// Starts an admission pass at `now`.
    pub fn new(now: DateTime<Utc>, states: impl IntoIterator<Item = LimitState>) -> Self {
        Admission {
            now,
            states: states
                .into_iter()
                .map(|s| (s.policy.key.clone(), s))
                .collect(),
            touched: Vec::new(),
            retry_at: None,
        }
    }

    /// True when no policy exists.
    pub fn is_unlimited(&self) -> bool {
        self.states.is_empty()
    }

    /// True when some policy applies to one of `keys`.
    pub fn applies_to(&self, keys: &[LimitKey]) -> bool {
        keys.iter().any(|k| self.states.contains_key(k))
    }

    /// True when the policy on `key` admits no claim now: its `max_running` is full, or its
    /// rate has no room (then [`Admission::retry_at`] keeps when it will, as for a refused
    /// candidate). Every job of a queue carries `queue:<queue>` and every job of a kind
    /// `kind:<kind>`, so a claim skips a queue or kind whose implicit key is closed instead of
    /// refusing its jobs one by one (a long backlog behind a full policy costs nothing).
    pub fn closed(&mut self, key: &LimitKey) -> bool {
        let Some(state) = self.states.get(key) else {
            return false;
        };
        if let Some(max) = state.policy.max_running {
            if state.running >= u64::from(max) {
                return true;
            }
        }
        if let Some(rate) = state.policy.rate {
            if rate.admit(state.rate_tat, self.now).is_none() {
                if let Some(at) = state.rate_tat {
                    self.retry_at = Some(self.retry_at.map_or(at, |earliest| earliest.min(at)));
                }
                return true;
            }
        }
        false
    }

    /// Admits a candidate whose effective keys are `keys` if every applicable policy allows one
    /// more claim now, and counts it; otherwise leaves every state unchanged and returns false.
    /// A candidate refused only by rates (no full `max_running` on its keys) becomes admissible
    /// at the latest of their GCRA times; [`Admission::retry_at`] keeps the earliest such time.
    pub fn try_admit(&mut self, keys: &[LimitKey]) -> bool {
        let mut new_tats: Vec<(&LimitKey, DateTime<Utc>)> = Vec::new();
        let mut running_full = false;
        let mut rate_wait: Option<DateTime<Utc>> = None;
        for key in keys {
            let Some(state) = self.states.get(key) else {
                continue;
            };
            if let Some(max) = state.policy.max_running {
                if state.running >= u64::from(max) {
                    running_full = true;
                }
            }
            if let Some(rate) = state.policy.rate {
                match rate.admit(state.rate_tat, self.now) {
                    Some(tat) => new_tats.push((key, tat)),
                    None => rate_wait = rate_wait.max(state.rate_tat),
                }
            }
        }
        if running_full {
            return false;
        }
        if let Some(at) = rate_wait {
            self.retry_at = Some(self.retry_at.map_or(at, |earliest| earliest.min(at)));
            return false;
        }
        for key in keys {
            if let Some(state) = self.states.get_mut(key) {
                state.running += 1;
                if !self.touched.contains(key) {
                    self.touched.push(key.clone());
                }
            }
        }
        for (key, tat) in new_tats {
            if let Some(state) = self.states.get_mut(key) {
                state.rate_tat = Some(tat);
            }
        }
        true
    }

    /// The earliest instant at which a candidate [`Admission::try_admit`] refused becomes
    /// admissible by its rates, over the candidates refused only by rates; `None` when there
    /// was none. Candidates a full `max_running` held are not counted: they wait for a running
    /// job to finish, which no clock predicts. The claim answer's `retry_after`
    /// ([`crate::store::Claimed`]) is this minus the admission's `now`.
    pub fn retry_at(&self) -> Option<DateTime<Utc>> {
        self.retry_at
    }

    /// [`Admission::retry_at`] as a duration from the admission's `now` (zero or more).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_at
            .map(|at| (at - self.now).to_std().unwrap_or_default())
    }

    /// The states of policies that admitted at least one candidate, to write back.
    pub fn into_touched(mut self) -> Vec<LimitState> {
        self.touched
            .iter()
            .filter_map(|k| self.states.remove(k))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_800_000_000_000 + ms).unwrap()
    }

    fn key(s: &str) -> LimitKey {
        LimitKey::parse(s).unwrap()
    }

    #[test]
    fn rate_out_of_range_names_the_rule_not_the_format() {
        for (text, needle) in [
            ("99999999999/s", "count must be between 1 and"),
            ("99999999999999999999999/s", "count must be between 1 and"),
            ("0/s", "count must be between 1 and"),
            ("5/99999999999999999999d", "period must be between"),
            ("5/999999999999999d", "period must be between"),
            ("x/s", "must look like"),
            ("5/fortnight", "period unit must be ms, s, m, h or d"),
            ("10/1000years", "got \"years\""),
            ("10/2w", "period unit must be"),
        ] {
            match text.parse::<Rate>() {
                Err(Error::InvalidInput { field, reason }) => {
                    assert_eq!(field, "rate");
                    assert!(reason.contains(needle), "{text}: {reason}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn rate_parses_and_prints() {
        let r: Rate = "10/s".parse().unwrap();
        assert_eq!((r.count, r.period), (10, Duration::from_secs(1)));
        let r: Rate = "5/30s".parse().unwrap();
        assert_eq!(r.period, Duration::from_secs(30));
        assert_eq!(r.to_string(), "5/30s");
        assert_eq!("2/500ms".parse::<Rate>().unwrap().to_string(), "2/500ms");
        for bad in [
            "",
            "10",
            "0/s",
            "10/",
            "10/2w",
            "x/s",
            "10/99999999999999999999d",
            "10/2d",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn gcra_spaces_claims_one_interval_apart() {
        let r = Rate::new(3, Duration::from_secs(3)).unwrap();
        assert_eq!(r.available(None, t(0)), 1);
        let tat = r.admit(None, t(0)).expect("the first claim");
        assert!(r.admit(Some(tat), t(0)).is_none());
        assert_eq!(r.available(Some(tat), t(0)), 0);
        assert!(r.admit(Some(tat), t(999)).is_none());
        let tat2 = r.admit(Some(tat), t(1000)).expect("one per second");
        assert!(r.admit(Some(tat2), t(1000)).is_none());
        // A rate unused for a long time still allows one claim, not a burst.
        let later = r.admit(Some(tat2), t(60_000)).unwrap();
        assert!(r.admit(Some(later), t(60_000)).is_none());
    }

    /// The rule of docs/design.md section 4: whatever the claim times, no window of one period holds
    /// more than `count` admitted claims (checked by brute force over many rates and arrival
    /// patterns, periods that `count` does not divide included).
    #[test]
    fn no_window_of_one_period_holds_more_than_count_claims() {
        for (count, period_ms) in [
            (1, 1000),
            (3, 1000),
            (5, 10_000),
            (7, 1000),
            (3, 1),
            (1000, 999),
        ] {
            let r = Rate::new(count, Duration::from_millis(period_ms)).unwrap();
            let period = chrono::Duration::milliseconds(i64::try_from(period_ms).unwrap());
            for step_us in [1_i64, 7, 333, 1000, 4999] {
                let mut tat = None;
                let mut claims = Vec::new();
                let start = t(0);
                for i in 0..5000 {
                    let now = start + chrono::Duration::microseconds(i * step_us);
                    if let Some(next) = r.admit(tat, now) {
                        tat = Some(next);
                        claims.push(now);
                    }
                }
                let n = usize::try_from(count).unwrap();
                for pair in claims.windows(n + 1) {
                    assert!(
                        pair[n] - pair[0] >= period,
                        "{count}/{period_ms}ms, step {step_us} us: {} claims within {:?}",
                        n + 1,
                        pair[n] - pair[0]
                    );
                }
            }
        }
    }

    #[test]
    fn admission_checks_every_key_and_keeps_order() {
        let a = LimitState {
            policy: LimitPolicy::new(key("kind:a"), Some(1), None).unwrap(),
            running: 0,
            rate_tat: None,
        };
        let q = LimitState {
            policy: LimitPolicy::new(key("queue:q"), Some(2), None).unwrap(),
            running: 0,
            rate_tat: None,
        };
        let mut adm = Admission::new(t(0), [a, q]);
        assert!(adm.try_admit(&[key("kind:a"), key("queue:q")]));
        assert!(!adm.try_admit(&[key("kind:a"), key("queue:q")]));
        assert!(adm.try_admit(&[key("kind:b"), key("queue:q")]));
        assert!(!adm.try_admit(&[key("kind:c"), key("queue:q")]));
        assert!(adm.try_admit(&[key("kind:c"), key("queue:other")]));
        let touched = adm.into_touched();
        assert_eq!(touched.len(), 2);
        assert!(touched
            .iter()
            .all(|s| s.running == u64::from(s.policy.max_running.unwrap())));
    }

    #[test]
    fn a_key_is_closed_when_its_policy_admits_nothing_now() {
        let full = LimitState {
            policy: LimitPolicy::new(key("queue:full"), Some(2), None).unwrap(),
            running: 1,
            rate_tat: None,
        };
        let rated = LimitState {
            policy: LimitPolicy::new(
                key("kind:rated"),
                None,
                Some(Rate::new(1, Duration::from_secs(10)).unwrap()),
            )
            .unwrap(),
            running: 0,
            rate_tat: None,
        };
        let mut adm = Admission::new(t(0), [full, rated]);
        assert!(!adm.closed(&key("queue:none")), "no policy: open");
        assert!(!adm.closed(&key("queue:full")), "one place left");
        assert!(adm.try_admit(&[key("queue:full")]));
        assert!(adm.closed(&key("queue:full")), "its last place taken");
        assert!(!adm.closed(&key("kind:rated")));
        assert_eq!(adm.retry_at(), None);
        assert!(adm.try_admit(&[key("kind:rated")]));
        assert!(adm.closed(&key("kind:rated")), "the rate's room spent");
        assert_eq!(
            adm.retry_at(),
            Some(t(10_000)),
            "when the rate has room again"
        );
    }

    #[test]
    fn retry_at_is_the_earliest_time_a_rate_held_candidate_is_admissible() {
        let state =
            |k: &str, max: Option<u32>, rate: Option<(u32, u64)>, tat: Option<i64>| LimitState {
                policy: LimitPolicy::new(
                    key(k),
                    max,
                    rate.map(|(n, s)| Rate::new(n, Duration::from_secs(s)).unwrap()),
                )
                .unwrap(),
                running: 0,
                rate_tat: tat.map(t),
            };
        let mut adm = Admission::new(
            t(0),
            [
                state("fast", None, Some((1, 1)), None),
                state("slow", None, Some((1, 60)), Some(30_000)),
                state("full", Some(0), Some((1, 1)), Some(5_000)),
            ],
        );
        assert_eq!(adm.retry_at(), None, "nothing refused yet");
        assert!(adm.try_admit(&[key("fast")]));
        // Refused by `fast` (1 s) and by `slow` (30 s): admissible when both allow.
        assert!(!adm.try_admit(&[key("fast"), key("slow")]));
        assert_eq!(adm.retry_at(), Some(t(30_000)));
        // A full max_running gives no time, even with a rate that would.
        assert!(!adm.try_admit(&[key("full")]));
        assert_eq!(adm.retry_at(), Some(t(30_000)));
        // The earliest candidate wins.
        assert!(!adm.try_admit(&[key("fast")]));
        assert_eq!(adm.retry_at(), Some(t(1_000)));
        assert_eq!(adm.retry_after(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_replaced_rate_spaces_the_next_claim_from_the_last_one() {
        let per = |n: u32, s: u64| Rate::new(n, Duration::from_secs(s)).unwrap();
        // Last claim at 0 under 1/h: tat 3,600 s. Now 10/s: next claim at 0.1 s.
        let hourly = per(1, 3600);
        let fast = per(10, 1);
        assert_eq!(
            fast.replacing(Some(hourly), Some(t(3_600_000)), t(5_000)),
            Some(t(100))
        );
        // And back: one hour after the last claim, not 0.1 s.
        assert_eq!(
            hourly.replacing(Some(fast), Some(t(100)), t(50)),
            Some(t(3_600_000))
        );
        // Same rate: unchanged. No claim counted: none. No old rate: cut to now + interval.
        assert_eq!(hourly.replacing(Some(hourly), Some(t(7)), t(0)), Some(t(7)));
        assert_eq!(fast.replacing(Some(hourly), None, t(0)), None);
        assert_eq!(
            fast.replacing(None, Some(t(3_600_000)), t(1_000)),
            Some(t(1_100))
        );
        assert_eq!(fast.replacing(None, Some(t(500)), t(1_000)), Some(t(500)));
    }

    #[test]
    fn policy_needs_a_bound() {
        assert!(LimitPolicy::new(key("k"), None, None).is_err());
        assert!(LimitPolicy::new(key("k"), Some(0), None).is_ok());
    }
}

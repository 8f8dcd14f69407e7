//! The overview's charts of the last hour (docs/dashboard.md, "Overview"): runs ended per
//! minute by outcome, and the queue wait and run time per minute (median and 95th
//! percentile), drawn as inline SVG from the workers' activity (`drover_core::activity`).
//! Only numbers and fixed words reach the SVG; the template escapes them all the same.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use drover_core::activity::{minute_of, per_minute, Histogram, HISTOGRAM_BOUNDS_MS};
use drover_core::{ActivityMinute, QueueName};
use serde::Serialize;

/// Minutes a chart shows, the current one included.
pub(super) const MINUTES: i64 = 60;

/// Width of one minute's slot, in SVG units.
const SLOT: f64 = 11.0;
/// Width of a bar in its slot.
const BAR: f64 = 9.0;
/// Room left of the plot for the axis labels.
const LEFT: f64 = 56.0;
/// Top and bottom of the plot.
const TOP: f64 = 6.0;
const BOTTOM: f64 = 106.0;
/// The SVG's size: the plot, and the time labels below it.
pub(super) const WIDTH: f64 = LEFT + SLOT * MINUTES as f64 + 4.0;
pub(super) const HEIGHT: f64 = 124.0;

/// The longest duration the latency charts' scale reaches, in milliseconds (one hour).
const SCALE_MAX_MS: f64 = 3_600_000.0;

/// One minute's stacked bar of the runs that ended.
#[derive(Debug, Serialize)]
pub(super) struct Bar {
    x: f64,
    /// Segments from the bottom up: (class, y, height).
    segments: Vec<Segment>,
    title: String,
}

#[derive(Debug, Serialize)]
struct Segment {
    class: &'static str,
    y: f64,
    height: f64,
}

/// One minute's range of a latency chart: a line from the median to the 95th percentile.
#[derive(Debug, Serialize)]
pub(super) struct Range {
    x: f64,
    y50: f64,
    y95: f64,
    title: String,
}

/// A label on an axis.
#[derive(Debug, Serialize)]
pub(super) struct Tick {
    x: f64,
    y: f64,
    label: String,
}

/// A latency chart: ranges on a log scale from 1 ms to an hour.
#[derive(Debug, Serialize)]
pub(super) struct Latency {
    ranges: Vec<Range>,
    ticks: Vec<Tick>,
    /// The hour's median and 95th percentile, as text ("-" without runs).
    p50: String,
    p95: String,
}

/// Everything the overview's charts draw.
#[derive(Debug, Serialize)]
pub(super) struct Charts {
    width: f64,
    height: f64,
    left: f64,
    bottom: f64,
    /// The time labels under every chart.
    times: Vec<Tick>,
    /// The runs chart: bars, and its scale's top as text.
    bars: Vec<Bar>,
    bars_top: Vec<Tick>,
    wait: Latency,
    duration: Latency,
    /// The hour's totals, by outcome.
    ended: u64,
    succeeded: u64,
    retried: u64,
    failed: u64,
    cancelled: u64,
    snoozed: u64,
}

/// The charts of the hour up to `now` from the activity of its minutes (any queues).
pub(super) fn charts(activity: &[ActivityMinute], now: DateTime<Utc>) -> Charts {
    let since = minute_of(now) - TimeDelta::minutes(MINUTES - 1);
    let all = QueueName::default_queue();
    let minutes = per_minute(activity, since, now, &all);
    let mut hour = ActivityMinute::new(since, all);
    minutes.iter().for_each(|m| hour.add(m));

    let top = minutes
        .iter()
        .map(ActivityMinute::ended)
        .max()
        .unwrap_or(0)
        .max(1);
    let scale = (BOTTOM - TOP) / top as f64;
    let bars = minutes
        .iter()
        .enumerate()
        .filter(|(_, m)| m.ended() > 0)
        .map(|(i, m)| {
            let mut y = BOTTOM;
            let segments = [
                ("succeeded", m.succeeded),
                ("retried", m.retried + m.snoozed),
                ("failed", m.failed + m.cancelled),
            ]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(class, n)| {
                let height = n as f64 * scale;
                y -= height;
                Segment {
                    class,
                    y: round(y),
                    height: round(height),
                }
            })
            .collect();
            Bar {
                x: slot_x(i),
                segments,
                title: format!(
                    "{}: {} ended ({} succeeded, {} retried, {} failed, {} cancelled, {} snoozed)",
                    m.minute.format("%H:%M"),
                    m.ended(),
                    m.succeeded,
                    m.retried,
                    m.failed,
                    m.cancelled,
                    m.snoozed
                ),
            }
        })
        .collect();
    let times = (0..MINUTES)
        .step_by(15)
        .map(|i| Tick {
            x: slot_x(i as usize),
            y: HEIGHT - 4.0,
            label: (since + TimeDelta::minutes(i)).format("%H:%M").to_string(),
        })
        .collect();
    Charts {
        width: WIDTH,
        height: HEIGHT,
        left: LEFT,
        bottom: BOTTOM,
        times,
        bars,
        bars_top: vec![
            Tick {
                x: LEFT - 6.0,
                y: TOP + 8.0,
                label: format!("{top}/min"),
            },
            Tick {
                x: LEFT - 6.0,
                y: BOTTOM,
                label: "0".to_owned(),
            },
        ],
        wait: latency(&minutes, |m| &m.wait, &hour.wait, "waited"),
        duration: latency(&minutes, |m| &m.duration, &hour.duration, "ran"),
        ended: hour.ended(),
        succeeded: hour.succeeded,
        retried: hour.retried,
        failed: hour.failed,
        cancelled: hour.cancelled,
        snoozed: hour.snoozed,
    }
}

fn latency(
    minutes: &[ActivityMinute],
    histogram: fn(&ActivityMinute) -> &Histogram,
    hour: &Histogram,
    verb: &str,
) -> Latency {
    let ranges = minutes
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let h = histogram(m);
            let (p50, p95) = (h.quantile(0.5)?, h.quantile(0.95)?);
            Some(Range {
                x: slot_x(i) + BAR / 2.0,
                y50: log_y(p50),
                y95: log_y(p95),
                title: format!(
                    "{}: {} runs {verb} {} (median), {} (95th percentile)",
                    m.minute.format("%H:%M"),
                    h.count(),
                    at_most(p50),
                    at_most(p95)
                ),
            })
        })
        .collect();
    let ticks = [1, 100, 10_000, 3_600_000]
        .into_iter()
        .map(|ms| Tick {
            x: LEFT - 6.0,
            y: log_y(Duration::from_millis(ms)) + 4.0,
            label: short(Duration::from_millis(ms)),
        })
        .collect();
    let text = |q| hour.quantile(q).map_or_else(|| "-".to_owned(), at_most);
    Latency {
        ranges,
        ticks,
        p50: text(0.5),
        p95: text(0.95),
    }
}

/// The left edge of minute `i`'s slot.
fn slot_x(i: usize) -> f64 {
    LEFT + SLOT * i as f64 + (SLOT - BAR) / 2.0
}

/// The height of `d` on the log scale from 1 ms (bottom) to an hour (top).
fn log_y(d: Duration) -> f64 {
    let ms = (d.as_secs_f64() * 1_000.0).clamp(1.0, SCALE_MAX_MS);
    round(BOTTOM - ms.log10() / SCALE_MAX_MS.log10() * (BOTTOM - TOP))
}

fn round(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// A quantile's estimate: at most its bucket's bound ("≤ 250 ms").
fn at_most(d: Duration) -> String {
    if d.as_millis() >= u128::from(HISTOGRAM_BOUNDS_MS[HISTOGRAM_BOUNDS_MS.len() - 1]) {
        format!("> {}", short(d))
    } else {
        format!("≤ {}", short(d))
    }
}

/// A bucket bound in its shortest unit: `250 ms`, `2.5 s`, `5 min`, `1 h`.
fn short(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{} s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        format!("{} min", ms / 60_000)
    } else {
        format!("{} h", ms / 3_600_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_charts_draw_the_hour_and_sum_its_minutes() {
        let now = Utc.with_ymd_and_hms(2030, 1, 1, 10, 30, 20).unwrap();
        let mut busy = ActivityMinute::new(now, QueueName::parse("mail").unwrap());
        busy.succeeded = 8;
        busy.failed = 2;
        for _ in 0..10 {
            busy.duration.record(Duration::from_millis(40));
            busy.wait.record(Duration::from_millis(3));
        }
        let mut earlier = ActivityMinute::new(
            now - TimeDelta::minutes(10),
            QueueName::parse("reports").unwrap(),
        );
        earlier.retried = 5;
        let mut too_old = ActivityMinute::new(
            now - TimeDelta::minutes(61),
            QueueName::parse("mail").unwrap(),
        );
        too_old.succeeded = 1_000;
        let charts = charts(&[too_old, earlier, busy], now);

        assert_eq!(charts.ended, 15, "the minute before the hour is left out");
        assert_eq!((charts.succeeded, charts.retried, charts.failed), (8, 5, 2));
        assert_eq!(charts.bars.len(), 2);
        let last = &charts.bars[1];
        assert_eq!(last.x, slot_x(59), "now's minute is the last slot");
        let heights: Vec<f64> = last.segments.iter().map(|s| s.height).collect();
        assert_eq!(
            heights,
            vec![80.0, 20.0],
            "succeeded then failed, scaled to the top"
        );
        assert!(last.title.starts_with("10:30: 10 ended (8 succeeded"));
        assert_eq!(charts.bars_top[0].label, "10/min");
        assert_eq!(charts.duration.p50, "≤ 50 ms");
        assert_eq!(charts.wait.p95, "≤ 5 ms");
        assert_eq!(charts.wait.ranges.len(), 1, "only minutes that waited");
        assert_eq!(charts.times[0].label, "09:31");
    }

    #[test]
    fn a_quiet_hour_draws_no_bars_and_no_quantiles() {
        let charts = charts(&[], Utc::now());
        assert!(charts.bars.is_empty() && charts.wait.ranges.is_empty());
        assert_eq!((charts.ended, charts.wait.p50.as_str()), (0, "-"));
    }

    #[test]
    fn the_latency_scale_runs_from_a_millisecond_to_an_hour() {
        assert_eq!(log_y(Duration::ZERO), BOTTOM);
        assert_eq!(log_y(Duration::from_millis(1)), BOTTOM);
        assert_eq!(log_y(Duration::from_secs(3_600)), TOP);
        assert_eq!(log_y(Duration::from_secs(7_200)), TOP);
        assert_eq!(short(Duration::from_millis(2_500)), "2.5 s");
        assert_eq!(short(Duration::from_secs(300)), "5 min");
        assert_eq!(at_most(Duration::from_secs(3_600)), "> 1 h");
    }
}

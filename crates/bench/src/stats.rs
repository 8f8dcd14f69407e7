//! Small statistics: medians over repetitions and latency percentiles, computed the way the peers'
//! benchmark scripts (`PEER_SRC` of `bench/compare.sh`) compute them so the figures compare.

use serde::Serialize;

/// Median of `values` (mean of the two middle values for an even count); `None` when empty.
/// NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// The value at quantile `q` (0..=1) of ascending `sorted` values: element
/// `round(q * (len - 1))`, the nearest-rank rule of the peer scripts (`lat[round(p * (n-1))]`).
/// `None` when empty.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    let index = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted.get(index.min(sorted.len() - 1)).copied()
}

/// Latency percentiles of one measurement, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Arithmetic mean.
    pub mean_ms: f64,
}

impl Percentiles {
    /// Percentiles of `samples_ms` (any order); `None` when empty.
    pub fn of(samples_ms: &[f64]) -> Option<Percentiles> {
        let mut sorted = samples_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mean_ms = sorted.iter().sum::<f64>() / sorted.len().max(1) as f64;
        Some(Percentiles {
            p50_ms: round2(quantile(&sorted, 0.50)?),
            p90_ms: round2(quantile(&sorted, 0.90)?),
            p99_ms: round2(quantile(&sorted, 0.99)?),
            max_ms: round2(*sorted.last()?),
            mean_ms: round2(mean_ms),
        })
    }
}

/// Rounds to two decimals (the precision the peer scripts print latencies with).
pub fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// Jobs per second, rounded to a whole number; 0 when no time passed.
pub fn per_second(jobs: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        (jobs as f64 / seconds).round()
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn quantile_uses_the_nearest_rank_of_the_peer_scripts() {
        let sorted: Vec<f64> = (1..=200).map(f64::from).collect();
        // round(0.5 * 199) = 100 (round half away from zero) -> the 101st value.
        assert_eq!(quantile(&sorted, 0.5), Some(101.0));
        // round(0.99 * 199) = 197 -> the 198th value.
        assert_eq!(quantile(&sorted, 0.99), Some(198.0));
        assert_eq!(quantile(&sorted, 1.0), Some(200.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn percentiles_of_unsorted_samples() {
        let samples = [5.0, 1.0, 3.0, 2.0, 4.0];
        let p = Percentiles::of(&samples).unwrap();
        assert_eq!(p.p50_ms, 3.0);
        assert_eq!(p.max_ms, 5.0);
        assert_eq!(p.mean_ms, 3.0);
        assert!(Percentiles::of(&[]).is_none());
    }

    #[test]
    fn per_second_rounds_and_survives_zero_time() {
        assert_eq!(per_second(1_000, 0.5), 2_000.0);
        assert_eq!(per_second(10, 0.0), 0.0);
    }
}

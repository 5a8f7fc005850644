//! A row's figures from its messages' times: the latency percentiles, the jitter, the source's
//! probability metric, and, for the lane's rows, every message checked against its tunnel's
//! admitted bound, each violation set against the stall watch.
//!
//! Pure functions of the samples, so the arithmetic is tested apart from any network.

use kairos_metrics::stall::StallReport;
use serde::Serialize;

/// Packets the probability metric looks ahead: the source's "next 100,000 packets".
pub const LOOKAHEAD_PACKETS: f64 = 100_000.0;

/// How far past the p99 the metric's threshold lies: lambda = 10 x p99.
pub const THRESHOLD_OVER_P99: f64 = 10.0;

/// One-way latency percentiles, ns (nearest rank).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    /// The smallest.
    pub min: u64,
    /// The median.
    pub p50: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The 99.9th.
    pub p999: u64,
    /// The 99.99th.
    pub p9999: u64,
    /// The largest.
    pub max: u64,
}

impl Percentiles {
    /// The percentiles of `sorted` (ascending, not empty).
    pub fn of_sorted(sorted: &[u64]) -> Self {
        let at = |q: f64| {
            let rank = (q * sorted.len() as f64).ceil() as usize;
            sorted[rank.clamp(1, sorted.len()) - 1]
        };
        Self {
            min: sorted[0],
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            max: sorted[sorted.len() - 1],
        }
    }
}

/// What a row's latencies say, beyond the percentiles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    /// The percentiles.
    pub latency_ns: Percentiles,
    /// The mean, ns.
    pub mean_ns: f64,
    /// The largest latency's excess over the smallest, ns.
    pub max_jitter_ns: u64,
    /// (max - min) / mean.
    pub relative_jitter: f64,
    /// The source's metric: the probability that one of the next 100,000 packets takes longer
    /// than 10 x p99, from the Cantelli bound of one packet, sigma^2 / (lambda - mean)^2.
    pub p_violation_100k: f64,
}

/// The figures of `latencies_ns` (any order; sorted here), or `None` when there are none.
pub fn spread(latencies_ns: &mut [u64]) -> Option<Spread> {
    if latencies_ns.is_empty() {
        return None;
    }
    latencies_ns.sort_unstable();
    let p = Percentiles::of_sorted(latencies_ns);
    let n = latencies_ns.len() as f64;
    let mean = latencies_ns.iter().map(|&l| l as f64).sum::<f64>() / n;
    let variance = latencies_ns.iter().map(|&l| (l as f64 - mean).powi(2)).sum::<f64>() / n;
    Some(Spread {
        latency_ns: p,
        mean_ns: mean,
        max_jitter_ns: p.max - p.min,
        relative_jitter: if mean > 0.0 { (p.max - p.min) as f64 / mean } else { 0.0 },
        p_violation_100k: violation_probability(mean, variance, THRESHOLD_OVER_P99 * p.p99 as f64),
    })
}

/// `1 - (1 - P1)^100000` with `P1 = variance / (lambda - mean)^2` (at most 1; 1 when lambda is
/// not above the mean), computed without losing a small P1 to rounding.
pub fn violation_probability(mean: f64, variance: f64, lambda: f64) -> f64 {
    if lambda <= mean {
        return 1.0;
    }
    let one = (variance / (lambda - mean).powi(2)).min(1.0);
    if one >= 1.0 {
        return 1.0;
    }
    -(LOOKAHEAD_PACKETS * (-one).ln_1p()).exp_m1()
}

/// A bound check's outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BoundCheck {
    /// Messages outside `[min, max]`.
    pub violations: u64,
    /// Of those, arrived before the minimum.
    pub early: u64,
    /// Of the violations, those in flight while a stall watch saw a stall.
    pub with_stall: u64,
}

/// Checks each message `(sent_ns, received_ns)` (CLOCK_REALTIME) against `[min_ns, max_ns]` of
/// latency; a violation is explained when a stall (CLOCK_MONOTONIC, `realtime_minus_monotonic`
/// apart) of any watch overlaps its flight.
pub fn check_bound(
    messages: &[(u64, u64)],
    min_ns: u64,
    max_ns: u64,
    stalls: &[StallReport],
    realtime_minus_monotonic: i64,
) -> BoundCheck {
    let mut check = BoundCheck::default();
    for &(sent, received) in messages {
        let latency = received.saturating_sub(sent);
        if (min_ns..=max_ns).contains(&latency) {
            continue;
        }
        check.violations += 1;
        check.early += u64::from(latency < min_ns);
        let monotonic = |t: u64| (t as i64).saturating_sub(realtime_minus_monotonic).max(0) as u64;
        let (from, to) = (monotonic(sent), monotonic(received.max(sent)));
        if stalls.iter().any(|r| r.during(from, to).next().is_some()) {
            check.with_stall += 1;
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use kairos_metrics::stall::Stall;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=10_000).collect();
        let p = Percentiles::of_sorted(&v);
        assert_eq!((p.min, p.p50, p.p99, p.p999, p.p9999, p.max), (1, 5_000, 9_900, 9_990, 9_999, 10_000));
        assert_eq!(Percentiles::of_sorted(&[7]).p9999, 7);
    }

    #[test]
    fn the_spread_has_the_jitter_and_a_probability_that_grows_with_the_variance() {
        let mut steady = vec![10_000u64; 999];
        steady.push(10_100);
        let s = spread(&mut steady).unwrap();
        assert_eq!(s.max_jitter_ns, 100);
        assert!((s.relative_jitter - 100.0 / 10_000.1).abs() < 1e-6, "{}", s.relative_jitter);
        let mut wild: Vec<u64> = (0..1000).map(|i| if i % 10 == 0 { 90_000 } else { 10_000 }).collect();
        let w = spread(&mut wild).unwrap();
        assert!(s.p_violation_100k < w.p_violation_100k, "{} vs {}", s.p_violation_100k, w.p_violation_100k);
        assert!(spread(&mut []).is_none());
    }

    #[test]
    fn the_probability_metric_matches_the_formula_and_keeps_small_values() {
        // P1 = 1e-12: 1 - (1 - 1e-12)^1e5 is about 1e-7, which a naive power rounds to 0.
        let p = violation_probability(0.0, 1.0, 1e6);
        assert!((p / 1e-7 - 1.0).abs() < 1e-6, "{p}");
        // P1 = 0.25: certain over 100,000 packets.
        assert_eq!(violation_probability(10.0, 25.0, 20.0), 1.0);
        assert_eq!(violation_probability(10.0, 1.0, 10.0), 1.0, "lambda at the mean");
    }

    #[test]
    fn violations_are_counted_and_set_against_the_stalls() {
        let offset = 1_000_000_000; // realtime - monotonic
        let stall =
            StallReport { stalls: vec![Stall { due_ns: 5_000, woke_ns: 6_000 }], ..StallReport::default() };
        let messages = [
            (offset as u64 + 1_000, offset as u64 + 1_500),  // 500: early
            (offset as u64 + 2_000, offset as u64 + 3_000),  // 1000: within
            (offset as u64 + 4_000, offset as u64 + 7_000),  // 3000: late, over the stall
            (offset as u64 + 8_000, offset as u64 + 11_000), // 3000: late, no stall
        ];
        let c = check_bound(&messages, 800, 2_000, &[stall], offset);
        assert_eq!(c, BoundCheck { violations: 3, early: 1, with_stall: 1 });
    }
}

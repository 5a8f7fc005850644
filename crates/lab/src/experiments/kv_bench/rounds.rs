//! Every point run several times, interleaved across systems, and reported as the median of its
//! runs with their range beside it.
//!
//! The runs are rounds: round `r` visits every setup once (starts it, runs all its points, stops
//! it), beginning at setup `r mod n` of the table's order and going round ([`order`]), so over
//! `n` rounds each setup runs once in each position. A drift of the machine over the run (a
//! neighbour's load, the page cache, the disk's queue) then falls on every system alike
//! instead of on whichever ran last, and a setup's runs are minutes apart, not back to back.
//! [`summarise`] reduces a point's runs to the median of each figure ([`median`]: the middle
//! value, or the mean of the middle two) and its range, `[min, max]`.

use serde::Serialize;

use super::LatencyUs;

/// The setups' indices in the order round `round` visits them: the table's order, rotated to
/// start at `round mod setups`.
pub fn order(setups: usize, round: usize) -> Vec<usize> {
    (0..setups).map(|i| (i + round) % setups).collect()
}

/// What one run of a point measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunFigures {
    /// Latency of its answers, us.
    pub latency: LatencyUs,
    /// Answers per second.
    pub ops_per_s: f64,
    /// The servers' CPU time over the run's time, cores.
    pub server_cpu: Option<f64>,
}

/// The smallest and the largest of a figure's runs.
pub type Span = [f64; 2];

/// The range of each latency figure over the runs, us.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencyRange {
    /// Of the medians.
    pub p50: Option<Span>,
    /// Of the 99th percentiles.
    pub p99: Option<Span>,
    /// Of the 99.9th percentiles.
    pub p999: Option<Span>,
    /// Of the largest.
    pub max: Option<Span>,
}

/// The range of each figure of a row over its runs, laid out as the row's figures are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Ranges {
    /// Latency, us.
    pub latency_us: LatencyRange,
    /// Answers per second.
    pub ops_per_s: Span,
    /// Servers' CPU, cores.
    pub server_cpu: Option<Span>,
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// `[min, max]` of `values`; `None` when empty.
pub fn span(values: &[f64]) -> Option<Span> {
    let min = values.iter().copied().min_by(f64::total_cmp)?;
    let max = values.iter().copied().max_by(f64::total_cmp)?;
    Some([min, max])
}

/// A point's runs reduced: each figure's median, and the ranges.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    /// The medians of the latency figures.
    pub latency: LatencyUs,
    /// The median throughput.
    pub ops_per_s: f64,
    /// The median servers' CPU.
    pub server_cpu: Option<f64>,
    /// The ranges.
    pub range: Ranges,
}

/// The medians and ranges of `runs` (a figure absent from every run stays absent).
pub fn summarise(runs: &[RunFigures]) -> Summary {
    let of =
        |figure: fn(&RunFigures) -> Option<f64>| -> Vec<f64> { runs.iter().filter_map(figure).collect() };
    let p50 = of(|r| r.latency.p50);
    let p99 = of(|r| r.latency.p99);
    let p999 = of(|r| r.latency.p999);
    let max = of(|r| r.latency.max);
    let ops = of(|r| Some(r.ops_per_s));
    let cpu = of(|r| r.server_cpu);
    Summary {
        latency: LatencyUs { p50: median(&p50), p99: median(&p99), p999: median(&p999), max: median(&max) },
        ops_per_s: median(&ops).unwrap_or(0.0),
        server_cpu: median(&cpu),
        range: Ranges {
            latency_us: LatencyRange { p50: span(&p50), p99: span(&p99), p999: span(&p999), max: span(&max) },
            ops_per_s: span(&ops).unwrap_or_default(),
            server_cpu: span(&cpu),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_starts_one_further_and_every_setup_takes_every_place() {
        assert_eq!(order(4, 0), [0, 1, 2, 3]);
        assert_eq!(order(4, 1), [1, 2, 3, 0]);
        assert_eq!(order(4, 5), [1, 2, 3, 0]);
        assert_eq!(order(1, 7), [0]);
        for setup in 0..5 {
            let mut places: Vec<usize> =
                (0..5).map(|r| order(5, r).iter().position(|&s| s == setup).unwrap()).collect();
            places.sort_unstable();
            assert_eq!(places, [0, 1, 2, 3, 4], "setup {setup}");
        }
    }

    #[test]
    fn medians_and_ranges() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(span(&[3.0, 1.0, 2.0]), Some([1.0, 3.0]));
        let run = |p50: f64, ops: f64| RunFigures {
            latency: LatencyUs { p50: Some(p50), p99: Some(2.0 * p50), p999: None, max: Some(10.0 * p50) },
            ops_per_s: ops,
            server_cpu: None,
        };
        let s = summarise(&[run(100.0, 900.0), run(300.0, 1000.0), run(200.0, 1200.0)]);
        assert_eq!(
            s.latency,
            LatencyUs { p50: Some(200.0), p99: Some(400.0), p999: None, max: Some(2000.0) }
        );
        assert_eq!(s.ops_per_s, 1000.0);
        assert_eq!(s.server_cpu, None);
        assert_eq!(s.range.latency_us.p50, Some([100.0, 300.0]));
        assert_eq!(s.range.latency_us.p999, None);
        assert_eq!(s.range.ops_per_s, [900.0, 1200.0]);
        let json = serde_json::to_value(s.range).unwrap();
        assert_eq!(json["latency_us"]["p50"], serde_json::json!([100.0, 300.0]));
        assert_eq!(json["ops_per_s"], serde_json::json!([900.0, 1200.0]));
    }
}

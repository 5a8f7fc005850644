//! Latency statistics on HDR histograms.
//!
//! A [`LatencyRecorder`] takes nanosecond samples into an auto-resizing HDR histogram with three
//! significant digits (any value is kept to within 0.1%), so recording never allocates after the
//! first samples of each magnitude and never loses a sample. A [`LatencySummary`] is what reports
//! carry: count, min, mean, stddev, p50, p99, p99.9, p99.99 and max in nanoseconds, with stable
//! JSON names and a CSV form. [`LatencyRecorder::ccdf`] gives the tail as (value, fraction above)
//! points for log-scale plots.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// Records nanosecond latencies into an HDR histogram.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    histogram: Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    /// An empty recorder, three significant digits, any range.
    pub fn new() -> Self {
        let mut histogram = Histogram::new(3).expect("3 significant digits is a valid precision");
        histogram.auto(true);
        Self { histogram }
    }

    /// A recorder sized up front for values up to `max_ns`, so recording never allocates (for
    /// realtime loops); larger values are recorded as `max_ns`.
    pub fn preallocated(max_ns: u64) -> Self {
        let histogram = Histogram::new_with_max(max_ns.max(2), 3).expect("a max of at least 2 is valid");
        Self { histogram }
    }

    /// Records one sample in nanoseconds. Zero is kept as zero.
    #[inline]
    pub fn record(&mut self, value_ns: u64) {
        // Auto-resizing recorders take any u64; preallocated ones clamp to their maximum.
        if self.histogram.record(value_ns).is_err() {
            let _ = self.histogram.record(self.histogram.high());
        }
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyRecorder) {
        let _ = self.histogram.add(&other.histogram);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The largest sample, or 0 when empty.
    pub fn max(&self) -> u64 {
        self.histogram.max()
    }

    /// The value at `quantile` (0.0-1.0), or 0 when empty.
    pub fn value_at_quantile(&self, quantile: f64) -> u64 {
        if self.histogram.is_empty() { 0 } else { self.histogram.value_at_quantile(quantile) }
    }

    /// The summary statistics of the samples so far.
    pub fn summary(&self) -> LatencySummary {
        let h = &self.histogram;
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: h.len(),
            min: h.min(),
            mean: h.mean(),
            stddev: h.stdev(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
        }
    }

    /// The complementary CDF: `(value_ns, fraction of samples above it)` at each distinct
    /// recorded value, for log-scale tail plots. The fraction never reaches zero in the output:
    /// the largest value is given the fraction of one sample, so it stays on a log axis.
    pub fn ccdf(&self) -> Vec<(u64, f64)> {
        let total = self.histogram.len();
        if total == 0 {
            return Vec::new();
        }
        let mut seen = 0u64;
        let mut points = Vec::new();
        for v in self.histogram.iter_recorded() {
            seen += v.count_at_value();
            let above = (total - seen).max(1) as f64 / total as f64;
            points.push((v.value_iterated_to(), above));
        }
        points
    }
}

/// Summary statistics of a latency distribution, in nanoseconds. Field names are stable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Number of samples.
    pub count: u64,
    /// Smallest sample.
    pub min: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// 99.99th percentile.
    pub p9999: u64,
    /// Largest sample.
    pub max: u64,
}

impl LatencySummary {
    /// The CSV header matching [`LatencySummary::write_csv_row`], after a leading `name` column.
    pub const CSV_HEADER: &'static str =
        "name,count,min_ns,mean_ns,stddev_ns,p50_ns,p99_ns,p999_ns,p9999_ns,max_ns";

    /// Writes one CSV row: `name` then the statistics.
    pub fn write_csv_row(&self, name: &str, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{},{},{},{:.1},{:.1},{},{},{},{},{}",
            name,
            self.count,
            self.min,
            self.mean,
            self.stddev,
            self.p50,
            self.p99,
            self.p999,
            self.p9999,
            self.max
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_a_known_distribution() {
        let mut r = LatencyRecorder::new();
        for v in 1..=10_000u64 {
            r.record(v * 1_000);
        }
        let s = r.summary();
        assert_eq!(s.count, 10_000);
        assert_eq!(s.min, 1_000);
        let within = |got: u64, want: u64| (got as f64 / want as f64 - 1.0).abs() < 0.002;
        assert!(within(s.p50, 5_000_000), "p50 {}", s.p50);
        assert!(within(s.p99, 9_900_000), "p99 {}", s.p99);
        assert!(within(s.p999, 9_990_000), "p999 {}", s.p999);
        assert!(within(s.max, 10_000_000), "max {}", s.max);
        assert!((s.mean - 5_000_500.0).abs() / 5_000_500.0 < 0.002, "mean {}", s.mean);
        assert!((s.stddev - 2_886_751.0).abs() / 2_886_751.0 < 0.01, "stddev {}", s.stddev);
    }

    #[test]
    fn empty_recorder_summarises_to_zeros() {
        assert_eq!(LatencyRecorder::new().summary(), LatencySummary::default());
        assert!(LatencyRecorder::new().ccdf().is_empty());
    }

    #[test]
    fn huge_values_are_kept_not_dropped() {
        let mut r = LatencyRecorder::new();
        r.record(3);
        r.record(60_000_000_000);
        assert_eq!(r.count(), 2);
        assert!(r.max() >= 60_000_000_000 - 60_000_000);
    }

    #[test]
    fn a_preallocated_recorder_clamps_instead_of_growing() {
        let mut r = LatencyRecorder::preallocated(1_000_000);
        r.record(10);
        r.record(5_000_000);
        assert_eq!(r.count(), 2);
        assert!(r.max() >= 999_000 && r.max() <= 1_001_000, "{}", r.max());
    }

    #[test]
    fn ccdf_falls_and_ends_above_zero() {
        let mut r = LatencyRecorder::new();
        for v in [10, 10, 20, 30, 1_000] {
            r.record(v);
        }
        let ccdf = r.ccdf();
        assert_eq!(ccdf.first(), Some(&(10, 0.6)));
        assert!(ccdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 >= w[1].1));
        assert_eq!(ccdf.last().map(|p| p.1), Some(0.2));
    }

    #[test]
    fn csv_row_matches_header() {
        let mut r = LatencyRecorder::new();
        r.record(5);
        let mut out = Vec::new();
        r.summary().write_csv_row("baseline", &mut out).unwrap();
        let row = String::from_utf8(out).unwrap();
        assert_eq!(row.trim().split(',').count(), LatencySummary::CSV_HEADER.split(',').count());
        assert!(row.starts_with("baseline,1,5,5.0,0.0,5,5,5,5,5"));
    }

    #[test]
    fn summary_round_trips_through_json() {
        let mut r = LatencyRecorder::new();
        r.record(42);
        let json = serde_json::to_string(&r.summary()).unwrap();
        assert!(json.contains("\"p999\":42") && json.contains("\"p9999\":42"));
        let back: LatencySummary = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r.summary());
    }
}

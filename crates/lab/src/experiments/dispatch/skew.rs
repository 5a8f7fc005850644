//! `kairos dispatch skew`: the busiest worker's load over the mean, window by window, under
//! Zipf-skewed flows on a virtual clock, each policy rebalancing as it does; beside the floor
//! no flow-keeping policy beats (the heaviest flow's share times the workers).
//!
//! # Summary fields (stable)
//! `machine`, `plots`, `results_dir`, `config`, `simulated` (true), `rows`, one per policy in
//! [`PolicyKind::ALL`]'s order (`policy`, `max_over_mean_load` (the last window's),
//! `balanced_from_ms`, `floor`, `windows` (`end_ms`, `max_over_mean`)). Files: `summary.json`,
//! `skew_max_over_mean.png`.

use anyhow::Result;
use kairos_dispatch::PolicyKind;
use kairos_dispatch::skew::{self as sim, SkewWindow};
use kairos_metrics::NoiseConfig;
use serde::Serialize;

use super::{chart, in_range};
use crate::harness::plot::{Scales, XySeries};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// What `kairos dispatch skew` runs.
#[derive(Debug, Clone, Serialize)]
pub struct SkewConfig {
    /// Active workers, 2-1000.
    pub workers: usize,
    /// Flows, 1-10000000.
    pub flows: usize,
    /// The flows' Zipf exponent, 0 (uniform) to 3.
    pub zipf: f64,
    /// Packets per millisecond of virtual time, 1-10000000.
    pub packets_per_ms: u64,
    /// Milliseconds between the load-aware policy's rebalances, 1-1000.
    pub rebalance_ms: u64,
    /// The measuring window, ms, 1-1000.
    pub window_ms: u64,
    /// Virtual time, ms, 1-60000.
    pub duration_ms: u64,
    /// The draws' seed.
    pub seed: u64,
}

impl Default for SkewConfig {
    /// The source's 14 workers and 700,000 flows at Zipf(1.1), 50,000 packets a millisecond
    /// for 100 ms, a rebalance every millisecond, windows of 5 ms.
    fn default() -> Self {
        Self {
            workers: 14,
            flows: 700_000,
            zipf: 1.1,
            packets_per_ms: 50_000,
            rebalance_ms: 1,
            window_ms: 5,
            duration_ms: 100,
            seed: 1,
        }
    }
}

impl SkewConfig {
    /// The simulation's settings.
    fn sim(&self) -> sim::SkewConfig {
        sim::SkewConfig {
            workers: self.workers,
            flows: self.flows,
            exponent: self.zipf,
            packets_per_ms: self.packets_per_ms,
            rebalance_ms: self.rebalance_ms,
            window_ms: self.window_ms,
            duration_ms: self.duration_ms,
            seed: self.seed,
        }
    }
}

/// One policy's run.
#[derive(Debug, Clone, Serialize)]
pub struct SkewRow {
    /// The policy.
    pub policy: &'static str,
    /// The last window's busiest worker over the mean (0 when no window ended).
    pub max_over_mean_load: f64,
    /// The first window end from which every later window is within 5% of the mean, ms.
    pub balanced_from_ms: Option<u64>,
    /// The floor no flow-keeping policy beats: the heaviest flow's share times the workers
    /// (or 1).
    pub floor: f64,
    /// Every window, in order.
    pub windows: Vec<SkewWindow>,
}

/// What the skew experiment found.
#[derive(Debug, Clone, Serialize)]
pub struct SkewSummary {
    /// Machine, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: SkewConfig,
    /// Always true: a virtual clock.
    pub simulated: bool,
    /// One per policy.
    pub rows: Vec<SkewRow>,
}

impl Experiment for SkewConfig {
    const NAME: &'static str = "dispatch-skew";
    type Summary = SkewSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        in_range("--workers", self.workers, 2, 1000)?;
        in_range("--flows", self.flows, 1, 10_000_000)?;
        in_range("--zipf", self.zipf, 0.0, 3.0)?;
        in_range("--packets-per-ms", self.packets_per_ms, 1, 10_000_000)?;
        in_range("--rebalance-ms", self.rebalance_ms, 1, 1000)?;
        in_range("--window-ms", self.window_ms, 1, 1000)?;
        in_range("--duration-ms", self.duration_ms, 1, 60_000)?;
        // About 0.6 us a packet in a debug build.
        let packets = self.duration_ms as f64 * self.packets_per_ms as f64;
        Ok(Plan::new(PolicyKind::ALL.len(), packets * 6e-7))
    }

    fn noise(&self) -> Option<NoiseConfig> {
        None
    }

    fn run(&self, run: &mut Run<'_>) -> Result<SkewSummary> {
        let config = self.sim();
        let mut rows = Vec::with_capacity(PolicyKind::ALL.len());
        for kind in PolicyKind::ALL {
            run.doing(kind.name());
            let mut policy = kind.build(self.workers);
            let r = sim::run(&config, policy.as_mut());
            rows.push(SkewRow {
                policy: r.policy,
                max_over_mean_load: r.windows.last().map_or(0.0, |w| w.max_over_mean),
                balanced_from_ms: r.balanced_from_ms,
                floor: r.floor,
                windows: r.windows,
            });
            run.step("");
        }
        plot(self, &rows, run)?;
        Ok(SkewSummary { run: run.finish(), config: self.clone(), simulated: true, rows })
    }
}

/// Every policy's busiest worker over the mean against time, and the floor, dashed.
fn plot(config: &SkewConfig, rows: &[SkewRow], run: &mut Run<'_>) -> Result<()> {
    let mut series: Vec<XySeries> = rows
        .iter()
        .enumerate()
        .map(|(color, r)| {
            let points = r.windows.iter().map(|w| (w.end_ms as f64, w.max_over_mean)).collect();
            XySeries::measured(r.policy, points, color)
        })
        .collect();
    // Every policy sees the same windows and the same floor: the first row's span them.
    if let Some(row) = rows.first()
        && let (Some(first), Some(last)) = (row.windows.first(), row.windows.last())
    {
        series.push(XySeries {
            name: "floor (heaviest flow x workers)".into(),
            points: vec![(first.end_ms as f64, row.floor), (last.end_ms as f64, row.floor)],
            model: true,
            color: rows.len(),
        });
    }
    let title = format!(
        "busiest worker over the mean, {} workers, Zipf({}), {} packets/ms (virtual clock)",
        config.workers, config.zipf, config.packets_per_ms
    );
    chart(
        run,
        "skew_max_over_mean.png",
        &title,
        ("window end, ms", "max / mean load"),
        Scales::default(),
        &series,
    )
}

/// The table a person reads: each policy's first and last window and when it was balanced.
pub fn report(s: &SkewSummary) -> String {
    let c = &s.config;
    let mut out = format!(
        "{} workers, {} flows, Zipf({}), {} packets/ms on a virtual clock; rebalance every {} ms, windows of {} ms\n",
        c.workers, c.flows, c.zipf, c.packets_per_ms, c.rebalance_ms, c.window_ms
    );
    let floor = s.rows.first().map_or(1.0, |r| r.floor);
    out.push_str(&format!("floor (the heaviest flow's share x workers): {floor:.3}\n"));
    out.push_str(&format!(
        "{:<10} {:>14} {:>14} {:>18}\n",
        "policy", "first window", "last window", "within 5% from"
    ));
    for r in &s.rows {
        let first = r.windows.first().map_or(0.0, |w| w.max_over_mean);
        let from = r.balanced_from_ms.map_or("never".to_string(), |ms| format!("{ms} ms"));
        out.push_str(&format!(
            "{:<10} {:>14.3} {:>14.3} {:>18}\n",
            r.policy, first, r.max_over_mean_load, from
        ));
    }
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_out_of_range_is_refused_naming_it() {
        assert!(SkewConfig::default().plan().is_ok());
        let bad = [
            (SkewConfig { zipf: 9.0, ..SkewConfig::default() }, "--zipf 9 is out of range: 0 to 3"),
            (
                SkewConfig { window_ms: 0, ..SkewConfig::default() },
                "--window-ms 0 is out of range: 1 to 1000",
            ),
            (
                SkewConfig { duration_ms: 60_001, ..SkewConfig::default() },
                "--duration-ms 60001 is out of range: 1 to 60000",
            ),
        ];
        for (config, why) in bad {
            assert_eq!(config.plan().unwrap_err().to_string(), why);
        }
    }

    #[test]
    fn a_run_shorter_than_a_window_keeps_its_rows_and_draws_no_plot() {
        let root = std::env::temp_dir().join(format!("kairos-dispatch-skew-{}", std::process::id()));
        let config = SkewConfig {
            flows: 1_000,
            packets_per_ms: 100,
            duration_ms: 3,
            window_ms: 5,
            ..SkewConfig::default()
        };
        let s = crate::harness::run(&config, &root, &|_| {}).unwrap();
        assert_eq!(s.rows.len(), PolicyKind::ALL.len());
        assert!(s.rows.iter().all(|r| r.windows.is_empty()), "no window ended in 3 ms");
        assert!(s.run.plots.is_empty(), "{:?}", s.run.plots);
        assert!(s.run.results_dir.join("summary.json").is_file());
        let _ = std::fs::remove_dir_all(&root);
    }
}

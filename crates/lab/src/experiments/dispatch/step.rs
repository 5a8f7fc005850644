//! `kairos dispatch step`: a load step (by default 10% -> 80% -> 10% of the workers' capacity)
//! with workers granted on Shenango's or Caladan's congestion signal and parked when idle, on
//! the virtual clock of [`latency`](super::latency). Per signal and policy: latency, p99 per
//! phase, workers in use and p99 per 10 ms window, joins and parks, reordering.
//!
//! # Summary fields (stable)
//! `machine`, `plots`, `results_dir`; the configuration flattened (`workers`, `loads`,
//! `phase_ms`, `flows`, `zipf`, `cold_ns`, `seed`, `service`, `park_idle_us`, `wake_us`);
//! `simulated` (true); `rows`, per signal and policy in that order (`policy`, `signal`,
//! `latency_us`, `phase_p99_us`, `mean_workers`, `joins`, `leaves`, `reordered`,
//! `cold_fraction`, `windows` (`start_ms`, `load`, `workers`, `p99_us`, `requests`)). Files:
//! `summary.json`, `step_workers_<signal>.png`, `step_p99_<signal>.png`.

use anyhow::Result;
use kairos_dispatch::PolicyKind;
use kairos_dispatch::elastic::{self as sim, Phase, Signal, StepRow, StepWindow};
use kairos_dispatch::latency::Service;
use kairos_metrics::NoiseConfig;
use serde::Serialize;

use super::{Workload, chart, check_loads, in_range};
use crate::harness::plot::{Scales, XySeries};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// What `kairos dispatch step` runs.
#[derive(Debug, Clone, Serialize)]
pub struct StepConfig {
    /// Workers the allocator may use, 2-1000.
    pub workers: usize,
    /// The phases' loads, 0.01-0.99 each of all the workers' capacity; 1 to 100 phases.
    pub loads: Vec<f64>,
    /// Each phase's length, ms, 1-10000.
    pub phase_ms: f64,
    /// The flows and their state.
    #[serde(flatten)]
    pub workload: Workload,
    /// The service distribution (mean 10 us).
    pub service: Service,
    /// Idle time after which a worker parks, us, 0-1000000.
    pub park_idle_us: f64,
    /// From a worker's grant until it takes packets, us, 0-1000000.
    pub wake_us: f64,
}

impl StepConfig {
    /// 16 workers, 10% -> 80% -> 10% for 50 ms a phase with `quick`, else 200 ms;
    /// exponential service, the default workload, parking after 10 us idle, a 5 us wake-up.
    pub fn preset(quick: bool) -> Self {
        Self {
            workers: 16,
            loads: vec![0.1, 0.8, 0.1],
            phase_ms: if quick { 50.0 } else { 200.0 },
            workload: Workload::default(),
            service: Service::Exponential,
            park_idle_us: 10.0,
            wake_us: 5.0,
        }
    }

    /// The simulation's settings for `signal`.
    fn sim(&self, signal: Signal) -> sim::StepConfig {
        let mut config = sim::StepConfig::default_step(self.phase_ms, signal);
        config.max_workers = self.workers;
        config.flows = self.workload.flows;
        config.phases =
            self.loads.iter().map(|&load| Phase { load, duration_ns: self.phase_ms * 1e6 }).collect();
        config.zipf = self.workload.zipf;
        config.service = self.service;
        config.cold_ns = self.workload.cold_ns;
        config.park_idle_ns = self.park_idle_us * 1e3;
        config.wake_ns = self.wake_us * 1e3;
        config.seed = self.workload.seed;
        config
    }
}

/// What the load-step experiment found.
#[derive(Debug, Clone, Serialize)]
pub struct StepSummary {
    /// Machine, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run; flattened, so `workers`, `loads` and `phase_ms` stay where
    /// `--json` has always put them.
    #[serde(flatten)]
    pub config: StepConfig,
    /// Always true: a virtual clock.
    pub simulated: bool,
    /// Per signal and policy, each with its windows.
    pub rows: Vec<StepRow>,
}

/// One figure of a window, as a chart draws it.
type WindowFigure = fn(&StepWindow) -> f64;

impl Experiment for StepConfig {
    const NAME: &'static str = "dispatch-step";
    type Summary = StepSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        self.workload.check()?;
        in_range("--workers", self.workers, 2, 1000)?;
        in_range("--park-idle-us", self.park_idle_us, 0.0, 1_000_000.0)?;
        in_range("--wake-us", self.wake_us, 0.0, 1_000_000.0)?;
        in_range("--phase-ms", self.phase_ms, 1.0, 10_000.0)?;
        check_loads(&self.loads, 100, "phases")?;
        // About 20 ms a millisecond of virtual time in a debug build.
        let virtual_ms = self.phase_ms * self.loads.len() as f64;
        Ok(Plan::new(Signal::ALL.len() * PolicyKind::ALL.len(), virtual_ms * 0.02))
    }

    fn noise(&self) -> Option<NoiseConfig> {
        None
    }

    fn run(&self, run: &mut Run<'_>) -> Result<StepSummary> {
        let mut rows = Vec::new();
        for signal in Signal::ALL {
            let config = self.sim(signal);
            for kind in PolicyKind::ALL {
                run.doing(&format!("{}'s signal: {}", signal.name(), kind.name()));
                rows.push(sim::run(&config, kind));
                run.step("");
            }
        }
        for signal in Signal::ALL {
            let charts: [(&str, &str, bool, WindowFigure); 2] = [
                ("workers", "workers in use", false, |w| w.workers),
                ("p99", "p99 latency, us", true, |w| w.p99_us),
            ];
            for (what, label, log_y, pick) in charts {
                // A series per policy: its windows of this signal, against time.
                let series: Vec<XySeries> = rows
                    .iter()
                    .filter(|r| r.signal == signal.name())
                    .enumerate()
                    .map(|(color, r)| {
                        let points = r.windows.iter().map(|w| (w.start_ms, pick(w))).collect();
                        XySeries::measured(r.policy, points, color)
                    })
                    .collect();
                let file = format!("step_{what}_{}.png", signal.name());
                let title = format!("load step, {}'s signal: {label} per window", signal.name());
                let scales = Scales { log_x: false, log_y };
                chart(run, &file, &title, ("window start, ms", label), scales, &series)?;
            }
        }
        Ok(StepSummary { run: run.finish(), config: self.clone(), simulated: true, rows })
    }
}

/// The table a person reads: per signal and policy, latency by phase, workers, reordering.
pub fn report(s: &StepSummary) -> String {
    let c = &s.config;
    let loads: Vec<String> = c.loads.iter().map(|l| format!("{:.0}%", l * 100.0)).collect();
    let mut out = format!(
        "simulated (virtual clock, the real dispatcher and policies): up to {} workers, {} flows, load {} for {} ms each, {} service of 10 us, Zipf({}), {} ns for a cold flow; a worker wakes {} us after its grant and parks after {} us idle\n",
        c.workers,
        c.workload.flows,
        loads.join(" -> "),
        c.phase_ms,
        c.service.name(),
        c.workload.zipf,
        c.workload.cold_ns,
        c.wake_us,
        c.park_idle_us
    );
    out.push_str(&format!(
        "{:<9} {:<9} {:>8} {:>8} {:>9} {:>22} {:>8} {:>7} {:>7} {:>9} {:>6}\n",
        "signal",
        "policy",
        "p50 us",
        "p99",
        "p99.9",
        "p99 by phase",
        "workers",
        "joins",
        "parks",
        "reordered",
        "cold"
    ));
    for r in &s.rows {
        let phases: Vec<String> = r.phase_p99_us.iter().map(|p| format!("{p:.0}")).collect();
        out.push_str(&format!(
            "{:<9} {:<9} {:>8.1} {:>8.1} {:>9.1} {:>22} {:>8.2} {:>7} {:>7} {:>9} {:>5.1}%\n",
            r.signal,
            r.policy,
            r.latency_us.p50,
            r.latency_us.p99,
            r.latency_us.p999,
            phases.join(" / "),
            r.mean_workers,
            r.joins,
            r.leaves,
            r.reordered,
            100.0 * r.cold_fraction
        ));
    }
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_out_of_range_are_refused_naming_the_flag() {
        assert_eq!(StepConfig::preset(true).plan().unwrap().steps, 8, "two signals, four policies");
        let e =
            StepConfig { loads: vec![0.1, 1.5], ..StepConfig::preset(true) }.plan().unwrap_err().to_string();
        assert_eq!(e, "--loads: 1.5 is out of range: 0.01 to 0.99");
        let e = StepConfig { loads: Vec::new(), ..StepConfig::preset(true) }.plan().unwrap_err().to_string();
        assert_eq!(e, "--loads takes 1 to 100 phases");
        let e = StepConfig { phase_ms: 0.5, ..StepConfig::preset(true) }.plan().unwrap_err().to_string();
        assert_eq!(e, "--phase-ms 0.5 is out of range: 1 to 10000");
    }
}

//! `kairos dispatch latency`: Shenango's synthetic server on a virtual clock. Open-loop Poisson
//! requests over many flows go through the real dispatcher and policies to simulated workers;
//! reported per policy, service distribution and offered load: latency percentiles, the busiest
//! worker over the mean, requests completed out of their flow's order.
//!
//! # Summary fields (stable)
//! `machine`, `plots`, `results_dir`; the configuration flattened (`workers`, `flows`, `zipf`,
//! `cold_ns`, `seed`, `mean_service_us`, `loads`, `services`, `requests`); `simulated` (true);
//! `rows`, per service, load and policy in that order (`policy`, `service`, `load`,
//! `latency_us` (`p50` to `p9999`), `reordered`, `max_over_mean_load`, `cold_fraction`).
//! Files: `summary.json`, `latency_p99_<service>.png`.

use anyhow::Result;
use kairos_dispatch::PolicyKind;
use kairos_dispatch::latency::{self as sim, LatencyRow, Service};
use kairos_metrics::NoiseConfig;
use serde::Serialize;

use super::{Workload, chart, check_loads, in_range};
use crate::harness::plot::{Scales, measured_per_key};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// What `kairos dispatch latency` runs.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyConfig {
    /// Workers, 1-1000.
    pub workers: usize,
    /// The flows and their state.
    #[serde(flatten)]
    pub workload: Workload,
    /// Mean service time, us, 0.1-100000.
    pub mean_service_us: f64,
    /// Offered loads, 0.01-0.99 each of the workers' capacity.
    pub loads: Vec<f64>,
    /// Service distributions, one or more.
    pub services: Vec<Service>,
    /// Requests a point, 1000-100000000 (the first 10% discarded).
    pub requests: u64,
}

impl LatencyConfig {
    /// 14 workers, the default workload, 10 us mean service; with `quick` 4 loads (0.1, 0.5,
    /// 0.8, 0.9), exponential and bimodal service and 200,000 requests a point, else 19 loads
    /// (0.05 to 0.95), all four distributions and 1,000,000.
    pub fn preset(quick: bool) -> Self {
        Self {
            workers: 14,
            workload: Workload::default(),
            mean_service_us: 10.0,
            loads: if quick {
                vec![0.1, 0.5, 0.8, 0.9]
            } else {
                (1..=19).map(|i| f64::from(i) * 0.05).collect()
            },
            services: if quick {
                vec![Service::Exponential, Service::Bimodal]
            } else {
                Service::ALL.to_vec()
            },
            requests: if quick { 200_000 } else { 1_000_000 },
        }
    }
}

/// What the latency experiment found.
#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    /// Machine, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run; flattened, so `workers`, `flows`, `zipf` and `requests` stay
    /// where `--json` has always put them.
    #[serde(flatten)]
    pub config: LatencyConfig,
    /// Always true: a virtual clock.
    pub simulated: bool,
    /// Per service, load and policy.
    pub rows: Vec<LatencyRow>,
}

impl Experiment for LatencyConfig {
    const NAME: &'static str = "dispatch-latency";
    type Summary = LatencySummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        self.workload.check()?;
        in_range("--workers", self.workers, 1, 1000)?;
        in_range("--mean-service-us", self.mean_service_us, 0.1, 100_000.0)?;
        in_range("--requests", self.requests, 1_000, 100_000_000)?;
        check_loads(&self.loads, 1000, "loads")?;
        if self.services.is_empty() {
            return Err(InvalidConfig::new(
                "--services names none: give constant, exponential, bimodal or heavy",
            ));
        }
        // About 6 us a request in a debug build.
        let points = self.services.len() * self.loads.len() * PolicyKind::ALL.len();
        Ok(Plan::new(points, self.requests as f64 * 6e-6))
    }

    fn noise(&self) -> Option<NoiseConfig> {
        None
    }

    fn run(&self, run: &mut Run<'_>) -> Result<LatencySummary> {
        let mut rows = Vec::new();
        for &service in &self.services {
            for &load in &self.loads {
                let point = sim::LatencyConfig {
                    workers: self.workers,
                    flows: self.workload.flows,
                    zipf: self.workload.zipf,
                    mean_service_ns: self.mean_service_us * 1_000.0,
                    service,
                    load,
                    requests: self.requests,
                    cold_ns: self.workload.cold_ns,
                    seed: self.workload.seed,
                };
                for kind in PolicyKind::ALL {
                    run.doing(&format!("{} at load {load}: {}", service.name(), kind.name()));
                    rows.push(sim::run(&point, kind));
                    run.step("");
                }
            }
        }
        for &service in &self.services {
            let series = measured_per_key(
                PolicyKind::ALL,
                &rows,
                |kind| kind.name().to_string(),
                |kind, r| r.policy == kind.name() && r.service == service,
                |r| (r.load, r.latency_us.p99),
            );
            let title = format!(
                "simulated p99 against load, {} service, Zipf({})",
                service.name(),
                self.workload.zipf
            );
            let file = format!("latency_p99_{}.png", service.name());
            let scales = Scales { log_x: false, log_y: true };
            chart(run, &file, &title, ("offered load", "p99 latency, us"), scales, &series)?;
        }
        Ok(LatencySummary { run: run.finish(), config: self.clone(), simulated: true, rows })
    }
}

/// The table a person reads: every point's percentiles, balance and reordering.
pub fn report(s: &LatencySummary) -> String {
    let c = &s.config;
    let mut out = format!(
        "simulated (virtual clock, the real dispatcher and policies): {} workers, {} flows, Zipf({}), mean service {} us, {} requests a point, {} ns for a cold flow\n",
        c.workers, c.workload.flows, c.workload.zipf, c.mean_service_us, c.requests, c.workload.cold_ns
    );
    out.push_str(&format!(
        "{:<12} {:>5} {:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "service", "load", "policy", "p50 us", "p90", "p99", "p99.9", "p99.99", "max/mean", "reordered"
    ));
    for r in &s.rows {
        let l = &r.latency_us;
        out.push_str(&format!(
            "{:<12} {:>5.2} {:<9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.3} {:>9}\n",
            r.service.name(),
            r.load,
            r.policy,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.p9999,
            r.max_over_mean_load,
            r.reordered
        ));
    }
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_presets_plan_and_values_out_of_range_are_refused_naming_the_flag() {
        let quick = LatencyConfig::preset(true).plan().unwrap();
        assert_eq!(quick.steps, 2 * 4 * 4, "two services, four loads, four policies");
        assert_eq!(LatencyConfig::preset(false).plan().unwrap().steps, 4 * 19 * 4);
        let e = LatencyConfig { workers: 0, ..LatencyConfig::preset(true) }.plan().unwrap_err().to_string();
        assert_eq!(e, "--workers 0 is out of range: 1 to 1000");
        let e = LatencyConfig { requests: 10, ..LatencyConfig::preset(true) }.plan().unwrap_err().to_string();
        assert_eq!(e, "--requests 10 is out of range: 1000 to 100000000");
        let e = LatencyConfig { services: Vec::new(), ..LatencyConfig::preset(true) }
            .plan()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--services"), "{e}");
    }
}

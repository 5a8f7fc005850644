//! `kairos dispatch remap`: the fraction of flows each steering policy moves when a worker
//! joins (N to N+1) and when the first leaves (N to N-1), beside the ideal (the newcomer's
//! share, 1/(N+1), or the leaver's, 1/N). Deterministic: a seeded set of uniform flow hashes,
//! shown to each policy before and after the change; no timing.
//!
//! # Summary fields (stable)
//! `machine`, `plots` (none), `results_dir`; the configuration flattened (`workers`, `flows`,
//! `seed`); `rows`, one per policy and event, in [`PolicyKind::ALL`]'s order, join before
//! leave (`policy`, `event`, `workers_before`, `workers_after`, `flows_moved_fraction`,
//! `ideal_fraction`, `max_over_mean_flows`).

use anyhow::Result;
use kairos_dispatch::PolicyKind;
use kairos_dispatch::remap::{Event, RemapRow, flow_hashes, remap};
use kairos_metrics::NoiseConfig;
use serde::Serialize;

use super::in_range;
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// What `kairos dispatch remap` runs.
#[derive(Debug, Clone, Serialize)]
pub struct RemapConfig {
    /// Active workers before the change, 2-1000.
    pub workers: usize,
    /// Flows (distinct uniform hashes), 1-10000000.
    pub flows: usize,
    /// The hashes' seed.
    pub seed: u64,
}

impl Default for RemapConfig {
    /// Ten workers and a million flows: enough that each policy's fraction is steady to a
    /// tenth of a percent.
    fn default() -> Self {
        Self { workers: 10, flows: 1_000_000, seed: 1 }
    }
}

/// What the remap experiment found.
#[derive(Debug, Clone, Serialize)]
pub struct RemapSummary {
    /// Machine, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run; flattened, so `flows` and `seed` stay where `--json` has always
    /// put them.
    #[serde(flatten)]
    pub config: RemapConfig,
    /// One per policy and event.
    pub rows: Vec<RemapRow>,
}

impl Experiment for RemapConfig {
    const NAME: &'static str = "dispatch-remap";
    type Summary = RemapSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        in_range("--workers", self.workers, 2, 1000)?;
        in_range("--flows", self.flows, 1, 10_000_000)?;
        // A policy sees every flow twice a row: about 0.2 us a flow in a debug build.
        Ok(Plan::new(2 * PolicyKind::ALL.len(), self.flows as f64 * 2e-7))
    }

    fn noise(&self) -> Option<NoiseConfig> {
        None
    }

    fn run(&self, run: &mut Run<'_>) -> Result<RemapSummary> {
        let flows = flow_hashes(self.flows, self.seed);
        let mut rows = Vec::with_capacity(2 * PolicyKind::ALL.len());
        for kind in PolicyKind::ALL {
            for event in [Event::Join, Event::Leave] {
                run.doing(&format!("{} {}", kind.name(), event_name(event)));
                rows.push(remap(kind, self.workers, &flows, event));
                run.step("");
            }
        }
        Ok(RemapSummary { run: run.finish(), config: self.clone(), rows })
    }
}

/// The event as the table and the JSON spell it.
fn event_name(event: Event) -> &'static str {
    match event {
        Event::Join => "join",
        Event::Leave => "leave",
    }
}

/// The table a person reads: each policy's moved fraction beside the ideal.
pub fn report(s: &RemapSummary) -> String {
    let mut out = format!(
        "{} flows; moved on a change of workers (ideal: the newcomer's or the leaver's share)\n",
        s.config.flows
    );
    out.push_str(&format!(
        "{:<10} {:<6} {:>8} {:>8} {:>8} {:>9} {:>14}\n",
        "policy", "event", "workers", "moved", "ideal", "x ideal", "max/mean flows"
    ));
    for r in &s.rows {
        out.push_str(&format!(
            "{:<10} {:<6} {:>3} -> {:<2} {:>7.1}% {:>7.1}% {:>9.2} {:>14.3}\n",
            r.policy,
            event_name(r.event),
            r.workers_before,
            r.workers_after,
            100.0 * r.flows_moved_fraction,
            100.0 * r.ideal_fraction,
            r.flows_moved_fraction / r.ideal_fraction,
            r.max_over_mean_flows
        ));
    }
    out.push_str(&crate::harness::output::report_footer(&s.run));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_and_flows_out_of_range_are_refused_naming_the_flag() {
        assert!(RemapConfig::default().plan().is_ok());
        let e = RemapConfig { workers: 1, ..RemapConfig::default() }.plan().unwrap_err().to_string();
        assert_eq!(e, "--workers 1 is out of range: 2 to 1000");
        let e = RemapConfig { flows: 0, ..RemapConfig::default() }.plan().unwrap_err().to_string();
        assert_eq!(e, "--flows 0 is out of range: 1 to 10000000");
    }
}

//! `kairos dispatch`'s experiments: flow-affinity dispatch to workers that come and go.
//!
//! The mechanisms (the dispatcher, its steering policies, the worker pool and the
//! virtual-clock models) live in `kairos-dispatch`; this module owns what makes them
//! experiments: each one's configuration and its limits, the order of its rows, its plots and
//! the table a person reads. Every experiment runs in the lab's [`harness`](crate::harness),
//! so every run leaves `<results>/dispatch-<name>/<run-id>/` with `config.json`,
//! `summary.json` and its plots, as the lab's other experiments do.
//!
//! Four are simulations of the real dispatcher and policies, deterministic or on a virtual
//! clock; they measure no time, so no noise probe watches them:
//! - [`remap`]: the flows each policy moves when a worker joins or leaves, against the ideal;
//! - [`skew`]: the busiest worker over the mean, window by window, under Zipf-skewed flows;
//! - [`latency`]: Shenango's synthetic server, latency percentiles per policy, service
//!   distribution and load;
//! - [`step`]: a load step with workers granted on a congestion signal and parked when idle.
//!
//! Two measure on real threads:
//! - [`cold`]: what a flow's state costs a worker when another core wrote it last, or memory
//!   holds it, against when it is warm (the simulations' `cold_ns`);
//! - [`threads`]: the dispatcher and its workers while workers come and go: packets out of
//!   sequence, state moved, a packet's cost.
//!
//! Each configuration's `plan` refuses a value out of range with one line naming the
//! command-line flag that sets it (the configurations are what `kairos dispatch` builds from its
//! flags), before any directory or thread exists.

use std::fmt::Display;

use anyhow::Result;
use kairos_dispatch::latency::{CALIBRATED_COLD_NS, Service};
use serde::Serialize;

use crate::harness::plot::{Scales, XySeries, xy_chart};
use crate::harness::{InvalidConfig, Run};

pub mod cold;
pub mod latency;
pub mod remap;
pub mod skew;
pub mod step;
pub mod threads;

/// The simulated flows and their state, as [`latency`] and [`step`] take them.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    /// Flows, 1-10000000.
    pub flows: usize,
    /// The flows' Zipf exponent, 0 (uniform) to 3.
    pub zipf: f64,
    /// Extra service time of a request whose flow's state is cold on its worker, ns,
    /// 0-1000000.
    pub cold_ns: f64,
    /// The draws' seed.
    pub seed: u64,
}

impl Default for Workload {
    /// The source's 700,000 uniform flows, and the cold miss `kairos dispatch cold` measured.
    fn default() -> Self {
        Self { flows: 700_000, zipf: 0.0, cold_ns: CALIBRATED_COLD_NS, seed: 1 }
    }
}

impl Workload {
    /// The first value out of range, naming its flag.
    fn check(&self) -> Result<(), InvalidConfig> {
        in_range("--flows", self.flows, 1, 10_000_000)?;
        in_range("--zipf", self.zipf, 0.0, 3.0)?;
        in_range("--cold-ns", self.cold_ns, 0.0, 1_000_000.0)
    }
}

/// `--flag V is out of range: LO to HI` unless `value` is in `lo..=hi` (NaN never is).
fn in_range<T: PartialOrd + Display + Copy>(flag: &str, value: T, lo: T, hi: T) -> Result<(), InvalidConfig> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(InvalidConfig::new(format!("{flag} {value} is out of range: {lo} to {hi}")))
    }
}

/// Refuses an empty list, more than `most` (counted in `unit`s), or a load outside 0.01-0.99
/// (a simulated queue at full load has no steady state to measure).
fn check_loads(loads: &[f64], most: usize, unit: &str) -> Result<(), InvalidConfig> {
    if loads.is_empty() || loads.len() > most {
        return Err(InvalidConfig::new(format!("--loads takes 1 to {most} {unit}")));
    }
    match loads.iter().find(|l| !(0.01..=0.99).contains(*l)) {
        Some(bad) => Err(InvalidConfig::new(format!("--loads: {bad} is out of range: 0.01 to 0.99"))),
        None => Ok(()),
    }
}

/// The service distribution the command line names `name`, if any.
pub fn service_named(name: &str) -> Option<Service> {
    Service::ALL.into_iter().find(|s| s.name() == name)
}

/// Draws `series` into the run's directory as `file` and lists it among the run's plots;
/// draws nothing when no point can be drawn (a run shorter than one window), so a run's
/// figures are never lost over a missing picture.
fn chart(
    run: &mut Run<'_>,
    file: &str,
    title: &str,
    axes: (&str, &str),
    scales: Scales,
    series: &[XySeries],
) -> Result<()> {
    let drawable = |&(x, y): &(f64, f64)| {
        x.is_finite() && y.is_finite() && (!scales.log_x || x > 0.0) && (!scales.log_y || y > 0.0)
    };
    if !series.iter().any(|s| s.points.iter().any(drawable)) {
        run.log(&format!("{file}: nothing to draw"));
        return Ok(());
    }
    let path = run.plot(file);
    xy_chart(&path, title, axes.0, axes.1, scales, series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_out_of_range_names_its_flag_and_the_range() {
        assert_eq!(
            in_range("--workers", 1, 2, 1000),
            Err(InvalidConfig::new("--workers 1 is out of range: 2 to 1000"))
        );
        assert!(in_range("--zipf", f64::NAN, 0.0, 3.0).is_err());
        assert_eq!(
            check_loads(&[0.1, 1.5], 100, "phases"),
            Err(InvalidConfig::new("--loads: 1.5 is out of range: 0.01 to 0.99"))
        );
        assert_eq!(check_loads(&[], 100, "phases"), Err(InvalidConfig::new("--loads takes 1 to 100 phases")));
        let w = Workload { flows: 0, ..Workload::default() };
        assert_eq!(w.check(), Err(InvalidConfig::new("--flows 0 is out of range: 1 to 10000000")));
    }
}

//! `kairos sweep`: the grid of forwarding runs behind the source's figures and Kairos's variants.
//!
//! 1. **Maximum rate.** The highest offered rate that the sender achieves (within 5%) and at
//!    which under 2% of the data packets are lost: doubled from 50 kpps until that fails, then
//!    bisected three times; once for the routing configuration (RCU, 1,000 users, CDR 0.01,
//!    rings of 64) and once for the baseline (one user, no FIB, rings of 4096). Rates are
//!    fractions of these (`rate_fractions`); above 1 is overload.
//! 2. **Baseline (Fig. 3).** One user, no FIB, the forwarder's 4096-slot RX ring of Table I, and
//!    1 us of work per packet on the data thread so that it is the bottleneck: average age and
//!    average sender batch against R; the ring variants beside it.
//! 3. **Routing (Fig. 4).** 1,000 users, CDR 0.01 and 0.1, each FIB: average age, data and
//!    control drops, misaddressed against R; per-user age at the highest sustainable rate beside
//!    the Zipf oracle `S + (1/R)(1/p_i - 1/2)`.
//! 4. **Update rate.** CDR from 0.001 to 0.5 at half the maximum rate, RCU against the RW lock
//!    (and the seqlock): where the crossover falls.
//! 5. **Beyond the source.** At CDR 0.1, every rate: the source's configuration against small
//!    rings, drop-oldest, the latest-only slot per user, control first, the seqlock FIB, age
//!    flushing, and all of them together. The report names the freshest per rate and its ratio.
//!
//!    On the UDP and packet backends, as root, with `dpdk-testpmd` installed, DPDK's testpmd
//!    runs the same baseline as a peer forwarder (experiment `peer-baseline`; see
//!    [`crate::peers::testpmd`]) on the same veth, with the same sender and receiver. On the packet
//!    backend Kairos's rows are its run-to-completion forwarder ([`kairos_forward::rtc`]) on
//!    memory-mapped rings, as testpmd's `af_packet` PMD is.
//! 6. **Age-controlled sender.** The baseline with a sender that adapts its rate to the measured
//!    age ([`super::source::AgeControl`]), against the best fixed rate of step 2.
//!
//! The parts: `configs` (the source's configurations and Kairos's variants of them), `grid`
//! (the runs), `analysis` (what the rows show: the checks, the freshest configuration per rate,
//! the per-user ages), `plots`, and `report` (the files and the printed conclusions).
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `config`, `max_rate_pps` (by backend), `rows` (each a
//! [`super::Row`] with `experiment`), `per_user` (rank, measured and oracle age at the highest
//! sustainable rate), `best_per_rate`, `checks`, `peer` (whether the peer forwarder ran, or why
//! not), `plots`.

mod analysis;
mod configs;
mod grid;
mod plots;
mod report;

pub use configs::{BASELINE_WORK_NS, PACKET_IDLE_SPIN_NS};
pub use report::{TABLE_FILE, report, table};

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use self::analysis::{best_per_rate, checks, per_user};
use self::configs::{baseline_variants, variants};
use self::grid::grid;
use self::plots::plots;
use self::report::write_csv;
use super::{Backend, Row};
use crate::harness::{self, Experiment, InvalidConfig, Plan, Run, RunInfo};

/// The grid.
#[derive(Debug, Clone, Serialize)]
pub struct SweepConfig {
    /// The backends the whole grid runs on, in turn (at least one; udp and packet need root).
    pub backends: Vec<Backend>,
    /// Trace rows per run ([`MIN_PACKETS`] to the trace's maximum).
    pub packets: usize,
    /// Users of the routing grid's traces (the baseline's have one).
    pub users: u32,
    /// Control/data ratios of the routing grid; must include 0.01 and 0.1, which the
    /// maximum-rate search and the variants use.
    pub cdrs: Vec<f64>,
    /// Offered rates, as fractions of the backend's maximum rate, each in (0, 10]: above 1 is
    /// overload.
    pub rate_fractions: Vec<f64>,
    /// CDRs of the update-rate sweep.
    pub crossover_cdrs: Vec<f64>,
    /// Rate (fraction of the maximum) of the update-rate sweep.
    pub crossover_fraction: f64,
    /// Interleaved runs of each one-user configuration (1 to 20); the median (by average age)
    /// is kept.
    pub repetitions: usize,
    /// The traces' seed: the same seed draws the same traces.
    pub seed: u64,
}

impl SweepConfig {
    /// The quick preset: the memory backend, 200,000 rows a run, five rates, three repetitions.
    pub fn quick() -> Self {
        Self {
            backends: vec![Backend::Memory],
            packets: 200_000,
            users: 1000,
            cdrs: vec![0.01, 0.1],
            rate_fractions: vec![0.25, 0.5, 0.8, 1.0, 2.0],
            crossover_cdrs: vec![0.001, 0.01, 0.1, 0.5],
            crossover_fraction: 0.5,
            repetitions: 3,
            seed: 1,
        }
    }

    /// The full preset: 400,000 rows a run, ten rates, seven update-rate CDRs, five
    /// repetitions.
    pub fn full() -> Self {
        Self {
            packets: 400_000,
            rate_fractions: vec![0.05, 0.1, 0.25, 0.5, 0.65, 0.8, 0.9, 1.0, 1.5, 2.0],
            crossover_cdrs: vec![0.001, 0.003, 0.01, 0.03, 0.1, 0.2, 0.5],
            repetitions: 5,
            ..Self::quick()
        }
    }

    /// [`SweepConfig::quick`] or [`SweepConfig::full`].
    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }
}

/// A row with the part of the grid it belongs to.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    /// The part of the grid: `max-rate`, `baseline`, `peer-baseline`, `routing`,
    /// `update-rate`, `beyond`, `beyond-baseline` or `age-control`.
    pub experiment: &'static str,
    /// Offered rate as a fraction of the backend's maximum.
    pub load: f64,
    /// The run's row (its fields flattened into this one's in the JSON).
    #[serde(flatten)]
    pub row: Row,
    /// Of a row kept as the median of interleaved runs, the least average age any of them had,
    /// ns: a stall of the machine only adds age, so the least is the configuration's age with
    /// the fewest stalls in it (`None` for a row of one run).
    pub least_avg_age_ns: Option<f64>,
}

/// One user's age at the highest sustainable rate (RW lock, CDR 0.1), beside the Zipf oracle.
#[derive(Debug, Clone, Serialize)]
pub struct PerUser {
    /// The user's Zipf rank, from 1 (the most packets).
    pub rank: usize,
    /// Its measured time-average age, ns.
    pub avg_age_ns: f64,
    /// The oracle's age for it, `S + (1/R)(1/p_i - 1/2)`, ns.
    pub oracle_ns: f64,
}

/// The freshest configuration at one rate.
#[derive(Debug, Clone, Serialize)]
pub struct Best {
    /// `one user` (the baseline grid) or `cdr 0.1` (the routing grid).
    pub grid: &'static str,
    /// The backend.
    pub backend: Backend,
    /// The offered rate, as a fraction of the backend's maximum.
    pub load: f64,
    /// The freshest configuration's label.
    pub best: String,
    /// Its average age, ns.
    pub best_age_ns: f64,
    /// The source's configuration's average age at the same rate, ns.
    pub source_age_ns: f64,
    /// `source_age_ns / best_age_ns`.
    pub gain: f64,
}

/// A check computed from the rows.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What is checked, in a few words.
    pub name: String,
    /// Whether it held.
    pub held: bool,
    /// Whether the check is a claim docs/forwarding.md makes, so a test run fails when it does not
    /// hold; the others are observations, reported either way.
    pub claim: bool,
    /// The figures it was decided on.
    pub detail: String,
}

/// What `kairos sweep` found (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct SweepSummary {
    /// The grid run.
    pub config: SweepConfig,
    /// The maximum rate found, packets per second, by backend (`udp`), with the baseline's
    /// (`udp-baseline`) and the peer forwarder's (`udp-peer`) where they ran.
    pub max_rate_pps: BTreeMap<String, f64>,
    /// Every run, kept medians for repeated configurations.
    pub rows: Vec<SweepRow>,
    /// Per-user age against the oracle at the highest sustainable rate.
    pub per_user: Vec<PerUser>,
    /// The freshest configuration at each rate, per grid and backend.
    pub best_per_rate: Vec<Best>,
    /// What the rows show, claim by claim.
    pub checks: Vec<Check>,
    /// Whether the peer forwarder (dpdk-testpmd) ran, or why not.
    pub peer: String,
    /// Machine, noise, plots and directory.
    #[serde(flatten)]
    pub run: RunInfo,
}

/// Runs the grid `config` describes in the harness, writing `results_root/sweep/<run-id>/`.
pub fn run(config: &SweepConfig, results_root: &Path, log: &dyn Fn(&str)) -> Result<SweepSummary> {
    harness::run(config, results_root, log)
}

/// The forwarding runs on the progress bar besides the grid's own: two maximum-rate searches
/// of about eight probes each, and the age-controlled sender.
const SEARCH_AND_CONTROL_RUNS: usize = 17;

impl SweepConfig {
    /// The forwarding runs of the grid (the maximum-rate searches estimated).
    fn runs(&self) -> usize {
        let fibs = 4;
        let per_backend = |backend: &Backend| {
            let peer = usize::from(*backend != Backend::Memory);
            SEARCH_AND_CONTROL_RUNS
                + self.rate_fractions.len()
                    * ((baseline_variants().len() + peer) * self.repetitions
                        + self.cdrs.len() * fibs
                        + variants().len())
                + self.crossover_cdrs.len() * 3
        };
        self.backends.iter().map(per_backend).sum()
    }

    fn check(&self) -> Result<(), InvalidConfig> {
        if self.backends.is_empty() {
            return Err(InvalidConfig::new("--backend needs at least one of memory, udp, packet"));
        }
        if let Some(b) = self.backends.iter().find(|b| **b != Backend::Memory)
            && !kairos_sys::user::is_root()
        {
            return Err(InvalidConfig::new(format!(
                "--backend {b} needs root (it makes two network namespaces); run as root or use --backend memory"
            )));
        }
        if !(MIN_PACKETS..=kairos_forward::trace::MAX_ROWS).contains(&self.packets) {
            return Err(InvalidConfig::new(format!(
                "--packets must be {MIN_PACKETS} to {}, got {} (a run needs enough updates per user to measure an age)",
                kairos_forward::trace::MAX_ROWS,
                self.packets
            )));
        }
        for needed in ["0.01", "0.1"] {
            if !self.cdrs.iter().any(|c| format!("{c}") == needed) {
                return Err(InvalidConfig::new(format!(
                    "the sweep's CDRs must include {needed} (its maximum-rate search and variants use it)"
                )));
            }
        }
        if !(1..=20).contains(&self.repetitions) {
            return Err(InvalidConfig::new(format!("repetitions must be 1 to 20, got {}", self.repetitions)));
        }
        if self.rate_fractions.iter().any(|f| !(f.is_finite() && *f > 0.0 && *f <= 10.0)) {
            return Err(InvalidConfig::new(
                "rate fractions must be in (0, 10] (fractions of the maximum rate)",
            ));
        }
        Ok(())
    }
}

/// The fewest trace rows a sweep's run replays.
pub const MIN_PACKETS: usize = 1_000;

impl Experiment for SweepConfig {
    const NAME: &'static str = "sweep";
    type Summary = SweepSummary;

    /// The windows around the sweep only, as for `kairos forward`
    /// ([`kairos_metrics::NoiseConfig::around_only`] says why).
    fn noise(&self) -> Option<kairos_metrics::NoiseConfig> {
        Some(kairos_metrics::NoiseConfig::around_only())
    }

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        self.check()?;
        // Measured here (2 cores): a step of the quick sweep in memory (200,000 packets, the
        // median of three runs for the one-user rows) takes about 1.4 s (169 steps in 4 min);
        // over UDP, where the kernel holds the rate near 50-90 kpps and most runs offer a
        // fraction of it, one of 40,000 packets takes about 1 s.
        let seconds_per_packet = if self.backends.iter().any(|b| *b != Backend::Memory) {
            1.0 / 40_000.0
        } else {
            1.4 / 200_000.0
        };
        Ok(Plan::new(self.runs(), seconds_per_packet * self.packets as f64))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<SweepSummary> {
        let (rows, max_rate_pps, peer, traces) = grid(self, run)?;
        let mut info = run.finish();
        let run_dir = run.dir();
        let per_user = per_user(&rows, self, &traces["0.1"]);
        let best_per_rate = best_per_rate(&rows);
        let checks = checks(&rows, self);
        info.plots = plots(&rows, &per_user, run_dir)?;
        write_csv(&rows, run_dir)?;
        run_dir.write_text(TABLE_FILE, &table(&rows))?;
        Ok(SweepSummary {
            config: self.clone(),
            max_rate_pps,
            rows,
            per_user,
            best_per_rate,
            checks,
            peer,
            run: info,
        })
    }
}

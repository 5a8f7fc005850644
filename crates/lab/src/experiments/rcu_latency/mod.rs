//! `kairos rcu-latency`: the source's Table 1 on this machine, then the fix.
//!
//! Sarma and McKenney (USENIX 2004) ran a realtime task beside a workload that queued 1,660 RCU
//! callbacks per grace period and saw its scheduling latency reach 711 us (811 us mean on their
//! base kernel, about 400 us with each of their three fixes). Here the realtime task is a reader
//! of a Kairos RCU domain, as a packet loop is: each period (default 1 ms) it wakes, reads an
//! `RcuCell` a few times, calls `quiescent()`, and records its completion lateness (see
//! [`realtime`]). A writer on the other core makes retire storms: N 256-byte nodes per grace
//! period (1,660 as measured in the source, 30,000 as in its denial-of-service case), waits until
//! they are reclaimed, pauses one period, and repeats.
//!
//! Rows (field `name`): `baseline` (no storm), `inline` (the reader that sees the grace period
//! end frees everything: the problem), `throttle`, `adaptive`, `offload` (reclaimer thread on the
//! other core), `offload-same-core` (reclaimer on the realtime core, which the realtime task
//! preempts), `direct` (the writer frees after a grace period) and `crossbeam-epoch` (the same
//! storm through crossbeam-epoch, whose readers collect garbage when they pin). Each row at each
//! storm size.
//!
//! # Summary fields (stable)
//! `machine` (cores, kernel, `sched_fifo`), `noise` (the probe's windows before and after the
//! whole run and its sampling during it), `config`, `callback_ns` (calibrated cost of one
//! callback: `p50`, `p999`), and `rows`: one object per row and storm with `name`, `storm`,
//! `lateness_ns` {`mean`, `stddev`, `p50`, `p99`, `p999`, `p9999`, `max`} (all runs merged),
//! `wakeup_ns` and `in_task_ns` (the same statistics for the two parts of lateness: waking up,
//! and the time inside the task, where reclamation the task is made to do shows),
//! `p999_per_run_ns`, `p999_median_ns` (what verdicts compare), `callbacks_per_s`,
//! `peak_unreclaimed_bytes`, `longest_reclaim_ns` (the longest single reclamation call on the
//! realtime reader: what it was made to pay), `reclaimer_longest_batch_ns`,
//! `writer_longest_reclaim_ns`, `longest_callback_ns`, `periods`, `overruns`, `sched_fifo`, `noise` (the sampler during
//! the row: `max_gap_ns`, `steal_ns`), `cyclictest_max_us` or `cyclictest_skipped`. `verdicts`
//! compares rows with the baseline.

mod peer;
pub mod realtime;
mod run;
pub mod workload;

use kairos_metrics::LatencySummary;
use serde::Serialize;
use std::time::Duration;

use crate::harness::InvalidConfig;

impl crate::harness::Experiment for RcuLatencyConfig {
    const NAME: &'static str = "rcu-latency";
    type Summary = Summary;

    fn plan(&self) -> Result<crate::harness::Plan, InvalidConfig> {
        self.validate()?;
        // Each row also sets up its domain and drains its backlog: about 0.3 s.
        let rows = run::plan_rows(self).len() * self.repetitions;
        Ok(crate::harness::Plan::new(rows, self.row_duration.as_secs_f64() + 0.3))
    }

    fn noise(&self) -> Option<kairos_metrics::NoiseConfig> {
        Some(run::noise_config(self))
    }

    fn run(&self, run: &mut crate::harness::Run<'_>) -> anyhow::Result<Summary> {
        run::measure(self, run)
    }
}

/// The experiment's knobs. [`RcuLatencyConfig::quick`] and [`RcuLatencyConfig::full`] are the
/// presets the command offers.
#[derive(Debug, Clone, Serialize)]
pub struct RcuLatencyConfig {
    /// How long each row runs, per repetition: at least 100 periods, at most an hour.
    pub row_duration: Duration,
    /// How many times every row runs, 1 to 100 (interleaved, so machine noise spreads over
    /// rows).
    pub repetitions: usize,
    /// The realtime task's period, 1 us to 1 s.
    pub period: Duration,
    /// Storm sizes (callbacks per grace period, each 1 to [`MAX_STORM`]); every row runs at
    /// each.
    pub storms: Vec<usize>,
    /// Extra work per callback, ns, on top of freeing the node (at most 1000000).
    pub callback_work_ns: u64,
    /// RcuCell reads per period (the "packet burst").
    pub reads_per_period: usize,
    /// Core of the realtime task (one that exists here).
    pub realtime_core: usize,
    /// Core of the writer and the offload reclaimer (one that exists here).
    pub housekeeping_core: usize,
    /// `SCHED_FIFO` priority of the realtime task, 1 to 98 (0: do not ask); cyclictest runs
    /// one below it.
    pub fifo_priority: i32,
    /// Throttle: callbacks per reader call (1 to 1000000).
    pub throttle_max_batch: usize,
    /// Throttle and Adaptive: time budget per reader call (1 us up to the period).
    pub budget: Duration,
    /// Nice value of the offload reclaimer thread.
    pub reclaimer_nice: i32,
    /// Run cyclictest beside the inline and offload rows when possible.
    pub cyclictest: bool,
    /// Only these rows, by name (each one of [`ROW_NAMES`]; empty: all).
    pub only: Vec<String>,
}

impl RcuLatencyConfig {
    /// About a minute: 15 rows, 3 runs of 1 s each.
    pub fn quick() -> Self {
        Self { row_duration: Duration::from_secs(1), repetitions: 3, ..Self::full() }
    }

    /// About 6 minutes: 15 rows, 5 runs of 4 s each.
    pub fn full() -> Self {
        let cores = kairos_sys::proc::online_cores();
        Self {
            row_duration: Duration::from_secs(4),
            repetitions: 5,
            period: Duration::from_millis(1),
            storms: vec![1_660, 30_000],
            callback_work_ns: 0,
            reads_per_period: 32,
            realtime_core: cores.saturating_sub(1),
            housekeeping_core: 0,
            fifo_priority: 80,
            throttle_max_batch: 256,
            budget: Duration::from_micros(20),
            reclaimer_nice: 5,
            cyclictest: true,
            only: Vec::new(),
        }
    }

    /// [`RcuLatencyConfig::quick`] or [`RcuLatencyConfig::full`].
    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }

    /// Checks the knobs; the error says which one and how to fix it.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let cores = kairos_sys::proc::online_cores();
        if self.period.is_zero() || self.period > Duration::from_secs(1) {
            return Err(InvalidConfig::new("--period-us must be 1-1000000 (up to one second)"));
        }
        if self.row_duration < self.period * 100 {
            return Err(InvalidConfig::new("--seconds must cover at least 100 periods"));
        }
        if self.row_duration > Duration::from_secs(3_600) {
            return Err(InvalidConfig::new("--seconds must be at most 3600 per row"));
        }
        if !(1..=100).contains(&self.repetitions) {
            return Err(InvalidConfig::new("--runs must be 1-100"));
        }
        // A storm retires this many 256-byte nodes per grace period; the backlog may hold a few
        // storms at once.
        if let Some(&storm) = self.storms.iter().find(|&&s| s == 0 || s > MAX_STORM) {
            return Err(InvalidConfig::new(format!(
                "--storm sizes must be 1-{MAX_STORM} callbacks (a storm of 256-byte nodes must fit in memory several times over), got {storm}"
            )));
        }
        if self.callback_work_ns > 1_000_000 {
            return Err(InvalidConfig::new("--callback-work-ns must be at most 1000000 (1 ms per callback)"));
        }
        if self.realtime_core >= cores || self.housekeeping_core >= cores {
            return Err(InvalidConfig::new(format!(
                "cores must be below {cores} (this machine has {cores})"
            )));
        }
        if !(1..=1_000_000).contains(&self.throttle_max_batch)
            || self.budget.is_zero()
            || self.budget > self.period
        {
            return Err(InvalidConfig::new(
                "--throttle-batch must be 1-1000000 and --budget-us 1 up to the period",
            ));
        }
        if !(1..=98).contains(&self.fifo_priority) && self.fifo_priority != 0 {
            return Err(InvalidConfig::new("--priority must be 1-98, or 0 for no real-time priority"));
        }
        for name in &self.only {
            if !ROW_NAMES.contains(&name.as_str()) {
                return Err(InvalidConfig::new(format!(
                    "unknown row {name:?}; rows are {}",
                    ROW_NAMES.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// Every row name, in report order.
pub const ROW_NAMES: [&str; 8] = [
    "baseline",
    "inline",
    "throttle",
    "adaptive",
    "offload",
    "offload-same-core",
    "direct",
    "crossbeam-epoch",
];

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Configuration name (one of [`ROW_NAMES`]).
    pub name: String,
    /// Callbacks per grace period (0 for the baseline).
    pub storm: usize,
    /// Completion lateness of the realtime task, all runs merged.
    pub lateness_ns: LatencySummary,
    /// Wake-up lateness (woken minus release): the scheduler's and the machine's part.
    pub wakeup_ns: LatencySummary,
    /// Time inside the task's body (reads, quiescent state, reclamation it was made to do).
    pub in_task_ns: LatencySummary,
    /// p99.9 lateness of each run, sorted.
    pub p999_per_run_ns: Vec<u64>,
    /// Median of the runs' p99.9: what the verdicts compare (robust to one noisy run).
    pub p999_median_ns: u64,
    /// Callbacks run per second over the row.
    pub callbacks_per_s: f64,
    /// Most bytes retired and not yet freed at once.
    pub peak_unreclaimed_bytes: u64,
    /// Longest single reclamation call on the realtime reader (crossbeam: longest `pin()`).
    pub longest_reclaim_ns: u64,
    /// Longest run of callbacks on the reclaimer thread.
    pub reclaimer_longest_batch_ns: u64,
    /// Longest run of callbacks on the writer.
    pub writer_longest_reclaim_ns: u64,
    /// Longest single callback the realtime reader ran in a budgeted call.
    pub longest_callback_ns: u64,
    /// Periods measured.
    pub periods: u64,
    /// Periods whose work ended after the next release.
    pub overruns: u64,
    /// Whether the realtime task ran `SCHED_FIFO`.
    pub sched_fifo: bool,
    /// Machine noise during the row.
    pub noise: RowNoise,
    /// cyclictest's max on the realtime core during the row, us.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cyclictest_max_us: Option<u64>,
    /// Why cyclictest did not run for this row (when it was asked to).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cyclictest_skipped: Option<String>,
    /// Tail of the lateness distribution, for the plot: (ns, fraction later).
    #[serde(skip)]
    pub ccdf: Vec<(u64, f64)>,
}

/// The noise sampler's figures for one row.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RowNoise {
    /// Longest gap a low-priority spinning thread saw on any core.
    pub max_gap_ns: u64,
    /// Steal time over all cores.
    pub steal_ns: u64,
    /// Gaps over 100 us, all cores.
    pub gaps_over_100us: u64,
}

/// How the rows compare with the baseline, per storm size.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Storm size.
    pub storm: usize,
    /// Baseline p99.9, ns.
    pub baseline_p999_ns: u64,
    /// inline p99.9 / baseline p99.9.
    pub inline_p999_ratio: f64,
    /// Bound for the bounded policies: 1.5 x baseline p99.9 + 20 us.
    pub bounded_limit_ns: u64,
    /// Per policy: p99.9 and whether it is within the bound.
    pub bounded: Vec<(String, u64, bool)>,
    /// Per budgeted policy: longest reader call, the budget plus one callback (the slowest the
    /// reader ran, at least the calibrated p99.9), and whether it held.
    pub budget_held: Vec<(String, u64, u64, bool)>,
    /// inline's p99.9 time in the task body / the baseline's: reclamation's own share, free of
    /// wake-up noise.
    pub inline_in_task_p999_ratio: f64,
    /// p99.9 time in the task body per row.
    pub in_task_p999_ns: Vec<(String, u64)>,
}

/// How the process was prepared for realtime work.
#[derive(Debug, Clone, Serialize)]
pub struct RealtimeSetup {
    /// `mlockall` succeeded (tried only when SCHED_FIFO is granted).
    pub memory_locked: bool,
    /// The allocator neither trims nor unmaps (no TLB shootdowns from frees).
    pub heap_trimming_disabled: bool,
    /// `/dev/cpu_dma_latency` held at 0 for the run: idle cores poll instead of halting, so a
    /// wake-up never waits for the hypervisor to resume a halted vCPU (needs root).
    pub no_idle_states: bool,
}

/// The largest storm, callbacks per grace period: 10 million 256-byte nodes are 2.5 GB.
pub const MAX_STORM: usize = 10_000_000;

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Experiment name.
    pub experiment: &'static str,
    /// Machine, noise probe over the whole run, plots and results directory.
    #[serde(flatten)]
    pub run: crate::harness::RunInfo,
    /// How the process was prepared.
    pub realtime_setup: RealtimeSetup,
    /// The configuration.
    pub config: RcuLatencyConfig,
    /// Calibrated callback cost: (p50, p99.9) ns.
    pub callback_ns: (u64, u64),
    /// The rows.
    pub rows: Vec<Row>,
    /// Comparisons with the baseline.
    pub verdicts: Vec<Verdict>,
}

impl Summary {
    /// The table a person reads.
    pub fn table(&self) -> String {
        let us = |ns: u64| ns as f64 / 1_000.0;
        let mut out = String::new();
        out.push_str(&format!(
            "rcu-latency: {} | realtime task every {} us on core {}, {} | callback {:.0} ns (p99.9 {:.0} ns)\n",
            self.run.machine.one_line(),
            self.config.period.as_micros(),
            self.config.realtime_core,
            if self.rows.iter().any(|r| r.sched_fifo) { "SCHED_FIFO" } else { "normal priority (not root)" },
            self.callback_ns.0,
            self.callback_ns.1,
        ));
        out.push_str(&format!(
            "{:<18} {:>6} {:>8} {:>8} {:>8} {:>8} {:>21} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9} {:>8}\n",
            "row", "storm", "mean", "stddev", "p99", "p99.9", "p99.9 median [range]", "p99.99", "max", "in-task", "cb/s", "peak KiB", "reclaim", "noise", "cyclic"
        ));
        out.push_str(&format!("{:<18} {:>6} {:>8} {:>8} {:>8} {:>8} {:>21} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9} {:>8}\n",
            "", "", "us", "us", "us", "us", "of runs, us", "us", "us", "p99.9 us", "", "", "max us", "gap us", "max us"));
        for r in &self.rows {
            let l = &r.lateness_ns;
            out.push_str(&format!(
                "{:<18} {:>6} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>21} {:>9.1} {:>9.1} {:>9.1} {:>10.0} {:>10.1} {:>10.1} {:>9.1} {:>8}\n",
                r.name,
                r.storm,
                l.mean / 1_000.0,
                l.stddev / 1_000.0,
                us(l.p99),
                us(l.p999),
                format!(
                    "{:.1} [{:.0}-{:.0}]",
                    us(r.p999_median_ns),
                    us(r.p999_per_run_ns.first().copied().unwrap_or(0)),
                    us(r.p999_per_run_ns.last().copied().unwrap_or(0))
                ),
                us(l.p9999),
                us(l.max),
                us(r.in_task_ns.p999),
                r.callbacks_per_s,
                r.peak_unreclaimed_bytes as f64 / 1_024.0,
                us(r.longest_reclaim_ns),
                us(r.noise.max_gap_ns),
                r.cyclictest_max_us.map_or("-".to_string(), |m| m.to_string()),
            ));
        }
        for v in &self.verdicts {
            out.push_str(&format!(
                "storm {}: median p99.9 of inline = {:.1}x baseline ({:.1} us); bound for bounded policies {:.1} us:",
                v.storm,
                v.inline_p999_ratio,
                us(v.baseline_p999_ns),
                us(v.bounded_limit_ns)
            ));
            for (name, p999, ok) in &v.bounded {
                out.push_str(&format!(" {name} {:.1} us {}", us(*p999), if *ok { "ok" } else { "OVER" }));
            }
            out.push('\n');
            out.push_str(&format!("  time inside the task, p99.9 (reclamation's own share, no wake-up noise): inline = {:.0}x baseline;", v.inline_in_task_p999_ratio));
            for (name, ns) in &v.in_task_p999_ns {
                out.push_str(&format!(" {name} {:.1}", us(*ns)));
            }
            out.push_str(" us\n");
            for (name, longest, bound, ok) in &v.budget_held {
                out.push_str(&format!(
                    "  {name}: longest reader call {:.1} us, budget + one callback {:.1} us: {}\n",
                    us(*longest),
                    us(*bound),
                    if *ok { "held" } else { "EXCEEDED" }
                ));
            }
        }
        out.push_str(&format!(
            "noise: longest gap before {:.1} us, after {:.1} us (a spinning thread, per core); results in {}\n",
            us(self.run.noise.iter().flat_map(|n| &n.before).map(|c| c.max_gap_ns).max().unwrap_or(0)),
            us(self.run.noise.iter().flat_map(|n| &n.after).map(|c| c.max_gap_ns).max().unwrap_or(0)),
            self.run.results_dir.display()
        ));
        out
    }
}

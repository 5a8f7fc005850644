//! `kairos rcu-grace`: how fast grace periods end, that offline readers do not hold them, and
//! that stalled readers are named on time and only then.
//!
//! 1. **Grace-period latency.** A reader pinned to one core works in slices of
//!    `qs_interval` and passes a quiescent state after each; on the other core a writer starts
//!    grace periods (`start`) at random phases and polls (`poll`) until each ends. The latency
//!    should stay under twice the reader's measured reporting interval plus 10 us at p99. The
//!    same again with a second reader registered but offline (asleep in `offline_while`): its
//!    p99 should not move.
//! 2. **Stall detection.** With a threshold of `stall_threshold`, a reader stops passing
//!    quiescent states for `stall_length`; the delay from its last quiescent state to the report
//!    must lie between the threshold and the threshold plus 10%, and the report must name it.
//! 3. **No false reports.** `clean_run` of a reader passing quiescent states every
//!    `qs_interval`, going offline now and then for longer than the threshold; no report allowed.
//!
//! # Summary fields (stable)
//! `machine`, `noise`, `config`, `qs_interval_ns`, `gp_latency_ns`,
//! `gp_latency_with_offline_reader_ns` (latency summaries), `gp_bound_ns`, `gp_within_bound`,
//! `offline_p99_ratio`, `stall_trials` (`reader`, `delay_ns`), `stall_threshold_ns`,
//! `stall_within_10pct`, `clean_run_s`, `false_reports`.

use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo, check_core, check_seconds};
use anyhow::{Context, Result, anyhow};
use kairos_metrics::{LatencyRecorder, LatencySummary, NoiseConfig};
use kairos_rcu::{Domain, DomainConfig, ReclaimPolicy, StallConfig};
use kairos_sys::clock::monotonic_ns;
use kairos_sys::proc::online_cores;
use kairos_sys::thread::pin_current_thread;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The experiment's knobs.
#[derive(Debug, Clone, Serialize)]
pub struct RcuGraceConfig {
    /// Work between two quiescent states of the reader.
    pub qs_interval: Duration,
    /// Grace periods measured per phase (1 to 10000000).
    pub samples: usize,
    /// Stall report threshold: a reader that passes no quiescent state for longer than this
    /// is reported.
    pub stall_threshold: Duration,
    /// How long the stalled reader stalls (longer than `stall_threshold`).
    pub stall_length: Duration,
    /// Stall trials, each stalling a reader once (at most 1000).
    pub stall_trials: usize,
    /// Length of the run without stalls, in which no stall may be reported (0.1 s to a day).
    pub clean_run: Duration,
    /// Core of the reader (one that exists here).
    pub reader_core: usize,
    /// Core of the writer (one that exists here).
    pub writer_core: usize,
}

impl RcuGraceConfig {
    /// About 15 s.
    pub fn quick() -> Self {
        Self { samples: 2_000, stall_trials: 3, clean_run: Duration::from_secs(10), ..Self::full() }
    }

    /// [`RcuGraceConfig::quick`] or [`RcuGraceConfig::full`].
    pub fn preset(quick: bool) -> Self {
        if quick { Self::quick() } else { Self::full() }
    }

    /// About 75 s, with the 60 s clean run.
    pub fn full() -> Self {
        let cores = online_cores();
        Self {
            qs_interval: Duration::from_micros(100),
            samples: 10_000,
            stall_threshold: Duration::from_millis(50),
            stall_length: Duration::from_millis(100),
            stall_trials: 5,
            clean_run: Duration::from_secs(60),
            reader_core: cores.saturating_sub(1),
            writer_core: 0,
        }
    }
}

/// One stall trial.
#[derive(Debug, Clone, Serialize)]
pub struct StallTrial {
    /// The name in the report.
    pub reader: String,
    /// From the reader's last quiescent state to the report, ns.
    pub delay_ns: u64,
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Experiment name.
    pub experiment: &'static str,
    /// Machine, noise around and during the run, and the results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration.
    pub config: RcuGraceConfig,
    /// The reader's measured interval between quiescent states.
    pub qs_interval_ns: LatencySummary,
    /// Grace-period latency, one reader online.
    pub gp_latency_ns: LatencySummary,
    /// Grace-period latency with a second reader registered and offline.
    pub gp_latency_with_offline_reader_ns: LatencySummary,
    /// 2 x median reporting interval + 10 us.
    pub gp_bound_ns: u64,
    /// p99 of both phases within the bound.
    pub gp_within_bound: bool,
    /// p99 with the offline reader / p99 without.
    pub offline_p99_ratio: f64,
    /// The stall threshold, ns.
    pub stall_threshold_ns: u64,
    /// Stall trials.
    pub stall_trials: Vec<StallTrial>,
    /// Every trial reported between the threshold and the threshold plus 10%, naming the reader.
    pub stall_within_10pct: bool,
    /// Length of the clean run, s.
    pub clean_run_s: f64,
    /// Reports during the clean run (must be 0).
    pub false_reports: u64,
}

impl Summary {
    /// The table a person reads.
    pub fn table(&self) -> String {
        let us = |ns: u64| ns as f64 / 1_000.0;
        let mut out = format!("rcu-grace: {}\n", self.run.machine.one_line());
        out.push_str(&format!(
            "reporting interval p50 {:.1} us (p99 {:.1} us); grace period p50/p99/max: {:.1}/{:.1}/{:.1} us; \
             with an offline reader: {:.1}/{:.1}/{:.1} us; bound 2x interval + 10 us = {:.1} us: {}\n",
            us(self.qs_interval_ns.p50),
            us(self.qs_interval_ns.p99),
            us(self.gp_latency_ns.p50),
            us(self.gp_latency_ns.p99),
            us(self.gp_latency_ns.max),
            us(self.gp_latency_with_offline_reader_ns.p50),
            us(self.gp_latency_with_offline_reader_ns.p99),
            us(self.gp_latency_with_offline_reader_ns.max),
            us(self.gp_bound_ns),
            if self.gp_within_bound { "held" } else { "EXCEEDED" }
        ));
        let delays: Vec<String> =
            self.stall_trials.iter().map(|t| format!("{:.2} ms", t.delay_ns as f64 / 1e6)).collect();
        out.push_str(&format!(
            "stall threshold {:.0} ms: reports after {} ({}); clean run {:.0} s: {} false reports\n",
            self.stall_threshold_ns as f64 / 1e6,
            delays.join(", "),
            if self.stall_within_10pct {
                "all within threshold + 10%, reader named"
            } else {
                "OUTSIDE threshold + 10%"
            },
            self.clean_run_s,
            self.false_reports
        ));
        out.push_str(&format!("results in {}\n", self.run.results_dir.display()));
        out
    }
}

/// Busy work for `ns` nanoseconds.
fn work_for(ns: u64) {
    let end = monotonic_ns() + ns;
    while monotonic_ns() < end {
        std::hint::spin_loop();
    }
}

impl RcuGraceConfig {
    /// Checks cores, counts and lengths before anything runs.
    fn validate(&self) -> Result<(), InvalidConfig> {
        check_core(self.reader_core)?;
        check_core(self.writer_core)?;
        if !(1..=10_000_000).contains(&self.samples) {
            return Err(InvalidConfig::new(format!(
                "samples must be 1-10000000 (each is a grace period), got {}",
                self.samples
            )));
        }
        if self.stall_trials > 1_000 {
            return Err(InvalidConfig::new(format!(
                "stall trials must be at most 1000 (each stalls a reader), got {}",
                self.stall_trials
            )));
        }
        check_seconds(self.clean_run.as_secs_f64(), 0.1, 86_400.0, "the clean run", "up to a day")?;
        if self.stall_length <= self.stall_threshold {
            return Err(InvalidConfig::new("a stall must last longer than the threshold that detects it"));
        }
        Ok(())
    }
}

impl Experiment for RcuGraceConfig {
    const NAME: &'static str = "rcu-grace";
    type Summary = Summary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        self.validate()?;
        let grace = self.qs_interval * 2 * self.samples as u32 * 2;
        let stalls = self.stall_length * 2 * self.stall_trials as u32;
        Ok(Plan::new(4, (grace + stalls + self.clean_run).as_secs_f64() / 4.0))
    }

    fn noise(&self) -> Option<NoiseConfig> {
        Some(if self.clean_run < Duration::from_secs(30) {
            NoiseConfig::quick()
        } else {
            NoiseConfig::default()
        })
    }

    fn run(&self, run: &mut Run<'_>) -> Result<Summary> {
        measure(self, run)
    }
}

fn measure(config: &RcuGraceConfig, run: &mut Run<'_>) -> Result<Summary> {
    run.log(&format!("rcu-grace on {}", run.machine().one_line()));
    run.doing("grace periods");
    let (qs_interval, alone) = grace_latency(config, false)?;
    run.step("grace periods with an offline reader");
    let (_, with_offline) = grace_latency(config, true)?;
    run.step("stalls");
    let trials = stall_trials(config)?;
    run.step("clean run");
    run.log(&format!("clean run of {:.0} s", config.clean_run.as_secs_f64()));
    let false_reports = clean_run(config)?;
    run.step("");

    let gp_bound_ns = 2 * qs_interval.p50 + 10_000;
    let threshold_ns = config.stall_threshold.as_nanos() as u64;
    let stall_within_10pct = !trials.is_empty()
        && trials.iter().all(|t| {
            t.reader == "stalled-reader"
                && t.delay_ns >= threshold_ns
                && t.delay_ns <= threshold_ns + threshold_ns / 10
        });
    let summary = Summary {
        experiment: "rcu-grace",
        run: run.finish(),
        config: config.clone(),
        qs_interval_ns: qs_interval,
        gp_latency_ns: alone,
        gp_latency_with_offline_reader_ns: with_offline,
        gp_bound_ns,
        gp_within_bound: alone.p99 <= gp_bound_ns && with_offline.p99 <= gp_bound_ns,
        offline_p99_ratio: with_offline.p99 as f64 / alone.p99.max(1) as f64,
        stall_threshold_ns: threshold_ns,
        stall_trials: trials,
        stall_within_10pct,
        clean_run_s: config.clean_run.as_secs_f64(),
        false_reports,
    };
    run.dir().write_text("table.txt", &summary.table())?;
    Ok(summary)
}

/// Measures grace-period latency against one busy reader (and an offline one if asked).
fn grace_latency(
    config: &RcuGraceConfig,
    with_offline_reader: bool,
) -> Result<(LatencySummary, LatencySummary)> {
    let domain = Domain::with_policy(ReclaimPolicy::Offload).context("creating the domain")?;
    let stop = Arc::new(AtomicBool::new(false));
    let interval_ns = config.qs_interval.as_nanos() as u64;
    let (reader_domain, reader_stop, core) = (domain.clone(), Arc::clone(&stop), config.reader_core);
    let reader = std::thread::spawn(move || {
        let _ = pin_current_thread(core);
        let mut handle = reader_domain.register("busy-reader").expect("free slot");
        let mut intervals = LatencyRecorder::new();
        let mut last = monotonic_ns();
        while !reader_stop.load(Ordering::Relaxed) {
            work_for(interval_ns);
            handle.quiescent();
            let now = monotonic_ns();
            intervals.record(now - last);
            last = now;
        }
        intervals
    });
    let sleeper = with_offline_reader.then(|| {
        let (domain, stop) = (domain.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut handle = domain.register("offline-reader").expect("free slot");
            while !stop.load(Ordering::Relaxed) {
                handle.offline_while(|| std::thread::sleep(Duration::from_millis(10)));
            }
        })
    });
    let _ = pin_current_thread(config.writer_core);
    std::thread::sleep(Duration::from_millis(20));
    let mut latency = LatencyRecorder::new();
    let mut phase = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..config.samples {
        // A pseudo-random phase relative to the reader's slices.
        phase ^= phase << 13;
        phase ^= phase >> 7;
        phase ^= phase << 17;
        work_for(phase % interval_ns.max(1));
        let start = monotonic_ns();
        let ticket = domain.start();
        while !domain.poll(ticket) {
            std::hint::spin_loop();
        }
        latency.record(monotonic_ns() - start);
    }
    stop.store(true, Ordering::Relaxed);
    let intervals = reader.join().map_err(|_| anyhow!("reader thread panicked"))?;
    if let Some(sleeper) = sleeper {
        sleeper.join().map_err(|_| anyhow!("offline reader thread panicked"))?;
    }
    let _ = pin_current_thread(config.writer_core);
    Ok((intervals.summary(), latency.summary()))
}

fn stall_domain(config: &RcuGraceConfig, reports: &Arc<Mutex<Vec<(String, u64)>>>) -> Result<Domain> {
    let sink = Arc::clone(reports);
    let on_stall = Arc::new(move |report: &kairos_rcu::StallReport| {
        let now = monotonic_ns();
        sink.lock().unwrap_or_else(|p| p.into_inner()).push((report.reader.clone(), now));
    });
    Domain::new(DomainConfig {
        stall: Some(StallConfig { threshold: config.stall_threshold, on_stall: Some(on_stall) }),
        ..DomainConfig::with_policy(ReclaimPolicy::Offload)
    })
    .context("creating the domain")
}

/// A reader passes quiescent states, then stalls (online, no quiescent state) for `stall_length`.
fn stall_trials(config: &RcuGraceConfig) -> Result<Vec<StallTrial>> {
    let mut trials = Vec::new();
    for _ in 0..config.stall_trials {
        let reports = Arc::new(Mutex::new(Vec::new()));
        let domain = stall_domain(config, &reports)?;
        let last_qs = Arc::new(AtomicU64::new(0));
        let (reader_domain, reader_last, interval, stall, core) = (
            domain.clone(),
            Arc::clone(&last_qs),
            config.qs_interval,
            config.stall_length,
            config.reader_core,
        );
        std::thread::spawn(move || {
            let _ = pin_current_thread(core);
            let mut handle = reader_domain.register("stalled-reader").expect("free slot");
            let end = monotonic_ns() + 30_000_000;
            while monotonic_ns() < end {
                work_for(interval.as_nanos() as u64);
                handle.quiescent();
            }
            reader_last.store(monotonic_ns(), Ordering::SeqCst);
            std::thread::sleep(stall);
            handle.quiescent();
        })
        .join()
        .map_err(|_| anyhow!("stalled reader panicked"))?;
        let stalled_at = last_qs.load(Ordering::SeqCst);
        let first = reports.lock().unwrap_or_else(|p| p.into_inner()).first().cloned();
        match first {
            Some((reader, at)) => trials.push(StallTrial { reader, delay_ns: at.saturating_sub(stalled_at) }),
            None => trials.push(StallTrial { reader: String::from("(no report)"), delay_ns: 0 }),
        }
    }
    Ok(trials)
}

/// A healthy reader for `clean_run`; returns the number of stall reports (should be 0).
fn clean_run(config: &RcuGraceConfig) -> Result<u64> {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let domain = stall_domain(config, &reports)?;
    let (reader_domain, interval, length, threshold, core) =
        (domain.clone(), config.qs_interval, config.clean_run, config.stall_threshold, config.reader_core);
    std::thread::spawn(move || {
        let _ = pin_current_thread(core);
        let mut handle = reader_domain.register("healthy-reader").expect("free slot");
        let end = monotonic_ns() + length.as_nanos() as u64;
        let mut n = 0u64;
        while monotonic_ns() < end {
            work_for(interval.as_nanos() as u64);
            handle.quiescent();
            n += 1;
            if n.is_multiple_of(5_000) {
                // Blocking for longer than the threshold is fine when offline.
                handle.offline_while(|| std::thread::sleep(threshold * 2));
            }
        }
    })
    .join()
    .map_err(|_| anyhow!("healthy reader panicked"))?;
    Ok(domain.stats().stalls_reported)
}

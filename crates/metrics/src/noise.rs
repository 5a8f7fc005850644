//! The noise probe: how much time the machine itself takes from a spinning thread.
//!
//! On a virtual machine a thread that never blocks still loses the core for microseconds to
//! milliseconds (host interrupts, other guests, the hypervisor). A latency spike in an experiment
//! means little until a reader knows whether the machine made such spikes at the time. The probe
//! answers with three windows:
//!
//! - **before** and **after** the run: one thread pinned to each core spins for `window`, reading
//!   the monotonic clock back to back; every gap between two reads longer than `gap_floor_ns` is
//!   time the thread did not have;
//! - **during** the run: the same spinning, but only for `sample_for` every `sample_every` (a low
//!   duty cycle, default 1%), at normal priority, so it neither starves the system under test nor
//!   is starved by it. Its cost is measured (CPU time of the sampler threads over wall time) and
//!   reported beside the duty cycle. A gap seen during the run may also be the system under test
//!   taking the core, which is why the quiet windows around it matter. An experiment whose
//!   threads own every core and whose figure is a mean made by rare long waits (the forwarding
//!   lab's age) asks for the windows only ([`NoiseConfig::around_only`]): each 1 ms burst takes
//!   a core from the thread on it (on two cores, testpmd's mean age fell by a third to two
//!   thirds without them; Kairos's fell in three of four runs);
//! - **steal**: the kernel's per-core steal time (`/proc/stat`) over each window, the time the
//!   hypervisor gave the core to someone else.
//!
//! The probe needs no privileges. Pinning failures are tolerated (the gap is then per thread,
//! not per core, and `pinned` says so).
use kairos_sys::clock::monotonic_ns;
use kairos_sys::proc::{online_cores, steal_ns_per_core};
use kairos_sys::stoppable_thread::{StoppableThread, ThreadDied};
use kairos_sys::thread::{pin_current_thread, thread_cpu_time_ns};

use crate::latency::{LatencyRecorder, LatencySummary};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[cfg(test)]
mod owner_tests;

/// How the probe measures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NoiseConfig {
    /// Cores to probe (default: every core this process may use).
    pub cores: Vec<usize>,
    /// Length of the quiet windows before and after the run.
    pub window: Duration,
    /// During the run, spin this long (zero: no sampler during the run) ...
    pub sample_for: Duration,
    /// ... once every this long.
    pub sample_every: Duration,
    /// Gaps shorter than this are the cost of the loop itself and are not counted.
    pub gap_floor_ns: u64,
}

impl NoiseConfig {
    /// Short windows for quick runs: 150 ms before and after, 1 ms every 100 ms during.
    pub fn quick() -> Self {
        Self { window: Duration::from_millis(150), ..Self::default() }
    }

    /// The quick windows before and after the run, and no sampler during it.
    pub fn around_only() -> Self {
        Self { sample_for: Duration::ZERO, ..Self::quick() }
    }
}

impl Default for NoiseConfig {
    fn default() -> Self {
        Self {
            cores: (0..online_cores()).collect(),
            window: Duration::from_millis(500),
            sample_for: Duration::from_millis(1),
            sample_every: Duration::from_millis(100),
            gap_floor_ns: 1_000,
        }
    }
}

/// What a spinning thread on one core lost during one window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CoreNoise {
    /// The core probed.
    pub core: usize,
    /// Whether the probing thread could be pinned to it.
    pub pinned: bool,
    /// Time spent spinning, in nanoseconds.
    pub spun_ns: u64,
    /// The longest gap between two clock reads.
    pub max_gap_ns: u64,
    /// Gaps longer than 10 us, 100 us and 1 ms.
    pub gaps_over_10us: u64,
    /// Gaps longer than 100 us.
    pub gaps_over_100us: u64,
    /// Gaps longer than 1 ms.
    pub gaps_over_1ms: u64,
    /// Sum of all gaps above the floor: time the thread did not have.
    pub lost_ns: u64,
    /// Distribution of the gaps above the floor.
    pub gaps: LatencySummary,
    /// Steal time the kernel reported for this core over the window.
    pub steal_ns: u64,
}

/// The sampler that ran during the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DuringNoise {
    /// Fraction of wall time the sampler spins on each core (sample_for / sample_every).
    pub duty_cycle: f64,
    /// Measured CPU time of all sampler threads over wall time times cores probed.
    pub overhead_cpu_fraction: f64,
    /// Wall time the sampler ran, in nanoseconds.
    pub wall_ns: u64,
    /// Gaps per core, over all sampling bursts.
    pub cores: Vec<CoreNoise>,
    /// Why there are no figures: the sampler could not start, or one of its threads died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// True when the experiment asked for no sampler during the run
    /// ([`NoiseConfig::around_only`]); the figures are then empty by design.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_sampled: bool,
}

/// The probe's findings; experiments put it under `"noise"` in their summaries.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NoiseReport {
    /// Quiet window before the run.
    pub before: Vec<CoreNoise>,
    /// Low-duty sampling during the run.
    pub during: DuringNoise,
    /// Quiet window after the run.
    pub after: Vec<CoreNoise>,
    /// The longest gap seen in any window on any core.
    pub max_gap_ns: u64,
    /// Cost of one clock read in the probe loop, in nanoseconds.
    pub clock_read_ns: f64,
}

/// Accumulates the gaps of one core over one or more spinning bursts.
pub(crate) struct GapMeter {
    core: usize,
    pinned: bool,
    floor_ns: u64,
    spun_ns: u64,
    recorder: LatencyRecorder,
    over_10us: u64,
    over_100us: u64,
    over_1ms: u64,
    lost_ns: u64,
}

impl GapMeter {
    /// Pins the calling thread to `core` (best effort: `pinned` says) and starts empty.
    pub(crate) fn new(core: usize, floor_ns: u64) -> Self {
        let pinned = pin_current_thread(core).is_ok();
        Self {
            core,
            pinned,
            floor_ns,
            spun_ns: 0,
            recorder: LatencyRecorder::new(),
            over_10us: 0,
            over_100us: 0,
            over_1ms: 0,
            lost_ns: 0,
        }
    }

    /// Counts one gap between two consecutive clock reads.
    #[inline]
    fn account(&mut self, gap_ns: u64) {
        if gap_ns > self.floor_ns {
            self.recorder.record(gap_ns);
            self.lost_ns += gap_ns;
            self.over_10us += u64::from(gap_ns > 10_000);
            self.over_100us += u64::from(gap_ns > 100_000);
            self.over_1ms += u64::from(gap_ns > 1_000_000);
        }
    }

    /// Spins for `length`, or until `stop` is raised, counting gaps.
    pub(crate) fn spin(&mut self, length: Duration, stop: Option<&AtomicBool>) {
        let start = monotonic_ns();
        let end = start + length.as_nanos() as u64;
        let mut last = start;
        let mut reads = 0u32;
        loop {
            let now = monotonic_ns();
            self.account(now - last);
            last = now;
            reads = reads.wrapping_add(1);
            if now >= end || (reads.is_multiple_of(1024) && stop.is_some_and(|s| s.load(Ordering::Relaxed))) {
                break;
            }
        }
        self.spun_ns += last - start;
    }

    pub(crate) fn finish(self, steal_ns: u64) -> CoreNoise {
        CoreNoise {
            core: self.core,
            pinned: self.pinned,
            spun_ns: self.spun_ns,
            max_gap_ns: self.recorder.max(),
            gaps_over_10us: self.over_10us,
            gaps_over_100us: self.over_100us,
            gaps_over_1ms: self.over_1ms,
            lost_ns: self.lost_ns,
            gaps: self.recorder.summary(),
            steal_ns,
        }
    }
}

fn steal_delta(before: &Option<Vec<u64>>, after: &Option<Vec<u64>>, core: usize) -> u64 {
    match (before, after) {
        (Some(b), Some(a)) => a.get(core).zip(b.get(core)).map_or(0, |(a, b)| a.saturating_sub(*b)),
        _ => 0,
    }
}

/// Spins on every configured core at once for `config.window`.
pub fn measure_window(config: &NoiseConfig) -> Vec<CoreNoise> {
    let steal_before = steal_ns_per_core();
    let meters: Vec<GapMeter> = std::thread::scope(|scope| {
        let handles: Vec<_> = config
            .cores
            .iter()
            .map(|&core| {
                scope.spawn(move || {
                    let mut meter = GapMeter::new(core, config.gap_floor_ns);
                    meter.spin(config.window, None);
                    meter
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let steal_after = steal_ns_per_core();
    meters
        .into_iter()
        .map(|m| {
            let core = m.core;
            m.finish(steal_delta(&steal_before, &steal_after, core))
        })
        .collect()
}

/// The low-duty sampler alone: spins `sample_for` every `sample_every` on each core until
/// [`Sampler::finish`]. [`NoiseProbe`] runs one for the whole run; experiments may run one per
/// configuration as well. Dropping it stops and joins its threads.
#[derive(Debug)]
pub struct Sampler {
    config: NoiseConfig,
    threads: Vec<StoppableThread<(CoreNoise, u64)>>,
    started_ns: u64,
    steal_start: Option<Vec<u64>>,
}

impl Sampler {
    /// Starts one sampling thread per configured core; fails when the system cannot start a
    /// thread (those already started are stopped).
    pub fn start(config: &NoiseConfig) -> std::io::Result<Self> {
        let steal_start = steal_ns_per_core();
        let threads = config
            .cores
            .iter()
            .map(|&core| {
                let (floor, sample_for, every) =
                    (config.gap_floor_ns, config.sample_for, config.sample_every);
                StoppableThread::spawn(format!("noise-sampler-{core}"), move |stop: &AtomicBool| {
                    let cpu_start = thread_cpu_time_ns();
                    let mut meter = GapMeter::new(core, floor);
                    while !stop.load(Ordering::Relaxed) {
                        meter.spin(sample_for, Some(stop));
                        let wake = monotonic_ns() + every.saturating_sub(sample_for).as_nanos() as u64;
                        while !stop.load(Ordering::Relaxed) && monotonic_ns() < wake {
                            std::thread::sleep(Duration::from_millis(5).min(every));
                        }
                    }
                    (meter.finish(0), thread_cpu_time_ns() - cpu_start)
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self { config: config.clone(), threads, started_ns: monotonic_ns(), steal_start })
    }

    /// Stops the sampling threads and reports what they saw, or that one of them died.
    pub fn finish(self) -> Result<DuringNoise, ThreadDied> {
        // Every flag first, so the threads wind down together.
        for thread in &self.threads {
            thread.request_stop();
        }
        let mut results = Vec::with_capacity(self.threads.len());
        for thread in self.threads {
            results.push(thread.stop()?);
        }
        let wall_ns = (monotonic_ns() - self.started_ns).max(1);
        let steal_end = steal_ns_per_core();
        let cpu_ns: u64 = results.iter().map(|(_, cpu)| cpu).sum();
        let cores = results
            .into_iter()
            .map(|(mut c, _)| {
                c.steal_ns = steal_delta(&self.steal_start, &steal_end, c.core);
                c
            })
            .collect();
        Ok(DuringNoise {
            duty_cycle: self.config.sample_for.as_secs_f64() / self.config.sample_every.as_secs_f64(),
            overhead_cpu_fraction: cpu_ns as f64 / (wall_ns as f64 * self.config.cores.len().max(1) as f64),
            wall_ns,
            cores,
            error: None,
            not_sampled: false,
        })
    }
}

impl DuringNoise {
    /// The longest gap any core's sampler saw.
    pub fn max_gap_ns(&self) -> u64 {
        self.cores.iter().map(|c| c.max_gap_ns).max().unwrap_or(0)
    }

    /// Total steal over all cores, in nanoseconds.
    pub fn steal_ns(&self) -> u64 {
        self.cores.iter().map(|c| c.steal_ns).sum()
    }
}

/// A running probe: the "before" window is done and the low-duty sampler is running (unless
/// the configuration asked for none).
///
/// A probe never stops an experiment: a sampler that could not start or died leaves the
/// "during" figures empty and says why in [`DuringNoise::error`].
#[derive(Debug)]
pub struct NoiseProbe {
    config: NoiseConfig,
    before: Vec<CoreNoise>,
    /// `None`: no sampler asked for.
    sampler: Option<Result<Sampler, std::io::Error>>,
    clock_read_ns: f64,
}

impl NoiseProbe {
    /// Measures the quiet window before a run, then starts the sampler. Call [`NoiseProbe::finish`]
    /// after the run.
    pub fn start(config: NoiseConfig) -> Self {
        let clock_read_ns = crate::clock::read_cost_ns(&crate::clock::MonotonicClock, 5);
        let before = measure_window(&config);
        let sampler = (!config.sample_for.is_zero()).then(|| Sampler::start(&config));
        Self { config, before, sampler, clock_read_ns }
    }

    /// Stops the sampler, measures the quiet window after the run, and reports.
    pub fn finish(self) -> NoiseReport {
        let during = match self.sampler {
            None => DuringNoise { not_sampled: true, ..DuringNoise::default() },
            Some(Err(e)) => DuringNoise {
                error: Some(format!("the noise sampler could not start: {e}")),
                ..DuringNoise::default()
            },
            Some(Ok(sampler)) => sampler
                .finish()
                .unwrap_or_else(|e| DuringNoise { error: Some(e.to_string()), ..DuringNoise::default() }),
        };
        let after = measure_window(&self.config);
        let max_gap_ns =
            self.before.iter().chain(&during.cores).chain(&after).map(|c| c.max_gap_ns).max().unwrap_or(0);
        NoiseReport { before: self.before, during, after, max_gap_ns, clock_read_ns: self.clock_read_ns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> NoiseConfig {
        NoiseConfig {
            cores: vec![0],
            window: Duration::from_millis(30),
            sample_for: Duration::from_millis(1),
            sample_every: Duration::from_millis(20),
            gap_floor_ns: 1_000,
        }
    }

    #[test]
    fn a_window_spins_for_its_length_and_accounts_its_gaps() {
        let noise = measure_window(&tiny());
        assert_eq!(noise.len(), 1);
        let core = &noise[0];
        assert!(core.spun_ns >= 30_000_000, "spun {} ns", core.spun_ns);
        assert!(core.lost_ns <= core.spun_ns);
        // The longest gap is one of the gaps summed into `lost_ns` (the histogram rounds up by
        // at most 0.1%).
        assert!(core.max_gap_ns as f64 <= core.lost_ns as f64 * 1.001 + 1.0, "{core:?}");
        assert!(core.gaps_over_1ms <= core.gaps_over_100us && core.gaps_over_100us <= core.gaps_over_10us);
    }

    #[test]
    fn gaps_are_classified_and_the_loop_cost_is_not_counted() {
        let mut meter = GapMeter::new(0, 1_000);
        for gap in [30, 500, 1_000, 5_000, 50_000, 500_000, 3_000_000] {
            meter.account(gap);
        }
        let noise = meter.finish(7);
        assert_eq!(noise.gaps.count, 4, "gaps at or under the floor are the loop itself");
        assert_eq!(noise.lost_ns, 5_000 + 50_000 + 500_000 + 3_000_000);
        assert_eq!((noise.gaps_over_10us, noise.gaps_over_100us, noise.gaps_over_1ms), (3, 2, 1));
        assert!(noise.max_gap_ns >= 2_997_000 && noise.max_gap_ns <= 3_003_000);
        assert_eq!(noise.steal_ns, 7);
    }

    #[test]
    fn the_sampler_runs_at_its_duty_cycle_and_measures_its_cost() {
        let probe = NoiseProbe::start(tiny());
        std::thread::sleep(Duration::from_millis(200));
        let report = probe.finish();
        assert!((report.during.duty_cycle - 0.05).abs() < 1e-9);
        assert!(report.during.wall_ns >= 200_000_000);
        // Spinning 1 ms of wall time in every 20 costs at most about 5% of a core, plus the
        // thread's start-up: sleep overshoot and preemption only lower it (a preempted spin
        // burns less CPU in its millisecond), so the upper bound cannot be reached by noise.
        // The lower bound is only "it measured its cost": a sampler starved of CPU on a loaded
        // machine may use far less than its duty cycle, so its speed is not asserted.
        let overhead = report.during.overhead_cpu_fraction;
        assert!(overhead > 0.0 && overhead < 0.3, "overhead {overhead}");
        assert_eq!(report.before.len(), 1);
        assert_eq!(report.after.len(), 1);
        assert!(report.max_gap_ns >= report.before[0].max_gap_ns);
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["during"]["overhead_cpu_fraction"].is_number());
        assert!(json["during"].get("not_sampled").is_none(), "it was sampled");
    }

    #[test]
    fn around_only_starts_no_sampler_and_says_so() {
        let probe = NoiseProbe::start(NoiseConfig { sample_for: Duration::ZERO, ..tiny() });
        assert!(probe.sampler.is_none(), "no sampler thread was started");
        let report = probe.finish();
        assert!(report.during.not_sampled && report.during.error.is_none());
        assert!(report.during.cores.is_empty());
        assert_eq!((report.before.len(), report.after.len()), (1, 1), "the windows around it were measured");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["during"]["not_sampled"], true);
        assert_eq!(NoiseConfig::around_only().sample_for, Duration::ZERO);
    }
}

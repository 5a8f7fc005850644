//! `kairos fd accuracy`: how often the detectors suspect a member that is alive, against the
//! threshold, idle and under load, with every false suspicion set against the stall watch.
//!
//! A group of `kairos fd member` processes ([`kairos_launch::fd_group`]) runs for `seconds` per load
//! with nothing failing. Each member runs Kairos's detector at every threshold of
//! `thresholds_us` on the same heartbeats (one publishes the table, the others only record),
//! and the peers (phi accrual, SWIM); every suspicion is a mistake. Per detector and threshold,
//! over every ordered pair of members (Chen, Toueg and Aguilera's metrics):
//!
//! - `query_accuracy`: the probability that a query at a random time finds the member trusted
//!   (1 less the time suspected over the time observed);
//! - `mistake_rate_per_s`: mistakes per second of a pair (the inverse of the mistake
//!   recurrence time);
//! - `mistake_duration_us`: the mean time a mistake lasts.
//!
//! During each load a stall watch ([`kairos_metrics::stall`], `SCHED_FIFO` 99) runs on every
//! core, waking every `stall_period_us`. A mistake is explained when a stall it saw overlaps
//! the silence that caused it (from a heartbeat period before the last fresh heartbeat to the
//! suspicion); a stall seen at a wake-up due at `due` is taken to have begun as early as one
//! watch period before (the previous wake-up was on time, the one at `due` was not: the core
//! was taken somewhere in between). The watch samples: a stall that begins and ends between
//! two of its wake-ups escapes it. So the members time their own threads too
//! ([`kairos_fd::held`]): a stretch of more than 50 us in which a member's loop or
//! application was due and kept from its work (a wake-up late after a sleep, a pass off the CPU
//! by the thread's CPU clock, or a pass long in the socket's system calls, kernel work in the
//! thread's context; a pass long in the member's own code never counts). A mistake is also
//! explained when one thread of the suspected member lost, inside the silence, at least half
//! the threshold (its next heartbeat had to be about a threshold late), where nothing of the
//! experiment outranks the members' threads (every loop `SCHED_FIFO` and pinned, a core each,
//! and not on the lane, whose nodes run above the members). `mistakes_with_stall` counts the
//! mistakes either explains, `mistakes_with_held` those only the suspected member's threads
//! saw. Every member counts suspicions in one window, which ends before the first of them could
//! end its run (so none counts another's stopping). The loads: `idle`; `stress` (`stress-ng`, a
//! CPU worker per core and an I/O worker);
//! `flood` (on the testbed only: an `iperf3` UDP flood between two hosts, in the bulk class the
//! heartbeats' lane class has priority over).
//!
//! The parts: `measure` (the loads, one group run each), `mistakes` (each suspicion set against
//! the stalls, and the rows from them) and `report` (the table printed without `--json`).
//!
//! # Summary fields (stable)
//! `rows` (`detector`, `threshold_us`, `load`, `query_accuracy`, `mistake_rate_per_s`,
//! `mistake_duration_us`, `mistakes`, `mistakes_with_stall`, `mistakes_with_held`,
//! `unexplained`, `observed_s`),
//! `recommended_threshold_us`, `goal` (no unexplained mistake at the recommended threshold),
//! `loads` (per load: the stall watch's stalls, whether it was real-time, whether the members'
//! held stretches count (`held_explains`), each member's loop figures (`held_off`,
//! `long_own_work_passes` among them), and `unexplained_causes`: where the silences of the unexplained mistakes at the
//! recommended threshold came from, told by the heartbeat that ended each), `skipped`, `network`, `config`, `machine`, `noise`, `results_dir`. Files:
//! `summary.json`, `stalls_<load>.csv` (every stall the watch saw), `mistakes_<load>.csv`
//! (Kairos's mistakes at the recommended threshold, each with the nearest stall and, when only
//! the suspected member's threads saw it, `held_kind` and `held_lost_us`), and per load
//! the members' reports and logs.

mod measure;
mod mistakes;
mod report;

pub use self::report::report;

use std::path::PathBuf;

use anyhow::Result;
use kairos_launch::fd_group::Network;
use serde::{Deserialize, Serialize};

use crate::experiments::fd_detect::RECOMMENDED_THRESHOLD_US;
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// A load the group runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Nothing else.
    Idle,
    /// `stress-ng` on every core.
    Stress,
    /// An `iperf3` UDP flood between two hosts of the testbed.
    Flood,
}

/// What `fd accuracy` runs.
#[derive(Debug, Clone, Serialize)]
pub struct AccuracyConfig {
    /// The `kairos` executable the members run.
    pub exe: PathBuf,
    /// Members, 2 to 8.
    pub members: usize,
    /// Heartbeat period, us (10 to 1000000).
    pub period_us: u64,
    /// The thresholds Lambda, us: 1 to 32 of them, each at most 10000000.
    pub thresholds_us: Vec<u64>,
    /// The threshold the table is published with (and docs/detector.md recommends), us.
    pub recommended_us: u64,
    /// Seconds measured per load (1 to 86400).
    pub seconds: f64,
    /// Seconds run before measuring (the peers' warm-up), 0 to 600.
    pub warmup_seconds: f64,
    /// The loads, one group run each (at least one).
    pub loads: Vec<Load>,
    /// Where the members run (namespaces and the lane need root).
    pub network: Network,
    /// The first member's UDP port.
    pub base_port: u16,
    /// The member loops' `SCHED_FIFO` priority (0: none; asked only as root).
    pub fifo_priority: i32,
    /// Pin each member to a core (member `i` to core `i` modulo the cores).
    pub pin: bool,
    /// The demonstration application's bump period, us (the contract: at most a third of the
    /// period).
    pub app_bump_us: u64,
    /// The stall watch's period, us (10 to 1000000).
    pub stall_period_us: u64,
    /// Wake-ups later than this are stalls, us.
    pub stall_threshold_us: u64,
    /// The members' loops time the interrupt handlers run on their cores (a diagnosis).
    pub time_interrupts: bool,
}

impl AccuracyConfig {
    /// A member per core (2 or 3), T = 100 us, Lambda from 5 us to 5 ms; 20 s per load with
    /// `quick`, else 10 minutes.
    pub fn preset(quick: bool, exe: PathBuf) -> Self {
        let network = Network::best();
        let mut loads = vec![Load::Idle, Load::Stress];
        if network.testbed() {
            loads.push(Load::Flood);
        }
        Self {
            exe,
            // One member per core: a member sharing a core with another's loop and application
            // is late whenever they run (three members on two cores: 80 mistakes a second at
            // 200 us against 5 for two).
            members: kairos_sys::proc::online_cores().clamp(2, 3),
            period_us: 100,
            thresholds_us: vec![5, 10, 20, 50, 100, 150, 200, 300, 500, 1_000, 2_000, 5_000],
            recommended_us: RECOMMENDED_THRESHOLD_US,
            seconds: if quick { 20.0 } else { 600.0 },
            warmup_seconds: 2.0,
            loads,
            network,
            base_port: 17_500,
            fifo_priority: 70,
            pin: true,
            app_bump_us: kairos_launch::fd_group::default_app_bump_us(network, 100),
            stall_period_us: 200,
            stall_threshold_us: 50,
            // A diagnosis, not the default: the tracing lengthens the passes it explains.
            time_interrupts: false,
        }
    }
}

/// One detector (and threshold) under one load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccuracyRow {
    /// The detector.
    pub detector: String,
    /// Kairos's threshold Lambda, us (peers: none).
    pub threshold_us: Option<u64>,
    /// The load.
    pub load: Load,
    /// Probability that a query finds a live member trusted.
    pub query_accuracy: f64,
    /// Mistakes per second of a pair of members.
    pub mistake_rate_per_s: f64,
    /// Mean length of a mistake, us (none without mistakes).
    pub mistake_duration_us: Option<f64>,
    /// Mistakes.
    pub mistakes: u64,
    /// Mistakes a stall explains (of those kept whole): one the watch saw, or a thread of the
    /// suspected member kept from its work for half the threshold inside the silence.
    pub mistakes_with_stall: u64,
    /// ... of them, those only the suspected member's threads saw.
    pub mistakes_with_held: u64,
    /// Mistakes no stall explains (of those kept whole).
    pub unexplained: u64,
    /// Pair-seconds observed.
    pub observed_s: f64,
}

/// One member's loop during one load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberFigures {
    /// The member.
    pub member: u64,
    /// Its loop ran at `SCHED_FIFO`.
    pub realtime: bool,
    /// Heartbeats sent and received.
    pub heartbeats_sent: u64,
    /// Heartbeats received.
    pub heartbeats_received: u64,
    /// Heartbeats with a counter not newer than the last.
    pub stale_heartbeats: u64,
    /// Sends refused.
    pub send_errors: u64,
    /// Wake-ups more than 50 us late.
    pub late_wakeups: u64,
    /// Stretches its loop or application was due and kept from its work for more than 50 us
    /// (off the CPU, in the kernel's calls, or in interrupt handlers).
    pub held_off: u64,
    /// Of those, the stretches lost mostly in interrupt handlers (only with the interrupt
    /// clock, `--interrupt-clock`).
    #[serde(default)]
    pub held_in_interrupts: u64,
    /// The loop's time in interrupt handlers over the run, ms (0 without the interrupt clock).
    #[serde(default)]
    pub interrupt_ms: f64,
    /// Loop passes longer than 50 us in the member's own work (not stalls).
    pub long_own_work_passes: u64,
    /// The longest of those, us.
    #[serde(default)]
    pub worst_own_work_us: f64,
    /// Asked to time its loop's interrupt handlers (`--interrupt-clock`), why it could not
    /// (or only in part); absent where it did, or was not asked.
    #[serde(default)]
    pub interrupts_untimed: Option<String>,
    /// The latest wake-up, us.
    pub worst_wake_late_us: f64,
    /// On the lane: heartbeats a newer one replaced before the node took them (its outbox
    /// still held the last packet at a round).
    pub lane_beats_replaced: Option<u64>,
}

/// Where the silences of unexplained mistakes came from, told by the heartbeat that ended each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Causes {
    /// The ending heartbeat was sent after the deadline: the sender was late.
    pub sender_late: u64,
    /// It was sent before the deadline and received after: late on the way (the sender's
    /// queueing discipline, the bridge, the kernel's receive work).
    pub late_on_the_way: u64,
    /// Heartbeats with an unchanged counter came in the silence: the application was late.
    pub stale_counter: u64,
    /// Heartbeats are missing from the silence (sequence numbers skipped): lost.
    pub lost: u64,
    /// No heartbeat ended it (still open at the end).
    pub open: u64,
}

/// What one load saw.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadFigures {
    /// The load.
    pub load: Load,
    /// The stall watch ran at `SCHED_FIFO` 99 on every core.
    pub stall_watch_realtime: bool,
    /// The members' held stretches count as stalls (every loop real-time and pinned, a core
    /// each, no lane nodes above them).
    pub held_explains: bool,
    /// Stalls it saw, over every core.
    pub stalls: usize,
    /// The longest, us.
    pub longest_stall_us: f64,
    /// The members' loops.
    pub members: Vec<MemberFigures>,
    /// Where the silences of Kairos's unexplained mistakes at the recommended threshold came
    /// from.
    pub unexplained_causes: Causes,
}

/// The acceptance goal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Goal {
    /// The recommended threshold, us.
    pub threshold_us: u64,
    /// Kairos's mistakes at it that no stall explains, over every load.
    pub unexplained: u64,
    /// Whether there were none.
    pub met: bool,
}

/// A load not run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SkippedLoad {
    /// The load.
    pub load: Load,
    /// Why.
    pub reason: String,
}

/// What `fd accuracy` found.
#[derive(Debug, Clone, Serialize)]
pub struct AccuracySummary {
    /// Machine, noise, results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration.
    pub config: AccuracyConfig,
    /// Where the members ran.
    pub network: Network,
    /// One row per detector, threshold and load.
    pub rows: Vec<AccuracyRow>,
    /// The threshold docs/detector.md recommends, us.
    pub recommended_threshold_us: u64,
    /// No unexplained mistake at it.
    pub goal: Goal,
    /// Per load: stalls and loops.
    pub loads: Vec<LoadFigures>,
    /// Loads not run.
    pub skipped: Vec<SkippedLoad>,
}

impl Experiment for AccuracyConfig {
    const NAME: &'static str = "fd-accuracy";
    type Summary = AccuracySummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        if !(2..=8).contains(&self.members) {
            return Err(InvalidConfig::new(format!("--members {} is out of range: 2 to 8", self.members)));
        }
        if !(10..=1_000_000).contains(&self.period_us) {
            return Err(InvalidConfig::new(format!(
                "--period-us {} is out of range: 10 to 1000000",
                self.period_us
            )));
        }
        if self.thresholds_us.is_empty()
            || self.thresholds_us.len() > 32
            || self.thresholds_us.iter().any(|&t| t > 10_000_000)
        {
            return Err(InvalidConfig::new(
                "--thresholds-us takes 1 to 32 thresholds of at most 10000000 us",
            ));
        }
        crate::harness::check_seconds(
            self.seconds,
            1.0,
            86_400.0,
            "--seconds",
            "a second holds 10,000 periods",
        )?;
        crate::harness::check_seconds(
            self.warmup_seconds,
            0.0,
            600.0,
            "the warm-up",
            "the peers learn the period",
        )?;
        if self.loads.is_empty() {
            return Err(InvalidConfig::new("give at least one load"));
        }
        if self.network.testbed() && !kairos_sys::user::is_root() {
            return Err(InvalidConfig::new(
                "--network namespaces and lane need root (the testbed makes network namespaces)",
            ));
        }
        if !(10..=1_000_000).contains(&self.stall_period_us) {
            return Err(InvalidConfig::new(format!(
                "--stall-period-us {} is out of range: 10 to 1000000",
                self.stall_period_us
            )));
        }
        Ok(Plan::new(self.loads.len(), self.seconds + self.warmup_seconds + 2.0))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<AccuracySummary> {
        measure::run_loads(self, run)
    }
}

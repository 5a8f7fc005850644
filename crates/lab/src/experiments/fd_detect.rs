//! `kairos fd detect`: how long after a failure the group knows, for Kairos's detector and its
//! peers measured in the same run on the same heartbeats.
//!
//! A group of `kairos fd member` processes ([`kairos_launch::fd_group`]: on the lane's testbed as
//! root, on loopback otherwise) runs Kairos's detector at the recommended threshold, phi
//! accrual (Akka's defaults, and tuned to the period) and SWIM (`foca`'s LAN defaults, and a
//! thousandth of them, scaled with a period above 100 us). Each trial waits until every
//! member trusts every other (the group has settled), fails one member (in turn), and reads
//! the alive tables until each awaited detector of every other member has noticed, then
//! undoes the failure:
//!
//! - `kill`: SIGKILL to the member's process; undone by starting it again (a new incarnation);
//! - `link_down`: its host's veth down (`ip link set down`, root only); undone by up;
//! - `app_hang`: its application stops bumping the liveness counter while its node runs on;
//!   undone by bumping again.
//!
//! Detection time is from the failure's time stamp (taken just before the signal, the `ip`
//! line or the pause) to when a member's loop noticed (what an application reading the table
//! would see first), `CLOCK_MONOTONIC` on both sides: to the first member, and to the last.
//! The fast detectors (Kairos, tuned phi, aggressive SWIM) are measured in `trials` trials per
//! failure; the slow ones (Akka's defaults, SWIM's LAN defaults), which take seconds, in
//! `slow_trials` more. SWIM probes the member's process, so a hung application behind a live
//! loop is not detected by it: its `app_hang` rows say so.
//!
//! A trial in which an observer's awaited detector already suspected the victim when it
//! failed (a mistake that began in the milliseconds between the group's settling and the
//! failure) is undone and redone: that verdict does not change when the failure comes, so the
//! failure's detection is not seen, and its time is not the failure's (`redone` counts them).
//!
//! # Summary fields (stable)
//! `rows` (`detector`, `settings`, `failure`, `trials`, `detected`, `detection_us` {`p50`,
//! `p99`, `max`} to the first member, `detection_all_us` to every member, `redone`, `note`),
//! `skipped` (failures not run, with the reason), `goal` (Kairos's p99 after `kill` against
//! 400 us),
//! `network`, `config`, `machine`, `noise`, `results_dir`. Files: `summary.json`,
//! `trials.csv`, `members/` (the members' logs).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kairos_fd::Row;
use kairos_fd::member::{KAIROS, PHI_AKKA, PHI_TUNED, SWIM_AGGRESSIVE, SWIM_LAN};
use kairos_launch::fd_group::{Cluster, ClusterSettings, Network};
use kairos_sys::clock::monotonic_ns;
use serde::{Deserialize, Serialize};

use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// The threshold Lambda docs/detector.md recommends for a 100 us period, us. It needs a machine that
/// keeps that period: on a 2-vCPU virtual machine where a timed wake-up cost 21 us of CPU, the
/// two members of `fd detect` that share a core sent a heartbeat only every 480 us or so, and
/// no threshold near this one held there (the root tests run at 1 ms and 5 ms instead:
/// `crates/cli/tests/cli/fd.rs`).
pub const RECOMMENDED_THRESHOLD_US: u64 = 200;
/// The same on the lane, where a heartbeat also waits for its node's release and the
/// receiving node's delivery, wake-ups of node threads that share the cores with the members
/// here: at 200 us three members on two cores did not settle (`fd detect --quick --network
/// lane --threshold-us 200` ends with the row of a member suspected thousands of times), at
/// 1,000 us they did.
pub const LANE_RECOMMENDED_THRESHOLD_US: u64 = 1_000;

/// The recommended threshold on `network`, us.
pub fn recommended_threshold_us(network: Network) -> u64 {
    match network {
        Network::Lane => LANE_RECOMMENDED_THRESHOLD_US,
        Network::Loopback | Network::Namespaces => RECOMMENDED_THRESHOLD_US,
    }
}

/// A failure the experiment makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// SIGKILL of the member's process.
    Kill,
    /// Its host's link down.
    LinkDown,
    /// Its application stops bumping the counter.
    AppHang,
}

impl Failure {
    /// Every failure, in the order run.
    pub const ALL: [Failure; 3] = [Failure::Kill, Failure::LinkDown, Failure::AppHang];
}

/// A detector as the experiment reads it from the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Watched {
    name: &'static str,
    /// `None`: Kairos's own verdict; `Some(i)`: peer slot `i`.
    slot: Option<usize>,
    slow: bool,
    /// Whether it can see a hung application.
    sees_hang: bool,
}

const WATCHED: [Watched; 5] = [
    Watched { name: KAIROS, slot: None, slow: false, sees_hang: true },
    Watched { name: PHI_TUNED, slot: Some(1), slow: false, sees_hang: true },
    Watched { name: SWIM_AGGRESSIVE, slot: Some(3), slow: false, sees_hang: false },
    Watched { name: PHI_AKKA, slot: Some(0), slow: true, sees_hang: true },
    Watched { name: SWIM_LAN, slot: Some(2), slow: true, sees_hang: false },
];

impl Watched {
    fn noticed(&self, row: &Row) -> Option<u64> {
        match self.slot {
            None => row.noticed_ns,
            Some(i) => Some(row.peers_noticed_ns[i]).filter(|&n| n != 0),
        }
    }
}

/// What `fd detect` runs.
#[derive(Debug, Clone, Serialize)]
pub struct DetectConfig {
    /// The `kairos` executable the members run.
    pub exe: PathBuf,
    /// Members of the group, 3 to 8.
    pub members: usize,
    /// Heartbeat period, us (10 to 1000000).
    pub period_us: u64,
    /// Kairos's threshold Lambda, us (0 to 10000000).
    pub threshold_us: u64,
    /// Trials per failure for the fast detectors (1 to 10000).
    pub trials: usize,
    /// Trials per failure for the slow ones, seconds each (0 to 1000).
    pub slow_trials: usize,
    /// The failures to make (at least one; `link_down` alone needs the testbed).
    pub failures: Vec<Failure>,
    /// Where the members run (namespaces and the lane need root).
    pub network: Network,
    /// The first member's UDP port (1024 or more, with room for a port per member below
    /// 65536).
    pub base_port: u16,
    /// The member loops' `SCHED_FIFO` priority (0: none; asked only as root).
    pub fifo_priority: i32,
    /// Pin each member to a core (member `i` to core `i` modulo the cores).
    pub pin: bool,
    /// The demonstration application's bump period, us (the contract: at most a third of the
    /// period).
    pub app_bump_us: u64,
    /// How long the group must stay settled before a failure, ms.
    pub settle_ms: u64,
}

impl DetectConfig {
    /// Three members, T = 100 us at the recommended Lambda; 20 trials per failure and 2 slow
    /// ones with `quick`, else 100 and 10.
    pub fn preset(quick: bool, exe: PathBuf) -> Self {
        let network = Network::best();
        Self {
            exe,
            members: 3,
            period_us: 100,
            threshold_us: RECOMMENDED_THRESHOLD_US,
            trials: if quick { 20 } else { 100 },
            slow_trials: if quick { 2 } else { 10 },
            failures: Failure::ALL.to_vec(),
            network,
            base_port: 17_400,
            fifo_priority: 70,
            pin: true,
            app_bump_us: kairos_launch::fd_group::default_app_bump_us(network, 100),
            settle_ms: 100,
        }
    }

    fn cluster(&self) -> ClusterSettings {
        ClusterSettings {
            exe: self.exe.clone(),
            members: self.members,
            period_us: self.period_us,
            threshold_us: self.threshold_us,
            sweep_us: Vec::new(),
            network: self.network,
            base_port: self.base_port,
            fifo_priority: self.fifo_priority,
            pin: self.pin,
            app_bump_us: self.app_bump_us,
            run_for_ms: None,
            measure_after_ms: 0,
            // Detection is timed from the failure, not explained: nothing to name.
            time_interrupts: false,
        }
    }

    fn runs(&self) -> Vec<Failure> {
        self.failures.iter().copied().filter(|f| *f != Failure::LinkDown || self.network.testbed()).collect()
    }
}

/// Detection times' percentiles, us.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// Of `samples_us` (`None` for none).
    pub fn of(samples_us: &[f64]) -> Option<Self> {
        if samples_us.is_empty() {
            return None;
        }
        let mut s = samples_us.to_vec();
        s.sort_by(f64::total_cmp);
        let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Some(Self { p50: rank(0.5), p99: rank(0.99), max: s[s.len() - 1] })
    }
}

/// One detector after one kind of failure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DetectRow {
    /// The detector.
    pub detector: String,
    /// Its settings, in words.
    pub settings: String,
    /// The failure.
    pub failure: Failure,
    /// Trials it was measured in.
    pub trials: usize,
    /// Trials in which a member noticed before the trial's time ran out.
    pub detected: usize,
    /// Failure to the first member noticing, us.
    pub detection_us: Option<Percentiles>,
    /// Failure to every member noticing, us (trials where all did).
    pub detection_all_us: Option<Percentiles>,
    /// The first member's detection measured from the last fresh heartbeat it had from the
    /// victim instead of the failure's time stamp, us: the detector's own part, whatever the
    /// failure took to stop the heartbeats.
    pub after_last_heartbeat_us: Option<Percentiles>,
    /// How long after the failure's time stamp the victim's last fresh heartbeat still
    /// arrived (the latest over the members), us: what the failure took to take effect (a
    /// link going down takes `ip` and the kernel hundreds of microseconds to milliseconds).
    pub last_heartbeat_after_failure_us: Option<Percentiles>,
    /// Trials of this failure redone because an observer already suspected the victim when
    /// it failed (a mistake, not the failure; the same for every detector's row).
    #[serde(default)]
    pub redone: usize,
    /// Why a row has no figures, when it has none.
    pub note: Option<String>,
}

/// A failure that was not run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Skipped {
    /// The failure.
    pub failure: Failure,
    /// Why.
    pub reason: String,
}

/// The acceptance goal: Kairos's p99 after `kill` under 400 us at T = 100 us.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Goal {
    /// Kairos's p99 detection (first member) after `kill`, us.
    pub kill_p99_us: Option<f64>,
    /// The goal, us.
    pub target_us: f64,
    /// Whether it was met.
    pub met: bool,
}

/// What `fd detect` found.
#[derive(Debug, Clone, Serialize)]
pub struct DetectSummary {
    /// Machine, noise, results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration.
    pub config: DetectConfig,
    /// Where the members ran.
    pub network: Network,
    /// One row per detector and failure.
    pub rows: Vec<DetectRow>,
    /// Failures not run.
    pub skipped: Vec<Skipped>,
    /// The acceptance goal.
    pub goal: Goal,
}

#[derive(Debug, Serialize)]
struct TrialRecord {
    failure: Failure,
    trial: usize,
    slow: bool,
    victim: u64,
    detector: &'static str,
    observer: u64,
    detection_us: Option<f64>,
    /// Kairos only: the observer's last fresh heartbeat from the victim, from the failure, us
    /// (negative: before it).
    last_fresh_us: Option<f64>,
    /// Kairos only: the suspicion's deadline (last fresh + T + Lambda), from the failure, us.
    deadline_us: Option<f64>,
}

fn settings_of(name: &str, c: &DetectConfig) -> String {
    match name {
        KAIROS => format!(
            "T {} us, Lambda {} us, counter bumped every {} us",
            c.period_us, c.threshold_us, c.app_bump_us
        ),
        PHI_AKKA => "Akka defaults: threshold 8, min std 100 ms, pause 3 s, first estimate 1 s".into(),
        PHI_TUNED => format!(
            "threshold 8, min std {} us, pause {} us, first estimate {} us",
            c.period_us / 4,
            c.threshold_us,
            c.period_us
        ),
        SWIM_LAN => format!("foca Config::new_lan({}): probe 1 s, rtt 500 ms", c.members),
        _ => {
            let swim = kairos_fd::swim::SwimSettings::aggressive(c.members, c.period_us * 1_000).config;
            let base_us = kairos_fd::swim::AGGRESSIVE_BASE_PERIOD_NS / 1_000;
            format!(
                "foca new_lan({}) / 1000{}: probe {} us, rtt {} us",
                c.members,
                if c.period_us > base_us {
                    format!(" x {} (T / {base_us} us)", c.period_us as f64 / base_us as f64)
                } else {
                    String::new()
                },
                swim.probe_period.as_micros(),
                swim.probe_rtt.as_micros()
            )
        }
    }
}

/// Waits until every member trusts every other in every detector `awaited` looks at, and has
/// for `settle`.
fn settle(cluster: &mut Cluster, awaited: &[Watched], settle: Duration, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    let mut calm_since: Option<Instant> = None;
    let mut why = String::new();
    loop {
        cluster.check_running()?;
        let now = monotonic_ns();
        let mut calm = true;
        'all: for o in 0..cluster.len() {
            for s in (0..cluster.len()).filter(|&s| s != o) {
                let Some(row) = cluster.row(o, s) else {
                    calm = false;
                    why = format!("member {}'s table is being written", cluster.id(o));
                    break 'all;
                };
                let stale = now.saturating_sub(row.last_fresh_ns) > 20_000_000;
                if let Some(w) = awaited.iter().find(|w| w.noticed(&row).is_some()) {
                    why = format!(
                        "member {} still suspects member {} ({}; its row: last heartbeat {:.1} ms ago, last fresh {:.1} ms ago, incarnation {}, counter {}, {} suspicions)",
                        cluster.id(o),
                        cluster.id(s),
                        w.name,
                        now.saturating_sub(row.last_heartbeat_ns) as f64 / 1e6,
                        now.saturating_sub(row.last_fresh_ns) as f64 / 1e6,
                        row.incarnation,
                        row.counter,
                        row.suspicions
                    );
                    calm = false;
                    break 'all;
                }
                if stale {
                    why =
                        format!("member {} hears nothing fresh from member {}", cluster.id(o), cluster.id(s));
                    calm = false;
                    break 'all;
                }
            }
        }
        if calm {
            let since = *calm_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= settle {
                return Ok(());
            }
        } else {
            calm_since = None;
        }
        if Instant::now() > deadline {
            bail!(
                "the group did not settle within {} s: {why}; a machine that does not keep the \
                 heartbeat period makes every member suspect its neighbours: give a longer \
                 --period-us and --threshold-us (1000 and 5000 hold on a 2-vCPU virtual machine)",
                within.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One detector in one trial: to the first member, to every member (when all noticed), the
/// first member's time from its last fresh heartbeat, and how long after the failure's stamp
/// the last fresh heartbeat came, us.
#[derive(Debug, Clone, Copy)]
struct Found {
    first: f64,
    last: Option<f64>,
    after_silence: Option<f64>,
    took: Option<f64>,
}

/// What one trial saw: each (detector, observer)'s detection time, us, and for Kairos each
/// observer's last fresh heartbeat and deadline from the failure, us.
#[derive(Debug, Default)]
struct Seen {
    detection_us: BTreeMap<(&'static str, usize), f64>,
    kairos: BTreeMap<usize, (f64, f64)>,
}

/// How many times in a row a trial may be redone because the victim was already suspected
/// when it failed.
const MAX_REDONE: usize = 20;

/// One trial: fails `victim`, reads the tables until every awaited detector of every other
/// member noticed (or `timeout`), undoes the failure. `None` when an awaited detector of an
/// observer already suspected the victim at the failure (a mistake that began between the
/// group's settling and the failure, milliseconds): that suspicion's time is not the
/// failure's, and its detector would never notice the failure (its verdict does not change),
/// so the trial measures nothing and is to be redone.
fn trial(
    cluster: &mut Cluster,
    failure: Failure,
    victim: usize,
    awaited: &[Watched],
    timeout: Duration,
) -> Result<Option<Seen>> {
    let failed_at = match failure {
        Failure::Kill => cluster.kill(victim)?,
        Failure::LinkDown => cluster.link_down(victim)?,
        Failure::AppHang => cluster.pause_app(victim, true)?,
    };
    let deadline = Instant::now() + timeout;
    let mut seen = Seen::default();
    let mut suspected_before = false;
    let observers: Vec<usize> = (0..cluster.len()).filter(|&o| o != victim).collect();
    loop {
        for &o in &observers {
            let Some(row) = cluster.row(o, victim) else { continue };
            suspected_before |= awaited
                .iter()
                .filter(|w| failure != Failure::AppHang || w.sees_hang)
                .filter(|w| !seen.detection_us.contains_key(&(w.name, o)))
                .any(|w| w.noticed(&row).is_some_and(|n| n < failed_at));
            for w in &WATCHED {
                if let Some(n) = w.noticed(&row).filter(|&n| n >= failed_at) {
                    seen.detection_us.entry((w.name, o)).or_insert((n - failed_at) as f64 / 1e3);
                    if w.slot.is_none() {
                        let from = |t: u64| (t as f64 - failed_at as f64) / 1e3;
                        let deadline = row.suspected_since_ns.unwrap_or(n);
                        seen.kairos.entry(o).or_insert((from(row.last_fresh_ns), from(deadline)));
                    }
                }
            }
        }
        let done = awaited
            .iter()
            .filter(|w| failure != Failure::AppHang || w.sees_hang)
            .all(|w| observers.iter().all(|&o| seen.detection_us.contains_key(&(w.name, o))));
        if done || suspected_before || Instant::now() > deadline {
            break;
        }
        // The times read are the members' own stamps: polling more often would only load the
        // cores the members run on.
        std::thread::sleep(Duration::from_millis(1));
    }
    match failure {
        Failure::Kill => cluster.restart(victim)?,
        Failure::LinkDown => {
            cluster.link_up(victim)?;
        }
        Failure::AppHang => {
            cluster.pause_app(victim, false)?;
        }
    }
    Ok((!suspected_before).then_some(seen))
}

impl Experiment for DetectConfig {
    const NAME: &'static str = "fd-detect";
    type Summary = DetectSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        if !(3..=8).contains(&self.members) {
            return Err(InvalidConfig::new(format!(
                "--members {} is out of range: 3 to 8 (a victim and at least two observers)",
                self.members
            )));
        }
        if !(10..=1_000_000).contains(&self.period_us) {
            return Err(InvalidConfig::new(format!(
                "--period-us {} is out of range: 10 to 1000000",
                self.period_us
            )));
        }
        if self.threshold_us > 10_000_000 {
            return Err(InvalidConfig::new(format!(
                "--threshold-us {} is out of range: 0 to 10000000",
                self.threshold_us
            )));
        }
        if !(1..=10_000).contains(&self.trials) || self.slow_trials > 1_000 {
            return Err(InvalidConfig::new(format!(
                "--trials {} and --slow-trials {} are out of range: 1 to 10000, and 0 to 1000",
                self.trials, self.slow_trials
            )));
        }
        if self.failures.is_empty() {
            return Err(InvalidConfig::new("give at least one failure"));
        }
        if self.failures.contains(&Failure::LinkDown)
            && self.failures.len() == 1
            && self.network == Network::Loopback
        {
            return Err(InvalidConfig::new(
                "link_down needs the testbed's namespaces (root): on loopback there is no link to cut",
            ));
        }
        if self.network.testbed() && !kairos_sys::user::is_root() {
            return Err(InvalidConfig::new(
                "--network namespaces and lane need root (the testbed makes network namespaces)",
            ));
        }
        if u32::from(self.base_port) + self.members as u32 > 65_535 || self.base_port < 1024 {
            return Err(InvalidConfig::new(format!(
                "--base-port {} leaves no room for {} members",
                self.base_port, self.members
            )));
        }
        let runs = self.runs().len();
        Ok(Plan::new(runs * (self.trials + self.slow_trials), 0.4))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<DetectSummary> {
        let mut skipped = Vec::new();
        if self.failures.contains(&Failure::LinkDown) && self.network == Network::Loopback {
            skipped.push(Skipped {
                failure: Failure::LinkDown,
                reason: "members on loopback (not root): there is no link of one member to cut".into(),
            });
        }
        run.doing("starting the group");
        let mut cluster = Cluster::start(self.cluster(), &run.dir().path().join("members"))?;
        let fast: Vec<Watched> = WATCHED.iter().copied().filter(|w| !w.slow).collect();
        let all: Vec<Watched> = WATCHED.to_vec();
        let mut records = Vec::new();
        let mut found: BTreeMap<(&'static str, Failure), Vec<Option<Found>>> = BTreeMap::new();
        let mut redone_trials: BTreeMap<Failure, usize> = BTreeMap::new();
        for failure in self.runs() {
            for (slow, trials) in [(false, self.trials), (true, self.slow_trials)] {
                let (awaited, timeout, within) = if slow {
                    (&all, Duration::from_secs(20), Duration::from_secs(120))
                } else {
                    (&fast, Duration::from_secs(2), Duration::from_secs(30))
                };
                let settle_for = Duration::from_millis(self.settle_ms);
                for t in 0..trials {
                    run.doing(&format!(
                        "{failure:?}, trial {} of {trials}{}",
                        t + 1,
                        if slow { " (slow detectors)" } else { "" }
                    ));
                    if slow {
                        // The slow detectors' own view of the last trial (a restart renamed in
                        // SWIM's LAN membership, a gap in Akka's history) settles in seconds;
                        // the calm asked of every detector is then the same as the fast ones'.
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    let victim = t % cluster.len();
                    let mut redone = 0;
                    let seen = loop {
                        settle(&mut cluster, awaited, settle_for, within)?;
                        if let Some(seen) = trial(&mut cluster, failure, victim, awaited, timeout)? {
                            break seen;
                        }
                        redone += 1;
                        *redone_trials.entry(failure).or_default() += 1;
                        if redone >= MAX_REDONE {
                            bail!(
                                "{failure:?}, trial {}: member {} was already suspected when it failed, \
                                 {redone} times in a row (the group settles, and a mistake begins before \
                                 the failure)",
                                t + 1,
                                cluster.id(victim)
                            );
                        }
                    };
                    let observers: Vec<usize> = (0..cluster.len()).filter(|&o| o != victim).collect();
                    for w in WATCHED.iter().filter(|w| w.slow == slow) {
                        let times: Vec<Option<f64>> =
                            observers.iter().map(|&o| seen.detection_us.get(&(w.name, o)).copied()).collect();
                        for (&o, &d) in observers.iter().zip(&times) {
                            let k = seen.kairos.get(&o).filter(|_| w.slot.is_none());
                            records.push(TrialRecord {
                                failure,
                                trial: t,
                                slow,
                                victim: cluster.id(victim),
                                detector: w.name,
                                observer: cluster.id(o),
                                detection_us: d,
                                last_fresh_us: k.map(|k| k.0),
                                deadline_us: k.map(|k| k.1),
                            });
                        }
                        let first = observers
                            .iter()
                            .zip(&times)
                            .filter_map(|(&o, t)| t.map(|t| (t, o)))
                            .min_by(|a, b| a.0.total_cmp(&b.0));
                        let last = times
                            .iter()
                            .all(Option::is_some)
                            .then(|| times.iter().flatten().copied().fold(0.0, f64::max));
                        let took = seen.kairos.values().map(|k| k.0).reduce(f64::max);
                        found.entry((w.name, failure)).or_default().push(first.map(|(first, o)| Found {
                            first,
                            last,
                            after_silence: seen.kairos.get(&o).map(|k| first - k.0),
                            took,
                        }));
                    }
                    run.step("fd detect");
                }
            }
        }
        drop(cluster);
        run.dir().write_csv("trials.csv", &records)?;
        let mut rows = Vec::new();
        for failure in self.runs() {
            for w in &WATCHED {
                let trials = found.get(&(w.name, failure)).cloned().unwrap_or_default();
                let firsts: Vec<f64> = trials.iter().flatten().map(|f| f.first).collect();
                let alls: Vec<f64> = trials.iter().flatten().filter_map(|f| f.last).collect();
                let silences: Vec<f64> = trials.iter().flatten().filter_map(|f| f.after_silence).collect();
                let took: Vec<f64> = trials.iter().flatten().filter_map(|f| f.took).collect();
                let note = if failure == Failure::AppHang && !w.sees_hang {
                    Some("SWIM probes the member's process, which answers while its application hangs".into())
                } else if firsts.is_empty() {
                    Some("not detected within the trial's time".into())
                } else {
                    None
                };
                rows.push(DetectRow {
                    detector: w.name.into(),
                    settings: settings_of(w.name, self),
                    failure,
                    trials: trials.len(),
                    detected: firsts.len(),
                    detection_us: Percentiles::of(&firsts),
                    detection_all_us: Percentiles::of(&alls),
                    after_last_heartbeat_us: Percentiles::of(&silences),
                    last_heartbeat_after_failure_us: Percentiles::of(&took),
                    redone: redone_trials.get(&failure).copied().unwrap_or(0),
                    note,
                });
            }
        }
        let kill_p99_us = rows
            .iter()
            .find(|r| r.detector == KAIROS && r.failure == Failure::Kill)
            .and_then(|r| r.detection_us.map(|p| p.p99));
        let goal = Goal { kill_p99_us, target_us: 400.0, met: kill_p99_us.is_some_and(|p| p < 400.0) };
        let info = run.finish();
        Ok(DetectSummary { run: info, config: self.clone(), network: self.network, rows, skipped, goal })
    }
}

/// The table printed without `--json`.
pub fn report(s: &DetectSummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    out.push_str(&format!(
        "{} members on {:?}, T = {} us, Lambda = {} us; detection time from the failure, us (first member / every member)\n",
        s.config.members, s.network, s.config.period_us, s.config.threshold_us
    ));
    out.push_str(&format!(
        "{:<16} {:<10} {:>9} {:>10} {:>10} {:>10} {:>10} {:>13} {:>13}\n",
        "detector", "failure", "detected", "p50", "p99", "max", "p99 all", "p99 after hb", "hb after p99"
    ));
    for r in &s.rows {
        let p = |v: Option<Percentiles>, f: fn(&Percentiles) -> f64| {
            v.map_or("-".into(), |p| format!("{:.0}", f(&p)))
        };
        out.push_str(&format!(
            "{:<16} {:<10} {:>5}/{:<3} {:>10} {:>10} {:>10} {:>10} {:>13} {:>13}{}\n",
            r.detector,
            format!("{:?}", r.failure),
            r.detected,
            r.trials,
            p(r.detection_us, |p| p.p50),
            p(r.detection_us, |p| p.p99),
            p(r.detection_us, |p| p.max),
            p(r.detection_all_us, |p| p.p99),
            p(r.after_last_heartbeat_us, |p| p.p99),
            p(r.last_heartbeat_after_failure_us, |p| p.p99),
            r.note.as_deref().map(|n| format!("  ({n})")).unwrap_or_default()
        ));
    }
    out.push_str(
        "p99 after hb: the first member's detection from its last fresh heartbeat of the victim; hb after p99: how long after the failure's stamp that heartbeat still came\n",
    );
    for k in &s.skipped {
        out.push_str(&format!("skipped {:?}: {}\n", k.failure, k.reason));
    }
    out.push_str(&format!(
        "goal: Kairos's p99 after kill {} 400 us: {}\n",
        s.goal.kill_p99_us.map_or("-".into(), |p| format!("{p:.0} us vs")),
        if s.goal.met { "met" } else { "missed" }
    ));
    out.push_str(&format!("results: {}\n", s.run.results_dir.display()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((p.p50, p.p99, p.max), (3.0, 5.0, 5.0));
        assert!(Percentiles::of(&[]).is_none());
        let many: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(Percentiles::of(&many).unwrap().p99, 198.0);
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut c = DetectConfig::preset(true, PathBuf::from("kairos"));
        c.network = Network::Loopback;
        assert!(c.plan().is_ok());
        c.members = 2;
        assert!(c.plan().unwrap_err().to_string().contains("--members"));
        c.members = 3;
        c.failures = vec![Failure::LinkDown];
        assert!(c.plan().unwrap_err().to_string().contains("link_down"));
    }
}

//! `kairos fd accuracy`: how often the detectors suspect a member that is alive, against the
//! threshold, idle and under load, with every false suspicion set against the stall watch.
//!
//! A group of `kairos fd member` processes ([`crate::fd_cluster`]) runs for `seconds` per load
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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use kairos_fd::held::{Held, HeldKind};
use kairos_fd::member::{DetectorRecord, KAIROS, MemberReport, Suspicion};
use kairos_metrics::{Stall, StallReport, StallWatch, StallWatchConfig};
use kairos_sys::child::OwnedChild;
use serde::{Deserialize, Serialize};

use crate::fd_cluster::{Cluster, ClusterSettings, Network};
use crate::fd_detect::RECOMMENDED_THRESHOLD_US;
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
            app_bump_us: crate::fd_cluster::default_app_bump_us(network, 100),
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

impl Causes {
    fn of(mistakes: &[MistakeRecord]) -> Self {
        let mut c = Self::default();
        for m in mistakes.iter().filter(|m| !m.explained) {
            match (m.end_seq_gap, m.stale_between, m.end_sent_after_deadline_us) {
                (None, _, _) | (_, None, _) | (_, _, None) => c.open += 1,
                (_, Some(stale), _) if stale > 0 => c.stale_counter += 1,
                (Some(gap), _, _) if gap > 1 => c.lost += 1,
                (_, _, Some(after)) if after > 0.0 => c.sender_late += 1,
                _ => c.late_on_the_way += 1,
            }
        }
        c
    }
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

/// What explains a silence `[from_ns, to_ns]`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Explanation {
    /// A stall the watch saw overlaps it.
    Watch,
    /// Only the silent member's own threads saw one: a thread was kept from its work that
    /// long in the silence.
    Held(HeldBy),
    /// Nothing.
    Unexplained,
}

/// The silent member's thread kept from its work longest in its silence.
#[derive(Debug, Clone, Copy, PartialEq)]
struct HeldBy {
    /// The time its stretches lost inside the silence, summed, ns.
    lost_ns: u64,
    /// Its longest stretch's kind.
    kind: HeldKind,
}

/// What a load's mistakes are set against: the watch's stalls and the members' own.
struct Evidence<'a> {
    /// The watch's stalls, widened by its period ([`widened`]), by `due_ns`.
    stalls: Vec<Stall>,
    /// Each member's held stretches, in time order, as stalls of the machine: a thread due and
    /// kept from its work had its core taken, as a late wake-up of the watch does (the watch
    /// samples its core each watch period; these are the heartbeat loops' own instants). Only
    /// where nothing of the experiment outranks the members' threads ([`held_explains`]).
    held: BTreeMap<u64, &'a [Held]>,
    /// The heartbeat period, ns: a silence is taken from a period before its last fresh
    /// heartbeat.
    period_ns: u64,
    /// The threshold the peers are held to, ns (they have none of Kairos's kind).
    recommended_ns: u64,
    /// The longest of `stalls`, ns: how far back a search for one overlapping a silence walks.
    longest_stall_ns: u64,
    /// Whether the members' held stretches count ([`held_explains`]).
    held_counts: bool,
}

impl<'a> Evidence<'a> {
    fn new(
        stalls: Vec<Stall>,
        reports: &'a [MemberReport],
        (network, cores): (Network, usize),
        period_ns: u64,
        recommended_ns: u64,
    ) -> Self {
        let held_counts = held_explains(reports, network, cores);
        // A member's stretches are in time order (`HeldRecord::merged`).
        let held = if held_counts {
            reports.iter().map(|r| (r.member, r.held.stretches.as_slice())).collect()
        } else {
            BTreeMap::new()
        };
        let longest_stall_ns = stalls.iter().map(Stall::length_ns).max().unwrap_or(0);
        Self { stalls, held, period_ns, recommended_ns, longest_stall_ns, held_counts }
    }

    /// The silence a suspicion ended: from a period before its last fresh heartbeat.
    fn silence(&self, s: &Suspicion) -> (u64, u64) {
        (s.window_from_ns.saturating_sub(self.period_ns), s.since_ns)
    }

    /// What explains the silence behind `s`, a detector with threshold `threshold_ns` (`None`:
    /// a peer) took for a failure: a stall the watch saw on any core, or one of the subject's
    /// own threads kept from its work inside the silence for at least half the threshold in
    /// all. (Its next heartbeat had to be about a threshold late; a member that lost less than
    /// half of that has not explained the rest, and the many short stretches of a loaded core
    /// do not add up to an explanation by overlapping every silence.) A stretch counts only
    /// for its part inside the silence, and the loop's and the application's are not added:
    /// they share a core, and one stall delays both.
    fn explain(&self, s: &Suspicion, threshold_ns: Option<u64>) -> Explanation {
        let (from_ns, to_ns) = self.silence(s);
        if explained(&self.stalls, self.longest_stall_ns, from_ns, to_ns) {
            return Explanation::Watch;
        }
        let Some(held) = self.held.get(&s.subject) else { return Explanation::Unexplained };
        // Stretches are short (a wake-up or a pass): none that began a second before matters.
        let first = held.partition_point(|h| h.from_ns.saturating_add(1_000_000_000) < from_ns);
        // Per thread: the time lost inside the silence, its longest stretch's there, and that
        // stretch's kind.
        let mut threads = [(0u64, 0u64, HeldKind::OffCpu); 2];
        for h in held[first..].iter().take_while(|h| h.from_ns <= to_ns).filter(|h| h.to_ns >= from_ns) {
            let lost = h.lost_ns.min(h.to_ns.min(to_ns) - h.from_ns.max(from_ns));
            let t = &mut threads[h.thread as usize];
            t.0 += lost;
            if lost > t.1 {
                (t.1, t.2) = (lost, h.kind);
            }
        }
        let (lost_ns, _, kind) = if threads[1].0 > threads[0].0 { threads[1] } else { threads[0] };
        if lost_ns > 0 && lost_ns * 2 >= threshold_ns.unwrap_or(self.recommended_ns) {
            Explanation::Held(HeldBy { lost_ns, kind })
        } else {
            Explanation::Unexplained
        }
    }
}

/// Whether the members' held stretches are stalls of the machine: nothing of the experiment
/// outranks a member's threads on its core. Every loop `SCHED_FIFO` and pinned, a core each
/// (members sharing a core delay each other: a neighbour's long pass would pass for a stall),
/// and no lane nodes (which run above the members).
fn held_explains(reports: &[MemberReport], network: Network, cores: usize) -> bool {
    network != Network::Lane && reports.len() <= cores && reports.iter().all(|r| r.realtime && r.pinned)
}

/// Whether a stall overlaps `[from_ns, to_ns]`. `stalls` are sorted by `due_ns` (those of
/// several cores, so their ends are not in order): the search takes those due by `to_ns` and
/// walks back no further than the longest stall, `longest`.
fn explained(stalls: &[Stall], longest: u64, from_ns: u64, to_ns: u64) -> bool {
    let end = stalls.partition_point(|s| s.due_ns <= to_ns);
    stalls[..end]
        .iter()
        .rev()
        .take_while(|s| s.due_ns.saturating_add(longest) >= from_ns)
        .any(|s| s.woke_ns >= from_ns)
}

/// The watch's stalls widened by its period: it sees a stall when a wake-up falls in it, and
/// its previous wake-up was on time, so the core was taken somewhere in `[due - period, woke]`
/// (certainly in `[due, woke]`). A mistake "coincides with a stall" when that widened stretch
/// overlaps its silence.
fn widened(stalls: &[Stall], watch_period_ns: u64) -> Vec<Stall> {
    stalls
        .iter()
        .map(|s| Stall { due_ns: s.due_ns.saturating_sub(watch_period_ns), woke_ns: s.woke_ns })
        .collect()
}

/// One mistake of Kairos's detector at the recommended threshold, for `mistakes_<load>.csv`.
#[derive(Debug, Clone, Serialize)]
struct MistakeRecord {
    observer: u64,
    subject: u64,
    /// The silence: from the last fresh heartbeat to the suspicion, us.
    silence_us: f64,
    /// How long the member stayed suspected, us (none: to the end).
    duration_us: Option<f64>,
    /// When the suspicion began, `CLOCK_MONOTONIC` ns.
    since_ns: u64,
    /// A stall explains the silence (the watch's, or the suspected member's own).
    explained: bool,
    /// When only the subject's own threads saw it: how the longest stretch kept them from
    /// their work (off the CPU, or in the kernel's calls) ...
    held_kind: Option<HeldKind>,
    /// ... and their time lost in the silence, us.
    held_lost_us: Option<f64>,
    /// The nearest stall's distance from the silence, us (0: it overlaps).
    nearest_stall_us: Option<f64>,
    /// The heartbeat that ended it: sent this long after the deadline, us (negative: before,
    /// and late on the way).
    end_sent_after_deadline_us: Option<f64>,
    /// ... and on the way this long (its receive stamp less its send time), us.
    end_one_way_us: Option<f64>,
    /// ... its sequence number less the last fresh one's (1: nothing missing).
    end_seq_gap: Option<u64>,
    /// Stale heartbeats (the application's counter unchanged) during the silence.
    stale_between: Option<u64>,
}

/// Kairos's mistakes at `threshold_ns`, each with the stall nearest its silence.
fn mistakes_at(reports: &[MemberReport], threshold_ns: u64, evidence: &Evidence<'_>) -> Vec<MistakeRecord> {
    let mut out = Vec::new();
    for r in reports {
        let Some(d) =
            r.detectors.iter().find(|d| d.detector == KAIROS && d.threshold_ns == Some(threshold_ns))
        else {
            continue;
        };
        for s in &d.stored {
            let (from, _) = evidence.silence(s);
            let gap = |st: &Stall| {
                if st.woke_ns < from { from - st.woke_ns } else { st.due_ns.saturating_sub(s.since_ns) }
            };
            let how = evidence.explain(s, Some(threshold_ns));
            let held_by = match how {
                Explanation::Held(by) => Some(by),
                _ => None,
            };
            out.push(MistakeRecord {
                observer: r.member,
                subject: s.subject,
                silence_us: (s.since_ns - s.window_from_ns) as f64 / 1e3,
                duration_us: s.until_ns.map(|u| u.saturating_sub(s.since_ns) as f64 / 1e3),
                since_ns: s.since_ns,
                explained: how != Explanation::Unexplained,
                held_kind: held_by.map(|b| b.kind),
                held_lost_us: held_by.map(|b| b.lost_ns as f64 / 1e3),
                nearest_stall_us: evidence.stalls.iter().map(gap).min().map(|g| g as f64 / 1e3),
                end_sent_after_deadline_us: s.ended_by.map(|e| (e.sent_ns as f64 - s.since_ns as f64) / 1e3),
                end_one_way_us: s
                    .ended_by
                    .zip(s.until_ns)
                    .map(|(e, until)| (until as f64 - e.sent_ns as f64) / 1e3),
                end_seq_gap: s.ended_by.map(|e| e.seq_gap),
                stale_between: s.ended_by.map(|e| e.stale),
            });
        }
    }
    out
}

/// The rows of one load from the members' reports.
fn rows(load: Load, reports: &[MemberReport], evidence: &Evidence<'_>) -> Vec<AccuracyRow> {
    let members = reports.len() as u64;
    let observed_ns: u64 = reports
        .iter()
        .map(|r| {
            // A report without the window's end (older builds) ends it at the run's end.
            let until = if r.measure_until_ns == 0 { r.ended_ns } else { r.measure_until_ns };
            until.saturating_sub(r.measure_from_ns) * members.saturating_sub(1)
        })
        .sum();
    let observed_s = observed_ns as f64 / 1e9;
    // Every member runs the same detectors in the same order.
    let Some(first) = reports.first() else { return Vec::new() };
    first
        .detectors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let records: Vec<&DetectorRecord> = reports.iter().filter_map(|r| r.detectors.get(i)).collect();
            let mistakes: u64 = records.iter().map(|r| r.suspicions).sum();
            let suspected_ns: u64 = records.iter().map(|r| r.suspected_ns).sum();
            let stored = records.iter().flat_map(|r| r.stored.iter());
            let (mut with_stall, mut with_held, mut checked) = (0, 0, 0);
            for s in stored {
                checked += 1;
                match evidence.explain(s, d.threshold_ns) {
                    Explanation::Watch => with_stall += 1,
                    Explanation::Held(_) => {
                        with_stall += 1;
                        with_held += 1;
                    }
                    Explanation::Unexplained => {}
                }
            }
            AccuracyRow {
                detector: d.detector.clone(),
                threshold_us: (d.detector == KAIROS).then(|| d.threshold_ns.unwrap_or(0) / 1_000),
                load,
                query_accuracy: if observed_ns == 0 {
                    1.0
                } else {
                    1.0 - suspected_ns as f64 / observed_ns as f64
                },
                mistake_rate_per_s: if observed_s > 0.0 { mistakes as f64 / observed_s } else { 0.0 },
                mistake_duration_us: (mistakes > 0).then(|| suspected_ns as f64 / mistakes as f64 / 1e3),
                mistakes,
                mistakes_with_stall: with_stall,
                mistakes_with_held: with_held,
                unexplained: checked - with_stall,
                observed_s,
            }
        })
        .collect()
}

/// Why a load could not be started: its rows are skipped with this as the reason.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    /// stress-ng did not start.
    #[error(transparent)]
    StressNg(#[from] crate::background::StressNgError),
    /// The flood needs the testbed's hosts, which the group does not run on.
    #[error("the flood runs between testbed hosts (root)")]
    NoTestbed,
    /// The iperf3 server did not start.
    #[error("iperf3 could not start ({0}); install it (Debian: iperf3) for the flood")]
    Iperf3Server(std::io::Error),
    /// The iperf3 client did not start.
    #[error("{0}")]
    Iperf3Client(std::io::Error),
}

/// The load's processes, ended when dropped.
fn start_load(load: Load, cluster: &Cluster) -> Result<Vec<OwnedChild>, LoadError> {
    match load {
        Load::Idle => Ok(Vec::new()),
        Load::Stress => Ok(vec![crate::background::stress_ng(kairos_sys::proc::online_cores(), None)?]),
        Load::Flood => {
            let (Some(mut server), Some(mut client)) =
                (cluster.host_command(0, "iperf3"), cluster.host_command(1, "iperf3"))
            else {
                return Err(LoadError::NoTestbed);
            };
            server
                .args(["-s", "-p", "5299"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let server =
                OwnedChild::spawn_named(&mut server, "iperf3 server").map_err(LoadError::Iperf3Server)?;
            std::thread::sleep(Duration::from_millis(200));
            let to = kairos_io::lane_testbed::host_address(0).to_string();
            client
                .args(["-c", &to, "-p", "5299", "-u", "-b", "2G", "-t", "86400"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let client =
                OwnedChild::spawn_named(&mut client, "iperf3 client").map_err(LoadError::Iperf3Client)?;
            Ok(vec![server, client])
        }
    }
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
        let period_ns = self.period_us * 1_000;
        let mut sweep: Vec<u64> =
            self.thresholds_us.iter().copied().filter(|&t| t != self.recommended_us).collect();
        sweep.sort_unstable();
        sweep.dedup();
        let (mut all_rows, mut loads, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
        for (k, &load) in self.loads.iter().enumerate() {
            run.doing(&format!("{load:?}: {} s", self.seconds));
            let settings = ClusterSettings {
                exe: self.exe.clone(),
                members: self.members,
                period_us: self.period_us,
                threshold_us: self.recommended_us,
                sweep_us: sweep.clone(),
                network: self.network,
                base_port: self.base_port,
                fifo_priority: self.fifo_priority,
                pin: self.pin,
                app_bump_us: self.app_bump_us,
                run_for_ms: Some(((self.warmup_seconds + self.seconds) * 1e3) as u64),
                measure_after_ms: (self.warmup_seconds * 1e3) as u64,
                time_interrupts: self.time_interrupts,
            };
            let dir = run.dir().path().join(format!("{load:?}").to_lowercase());
            // The watch first, so it sees the whole run.
            let watches: Vec<StallWatch> = (0..kairos_sys::proc::online_cores())
                .filter_map(|core| {
                    StallWatch::start(StallWatchConfig {
                        core,
                        period: Duration::from_micros(self.stall_period_us),
                        threshold_ns: self.stall_threshold_us * 1_000,
                        fifo_priority: 99,
                    })
                    .ok()
                })
                .collect();
            let mut cluster =
                Cluster::start(settings, &dir).with_context(|| format!("the group for {load:?}"))?;
            let background = match start_load(load, &cluster) {
                Ok(b) => b,
                Err(reason) => {
                    skipped.push(SkippedLoad { load, reason: reason.to_string() });
                    run.step("fd accuracy");
                    continue;
                }
            };
            let timeout = Duration::from_secs_f64(self.warmup_seconds + self.seconds + 30.0);
            let reports = cluster.wait_reports(timeout)?;
            drop(background);
            drop(cluster);
            let watched: Vec<StallReport> = watches.into_iter().filter_map(|w| w.finish().ok()).collect();
            let mut stalls: Vec<Stall> = watched.iter().flat_map(|r| r.stalls.iter().copied()).collect();
            stalls.sort_by_key(|s| s.due_ns);
            let name = format!("{load:?}").to_lowercase();
            run.dir().write_csv(&format!("stalls_{name}.csv"), &stalls)?;
            let recommended_ns = self.recommended_us * 1_000;
            let evidence = Evidence::new(
                widened(&stalls, self.stall_period_us * 1_000),
                &reports,
                (self.network, kairos_sys::proc::online_cores()),
                period_ns,
                recommended_ns,
            );
            let mistakes = mistakes_at(&reports, recommended_ns, &evidence);
            run.dir().write_csv(&format!("mistakes_{name}.csv"), &mistakes)?;
            loads.push(LoadFigures {
                load,
                stall_watch_realtime: !watched.is_empty() && watched.iter().all(|r| r.realtime),
                held_explains: evidence.held_counts,
                stalls: stalls.len(),
                longest_stall_us: stalls.iter().map(Stall::length_ns).max().unwrap_or(0) as f64 / 1e3,
                members: reports
                    .iter()
                    .map(|r| MemberFigures {
                        member: r.member,
                        realtime: r.realtime,
                        heartbeats_sent: r.heartbeats_sent,
                        heartbeats_received: r.heartbeats_received,
                        stale_heartbeats: r.stale_heartbeats,
                        send_errors: r.send_errors,
                        late_wakeups: r.late_wakeups,
                        held_off: r.held.count,
                        held_in_interrupts: r.held.in_interrupts,
                        interrupt_ms: r.held.interrupt_ns as f64 / 1e6,
                        long_own_work_passes: r.held.long_own_work,
                        worst_own_work_us: r.held.worst_own_work_ns as f64 / 1e3,
                        interrupts_untimed: r.held.interrupts_untimed.clone(),
                        worst_wake_late_us: r.worst_wake_late_ns as f64 / 1e3,
                        lane_beats_replaced: r.lane.map(|l| l.beats_replaced),
                    })
                    .collect(),
                unexplained_causes: Causes::of(&mistakes),
            });
            let mut rows = rows(load, &reports, &evidence);
            rows.sort_by_key(|r| (r.detector != KAIROS, r.detector.clone(), r.threshold_us));
            all_rows.extend(rows);
            if k + 1 < self.loads.len() {
                run.step("fd accuracy");
            }
        }
        let unexplained: u64 = all_rows
            .iter()
            .filter(|r| r.detector == KAIROS && r.threshold_us == Some(self.recommended_us))
            .map(|r| r.unexplained)
            .sum();
        let goal = Goal { threshold_us: self.recommended_us, unexplained, met: unexplained == 0 };
        let info = run.finish();
        Ok(AccuracySummary {
            run: info,
            config: self.clone(),
            network: self.network,
            rows: all_rows,
            recommended_threshold_us: self.recommended_us,
            goal,
            loads,
            skipped,
        })
    }
}

/// The table printed without `--json`.
pub fn report(s: &AccuracySummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    out.push_str(&format!(
        "{} members on {:?}, T = {} us, {} s per load; mistakes per pair of members\n",
        s.config.members, s.network, s.config.period_us, s.config.seconds
    ));
    out.push_str(&format!(
        "{:<16} {:>9} {:<7} {:>12} {:>12} {:>12} {:>9} {:>11} {:>8} {:>12}\n",
        "detector",
        "Lambda us",
        "load",
        "P_A",
        "mistakes/s",
        "duration us",
        "mistakes",
        "with stall",
        "of them:",
        "unexplained"
    ));
    for r in &s.rows {
        out.push_str(&format!(
            "{:<16} {:>9} {:<7} {:>12.9} {:>12.4} {:>12} {:>9} {:>11} {:>8} {:>12}\n",
            r.detector,
            r.threshold_us.map_or("-".into(), |t| t.to_string()),
            format!("{:?}", r.load).to_lowercase(),
            r.query_accuracy,
            r.mistake_rate_per_s,
            r.mistake_duration_us.map_or("-".into(), |d| format!("{d:.0}")),
            r.mistakes,
            r.mistakes_with_stall,
            format!("{} held", r.mistakes_with_held),
            r.unexplained
        ));
    }
    for l in &s.loads {
        let c = &l.unexplained_causes;
        out.push_str(&format!(
            "{:?}: stall watch{} saw {} stalls, longest {:.0} us; loops late > 50 us: {}; members' threads held off > 50 us: {}; loop passes > 50 us in their own work: {}; unexplained at {} us: sender late {}, late on the way {}, stale counter {}, lost {}, open {}\n",
            l.load,
            if l.stall_watch_realtime { "" } else { " (not real-time)" },
            l.stalls,
            l.longest_stall_us,
            l.members.iter().map(|m| m.late_wakeups.to_string()).collect::<Vec<_>>().join(", "),
            l.members.iter().map(|m| m.held_off.to_string()).collect::<Vec<_>>().join(", "),
            l.members.iter().map(|m| m.long_own_work_passes.to_string()).collect::<Vec<_>>().join(", "),
            s.recommended_threshold_us,
            c.sender_late,
            c.late_on_the_way,
            c.stale_counter,
            c.lost,
            c.open
        ));
        if let Some(why) = l.members.iter().find_map(|m| m.interrupts_untimed.as_ref()) {
            out.push_str(&format!("{:?}: the loops' time in interrupt handlers not timed: {why}\n", l.load));
        } else if s.config.time_interrupts {
            out.push_str(&format!(
                "{:?}: held off mostly in interrupt handlers (the interrupt clock): {}; the loops' time in handlers: {} ms\n",
                l.load,
                l.members.iter().map(|m| m.held_in_interrupts.to_string()).collect::<Vec<_>>().join(", "),
                l.members.iter().map(|m| format!("{:.1}", m.interrupt_ms)).collect::<Vec<_>>().join(", "),
            ));
        }
        if l.members.iter().any(|m| m.lane_beats_replaced.is_some()) {
            out.push_str(&format!(
                "{:?}: on the lane, heartbeats replaced before the node took them: {} (of {})\n",
                l.load,
                l.members
                    .iter()
                    .map(|m| m.lane_beats_replaced.unwrap_or(0).to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                l.members.iter().map(|m| m.heartbeats_sent.to_string()).collect::<Vec<_>>().join(", "),
            ));
        }
    }
    for k in &s.skipped {
        out.push_str(&format!("skipped {:?}: {}\n", k.load, k.reason));
    }
    out.push_str(&format!(
        "goal: no unexplained mistake at Lambda = {} us: {} ({} unexplained)\n",
        s.goal.threshold_us,
        if s.goal.met { "met" } else { "missed" },
        s.goal.unexplained
    ));
    out.push_str(&format!("results: {}\n", s.run.results_dir.display()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kairos_fd::held::HeldThread;

    #[test]
    fn stalls_of_two_cores_out_of_order_are_found_and_widened_by_the_watch_period() {
        // Core 0's long stall, then core 1's short one inside it: ends not in order.
        let stalls = [Stall { due_ns: 100, woke_ns: 900 }, Stall { due_ns: 200, woke_ns: 300 }];
        let explained = |stalls: &[Stall], from, to| {
            let longest = stalls.iter().map(Stall::length_ns).max().unwrap_or(0);
            explained(stalls, longest, from, to)
        };
        assert!(explained(&stalls, 500, 600), "inside the long stall");
        assert!(explained(&stalls, 250, 260));
        assert!(!explained(&stalls, 950, 2_000));
        assert!(!explained(&stalls, 0, 99));
        let wide = widened(&stalls, 50);
        assert!(explained(&wide, 0, 60), "seen at 100, so it may have begun at 50");
        assert!(!explained(&wide, 0, 40));
    }

    #[test]
    fn rows_count_mistakes_per_pair_and_set_them_against_stalls() {
        let record = |suspicions, suspected_ns, stored: Vec<Suspicion>| DetectorRecord {
            detector: KAIROS.into(),
            threshold_ns: Some(200_000),
            suspicions,
            suspected_ns,
            stored,
        };
        let s = |from, since| Suspicion {
            subject: 2,
            window_from_ns: from,
            since_ns: since,
            noticed_ns: since,
            until_ns: None,
            ended_by: None,
        };
        let report = |member, detectors| MemberReport {
            member,
            measure_from_ns: 1_000_000_000,
            measure_until_ns: 11_000_000_000,
            ended_ns: 11_500_000_000,
            realtime: true,
            pinned: true,
            detectors,
            ..MemberReport::default()
        };
        let reports = vec![
            report(
                1,
                vec![record(
                    2,
                    400_000,
                    vec![s(2_000_000_000, 2_000_300_000), s(5_000_000_000, 5_000_300_000)],
                )],
            ),
            report(2, vec![record(0, 0, vec![])]),
        ];
        let stalls = [Stall { due_ns: 1_999_950_000, woke_ns: 2_000_200_000 }];
        fn evidence<'a>(stalls: &[Stall], reports: &'a [MemberReport], network: Network) -> Evidence<'a> {
            Evidence::new(stalls.to_vec(), reports, (network, 2), 100_000, 200_000)
        }
        let all = rows(Load::Idle, &reports, &evidence(&stalls, &reports, Network::Namespaces));
        assert_eq!(all.len(), 1);
        let r = &all[0];
        assert_eq!(
            (r.threshold_us, r.mistakes, r.mistakes_with_stall, r.mistakes_with_held, r.unexplained),
            (Some(200), 2, 1, 0, 1)
        );
        assert!((r.observed_s - 20.0).abs() < 1e-9);
        assert!((r.mistake_rate_per_s - 0.1).abs() < 1e-9);
        assert!((r.query_accuracy - (1.0 - 400_000.0 / 20e9)).abs() < 1e-12);
        assert_eq!(r.mistake_duration_us, Some(200.0));

        // The second silence, [4.9999 s, 5.0003 s]: a thread of the subject kept from its work
        // inside it explains it once it lost half the threshold (100 us) there, where nothing
        // of the experiment outranks the loops; not on the lane (its nodes do), not with a loop
        // that was not real-time or pinned or that shared a core, and never by the observer.
        let stretch = |thread, from_ns, lost_ns, kind| Held {
            from_ns,
            to_ns: from_ns + lost_ns,
            lost_ns,
            thread,
            kind,
            cpu_ns: 0,
            syscall_ns: 0,
            irq_ns: 0,
        };
        let mut reports = reports;
        reports[0].held.stretches.push(stretch(HeldThread::Loop, 5_000_000_000, 250_000, HeldKind::OffCpu));
        reports[1].held.stretches.push(stretch(HeldThread::Loop, 5_000_100_000, 60_000, HeldKind::OffCpu));
        reports[1].held.stretches.push(stretch(HeldThread::Loop, 4_999_950_000, 30_000, HeldKind::InKernel));
        // The application, on the same core, met the same stall: not added to the loop's.
        reports[1].held.stretches.push(stretch(
            HeldThread::Application,
            5_000_100_000,
            80_000,
            HeldKind::OffCpu,
        ));
        let held = |reports: &[MemberReport], network| {
            let r = &rows(Load::Idle, reports, &evidence(&stalls, reports, network))[0];
            (r.mistakes_with_stall, r.mistakes_with_held, r.unexplained)
        };
        // In time order, as a member's report keeps them.
        reports[1].held.stretches.sort_by_key(|h| h.from_ns);
        assert_eq!(held(&reports, Network::Namespaces), (1, 0, 1), "90 us lost is not half of 200");
        // 40 us more, of which 10 inside the silence: 100 us.
        reports[1].held.stretches.push(stretch(HeldThread::Loop, 5_000_290_000, 40_000, HeldKind::OffCpu));
        assert_eq!(held(&reports, Network::Namespaces), (2, 1, 0));
        let mistakes = mistakes_at(&reports, 200_000, &evidence(&stalls, &reports, Network::Namespaces));
        let second = mistakes.iter().find(|m| m.since_ns == 5_000_300_000).expect("the second mistake");
        assert_eq!(
            (second.explained, second.held_kind, second.held_lost_us),
            (true, Some(HeldKind::OffCpu), Some(100.0))
        );
        assert_eq!(held(&reports, Network::Lane), (1, 0, 1));
        let mut three = reports.clone();
        three.push(report(3, vec![record(0, 0, vec![])]));
        assert_eq!(held(&three, Network::Namespaces).1, 0, "three members on two cores");
        reports[1].pinned = false;
        assert_eq!(held(&reports, Network::Namespaces), (1, 0, 1));
        reports[1].pinned = true;
        reports[0].realtime = false;
        assert_eq!(held(&reports, Network::Namespaces), (1, 0, 1));
    }
}

//! The core probe: what the machine takes from one core in a few seconds, and what took it.
//!
//! The host doctor (`kairos doctor`) says which of the express lane's isolation settings are
//! missing; this probe measures what the missing ones cost on the lane's core, as the lane's
//! thread would suffer it. One thread, pinned to the core and `SCHED_FIFO` where permitted (as
//! the lane's would be), does two things:
//!
//! - **spins**, reading the clock back to back (the [`noise`](crate::noise) probe's gap meter):
//!   every gap above the floor is time the thread did not have. Around the spin it reads what
//!   the kernel counts per core (each interrupt source of `/proc/interrupts`, each softirq of
//!   `/proc/softirqs`, steal time) and per thread (involuntary context switches, time waiting on
//!   a run queue), so the combined loss can be set beside its likely sources: ticks, device
//!   interrupts, inter-processor interrupts, RCU work, other tasks or RT throttling, the
//!   hypervisor. Which gap was which cannot be told; the counts can.
//! - **sleeps and wakes** every `wake_period` to an absolute time and records how late it woke,
//!   first with the idle states allowed, then (where permitted: root) with
//!   `/dev/cpu_dma_latency` held at 0 so the core does not enter them: the difference is what
//!   idle states cost a thread that sleeps between packets. A spinning thread never idles, so
//!   this is the one cost the spin cannot see. The thread's timer slack is 1 ns, so the
//!   kernel's default 50 us slack of normal threads is not what is measured.
//!
//! Probes of the same core take turns across the machine ([`probe_core`] says why).

use std::time::Duration;

use kairos_sys::clock::{monotonic_ns, sleep_until_ns};
use kairos_sys::host::{CounterTable, HostFs};
use kairos_sys::machine_lock::MachineLock;
use kairos_sys::memory::NoIdleStates;
use kairos_sys::thread::{set_fifo, set_timer_slack_ns, thread_context_switches, thread_run_delay_ns};
use serde::{Deserialize, Serialize};

use crate::latency::{LatencyRecorder, LatencySummary};
use crate::noise::{CoreNoise, GapMeter};

/// How the probe measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoreProbeConfig {
    /// The core probed.
    pub core: usize,
    /// How long the thread spins.
    pub spin: Duration,
    /// How long each of the two wake-up phases lasts.
    pub wake: Duration,
    /// The period of the wake-ups.
    pub wake_period: Duration,
    /// Gaps shorter than this are the loop's own cost and not counted.
    pub gap_floor_ns: u64,
    /// `SCHED_FIFO` priority asked for (0: stay a normal thread). The default, 98, is below only
    /// the signal handler's 99 (which runs on other cores), so what takes the core from the
    /// probe is the machine, not another real-time thread of Kairos.
    pub fifo_priority: i32,
}

impl CoreProbeConfig {
    /// A probe of `core` lasting about `total`: a wake-up phase of an eighth of it (at most a
    /// quarter of a second: 250 wake-ups) twice, and the rest spinning. Spinning longer than a
    /// second is what shows RT throttling, which acts once a second.
    pub fn lasting(core: usize, total: Duration) -> Self {
        let wake = (total / 8).min(Duration::from_millis(250));
        Self {
            core,
            spin: total.saturating_sub(wake * 2),
            wake,
            wake_period: Duration::from_millis(1),
            gap_floor_ns: 1_000,
            fifo_priority: 98,
        }
    }

    /// The probe's length: the spin and both wake-up phases.
    pub fn total(&self) -> Duration {
        self.spin + self.wake * 2
    }
}

/// How many times one source (an IRQ, a class of interrupts, a softirq) hit the core during
/// the spin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCount {
    /// The kernel's name for it: an IRQ number (`36`), `LOC`, `NMI`, `RES`, `RCU`, `TIMER`, ...
    pub source: String,
    /// What the kernel says it is (the device or the description; empty for softirqs).
    pub description: String,
    /// Times it hit the core during the spin.
    pub count: u64,
}

/// What the probe found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CoreProbe {
    /// How it measured.
    pub config: CoreProbeConfig,
    /// The `SCHED_FIFO` priority it ran at; `None`: a normal thread (not permitted, or not
    /// asked).
    pub fifo_priority: Option<i32>,
    /// The gaps of the spin (`pinned` says whether the thread ran on the core alone).
    pub spin: CoreNoise,
    /// Wall time of the spin, nanoseconds.
    pub spin_wall_ns: u64,
    /// Times the kernel took the core from the spinning thread for another task (involuntary
    /// context switches).
    pub preemptions: u64,
    /// Time the spinning thread waited on the run queue meanwhile (other tasks, RT
    /// throttling), nanoseconds; `None` where the kernel does not keep it.
    pub run_delay_ns: Option<u64>,
    /// Interrupts that hit the core during the spin, by source, most first (sources with none
    /// left out); `None` when `/proc/interrupts` could not be read.
    pub interrupts: Option<Vec<SourceCount>>,
    /// Softirqs run on the core during the spin, by kind, most first; `None` when
    /// `/proc/softirqs` could not be read.
    pub softirqs: Option<Vec<SourceCount>>,
    /// Steal time of the core during the spin, nanoseconds; `None` when `/proc/stat` could not
    /// be read.
    pub steal_ns: Option<u64>,
    /// Lateness of wake-ups with idle states allowed, nanoseconds.
    pub wake_idle: LatencySummary,
    /// Lateness of wake-ups with `/dev/cpu_dma_latency` held at 0; `None` when it could not be
    /// held ([`CoreProbe::wake_held_refused`] says why).
    pub wake_held: Option<LatencySummary>,
    /// Why the latency target could not be held (it needs root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_held_refused: Option<String>,
}

/// The counts of each source that grew between two readings on `core`, most first.
fn grown(before: &CounterTable, after: &CounterTable, core: usize) -> Vec<SourceCount> {
    let earlier: std::collections::HashMap<&str, u64> =
        before.on_core(core).into_iter().map(|(row, n)| (row.source.as_str(), n)).collect();
    let mut grown: Vec<SourceCount> = after
        .on_core(core)
        .into_iter()
        .filter_map(|(row, n)| {
            let count = n.saturating_sub(earlier.get(row.source.as_str()).copied().unwrap_or(n));
            (count > 0).then(|| SourceCount {
                source: row.source.clone(),
                description: row.description.clone(),
                count,
            })
        })
        .collect();
    grown.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.source.cmp(&b.source)));
    grown
}

/// Sleeps to an absolute time every `period` for `length` and records how late each wake-up
/// was. A wake-up later than the next due time skips the missed ones instead of bunching them.
fn wake_lateness(length: Duration, period: Duration) -> LatencySummary {
    let period = period.as_nanos().max(1) as u64;
    let mut lateness = LatencyRecorder::new();
    let end = monotonic_ns() + length.as_nanos() as u64;
    let mut due = monotonic_ns() + period;
    while due <= end {
        sleep_until_ns(due);
        let woke = monotonic_ns();
        lateness.record(woke.saturating_sub(due));
        due += period;
        if due <= woke {
            due = woke + period;
        }
    }
    lateness.summary()
}

/// The lock file of probes of `core`, one for the whole machine: in `/run/lock`, where the
/// filesystem standard puts lock files (world-writable, emptied at boot), else in `/tmp`; not
/// under `TMPDIR`, which two processes may see differently.
fn probe_lock_path(core: usize) -> std::path::PathBuf {
    let dir = ["/run/lock", "/tmp"].into_iter().find(|d| std::path::Path::new(d).is_dir()).unwrap_or("/tmp");
    std::path::PathBuf::from(format!("{dir}/kairos-core-probe-cpu{core}.lock"))
}

/// How long a probe waits for another process's probe of the same core: longer than the
/// longest probe anything here runs (`kairos doctor --probe-ms` takes up to 60 s).
const PROBE_LOCK_WAIT: Duration = Duration::from_secs(90);

/// Runs the probe on a thread of its own (its policy and pinning stay there) and returns what
/// it found; fails when no thread can be started, or when another process's probe of the core
/// holds it past `PROBE_LOCK_WAIT` (90 s).
///
/// Probes of one core take turns across the machine (an `flock` on a file named after the
/// core): two probes spinning on the same core at once each take the core from the other, so
/// each measures the other's spin rather than the machine. Two `kairos lane node`s started
/// together on one host both probe the lane core at start, and promised their applications
/// about 4 ms of jitter that way, the scheduler's slice between two spinners. The second now
/// waits for the first (a few hundred milliseconds). A lock file that cannot be opened at all
/// (no writable `/run/lock` or `/tmp`) leaves the probe unserialised rather than refused: the figure is then
/// what it was before the lock.
pub fn probe_core(config: &CoreProbeConfig) -> std::io::Result<CoreProbe> {
    let config = *config;
    let _turn = match MachineLock::acquire(&probe_lock_path(config.core), PROBE_LOCK_WAIT) {
        Ok(held) => Some(held),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("the probe of core {} waited: {e}", config.core),
            ));
        }
        Err(_) => None,
    };
    let thread = std::thread::Builder::new().name("core-probe".into()).spawn(move || run(config))?;
    thread.join().map_err(|_| std::io::Error::other("the core probe's thread panicked"))
}

fn run(config: CoreProbeConfig) -> CoreProbe {
    let host = HostFs::real();
    let mut meter = GapMeter::new(config.core, config.gap_floor_ns);
    let fifo_priority =
        (config.fifo_priority > 0 && set_fifo(config.fifo_priority).is_ok()).then_some(config.fifo_priority);
    // Without the 1 ns slack a normal thread's wake-ups would be up to 50 us late by design.
    let _ = set_timer_slack_ns(1);

    let (interrupts_before, softirqs_before) = (host.interrupts().ok(), host.softirqs().ok());
    let steal_before = host.steal_ns_per_core().ok();
    let ((_, preempted_before), delay_before) = (thread_context_switches(), thread_run_delay_ns());
    let started = monotonic_ns();
    meter.spin(config.spin, None);
    let spin_wall_ns = monotonic_ns() - started;
    let ((_, preempted_after), delay_after) = (thread_context_switches(), thread_run_delay_ns());
    let steal_after = host.steal_ns_per_core().ok();
    let (interrupts_after, softirqs_after) = (host.interrupts().ok(), host.softirqs().ok());

    let steal_ns = match (steal_before, steal_after) {
        (Some(before), Some(after)) => {
            after.get(config.core).zip(before.get(config.core)).map(|(a, b)| a.saturating_sub(*b))
        }
        _ => None,
    };
    let counted = |before: Option<CounterTable>, after: Option<CounterTable>| {
        Some(grown(&before?, &after?, config.core))
    };

    let wake_idle = wake_lateness(config.wake, config.wake_period);
    let (wake_held, wake_held_refused) = match NoIdleStates::request() {
        Ok(held) => {
            let lateness = wake_lateness(config.wake, config.wake_period);
            drop(held);
            (Some(lateness), None)
        }
        Err(e) => (None, Some(format!("/dev/cpu_dma_latency: {e}"))),
    };

    CoreProbe {
        config,
        fifo_priority,
        spin: meter.finish(steal_ns.unwrap_or(0)),
        spin_wall_ns,
        preemptions: preempted_after.saturating_sub(preempted_before),
        run_delay_ns: delay_before.zip(delay_after).map(|(b, a)| a.saturating_sub(b)),
        interrupts: counted(interrupts_before, interrupts_after),
        softirqs: counted(softirqs_before, softirqs_after),
        steal_ns,
        wake_idle,
        wake_held,
        wake_held_refused,
    }
}

/// The most a loop on `core` loses to its core, measured as `kairos doctor` measures it (a probe
/// of `total` at the loop's own `SCHED_FIFO` priority, 0 for a normal thread): a spinning loop
/// loses the probe's longest spin gap; a sleeping one (`sleeps`) also waits to be woken, so
/// its figure is the later of that gap and the latest wake-up. Returns the figure, ns, and
/// what it is, for a log line (`kairos doctor --core 1: the longest gap of a 225 ms spin, as
/// SCHED_FIFO 50`).
pub fn loop_loss(
    core: usize,
    fifo_priority: i32,
    sleeps: bool,
    total: Duration,
) -> std::io::Result<(u64, String)> {
    let config = CoreProbeConfig { fifo_priority, ..CoreProbeConfig::lasting(core, total) };
    let probe = probe_core(&config)?;
    let wake = (probe.wake_idle.count > 0).then_some((probe.wake_idle.max, probe.wake_idle.count));
    let (loss, what) = worst_loss(sleeps, (probe.spin.max_gap_ns, config.spin), wake);
    let priority =
        if fifo_priority > 0 { format!("SCHED_FIFO {fifo_priority}") } else { "a normal thread".into() };
    let pinned = if probe.spin.pinned { "" } else { ", not pinned" };
    Ok((loss, format!("kairos doctor --core {core}: {what}, as {priority}{pinned}")))
}

/// The most a loop loses, given the probe's longest spin gap (ns, over the spin's length) and
/// its latest wake-up with idle states allowed (ns, of how many), and what that figure is.
fn worst_loss(sleeps: bool, spin: (u64, Duration), wake: Option<(u64, u64)>) -> (u64, String) {
    let spun = (spin.0, format!("the longest gap of a {} ms spin", spin.1.as_millis()));
    match wake {
        Some((late, count)) if sleeps && late > spin.0 => (late, format!("the latest of {count} wake-ups")),
        _ => spun,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_is_split_between_spinning_and_two_wake_up_phases() {
        let config = CoreProbeConfig::lasting(1, Duration::from_millis(2_000));
        assert_eq!((config.spin, config.wake), (Duration::from_millis(1_500), Duration::from_millis(250)));
        assert_eq!(config.total(), Duration::from_millis(2_000));
        let short = CoreProbeConfig::lasting(0, Duration::from_millis(80));
        assert_eq!((short.spin, short.wake), (Duration::from_millis(60), Duration::from_millis(10)));
    }

    #[test]
    fn only_sources_that_grew_are_kept_most_first() {
        let before =
            CounterTable::parse("CPU0 CPU1\n 1: 5 5 dev-a\nLOC: 10 10 Local timer\n 9: 0 0 gone\n").unwrap();
        let after =
            CounterTable::parse("CPU0 CPU1\n 1: 5 6 dev-a\nLOC: 90 13 Local timer\n 2: 4 4 new-dev\n")
                .unwrap();
        let on_1 = grown(&before, &after, 1);
        let counts: Vec<(&str, u64)> = on_1.iter().map(|s| (s.source.as_str(), s.count)).collect();
        // A source absent before (an IRQ set up meanwhile) has no known start and is left out.
        assert_eq!(counts, vec![("LOC", 3), ("1", 1)]);
        assert_eq!(on_1[0].description, "Local timer");
    }

    #[test]
    fn probes_of_one_core_take_turns() {
        // Two threads hold two open files of the lock, as two processes would.
        let core = kairos_sys::proc::last_core();
        let config =
            CoreProbeConfig { fifo_priority: 0, ..CoreProbeConfig::lasting(core, Duration::from_millis(80)) };
        let started = std::time::Instant::now();
        let other = std::thread::spawn(move || probe_core(&config).unwrap());
        probe_core(&config).unwrap();
        other.join().unwrap();
        let took = started.elapsed();
        assert!(took >= config.spin * 2, "two 80 ms probes of cpu{core} overlapped: both done in {took:?}");
    }

    #[test]
    fn a_short_probe_measures_this_core() {
        let core = kairos_sys::proc::last_core();
        let config =
            CoreProbeConfig { fifo_priority: 0, ..CoreProbeConfig::lasting(core, Duration::from_millis(80)) };
        let probe = probe_core(&config).unwrap();
        assert_eq!(probe.fifo_priority, None);
        assert!(probe.spin.pinned);
        assert!(probe.spin_wall_ns >= 60_000_000, "{}", probe.spin_wall_ns);
        assert!(probe.spin.lost_ns <= probe.spin_wall_ns);
        assert!(probe.wake_idle.count >= 5, "{:?}", probe.wake_idle);
        assert!(probe.interrupts.is_some() && probe.softirqs.is_some() && probe.steal_ns.is_some());
        assert_eq!(probe.wake_held.is_some(), probe.wake_held_refused.is_none());
        let json = serde_json::to_value(&probe).unwrap();
        assert!(json["spin"]["max_gap_ns"].is_u64());
    }

    #[test]
    fn a_sleeping_loop_is_charged_its_latest_wake_up_a_spinning_one_its_longest_gap() {
        let spin = (40_000, Duration::from_millis(225));
        let (ns, what) = worst_loss(true, spin, Some((75_000, 37)));
        assert_eq!((ns, what.as_str()), (75_000, "the latest of 37 wake-ups"));
        let (ns, what) = worst_loss(false, spin, Some((75_000, 37)));
        assert_eq!((ns, what.as_str()), (40_000, "the longest gap of a 225 ms spin"));
        // The larger of the two, whichever it is; no wake-ups measured: the spin's.
        assert_eq!(worst_loss(true, spin, Some((10_000, 37))).0, 40_000);
        assert_eq!(worst_loss(true, spin, None).0, 40_000);
    }
}

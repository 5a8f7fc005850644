//! The stall watch: when did a core stop running even its most urgent thread, and for how long?
//!
//! The [`noise`](crate::noise) probe's sampler runs at normal priority, so it cannot tell a core
//! taken by the machine (interrupts, the hypervisor, stop-class kernel work) from a core taken by
//! a real-time thread of the system under test. The watch can: it is one thread pinned to the
//! core at `SCHED_FIFO` 99, above anything an experiment runs, that sleeps to an absolute time
//! every `period` and notes how late it woke (as cyclictest does). Only what outranks every
//! real-time thread delays it, so a late wake-up is a stall of the machine, timed: it covers at
//! least `[due, woke]` in `CLOCK_MONOTONIC` nanoseconds, the clock the rest of Kairos uses, so
//! an experiment can ask whether a deadline miss coincides with one.
//!
//! It sees a stall that covers one of its wake-ups: every stall longer than `period`, and a
//! shorter one with probability length / period. Its cost is a wake-up every period (measured
//! and reported as a CPU fraction). Without the privilege to be `SCHED_FIFO` it still runs, and
//! `realtime` says its stalls may then be anyone's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use kairos_sys::clock::{monotonic_ns, sleep_until_ns};
use kairos_sys::stoppable_thread::{StoppableThread, ThreadDied};
use kairos_sys::thread::{pin_current_thread, set_fifo, thread_cpu_time_ns};
use serde::{Deserialize, Serialize};

/// How the watch runs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct StallWatchConfig {
    /// The core the watch's thread is pinned to: the core whose stalls it times.
    pub core: usize,
    /// How often the watch wakes (at least 1 us): stalls longer than this are all seen,
    /// shorter ones with probability length / period.
    pub period: Duration,
    /// Wake-ups later than this are stalls (below it: the timer's own latency).
    pub threshold_ns: u64,
    /// The watch's `SCHED_FIFO` priority, 1 to 99 (0: normal scheduling, so its stalls may be
    /// any thread's).
    pub fifo_priority: i32,
}

impl StallWatchConfig {
    /// A wake-up every millisecond at priority 99; stalls from 50 us.
    pub fn on_core(core: usize) -> Self {
        Self { core, period: Duration::from_millis(1), threshold_ns: 50_000, fifo_priority: 99 }
    }
}

/// A stretch of time the watch could not run: it was due at `due_ns` and woke at `woke_ns`
/// (`CLOCK_MONOTONIC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stall {
    /// When the watch was due to wake, `CLOCK_MONOTONIC` ns.
    pub due_ns: u64,
    /// When it woke, `CLOCK_MONOTONIC` ns (later than `due_ns` by more than the threshold).
    pub woke_ns: u64,
}

impl Stall {
    /// How late the watch woke, ns: the least the stall lasted.
    pub fn length_ns(&self) -> u64 {
        self.woke_ns - self.due_ns
    }

    /// Whether the stall overlaps `[from_ns, to_ns]`.
    pub fn overlaps(&self, from_ns: u64, to_ns: u64) -> bool {
        self.due_ns <= to_ns && self.woke_ns >= from_ns
    }
}

/// What the watch saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StallReport {
    /// The core watched.
    pub core: usize,
    /// It ran at `SCHED_FIFO` (otherwise its stalls may be any thread's).
    pub realtime: bool,
    /// How many times the watch woke, stalled or not.
    pub wakeups: u64,
    /// Every wake-up later than the threshold, in order.
    pub stalls: Vec<Stall>,
    /// The latest wake-up: the most the watch woke after it was due, ns.
    pub worst_ns: u64,
    /// The watch's CPU time over wall time.
    pub cpu_fraction: f64,
}

impl StallReport {
    /// The stalls overlapping `[from_ns, to_ns]` (`CLOCK_MONOTONIC`).
    pub fn during(&self, from_ns: u64, to_ns: u64) -> impl Iterator<Item = &Stall> {
        // Stalls are in time order: skip those that ended before `from_ns`.
        let first = self.stalls.partition_point(|s| s.woke_ns < from_ns);
        self.stalls[first..].iter().take_while(move |s| s.due_ns <= to_ns)
    }
}

/// A running stall watch; dropping it stops and joins its thread (the report is then lost).
#[derive(Debug)]
pub struct StallWatch {
    thread: StoppableThread<StallReport>,
}

impl StallWatch {
    /// Starts the watch's thread and returns once it is watching: pinned to its core, at its
    /// priority, its clock started. Returning earlier would leave a window the watch misses
    /// while its caller thinks it is covered: a thread started after it could take the core at
    /// `SCHED_FIFO` before the watch was raised, and the watch would begin only when that
    /// thread first slept. Fails only when the system cannot start a thread.
    pub fn start(config: StallWatchConfig) -> std::io::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let thread =
            StoppableThread::spawn(format!("stall-watch-{}", config.core), move |stop: &AtomicBool| {
                watch(config, stop, ready_tx)
            })?;
        // An error means the thread ended before it was ready (`finish` reports how); a watch
        // not ready within a second (a real-time thread spinning on its core before it was
        // raised) is returned anyway, late, rather than wait on that very stall.
        let _ = ready_rx.recv_timeout(std::time::Duration::from_secs(1));
        Ok(Self { thread })
    }

    /// Stops the watch (within one period) and reports, or says that its thread died.
    pub fn finish(self) -> Result<StallReport, ThreadDied> {
        self.thread.stop()
    }
}

fn watch(config: StallWatchConfig, stop: &AtomicBool, ready: SyncSender<()>) -> StallReport {
    let _ = pin_current_thread(config.core);
    let realtime = config.fifo_priority > 0 && set_fifo(config.fifo_priority).is_ok();
    let period = (config.period.as_nanos() as u64).max(1_000);
    let (cpu_start, wall_start) = (thread_cpu_time_ns(), monotonic_ns());
    let _ = ready.send(());
    let mut report = StallReport { core: config.core, realtime, ..StallReport::default() };
    let mut due = wall_start + period;
    while !stop.load(Ordering::Relaxed) {
        sleep_until_ns(due);
        let woke = monotonic_ns();
        report.wakeups += 1;
        let late = woke.saturating_sub(due);
        report.worst_ns = report.worst_ns.max(late);
        if late > config.threshold_ns {
            report.stalls.push(Stall { due_ns: due, woke_ns: woke });
        }
        // After a long stall, start afresh rather than fire the missed wake-ups back to back.
        due = (due + period).max(woke + period / 2);
    }
    let wall = monotonic_ns().saturating_sub(wall_start).max(1);
    report.cpu_fraction = thread_cpu_time_ns().saturating_sub(cpu_start) as f64 / wall as f64;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_are_found_by_time() {
        let report = StallReport {
            stalls: vec![
                Stall { due_ns: 100, woke_ns: 200 },
                Stall { due_ns: 1_000, woke_ns: 1_500 },
                Stall { due_ns: 5_000, woke_ns: 5_100 },
            ],
            ..StallReport::default()
        };
        let lengths = |a, b| report.during(a, b).map(Stall::length_ns).collect::<Vec<_>>();
        assert_eq!(lengths(0, 99), Vec::<u64>::new());
        assert_eq!(lengths(150, 1_000), vec![100, 500]);
        assert_eq!(lengths(1_600, 4_999), Vec::<u64>::new());
        assert_eq!(lengths(5_100, 9_000), vec![100]);
        assert!(Stall { due_ns: 10, woke_ns: 20 }.overlaps(20, 30));
    }

    #[test]
    fn the_watch_wakes_every_period_and_keeps_its_stalls_in_order() {
        // At normal priority, so the test needs no privilege.
        let config = StallWatchConfig {
            core: 0,
            period: Duration::from_millis(1),
            threshold_ns: 50_000,
            fifo_priority: 0,
        };
        let watch = StallWatch::start(config).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let report = watch.finish().unwrap();
        assert!(!report.realtime);
        // 100 ms at 1 ms: about 100 wake-ups, fewer when the machine is busy.
        assert!(report.wakeups >= 20 && report.wakeups <= 101, "{} wake-ups", report.wakeups);
        assert!(report.stalls.windows(2).all(|w| w[0].woke_ns <= w[1].due_ns));
        assert!(report.stalls.iter().all(|s| s.length_ns() > 50_000));
        assert!(report.cpu_fraction < 0.5);
    }

    /// The names of this process's threads, from `/proc/self/task/*/comm`.
    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_string())
            .collect()
    }

    #[test]
    fn dropping_the_watch_stops_and_joins_its_thread() {
        // A core number no other test uses, so the thread's name is this test's alone (pinning
        // to an absent core fails and the watch runs anyway).
        let config = StallWatchConfig { fifo_priority: 0, ..StallWatchConfig::on_core(977) };
        let listed = || thread_names().iter().any(|n| n == "stall-watch-977");
        // Within a second: the kernel may list a task a moment before it takes its name, and a
        // moment after it exits.
        let within_a_second = |want: bool| {
            (0..100).any(|_| {
                let seen = listed() == want;
                std::thread::sleep(Duration::from_millis(10));
                seen
            })
        };
        let watch = StallWatch::start(config).unwrap();
        // At once: `start` returns only once the watch is watching.
        assert!(listed(), "the watch thread runs when start returns");
        drop(watch);
        assert!(within_a_second(false), "the watch thread outlived its owner");
    }

    #[test]
    fn a_watch_whose_thread_died_reports_an_error() {
        let watch = StallWatch {
            thread: StoppableThread::spawn("stall-watch-x", |_: &AtomicBool| -> StallReport {
                panic!("clock gone")
            })
            .unwrap(),
        };
        let err = watch.finish().unwrap_err();
        assert_eq!(err.to_string(), "thread stall-watch-x died: clock gone");
    }
}

//! The periodic "realtime" task: the reader whose lateness the experiment measures.
//!
//! Each period it sleeps until its release time with an absolute `clock_nanosleep` (as
//! cyclictest does), runs its body (a burst of reads and one quiescent state, as a packet loop
//! does per burst), and records *completion lateness*: the end of the body minus the scheduled
//! release. That is wake-up lateness plus whatever reclamation the body was made to do. A period
//! whose body ends after the next release counts as an overrun, and the next release moves to the
//! first period boundary after it (missed releases are not replayed).

use kairos_metrics::LatencyRecorder;
use kairos_sys::clock::{monotonic_ns, sleep_until_ns};
use kairos_sys::thread::{pin_current_thread, set_fifo};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Periods run before recording starts.
pub const WARMUP_PERIODS: u64 = 20;

/// How the task runs.
#[derive(Debug, Clone, Copy)]
pub struct RealtimeSpec {
    /// Core to pin to.
    pub core: usize,
    /// `SCHED_FIFO` priority to ask for (0: do not ask).
    pub fifo_priority: i32,
    /// Release period.
    pub period: Duration,
}

/// What the task could get from the kernel.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RealtimeStatus {
    /// Pinned to its core.
    pub pinned: bool,
    /// Running `SCHED_FIFO`.
    pub sched_fifo: bool,
}

/// What one run of the task measured.
#[derive(Debug, Default)]
pub struct RealtimeRun {
    /// Completion lateness per period, ns: `wakeup` plus `in_task`.
    pub lateness: LatencyRecorder,
    /// Wake-up lateness per period (woken minus release), ns: the scheduler's and the machine's part.
    pub wakeup: LatencyRecorder,
    /// Time in the body per period (end minus woken), ns: the reads, the quiescent state, and any
    /// reclamation the task was made to do.
    pub in_task: LatencyRecorder,
    /// Periods whose body ended after the next release.
    pub overruns: u64,
    /// Periods run.
    pub periods: u64,
    /// Scheduling the task got.
    pub status: RealtimeStatus,
}

/// Sets up the calling thread as `spec` asks, as far as the kernel allows.
pub fn enter(spec: &RealtimeSpec) -> RealtimeStatus {
    let pinned = pin_current_thread(spec.core).is_ok();
    let sched_fifo = spec.fifo_priority > 0 && set_fifo(spec.fifo_priority).is_ok();
    RealtimeStatus { pinned, sched_fifo }
}

/// Runs `body` once per period until `stop` is raised; the calling thread must already be set up
/// with [`enter`].
pub fn run(
    spec: &RealtimeSpec,
    status: RealtimeStatus,
    stop: &AtomicBool,
    mut body: impl FnMut(),
) -> RealtimeRun {
    let period_ns = spec.period.as_nanos() as u64;
    // Sized up front (10 s) so recording never allocates inside the loop.
    let mut out = RealtimeRun {
        status,
        lateness: LatencyRecorder::preallocated(10_000_000_000),
        wakeup: LatencyRecorder::preallocated(10_000_000_000),
        in_task: LatencyRecorder::preallocated(10_000_000_000),
        ..RealtimeRun::default()
    };
    let mut release = monotonic_ns() + period_ns;
    let mut warmup = WARMUP_PERIODS;
    while !stop.load(Ordering::Relaxed) {
        sleep_until_ns(release);
        let woken = monotonic_ns();
        body();
        let end = monotonic_ns();
        if warmup > 0 {
            warmup -= 1;
        } else {
            out.lateness.record(end.saturating_sub(release));
            out.wakeup.record(woken.saturating_sub(release));
            out.in_task.record(end - woken);
            out.periods += 1;
        }
        release += period_ns;
        if end >= release {
            out.overruns += 1;
            release += (end - release) / period_ns * period_ns + period_ns;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_task_runs_once_per_period_and_counts_overruns() {
        let spec = RealtimeSpec { core: 0, fifo_priority: 0, period: Duration::from_millis(2) };
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = Arc::clone(&stop);
        let t = std::thread::spawn(move || {
            let status = enter(&spec);
            let mut n = 0;
            run(&spec, status, &stopper, || {
                n += 1;
                if n == WARMUP_PERIODS + 5 {
                    // One body longer than two periods.
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        });
        std::thread::sleep(Duration::from_millis(150));
        stop.store(true, Ordering::Relaxed);
        let run = t.join().unwrap();
        assert!(run.periods >= 10 && run.periods <= 56, "{} recorded periods in 150 ms at 2 ms", run.periods);
        assert!(run.overruns >= 1);
        assert!(run.lateness.max() >= 5_000_000, "the long body shows as lateness");
        assert_eq!(run.lateness.count(), run.periods);
    }
}

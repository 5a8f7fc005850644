//! Stall detection: naming readers that stop passing quiescent states, never interrupting them.
//!
//! Readers write nothing extra for this (their fast path stays one load). A watchdog thread ticks
//! every `threshold / 40` (at least 100 us). Each tick it compares every online reader's slot with
//! the grace-period counter, then starts a probe grace period, so a live reader's slot moves at
//! least once per tick. A reader whose slot is still below the value the previous tick published
//! has passed no quiescent state since that tick; the watchdog remembers since when, and once that
//! exceeds the threshold it reports the reader by name, once per stall, through a counter, a
//! bounded list and an optional callback. The report comes at most about two ticks (5%) after the
//! stall passed the threshold; a reader that goes offline or passes a quiescent state ends the
//! stall.
//!
//! The decision logic is [`StallDetector::tick`], a plain state machine that takes the counter
//! values and `now`, so it is tested without threads or clocks.

use crate::grace::GracePeriods;
use crate::stats::DomainStats;
use crate::sync::{self, AtomicBool, AtomicU64, Mutex, Ordering};
use std::fmt;
use std::time::Duration;

/// A stall report callback; it runs on the watchdog thread.
pub type OnStall = std::sync::Arc<dyn Fn(&StallReport) + Send + Sync>;

/// How stalls are detected and reported.
#[derive(Clone)]
pub struct StallConfig {
    /// A reader that passes no quiescent state for this long is reported.
    pub threshold: Duration,
    /// Called (on the watchdog thread) for each report.
    pub on_stall: Option<OnStall>,
}

impl StallConfig {
    /// Report readers stalled for `threshold`, with no callback.
    pub fn new(threshold: Duration) -> Self {
        Self { threshold, on_stall: None }
    }

    fn tick_ns(&self) -> u64 {
        (self.threshold.as_nanos() as u64 / 40).max(100_000)
    }
}

impl fmt::Debug for StallConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StallConfig")
            .field("threshold", &self.threshold)
            .field("on_stall", &self.on_stall.is_some())
            .finish()
    }
}

/// A reader found stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallReport {
    /// The name the reader registered with.
    pub reader: String,
    /// How long it had passed no quiescent state when reported (a lower bound).
    pub stalled_for: Duration,
}

/// Per-slot stall tracking, driven by [`StallDetector::tick`].
#[derive(Debug, Default)]
pub struct StallDetector {
    threshold_ns: u64,
    /// Counter value published by the previous tick's probe, and when.
    last_probe: Option<(u64, u64)>,
    slots: Vec<SlotWatch>,
}

#[derive(Debug, Default, Clone, Copy)]
struct SlotWatch {
    last_seen: u64,
    lagging_since_ns: Option<u64>,
    reported: bool,
}

impl StallDetector {
    /// A detector reporting stalls longer than `threshold`.
    pub fn new(threshold: Duration) -> Self {
        Self { threshold_ns: threshold.as_nanos() as u64, ..Self::default() }
    }

    /// One tick at `now_ns`: `slots` are the readers' counters (0 = offline), `gp` the counter
    /// before this tick's probe, `probe` the value the probe published. Returns the slots newly
    /// found stalled, with how long (ns) each has been stalled at least.
    pub fn tick(&mut self, now_ns: u64, gp: u64, slots: &[u64], probe: u64) -> Vec<(usize, u64)> {
        if self.slots.len() < slots.len() {
            self.slots.resize(slots.len(), SlotWatch::default());
        }
        let mut stalled = Vec::new();
        for (index, (&seen, watch)) in slots.iter().zip(self.slots.iter_mut()).enumerate() {
            if seen == 0 || seen >= gp {
                *watch = SlotWatch { last_seen: seen, ..SlotWatch::default() };
                continue;
            }
            if watch.lagging_since_ns.is_none() || seen != watch.last_seen {
                // Behind: since the last probe if it missed that probe, otherwise since now.
                let since = match self.last_probe {
                    Some((value, at)) if seen < value => at,
                    _ => now_ns,
                };
                *watch = SlotWatch { last_seen: seen, lagging_since_ns: Some(since), reported: false };
            }
            if let Some(since) = watch.lagging_since_ns {
                let stalled_ns = now_ns.saturating_sub(since);
                if !watch.reported && stalled_ns >= self.threshold_ns {
                    watch.reported = true;
                    stalled.push((index, stalled_ns));
                }
            }
        }
        self.last_probe = Some((probe, now_ns));
        stalled
    }
}

/// The stall reports of one domain: a count and the most recent [`StallLog::KEPT`].
#[derive(Default)]
pub(crate) struct StallLog {
    reports: Mutex<Vec<StallReport>>,
    count: AtomicU64,
}

impl StallLog {
    /// Reports kept; older ones are dropped (the count keeps them all).
    const KEPT: usize = 1024;

    fn keep(&self, report: StallReport) {
        let mut reports = sync::lock(&self.reports);
        if reports.len() >= Self::KEPT {
            reports.remove(0);
        }
        reports.push(report);
    }

    /// The reports kept, oldest first.
    pub(crate) fn reports(&self) -> Vec<StallReport> {
        sync::lock(&self.reports).clone()
    }

    /// Adds the number of stalls reported to `stats`.
    pub(crate) fn add_stats(&self, stats: &mut DomainStats) {
        stats.stalls_reported = self.count.load(Ordering::Relaxed);
    }
}

/// The watchdog thread's loop: ticks until `shutdown` is raised, reporting into `log`.
pub(crate) fn watch(grace: &GracePeriods, log: &StallLog, shutdown: &AtomicBool, config: &StallConfig) {
    let tick = config.tick_ns();
    let mut detector = StallDetector::new(config.threshold);
    let mut slots = Vec::new();
    let mut next = sync::now_ns();
    while !shutdown.load(Ordering::Acquire) {
        let now = sync::now_ns();
        if now < next {
            std::thread::park_timeout(Duration::from_nanos(next - now));
            continue;
        }
        next = now + tick;
        let gp = grace.snapshot(&mut slots);
        let probe = grace.start().value();
        for (slot, stalled_ns) in detector.tick(now, gp, &slots, probe) {
            let name = grace.reader_name(slot).unwrap_or_else(|| format!("slot {slot}"));
            let report = StallReport { reader: name, stalled_for: Duration::from_nanos(stalled_ns) };
            log.count.fetch_add(1, Ordering::Relaxed);
            if let Some(on_stall) = &config.on_stall {
                on_stall(&report);
            }
            log.keep(report);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_reader_that_keeps_up_is_never_reported() {
        let mut d = StallDetector::new(Duration::from_millis(10));
        for t in 0..1_000u64 {
            // The reader saw the previous probe each time.
            let gp = t + 1;
            assert!(d.tick(t * MS / 4, gp, &[gp], gp + 1).is_empty());
        }
    }

    #[test]
    fn a_stalled_reader_is_reported_once_just_after_the_threshold() {
        let mut d = StallDetector::new(Duration::from_millis(10));
        let tick = MS / 4;
        // The reader acknowledged probe 5 (published at t=0), then stalls.
        assert!(d.tick(0, 5, &[5], 6).is_empty());
        let mut reports = Vec::new();
        for i in 1..100u64 {
            let gp = 6 + (i - 1);
            for r in d.tick(i * tick, gp, &[5], gp + 1) {
                reports.push((i * tick, r));
            }
        }
        assert_eq!(reports.len(), 1, "one report per stall: {reports:?}");
        let (at, (slot, stalled_ns)) = reports[0];
        assert_eq!(slot, 0);
        assert!(stalled_ns >= 10 * MS, "reported at {stalled_ns} ns, before the threshold");
        assert!(at <= 10 * MS + 2 * tick, "reported at {at} ns, later than threshold + 2 ticks");
    }

    #[test]
    fn offline_readers_and_progress_end_a_stall() {
        let mut d = StallDetector::new(Duration::from_millis(1));
        assert!(d.tick(0, 5, &[5, 5], 6).is_empty());
        // Slot 0 goes offline; slot 1 lags but moves every tick (slow but alive).
        let mut reported = Vec::new();
        for i in 1..50u64 {
            reported.extend(d.tick(i * MS / 2, 5 + i, &[0, 4 + i], 6 + i));
        }
        assert!(reported.is_empty(), "{reported:?}");
    }

    #[test]
    fn a_second_stall_is_reported_again() {
        let mut d = StallDetector::new(Duration::from_millis(1));
        let mut count = 0;
        let mut gp = 2;
        for i in 0..20u64 {
            count += d.tick(i * MS / 2, gp, &[1], gp + 1).len();
            gp += 1;
        }
        // Progress: the reader catches up, then stalls again.
        d.tick(20 * MS / 2, gp, &[gp], gp + 1);
        gp += 1;
        let stuck = gp;
        for i in 21..40u64 {
            count += d.tick(i * MS / 2, gp, &[stuck], gp + 1).len();
            gp += 1;
        }
        assert_eq!(count, 2);
    }
}

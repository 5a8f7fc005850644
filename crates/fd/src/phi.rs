//! The phi accrual failure detector as a peer: `phi-accrual-failure-detector` 0.1 (a port of
//! Akka's and Pekko's), fed the same fresh heartbeats as Kairos's detector, at the times they
//! were received.
//!
//! The crate reads its clock itself; here its clock is the time the caller passes in (a
//! [`PhiWatch`] sets it before every call), so the peer is as sans-I/O as the core. It keeps
//! its statistics in whole milliseconds (`Duration::as_millis` of every setting), which would
//! round a microsecond setting to zero, so a detector counts time in a unit of its own,
//! [`PhiSettings::unit_ns`]: a millisecond for Akka's defaults, a microsecond for the tuned
//! settings; every duration is given to the crate in that unit.
//!
//! What the crate does that Akka does not: its history's mean divides the sum of the last
//! `max_sample_size` intervals by the count of *every* interval ever added (its ring buffer's
//! `len` is the number of pushes), so after `max_sample_size` heartbeats the mean and the
//! deviation shrink towards zero and the detector leans on `acceptable_heartbeat_pause` and
//! `min_std_deviation` alone. The measured rows are this crate as a user would run it; the test
//! `the_crate_s_mean_shrinks_past_its_window` pins the behaviour.
//!
//! Work per call: O(1) per heartbeat and per member asked; `poll` is O(members).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use phi_accrual_failure_detector::{Builder, Clock, Detector as _, FailureDetector, UnsyncState};

/// A phi detector's settings; durations in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhiSettings {
    /// Phi above which the member is taken for failed.
    pub threshold: f64,
    /// Intervals kept for the mean and deviation.
    pub max_sample_size: usize,
    /// The smallest deviation used, ns.
    pub min_std_deviation_ns: u64,
    /// A pause taken for normal, added to the mean, ns.
    pub acceptable_pause_ns: u64,
    /// The interval assumed before any is measured, ns.
    pub first_heartbeat_estimate_ns: u64,
    /// The detector's unit of time, ns (see the module doc).
    pub unit_ns: u64,
}

impl PhiSettings {
    /// Akka's defaults (`akka.cluster.failure-detector`): threshold 8, 1000 samples, deviation
    /// at least 100 ms, a 3 s acceptable pause, a first estimate of 1 s.
    pub fn akka() -> Self {
        Self {
            threshold: 8.0,
            max_sample_size: 1_000,
            min_std_deviation_ns: 100_000_000,
            acceptable_pause_ns: 3_000_000_000,
            first_heartbeat_estimate_ns: 1_000_000_000,
            unit_ns: 1_000_000,
        }
    }

    /// Akka's threshold and window, tuned to a heartbeat every `period_ns`: the first estimate
    /// is the period, the acceptable pause Kairos's threshold Lambda (`pause_ns`), and the
    /// deviation at least a quarter period; time counted in microseconds.
    pub fn tuned(period_ns: u64, pause_ns: u64) -> Self {
        Self {
            threshold: 8.0,
            max_sample_size: 1_000,
            min_std_deviation_ns: (period_ns / 4).max(1_000),
            acceptable_pause_ns: pause_ns,
            first_heartbeat_estimate_ns: period_ns.max(1_000),
            unit_ns: 1_000,
        }
    }
}

/// A time stamp in the detector's unit.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    ns: u64,
    unit_ns: u64,
}

/// The crate's clock, reading the time the caller passed in.
#[derive(Debug, Clone)]
pub struct PassedClock {
    now_ns: Arc<AtomicU64>,
    unit_ns: u64,
}

impl Clock for PassedClock {
    type Timestamp = Stamp;

    fn timestamp(&self) -> Stamp {
        Stamp { ns: self.now_ns.load(Ordering::Relaxed), unit_ns: self.unit_ns }
    }

    fn elapsed(before: &Stamp, after: &Stamp) -> Duration {
        Duration::from_nanos(after.ns.saturating_sub(before.ns))
    }

    fn elapsed_ms(before: &Stamp, after: &Stamp) -> f64 {
        after.ns.saturating_sub(before.ns) as f64 / after.unit_ns.max(1) as f64
    }
}

/// One monitored member's phi detector.
pub struct PhiDetector {
    detector: FailureDetector<UnsyncState<PassedClock>>,
    now_ns: Arc<AtomicU64>,
}

impl std::fmt::Debug for PhiDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhiDetector").field("now_ns", &self.now_ns).finish_non_exhaustive()
    }
}

impl PhiDetector {
    /// A detector with `settings`, or the crate's refusal of them.
    pub fn new(settings: &PhiSettings) -> Result<Self, phi_accrual_failure_detector::Error> {
        let now_ns = Arc::new(AtomicU64::new(0));
        let unit = |ns: u64| Duration::from_millis(ns / settings.unit_ns.max(1));
        let clock = PassedClock { now_ns: Arc::clone(&now_ns), unit_ns: settings.unit_ns.max(1) };
        let detector = Builder::<UnsyncState<phi_accrual_failure_detector::DefaultClock>>::new()
            .threshold(settings.threshold)
            .max_sample_size(settings.max_sample_size)
            .min_std_deviation(unit(settings.min_std_deviation_ns))
            .acceptable_heartbeat_pause(unit(settings.acceptable_pause_ns))
            .first_heartbeat_estimate(unit(settings.first_heartbeat_estimate_ns))
            .clock(clock)
            .build()?;
        Ok(Self { detector, now_ns })
    }

    /// A heartbeat received at `at_ns`.
    pub fn heartbeat(&self, at_ns: u64) {
        self.now_ns.store(at_ns, Ordering::Relaxed);
        self.detector.heartbeat();
    }

    /// Phi at `now_ns`.
    pub fn phi(&self, now_ns: u64) -> f64 {
        self.now_ns.store(now_ns, Ordering::Relaxed);
        self.detector.phi()
    }

    /// Whether the member is taken for alive at `now_ns`.
    pub fn is_available(&self, now_ns: u64) -> bool {
        self.now_ns.store(now_ns, Ordering::Relaxed);
        self.detector.is_available()
    }
}

/// A change of a phi watch's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhiEvent {
    /// Phi crossed the threshold for `member` (noticed at `at_ns`); its last heartbeat came at
    /// `last_heartbeat_ns`.
    Suspected {
        /// The member.
        member: u64,
        /// When it was noticed, ns.
        at_ns: u64,
        /// Its last heartbeat, ns.
        last_heartbeat_ns: u64,
    },
    /// Phi fell back under the threshold for `member`.
    Trusted {
        /// The member.
        member: u64,
        /// When, ns.
        at_ns: u64,
    },
}

#[derive(Debug)]
struct Watched {
    member: u64,
    detector: PhiDetector,
    last_heartbeat_ns: u64,
    suspected_since_ns: Option<u64>,
}

/// Phi detectors of every other member, with one setting.
#[derive(Debug)]
pub struct PhiWatch {
    settings: PhiSettings,
    watched: Vec<Watched>,
}

impl PhiWatch {
    /// A watch of `members` with `settings`.
    pub fn new(
        settings: PhiSettings,
        members: impl IntoIterator<Item = u64>,
    ) -> Result<Self, phi_accrual_failure_detector::Error> {
        let watched = members
            .into_iter()
            .map(|member| {
                Ok(Watched {
                    member,
                    detector: PhiDetector::new(&settings)?,
                    last_heartbeat_ns: 0,
                    suspected_since_ns: None,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { settings, watched })
    }

    /// The settings.
    pub fn settings(&self) -> &PhiSettings {
        &self.settings
    }

    /// A fresh heartbeat of `member` received at `at_ns`; `restarted` starts its history
    /// afresh (a new incarnation is a new member to Akka too).
    pub fn heartbeat(&mut self, member: u64, at_ns: u64, restarted: bool) {
        let Some(w) = self.watched.iter_mut().find(|w| w.member == member) else { return };
        if restarted && let Ok(fresh) = PhiDetector::new(&self.settings) {
            w.detector = fresh;
        }
        w.detector.heartbeat(at_ns);
        w.last_heartbeat_ns = w.last_heartbeat_ns.max(at_ns);
    }

    /// Asks every detector at `now_ns`; appends the changes.
    pub fn poll(&mut self, now_ns: u64, events: &mut Vec<PhiEvent>) {
        for w in &mut self.watched {
            let available = w.detector.is_available(now_ns);
            match (available, w.suspected_since_ns) {
                (false, None) => {
                    w.suspected_since_ns = Some(now_ns);
                    events.push(PhiEvent::Suspected {
                        member: w.member,
                        at_ns: now_ns,
                        last_heartbeat_ns: w.last_heartbeat_ns,
                    });
                }
                (true, Some(_)) => {
                    w.suspected_since_ns = None;
                    events.push(PhiEvent::Trusted { member: w.member, at_ns: now_ns });
                }
                _ => {}
            }
        }
    }

    /// When `member` was found failed (`None`: trusted, or not watched).
    pub fn suspected_since_ns(&self, member: u64) -> Option<u64> {
        self.watched.iter().find(|w| w.member == member).and_then(|w| w.suspected_since_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 100_000;

    #[test]
    fn tuned_phi_trusts_regular_heartbeats_and_suspects_silence() {
        let mut watch = PhiWatch::new(PhiSettings::tuned(T, 200_000), [2]).unwrap();
        let mut events = Vec::new();
        for k in 1..=500 {
            watch.heartbeat(2, k * T, false);
            watch.poll(k * T + T / 2, &mut events);
        }
        assert!(events.is_empty(), "{events:?}");
        let last = 500 * T;
        // Silent from here: suspected well within a millisecond, not before the pause.
        let mut at = last;
        while events.is_empty() {
            at += 1_000;
            watch.poll(at, &mut events);
            assert!(at < last + 2_000_000, "not suspected within 2 ms");
        }
        assert!(at > last + 200_000, "suspected {} us after the last heartbeat", (at - last) / 1_000);
        assert_eq!(watch.suspected_since_ns(2), Some(at));
        watch.heartbeat(2, at + 1, false);
        watch.poll(at + 2, &mut events);
        assert_eq!(events.last(), Some(&PhiEvent::Trusted { member: 2, at_ns: at + 2 }));
    }

    #[test]
    fn akka_defaults_wait_seconds() {
        let mut watch = PhiWatch::new(PhiSettings::akka(), [2]).unwrap();
        let mut events = Vec::new();
        for k in 1..=2_000 {
            watch.heartbeat(2, k * T, false);
        }
        let last = 2_000 * T;
        watch.poll(last + 2_900_000_000, &mut events);
        assert!(events.is_empty(), "Akka's defaults suspect after their 3 s pause");
        watch.poll(last + 5_000_000_000, &mut events);
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn the_crate_s_mean_shrinks_past_its_window() {
        let settings =
            PhiSettings { max_sample_size: 10, acceptable_pause_ns: 0, ..PhiSettings::tuned(T, 0) };
        let phi_after = |heartbeats: u64| {
            let d = PhiDetector::new(&settings).unwrap();
            for k in 1..=heartbeats {
                d.heartbeat(k * T);
            }
            d.phi(heartbeats * T + T)
        };
        // One period after the last heartbeat, with the same intervals throughout: Akka's phi
        // would be the same; this crate's grows as its mean shrinks.
        assert!(phi_after(200) > phi_after(10) + 1.0, "{} vs {}", phi_after(200), phi_after(10));
    }
}

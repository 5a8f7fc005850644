//! Clocks: one trait, a real monotonic clock, a TSC clock and a virtual clock for simulators.
//!
//! All clocks count nanoseconds in a `u64` from an origin of their own. [`MonotonicClock`] reads
//! the kernel's `CLOCK_MONOTONIC`, so its values can be handed to an absolute-time sleep
//! ([`kairos_sys::clock::sleep_until_ns`]); it costs one vDSO call (about 20-25 ns on the virtual
//! machines Kairos is developed on). [`TscClock`] reads the time-stamp counter through `quanta`
//! when the kernel reports a stable TSC and falls back to the monotonic clock otherwise; it is the
//! cheaper ruler for budgets checked per callback. [`VirtualClock`] only moves when told to.
//! Reads never allocate, block or fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of nanosecond timestamps that never go backwards.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now_ns(&self) -> u64;
}

/// The kernel's `CLOCK_MONOTONIC`, in nanoseconds since boot: the base of absolute sleeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        kairos_sys::clock::monotonic_ns()
    }
}

/// The time-stamp counter via `quanta`, calibrated against the monotonic clock.
///
/// `quanta` uses the TSC only when the CPU reports an invariant TSC; otherwise it reads the
/// monotonic clock, so this is never worse than [`MonotonicClock`], only sometimes cheaper.
#[derive(Debug, Clone)]
pub struct TscClock {
    clock: quanta::Clock,
    origin: quanta::Instant,
}

impl TscClock {
    /// A new TSC clock whose origin is now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.now();
        Self { clock, origin }
    }
}

impl Default for TscClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TscClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.clock.now().duration_since(self.origin).as_nanos() as u64
    }
}

/// A clock that moves only when advanced: the time source of simulators and policy tests.
///
/// Clones share one time line.
#[derive(Debug, Clone, Default)]
pub struct VirtualClock {
    now: Arc<AtomicU64>,
}

impl VirtualClock {
    /// A virtual clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves time forward by `delta_ns`.
    pub fn advance(&self, delta_ns: u64) {
        self.now.fetch_add(delta_ns, Ordering::AcqRel);
    }

    /// Sets time to `now_ns`; time never goes backwards, so an earlier value is ignored.
    pub fn set(&self, now_ns: u64) {
        self.now.fetch_max(now_ns, Ordering::AcqRel);
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }
}

/// Median cost of one read of `clock`, in nanoseconds, over `rounds` rounds of 1,000 reads.
///
/// Reported beside latency figures so a reader knows the resolution of the ruler.
pub fn read_cost_ns(clock: &dyn Clock, rounds: usize) -> f64 {
    const READS: u64 = 1_000;
    let mut costs: Vec<f64> = (0..rounds.max(1))
        .map(|_| {
            let start = kairos_sys::clock::monotonic_ns();
            let mut sink = 0u64;
            for _ in 0..READS {
                sink = sink.wrapping_add(clock.now_ns());
            }
            std::hint::black_box(sink);
            (kairos_sys::clock::monotonic_ns() - start) as f64 / READS as f64
        })
        .collect();
    costs.sort_by(f64::total_cmp);
    costs[costs.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_clocks_are_monotonic() {
        let clocks: [&dyn Clock; 2] = [&MonotonicClock, &TscClock::new()];
        for clock in clocks {
            let mut last = clock.now_ns();
            for _ in 0..10_000 {
                let now = clock.now_ns();
                assert!(now >= last, "clock went backwards: {last} -> {now}");
                last = now;
            }
        }
    }

    /// A TSC reading bracketed by two monotonic ones: `(tsc, monotonic midpoint, bracket
    /// width)`, the tightest of 20 tries. Being preempted between the reads widens the bracket,
    /// and the width is charged to the tolerance instead of being assumed small.
    fn paired_reading(tsc: &TscClock) -> (u64, u64, u64) {
        (0..20)
            .map(|_| {
                let before = MonotonicClock.now_ns();
                let t = tsc.now_ns();
                let after = MonotonicClock.now_ns();
                (t, before + (after - before) / 2, after - before)
            })
            .min_by_key(|&(_, _, width)| width)
            .expect("20 tries")
    }

    #[test]
    fn tsc_clock_agrees_with_monotonic_over_a_sleep() {
        let tsc = TscClock::new();
        let (t0, m0, width0) = paired_reading(&tsc);
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (t1, m1, width1) = paired_reading(&tsc);
        let (dt, dm) = ((t1 - t0) as f64, (m1 - m0) as f64);
        // The clocks must run at one rate. Each pairing is off by at most half its bracket, so
        // scheduling noise is accounted for exactly; what is left is the TSC's calibration
        // against the monotonic clock, far inside the 10% allowed, while the faults this test
        // is for are off by far more: a TSC scaled by the wrong frequency, a unit slip.
        let allowed = 0.10 * dm + (width0 + width1) as f64 / 2.0;
        assert!((dt - dm).abs() <= allowed, "tsc {dt} ns vs monotonic {dm} ns (allowed {allowed} ns)");
    }

    #[test]
    fn virtual_clock_moves_only_when_told() {
        let clock = VirtualClock::new();
        let shared = clock.clone();
        assert_eq!(clock.now_ns(), 0);
        shared.advance(1_500);
        assert_eq!(clock.now_ns(), 1_500);
        clock.set(1_000);
        assert_eq!(clock.now_ns(), 1_500, "set never moves time backwards");
        clock.set(9_000);
        assert_eq!(shared.now_ns(), 9_000);
    }

    #[test]
    fn read_cost_is_positive_and_plausible() {
        // A read costs tens of nanoseconds, so a round of 1,000 takes tens of microseconds. The
        // median of 21 rounds passes 10 us per read only if 11 rounds were each held up 10 ms:
        // the thread losing its core for 10 ms in more than half of 21 windows of tens of
        // microseconds, which noise alone does not do. A unit slip (us for ns) still fails.
        let cost = read_cost_ns(&MonotonicClock, 21);
        assert!(cost > 0.0 && cost < 10_000.0, "{cost} ns per read");
    }
}

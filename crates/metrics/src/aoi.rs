//! Age of information: the age process of a monitor and its time average and peaks.
//!
//! A monitor receives updates; update `i` was generated at `g_i` and delivered at `r_i`. The
//! monitor's age at time `t` is `t - u(t)`, where `u(t)` is the generation time of the freshest
//! update delivered by `t`. Its time average over `[start, end]` is the area under that sawtooth
//! divided by `end - start`; a peak is the age just before an informative delivery (one that
//! lowers the age). A delivery that is not fresher than what the monitor already has (generated
//! at or before `u(t)`) changes nothing: it is counted as obsolete.
//!
//! [`AgeProcess`] integrates the sawtooth exactly, event by event, in integer nanoseconds with
//! 128-bit areas (a one-second run squared overflows 64 bits). Before the first delivery the age
//! grows from zero at `start`, as if an update generated at `start` were there: the convention
//! of the source's calculator, which makes a monitor that receives nothing have average age
//! `(end - start) / 2`.
//!
//! [`AgeTable`] keeps one process per user and reports the mean over users (the source's
//! "average age per user") beside each user's own average.

use serde::Serialize;

/// The age process of one monitor. Feed deliveries in reception order.
#[derive(Debug, Clone)]
pub struct AgeProcess {
    start: u64,
    /// Generation time of the freshest update delivered so far.
    freshest: u64,
    /// Time of the last event integrated up to.
    last: u64,
    /// Area under the age curve from `start` to `last`, in ns².
    area: u128,
    peak_sum: u128,
    peak_max: u64,
    informative: u64,
    obsolete: u64,
    /// Deliveries stamped earlier than a previous one (clamped to it).
    out_of_order: u64,
}

/// What an [`AgeProcess`] measured over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct AgeSummary {
    /// Time-average age, ns.
    pub avg_age_ns: f64,
    /// Mean of the peaks, ns (0 when no update was informative).
    pub peak_age_ns: f64,
    /// Largest peak, or the age at the end when that is larger, ns.
    pub max_age_ns: u64,
    /// Deliveries that lowered the age.
    pub informative: u64,
    /// Deliveries no fresher than what the monitor had.
    pub obsolete: u64,
    /// Deliveries whose reception time was earlier than the previous one's.
    pub out_of_order: u64,
}

/// Area under `t - u` for `t` from `a` to `b` (`u <= a <= b`), in ns².
#[inline]
fn trapezoid(u: u64, a: u64, b: u64) -> u128 {
    let hi = u128::from(b - u);
    let lo = u128::from(a - u);
    // (hi² - lo²) / 2 = (hi - lo)(hi + lo) / 2; computed exactly, halved at the end.
    (hi - lo) * (hi + lo)
}

impl AgeProcess {
    /// A monitor whose observation starts at `start_ns` with age zero.
    pub fn new(start_ns: u64) -> Self {
        Self {
            start: start_ns,
            freshest: start_ns,
            last: start_ns,
            area: 0,
            peak_sum: 0,
            peak_max: 0,
            informative: 0,
            obsolete: 0,
            out_of_order: 0,
        }
    }

    /// Records the delivery at `received_ns` of an update generated at `generated_ns`.
    /// Returns whether it was informative (lowered the age).
    #[inline]
    pub fn deliver(&mut self, generated_ns: u64, received_ns: u64) -> bool {
        let received = if received_ns < self.last {
            self.out_of_order += 1;
            self.last
        } else {
            received_ns
        };
        self.area += trapezoid(self.freshest, self.last, received);
        self.last = received;
        if generated_ns <= self.freshest || generated_ns > received {
            // Not fresher, or stamped in the future (a clock mix-up): changes nothing.
            self.obsolete += 1;
            return false;
        }
        let peak = received - self.freshest;
        self.peak_sum += u128::from(peak);
        self.peak_max = self.peak_max.max(peak);
        self.informative += 1;
        self.freshest = generated_ns;
        true
    }

    /// The current age at `now_ns` (never negative).
    pub fn age_at(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.freshest)
    }

    /// Generation time of the freshest update delivered so far (`start` if none).
    pub fn freshest_ns(&self) -> u64 {
        self.freshest
    }

    /// Twice the integral of the age from `start` to `end_ns`, in ns² (exact). Differences of
    /// two readings give the age over a window.
    pub fn doubled_area_to(&self, end_ns: u64) -> u128 {
        let end = end_ns.max(self.last);
        self.area + trapezoid(self.freshest, self.last, end)
    }

    /// The summary over `[start, end_ns]`.
    pub fn summary(&self, end_ns: u64) -> AgeSummary {
        let end = end_ns.max(self.last);
        let span = (end - self.start).max(1) as f64;
        AgeSummary {
            avg_age_ns: self.doubled_area_to(end) as f64 / 2.0 / span,
            peak_age_ns: if self.informative == 0 {
                0.0
            } else {
                self.peak_sum as f64 / self.informative as f64
            },
            max_age_ns: self.peak_max.max(end - self.freshest),
            informative: self.informative,
            obsolete: self.obsolete,
            out_of_order: self.out_of_order,
        }
    }
}

/// One [`AgeProcess`] per user (users are `0..n`).
#[derive(Debug, Clone)]
pub struct AgeTable {
    users: Vec<AgeProcess>,
    start: u64,
}

/// What an [`AgeTable`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct AgeTableSummary {
    /// Unweighted mean over users of each user's time-average age, ns.
    pub avg_age_ns: f64,
    /// Unweighted mean over users of each user's mean peak age (users with a peak), ns.
    pub peak_age_ns: f64,
    /// Largest age any user reached, ns.
    pub max_age_ns: u64,
    /// Deliveries that lowered their user's age, summed over users.
    pub informative: u64,
    /// Deliveries no fresher than what their user's monitor had, summed over users.
    pub obsolete: u64,
    /// Deliveries received earlier than their user's previous one, summed over users.
    pub out_of_order: u64,
    /// Each user's own summary, by user.
    #[serde(skip)]
    pub per_user: Vec<AgeSummary>,
}

impl AgeTable {
    /// A table of `users` monitors (users `0..users`), each observed from `start_ns` with age
    /// zero.
    pub fn new(users: usize, start_ns: u64) -> Self {
        Self { users: vec![AgeProcess::new(start_ns); users], start: start_ns }
    }

    /// The number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the table has no user.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// When observation started, ns on the clock the deliveries are stamped with.
    pub fn start_ns(&self) -> u64 {
        self.start
    }

    /// Records a delivery to `user`; `None` when the user is out of range.
    #[inline]
    pub fn deliver(&mut self, user: usize, generated_ns: u64, received_ns: u64) -> Option<bool> {
        self.users.get_mut(user).map(|p| p.deliver(generated_ns, received_ns))
    }

    /// The age process of `user`; `None` when the user is out of range.
    pub fn user(&self, user: usize) -> Option<&AgeProcess> {
        self.users.get(user)
    }

    /// Sum over users of [`AgeProcess::doubled_area_to`]: a window's mean age over users is the
    /// difference of two readings over `2 * window * users`.
    pub fn doubled_area_sum(&self, end_ns: u64) -> u128 {
        self.users.iter().map(|p| p.doubled_area_to(end_ns)).sum()
    }

    /// The summary over `[start, end_ns]`: every user's, and their means.
    pub fn summary(&self, end_ns: u64) -> AgeTableSummary {
        let per_user: Vec<AgeSummary> = self.users.iter().map(|p| p.summary(end_ns)).collect();
        let n = per_user.len().max(1) as f64;
        let with_peaks: Vec<&AgeSummary> = per_user.iter().filter(|s| s.informative > 0).collect();
        AgeTableSummary {
            avg_age_ns: per_user.iter().map(|s| s.avg_age_ns).sum::<f64>() / n,
            peak_age_ns: if with_peaks.is_empty() {
                0.0
            } else {
                with_peaks.iter().map(|s| s.peak_age_ns).sum::<f64>() / with_peaks.len() as f64
            },
            max_age_ns: per_user.iter().map(|s| s.max_age_ns).max().unwrap_or(0),
            informative: per_user.iter().map(|s| s.informative).sum(),
            obsolete: per_user.iter().map(|s| s.obsolete).sum(),
            out_of_order: per_user.iter().map(|s| s.out_of_order).sum(),
            per_user,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_updates_with_constant_delay_give_delay_plus_half_period() {
        // Generated every 100 ns from 0, delivered 30 ns later: age saws between 30 and 130.
        let mut p = AgeProcess::new(0);
        for i in 1..=1000u64 {
            assert!(p.deliver(i * 100, i * 100 + 30));
        }
        let s = p.summary(1000 * 100 + 30);
        // The first 130 ns ramp from 0 is the only deviation from 30 + 50 = 80.
        assert!((s.avg_age_ns - 80.0).abs() < 0.1, "{s:?}");
        assert!((s.peak_age_ns - 130.0).abs() < 0.01, "{s:?}");
        assert_eq!(s.informative, 1000);
    }

    #[test]
    fn obsolete_and_out_of_order_deliveries_do_not_lower_the_age() {
        let mut p = AgeProcess::new(0);
        assert!(p.deliver(10, 20));
        assert!(!p.deliver(5, 30), "older than what the monitor has");
        assert!(!p.deliver(10, 40), "same generation time");
        assert!(!p.deliver(50, 45), "generated after it was received");
        assert!(p.deliver(30, 35), "late stamp, clamped to the previous reception, still fresher");
        let s = p.summary(60);
        assert_eq!(s.obsolete, 3);
        assert_eq!(s.out_of_order, 1);
    }

    #[test]
    fn hand_computed_area() {
        // Start 0. Deliver g=2 at 5: area 0..5 under t is 12.5. Then age t-2 from 5 to 9:
        // (7² - 3²)/2 = 20. Deliver g=8 at 9, then t-8 from 9 to 10: (2² - 1²)/2 = 1.5.
        let mut p = AgeProcess::new(0);
        p.deliver(2, 5);
        p.deliver(8, 9);
        let s = p.summary(10);
        assert!((s.avg_age_ns - (12.5 + 20.0 + 1.5) / 10.0).abs() < 1e-9, "{s:?}");
        assert!((s.peak_age_ns - (5.0 + 7.0) / 2.0).abs() < 1e-9);
        assert_eq!(s.max_age_ns, 7);
    }

    #[test]
    fn a_user_that_receives_nothing_ages_from_the_start() {
        let t = AgeTable::new(2, 1000);
        let s = t.summary(3000);
        assert!((s.avg_age_ns - 1000.0).abs() < 1e-9);
        assert_eq!(s.max_age_ns, 2000);
    }

    #[test]
    fn squared_nanoseconds_of_long_runs_do_not_overflow() {
        let mut p = AgeProcess::new(0);
        let hour = 3_600_000_000_000u64;
        p.deliver(hour, hour + 1);
        // Two ramps of one hour each: the average age is half an hour.
        let s = p.summary(2 * hour);
        assert!((s.avg_age_ns / hour as f64 - 0.5).abs() < 1e-6, "{s:?}");
    }
}

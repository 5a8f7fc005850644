//! The kernel's clocks and absolute sleeps, in `u64` nanoseconds.
//!
//! Kairos measures on `CLOCK_MONOTONIC` (it never steps, and absolute sleeps take it), reads
//! `CLOCK_REALTIME` only to convert the kernel's socket time stamps, and spins or sleeps to
//! absolute deadlines so a periodic loop does not drift by the time each iteration took. A read
//! is one vDSO call, never blocks, allocates or fails: `clock_gettime` can fail only for a clock
//! Linux does not define or a bad pointer, and neither can happen here.

pub(crate) fn timespec_ns(ts: &libc::timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub(crate) fn read_clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec and `id` is a clock id the kernel defines;
    // clock_gettime writes only into `ts`.
    unsafe { libc::clock_gettime(id, &mut ts) };
    timespec_ns(&ts)
}

/// `CLOCK_MONOTONIC` in nanoseconds (since boot).
#[inline]
pub fn monotonic_ns() -> u64 {
    read_clock(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds since the epoch: the clock of the kernel's socket receive
/// time stamps.
#[inline]
pub fn realtime_ns() -> u64 {
    read_clock(libc::CLOCK_REALTIME)
}

/// The monotonic time now and `CLOCK_REALTIME` minus `CLOCK_MONOTONIC`, to convert the kernel's
/// socket receive stamps ([`stamp_to_monotonic`]). The realtime clock is
/// read between two monotonic reads and set against their midpoint; a pair far apart (the
/// thread was preempted between the reads, which would shift every stamp of the burst by the
/// preemption: a datagram seemed to arrive 33 us before it was sent) is read again, up to
/// `OFFSET_READS` times, and the closest pair kept.
pub fn realtime_offset() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..OFFSET_READS {
        let before = monotonic_ns();
        let real = realtime_ns();
        let after = monotonic_ns();
        let gap = after.saturating_sub(before);
        if gap < best.0 {
            best = (gap, after, real.saturating_sub(before + gap / 2));
        }
        if gap <= OFFSET_GAP_NS {
            break;
        }
    }
    (best.1, best.2)
}

/// How many times [`realtime_offset`] reads the clocks at most.
const OFFSET_READS: usize = 4;
/// A pair of monotonic reads closer than this had no preemption between them (three vDSO
/// clock reads take well under a microsecond).
const OFFSET_GAP_NS: u64 = 2_000;

/// A `CLOCK_REALTIME` receive stamp as `CLOCK_MONOTONIC`, given the offset [`realtime_offset`]
/// read and a monotonic time read after the datagram arrived (a stamp can be no later than
/// that: a stale offset cannot put it in the future).
#[inline]
pub fn stamp_to_monotonic(stamp_ns: u64, offset_ns: u64, mono_now_ns: u64) -> u64 {
    stamp_ns.saturating_sub(offset_ns).min(mono_now_ns)
}

/// Busy-waits until `CLOCK_MONOTONIC` reaches `deadline_ns`: the stand-in for a fixed amount of
/// computation in experiments.
pub fn spin_until_ns(deadline_ns: u64) {
    while monotonic_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (an absolute sleep, as cyclictest does),
/// resuming after signals. Returns at once for a deadline in the past.
pub fn sleep_until_ns(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: `ts` is a valid timespec; with TIMER_ABSTIME the remainder pointer may be null.
        let rc = unsafe {
            libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut())
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_sleep_wakes_after_the_deadline() {
        let deadline = monotonic_ns() + 2_000_000;
        sleep_until_ns(deadline);
        assert!(monotonic_ns() >= deadline);
    }

    #[test]
    fn spinning_ends_at_the_deadline() {
        let deadline = monotonic_ns() + 1_000_000;
        spin_until_ns(deadline);
        assert!(monotonic_ns() >= deadline);
    }

    #[test]
    fn the_offset_converts_realtime_to_monotonic() {
        let (mono, offset) = realtime_offset();
        let (real_now, mono_now) = (realtime_ns(), monotonic_ns());
        assert!(mono <= mono_now);
        // Now, converted with the offset, is the monotonic now give or take a preemption.
        let converted = real_now.saturating_sub(offset) as i64;
        assert!((converted - mono_now as i64).abs() < 5_000_000, "{converted} vs {mono_now}");
        assert_eq!(stamp_to_monotonic(real_now, offset, mono), (real_now - offset).min(mono));
    }

    #[test]
    fn realtime_is_after_2020_and_monotonic_moves_forward() {
        assert!(realtime_ns() > 1_577_836_800 * 1_000_000_000);
        let a = monotonic_ns();
        assert!(monotonic_ns() >= a);
    }
}

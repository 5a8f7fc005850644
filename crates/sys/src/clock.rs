//! The kernel's clocks and absolute sleeps, in `u64` nanoseconds.
//!
//! Kairos measures on `CLOCK_MONOTONIC` (it never steps, and absolute sleeps take it), reads
//! `CLOCK_REALTIME` only to convert the kernel's socket time stamps, and spins or sleeps to
//! absolute deadlines so a periodic loop does not drift by the time each iteration took. A read
//! is one vDSO call, never blocks, allocates or fails: `clock_gettime` can fail only for a clock
//! Linux does not define or a bad pointer, and neither can happen here.

fn timespec_ns(ts: &libc::timespec) -> u64 {
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
    fn realtime_is_after_2020_and_monotonic_moves_forward() {
        assert!(realtime_ns() > 1_577_836_800 * 1_000_000_000);
        let a = monotonic_ns();
        assert!(monotonic_ns() >= a);
    }
}

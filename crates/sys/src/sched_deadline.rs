//! `SCHED_DEADLINE`: the kernel's EDF scheduler with constant-bandwidth reservations, entered
//! through `sched_setattr(2)` (libc has no wrapper, so the raw system call).
//!
//! A thread reserves `runtime` of CPU time in every `period`, to be used before `deadline`
//! (relative to the period's start). The kernel admits a reservation only while the sum of
//! runtime / period over its root domain stays under `sched_rt_runtime_us` / `sched_rt_period_us`
//! of its cores, refuses it with `EBUSY` otherwise, with `EPERM` without `CAP_SYS_NICE`, and
//! with `EINVAL` unless runtime <= deadline <= period; those answers come back as `io::Error`.

use std::io;

/// One thread's reservation, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineReservation {
    /// CPU time the thread may use per period.
    pub runtime_ns: u64,
    /// By when, after each period's start, the runtime is due.
    pub deadline_ns: u64,
    /// The reservation's period.
    pub period_ns: u64,
}

/// `struct sched_attr` of `sched_setattr(2)` (its first version, 48 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

/// The policy number of `SCHED_DEADLINE` in `<linux/sched.h>`.
const SCHED_DEADLINE: u32 = 6;

/// Puts the calling thread under `SCHED_DEADLINE` with `reservation`; the kernel's period
/// starts now.
pub fn set_deadline(reservation: DeadlineReservation) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: SCHED_DEADLINE,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: reservation.runtime_ns,
        sched_deadline: reservation.deadline_ns,
        sched_period: reservation.period_ns,
    };
    // SAFETY: `attr` is a valid sched_attr of the size it declares, alive for the call; pid 0 is
    // the calling thread and flags 0 is the only defined value.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Puts thread `tid` (of any process the caller may act on) back under `SCHED_OTHER`, ending
/// a reservation it holds: a cleanup that must move a deadline thread between cpusets first
/// frees its bandwidth, which the kernel would otherwise have to admit in the new domain.
pub fn end_reservation_of(tid: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call; a thread id that names no thread is
    // answered with ESRCH.
    let rc = unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::ProcStat;

    /// Whether this process is root, as SCHED_DEADLINE needs; when not, says the test is skipped.
    fn root_or_skipped() -> bool {
        let root = crate::user::effective_user_id() == 0;
        if !root {
            eprintln!("skipped: SCHED_DEADLINE needs root");
        }
        root
    }

    #[test]
    fn the_attribute_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<SchedAttr>(), 48);
    }

    #[test]
    fn a_runtime_over_the_period_is_refused_with_the_kernel_reason() {
        let bad = DeadlineReservation { runtime_ns: 2_000_000, deadline_ns: 1_000_000, period_ns: 1_000_000 };
        let err = std::thread::spawn(move || set_deadline(bad)).join().unwrap().unwrap_err();
        // EINVAL for the parameters, or EPERM first without the privilege.
        assert!(matches!(err.raw_os_error(), Some(libc::EINVAL | libc::EPERM)), "{err}");
    }

    #[test]
    fn a_small_reservation_is_admitted_as_root() {
        if !root_or_skipped() {
            return;
        }
        let small =
            DeadlineReservation { runtime_ns: 100_000, deadline_ns: 10_000_000, period_ns: 10_000_000 };
        // A thread of its own: the reservation ends with it.
        let result = std::thread::spawn(move || set_deadline(small)).join().unwrap();
        // EBUSY when other tests' real-time threads hold the bandwidth; anything else is a bug.
        if let Err(e) = result {
            assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{e}");
        }
    }

    #[test]
    fn another_thread_ends_a_reservation() {
        if !root_or_skipped() {
            return;
        }
        let policy =
            |tid: i32| ProcStat::read(format!("/proc/self/task/{tid}/stat")).unwrap().policy().unwrap();
        let (told, heard) = std::sync::mpsc::channel();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let small =
                DeadlineReservation { runtime_ns: 100_000, deadline_ns: 10_000_000, period_ns: 10_000_000 };
            told.send(set_deadline(small).map(|()| crate::thread::thread_id())).unwrap();
            let _ = wait.recv();
        });
        match heard.recv().unwrap() {
            Ok(tid) => {
                assert_eq!(policy(tid), SCHED_DEADLINE);
                end_reservation_of(tid).unwrap();
                assert_eq!(policy(tid), libc::SCHED_OTHER as u32);
            }
            // Other tests' real-time threads may hold the bandwidth.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{e}"),
        }
        release.send(()).unwrap();
        holder.join().unwrap();
        assert!(end_reservation_of(i32::MAX).is_err(), "no such thread");
    }
}

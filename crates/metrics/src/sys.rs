//! The syscalls measurements need, fenced in one place: clocks, absolute sleeps, pinning,
//! real-time priority, thread CPU time and `/proc` readings.
//!
//! Every function reports failure as an `io::Error` (or `None`) instead of panicking, because
//! whether a thread may be pinned or made real-time depends on the machine and the user, and the
//! experiments degrade and say so rather than stop.

use std::io;

fn timespec_ns(ts: &libc::timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn read_clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec and `id` is a clock id the kernel defines;
    // clock_gettime writes only into `ts`.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime({id}) failed");
    timespec_ns(&ts)
}

/// `CLOCK_MONOTONIC` in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    read_clock(libc::CLOCK_MONOTONIC)
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_time_ns() -> u64 {
    read_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Busy-waits until `CLOCK_MONOTONIC` reaches `deadline_ns`: the stand-in for a fixed amount of
/// computation in experiments.
pub fn spin_until_ns(deadline_ns: u64) {
    while monotonic_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (an absolute sleep, as cyclictest does),
/// resuming after signals.
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

/// Pins the calling thread to one core.
pub fn pin_current_thread(core: usize) -> io::Result<()> {
    if core >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("core {core} out of range")));
    }
    // SAFETY: cpu_set_t is plain data for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `core` < CPU_SETSIZE was checked above, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: pid 0 names the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Makes the calling thread `SCHED_FIFO` at `priority` (1-99). Fails without `CAP_SYS_NICE`.
pub fn set_fifo(priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Sets the nice value of the calling thread (not the whole process: Linux niceness is per task).
pub fn set_nice(nice: i32) -> io::Result<()> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: PRIO_PROCESS with a thread id sets that one task's niceness; no pointers involved.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Locks current and future pages in memory so a real-time loop takes no page faults.
pub fn lock_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Stops the C allocator from returning memory to the kernel and from serving large blocks with
/// `mmap`, so freeing never unmaps pages. Unmapping sends TLB-shootdown interrupts to every core
/// running the process, realtime cores included; realtime guides advise this with `mlockall`.
/// Returns whether the allocator accepted it (glibc only).
pub fn disable_heap_trimming() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt takes two integers and changes allocator tunables only.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1 && libc::mallopt(libc::M_MMAP_MAX, 0) == 1
        }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

/// Holds `/dev/cpu_dma_latency` at 0 us while alive: cores stop entering idle states (on a guest
/// with the haltpoll driver, an idle vCPU polls instead of halting), so a realtime thread's
/// wake-up does not wait for a halted core to be rescheduled. The kernel restores the previous
/// target when the file is closed. cyclictest does the same by default. Needs root.
#[derive(Debug)]
pub struct NoIdleStates {
    _file: std::fs::File,
}

impl NoIdleStates {
    /// Asks for a 0 us wake-up latency target; fails without root or without the device.
    pub fn request() -> io::Result<Self> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency")?;
        file.write_all(&0i32.to_ne_bytes())?;
        Ok(Self { _file: file })
    }
}

/// Number of cores this process may run on.
pub fn online_cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The highest-numbered core this process may use: where experiments put the system under test
/// (core 0 keeps the senders and the housekeeping).
pub fn last_core() -> usize {
    online_cores() - 1
}

/// The kernel release string (`uname -r`), or `"unknown"`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// The CPU model name from `/proc/cpuinfo`, or `"unknown"`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// Kernel clock ticks per second (`USER_HZ`), the unit of `/proc/stat`.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes a constant name and has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as u64 } else { 100 }
}

/// Steal time per core in nanoseconds since boot, from `/proc/stat` (index = core number).
///
/// Steal is time the hypervisor ran something else while this guest wanted the core.
pub fn steal_ns_per_core() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_steal_ns(&stat, clock_ticks_per_second())
}

fn parse_steal_ns(stat: &str, ticks_per_second: u64) -> Option<Vec<u64>> {
    let mut cores = Vec::new();
    for line in stat.lines() {
        let mut fields = line.split_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(index) = name.strip_prefix("cpu").filter(|i| !i.is_empty()) else {
            continue;
        };
        let index: usize = index.parse().ok()?;
        // user nice system idle iowait irq softirq steal
        let steal: u64 = fields.nth(7)?.parse().ok()?;
        if cores.len() <= index {
            cores.resize(index + 1, 0);
        }
        cores[index] = steal * 1_000_000_000 / ticks_per_second;
    }
    Some(cores)
}

/// Voluntary and involuntary context switches of the calling thread so far.
pub fn thread_context_switches() -> (u64, u64) {
    // SAFETY: rusage is plain data for which all-zero is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD fills `usage`, a valid writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    if rc != 0 {
        return (0, 0);
    }
    (usage.ru_nvcsw as u64, usage.ru_nivcsw as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_parsed_per_core_in_nanoseconds() {
        let stat =
            "cpu  10 0 5 100 0 0 0 7 0 0\ncpu0 5 0 2 50 0 0 0 3 0 0\ncpu1 5 0 3 50 0 0 0 4 0 0\nintr 1\n";
        assert_eq!(parse_steal_ns(stat, 100), Some(vec![30_000_000, 40_000_000]));
    }

    #[test]
    fn steal_of_this_machine_is_readable() {
        let steal = steal_ns_per_core().expect("/proc/stat readable");
        assert!(steal.len() >= online_cores(), "{} cores in /proc/stat", steal.len());
    }

    #[test]
    fn absolute_sleep_wakes_after_the_deadline() {
        let deadline = monotonic_ns() + 2_000_000;
        sleep_until_ns(deadline);
        assert!(monotonic_ns() >= deadline);
    }

    #[test]
    fn pinning_to_an_absent_core_is_an_error_not_a_panic() {
        assert!(pin_current_thread(100_000).is_err());
    }

    #[test]
    fn thread_cpu_time_grows_while_spinning() {
        let before = thread_cpu_time_ns();
        let end = monotonic_ns() + 5_000_000;
        while monotonic_ns() < end {}
        assert!(thread_cpu_time_ns() > before);
    }
}

//! What the machine is, read from `/proc`: cores, kernel release, CPU model, and the steal time
//! the hypervisor took from each core; and a process's or thread's own `stat` line.
//!
//! Experiments print these beside every figure (a result means little without the machine it
//! came from) and use the core count to place threads. Readings that fail fall back to a value
//! that says so (`"unknown"`, `None`) instead of failing the run.
//!
//! [`ProcStat`] splits a `stat` line once, here, because its second field (the command name)
//! may hold spaces and parentheses: every reader of a process's state, parent or scheduling
//! policy must split after the last `)`, which is easy to get wrong by hand.

use std::path::Path;

/// Number of cores this process may run on (at least 1).
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

/// This boot's identity (`/proc/sys/kernel/random/boot_id`): it changes when the machine
/// restarts, so a program can tell whether what it left in the page cache can have been lost.
/// `None` where the kernel does not say.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
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

/// The CPU time another process (every thread of it, ended ones included) has used, in
/// nanoseconds: its CPU-time clock (`clock_getcpuclockid`), exact where `/proc`'s counters are
/// in clock ticks. An error once the process is gone.
pub fn process_cpu_time_ns(pid: u32) -> std::io::Result<u64> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes a clock id into `clock`, a valid clockid_t; a pid
    // that names no process is an error return, not undefined behaviour.
    let rc = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec and `clock` the id the kernel just gave.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(crate::clock::timespec_ns(&ts))
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

pub(crate) fn parse_steal_ns(stat: &str, ticks_per_second: u64) -> Option<Vec<u64>> {
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

/// One process's or thread's `/proc/.../stat` line (proc(5)), split into its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// Fields 3 onwards in proc(5)'s numbering: those after the parenthesised command name.
    after_name: Vec<String>,
}

impl ProcStat {
    /// Splits a `stat` line; `None` when it has no command name in parentheses.
    pub fn parse(line: &str) -> Option<Self> {
        let (_, after_name) = line.rsplit_once(')')?;
        Some(Self { after_name: after_name.split_whitespace().map(str::to_string).collect() })
    }

    /// Reads and splits the `stat` file at `path` (`/proc/<pid>/stat`,
    /// `/proc/<pid>/task/<tid>/stat`, `/proc/thread-self/stat`); `None` when it cannot be read,
    /// as when the process is gone.
    pub fn read(path: impl AsRef<Path>) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(path).ok()?)
    }

    /// The `stat` line of process `pid`; `None` when there is no such process.
    pub fn of_process(pid: u32) -> Option<Self> {
        Self::read(format!("/proc/{pid}/stat"))
    }

    /// Field `n` in proc(5)'s numbering, from 3 (the state) on; `None` for the pid and the name
    /// (1 and 2) and past the line's end.
    pub fn field(&self, n: usize) -> Option<&str> {
        self.after_name.get(n.checked_sub(3)?).map(String::as_str)
    }

    fn number<T: std::str::FromStr>(&self, n: usize) -> Option<T> {
        self.field(n)?.parse().ok()
    }

    /// The state letter (field 3): `R` running, `S` sleeping, `Z` a zombie, ...
    pub fn state(&self) -> Option<&str> {
        self.field(3)
    }

    /// Whether the process has ended and waits to be reaped.
    pub fn is_zombie(&self) -> bool {
        self.state() == Some("Z")
    }

    /// The parent's process id (field 4).
    pub fn parent(&self) -> Option<u32> {
        self.number(4)
    }

    /// The process group's id (field 5).
    pub fn process_group(&self) -> Option<u32> {
        self.number(5)
    }

    /// When the process started, in clock ticks since boot (field 22): with the pid, it tells a
    /// process from a later one that reused its id.
    pub fn start_ticks(&self) -> Option<u64> {
        self.number(22)
    }

    /// The real-time priority (field 40): 1 to 99 under `SCHED_FIFO` and `SCHED_RR`, else 0.
    pub fn realtime_priority(&self) -> Option<u32> {
        self.number(40)
    }

    /// The scheduling policy's number (field 41): `SCHED_OTHER` 0, `SCHED_FIFO` 1, ...
    pub fn policy(&self) -> Option<u32> {
        self.number(41)
    }
}

/// Raises this process's limit on open files (its soft limit, up to the hard one) to `want`,
/// if it is lower; returns the limit in force after.
pub fn raise_open_files(want: u64) -> std::io::Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusive `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur >= want {
        return Ok(limit.rlim_cur);
    }
    let raised = libc::rlimit { rlim_cur: want.min(limit.rlim_max), rlim_max: limit.rlim_max };
    // SAFETY: setrlimit reads one valid rlimit; a soft limit at most the hard one is allowed
    // to any process.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Ok(limit.rlim_cur);
    }
    Ok(raised.rlim_cur)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_open_files_limit_is_raised_only_up_to_the_hard_one() {
        let now = super::raise_open_files(0).unwrap();
        assert!(now > 0);
        assert!(super::raise_open_files(now).unwrap() >= now);
        assert!(super::raise_open_files(u64::MAX).unwrap() >= now);
    }

    use super::*;

    #[test]
    fn a_busy_child_s_cpu_time_grows_and_a_reaped_one_has_none() {
        let mut child =
            std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("sh");
        let pid = child.id();
        let first = process_cpu_time_ns(pid).expect("its clock");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let second = process_cpu_time_ns(pid).expect("its clock");
        let _ = child.kill();
        let _ = child.wait();
        assert!(second > first, "a spinning shell used no CPU: {first} then {second}");
        assert!(process_cpu_time_ns(pid).is_err(), "a reaped process has no clock");
    }

    #[test]
    fn steal_is_parsed_per_core_in_nanoseconds() {
        let stat =
            "cpu  10 0 5 100 0 0 0 7 0 0\ncpu0 5 0 2 50 0 0 0 3 0 0\ncpu1 5 0 3 50 0 0 0 4 0 0\nintr 1\n";
        assert_eq!(parse_steal_ns(stat, 100), Some(vec![30_000_000, 40_000_000]));
    }

    #[test]
    fn a_truncated_stat_line_is_none_not_a_panic() {
        assert_eq!(parse_steal_ns("cpu0 5 0 2\n", 100), None);
        assert_eq!(parse_steal_ns("cpuX 5 0 2 50 0 0 0 3\n", 100), None);
    }

    #[test]
    fn steal_of_this_machine_is_readable() {
        let steal = steal_ns_per_core().expect("/proc/stat readable");
        assert!(steal.len() >= online_cores(), "{} cores in /proc/stat", steal.len());
    }

    #[test]
    fn a_stat_line_is_split_after_the_last_parenthesis_of_the_name() {
        // Field 2 is "(a) (b c)"; then state, ppid, pgrp, 16 more, starttime, 17 more,
        // rt_priority and policy.
        let mut line = "42 (a) (b c) S 7 9".to_string();
        for n in 6..=41 {
            line.push_str(&format!(" {}", n * 100));
        }
        let stat = ProcStat::parse(&line).unwrap();
        assert_eq!((stat.state(), stat.parent(), stat.process_group()), (Some("S"), Some(7), Some(9)));
        assert_eq!(
            (stat.start_ticks(), stat.realtime_priority(), stat.policy()),
            (Some(2200), Some(4000), Some(4100))
        );
        assert_eq!((stat.field(1), stat.field(2), stat.field(42)), (None, None, None));
        assert!(!stat.is_zombie());
        assert!(ProcStat::parse("42 no name here").is_none());
    }

    #[test]
    fn this_process_reads_its_own_stat() {
        let stat = ProcStat::of_process(std::process::id()).expect("/proc/self readable");
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        assert_eq!(stat.parent(), Some(parent));
        assert!(!stat.is_zombie());
        assert!(stat.start_ticks().is_some());
        assert!(ProcStat::of_process(u32::MAX).is_none(), "no such process");
    }

    #[test]
    fn the_machine_describes_itself() {
        assert!(last_core() < online_cores());
        assert_ne!(kernel_release(), "unknown");
        assert!(clock_ticks_per_second() > 0);
    }
}

//! What the machine is, read from `/proc`: cores, kernel release, CPU model, and the steal time
//! the hypervisor took from each core.
//!
//! Experiments print these beside every figure (a result means little without the machine it
//! came from) and use the core count to place threads. Readings that fail fall back to a value
//! that says so (`"unknown"`, `None`) instead of failing the run.

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
    fn the_machine_describes_itself() {
        assert!(last_core() < online_cores());
        assert_ne!(kernel_release(), "unknown");
        assert!(clock_ticks_per_second() > 0);
    }
}

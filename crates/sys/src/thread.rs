//! The calling thread's place in the scheduler: its core, its policy and priority, its thread
//! id, its timer slack, and what it has cost and suffered (CPU time, context switches, time
//! waiting on a run queue).
//!
//! Every setter acts on one thread (Linux schedules threads, not processes): the calling one,
//! or, for those that take a thread id, a thread this process does not run (a kernel thread
//! serving a device), and returns the kernel's refusal as an `io::Error`: pinning to an absent core or asking for
//! `SCHED_FIFO` without `CAP_SYS_NICE` is an answer the caller reports, not a panic.

use std::io;

use crate::clock::read_clock;

/// The calling thread's kernel thread id (`gettid`), as `/proc` and the cgroup `tasks` files
/// name threads.
pub fn thread_id() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// Pins the calling thread to one core.
pub fn pin_current_thread(core: usize) -> io::Result<()> {
    pin_current_thread_to(&[core])
}

/// Lets the calling thread run on `cores` only (and on any of them). An empty list, or one
/// naming an absent core, is refused.
pub fn pin_current_thread_to(cores: &[usize]) -> io::Result<()> {
    pin_thread_to(0, cores)
}

/// Lets thread `tid` (0: the calling one) run on `cores` only: for a thread this one does not
/// run, such as a kernel thread that serves a device (needs `CAP_SYS_NICE` for another user's).
pub fn pin_thread_to(tid: i32, cores: &[usize]) -> io::Result<()> {
    let set = cpu_set(cores)?;
    // SAFETY: `set` is a valid cpu_set_t of the size passed; a `tid` that names no thread is
    // answered with ESRCH.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Makes the process `command` starts run on `cores` only, from its first instruction (set
/// between fork and exec, so every thread it starts inherits it; pinning it after spawn races
/// with those threads). An empty list, or one naming an absent core, is refused here.
pub fn pin_command_to(command: &mut std::process::Command, cores: &[usize]) -> io::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let set = cpu_set(cores)?;
    // SAFETY: the closure runs in the child between fork and exec; it makes one system call on
    // a set built before the fork (a Copy), and neither allocates nor takes a lock.
    unsafe {
        command.pre_exec(move || {
            // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the child itself.
            let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
        });
    }
    Ok(())
}

/// The kernel's set of `cores`; an empty list or a core past `CPU_SETSIZE` refused.
fn cpu_set(cores: &[usize]) -> io::Result<libc::cpu_set_t> {
    if cores.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no core to run on"));
    }
    // SAFETY: cpu_set_t is plain data for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &core in cores {
        if core >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("core {core} out of range")));
        }
        // SAFETY: `core` < CPU_SETSIZE was checked just above, so CPU_SET stays inside `set`.
        unsafe { libc::CPU_SET(core, &mut set) };
    }
    Ok(set)
}

/// The cores the calling thread may run on, in order.
pub fn current_thread_cores() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 names the calling thread; the kernel writes at most `size_of` bytes to `set`.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: every index tested is below CPU_SETSIZE, inside `set`.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Keeps the calling thread off one core while alive (a polling thread's, so that a thread
/// that only supervises never preempts it there), and gives it back the cores it had when
/// dropped. Nothing changes when the thread could run nowhere else. Meanwhile the thread counts
/// one core fewer ([`crate::proc::online_cores`] reads its own affinity) and threads it spawns
/// inherit the narrower set: take it once the threads that must not are started. Not `Send`:
/// dropped on another thread, it would move that one.
#[derive(Debug)]
pub struct OffCore {
    restore: Option<Vec<usize>>,
    _this_thread: std::marker::PhantomData<*const ()>,
}

impl OffCore {
    /// Moves the calling thread off `core`; an error leaves it where it was.
    pub fn new(core: usize) -> io::Result<Self> {
        let cores = current_thread_cores()?;
        let others: Vec<usize> = cores.iter().copied().filter(|&c| c != core).collect();
        if others.is_empty() || others.len() == cores.len() {
            return Ok(Self { restore: None, _this_thread: std::marker::PhantomData });
        }
        pin_current_thread_to(&others)?;
        Ok(Self { restore: Some(cores), _this_thread: std::marker::PhantomData })
    }
}

impl Drop for OffCore {
    fn drop(&mut self) {
        if let Some(cores) = &self.restore {
            // The cores were the thread's a moment ago, so giving them back does not fail but
            // for a cpuset changed meanwhile, which the thread then keeps as it is.
            let _ = pin_current_thread_to(cores);
        }
    }
}

/// Makes the calling thread `SCHED_FIFO` at `priority` (1-99) with `SCHED_RESET_ON_FORK`, so
/// the processes it starts run at normal priority. Fails without `CAP_SYS_NICE`.
pub fn set_fifo_reset_on_fork(priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Makes the calling thread `SCHED_FIFO` at `priority` (1-99). Fails without `CAP_SYS_NICE`.
pub fn set_fifo(priority: i32) -> io::Result<()> {
    set_thread_fifo(0, priority)
}

/// Makes thread `tid` (0: the calling one) `SCHED_FIFO` at `priority` (1-99). Fails without
/// `CAP_SYS_NICE`, and with ESRCH when `tid` names no thread.
pub fn set_thread_fifo(tid: i32, priority: i32) -> io::Result<()> {
    set_thread_scheduler(tid, libc::SCHED_FIFO, priority)
}

/// Puts thread `tid` (0: the calling one) under scheduling `policy` (`libc::SCHED_*`) at
/// `priority` (1-99 for `SCHED_FIFO` and `SCHED_RR`, else 0). Fails without `CAP_SYS_NICE`,
/// and with ESRCH when `tid` names no thread.
pub fn set_thread_scheduler(tid: i32, policy: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: `param` is a valid sched_param; the kernel checks `tid`, `policy` and `priority`.
    let rc = unsafe { libc::sched_setscheduler(tid, policy, &param) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Puts the calling thread under `SCHED_IDLE`: it runs only when nothing else on its core
/// wants to (no privilege needed).
pub fn set_idle() -> io::Result<()> {
    set_thread_scheduler(0, libc::SCHED_IDLE, 0)
}

/// Puts thread `tid` (0: the calling one) back under `SCHED_OTHER`.
pub fn set_thread_normal(tid: i32) -> io::Result<()> {
    set_thread_scheduler(tid, libc::SCHED_OTHER, 0)
}

/// Sets the nice value of the calling thread (not the whole process: Linux niceness is per task).
pub fn set_nice(nice: i32) -> io::Result<()> {
    let tid = thread_id();
    // SAFETY: PRIO_PROCESS with a thread id sets that one task's niceness; no pointers involved.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// CPU time consumed by the calling thread, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time_ns() -> u64 {
    read_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Voluntary and involuntary context switches of the calling thread so far; `(0, 0)` if the
/// kernel does not say.
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

/// Sets the calling thread's timer slack: how late the kernel may fire its sleeps' timers to
/// batch them with others (50 us by default for normal threads, 0 for real-time ones). A
/// measurement of wake-up lateness sets it to 1 ns so that the slack is not what it measures.
pub fn set_timer_slack_ns(slack_ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and changes the calling thread's slack only.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, slack_ns as libc::c_ulong, 0, 0, 0) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// How long the calling thread has waited on a run queue, runnable but not running, in
/// nanoseconds (the second field of `/proc/thread-self/schedstat`): time other tasks, or the
/// throttling of real-time threads, took the core from it. `None` where the kernel does not
/// keep it (`CONFIG_SCHED_INFO` off).
pub fn thread_run_delay_ns() -> Option<u64> {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    schedstat.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::monotonic_ns;
    use crate::proc::ProcStat;

    #[test]
    fn pinning_to_an_absent_core_is_an_error_not_a_panic() {
        assert!(pin_current_thread(100_000).is_err());
        assert!(pin_current_thread(libc::CPU_SETSIZE as usize - 1).is_err());
    }

    #[test]
    fn a_thread_pinned_to_core_0_runs_there() {
        let core = std::thread::spawn(|| {
            pin_current_thread(0).unwrap();
            // SAFETY: sched_getcpu has no preconditions.
            unsafe { libc::sched_getcpu() }
        });
        assert_eq!(core.join().unwrap(), 0);
    }

    #[test]
    fn a_thread_let_run_on_some_cores_is_allowed_exactly_those() {
        let allowed = std::thread::spawn(|| {
            pin_current_thread_to(&[0]).unwrap();
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string()
        });
        assert_eq!(allowed.join().unwrap(), "0");
        assert!(pin_current_thread_to(&[]).is_err());
        assert!(pin_current_thread_to(&[0, 100_000]).is_err());
    }

    #[test]
    fn a_thread_kept_off_a_core_runs_elsewhere_until_the_guard_goes() {
        let seen = std::thread::spawn(|| {
            let before = current_thread_cores().unwrap();
            let guard = OffCore::new(before[0]).unwrap();
            let during = current_thread_cores().unwrap();
            drop(guard);
            (before, during, current_thread_cores().unwrap())
        });
        let (before, during, after) = seen.join().unwrap();
        if before.len() < 2 {
            assert_eq!(during, before, "one core: nowhere else to go, so nothing changes");
        } else {
            assert_eq!(during, before[1..].to_vec());
        }
        assert_eq!(after, before);
        // A core the thread may not use anyway changes nothing.
        let unchanged = std::thread::spawn(|| {
            let before = current_thread_cores().unwrap();
            let _guard = OffCore::new(100_000).unwrap();
            (before, current_thread_cores().unwrap())
        });
        let (before, during) = unchanged.join().unwrap();
        assert_eq!(before, during);
    }

    #[test]
    fn a_fifo_thread_that_resets_on_fork_starts_normal_processes() {
        let policies = std::thread::spawn(|| {
            if set_fifo_reset_on_fork(10).is_err() {
                return None; // not permitted here: nothing to check
            }
            let own = ProcStat::read("/proc/thread-self/stat").unwrap();
            let child = std::process::Command::new("cat").arg("/proc/self/stat").output().unwrap();
            Some((own, ProcStat::parse(&String::from_utf8(child.stdout).unwrap()).unwrap()))
        });
        let Some((own, child)) = policies.join().unwrap() else {
            eprintln!("skipped: SCHED_FIFO needs CAP_SYS_NICE");
            return;
        };
        assert_eq!(own.policy(), Some(libc::SCHED_FIFO as u32));
        assert_eq!(child.policy(), Some(libc::SCHED_OTHER as u32));
    }

    #[test]
    fn thread_ids_differ_between_threads() {
        let other = std::thread::spawn(thread_id).join().unwrap();
        assert_ne!(other, thread_id());
        assert!(other > 0);
    }

    #[test]
    fn thread_cpu_time_grows_while_spinning() {
        let before = thread_cpu_time_ns();
        let end = monotonic_ns() + 5_000_000;
        while monotonic_ns() < end {}
        assert!(thread_cpu_time_ns() > before);
    }

    #[test]
    fn sleeping_is_a_voluntary_context_switch() {
        let (voluntary, _) = std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            thread_context_switches()
        })
        .join()
        .unwrap();
        assert!(voluntary >= 1);
    }

    #[test]
    fn an_invalid_fifo_priority_is_refused() {
        let err = std::thread::spawn(|| set_fifo(1_000)).join().unwrap().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn timer_slack_is_the_threads_own() {
        let slack = std::thread::spawn(|| {
            set_timer_slack_ns(1).unwrap();
            // SAFETY: PR_GET_TIMERSLACK takes no pointer and returns the calling thread's slack.
            unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) }
        });
        assert_eq!(slack.join().unwrap(), 1);
    }

    #[test]
    fn run_delay_is_read_and_only_grows() {
        let Some(before) = thread_run_delay_ns() else {
            eprintln!("skipped: this kernel keeps no schedstat");
            return;
        };
        std::thread::yield_now();
        assert!(thread_run_delay_ns().unwrap() >= before);
    }
}

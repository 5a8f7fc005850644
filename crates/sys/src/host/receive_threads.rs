//! The settings of kernel threads: whether an interface's receive runs in kernel threads of its
//! own (threaded NAPI, `/sys/class/net/IF/threaded`), where and at which priority each such
//! thread (`napi/IF-ID`) runs, and which cores the kernel's other threads may take.
//!
//! A thread is named by its id and its start time ([`ThreadId`]), so a record of a change to a
//! thread that has ended since, and whose id the kernel gave to another, names nothing (the
//! setting reads as [`HostError::Absent`]) rather than the newcomer. Its cores and its policy
//! are read from `/proc/PID/status` and `/proc/PID/stat` under the tree's root (tests build
//! them), and written with `sched_setaffinity` and `sched_setscheduler`, which only the real
//! host has: under another root a write is refused.

use std::collections::BTreeSet;
use std::fmt;
use std::io;

use super::{CpuList, HostError, HostFs};
use crate::proc::ProcStat;

/// A thread as a record names it: its id and when it started (clock ticks since boot, field 22
/// of its `stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId {
    /// The thread's id.
    pub pid: i32,
    /// When it started, clock ticks since boot.
    pub start_ticks: u64,
}

/// A network interface's name as the kernel takes it (1 to 15 bytes, no `/`, `:` or white
/// space, not `.` or `..`), held by value so that a [`super::Tunable`] naming it stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InterfaceName {
    len: u8,
    bytes: [u8; 15],
}

impl InterfaceName {
    /// The name, if the kernel would take it for an interface's.
    pub fn new(name: &str) -> Option<Self> {
        let valid = !name.is_empty()
            && name.len() <= 15
            && name != "."
            && name != ".."
            && !name.bytes().any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0);
        if !valid {
            return None;
        }
        let mut bytes = [0u8; 15];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(Self { len: name.len() as u8, bytes })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).expect("made from a str")
    }
}

impl fmt::Debug for InterfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for InterfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A thread's scheduling policy as a record writes it: `fifo N`, `rr N`, `other`, `batch`,
/// `idle` (a thread under `SCHED_DEADLINE` reads as `deadline`, which is never written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// `SCHED_FIFO` at a priority, 1-99.
    Fifo(u32),
    /// `SCHED_RR` at a priority, 1-99.
    RoundRobin(u32),
    /// `SCHED_OTHER`.
    Other,
    /// `SCHED_BATCH`.
    Batch,
    /// `SCHED_IDLE`.
    Idle,
    /// `SCHED_DEADLINE`.
    Deadline,
}

impl Policy {
    /// The policy of `text` as [`fmt::Display`] writes it.
    pub fn parse(text: &str) -> Option<Self> {
        let priority = |p: &str| p.parse::<u32>().ok().filter(|p| (1..=99).contains(p));
        match text.split_once(' ') {
            Some(("fifo", p)) => priority(p).map(Policy::Fifo),
            Some(("rr", p)) => priority(p).map(Policy::RoundRobin),
            None => match text {
                "other" => Some(Policy::Other),
                "batch" => Some(Policy::Batch),
                "idle" => Some(Policy::Idle),
                "deadline" => Some(Policy::Deadline),
                _ => None,
            },
            _ => None,
        }
    }

    fn from_stat(policy: u32, priority: u32) -> Option<Self> {
        Some(match policy {
            0 => Policy::Other,
            1 => Policy::Fifo(priority),
            2 => Policy::RoundRobin(priority),
            3 => Policy::Batch,
            5 => Policy::Idle,
            6 => Policy::Deadline,
            _ => return None,
        })
    }

    /// Whether a thread under this policy runs before one at `SCHED_FIFO` `priority - 1`, and
    /// no later than one at `priority`.
    pub fn at_least_fifo(&self, priority: u32) -> bool {
        matches!(self, Policy::Fifo(p) | Policy::RoundRobin(p) if *p >= priority)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Fifo(p) => write!(f, "fifo {p}"),
            Policy::RoundRobin(p) => write!(f, "rr {p}"),
            Policy::Other => f.write_str("other"),
            Policy::Batch => f.write_str("batch"),
            Policy::Idle => f.write_str("idle"),
            Policy::Deadline => f.write_str("deadline"),
        }
    }
}

/// The kernel threads whose name starts with `prefix` (a name is cut to 15 bytes, and so is the
/// prefix compared), by id, read from `/proc/*/comm`.
pub fn kernel_threads_named(prefix: &str) -> BTreeSet<i32> {
    HostFs::real().threads_named(prefix)
}

/// The name prefix of the threads that serve `interface`'s receive with threaded NAPI.
pub fn napi_thread_prefix(interface: &str) -> String {
    format!("napi/{interface}-")
}

/// Whether a thread named `name` may be one whose full name starts with `prefix`: the kernel
/// cuts a thread's name to 15 bytes, so the prefix is cut alike (by bytes: a cut need not fall
/// on a character's boundary).
pub fn name_starts_with(name: &str, prefix: &str) -> bool {
    name.as_bytes().starts_with(&prefix.as_bytes()[..prefix.len().min(15)])
}

impl HostFs {
    /// The process and thread-group ids under this tree's `/proc`.
    fn pids(&self) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir(self.resolve("/proc")) else { return Vec::new() };
        entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).collect()
    }

    /// The threads of this tree whose name starts with `prefix` ([`name_starts_with`]).
    pub fn threads_named(&self, prefix: &str) -> BTreeSet<i32> {
        self.pids()
            .into_iter()
            .filter(|pid| {
                self.read(&format!("/proc/{pid}/comm")).is_ok_and(|comm| name_starts_with(&comm, prefix))
            })
            .collect()
    }

    /// The kernel's own threads (`kthreadd`, pid 2, and its children), by id and name.
    pub fn kernel_threads(&self) -> Vec<(ThreadId, String)> {
        let mut threads: Vec<(ThreadId, String)> = self
            .pids()
            .into_iter()
            .filter_map(|pid| {
                let line = self.read_line(&format!("/proc/{pid}/stat")).ok()?;
                let stat = ProcStat::parse(&line)?;
                if pid != 2 && stat.parent()? != 2 {
                    return None;
                }
                let name = self.read_line(&format!("/proc/{pid}/comm")).ok()?;
                Some((ThreadId { pid, start_ticks: stat.start_ticks()? }, name))
            })
            .collect();
        threads.sort();
        threads
    }

    /// The thread `pid` as a record names it, if it exists.
    pub fn thread(&self, pid: i32) -> Result<ThreadId, HostError> {
        let path = format!("/proc/{pid}/stat");
        let line = self.read_line(&path)?;
        let start_ticks = ProcStat::parse(&line)
            .and_then(|stat| stat.start_ticks())
            .ok_or_else(|| super::malformed(&path, &line, "no start time (field 22)".into()))?;
        Ok(ThreadId { pid, start_ticks })
    }

    /// The thread's name (`/proc/PID/comm`).
    pub fn thread_name(&self, thread: ThreadId) -> Result<String, HostError> {
        self.same_thread(thread)?;
        self.read_line(&format!("/proc/{}/comm", thread.pid))
    }

    /// An error unless `thread` still runs (its id not reused since).
    pub(super) fn same_thread(&self, thread: ThreadId) -> Result<(), HostError> {
        match self.thread(thread.pid) {
            Ok(now) if now == thread => Ok(()),
            Ok(_) | Err(HostError::Absent { .. }) => {
                Err(HostError::Absent { path: format!("/proc/{}", thread.pid).into() })
            }
            Err(e) => Err(e),
        }
    }

    /// The cores `thread` may run on (`Cpus_allowed_list` of its `status`).
    pub fn thread_cores(&self, thread: ThreadId) -> Result<CpuList, HostError> {
        self.same_thread(thread)?;
        let path = format!("/proc/{}/status", thread.pid);
        let text = self.read(&path)?;
        let list = text
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .ok_or_else(|| super::malformed(&path, "", "no Cpus_allowed_list line".into()))?;
        CpuList::parse(list.trim()).map_err(|e| super::malformed(&path, list, e.to_string()))
    }

    /// `thread`'s scheduling policy and priority (fields 41 and 40 of its `stat`).
    pub fn thread_policy(&self, thread: ThreadId) -> Result<Policy, HostError> {
        self.same_thread(thread)?;
        let path = format!("/proc/{}/stat", thread.pid);
        let line = self.read_line(&path)?;
        ProcStat::parse(&line)
            .and_then(|stat| Policy::from_stat(stat.policy()?, stat.realtime_priority()?))
            .ok_or_else(|| {
                super::malformed(&path, &line, "no policy the doctor knows (fields 40, 41)".into())
            })
    }

    /// Lets `thread` run on `cores` only.
    pub(super) fn set_thread_cores(&self, thread: ThreadId, cores: &CpuList) -> Result<(), HostError> {
        self.change_thread(thread, &cores.to_string(), || {
            crate::thread::pin_thread_to(thread.pid, &cores.iter().collect::<Vec<_>>())
        })
    }

    /// Puts `thread` under `policy` (`deadline` is refused: it needs parameters a record does
    /// not hold).
    pub(super) fn set_thread_policy(&self, thread: ThreadId, policy: Policy) -> Result<(), HostError> {
        let (number, priority) = match policy {
            Policy::Fifo(p) => (libc::SCHED_FIFO, p),
            Policy::RoundRobin(p) => (libc::SCHED_RR, p),
            Policy::Other => (libc::SCHED_OTHER, 0),
            Policy::Batch => (libc::SCHED_BATCH, 0),
            Policy::Idle => (libc::SCHED_IDLE, 0),
            Policy::Deadline => {
                return Err(HostError::Refused {
                    path: format!("/proc/{}", thread.pid).into(),
                    value: policy.to_string(),
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "SCHED_DEADLINE is not set from a record",
                    ),
                });
            }
        };
        self.change_thread(thread, &policy.to_string(), || {
            crate::thread::set_thread_scheduler(thread.pid, number, priority as i32)
        })
    }

    /// Runs `change` on the real host's `thread` if it still runs; under another root, or for a
    /// thread gone, an error.
    fn change_thread(
        &self,
        thread: ThreadId,
        value: &str,
        change: impl FnOnce() -> io::Result<()>,
    ) -> Result<(), HostError> {
        let path = std::path::PathBuf::from(format!("/proc/{}", thread.pid));
        let refused = |source| HostError::Refused { path: path.clone(), value: value.to_string(), source };
        if self.root() != std::path::Path::new("/") {
            return Err(refused(io::Error::new(
                io::ErrorKind::Unsupported,
                "a thread's placement is changed on the real host only",
            )));
        }
        self.same_thread(thread)?;
        change().map_err(|e| {
            if e.raw_os_error() == Some(libc::ESRCH) {
                HostError::Absent { path: path.clone() }
            } else {
                refused(e)
            }
        })
    }
}

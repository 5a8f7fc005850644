//! How the host is tuned for a dedicated core, read from `/proc` and `/sys`, and the few settings
//! that can be changed at run time (and changed back), written there.
//!
//! The express lane's core is only as quiet as the kernel lets it be: which cores the scheduler
//! keeps tasks off (`isolcpus`), whether the tick stops (`nohz_full`), where RCU callbacks run
//! (`rcu_nocbs`), which idle states a core may enter, the lockup watchdogs, where device
//! interrupts go, how long real-time threads may run, the frequency governor, steal time and
//! SMT siblings. Everything here reads what the kernel says about those; deciding what is good
//! is the caller's (`kairos_doctor`).
//!
//! Every path is taken relative to a root ([`HostFs::at`]), `/` on the machine itself
//! ([`HostFs::real`]), so tests point the readers at a fake tree. A file that does not exist is
//! [`HostError::Absent`] (a kernel built without the feature, a virtual machine without
//! cpufreq), which callers report as "not available here" rather than fail; every read is
//! bounded ([`MAX_FILE_BYTES`]).
//!
//! Writes go through [`Tunable`], the closed list of settings Kairos ever changes, so a record
//! of changes read back from a file can name nothing else.

use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

mod receive_threads;

pub use receive_threads::{
    InterfaceName, Policy, ThreadId, kernel_threads_named, name_starts_with, napi_thread_prefix,
};

/// The most bytes read from one `/proc` or `/sys` file (`/proc/interrupts` of a large machine is
/// the largest, well under this).
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// The highest core number a list or mask may name: Linux's largest `NR_CPUS`. A file naming a
/// higher one is malformed (and would otherwise make a huge set).
pub const MAX_CORE: usize = 8191;

/// Why a reading or a write failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The file does not exist: this kernel or machine does not have the feature.
    #[error("{} does not exist", .path.display())]
    Absent {
        /// The path as the kernel names it (without the test root).
        path: PathBuf,
    },
    /// The file exists but could not be read (permissions, an I/O error).
    #[error("{}: {source}", .path.display())]
    Unreadable {
        /// The path as the kernel names it.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The file's content is not what this kernel interface writes.
    #[error("{}: unexpected content {content:?} ({why})", .path.display())]
    Malformed {
        /// The path as the kernel names it.
        path: PathBuf,
        /// What was read (at most 80 characters of it).
        content: String,
        /// What was expected.
        why: String,
    },
    /// The kernel refused a write.
    #[error("writing {value:?} to {}: {source}", .path.display())]
    Refused {
        /// The path as the kernel names it.
        path: PathBuf,
        /// What was written.
        value: String,
        /// The kernel's answer.
        source: io::Error,
    },
}

impl HostError {
    /// Whether the file does not exist (the feature is absent here).
    pub fn is_absent(&self) -> bool {
        matches!(self, HostError::Absent { .. })
    }
}

/// Why a core list (`0-3,8`) or mask (`ff,00000001`) could not be parsed ([`CpuList::parse`],
/// [`CpuList::parse_mask`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// A list item is not a decimal core number (the item as written).
    #[error("{0:?} is not a core number")]
    NotACore(String),
    /// A core number above [`MAX_CORE`].
    #[error("core {0} is above {MAX_CORE}")]
    AboveMax(usize),
    /// A range whose first core is above its last (the range as written).
    #[error("range {0:?} runs backwards")]
    Backwards(String),
    /// A mask with no hexadecimal digit.
    #[error("an empty mask")]
    EmptyMask,
    /// A mask character that is neither a hexadecimal digit nor a comma.
    #[error("{0:?} is not a hexadecimal digit")]
    NotHexDigit(char),
}

/// Why the text of `/proc/interrupts` or `/proc/softirqs` could not be parsed
/// ([`CounterTable::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterTableError {
    /// The text is empty.
    #[error("no header line")]
    NoHeader,
    /// A header column is not `CPUn` (the column as written).
    #[error("header column {0:?} is not CPUn")]
    NotACpuColumn(String),
    /// The header names no core.
    #[error("no CPU columns in the header")]
    NoCpuColumns,
}

/// A set of cores, as the kernel's list files (`0-3,8`) and hexadecimal masks (`ff,00000001`)
/// write them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuList(BTreeSet<usize>);

impl CpuList {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a list such as `0-3,8,10-11` (blank means empty).
    pub fn parse(text: &str) -> Result<Self, CpuListError> {
        let mut cores = BTreeSet::new();
        for part in text.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let core = |s: &str| -> Result<usize, CpuListError> {
                let n: usize = s.trim().parse().map_err(|_| CpuListError::NotACore(s.to_string()))?;
                if n > MAX_CORE { Err(CpuListError::AboveMax(n)) } else { Ok(n) }
            };
            match part.split_once('-') {
                Some((from, to)) => {
                    // A stride (`0-7:2`) is only written by users on the command line; the
                    // kernel's own files never hold one.
                    let (from, to) = (core(from)?, core(to)?);
                    if from > to {
                        return Err(CpuListError::Backwards(part.to_string()));
                    }
                    cores.extend(from..=to);
                }
                None => {
                    cores.insert(core(part)?);
                }
            }
        }
        Ok(Self(cores))
    }

    /// Parses a hexadecimal mask such as `3` or `ffffffff,00000001` (32-bit groups, most
    /// significant first, as `/proc/irq/default_smp_affinity` writes them).
    pub fn parse_mask(text: &str) -> Result<Self, CpuListError> {
        let digits: String = text.trim().chars().filter(|&c| c != ',').collect();
        if digits.is_empty() {
            return Err(CpuListError::EmptyMask);
        }
        let mut cores = BTreeSet::new();
        for (position, digit) in digits.chars().rev().enumerate() {
            let value = digit.to_digit(16).ok_or(CpuListError::NotHexDigit(digit))?;
            for bit in 0..4 {
                if value & (1 << bit) != 0 {
                    let core = position * 4 + bit;
                    if core > MAX_CORE {
                        return Err(CpuListError::AboveMax(core));
                    }
                    cores.insert(core);
                }
            }
        }
        Ok(Self(cores))
    }

    /// The mask form: hexadecimal, 32-bit groups separated by commas, most significant first,
    /// without leading zero groups (`0` when empty).
    pub fn to_mask(&self) -> String {
        let Some(&highest) = self.0.last() else { return "0".into() };
        let mut groups = vec![0u32; highest / 32 + 1];
        for &core in &self.0 {
            groups[core / 32] |= 1 << (core % 32);
        }
        let mut text = format!("{:x}", groups[groups.len() - 1]);
        for group in groups.iter().rev().skip(1) {
            text.push_str(&format!(",{group:08x}"));
        }
        text
    }

    /// Whether `core` is in the set.
    pub fn contains(&self, core: usize) -> bool {
        self.0.contains(&core)
    }

    /// Adds `core`.
    pub fn insert(&mut self, core: usize) {
        self.0.insert(core);
    }

    /// The set without `core`.
    pub fn without(&self, core: usize) -> Self {
        let mut rest = self.clone();
        rest.0.remove(&core);
        rest
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many cores the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The cores, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }
}

impl FromIterator<usize> for CpuList {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl fmt::Display for CpuList {
    /// The list form (`0-3,8`), empty for the empty set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut cores = self.0.iter().copied().peekable();
        let mut first = true;
        while let Some(start) = cores.next() {
            let mut end = start;
            while cores.peek() == Some(&(end + 1)) {
                end = cores.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start { write!(f, "{start}")? } else { write!(f, "{start}-{end}")? }
        }
        Ok(())
    }
}

/// The kernel's command line (`/proc/cmdline`), up to the `--` that starts init's arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelCmdline {
    params: Vec<(String, Option<String>)>,
}

impl KernelCmdline {
    /// Splits a command line into parameters (`name` or `name=value`; quotes are not expected
    /// in the parameters Kairos reads).
    pub fn parse(text: &str) -> Self {
        let params = text
            .split_whitespace()
            .take_while(|word| *word != "--")
            .map(|word| match word.split_once('=') {
                Some((name, value)) => (name.to_string(), Some(value.to_string())),
                None => (word.to_string(), None),
            })
            .collect();
        Self { params }
    }

    /// The last occurrence of `name` (as the kernel applies them): `None` when absent,
    /// `Some(None)` when given without a value.
    pub fn get(&self, name: &str) -> Option<Option<&str>> {
        self.params.iter().rev().find(|(n, _)| n == name).map(|(_, value)| value.as_deref())
    }

    /// Whether `name` is given, with or without a value.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// One idle state of one core (`/sys/devices/system/cpu/cpuN/cpuidle/stateK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleState {
    /// `K` in `stateK`.
    pub index: usize,
    /// The driver's name for it (`POLL`, `C1`, `haltpoll idle`).
    pub name: String,
    /// Its exit latency as the driver declares it, microseconds.
    pub exit_latency_us: u64,
    /// Whether it is disabled for this core (`disable` is 1).
    pub disabled: bool,
}

/// One row of `/proc/interrupts` or `/proc/softirqs`: a source and its count on each core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRow {
    /// The first column without its colon: an IRQ number (`36`), an architecture's name for a
    /// class of interrupts (`LOC`, `NMI`, `RES`) or a softirq (`TIMER`, `RCU`).
    pub source: String,
    /// Counts per column, in the order of [`CounterTable::cores`].
    pub counts: Vec<u64>,
    /// The rest of the line: the controller and the device (`PCI-MSIX-0000:00:02.0 1-edge
    /// virtio1-req.0`) or the kernel's description (`Local timer interrupts`).
    pub description: String,
}

/// `/proc/interrupts` or `/proc/softirqs`: per-core counts of each source since boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterTable {
    /// The core of each column (`CPU0 CPU1` is `[0, 1]`; offline cores have no column).
    pub cores: Vec<usize>,
    /// One row per source.
    pub rows: Vec<CounterRow>,
}

impl CounterTable {
    /// Parses the text of `/proc/interrupts` or `/proc/softirqs`; rows with fewer counts than
    /// cores (`ERR:`, `MIS:`, which are totals) keep the counts they have.
    pub fn parse(text: &str) -> Result<Self, CounterTableError> {
        let mut lines = text.lines();
        let header = lines.next().ok_or(CounterTableError::NoHeader)?;
        let cores = header
            .split_whitespace()
            .map(|column| {
                column
                    .strip_prefix("CPU")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| CounterTableError::NotACpuColumn(column.to_string()))
            })
            .collect::<Result<Vec<usize>, _>>()?;
        if cores.is_empty() {
            return Err(CounterTableError::NoCpuColumns);
        }
        let mut rows = Vec::new();
        for line in lines {
            let Some((source, rest)) = line.split_once(':') else { continue };
            let mut counts = Vec::with_capacity(cores.len());
            let mut rest = rest.trim_start();
            while counts.len() < cores.len() {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                let Ok(count) = rest[..end].parse::<u64>() else { break };
                counts.push(count);
                rest = rest[end..].trim_start();
            }
            rows.push(CounterRow {
                source: source.trim().to_string(),
                counts,
                description: rest.split_whitespace().collect::<Vec<_>>().join(" "),
            });
        }
        Ok(Self { cores, rows })
    }

    /// Each row's count on `core` (0 where the row has no column for it), by source.
    pub fn on_core(&self, core: usize) -> Vec<(&CounterRow, u64)> {
        let column = self.cores.iter().position(|&c| c == core);
        self.rows
            .iter()
            .map(|row| (row, column.and_then(|i| row.counts.get(i).copied()).unwrap_or(0)))
            .collect()
    }
}

/// What an IRQ's affinity file says (`/proc/irq/N/smp_affinity_list`, and
/// `effective_affinity_list` where the kernel has it).
#[derive(Debug)]
pub struct IrqAffinity {
    /// The IRQ number.
    pub irq: u32,
    /// The cores it may be delivered to.
    pub allowed: Result<CpuList, HostError>,
    /// The cores it is delivered to now, where the kernel says.
    pub effective: Option<CpuList>,
}

/// A kernel setting Kairos may change at run time (and change back). Its text is the path of
/// its file, or for a thread's setting `thread PID@START cores` (or `policy`), so a record of
/// changes names settings, never arbitrary files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tunable {
    /// `/proc/irq/N/smp_affinity_list`: the cores IRQ `N` may be delivered to.
    IrqAffinity(u32),
    /// `/proc/irq/default_smp_affinity`: the cores a newly set-up IRQ may be delivered to (a
    /// mask).
    DefaultIrqAffinity,
    /// `/proc/sys/kernel/sched_rt_runtime_us`: real-time threads' share of each period (-1: no
    /// throttling).
    RtRuntime,
    /// `/proc/sys/kernel/watchdog_cpumask`: the cores the lockup watchdogs run on.
    WatchdogCpumask,
    /// `/sys/devices/system/cpu/cpuN/cpufreq/scaling_governor`.
    ScalingGovernor(usize),
    /// `/sys/class/net/IF/threaded`: whether the interface's receive runs in kernel threads of
    /// its own (threaded NAPI, 1) or in softirq (0).
    NapiThreaded(InterfaceName),
    /// `/sys/devices/virtual/workqueue/cpumask`: the cores unbound workqueues' workers
    /// (`kworker/u*`) may run on (a mask).
    WorkqueueCpumask,
    /// The cores a (kernel) thread may run on, as a CPU list.
    ThreadCores(ThreadId),
    /// A (kernel) thread's scheduling policy, as [`Policy`] writes it.
    ThreadPolicy(ThreadId),
}

impl Tunable {
    /// The file's path as the kernel names it.
    pub fn path(&self) -> String {
        match self {
            Tunable::IrqAffinity(irq) => format!("/proc/irq/{irq}/smp_affinity_list"),
            Tunable::DefaultIrqAffinity => "/proc/irq/default_smp_affinity".into(),
            Tunable::RtRuntime => "/proc/sys/kernel/sched_rt_runtime_us".into(),
            Tunable::WatchdogCpumask => "/proc/sys/kernel/watchdog_cpumask".into(),
            Tunable::ScalingGovernor(core) => {
                format!("/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_governor")
            }
            Tunable::WorkqueueCpumask => "/sys/devices/virtual/workqueue/cpumask".into(),
            Tunable::NapiThreaded(interface) => format!("/sys/class/net/{interface}/threaded"),
            Tunable::ThreadCores(t) => format!("thread {}@{} cores", t.pid, t.start_ticks),
            Tunable::ThreadPolicy(t) => format!("thread {}@{} policy", t.pid, t.start_ticks),
        }
    }

    /// The setting whose file is `path`, or `None` for any other file.
    pub fn from_path(path: &str) -> Option<Self> {
        fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
            // Digits only: `+1` or `01x` parse or fail in ways a path the kernel writes never does.
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) { None } else { s.parse().ok() }
        }
        match path {
            "/proc/irq/default_smp_affinity" => Some(Tunable::DefaultIrqAffinity),
            "/proc/sys/kernel/sched_rt_runtime_us" => Some(Tunable::RtRuntime),
            "/proc/sys/kernel/watchdog_cpumask" => Some(Tunable::WatchdogCpumask),
            "/sys/devices/virtual/workqueue/cpumask" => Some(Tunable::WorkqueueCpumask),
            _ => {
                if let Some(irq) =
                    path.strip_prefix("/proc/irq/").and_then(|p| p.strip_suffix("/smp_affinity_list"))
                {
                    return number::<u32>(irq).map(Tunable::IrqAffinity);
                }
                if let Some(interface) =
                    path.strip_prefix("/sys/class/net/").and_then(|p| p.strip_suffix("/threaded"))
                {
                    return InterfaceName::new(interface).map(Tunable::NapiThreaded);
                }
                if let Some((thread, what)) = path.strip_prefix("thread ").and_then(|p| p.split_once(' ')) {
                    let (pid, start) = thread.split_once('@')?;
                    let thread = ThreadId { pid: number(pid)?, start_ticks: number(start)? };
                    return match what {
                        "cores" => Some(Tunable::ThreadCores(thread)),
                        "policy" => Some(Tunable::ThreadPolicy(thread)),
                        _ => None,
                    };
                }
                path.strip_prefix("/sys/devices/system/cpu/cpu")
                    .and_then(|p| p.strip_suffix("/cpufreq/scaling_governor"))
                    .and_then(number::<usize>)
                    .filter(|&core| core <= MAX_CORE)
                    .map(Tunable::ScalingGovernor)
            }
        }
    }
}

impl fmt::Display for Tunable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

/// The `/proc` and `/sys` of a host, under a root directory.
#[derive(Debug, Clone)]
pub struct HostFs {
    root: PathBuf,
}

impl HostFs {
    /// This machine's (`/`).
    pub fn real() -> Self {
        Self { root: PathBuf::from("/") }
    }

    /// A tree under `root` laid out as `/` is (`root/proc/cmdline`, ...): tests build one.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn resolve(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The whole text of `path` (as the kernel names it, e.g. `/proc/cmdline`).
    fn read(&self, path: &str) -> Result<String, HostError> {
        let unreadable = |source: io::Error| {
            if source.kind() == io::ErrorKind::NotFound {
                HostError::Absent { path: path.into() }
            } else {
                HostError::Unreadable { path: path.into(), source }
            }
        };
        let file = std::fs::File::open(self.resolve(path)).map_err(unreadable)?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(unreadable)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(malformed(path, "", format!("longer than {MAX_FILE_BYTES} bytes")));
        }
        String::from_utf8(bytes).map_err(|_| malformed(path, "", "not text".into()))
    }

    /// The text of `path`, trimmed (most kernel files are one line).
    fn read_line(&self, path: &str) -> Result<String, HostError> {
        self.read(path).map(|text| text.trim().to_string())
    }

    fn read_parsed<T, E: fmt::Display>(
        &self,
        path: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T, HostError> {
        let text = self.read_line(path)?;
        parse(&text).map_err(|why| malformed(path, &text, why.to_string()))
    }

    fn read_number<T: std::str::FromStr>(&self, path: &str) -> Result<T, HostError> {
        self.read_parsed(path, |text| text.parse().map_err(|_| "not a number"))
    }

    fn exists(&self, path: &str) -> bool {
        self.resolve(path).exists()
    }

    /// `/proc/cmdline`.
    pub fn kernel_cmdline(&self) -> Result<KernelCmdline, HostError> {
        self.read("/proc/cmdline").map(|text| KernelCmdline::parse(&text))
    }

    /// The kernel release (`/proc/sys/kernel/osrelease`, what `uname -r` prints).
    pub fn kernel_release(&self) -> Result<String, HostError> {
        self.read_line("/proc/sys/kernel/osrelease")
    }

    /// How the kernel was built, as `uname -v` prints it (`/proc/sys/kernel/version`: `#1 SMP
    /// PREEMPT_DYNAMIC ...`).
    pub fn kernel_version(&self) -> Result<String, HostError> {
        self.read_line("/proc/sys/kernel/version")
    }

    /// The preemption model a `PREEMPT_DYNAMIC` kernel runs with (`none`, `voluntary`, `full`,
    /// `lazy`), from debugfs (`/sys/kernel/debug/sched/preempt` lists them with the current one
    /// in parentheses); debugfs is often unmounted, and refused to root under lockdown.
    pub fn preemption_model(&self) -> Result<String, HostError> {
        let path = "/sys/kernel/debug/sched/preempt";
        let text = self.read_line(path)?;
        text.split_whitespace()
            .find_map(|w| w.strip_prefix('(').and_then(|w| w.strip_suffix(')')))
            .map(str::to_string)
            .ok_or_else(|| malformed(path, &text, "no model in parentheses".into()))
    }

    /// Whether the CPU says it runs under a hypervisor (the `hypervisor` flag of
    /// `/proc/cpuinfo`, x86).
    pub fn is_virtual_machine(&self) -> Result<bool, HostError> {
        let cpuinfo = self.read("/proc/cpuinfo")?;
        Ok(cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|flag| flag == "hypervisor")))
    }

    /// The online cores (`/sys/devices/system/cpu/online`).
    pub fn online_cores(&self) -> Result<CpuList, HostError> {
        self.read_parsed("/sys/devices/system/cpu/online", CpuList::parse)
    }

    /// The cores `isolcpus` took out of the scheduler's domains
    /// (`/sys/devices/system/cpu/isolated`).
    pub fn isolated_cores(&self) -> Result<CpuList, HostError> {
        self.read_parsed("/sys/devices/system/cpu/isolated", CpuList::parse)
    }

    /// The cores in adaptive-tick mode (`/sys/devices/system/cpu/nohz_full`, which only a
    /// kernel built with `CONFIG_NO_HZ_FULL` has; `(null)` there means none).
    pub fn nohz_full_cores(&self) -> Result<CpuList, HostError> {
        self.read_parsed("/sys/devices/system/cpu/nohz_full", |text| {
            if text == "(null)" { Ok(CpuList::new()) } else { CpuList::parse(text) }
        })
    }

    /// The cpuidle driver (`/sys/devices/system/cpu/cpuidle/current_driver`; `none` when the
    /// kernel has cpuidle but no driver).
    pub fn cpuidle_driver(&self) -> Result<String, HostError> {
        self.read_line("/sys/devices/system/cpu/cpuidle/current_driver")
    }

    /// The cpuidle governor (`current_governor`, or `current_governor_ro` on older kernels).
    pub fn cpuidle_governor(&self) -> Result<String, HostError> {
        match self.read_line("/sys/devices/system/cpu/cpuidle/current_governor") {
            Err(e) if e.is_absent() => self.read_line("/sys/devices/system/cpu/cpuidle/current_governor_ro"),
            other => other,
        }
    }

    /// The idle states of `core`, in index order.
    pub fn idle_states(&self, core: usize) -> Result<Vec<IdleState>, HostError> {
        let dir = format!("/sys/devices/system/cpu/cpu{core}/cpuidle");
        let entries = std::fs::read_dir(self.resolve(&dir)).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                HostError::Absent { path: dir.clone().into() }
            } else {
                HostError::Unreadable { path: dir.clone().into(), source }
            }
        })?;
        let mut indices: Vec<usize> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("state")?.parse().ok())
            .collect();
        indices.sort_unstable();
        indices
            .into_iter()
            .map(|index| {
                let state = format!("{dir}/state{index}");
                Ok(IdleState {
                    index,
                    name: self.read_line(&format!("{state}/name"))?,
                    exit_latency_us: self.read_number(&format!("{state}/latency"))?,
                    disabled: self.read_number::<u8>(&format!("{state}/disable"))? != 0,
                })
            })
            .collect()
    }

    /// The wake-up latency target every process holding `/dev/cpu_dma_latency` open asks for,
    /// the lowest winning, in microseconds (2,000,000,000 when none holds it). Opening the
    /// device needs root; opening it for reading asks for nothing.
    pub fn cpu_dma_latency_us(&self) -> Result<i32, HostError> {
        let path = "/dev/cpu_dma_latency";
        let unreadable = |source: io::Error| {
            if source.kind() == io::ErrorKind::NotFound {
                HostError::Absent { path: path.into() }
            } else {
                HostError::Unreadable { path: path.into(), source }
            }
        };
        let mut file = std::fs::File::open(self.resolve(path)).map_err(unreadable)?;
        let mut value = [0u8; 4];
        file.read_exact(&mut value).map_err(unreadable)?;
        Ok(i32::from_ne_bytes(value))
    }

    /// A kernel sysctl under `/proc/sys/kernel` as a number (`nmi_watchdog`, `watchdog`,
    /// `soft_watchdog`, `watchdog_thresh`, `sched_rt_runtime_us`, `sched_rt_period_us`).
    pub fn kernel_sysctl(&self, name: &str) -> Result<i64, HostError> {
        self.read_number(&format!("/proc/sys/kernel/{name}"))
    }

    /// The cores the lockup watchdogs run on (`/proc/sys/kernel/watchdog_cpumask`, a list).
    pub fn watchdog_cores(&self) -> Result<CpuList, HostError> {
        self.read_parsed("/proc/sys/kernel/watchdog_cpumask", CpuList::parse)
    }

    /// Every IRQ under `/proc/irq`, in number order, with its affinity.
    pub fn irq_affinities(&self) -> Result<Vec<IrqAffinity>, HostError> {
        let dir = "/proc/irq";
        let entries = std::fs::read_dir(self.resolve(dir)).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                HostError::Absent { path: dir.into() }
            } else {
                HostError::Unreadable { path: dir.into(), source }
            }
        })?;
        let mut irqs: Vec<u32> =
            entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
        irqs.sort_unstable();
        Ok(irqs
            .into_iter()
            .map(|irq| IrqAffinity {
                irq,
                allowed: self.read_parsed(&Tunable::IrqAffinity(irq).path(), CpuList::parse),
                effective: self
                    .read_parsed(&format!("/proc/irq/{irq}/effective_affinity_list"), CpuList::parse)
                    .ok(),
            })
            .collect())
    }

    /// The cores a newly set-up IRQ may be delivered to (`/proc/irq/default_smp_affinity`).
    pub fn default_irq_affinity(&self) -> Result<CpuList, HostError> {
        self.read_parsed(&Tunable::DefaultIrqAffinity.path(), CpuList::parse_mask)
    }

    /// `/proc/interrupts`.
    pub fn interrupts(&self) -> Result<CounterTable, HostError> {
        let text = self.read("/proc/interrupts")?;
        CounterTable::parse(&text).map_err(|why| malformed("/proc/interrupts", &text, why.to_string()))
    }

    /// `/proc/softirqs`.
    pub fn softirqs(&self) -> Result<CounterTable, HostError> {
        let text = self.read("/proc/softirqs")?;
        CounterTable::parse(&text).map_err(|why| malformed("/proc/softirqs", &text, why.to_string()))
    }

    /// Steal time of each core since boot, nanoseconds (`/proc/stat`; index = core).
    pub fn steal_ns_per_core(&self) -> Result<Vec<u64>, HostError> {
        let text = self.read("/proc/stat")?;
        crate::proc::parse_steal_ns(&text, crate::proc::clock_ticks_per_second())
            .ok_or_else(|| malformed("/proc/stat", &text, "a cpuN line without eight counters".into()))
    }

    /// The frequency governor of `core` (absent without a cpufreq driver, as in most virtual
    /// machines).
    pub fn scaling_governor(&self, core: usize) -> Result<String, HostError> {
        self.read_line(&Tunable::ScalingGovernor(core).path())
    }

    /// Whether the kernel has a cpufreq driver (`/sys/devices/system/cpu/cpufreq/policy*`).
    pub fn has_cpufreq(&self) -> bool {
        std::fs::read_dir(self.resolve("/sys/devices/system/cpu/cpufreq"))
            .map(|dir| dir.flatten().any(|e| e.file_name().to_string_lossy().starts_with("policy")))
            .unwrap_or(false)
    }

    /// The hardware threads sharing `core`'s execution units, itself included
    /// (`topology/thread_siblings_list`).
    pub fn thread_siblings(&self, core: usize) -> Result<CpuList, HostError> {
        self.read_parsed(
            &format!("/sys/devices/system/cpu/cpu{core}/topology/thread_siblings_list"),
            CpuList::parse,
        )
    }

    /// The fair server of `core` (Linux 6.12 and later): the runtime normal tasks are lent in
    /// each period when real-time threads starve them, nanoseconds. Read from debugfs
    /// (`/sys/kernel/debug/sched/fair_server/cpuN/{runtime,period}`), so absent where debugfs is
    /// not mounted.
    pub fn fair_server_ns(&self, core: usize) -> Result<(u64, u64), HostError> {
        let dir = format!("/sys/kernel/debug/sched/fair_server/cpu{core}");
        Ok((self.read_number(&format!("{dir}/runtime"))?, self.read_number(&format!("{dir}/period"))?))
    }

    /// Whether `tunable` exists here (its file, or its thread).
    pub fn has(&self, tunable: Tunable) -> bool {
        match tunable {
            Tunable::ThreadCores(t) | Tunable::ThreadPolicy(t) => self.same_thread(t).is_ok(),
            _ => self.exists(&tunable.path()),
        }
    }

    /// The current text of `tunable`, trimmed.
    pub fn read_tunable(&self, tunable: Tunable) -> Result<String, HostError> {
        match tunable {
            Tunable::ThreadCores(t) => self.thread_cores(t).map(|cores| cores.to_string()),
            Tunable::ThreadPolicy(t) => self.thread_policy(t).map(|policy| policy.to_string()),
            _ => self.read_line(&tunable.path()),
        }
    }

    /// Writes `value` to `tunable`: to a file in one `write` (the kernel parses each write on
    /// its own), to a thread through the scheduler; the kernel's refusal comes back as
    /// [`HostError::Refused`]. Needs root.
    pub fn write_tunable(&self, tunable: Tunable, value: &str) -> Result<(), HostError> {
        let path = tunable.path();
        let not_one = |what: &str| HostError::Refused {
            path: path.clone().into(),
            value: value.to_string(),
            source: io::Error::new(io::ErrorKind::InvalidInput, format!("not {what}")),
        };
        match tunable {
            Tunable::ThreadCores(t) => {
                let cores = CpuList::parse(value).map_err(|_| not_one("a CPU list"))?;
                return self.set_thread_cores(t, &cores);
            }
            Tunable::ThreadPolicy(t) => {
                let policy = Policy::parse(value)
                    .ok_or_else(|| not_one("a policy (fifo N, rr N, other, batch, idle)"))?;
                return self.set_thread_policy(t, policy);
            }
            _ => {}
        }
        let refused = |source: io::Error| {
            if source.kind() == io::ErrorKind::NotFound {
                HostError::Absent { path: path.clone().into() }
            } else {
                HostError::Refused { path: path.clone().into(), value: value.to_string(), source }
            }
        };
        // Truncating lets a test tree's regular file take the new value; the kernel's files
        // ignore it, as they do for a shell's `>`.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.resolve(&path))
            .map_err(refused)?;
        let line = format!("{value}\n");
        let written = file.write(line.as_bytes()).map_err(refused)?;
        if written != line.len() {
            return Err(refused(io::Error::new(
                io::ErrorKind::WriteZero,
                "the kernel took part of the value",
            )));
        }
        Ok(())
    }
}

fn malformed(path: &str, content: &str, why: String) -> HostError {
    HostError::Malformed { path: path.into(), content: content.chars().take(80).collect(), why }
}

#[cfg(test)]
mod tests;

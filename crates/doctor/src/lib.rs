//! `kairos-doctor`: the host doctor. What a host that runs latency-critical work on one core
//! must have set, what each missing setting costs there, and the run-time fixes with their exact
//! undo (`kairos doctor --apply` and `--revert`).
//!
//! The express lane runs on one dedicated core, shielded from as many interrupts and as much
//! kernel housekeeping as the kernel allows (the source's sections 4.3.1 and 4.3.2). The doctor
//! reads nothing of the lane: only the host's `/proc` and `/sys`, through `kairos_sys::host`. It
//! is a crate of its own, beside `sys::host`, so that what needs a tuned core (the command line,
//! the lab's tuned rows, a node that measures its core before it starts) takes the doctor
//! without the lane's controller, sockets and HMAC.
//!
//! Each [`Check`] looks at one of those settings on this host, through `kairos_sys::host` (so
//! tests point it at a fake `/proc` and `/sys`): what is set (`found`), whether it is what the
//! lane needs (`ok`), the fix (a boot parameter, a command, or "applied by the node while it
//! runs") and what the missing part costs (`cost`), measured where it can be. The measurement is
//! a probe the caller runs on the core (`kairos_metrics::core_probe`; this crate does not depend
//! on `kairos-metrics`) and passes in as [`Measured`]. Boot-time settings cannot be toggled to
//! measure each one's share, so their cost is the probe's combined loss, beside the count of the
//! events each setting would remove (timer interrupts for `nohz_full`, RCU softirqs for
//! `rcu_nocbs`, device interrupts for IRQ affinity, run-queue waits for isolation and
//! throttling, steal). Idle states are measured on their own: wake-up lateness with them allowed
//! and with `/dev/cpu_dma_latency` held.
//!
//! A reading that fails never fails the doctor: the check says "not available here" and why
//! (a kernel without the feature, a virtual machine without cpufreq, a file only root reads).
//! Nothing here renders tables or prints: [`Diagnosis`] is data, the command line renders it.
//! [`apply`] holds the run-time fixes and their undo. [`receive`] checks and places the lane
//! interfaces' receive threads (`--lane-interface`), a check reported after the others.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apply;
mod boot;
mod housekeeping;
mod interrupts;
mod power;
mod preemption;
pub mod receive;
mod sharing;

use kairos_sys::host::{HostError, HostFs, KernelCmdline};
use serde::Serialize;

/// The checks, in the order they are reported; their `name`s are stable (tools read them).
pub const CHECK_NAMES: [&str; 11] = [
    "isolcpus",
    "nohz_full",
    "rcu_nocbs",
    "cpuidle",
    "nmi_watchdog",
    "irq_affinity",
    "rt_throttling",
    "cpufreq_governor",
    "steal_time",
    "smt_sibling",
    "preemption",
];

/// Why the doctor cannot start.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// The core asked for is not online here.
    #[error("--core {core}: not an online core (online: {online})")]
    CoreOffline {
        /// The core asked for.
        core: usize,
        /// The online cores, as a list.
        online: String,
    },
    /// A reading the doctor cannot do without failed.
    #[error("cannot read the host: {0}")]
    Host(#[from] HostError),
    /// The record of applied changes could not be read or written.
    #[error(transparent)]
    StateFile(#[from] kairos_sys::fs::FileError),
    /// The record of applied changes is not one the doctor wrote.
    #[error("{path}: {why}; fix or remove it by hand (nothing was changed)")]
    StateMalformed {
        /// The record's path.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The record holds changes for another core.
    #[error(
        "{path} records changes for core {recorded}; run kairos doctor --revert before applying for core {asked}"
    )]
    OtherCore {
        /// The record's path.
        path: String,
        /// The core it records.
        recorded: usize,
        /// The core asked for now.
        asked: usize,
    },
}

/// One check of the lane's core, as tools read it: `{"name", "ok", "found", "fix", "cost"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Which setting (one of [`CHECK_NAMES`]).
    pub name: &'static str,
    /// Whether the setting is what the lane needs (or there is nothing to fix here).
    pub ok: bool,
    /// What is set, or "not available here: ..." and why.
    pub found: String,
    /// The boot parameter or command that fixes it ("none needed" when ok).
    pub fix: String,
    /// What the missing part costs in jitter, measured where it can be.
    pub cost: String,
    /// The boot parameter that fixes it for good, when it is not ok and one does.
    #[serde(skip)]
    pub boot_parameter: Option<String>,
}

/// What the probe on the lane's core measured (see `kairos_metrics::core_probe`), in the units
/// the checks use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// Wall time of the spin, nanoseconds.
    pub spin_ns: u64,
    /// The `SCHED_FIFO` priority the probe ran at, `None` for a normal thread.
    pub fifo_priority: Option<i32>,
    /// The smallest gap counted, nanoseconds.
    pub gap_floor_ns: u64,
    /// Gaps above the floor.
    pub gaps: u64,
    /// Gaps above 10 us.
    pub gaps_over_10us: u64,
    /// Gaps above 100 us.
    pub gaps_over_100us: u64,
    /// The median gap, nanoseconds.
    pub median_gap_ns: u64,
    /// The longest gap, nanoseconds.
    pub max_gap_ns: u64,
    /// The sum of the gaps, nanoseconds.
    pub lost_ns: u64,
    /// Involuntary context switches of the spinning thread.
    pub preemptions: u64,
    /// Time it waited on the run queue, nanoseconds.
    pub run_delay_ns: Option<u64>,
    /// Steal time of the core during the spin, nanoseconds.
    pub steal_ns: Option<u64>,
    /// Interrupts on the core during the spin, by source (`None`: not readable).
    pub interrupts: Option<Vec<Counted>>,
    /// Softirqs on the core during the spin, by kind (`None`: not readable).
    pub softirqs: Option<Vec<Counted>>,
    /// Wake-up lateness with idle states allowed.
    pub wake_idle: Option<Wake>,
    /// Wake-up lateness with `/dev/cpu_dma_latency` held at 0.
    pub wake_held: Option<Wake>,
    /// Why the latency target could not be held.
    pub wake_held_refused: Option<String>,
}

/// How many times one source hit the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    /// The kernel's name for it (`36`, `LOC`, `RCU`).
    pub source: String,
    /// The device or description (`PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0`).
    pub description: String,
    /// How many times.
    pub count: u64,
}

/// Lateness of periodic wake-ups, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// Wake-ups timed.
    pub count: u64,
    /// Median lateness.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// The latest.
    pub max_ns: u64,
}

impl Measured {
    fn spin_s(&self) -> f64 {
        self.spin_ns.max(1) as f64 / 1e9
    }

    fn per_second(&self, count: u64) -> String {
        let rate = count as f64 / self.spin_s();
        if rate >= 10.0 { format!("{rate:.0}/s") } else { format!("{rate:.1}/s") }
    }

    fn spin_text(&self) -> String {
        format!("the {:.1} s spin", self.spin_s())
    }

    fn interrupt_count(&self, wanted: impl Fn(&Counted) -> bool) -> Option<(u64, Vec<&Counted>)> {
        let rows: Vec<&Counted> = self.interrupts.as_ref()?.iter().filter(|c| wanted(c)).collect();
        Some((rows.iter().map(|c| c.count).sum(), rows))
    }

    /// What the spin lost in all, one line: the combined cost every boot-time check shares.
    pub fn combined(&self) -> String {
        let priority = match self.fifo_priority {
            Some(p) => format!("SCHED_FIFO {p}"),
            None => "normal priority".into(),
        };
        format!(
            "{:.1} s spinning at {priority}: {} gaps over {} ({}), {} over 10 us, {} over 100 us; median {}, longest {}; {} lost ({:.3}%)",
            self.spin_s(),
            self.gaps,
            duration(self.gap_floor_ns),
            self.per_second(self.gaps),
            self.gaps_over_10us,
            self.gaps_over_100us,
            duration(self.median_gap_ns),
            duration(self.max_gap_ns),
            duration(self.lost_ns),
            self.lost_ns as f64 / self.spin_ns.max(1) as f64 * 100.0,
        )
    }
}

/// The doctor's findings for one core.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnosis {
    /// The lane's core.
    pub core: usize,
    /// One per setting, in [`CHECK_NAMES`] order.
    pub checks: Vec<Check>,
    /// The probe's combined loss (see [`Measured::combined`]), when it ran.
    pub combined_cost: Option<String>,
    /// The boot parameters that fix the failed checks for good, in check order.
    pub boot_parameters: Vec<String>,
}

/// A duration in the unit that reads best: `850 ns`, `12.3 us`, `4.5 ms`, `1.20 s`.
pub fn duration(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.2} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} ms", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} us", n as f64 / 1e3),
        n => format!("{n} ns"),
    }
}

/// `n` and the noun, singular for one: `1 preemption`, `3 preemptions`.
fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {many}") }
}

fn not_available(error: &HostError) -> String {
    format!("not available here: {error}")
}

/// The lane's core: `requested`, or the last online core; refused when not online.
pub fn lane_core(host: &HostFs, requested: Option<usize>) -> Result<usize, DoctorError> {
    let online = host.online_cores()?;
    let last = online.iter().last().unwrap_or(0);
    let core = requested.unwrap_or(last);
    if online.contains(core) {
        Ok(core)
    } else {
        Err(DoctorError::CoreOffline { core, online: online.to_string() })
    }
}

/// Examines `core` on `host`, with what the probe measured there if it ran.
pub fn examine(host: &HostFs, core: usize, measured: Option<&Measured>) -> Diagnosis {
    let cmdline = host.kernel_cmdline();
    let virtual_machine = host.is_virtual_machine().unwrap_or(false);
    let context = Context { host, core, cmdline: &cmdline, measured, virtual_machine };
    let checks = vec![
        context.isolcpus(),
        context.nohz_full(),
        context.rcu_nocbs(),
        context.cpuidle(),
        context.nmi_watchdog(),
        context.irq_affinity(),
        context.rt_throttling(),
        context.cpufreq_governor(),
        context.steal_time(),
        context.smt_sibling(),
        context.preemption(),
    ];
    let boot_parameters = checks.iter().filter(|c| !c.ok).filter_map(|c| c.boot_parameter.clone()).collect();
    Diagnosis { core, checks, combined_cost: measured.map(Measured::combined), boot_parameters }
}

struct Context<'a> {
    host: &'a HostFs,
    core: usize,
    cmdline: &'a Result<KernelCmdline, HostError>,
    measured: Option<&'a Measured>,
    virtual_machine: bool,
}

const NONE_NEEDED: &str = "none needed";
const NOT_MEASURED: &str = "not measured (no probe ran)";

fn check(name: &'static str, ok: bool, found: String, fix: String, cost: String) -> Check {
    Check { name, ok, found, fix, cost, boot_parameter: None }
}

impl Context<'_> {
    fn cpu(&self) -> String {
        format!("cpu{}", self.core)
    }
}

#[cfg(test)]
mod tests;

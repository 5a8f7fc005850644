//! The host doctor: is the express lane's core set up as the source's section 4.3 asks, what
//! does each missing part cost in jitter, and how is it fixed.
//!
//! The lane runs on one dedicated core (4.3.1), shielded from as many interrupts and as much
//! kernel housekeeping as the kernel allows (4.3.2). Each [`Check`] looks at one of those
//! settings on this host, through `kairos_sys::host` (so tests point it at a fake `/proc` and
//! `/sys`): what is set (`found`), whether it is what the lane needs (`ok`), the fix (a boot
//! parameter, a command, or "applied by the node while it runs") and what the missing part costs
//! (`cost`), measured where it can be. The measurement is a probe the caller runs on the core
//! (`kairos_metrics::core_probe`; this crate does not depend on `kairos-metrics`) and passes
//! in as [`Measured`]. Boot-time settings cannot be toggled to measure each one's share, so
//! their cost is the probe's combined loss, beside the count of the events each setting would
//! remove (timer interrupts for `nohz_full`, RCU softirqs for `rcu_nocbs`, device interrupts for
//! IRQ affinity, run-queue waits for isolation and throttling, steal). Idle states are measured
//! on their own: wake-up lateness with them allowed and with `/dev/cpu_dma_latency` held.
//!
//! A reading that fails never fails the doctor: the check says "not available here" and why
//! (a kernel without the feature, a virtual machine without cpufreq, a file only root reads).
//! Nothing here renders tables or prints: [`Diagnosis`] is data, the command line renders it.
//! [`apply`] holds the run-time fixes and their undo.

pub mod apply;

use kairos_sys::host::{CpuList, CpuListError, HostError, HostFs, KernelCmdline};
use serde::Serialize;

/// The checks, in the order they are reported; their `name`s are stable (tools read them).
pub const CHECK_NAMES: [&str; 10] = [
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

/// Numbers as ranges: `24-26,28-43`.
fn ranges(numbers: &[u32]) -> String {
    let mut sorted = numbers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        parts.push(if sorted[i] == start { start.to_string() } else { format!("{start}-{}", sorted[i]) });
        i += 1;
    }
    parts.join(",")
}

/// `n` and the noun, singular for one: `1 preemption`, `3 preemptions`.
fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {many}") }
}

fn not_available(error: &HostError) -> String {
    format!("not available here: {error}")
}

/// The device an interrupt row names (the last word of its description), or its source.
fn device_name(counted: &Counted) -> &str {
    counted.description.split_whitespace().last().unwrap_or(&counted.source)
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

/// The kernel's version as (major, minor), from a release such as `6.18.44-fc`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
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

/// `isolcpus=`'s flags and cores (`managed_irq,domain,2-3`).
fn isolcpus_value(value: &str) -> (Vec<&str>, Result<CpuList, CpuListError>) {
    let parts: Vec<&str> = value.split(',').collect();
    let first_core =
        parts.iter().position(|p| p.starts_with(|c: char| c.is_ascii_digit())).unwrap_or(parts.len());
    (parts[..first_core].to_vec(), CpuList::parse(&parts[first_core..].join(",")))
}

impl Context<'_> {
    fn cpu(&self) -> String {
        format!("cpu{}", self.core)
    }

    fn boot_time_cost(&self, ok: bool, events: Option<String>) -> String {
        match (self.measured, events) {
            (None, _) => format!("{NOT_MEASURED}; boot-time, so its share cannot be measured apart"),
            (Some(_), Some(events)) if ok => format!("none: {events}"),
            (Some(_), Some(events)) => format!("boot-time, so part of the probe's combined cost: {events}"),
            (Some(_), None) => "boot-time, so part of the probe's combined cost".into(),
        }
    }

    fn isolcpus(&self) -> Check {
        let cpu = self.cpu();
        let given = self.cmdline.as_ref().ok().and_then(|c| c.get("isolcpus")).flatten();
        let (flags, listed) = given.map_or((Vec::new(), None), |v| {
            let (flags, cores) = isolcpus_value(v);
            (flags, cores.ok())
        });
        let (ok, found) = match self.host.isolated_cores() {
            Ok(isolated) => {
                let ok = isolated.contains(self.core);
                let from =
                    given.map_or_else(|| "no isolcpus= in /proc/cmdline".into(), |v| format!("isolcpus={v}"));
                let set = if isolated.is_empty() { "none".into() } else { isolated.to_string() };
                let verdict = if ok { "isolated" } else { "not isolated" };
                (ok, format!("{cpu} {verdict} (isolated cores: {set}; {from})"))
            }
            Err(e) => match (&listed, self.cmdline) {
                (Some(cores), Ok(_)) => {
                    let ok = cores.contains(self.core) && (flags.is_empty() || flags.contains(&"domain"));
                    (ok, format!("{}; isolcpus={}", not_available(&e), given.unwrap_or_default()))
                }
                (_, Ok(_)) => (false, format!("{}; no isolcpus= in /proc/cmdline", not_available(&e))),
                (_, Err(c)) => (false, format!("{}; {}", not_available(&e), not_available(c))),
            },
        };
        let mut cores = listed.unwrap_or_default();
        cores.insert(self.core);
        let parameter = format!("isolcpus=managed_irq,domain,{cores}");
        let fix = if ok {
            NONE_NEEDED.into()
        } else {
            format!(
                "boot with {parameter} (boot-time: the scheduler then places no task on {cpu} that is not pinned there, and managed IRQs stay off it)"
            )
        };
        let cost = match self.measured {
            Some(m) if m.fifo_priority.is_some() && !ok => format!(
                "boot-time, so part of the probe's combined cost: at SCHED_FIFO the probe outranks other tasks, so the time they took from it is the time throttling lent them (see rt_throttling; with no task but the lane's on {cpu} there is none to lend to)"
            ),
            Some(m) => {
                let waited =
                    m.run_delay_ns.map_or_else(String::new, |d| format!(", waiting {} in all", duration(d)));
                let events = format!(
                    "other tasks took {cpu} from the probe {}{waited}",
                    count(m.preemptions, "time", "times")
                );
                self.boot_time_cost(ok, Some(events))
            }
            None => self.boot_time_cost(ok, None),
        };
        Check { boot_parameter: Some(parameter), ..check("isolcpus", ok, found, fix, cost) }
    }

    fn timer_events(&self) -> Option<String> {
        let m = self.measured?;
        let (ticks, _) = m.interrupt_count(|c| c.source == "LOC" || c.description.contains("arch_timer"))?;
        Some(format!(
            "{} hit {} in {} ({})",
            count(ticks, "timer interrupt", "timer interrupts"),
            self.cpu(),
            m.spin_text(),
            m.per_second(ticks)
        ))
    }

    fn nohz_full(&self) -> Check {
        let cpu = self.cpu();
        let parameter = format!("nohz_full={}", self.core);
        let (ok, found, fix) = match self.host.nohz_full_cores() {
            Ok(cores) => {
                let ok = cores.contains(self.core);
                let set = if cores.is_empty() { "none".into() } else { cores.to_string() };
                let verdict = if ok { "in adaptive-tick mode" } else { "not in adaptive-tick mode" };
                let fix = if ok {
                    NONE_NEEDED.into()
                } else {
                    format!("boot with {parameter} (boot-time: the tick stops while one task runs on {cpu})")
                };
                (ok, format!("{cpu} {verdict} (nohz_full cores: {set})"), fix)
            }
            Err(e) if e.is_absent() => (
                false,
                format!("not available here: the kernel was built without CONFIG_NO_HZ_FULL ({e})"),
                format!("a kernel built with CONFIG_NO_HZ_FULL=y, booted with {parameter} (boot-time)"),
            ),
            Err(e) => (false, not_available(&e), format!("boot with {parameter} (boot-time)")),
        };
        let cost = self.boot_time_cost(ok, self.timer_events());
        Check { boot_parameter: Some(parameter), ..check("nohz_full", ok, found, fix, cost) }
    }

    fn rcu_nocbs(&self) -> Check {
        let cpu = self.cpu();
        let parameter = format!("rcu_nocbs={}", self.core);
        let nohz_full = self.host.nohz_full_cores().ok().filter(|c| c.contains(self.core));
        let (ok, found) = match self.cmdline {
            Ok(cmdline) => match cmdline.get("rcu_nocbs") {
                Some(None) => (true, format!("{cpu}'s RCU callbacks run elsewhere (rcu_nocbs: every core)")),
                Some(Some(list)) => match CpuList::parse(list) {
                    Ok(cores) if cores.contains(self.core) => {
                        (true, format!("{cpu}'s RCU callbacks run elsewhere (rcu_nocbs={list})"))
                    }
                    Ok(_) => (
                        false,
                        format!("{cpu}'s RCU callbacks run on {cpu} (rcu_nocbs={list} leaves it out)"),
                    ),
                    Err(why) => (false, format!("rcu_nocbs={list} is not a core list ({why})")),
                },
                None if nohz_full.is_some() => {
                    (true, format!("{cpu}'s RCU callbacks run elsewhere (nohz_full implies rcu_nocbs)"))
                }
                None => {
                    (false, format!("{cpu}'s RCU callbacks run on {cpu} (no rcu_nocbs= in /proc/cmdline)"))
                }
            },
            Err(e) => (false, not_available(e)),
        };
        let fix = if ok {
            NONE_NEEDED.into()
        } else {
            format!("boot with {parameter} (boot-time; needs CONFIG_RCU_NOCB_CPU=y)")
        };
        let events = self.measured.and_then(|m| {
            let rcu = m.softirqs.as_ref()?.iter().find(|c| c.source == "RCU").map_or(0, |c| c.count);
            Some(format!(
                "{} ran on {cpu} in {} ({})",
                count(rcu, "RCU softirq", "RCU softirqs"),
                m.spin_text(),
                m.per_second(rcu)
            ))
        });
        let cost = self.boot_time_cost(ok, events);
        Check { boot_parameter: Some(parameter), ..check("rcu_nocbs", ok, found, fix, cost) }
    }

    fn cpuidle(&self) -> Check {
        let cpu = self.cpu();
        let idle_poll = self.cmdline.as_ref().ok().and_then(|c| c.get("idle")).flatten() == Some("poll");
        let held = self.host.cpu_dma_latency_us();
        let held_text = match &held {
            Ok(us) if *us >= 2_000_000_000 => "/dev/cpu_dma_latency: no process holds it".to_string(),
            Ok(us) => format!("/dev/cpu_dma_latency held at {us} us by a running process"),
            Err(HostError::Unreadable { .. }) => "/dev/cpu_dma_latency: only root reads it".into(),
            Err(e) => not_available(e),
        };
        let driver = match (self.host.cpuidle_driver(), self.host.cpuidle_governor()) {
            (Ok(d), Ok(g)) => format!("driver {d}, governor {g}"),
            (Ok(d), Err(_)) => format!("driver {d}"),
            (Err(e), _) => format!("no cpuidle driver ({e})"),
        };
        let idle_states = self.host.idle_states(self.core);
        // The states that take time to leave (POLL, 0 us, is the one that does not).
        let deep_states: Vec<usize> = idle_states
            .as_ref()
            .map(|s| s.iter().filter(|s| !s.disabled && s.exit_latency_us > 0).map(|s| s.index).collect())
            .unwrap_or_default();
        let (ok, states) = match &idle_states {
            _ if idle_poll => (true, "idle=poll: idle cores poll and never halt".to_string()),
            Ok(states) => {
                let blocked_below = held.as_ref().ok().copied().unwrap_or(i32::MAX).max(0) as u64;
                let deep: Vec<_> = states.iter().filter(|s| !s.disabled && s.exit_latency_us > 0).collect();
                let enterable: Vec<_> = deep.iter().filter(|s| s.exit_latency_us <= blocked_below).collect();
                let listed = deep
                    .iter()
                    .map(|s| format!("{} (exit latency {} us)", s.name, s.exit_latency_us))
                    .collect::<Vec<_>>()
                    .join(", ");
                if deep.is_empty() {
                    (true, format!("{cpu} has no enabled idle state but polling"))
                } else if enterable.is_empty() {
                    (true, format!("{cpu}'s idle states {listed} are held off by the latency target"))
                } else {
                    (false, format!("{cpu} may enter {listed}"))
                }
            }
            Err(e) if e.is_absent() => {
                (false, format!("{cpu} has no cpuidle states ({e}): an idle core halts in the default idle"))
            }
            Err(e) => (false, not_available(e)),
        };
        let found = format!("{states}; {driver}; {held_text}");
        let per_core = if deep_states.is_empty() {
            String::new()
        } else {
            let commands = deep_states
                .iter()
                .map(|i| {
                    format!("echo 1 > /sys/devices/system/cpu/cpu{}/cpuidle/state{i}/disable", self.core)
                })
                .collect::<Vec<_>>()
                .join("; ");
            format!("; for {cpu} alone at run time: {commands}")
        };
        let fix = if ok {
            NONE_NEEDED.into()
        } else {
            format!(
                "applied by the node while it runs: it holds /dev/cpu_dma_latency at 0, so no core enters an idle state until it exits{per_core}; or boot with idle=poll (every core, boot-time)"
            )
        };
        let cost = match self.measured {
            None => NOT_MEASURED.into(),
            Some(m) => match (m.wake_idle, m.wake_held) {
                (Some(idle), Some(held)) => {
                    let verdict = if idle.p50_ns > held.p50_ns {
                        format!(
                            "idle states cost {} a wake-up at the median",
                            duration(idle.p50_ns - held.p50_ns)
                        )
                    } else {
                        "no cost of idle states shows at the median here, where wake-ups are as late with the target held".into()
                    };
                    format!(
                        "wake-ups every 1 ms came {} late at the median, {} at p99, {} at worst with idle states allowed; {} / {} / {} with /dev/cpu_dma_latency held at 0: {verdict}; a thread that spins never idles and does not pay it",
                        duration(idle.p50_ns),
                        duration(idle.p99_ns),
                        duration(idle.max_ns),
                        duration(held.p50_ns),
                        duration(held.p99_ns),
                        duration(held.max_ns),
                    )
                }
                (Some(idle), None) => format!(
                    "wake-ups every 1 ms came {} late at the median, {} at p99, {} at worst with idle states allowed; not compared with the latency target held ({})",
                    duration(idle.p50_ns),
                    duration(idle.p99_ns),
                    duration(idle.max_ns),
                    m.wake_held_refused.as_deref().unwrap_or("it could not be held"),
                ),
                _ => "not measured (no wake-ups were timed)".into(),
            },
        };
        check("cpuidle", ok, found, fix, cost)
    }

    fn nmi_watchdog(&self) -> Check {
        let cpu = self.cpu();
        let sysctl = |name| self.host.kernel_sysctl(name);
        let master = sysctl("watchdog");
        if let Err(e) = &master {
            let ok = e.is_absent();
            let found = if ok {
                format!("not available here: no lockup watchdog in this kernel ({e})")
            } else {
                not_available(e)
            };
            let fix = if ok { NONE_NEEDED.into() } else { "boot with nowatchdog (all cores)".into() };
            return check("nmi_watchdog", ok, found, fix, NOT_MEASURED.into());
        }
        let on = |r: Result<i64, HostError>| r.map(|v| v != 0).unwrap_or(false);
        let master_on = on(master);
        let (hard, soft) = (on(sysctl("nmi_watchdog")), on(sysctl("soft_watchdog")));
        let mask = self.host.watchdog_cores();
        let on_core = mask.as_ref().map_or(true, |m| m.contains(self.core));
        let mask_text = mask.as_ref().map_or_else(not_available, |m| format!("watchdog_cpumask {m}"));
        let hard_here = master_on && hard && on_core;
        let soft_here = master_on && soft && on_core;
        let ok = !hard_here && !soft_here;
        let state = |name: &str, running: bool, set: bool| {
            if running {
                format!("{name} runs on {cpu}")
            } else if set && master_on {
                format!("{name} is on but not for {cpu}")
            } else {
                format!("{name} is off")
            }
        };
        let found = format!(
            "{}; {} (watchdog={}, nmi_watchdog={}, soft_watchdog={}, {mask_text})",
            state("the NMI (hard-lockup) watchdog", hard_here, hard),
            state("the soft-lockup watchdog", soft_here, soft),
            u8::from(master_on),
            u8::from(hard),
            u8::from(soft),
        );
        let fix = if ok {
            NONE_NEEDED.into()
        } else {
            format!(
                "at run time: take {} out of /proc/sys/kernel/watchdog_cpumask (--apply does; both watchdogs stop there); or boot with nowatchdog (every core)",
                self.core
            )
        };
        let period_s = sysctl("watchdog_thresh").map(|t| t as f64 * 2.0 / 5.0).unwrap_or(4.0);
        let nmis = self.measured.and_then(|m| m.interrupt_count(|c| c.source == "NMI")).map(|(n, _)| n);
        let mut cost = String::new();
        if soft_here {
            cost.push_str(&format!(
                "the soft-lockup watchdog's timer fires on {cpu} every {period_s:.0} s and wakes a stop-class task that preempts any thread, the lane's at any priority"
            ));
        }
        if hard_here {
            if !cost.is_empty() {
                cost.push_str("; ");
            }
            cost.push_str(&format!("a non-maskable interrupt on {cpu} every {:.0} s", period_s * 2.5));
        }
        match nmis {
            Some(n) => {
                let spin = self.measured.map(Measured::spin_text).unwrap_or_default();
                let sep = if cost.is_empty() { "none: " } else { "; " };
                cost.push_str(&format!("{sep}{} hit {cpu} in {spin}", count(n, "NMI", "NMIs")));
            }
            None if cost.is_empty() => cost.push_str(if ok { "none" } else { NOT_MEASURED }),
            None => {}
        }
        Check { boot_parameter: Some("nowatchdog".into()), ..check("nmi_watchdog", ok, found, fix, cost) }
    }

    fn irq_affinity(&self) -> Check {
        let cpu = self.cpu();
        let others = self.host.online_cores().map(|o| o.without(self.core)).unwrap_or_default();
        let parameter = (!others.is_empty()).then(|| format!("irqaffinity={others}"));
        let irqs = match self.host.irq_affinities() {
            Ok(irqs) => irqs,
            Err(e) => {
                let found = not_available(&e);
                let fix =
                    parameter.as_ref().map_or_else(|| "none possible".into(), |p| format!("boot with {p}"));
                return Check {
                    boot_parameter: parameter.clone(),
                    ..check("irq_affinity", false, found, fix, NOT_MEASURED.into())
                };
            }
        };
        let may_land: Vec<u32> = irqs
            .iter()
            .filter(|i| i.allowed.as_ref().is_ok_and(|a| a.contains(self.core)))
            .map(|i| i.irq)
            .collect();
        let unreadable = irqs.iter().filter(|i| i.allowed.is_err()).count();
        let delivered: Vec<u32> = irqs
            .iter()
            .filter(|i| i.effective.as_ref().is_some_and(|e| e.contains(self.core)))
            .map(|i| i.irq)
            .collect();
        let default = self.host.default_irq_affinity();
        let default_here = default.as_ref().is_ok_and(|d| d.contains(self.core));
        let ok = may_land.is_empty() && !default_here;
        let mut found = if may_land.is_empty() {
            format!("none of {} IRQs may be delivered to {cpu}", irqs.len())
        } else {
            format!(
                "{} of {} IRQs may be delivered to {cpu} ({})",
                may_land.len(),
                irqs.len(),
                ranges(&may_land)
            )
        };
        if !delivered.is_empty() {
            found.push_str(&format!(", {} delivered there now ({})", delivered.len(), ranges(&delivered)));
            // An affinity written moves the IRQ at its next interrupt, so the kernel may still
            // name the core for a while.
            let moving = delivered.iter().filter(|irq| !may_land.contains(irq)).count();
            if moving > 0 {
                found.push_str(&format!(" of which {moving} move away at their next interrupt"));
            }
        }
        if unreadable > 0 {
            found.push_str(&format!("; {unreadable} affinities could not be read"));
        }
        match &default {
            Ok(d) if default_here => {
                found.push_str(&format!("; new IRQs may be too (default_smp_affinity {})", d.to_mask()))
            }
            Ok(_) => found.push_str("; new IRQs go elsewhere"),
            Err(e) => found.push_str(&format!("; default_smp_affinity {}", not_available(e))),
        }
        if let Ok(table) = self.host.interrupts() {
            let since_boot: u64 = table
                .on_core(self.core)
                .iter()
                .filter(|(row, _)| row.source.bytes().all(|b| b.is_ascii_digit()))
                .map(|(_, n)| n)
                .sum();
            found.push_str(&format!("; {since_boot} device interrupts on {cpu} since boot"));
        }
        let fix = if ok {
            NONE_NEEDED.into()
        } else {
            let boot = parameter.as_ref().map_or_else(String::new, |p| format!("; or boot with {p}"));
            format!(
                "at run time: write the other cores to /proc/irq/N/smp_affinity_list and /proc/irq/default_smp_affinity (--apply does; managed IRQs refuse and stay, isolcpus=managed_irq keeps them off at boot){boot}"
            )
        };
        let cost = match self.measured.and_then(|m| Some((m, m.interrupts.as_ref()?))) {
            None => NOT_MEASURED.into(),
            Some((m, _)) => {
                let is_device = |c: &Counted| c.source.bytes().all(|b| b.is_ascii_digit());
                let (devices, rows) = m.interrupt_count(is_device).unwrap_or_default();
                let named = rows
                    .iter()
                    .take(4)
                    .map(|c| format!("{} {}", device_name(c), c.count))
                    .collect::<Vec<_>>();
                let named = if named.is_empty() { String::new() } else { format!(": {}", named.join(", ")) };
                let ipis = ["RES", "CAL", "TLB", "IWI", "PMI"];
                let (ipi_total, ipi_rows) =
                    m.interrupt_count(|c| ipis.contains(&c.source.as_str())).unwrap_or_default();
                let ipi_named =
                    ipi_rows.iter().map(|c| format!("{} {}", c.source, c.count)).collect::<Vec<_>>();
                let ipi_named =
                    if ipi_named.is_empty() { String::new() } else { format!(" ({})", ipi_named.join(", ")) };
                let each = if devices == 0 { "" } else { ", each a gap of the combined cost" };
                format!(
                    "{} hit {cpu} in {} ({}{named}){each}; and {}{ipi_named}, which no affinity moves",
                    count(devices, "device interrupt", "device interrupts"),
                    m.spin_text(),
                    m.per_second(devices),
                    count(ipi_total, "inter-processor interrupt", "inter-processor interrupts"),
                )
            }
        };
        Check { boot_parameter: parameter, ..check("irq_affinity", ok, found, fix, cost) }
    }

    fn rt_throttling(&self) -> Check {
        let cpu = self.cpu();
        let (runtime, period) = match (
            self.host.kernel_sysctl("sched_rt_runtime_us"),
            self.host.kernel_sysctl("sched_rt_period_us"),
        ) {
            (Ok(r), Ok(p)) => (r, p),
            (Err(e), _) | (_, Err(e)) => {
                return check(
                    "rt_throttling",
                    false,
                    not_available(&e),
                    "echo -1 > /proc/sys/kernel/sched_rt_runtime_us".into(),
                    NOT_MEASURED.into(),
                );
            }
        };
        let ok = runtime < 0 || runtime >= period;
        let mut found = if runtime < 0 {
            "sched_rt_runtime_us -1: real-time threads are never throttled".to_string()
        } else {
            format!(
                "sched_rt_runtime_us {runtime} of sched_rt_period_us {period}: real-time threads may run {:.0}% of each {}",
                runtime as f64 / period.max(1) as f64 * 100.0,
                duration(period as u64 * 1_000)
            )
        };
        let fair_server = match self.host.fair_server_ns(self.core) {
            Ok((runtime, period)) if runtime > 0 => Some(format!(
                "the fair server lends waiting normal tasks {} of each {} on {cpu}",
                duration(runtime),
                duration(period)
            )),
            Ok(_) => None,
            Err(_) => self
                .host
                .kernel_release()
                .ok()
                .and_then(|r| kernel_version(&r))
                .filter(|&v| v >= (6, 12))
                .map(|_| "from Linux 6.12 the fair server also lends waiting normal tasks 50 ms of each second (its settings are in debugfs)".to_string()),
        };
        if let Some(fair) = &fair_server {
            found.push_str(&format!("; {fair}"));
        }
        // The fair server lends the core only to normal tasks waiting on it: isolation, its own
        // check, is what leaves it none to lend to.
        let fix = if ok {
            NONE_NEEDED.into()
        } else {
            "at run time: echo -1 > /proc/sys/kernel/sched_rt_runtime_us (--apply does)".into()
        };
        let computed = if ok {
            String::new()
        } else {
            format!(
                "a real-time thread that never sleeps loses {} of every {} to throttling",
                duration((period - runtime).max(0) as u64 * 1_000),
                duration(period as u64 * 1_000)
            )
        };
        let measured = self.measured.map(|m| match (m.fifo_priority, m.run_delay_ns) {
            (Some(p), Some(delay)) => format!(
                "measured: the probe at SCHED_FIFO {p} waited {} on the run queue in {} during {} (longest gap {})",
                duration(delay),
                count(m.preemptions, "preemption", "preemptions"),
                m.spin_text(),
                duration(m.max_gap_ns)
            ),
            (Some(p), None) => format!(
                "measured: the probe at SCHED_FIFO {p} was preempted {} during {} (longest gap {})",
                count(m.preemptions, "time", "times"),
                m.spin_text(),
                duration(m.max_gap_ns)
            ),
            (None, _) => "not measured: the probe ran as a normal thread (SCHED_FIFO needs root), which throttling does not touch".into(),
        });
        let cost = match (computed.is_empty(), measured) {
            (true, Some(m)) => m,
            (true, None) => {
                if ok {
                    "none".into()
                } else {
                    NOT_MEASURED.into()
                }
            }
            (false, Some(m)) => format!("{computed}; {m}"),
            (false, None) => format!("{computed}; {NOT_MEASURED}"),
        };
        check("rt_throttling", ok, found, fix, cost)
    }

    fn cpufreq_governor(&self) -> Check {
        let cpu = self.cpu();
        let file = format!("/sys/devices/system/cpu/cpu{}/cpufreq/scaling_governor", self.core);
        match self.host.scaling_governor(self.core) {
            Ok(governor) => {
                let ok = governor == "performance";
                let fix = if ok {
                    NONE_NEEDED.into()
                } else {
                    format!("at run time: echo performance > {file} (--apply does)")
                };
                let cost = if ok {
                    "none".into()
                } else {
                    format!(
                        "not measured: {governor} lowers {cpu}'s clock while it is lightly loaded, which stretches each packet's processing, and raising it again takes tens of microseconds"
                    )
                };
                check("cpufreq_governor", ok, format!("{governor} on {cpu}"), fix, cost)
            }
            Err(e) if e.is_absent() => {
                let why = if self.virtual_machine {
                    "a virtual machine: the host sets the frequency"
                } else if self.host.has_cpufreq() {
                    "cpufreq does not manage this core"
                } else {
                    "no cpufreq driver: the firmware sets the frequency"
                };
                let fix = if self.virtual_machine {
                    "none in the guest: the host's governor decides (performance there)"
                } else {
                    "none here: set the firmware's power profile to performance"
                };
                check(
                    "cpufreq_governor",
                    true,
                    format!("not available here: no {file} ({why})"),
                    fix.into(),
                    "not measured".into(),
                )
            }
            Err(e) => check(
                "cpufreq_governor",
                false,
                not_available(&e),
                format!("echo performance > {file}"),
                NOT_MEASURED.into(),
            ),
        }
    }

    fn steal_time(&self) -> Check {
        let cpu = self.cpu();
        let fix_text = "none in the guest: give the lane a dedicated vCPU on the host (pinned, not shared)";
        if let Some((m, steal)) = self.measured.and_then(|m| Some((m, m.steal_ns?))) {
            let ok = steal == 0;
            let share = steal as f64 / m.spin_ns.max(1) as f64 * 100.0;
            let found = format!("{} stolen from {cpu} in {} ({share:.2}%)", duration(steal), m.spin_text());
            let cost = if ok {
                "none in the probe".into()
            } else {
                format!(
                    "{} of {} ({share:.2}% of the core), each theft a gap of the combined cost",
                    duration(steal),
                    m.spin_text()
                )
            };
            return check(
                "steal_time",
                ok,
                found,
                if ok { NONE_NEEDED.into() } else { fix_text.into() },
                cost,
            );
        }
        match self.host.steal_ns_per_core() {
            Ok(steal) => {
                let stolen = steal.get(self.core).copied().unwrap_or(0);
                let ok = stolen == 0;
                let found = format!("{} stolen from {cpu} since boot", duration(stolen));
                check(
                    "steal_time",
                    ok,
                    found,
                    if ok { NONE_NEEDED.into() } else { fix_text.into() },
                    NOT_MEASURED.into(),
                )
            }
            Err(e) => check("steal_time", false, not_available(&e), fix_text.into(), NOT_MEASURED.into()),
        }
    }

    fn smt_sibling(&self) -> Check {
        let cpu = self.cpu();
        let cost =
            "not measured: a busy sibling slows each instruction of the lane's thread and shares its caches";
        match self.host.thread_siblings(self.core) {
            Ok(siblings) => {
                let others = siblings.without(self.core);
                if others.is_empty() {
                    let vm = if self.virtual_machine {
                        "; a virtual machine sees only its vCPUs, so a sibling on the host would not show"
                    } else {
                        ""
                    };
                    let found = format!("{cpu} has no online sibling (thread_siblings_list {siblings}){vm}");
                    check("smt_sibling", true, found, NONE_NEEDED.into(), "none".into())
                } else {
                    let offline = others
                        .iter()
                        .map(|c| format!("echo 0 > /sys/devices/system/cpu/cpu{c}/online"))
                        .collect::<Vec<_>>()
                        .join("; ");
                    let found =
                        format!("{others} share {cpu}'s execution units (thread_siblings_list {siblings})");
                    let fix = format!(
                        "at run time: {offline} (not applied by --apply: it takes a core from the system); or boot with nosmt"
                    );
                    Check {
                        boot_parameter: Some("nosmt".into()),
                        ..check("smt_sibling", false, found, fix, cost.into())
                    }
                }
            }
            Err(e) => check("smt_sibling", false, not_available(&e), "boot with nosmt".into(), cost.into()),
        }
    }
}

#[cfg(test)]
mod tests;

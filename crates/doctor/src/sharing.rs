//! The checks of what else gets the lane's core: real-time throttling (and the fair server)
//! lending it to normal tasks, the hypervisor's steal time, and an SMT sibling sharing its
//! execution units.

use super::{Check, Context, NONE_NEEDED, NOT_MEASURED, check, count, duration, not_available};

/// The kernel's version as (major, minor), from a release such as `6.18.44-fc`.
pub(super) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

impl Context<'_> {
    pub(super) fn rt_throttling(&self) -> Check {
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

    pub(super) fn steal_time(&self) -> Check {
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

    pub(super) fn smt_sibling(&self) -> Check {
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

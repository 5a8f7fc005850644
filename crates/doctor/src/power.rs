//! The checks of how the lane's core saves power: idle states, whose cost is measured as the
//! lateness of wake-ups with them allowed and with `/dev/cpu_dma_latency` held, and the
//! frequency governor.

use kairos_sys::host::HostError;

use super::{Check, Context, NONE_NEEDED, NOT_MEASURED, check, duration, not_available};

impl Context<'_> {
    pub(super) fn cpuidle(&self) -> Check {
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

    pub(super) fn cpufreq_governor(&self) -> Check {
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
}

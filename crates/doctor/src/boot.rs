//! The checks of the settings only a reboot changes: isolation (`isolcpus`), the tick
//! (`nohz_full`) and RCU callbacks (`rcu_nocbs`). None can be toggled to measure its share, so
//! each reports the probe's combined loss beside the count of the events it would remove.

use kairos_sys::host::{CpuList, CpuListError};

use super::{Check, Context, NONE_NEEDED, NOT_MEASURED, check, count, duration, not_available};

/// `isolcpus=`'s flags and cores (`managed_irq,domain,2-3`).
fn isolcpus_value(value: &str) -> (Vec<&str>, Result<CpuList, CpuListError>) {
    let parts: Vec<&str> = value.split(',').collect();
    let first_core =
        parts.iter().position(|p| p.starts_with(|c: char| c.is_ascii_digit())).unwrap_or(parts.len());
    (parts[..first_core].to_vec(), CpuList::parse(&parts[first_core..].join(",")))
}

impl Context<'_> {
    fn boot_time_cost(&self, ok: bool, events: Option<String>) -> String {
        match (self.measured, events) {
            (None, _) => format!("{NOT_MEASURED}; boot-time, so its share cannot be measured apart"),
            (Some(_), Some(events)) if ok => format!("none: {events}"),
            (Some(_), Some(events)) => format!("boot-time, so part of the probe's combined cost: {events}"),
            (Some(_), None) => "boot-time, so part of the probe's combined cost".into(),
        }
    }

    pub(super) fn isolcpus(&self) -> Check {
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

    pub(super) fn nohz_full(&self) -> Check {
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

    pub(super) fn rcu_nocbs(&self) -> Check {
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
}

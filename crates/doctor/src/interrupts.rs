//! The checks of what interrupts the lane's core: the lockup watchdogs (a timer and an NMI) and
//! device IRQs whose affinity includes it. Both can be moved off the core at run time (`--apply`
//! does), and their cost is told in interrupts: the watchdogs' periods, and those the probe saw.

use kairos_sys::host::HostError;

use super::{Check, Context, Counted, Measured, NONE_NEEDED, NOT_MEASURED, check, count, not_available};

/// Numbers as ranges: `24-26,28-43`.
pub(super) fn ranges(numbers: &[u32]) -> String {
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

/// The device an interrupt row names (the last word of its description), or its source.
fn device_name(counted: &Counted) -> &str {
    counted.description.split_whitespace().last().unwrap_or(&counted.source)
}

impl Context<'_> {
    pub(super) fn nmi_watchdog(&self) -> Check {
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

    pub(super) fn irq_affinity(&self) -> Check {
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
}

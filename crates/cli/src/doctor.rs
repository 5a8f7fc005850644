//! `kairos doctor`: the host doctor for the express lane's core from the command line: flags and
//! their checks, the probe (`kairos_metrics::core_probe`) whose figures go to the checks
//! (`kairos_doctor`), and the rendering of the findings, the applied changes and their
//! undo.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use kairos_doctor::apply::{self, Applied, Change, DEFAULT_STATE_PATH, Reverted};
use kairos_doctor::{Counted, Diagnosis, DoctorError, Measured, Wake};
use kairos_metrics::LatencySummary;
use kairos_metrics::core_probe::{CoreProbe, CoreProbeConfig, SourceCount, probe_core};
use kairos_sys::host::{HostFs, InterfaceName};

use crate::exit::{self, usage};

/// The longest probe `--probe-ms` takes: a minute.
const MAX_PROBE_MS: u64 = 60_000;

/// Width the table's text is wrapped to.
const TABLE_WIDTH: usize = 110;

#[derive(Args)]
pub struct DoctorArgs {
    /// The express lane's core: an online core [default: the last core].
    #[arg(long, value_name = "N")]
    core: Option<usize>,
    /// Print {"core", "checks": [{"name", "ok", "found", "fix", "cost"}], ...} on stdout (with
    /// "probe", "combined_cost", "boot_parameters", and "applied" after --apply) instead of the
    /// table.
    #[arg(long)]
    json: bool,
    /// Make the run-time fixes (IRQs away from the core, RT throttling off, the lockup
    /// watchdogs off the core, the performance governor), each recorded in --state with the
    /// value it replaced, then examine the core. Needs root.
    #[arg(long)]
    apply: bool,
    /// Put back every value --apply recorded in --state, then remove it. Needs root.
    #[arg(long)]
    revert: bool,
    /// The record of --apply's changes.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_STATE_PATH)]
    state: PathBuf,
    /// Length of the probe on the core, milliseconds, 0-60000 (0: no probe, costs not
    /// measured): it spins (at SCHED_FIFO 98 where permitted) for all but two wake-up phases of
    /// an eighth each, at most 250 ms.
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    probe_ms: u64,
    /// A lane interface whose receive is to run in kernel threads of its own (threaded NAPI)
    /// on the lane's core at SCHED_FIFO 70, above the node's loop: checked (lane_receive), and
    /// with --apply made so (threaded NAPI turned on if the interface is in this namespace, each
    /// thread pinned and prioritised; --revert puts them back). Repeat for several.
    #[arg(long = "lane-interface", value_name = "IF")]
    lane_interfaces: Vec<String>,
}

/// Runs `kairos doctor`: examines the lane's core and prints the findings (`--apply` first
/// makes the run-time fixes; `--revert` only undoes them). Ok with [`exit::OK`] once it has
/// examined, whatever it found; a bad flag is a usage error, and an `--apply` or `--revert`
/// that failed or was not permitted an error.
pub(crate) fn run(args: &DoctorArgs) -> Result<i32> {
    if args.apply && args.revert {
        return Err(usage(
            "--apply and --revert cannot be given together: apply makes the changes, revert undoes them",
        ));
    }
    if args.probe_ms > MAX_PROBE_MS {
        return Err(usage(format!(
            "--probe-ms must be from 0 (no probe) to {MAX_PROBE_MS} milliseconds, got {}",
            args.probe_ms
        )));
    }
    let lane_interfaces = args
        .lane_interfaces
        .iter()
        .map(|name| {
            InterfaceName::new(name).ok_or_else(|| {
                usage(format!(
                    "--lane-interface {name:?}: not an interface name (1 to 15 bytes, no '/', ':' or white space)"
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let host = HostFs::real();
    let core = kairos_doctor::lane_core(&host, args.core).map_err(|e| match e {
        DoctorError::CoreOffline { .. } => usage(e.to_string()),
        other => anyhow::Error::new(other),
    })?;
    if (args.apply || args.revert) && !kairos_sys::user::is_root() {
        let flag = if args.apply { "--apply" } else { "--revert" };
        anyhow::bail!(
            "kairos doctor {flag} needs root (it writes /proc/irq and /proc/sys); run it as root, or without {flag} to examine only"
        );
    }
    if args.revert {
        let reverted = apply::revert(&host, &args.state)
            .with_context(|| format!("kairos doctor --revert (record {})", args.state.display()))?;
        if args.json {
            outln!("{}", reverted_json(&reverted));
        } else {
            out!("{}", reverted_text(&reverted, &args.state, &apply::irq_devices(&host)));
        }
        if !reverted.failed.is_empty() {
            anyhow::bail!(
                "{} settings could not be put back; they stay in {}",
                reverted.failed.len(),
                args.state.display()
            );
        }
        return Ok(exit::OK);
    }
    let applied = if args.apply {
        Some(
            apply::apply(&host, core, &lane_interfaces, &args.state)
                .with_context(|| format!("kairos doctor --apply (record {})", args.state.display()))?,
        )
    } else {
        None
    };
    let probe = if args.probe_ms == 0 {
        None
    } else {
        let config = CoreProbeConfig::lasting(core, Duration::from_millis(args.probe_ms));
        crate::log(&format!(
            "measuring cpu{core} for {:.1} s: spinning {:.1} s (at SCHED_FIFO {} where permitted), then two {} ms phases of wake-ups",
            config.total().as_secs_f64(),
            config.spin.as_secs_f64(),
            config.fifo_priority,
            config.wake.as_millis(),
        ));
        let probe = probe_core(&config).context("the probe on the lane's core")?;
        if !probe.spin.pinned {
            crate::log(&format!(
                "the probe could not be pinned to cpu{core}: its figures are of whichever core ran it"
            ));
        }
        Some(probe)
    };
    let measured = probe.as_ref().map(measured);
    let mut diagnosis = kairos_doctor::examine(&host, core, measured.as_ref());
    if !lane_interfaces.is_empty() {
        diagnosis.checks.push(kairos_doctor::receive::examine(&host, core, &lane_interfaces));
    }
    if args.json {
        let mut json = serde_json::to_value(&diagnosis)?;
        json["probe"] = serde_json::to_value(&probe)?;
        if let Some(applied) = &applied {
            json["applied"] = applied_json(applied, &args.state);
        }
        outln!("{json}");
    } else {
        let devices = apply::irq_devices(&host);
        if let Some(applied) = &applied {
            out!("{}", applied_text(applied, &args.state, &devices));
        }
        out!("{}", table(&host, &diagnosis, probe.as_ref()));
    }
    Ok(exit::OK)
}

/// The probe's figures as the checks take them.
fn measured(probe: &CoreProbe) -> Measured {
    let counted = |sources: &Option<Vec<SourceCount>>| {
        sources.as_ref().map(|s| {
            s.iter()
                .map(|c| Counted {
                    source: c.source.clone(),
                    description: c.description.clone(),
                    count: c.count,
                })
                .collect()
        })
    };
    let wake = |w: &LatencySummary| Wake { count: w.count, p50_ns: w.p50, p99_ns: w.p99, max_ns: w.max };
    Measured {
        spin_ns: probe.spin_wall_ns,
        fifo_priority: probe.fifo_priority,
        gap_floor_ns: probe.config.gap_floor_ns,
        gaps: probe.spin.gaps.count,
        gaps_over_10us: probe.spin.gaps_over_10us,
        gaps_over_100us: probe.spin.gaps_over_100us,
        median_gap_ns: probe.spin.gaps.p50,
        max_gap_ns: probe.spin.max_gap_ns,
        lost_ns: probe.spin.lost_ns,
        preemptions: probe.preemptions,
        run_delay_ns: probe.run_delay_ns,
        steal_ns: probe.steal_ns,
        interrupts: counted(&probe.interrupts),
        softirqs: counted(&probe.softirqs),
        wake_idle: (probe.wake_idle.count > 0).then(|| wake(&probe.wake_idle)),
        wake_held: probe.wake_held.as_ref().filter(|w| w.count > 0).map(wake),
        wake_held_refused: probe.wake_held_refused.clone(),
    }
}

/// `text` in lines of at most `width` characters (a longer word stays whole), the first line
/// after `first`, the others after `indent`.
fn wrap(text: &str, first: &str, indent: &str, width: usize) -> String {
    let mut out = String::from(first);
    let mut line_len = first.chars().count();
    let mut line_empty = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !line_empty && line_len + 1 + len > width {
            out.push('\n');
            out.push_str(indent);
            line_len = indent.chars().count();
            line_empty = true;
        }
        if !line_empty {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(word);
        line_len += len;
        line_empty = false;
    }
    out.push('\n');
    out
}

/// The findings as a table: a row per check (what is set), its fix and cost below it, then the
/// probe's combined loss and the boot parameters of the boot-time fixes.
fn table(host: &HostFs, diagnosis: &Diagnosis, probe: Option<&CoreProbe>) -> String {
    let release = host.kernel_release().unwrap_or_else(|_| "unknown".into());
    let online = host.online_cores().map(|o| o.to_string()).unwrap_or_else(|_| "?".into());
    let vm = if host.is_virtual_machine().unwrap_or(false) { ", a virtual machine" } else { "" };
    let mut out = format!(
        "the express lane's core: cpu{} (online cores {online}; Linux {release}{vm})\n",
        diagnosis.core
    );
    let (name_width, ok_width) = (18, 5);
    let indent = " ".repeat(name_width + ok_width);
    out.push_str(&format!("{:<name_width$}{:<ok_width$}{}\n", "check", "ok", "found / fix / cost"));
    for check in &diagnosis.checks {
        let first = format!("{:<name_width$}{:<ok_width$}", check.name, if check.ok { "yes" } else { "NO" });
        out.push_str(&wrap(&check.found, &first, &indent, TABLE_WIDTH));
        if !check.ok {
            out.push_str(&wrap(
                &check.fix,
                &format!("{indent}fix:  "),
                &format!("{indent}      "),
                TABLE_WIDTH,
            ));
        }
        out.push_str(&wrap(&check.cost, &format!("{indent}cost: "), &format!("{indent}      "), TABLE_WIDTH));
    }
    let failed = diagnosis.checks.iter().filter(|c| !c.ok).count();
    out.push('\n');
    match (&diagnosis.combined_cost, probe) {
        (Some(combined), Some(probe)) => {
            out.push_str(&wrap(combined, "combined cost (the probe): ", "  ", TABLE_WIDTH));
            let wakes = probe.wake_idle.count + probe.wake_held.map_or(0, |w| w.count);
            out.push_str(&format!("  then {wakes} timed wake-ups (cpuidle's cost)\n"));
        }
        _ => out.push_str("combined cost: not measured (--probe-ms 0)\n"),
    }
    if !diagnosis.boot_parameters.is_empty() {
        out.push_str(&wrap(
            &diagnosis.boot_parameters.join(" "),
            "boot parameters for the boot-time fixes: ",
            "  ",
            TABLE_WIDTH,
        ));
    }
    out.push_str(&format!(
        "{failed} of {} checks not ok; kairos doctor --apply makes the run-time fixes (root), --revert undoes them\n",
        diagnosis.checks.len()
    ));
    out
}

/// A setting with the device behind it, if it is an IRQ's.
fn setting_label(
    change: &kairos_sys::host::Tunable,
    devices: &std::collections::HashMap<u32, String>,
) -> String {
    match change {
        kairos_sys::host::Tunable::IrqAffinity(irq) => match devices.get(irq) {
            Some(device) => format!("{change} ({device})"),
            None => change.to_string(),
        },
        kairos_sys::host::Tunable::ThreadCores(t) | kairos_sys::host::Tunable::ThreadPolicy(t) => {
            match HostFs::real().thread_name(*t) {
                Ok(name) => format!("{change} ({name})"),
                Err(_) => change.to_string(),
            }
        }
        _ => change.to_string(),
    }
}

fn applied_text(
    applied: &Applied,
    state: &std::path::Path,
    devices: &std::collections::HashMap<u32, String>,
) -> String {
    let line =
        |c: &Change| format!("  {}: {} -> {}\n", setting_label(&c.setting, devices), c.previous, c.written);
    let mut out = String::new();
    if applied.changed.is_empty() {
        out.push_str("applied: nothing to change now\n");
    } else {
        out.push_str(&format!(
            "applied ({} changes, recorded in {}):\n",
            applied.changed.len(),
            state.display()
        ));
        applied.changed.iter().for_each(|c| out.push_str(&line(c)));
    }
    if !applied.kept.is_empty() {
        out.push_str(&format!("kept from an earlier --apply ({}):\n", applied.kept.len()));
        applied.kept.iter().for_each(|c| out.push_str(&line(c)));
    }
    if !applied.refused.is_empty() {
        out.push_str(&format!("refused by the kernel ({}):\n", applied.refused.len()));
        for r in &applied.refused {
            out.push_str(&wrap(
                &r.why,
                &format!("  {}: ", setting_label(&r.setting, devices)),
                "    ",
                TABLE_WIDTH,
            ));
        }
    }
    if !applied.notes.is_empty() {
        out.push_str("notes:\n");
        for note in &applied.notes {
            out.push_str(&wrap(note, "  - ", "    ", TABLE_WIDTH));
        }
    }
    if !applied.changed.is_empty() || !applied.kept.is_empty() {
        out.push_str(&format!("kairos doctor --revert --state {} undoes them\n", state.display()));
    }
    out.push('\n');
    out
}

fn changes_json(changes: &[Change]) -> serde_json::Value {
    changes
        .iter()
        .map(|c| serde_json::json!({"setting": c.setting.path(), "previous": c.previous, "written": c.written}))
        .collect()
}

fn refusals_json(refusals: &[apply::Refusal]) -> serde_json::Value {
    refusals.iter().map(|r| serde_json::json!({"setting": r.setting.path(), "why": r.why})).collect()
}

fn applied_json(applied: &Applied, state: &std::path::Path) -> serde_json::Value {
    serde_json::json!({
        "state": state.display().to_string(),
        "changed": changes_json(&applied.changed),
        "kept": changes_json(&applied.kept),
        "refused": refusals_json(&applied.refused),
        "notes": applied.notes,
    })
}

fn reverted_json(reverted: &Reverted) -> serde_json::Value {
    serde_json::json!({
        "found_record": reverted.found_record,
        "restored": changes_json(&reverted.restored),
        "gone": changes_json(&reverted.gone),
        "failed": refusals_json(&reverted.failed),
    })
}

fn reverted_text(
    reverted: &Reverted,
    state: &std::path::Path,
    devices: &std::collections::HashMap<u32, String>,
) -> String {
    if !reverted.found_record {
        return format!("nothing to revert: no record at {}\n", state.display());
    }
    let mut out = format!("restored ({}):\n", reverted.restored.len());
    for c in &reverted.restored {
        out.push_str(&format!("  {}: {} -> {}\n", setting_label(&c.setting, devices), c.written, c.previous));
    }
    for c in &reverted.gone {
        out.push_str(&format!("  {}: gone since (nothing to put back)\n", c.setting));
    }
    for r in &reverted.failed {
        out.push_str(&wrap(&r.why, &format!("  {}: not restored: ", r.setting), "    ", TABLE_WIDTH));
    }
    if reverted.failed.is_empty() {
        out.push_str(&format!("removed {}\n", state.display()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_wraps_under_the_width_with_a_hanging_indent() {
        let text = "one two three four five six seven eight nine ten";
        let wrapped = wrap(text, "name  ", "      ", 20);
        for line in wrapped.lines() {
            assert!(line.chars().count() <= 20, "{line:?}");
        }
        assert!(wrapped.starts_with("name  one two three\n      four"), "{wrapped}");
        assert_eq!(wrapped.split_whitespace().skip(1).collect::<Vec<_>>().join(" "), text);
        assert_eq!(wrap("averyveryverylongword", "x ", "  ", 5), "x averyveryverylongword\n");
    }
}

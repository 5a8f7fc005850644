//! The doctor's run-time fixes and their exact undo.
//!
//! What can be changed while the system runs, and changed back, is changed here: every IRQ
//! whose affinity includes the lane's core is moved to the other cores (and the default
//! affinity of IRQs set up later), so are the kernel's unbound threads and workqueue workers
//! ([`crate::housekeeping`]), RT throttling is switched off, the lockup watchdogs leave the
//! core, and a frequency governor other than `performance` is set to it. The boot-time fixes
//! (isolation, the tick, RCU callbacks) cannot be; idle states are the node's to hold off while
//! it runs (`/dev/cpu_dma_latency` holds only while a process keeps it open).
//!
//! A record of every change and the value it replaced is kept in a state file (`--state`,
//! [`DEFAULT_STATE_PATH`]) so that [`revert`] restores exactly those values and removes the
//! file. The record is written before the first change and each change is recorded before it is
//! made (write-ahead, each version of the file replacing the last atomically), so whenever the
//! process stops, even killed, every change made is in the record with the value it replaced; a
//! recorded change that was not made is restored to the value it still has, which is harmless.
//! A SIGINT, SIGTERM or SIGHUP in the middle of [`apply`] undoes this run's changes and puts
//! the record back as it was (through `kairos_sys::cleanup`), so an interrupted apply leaves
//! the machine as it found it.
//!
//! Applying twice keeps the first values: a setting already in the record keeps the value it
//! had before the first apply, and one already changed is not planned again. A record for
//! another core is refused (revert it first).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use kairos_sys::host::{CpuList, HostError, HostFs, InterfaceName, Tunable};
use serde::{Deserialize, Serialize};

use super::DoctorError;

/// Where the record of applied changes is kept unless `--state` says otherwise (`/run` is
/// emptied at boot, as the changes are undone by a reboot).
pub const DEFAULT_STATE_PATH: &str = "/run/kairos/doctor.json";

/// The largest record read back (a few thousand IRQs fit in well under this).
const STATE_FILE_LIMIT: u64 = 1 << 20;

/// The longest value a record may hold for a setting (a CPU list of the largest machine).
const VALUE_LIMIT: usize = 4096;

/// One change: the setting, the value it had before the first apply, the value written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The setting.
    pub setting: Tunable,
    /// Its value before the doctor first changed it.
    pub previous: String,
    /// What the doctor wrote.
    pub written: String,
}

/// A change the kernel (or the host) refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The setting.
    pub setting: Tunable,
    /// Why, in one line.
    pub why: String,
}

/// The changes [`apply`] would make, computed from the settings as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Each setting and the value it is to take, in the order they are made.
    pub steps: Vec<(Tunable, String)>,
    /// Settings it cannot plan for, and why (an affinity it cannot read, no other core).
    pub notes: Vec<String>,
}

/// What [`apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The changes made now.
    pub changed: Vec<Change>,
    /// Changes an earlier apply made that are still in the record (to be reverted with these).
    pub kept: Vec<Change>,
    /// Changes the kernel refused.
    pub refused: Vec<Refusal>,
    /// What could not be planned, and what is left to the node or to boot.
    pub notes: Vec<String>,
}

/// What [`revert`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reverted {
    /// Whether there was a record at all.
    pub found_record: bool,
    /// Settings put back to their previous values.
    pub restored: Vec<Change>,
    /// Settings whose file is gone (an IRQ freed since): nothing to put back.
    pub gone: Vec<Change>,
    /// Settings the kernel refused to put back; they stay in the record.
    pub failed: Vec<Refusal>,
}

/// The record as it is written: `{"version": 1, "core": N, "changes": [{"setting", "previous",
/// "written"}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    version: u32,
    core: usize,
    changes: Vec<RecordedChange>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordedChange {
    setting: String,
    previous: String,
    written: String,
}

const RECORD_VERSION: u32 = 1;

impl From<&Change> for RecordedChange {
    fn from(change: &Change) -> Self {
        Self {
            setting: change.setting.path(),
            previous: change.previous.clone(),
            written: change.written.clone(),
        }
    }
}

fn state_text(path: &Path) -> String {
    path.display().to_string()
}

/// Reads the record at `path`: `None` when there is none; refused when it names anything but a
/// setting the doctor changes, or values no kernel file holds.
fn load(path: &Path) -> Result<Option<(usize, Vec<Change>)>, DoctorError> {
    let text = match kairos_sys::fs::read_text(path, STATE_FILE_LIMIT) {
        Ok(text) => text,
        Err(kairos_sys::fs::FileError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let malformed = |why: String| DoctorError::StateMalformed { path: state_text(path), why };
    let record: Record =
        serde_json::from_str(&text).map_err(|e| malformed(format!("not a doctor record ({e})")))?;
    if record.version != RECORD_VERSION {
        return Err(malformed(format!(
            "record version {} (this doctor writes {RECORD_VERSION})",
            record.version
        )));
    }
    let changes = record
        .changes
        .into_iter()
        .map(|c| {
            let setting = Tunable::from_path(&c.setting)
                .ok_or_else(|| malformed(format!("{:?} is not a setting the doctor changes", c.setting)))?;
            for value in [&c.previous, &c.written] {
                if value.len() > VALUE_LIMIT || value.contains(['\n', '\0']) {
                    return Err(malformed(format!(
                        "{setting}: the value {value:?} is not one a kernel file holds"
                    )));
                }
            }
            Ok(Change { setting, previous: c.previous, written: c.written })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some((record.core, changes)))
}

/// Replaces the record at `path` with `changes` for `core`, atomically.
fn save(path: &Path, core: usize, changes: &[Change]) -> Result<(), DoctorError> {
    let record =
        Record { version: RECORD_VERSION, core, changes: changes.iter().map(RecordedChange::from).collect() };
    let mut json = serde_json::to_string_pretty(&record).expect("a record of strings serializes");
    json.push('\n');
    kairos_sys::fs::write_atomic(path, json.as_bytes())?;
    Ok(())
}

fn remove(path: &Path) -> Result<(), DoctorError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(kairos_sys::fs::FileError::Io { path: path.to_path_buf(), source: e }.into())
        }
        _ => Ok(()),
    }
}

/// The run-time changes that would keep `core` quiet and serve `lane_interfaces`' receive
/// there, from the settings as they are now. Threads that turning threaded NAPI on will start
/// are not in it: [`apply`] plans for them once they run.
pub fn plan(host: &HostFs, core: usize, lane_interfaces: &[InterfaceName]) -> Result<Plan, DoctorError> {
    let mut plan = Plan::default();
    let others = host.online_cores()?.without(core);
    // An affinity that keeps no online core would be refused; such an IRQ goes to the others.
    let away = |cores: &CpuList| {
        let rest = cores.without(core);
        if rest.iter().any(|c| others.contains(c)) { rest } else { others.clone() }
    };
    if others.is_empty() {
        plan.notes.push(format!("no other online core to take core {core}'s IRQs and watchdogs"));
    } else {
        match host.irq_affinities() {
            Ok(irqs) => {
                for irq in irqs {
                    match irq.allowed {
                        Ok(cores) if cores.contains(core) => {
                            plan.steps.push((Tunable::IrqAffinity(irq.irq), away(&cores).to_string()));
                        }
                        Ok(_) => {}
                        Err(e) => plan.notes.push(format!("IRQ {} left alone: {e}", irq.irq)),
                    }
                }
            }
            Err(e) => plan.notes.push(format!("IRQs left alone: {e}")),
        }
        let lanes = crate::housekeeping::lane_prefixes(lane_interfaces);
        crate::housekeeping::plan(host, core, &others, &lanes, &mut plan);
        match host.default_irq_affinity() {
            Ok(cores) if cores.contains(core) => {
                plan.steps.push((Tunable::DefaultIrqAffinity, away(&cores).to_mask()));
            }
            Ok(_) => {}
            Err(e) => plan.notes.push(format!("the default IRQ affinity left alone: {e}")),
        }
    }
    match (host.kernel_sysctl("sched_rt_runtime_us"), host.kernel_sysctl("sched_rt_period_us")) {
        (Ok(runtime), Ok(period)) if runtime >= 0 && runtime < period => {
            plan.steps.push((Tunable::RtRuntime, "-1".into()));
        }
        (Ok(_), Ok(_)) => {}
        (Err(e), _) | (_, Err(e)) => plan.notes.push(format!("RT throttling left alone: {e}")),
    }
    let on = |name| host.kernel_sysctl(name).is_ok_and(|v| v != 0);
    let watchdog_on = on("watchdog") && (on("nmi_watchdog") || on("soft_watchdog"));
    if watchdog_on {
        match host.watchdog_cores() {
            Ok(cores) if cores.contains(core) => {
                plan.steps.push((Tunable::WatchdogCpumask, cores.without(core).to_string()));
            }
            Ok(_) => {}
            Err(e) => plan.notes.push(format!("the watchdogs left alone: {e}")),
        }
    }
    match host.scaling_governor(core) {
        Ok(governor) if governor != "performance" => {
            plan.steps.push((Tunable::ScalingGovernor(core), "performance".into()));
        }
        Ok(_) => {}
        Err(e) if e.is_absent() => {}
        Err(e) => plan.notes.push(format!("the frequency governor left alone: {e}")),
    }
    crate::receive::plan_threaded(host, lane_interfaces, &mut plan);
    crate::receive::plan_threads(host, core, lane_interfaces, &mut plan);
    plan.notes.push(
        "idle states: applied by the node while it runs (it holds /dev/cpu_dma_latency at 0; the target lapses when the file is closed)"
            .into(),
    );
    plan.notes.push("isolcpus, nohz_full and rcu_nocbs are boot-time: see the boot parameters".into());
    Ok(plan)
}

/// This run's progress, shared with the undo a signal runs.
struct Progress {
    host: HostFs,
    state: PathBuf,
    core: usize,
    /// The record as this run found it (`None`: there was none).
    found: Option<Vec<Change>>,
    /// The record now.
    record: Vec<Change>,
    /// Each setting this run wrote and the value it had just before.
    written: Vec<(Tunable, String)>,
}

impl Progress {
    /// Puts back what this run wrote, newest first, and the record as it was found (best
    /// effort: the process is exiting on a signal, and a setting left changed is still in the
    /// record if the record could not be put back).
    fn undo(&mut self) {
        for (setting, before) in self.written.drain(..).rev() {
            let _ = self.host.write_tunable(setting, &before);
        }
        let _ = match &self.found {
            Some(changes) => save(&self.state, self.core, changes),
            None => remove(&self.state),
        };
    }
}

fn lock(progress: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes the planned changes for `core` and `lane_interfaces`, recording each in `state`
/// before making it.
pub fn apply(
    host: &HostFs,
    core: usize,
    lane_interfaces: &[InterfaceName],
    state: &Path,
) -> Result<Applied, DoctorError> {
    let found = match load(state)? {
        Some((recorded, _)) if recorded != core => {
            return Err(DoctorError::OtherCore { path: state_text(state), recorded, asked: core });
        }
        Some((_, changes)) => Some(changes),
        None => None,
    };
    let plan = plan(host, core, lane_interfaces)?;
    let mut applied =
        Applied { kept: found.clone().unwrap_or_default(), notes: plan.notes, ..Applied::default() };
    let record = found.clone().unwrap_or_default();
    // The record exists before the first change.
    save(state, core, &record)?;
    let progress = Arc::new(Mutex::new(Progress {
        host: host.clone(),
        state: state.to_path_buf(),
        core,
        found,
        record,
        written: Vec::new(),
    }));
    let registration = {
        let _hold = kairos_sys::cleanup::hold_off();
        let progress = Arc::clone(&progress);
        kairos_sys::cleanup::register("the doctor's changes of this run", move || lock(&progress).undo())
    };
    let mut threaded_on = false;
    for (setting, value) in plan.steps {
        let made = make(host, core, state, &progress, setting, value, &mut applied)?;
        threaded_on |= made && matches!(setting, Tunable::NapiThreaded(_));
    }
    if threaded_on {
        // The threads threaded NAPI started just now are placed as the others were.
        let mut threads = Plan::default();
        crate::receive::plan_threads(host, core, lane_interfaces, &mut threads);
        applied.notes.extend(threads.notes);
        for (setting, value) in threads.steps {
            make(host, core, state, &progress, setting, value, &mut applied)?;
        }
    }
    {
        let _hold = kairos_sys::cleanup::hold_off();
        drop(registration);
        let progress = lock(&progress);
        if progress.record.is_empty() {
            // Nothing changed, now or before: no record to revert.
            remove(state)?;
        }
    }
    Ok(applied)
}

/// Makes one change, recorded before it is made; whether it was made (a setting already at
/// `value` is not, and a refusal is counted in `applied`).
fn make(
    host: &HostFs,
    core: usize,
    state: &Path,
    progress: &Mutex<Progress>,
    setting: Tunable,
    value: String,
    applied: &mut Applied,
) -> Result<bool, DoctorError> {
    // A signal waits until the change and its record agree.
    let _hold = kairos_sys::cleanup::hold_off();
    let mut progress = lock(progress);
    let current = match host.read_tunable(setting) {
        Ok(current) => current,
        Err(e) => {
            applied.refused.push(Refusal { setting, why: e.to_string() });
            return Ok(false);
        }
    };
    if current == value {
        return Ok(false);
    }
    let recorded = progress.record.iter().position(|c| c.setting == setting);
    match recorded {
        // Applied before and changed back since by someone else: the first value stays.
        Some(i) => progress.record[i].written = value.clone(),
        None => progress.record.push(Change { setting, previous: current.clone(), written: value.clone() }),
    }
    save(state, core, &progress.record)?;
    match host.write_tunable(setting, &value) {
        Ok(()) => {
            progress.written.push((setting, current.clone()));
            applied.kept.retain(|c| c.setting != setting);
            let previous = recorded.map_or(current, |i| progress.record[i].previous.clone());
            applied.changed.push(Change { setting, previous, written: value });
        }
        Err(e) => {
            if recorded.is_none() {
                progress.record.pop();
                save(state, core, &progress.record)?;
            }
            applied.refused.push(Refusal { setting, why: refusal_reason(setting, &e) });
            return Ok(false);
        }
    }
    Ok(true)
}

/// Why a write was refused, with what it means for an IRQ.
fn refusal_reason(setting: Tunable, error: &HostError) -> String {
    match (setting, error) {
        (Tunable::IrqAffinity(_), HostError::Refused { source, .. }) => format!(
            "{source}: the kernel keeps this IRQ's affinity (a managed or per-core IRQ); isolcpus=managed_irq keeps managed IRQs off the core at boot"
        ),
        _ => error.to_string(),
    }
}

/// Puts every setting recorded in `state` back to its previous value, newest first, and
/// removes the record; settings the kernel refuses stay in it (and are reported).
pub fn revert(host: &HostFs, state: &Path) -> Result<Reverted, DoctorError> {
    let Some((core, changes)) = load(state)? else {
        return Ok(Reverted::default());
    };
    let mut reverted = Reverted { found_record: true, ..Reverted::default() };
    let mut remaining = changes.clone();
    for change in changes.into_iter().rev() {
        match host.write_tunable(change.setting, &change.previous) {
            Ok(()) => reverted.restored.push(change.clone()),
            Err(e) if e.is_absent() => reverted.gone.push(change.clone()),
            Err(e) => {
                reverted.failed.push(Refusal { setting: change.setting, why: e.to_string() });
                continue;
            }
        }
        remaining.retain(|c| c.setting != change.setting);
        // Written as it goes, so a revert stopped half-way leaves a record of what is left.
        if remaining.is_empty() { remove(state)? } else { save(state, core, &remaining)? }
    }
    Ok(reverted)
}

/// The devices behind each IRQ number, from `/proc/interrupts` (for naming the IRQs a report
/// lists); empty when it cannot be read.
pub fn irq_devices(host: &HostFs) -> std::collections::HashMap<u32, String> {
    host.interrupts()
        .map(|table| {
            table
                .rows
                .iter()
                .filter_map(|row| {
                    let irq = row.source.parse().ok()?;
                    Some((irq, row.description.split_whitespace().last()?.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, HostFs) {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in
            [("proc/irq/5/smp_affinity_list", "0-1\n"), ("proc/sys/kernel/sched_rt_runtime_us", "950000\n")]
        {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        let host = HostFs::at(dir.path());
        (dir, host)
    }

    /// What a signal in the middle of an apply runs: this run's writes undone, newest first,
    /// and the record as the run found it.
    #[test]
    fn the_undo_of_an_interrupted_apply_restores_the_settings_and_the_record() {
        for found in [
            None,
            Some(vec![Change {
                setting: Tunable::IrqAffinity(9),
                previous: "0-1".into(),
                written: "0".into(),
            }]),
        ] {
            let (dir, host) = tree();
            let state = dir.path().join("doctor.json");
            let mut progress = Progress {
                host: host.clone(),
                state: state.clone(),
                core: 1,
                found: found.clone(),
                record: found.clone().unwrap_or_default(),
                written: Vec::new(),
            };
            for (setting, value) in [(Tunable::IrqAffinity(5), "0"), (Tunable::RtRuntime, "-1")] {
                let before = host.read_tunable(setting).unwrap();
                progress.record.push(Change { setting, previous: before.clone(), written: value.into() });
                save(&state, 1, &progress.record).unwrap();
                host.write_tunable(setting, value).unwrap();
                progress.written.push((setting, before));
            }
            progress.undo();
            assert_eq!(host.read_tunable(Tunable::IrqAffinity(5)).unwrap(), "0-1");
            assert_eq!(host.read_tunable(Tunable::RtRuntime).unwrap(), "950000");
            match found {
                None => assert!(!state.exists(), "a record this run made is removed"),
                Some(changes) => assert_eq!(load(&state).unwrap(), Some((1, changes))),
            }
        }
    }
}

//! The kernel's own housekeeping threads off the lane's core: what `isolcpus=domain` keeps there
//! at boot, done at run time.
//!
//! Unbound kernel threads (`kthreadd` and the threads it starts that may run anywhere:
//! `kdamond`, `kcompactd`, `khugepaged`, `kswapd`, RCU's grace-period threads, ...) and the
//! workers of unbound workqueues (`kworker/u*`) may run on any core, the lane's included. On a
//! kernel whose preemption model is `none` (this machine's default: `CONFIG_PREEMPT_NONE` with
//! `PREEMPT_DYNAMIC`, no `preempt=` at boot) such a thread is not preempted by the lane's
//! real-time thread until it yields: a scheduling trace of a flooded lane run here showed
//! `kdamond.0` running 5.8 ms at once on the lane's core. The doctor moves each such thread to
//! the other cores (recorded per thread, by id and start time, so revert gives each back its
//! own cores) and takes the lane's core out of the unbound workqueues' mask. Threads bound to
//! one core (per-core workers, `ksoftirqd/N`, `migration/N`) are the kernel's to place and are
//! left alone, as are the lane interfaces' receive threads, which [`crate::receive`] places on
//! the core.

use kairos_sys::host::{CpuList, HostFs, Tunable, name_starts_with, napi_thread_prefix};

use super::apply::Plan;

/// The steps that keep `core` free of the kernel's unbound threads and workqueue workers, save
/// those serving `lane_interfaces`.
pub(crate) fn plan(host: &HostFs, core: usize, others: &CpuList, lane_prefixes: &[String], plan: &mut Plan) {
    for (thread, name) in host.kernel_threads() {
        let lane = lane_prefixes.iter().any(|p| name_starts_with(&name, p));
        if name.starts_with("kworker/") || lane {
            continue;
        }
        match host.thread_cores(thread) {
            // Bound to the core alone (or to no other online core): the kernel's to place.
            Ok(cores) if cores.contains(core) && cores.iter().any(|c| others.contains(c)) => {
                let away: CpuList = cores.iter().filter(|c| others.contains(*c)).collect();
                plan.steps.push((Tunable::ThreadCores(thread), away.to_string()));
            }
            Ok(_) => {}
            Err(e) if e.is_absent() => {}
            Err(e) => plan.notes.push(format!("kernel thread {name} ({}) left alone: {e}", thread.pid)),
        }
    }
    let mask = match host.read_tunable(Tunable::WorkqueueCpumask) {
        Err(e) if e.is_absent() => return,
        read => {
            read.map_err(|e| e.to_string()).and_then(|m| CpuList::parse_mask(&m).map_err(|e| e.to_string()))
        }
    };
    match mask {
        Ok(cores) if cores.contains(core) => {
            let away = cores.without(core);
            let away = if away.is_empty() { others.clone() } else { away };
            plan.steps.push((Tunable::WorkqueueCpumask, away.to_mask()));
        }
        Ok(_) => {}
        Err(why) => plan.notes.push(format!("the unbound workqueues' cores left alone: {why}")),
    }
}

/// The name prefixes of the lane interfaces' receive threads.
pub(crate) fn lane_prefixes(interfaces: &[kairos_sys::host::InterfaceName]) -> Vec<String> {
    interfaces.iter().map(|i| napi_thread_prefix(i.as_str())).collect()
}

//! The reclaimer thread: runs callbacks so that readers do not have to.
//!
//! Under `Offload` it does all reclamation: it polls the grace period in flight every
//! `reclaimer_poll`, takes completed batches and runs them to the end (it is an ordinary
//! preemptible thread, so a long batch delays nobody with a higher priority); when nothing is
//! queued it parks until `defer` wakes it. Under `Adaptive` it runs only what readers spilled,
//! plus completed batches while no reader is online to take them. Pin it away from realtime
//! cores and lower its priority with `DomainConfig::reclaimer_init` (the source's krcud ran at
//! the highest non-realtime priority on its own CPU).

use crate::backlog::{Backlog, Runner};
use crate::grace::GracePeriods;
use crate::policy::ReclaimPolicy;
use crate::ready::Ready;
use crate::sync::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the reclaimer looks for spilled callbacks under `Adaptive` (readers do not wake it).
const SPILL_POLL: Duration = Duration::from_millis(1);

/// The reclaimer thread's loop: runs what is ready until `shutdown` is raised, checking a grace
/// period in flight every `poll`.
pub(crate) fn run(grace: &GracePeriods, backlog: &Backlog, shutdown: &AtomicBool, poll: Duration) {
    let offload = backlog.policy() == ReclaimPolicy::Offload;
    let mut ready = Ready::default();
    loop {
        let in_flight = {
            let mut queue = backlog.lock();
            let take_batches = offload || !grace.any_reader_online();
            backlog.take_ready(grace, &mut queue, &mut ready, take_batches)
        };
        if !ready.is_empty() {
            let outcome = backlog.run_ready(&mut ready, usize::MAX, u64::MAX);
            backlog.record(Runner::Reclaimer, outcome);
            continue;
        }
        if shutdown.load(Ordering::Acquire) {
            return;
        }
        if in_flight && offload {
            std::thread::sleep(poll);
            continue;
        }
        // Nothing to do: announce idleness, re-check, then park until `defer` wakes us.
        backlog.set_reclaimer_idle(true);
        let queued = backlog.lock().has_work(offload);
        if !queued && !shutdown.load(Ordering::Acquire) {
            std::thread::park_timeout(if offload { Duration::from_millis(100) } else { SPILL_POLL });
        }
        backlog.set_reclaimer_idle(false);
    }
}

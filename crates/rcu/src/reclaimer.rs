//! The reclaimer thread: runs callbacks so that readers do not have to.
//!
//! Under `Offload` it does all reclamation: it polls the grace period in flight every
//! `reclaimer_poll`, takes completed batches and runs them to the end (it is an ordinary
//! preemptible thread, so a long batch delays nobody with a higher priority); when nothing is
//! queued it parks until `defer` wakes it. Under `Adaptive` it runs only what readers spilled,
//! plus completed batches while no reader is online to take them. Pin it away from realtime
//! cores and lower its priority with `DomainConfig::reclaimer_init` (the source's krcud ran at
//! the highest non-realtime priority on its own CPU).

use crate::domain::{DomainConfig, Shared};
use crate::policy::ReclaimPolicy;
use crate::ready::Ready;
use crate::sync::{self, Arc, Ordering};
use std::time::Duration;

/// How often the reclaimer looks for spilled callbacks under `Adaptive` (readers do not wake it).
const SPILL_POLL: Duration = Duration::from_millis(1);

pub(crate) fn spawn(shared: Arc<Shared>, config: &DomainConfig) -> std::thread::JoinHandle<()> {
    let init = config.reclaimer_init.clone();
    let poll = config.reclaimer_poll;
    let thread_shared = Arc::clone(&shared);
    let handle = std::thread::Builder::new()
        .name("kairos-rcu-reclaim".into())
        .spawn(move || {
            if let Some(init) = init {
                init();
            }
            run(&thread_shared, poll);
        })
        .expect("spawning the reclaimer thread");
    let _ = shared.reclaimer.set(handle.thread().clone());
    handle
}

fn run(shared: &Shared, poll: Duration) {
    let offload = shared.policy == ReclaimPolicy::Offload;
    let mut ready = Ready::default();
    loop {
        let in_flight = {
            let mut queue = sync::lock(&shared.queue);
            let take_batches = offload || !shared.any_reader_online();
            shared.take_ready(&mut queue, &mut ready, take_batches)
        };
        if !ready.is_empty() {
            let outcome = shared.run_ready(&mut ready, usize::MAX, u64::MAX);
            shared.stats.reclaimer_longest_batch_ns.fetch_max(outcome.elapsed_ns, Ordering::Relaxed);
            continue;
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        if in_flight && offload {
            std::thread::sleep(poll);
            continue;
        }
        // Nothing to do: announce idleness, re-check, then park until `defer` wakes us.
        shared.reclaimer_idle.store(true, Ordering::SeqCst);
        let queued = {
            let queue = sync::lock(&shared.queue);
            !queue.spilled.is_empty() || (offload && !queue.sealed.is_empty())
        };
        if !queued && !shared.shutdown.load(Ordering::Acquire) {
            std::thread::park_timeout(if offload { Duration::from_millis(100) } else { SPILL_POLL });
        }
        shared.reclaimer_idle.store(false, Ordering::SeqCst);
    }
}

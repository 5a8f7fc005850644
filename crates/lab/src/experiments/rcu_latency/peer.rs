//! The `crossbeam-epoch` row: the same reader and storm through the epoch scheme most Rust code
//! uses. Its readers `pin()` per lookup, as crossbeam-based maps do; every 128th pin collects up to
//! 8 bags of 64 deferred destructors on whichever thread pinned, so the realtime reader frees
//! garbage it never retired. The longest `pin()` on the reader stands for its longest
//! reclamation call. The epoch calls go through `kairos_rcu::peer` (`EpochCell`, `defer_drop`),
//! where each use of raw epoch pointers is argued, so this row holds none.

use super::RcuLatencyConfig;
use super::run::{RowParts, finish_row, spawn_realtime};
use super::workload::{self, COUNTED_DROPS, Route};
use anyhow::Result;
use kairos_metrics::{Clock, TscClock};
use kairos_rcu::peer::{self, EpochCell};
use kairos_sys::thread::pin_current_thread;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(super) fn crossbeam_row(config: &RcuLatencyConfig, storm: usize) -> Result<RowParts> {
    let route = Arc::new(EpochCell::new(Route { next_hop: 0 }));
    let stop = Arc::new(AtomicBool::new(false));
    let longest_pin = Arc::new(AtomicU64::new(0));
    let peak_pending = Arc::new(AtomicU64::new(0));
    let drops_at_start = COUNTED_DROPS.load(Ordering::Relaxed);
    let started = Instant::now();

    let reads = config.reads_per_period;
    let (rt_route, rt_longest) = (Arc::clone(&route), Arc::clone(&longest_pin));
    let realtime = spawn_realtime(config, &stop, move || {
        let clock = TscClock::new();
        let mut sink = 0u64;
        let mut longest = 0u64;
        move || {
            for _ in 0..reads {
                let start = clock.now_ns();
                let guard = peer::pin();
                longest = longest.max(clock.now_ns() - start);
                sink = sink.wrapping_add(rt_route.read(&guard).next_hop);
            }
            std::hint::black_box(sink);
            rt_longest.fetch_max(longest, Ordering::Relaxed);
        }
    });

    let writer = (storm > 0).then(|| {
        let (route, stop, peak) = (Arc::clone(&route), Arc::clone(&stop), Arc::clone(&peak_pending));
        let (core, pause) = (config.housekeeping_core, config.period);
        std::thread::spawn(move || {
            let _ = pin_current_thread(core);
            let mut deferred = 0u64;
            let mut seed = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let nodes = workload::storm_nodes(storm, seed, true);
                seed += storm as u64;
                {
                    let guard = peer::pin();
                    for node in nodes {
                        peer::defer_drop(node, &guard);
                    }
                    route.replace(Route { next_hop: seed }, &guard);
                }
                deferred += storm as u64;
                let pending =
                    || deferred.saturating_sub(COUNTED_DROPS.load(Ordering::Relaxed) - drops_at_start);
                peak.fetch_max(pending(), Ordering::Relaxed);
                // Wait for the readers' pins to collect (up to 100 ms); a partly filled bag of
                // this thread (under 64 nodes) only moves on with the next storm.
                let deadline = Instant::now() + Duration::from_millis(100);
                while !stop.load(Ordering::Relaxed) && pending() > 64 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_micros(200));
                }
                std::thread::sleep(pause);
            }
        })
    });

    let (realtime, elapsed) = finish_row(config, &stop, realtime, writer, started)?;
    Ok(RowParts {
        realtime,
        elapsed,
        callbacks_run: COUNTED_DROPS.load(Ordering::Relaxed) - drops_at_start,
        peak_unreclaimed_bytes: peak_pending.load(Ordering::Relaxed)
            * std::mem::size_of::<workload::Node>() as u64,
        longest_reclaim_ns: longest_pin.load(Ordering::Relaxed),
        reclaimer_longest_batch_ns: 0,
        writer_longest_reclaim_ns: 0,
        longest_callback_ns: 0,
    })
}

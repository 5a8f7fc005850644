//! The objects and the writer of the storms, shared by the Kairos rows and the crossbeam row.
//!
//! A retired object is a 256-byte [`Node`] (the size of a small route or dentry); its destructor
//! touches it, as a real free does, and then spins for the configured extra work. Only the
//! crossbeam row's nodes count their drops (the domain counts its own callbacks).

use std::sync::atomic::{AtomicU64, Ordering};

/// Extra work per callback, in nanoseconds (set once per run).
pub static EXTRA_WORK_NS: AtomicU64 = AtomicU64::new(0);
/// Drops of counting nodes (crossbeam row).
pub static COUNTED_DROPS: AtomicU64 = AtomicU64::new(0);

/// The value readers look up each period.
#[derive(Debug)]
pub struct Route {
    /// Next hop of the route.
    pub next_hop: u64,
}

/// A retired object of 256 bytes.
#[derive(Debug)]
#[repr(C)]
pub struct Node {
    words: [u64; 31],
    counted: bool,
}

impl Node {
    /// A node; `counted` nodes add to [`COUNTED_DROPS`] when dropped.
    pub fn new(seed: u64, counted: bool) -> Self {
        Self { words: [seed; 31], counted }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Touch the object as a destructor does before free.
        std::hint::black_box(&mut self.words)[0] = 0;
        let extra = EXTRA_WORK_NS.load(Ordering::Relaxed);
        if extra > 0 {
            let end = kairos_sys::clock::monotonic_ns() + extra;
            while kairos_sys::clock::monotonic_ns() < end {
                std::hint::spin_loop();
            }
        }
        if self.counted {
            COUNTED_DROPS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `n` freshly allocated nodes.
pub fn storm_nodes(n: usize, seed: u64, counted: bool) -> Vec<Box<Node>> {
    (0..n).map(|i| Box::new(Node::new(seed + i as u64, counted))).collect()
}

/// Nanoseconds per callback (allocation excluded): median and 99.9th percentile of freeing
/// 20,000 nodes one at a time on this thread, for the "budget plus one callback" bound.
pub fn calibrate_callback_ns() -> (u64, u64) {
    let mut recorder = kairos_metrics::LatencyRecorder::new();
    let clock = kairos_metrics::TscClock::new();
    use kairos_metrics::Clock;
    for round in 0..20 {
        let nodes = storm_nodes(1_000, round, false);
        for node in nodes {
            let start = clock.now_ns();
            drop(node);
            recorder.record(clock.now_ns() - start);
        }
    }
    (recorder.value_at_quantile(0.5), recorder.value_at_quantile(0.999))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_256_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 256);
    }

    #[test]
    fn counted_nodes_count_their_drops() {
        let before = COUNTED_DROPS.load(Ordering::Relaxed);
        drop(storm_nodes(10, 0, true));
        drop(storm_nodes(10, 0, false));
        assert!(COUNTED_DROPS.load(Ordering::Relaxed) - before >= 10);
    }
}

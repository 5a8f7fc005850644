//! The keep-latest-per-key ring: at most one queued entry per key, and a newer entry for a key
//! that is already queued replaces the queued one in place (keeping its place in line).
//!
//! This is the "latest-only slot per source" of the age-of-information literature: under
//! overload a FIFO ring makes every update wait behind older updates of the same source, while
//! this ring delivers each key's freshest value after at most one round over the other keys.
//!
//! Mechanism: a table of one atomic slot per key (`EMPTY` or a value) and a FIFO ring of keys
//! (the order keys became non-empty). A producer swaps the value into the key's slot; if the
//! slot was empty it also queues the key, else it got the replaced value back. The consumer pops
//! a key and swaps the slot empty. Each empty-to-full swap is followed by exactly one queued key
//! and each queued key by exactly one full-to-empty swap, so the consumer always finds a value
//! and every value leaves exactly once (dequeued, replaced or refused).

use std::sync::Arc;

use crate::core::{Core, Counters};
use crate::policy::{Admitted, RingError, RingStats, check_capacity};
use crate::sync::{AtomicU64, Ordering};

const EMPTY: u64 = u64::MAX;

/// Builds a keep-latest ring for keys `0..keys` holding up to `capacity` distinct keys at once.
/// With `capacity >= keys` it never refuses an entry. The producer may be cloned for several
/// producer threads (the key queue is reserved with a CAS either way).
pub fn keyed(capacity: usize, keys: usize) -> Result<(KeyedProducer, KeyedConsumer), RingError> {
    check_capacity(capacity)?;
    if keys == 0 {
        return Err(RingError::NoKeys);
    }
    let shared = Arc::new(Shared {
        latest: (0..keys).map(|_| AtomicU64::new(EMPTY)).collect(),
        order: Core::new(capacity, false),
    });
    Ok((
        KeyedProducer { shared: Arc::clone(&shared), fresh: Vec::with_capacity(64) },
        KeyedConsumer { shared, keys: vec![0; 64] },
    ))
}

#[derive(Debug)]
struct Shared {
    latest: Box<[AtomicU64]>,
    /// Keys in the order they became non-empty. Counters of the whole ring live here too.
    order: Core<u32>,
}

/// A producer of a keyed ring; entries are `(key, value)` pairs of `u32`s.
#[derive(Debug, Clone)]
pub struct KeyedProducer {
    shared: Arc<Shared>,
    /// Keys this burst made non-empty, queued together at the end of the burst.
    fresh: Vec<(u32, u32)>,
}

/// The consumer of a keyed ring.
#[derive(Debug)]
pub struct KeyedConsumer {
    shared: Arc<Shared>,
    keys: Vec<u32>,
}

impl KeyedProducer {
    /// Offers a burst of `(key, value)` entries. Every entry is taken except those whose key is
    /// out of range or that would need more distinct queued keys than the capacity; those, and
    /// the queued values that newer ones replaced, are appended to `evicted` (the caller owns
    /// them). `taken` counts the entries now in the ring or that replaced a queued one.
    pub fn enqueue_burst(&mut self, offered: &[(u32, u32)], evicted: &mut Vec<u32>) -> Admitted {
        let before = evicted.len();
        let shared = &*self.shared;
        let fresh = &mut self.fresh;
        let counters = &shared.order.counters;
        Counters::add(&counters.offered, offered.len());
        let mut taken = 0;
        for chunk in offered.chunks(64) {
            fresh.clear();
            for &(key, value) in chunk {
                let Some(slot) = shared.latest.get(key as usize) else {
                    evicted.push(value);
                    Counters::add(&counters.invalid_key, 1);
                    continue;
                };
                taken += 1;
                let old = slot.swap(u64::from(value), Ordering::AcqRel);
                if old == EMPTY {
                    fresh.push((key, value));
                } else {
                    evicted.push(old as u32);
                    Counters::add(&counters.replaced, 1);
                }
            }
            let queued = queue_keys(&shared.order, fresh);
            // Keys that did not fit: take their values back out (no consumer can reach a key
            // that is not queued) and refuse them.
            for &(key, _) in &fresh[queued..] {
                let value = shared.latest[key as usize].swap(EMPTY, Ordering::AcqRel);
                debug_assert_ne!(value, EMPTY);
                evicted.push(value as u32);
                taken -= 1;
            }
            Counters::add(&counters.dropped_newest, fresh.len() - queued);
        }
        Admitted { taken, evicted: evicted.len() - before }
    }

    /// The ring's counters (shared by every handle; `len` counts distinct queued keys).
    pub fn stats(&self) -> RingStats {
        self.shared.order.stats()
    }
}

impl KeyedConsumer {
    /// Moves up to `out.len()` `(key, latest value)` entries into `out`, in the order the keys
    /// became non-empty; returns how many.
    pub fn dequeue_burst(&mut self, out: &mut [(u32, u32)]) -> usize {
        let mut done = 0;
        for chunk in out.chunks_mut(self.keys.len()) {
            let n = self.shared.order.dequeue(&mut self.keys[..chunk.len()]);
            for (slot, &key) in chunk.iter_mut().zip(&self.keys[..n]) {
                let value = self.shared.latest[key as usize].swap(EMPTY, Ordering::AcqRel);
                debug_assert_ne!(value, EMPTY, "a queued key always has a value");
                *slot = (key, value as u32);
            }
            done += n;
            if n < chunk.len() {
                break;
            }
        }
        done
    }

    /// Distinct keys queued now (a snapshot).
    pub fn len(&self) -> usize {
        self.shared.order.len()
    }

    /// Whether no key is queued now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ring's counters (shared by every handle; `len` counts distinct queued keys).
    pub fn stats(&self) -> RingStats {
        self.shared.order.stats()
    }
}

/// Queues the keys of `fresh` (at most 64) in order; returns how many fitted.
fn queue_keys(order: &Core<u32>, fresh: &[(u32, u32)]) -> usize {
    let mut keys = [0u32; 64];
    for (k, &(key, _)) in keys.iter_mut().zip(fresh) {
        *k = key;
    }
    let keys = &keys[..fresh.len()];
    let (first, n) = order.reserve_shared(keys.len());
    if n > 0 {
        order.write(first, &keys[..n]);
    }
    n
}

//! Calisto's flow table, as its paper describes it: a flow is given a worker the first time it
//! is seen (round-robin over the active workers) and keeps it while that worker is active.
//!
//! The public code differs (its table only picks the core to wake when no thread is active,
//! its lookup returns a slot rather than the stored core, and it never evicts, logging a failed
//! insert on every new flow once 500 entries are in); this is the mechanism done right, with
//! the bounds the public one lacks:
//!
//! - **Capacity**: an open-addressing table of `capacity` entries (a power of two), each the
//!   flow's hash, its worker and when it was last seen (ms), 16 bytes; memory is fixed at
//!   creation.
//! - **Idle eviction**: an entry not seen for [`IDLE_MS`] may be taken by a new flow on its
//!   probe path. Entries are replaced in place, never emptied, so lookups need no tombstones.
//! - **When full**: a new flow whose [`PROBE`] slots are all live is not stored and goes to
//!   `active[hash % n]` (Shenango's rule), counted in [`Calisto::overflows`]; it is tried
//!   again at its next packet.
//! - **A parked worker**: its flows are given a new worker (round-robin) at their next packet.
//!
//! Work per packet: at most [`PROBE`] entries read, one written.

use crate::policy::{Steer, WorkerId, mix};

/// The capacity [`crate::PolicyKind::build`] gives: 2^20 entries (16 MiB), above the source's
/// 700,000 flows.
pub const DEFAULT_CAPACITY: usize = 1 << 20;
/// Slots probed for a flow, from its home slot on, before it is treated as not storable: the
/// bound on a packet's work.
pub const PROBE: usize = 16;
/// An entry unseen for this long may be taken by a new flow, ms (of the `now_ns` the packets
/// bring).
pub const IDLE_MS: u32 = 1_000;

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// The flow's mixed hash, never 0 (0: an empty slot).
    key: u64,
    worker: WorkerId,
    last_seen_ms: u32,
}

/// The flow-table policy; see the module doc.
#[derive(Debug, Clone)]
pub struct Calisto {
    table: Vec<Entry>,
    mask: usize,
    active: Vec<WorkerId>,
    /// Whether each worker is active, by number, for the check on every hit.
    is_active: Vec<bool>,
    next: usize,
    overflows: u64,
    evictions: u64,
    stored: usize,
}

impl Calisto {
    /// A table of `capacity` entries (rounded up to a power of two, at least [`PROBE`]), no
    /// worker active; its memory, 16 bytes an entry, is allocated here.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(PROBE).next_power_of_two();
        Self {
            table: vec![Entry::default(); capacity],
            mask: capacity - 1,
            active: Vec::new(),
            is_active: vec![false; crate::MAX_WORKERS],
            next: 0,
            overflows: 0,
            evictions: 0,
            stored: 0,
        }
    }

    /// Packets of new flows that found their probe path full of live entries and went by
    /// `hash % n` instead (every such packet counts, as the flow is tried again at its next).
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    /// Idle entries (unseen for [`IDLE_MS`]) replaced by new flows.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Entries in use, each a flow stored (an eviction reuses an entry in place, so this never
    /// falls, and it is at most the capacity).
    pub fn stored(&self) -> usize {
        self.stored
    }

    /// The table's memory, bytes: the capacity times 16.
    pub fn memory_bytes(&self) -> usize {
        self.table.len() * std::mem::size_of::<Entry>()
    }

    fn round_robin(&mut self) -> WorkerId {
        let w = self.active[self.next % self.active.len()];
        self.next = self.next.wrapping_add(1);
        w
    }
}

impl Steer for Calisto {
    fn name(&self) -> &'static str {
        "calisto"
    }

    fn pick(&mut self, hash: u64, now_ns: u64) -> Option<WorkerId> {
        if self.active.is_empty() {
            return None;
        }
        let now_ms = (now_ns / 1_000_000) as u32;
        let key = mix(hash) | 1;
        let home = (key >> 20) as usize & self.mask;
        let mut reusable = None;
        for i in 0..PROBE {
            let slot = (home + i) & self.mask;
            let e = self.table[slot];
            if e.key == key {
                let worker = if self.is_active[e.worker as usize] { e.worker } else { self.round_robin() };
                self.table[slot] = Entry { key, worker, last_seen_ms: now_ms };
                return Some(worker);
            }
            if e.key == 0 {
                // The end of the probe path: the flow is new.
                let worker = self.round_robin();
                let (slot, evicted) = reusable.map_or((slot, false), |s| (s, true));
                self.evictions += u64::from(evicted);
                self.stored += usize::from(!evicted);
                self.table[slot] = Entry { key, worker, last_seen_ms: now_ms };
                return Some(worker);
            }
            if reusable.is_none() && now_ms.wrapping_sub(e.last_seen_ms) >= IDLE_MS {
                reusable = Some(slot);
            }
        }
        // Not on its path: new, and the path is full of other flows.
        if let Some(slot) = reusable {
            let worker = self.round_robin();
            self.evictions += 1;
            self.table[slot] = Entry { key, worker, last_seen_ms: now_ms };
            return Some(worker);
        }
        self.overflows += 1;
        Some(self.active[(hash % self.active.len() as u64) as usize])
    }

    fn peek(&self, hash: u64) -> Option<WorkerId> {
        if self.active.is_empty() {
            return None;
        }
        let key = mix(hash) | 1;
        let home = (key >> 20) as usize & self.mask;
        let next_new = self.active[self.next % self.active.len()];
        for i in 0..PROBE {
            let e = self.table[(home + i) & self.mask];
            if e.key == key {
                // Stored: its worker, or the next in turn if that worker parked.
                return Some(if self.is_active[e.worker as usize] { e.worker } else { next_new });
            }
            if e.key == 0 {
                // New, with room on its path: the next in turn.
                return Some(next_new);
            }
        }
        // Its path is full of other flows: `pick`'s overflow answer (entries gone idle, which
        // `pick` would reuse, need a time this call does not have).
        Some(self.active[(hash % self.active.len() as u64) as usize])
    }

    fn join(&mut self, worker: WorkerId) {
        if !self.is_active[worker as usize] {
            self.is_active[worker as usize] = true;
            self.active.push(worker);
        }
    }

    fn leave(&mut self, worker: WorkerId) {
        if let Some(i) = self.active.iter().position(|&w| w == worker) {
            self.is_active[worker as usize] = false;
            self.active.remove(i);
        }
    }

    fn active(&self) -> &[WorkerId] {
        &self.active
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_are_dealt_round_robin_on_first_sight_and_keep_their_worker() {
        let mut p = Calisto::new(1024);
        for w in 0..3 {
            p.join(w);
        }
        let first: Vec<_> = (0..6u64).map(|f| p.pick(f * 7_919, 0).unwrap()).collect();
        assert_eq!(first, [0, 1, 2, 0, 1, 2]);
        for (f, &w) in first.iter().enumerate() {
            assert_eq!(p.pick(f as u64 * 7_919, 5_000_000), Some(w));
        }
        // A new worker takes only new flows.
        p.join(3);
        assert_eq!(p.pick(2 * 7_919, 0), Some(2));
        // A parked worker's flows find a new home at their next packet, and keep it.
        p.leave(1);
        let moved = p.pick(7_919, 0).unwrap();
        assert_ne!(moved, 1);
        assert_eq!(p.pick(7_919, 0), Some(moved));
    }

    #[test]
    fn a_full_table_falls_back_to_hash_mod_and_idle_flows_give_way() {
        let mut p = Calisto::new(PROBE);
        p.join(0);
        p.join(1);
        for f in 0..PROBE as u64 {
            p.pick(f, 0);
        }
        assert_eq!(p.stored(), PROBE);
        // Where the next new flow would go is worker 0; an overflowing flow goes by its hash.
        assert_eq!(p.peek(1_001), Some((1_001 % 2) as WorkerId), "peek says what pick will");
        assert_eq!(p.pick(1_000, 0), Some((1_000 % 2) as WorkerId));
        assert_eq!(p.overflows(), 1);
        // A second later every entry is idle: the new flow takes one.
        p.pick(1_000, u64::from(IDLE_MS) * 1_000_000);
        assert_eq!(p.evictions(), 1);
        assert_eq!(p.memory_bytes(), PROBE * 16);
    }
}

//! Kairos's steering: a software indirection table of buckets, changed only where it must be.
//!
//! # Mechanism
//!
//! A flow's mixed hash picks one of `B` buckets (4096 by default: 8 KiB of `u16`, in L1/L2);
//! the bucket names its worker. The table changes in three ways, each reported as
//! [`BucketMove`]s for a dispatcher to hand over without reordering:
//!
//! - **join** of worker `w` to `n` active: `w` takes `floor(B/(n+1))` buckets, each from the
//!   worker that has the most at that moment, so every worker ends within one bucket of an even
//!   share and only the buckets `w` takes move: the ideal `1/(n+1)` of the flows.
//! - **leave** of `w`: its buckets are dealt one by one to the worker that has the fewest; no
//!   other bucket moves: the ideal `1/n`.
//! - **rebalance** (load-aware, as RSS++): every packet counts against its bucket; once an
//!   interval, the counts give each worker's load, and buckets move greedily from the most
//!   loaded worker to the least loaded while that lowers the maximum and the maximum is more
//!   than [`Buckets::tolerance`] above the mean, at most [`Buckets::max_moves`] per interval;
//!   then the counts restart. A bucket is moved only if its load fits the gap (it leaves the
//!   donor no lighter, and the receiver no heavier, than the mean was between them), so moves
//!   never oscillate.
//!
//! - **idle steering** (between a flow's bursts, as flowlet switching does): when a packet
//!   arrives for a bucket none of whose packets is queued or in service, and the dispatcher
//!   found a worker with a shorter queue than the bucket's own, and a short one (see
//!   [`crate::dispatcher::IDLE_TARGET_MAX_QUEUED`]), the bucket moves there
//!   ([`Steer::steer_idle`]): nothing of it is in flight, so nothing can be reordered or held,
//!   and the queues stay short at high load where a static mapping lets them grow.
//!
//! Work per packet: one multiply, one table read, one counter add.

use crate::policy::{Steer, WorkerId, mix};

/// Buckets in the table [`crate::PolicyKind::build`] makes: 4096 (8 KiB of worker numbers),
/// enough that one bucket is a small share of a worker's load at a thousand workers.
pub const DEFAULT_BUCKETS: usize = 4096;

/// A bucket handed from one worker to another (`from` is `None` for a bucket that had no active
/// worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketMove {
    /// The bucket's index in the table, `0..len()`.
    pub bucket: u32,
    /// The active worker that had it, or `None` (the first join, which fills the table).
    pub from: Option<WorkerId>,
    /// The worker that has it now, active when the move is made.
    pub to: WorkerId,
}

/// The bucket-table policy; see the module doc.
#[derive(Debug, Clone)]
pub struct Buckets {
    table: Vec<WorkerId>,
    shift: u32,
    counts: Vec<u32>,
    active: Vec<WorkerId>,
    /// Whether each worker is active, by number (`active` as a set, for O(1) questions).
    is_active: Vec<bool>,
    /// Buckets per worker, by number.
    owned: Vec<u32>,
    moves: Vec<BucketMove>,
    recording: bool,
    tolerance: f64,
    max_moves: usize,
    moved_total: u64,
}

impl Buckets {
    /// A table of `buckets` buckets (rounded up to a power of two, at least 2), no worker
    /// active, moves not recorded, the default tolerance and move limit.
    pub fn new(buckets: usize) -> Self {
        let buckets = buckets.max(2).next_power_of_two();
        Self {
            table: vec![0; buckets],
            shift: 64 - buckets.trailing_zeros(),
            counts: vec![0; buckets],
            active: Vec::new(),
            is_active: vec![false; crate::MAX_WORKERS],
            owned: vec![0; crate::MAX_WORKERS],
            moves: Vec::new(),
            recording: false,
            tolerance: 0.02,
            max_moves: buckets / 20,
            moved_total: 0,
        }
    }

    /// How far above the mean load the most loaded worker may be before a rebalance moves
    /// buckets, a fraction of the mean (default 0.02, RSS++'s threshold: 2% above the mean).
    pub fn tolerance(&self) -> f64 {
        self.tolerance
    }

    /// Sets [`Buckets::tolerance`], a fraction of the mean load (0.1: 10% above it); a
    /// negative value counts as 0 (buckets move whenever the busiest worker is above the mean,
    /// within [`Buckets::max_moves`]).
    pub fn set_tolerance(&mut self, tolerance: f64) {
        self.tolerance = tolerance.max(0.0);
    }

    /// The most buckets one rebalance moves (default: 5% of the table, rounded down); joins,
    /// leaves and idle steering are not limited by it.
    pub fn max_moves(&self) -> usize {
        self.max_moves
    }

    /// Sets [`Buckets::max_moves`]; 0 turns the load-aware rebalancing off.
    pub fn set_max_moves(&mut self, moves: usize) {
        self.max_moves = moves;
    }

    /// The bucket of the flow whose hash is `hash`, `0..len()`: the top bits of its
    /// [`mix`]ed hash.
    #[inline]
    pub fn bucket(&self, hash: u64) -> u32 {
        (mix(hash) >> self.shift) as u32
    }

    /// The worker of `bucket` (`0..len()`, else a panic), active or not: it names a parked
    /// worker only while no worker is active (and worker 0 before the first join).
    pub fn owner(&self, bucket: u32) -> WorkerId {
        self.table[bucket as usize]
    }

    /// Buckets in the table: a power of two, at least 2.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the table is empty (never: it has at least two buckets).
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Starts (or stops) keeping each move for [`Buckets::take_moves`]. Off by default: a
    /// dispatcher needs no list (its hand-off works from each group's tail), and a list no one
    /// takes would grow with every change for as long as the policy runs.
    pub fn record_moves(&mut self, on: bool) {
        self.recording = on;
        if !on {
            self.moves = Vec::new();
        }
    }

    /// The moves made since the last call, in order (none unless [`Buckets::record_moves`]).
    pub fn take_moves(&mut self) -> Vec<BucketMove> {
        std::mem::take(&mut self.moves)
    }

    fn record(&mut self, m: BucketMove) {
        if self.recording {
            self.moves.push(m);
        }
    }

    /// Bucket moves since creation, by joins, leaves, rebalances and idle steering (the first
    /// join, which fills the table, is not counted).
    pub fn moved_total(&self) -> u64 {
        self.moved_total
    }

    /// Each active worker's packets counted since the last rebalance, as `(worker, packets)`
    /// in the active order: the sum of its buckets' counts.
    pub fn loads(&self) -> Vec<(WorkerId, u64)> {
        let mut load = vec![0u64; crate::MAX_WORKERS];
        for (b, &c) in self.counts.iter().enumerate() {
            load[self.table[b] as usize] += u64::from(c);
        }
        self.active.iter().map(|&w| (w, load[w as usize])).collect()
    }

    fn give(&mut self, bucket: usize, to: WorkerId) {
        let from = self.table[bucket];
        let was_active = self.is_active[from as usize] && self.owned[from as usize] > 0;
        if was_active {
            self.owned[from as usize] -= 1;
        }
        self.table[bucket] = to;
        self.owned[to as usize] += 1;
        self.record(BucketMove { bucket: bucket as u32, from: was_active.then_some(from), to });
        self.moved_total += 1;
    }
}

impl Steer for Buckets {
    fn name(&self) -> &'static str {
        "kairos"
    }

    #[inline]
    fn pick(&mut self, hash: u64, _now_ns: u64) -> Option<WorkerId> {
        if self.active.is_empty() {
            return None;
        }
        let b = self.bucket(hash) as usize;
        self.counts[b] = self.counts[b].wrapping_add(1);
        Some(self.table[b])
    }

    fn peek(&self, hash: u64) -> Option<WorkerId> {
        (!self.active.is_empty()).then(|| self.table[self.bucket(hash) as usize])
    }

    fn join(&mut self, worker: WorkerId) {
        if self.is_active[worker as usize] {
            return;
        }
        self.active.push(worker);
        self.is_active[worker as usize] = true;
        self.owned[worker as usize] = 0;
        if self.active.len() == 1 {
            for b in 0..self.table.len() {
                self.table[b] = worker;
                self.record(BucketMove { bucket: b as u32, from: None, to: worker });
            }
            self.owned[worker as usize] = self.table.len() as u32;
            return;
        }
        let share = self.table.len() / self.active.len();
        // Take one bucket at a time from the worker that has the most; a pass over the table
        // takes, from each donor, buckets in table order.
        let mut wanted: Vec<u32> = vec![0; crate::MAX_WORKERS];
        let mut owned: Vec<(u32, WorkerId)> =
            self.active.iter().filter(|&&w| w != worker).map(|&w| (self.owned[w as usize], w)).collect();
        for _ in 0..share {
            let richest = owned.iter_mut().max_by_key(|(n, w)| (*n, std::cmp::Reverse(*w))).expect("a donor");
            richest.0 -= 1;
            wanted[richest.1 as usize] += 1;
        }
        for b in 0..self.table.len() {
            let from = self.table[b] as usize;
            if wanted[from] > 0 {
                wanted[from] -= 1;
                self.give(b, worker);
            }
        }
    }

    fn leave(&mut self, worker: WorkerId) {
        let Some(i) = self.active.iter().position(|&w| w == worker) else { return };
        self.active.remove(i);
        self.is_active[worker as usize] = false;
        if self.active.is_empty() {
            self.owned[worker as usize] = 0;
            return;
        }
        for b in 0..self.table.len() {
            if self.table[b] == worker {
                let poorest = *self
                    .active
                    .iter()
                    .min_by_key(|&&w| (self.owned[w as usize], w))
                    .expect("an active worker");
                self.table[b] = poorest;
                self.owned[poorest as usize] += 1;
                self.record(BucketMove { bucket: b as u32, from: Some(worker), to: poorest });
                self.moved_total += 1;
            }
        }
        self.owned[worker as usize] = 0;
    }

    fn active(&self) -> &[WorkerId] {
        &self.active
    }

    /// Moves the flow's bucket to `worker`: the dispatcher offers one only when nothing of the
    /// bucket's group is in flight, so the move costs no hold and reorders nothing.
    fn steer_idle(&mut self, hash: u64, worker: WorkerId) -> bool {
        if !self.is_active[worker as usize] {
            return false;
        }
        let b = self.bucket(hash) as usize;
        if self.table[b] != worker {
            self.give(b, worker);
        }
        true
    }

    fn rebalance(&mut self, _now_ns: u64) {
        if self.active.len() < 2 {
            self.counts.iter_mut().for_each(|c| *c = 0);
            return;
        }
        let mut load = vec![0u64; crate::MAX_WORKERS];
        for (b, &c) in self.counts.iter().enumerate() {
            load[self.table[b] as usize] += u64::from(c);
        }
        let total: u64 = self.active.iter().map(|&w| load[w as usize]).sum();
        let mean = total as f64 / self.active.len() as f64;
        let mut moved = 0;
        while moved < self.max_moves {
            let (&hot, &cold) = (
                self.active.iter().max_by_key(|&&w| load[w as usize]).expect("active"),
                self.active.iter().min_by_key(|&&w| load[w as usize]).expect("active"),
            );
            let (hot_load, cold_load) = (load[hot as usize], load[cold as usize]);
            if (hot_load as f64) <= mean * (1.0 + self.tolerance) || hot == cold {
                break;
            }
            // The largest bucket of the hot worker that fits half the gap: the donor stays
            // at least as heavy as the receiver becomes.
            let gap = (hot_load - cold_load) / 2;
            let best = (0..self.table.len())
                .filter(|&b| self.table[b] == hot && self.counts[b] > 0 && u64::from(self.counts[b]) <= gap)
                .max_by_key(|&b| self.counts[b]);
            let Some(b) = best else { break };
            let c = u64::from(self.counts[b]);
            load[hot as usize] -= c;
            load[cold as usize] += c;
            self.give(b, cold);
            moved += 1;
        }
        self.counts.iter_mut().for_each(|c| *c = 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned_counts(p: &Buckets) -> Vec<usize> {
        p.active().iter().map(|&w| p.table.iter().filter(|&&o| o == w).count()).collect()
    }

    #[test]
    fn joins_take_an_even_share_from_the_richest_and_leaves_deal_to_the_poorest() {
        let mut p = Buckets::new(64);
        p.record_moves(true);
        p.join(0);
        p.take_moves();
        p.join(1);
        assert_eq!(p.take_moves().len(), 32);
        p.join(2);
        assert_eq!(p.take_moves().len(), 21);
        assert_eq!(owned_counts(&p), [21, 22, 21]);
        p.leave(0);
        let moves = p.take_moves();
        assert_eq!(moves.len(), 21);
        assert!(moves.iter().all(|m| m.from == Some(0) && m.to != 0));
        assert_eq!(owned_counts(&p), [32, 32]);
        assert!(p.table.iter().all(|&w| w == 1 || w == 2));
    }

    #[test]
    fn rebalancing_moves_load_from_the_hottest_to_the_coldest_and_stops_within_tolerance() {
        let mut p = Buckets::new(256);
        p.record_moves(true);
        for w in 0..4 {
            p.join(w);
        }
        p.take_moves();
        // Skewed: the flows of worker 0's buckets send ten times as much.
        for f in 0..20_000u64 {
            let b = p.bucket(f);
            let reps = if p.owner(b) == 0 { 10 } else { 1 };
            for _ in 0..reps {
                p.pick(f, 0);
            }
        }
        let before = p.loads();
        let max_over_mean = |l: &[(WorkerId, u64)]| {
            let mean = l.iter().map(|x| x.1).sum::<u64>() as f64 / l.len() as f64;
            l.iter().map(|x| x.1).max().unwrap() as f64 / mean
        };
        assert!(max_over_mean(&before) > 2.0);
        // Replay the same counts, then rebalance: the moves bring it down.
        let counts = p.counts.clone();
        p.set_max_moves(1_000);
        p.rebalance(0);
        p.counts = counts;
        let after = p.loads();
        assert!(max_over_mean(&after) < 1.05, "{before:?} -> {after:?}");
        assert!(p.take_moves().iter().all(|m| m.from == Some(0)), "only the hot worker gives");
    }
}

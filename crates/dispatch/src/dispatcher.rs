//! The dispatcher's decision for each packet, with the hand-off that keeps a flow's packets in
//! order when its group changes worker.
//!
//! # Mechanism
//!
//! Flows fall into groups (4096 by default, by the same mixed-hash bits as
//! [`crate::Buckets`], so for the `kairos` policy a group is exactly a bucket). The dispatcher
//! counts the packets it has put on each worker's queue (`sent`), each worker counts the
//! packets it has finished (`done`, [`Workers::done`]), and each group remembers its last
//! packet's worker and that worker's `sent` count just after it: the group's *tail*. When the
//! policy sends a group to a new worker while the old one has not yet finished the tail
//! (`done < tail`: a packet of the group is still queued or in service there), the packet is
//! **held** at the dispatcher, as are the group's later packets; once the old worker's `done`
//! reaches the tail, they go to the group's worker in arrival order. This is Linux RFS's rule
//! (a flow moves only when the old CPU's queue head has passed the flow's last packet,
//! `last_qtail`) and RSS++'s hand-off (the new core buffers the moving bucket until the old one
//! has processed what it had), done at the dispatcher, so workers take no part but counting.
//!
//! With the hand-off off (`order: false`, the baselines as published) a moved group's packets
//! go to the new worker at once and may overtake those still queued at the old one.
//!
//! # Contract
//!
//! - No packet of a group is enqueued to a worker while another worker has an earlier packet
//!   of that group unfinished (hand-off on); a group's packets are enqueued in arrival order.
//! - Held packets are bounded by `hold_limit`; past it a packet is dropped and counted, never
//!   silently lost.
//! - `done` must be read with acquire ordering by [`Workers::done`] and published by the worker
//!   with release ordering after it has finished with the packet (and the flow's state), so the
//!   new worker's first packet of the group happens after the old worker's last.
//! - Work per packet: O(1) (a pick, a group check, an enqueue); [`Dispatcher::poll`] is linear
//!   in the groups holding packets.

use std::collections::VecDeque;

use crate::policy::{Steer, WorkerId, mix};

/// Groups a dispatcher is usually made with: as many as `kairos`'s buckets, so for that policy
/// a group is a bucket.
pub const DEFAULT_GROUPS: usize = crate::buckets::DEFAULT_BUCKETS;
/// Packets held at once, by default, before a packet that would be held is dropped (and
/// counted in [`DispatchStats::hold_full`]).
pub const DEFAULT_HOLD_LIMIT: usize = 65_536;
/// The most packets a worker may have queued (as last seen) for the idle steering to send it
/// a group. A short queue is a real gain; between two long ones the difference is mostly the
/// staleness of the counts (on real threads sharing a core, a descheduled worker's full ring),
/// and chasing it moves state for nothing.
pub const IDLE_TARGET_MAX_QUEUED: u64 = 4;

/// The workers' queues, as the dispatcher sees them.
pub trait Workers<P> {
    /// Puts `packet` on `worker`'s queue; gives it back when the queue is full (the dispatcher
    /// then drops and counts it). `worker` is one the policy named, `0..MAX_WORKERS`.
    fn send(&mut self, worker: WorkerId, packet: P) -> Result<(), P>;
    /// Packets `worker` has finished, ever (acquire: what the worker did before counting is
    /// visible to whoever reads the count).
    fn done(&self, worker: WorkerId) -> u64;
}

/// What the dispatcher counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DispatchStats {
    /// Packets given to [`Dispatcher::dispatch`].
    pub packets: u64,
    /// Packets put on a worker's queue, at once or after being held.
    pub enqueued: u64,
    /// Packets held for a hand-off at some point (each counted once, however long it waited).
    pub held: u64,
    /// Hand-offs: a group's packets sent to a new worker after waiting for the old.
    pub handoffs: u64,
    /// Dropped: no worker was active.
    pub no_worker: u64,
    /// Dropped: the worker's queue was full.
    pub queue_full: u64,
    /// Dropped: too many packets were held.
    pub hold_full: u64,
    /// The most packets held at once, since the dispatcher was made.
    pub max_held: u64,
    /// Idle groups moved to a shorter queue (policies that steer idle flows).
    pub idle_moves: u64,
}

#[derive(Debug, Clone, Copy)]
struct Tail {
    worker: WorkerId,
    sent: u64,
}

/// Steering plus the order-keeping hand-off; see the module doc.
#[derive(Debug)]
pub struct Dispatcher<S, P> {
    policy: S,
    order: bool,
    shift: u32,
    tails: Vec<Option<Tail>>,
    held: Vec<VecDeque<(u64, P)>>,
    holding: Vec<u32>,
    held_now: usize,
    hold_limit: usize,
    sent: Vec<u64>,
    /// Each worker's `done` as last read by [`Dispatcher::poll`]: never above the true count.
    done_seen: Vec<u64>,
    /// Offer idle groups a shorter queue ([`Steer::steer_idle`]).
    idle_steering: bool,
    draws: u64,
    stats: DispatchStats,
}

impl<S: Steer, P> Dispatcher<S, P> {
    /// A dispatcher over `policy`, keeping order across moves (the hand-off) when `order`, with
    /// `groups` groups (rounded up to a power of two, at least 2), the default hold limit and
    /// idle steering on.
    pub fn new(policy: S, order: bool, groups: usize) -> Self {
        let groups = groups.max(2).next_power_of_two();
        Self {
            policy,
            order,
            shift: 64 - groups.trailing_zeros(),
            tails: vec![None; groups],
            held: (0..groups).map(|_| VecDeque::new()).collect(),
            holding: Vec::new(),
            held_now: 0,
            hold_limit: DEFAULT_HOLD_LIMIT,
            sent: vec![0; crate::MAX_WORKERS],
            done_seen: vec![0; crate::MAX_WORKERS],
            idle_steering: true,
            draws: 0x9E37_79B9_7F4A_7C15,
            stats: DispatchStats::default(),
        }
    }

    /// Turns the offer of shorter queues to idle groups on (the default) or off. Policies that
    /// do not steer idle flows decline it either way.
    pub fn set_idle_steering(&mut self, on: bool) {
        self.idle_steering = on;
    }

    /// Sets how many packets may be held at once (default [`DEFAULT_HOLD_LIMIT`]); a packet
    /// that would be held past it is dropped and counted. Packets already held stay held.
    pub fn set_hold_limit(&mut self, limit: usize) {
        self.hold_limit = limit;
    }

    /// The steering policy, to read (its active workers, its own counters).
    pub fn policy(&self) -> &S {
        &self.policy
    }

    /// The steering policy, to add or park workers and rebalance; the dispatcher follows a
    /// change from the next packet on, holding a moved group's packets when `order` asks for
    /// the hand-off.
    pub fn policy_mut(&mut self) -> &mut S {
        &mut self.policy
    }

    /// What the dispatcher has counted so far (a copy).
    pub fn stats(&self) -> DispatchStats {
        self.stats
    }

    /// Packets held now, waiting for a hand-off: 0 once every old worker has finished its
    /// groups' tails and [`Dispatcher::poll`] has sent what waited.
    pub fn held_now(&self) -> usize {
        self.held_now
    }

    /// The group of the flow whose hash is `hash`, `0..groups`: the top bits of its mixed hash
    /// ([`mix`]), as [`crate::Buckets::bucket`] takes them (with as many groups as buckets, a
    /// group is a bucket).
    #[inline]
    pub fn group(&self, hash: u64) -> u32 {
        (mix(hash) >> self.shift) as u32
    }

    /// Steers one packet of the flow whose hash is `hash`, arriving at `now_ns` (ns on the
    /// caller's clock, non-decreasing): it goes on its worker's queue, is held behind its
    /// group's hand-off, or is dropped and counted (no active worker, a full queue, the hold
    /// limit).
    pub fn dispatch(&mut self, hash: u64, packet: P, now_ns: u64, workers: &mut impl Workers<P>) {
        self.stats.packets += 1;
        let g = self.group(hash);
        if self.order && !self.held[g as usize].is_empty() {
            // Behind the group's held packets; picked all the same, so the policy counts
            // every arrival once.
            if self.policy.pick(hash, now_ns).is_some() {
                self.hold(g, hash, packet);
            } else {
                self.stats.no_worker += 1;
            }
            return;
        }
        if let Err((hash, packet)) = self.route(g, hash, packet, Some(now_ns), workers) {
            self.hold(g, hash, packet);
        }
    }

    /// Sends what waited for a hand-off whose old worker has now finished its tail, and reads
    /// the active workers' `done` counts for the idle steering of the packets until the next
    /// poll (one read per worker per poll, not per packet).
    pub fn poll(&mut self, _now_ns: u64, workers: &mut impl Workers<P>) {
        if self.idle_steering {
            for &w in self.policy.active() {
                self.done_seen[w as usize] = workers.done(w);
            }
        }
        let mut i = 0;
        while i < self.holding.len() {
            let g = self.holding[i];
            while let Some((hash, packet)) = self.held[g as usize].pop_front() {
                self.held_now -= 1;
                if let Err(back) = self.route(g, hash, packet, None, workers) {
                    // Its old worker still has the tail: it waits, first in line.
                    self.held[g as usize].push_front(back);
                    self.held_now += 1;
                    break;
                }
            }
            if self.held[g as usize].is_empty() {
                self.holding.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Sends one packet of group `g` to its worker, or gives it back when it must wait for a
    /// hand-off (the caller holds it, or puts it back first in line). A packet that cannot be
    /// sent for another reason is dropped and counted. A packet arriving now is picked
    /// (`arriving` is its time); a held one, picked once already, is only peeked at, so it is
    /// counted once however long it waits.
    fn route(
        &mut self,
        g: u32,
        hash: u64,
        packet: P,
        arriving: Option<u64>,
        workers: &mut impl Workers<P>,
    ) -> Result<(), (u64, P)> {
        let worker = match arriving {
            Some(now_ns) => self.policy.pick(hash, now_ns),
            None => self.policy.peek(hash),
        };
        let Some(mut worker) = worker else {
            self.stats.no_worker += 1;
            return Ok(());
        };
        let tail = self.tails[g as usize];
        let before = worker;
        if self.idle_steering && arriving.is_some() {
            worker = self.steer_idle(hash, worker, tail);
        }
        // A move the idle steering made waits for nothing: it is not a hand-off.
        let moving = tail.is_some_and(|t| t.worker != worker) && worker == before;
        if self.order && tail.is_some_and(|t| t.worker != worker && workers.done(t.worker) < t.sent) {
            return Err((hash, packet));
        }
        match workers.send(worker, packet) {
            Ok(()) => {
                self.stats.enqueued += 1;
                self.stats.handoffs += u64::from(moving && self.order);
                let sent = &mut self.sent[worker as usize];
                *sent += 1;
                self.tails[g as usize] = Some(Tail { worker, sent: *sent });
            }
            Err(_) => self.stats.queue_full += 1,
        }
        Ok(())
    }

    /// The worker for an arriving packet of a group whose packets are all finished (as last
    /// seen), when the shorter of two workers drawn at random has a shorter queue than its own
    /// and at most [`IDLE_TARGET_MAX_QUEUED`], and the policy takes the move; else `worker`.
    /// Queues are the dispatcher's sent counts less the `done` counts [`Dispatcher::poll`]
    /// read, which can only overstate them.
    fn steer_idle(&mut self, hash: u64, worker: WorkerId, tail: Option<Tail>) -> WorkerId {
        if tail.is_some_and(|t| self.done_seen[t.worker as usize] < t.sent) {
            return worker;
        }
        let queued =
            |w: WorkerId| self.sent[w as usize] - self.done_seen[w as usize].min(self.sent[w as usize]);
        let here = queued(worker);
        if here == 0 {
            return worker;
        }
        self.draws ^= self.draws << 13;
        self.draws ^= self.draws >> 7;
        self.draws ^= self.draws << 17;
        let active = self.policy.active();
        let n = active.len() as u64;
        let (a, b) = (active[(self.draws % n) as usize], active[((self.draws >> 32) % n) as usize]);
        let other = if queued(a) <= queued(b) { a } else { b };
        if queued(other) < here.min(IDLE_TARGET_MAX_QUEUED + 1) && self.policy.steer_idle(hash, other) {
            self.stats.idle_moves += 1;
            return other;
        }
        worker
    }

    fn hold(&mut self, g: u32, hash: u64, packet: P) {
        if self.held_now >= self.hold_limit {
            self.stats.hold_full += 1;
            return;
        }
        let queue = &mut self.held[g as usize];
        if queue.is_empty() {
            self.holding.push(g);
        }
        queue.push_back((hash, packet));
        self.held_now += 1;
        self.stats.held += 1;
        self.stats.max_held = self.stats.max_held.max(self.held_now as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buckets, HashMod};

    /// Workers as plain queues; `finish(w, n)` completes `n` of worker `w`'s packets in order.
    #[derive(Default)]
    struct Queues {
        queues: Vec<VecDeque<(u64, u32)>>,
        done: Vec<u64>,
        finished: Vec<(u64, u32)>,
        capacity: usize,
    }

    impl Queues {
        fn new(workers: usize, capacity: usize) -> Self {
            Self {
                queues: vec![VecDeque::new(); workers],
                done: vec![0; workers],
                finished: Vec::new(),
                capacity,
            }
        }
        fn finish(&mut self, w: usize, n: usize) {
            for _ in 0..n {
                if let Some(p) = self.queues[w].pop_front() {
                    self.finished.push(p);
                    self.done[w] += 1;
                }
            }
        }
    }

    impl Workers<(u64, u32)> for Queues {
        fn send(&mut self, worker: WorkerId, packet: (u64, u32)) -> Result<(), (u64, u32)> {
            let q = &mut self.queues[worker as usize];
            if q.len() >= self.capacity {
                return Err(packet);
            }
            q.push_back(packet);
            Ok(())
        }
        fn done(&self, worker: WorkerId) -> u64 {
            self.done[worker as usize]
        }
    }

    /// Runs flows through a dispatcher while workers join and leave, finishing packets in a
    /// shuffled worker order; returns how many packets were finished before an earlier one of
    /// their flow.
    fn reordered(order: bool, policy: impl Steer) -> (u64, DispatchStats) {
        let mut d = Dispatcher::new(policy, order, 256);
        let mut q = Queues::new(4, 1 << 20);
        let mut seq = vec![0u32; 64];
        let mut x = 12345u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let flow = x % 64;
            d.dispatch(flow, (flow, seq[flow as usize]), step, &mut q);
            seq[flow as usize] += 1;
            match step % 1_000 {
                250 => d.policy_mut().join(3),
                750 => d.policy_mut().leave(3),
                _ => {}
            }
            q.finish((x >> 20) as usize % 4, 1);
            d.poll(step, &mut q);
        }
        for _ in 0..100 {
            for w in 0..4 {
                q.finish(w, 1_000);
            }
            d.poll(0, &mut q);
        }
        let mut next = vec![0u32; 64];
        let mut late = 0;
        for &(flow, s) in &q.finished {
            if s < next[flow as usize] {
                late += 1;
            }
            next[flow as usize] = next[flow as usize].max(s + 1);
        }
        assert_eq!(q.finished.len() as u64, d.stats().enqueued);
        (late, d.stats())
    }

    fn started<S: Steer>(mut p: S, n: u16) -> S {
        for w in 0..n {
            p.join(w);
        }
        p
    }

    #[test]
    fn with_the_hand_off_no_packet_overtakes_an_earlier_one_of_its_flow() {
        let (late, stats) = reordered(true, started(Buckets::new(256), 3));
        assert_eq!(late, 0, "{stats:?}");
        assert!(stats.handoffs > 0 && stats.held > 0, "moves happened and waited: {stats:?}");
        assert_eq!(stats.enqueued, stats.packets, "nothing dropped: {stats:?}");
        let (late, _) = reordered(true, started(HashMod::new(), 3));
        assert_eq!(late, 0);
    }

    #[test]
    fn without_it_moved_flows_are_reordered() {
        let (late, stats) = reordered(false, started(HashMod::new(), 3));
        assert!(late > 0, "{stats:?}");
        let (late, _) = reordered(false, started(Buckets::new(256), 3));
        assert!(late > 0);
    }

    #[test]
    fn an_idle_group_moves_to_a_shorter_queue_and_a_busy_one_stays() {
        let mut d = Dispatcher::new(started(Buckets::new(4), 2), true, 4);
        let mut q = Queues::new(2, 64);
        let owner = |d: &Dispatcher<Buckets, (u64, u32)>, h: u64| d.policy().peek(h).unwrap();
        // Two flows of different groups on the same worker.
        let a = (0..).find(|&h| d.group(h) == d.group(0) && owner(&d, h) == owner(&d, 0)).unwrap();
        let c = (1..).find(|&h| d.group(h) != d.group(a) && owner(&d, h) == owner(&d, a)).unwrap();
        let w = owner(&d, a);
        // Set up without steering (else `c`, idle at first, would leave `w` at once).
        d.set_idle_steering(false);
        d.dispatch(a, (a, 0), 0, &mut q);
        for s in 0..3 {
            d.dispatch(c, (c, s), 0, &mut q);
        }
        q.finish(w as usize, 1);
        d.set_idle_steering(true);
        d.poll(0, &mut q);
        // `c` has three packets queued: its next one stays behind them.
        d.dispatch(c, (c, 3), 0, &mut q);
        assert_eq!(q.queues[w as usize].len(), 4);
        // `a` has none in flight and its worker has four queued; the other has none. Drawn
        // pairs may both land on `w`, so offer a few packets: the first move is the last one.
        let mut s = 1;
        while d.stats().idle_moves == 0 && s < 64 {
            d.dispatch(a, (a, s), 0, &mut q);
            s += 1;
        }
        assert_eq!(d.stats().idle_moves, 1, "{:?}", d.stats());
        assert_eq!(q.queues[1 - w as usize].back(), Some(&(a, s - 1)), "moved to the idle worker");
        assert_ne!(owner(&d, a), w, "the bucket moved with it");
        assert_eq!(d.stats().held, 0, "nothing of an idle group waits");
        let mut off = Dispatcher::new(started(Buckets::new(4), 2), true, 4);
        off.set_idle_steering(false);
        let mut q = Queues::new(2, 64);
        for s in 0..100 {
            off.dispatch(a, (a, s), 0, &mut q);
            q.finish(w as usize, 1);
            off.dispatch(c, (c, s), 0, &mut q);
            off.poll(0, &mut q);
        }
        assert_eq!(off.stats().idle_moves, 0);
    }

    #[test]
    fn held_packets_past_the_limit_are_dropped_and_counted() {
        let mut d = Dispatcher::new(started(Buckets::new(2), 1), true, 2);
        let mut q = Queues::new(2, 16);
        d.set_hold_limit(3);
        d.dispatch(7, (7, 0), 0, &mut q);
        d.policy_mut().join(1);
        d.policy_mut().leave(0);
        for s in 1..6 {
            d.dispatch(7, (7, s), 0, &mut q);
        }
        assert_eq!(d.held_now(), 3);
        assert_eq!(d.stats().hold_full, 2);
        // Polled while the old worker still has the tail: held packets are looked at, not
        // counted again (the load-aware policy would see phantom load).
        for _ in 0..10 {
            d.poll(0, &mut q);
        }
        assert_eq!(d.held_now(), 3);
        assert_eq!(d.policy().loads().iter().map(|l| l.1).sum::<u64>(), 6, "each packet counted once");
        q.finish(0, 1);
        d.poll(0, &mut q);
        assert_eq!(d.held_now(), 0);
        assert_eq!(q.queues[1].iter().map(|p| p.1).collect::<Vec<_>>(), [1, 2, 3]);
    }
}

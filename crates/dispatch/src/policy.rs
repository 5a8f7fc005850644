//! The steering trait every policy implements, and the names the command line uses.

use serde::{Deserialize, Serialize};

/// A worker's number, `0..MAX_WORKERS`: the same number names the worker to the policy, the
/// dispatcher's counters and the worker pool.
pub type WorkerId = u16;

/// The most workers a policy steers to: worker numbers run `0..MAX_WORKERS`, and the policies
/// and the dispatcher that keep state per worker size it by this bound (a larger number panics
/// there).
pub const MAX_WORKERS: usize = 1024;

/// Where each packet of a flow goes, as workers join and leave.
///
/// Contract: `pick` returns an active worker (one joined and not left since), or `None` when
/// none is; `join` of an active worker and `leave` of an inactive one change nothing. Work per
/// `pick` is O(1) in the number of flows and workers (the calisto table's bounded probe
/// included); `join`, `leave` and `rebalance` may take time linear in the table.
pub trait Steer {
    /// The policy's name, as `--policy` spells it.
    fn name(&self) -> &'static str;

    /// The worker for a packet of the flow whose hash is `hash`, at `now_ns`.
    fn pick(&mut self, hash: u64, now_ns: u64) -> Option<WorkerId>;

    /// Where `pick` would send the flow now, with no side effect (no count, no table entry):
    /// the dispatcher asks it again for a packet it held, which was picked, and counted, once.
    fn peek(&self, hash: u64) -> Option<WorkerId>;

    /// `worker` becomes active.
    fn join(&mut self, worker: WorkerId);

    /// `worker` parks: no packet goes to it until it joins again.
    fn leave(&mut self, worker: WorkerId);

    /// The active workers (in the policy's own order).
    fn active(&self) -> &[WorkerId];

    /// The load-aware step, called once an interval; policies that do not watch load ignore it.
    fn rebalance(&mut self, _now_ns: u64) {}

    /// The dispatcher offers `worker`, an active worker with less work queued than the flow's
    /// own, for the flow `hash`, none of whose packets is queued or in service anywhere (so it
    /// can move without reordering). A policy that steers idle flows to shorter queues takes it
    /// (moving whatever shares the flow's entry) and returns true; the rest keep their mapping
    /// and return false, as published.
    fn steer_idle(&mut self, _hash: u64, _worker: WorkerId) -> bool {
        false
    }
}

/// A policy borrowed is a policy: a dispatcher can drive one it does not own (a boxed one).
impl<S: Steer + ?Sized> Steer for &mut S {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn pick(&mut self, hash: u64, now_ns: u64) -> Option<WorkerId> {
        (**self).pick(hash, now_ns)
    }
    fn peek(&self, hash: u64) -> Option<WorkerId> {
        (**self).peek(hash)
    }
    fn join(&mut self, worker: WorkerId) {
        (**self).join(worker)
    }
    fn leave(&mut self, worker: WorkerId) {
        (**self).leave(worker)
    }
    fn active(&self) -> &[WorkerId] {
        (**self).active()
    }
    fn rebalance(&mut self, now_ns: u64) {
        (**self).rebalance(now_ns)
    }
    fn steer_idle(&mut self, hash: u64, worker: WorkerId) -> bool {
        (**self).steer_idle(hash, worker)
    }
}

/// The policies by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// Shenango's `active[hash % n]` ([`crate::HashMod`]); `hash-mod`.
    HashMod,
    /// Calisto's flow table, filled round-robin on first sight ([`crate::Calisto`]); `calisto`.
    Calisto,
    /// Caladan's indirection table of 16 slots, or one per worker when more
    /// ([`crate::Caladan`]); `caladan`.
    Caladan,
    /// Kairos's load-aware table of 4096 buckets ([`crate::Buckets`]); `kairos`.
    Kairos,
}

impl PolicyKind {
    /// Every policy, baselines first, in the order tables and plots list them.
    pub const ALL: [PolicyKind; 4] =
        [PolicyKind::HashMod, PolicyKind::Calisto, PolicyKind::Caladan, PolicyKind::Kairos];

    /// The name `--policy` takes, and the one [`Steer::name`] gives for a policy of this kind.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::HashMod => "hash-mod",
            PolicyKind::Calisto => "calisto",
            PolicyKind::Caladan => "caladan",
            PolicyKind::Kairos => "kairos",
        }
    }

    /// A fresh policy of this kind with `workers` active (`0..workers`), default settings, able
    /// to take one more worker (Caladan's table has a slot for each possible worker: 16, or
    /// `workers + 1` when more).
    pub fn build(self, workers: usize) -> Box<dyn Steer + Send> {
        self.build_for(workers, crate::caladan::SLOTS.max(workers + 1))
    }

    /// As [`PolicyKind::build`], for a set of at most `most` workers (Caladan's slots).
    pub fn build_for(self, workers: usize, most: usize) -> Box<dyn Steer + Send> {
        let mut policy: Box<dyn Steer + Send> = match self {
            PolicyKind::HashMod => Box::new(crate::HashMod::new()),
            PolicyKind::Calisto => Box::new(crate::Calisto::new(crate::calisto::DEFAULT_CAPACITY)),
            PolicyKind::Caladan => Box::new(crate::Caladan::new(most.max(workers))),
            PolicyKind::Kairos => Box::new(crate::Buckets::new(crate::buckets::DEFAULT_BUCKETS)),
        };
        for w in 0..workers {
            policy.join(w as WorkerId);
        }
        policy
    }
}

/// Spreads a flow hash's entropy over all 64 bits (a multiply by the golden ratio and a fold),
/// so a policy may take any bits of it: a NIC's Toeplitz hash or a 5-tuple's FNV alike.
#[inline]
pub fn mix(hash: u64) -> u64 {
    let m = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    m ^ (m >> 29)
}

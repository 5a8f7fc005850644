//! Reader handles: registration, quiescent states, going offline, and reader-side reclamation.
//!
//! A [`ReaderHandle`] owns one slot of the domain. Its fast path, [`ReaderHandle::quiescent`], is
//! one `Acquire` load of the grace-period counter compared with the value the handle saw last;
//! only when the counter moved does it store the new value into its slot (`Release`). No atomic
//! read-modify-write, no fence. References obtained through [`crate::RcuCell::read`] borrow the
//! handle, and `quiescent` and [`ReaderHandle::offline`] take it by `&mut`, so the compiler
//! rejects any use of a reference across a quiescent state or while offline.
//!
//! Under the reader-reclaiming policies (`Inline`, `Throttle`, `Adaptive`) the slow path also
//! takes ready callbacks from the queue (with `try_lock`: a reader never waits for a writer) and
//! runs what its policy allows; leftovers stay with the handle and keep the slow path armed until
//! they are done, handed to the reclaimer, or handed back to the queue when the handle is dropped.

use crate::backlog::Runner;
use crate::domain::Domain;
use crate::error::RegisterError;
use crate::policy::ReclaimPolicy;
use crate::ready::Ready;
use std::fmt;

// Registration lives beside the handle it creates, so that the domain does not depend on its
// readers (the module graph stays acyclic: `reader` builds on `domain`, not the reverse).
impl Domain {
    /// Registers a reader named `name` (stall reports use the name); it starts online.
    pub fn register(&self, name: impl Into<String>) -> Result<ReaderHandle, RegisterError> {
        let slot = self.shared.grace.register(name.into())?;
        Ok(ReaderHandle::new(self.clone(), slot))
    }
}

/// A registered reader of one domain. `Send` (it may move to another thread between uses) but
/// not `Sync`: one thread uses it at a time.
///
/// While it is online, its thread cannot wait for a grace period of the domain (the reader could
/// not pass a quiescent state meanwhile): `Domain::synchronize`, and `defer` or
/// `RcuCell::replace` when they would wait, refuse with [`crate::ReaderOnline`]. A handle counts
/// as the thread's that registered it or last brought it online; register readers on the thread
/// that reads (a handle moved while online counts as its old thread's until it comes back online
/// on the new one).
pub struct ReaderHandle {
    domain: Domain,
    slot: usize,
    /// The grace-period counter value last stored into the slot.
    seen: u64,
    /// Reclamation work is left over: take the slow path on the next quiescent state.
    has_work: bool,
    /// Callbacks whose grace period ended, taken by this reader and not yet run.
    local: Ready,
    /// Current per-call budget under `Adaptive`, in nanoseconds.
    budget_ns: u64,
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl fmt::Debug for ReaderHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderHandle")
            .field("slot", &self.slot)
            .field("seen", &self.seen)
            .field("held_callbacks", &self.local.len())
            .finish()
    }
}

impl ReaderHandle {
    fn new(domain: Domain, slot: usize) -> Self {
        let budget_ns = match domain.policy() {
            ReclaimPolicy::Adaptive { max_budget } => (max_budget.as_nanos() as u64 / 4).max(1),
            _ => 0,
        };
        let mut handle = Self {
            domain,
            slot,
            seen: 0,
            has_work: false,
            local: Ready::default(),
            budget_ns,
            _not_sync: std::marker::PhantomData,
        };
        handle.go_online();
        handle
    }

    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    fn go_online(&mut self) {
        self.seen = self.domain.shared.grace.come_online(self.slot);
        // A grace period may have ended while this reader was away (or before it registered)
        // with nobody left to notice: look at the queue on the next quiescent state.
        self.has_work = self.domain.policy().readers_reclaim();
    }

    /// Announces a quiescent state: this thread holds no reference obtained through this handle.
    /// Call it once per loop iteration (per burst of packets). Costs one load unless the
    /// grace-period counter moved, then one store; under the reader-reclaiming policies it may
    /// also run callbacks, within the policy's bound.
    #[inline]
    pub fn quiescent(&mut self) {
        let gp = self.domain.shared.grace.counter();
        if gp != self.seen || self.has_work {
            self.quiescent_slow(gp);
        }
    }

    #[cold]
    #[inline(never)]
    fn quiescent_slow(&mut self, gp: u64) {
        if gp != self.seen {
            self.domain.shared.grace.acknowledge(self.slot, gp);
            self.seen = gp;
        }
        if self.domain.policy().readers_reclaim() {
            self.reclaim_step();
        }
    }

    /// Takes ready callbacks and runs what the policy allows.
    fn reclaim_step(&mut self) {
        let (grace, backlog) = (&self.domain.shared.grace, &self.domain.shared.backlog);
        let policy = backlog.policy();
        let took = match backlog.try_lock() {
            Some(mut queue) => {
                let in_flight = backlog.take_ready(grace, &mut queue, &mut self.local, true);
                // This reader is quiescent throughout the call, so it may acknowledge the grace
                // period it may just have started, and take that batch too if it was the last.
                let gp = grace.counter();
                if in_flight && gp != self.seen {
                    grace.acknowledge(self.slot, gp);
                    self.seen = gp;
                    backlog.take_ready(grace, &mut queue, &mut self.local, true);
                }
                true
            }
            None => false,
        };
        if self.local.is_empty() {
            self.has_work = !took;
            return;
        }
        let outcome = match policy {
            ReclaimPolicy::Throttle { max_batch, budget } => {
                backlog.run_ready(&mut self.local, max_batch, budget.as_nanos().max(1) as u64)
            }
            ReclaimPolicy::Adaptive { .. } => backlog.run_ready(&mut self.local, usize::MAX, self.budget_ns),
            _ => backlog.run_ready(&mut self.local, usize::MAX, u64::MAX),
        };
        backlog.record(Runner::Reader, outcome);
        if let ReclaimPolicy::Adaptive { max_budget } = policy {
            self.adapt(max_budget, outcome.elapsed_ns);
        }
        self.has_work = !self.local.is_empty() || !took;
    }

    /// `Adaptive`: grow the budget while work is left over, shrink it while calls finish early,
    /// and hand what the largest budget cannot finish to the reclaimer thread.
    fn adapt(&mut self, max_budget: std::time::Duration, elapsed_ns: u64) {
        let max_ns = (max_budget.as_nanos() as u64).max(1);
        let min_ns = (max_ns / 16).max(1);
        if !self.local.is_empty() {
            if self.budget_ns >= max_ns {
                // Never blocks: if the queue is busy, the spill is retried next time. It does not
                // wake the reclaimer, which would be a system call on the reader's time; the
                // reclaimer polls for spills every millisecond under `Adaptive`.
                self.domain.shared.backlog.try_spill(&mut self.local);
            }
            self.budget_ns = (self.budget_ns.saturating_mul(2)).min(max_ns);
        } else if elapsed_ns < self.budget_ns / 2 {
            self.budget_ns = (self.budget_ns - self.budget_ns / 4).max(min_ns);
        }
    }

    /// Goes offline (before blocking, sleeping or waiting on I/O): grace periods stop waiting for
    /// this reader until the returned guard is dropped or [`Offline::online`] is called. No
    /// reference obtained through the handle can live across it.
    pub fn offline(&mut self) -> Offline<'_> {
        self.domain.shared.grace.go_offline(self.slot);
        Offline { handle: self }
    }

    /// Runs `f` offline: `self.offline()` around a blocking call.
    pub fn offline_while<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let _offline = self.offline();
        f()
    }

    /// Callbacks this reader has taken and not yet run.
    pub fn held_callbacks(&self) -> usize {
        self.local.len()
    }

    /// The current per-call budget under `Adaptive`, in nanoseconds (0 under other policies).
    pub fn budget_ns(&self) -> u64 {
        self.budget_ns
    }
}

impl Drop for ReaderHandle {
    fn drop(&mut self) {
        let shared = &self.domain.shared;
        shared.grace.go_offline(self.slot);
        if !self.local.is_empty() {
            shared.backlog.hand_back(&mut self.local);
            shared.backlog.wake_reclaimer();
        }
        shared.grace.unregister(self.slot);
    }
}

/// A reader that is offline; dropping it (or calling [`Offline::online`]) brings it back online.
#[derive(Debug)]
pub struct Offline<'a> {
    handle: &'a mut ReaderHandle,
}

impl Offline<'_> {
    /// Comes back online now.
    pub fn online(self) {}
}

impl Drop for Offline<'_> {
    fn drop(&mut self) {
        self.handle.go_online();
    }
}

//! Grace periods: the counter, the reader slots, and starting, polling and waiting for them.
//!
//! # Protocol
//! One global grace-period counter `gp` (starts at 1) and one counter per reader slot (0 means
//! offline or free). Starting a grace period increments `gp`; the new value is its [`Ticket`].
//! A reader announces a quiescent state by copying `gp` into its slot, storing only when `gp` has
//! moved (see [`crate::ReaderHandle::quiescent`]). Ticket `t` is complete when every online slot
//! holds a value `>= t`: each online reader has, since `t` was issued, been at a point where it
//! held no reference. Polling scans the slots once and caches the smallest value seen in `acked`,
//! so later polls of older tickets cost one load (DPDK's `acked_token`).
//!
//! Memory ordering: a reader's slot store is `Release` and the poller's load `Acquire`, so every
//! read the reader made before its quiescent state happens-before the poller frees anything. A
//! reader's `Acquire` load of `gp >= t` synchronises with the `SeqCst` increment that issued `t`,
//! which the unlink of the retired value precedes, so after its quiescent state the reader can
//! no longer reach the old value. Coming online is the one Dekker-style race (the reader stores
//! its slot then reads pointers; the writer unlinks, then reads slots); both sides put a `SeqCst`
//! fence between their store and their load, as liburcu's QSBR does.
//!
//! # Waiting for oneself
//! A thread that waits for a grace period while one of its own readers is online waits forever:
//! that reader passes no quiescent state while its thread waits. Each slot therefore remembers
//! the thread that registered it or last brought it online (its owner), and every blocking wait
//! first looks for an online slot owned by the calling thread and refuses with
//! [`ReaderOnline`] instead of hanging. The owner is recorded where the reader already writes
//! its slot on the way online, never on the quiescent path, so the readers' fast path is
//! unchanged. A handle moved to another thread while online still counts as its old thread's
//! until it comes online again on the new one (register readers on the thread that reads).
//!
//! # Work bounds
//! [`GracePeriods::start`] is one atomic increment. [`GracePeriods::poll`] is O(1) when a later
//! ticket was already seen to end, otherwise one pass over the registered slots.
//! [`GracePeriods::synchronize`] blocks until every online reader passes a quiescent state (or
//! refuses at once, see above).

use crate::error::{ReaderOnline, RegisterError};
use crate::stats::DomainStats;
use crate::sync::{self, AtomicU64, AtomicUsize, CachePadded, Mutex, Ordering, fence};

/// A grace period, as returned by [`crate::Domain::start`]; complete once [`crate::Domain::poll`]
/// says so. Tickets of one domain are ordered: a later grace period has a larger ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

impl Ticket {
    /// The grace-period counter value this ticket waits for.
    pub fn value(self) -> u64 {
        self.0
    }
}

/// One reader's slot, on a cache line of its own.
#[derive(Default)]
struct Slot {
    /// The counter value the reader last acknowledged; 0 while offline or free.
    counter: AtomicU64,
    /// The [`sync::thread_token`] of the thread that registered the reader or last brought it
    /// online. Advisory (it only decides whether a wait is refused), so a plain atomic even
    /// under loom, and `Relaxed`: a thread reads back its own writes in program order.
    owner: std::sync::atomic::AtomicU64,
}

/// The grace-period counter and the reader slots of one domain.
pub(crate) struct GracePeriods {
    gp: CachePadded<AtomicU64>,
    /// The smallest slot value the last full scan saw: every ticket up to it has ended.
    acked: CachePadded<AtomicU64>,
    slots: Box<[CachePadded<Slot>]>,
    /// Slots ever handed out (a high-water mark): scans stop there.
    slots_used: AtomicUsize,
    /// The registered readers' names, by slot (`None`: free).
    names: Mutex<Vec<Option<String>>>,
    started: AtomicU64,
}

impl GracePeriods {
    /// A counter at 1 and `max_readers` free slots.
    pub(crate) fn new(max_readers: usize) -> Self {
        Self {
            gp: CachePadded(AtomicU64::new(1)),
            acked: CachePadded(AtomicU64::new(1)),
            slots: (0..max_readers).map(|_| CachePadded(Slot::default())).collect(),
            slots_used: AtomicUsize::new(0),
            names: Mutex::new(Vec::new()),
            started: AtomicU64::new(0),
        }
    }

    /// The grace-period counter now (`Acquire`): the reader's fast path.
    #[inline]
    pub(crate) fn counter(&self) -> u64 {
        self.gp.load(Ordering::Acquire)
    }

    /// Starts a grace period and returns its ticket.
    pub(crate) fn start(&self) -> Ticket {
        self.started.fetch_add(1, Ordering::Relaxed);
        Ticket(self.gp.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Whether the grace period `ticket` has ended.
    pub(crate) fn poll(&self, ticket: Ticket) -> bool {
        if self.acked.load(Ordering::Acquire) >= ticket.0 {
            return true;
        }
        fence(Ordering::SeqCst);
        let mut complete = self.gp.load(Ordering::Acquire);
        let used = self.slots_used.load(Ordering::Acquire);
        for slot in &self.slots[..used] {
            let seen = slot.counter.load(Ordering::Acquire);
            if seen != 0 && seen < complete {
                complete = seen;
            }
        }
        self.acked.fetch_max(complete, Ordering::AcqRel);
        ticket.0 <= complete
    }

    /// Whether any reader is online right now.
    pub(crate) fn any_reader_online(&self) -> bool {
        fence(Ordering::SeqCst);
        let used = self.slots_used.load(Ordering::Acquire);
        self.slots[..used].iter().any(|slot| slot.counter.load(Ordering::Acquire) != 0)
    }

    /// Refuses a blocking wait when the calling thread has a reader of this domain online: the
    /// wait would never end. Costs one pass over the registered slots' owners.
    pub(crate) fn refuse_own_reader(&self) -> Result<(), ReaderOnline> {
        let me = sync::thread_token();
        let used = self.slots_used.load(Ordering::Acquire);
        // Owner first: it is not a loom operation, so the models explore the same schedules
        // when the readers belong to other threads.
        let own_online = self.slots[..used].iter().position(|slot| {
            slot.owner.load(std::sync::atomic::Ordering::Relaxed) == me
                && slot.counter.load(Ordering::Relaxed) != 0
        });
        match own_online {
            None => Ok(()),
            Some(slot) => {
                let reader = self.reader_name(slot).unwrap_or_else(|| format!("slot {slot}"));
                Err(ReaderOnline { reader })
            }
        }
    }

    /// Blocks until a grace period started now has ended, unless the calling thread has a reader
    /// online (see [`GracePeriods::refuse_own_reader`]).
    pub(crate) fn synchronize(&self) -> Result<(), ReaderOnline> {
        self.refuse_own_reader()?;
        self.wait_for_readers();
        Ok(())
    }

    /// Blocks until a grace period started now has ended. The caller has checked
    /// [`GracePeriods::refuse_own_reader`].
    pub(crate) fn wait_for_readers(&self) {
        let ticket = self.start();
        let mut round = 0u32;
        while !self.poll(ticket) {
            sync::backoff(round);
            round = round.saturating_add(1);
        }
    }

    /// Takes a free slot for a reader named `name`; the slot stays offline until
    /// [`GracePeriods::come_online`].
    pub(crate) fn register(&self, name: String) -> Result<usize, RegisterError> {
        let mut names = sync::lock(&self.names);
        let slot = match names.iter().position(Option::is_none) {
            Some(free) => free,
            None if names.len() < self.slots.len() => {
                names.push(None);
                names.len() - 1
            }
            None => return Err(RegisterError::TooManyReaders { max: self.slots.len() }),
        };
        names[slot] = Some(name);
        self.slots_used.fetch_max(slot + 1, Ordering::SeqCst);
        Ok(slot)
    }

    /// Frees `slot` (already offline) for the next registration.
    pub(crate) fn unregister(&self, slot: usize) {
        sync::lock(&self.names)[slot] = None;
    }

    /// Brings `slot` online at the current counter and returns that value.
    /// The calling thread becomes the slot's owner.
    pub(crate) fn come_online(&self, slot: usize) -> u64 {
        let slot = &self.slots[slot];
        slot.owner.store(sync::thread_token(), std::sync::atomic::Ordering::Relaxed);
        let gp = self.counter();
        slot.counter.store(gp, Ordering::SeqCst);
        // Order the slot store before any later pointer load (the Dekker race with a writer that
        // unlinks and then scans slots; the writer side has the matching fence in `poll`).
        fence(Ordering::SeqCst);
        gp
    }

    /// Records that the reader of `slot` passed a quiescent state after seeing counter `gp`.
    #[inline]
    pub(crate) fn acknowledge(&self, slot: usize, gp: u64) {
        self.slots[slot].counter.store(gp, Ordering::Release);
    }

    /// Takes `slot` offline: grace periods stop waiting for it.
    pub(crate) fn go_offline(&self, slot: usize) {
        self.slots[slot].counter.store(0, Ordering::Release);
    }

    /// The counter, then every registered slot's value (0: offline) into `out`: what the stall
    /// watchdog compares.
    pub(crate) fn snapshot(&self, out: &mut Vec<u64>) -> u64 {
        let gp = self.counter();
        let used = self.slots_used.load(Ordering::Acquire);
        out.clear();
        out.extend(self.slots[..used].iter().map(|s| s.counter.load(Ordering::Acquire)));
        gp
    }

    /// The name `slot` was registered with, if it is taken.
    pub(crate) fn reader_name(&self, slot: usize) -> Option<String> {
        sync::lock(&self.names).get(slot).cloned().flatten()
    }

    /// Adds the grace periods started so far to `stats`.
    pub(crate) fn add_stats(&self, stats: &mut DomainStats) {
        stats.grace_periods_started = self.started.load(Ordering::Relaxed);
    }
}

//! The shared ring: slots with position stamps, a head and a tail. All handles (single or shared
//! producer, the consumer, the keyed ring's key queue) are thin policies over these operations.
//!
//! Every position `p` (a `u64` that only grows) maps to slot `p % capacity`. A slot's stamp says
//! who may touch it: `2p` means "free for position p" (the producer that reserved `p` may write),
//! `2p + 1` means "holds the value of position p" (whoever claims `p` may read). Reading a value
//! releases the slot for the position one lap later, `2(p + capacity)`. Positions never repeat,
//! so the stamps are unambiguous for every capacity from 1 up: no power-of-two rounding and no
//! lost slot, unlike rings that tell full from empty by the indices alone.
//!
//! `tail` is the next position to reserve and `head` the next to claim. Producers reserve only
//! positions whose stamps already say "free" (one producer: it keeps the tail itself; several: a
//! CAS on the tail), and claimers take only positions whose stamps already say "written" (the
//! only consumer: a store of the head; when producers may evict, consumer and evictors CAS it).
//! So nobody ever waits for another thread: a thread descheduled in the middle of its burst
//! makes the ring look fuller (or emptier) for a moment, never blocks it. That matters on a
//! machine with more threads than cores, where a waiter could spin for a whole time slice.

use crate::sync::{AtomicU64, CachePadded, Ordering, Payload};

/// One slot of the ring.
#[derive(Debug)]
struct Slot<T> {
    stamp: AtomicU64,
    value: Payload<T>,
}

/// Why entries left the ring other than by being dequeued, and how many entered it.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Entries offered by producers (taken or not).
    pub(crate) offered: AtomicU64,
    /// Entries handed to the consumer.
    pub(crate) dequeued: AtomicU64,
    /// Offered entries refused because the ring was full (tail drop).
    pub(crate) dropped_newest: AtomicU64,
    /// Queued entries discarded to admit newer ones.
    pub(crate) dropped_oldest: AtomicU64,
    /// Queued entries replaced in place by a newer one with the same key.
    pub(crate) replaced: AtomicU64,
    /// Offered entries refused because their key was outside the ring's key space.
    pub(crate) invalid_key: AtomicU64,
}

impl Counters {
    #[inline]
    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        if n > 0 {
            counter.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

#[derive(Debug)]
pub(crate) struct Core<T> {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
    pub(crate) counters: CachePadded<Counters>,
    slots: Box<[Slot<T>]>,
    capacity: u64,
    /// Whether producers may claim from the head (drop-oldest): consumers must then CAS.
    evicting: bool,
}

// SAFETY: the only non-`Sync` part is the slots' payload cells, and a payload is only touched by
// the one thread that owns its position under the stamp protocol (see the module doc): shared
// access never reads or writes a cell concurrently. Values move between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for Core<T> {}
// SAFETY: the core owns its values (plain `Copy` data), which may go to another thread since
// `T: Send`; the atomics and the boxed slots are `Send` themselves.
unsafe impl<T: Send> Send for Core<T> {}

impl<T: Copy> Core<T> {
    pub(crate) fn new(capacity: usize, evicting: bool) -> Self {
        let slots = (0..capacity as u64)
            .map(|i| Slot { stamp: AtomicU64::new(2 * i), value: Payload::empty() })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Self {
            head: CachePadded(AtomicU64::new(0)),
            tail: CachePadded(AtomicU64::new(0)),
            counters: CachePadded(Counters::default()),
            slots,
            capacity: capacity as u64,
            evicting,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Entries queued now (a snapshot: producers and consumers may be mid-burst).
    pub(crate) fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        tail.saturating_sub(head).min(self.capacity) as usize
    }

    pub(crate) fn stats(&self) -> crate::RingStats {
        let c = &self.counters;
        crate::RingStats {
            capacity: self.capacity(),
            len: self.len(),
            offered: c.offered.load(Ordering::Relaxed),
            dequeued: c.dequeued.load(Ordering::Relaxed),
            dropped_newest: c.dropped_newest.load(Ordering::Relaxed),
            dropped_oldest: c.dropped_oldest.load(Ordering::Relaxed),
            replaced: c.replaced.load(Ordering::Relaxed),
            invalid_key: c.invalid_key.load(Ordering::Relaxed),
        }
    }

    #[inline]
    fn slot_index(&self, pos: u64) -> usize {
        (pos % self.capacity) as usize
    }

    /// How many of the `want` positions from `first` on are free now (stamp says the previous
    /// lap was read). A producer reserves only those, so it never waits on a consumer.
    #[inline]
    fn free_run(&self, first: u64, want: usize) -> usize {
        let mut n = 0;
        let mut index = self.slot_index(first);
        while n < want {
            if self.slots[index].stamp.load(Ordering::Acquire) != 2 * (first + n as u64) {
                break;
            }
            n += 1;
            index += 1;
            if index == self.slots.len() {
                index = 0;
            }
        }
        n
    }

    /// Reserves up to `want` positions for the only producer, whose next position is `tail`.
    #[inline]
    pub(crate) fn reserve_single(&self, tail: u64, want: usize) -> usize {
        self.free_run(tail, want.min(self.capacity()))
    }

    /// Reserves up to `want` positions among several producers: returns the first position and
    /// how many were reserved (zero when full).
    #[inline]
    pub(crate) fn reserve_shared(&self, want: usize) -> (u64, usize) {
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            let n = self.free_run(tail, want.min(self.capacity()));
            if n == 0 {
                // Full, or another producer moved the tail past what we checked: look again
                // only in the second case.
                let now = self.tail.load(Ordering::Relaxed);
                if now == tail {
                    return (tail, 0);
                }
                tail = now;
                continue;
            }
            // The stamps we checked stay free until their reserver writes them, and the CAS
            // makes us that reserver only if nobody reserved from `tail` meanwhile.
            match self.tail.compare_exchange_weak(tail, tail + n as u64, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return (tail, n),
                Err(now) => tail = now,
            }
        }
    }

    /// Publishes the tail of the only producer (for `len`).
    #[inline]
    pub(crate) fn publish_tail(&self, tail: u64) {
        self.tail.store(tail, Ordering::Release);
    }

    /// Writes `values` into the reserved positions starting at `first`.
    #[inline]
    pub(crate) fn write(&self, first: u64, values: &[T]) {
        let mut index = self.slot_index(first);
        for (i, value) in values.iter().enumerate() {
            let pos = first + i as u64;
            let slot = &self.slots[index];
            debug_assert_eq!(slot.stamp.load(Ordering::Relaxed), 2 * pos, "writing an unreserved slot");
            // SAFETY: position `pos` was reserved by this caller after its stamp said the
            // previous lap was read: no other thread touches the slot until we publish it.
            unsafe { slot.value.write(*value) };
            slot.stamp.store(2 * pos + 1, Ordering::Release);
            index += 1;
            if index == self.slots.len() {
                index = 0;
            }
        }
    }

    /// Moves up to `out.len()` published values from the head into `out` for the only consumer.
    /// Returns how many.
    #[inline]
    pub(crate) fn dequeue(&self, out: &mut [T]) -> usize {
        let n = self.dequeue_inner(out);
        Counters::add(&self.counters.dequeued, n);
        n
    }

    #[inline]
    fn dequeue_inner(&self, out: &mut [T]) -> usize {
        if self.evicting {
            return self.claim(out.len(), |i, v| out[i] = v);
        }
        // Only this consumer moves the head: count the published slots, read, release, then
        // move the head, so a producer that sees the new head finds the slots free.
        let head = self.head.load(Ordering::Relaxed);
        let mut n = 0;
        let mut index = self.slot_index(head);
        while n < out.len() {
            let pos = head + n as u64;
            let slot = &self.slots[index];
            if slot.stamp.load(Ordering::Acquire) != 2 * pos + 1 {
                break;
            }
            // SAFETY: the stamp says position `pos` is written (its `Acquire` load pairs with the
            // writer's `Release` store), and in a ring without evicting producers only this
            // consumer claims positions: nobody writes the slot until we release it below.
            out[n] = unsafe { slot.value.read() };
            slot.stamp.store(2 * (pos + self.capacity), Ordering::Release);
            n += 1;
            index += 1;
            if index == self.slots.len() {
                index = 0;
            }
        }
        if n > 0 {
            self.head.store(head + n as u64, Ordering::Release);
        }
        n
    }

    /// Claims up to `want` published positions at the head against other claimers (the
    /// consumer and evicting producers), hands each value to `take(i, value)` and releases the
    /// slots. Never waits: a position still being written ends the run.
    #[inline]
    fn claim(&self, want: usize, mut take: impl FnMut(usize, T)) -> usize {
        let mut head = self.head.load(Ordering::Acquire);
        let n = loop {
            let mut n = 0u64;
            let mut index = self.slot_index(head);
            while n < want as u64 {
                if self.slots[index].stamp.load(Ordering::Acquire) != 2 * (head + n) + 1 {
                    break;
                }
                n += 1;
                index += 1;
                if index == self.slots.len() {
                    index = 0;
                }
            }
            if n == 0 {
                return 0;
            }
            match self.head.compare_exchange_weak(head, head + n, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break n,
                Err(now) => head = now,
            }
        };
        let mut index = self.slot_index(head);
        for i in 0..n {
            let pos = head + i;
            let slot = &self.slots[index];
            // SAFETY: the stamp said `pos` was published, and the CAS on the head made this
            // caller its only claimer; nobody writes the slot until we release it.
            take(i as usize, unsafe { slot.value.read() });
            slot.stamp.store(2 * (pos + self.capacity), Ordering::Release);
            index += 1;
            if index == self.slots.len() {
                index = 0;
            }
        }
        n as usize
    }

    /// Discards up to `want` of the oldest queued entries into `evicted` (drop-oldest).
    #[inline]
    pub(crate) fn evict(&self, want: usize, evicted: &mut Vec<T>) -> usize {
        debug_assert!(self.evicting, "evict on a ring built without drop-oldest");
        let n = self.claim(want, |_, v| evicted.push(v));
        Counters::add(&self.counters.dropped_oldest, n);
        n
    }
}

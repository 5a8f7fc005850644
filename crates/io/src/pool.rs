//! A fixed pool of packet buffers handed between threads as `u32` indices.
//!
//! Rings carry indices, not packets; whoever holds an index owns its buffer until it passes the
//! index on (through a ring, whose hand-off orders the buffer's writes before the next owner's
//! reads) or frees it. Only one thread allocates (the one receiving from the port); any thread
//! frees (the free list is an MPSC ring with the allocator as its consumer).

use std::cell::UnsafeCell;
use std::sync::Arc;

use kairos_ring::{Consumer, Overflow, SharedProducer, mpsc};

use crate::packet::Packet;

/// The buffers.
#[derive(Debug)]
pub struct PoolSlots {
    slots: Box<[UnsafeCell<Packet>]>,
}

// SAFETY: a slot is accessed only by the thread that owns its index (see the module doc), and
// index hand-offs go through rings with release/acquire ordering.
unsafe impl Sync for PoolSlots {}

impl PoolSlots {
    /// The packet at `index`.
    ///
    /// # Safety
    /// The caller owns `index`: it allocated it or received it through a ring, and has not
    /// passed it on or freed it.
    #[inline]
    pub unsafe fn get(&self, index: u32) -> &Packet {
        // SAFETY: the caller owns the index, so no other thread writes this slot.
        unsafe { &*self.slots[index as usize].get() }
    }

    /// Writes the packet at `index`.
    ///
    /// # Safety
    /// As for [`PoolSlots::get`].
    #[inline]
    pub unsafe fn set(&self, index: u32, packet: Packet) {
        // SAFETY: the caller owns the index, so no other thread reads or writes this slot.
        unsafe { *self.slots[index as usize].get() = packet };
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// Takes free buffers (one per pool).
#[derive(Debug)]
pub struct Allocator {
    free: Consumer<u32>,
}

/// Returns buffers to the pool (clone one per thread).
#[derive(Debug, Clone)]
pub struct Freer {
    free: SharedProducer<u32>,
    spare: Vec<u32>,
}

/// A pool of `size` buffers, all free.
pub fn pool(size: usize) -> (Arc<PoolSlots>, Allocator, Freer) {
    let size = size.clamp(1, u32::MAX as usize);
    let slots = (0..size).map(|_| UnsafeCell::new(Packet::default())).collect();
    let (producer, consumer) = mpsc(size, Overflow::DropNewest).expect("pool size is at least 1");
    let mut freer = Freer { free: producer, spare: Vec::new() };
    let all: Vec<u32> = (0..size as u32).collect();
    freer.free_burst(&all);
    (Arc::new(PoolSlots { slots }), Allocator { free: consumer }, freer)
}

impl Allocator {
    /// Fills `out` with up to `out.len()` free indices; returns how many.
    #[inline]
    pub fn alloc_burst(&mut self, out: &mut [u32]) -> usize {
        self.free.dequeue_burst(out)
    }

    /// Free buffers now.
    pub fn available(&self) -> usize {
        self.free.len()
    }
}

impl Freer {
    /// Returns `indices` to the pool. Each index must be owned by the caller and freed once.
    #[inline]
    pub fn free_burst(&mut self, indices: &[u32]) {
        let taken = self.free.enqueue_burst(indices, &mut self.spare).taken;
        debug_assert_eq!(taken, indices.len(), "the free list holds the whole pool: a double free?");
    }
}

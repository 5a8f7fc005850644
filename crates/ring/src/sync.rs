//! The synchronisation primitives the ring uses, from `kairos-sync` (std's, or `loom`'s under
//! `cfg(loom)`), so the models in `tests/loom.rs` explore the code that ships; and the two cells
//! the ring's protocols add over `kairos_sync::UnsafeCell`.

use std::mem::MaybeUninit;

use kairos_sync::UnsafeCell;
pub(crate) use kairos_sync::{AtomicU64, CachePadded, Ordering};

/// A slot's payload: written by the one thread that owns the slot's position, read by the one
/// thread that later claims it. The stamp protocol in `core` decides who owns it when.
#[derive(Debug)]
pub(crate) struct Payload<T>(UnsafeCell<MaybeUninit<T>>);

impl<T: Copy> Payload<T> {
    pub(crate) fn empty() -> Self {
        Self(UnsafeCell::new(MaybeUninit::uninit()))
    }

    /// # Safety
    /// The caller owns the slot's position for writing: no other thread reads or writes it.
    #[inline]
    pub(crate) unsafe fn write(&self, value: T) {
        // SAFETY: the caller owns the slot's position for writing (this function's contract), so
        // no other thread reads or writes the cell now; loom checks that it is so.
        self.0.with_mut(|p| unsafe { (*p).write(value) });
    }

    /// # Safety
    /// The caller has claimed the slot's position after its writer published it: the value is
    /// initialised and no thread writes it until the caller releases the slot.
    #[inline]
    pub(crate) unsafe fn read(&self) -> T {
        // SAFETY: the caller claimed the position after its writer published it (this
        // function's contract), so the value is initialised and nobody writes it until the
        // caller releases the slot; loom checks that it is so.
        self.0.with(|p| unsafe { (*p).assume_init() })
    }
}

/// Under loom, one cell per bridge slot that the producer writes when it fills the slot and the
/// consumer reads when it empties it, so loom's race detector checks that the positions order
/// every fill after the previous read and every read after its fill. The slots' bytes are
/// atomics (another process writes them), which loom lets race, and loom never lets a load
/// read a store that comes later in its writer's order: the slot words alone would not show a
/// missing release on the consumer's side. Outside loom it is nothing.
#[derive(Debug, Clone)]
pub(crate) struct SlotShadow(#[cfg(loom)] std::sync::Arc<[UnsafeCell<()>]>);

impl SlotShadow {
    pub(crate) fn new(_slots: usize) -> Self {
        #[cfg(loom)]
        {
            Self((0.._slots).map(|_| UnsafeCell::new(())).collect())
        }
        #[cfg(not(loom))]
        {
            Self()
        }
    }

    /// The producer fills slot `_slot`.
    #[inline(always)]
    pub(crate) fn fill(&self, _slot: usize) {
        #[cfg(loom)]
        self.0[_slot].with_mut(|_| ());
    }

    /// The consumer empties slot `_slot`.
    #[inline(always)]
    pub(crate) fn empty(&self, _slot: usize) {
        #[cfg(loom)]
        self.0[_slot].with(|_| ());
    }
}

//! The synchronisation primitives the ring uses, switched to `loom`'s under `cfg(loom)`, so the
//! models in `tests/loom.rs` explore the code that ships.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// A slot's payload: written by the one thread that owns the slot's position, read by the one
/// thread that later claims it. The stamp protocol in `core` decides who owns it when.
#[derive(Debug)]
pub(crate) struct Payload<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<std::mem::MaybeUninit<T>>,
    #[cfg(not(loom))] std::cell::UnsafeCell<std::mem::MaybeUninit<T>>,
);

impl<T: Copy> Payload<T> {
    pub(crate) fn empty() -> Self {
        #[cfg(loom)]
        {
            Self(loom::cell::UnsafeCell::new(std::mem::MaybeUninit::uninit()))
        }
        #[cfg(not(loom))]
        {
            Self(std::cell::UnsafeCell::new(std::mem::MaybeUninit::uninit()))
        }
    }

    /// # Safety
    /// The caller owns the slot's position for writing: no other thread reads or writes it.
    #[inline]
    pub(crate) unsafe fn write(&self, value: T) {
        #[cfg(loom)]
        // SAFETY: the caller owns the slot's position for writing (this function's contract), so
        // no other thread reads or writes the cell now; loom checks that it is so.
        self.0.with_mut(|p| unsafe { (*p).write(value) });
        #[cfg(not(loom))]
        // SAFETY: the caller owns the slot's position for writing (this function's contract), so
        // no other thread reads or writes the cell now.
        unsafe {
            (*self.0.get()).write(value);
        }
    }

    /// # Safety
    /// The caller has claimed the slot's position after its writer published it: the value is
    /// initialised and no thread writes it until the caller releases the slot.
    #[inline]
    pub(crate) unsafe fn read(&self) -> T {
        #[cfg(loom)]
        // SAFETY: the caller claimed the position after its writer published it (this
        // function's contract), so the value is initialised and nobody writes it until the
        // caller releases the slot; loom checks that it is so.
        return self.0.with(|p| unsafe { (*p).assume_init() });
        #[cfg(not(loom))]
        // SAFETY: the caller claimed the position after its writer published it (this
        // function's contract), so the value is initialised and nobody writes it until the
        // caller releases the slot.
        unsafe {
            (*self.0.get()).assume_init()
        }
    }
}

/// Keeps a counter on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Under loom, one cell per bridge slot that the producer writes when it fills the slot and the
/// consumer reads when it empties it, so loom's race detector checks that the positions order
/// every fill after the previous read and every read after its fill. The slots' bytes are
/// atomics (another process writes them), which loom lets race, and loom never lets a load
/// read a store that comes later in its writer's order: the slot words alone would not show a
/// missing release on the consumer's side. Outside loom it is nothing.
#[derive(Debug, Clone)]
pub(crate) struct SlotShadow(#[cfg(loom)] std::sync::Arc<[loom::cell::UnsafeCell<()>]>);

impl SlotShadow {
    pub(crate) fn new(_slots: usize) -> Self {
        #[cfg(loom)]
        {
            Self((0.._slots).map(|_| loom::cell::UnsafeCell::new(())).collect())
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

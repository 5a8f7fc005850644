//! The cell the inbox's buffers live in: `kairos_sync::UnsafeCell` (loom's under `cfg(loom)`, so
//! the model in `tests/loom.rs` checks the accesses of the code that ships), with the inbox's
//! ownership rule as the `unsafe` contract of each access.

use kairos_sync::UnsafeCell;

#[derive(Debug)]
pub(crate) struct BufferCell<T>(UnsafeCell<T>);

impl<T> BufferCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(UnsafeCell::new(value))
    }

    /// # Safety
    /// The caller holds the buffer's index: no other thread reads or writes it meanwhile.
    pub(crate) unsafe fn with_mut<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: exclusive access is the caller's contract; loom checks it.
        self.0.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// # Safety
    /// The caller holds the buffer's index: no other thread writes it meanwhile.
    pub(crate) unsafe fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        // SAFETY: the caller's contract; loom checks it.
        self.0.with(|p| f(unsafe { &*p }))
    }

    /// A raw pointer to the value, for handing several buffers out at once.
    ///
    /// # Safety
    /// As for [`BufferCell::with_mut`], for as long as the pointer is used. Not under loom,
    /// which tracks accesses only inside its closures.
    #[cfg(not(loom))]
    pub(crate) unsafe fn as_mut_ptr(&self) -> *mut T {
        self.0.get()
    }
}

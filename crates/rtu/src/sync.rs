//! The cell the inbox's buffers live in, switched to `loom`'s under `cfg(loom)` so the model in
//! `tests/loom.rs` checks the accesses of the code that ships.

#[derive(Debug)]
pub(crate) struct BufferCell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> BufferCell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        {
            Self(loom::cell::UnsafeCell::new(value))
        }
        #[cfg(not(loom))]
        {
            Self(std::cell::UnsafeCell::new(value))
        }
    }

    /// # Safety
    /// The caller holds the buffer's index: no other thread reads or writes it meanwhile.
    pub(crate) unsafe fn with_mut<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        #[cfg(loom)]
        // SAFETY: exclusive access is the caller's contract; loom checks it.
        return self.0.with_mut(|p| f(unsafe { &mut *p }));
        #[cfg(not(loom))]
        // SAFETY: exclusive access is the caller's contract.
        f(unsafe { &mut *self.0.get() })
    }

    /// # Safety
    /// The caller holds the buffer's index: no other thread writes it meanwhile.
    pub(crate) unsafe fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        #[cfg(loom)]
        // SAFETY: the caller's contract; loom checks it.
        return self.0.with(|p| f(unsafe { &*p }));
        #[cfg(not(loom))]
        // SAFETY: the caller's contract.
        f(unsafe { &*self.0.get() })
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

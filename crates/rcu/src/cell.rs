//! `RcuCell<T>`: one value that readers load without synchronisation and writers replace.
//!
//! A read is one `Acquire` load of a pointer (a plain `mov` on x86-64) plus a check that the
//! handle belongs to the cell's domain; the reference it returns borrows the reader handle, so it
//! cannot outlive the reader's next quiescent state. A replace swaps the pointer (`SeqCst`) and
//! retires the old value through the domain's reclamation policy, so it is freed only after every
//! reader that might hold it has passed a quiescent state.

use crate::domain::Domain;
use crate::error::DeferError;
use crate::reader::ReaderHandle;
use crate::sync::{AtomicPtr, Ordering};
use std::fmt;

/// A value published under read-copy-update.
pub struct RcuCell<T: Send + Sync + 'static> {
    ptr: AtomicPtr<T>,
    domain: Domain,
}

impl<T: Send + Sync + 'static> fmt::Debug for RcuCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RcuCell").field("domain", &self.domain).finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> RcuCell<T> {
    /// A cell in `domain` holding `value`.
    pub fn new(domain: &Domain, value: T) -> Self {
        Self { ptr: AtomicPtr::new(Box::into_raw(Box::new(value))), domain: domain.clone() }
    }

    /// The current value. The reference lives until the reader's next `quiescent()` or
    /// `offline()`, which the borrow checker enforces.
    ///
    /// # Panics
    /// If `reader` belongs to another domain: the cell's writers would not wait for it.
    #[inline]
    pub fn read<'a>(&'a self, reader: &'a ReaderHandle) -> &'a T {
        if !self.domain.same_domain(reader.domain()) {
            wrong_domain();
        }
        // SAFETY: the pointer came from `Box::into_raw` and is freed only by a callback deferred
        // after it was swapped out, which runs after every online reader passed a quiescent
        // state. `reader` is online (offline handles are mutably borrowed by their `Offline`
        // guard) and the returned reference borrows it, so it dies before the reader's next
        // quiescent state.
        unsafe { &*self.ptr.load(Ordering::Acquire) }
    }

    /// Publishes `value` and retires the previous one (freed after a grace period, by whoever
    /// the domain's policy says). Under `Direct`, and at the watermark under
    /// `OnFull::Synchronize`, it waits for that grace period and frees the old value itself.
    ///
    /// # Errors
    /// Nothing is published and `value` comes back in the error:
    /// [`DeferError::Full`] at the watermark under `OnFull::Fail`;
    /// [`DeferError::ReaderOnline`] when the replace would wait for a grace period and this
    /// thread has a reader of the domain online (it would wait for itself).
    pub fn replace(&self, value: T) -> Result<(), DeferError<T>> {
        let admission = match self.domain.admit(1) {
            Ok(admission) => admission,
            Err(refusal) => return Err(refusal.hand_back(value)),
        };
        let old = self.ptr.swap(Box::into_raw(Box::new(value)), Ordering::SeqCst);
        // SAFETY: `old` came from `Box::into_raw`, was just unlinked (readers starting from now
        // load the new pointer), and this call owned it: only the swap that removed it retires
        // it. `admission` was granted for one callback.
        unsafe { self.domain.retire_raw(admission, old) };
        Ok(())
    }

    /// Exclusive access: no reader can be reading through `&mut self`.
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` proves no reader borrows the cell, and the pointer is a live box.
        unsafe { &mut *self.ptr.load(Ordering::Acquire) }
    }
}

#[cold]
#[inline(never)]
fn wrong_domain() -> ! {
    panic!("RcuCell::read with a ReaderHandle of another domain: register the reader with the cell's domain")
}

impl<T: Send + Sync + 'static> Drop for RcuCell<T> {
    fn drop(&mut self) {
        // SAFETY: dropping needs `&mut self`, so no reference from `read` (which borrows the
        // cell) is alive; the pointer is a live box owned by the cell.
        drop(unsafe { Box::from_raw(self.ptr.load(Ordering::Acquire)) });
    }
}

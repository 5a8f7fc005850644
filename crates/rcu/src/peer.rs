//! The peer the domain is measured against: a value published under `crossbeam-epoch`, the
//! epoch-based reclamation most Rust code uses, with every `unsafe` of using it argued here.
//!
//! Experiments run the same reader and writer through [`EpochCell`] and through
//! [`crate::RcuCell`]. The difference under measurement is who frees retired values: here a
//! reader's [`pin`] may collect (every 128th pin frees up to 8 bags of 64 deferred destructors on
//! the pinning thread), so a realtime reader frees garbage it never retired; the domain lets its
//! [`crate::ReclaimPolicy`] decide.
//!
//! Contract: a reference from [`EpochCell::read`] lives no longer than the [`Guard`] it was read
//! under, and the borrow checker enforces it; a retired value is destroyed once every thread
//! pinned when it was retired has unpinned, on whichever thread collects it.

use crossbeam_epoch::{Atomic, Owned};
pub use crossbeam_epoch::{Guard, pin};
use std::fmt;
use std::sync::atomic::Ordering;

/// One value that readers load under an epoch guard and writers replace, retiring the old one
/// through `crossbeam-epoch` (the peer of [`crate::RcuCell`]). Never null.
pub struct EpochCell<T: Send + Sync + 'static> {
    value: Atomic<T>,
}

impl<T: Send + Sync + 'static> fmt::Debug for EpochCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpochCell").finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> EpochCell<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> Self {
        Self { value: Atomic::new(value) }
    }

    /// The current value: one `Acquire` load under `guard` (pin with [`pin`] first; the pin is
    /// where collection happens, not this call).
    pub fn read<'g>(&'g self, guard: &'g Guard) -> &'g T {
        let current = self.value.load(Ordering::Acquire, guard);
        // SAFETY: the cell is never null (it starts with a value and `replace` only swaps in
        // new ones), and `current` was loaded under `guard`: a value unlinked after that load is
        // destroyed only after `guard` is dropped, and the returned reference borrows `guard`,
        // so it dies first.
        unsafe { current.deref() }
    }

    /// Publishes `value` and retires the previous one: it is destroyed after every thread pinned
    /// now has unpinned, by whichever thread collects it.
    pub fn replace(&self, value: T, guard: &Guard) {
        let old = self.value.swap(Owned::new(value), Ordering::AcqRel, guard);
        // SAFETY: the swap unlinked `old`, so threads that pin from now on cannot reach it, and
        // only this call got it back, so it is retired once; threads that loaded it before are
        // pinned, and the epoch destroys it only after they unpin. `T: Send + 'static`, so any
        // thread may destroy it at any later time.
        unsafe { guard.defer_destroy(old) };
    }
}

impl<T: Send + Sync + 'static> Drop for EpochCell<T> {
    fn drop(&mut self) {
        let current = std::mem::replace(&mut self.value, Atomic::null());
        // SAFETY: `&mut self` means no reference from `read` (which borrows the cell) is alive,
        // and the current value was never retired (only replaced values are), so this is its one
        // owner.
        drop(unsafe { current.into_owned() });
    }
}

/// Retires `value`, which no other thread can reach, through the epoch: it is destroyed, by
/// whichever thread collects it, once every thread pinned now has unpinned. Writers use it to
/// hand the epoch garbage of their own (a storm of retired nodes) the way a data structure
/// would after unlinking it.
pub fn defer_drop<U: Send + 'static>(value: Box<U>, guard: &Guard) {
    let shared = Owned::<U>::from(value).into_shared(guard);
    // SAFETY: `value` was owned by the caller and never published, so no other thread holds a
    // reference to it and it is retired once; `U: Send + 'static`, so any thread may destroy it
    // at any later time.
    unsafe { guard.defer_destroy(shared) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// Counts its drops.
    struct Tracked(Arc<AtomicUsize>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn readers_see_the_latest_value_and_every_value_is_freed_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let cell = EpochCell::new((0u64, Tracked(Arc::clone(&drops))));
        for i in 1..=100 {
            let guard = pin();
            cell.replace((i, Tracked(Arc::clone(&drops))), &guard);
            assert_eq!(cell.read(&guard).0, i);
            defer_drop(Box::new(Tracked(Arc::clone(&drops))), &guard);
        }
        // Retired values go once the epoch has moved on past every pin; flushing from an
        // unpinned thread moves it (bounded by a count, not by time).
        for _ in 0..10_000 {
            if drops.load(Ordering::SeqCst) == 200 {
                break;
            }
            pin().flush();
        }
        assert_eq!(drops.load(Ordering::SeqCst), 200, "100 replaced values and 100 deferred drops");
        drop(cell);
        assert_eq!(drops.load(Ordering::SeqCst), 201, "the cell frees its last value");
    }
}

//! The one place where Kairos's concurrent structures switch between std's synchronisation
//! primitives and [loom](https://docs.rs/loom)'s.
//!
//! A lock-free protocol is only as trustworthy as the model that checks it, and a model checks
//! only the code it runs. So the RCU domain, the rings, the seqlock FIB and the handlers' inboxes
//! take every atomic, lock, `Arc`, fence, thread local, wait-loop hint and shared cell from this
//! crate: a normal build gets std's, a build with `RUSTFLAGS="--cfg loom"` gets loom's, and each
//! crate's `tests/loom.rs` explores the same code that ships rather than a copy written for the
//! model. (The pattern is crossbeam's and tokio's private loom shims, made one crate so that
//! Kairos has one copy of it.)
//!
//! # Contract
//!
//! - Outside loom every item is std's own type or a wrapper that inlines to it: no cost, no
//!   allocation, no behaviour of its own beyond what each item's documentation states.
//! - Under loom the same names, with the same signatures, are loom's: they must be used inside
//!   `loom::model`, as the models do.
//! - [`UnsafeCell`] hands out raw pointers only inside a closure, as loom's does, so loom can see
//!   every access to it; reading or writing through the pointer is the caller's `unsafe`, argued
//!   where it is done. This crate itself has no `unsafe`.
//! - [`lock`] and [`try_lock`] ignore poisoning: a caller uses them for data that every
//!   critical section leaves consistent before anything in it can panic.
//! - `explore` (under loom only) runs a model and refuses one that explored a single
//!   schedule: such a model checks nothing about concurrency.

#![warn(missing_docs)]
// Everything here is a re-export or a safe wrapper; the `unsafe` of a shared cell's access
// belongs to the protocol that makes it sound, in the crate that uses the cell.
#![forbid(unsafe_code)]

use std::fmt;

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(loom)]
pub use loom::sync::{Arc, Mutex, MutexGuard};
#[cfg(loom)]
pub use loom::thread::yield_now;
/// A thread-local static: std's `thread_local!`, or loom's, which gives each model thread its
/// own value.
#[cfg(loom)]
pub use loom::thread_local;

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(loom))]
pub use std::thread::yield_now;
/// A thread-local static: std's `thread_local!`, or loom's, which gives each model thread its
/// own value.
#[cfg(not(loom))]
pub use std::thread_local;

/// Locks `mutex`, ignoring poisoning: a panic under the lock elsewhere does not make every later
/// lock panic too. For data whose critical sections leave it consistent before anything in them
/// can panic; each caller states why its data is such.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Tries to lock `mutex` without blocking; `None` when another thread holds it. Poisoning is
/// ignored, as by [`lock`].
pub fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// One step of a wait loop that may wait long (a grace period, a reader to come online): a spin
/// hint for the first 64 rounds, then yielding for 64 more, then sleeps of 20 µs (as liburcu's
/// QSBR waiter spins 100 times before it blocks). `round` counts from 0.
///
/// Under loom every round yields: loom explores only schedules in which a waiting thread lets
/// the others run, and has no time to sleep in.
pub fn backoff(round: u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if round < 64 {
            std::hint::spin_loop();
        } else if round < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
}

/// One step of a retry loop whose wait is a few nanoseconds (a seqlock reader waiting out a
/// write): a spin hint, or under loom a yield, for the reason given at [`backoff`].
#[inline]
pub fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// A cell shared between threads whose protocol, not the type system, decides who may touch it
/// when: `std::cell::UnsafeCell`, or under loom loom's, whose race detector then checks that the
/// protocol orders every write before the next access.
///
/// Its interface is loom's: [`with`](Self::with) and [`with_mut`](Self::with_mut) lend a raw
/// pointer to a closure, and loom counts the access as lasting exactly that long. The cell
/// itself is safe to use; dereferencing the pointer is `unsafe`, and the caller's `// SAFETY:`
/// argument says why no other thread reads (for a write) or writes (for a read) meanwhile.
///
/// Like std's cell it is `Send` when `T` is and never `Sync`: a structure that shares it between
/// threads says `unsafe impl Sync` and argues it.
pub struct UnsafeCell<T>(#[cfg(loom)] loom::cell::UnsafeCell<T>, #[cfg(not(loom))] std::cell::UnsafeCell<T>);

impl<T> UnsafeCell<T> {
    /// A cell holding `value`.
    #[cfg(loom)]
    #[track_caller]
    pub fn new(value: T) -> Self {
        Self(loom::cell::UnsafeCell::new(value))
    }

    /// A cell holding `value`.
    #[cfg(not(loom))]
    #[inline]
    pub const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a pointer through which it may read the value (not write it).
    ///
    /// Under loom this panics if a write by another thread is not ordered before this read.
    #[cfg(loom)]
    #[track_caller]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        self.0.with(f)
    }

    /// Calls `f` with a pointer through which it may read the value (not write it).
    ///
    /// Under loom this panics if a write by another thread is not ordered before this read.
    #[cfg(not(loom))]
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Calls `f` with a pointer through which it may read and write the value.
    ///
    /// Under loom this panics if another thread's access is not ordered before this one.
    #[cfg(loom)]
    #[track_caller]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        self.0.with_mut(f)
    }

    /// Calls `f` with a pointer through which it may read and write the value.
    ///
    /// Under loom this panics if another thread's access is not ordered before this one.
    #[cfg(not(loom))]
    #[inline]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }

    /// The pointer to the value, for an access that outlives a closure (several cells' values
    /// lent out at once). Outside loom only: loom tracks an access only for the length of a
    /// [`with`](Self::with) or [`with_mut`](Self::with_mut) call, so code that needs this pointer
    /// has a loom build that does without it.
    #[cfg(not(loom))]
    #[inline]
    pub const fn get(&self) -> *mut T {
        self.0.get()
    }
}

impl<T> fmt::Debug for UnsafeCell<T> {
    /// Shows no value: reading it here could race with the thread that owns it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnsafeCell").finish_non_exhaustive()
    }
}

/// Keeps a value on cache lines of its own, so a counter one core writes never shares a line with
/// anything another core writes. 128 bytes rather than 64: x86's adjacent-line prefetcher moves
/// lines in pairs, so a neighbour on the paired line would still be pulled back and forth.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Runs the loom model `f` over every schedule with at most `preemption_bound` preemptions
/// (`None`: no bound) and returns how many it explored; panics when that is one, since a model
/// that explores one schedule checks nothing about concurrency (a model whose threads never
/// meet, or one that ran outside loom's atomics).
#[cfg(loom)]
pub fn explore(preemption_bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) -> usize {
    let schedules = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&schedules);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemption_bound;
    builder.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    let n = schedules.load(std::sync::atomic::Ordering::Relaxed);
    assert!(n > 1, "loom explored {n} schedule(s)");
    n
}

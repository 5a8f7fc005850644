//! The synchronisation primitives the crate uses, switched to `loom`'s under `cfg(loom)`.
//!
//! Every atomic, lock, `Arc` and spin hint of the grace-period protocol goes through here, so the
//! loom models in `tests/loom.rs` explore the same code that ships. Real time does not exist
//! under loom: [`now_ns`] returns zero there, which makes time budgets never expire and leaves
//! the count limits in force.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

/// Locks `mutex`, ignoring poisoning: every critical section in this crate leaves the data
/// consistent before it can panic (callbacks never run under a lock).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Tries to lock `mutex` without blocking; `None` when another thread holds it.
pub(crate) fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// One step of a wait loop: a spin hint for the first `spins` rounds, then yielding, then short
/// sleeps (as liburcu's QSBR waiter spins 100 times before it blocks).
pub(crate) fn backoff(round: u32) {
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

/// Nanoseconds on a cheap monotonic clock (the TSC where stable); zero under loom.
#[inline]
pub(crate) fn now_ns() -> u64 {
    #[cfg(loom)]
    {
        0
    }
    #[cfg(not(loom))]
    {
        use std::sync::OnceLock;
        static CLOCK: OnceLock<(quanta::Clock, quanta::Instant)> = OnceLock::new();
        let (clock, origin) = CLOCK.get_or_init(|| {
            let clock = quanta::Clock::new();
            let origin = clock.now();
            (clock, origin)
        });
        clock.now().duration_since(*origin).as_nanos() as u64
    }
}

/// Keeps a value on a cache line of its own, so a reader's counter and the global grace-period
/// counter never share a line with anything another core writes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Source of [`thread_token`]s; a plain atomic even under loom, where it only hands out names.
static NEXT_THREAD_TOKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[cfg(loom)]
loom::thread_local! {
    static THREAD_TOKEN: u64 = NEXT_THREAD_TOKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}
#[cfg(not(loom))]
std::thread_local! {
    static THREAD_TOKEN: u64 = NEXT_THREAD_TOKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A number naming the calling thread, never 0 and never reused within the process (loom's
/// model threads each get their own).
pub(crate) fn thread_token() -> u64 {
    THREAD_TOKEN.with(|token| *token)
}

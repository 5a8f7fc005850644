//! The synchronisation primitives the crate uses, from `kairos-sync` (std's, or `loom`'s under
//! `cfg(loom)`), and the clock and thread tokens the grace-period protocol adds.
//!
//! Every atomic, lock, `Arc` and spin hint of the protocol goes through here, so the loom models
//! in `tests/loom.rs` explore the same code that ships. [`lock`] and [`try_lock`] ignore
//! poisoning, which is sound here because every critical section in this crate leaves the data
//! consistent before it can panic (callbacks never run under a lock). Real time does not exist
//! under loom: [`now_ns`] returns zero there, which makes time budgets never expire and leaves
//! the count limits in force.

pub(crate) use kairos_sync::{
    Arc, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, CachePadded, Mutex, MutexGuard, Ordering, backoff,
    fence, lock, try_lock,
};

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

/// Source of [`thread_token`]s; a plain atomic even under loom, where it only hands out names.
static NEXT_THREAD_TOKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

kairos_sync::thread_local! {
    static THREAD_TOKEN: u64 = NEXT_THREAD_TOKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A number naming the calling thread, never 0 and never reused within the process (loom's
/// model threads each get their own).
pub(crate) fn thread_token() -> u64 {
    THREAD_TOKEN.with(|token| *token)
}

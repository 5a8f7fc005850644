//! What a domain reports about itself: [`DomainStats`], filled in by each part that counts.
//!
//! A leaf module so that grace periods, the backlog and the stall watchdog each add their own
//! counters (`add_stats`) without knowing about one another or about the domain.

/// Counters of what the domain did; a consistent-enough snapshot via [`crate::Domain::stats`]
/// (each counter is read on its own, so counters moving meanwhile may disagree slightly).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DomainStats {
    /// Grace periods started (by writers, sealing, `synchronize` and the stall detector).
    pub grace_periods_started: u64,
    /// Callbacks accepted by `defer` (queued or run synchronously).
    pub callbacks_deferred: u64,
    /// Callbacks run so far.
    pub callbacks_run: u64,
    /// Callbacks waiting now.
    pub pending: u64,
    /// Most callbacks ever waiting at once.
    pub peak_pending: u64,
    /// Bytes retired and not yet freed (queued, held by readers, or waiting in a synchronous
    /// grace period).
    pub unreclaimed_bytes: u64,
    /// Most bytes ever retired and not yet freed at once.
    pub peak_unreclaimed_bytes: u64,
    /// Longest single callback a reader ran in a budgeted call (the "one callback" by which a
    /// call may pass its budget), in nanoseconds.
    pub reader_longest_callback_ns: u64,
    /// Reader calls that ran at least one callback.
    pub reader_reclaim_calls: u64,
    /// Longest single reclamation call on a reader thread, in nanoseconds.
    pub reader_longest_reclaim_ns: u64,
    /// Longest single run of callbacks on the reclaimer thread, in nanoseconds.
    pub reclaimer_longest_batch_ns: u64,
    /// Longest single run of callbacks on a writer (`Direct`, fallbacks), in nanoseconds.
    pub writer_longest_reclaim_ns: u64,
    /// Callbacks readers handed to the reclaimer (`Adaptive`).
    pub callbacks_spilled: u64,
    /// Callbacks run synchronously because the backlog was at the watermark.
    pub watermark_fallbacks: u64,
    /// Stalled readers reported.
    pub stalls_reported: u64,
}

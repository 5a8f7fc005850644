//! What a full ring does with a new entry, and what it reports back.

use std::fmt;
use std::str::FromStr;

/// The admission policy of a FIFO ring when a burst does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// Tail drop: the ring takes what fits and refuses the rest (DPDK's only behaviour).
    DropNewest,
    /// A full ring discards its oldest entries to admit the newest: the queue always holds the
    /// freshest `capacity` entries offered.
    DropOldest,
}

impl Overflow {
    /// The policy's name as command lines and reports spell it (`drop-newest`, `drop-oldest`).
    pub fn name(self) -> &'static str {
        match self {
            Overflow::DropNewest => "drop-newest",
            Overflow::DropOldest => "drop-oldest",
        }
    }
}

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not an [`Overflow`] policy's (the name as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown overflow policy '{0}' (use drop-newest or drop-oldest)")]
pub struct UnknownOverflow(pub String);

impl FromStr for Overflow {
    type Err = UnknownOverflow;
    fn from_str(s: &str) -> Result<Self, UnknownOverflow> {
        match s {
            "drop-newest" => Ok(Overflow::DropNewest),
            "drop-oldest" => Ok(Overflow::DropOldest),
            other => Err(UnknownOverflow(other.to_string())),
        }
    }
}

/// What one `enqueue_burst` did with the offered entries.
///
/// The ring took `offered[..taken]`; the caller still owns the rest. With
/// [`Overflow::DropOldest`] and in keyed rings the ring also handed `evicted` older (or replaced)
/// entries back through the caller's vector, which the caller now owns (typically: returns their
/// buffers to the pool).
///
/// A drop-oldest ring takes the whole burst except when the oldest queued entry is, at that
/// instant, still being written or read by a thread descheduled mid-burst: rather than wait for
/// that thread, it refuses the rest of the burst (counted as `dropped_newest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Admitted {
    /// Entries of the burst the ring took: `offered[..taken]` (keyed rings: how many entries
    /// went in or replaced a queued one).
    pub taken: usize,
    /// Entries appended to the caller's `evicted` vector by this call.
    pub evicted: usize,
}

/// A ring's counters, read at any time from any handle.
///
/// Every entry offered ends in exactly one of: still queued (`len`), `dequeued`,
/// `dropped_newest`, `dropped_oldest`, `replaced`, `invalid_key`. The stress test checks this
/// conservation law.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingStats {
    /// Entries the ring holds at most (distinct keys, for a keyed ring).
    pub capacity: usize,
    /// Entries queued when the counters were read.
    pub len: usize,
    /// Entries offered to the ring, over all producers.
    pub offered: u64,
    /// Entries handed to the consumer.
    pub dequeued: u64,
    /// Offered entries refused because the ring was full (tail drop).
    pub dropped_newest: u64,
    /// Queued entries discarded to admit newer ones (drop-oldest).
    pub dropped_oldest: u64,
    /// Queued entries replaced in place by a newer one with the same key (keyed rings).
    pub replaced: u64,
    /// Offered entries refused because their key was outside the ring's key space (keyed rings).
    pub invalid_key: u64,
}

impl RingStats {
    /// All drops, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_newest + self.dropped_oldest + self.replaced + self.invalid_key
    }
}

/// A ring could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// A capacity of zero was asked for.
    #[error("ring capacity must be at least 1")]
    ZeroCapacity,
    /// The capacity asked for (more than 2^32 entries).
    #[error("ring capacity {0} is too large (at most 2^32 entries)")]
    TooLarge(usize),
    /// A keyed ring with an empty key space.
    #[error("a keyed ring needs at least one key")]
    NoKeys,
}

pub(crate) fn check_capacity(capacity: usize) -> Result<(), RingError> {
    if capacity == 0 {
        Err(RingError::ZeroCapacity)
    } else if capacity as u64 > 1 << 32 {
        Err(RingError::TooLarge(capacity))
    } else {
        Ok(())
    }
}

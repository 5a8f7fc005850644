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

impl FromStr for Overflow {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "drop-newest" => Ok(Overflow::DropNewest),
            "drop-oldest" => Ok(Overflow::DropOldest),
            other => Err(format!("unknown overflow policy '{other}' (use drop-newest or drop-oldest)")),
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
    pub taken: usize,
    pub evicted: usize,
}

/// A ring's counters, read at any time from any handle.
///
/// Every entry offered ends in exactly one of: still queued (`len`), `dequeued`,
/// `dropped_newest`, `dropped_oldest`, `replaced`, `invalid_key`. The stress test checks this
/// conservation law.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingStats {
    pub capacity: usize,
    pub len: usize,
    /// Entries offered to the ring, over all producers.
    pub offered: u64,
    pub dequeued: u64,
    pub dropped_newest: u64,
    pub dropped_oldest: u64,
    pub replaced: u64,
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
    #[error("ring capacity must be at least 1")]
    ZeroCapacity,
    #[error("ring capacity {0} is too large (at most 2^32 entries)")]
    TooLarge(usize),
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

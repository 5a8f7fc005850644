//! Bridges: single-producer single-consumer message rings laid out in memory shared between two
//! processes (an application and the express lane's node), so neither makes a system call per
//! message and neither ever waits for the other.
//!
//! A bridge is one direction: the node runs one into the lane per application and one back. A
//! full bridge refuses the newest message (counted in the header, so both sides see what was
//! lost); a slow or dead peer therefore costs only the messages of its own bridge.
//!
//! # Trust
//!
//! The other side may be buggy or hostile, so nothing read from the region is trusted:
//! - The layout is read once, at [`Bridge::attach`], validated (magic, version, sizes within
//!   limits and within the region), and kept privately: a peer that rewrites the header later
//!   cannot move our slots or their sizes.
//! - Every access to the region is an atomic load or store of an aligned 64-bit word, message
//!   bytes included (copied word by word, relaxed, between the acquire and release of the
//!   positions), so a peer writing at any time is a data race in no one's memory model: we may
//!   read garbage, never cause undefined behaviour.
//! - A position read from the peer is accepted only within `slots` of our own (else
//!   [`Corrupt::Positions`]), a length only up to the slot's capacity (else
//!   [`Corrupt::Length`]); slot indices are our own position modulo our own slot count. So no
//!   access leaves the region and no loop runs longer than a message.
//! - Positions are `u64` counters that never wrap in practice (a message a nanosecond for 584
//!   years); they are compared with wrapping arithmetic anyway, so a peer's huge value is an
//!   error, never an overflow panic.
//!
//! # Layout
//!
//! All fields are native-endian `u64` words (both sides run on one machine); the header's three
//! parts sit on separate 128-byte lines so the producer's and consumer's stores do not share a
//! cache line (nor an adjacent-line prefetch pair).
//!
//! | offset | field | written by |
//! |---|---|---|
//! | 0 | magic, `"KAIROSBR"` as bytes ([`MAGIC`]) | `init` (last, with release) |
//! | 8 | version ([`VERSION`]) | `init` |
//! | 16 | slot count | `init` |
//! | 24 | slot size in bytes (a multiple of 8, slot header included) | `init` |
//! | 128 | producer position: messages published so far | producer |
//! | 136 | messages the producer refused for lack of room | producer |
//! | 144 | messages the producer refused as larger than a slot | producer |
//! | 152 | the producer's last heartbeat, ns (its clock; 0 = never) | producer |
//! | 160 | closed: 1 once the producer has sent its last message | producer |
//! | 256 | consumer position: messages consumed so far | consumer |
//! | 264 | the consumer's last heartbeat, ns (0 = never) | consumer |
//! | 384 | slot 0, then slot `i` at `384 + i * slot size` | |
//!
//! A slot: its message's length in bytes (offset 0), its time stamp in ns (offset 8), the
//! message bytes (offset 16, up to slot size minus 16; the last word zero-padded). The message
//! at position `p` lives in slot `p % slots`; any slot count from 1 is allowed, all usable.
//!
//! # Protocol
//!
//! The producer writes a slot (relaxed), then stores its position with release; the consumer
//! loads that position with acquire, reads the slot (relaxed), then stores its own position with
//! release; the producer loads the consumer's position with acquire before reusing a slot. Each
//! side caches how far it may go (room, or messages ready) and loads the other's position only
//! when that runs out. `tests/loom.rs` models the protocol, `tests/stress.rs` runs it between
//! threads, `tests/bridge_process.rs` between processes over a `kairos_sys::shm` region.
//!
//! # Memory
//!
//! A bridge lives in any [`BridgeMemory`]: [`HeapMemory`] for threads of one process, or
//! [`Mapped`] around a shared mapping (the one `unsafe` step a user takes: vouching that the
//! mapping outlives the bridge).

mod consumer;
mod memory;
mod producer;

pub use consumer::Consumer;
pub use memory::HeapMemory;
#[cfg(not(loom))]
pub use memory::Mapped;
pub use producer::Producer;

use std::sync::Arc;

use crate::sync::{AtomicU64, Ordering, SlotShadow};

/// The header's first word: `"KAIROSBR"` as native-endian bytes.
pub const MAGIC: u64 = u64::from_ne_bytes(*b"KAIROSBR");
/// The layout's version; [`Bridge::attach`] refuses any other.
pub const VERSION: u64 = 1;
/// Bytes before slot 0.
pub const HEADER_BYTES: usize = 3 * LINE_BYTES;
/// Bytes at the start of every slot before its message (length and time stamp).
pub const SLOT_HEADER_BYTES: usize = 16;
/// The smallest slot: its header and one word of message.
pub const MIN_SLOT_BYTES: usize = SLOT_HEADER_BYTES + 8;
/// The largest slot (1 MiB), so a peer's header cannot make us expect absurd sizes.
pub const MAX_SLOT_BYTES: usize = 1 << 20;
/// The most slots a bridge has (16 Mi).
pub const MAX_SLOTS: usize = 1 << 24;

const LINE_BYTES: usize = 128;
/// A cache line (x86-64, most ARM cores); `LINE_BYTES` is two, for the adjacent-line prefetcher.
const CACHE_LINE: usize = 64;
const WORD: usize = 8;
const LINE_WORDS: usize = LINE_BYTES / WORD;

// Word indices of the header's fields (see the module doc's table).
const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 1;
const SLOTS_AT: usize = 2;
const SLOT_BYTES_AT: usize = 3;
const SENT_AT: usize = LINE_WORDS;
const DROPPED_FULL_AT: usize = LINE_WORDS + 1;
const DROPPED_TOO_LARGE_AT: usize = LINE_WORDS + 2;
const PRODUCER_BEAT_AT: usize = LINE_WORDS + 3;
const CLOSED_AT: usize = LINE_WORDS + 4;
const RECEIVED_AT: usize = 2 * LINE_WORDS;
const CONSUMER_BEAT_AT: usize = 2 * LINE_WORDS + 1;
const HEADER_WORDS: usize = HEADER_BYTES / WORD;

/// Memory a bridge lives in, seen as 64-bit words.
///
/// `words` must return the same slice on every call (a slice that shrinks later makes the
/// bridge panic on an index, never read outside it).
pub trait BridgeMemory {
    /// The memory as words.
    fn words(&self) -> &[AtomicU64];
}

/// Memory shared with other holders in this process (to read a bridge's header beside its ends).
impl<M: BridgeMemory + ?Sized> BridgeMemory for Arc<M> {
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        (**self).words()
    }
}

/// Why a bridge layout is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// No slots, or more than [`MAX_SLOTS`].
    #[error("{slots} slots: a bridge has 1 to {MAX_SLOTS}")]
    Slots {
        /// The slot count asked for (or found).
        slots: u64,
    },
    /// A slot size that is not a multiple of 8 between [`MIN_SLOT_BYTES`] and
    /// [`MAX_SLOT_BYTES`].
    #[error(
        "slots of {slot_bytes} bytes: a slot is a multiple of 8 bytes from {MIN_SLOT_BYTES} to {MAX_SLOT_BYTES}"
    )]
    SlotBytes {
        /// The slot size asked for (or found).
        slot_bytes: u64,
    },
}

/// Why a bridge could not be set up in a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    /// The region cannot hold the header, or the layout its header states.
    #[error("the region has {have} bytes, the bridge needs {needs}")]
    TooSmall {
        /// The region's bytes.
        have: usize,
        /// The bytes the bridge needs.
        needs: usize,
    },
    /// The header does not start with [`MAGIC`]: not a bridge, or not initialised yet.
    #[error("no bridge in the region (first word {found:#018x})")]
    NotABridge {
        /// The first word found.
        found: u64,
    },
    /// The header is of another version of this layout.
    #[error("bridge layout version {found}, this side reads version {VERSION}")]
    Version {
        /// The version found.
        found: u64,
    },
    /// The header's layout is out of bounds.
    #[error("the bridge's header is invalid: {0}")]
    Layout(#[from] LayoutError),
    /// The region's first byte is not aligned to 8 bytes.
    #[error("the region is not aligned to 8 bytes")]
    Misaligned,
}

/// What the peer wrote makes no sense: the bridge cannot be used further (the same call fails
/// the same way again). The peer is buggy or hostile; tear the bridge down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Corrupt {
    /// The positions are not within one ring of each other.
    #[error("producer position {sent} and consumer position {received} are not within {slots} slots")]
    Positions {
        /// The producer's position (as read, or as kept by the producer).
        sent: u64,
        /// The consumer's position (as read, or as kept by the consumer).
        received: u64,
        /// The bridge's slot count.
        slots: u64,
    },
    /// A slot claims a message longer than it can hold.
    #[error("the message at position {position} claims {len} bytes, a slot holds at most {max}")]
    Length {
        /// The message's position.
        position: u64,
        /// The length found.
        len: u64,
        /// The most a slot holds.
        max: usize,
    },
}

/// Why a message was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Every slot holds a message the consumer has not read (counted as dropped for lack of
    /// room).
    #[error("the bridge is full")]
    Full,
    /// The message is longer than a slot holds (counted as dropped as too large).
    #[error("a message of {len} bytes: the bridge carries at most {max}")]
    TooLarge {
        /// The message's length.
        len: usize,
        /// The most a slot holds.
        max: usize,
    },
    /// The consumer's position makes no sense.
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
}

/// Why no message was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The next message is longer than the buffer given; it stays queued. A buffer of
    /// [`BridgeLayout::max_message`] bytes always suffices.
    #[error("the next message has {len} bytes, the buffer {capacity}")]
    BufferTooSmall {
        /// The message's length.
        len: usize,
        /// The buffer's length.
        capacity: usize,
    },
    /// The producer's position or a slot makes no sense.
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
}

/// A message received: its first `len` bytes are in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The message's length in bytes.
    pub len: usize,
    /// The time stamp its producer gave it, ns.
    pub stamp_ns: u64,
}

/// A bridge's shape: how many slots, of how many bytes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeLayout {
    slots: usize,
    slot_bytes: usize,
}

impl BridgeLayout {
    /// `slots` slots (1 to [`MAX_SLOTS`]) of `slot_bytes` bytes each, slot header included (a
    /// multiple of 8 from [`MIN_SLOT_BYTES`] to [`MAX_SLOT_BYTES`]; a multiple of 64 keeps
    /// neighbouring slots off each other's cache lines).
    pub fn new(slots: usize, slot_bytes: usize) -> Result<Self, LayoutError> {
        Self::check(slots as u64, slot_bytes as u64)
    }

    /// `slots` slots that each hold a message of at least `max_message` bytes: the slot is
    /// rounded up to whole 64-byte cache lines, so a producer filling one slot and a consumer
    /// reading its neighbour on another core do not share a line. (On the shared 2-core
    /// machine of `benches/bridge.rs`, where the two threads mostly take turns, 128- and
    /// 80-byte slots moved 64-byte messages equally fast within the noise.)
    /// [`new`](Self::new) sizes slots exactly.
    pub fn for_messages(slots: usize, max_message: usize) -> Result<Self, LayoutError> {
        let slot_bytes = max_message
            .checked_add(SLOT_HEADER_BYTES)
            .and_then(|n| n.checked_next_multiple_of(CACHE_LINE))
            .unwrap_or(usize::MAX);
        Self::new(slots, slot_bytes)
    }

    fn check(slots: u64, slot_bytes: u64) -> Result<Self, LayoutError> {
        if slots == 0 || slots > MAX_SLOTS as u64 {
            return Err(LayoutError::Slots { slots });
        }
        if slot_bytes < MIN_SLOT_BYTES as u64
            || slot_bytes > MAX_SLOT_BYTES as u64
            || !slot_bytes.is_multiple_of(8)
        {
            return Err(LayoutError::SlotBytes { slot_bytes });
        }
        // Within both limits the region is at most 16 TiB: it fits a 64-bit `usize`, so
        // `region_bytes` cannot overflow; a narrower `usize` refuses what it cannot address.
        let region = HEADER_BYTES as u64 + slots * slot_bytes;
        if usize::try_from(region).is_err() {
            return Err(LayoutError::Slots { slots });
        }
        Ok(Self { slots: slots as usize, slot_bytes: slot_bytes as usize })
    }

    /// The slot count.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// A slot's size in bytes, its header included.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// The longest message a slot holds, bytes.
    pub fn max_message(&self) -> usize {
        self.slot_bytes - SLOT_HEADER_BYTES
    }

    /// The bytes the bridge occupies: header and slots.
    pub fn region_bytes(&self) -> usize {
        HEADER_BYTES + self.slots * self.slot_bytes
    }

    fn slot_words(&self) -> usize {
        self.slot_bytes / WORD
    }
}

/// What a bridge's header says now. The peer writes half of these fields: they are reported,
/// never used to reach memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeStats {
    /// The slot count (our own copy).
    pub slots: usize,
    /// Messages the producer published.
    pub sent: u64,
    /// Messages the consumer consumed.
    pub received: u64,
    /// Messages the producer refused because the bridge was full.
    pub dropped_full: u64,
    /// Messages the producer refused as larger than a slot.
    pub dropped_too_large: u64,
    /// The producer's last heartbeat, ns on its clock (0: never).
    pub producer_beat_ns: u64,
    /// The consumer's last heartbeat, ns on its clock (0: never).
    pub consumer_beat_ns: u64,
    /// Whether the producer said it sends no more.
    pub closed: bool,
}

impl BridgeStats {
    /// Messages queued (sent and not consumed), at most the slot count.
    pub fn queued(&self) -> u64 {
        self.sent.wrapping_sub(self.received).min(self.slots as u64)
    }
}

/// A bridge in a region: set up by [`init`](Self::init) on the creating side and
/// [`attach`](Self::attach) on the other, then turned into its producer or consumer end (or
/// both, for two threads of one process).
#[derive(Debug)]
pub struct Bridge<M> {
    memory: Arc<M>,
    layout: BridgeLayout,
    shadow: SlotShadow,
}

impl<M: BridgeMemory> Bridge<M> {
    /// Writes a fresh header for `layout` into `memory` (positions and counters zero, not
    /// closed), the magic last with release so that an attaching side sees a whole header.
    /// For a new region, or one no peer uses any more: a peer still using it reads garbage.
    pub fn init(memory: M, layout: BridgeLayout) -> Result<Self, BridgeError> {
        let words = memory.words();
        let needs = layout.region_bytes();
        if words.len() * WORD < needs {
            return Err(BridgeError::TooSmall { have: words.len() * WORD, needs });
        }
        words[MAGIC_AT].store(0, Ordering::Relaxed);
        for word in &words[1..HEADER_WORDS] {
            word.store(0, Ordering::Relaxed);
        }
        words[VERSION_AT].store(VERSION, Ordering::Relaxed);
        words[SLOTS_AT].store(layout.slots as u64, Ordering::Relaxed);
        words[SLOT_BYTES_AT].store(layout.slot_bytes as u64, Ordering::Relaxed);
        words[MAGIC_AT].store(MAGIC, Ordering::Release);
        Ok(Self { memory: Arc::new(memory), layout, shadow: SlotShadow::new(layout.slots) })
    }

    /// Reads and validates the header `init` wrote into `memory` (perhaps in another process):
    /// the magic, the version, and a layout within limits that fits the region.
    pub fn attach(memory: M) -> Result<Self, BridgeError> {
        let words = memory.words();
        let have = words.len() * WORD;
        if have < HEADER_BYTES {
            return Err(BridgeError::TooSmall { have, needs: HEADER_BYTES });
        }
        let found = words[MAGIC_AT].load(Ordering::Acquire);
        if found != MAGIC {
            return Err(BridgeError::NotABridge { found });
        }
        let version = words[VERSION_AT].load(Ordering::Relaxed);
        if version != VERSION {
            return Err(BridgeError::Version { found: version });
        }
        let layout = BridgeLayout::check(
            words[SLOTS_AT].load(Ordering::Relaxed),
            words[SLOT_BYTES_AT].load(Ordering::Relaxed),
        )?;
        let needs = layout.region_bytes();
        if have < needs {
            return Err(BridgeError::TooSmall { have, needs });
        }
        Ok(Self { memory: Arc::new(memory), layout, shadow: SlotShadow::new(layout.slots) })
    }

    /// The bridge's layout (our validated copy).
    pub fn layout(&self) -> BridgeLayout {
        self.layout
    }

    /// The memory the bridge lives in (to name a mapping's file, say).
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// A snapshot of the header's positions and counters.
    pub fn stats(&self) -> BridgeStats {
        stats(self.memory.words(), self.layout)
    }

    /// The producer end, resuming at the position (and with the counters) the header holds.
    pub fn into_producer(self) -> Producer<M> {
        let words = self.memory.words();
        let sent = words[SENT_AT].load(Ordering::Relaxed);
        let dropped_full = words[DROPPED_FULL_AT].load(Ordering::Relaxed);
        let dropped_too_large = words[DROPPED_TOO_LARGE_AT].load(Ordering::Relaxed);
        let slot = (sent % self.layout.slots as u64) as usize;
        Producer {
            memory: self.memory,
            layout: self.layout,
            shadow: self.shadow,
            sent,
            slot,
            room: 0,
            dropped_full,
            dropped_too_large,
        }
    }

    /// The consumer end, resuming at the position the header holds.
    pub fn into_consumer(self) -> Consumer<M> {
        let received = self.memory.words()[RECEIVED_AT].load(Ordering::Relaxed);
        let slot = (received % self.layout.slots as u64) as usize;
        Consumer { memory: self.memory, layout: self.layout, shadow: self.shadow, received, slot, ready: 0 }
    }

    /// Both ends, for two threads of one process.
    pub fn split(self) -> (Producer<M>, Consumer<M>) {
        let other =
            Self { memory: Arc::clone(&self.memory), layout: self.layout, shadow: self.shadow.clone() };
        (self.into_producer(), other.into_consumer())
    }
}

fn stats(words: &[AtomicU64], layout: BridgeLayout) -> BridgeStats {
    let load = |at: usize| words[at].load(Ordering::Relaxed);
    BridgeStats {
        slots: layout.slots,
        sent: load(SENT_AT),
        received: load(RECEIVED_AT),
        dropped_full: load(DROPPED_FULL_AT),
        dropped_too_large: load(DROPPED_TOO_LARGE_AT),
        producer_beat_ns: load(PRODUCER_BEAT_AT),
        consumer_beat_ns: load(CONSUMER_BEAT_AT),
        closed: load(CLOSED_AT) != 0,
    }
}

/// The words of slot `slot` (an index below the slot count, which `attach`/`init` checked fits).
#[inline]
fn slot_words(words: &[AtomicU64], layout: BridgeLayout, slot: usize) -> &[AtomicU64] {
    let n = layout.slot_words();
    let first = HEADER_WORDS + slot * n;
    &words[first..first + n]
}

#[cfg(all(test, not(loom)))]
mod tests;

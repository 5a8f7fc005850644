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

/// The producer end: the only writer of the slots, its position and its counters. It keeps all
/// of them privately and only publishes them: what the region says about them is never read
/// back (but once, when the end is made).
#[derive(Debug)]
pub struct Producer<M> {
    memory: Arc<M>,
    layout: BridgeLayout,
    shadow: SlotShadow,
    /// Messages published: the next message's position.
    sent: u64,
    /// `sent % slots`, kept to spare a division per message.
    slot: usize,
    /// Slots known free (from the consumer's position when last loaded).
    room: u64,
    dropped_full: u64,
    dropped_too_large: u64,
}

impl<M: BridgeMemory> Producer<M> {
    /// Sends `message` with time stamp `stamp_ns`, or refuses it (and counts it) when the bridge
    /// is full or the message longer than a slot. Never waits.
    #[inline]
    pub fn try_send(&mut self, message: &[u8], stamp_ns: u64) -> Result<(), SendError> {
        self.check_size(message)?;
        if self.room == 0 && self.refresh()? == 0 {
            self.count_full(1);
            return Err(SendError::Full);
        }
        self.write(message, stamp_ns);
        self.publish();
        Ok(())
    }

    /// Sends the longest prefix of `messages` that fits, all with time stamp `stamp_ns`, and
    /// publishes them with one store; the rest are refused for lack of room (and counted).
    /// Returns how many were sent. A message longer than a slot refuses the whole burst before
    /// anything is sent (and is counted once).
    pub fn try_send_burst(&mut self, messages: &[&[u8]], stamp_ns: u64) -> Result<usize, SendError> {
        for message in messages {
            self.check_size(message)?;
        }
        let want = messages.len() as u64;
        if self.room < want {
            self.refresh()?;
        }
        let n = self.room.min(want) as usize;
        for message in &messages[..n] {
            self.write(message, stamp_ns);
        }
        if n > 0 {
            self.publish();
        }
        self.count_full(messages.len() - n);
        Ok(n)
    }

    /// Records `now_ns` as the producer's last sign of life, for the consumer to watch.
    pub fn beat(&mut self, now_ns: u64) {
        self.memory.words()[PRODUCER_BEAT_AT].store(now_ns, Ordering::Relaxed);
    }

    /// Says that no message follows: a consumer that sees [`Consumer::producer_closed`] and
    /// then finds the bridge empty has every message. (A producer that dies never closes.)
    pub fn close(self) {
        self.memory.words()[CLOSED_AT].store(1, Ordering::Release);
    }

    /// A snapshot of the header.
    pub fn stats(&self) -> BridgeStats {
        stats(self.memory.words(), self.layout)
    }

    /// The bridge's layout.
    pub fn layout(&self) -> BridgeLayout {
        self.layout
    }

    /// The memory the bridge lives in.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    #[inline]
    fn check_size(&mut self, message: &[u8]) -> Result<(), SendError> {
        let max = self.layout.max_message();
        if message.len() > max {
            self.dropped_too_large = self.dropped_too_large.wrapping_add(1);
            self.memory.words()[DROPPED_TOO_LARGE_AT].store(self.dropped_too_large, Ordering::Relaxed);
            return Err(SendError::TooLarge { len: message.len(), max });
        }
        Ok(())
    }

    #[inline]
    fn count_full(&mut self, refused: usize) {
        if refused > 0 {
            self.dropped_full = self.dropped_full.wrapping_add(refused as u64);
            self.memory.words()[DROPPED_FULL_AT].store(self.dropped_full, Ordering::Relaxed);
        }
    }

    /// Loads the consumer's position: how many slots are free.
    #[cold]
    fn refresh(&mut self) -> Result<u64, Corrupt> {
        let slots = self.layout.slots as u64;
        // Acquire: the consumer's reads of the slots it released happen before our rewrites.
        let received = self.memory.words()[RECEIVED_AT].load(Ordering::Acquire);
        let queued = self.sent.wrapping_sub(received);
        if queued > slots {
            return Err(Corrupt::Positions { sent: self.sent, received, slots });
        }
        self.room = slots - queued;
        Ok(self.room)
    }

    /// Writes the next slot (the caller made sure it is free); publishes nothing.
    #[inline]
    fn write(&mut self, message: &[u8], stamp_ns: u64) {
        self.shadow.fill(self.slot);
        let slot = slot_words(self.memory.words(), self.layout, self.slot);
        slot[0].store(message.len() as u64, Ordering::Relaxed);
        slot[1].store(stamp_ns, Ordering::Relaxed);
        store_bytes(&slot[2..], message);
        self.sent = self.sent.wrapping_add(1);
        self.room -= 1;
        self.slot += 1;
        if self.slot == self.layout.slots {
            self.slot = 0;
        }
    }

    #[inline]
    fn publish(&self) {
        // Release: the slots written before are visible to a consumer that acquires this.
        self.memory.words()[SENT_AT].store(self.sent, Ordering::Release);
    }
}

/// The consumer end: the only writer of its position and heartbeat.
#[derive(Debug)]
pub struct Consumer<M> {
    memory: Arc<M>,
    layout: BridgeLayout,
    shadow: SlotShadow,
    /// Messages consumed: the next message's position.
    received: u64,
    /// `received % slots`.
    slot: usize,
    /// Messages known published (from the producer's position when last loaded).
    ready: u64,
}

impl<M: BridgeMemory> Consumer<M> {
    /// Copies the next message into `buffer` and returns its length and time stamp, or `None`
    /// when the bridge is empty. Never waits. A message longer than `buffer` stays queued
    /// ([`RecvError::BufferTooSmall`]).
    #[inline]
    pub fn try_recv(&mut self, buffer: &mut [u8]) -> Result<Option<Received>, RecvError> {
        if self.ready == 0 && self.refresh()? == 0 {
            return Ok(None);
        }
        let received = self.read(buffer)?;
        self.publish();
        Ok(Some(received))
    }

    /// Receives up to `max` messages, each copied into `buffer` and handed to `each(message,
    /// stamp_ns)`, and releases their slots with one store. Returns how many. On an error, the
    /// messages handed over before it are consumed (and released) and the error returned.
    pub fn try_recv_burst(
        &mut self,
        buffer: &mut [u8],
        max: usize,
        mut each: impl FnMut(&[u8], u64),
    ) -> Result<usize, RecvError> {
        if (self.ready as usize) < max {
            self.refresh()?;
        }
        let want = self.ready.min(max as u64) as usize;
        let mut n = 0;
        let mut outcome = Ok(());
        while n < want {
            match self.read(buffer) {
                Ok(r) => each(&buffer[..r.len], r.stamp_ns),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
            n += 1;
        }
        if n > 0 {
            self.publish();
        }
        outcome.map(|()| n)
    }

    /// Whether the producer said it sends no more. Load this before the last
    /// [`try_recv`](Self::try_recv): once it is true, an empty bridge means every message was
    /// received.
    pub fn producer_closed(&self) -> bool {
        self.memory.words()[CLOSED_AT].load(Ordering::Acquire) != 0
    }

    /// Records `now_ns` as the consumer's last sign of life, for the producer to watch.
    pub fn beat(&mut self, now_ns: u64) {
        self.memory.words()[CONSUMER_BEAT_AT].store(now_ns, Ordering::Relaxed);
    }

    /// A snapshot of the header.
    pub fn stats(&self) -> BridgeStats {
        stats(self.memory.words(), self.layout)
    }

    /// The bridge's layout.
    pub fn layout(&self) -> BridgeLayout {
        self.layout
    }

    /// The memory the bridge lives in.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Loads the producer's position: how many messages are ready.
    #[cold]
    fn refresh(&mut self) -> Result<u64, Corrupt> {
        let slots = self.layout.slots as u64;
        // Acquire: the producer's writes of the slots it published happen before our reads.
        let sent = self.memory.words()[SENT_AT].load(Ordering::Acquire);
        let ready = sent.wrapping_sub(self.received);
        if ready > slots {
            return Err(Corrupt::Positions { sent, received: self.received, slots });
        }
        self.ready = ready;
        Ok(ready)
    }

    /// Reads the next slot (the caller made sure it is published) and moves past it; releases
    /// nothing.
    #[inline]
    fn read(&mut self, buffer: &mut [u8]) -> Result<Received, RecvError> {
        self.shadow.empty(self.slot);
        let slot = slot_words(self.memory.words(), self.layout, self.slot);
        let max = self.layout.max_message();
        // Read once and checked before use: the peer may change it under us.
        let len = slot[0].load(Ordering::Relaxed);
        if len > max as u64 {
            return Err(Corrupt::Length { position: self.received, len, max }.into());
        }
        let len = len as usize;
        if len > buffer.len() {
            return Err(RecvError::BufferTooSmall { len, capacity: buffer.len() });
        }
        let stamp_ns = slot[1].load(Ordering::Relaxed);
        load_bytes(&slot[2..], &mut buffer[..len]);
        self.received = self.received.wrapping_add(1);
        self.ready -= 1;
        self.slot += 1;
        if self.slot == self.layout.slots {
            self.slot = 0;
        }
        Ok(Received { len, stamp_ns })
    }

    #[inline]
    fn publish(&self) {
        // Release: our reads of the slots happen before the producer's rewrites of them.
        self.memory.words()[RECEIVED_AT].store(self.received, Ordering::Release);
    }
}

/// Stores `bytes` into `words` (which has room for them), the last word zero-padded.
#[inline]
fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    let mut chunks = bytes.chunks_exact(WORD);
    for (word, chunk) in words.iter().zip(&mut chunks) {
        let mut w = [0u8; WORD];
        w.copy_from_slice(chunk);
        word.store(u64::from_ne_bytes(w), Ordering::Relaxed);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; WORD];
        w[..rest.len()].copy_from_slice(rest);
        words[bytes.len() / WORD].store(u64::from_ne_bytes(w), Ordering::Relaxed);
    }
}

/// Loads `out.len()` bytes from `words` (which holds at least that many).
#[inline]
fn load_bytes(words: &[AtomicU64], out: &mut [u8]) {
    let len = out.len();
    let mut chunks = out.chunks_exact_mut(WORD);
    for (word, chunk) in words.iter().zip(&mut chunks) {
        chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let w = words[len / WORD].load(Ordering::Relaxed).to_ne_bytes();
        rest.copy_from_slice(&w[..rest.len()]);
    }
}

/// Zeroed memory of this process for a bridge between its threads, its words aligned to 128
/// bytes (so the header's lines are cache lines).
#[derive(Debug)]
pub struct HeapMemory {
    #[cfg(not(loom))]
    lines: Box<[Line]>,
    #[cfg(loom)]
    words: Box<[AtomicU64]>,
}

/// One 128-byte line of words.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(C, align(128))]
struct Line([AtomicU64; LINE_WORDS]);

impl HeapMemory {
    /// At least `bytes` bytes (rounded up to 128), zeroed.
    pub fn new(bytes: usize) -> Self {
        #[cfg(not(loom))]
        {
            let lines = bytes.div_ceil(LINE_BYTES);
            Self { lines: (0..lines).map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0)))).collect() }
        }
        #[cfg(loom)]
        {
            Self { words: (0..bytes.div_ceil(WORD)).map(|_| AtomicU64::new(0)).collect() }
        }
    }

    /// Enough memory for `layout`.
    pub fn for_layout(layout: BridgeLayout) -> Self {
        Self::new(layout.region_bytes())
    }
}

impl BridgeMemory for HeapMemory {
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        #[cfg(not(loom))]
        // SAFETY: `Line` is `repr(C)` around an array of `LINE_WORDS` atomics, 128 bytes with an
        // alignment of 128, so it has no padding and a boxed slice of lines is one contiguous
        // run of `lines.len() * LINE_WORDS` initialised atomics; the slice borrows `self`.
        return unsafe {
            std::slice::from_raw_parts(self.lines.as_ptr().cast::<AtomicU64>(), self.lines.len() * LINE_WORDS)
        };
        #[cfg(loom)]
        return &self.words;
    }
}

/// Memory mapped from elsewhere (a region shared with another process), owned by `R` (the
/// mapping's handle, such as `kairos_sys::shm::SharedRegion`) and seen as words.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct Mapped<R> {
    words: std::ptr::NonNull<AtomicU64>,
    len: usize,
    owner: R,
}

#[cfg(not(loom))]
impl<R> Mapped<R> {
    /// Sees the `len` bytes at `ptr` (rounded down to whole words) as a bridge's memory, for as
    /// long as `owner`, which moves in, lives. Refuses a null or misaligned `ptr`.
    ///
    /// # Safety
    ///
    /// For as long as `owner` lives, `ptr` is valid for reads and writes of `len` bytes (the
    /// mapping `owner` holds: moving `owner` must not move the memory), and nothing in this
    /// process reaches those bytes other than through atomic operations. Other processes may
    /// write them in any way: their writes are outside this process's memory model, and every
    /// access this process makes is an atomic load or store of an aligned word, which the
    /// hardware performs whole whatever runs beside it.
    pub unsafe fn new(owner: R, ptr: *mut u8, len: usize) -> Result<Self, BridgeError> {
        let words = std::ptr::NonNull::new(ptr.cast::<AtomicU64>()).ok_or(BridgeError::Misaligned)?;
        if !(ptr as usize).is_multiple_of(std::mem::align_of::<AtomicU64>()) {
            return Err(BridgeError::Misaligned);
        }
        Ok(Self { words, len: len / WORD, owner })
    }

    /// The mapping's owner.
    pub fn owner(&self) -> &R {
        &self.owner
    }
}

// SAFETY: the words are atomics, which any thread may access, and they stay valid for as long
// as `owner` lives (the contract of `new`); moving the `Mapped` to another thread moves the
// owner with it, hence `R: Send`.
#[cfg(not(loom))]
unsafe impl<R: Send> Send for Mapped<R> {}
// SAFETY: shared access only ever reaches the words through atomic operations, so any number
// of threads may hold `&Mapped`; `owner()` lends `&R` across threads, hence `R: Sync`.
#[cfg(not(loom))]
unsafe impl<R: Sync> Sync for Mapped<R> {}

#[cfg(not(loom))]
impl<R> BridgeMemory for Mapped<R> {
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `new`'s contract: the pointer is non-null, aligned for `AtomicU64` (checked
        // there) and valid for `len` words for as long as `owner`, a field of `self`, lives, so
        // for the borrow of `self`; this process reaches the memory only through these atomics.
        // The bytes may hold anything (another process writes them): every bit pattern is a
        // valid `AtomicU64`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr(), self.len) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A layout whose slots hold exactly `max_message` bytes (a multiple of 8).
    fn exact(slots: usize, max_message: usize) -> BridgeLayout {
        BridgeLayout::new(slots, SLOT_HEADER_BYTES + max_message).unwrap()
    }

    fn bridge(slots: usize, max_message: usize) -> (Producer<HeapMemory>, Consumer<HeapMemory>) {
        let layout = exact(slots, max_message);
        Bridge::init(HeapMemory::for_layout(layout), layout).unwrap().split()
    }

    #[test]
    fn layouts_are_checked() {
        assert_eq!(BridgeLayout::new(0, 64), Err(LayoutError::Slots { slots: 0 }));
        assert_eq!(
            BridgeLayout::new(MAX_SLOTS + 1, 64),
            Err(LayoutError::Slots { slots: MAX_SLOTS as u64 + 1 })
        );
        assert_eq!(BridgeLayout::new(1, 16), Err(LayoutError::SlotBytes { slot_bytes: 16 }));
        assert_eq!(BridgeLayout::new(1, 30), Err(LayoutError::SlotBytes { slot_bytes: 30 }));
        assert!(BridgeLayout::new(1, MAX_SLOT_BYTES + 8).is_err());
        let l = BridgeLayout::new(3, 80).unwrap();
        assert_eq!((l.slots(), l.slot_bytes(), l.max_message()), (3, 80, 64));
        assert_eq!(l.region_bytes(), HEADER_BYTES + 3 * 80);
        let l = BridgeLayout::for_messages(3, 61).unwrap();
        assert_eq!((l.slot_bytes(), l.max_message()), (128, 112));
        assert_eq!(BridgeLayout::for_messages(1, 48).unwrap().slot_bytes(), 64);
        assert_eq!(BridgeLayout::for_messages(1, 0).unwrap().slot_bytes(), 64);
        assert!(BridgeLayout::for_messages(1, usize::MAX).is_err());
        assert!(BridgeLayout::for_messages(1, usize::MAX - 70).is_err());
    }

    #[test]
    fn messages_arrive_whole_and_in_order_with_their_stamps() {
        let (mut tx, mut rx) = bridge(3, 40);
        let mut buf = [0u8; 40];
        assert_eq!(rx.try_recv(&mut buf), Ok(None));
        for round in 0..10u8 {
            for len in [0usize, 1, 7, 8, 9, 40] {
                let msg: Vec<u8> = (0..len as u8).map(|i| i ^ round).collect();
                tx.try_send(&msg, u64::from(round) << 32 | len as u64).unwrap();
                let r = rx.try_recv(&mut buf).unwrap().unwrap();
                assert_eq!(r, Received { len, stamp_ns: u64::from(round) << 32 | len as u64 });
                assert_eq!(&buf[..len], &msg[..]);
            }
        }
        assert_eq!(rx.try_recv(&mut buf), Ok(None));
        let s = rx.stats();
        assert_eq!((s.sent, s.received, s.queued(), s.dropped_full), (60, 60, 0, 0));
    }

    #[test]
    fn a_full_bridge_refuses_and_counts() {
        for slots in [1, 2, 5] {
            let (mut tx, mut rx) = bridge(slots, 8);
            for i in 0..slots as u64 {
                tx.try_send(&i.to_ne_bytes(), i).unwrap();
            }
            assert_eq!(tx.try_send(b"x", 0), Err(SendError::Full));
            assert_eq!(tx.try_send(b"y", 0), Err(SendError::Full));
            let s = tx.stats();
            assert_eq!((s.sent, s.dropped_full, s.queued()), (slots as u64, 2, slots as u64));
            let mut buf = [0u8; 8];
            assert_eq!(rx.try_recv(&mut buf).unwrap().unwrap().stamp_ns, 0);
            tx.try_send(b"z", 99).unwrap();
            for i in 1..slots as u64 {
                assert_eq!(rx.try_recv(&mut buf).unwrap().unwrap().stamp_ns, i);
            }
            assert_eq!(rx.try_recv(&mut buf).unwrap(), Some(Received { len: 1, stamp_ns: 99 }));
            assert_eq!(&buf[..1], b"z");
            assert_eq!(rx.try_recv(&mut buf), Ok(None));
        }
    }

    #[test]
    fn too_large_messages_and_small_buffers() {
        let (mut tx, mut rx) = bridge(2, 8);
        assert_eq!(tx.try_send(&[0; 9], 0), Err(SendError::TooLarge { len: 9, max: 8 }));
        assert_eq!(tx.stats().dropped_too_large, 1);
        tx.try_send(&[7; 8], 1).unwrap();
        let mut small = [0u8; 4];
        assert_eq!(rx.try_recv(&mut small), Err(RecvError::BufferTooSmall { len: 8, capacity: 4 }));
        let mut buf = [0u8; 8];
        assert_eq!(rx.try_recv(&mut buf), Ok(Some(Received { len: 8, stamp_ns: 1 })));
        assert_eq!(buf, [7; 8]);
    }

    #[test]
    fn bursts_take_what_fits() {
        let (mut tx, mut rx) = bridge(3, 8);
        let msgs: Vec<&[u8]> = vec![b"a", b"bb", b"ccc", b"dddd"];
        assert_eq!(tx.try_send_burst(&msgs, 5), Ok(3));
        assert_eq!(tx.stats().dropped_full, 1);
        assert_eq!(tx.try_send_burst(&[b"123456789"], 5), Err(SendError::TooLarge { len: 9, max: 8 }));
        let mut got = Vec::new();
        let mut buf = [0u8; 8];
        assert_eq!(rx.try_recv_burst(&mut buf, 2, |m, t| got.push((m.to_vec(), t))), Ok(2));
        assert_eq!(tx.try_send_burst(&msgs[3..], 6), Ok(1));
        assert_eq!(rx.try_recv_burst(&mut buf, 10, |m, t| got.push((m.to_vec(), t))), Ok(2));
        assert_eq!(rx.try_recv_burst(&mut buf, 10, |_, _| panic!("empty")), Ok(0));
        let expected: Vec<(Vec<u8>, u64)> =
            vec![(b"a".to_vec(), 5), (b"bb".to_vec(), 5), (b"ccc".to_vec(), 5), (b"dddd".to_vec(), 6)];
        assert_eq!(got, expected);
    }

    #[test]
    fn attach_reads_what_init_wrote_and_resumes_positions() {
        let layout = exact(4, 16);
        let memory = Arc::new(HeapMemory::for_layout(layout));
        let (mut tx, _) = Bridge::init(Arc::clone(&memory), layout).unwrap().split();
        tx.try_send(b"one", 1).unwrap();
        tx.try_send(b"two", 2).unwrap();
        tx.beat(1234);
        tx.close();
        let other = Bridge::attach(Arc::clone(&memory)).unwrap();
        assert_eq!(other.layout(), layout);
        let mut rx = other.into_consumer();
        assert!(rx.producer_closed());
        let mut buf = [0u8; 16];
        assert_eq!(rx.try_recv(&mut buf).unwrap().unwrap().stamp_ns, 1);
        drop(rx);
        // A consumer attached later resumes after the message already consumed.
        let mut rx = Bridge::attach(Arc::clone(&memory)).unwrap().into_consumer();
        assert_eq!(rx.try_recv(&mut buf).unwrap().unwrap().stamp_ns, 2);
        assert_eq!(rx.try_recv(&mut buf), Ok(None));
        let s = rx.stats();
        assert_eq!((s.sent, s.received, s.producer_beat_ns, s.closed), (2, 2, 1234, true));
    }

    #[test]
    fn garbage_headers_are_errors() {
        let layout = exact(4, 16);
        let memory = Arc::new(HeapMemory::for_layout(layout));
        assert_eq!(Bridge::attach(Arc::clone(&memory)).unwrap_err(), BridgeError::NotABridge { found: 0 });
        assert!(matches!(Bridge::attach(HeapMemory::new(100)), Err(BridgeError::TooSmall { have: 128, .. })));
        assert!(matches!(
            Bridge::init(HeapMemory::new(HEADER_BYTES), layout),
            Err(BridgeError::TooSmall { have: HEADER_BYTES, .. })
        ));
        Bridge::init(Arc::clone(&memory), layout).unwrap();
        let words = memory.words();
        words[VERSION_AT].store(2, Ordering::Relaxed);
        assert_eq!(Bridge::attach(Arc::clone(&memory)).unwrap_err(), BridgeError::Version { found: 2 });
        words[VERSION_AT].store(VERSION, Ordering::Relaxed);
        words[SLOTS_AT].store(0, Ordering::Relaxed);
        assert_eq!(
            Bridge::attach(Arc::clone(&memory)).unwrap_err(),
            BridgeError::Layout(LayoutError::Slots { slots: 0 })
        );
        words[SLOTS_AT].store(u64::MAX, Ordering::Relaxed);
        assert!(matches!(Bridge::attach(Arc::clone(&memory)), Err(BridgeError::Layout(_))));
        words[SLOTS_AT].store(5, Ordering::Relaxed);
        assert!(matches!(Bridge::attach(Arc::clone(&memory)), Err(BridgeError::TooSmall { .. })));
        words[SLOTS_AT].store(4, Ordering::Relaxed);
        words[SLOT_BYTES_AT].store(33, Ordering::Relaxed);
        assert!(matches!(Bridge::attach(Arc::clone(&memory)), Err(BridgeError::Layout(_))));
        words[SLOT_BYTES_AT].store(layout.slot_bytes() as u64, Ordering::Relaxed);
        assert!(Bridge::attach(Arc::clone(&memory)).is_ok());
        for (i, word) in words.iter().enumerate() {
            word.store(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1), Ordering::Relaxed);
        }
        assert!(Bridge::attach(memory).is_err());
    }

    #[test]
    fn a_hostile_producer_is_reported_not_followed() {
        let layout = exact(4, 16);
        let memory = Arc::new(HeapMemory::for_layout(layout));
        let mut rx = Bridge::init(Arc::clone(&memory), layout).unwrap().into_consumer();
        let words = memory.words();
        let mut buf = [0u8; 16];
        // A position beyond one ring ahead.
        words[SENT_AT].store(5, Ordering::Release);
        assert_eq!(rx.try_recv(&mut buf), Err(Corrupt::Positions { sent: 5, received: 0, slots: 4 }.into()));
        assert!(rx.try_recv_burst(&mut buf, 4, |_, _| ()).is_err());
        // A position behind ours.
        words[SENT_AT].store(u64::MAX, Ordering::Release);
        assert!(matches!(rx.try_recv(&mut buf), Err(RecvError::Corrupt(Corrupt::Positions { .. }))));
        // A length beyond the slot, then a sane one: the bad message is not consumed.
        words[SENT_AT].store(1, Ordering::Release);
        words[HEADER_WORDS].store(u64::MAX, Ordering::Relaxed);
        let bad = Corrupt::Length { position: 0, len: u64::MAX, max: 16 };
        assert_eq!(rx.try_recv(&mut buf), Err(bad.into()));
        assert_eq!(rx.try_recv_burst(&mut buf, 1, |_, _| ()), Err(bad.into()));
        words[HEADER_WORDS].store(17, Ordering::Relaxed);
        assert!(rx.try_recv(&mut buf).is_err());
        words[HEADER_WORDS].store(3, Ordering::Relaxed);
        assert_eq!(rx.try_recv(&mut buf), Ok(Some(Received { len: 3, stamp_ns: 0 })));
        assert_eq!(rx.stats().received, 1);
    }

    #[test]
    fn a_hostile_consumer_is_reported_not_followed() {
        let layout = exact(2, 8);
        let memory = Arc::new(HeapMemory::for_layout(layout));
        let mut tx = Bridge::init(Arc::clone(&memory), layout).unwrap().into_producer();
        let words = memory.words();
        words[RECEIVED_AT].store(7, Ordering::Release);
        assert_eq!(tx.try_send(b"a", 0), Err(Corrupt::Positions { sent: 0, received: 7, slots: 2 }.into()));
        words[RECEIVED_AT].store(0, Ordering::Release);
        tx.try_send(b"a", 0).unwrap();
        tx.try_send(b"b", 0).unwrap();
        assert_eq!(tx.try_send(b"c", 0), Err(SendError::Full));
        // A consumer claiming to have read what was never sent does not earn extra room.
        words[RECEIVED_AT].store(3, Ordering::Release);
        assert!(matches!(tx.try_send(b"c", 0), Err(SendError::Corrupt(_))));
        // Nor does rewriting the producer's own fields: it keeps its counts privately.
        words[RECEIVED_AT].store(2, Ordering::Release);
        words[SENT_AT].store(1000, Ordering::Relaxed);
        words[DROPPED_FULL_AT].store(1000, Ordering::Relaxed);
        tx.try_send(b"c", 0).unwrap();
        let s = tx.stats();
        assert_eq!((s.sent, s.dropped_full), (3, 1000));
        assert_eq!(tx.try_send(b"d", 0), Ok(()));
        assert_eq!(tx.try_send(b"e", 0), Err(SendError::Full));
        assert_eq!(tx.stats().dropped_full, 2);
    }
}

//! A bridge's producer end: copies each message into the next free slot and publishes it with
//! a release store of its position, loading the consumer's position only when the room it last
//! saw runs out. Its counters are its own, published and never read back.

use std::sync::Arc;

use super::{
    BridgeLayout, BridgeMemory, BridgeStats, CLOSED_AT, Corrupt, DROPPED_FULL_AT, DROPPED_TOO_LARGE_AT,
    PRODUCER_BEAT_AT, RECEIVED_AT, SENT_AT, SendError, WORD, slot_words, stats,
};
use crate::sync::{AtomicU64, Ordering, SlotShadow};

/// The producer end: the only writer of the slots, its position and its counters. It keeps all
/// of them privately and only publishes them: what the region says about them is never read
/// back (but once, when the end is made).
#[derive(Debug)]
pub struct Producer<M> {
    pub(super) memory: Arc<M>,
    pub(super) layout: BridgeLayout,
    pub(super) shadow: SlotShadow,
    /// Messages published: the next message's position.
    pub(super) sent: u64,
    /// `sent % slots`, kept to spare a division per message.
    pub(super) slot: usize,
    /// Slots known free (from the consumer's position when last loaded).
    pub(super) room: u64,
    pub(super) dropped_full: u64,
    pub(super) dropped_too_large: u64,
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

    /// Says that no message follows: a consumer that sees
    /// [`Consumer::producer_closed`](super::Consumer::producer_closed) and then finds the bridge
    /// empty has every message. (A producer that dies never closes.)
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

//! A bridge's consumer end: copies published messages out of their slots, checking the
//! producer's position and each length before using them, and releases the slots with a
//! release store of its own position.

use std::sync::Arc;

use super::{
    BridgeLayout, BridgeMemory, BridgeStats, CLOSED_AT, CONSUMER_BEAT_AT, Corrupt, RECEIVED_AT, Received,
    RecvError, SENT_AT, WORD, slot_words, stats,
};
use crate::sync::{AtomicU64, Ordering, SlotShadow};

/// The consumer end: the only writer of its position and heartbeat.
#[derive(Debug)]
pub struct Consumer<M> {
    pub(super) memory: Arc<M>,
    pub(super) layout: BridgeLayout,
    pub(super) shadow: SlotShadow,
    /// Messages consumed: the next message's position.
    pub(super) received: u64,
    /// `received % slots`.
    pub(super) slot: usize,
    /// Messages known published (from the producer's position when last loaded).
    pub(super) ready: u64,
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

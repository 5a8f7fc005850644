//! Decoding: a received packet's header checked whole, then each chunk on its own as the
//! messages are read, so a corrupt chunk costs only its message; what became of every chunk is
//! counted.

use std::ops::{Add, AddAssign, Range};

use super::schema::header_crc;
use super::{
    DecodeError, FIRST, HEADER_BYTES, HEADER_COVERED, Header, LAST, LENGTH_MASK, MAGIC, Schema, VERSION,
};

/// A received packet whose header checked: its header and its chunks, not yet read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    header: Header,
    chunks: &'a [u8],
    chunk_count: usize,
}

impl<'a> Packet<'a> {
    /// Checks `bytes`' header (magic, CRC, version, schema) and that its length is what the
    /// header announces; the chunks are checked as [`Packet::messages`] reads them.
    pub fn parse(bytes: &'a [u8]) -> Result<Packet<'a>, DecodeError> {
        let Some((header, chunks)) = bytes.split_at_checked(HEADER_BYTES) else {
            return Err(DecodeError::Truncated { len: bytes.len(), expected: HEADER_BYTES });
        };
        let at = |i: usize| header.get(i).copied().unwrap_or_default();
        let u64_at = |i: usize| u64::from_le_bytes(std::array::from_fn(|k| at(i + k)));
        if header[..2] != MAGIC {
            return Err(DecodeError::Magic);
        }
        let stored = u32::from_le_bytes(std::array::from_fn(|k| at(HEADER_COVERED + k)));
        if header_crc(&header[..HEADER_COVERED]) != stored {
            return Err(DecodeError::HeaderCorrupt);
        }
        if at(2) != VERSION {
            return Err(DecodeError::Version(at(2)));
        }
        let schema = Schema::from_wire_id(at(3)).ok_or(DecodeError::Schema(at(3)))?;
        let chunk_count = usize::from(u16::from_le_bytes([at(24), at(25)]));
        let expected = schema.packet_bytes(chunk_count);
        if bytes.len() < expected {
            return Err(DecodeError::Truncated { len: bytes.len(), expected });
        }
        if bytes.len() > expected {
            return Err(DecodeError::TrailingBytes { len: bytes.len(), expected });
        }
        let tunnel = u32::from_le_bytes([at(4), at(5), at(6), at(7)]);
        let header = Header { schema, tunnel, seq: u64_at(8), sent_ns: u64_at(16) };
        Ok(Packet { header, chunks, chunk_count })
    }

    /// The header's fields.
    pub fn header(&self) -> Header {
        self.header
    }

    /// The chunks the header announces (and the buffer holds).
    pub fn chunk_count(&self) -> usize {
        self.chunk_count
    }

    /// The intact messages, in order, each once; [`Messages::counts`] tells what was dropped.
    pub fn messages(&self) -> Messages<'a> {
        Messages { schema: self.header.schema, chunks: self.chunks, next: 0, counts: ChunkCounts::default() }
    }
}

/// What became of a packet's chunks: each chunk is counted in exactly one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkCounts {
    /// Messages delivered.
    pub messages: usize,
    /// Chunks of the messages delivered.
    pub delivered: usize,
    /// Chunks that failed their CRC.
    pub corrupt: usize,
    /// Chunks that checked but break the layout (only a faulty encoder writes them).
    pub malformed: usize,
    /// Intact chunks of a message that lost another chunk, so was not delivered.
    pub discarded: usize,
}

impl ChunkCounts {
    /// The chunks counted.
    pub fn chunks(&self) -> usize {
        self.delivered + self.corrupt + self.malformed + self.discarded
    }

    /// Chunks dropped for any reason.
    pub fn dropped(&self) -> usize {
        self.corrupt + self.malformed + self.discarded
    }
}

impl Add for ChunkCounts {
    type Output = ChunkCounts;

    fn add(self, other: ChunkCounts) -> ChunkCounts {
        ChunkCounts {
            messages: self.messages + other.messages,
            delivered: self.delivered + other.delivered,
            corrupt: self.corrupt + other.corrupt,
            malformed: self.malformed + other.malformed,
            discarded: self.discarded + other.discarded,
        }
    }
}

impl AddAssign for ChunkCounts {
    fn add_assign(&mut self, other: ChunkCounts) {
        *self = *self + other;
    }
}

/// One chunk as read.
enum Read {
    /// It checks and keeps the layout.
    Intact { first: bool, last: bool, len: usize },
    /// It fails its CRC.
    Corrupt,
    /// It checks but breaks the layout.
    Malformed,
}

fn read_chunk(schema: Schema, chunk: &[u8]) -> Read {
    if !schema.chunk_checks(chunk) {
        return Read::Corrupt;
    }
    let Some((&control, rest)) = chunk.split_first() else { return Read::Malformed };
    let per_chunk = schema.message_bytes_per_chunk();
    let (first, last) = (control & FIRST != 0, control & LAST != 0);
    let len = usize::from(control & LENGTH_MASK);
    let unused_zero = rest.get(len..per_chunk).is_some_and(|unused| unused.iter().all(|&b| b == 0));
    if len > per_chunk || (!last && len != per_chunk) || !unused_zero {
        return Read::Malformed;
    }
    Read::Intact { first, last, len }
}

/// The intact messages of a [`Packet`], read chunk by chunk.
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    schema: Schema,
    chunks: &'a [u8],
    next: usize,
    counts: ChunkCounts,
}

impl Messages<'_> {
    /// What became of the chunks read so far (all of them once the iterator has ended).
    pub fn counts(&self) -> ChunkCounts {
        self.counts
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Message<'a>;

    fn next(&mut self) -> Option<Message<'a>> {
        let size = self.schema.chunk_bytes();
        // The message being gathered: its first chunk and its length so far.
        let mut open: Option<(usize, usize)> = None;
        // A message lost a chunk: its remaining chunks are skipped up to its last.
        let mut skipping = false;
        loop {
            let index = self.next;
            let Some(chunk) = self.chunks.get(index * size..(index + 1) * size) else {
                // The packet ends inside a message: it was never ended.
                if let Some((start, _)) = open {
                    self.counts.malformed += index - start;
                }
                return None;
            };
            self.next += 1;
            match read_chunk(self.schema, chunk) {
                Read::Corrupt => {
                    self.counts.corrupt += 1;
                    self.lose(&mut open, index);
                    skipping = true;
                }
                Read::Malformed => {
                    self.counts.malformed += 1;
                    self.lose(&mut open, index);
                    skipping = true;
                }
                Read::Intact { first: true, last, len } => {
                    if let Some((start, _)) = open.take() {
                        // A message that never had its last chunk.
                        self.counts.malformed += index - start;
                    }
                    skipping = false;
                    open = Some((index, len));
                    if last {
                        return Some(self.deliver(index, len));
                    }
                }
                Read::Intact { first: false, last, len } => match open.as_mut() {
                    Some((start, total)) => {
                        *total += len;
                        if last {
                            let (start, total) = (*start, *total);
                            return Some(self.deliver(start, total));
                        }
                    }
                    None if skipping => {
                        self.counts.discarded += 1;
                        skipping = !last;
                    }
                    None => {
                        self.counts.malformed += 1;
                        skipping = !last;
                    }
                },
            }
        }
    }
}

impl<'a> Messages<'a> {
    /// The open message, up to chunk `index`, lost a chunk: its intact chunks are discarded.
    fn lose(&mut self, open: &mut Option<(usize, usize)>, index: usize) {
        if let Some((start, _)) = open.take() {
            self.counts.discarded += index - start;
        }
    }

    /// Delivers the message of chunks `start` up to the one just read.
    fn deliver(&mut self, start: usize, len: usize) -> Message<'a> {
        let size = self.schema.chunk_bytes();
        let chunks = self.chunks.get(start * size..self.next * size).unwrap_or_default();
        self.counts.messages += 1;
        self.counts.delivered += self.next - start;
        Message { schema: self.schema, chunks, first_chunk: start, len }
    }
}

/// A delivered message: its bytes lie in consecutive chunks of the received buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    schema: Schema,
    chunks: &'a [u8],
    first_chunk: usize,
    len: usize,
}

impl<'a> Message<'a> {
    /// The message's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunks it came in, as indices into the packet's chunks.
    pub fn chunk_range(&self) -> Range<usize> {
        self.first_chunk..self.first_chunk + self.chunks.len() / self.schema.chunk_bytes()
    }

    /// Its bytes, one slice of the received buffer per chunk, in order.
    pub fn fragments(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        let per_chunk = self.schema.message_bytes_per_chunk();
        let mut left = self.len;
        self.chunks.chunks_exact(self.schema.chunk_bytes()).map(move |chunk| {
            let take = left.min(per_chunk);
            left -= take;
            chunk.get(1..1 + take).unwrap_or_default()
        })
    }

    /// Copies its bytes to the front of `out` and returns its length.
    pub fn copy_to(&self, out: &mut [u8]) -> Result<usize, OutputTooSmall> {
        let Some(out) = out.get_mut(..self.len) else {
            return Err(OutputTooSmall { len: out.len(), needed: self.len });
        };
        let mut at = 0;
        for fragment in self.fragments() {
            out[at..at + fragment.len()].copy_from_slice(fragment);
            at += fragment.len();
        }
        Ok(at)
    }

    /// Its bytes, gathered (allocates).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.len);
        self.fragments().for_each(|fragment| bytes.extend_from_slice(fragment));
        bytes
    }
}

/// A message was offered a buffer shorter than itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {needed}-byte message does not fit {len} bytes")]
pub struct OutputTooSmall {
    /// The buffer's length.
    pub len: usize,
    /// The message's length.
    pub needed: usize,
}

/// What a [`Decoder`] has seen, summed over packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Packets whose header checked.
    pub packets: u64,
    /// Packets dropped because their header failed its CRC.
    pub corrupt_headers: u64,
    /// Packets dropped for another reason (magic, version, schema, length).
    pub refused: u64,
    /// Messages delivered.
    pub messages: u64,
    /// Chunks of delivered messages.
    pub chunks_delivered: u64,
    /// Chunks that failed their CRC.
    pub chunks_corrupt: u64,
    /// Chunks that checked but broke the layout.
    pub chunks_malformed: u64,
    /// Intact chunks of messages that lost a chunk.
    pub chunks_discarded: u64,
}

/// A packet a [`Decoder`] accepted: its header and what became of its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The header's fields.
    pub header: Header,
    /// What became of its chunks.
    pub counts: ChunkCounts,
}

/// Decodes packets and keeps [`Stats`] of what it dropped.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    stats: Stats,
}

impl Decoder {
    /// A decoder with zero counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counts so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Hands each intact message of `bytes` to `deliver`, in order; a packet dropped whole is
    /// counted and its error returned.
    pub fn decode<'a>(
        &mut self,
        bytes: &'a [u8],
        mut deliver: impl FnMut(Message<'a>),
    ) -> Result<Received, DecodeError> {
        let packet = match Packet::parse(bytes) {
            Ok(packet) => packet,
            Err(error) => {
                match error {
                    DecodeError::HeaderCorrupt => self.stats.corrupt_headers += 1,
                    _ => self.stats.refused += 1,
                }
                return Err(error);
            }
        };
        let mut messages = packet.messages();
        messages.by_ref().for_each(&mut deliver);
        let counts = messages.counts();
        let stats = &mut self.stats;
        stats.packets += 1;
        stats.messages += counts.messages as u64;
        stats.chunks_delivered += counts.delivered as u64;
        stats.chunks_corrupt += counts.corrupt as u64;
        stats.chunks_malformed += counts.malformed as u64;
        stats.chunks_discarded += counts.discarded as u64;
        Ok(Received { header: packet.header(), counts })
    }
}

//! The lane's packet: small application messages packed into fixed-size chunks, each with its
//! own CRC (the source's section 4.1 and Appendix B).
//!
//! Most lane messages are far smaller than an MTU, so a packet carries many of them. One CRC over
//! the whole packet would make every message as fragile as the packet (a bit error anywhere loses
//! them all) and, at 1,500 bytes, the CRC would only reach Ethernet's Hamming distance of 4. So
//! the payload is cut into short chunks that each carry a CRC: a chunk hit by a bit error is
//! dropped alone, and at a chunk's short length the two polynomials reach a Hamming distance of
//! 6 and 8, so an undetected corrupt chunk is far rarer than an undetected corrupt frame.
//!
//! This module owns the wire format: the [`Schema`]s, the [`Encoder`] that packs messages into a
//! caller's buffer (no allocation), and the decoder ([`Packet::parse`], [`Packet::messages`], or
//! [`Decoder`] with running [`Stats`]) that yields the intact messages of a received packet as
//! slices of it.
//!
//! # Schemas
//!
//! | schema | polynomial (Koopman) | normal form | chunk | CRC-covered bytes | message bytes/chunk | chunks in 1,472 B |
//! |---|---|---|---|---|---|---|
//! | [`Schema::Hd6`] | `0xBD80DE` (24 bits) | `0x7B01BD` | 26 B | 23 | 22 | 55 |
//! | [`Schema::Hd8`] | `0xFA567D89` (32 bits) | `0xF4ACFB13` | 36 B | 32 | 31 | 40 |
//!
//! Koopman's notation keeps the `x^n` term and drops the `+1`; the normal form that CRC
//! implementations take drops `x^n` and keeps `+1`: `normal = (koopman << 1 | 1) mod 2^n`
//! ([`koopman_to_normal`]). `0xF4ACFB13` is the polynomial of CRC-32/AUTOSAR, whose parameters
//! (reflected, initial value and final XOR all ones) the HD-8 schema and the header use. The HD-6
//! CRC is not reflected, starts from all ones and ends with an XOR of all ones. Starting from all
//! ones means an all-zero chunk does not check. The 1,472 bytes are what a 1,500-byte MTU leaves
//! a UDP payload over IPv4; [`Schema::max_chunks`] gives the count for any budget (the source's
//! 55 and 40 chunks per MTU hold over UDP with this 30-byte header).
//!
//! # Layout
//!
//! All integers little endian, except the HD-6 CRC (big endian, as its unreflected register
//! shifts out), so that each chunk, CRC included, is a codeword of its CRC's code.
//!
//! ```text
//! header (30 B): magic "KL" (2) | version 1 (1) | schema: 6 or 8 (1) | tunnel (4) | seq (8) |
//!                sent_ns (8) | chunk count (2) | CRC-32/AUTOSAR of the 26 bytes before (4)
//! chunks (count x 26 or 36 B), each:
//!                control (1) | message bytes (22 or 31, unused ones zero) | CRC of the 23 or 32
//!                bytes before (3 or 4)
//! control:       bit 7 first chunk of a message | bit 6 last chunk of a message |
//!                bits 0-5 message bytes in this chunk
//! ```
//!
//! The packet is exactly `30 + count x chunk` bytes (it rides in a UDP datagram, whose length is
//! exact): fewer is [`DecodeError::Truncated`], more is [`DecodeError::TrailingBytes`].
//!
//! A message longer than a chunk spans consecutive chunks: every chunk but its last is full, the
//! first has the first-chunk flag, the last the last-chunk flag (a one-chunk message has both,
//! an empty message is one chunk with both and length 0). Consecutive chunks need no message id
//! or fragment index: a message never leaves its packet, and position within the packet is known
//! even when a chunk is corrupt, because chunks have a fixed size. So framing costs one byte per
//! chunk, and messages of any length up to a packet's room travel without a size class per
//! application. One message per chunk would save the flags but cap messages at 22 or 31 bytes,
//! and replication entries are larger.
//!
//! # Decoding
//!
//! A header that fails its CRC drops the packet ([`DecodeError::HeaderCorrupt`]); so do a foreign
//! magic, an unknown version or schema, and a length that disagrees with the chunk count. Then
//! each chunk is checked on its own. A chunk that fails its CRC is dropped and counted
//! ([`ChunkCounts::corrupt`]); so is one that checks but breaks the layout
//! ([`ChunkCounts::malformed`]: a length past the chunk, a short chunk that is not a message's
//! last, non-zero unused bytes, a continuation with no message open, a message never ended; only
//! a faulty encoder makes these). A message with a dropped chunk is not delivered, and its intact
//! chunks are counted as [`ChunkCounts::discarded`]; every other message is. Each chunk is read
//! once, in order, so no message is delivered twice, and every delivered byte is a slice of the
//! buffer, within the length the header and the buffer agree on.
//!
//! # Error detection
//!
//! Koopman's tables give lengths as the *data word*, the bits the CRC covers without the CRC
//! itself. The tests confirm that reading by computing at the source's boundaries: `0xFA567D89` has no undetectable pattern of
//! weight below 8 at 274 data bits and one of weight 6 at 275; `0xBD80DE` none below 6 at 2,026
//! and one of weight 4 at 2,027.
//!
//! A chunk's data word is its control byte and message bytes, so:
//!
//! | code | data word | codeword `n` | HD | `A_HD` | `P_ud` at BER 1e-12 |
//! |---|---|---|---|---|---|
//! | HD-6 chunk, `0xBD80DE` | 184 bits (23 B) | 208 bits | 6 | 14,082 | 1.4e-68 |
//! | HD-8 chunk, `0xFA567D89` | 256 bits (32 B) | 288 bits | 8 | 494,229 | 4.9e-91 |
//! | the header, `0xFA567D89` | 208 bits (26 B) | 240 bits | 8 | 112,389 | 1.1e-91 |
//! | Ethernet frame, CRC-32 `0x04C11DB7` | 12,112 bits (1,514 B) | 12,144 bits | 4 | 223,059 | 2.2e-43 |
//!
//! `A_HD` is the number of error patterns of weight HD that the CRC misses at that length (the
//! Ethernet frame: a 1,500-byte payload and the 14-byte MAC header its CRC covers). `P_ud`, the
//! probability that a codeword is received corrupt yet checks, for bit errors independent with
//! probability `p`, is `sum over w >= HD of A_w p^w (1-p)^(n-w)`, whose first term dominates
//! at `p = 1e-12`: `P_ud = A_HD p^HD`. (Estimating `A_w` as `C(n, w)/2^r`, the next term is
//! about 1e-21 of it for the chunks and the header, whose next undetected weight is HD + 2, and
//! about 2e-9 of it for Ethernet, which also misses weight 5.)
//! Per packet: 55 HD-6 chunks, 7.7e-67; 40 HD-8 chunks, 2.0e-89; against 2.2e-43 for a full
//! Ethernet frame, which the lane's packet rides inside of, so a corrupt frame that Ethernet's CRC
//! missed is still checked chunk by chunk. Independent bit errors are the model here; the
//! source's MTTFPA reasoning (802.3) adds a pessimistic probability of error bursts, which a
//! scrambled line code makes of one line error and which this figure does not model.
//!
//! The counts are computed, not taken from tables: an error pattern is undetected exactly when
//! the XOR of its bits' syndromes (the CRC of a single-bit error) is zero, so the tests
//! (`tests/chunk_hd.rs`) meet in the middle: weight 4 is two pairs with the same syndrome, 6 two
//! triples, 8 two quadruples, odd weights a pair against a triple and a triple against a
//! quadruple. Both lane polynomials have an even number of terms, so `x + 1` divides them and
//! every single-bit syndrome has odd parity (checked): no odd-weight pattern goes undetected.
//! The counts at the HD-6 chunk run with `cargo test`; those needing quadruples, and Ethernet's
//! 74 million pairs, are `#[ignore]`d (under a minute together here, in the crate's optimised
//! test build).

use std::ops::{Add, AddAssign, Range};

use crc::{Algorithm, CRC_32_AUTOSAR, Crc, Table};

/// Header bytes before the first chunk.
pub const HEADER_BYTES: usize = 30;
/// The header's first two bytes.
pub const MAGIC: [u8; 2] = *b"KL";
/// The layout this module writes and reads.
pub const VERSION: u8 = 1;
/// What a 1,500-byte MTU leaves a UDP payload over IPv4 (20-byte IP and 8-byte UDP headers).
pub const UDP_IPV4_PAYLOAD_BYTES: usize = 1_472;
/// Most chunks a header can announce (its count is 16 bits).
pub const MAX_CHUNKS: usize = u16::MAX as usize;

const FIRST: u8 = 0x80;
const LAST: u8 = 0x40;
const LENGTH_MASK: u8 = 0x3F;
/// Header bytes the header's CRC covers.
const HEADER_COVERED: usize = HEADER_BYTES - 4;

/// Turns a polynomial in Koopman's notation (`x^n` kept as the top bit, `+1` implied) into the
/// normal form CRC implementations take (`x^n` implied, `+1` as bit 0). `None` when `width` is
/// not 1 to 32 or `koopman` is not of degree `width` (its top bit must be bit `width - 1`).
pub const fn koopman_to_normal(koopman: u32, width: u32) -> Option<u32> {
    if width == 0 || width > 32 || (koopman as u64) >> (width - 1) != 1 {
        return None;
    }
    Some(((((koopman as u64) << 1) | 1) & ((1u64 << width) - 1)) as u32)
}

const fn normal(koopman: u32, width: u32) -> u32 {
    match koopman_to_normal(koopman, width) {
        Some(poly) => poly,
        None => panic!("not a polynomial of that width"),
    }
}

/// The HD-6 schema's CRC: Koopman's `0xBD80DE`, unreflected, all-ones initial value and final
/// XOR. `check` is the CRC of `"123456789"`, `residue` the register after a whole codeword
/// (both computed by the tests from a bitwise model).
pub const CRC_24_HD6: Algorithm<u32> = Algorithm {
    width: 24,
    poly: normal(0xBD80DE, 24),
    init: 0xFF_FFFF,
    refin: false,
    refout: false,
    xorout: 0xFF_FFFF,
    check: 0x8B_5F86,
    residue: 0xCE_DA55,
};

/// The HD-8 schema's and the header's CRC: CRC-32/AUTOSAR, whose polynomial is Koopman's
/// `0xFA567D89`.
pub const CRC_32_HD8: Algorithm<u32> = CRC_32_AUTOSAR;

const _: () = assert!(normal(0xFA567D89, 32) == CRC_32_AUTOSAR.poly);

/// The CRC implementation: slice-by-16 tables (16 KiB per CRC), 3 to 4 times faster over a
/// chunk than one 256-entry table here (benches/chunk.rs: 8 against 24 ns over 23 bytes, 10
/// against 45 ns over 32).
type Lanes = Table<16>;
static CRC_HD6: Crc<u32, Lanes> = Crc::<u32, Lanes>::new(&CRC_24_HD6);
static CRC_HD8: Crc<u32, Lanes> = Crc::<u32, Lanes>::new(&CRC_32_HD8);

/// Which CRC protects each chunk, and so the chunk's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Schema {
    /// 24-bit CRC `0xBD80DE` (Koopman) over 23 bytes: Hamming distance 6, 26-byte chunks.
    Hd6,
    /// 32-bit CRC `0xFA567D89` (Koopman) over 32 bytes: Hamming distance 8, 36-byte chunks.
    Hd8,
}

impl Schema {
    /// Both schemas.
    pub const ALL: [Schema; 2] = [Schema::Hd6, Schema::Hd8];

    /// A chunk's bytes on the wire, CRC included.
    pub const fn chunk_bytes(self) -> usize {
        self.data_bytes() + self.crc_bytes()
    }

    /// The bytes a chunk's CRC covers (its data word): the control byte and the message bytes.
    pub const fn data_bytes(self) -> usize {
        match self {
            Schema::Hd6 => 23,
            Schema::Hd8 => 32,
        }
    }

    /// Message bytes a chunk carries (the data word less the control byte).
    pub const fn message_bytes_per_chunk(self) -> usize {
        self.data_bytes() - 1
    }

    /// The CRC's width in bits.
    pub const fn crc_bits(self) -> u32 {
        match self {
            Schema::Hd6 => 24,
            Schema::Hd8 => 32,
        }
    }

    /// The CRC's bytes at the end of each chunk.
    pub const fn crc_bytes(self) -> usize {
        self.crc_bits() as usize / 8
    }

    /// The CRC polynomial in Koopman's notation.
    pub const fn koopman_polynomial(self) -> u32 {
        match self {
            Schema::Hd6 => 0xBD80DE,
            Schema::Hd8 => 0xFA567D89,
        }
    }

    /// The CRC's parameters.
    pub const fn algorithm(self) -> &'static Algorithm<u32> {
        match self {
            Schema::Hd6 => &CRC_24_HD6,
            Schema::Hd8 => &CRC_32_HD8,
        }
    }

    /// The smallest weight of an error pattern within one chunk that its CRC misses (as the
    /// tests compute it at the chunk's length).
    pub const fn hamming_distance(self) -> u32 {
        match self {
            Schema::Hd6 => 6,
            Schema::Hd8 => 8,
        }
    }

    /// Most chunks a packet of at most `payload_budget` bytes holds (0 when the header alone
    /// does not fit), at most [`MAX_CHUNKS`].
    pub const fn max_chunks(self, payload_budget: usize) -> usize {
        let chunks = payload_budget.saturating_sub(HEADER_BYTES) / self.chunk_bytes();
        if chunks < MAX_CHUNKS { chunks } else { MAX_CHUNKS }
    }

    /// The longest message a packet of at most `payload_budget` bytes carries (all its chunks).
    pub const fn max_message_bytes(self, payload_budget: usize) -> usize {
        self.max_chunks(payload_budget) * self.message_bytes_per_chunk()
    }

    /// The packet's length on the wire with `chunks` chunks.
    pub const fn packet_bytes(self, chunks: usize) -> usize {
        HEADER_BYTES + chunks * self.chunk_bytes()
    }

    /// The schema's byte in the header (its Hamming distance).
    pub const fn wire_id(self) -> u8 {
        self.hamming_distance() as u8
    }

    /// The schema a header's byte names, if any.
    pub const fn from_wire_id(id: u8) -> Option<Schema> {
        match id {
            6 => Some(Schema::Hd6),
            8 => Some(Schema::Hd8),
            _ => None,
        }
    }

    /// The CRC of a chunk's data word (`data` should be [`Schema::data_bytes`] long).
    pub fn crc(self, data: &[u8]) -> u32 {
        match self {
            Schema::Hd6 => CRC_HD6.checksum(data),
            Schema::Hd8 => CRC_HD8.checksum(data),
        }
    }

    /// Writes the CRC of `chunk`'s data word into its last bytes, for encoders and for tests and
    /// fuzzers that build chunks by hand.
    pub fn seal_chunk(self, chunk: &mut [u8]) -> Result<(), EncodeError> {
        if chunk.len() != self.chunk_bytes() {
            return Err(EncodeError::ChunkLength { len: chunk.len(), expected: self.chunk_bytes() });
        }
        let (data, crc) = chunk.split_at_mut(self.data_bytes());
        let value = self.crc(data);
        match self {
            Schema::Hd6 => crc.copy_from_slice(&value.to_be_bytes()[1..]),
            Schema::Hd8 => crc.copy_from_slice(&value.to_le_bytes()),
        }
        Ok(())
    }

    /// Whether `chunk` (of [`Schema::chunk_bytes`]) checks against its CRC.
    pub fn chunk_checks(self, chunk: &[u8]) -> bool {
        let Some((data, crc)) = chunk.split_at_checked(self.data_bytes()) else { return false };
        let stored = match (self, crc) {
            (Schema::Hd6, &[a, b, c]) => u32::from_be_bytes([0, a, b, c]),
            (Schema::Hd8, &[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
            _ => return false,
        };
        self.crc(data) == stored
    }
}

/// The header's CRC over its first 26 bytes.
fn header_crc(covered: &[u8]) -> u32 {
    CRC_HD8.checksum(covered)
}

/// Writes the header's CRC over the first 26 bytes of `packet` into bytes 26 to 29, for tests
/// and fuzzers that build packets by hand.
pub fn seal_header(packet: &mut [u8]) -> Result<(), EncodeError> {
    let Some(header) = packet.get_mut(..HEADER_BYTES) else {
        return Err(EncodeError::BufferTooSmall { len: packet.len(), needed: HEADER_BYTES });
    };
    let (covered, crc) = header.split_at_mut(HEADER_COVERED);
    crc.copy_from_slice(&header_crc(covered).to_le_bytes());
    Ok(())
}

/// A packet's header fields (its chunk count is the encoder's to set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// The chunks' CRC.
    pub schema: Schema,
    /// The tunnel the packet belongs to.
    pub tunnel: u32,
    /// The sender's sequence number within the tunnel.
    pub seq: u64,
    /// The sender's time stamp when it built the packet, ns.
    pub sent_ns: u64,
}

/// Why messages were not encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The buffer cannot hold the header.
    #[error("buffer of {len} B, the header needs {needed} B")]
    BufferTooSmall {
        /// The buffer's length.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// The message does not fit in the chunks left (an empty message needs one chunk too).
    #[error("message of {len} B does not fit: {chunks_left} chunks left, {room} message bytes")]
    MessageTooLarge {
        /// The message's length.
        len: usize,
        /// Chunks the packet still has room for.
        chunks_left: usize,
        /// Message bytes those chunks carry.
        room: usize,
    },
    /// A chunk to seal is not a chunk's length.
    #[error("chunk of {len} B, expected {expected} B")]
    ChunkLength {
        /// The slice's length.
        len: usize,
        /// The schema's chunk length.
        expected: usize,
    },
}

/// Why a received buffer was dropped whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than its header says (or than a header).
    #[error("truncated: {len} B, expected {expected} B")]
    Truncated {
        /// The buffer's length.
        len: usize,
        /// Bytes the header announces (or a header's length).
        expected: usize,
    },
    /// Longer than its header says.
    #[error("{len} B where the header announces {expected} B")]
    TrailingBytes {
        /// The buffer's length.
        len: usize,
        /// Bytes the header announces.
        expected: usize,
    },
    /// Not a lane packet.
    #[error("not a lane packet (bad magic)")]
    Magic,
    /// The header fails its CRC (corrupted in transit).
    #[error("header CRC mismatch (corrupted in transit)")]
    HeaderCorrupt,
    /// A layout version this module does not read.
    #[error("unsupported lane packet version {0}")]
    Version(u8),
    /// A schema byte that names no schema.
    #[error("unknown chunk schema {0}")]
    Schema(u8),
}

/// Packs messages into a caller's buffer: the header's room is kept at the front and written
/// by [`Encoder::finish`]; each [`Encoder::push`] writes a message's chunks or nothing.
#[derive(Debug)]
pub struct Encoder<'b> {
    header: Header,
    buf: &'b mut [u8],
    chunks: usize,
    max_chunks: usize,
}

impl<'b> Encoder<'b> {
    /// An encoder filling `buf` (whose length is the payload budget) with a packet of `header`.
    pub fn new(header: Header, buf: &'b mut [u8]) -> Result<Self, EncodeError> {
        if buf.len() < HEADER_BYTES {
            return Err(EncodeError::BufferTooSmall { len: buf.len(), needed: HEADER_BYTES });
        }
        let max_chunks = header.schema.max_chunks(buf.len());
        Ok(Encoder { header, buf, chunks: 0, max_chunks })
    }

    /// Chunks written so far.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Chunks the buffer still has room for.
    pub fn chunks_left(&self) -> usize {
        self.max_chunks - self.chunks
    }

    /// The longest message [`Encoder::push`] accepts now (an empty one needs a chunk left).
    pub fn room(&self) -> usize {
        self.chunks_left() * self.header.schema.message_bytes_per_chunk()
    }

    /// Appends `message` as its chunks; when it does not fit, writes nothing and refuses it.
    pub fn push(&mut self, message: &[u8]) -> Result<(), EncodeError> {
        let schema = self.header.schema;
        let per_chunk = schema.message_bytes_per_chunk();
        let needed = message.len().div_ceil(per_chunk).max(1);
        if needed > self.chunks_left() {
            return Err(EncodeError::MessageTooLarge {
                len: message.len(),
                chunks_left: self.chunks_left(),
                room: self.room(),
            });
        }
        for index in 0..needed {
            let piece = message.get(index * per_chunk..).unwrap_or_default();
            let piece = piece.get(..per_chunk).unwrap_or(piece);
            let mut control = piece.len() as u8;
            if index == 0 {
                control |= FIRST;
            }
            if index + 1 == needed {
                control |= LAST;
            }
            let start = schema.packet_bytes(self.chunks);
            let chunk = &mut self.buf[start..start + schema.chunk_bytes()];
            chunk[0] = control;
            chunk[1..1 + piece.len()].copy_from_slice(piece);
            chunk[1 + piece.len()..schema.data_bytes()].fill(0);
            schema.seal_chunk(chunk)?;
            self.chunks += 1;
        }
        Ok(())
    }

    /// Writes the header and returns the packet's length: the packet is `buf[..length]`.
    pub fn finish(self) -> usize {
        let header = &mut self.buf[..HEADER_BYTES];
        header[0..2].copy_from_slice(&MAGIC);
        header[2] = VERSION;
        header[3] = self.header.schema.wire_id();
        header[4..8].copy_from_slice(&self.header.tunnel.to_le_bytes());
        header[8..16].copy_from_slice(&self.header.seq.to_le_bytes());
        header[16..24].copy_from_slice(&self.header.sent_ns.to_le_bytes());
        // `max_chunks` caps the count at MAX_CHUNKS, so it fits 16 bits.
        header[24..26].copy_from_slice(&(self.chunks as u16).to_le_bytes());
        let crc = header_crc(&header[..HEADER_COVERED]);
        header[HEADER_COVERED..].copy_from_slice(&crc.to_le_bytes());
        self.header.schema.packet_bytes(self.chunks)
    }
}

/// Encodes `messages`, in order, into `buf` and returns the packet's length; refuses the first
/// message that does not fit (what `buf` then holds is not a packet).
pub fn encode<M: AsRef<[u8]>>(
    header: Header,
    messages: impl IntoIterator<Item = M>,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let mut encoder = Encoder::new(header, buf)?;
    for message in messages {
        encoder.push(message.as_ref())?;
    }
    Ok(encoder.finish())
}

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

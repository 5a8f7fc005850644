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

mod decode;
mod encode;
mod schema;

pub use decode::{ChunkCounts, Decoder, Message, Messages, OutputTooSmall, Packet, Received, Stats};
pub use encode::{Encoder, encode};
pub use schema::{CRC_24_HD6, CRC_32_HD8, Schema, koopman_to_normal};

use schema::header_crc;

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

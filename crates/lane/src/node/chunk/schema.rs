//! The two schemas and their CRCs: each CRC's parameters (the polynomials from Koopman's
//! notation), its table-driven implementation, and what follows from a schema (chunk size,
//! chunks per packet); the header's CRC is the HD-8 schema's.

use crc::{Algorithm, CRC_32_AUTOSAR, Crc, Table};

use super::{EncodeError, HEADER_BYTES, MAX_CHUNKS};

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

    /// The chunks a message of `len` bytes takes (an empty message takes one).
    pub const fn chunks_for(self, len: usize) -> usize {
        let chunks = len.div_ceil(self.message_bytes_per_chunk());
        if chunks == 0 { 1 } else { chunks }
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
pub(super) fn header_crc(covered: &[u8]) -> u32 {
    CRC_HD8.checksum(covered)
}

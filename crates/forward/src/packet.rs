//! The experiment's packet: what it carries, and its 60-byte wire form.
//!
//! The source's packets are 60-byte Ethernet frames carrying a type, a user id and time stamps;
//! ours carry the same fields in a UDP payload (or in memory) with a magic, a version and a
//! CRC-32C, so a corrupted or foreign datagram is recognised and dropped, never misread.
//!
//! Wire layout (little endian): `magic "KR"` (2) | `version` (1) | `kind` (1) | `user` (4) |
//! `seq` (8) | `sent_ns` (8) | `addr_stamp_ns` (8) | `mac` (6) | zero padding (18) |
//! `crc32c` of bytes 0..56 (4) = 60 bytes.

use crc::{CRC_32_ISCSI, Crc};
use kairos_io::{MAX_WIRE_BYTES, Message};

/// The length of a packet's wire form, bytes.
pub const WIRE_LEN: usize = 60;
const MAGIC: [u8; 2] = *b"KR";
const VERSION: u8 = 1;
const CRC: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// What a packet is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Kind {
    /// An app update for a user (the FIB reader addresses it).
    #[default]
    Data = 1,
    /// A location update for a user (the FIB writer applies it).
    Control = 2,
    /// Warm-up traffic, not measured.
    Warmup = 3,
}

/// One packet's fields, and its reception time stamp once received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Packet {
    /// Data, control or warm-up.
    pub kind: Kind,
    /// The user the update is about: the FIB entry data is addressed by, or control writes.
    pub user: u32,
    /// Position in the trace (the send order).
    pub seq: u64,
    /// The sender's time stamp (generation time of the update), ns on the experiment's clock.
    pub sent_ns: u64,
    /// For data: the stamp of the FIB entry that addressed it; for control: unused.
    pub addr_stamp_ns: u64,
    /// Next-hop MAC the forwarder addressed it to.
    pub mac: [u8; 6],
    /// When the receiving port got it (software or kernel time stamp), ns; not on the wire.
    pub rx_ns: u64,
}

/// Why bytes were not a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not [`WIRE_LEN`] long (their length).
    #[error("datagram of {0} bytes, expected {WIRE_LEN}")]
    Length(usize),
    /// The first two bytes are not `KR`: not a Kairos packet.
    #[error("not a Kairos packet (bad magic)")]
    Magic,
    /// A version this build does not read (the version byte).
    #[error("unsupported packet version {0}")]
    Version(u8),
    /// A kind byte that is no [`Kind`] (the byte).
    #[error("unknown packet kind {0}")]
    Kind(u8),
    /// The CRC-32C does not match the bytes: damaged in transit.
    #[error("checksum mismatch (corrupted in transit)")]
    Checksum,
    /// The padding bytes are not all zero.
    #[error("non-zero padding")]
    Padding,
}

/// The CRC-32C the wire form carries over its first 56 bytes (for tests and fuzzers that build
/// packets by hand).
pub fn wire_checksum(bytes: &[u8; WIRE_LEN]) -> u32 {
    CRC.checksum(&bytes[..56])
}

impl Packet {
    /// Encodes into `buf` (exactly [`WIRE_LEN`] bytes).
    pub fn encode(&self, buf: &mut [u8; WIRE_LEN]) {
        buf[0..2].copy_from_slice(&MAGIC);
        buf[2] = VERSION;
        buf[3] = self.kind as u8;
        buf[4..8].copy_from_slice(&self.user.to_le_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_le_bytes());
        buf[16..24].copy_from_slice(&self.sent_ns.to_le_bytes());
        buf[24..32].copy_from_slice(&self.addr_stamp_ns.to_le_bytes());
        buf[32..38].copy_from_slice(&self.mac);
        buf[38..56].fill(0);
        let crc = CRC.checksum(&buf[..56]);
        buf[56..60].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes and validates; `rx_ns` is left zero.
    pub fn decode(bytes: &[u8]) -> Result<Packet, DecodeError> {
        if bytes.len() != WIRE_LEN {
            return Err(DecodeError::Length(bytes.len()));
        }
        if bytes[0..2] != MAGIC {
            return Err(DecodeError::Magic);
        }
        if bytes[2] != VERSION {
            return Err(DecodeError::Version(bytes[2]));
        }
        let crc = u32::from_le_bytes([bytes[56], bytes[57], bytes[58], bytes[59]]);
        if CRC.checksum(&bytes[..56]) != crc {
            return Err(DecodeError::Checksum);
        }
        if bytes[38..56].iter().any(|&b| b != 0) {
            return Err(DecodeError::Padding);
        }
        let kind = match bytes[3] {
            1 => Kind::Data,
            2 => Kind::Control,
            3 => Kind::Warmup,
            other => return Err(DecodeError::Kind(other)),
        };
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&bytes[32..38]);
        Ok(Packet {
            kind,
            user: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            seq: u64_at(8),
            sent_ns: u64_at(16),
            addr_stamp_ns: u64_at(24),
            mac,
            rx_ns: 0,
        })
    }
}

/// What every port of the experiment carries: in memory by value, on a network as its 60-byte
/// wire form (a datagram that does not decode is dropped and counted by the port).
impl Message for Packet {
    fn encode(&self, buf: &mut [u8; MAX_WIRE_BYTES]) -> usize {
        let (wire, _) = buf.split_first_chunk_mut::<WIRE_LEN>().expect("a port's buffer holds a packet");
        Packet::encode(self, wire);
        WIRE_LEN
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        Packet::decode(bytes).ok()
    }

    fn set_rx_ns(&mut self, rx_ns: u64) {
        self.rx_ns = rx_ns;
    }

    fn rx_ns(&self) -> u64 {
        self.rx_ns
    }
}

const _: () = assert!(WIRE_LEN <= MAX_WIRE_BYTES, "a packet's wire form fits a port's buffer");

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Packet {
        Packet {
            kind: Kind::Control,
            user: 917,
            seq: 1 << 40,
            sent_ns: 123_456_789,
            addr_stamp_ns: 42,
            mac: [2, 0, 0, 0, 0, 7],
            rx_ns: 0,
        }
    }

    #[test]
    fn round_trip() {
        let mut buf = [0u8; WIRE_LEN];
        sample().encode(&mut buf);
        assert_eq!(Packet::decode(&buf), Ok(sample()));
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let mut buf = [0u8; WIRE_LEN];
        sample().encode(&mut buf);
        for byte in 0..WIRE_LEN {
            for bit in 0..8 {
                let mut bad = buf;
                bad[byte] ^= 1 << bit;
                assert!(Packet::decode(&bad).is_err(), "flip of bit {bit} in byte {byte} went unnoticed");
            }
        }
    }

    /// The fuzz target's property (`fuzz/fuzz_targets/packet_decode.rs`) on inputs a fuzzer
    /// reaches first: random bytes, and valid packets with random bytes overwritten and the
    /// checksum fixed up (so the checks behind the checksum are exercised too).
    #[test]
    fn decode_accepts_only_what_round_trips() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut accepted = 0;
        for round in 0..200_000 {
            let mut bytes = [0u8; WIRE_LEN];
            if round % 2 == 0 {
                rng.fill(&mut bytes[..]);
            } else {
                sample().encode(&mut bytes);
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(2..56);
                    bytes[at] = rng.random();
                }
                let crc = CRC.checksum(&bytes[..56]);
                bytes[56..60].copy_from_slice(&crc.to_le_bytes());
            }
            let len = if round % 7 == 0 { rng.random_range(0..WIRE_LEN) } else { WIRE_LEN };
            if let Ok(p) = Packet::decode(&bytes[..len]) {
                let mut again = [0u8; WIRE_LEN];
                p.encode(&mut again);
                assert_eq!(again, bytes, "accepted bytes that do not round-trip");
                accepted += 1;
            }
        }
        assert!(accepted > 100, "the mutated packets should often stay valid: {accepted}");
    }

    #[test]
    fn wrong_sizes_and_foreign_bytes_are_refused() {
        assert_eq!(Packet::decode(&[0u8; 59]), Err(DecodeError::Length(59)));
        assert_eq!(Packet::decode(&[0u8; 60]), Err(DecodeError::Magic));
        assert_eq!(Packet::decode(&[]), Err(DecodeError::Length(0)));
    }
}

//! The message these tests send through ports: fields from which a torn, stale or altered copy
//! shows, and a wire form whose checksum catches any one bit flipped (so a fault port's
//! corruption is refused, never delivered), as a real user's message would be.

use kairos_io::{MAX_WIRE_BYTES, Message};

/// A test packet; `rx_ns` is set by the receiving port, not carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Packet {
    pub user: u32,
    pub seq: u64,
    pub sent_ns: u64,
    pub tag: u64,
    pub rx_ns: u64,
}

const MAGIC: [u8; 2] = *b"KT";
/// `"KT"` | user (4) | seq (8) | sent_ns (8) | tag (8) | sum (8).
const WIRE: usize = 38;

impl Packet {
    /// The wrapping sum of the fields: one flipped bit of a field moves it by a power of two,
    /// one flipped bit of the sum itself breaks the match, so neither goes unseen.
    fn sum(&self) -> u64 {
        u64::from(self.user).wrapping_add(self.seq).wrapping_add(self.sent_ns).wrapping_add(self.tag)
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Message for Packet {
    fn encode(&self, buf: &mut [u8; MAX_WIRE_BYTES]) -> usize {
        buf[..2].copy_from_slice(&MAGIC);
        buf[2..6].copy_from_slice(&self.user.to_le_bytes());
        for (at, v) in [(6, self.seq), (14, self.sent_ns), (22, self.tag), (30, self.sum())] {
            buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        WIRE
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != WIRE || bytes[..2] != MAGIC {
            return None;
        }
        let user = u32::from_le_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
        let p =
            Packet { user, seq: word(bytes, 6), sent_ns: word(bytes, 14), tag: word(bytes, 22), rx_ns: 0 };
        (p.sum() == word(bytes, 30)).then_some(p)
    }

    fn set_rx_ns(&mut self, rx_ns: u64) {
        self.rx_ns = rx_ns;
    }

    fn rx_ns(&self) -> u64 {
        self.rx_ns
    }
}

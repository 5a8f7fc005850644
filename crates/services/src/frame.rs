//! Raft messages in UDP datagrams: a message larger than one datagram (a batch of entries, a
//! snapshot of the store) is cut into fragments and put back together on arrival.
//!
//! A datagram is `"KR"`, the format version, the sender's member id, a message number (per
//! sender, increasing), the fragment's index and the fragment count, then up to
//! [`FRAGMENT_BYTES`] of the encoded message. A sender sends a message's fragments one after
//! another, so a receiver keeps at most one message in assembly per sender: a fragment of a
//! newer message drops the older one, whose loss Raft recovers from as from any lost
//! message. Memory: at most [`MAX_MESSAGE_BYTES`] per sender in assembly.

use std::collections::BTreeMap;

use crate::codec::DecodeError;

/// Payload bytes per datagram (fits a 64 KiB datagram with room to spare).
pub const FRAGMENT_BYTES: usize = 60_000;
/// Most fragments of one message (the header's count is 16 bits).
pub const MAX_FRAGMENTS: usize = u16::MAX as usize;
/// The largest message, bytes (a 60 MB snapshot): larger ones are not sent, and an assembly
/// that grows past it is dropped.
pub const MAX_MESSAGE_BYTES: usize = 60_000_000;
const MAGIC: [u8; 2] = *b"KR";
const VERSION: u8 = 1;
/// A fragment's bytes before the message's own.
pub const HEADER_BYTES: usize = 2 + 1 + 8 + 8 + 2 + 2;

/// Cuts an encoded message into datagrams; returns `None` when it is too large to send.
pub fn fragments(from: u64, number: u64, message: &[u8]) -> Option<Vec<Vec<u8>>> {
    fragments_of(from, number, message, FRAGMENT_BYTES)
}

/// Cuts an encoded message into fragments of at most `fragment_bytes` of it each (a lane
/// tunnel's packet holds far less than a datagram); `None` when that takes more than
/// [`MAX_FRAGMENTS`], or `fragment_bytes` is 0.
pub fn fragments_of(from: u64, number: u64, message: &[u8], fragment_bytes: usize) -> Option<Vec<Vec<u8>>> {
    if fragment_bytes == 0 || message.len() > MAX_MESSAGE_BYTES {
        return None;
    }
    let count = message.len().div_ceil(fragment_bytes).max(1);
    if count > MAX_FRAGMENTS {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    for index in 0..count {
        let chunk = &message
            [(index * fragment_bytes).min(message.len())..((index + 1) * fragment_bytes).min(message.len())];
        // Room for the seal a member adds, so sealing does not move the datagram.
        let mut d = Vec::with_capacity(HEADER_BYTES + chunk.len() + crate::seal::SEAL_BYTES);
        d.extend_from_slice(&MAGIC);
        d.push(VERSION);
        d.extend_from_slice(&from.to_le_bytes());
        d.extend_from_slice(&number.to_le_bytes());
        d.extend_from_slice(&(index as u16).to_le_bytes());
        d.extend_from_slice(&(count as u16).to_le_bytes());
        d.extend_from_slice(chunk);
        out.push(d);
    }
    Some(out)
}

/// The sender id a fragment's header names, if the datagram is long enough to hold one.
pub fn sender(datagram: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(datagram.get(3..11)?.try_into().ok()?))
}

#[derive(Debug, Default)]
struct Assembly {
    number: u64,
    count: usize,
    parts: BTreeMap<usize, Vec<u8>>,
    bytes: usize,
}

/// Puts fragments back together, per sender.
#[derive(Debug, Default)]
pub struct Reassembler {
    senders: BTreeMap<u64, Assembly>,
    /// Datagrams that were not fragments (bad magic, version or header).
    pub malformed: u64,
}

impl Reassembler {
    /// A reassembler with nothing in assembly.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one datagram; returns `(sender, message)` when it completes a message.
    pub fn push(&mut self, datagram: &[u8]) -> Result<Option<(u64, Vec<u8>)>, DecodeError> {
        let result = self.parse(datagram);
        if result.is_err() {
            self.malformed += 1;
        }
        result
    }

    fn parse(&mut self, d: &[u8]) -> Result<Option<(u64, Vec<u8>)>, DecodeError> {
        if d.len() < HEADER_BYTES {
            return Err(DecodeError::Truncated("fragment header"));
        }
        if d[..2] != MAGIC || d[2] != VERSION {
            return Err(DecodeError::Invalid { field: "fragment magic or version", value: u64::from(d[2]) });
        }
        let u64_at = |at: usize| u64::from_le_bytes(d[at..at + 8].try_into().expect("8 bytes"));
        let u16_at = |at: usize| usize::from(u16::from_le_bytes(d[at..at + 2].try_into().expect("2 bytes")));
        let (from, number, index, count) = (u64_at(3), u64_at(11), u16_at(19), u16_at(21));
        if count == 0 || count > MAX_FRAGMENTS || index >= count {
            return Err(DecodeError::Invalid { field: "fragment index or count", value: index as u64 });
        }
        let chunk = &d[HEADER_BYTES..];
        if count == 1 {
            self.senders.remove(&from);
            return Ok(Some((from, chunk.to_vec())));
        }
        let assembly = self.senders.entry(from).or_default();
        if assembly.number != number || assembly.count != count {
            *assembly = Assembly { number, count, parts: BTreeMap::new(), bytes: 0 };
        }
        assembly.bytes += chunk.len();
        if let Some(old) = assembly.parts.insert(index, chunk.to_vec()) {
            assembly.bytes -= old.len();
        }
        if assembly.bytes > MAX_MESSAGE_BYTES {
            self.senders.remove(&from);
            return Err(DecodeError::Invalid { field: "message length", value: MAX_MESSAGE_BYTES as u64 });
        }
        if assembly.parts.len() < count {
            return Ok(None);
        }
        let assembly = self.senders.remove(&from).expect("present");
        Ok(Some((from, assembly.parts.into_values().flatten().collect())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_message_is_cut_and_put_back_together_in_any_order() {
        let message: Vec<u8> = (0..150_000u32).map(|i| i as u8).collect();
        let mut parts = fragments(3, 9, &message).unwrap();
        assert_eq!(parts.len(), 3);
        parts.swap(0, 2);
        let mut r = Reassembler::new();
        assert_eq!(r.push(&parts[0]).unwrap(), None);
        assert_eq!(r.push(&parts[1]).unwrap(), None);
        assert_eq!(r.push(&parts[2]).unwrap(), Some((3, message)));
        assert_eq!(sender(&parts[0]), Some(3));
        assert_eq!(sender(b"KR"), None);
    }

    #[test]
    fn a_newer_message_drops_an_unfinished_one_and_small_ones_pass_at_once() {
        let big = vec![7u8; 70_000];
        let first = fragments(1, 1, &big).unwrap();
        let mut r = Reassembler::new();
        assert_eq!(r.push(&first[0]).unwrap(), None);
        let small = fragments(1, 2, b"hi").unwrap();
        assert_eq!(r.push(&small[0]).unwrap(), Some((1, b"hi".to_vec())));
        assert_eq!(r.push(&first[1]).unwrap(), None, "the first message's other half waits alone");
        assert!(fragments(1, 3, &vec![0; MAX_MESSAGE_BYTES + 1]).is_none());
        assert!(fragments_of(1, 3, &vec![0; MAX_FRAGMENTS + 1], 1).is_none());
        assert_eq!(fragments(1, 4, b"").unwrap().len(), 1);
        let small = fragments_of(1, 5, &[9u8; 25], 10).unwrap();
        assert_eq!(small.iter().map(|f| f.len() - HEADER_BYTES).collect::<Vec<_>>(), [10, 10, 5]);
        assert!(fragments_of(1, 6, b"x", 0).is_none());
    }

    #[test]
    fn malformed_datagrams_are_errors() {
        let mut r = Reassembler::new();
        assert!(r.push(b"KR").is_err());
        let mut d = fragments(1, 1, b"x").unwrap().remove(0);
        d[0] = b'X';
        assert!(r.push(&d).is_err());
        let mut d = fragments(1, 1, b"x").unwrap().remove(0);
        d[19] = 5; // index past the count
        assert!(r.push(&d).is_err());
        assert_eq!(r.malformed, 3);
    }
}

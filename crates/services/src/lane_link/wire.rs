//! A lane message's bytes (its kind, the member it is for, when it was handed over, its
//! payload) and how messages pack into the node's packets: the format is the wire's, the
//! packing the node's, so both are checked here apart from the link that uses them.

use kairos_lane::node::chunk::Schema;

use super::{MAX_BEAT_BYTES, MAX_PACKET_BYTES};
use crate::frame;

/// A lane message's bytes before its payload: its kind, the member it is for, and when it was
/// handed to the link (wall-clock ns: with the release and receive stamps the lane adds, where
/// a message's time went).
pub(super) const LANE_HEADER_BYTES: usize = 1 + 8 + 8;
pub(super) const KIND_MESSAGE: u8 = 1;
pub(super) const KIND_BEAT: u8 = 2;

/// A lane message as it arrives: its kind, the member it is for, when its sender handed it
/// over (wall-clock ns), and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneMessage<'a> {
    /// 1: a queued message (a Raft fragment); 2: a heartbeat; anything else is not ours to read.
    pub kind: u8,
    /// The member it is for.
    pub to: u64,
    /// When its sender handed it to its link, wall-clock ns.
    pub handed_ns: u64,
    /// The fragment or datagram.
    pub payload: &'a [u8],
}

/// Splits a message from the inbox (network input: any bytes give an answer, never a panic);
/// `None` when it is shorter than its header.
pub fn parse_lane_message(bytes: &[u8]) -> Option<LaneMessage<'_>> {
    let (&kind, rest) = bytes.split_first()?;
    let (to, rest) = rest.split_first_chunk::<8>()?;
    let (handed, payload) = rest.split_first_chunk::<8>()?;
    Some(LaneMessage { kind, to: u64::from_le_bytes(*to), handed_ns: u64::from_le_bytes(*handed), payload })
}

/// The packing of messages into the node's packets, as the node packs them: messages in order,
/// each in whole chunks, while they fit; checked for both chunk schemas, since the application
/// does not know which one its node uses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Packing {
    pub(super) packet_bytes: usize,
}

impl Packing {
    pub(super) fn chunks(schema: Schema, len: usize) -> usize {
        schema.chunks_for(len)
    }

    /// The longest message a packet holds in either schema.
    #[cfg(test)]
    pub(super) fn max_message(self) -> usize {
        Schema::ALL.iter().map(|s| s.max_message_bytes(self.packet_bytes)).min().unwrap_or(0)
    }

    /// Whether messages of `lens` share one packet in either schema.
    #[cfg(test)]
    pub(super) fn fits(self, lens: impl Iterator<Item = usize>) -> bool {
        let mut room = self.room();
        lens.into_iter().all(|len| room.take(len))
    }

    /// An empty packet's chunks, in each schema.
    pub(super) fn room(self) -> Room {
        Room { left: Schema::ALL.map(|s| s.max_chunks(self.packet_bytes)) }
    }

    /// The smallest packet that holds a heartbeat for each of the other `members - 1` and a
    /// 64-byte fragment, in either schema.
    pub(super) fn least_packet_bytes(members: usize) -> u64 {
        let beat = LANE_HEADER_BYTES + MAX_BEAT_BYTES;
        let fragment = LANE_HEADER_BYTES + frame::HEADER_BYTES + 64;
        Schema::ALL
            .iter()
            .map(|&s| {
                let chunks = members.saturating_sub(1) * Self::chunks(s, beat) + Self::chunks(s, fragment);
                s.packet_bytes(chunks) as u64
            })
            .max()
            .unwrap_or(MAX_PACKET_BYTES)
    }

    /// The encoded message's bytes one fragment carries, so that it shares a packet with a
    /// heartbeat for each of `others` members, in either schema (0: none fits).
    pub(super) fn fragment_bytes(self, others: usize) -> usize {
        let beat = LANE_HEADER_BYTES + MAX_BEAT_BYTES;
        let message = Schema::ALL
            .iter()
            .map(|&s| {
                let left = s.max_chunks(self.packet_bytes).saturating_sub(others * Self::chunks(s, beat));
                left * s.message_bytes_per_chunk()
            })
            .min()
            .unwrap_or(0);
        message.saturating_sub(LANE_HEADER_BYTES + frame::HEADER_BYTES)
    }
}

/// The chunks a packet being filled has left, in each schema (as [`Schema::ALL`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Room {
    left: [usize; Schema::ALL.len()],
}

impl Room {
    /// Takes a message of `len` bytes if it fits in both schemas; whether it did (a message
    /// that does not fit takes nothing).
    pub(super) fn take(&mut self, len: usize) -> bool {
        let need = Schema::ALL.map(|s| Packing::chunks(s, len));
        if need.iter().zip(&self.left).any(|(n, l)| n > l) {
            return false;
        }
        for (l, n) in self.left.iter_mut().zip(need) {
            *l -= n;
        }
        true
    }

    /// Whether a message of `len` bytes would fit, taking nothing.
    pub(super) fn holds(mut self, len: usize) -> bool {
        self.take(len)
    }
}

//! What the failure detector puts in a datagram: its heartbeat, or a peer protocol's packet
//! (SWIM, through `foca`) travelling on the same socket.
//!
//! Every datagram starts with the two bytes [`MAGIC`] and a kind byte, so stray traffic on the
//! port (another program's packets, an empty datagram) is an error, not a heartbeat. A
//! heartbeat is then five varints ([`kairos_services::codec`]): the sender's member id, its
//! incarnation (a number that grows with each start of the member, so a restarted member is
//! told from a delayed packet of its previous life), its sequence number, its application's
//! liveness counter and its send time; a replicated store member's heartbeat adds two: its Raft
//! term and the commit index the receiver may take. A SWIM packet is the instance byte (which
//! of the peer configurations it belongs to) and the rest of the datagram, which `foca` decodes.
//!
//! Contract: [`decode`] never panics and never allocates, whatever the bytes; what
//! [`encode_heartbeat`] writes, [`decode`] reads back equal. Work per call: linear in the
//! datagram (at most 5 varints for a heartbeat).

use kairos_services::codec::{DecodeError, Reader, put_u64};

/// The first two bytes of every datagram: `"FD"`.
pub const MAGIC: [u8; 2] = *b"FD";
/// The kind byte of a heartbeat.
pub const KIND_HEARTBEAT: u8 = 1;
/// The kind byte of a SWIM packet.
pub const KIND_SWIM: u8 = 2;
/// The kind byte of a replicated store's heartbeat: a heartbeat with the sender's Raft term
/// and the commit index the receiver may take (`kairos kv serve`'s members).
pub const KIND_REPLICA_HEARTBEAT: u8 = 3;
/// The longest heartbeat: magic, kind and seven varints (a replica's) of at most 10 bytes.
pub const MAX_HEARTBEAT_BYTES: usize = 3 + 7 * 10;
// The lane link sizes Raft's fragments to share a packet with a heartbeat for every other
// member, at most its own bound each: a longer heartbeat would not fit beside them.
const _: () = assert!(MAX_HEARTBEAT_BYTES <= kairos_services::lane_link::MAX_BEAT_BYTES);

/// One member's heartbeat: who sends it, in which life, and its application's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Heartbeat {
    /// The sender's member id.
    pub member: u64,
    /// The sender's incarnation: larger after each restart.
    pub incarnation: u64,
    /// Heartbeats this incarnation sent before this one.
    pub seq: u64,
    /// The sender's application liveness counter, as the sender read it.
    pub counter: u64,
    /// When it was sent, `CLOCK_MONOTONIC` ns of the sender's host.
    pub sent_ns: u64,
}

/// A decoded datagram, borrowing the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram<'a> {
    /// A heartbeat.
    Heartbeat(Heartbeat),
    /// A replicated store member's heartbeat, with the commit index it piggybacks.
    Replica {
        /// The heartbeat.
        heartbeat: Heartbeat,
        /// The sender's Raft term.
        term: u64,
        /// The commit index the receiver may take (0 from a member that is not the leader).
        commit: u64,
    },
    /// A packet of the SWIM instance `instance`, for `foca` to decode.
    Swim {
        /// Which SWIM configuration it belongs to.
        instance: u8,
        /// The packet's bytes.
        payload: &'a [u8],
    },
}

/// Appends `heartbeat` to `out`.
pub fn encode_heartbeat(heartbeat: &Heartbeat, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.push(KIND_HEARTBEAT);
    for v in [heartbeat.member, heartbeat.incarnation, heartbeat.seq, heartbeat.counter, heartbeat.sent_ns] {
        put_u64(out, v);
    }
}

/// Appends a replicated store member's heartbeat, with its term and the commit index for
/// the receiver, to `out`.
pub fn encode_replica_heartbeat(heartbeat: &Heartbeat, term: u64, commit: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.push(KIND_REPLICA_HEARTBEAT);
    for v in [heartbeat.member, heartbeat.incarnation, heartbeat.seq, heartbeat.counter, heartbeat.sent_ns] {
        put_u64(out, v);
    }
    put_u64(out, term);
    put_u64(out, commit);
}

/// Appends a SWIM packet of `instance` to `out`.
pub fn encode_swim(instance: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.push(KIND_SWIM);
    out.push(instance);
    out.extend_from_slice(payload);
}

/// Reads one datagram; any bytes give a datagram or an error, never a panic.
pub fn decode(bytes: &[u8]) -> Result<Datagram<'_>, DecodeError> {
    let mut r = Reader::new(bytes);
    for expected in MAGIC {
        let got = r.u8("magic")?;
        if got != expected {
            return Err(DecodeError::Invalid { field: "magic", value: u64::from(got) });
        }
    }
    match r.u8("kind")? {
        KIND_HEARTBEAT => {
            let heartbeat = read_heartbeat(&mut r)?;
            r.finish()?;
            Ok(Datagram::Heartbeat(heartbeat))
        }
        KIND_REPLICA_HEARTBEAT => {
            let heartbeat = read_heartbeat(&mut r)?;
            let (term, commit) = (r.u64("term")?, r.u64("commit")?);
            r.finish()?;
            Ok(Datagram::Replica { heartbeat, term, commit })
        }
        KIND_SWIM => {
            let instance = r.u8("instance")?;
            let payload = &bytes[bytes.len() - r.remaining()..];
            Ok(Datagram::Swim { instance, payload })
        }
        other => Err(DecodeError::Invalid { field: "kind", value: u64::from(other) }),
    }
}

fn read_heartbeat(r: &mut Reader<'_>) -> Result<Heartbeat, DecodeError> {
    Ok(Heartbeat {
        member: r.u64("member")?,
        incarnation: r.u64("incarnation")?,
        seq: r.u64("seq")?,
        counter: r.u64("counter")?,
        sent_ns: r.u64("sent_ns")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn heartbeats_round_trip(member: u64, incarnation: u64, seq: u64, counter: u64, sent_ns: u64) {
            let hb = Heartbeat { member, incarnation, seq, counter, sent_ns };
            let mut out = Vec::new();
            encode_heartbeat(&hb, &mut out);
            prop_assert!(out.len() <= MAX_HEARTBEAT_BYTES);
            prop_assert_eq!(decode(&out), Ok(Datagram::Heartbeat(hb)));
        }

        #[test]
        fn replica_heartbeats_round_trip(member: u64, seq: u64, counter: u64, term: u64, commit: u64) {
            let heartbeat = Heartbeat { member, incarnation: 7, seq, counter, sent_ns: u64::MAX };
            let mut out = Vec::new();
            encode_replica_heartbeat(&heartbeat, term, commit, &mut out);
            prop_assert!(out.len() <= MAX_HEARTBEAT_BYTES);
            prop_assert_eq!(decode(&out), Ok(Datagram::Replica { heartbeat, term, commit }));
        }

        #[test]
        fn garbage_decodes_or_errs(bytes: Vec<u8>) {
            let _ = decode(&bytes);
        }

        #[test]
        fn swim_packets_round_trip(instance: u8, payload: Vec<u8>) {
            let mut out = Vec::new();
            encode_swim(instance, &payload, &mut out);
            prop_assert_eq!(decode(&out), Ok(Datagram::Swim { instance, payload: &payload }));
        }
    }

    #[test]
    fn stray_truncated_and_padded_datagrams_are_errors() {
        assert_eq!(decode(b""), Err(DecodeError::Truncated("magic")));
        assert!(matches!(decode(b"XD\x01"), Err(DecodeError::Invalid { field: "magic", .. })));
        assert_eq!(decode(b"FD"), Err(DecodeError::Truncated("kind")));
        assert!(matches!(decode(b"FD\x09"), Err(DecodeError::Invalid { field: "kind", value: 9 })));
        let mut out = Vec::new();
        encode_heartbeat(&Heartbeat { member: 3, counter: 1 << 40, ..Heartbeat::default() }, &mut out);
        for cut in 3..out.len() {
            assert!(decode(&out[..cut]).is_err(), "a heartbeat cut at {cut} decoded");
        }
        out.push(0);
        assert_eq!(decode(&out), Err(DecodeError::Trailing(1)));
        assert_eq!(decode(b"FD\x02"), Err(DecodeError::Truncated("instance")));
        let mut out = Vec::new();
        encode_replica_heartbeat(&Heartbeat { member: 2, ..Heartbeat::default() }, 3, 1 << 33, &mut out);
        for cut in 3..out.len() {
            assert!(decode(&out[..cut]).is_err(), "a replica heartbeat cut at {cut} decoded");
        }
    }
}

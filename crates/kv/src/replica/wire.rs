//! Raft's messages in Kairos's own byte codec: what travels between members.
//!
//! The `raft` crate's types are protobuf 2 structs, and protobuf 2's parser has an advisory
//! against it (RUSTSEC-2024-0437: unbounded recursion on crafted unknown fields). Nothing in
//! Kairos hands bytes from a network or a file to protobuf's parser: messages are written
//! field by field here and read back by [`decode_message`], which checks every count against
//! the bytes left and never recurses. The one place `raft` itself parses protobuf is the data
//! of a configuration-change entry; this codec carries such changes as structured fields and
//! rebuilds their bytes with protobuf's *encoder* on arrival, so the parser only ever sees
//! bytes its own encoder wrote.
//!
//! Work per call: linear in the message; allocation: what the message holds, never more than
//! the input's length.

// protobuf's messages carry hidden fields (unknown fields, cached size): they are built from
// `Default` and then filled, as `raft` itself does.
#![allow(clippy::field_reassign_with_default)]

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState, Entry,
    EntryType, HardState, Message, MessageType, Snapshot, SnapshotMetadata,
};

use kairos_services::codec::{DecodeError, Reader, put_bytes, put_i64, put_u64};

/// The first byte of every encoded message: the codec's version. Version 2 carries entries
/// of the store's format 2 (commands' words, [`crate::kv::entry`]), which a member of version
/// 1 would skip as corrupt while its peers applied them: the two do not talk.
pub const WIRE_VERSION: u8 = 2;

/// Writes `msg` after `out`'s current contents.
pub fn encode_message(msg: &Message, out: &mut Vec<u8>) {
    out.push(WIRE_VERSION);
    out.push(msg.get_msg_type() as u8);
    for v in [
        msg.to,
        msg.from,
        msg.term,
        msg.log_term,
        msg.index,
        msg.commit,
        msg.commit_term,
        msg.request_snapshot,
        msg.reject_hint,
    ] {
        put_u64(out, v);
    }
    out.push(u8::from(msg.reject));
    put_i64(out, msg.priority);
    put_bytes(out, &msg.context);
    put_u64(out, msg.entries.len() as u64);
    for e in msg.get_entries() {
        encode_entry(e, out);
    }
    match msg.snapshot.as_ref() {
        Some(snap) => {
            out.push(1);
            encode_snapshot(snap, out);
        }
        None => out.push(0),
    }
}

/// Reads a message written by [`encode_message`]; every byte must be used.
pub fn decode_message(bytes: &[u8]) -> Result<Message, DecodeError> {
    let mut r = Reader::new(bytes);
    let version = r.u8("wire version")?;
    if version != WIRE_VERSION {
        return Err(DecodeError::Invalid { field: "wire version", value: u64::from(version) });
    }
    let kind = r.u8("message type")?;
    let mut msg = Message::default();
    msg.set_msg_type(
        message_type(kind).ok_or(DecodeError::Invalid { field: "message type", value: u64::from(kind) })?,
    );
    msg.to = r.u64("to")?;
    msg.from = r.u64("from")?;
    msg.term = r.u64("term")?;
    msg.log_term = r.u64("log term")?;
    msg.index = r.u64("index")?;
    msg.commit = r.u64("commit")?;
    msg.commit_term = r.u64("commit term")?;
    msg.request_snapshot = r.u64("request snapshot")?;
    msg.reject_hint = r.u64("reject hint")?;
    msg.reject = r.bool("reject")?;
    msg.priority = r.i64("priority")?;
    msg.context = Bytes::copy_from_slice(r.bytes("context")?);
    let entries = r.count("entry count", 6)?;
    let mut list = Vec::with_capacity(entries);
    for _ in 0..entries {
        list.push(decode_entry(&mut r)?);
    }
    msg.set_entries(list.into());
    if r.bool("has snapshot")? {
        msg.set_snapshot(decode_snapshot(&mut r)?);
    }
    r.finish()?;
    Ok(msg)
}

fn message_type(kind: u8) -> Option<MessageType> {
    use MessageType::*;
    const ALL: [MessageType; 19] = [
        MsgHup,
        MsgBeat,
        MsgPropose,
        MsgAppend,
        MsgAppendResponse,
        MsgRequestVote,
        MsgRequestVoteResponse,
        MsgSnapshot,
        MsgHeartbeat,
        MsgHeartbeatResponse,
        MsgUnreachable,
        MsgSnapStatus,
        MsgCheckQuorum,
        MsgTransferLeader,
        MsgTimeoutNow,
        MsgReadIndex,
        MsgReadIndexResp,
        MsgRequestPreVote,
        MsgRequestPreVoteResponse,
    ];
    ALL.get(usize::from(kind)).copied().filter(|t| *t as u8 == kind)
}

/// Writes one log entry (also the log file's entry record).
pub fn encode_entry(e: &Entry, out: &mut Vec<u8>) {
    let kind = e.get_entry_type();
    out.push(kind as u8);
    put_u64(out, e.term);
    put_u64(out, e.index);
    out.push(u8::from(e.sync_log));
    put_bytes(out, &e.context);
    match kind {
        EntryType::EntryNormal => put_bytes(out, &e.data),
        // The bytes here were written by protobuf's encoder: by `raft` when this member
        // proposed the change, or by `decode_entry` when it arrived.
        EntryType::EntryConfChange => match ConfChange::parse_from_bytes(&e.data) {
            Ok(cc) => {
                out.push(1);
                out.push(cc.get_change_type() as u8);
                put_u64(out, cc.node_id);
                put_u64(out, cc.id);
                put_bytes(out, &cc.context);
            }
            Err(_) => out.push(0),
        },
        EntryType::EntryConfChangeV2 => match ConfChangeV2::parse_from_bytes(&e.data) {
            Ok(cc) => {
                out.push(1);
                out.push(cc.get_transition() as u8);
                put_u64(out, cc.changes.len() as u64);
                for c in cc.get_changes() {
                    out.push(c.get_change_type() as u8);
                    put_u64(out, c.node_id);
                }
                put_bytes(out, &cc.context);
            }
            Err(_) => out.push(0),
        },
    }
}

fn change_type(kind: u8) -> Result<ConfChangeType, DecodeError> {
    match kind {
        0 => Ok(ConfChangeType::AddNode),
        1 => Ok(ConfChangeType::RemoveNode),
        2 => Ok(ConfChangeType::AddLearnerNode),
        other => Err(DecodeError::Invalid { field: "conf change type", value: u64::from(other) }),
    }
}

/// Reads one entry written by [`encode_entry`].
pub fn decode_entry(r: &mut Reader<'_>) -> Result<Entry, DecodeError> {
    let kind = r.u8("entry type")?;
    let mut e = Entry::default();
    e.term = r.u64("entry term")?;
    e.index = r.u64("entry index")?;
    e.sync_log = r.bool("sync log")?;
    e.context = Bytes::copy_from_slice(r.bytes("entry context")?);
    match kind {
        0 => {
            e.set_entry_type(EntryType::EntryNormal);
            e.data = Bytes::copy_from_slice(r.bytes("entry data")?);
        }
        1 => {
            e.set_entry_type(EntryType::EntryConfChange);
            if r.bool("conf change present")? {
                let mut cc = ConfChange::default();
                cc.set_change_type(change_type(r.u8("conf change type")?)?);
                cc.node_id = r.u64("node id")?;
                cc.id = r.u64("conf change id")?;
                cc.context = Bytes::copy_from_slice(r.bytes("conf change context")?);
                e.data = protobuf_bytes(&cc);
            }
        }
        2 => {
            e.set_entry_type(EntryType::EntryConfChangeV2);
            if r.bool("conf change present")? {
                let mut cc = ConfChangeV2::default();
                cc.set_transition(match r.u8("transition")? {
                    0 => ConfChangeTransition::Auto,
                    1 => ConfChangeTransition::Implicit,
                    2 => ConfChangeTransition::Explicit,
                    other => {
                        return Err(DecodeError::Invalid { field: "transition", value: u64::from(other) });
                    }
                });
                let n = r.count("change count", 2)?;
                let mut changes = Vec::with_capacity(n);
                for _ in 0..n {
                    let mut single = ConfChangeSingle::default();
                    single.set_change_type(change_type(r.u8("conf change type")?)?);
                    single.node_id = r.u64("node id")?;
                    changes.push(single);
                }
                cc.set_changes(changes.into());
                cc.context = Bytes::copy_from_slice(r.bytes("conf change context")?);
                e.data = protobuf_bytes(&cc);
            }
        }
        other => return Err(DecodeError::Invalid { field: "entry type", value: u64::from(other) }),
    }
    Ok(e)
}

fn protobuf_bytes(msg: &impl protobuf::Message) -> Bytes {
    // Encoding a message built from checked fields cannot fail (no required fields in proto3);
    // an empty payload is what `raft` would then reject as an invalid change.
    Bytes::from(msg.write_to_bytes().unwrap_or_default())
}

/// Writes a snapshot: its metadata and the store's bytes.
pub fn encode_snapshot(s: &Snapshot, out: &mut Vec<u8>) {
    let meta = s.get_metadata();
    put_u64(out, meta.index);
    put_u64(out, meta.term);
    encode_conf_state(meta.get_conf_state(), out);
    put_bytes(out, &s.data);
}

/// Reads a snapshot written by [`encode_snapshot`].
pub fn decode_snapshot(r: &mut Reader<'_>) -> Result<Snapshot, DecodeError> {
    let mut meta = SnapshotMetadata::default();
    meta.index = r.u64("snapshot index")?;
    meta.term = r.u64("snapshot term")?;
    meta.set_conf_state(decode_conf_state(r)?);
    let mut s = Snapshot::default();
    s.set_metadata(meta);
    s.data = Bytes::copy_from_slice(r.bytes("snapshot data")?);
    Ok(s)
}

/// Writes a membership.
pub fn encode_conf_state(cs: &ConfState, out: &mut Vec<u8>) {
    for list in [cs.get_voters(), cs.get_learners(), cs.get_voters_outgoing(), cs.get_learners_next()] {
        put_u64(out, list.len() as u64);
        list.iter().for_each(|&id| put_u64(out, id));
    }
    out.push(u8::from(cs.auto_leave));
}

/// Reads a membership written by [`encode_conf_state`].
pub fn decode_conf_state(r: &mut Reader<'_>) -> Result<ConfState, DecodeError> {
    let mut lists: [Vec<u64>; 4] = Default::default();
    for list in &mut lists {
        let n = r.count("member count", 1)?;
        for _ in 0..n {
            list.push(r.u64("member id")?);
        }
    }
    let [voters, learners, voters_outgoing, learners_next] = lists;
    let mut cs = ConfState::default();
    cs.set_voters(voters);
    cs.set_learners(learners);
    cs.set_voters_outgoing(voters_outgoing);
    cs.set_learners_next(learners_next);
    cs.auto_leave = r.bool("auto leave")?;
    Ok(cs)
}

/// Writes a hard state (term, vote, commit).
pub fn encode_hard_state(hs: &HardState, out: &mut Vec<u8>) {
    put_u64(out, hs.term);
    put_u64(out, hs.vote);
    put_u64(out, hs.commit);
}

/// Reads a hard state written by [`encode_hard_state`].
pub fn decode_hard_state(r: &mut Reader<'_>) -> Result<HardState, DecodeError> {
    let mut hs = HardState::default();
    hs.term = r.u64("term")?;
    hs.vote = r.u64("vote")?;
    hs.commit = r.u64("commit")?;
    Ok(hs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(kind: u8, term: u64, index: u64, data: Vec<u8>) -> Entry {
        let mut e = Entry::default();
        e.term = term;
        e.index = index;
        match kind % 3 {
            0 => e.data = data.into(),
            1 => {
                e.set_entry_type(EntryType::EntryConfChange);
                let mut cc = ConfChange::default();
                cc.set_change_type(ConfChangeType::AddLearnerNode);
                cc.node_id = index;
                cc.context = data.into();
                e.data = protobuf_bytes(&cc);
            }
            _ => {
                e.set_entry_type(EntryType::EntryConfChangeV2);
                let mut cc = ConfChangeV2::default();
                cc.set_transition(ConfChangeTransition::Explicit);
                let mut single = ConfChangeSingle::default();
                single.set_change_type(ConfChangeType::RemoveNode);
                single.node_id = term;
                cc.set_changes(vec![single.clone(), single].into());
                e.data = protobuf_bytes(&cc);
            }
        }
        e
    }

    prop_compose! {
        fn message()(kind in 0u8..19, fields in proptest::array::uniform9(any::<u64>()), reject: bool, priority: i64,
                     context in proptest::collection::vec(any::<u8>(), 0..16),
                     entries in proptest::collection::vec((any::<u8>(), any::<u64>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..24)), 0..4),
                     snapshot in proptest::option::of((any::<u64>(), proptest::collection::vec(1u64..9, 0..4), proptest::collection::vec(any::<u8>(), 0..32))))
                     -> Message {
            let mut m = Message::default();
            m.set_msg_type(message_type(kind).unwrap());
            [m.to, m.from, m.term, m.log_term, m.index, m.commit, m.commit_term, m.request_snapshot, m.reject_hint] = fields;
            m.reject = reject;
            m.priority = priority;
            m.context = context.into();
            m.set_entries(entries.into_iter().map(|(k, t, i, d)| entry(k, t, i, d)).collect::<Vec<_>>().into());
            if let Some((index, voters, data)) = snapshot {
                let mut s = Snapshot::default();
                s.mut_metadata().index = index;
                s.mut_metadata().mut_conf_state().set_voters(voters);
                s.mut_metadata().mut_conf_state().auto_leave = true;
                s.data = data.into();
                m.set_snapshot(s);
            }
            m
        }
    }

    proptest! {
        #[test]
        fn messages_round_trip(m in message()) {
            let mut bytes = Vec::new();
            encode_message(&m, &mut bytes);
            let back = decode_message(&bytes).unwrap();
            prop_assert_eq!(&back, &m);
            for cut in 0..bytes.len() {
                prop_assert!(decode_message(&bytes[..cut]).is_err(), "cut at {}", cut);
            }
        }

        #[test]
        fn any_bytes_decode_or_fail(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_message(&bytes);
        }
    }

    #[test]
    fn every_message_type_has_its_number() {
        for kind in 0..=18u8 {
            assert_eq!(message_type(kind).map(|t| t as u8), Some(kind));
        }
        assert_eq!(message_type(19), None);
    }
}

#[cfg(test)]
mod golden {
    use super::*;
    use crate::kv::{Batch, Request, WriteOp};

    /// An append of one write batch and a conf change, as the fuzzer's seed and as a guard
    /// that the codec's format does not change by accident.
    fn append() -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        (m.to, m.from, m.term, m.log_term, m.index, m.commit) = (2, 1, 3, 3, 41, 40);
        let batch = Batch {
            now_ms: 1_700_000_000_000,
            requests: vec![Request {
                origin: 1,
                client: 7,
                seq: 9,
                completed_below: 9,
                op: WriteOp::words(&["SET", "k", "v", "PX", "500", "NX"]),
            }],
        };
        let mut e = Entry::default();
        (e.term, e.index) = (3, 42);
        e.data = batch.encode().into();
        let mut cc = ConfChange::default();
        cc.set_change_type(ConfChangeType::AddLearnerNode);
        cc.node_id = 4;
        let mut c = Entry::default();
        c.set_entry_type(EntryType::EntryConfChange);
        (c.term, c.index) = (3, 43);
        c.data = protobuf_bytes(&cc);
        m.set_entries(vec![e, c].into());
        m
    }

    #[test]
    fn the_seed_file_decodes_to_the_append() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/raft_wire/append.bin");
        let mut bytes = Vec::new();
        encode_message(&append(), &mut bytes);
        if std::env::var_os("KAIROS_WRITE_GOLDEN").is_some() {
            std::fs::write(path, &bytes).unwrap();
        }
        let stored = std::fs::read(path).expect("fuzz/seeds/raft_wire/append.bin");
        assert_eq!(stored, bytes, "the wire format changed: bump WIRE_VERSION and rewrite the seed");
        assert_eq!(decode_message(&stored).unwrap(), append());
    }
}

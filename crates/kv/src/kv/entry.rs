//! What one Raft log entry of the store carries: the write requests a member gathered within
//! one period, stamped with that member's time, in this crate's byte codec.
//!
//! A member batches every write that arrives within a lane period into one [`Batch`] and
//! proposes it as one entry, so a commit round is paid per period, not per request. An entry
//! that does not decode is skipped by every member alike (decoding is a pure function of the
//! bytes), so a corrupt entry costs its requests, never the replicas' agreement.

use super::command::{Watched, WriteOp};
use kairos_services::codec::{DecodeError, Reader, put_bytes, put_u64};

/// One client write, with the session fields that make its retry harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The member that took the request from its client.
    pub origin: u64,
    /// The client connection at that member.
    pub client: u64,
    /// The request's sequence number on its connection.
    pub seq: u64,
    /// The lowest sequence number whose answer the client has not received.
    pub completed_below: u64,
    /// The write.
    pub op: WriteOp,
}

/// The writes of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The proposing member's `CLOCK_REALTIME` in milliseconds: the writes' time (expiry).
    pub now_ms: u64,
    /// The writes, applied in order.
    pub requests: Vec<Request>,
}

// Format 1 carried typed string commands; its entries still decode (as the same commands'
// words), so a data directory written by an older member replays.
const V1_SET: u8 = 1;
const V1_DEL: u8 = 2;
const V1_INCRBY: u8 = 3;
const V1_APPEND: u8 = 4;
const V1_MSET: u8 = 5;
const V1_FLUSHALL: u8 = 6;
const TAG_EXEC: u8 = 10;
const TAG_TRANSACTION: u8 = 11;
const TAG_EXPIRE: u8 = 12;
const TAG_UNBLOCK: u8 = 13;
const TAG_DROP_WAITERS: u8 = 14;
const FORMAT_VERSION: u8 = 2;

impl Batch {
    /// The entry's bytes.
    pub fn encode(&self) -> Vec<u8> {
        Self::encode_requests(self.now_ms, self.requests.iter())
    }

    /// The bytes of the entry of `requests` at `now_ms`, from requests kept elsewhere (the
    /// leader's in flight), so that none is copied to be written.
    pub fn encode_requests<'a>(now_ms: u64, requests: impl ExactSizeIterator<Item = &'a Request>) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + requests.len() * 64);
        out.push(FORMAT_VERSION);
        put_u64(&mut out, now_ms);
        put_u64(&mut out, requests.len() as u64);
        for r in requests {
            put_u64(&mut out, r.origin);
            put_u64(&mut out, r.client);
            put_u64(&mut out, r.seq);
            put_u64(&mut out, r.completed_below);
            encode_op(&mut out, &r.op);
        }
        out
    }

    /// Reads an entry's bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("entry version")?;
        if version != FORMAT_VERSION && version != 1 {
            return Err(DecodeError::Invalid { field: "entry version", value: u64::from(version) });
        }
        let now_ms = r.u64("entry time")?;
        let count = r.count("request count", 5)?;
        let mut requests = Vec::with_capacity(count);
        for _ in 0..count {
            requests.push(Request {
                origin: r.u64("origin")?,
                client: r.u64("client")?,
                seq: r.u64("seq")?,
                completed_below: r.u64("completed below")?,
                op: if version == 1 { decode_v1_op(&mut r)? } else { decode_op(&mut r)? },
            });
        }
        r.finish()?;
        Ok(Batch { now_ms, requests })
    }
}

fn put_words(out: &mut Vec<u8>, words: &[Vec<u8>]) {
    put_u64(out, words.len() as u64);
    words.iter().for_each(|w| put_bytes(out, w));
}

fn words(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, DecodeError> {
    let n = r.count("word count", 1)?;
    (0..n).map(|_| r.bytes("word").map(<[u8]>::to_vec)).collect()
}

fn command_words(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, DecodeError> {
    let args = words(r)?;
    if args.is_empty() {
        return Err(DecodeError::Invalid { field: "empty command", value: 0 });
    }
    Ok(args)
}

fn encode_op(out: &mut Vec<u8>, op: &WriteOp) {
    match op {
        WriteOp::Exec { db, args } => {
            out.push(TAG_EXEC);
            out.push(*db);
            put_words(out, args);
        }
        WriteOp::Transaction { commands, watched } => {
            out.push(TAG_TRANSACTION);
            put_u64(out, commands.len() as u64);
            for (db, args) in commands {
                out.push(*db);
                put_words(out, args);
            }
            put_u64(out, watched.len() as u64);
            for w in watched {
                out.push(w.db);
                put_bytes(out, &w.key);
                put_u64(out, w.seen);
                put_u64(out, w.mark);
            }
        }
        WriteOp::Expire { db, keys } => {
            out.push(TAG_EXPIRE);
            out.push(*db);
            put_words(out, keys);
        }
        WriteOp::Unblock { args, error } => {
            out.push(TAG_UNBLOCK);
            out.push(u8::from(*error));
            put_words(out, args);
        }
        WriteOp::DropWaiters { below } => {
            out.push(TAG_DROP_WAITERS);
            put_u64(out, *below);
        }
    }
}

fn decode_op(r: &mut Reader<'_>) -> Result<WriteOp, DecodeError> {
    Ok(match r.u8("op")? {
        TAG_EXEC => WriteOp::Exec { db: r.u8("database")?, args: command_words(r)? },
        TAG_TRANSACTION => {
            let n = r.count("command count", 2)?;
            let commands = (0..n)
                .map(|_| Ok((r.u8("database")?, command_words(r)?)))
                .collect::<Result<_, DecodeError>>()?;
            let n = r.count("watched count", 4)?;
            let watched = (0..n)
                .map(|_| {
                    Ok(Watched {
                        db: r.u8("database")?,
                        key: r.bytes("key")?.to_vec(),
                        seen: r.u64("seen")?,
                        mark: r.u64("mark")?,
                    })
                })
                .collect::<Result<_, DecodeError>>()?;
            WriteOp::Transaction { commands, watched }
        }
        TAG_EXPIRE => WriteOp::Expire { db: r.u8("database")?, keys: words(r)? },
        TAG_UNBLOCK => {
            let error = match r.u8("unblock reason")? {
                0 => false,
                1 => true,
                other => {
                    return Err(DecodeError::Invalid { field: "unblock reason", value: u64::from(other) });
                }
            };
            WriteOp::Unblock { error, args: command_words(r)? }
        }
        TAG_DROP_WAITERS => WriteOp::DropWaiters { below: r.u64("first client")? },
        other => return Err(DecodeError::Invalid { field: "op", value: u64::from(other) }),
    })
}

/// A format-1 operation as the words of the command it was.
fn decode_v1_op(r: &mut Reader<'_>) -> Result<WriteOp, DecodeError> {
    let word = |s: &str| s.as_bytes().to_vec();
    let args = match r.u8("op")? {
        V1_SET => {
            let mut args = vec![word("SET"), r.bytes("key")?.to_vec(), r.bytes("value")?.to_vec()];
            if let Some(ttl) = r.u64("ttl")?.checked_sub(1) {
                args.extend([word("PX"), ttl.max(1).to_string().into_bytes()]);
            }
            match r.u8("set condition")? {
                0 => {}
                1 => args.push(word("NX")),
                2 => args.push(word("XX")),
                other => {
                    return Err(DecodeError::Invalid { field: "set condition", value: u64::from(other) });
                }
            }
            args
        }
        V1_DEL => {
            let keys = words(r)?;
            if keys.is_empty() {
                return Err(DecodeError::Invalid { field: "key count", value: 0 });
            }
            std::iter::once(word("DEL")).chain(keys).collect()
        }
        V1_INCRBY => {
            vec![word("INCRBY"), r.bytes("key")?.to_vec(), r.i64("increment")?.to_string().into_bytes()]
        }
        V1_APPEND => vec![word("APPEND"), r.bytes("key")?.to_vec(), r.bytes("value")?.to_vec()],
        V1_MSET => {
            let n = r.count("pair count", 2)?;
            let mut args = vec![word("MSET")];
            for _ in 0..n {
                args.push(r.bytes("key")?.to_vec());
                args.push(r.bytes("value")?.to_vec());
            }
            args
        }
        V1_FLUSHALL => vec![word("FLUSHALL")],
        other => return Err(DecodeError::Invalid { field: "op", value: u64::from(other) }),
    };
    Ok(WriteOp::Exec { db: 0, args })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = WriteOp> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..8);
        let command = move || proptest::collection::vec(bytes(), 1..5);
        prop_oneof![
            (any::<u8>(), command()).prop_map(|(db, args)| WriteOp::Exec { db, args }),
            (
                proptest::collection::vec((any::<u8>(), command()), 0..3),
                proptest::collection::vec((any::<u8>(), bytes(), any::<u64>(), any::<u64>()), 0..3)
            )
                .prop_map(|(commands, watched)| WriteOp::Transaction {
                    commands,
                    watched: watched
                        .into_iter()
                        .map(|(db, key, seen, mark)| Watched { db, key, seen, mark })
                        .collect(),
                }),
            (any::<u8>(), proptest::collection::vec(bytes(), 0..3))
                .prop_map(|(db, keys)| WriteOp::Expire { db, keys }),
            (command(), any::<bool>()).prop_map(|(args, error)| WriteOp::Unblock { args, error }),
            any::<u64>().prop_map(|below| WriteOp::DropWaiters { below }),
        ]
    }

    #[test]
    fn format_1_entries_decode_as_their_commands() {
        // SET k v PX 5 NX, then INCRBY n -2, as a member of format 1 wrote them.
        let mut bytes = vec![1];
        put_u64(&mut bytes, 77);
        put_u64(&mut bytes, 2);
        for (seq, op) in [(0u64, 1u8), (1, 3)] {
            for field in [2, 9, seq, 0] {
                put_u64(&mut bytes, field);
            }
            bytes.push(op);
            if op == 1 {
                put_bytes(&mut bytes, b"k");
                put_bytes(&mut bytes, b"v");
                put_u64(&mut bytes, 6);
                bytes.push(1);
            } else {
                put_bytes(&mut bytes, b"n");
                kairos_services::codec::put_i64(&mut bytes, -2);
            }
        }
        let batch = Batch::decode(&bytes).unwrap();
        assert_eq!(batch.requests[0].op, WriteOp::words(&["SET", "k", "v", "PX", "5", "NX"]));
        assert_eq!(batch.requests[1].op, WriteOp::words(&["INCRBY", "n", "-2"]));
    }

    proptest! {
        #[test]
        fn batches_round_trip(now_ms: u64, ops in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>(), op()), 0..6)) {
            let batch = Batch {
                now_ms,
                requests: ops.into_iter().map(|(client, seq, completed_below, op)| Request { origin: 3, client, seq, completed_below, op }).collect(),
            };
            let bytes = batch.encode();
            prop_assert_eq!(Batch::decode(&bytes), Ok(batch));
            for cut in 0..bytes.len() {
                prop_assert!(Batch::decode(&bytes[..cut]).is_err());
            }
        }

        #[test]
        fn any_bytes_decode_or_fail(bytes: Vec<u8>) {
            let _ = Batch::decode(&bytes);
        }
    }
}

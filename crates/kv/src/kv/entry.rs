//! What one Raft log entry of the store carries: the write requests a member gathered within
//! one period, stamped with that member's time, in this crate's byte codec.
//!
//! A member batches every write that arrives within a lane period into one [`Batch`] and
//! proposes it as one entry, so a commit round is paid per period, not per request. An entry
//! that does not decode is skipped by every member alike (decoding is a pure function of the
//! bytes), so a corrupt entry costs its requests, never the replicas' agreement.

use super::command::{SetCondition, WriteOp};
use kairos_services::codec::{DecodeError, Reader, put_bytes, put_i64, put_u64};

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

const TAG_SET: u8 = 1;
const TAG_DEL: u8 = 2;
const TAG_INCRBY: u8 = 3;
const TAG_APPEND: u8 = 4;
const TAG_MSET: u8 = 5;
const TAG_FLUSHALL: u8 = 6;
const FORMAT_VERSION: u8 = 1;

impl Batch {
    /// The entry's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.requests.len() * 32);
        out.push(FORMAT_VERSION);
        put_u64(&mut out, self.now_ms);
        put_u64(&mut out, self.requests.len() as u64);
        for r in &self.requests {
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
        if version != FORMAT_VERSION {
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
                op: decode_op(&mut r)?,
            });
        }
        r.finish()?;
        Ok(Batch { now_ms, requests })
    }
}

fn encode_op(out: &mut Vec<u8>, op: &WriteOp) {
    match op {
        WriteOp::Set { key, value, ttl_ms, condition } => {
            out.push(TAG_SET);
            put_bytes(out, key);
            put_bytes(out, value);
            put_u64(out, ttl_ms.map_or(0, |t| t.saturating_add(1)));
            out.push(match condition {
                SetCondition::Always => 0,
                SetCondition::IfAbsent => 1,
                SetCondition::IfPresent => 2,
            });
        }
        WriteOp::Del { keys } => {
            out.push(TAG_DEL);
            put_u64(out, keys.len() as u64);
            keys.iter().for_each(|k| put_bytes(out, k));
        }
        WriteOp::IncrBy { key, by } => {
            out.push(TAG_INCRBY);
            put_bytes(out, key);
            put_i64(out, *by);
        }
        WriteOp::Append { key, value } => {
            out.push(TAG_APPEND);
            put_bytes(out, key);
            put_bytes(out, value);
        }
        WriteOp::MSet { pairs } => {
            out.push(TAG_MSET);
            put_u64(out, pairs.len() as u64);
            for (k, v) in pairs {
                put_bytes(out, k);
                put_bytes(out, v);
            }
        }
        WriteOp::FlushAll => out.push(TAG_FLUSHALL),
    }
}

fn decode_op(r: &mut Reader<'_>) -> Result<WriteOp, DecodeError> {
    let tag = r.u8("op")?;
    Ok(match tag {
        TAG_SET => {
            let key = r.bytes("key")?.to_vec();
            let value = r.bytes("value")?.to_vec();
            let ttl_ms = r.u64("ttl")?.checked_sub(1);
            let condition = match r.u8("set condition")? {
                0 => SetCondition::Always,
                1 => SetCondition::IfAbsent,
                2 => SetCondition::IfPresent,
                other => {
                    return Err(DecodeError::Invalid { field: "set condition", value: u64::from(other) });
                }
            };
            WriteOp::Set { key, value, ttl_ms, condition }
        }
        TAG_DEL => {
            let n = r.count("key count", 1)?;
            let keys = (0..n).map(|_| r.bytes("key").map(<[u8]>::to_vec)).collect::<Result<_, _>>()?;
            WriteOp::Del { keys }
        }
        TAG_INCRBY => WriteOp::IncrBy { key: r.bytes("key")?.to_vec(), by: r.i64("increment")? },
        TAG_APPEND => WriteOp::Append { key: r.bytes("key")?.to_vec(), value: r.bytes("value")?.to_vec() },
        TAG_MSET => {
            let n = r.count("pair count", 2)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((r.bytes("key")?.to_vec(), r.bytes("value")?.to_vec()));
            }
            WriteOp::MSet { pairs }
        }
        TAG_FLUSHALL => WriteOp::FlushAll,
        other => return Err(DecodeError::Invalid { field: "op", value: u64::from(other) }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = WriteOp> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..8);
        prop_oneof![
            (bytes(), bytes(), proptest::option::of(any::<u64>()), 0u8..3).prop_map(
                |(key, value, ttl_ms, c)| WriteOp::Set {
                    key,
                    value,
                    ttl_ms: ttl_ms.map(|t| t.min(u64::MAX - 1)),
                    condition: [SetCondition::Always, SetCondition::IfAbsent, SetCondition::IfPresent]
                        [c as usize],
                }
            ),
            proptest::collection::vec(bytes(), 1..4).prop_map(|keys| WriteOp::Del { keys }),
            (bytes(), any::<i64>()).prop_map(|(key, by)| WriteOp::IncrBy { key, by }),
            (bytes(), bytes()).prop_map(|(key, value)| WriteOp::Append { key, value }),
            proptest::collection::vec((bytes(), bytes()), 1..4).prop_map(|pairs| WriteOp::MSet { pairs }),
            Just(WriteOp::FlushAll),
        ]
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

//! What a key holds: one of Redis's five core types, and the bookkeeping every key carries
//! (its expiry and the version WATCH compares).
//!
//! Containers keep an order that is a pure function of the operations applied and that a
//! snapshot writes out and restores as is ([`indexmap`]'s insertion order with `swap_remove`,
//! a list's sequence, a sorted set's score order), so a random pick (SPOP, SRANDMEMBER with a
//! seed from the log) lands on the same element on every member, restored from a snapshot or
//! not.

use std::collections::VecDeque;

use indexmap::{IndexMap, IndexSet};

use super::zset::ZSet;
use kairos_services::codec::{DecodeError, Reader, put_bytes, put_u64};

/// A value of one of Redis's types.
///
/// The containers are boxed so that a value is a string's size: every key's slot in the
/// table holds one, and most keys hold strings, which would otherwise pay for the largest
/// container in memory and in every move.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string (also integers and floats, kept as their text, as Redis does).
    Str(Vec<u8>),
    /// A list.
    List(Box<VecDeque<Vec<u8>>>),
    /// A hash: field to value.
    Hash(Box<IndexMap<Vec<u8>, Vec<u8>>>),
    /// A set.
    Set(Box<IndexSet<Vec<u8>>>),
    /// A sorted set.
    ZSet(Box<ZSet>),
}

/// The error Redis gives for a command on a key of another type.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl Value {
    /// The name TYPE answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
        }
    }

    /// Whether an aggregate holds nothing (Redis removes such a key).
    pub fn is_empty_aggregate(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::List(l) => l.is_empty(),
            Value::Hash(h) => h.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::ZSet(z) => z.is_empty(),
        }
    }
}

/// A key's value with its expiry and version.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The value.
    pub value: Value,
    /// When the key expires (`CLOCK_REALTIME` ms), if it does; changed only through
    /// [`super::db::Db`], which keeps its expiry index.
    pub(crate) expires_at_ms: Option<u64>,
    /// The store's modification count when the key last changed (WATCH compares it).
    pub(crate) version: u64,
}

impl Item {
    /// When the key expires, if it does.
    pub fn expires_at_ms(&self) -> Option<u64> {
        self.expires_at_ms
    }

    /// Whether the key is live at `now_ms`.
    pub fn live(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_none_or(|t| t > now_ms)
    }
}

/// Writes a value in the snapshot's format (DUMP uses it too).
pub fn encode_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Str(s) => {
            out.push(0);
            put_bytes(out, s);
        }
        Value::List(l) => {
            out.push(1);
            put_u64(out, l.len() as u64);
            l.iter().for_each(|e| put_bytes(out, e));
        }
        Value::Hash(h) => {
            out.push(2);
            put_u64(out, h.len() as u64);
            for (f, v) in h.iter() {
                put_bytes(out, f);
                put_bytes(out, v);
            }
        }
        Value::Set(s) => {
            out.push(3);
            put_u64(out, s.len() as u64);
            s.iter().for_each(|m| put_bytes(out, m));
        }
        Value::ZSet(z) => {
            out.push(4);
            put_u64(out, z.len() as u64);
            for i in 0..z.len() {
                if let Some((m, score)) = z.by_index(i) {
                    put_bytes(out, m);
                    put_u64(out, score.to_bits());
                }
            }
        }
    }
}

/// Reads a value written by [`encode_value`].
pub fn decode_value(r: &mut Reader<'_>) -> Result<Value, DecodeError> {
    let invalid = |field| DecodeError::Invalid { field, value: 0 };
    Ok(match r.u8("value type")? {
        0 => Value::Str(r.bytes("string")?.to_vec()),
        1 => {
            let n = r.count("list length", 1)?;
            Value::List(Box::new(
                (0..n).map(|_| r.bytes("list element").map(<[u8]>::to_vec)).collect::<Result<_, _>>()?,
            ))
        }
        2 => {
            let n = r.count("hash length", 2)?;
            let mut h = indexmap::IndexMap::with_capacity(n);
            for _ in 0..n {
                let field = r.bytes("hash field")?.to_vec();
                if h.insert(field, r.bytes("hash value")?.to_vec()).is_some() {
                    return Err(invalid("repeated hash field"));
                }
            }
            Value::Hash(Box::new(h))
        }
        3 => {
            let n = r.count("set length", 1)?;
            let mut s = indexmap::IndexSet::with_capacity(n);
            for _ in 0..n {
                if !s.insert(r.bytes("set member")?.to_vec()) {
                    return Err(invalid("repeated set member"));
                }
            }
            Value::Set(Box::new(s))
        }
        4 => {
            let n = r.count("sorted set length", 2)?;
            let mut z = ZSet::new();
            for _ in 0..n {
                let member = r.bytes("sorted set member")?.to_vec();
                let score = f64::from_bits(r.u64("score")?);
                if score.is_nan() || z.insert(member, score).is_some() {
                    return Err(invalid("sorted set member"));
                }
            }
            Value::ZSet(Box::new(z))
        }
        other => return Err(DecodeError::Invalid { field: "value type", value: u64::from(other) }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_a_string_and_a_tag_at_most() {
        assert!(size_of::<Value>() <= size_of::<Vec<u8>>() + 8, "{} bytes", size_of::<Value>());
    }

    #[test]
    fn every_type_round_trips() {
        let mut zset = ZSet::new();
        zset.insert(b"m".to_vec(), 1.5);
        let values = [
            Value::Str(b"s".to_vec()),
            Value::List(Box::new([b"a".to_vec(), b"b".to_vec()].into())),
            Value::Hash(Box::new([(b"f".to_vec(), b"v".to_vec())].into_iter().collect())),
            Value::Set(Box::new([b"x".to_vec(), b"y".to_vec()].into_iter().collect())),
            Value::ZSet(Box::new(zset)),
        ];
        for value in values {
            let mut bytes = Vec::new();
            encode_value(&mut bytes, &value);
            let mut r = Reader::new(&bytes);
            assert_eq!(decode_value(&mut r).unwrap(), value);
        }
    }
}

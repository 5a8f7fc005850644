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

/// A value of one of Redis's types.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string (also integers and floats, kept as their text, as Redis does).
    Str(Vec<u8>),
    /// A list.
    List(VecDeque<Vec<u8>>),
    /// A hash: field to value.
    Hash(IndexMap<Vec<u8>, Vec<u8>>),
    /// A set.
    Set(IndexSet<Vec<u8>>),
    /// A sorted set.
    ZSet(ZSet),
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

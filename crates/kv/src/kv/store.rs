//! The replicated state machine: the keys and values, and the client sessions that make a
//! retried request take effect once.
//!
//! Determinism is the contract: every member that applies the same entries in the same order
//! holds the same [`Store`] and answers the same. Hence writes take their notion of time from
//! the entry ([`super::entry::Batch::now_ms`], stamped by the member that proposed it), never
//! from the member's clock, and the session table evicts by log position, not by wall time.
//! Reads are local by nature and use the reading member's clock for expiry: on one host all
//! members share `CLOCK_REALTIME`; across hosts a key may outlive its TTL by the clocks' skew.
//!
//! Sessions: each request carries `(origin, client, seq)` (the member that took it, the client
//! connection there, a sequence number per connection) and `completed_below`, the lowest
//! sequence number whose answer the client has not yet received. The store remembers the
//! answers of sequence numbers at or above it, so a request proposed twice (a retry after a
//! dropped proposal or a leader change) is applied once and answered the same both times.
//! Work per request: O(1) expected; memory: at most [`MAX_SESSIONS`] sessions of at most
//! [`MAX_REPLIES_PER_SESSION`] answers each.

use hashbrown::HashMap;
use std::collections::BTreeMap;

use super::command::{ReadOp, SetCondition, WriteOp, parse_i64};
use super::entry::Request;
use super::reply::Reply;
use kairos_services::codec::{DecodeError, Reader, put_bytes, put_i64, put_u64};

/// Sessions kept; past this, the least recently used tenth is forgotten (a retry of theirs
/// would then apply again).
pub const MAX_SESSIONS: usize = 100_000;
/// Answers kept per session: requests a client may have in flight at once.
pub const MAX_REPLIES_PER_SESSION: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Value {
    bytes: Vec<u8>,
    expires_at_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Session {
    completed_below: u64,
    last_index: u64,
    replies: BTreeMap<u64, Reply>,
}

/// What applying a request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The request took effect now; its answer.
    Fresh(Reply),
    /// The request had taken effect before (a retry); the answer it had then.
    Repeat(Reply),
    /// The client had already received this request's answer: nothing to do or say.
    Stale,
}

impl Applied {
    /// The answer to give, if any.
    pub fn reply(self) -> Option<Reply> {
        match self {
            Applied::Fresh(r) | Applied::Repeat(r) => Some(r),
            Applied::Stale => None,
        }
    }
}

/// The keys, their values and the client sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Store {
    data: HashMap<Vec<u8>, Value>,
    sessions: HashMap<(u64, u64), Session>,
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of live keys at `now_ms` (DBSIZE; counts keys whose expiry has passed but that
    /// are not yet removed as Redis does, lazily: here they are left out).
    pub fn len(&self, now_ms: u64) -> usize {
        self.data.values().filter(|v| live(v, now_ms)).count()
    }

    /// True when no key is live.
    pub fn is_empty(&self, now_ms: u64) -> bool {
        self.len(now_ms) == 0
    }

    /// Applies one request of a committed entry at log position `index`.
    pub fn apply(&mut self, request: &Request, now_ms: u64, index: u64) -> Applied {
        let id = (request.origin, request.client);
        let session = self.sessions.entry(id).or_default();
        session.last_index = index;
        if request.completed_below > session.completed_below {
            session.completed_below = request.completed_below;
            let keep = session.replies.split_off(&request.completed_below);
            session.replies = keep;
        }
        if request.seq < session.completed_below {
            return Applied::Stale;
        }
        if let Some(reply) = session.replies.get(&request.seq) {
            return Applied::Repeat(reply.clone());
        }
        let reply = self.apply_write(&request.op, now_ms);
        let session = self.sessions.get_mut(&id).expect("inserted above");
        session.replies.insert(request.seq, reply.clone());
        if session.replies.len() > MAX_REPLIES_PER_SESSION {
            session.replies.pop_first();
        }
        if self.sessions.len() > MAX_SESSIONS {
            self.evict_sessions();
        }
        Applied::Fresh(reply)
    }

    fn evict_sessions(&mut self) {
        let mut ages: Vec<u64> = self.sessions.values().map(|s| s.last_index).collect();
        let cut = ages.len() / 10;
        let (_, &mut threshold, _) = ages.select_nth_unstable(cut);
        self.sessions.retain(|_, s| s.last_index > threshold);
    }

    fn live_value(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Value> {
        if self.data.get(key).is_some_and(|v| !live(v, now_ms)) {
            self.data.remove(key);
        }
        self.data.get_mut(key)
    }

    /// Applies a write at the entry's time `now_ms`, outside any session (a snapshot's tests,
    /// the simulator's model); [`Store::apply`] is the path for client requests.
    pub fn apply_write(&mut self, op: &WriteOp, now_ms: u64) -> Reply {
        match op {
            WriteOp::Set { key, value, ttl_ms, condition } => {
                let exists = self.live_value(key, now_ms).is_some();
                match (condition, exists) {
                    (SetCondition::IfAbsent, true) | (SetCondition::IfPresent, false) => return Reply::Nil,
                    _ => {}
                }
                let expires_at_ms = ttl_ms.map(|t| now_ms.saturating_add(t));
                self.data.insert(key.clone(), Value { bytes: value.clone(), expires_at_ms });
                Reply::Ok
            }
            WriteOp::Del { keys } => {
                let mut removed = 0;
                for key in keys {
                    if self.live_value(key, now_ms).is_some() {
                        self.data.remove(key);
                        removed += 1;
                    }
                }
                Reply::Integer(removed)
            }
            WriteOp::IncrBy { key, by } => {
                let current = match self.live_value(key, now_ms) {
                    None => 0,
                    Some(v) => match parse_i64(&v.bytes) {
                        Some(n) => n,
                        None => return Reply::Error("ERR value is not an integer or out of range".into()),
                    },
                };
                let Some(next) = current.checked_add(*by) else {
                    return Reply::Error("ERR increment or decrement would overflow".into());
                };
                let bytes = next.to_string().into_bytes();
                match self.live_value(key, now_ms) {
                    Some(v) => v.bytes = bytes,
                    None => {
                        self.data.insert(key.clone(), Value { bytes, expires_at_ms: None });
                    }
                }
                Reply::Integer(next)
            }
            WriteOp::Append { key, value } => {
                let len = match self.live_value(key, now_ms) {
                    Some(v) => {
                        v.bytes.extend_from_slice(value);
                        v.bytes.len()
                    }
                    None => {
                        self.data.insert(key.clone(), Value { bytes: value.clone(), expires_at_ms: None });
                        value.len()
                    }
                };
                Reply::Integer(len as i64)
            }
            WriteOp::MSet { pairs } => {
                for (key, value) in pairs {
                    self.data.insert(key.clone(), Value { bytes: value.clone(), expires_at_ms: None });
                }
                Reply::Ok
            }
            WriteOp::FlushAll => {
                self.data.clear();
                Reply::Ok
            }
        }
    }

    /// Answers a read from this member's state at its own time `now_ms`.
    pub fn read(&self, op: &ReadOp, now_ms: u64) -> Reply {
        let value = |key: &[u8]| self.data.get(key).filter(|v| live(v, now_ms));
        match op {
            ReadOp::Get { key } => value(key).map_or(Reply::Nil, |v| Reply::Bulk(v.bytes.clone())),
            ReadOp::Exists { keys } => {
                Reply::Integer(keys.iter().filter(|k| value(k).is_some()).count() as i64)
            }
            ReadOp::MGet { keys } => Reply::Array(
                keys.iter().map(|k| value(k).map_or(Reply::Nil, |v| Reply::Bulk(v.bytes.clone()))).collect(),
            ),
            ReadOp::StrLen { key } => Reply::Integer(value(key).map_or(0, |v| v.bytes.len() as i64)),
            ReadOp::DbSize => Reply::Integer(self.len(now_ms) as i64),
        }
    }

    /// The store as bytes, for a Raft snapshot: keys in sorted order, so two equal stores
    /// give equal bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut keys: Vec<&Vec<u8>> = self.data.keys().collect();
        keys.sort();
        put_u64(out, keys.len() as u64);
        for key in keys {
            let v = &self.data[key];
            put_bytes(out, key);
            put_bytes(out, &v.bytes);
            put_u64(out, v.expires_at_ms.map_or(0, |t| t.saturating_add(1)));
        }
        let mut ids: Vec<&(u64, u64)> = self.sessions.keys().collect();
        ids.sort();
        put_u64(out, ids.len() as u64);
        for id in ids {
            let s = &self.sessions[id];
            put_u64(out, id.0);
            put_u64(out, id.1);
            put_u64(out, s.completed_below);
            put_u64(out, s.last_index);
            put_u64(out, s.replies.len() as u64);
            for (seq, reply) in &s.replies {
                put_u64(out, *seq);
                encode_reply(out, reply);
            }
        }
    }

    /// Reads a store written by [`Store::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let mut store = Store::new();
        let keys = r.count("key count", 3)?;
        store.data.reserve(keys);
        for _ in 0..keys {
            let key = r.bytes("key")?.to_vec();
            let bytes = r.bytes("value")?.to_vec();
            let expiry = r.u64("expiry")?;
            let expires_at_ms = expiry.checked_sub(1);
            store.data.insert(key, Value { bytes, expires_at_ms });
        }
        let sessions = r.count("session count", 5)?;
        for _ in 0..sessions {
            let id = (r.u64("origin")?, r.u64("client")?);
            let mut session = Session {
                completed_below: r.u64("completed below")?,
                last_index: r.u64("last index")?,
                ..Session::default()
            };
            let replies = r.count("reply count", 2)?;
            for _ in 0..replies {
                let seq = r.u64("seq")?;
                session.replies.insert(seq, decode_reply(&mut r)?);
            }
            store.sessions.insert(id, session);
        }
        r.finish()?;
        Ok(store)
    }
}

fn live(v: &Value, now_ms: u64) -> bool {
    v.expires_at_ms.is_none_or(|t| t > now_ms)
}

/// Writes a write's reply (the kinds writes give: OK, nil, integer, error).
fn encode_reply(out: &mut Vec<u8>, reply: &Reply) {
    match reply {
        Reply::Ok => out.push(0),
        Reply::Nil => out.push(1),
        Reply::Integer(n) => {
            out.push(2);
            put_i64(out, *n);
        }
        Reply::Error(e) => {
            out.push(3);
            put_bytes(out, e.as_bytes());
        }
        // Writes answer nothing else; keep the kind if one ever does, as an error.
        other => {
            out.push(3);
            put_bytes(out, format!("ERR unrecorded reply {other:?}").as_bytes());
        }
    }
}

fn decode_reply(r: &mut Reader<'_>) -> Result<Reply, DecodeError> {
    Ok(match r.u8("reply kind")? {
        0 => Reply::Ok,
        1 => Reply::Nil,
        2 => Reply::Integer(r.i64("integer reply")?),
        3 => Reply::Error(String::from_utf8_lossy(r.bytes("error reply")?).into_owned()),
        other => return Err(DecodeError::Invalid { field: "reply kind", value: u64::from(other) }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> WriteOp {
        WriteOp::Set { key: key.into(), value: value.into(), ttl_ms: None, condition: SetCondition::Always }
    }

    fn request(client: u64, seq: u64, completed_below: u64, op: WriteOp) -> Request {
        Request { origin: 1, client, seq, completed_below, op }
    }

    #[test]
    fn commands_answer_as_redis() {
        let mut s = Store::new();
        assert_eq!(s.apply_write(&set("a", "1"), 0), Reply::Ok);
        assert_eq!(s.apply_write(&WriteOp::IncrBy { key: "a".into(), by: 41 }, 0), Reply::Integer(42));
        assert_eq!(
            s.apply_write(&WriteOp::Append { key: "a".into(), value: "x".into() }, 0),
            Reply::Integer(3)
        );
        assert_eq!(
            s.apply_write(&WriteOp::IncrBy { key: "a".into(), by: 1 }, 0),
            Reply::Error("ERR value is not an integer or out of range".into())
        );
        s.apply_write(&set("m", &i64::MAX.to_string()), 0);
        assert_eq!(
            s.apply_write(&WriteOp::IncrBy { key: "m".into(), by: 1 }, 0),
            Reply::Error("ERR increment or decrement would overflow".into())
        );
        let nx = WriteOp::Set {
            key: "a".into(),
            value: "z".into(),
            ttl_ms: None,
            condition: SetCondition::IfAbsent,
        };
        assert_eq!(s.apply_write(&nx, 0), Reply::Nil);
        assert_eq!(s.read(&ReadOp::Get { key: "a".into() }, 0), Reply::Bulk(b"42x".to_vec()));
        assert_eq!(
            s.read(&ReadOp::Exists { keys: vec!["a".into(), "a".into(), "b".into()] }, 0),
            Reply::Integer(2)
        );
        assert_eq!(s.apply_write(&WriteOp::Del { keys: vec!["a".into(), "b".into()] }, 0), Reply::Integer(1));
        assert_eq!(
            s.read(&ReadOp::MGet { keys: vec!["a".into(), "m".into()] }, 0).clone(),
            Reply::Array(vec![Reply::Nil, Reply::Bulk(i64::MAX.to_string().into_bytes())])
        );
    }

    #[test]
    fn expiry_uses_the_entry_time_for_writes_and_the_reader_time_for_reads() {
        let mut s = Store::new();
        let ex = WriteOp::Set {
            key: "k".into(),
            value: "v".into(),
            ttl_ms: Some(100),
            condition: SetCondition::Always,
        };
        s.apply_write(&ex, 1_000);
        assert_eq!(s.read(&ReadOp::Get { key: "k".into() }, 1_099), Reply::Bulk(b"v".to_vec()));
        assert_eq!(s.read(&ReadOp::Get { key: "k".into() }, 1_100), Reply::Nil);
        assert_eq!(s.read(&ReadOp::DbSize, 1_100), Reply::Integer(0));
        // XX sees the key as gone at the entry's time.
        let xx = WriteOp::Set {
            key: "k".into(),
            value: "w".into(),
            ttl_ms: None,
            condition: SetCondition::IfPresent,
        };
        assert_eq!(s.apply_write(&xx, 1_100), Reply::Nil);
        assert_eq!(s.apply_write(&WriteOp::IncrBy { key: "k".into(), by: 2 }, 1_200), Reply::Integer(2));
    }

    #[test]
    fn a_retried_request_applies_once_and_answers_the_same() {
        let mut s = Store::new();
        let incr = request(7, 0, 0, WriteOp::IncrBy { key: "n".into(), by: 1 });
        assert_eq!(s.apply(&incr, 0, 1), Applied::Fresh(Reply::Integer(1)));
        assert_eq!(s.apply(&incr, 0, 2), Applied::Repeat(Reply::Integer(1)));
        // Out of order: seq 2 commits before seq 1's retry; both apply once.
        let two = request(7, 2, 0, WriteOp::IncrBy { key: "n".into(), by: 10 });
        let one = request(7, 1, 0, WriteOp::IncrBy { key: "n".into(), by: 100 });
        assert_eq!(s.apply(&two, 0, 3), Applied::Fresh(Reply::Integer(11)));
        assert_eq!(s.apply(&one, 0, 4), Applied::Fresh(Reply::Integer(111)));
        assert_eq!(s.apply(&one, 0, 5), Applied::Repeat(Reply::Integer(111)));
        // Once the client says it has every answer below 3, the answers are dropped.
        let three = request(7, 3, 3, WriteOp::IncrBy { key: "n".into(), by: 1000 });
        assert_eq!(s.apply(&three, 0, 6), Applied::Fresh(Reply::Integer(1111)));
        assert_eq!(s.apply(&one, 0, 7), Applied::Stale);
        assert_eq!(s.sessions[&(1, 7)].replies.len(), 1);
        // Another client's sequence numbers are its own.
        let other = request(8, 0, 0, WriteOp::IncrBy { key: "n".into(), by: 1 });
        assert_eq!(s.apply(&other, 0, 8), Applied::Fresh(Reply::Integer(1112)));
    }

    #[test]
    fn sessions_are_bounded() {
        let mut s = Store::new();
        for client in 0..(MAX_SESSIONS as u64 + 10) {
            s.apply(&request(client, 0, 0, set("k", "v")), 0, client + 1);
        }
        assert!(s.sessions.len() <= MAX_SESSIONS);
        assert!(s.sessions.contains_key(&(1, MAX_SESSIONS as u64 + 9)), "the newest session is kept");
        for seq in 0..(MAX_REPLIES_PER_SESSION as u64 + 5) {
            s.apply(&request(u64::MAX, seq, 0, set("k", "v")), 0, 1 << 40);
        }
        assert_eq!(s.sessions[&(1, u64::MAX)].replies.len(), MAX_REPLIES_PER_SESSION);
    }

    #[test]
    fn snapshot_round_trips_and_rejects_garbage() {
        let mut s = Store::new();
        s.apply(&request(1, 0, 0, set("a", "1")), 5, 1);
        s.apply(&request(1, 1, 0, WriteOp::IncrBy { key: "a".into(), by: 1 }), 5, 2);
        s.apply_write(
            &WriteOp::Set {
                key: "t".into(),
                value: "v".into(),
                ttl_ms: Some(0),
                condition: SetCondition::Always,
            },
            0,
        );
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        assert_eq!(Store::decode(&bytes).unwrap(), s);
        for cut in 0..bytes.len() {
            assert!(Store::decode(&bytes[..cut]).is_err(), "a snapshot cut at {cut} must not decode");
        }
    }
}

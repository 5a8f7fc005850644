//! The replicated state machine: sixteen databases of Redis values, and the client sessions
//! that make a retried request take effect once.
//!
//! Determinism is the contract: every member that applies the same entries in the same order
//! holds the same [`Store`] and answers the same. Hence writes take their notion of time from
//! the entry ([`super::entry::Batch::now_ms`], stamped by the member that proposed it), never
//! from the member's clock; random picks take their seed from the log position; and the
//! session table evicts by log position, not by wall time. Reads are local by nature and use
//! the reading member's clock for expiry: on one host all members share `CLOCK_REALTIME`;
//! across hosts a key may outlive its TTL by the clocks' skew.
//!
//! Sessions: each request carries `(origin, client, seq)` (the member that took it, the client
//! connection there, a sequence number per connection) and `completed_below`, the lowest
//! sequence number whose answer the client has not yet received. The store remembers the
//! answers of sequence numbers at or above it, so a request proposed twice (a retry after a
//! dropped proposal or a leader change) is applied once and answered the same both times.
//! Work per request: O(1) expected; memory: at most [`MAX_SESSIONS`] sessions of at most
//! [`MAX_REPLIES_PER_SESSION`] answers each.
//!
//! Blocked clients ([`super::blocked`]) are state too: a pop that finds nothing waits here,
//! and the write that feeds its key serves it before the entry's next request, its answer
//! recorded in its session and handed to its member ([`Store::take_woken`]). A write then
//! costs a look at each waiter (none when no client waits).

use hashbrown::HashMap;
use std::collections::{BTreeMap, VecDeque};

use super::blocked::{self, Blocked, MAX_WAITERS, Waiter};
use super::cmd::{self, Ctx, Handler, Rng, View, args};
use super::command::{ReadOp, Watched, WriteOp};
use super::db::Db;
use super::entry::Request;
use super::reply::Reply;
use super::value::{Item, Value, decode_value, encode_value};
use kairos_services::codec::{DecodeError, Reader, put_bytes, put_i64, put_u64};

/// Sessions kept; past this, the least recently used tenth is forgotten (a retry of theirs
/// would then apply again).
pub const MAX_SESSIONS: usize = 100_000;
/// Answers kept per session: requests a client may have in flight at once.
pub const MAX_REPLIES_PER_SESSION: usize = 1024;
/// Databases SELECT reaches (Redis's default `databases`).
pub const DATABASES: usize = 16;

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

/// A blocked client served by a later write: its request and the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Woken {
    /// The member that took the request.
    pub origin: u64,
    /// The client there.
    pub client: u64,
    /// The request's sequence number.
    pub seq: u64,
    /// Its answer.
    pub reply: Reply,
}

/// The databases and the client sessions.
#[derive(Debug, Clone, PartialEq)]
pub struct Store {
    dbs: Vec<Db>,
    /// Commands applied that could change data: the version a changed key is stamped with.
    mods: u64,
    sessions: HashMap<(u64, u64), Session>,
    /// Clients waiting in a blocking pop, in the order they blocked.
    blocked: Blocked,
    /// Waiters served since [`Store::take_woken`] last took them.
    woken: Vec<Woken>,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            dbs: vec![Db::default(); DATABASES],
            mods: 0,
            sessions: HashMap::new(),
            blocked: Blocked::default(),
            woken: Vec::new(),
        }
    }
}

impl Store {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Live keys in database 0 at `now_ms`.
    pub fn len(&self, now_ms: u64) -> usize {
        self.dbs[0].len(now_ms)
    }

    /// True when database 0 has no live key.
    pub fn is_empty(&self, now_ms: u64) -> bool {
        self.len(now_ms) == 0
    }

    /// Database `db` (0 to 15).
    pub fn db(&self, db: u8) -> &Db {
        &self.dbs[usize::from(db) % DATABASES]
    }

    /// The modification count: WATCH's mark.
    pub fn mods(&self) -> u64 {
        self.mods
    }

    /// Live keys and keys with an expiry, per database that has any (INFO's keyspace).
    pub fn keyspace(&self, now_ms: u64) -> Vec<(usize, usize, usize)> {
        self.dbs
            .iter()
            .enumerate()
            .filter(|(_, d)| d.stored() > 0)
            .map(|(i, d)| (i, d.len(now_ms), d.expiring_len()))
            .collect()
    }

    /// Up to `limit` keys of database `db` expired at `now_ms` (for the leader's proposals).
    pub fn expired_keys(&self, db: u8, now_ms: u64, limit: usize) -> Vec<Vec<u8>> {
        self.db(db).expired_keys(now_ms, limit)
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
        let waiter_id = (request.origin, request.client, request.seq);
        match &request.op {
            WriteOp::Unblock { args, error } => {
                // Not served before (its answer would be recorded): it stops waiting now.
                self.blocked.remove(waiter_id);
                let reply = blocked::unblocked_reply(args, *error);
                self.record(id, request.seq, reply.clone(), index);
                return Applied::Fresh(reply);
            }
            WriteOp::DropWaiters { below } => {
                self.blocked.drop_origin(request.origin, *below);
                self.record(id, request.seq, Reply::Ok, index);
                return Applied::Fresh(Reply::Ok);
            }
            _ => {}
        }
        let seed = index.rotate_left(32) ^ request.seq ^ request.client.rotate_left(16) ^ request.origin;
        let reply = self.run(&request.op, now_ms, seed);
        if reply == Reply::WouldBlock {
            // A retry of a request that already waits: its member knows.
            if self.blocked.contains(waiter_id) {
                return Applied::Stale;
            }
            let WriteOp::Exec { db, args } = &request.op else { return Applied::Fresh(reply) };
            if self.blocked.len() >= MAX_WAITERS {
                let reply = blocked::unblocked_reply(args, false);
                self.record(id, request.seq, reply.clone(), index);
                return Applied::Fresh(reply);
            }
            self.blocked.push(Waiter {
                origin: request.origin,
                client: request.client,
                seq: request.seq,
                db: *db,
                words: args.clone(),
            });
            return Applied::Fresh(reply);
        }
        self.record(id, request.seq, reply.clone(), index);
        self.serve_blocked(now_ms, index);
        Applied::Fresh(reply)
    }

    /// Remembers the answer of request `seq` of session `id`, applied at log position `index`.
    fn record(&mut self, id: (u64, u64), seq: u64, reply: Reply, index: u64) {
        let session = self.sessions.entry(id).or_default();
        session.last_index = index;
        session.replies.insert(seq, reply);
        if session.replies.len() > MAX_REPLIES_PER_SESSION {
            session.replies.pop_first();
        }
        if self.sessions.len() > MAX_SESSIONS {
            self.evict_sessions();
        }
    }

    /// Serves the waiters whose keys hold data, in the order they blocked, and again while a
    /// pass serves one (what a BLMOVE pushes may feed another waiter). Each served waiter's
    /// command runs as it would have when it arrived, seeded by its own request.
    fn serve_blocked(&mut self, now_ms: u64, index: u64) {
        let mut served = true;
        while served && !self.blocked.is_empty() {
            served = false;
            let mut at = 0;
            while let Some(w) = self.blocked.get(at) {
                if !w.fed(self.db(w.db), now_ms) {
                    at += 1;
                    continue;
                }
                let seed = index.rotate_left(32) ^ w.seq ^ w.client.rotate_left(16) ^ w.origin;
                let Some(w) = self.blocked.remove_at(at) else { break };
                let reply = self.exec(w.db, &w.words, now_ms, &Rng::new(seed));
                if reply == Reply::WouldBlock {
                    // Fed, yet nothing to take for it (a wrong type on another key is an
                    // answer, so this is rare): it keeps its place.
                    self.blocked.insert_at(at, w);
                    at += 1;
                    continue;
                }
                self.record((w.origin, w.client), w.seq, reply.clone(), index);
                self.woken.push(Woken { origin: w.origin, client: w.client, seq: w.seq, reply });
                served = true;
            }
        }
    }

    /// The blocked clients served since the last call, in the order they were served.
    pub fn take_woken(&mut self) -> Vec<Woken> {
        std::mem::take(&mut self.woken)
    }

    /// How many clients wait in a blocking pop, of every member.
    pub fn waiters(&self) -> usize {
        self.blocked.len()
    }

    /// Drops every blocking pop of member `origin`'s clients, when the member leaves the
    /// cluster: its clients went with it, and a push would otherwise serve one of them, an
    /// element taken for no one. Returns how many. Deterministic: every member calls it where
    /// the removal applies in the log.
    pub fn drop_waiters_of(&mut self, origin: u64) -> usize {
        self.blocked.drop_origin(origin, u64::MAX)
    }

    fn evict_sessions(&mut self) {
        let mut ages: Vec<u64> = self.sessions.values().map(|s| s.last_index).collect();
        let cut = ages.len() / 10;
        let (_, &mut threshold, _) = ages.select_nth_unstable(cut);
        self.sessions.retain(|_, s| s.last_index > threshold);
    }

    /// Applies a write at the entry's time `now_ms`, outside any session (tests, the
    /// simulator's model); [`Store::apply`] is the path for client requests.
    pub fn apply_write(&mut self, op: &WriteOp, now_ms: u64) -> Reply {
        let seed = self.mods;
        self.run(op, now_ms, seed)
    }

    fn run(&mut self, op: &WriteOp, now_ms: u64, seed: u64) -> Reply {
        let rng = Rng::new(seed);
        match op {
            // Outside MULTI a blocking command that finds nothing answers `WouldBlock`; the
            // member keeps its client waiting.
            WriteOp::Exec { db, args } => self.exec(*db, args, now_ms, &rng),
            WriteOp::Transaction { commands, watched } => self.transaction(commands, watched, now_ms, &rng),
            WriteOp::Expire { db, keys } => {
                self.mods += 1;
                let stamp = self.mods;
                let db = self.db_mut(*db);
                db.stamp = stamp;
                args::integer(keys.iter().filter(|k| db.expire_now(k, now_ms)).count())
            }
            // Outside a session (tests, the simulator's model) no client waits.
            WriteOp::Unblock { args, error } => blocked::unblocked_reply(args, *error),
            WriteOp::DropWaiters { .. } => Reply::Ok,
        }
    }

    fn db_mut(&mut self, db: u8) -> &mut Db {
        &mut self.dbs[usize::from(db) % DATABASES]
    }

    fn transaction(
        &mut self,
        commands: &[(u8, Vec<Vec<u8>>)],
        watched: &[Watched],
        now_ms: u64,
        rng: &Rng,
    ) -> Reply {
        if watched.iter().any(|w| self.db(w.db).changed_since(&w.key, w.seen, w.mark, now_ms)) {
            return Reply::NilArray;
        }
        Reply::Array(
            commands
                .iter()
                .map(|(db, args)| match self.exec(*db, args, now_ms, rng) {
                    // Inside a transaction a blocking command does not block (as Redis).
                    Reply::WouldBlock => Reply::NilArray,
                    reply => reply,
                })
                .collect(),
        )
    }

    /// Runs one command's words in database `db` at `now_ms`.
    fn exec(&mut self, db: u8, words: &[Vec<u8>], now_ms: u64, rng: &Rng) -> Reply {
        let Some(spec) = words.first().and_then(|name| cmd::lookup(name)) else {
            return Reply::Error("ERR unknown command in the log".into());
        };
        if !spec.arity_fits(words.len()) {
            return args::wrong_arity(spec.name);
        }
        match spec.handler {
            Handler::Write(f) => {
                self.mods += 1;
                let stamp = self.mods;
                let db = self.db_mut(db);
                db.stamp = stamp;
                guarded(|| f(&mut Ctx { db, now_ms, rng }, words))
            }
            Handler::Read(f) => guarded(|| f(&View { db: self.db(db), now_ms, rng }, words)),
            Handler::Store => {
                self.mods += 1;
                let stamp = self.mods;
                self.dbs.iter_mut().for_each(|d| d.stamp = stamp);
                self.store_command(db, spec.name, words, now_ms)
            }
            Handler::Local => local_in_transaction(spec.name, words, now_ms),
        }
    }

    /// Commands that span databases.
    fn store_command(&mut self, db: u8, name: &str, words: &[Vec<u8>], now_ms: u64) -> Reply {
        let index = |arg: &[u8]| args::db_index(arg).map(usize::from);
        match name {
            "flushall" => {
                match &words[1..] {
                    [] => {}
                    [mode] if args::is(mode, "async") || args::is(mode, "sync") => {}
                    _ => return args::syntax(),
                }
                self.dbs.iter_mut().for_each(Db::clear);
                Reply::Ok
            }
            "swapdb" => {
                let (a, b) = match (index(&words[1]), index(&words[2])) {
                    (Ok(a), Ok(b)) => (a, b),
                    (Err(_), _) => return args::err("ERR invalid first DB index"),
                    (_, Err(_)) => return args::err("ERR invalid second DB index"),
                };
                if a != b {
                    let (lo, hi) = (a.min(b), a.max(b));
                    let (left, right) = self.dbs.split_at_mut(hi);
                    left[lo].swap_contents(&mut right[0]);
                    self.dbs[a].mark_all_changed(now_ms);
                    self.dbs[b].mark_all_changed(now_ms);
                }
                Reply::Ok
            }
            "move" => {
                let to = match index(&words[2]) {
                    Ok(to) => to,
                    Err(e) => return e,
                };
                let from = usize::from(db) % DATABASES;
                if to == from {
                    return args::err("ERR source and destination objects are the same");
                }
                let key = &words[1];
                if !self.dbs[from].contains(key, now_ms) || self.dbs[to].contains(key, now_ms) {
                    return Reply::Integer(0);
                }
                let Some(item) = self.dbs[from].remove(key, now_ms) else { return Reply::Integer(0) };
                let expires = item.expires_at_ms();
                self.dbs[to].insert(key.clone(), item.value, expires);
                Reply::Integer(1)
            }
            "copy" => {
                let (from_key, to_key) = (&words[1], &words[2]);
                let from = usize::from(db) % DATABASES;
                let (mut to, mut replace) = (from, false);
                let mut i = 3;
                while i < words.len() {
                    if args::is(&words[i], "replace") {
                        replace = true;
                    } else if args::is(&words[i], "db") && i + 1 < words.len() {
                        to = match index(&words[i + 1]) {
                            Ok(to) => to,
                            Err(e) => return e,
                        };
                        i += 1;
                    } else {
                        return args::syntax();
                    }
                    i += 1;
                }
                if from == to && from_key == to_key {
                    return args::err("ERR source and destination objects are the same");
                }
                let Some(item) = self.dbs[from].get(from_key, now_ms).cloned() else {
                    return Reply::Integer(0);
                };
                if self.dbs[to].contains(to_key, now_ms) {
                    if !replace {
                        return Reply::Integer(0);
                    }
                    self.dbs[to].remove(to_key, now_ms);
                }
                let expires = item.expires_at_ms();
                self.dbs[to].insert(to_key.clone(), item.value, expires);
                Reply::Integer(1)
            }
            _ => Reply::Error(format!("ERR {name} is not a store command")),
        }
    }

    /// Answers a read from this member's state at its own time `now_ms`.
    pub fn read(&self, op: &ReadOp, now_ms: u64) -> Reply {
        // Reads' picks need not agree between members, only differ between calls.
        static READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let call = READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rng = Rng::new(now_ms ^ self.mods.rotate_left(29) ^ call.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let db = self.db(op.db);
        let Some(name) = op.args.first() else { return Reply::Error("ERR empty command".into()) };
        if args::is(name, "watch") {
            // WATCH's answer for the member: the mark, then each key's version.
            let mut versions = vec![Reply::Integer(self.mods as i64)];
            versions.extend(op.args[1..].iter().map(|k| Reply::Integer(db.version(k, now_ms) as i64)));
            return Reply::Array(versions);
        }
        match cmd::lookup(&op.args[0]) {
            Some(spec) if !spec.arity_fits(op.args.len()) => args::wrong_arity(spec.name),
            Some(cmd::Spec { handler: Handler::Read(f), .. }) => {
                guarded(|| f(&View { db, now_ms, rng: &rng }, &op.args))
            }
            _ => Reply::Error("ERR not a read command".into()),
        }
    }

    /// The store as bytes, for a Raft snapshot: keys in sorted order, so two equal stores
    /// give equal bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, SNAPSHOT_MAGIC);
        out.push(SNAPSHOT_VERSION);
        put_u64(out, self.mods);
        put_u64(out, self.dbs.len() as u64);
        for db in &self.dbs {
            let items = db.raw_items();
            let mut keys: Vec<&Vec<u8>> = items.keys().collect();
            keys.sort();
            put_u64(out, keys.len() as u64);
            for key in keys {
                let item = &items[key];
                put_bytes(out, key);
                encode_value(out, &item.value);
                put_u64(out, item.expires_at_ms().map_or(0, |t| t.saturating_add(1)));
                put_u64(out, item.version);
            }
            let (tombstones, floor) = db.watch_state();
            put_u64(out, tombstones.len() as u64);
            for (version, key) in tombstones {
                put_u64(out, *version);
                put_bytes(out, key);
            }
            put_u64(out, floor);
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
        put_u64(out, self.blocked.len() as u64);
        for w in self.blocked.iter() {
            put_u64(out, w.origin);
            put_u64(out, w.client);
            put_u64(out, w.seq);
            out.push(w.db);
            put_u64(out, w.words.len() as u64);
            w.words.iter().for_each(|word| put_bytes(out, word));
        }
    }

    /// Reads a store written by [`Store::encode`] (or by a member of format 1: strings only).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let first = r.u64("snapshot start")?;
        let mut store = Store::new();
        let mut with_waiters = false;
        if first == SNAPSHOT_MAGIC {
            let version = r.u8("snapshot version")?;
            // Version 2 is version 3 without the waiters.
            with_waiters = version == SNAPSHOT_VERSION;
            if version != SNAPSHOT_VERSION && version != 2 {
                return Err(DecodeError::Invalid { field: "snapshot version", value: u64::from(version) });
            }
            store.mods = r.u64("modification count")?;
            let dbs = r.count("database count", 2)?;
            if dbs != DATABASES {
                return Err(DecodeError::Invalid { field: "database count", value: dbs as u64 });
            }
            for db in 0..DATABASES {
                let n = r.count("key count", 4)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let key = r.bytes("key")?.to_vec();
                    let value = decode_value(&mut r)?;
                    let expires_at_ms = r.u64("expiry")?.checked_sub(1);
                    let version = r.u64("version")?;
                    items.push((key, Item { value, expires_at_ms, version }));
                }
                let n = r.count("tombstone count", 2)?;
                let mut tombstones = VecDeque::with_capacity(n);
                for _ in 0..n {
                    tombstones.push_back((r.u64("tombstone version")?, r.bytes("tombstone key")?.to_vec()));
                }
                let floor = r.u64("tombstone floor")?;
                store.dbs[db] = Db::restore(items, tombstones, floor);
            }
        } else {
            // Format 1: the count of keys, each a string with its expiry.
            let keys = usize::try_from(first)
                .map_err(|_| DecodeError::Invalid { field: "key count", value: first })?;
            if keys > r.remaining() / 3 {
                return Err(DecodeError::Invalid { field: "key count", value: first });
            }
            let mut items = Vec::with_capacity(keys);
            for _ in 0..keys {
                let key = r.bytes("key")?.to_vec();
                let value = Value::Str(r.bytes("value")?.to_vec());
                let expires_at_ms = r.u64("expiry")?.checked_sub(1);
                items.push((key, Item { value, expires_at_ms, version: 0 }));
            }
            store.dbs[0] = Db::restore(items, VecDeque::new(), 0);
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
                session.replies.insert(seq, decode_reply(&mut r, 0)?);
            }
            store.sessions.insert(id, session);
        }
        if with_waiters {
            let waiters = r.count("waiter count", 5)?;
            for _ in 0..waiters {
                let (origin, client, seq, db) = (
                    r.u64("waiter origin")?,
                    r.u64("waiter client")?,
                    r.u64("waiter seq")?,
                    r.u8("waiter database")?,
                );
                let n = r.count("waiter word count", 1)?;
                let words =
                    (0..n).map(|_| r.bytes("waiter word").map(<[u8]>::to_vec)).collect::<Result<_, _>>()?;
                store.blocked.push(Waiter { origin, client, seq, db, words });
            }
        }
        r.finish()?;
        Ok(store)
    }
}

/// Runs a handler; a panic (a defect) becomes an error reply. A write that panicked does so
/// on every member alike (handlers are deterministic), leaving them equal; without this, an
/// entry that panics would stop every member, and again at each restart as it replays.
fn guarded(handler: impl FnOnce() -> Reply) -> Reply {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(handler)).unwrap_or_else(|_| {
        Reply::Error("ERR internal error: the command failed here and on every member alike (a defect; please report it)".into())
    })
}

/// PING, ECHO and TIME queued in a transaction, answered where it applies.
fn local_in_transaction(name: &str, words: &[Vec<u8>], now_ms: u64) -> Reply {
    match (name, words) {
        ("ping", [_]) => Reply::Simple("PONG"),
        ("ping", [_, message]) | ("echo", [_, message]) => Reply::Bulk(message.clone()),
        ("time", [_]) => Reply::Array(vec![
            Reply::Bulk((now_ms / 1000).to_string().into_bytes()),
            Reply::Bulk(((now_ms % 1000) * 1000).to_string().into_bytes()),
        ]),
        ("select", [_, _]) => Reply::Ok,
        // The member answers its own commands (CONFIG, INFO, ...) in this place when the
        // entry comes back to it.
        _ => Reply::Nil,
    }
}

/// Starts a snapshot of format 2 (format 1 started with its key count, never this).
const SNAPSHOT_MAGIC: u64 = u64::MAX;
const SNAPSHOT_VERSION: u8 = 3;

/// Writes a recorded answer (any reply a write or a transaction gives).
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
        Reply::Simple(s) => {
            out.push(4);
            put_bytes(out, s.as_bytes());
        }
        Reply::Bulk(b) => {
            out.push(5);
            put_bytes(out, b);
        }
        Reply::Array(items) => {
            out.push(6);
            put_u64(out, items.len() as u64);
            items.iter().for_each(|i| encode_reply(out, i));
        }
        Reply::NilArray | Reply::WouldBlock => out.push(7),
        Reply::Map(pairs) | Reply::Pairs(pairs) => {
            out.push(if matches!(reply, Reply::Map(_)) { 8 } else { 10 });
            put_u64(out, pairs.len() as u64);
            for (a, b) in pairs {
                encode_reply(out, a);
                encode_reply(out, b);
            }
        }
        Reply::Double(text) => {
            out.push(9);
            put_bytes(out, text);
        }
    }
}

/// Simple strings a recorded answer may hold (`Reply::Simple` keeps a `&'static str`).
const SIMPLE: &[&str] = &["OK", "PONG", "QUEUED", "string", "list", "hash", "set", "zset", "none"];

fn decode_reply(r: &mut Reader<'_>, depth: usize) -> Result<Reply, DecodeError> {
    if depth > 8 {
        return Err(DecodeError::Invalid { field: "reply depth", value: depth as u64 });
    }
    Ok(match r.u8("reply kind")? {
        0 => Reply::Ok,
        1 => Reply::Nil,
        2 => Reply::Integer(r.i64("integer reply")?),
        3 => Reply::Error(String::from_utf8_lossy(r.bytes("error reply")?).into_owned()),
        4 => {
            let text = r.bytes("simple reply")?;
            let known = SIMPLE.iter().find(|s| s.as_bytes() == text);
            Reply::Simple(
                known.ok_or(DecodeError::Invalid { field: "simple reply", value: text.len() as u64 })?,
            )
        }
        5 => Reply::Bulk(r.bytes("bulk reply")?.to_vec()),
        6 => {
            let n = r.count("array reply", 1)?;
            Reply::Array((0..n).map(|_| decode_reply(r, depth + 1)).collect::<Result<_, _>>()?)
        }
        7 => Reply::NilArray,
        kind @ (8 | 10) => {
            let n = r.count("pair count", 2)?;
            let pairs = (0..n)
                .map(|_| Ok((decode_reply(r, depth + 1)?, decode_reply(r, depth + 1)?)))
                .collect::<Result<_, DecodeError>>()?;
            if kind == 8 { Reply::Map(pairs) } else { Reply::Pairs(pairs) }
        }
        9 => Reply::Double(r.bytes("double reply")?.to_vec()),
        other => return Err(DecodeError::Invalid { field: "reply kind", value: u64::from(other) }),
    })
}

#[cfg(test)]
mod tests;

/// Runs commands built from arbitrary bytes ([`cmd::arbitrary::commands`]) on a store as the
/// log would, on a second store alongside, and on a store restored from a snapshot halfway:
/// panics if a handler panics or if the three disagree (the store's fuzz target and property
/// test).
pub fn check_any_commands(data: &[u8]) {
    let (mut a, mut b) = (Store::new(), Store::new());
    let list = cmd::arbitrary::commands(data);
    let mut restored: Option<Store> = None;
    for (i, words) in list.iter().enumerate() {
        let op = WriteOp::Exec { db: (i % 2) as u8, args: words.clone() };
        let request = Request { origin: 1, client: 1, seq: i as u64, completed_below: 0, op };
        let now = 1_000 + i as u64 * 7;
        let ra = a.apply(&request, now, i as u64 + 1);
        let woken = a.take_woken();
        assert_eq!(b.apply(&request, now, i as u64 + 1), ra, "{words:?}");
        assert_eq!(b.take_woken(), woken, "{words:?}");
        if let Some(r) = restored.as_mut() {
            assert_eq!(r.apply(&request, now, i as u64 + 1), ra, "restored: {words:?}");
            assert_eq!(r.take_woken(), woken, "restored: {words:?}");
        }
        let _ = a.read(&ReadOp { db: 0, args: words.clone() }, now);
        if i == list.len() / 2 {
            let mut bytes = Vec::new();
            a.encode(&mut bytes);
            restored = Some(Store::decode(&bytes).expect("a snapshot decodes"));
        }
    }
    assert_eq!(a, b);
    if let Some(r) = restored {
        assert_eq!(r, a, "a member restored from a snapshot holds the same data");
    }
}

#[cfg(test)]
mod any_words {
    use super::check_any_commands;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        #[test]
        fn any_words_never_panic_and_every_member_agrees(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            check_any_commands(&data);
        }
    }
}

//! The store's commands, one file per kind of value, and the table that names them.
//!
//! A command is a [`Spec`]: its name, its arity in Redis's convention (n: exactly n words with
//! the name; -n: at least n), where its keys are, and its handler. The handler's kind decides
//! a request's path (see [`super::command`]): a [`Handler::Write`] goes through the Raft log
//! and runs on every member against the entry's time; a [`Handler::Read`] runs on one member
//! after a read index; [`Handler::Store`] commands span databases and are applied by
//! [`super::store::Store`] itself; [`Handler::Local`] ones are the member's (the connection, the
//! server). Handlers are pure functions of (database, time, arguments, seed), which is what
//! keeps members equal.
//!
//! - [`strings`], [`keys`], [`hashes`], [`lists`], [`sets`], [`zsets`]: the handlers;
//! - [`args`]: argument parsing and the error texts shared by all of them;
//! - [`scan`]: the cursor SCAN, HSCAN, SSCAN and ZSCAN share.

pub mod args;
pub mod dump;
pub mod hashes;
pub mod keys;
pub mod lists;
pub mod scan;
pub mod sets;
pub mod sort;
pub mod strings;
pub mod zsets;

use hashbrown::HashMap;
use std::cell::Cell;
use std::sync::LazyLock;

use super::db::Db;
use super::reply::Reply;

/// A write handler: changes the database at the entry's time.
pub type WriteFn = fn(&mut Ctx<'_>, &[Vec<u8>]) -> Reply;
/// A read handler: answers from the database at the reader's time.
pub type ReadFn = fn(&View<'_>, &[Vec<u8>]) -> Reply;

/// What runs a command, and so which path it takes.
#[derive(Debug, Clone, Copy)]
pub enum Handler {
    /// Changes data: replicated.
    Write(WriteFn),
    /// Reads data.
    Read(ReadFn),
    /// Spans databases (FLUSHALL, SWAPDB, MOVE, COPY): replicated, applied by the store.
    Store,
    /// About the connection or the server: answered by the member.
    Local,
}

/// One command.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The name, lower case.
    pub name: &'static str,
    /// Redis's arity: n exactly n words (the name included), -n at least n.
    pub arity: i32,
    /// What runs it.
    pub handler: Handler,
    /// The first key's position (0: no keys), the last's (-1: the last argument), the step.
    pub keys: (i32, i32, i32),
    /// Redis's command flags, for COMMAND INFO.
    pub flags: &'static [&'static str],
}

impl Spec {
    /// A write command.
    pub const fn write(name: &'static str, arity: i32, keys: (i32, i32, i32), f: WriteFn) -> Self {
        Spec { name, arity, handler: Handler::Write(f), keys, flags: &["write"] }
    }

    /// A read command.
    pub const fn read(name: &'static str, arity: i32, keys: (i32, i32, i32), f: ReadFn) -> Self {
        Spec { name, arity, handler: Handler::Read(f), keys, flags: &["readonly"] }
    }

    /// A command that spans databases.
    pub const fn store(name: &'static str, arity: i32, keys: (i32, i32, i32)) -> Self {
        Spec { name, arity, handler: Handler::Store, keys, flags: &["write"] }
    }

    /// A connection or server command.
    pub const fn local(name: &'static str, arity: i32) -> Self {
        Spec { name, arity, handler: Handler::Local, keys: (0, 0, 0), flags: &[] }
    }

    /// Whether `words` (the name included) fit the arity.
    pub fn arity_fits(&self, words: usize) -> bool {
        let words = words as i64;
        let arity = i64::from(self.arity);
        if arity >= 0 { words == arity } else { words >= -arity }
    }

    /// The keys among `args` (the name first), by the spec's positions.
    pub fn key_positions(&self, words: usize) -> Vec<usize> {
        let (first, last, step) = self.keys;
        if first <= 0 || step <= 0 {
            return Vec::new();
        }
        let last = if last < 0 { words as i64 + i64::from(last) } else { i64::from(last) };
        (i64::from(first)..=last.min(words as i64 - 1)).step_by(step as usize).map(|i| i as usize).collect()
    }
}

/// Commands the member answers itself; listed so COMMAND knows them and arity is checked in
/// one place.
const LOCAL: &[Spec] = &[
    Spec::local("ping", -1),
    Spec::local("echo", 2),
    Spec::local("info", -1),
    Spec::local("config", -2),
    Spec::local("command", -1),
    Spec::local("client", -2),
    Spec::local("select", 2),
    Spec::local("quit", -1),
    Spec::local("hello", -1),
    Spec::local("auth", -2),
    Spec::local("reset", 1),
    Spec::local("time", 1),
    Spec::local("multi", 1),
    Spec::local("exec", 1),
    Spec::local("discard", 1),
    Spec::local("watch", -2),
    Spec::local("unwatch", 1),
    Spec::local("function", -2),
    Spec::local("script", -2),
    Spec::local("acl", -2),
    Spec::local("debug", -2),
    Spec::local("memory", -2),
    Spec::local("lastsave", 1),
    Spec::local("save", 1),
    Spec::local("bgsave", -1),
    Spec::local("bgrewriteaof", 1),
    Spec::local("readonly", 1),
    Spec::local("readwrite", 1),
    Spec::local("wait", 3),
    Spec::local("role", 1),
    Spec::local("shutdown", -1),
];

/// Commands that span databases, applied by the store.
const STORE: &[Spec] = &[
    Spec::store("flushall", -1, (0, 0, 0)),
    Spec::store("swapdb", 3, (0, 0, 0)),
    Spec::store("move", 3, (1, 1, 1)),
    Spec::store("copy", -3, (1, 2, 1)),
];

static TABLE: LazyLock<HashMap<&'static str, Spec>> = LazyLock::new(|| {
    [
        LOCAL,
        STORE,
        strings::COMMANDS,
        keys::COMMANDS,
        hashes::COMMANDS,
        lists::COMMANDS,
        sets::COMMANDS,
        zsets::COMMANDS,
        sort::COMMANDS,
        dump::COMMANDS,
    ]
    .iter()
    .flat_map(|t| t.iter())
    .map(|s| (s.name, *s))
    .collect()
});

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    // Lower case on the stack: every command of every member passes here.
    let mut lower = [0u8; 32];
    let lower = lower.get_mut(..name.len())?;
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    TABLE.get(std::str::from_utf8(lower).ok()?)
}

/// Every command, for COMMAND.
pub fn all() -> impl Iterator<Item = &'static Spec> {
    TABLE.values()
}

/// A deterministic generator (splitmix64) for random picks: seeded from the log position in
/// writes, so every member picks alike.
#[derive(Debug)]
pub struct Rng(Cell<u64>);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(Cell::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        let s = self.0.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.0.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// What a write handler works on.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The database the client selected.
    pub db: &'a mut Db,
    /// The entry's time (ms since the epoch).
    pub now_ms: u64,
    /// Random picks, seeded from the log position.
    pub rng: &'a Rng,
}

impl Ctx<'_> {
    /// The same database read-only, for a read done inside a write.
    pub fn view(&self) -> View<'_> {
        View { db: self.db, now_ms: self.now_ms, rng: self.rng }
    }
}

/// What a read handler works on.
#[derive(Debug)]
pub struct View<'a> {
    /// The database the client selected.
    pub db: &'a Db,
    /// The reader's time (ms since the epoch), or the entry's inside a transaction.
    pub now_ms: u64,
    /// Random picks.
    pub rng: &'a Rng,
}

/// Running commands on one database in unit tests: `exec(&mut db, "HSET h f v")`.
#[cfg(test)]
pub mod testing {
    use super::{Ctx, Handler, Rng, View, lookup};
    use crate::kv::db::Db;
    use crate::kv::reply::Reply;

    /// The time [`exec`] runs at, ms.
    pub const NOW: u64 = 1_000;

    /// Runs one command (words split on spaces) at time [`NOW`] with seed 7.
    pub fn exec(db: &mut Db, line: &str) -> Reply {
        exec_args(db, &line.split(' ').map(|w| w.as_bytes().to_vec()).collect::<Vec<_>>(), NOW)
    }

    /// A bulk reply of `text`.
    pub fn b(text: &str) -> Reply {
        Reply::Bulk(text.as_bytes().to_vec())
    }

    /// An array reply of bulk strings.
    pub fn arr(items: &[&str]) -> Reply {
        Reply::Array(items.iter().map(|i| b(i)).collect())
    }

    /// An error reply.
    pub fn err(text: &str) -> Reply {
        Reply::Error(text.into())
    }

    /// An integer reply.
    pub fn int(n: i64) -> Reply {
        Reply::Integer(n)
    }

    /// Whether `key` is live at [`NOW`].
    pub fn exists(db: &Db, key: &str) -> bool {
        db.contains(key.as_bytes(), NOW)
    }

    /// Puts a string at `key`, for a command on another type to refuse.
    pub fn set_string(db: &mut Db, key: &str) {
        db.insert(key.as_bytes().to_vec(), crate::kv::value::Value::Str(b"x".to_vec()), None);
    }

    /// A reply in the shape a RESP2 client sees: maps and pairs flat, doubles as bulk strings.
    pub fn flat(reply: Reply) -> Reply {
        match reply {
            Reply::Map(pairs) | Reply::Pairs(pairs) => {
                Reply::Array(pairs.into_iter().flat_map(|(a, b)| [flat(a), flat(b)]).collect())
            }
            Reply::Double(text) => Reply::Bulk(text),
            Reply::Array(items) => Reply::Array(items.into_iter().map(flat).collect()),
            other => other,
        }
    }

    /// Runs one command given as words at time `now_ms`.
    pub fn exec_args(db: &mut Db, args: &[Vec<u8>], now_ms: u64) -> Reply {
        let spec =
            lookup(&args[0]).unwrap_or_else(|| panic!("no command {:?}", String::from_utf8_lossy(&args[0])));
        assert!(spec.arity_fits(args.len()), "arity of {}", spec.name);
        let rng = Rng::new(7);
        db.stamp += 1;
        match spec.handler {
            Handler::Write(f) => f(&mut Ctx { db, now_ms, rng: &rng }, args),
            Handler::Read(f) => f(&View { db, now_ms, rng: &rng }, args),
            Handler::Store | Handler::Local => panic!("{} is not a data command", spec.name),
        }
    }
}

/// Commands built from arbitrary input, for the fuzz target and the property tests that run
/// every handler on words no client would send: a name from the table (by the first byte),
/// then words drawn from a vocabulary of the options, numbers and ranges the handlers parse,
/// or taken as they are.
pub mod arbitrary {
    use super::all;

    const WORDS: &[&str] = &[
        "0",
        "1",
        "-1",
        "2",
        "3",
        "10",
        "-10",
        "100",
        "1.5",
        "-inf",
        "+inf",
        "inf",
        "(1",
        "[a",
        "(a",
        "-",
        "+",
        "nan",
        "9223372036854775807",
        "-9223372036854775808",
        "18446744073709551616",
        "k",
        "k2",
        "k3",
        "a",
        "b",
        "c",
        "",
        "*",
        "*a*",
        "[",
        "WITHSCORES",
        "WITHVALUES",
        "LIMIT",
        "BYSCORE",
        "BYLEX",
        "REV",
        "COUNT",
        "MATCH",
        "TYPE",
        "NX",
        "XX",
        "GT",
        "LT",
        "CH",
        "INCR",
        "EX",
        "PX",
        "EXAT",
        "PXAT",
        "KEEPTTL",
        "GET",
        "PERSIST",
        "LEFT",
        "RIGHT",
        "MIN",
        "MAX",
        "WEIGHTS",
        "AGGREGATE",
        "SUM",
        "BEFORE",
        "AFTER",
        "RANK",
        "MAXLEN",
        "REPLACE",
        "DB",
        "ALPHA",
        "BY",
        "STORE",
        "ASC",
        "DESC",
        "IDX",
        "LEN",
        "MINMATCHLEN",
        "WITHMATCHLEN",
        "BIT",
        "BYTE",
        "ABSTTL",
        "ENCODING",
        "#",
        "*->f",
    ];

    /// Commands from `data`: each starts at a byte whose low bits pick a command; the bytes
    /// after it, up to the next separator (0xff), pick words (a byte below the vocabulary's
    /// size is that word, others start a literal run to the next 0xfe).
    pub fn commands(data: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let mut names: Vec<&str> = all().map(|s| s.name).collect();
        names.sort_unstable();
        data.split(|&b| b == 0xff)
            .filter_map(|chunk| {
                let (&first, rest) = chunk.split_first()?;
                let mut words = vec![names[usize::from(first) % names.len()].as_bytes().to_vec()];
                let mut i = 0;
                while i < rest.len() && words.len() < 16 {
                    let b = rest[i];
                    if usize::from(b) < WORDS.len() {
                        words.push(WORDS[usize::from(b)].as_bytes().to_vec());
                        i += 1;
                    } else {
                        let end =
                            rest[i + 1..].iter().position(|&c| c == 0xfe).map_or(rest.len(), |p| i + 1 + p);
                        words.push(rest[i + 1..end].to_vec());
                        i = end + 1;
                    }
                }
                Some(words)
            })
            .collect()
    }
}

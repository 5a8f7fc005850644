//! Clients waiting in a blocking pop (BLPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN, ...), held
//! in the replicated state so every member serves them alike and at the moment Redis would.
//!
//! Redis serves a blocked client as soon as the command that gave its key data has run, before
//! the next command, and serves the clients blocked on a key in the order they blocked. A
//! waiter kept at the member that took the client could only be tried again after the entry
//! that fed its key had applied whole, so a pop later in the same entry (or a retry of it)
//! could take the element first and leave the earlier waiter blocked for ever. Here a pop that
//! finds nothing becomes a [`Waiter`] in the store, in blocking order; after every write the
//! store runs the waiters whose keys hold data ([`Blocked::fed`]), again while one is served
//! (a BLMOVE may feed another's key), and records each answer in the waiter's session like any
//! other. Its member answers the client when the entry that served it applies there.
//!
//! A waiter leaves the queue when served, when its member proposes [`WriteOp::Unblock`] (its
//! timeout passed, CLIENT UNBLOCK, or the connection closed), when its member restarts
//! ([`WriteOp::DropWaiters`]), or when its member is removed from the cluster (where the
//! removal applies in the log): a waiter whose client is gone would take an element no one
//! receives.
//!
//! [`WriteOp::Unblock`]: super::WriteOp::Unblock
//! [`WriteOp::DropWaiters`]: super::WriteOp::DropWaiters

use std::collections::VecDeque;
use std::ops::Range;

use super::cmd::args;
use super::db::Db;
use super::reply::Reply;
use super::value::Value;

/// Waiters a store holds at most; past this a blocking pop that finds nothing is answered as
/// at its timeout. Members bound their connections, so this is reached only by a defect or by
/// members that restart without [`super::WriteOp::DropWaiters`] applying.
pub const MAX_WAITERS: usize = 100_000;

/// A blocking command's shape: where its timeout is, the keys it waits on, and what it answers
/// when the timeout passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The position of the timeout among the words.
    pub timeout_at: usize,
    /// Where the keys it waits on are among the words (looked at on every write while it
    /// waits, so named by place rather than copied).
    pub keys: Range<usize>,
    /// Its answer at the timeout.
    pub timeout_reply: Reply,
}

/// Whether `name` is a blocking pop (any case).
pub fn is_blocking(name: &[u8]) -> bool {
    ["blpop", "brpop", "bzpopmin", "bzpopmax", "brpoplpush", "blmove", "blmpop", "bzmpop"]
        .iter()
        .any(|b| name.eq_ignore_ascii_case(b.as_bytes()))
}

/// The shape of a blocking command's words, `None` for any other command (or one too
/// malformed to wait: its handler answers the error).
pub fn shape(words: &[Vec<u8>]) -> Option<Shape> {
    let n = words.len();
    let name = words.first()?;
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    let (timeout_at, keys, timeout_reply) = if is("blpop") || is("brpop") || is("bzpopmin") || is("bzpopmax")
    {
        if n < 3 {
            return None;
        }
        (n - 1, 1..n - 1, Reply::NilArray)
    } else if is("brpoplpush") || is("blmove") {
        if n < 4 {
            return None;
        }
        (n - 1, 1..2, Reply::Nil)
    } else if is("blmpop") || is("bzmpop") {
        let keys = args::parse_i64(words.get(2)?).filter(|&k| k > 0 && (k as usize) + 3 <= n)? as usize;
        (1, 3..3 + keys, Reply::NilArray)
    } else {
        return None;
    };
    Some(Shape { timeout_at, keys, timeout_reply })
}

/// What a blocking pop of `words` answers when it stops waiting without being served: CLIENT
/// UNBLOCK's error if `error`, else its answer at the timeout.
pub fn unblocked_reply(words: &[Vec<u8>], error: bool) -> Reply {
    if error {
        Reply::Error("UNBLOCKED client unblocked via CLIENT UNBLOCK".into())
    } else {
        shape(words).map_or(Reply::NilArray, |s| s.timeout_reply)
    }
}

/// A client blocked in a pop: who (its member, its connection there, the request's slot),
/// and the command to run when one of its keys gets data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The member that took the client.
    pub origin: u64,
    /// The client's connection there.
    pub client: u64,
    /// The request's sequence number on that connection.
    pub seq: u64,
    /// The database it runs in.
    pub db: u8,
    /// The command's words.
    pub words: Vec<Vec<u8>>,
}

impl Waiter {
    /// The request it stands for.
    pub fn id(&self) -> (u64, u64, u64) {
        (self.origin, self.client, self.seq)
    }

    /// Whether one of its keys holds something its command takes (a list or a sorted set
    /// with members) in `db` at `now_ms`.
    pub fn fed(&self, db: &Db, now_ms: u64) -> bool {
        shape(&self.words).is_some_and(|s| {
            self.words[s.keys].iter().any(|k| match db.value(k, now_ms) {
                Some(Value::List(l)) => !l.is_empty(),
                Some(Value::ZSet(z)) => !z.is_empty(),
                _ => false,
            })
        })
    }
}

/// The waiters, in the order they blocked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blocked {
    queue: VecDeque<Waiter>,
}

impl Blocked {
    /// Whether no client waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// How many clients wait.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// The waiters in blocking order.
    pub fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.queue.iter()
    }

    /// Whether the request `(origin, client, seq)` waits.
    pub fn contains(&self, id: (u64, u64, u64)) -> bool {
        self.queue.iter().any(|w| w.id() == id)
    }

    /// Adds a waiter at the back.
    pub fn push(&mut self, waiter: Waiter) {
        self.queue.push_back(waiter);
    }

    /// Takes the waiter of request `id` out, if it waits.
    pub fn remove(&mut self, id: (u64, u64, u64)) -> Option<Waiter> {
        let at = self.queue.iter().position(|w| w.id() == id)?;
        self.queue.remove(at)
    }

    /// Takes out the waiter at `index` in blocking order.
    pub fn remove_at(&mut self, index: usize) -> Option<Waiter> {
        self.queue.remove(index)
    }

    /// Puts a waiter back at `index` (where [`Blocked::remove_at`] took it from).
    pub fn insert_at(&mut self, index: usize, waiter: Waiter) {
        self.queue.insert(index, waiter);
    }

    /// The waiter at `index` in blocking order.
    pub fn get(&self, index: usize) -> Option<&Waiter> {
        self.queue.get(index)
    }

    /// Drops the waiters of member `origin` whose clients are numbered below `below`: those of
    /// its earlier runs (or, below `u64::MAX`, all of them: a member removed). Returns how many.
    pub fn drop_origin(&mut self, origin: u64, below: u64) -> usize {
        let before = self.queue.len();
        self.queue.retain(|w| !(w.origin == origin && w.client < below));
        before - self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Vec<u8>> {
        s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn shapes_name_the_timeout_the_keys_and_the_answer_at_the_timeout() {
        let s = shape(&words("BLPOP a b 0")).unwrap();
        assert_eq!((s.timeout_at, s.keys, s.timeout_reply), (3, 1..3, Reply::NilArray));
        let s = shape(&words("blmove src dst left right 1.5")).unwrap();
        assert_eq!((s.timeout_at, s.keys, s.timeout_reply), (5, 1..2, Reply::Nil));
        let s = shape(&words("BLMPOP 0 2 x y LEFT COUNT 3")).unwrap();
        assert_eq!((s.timeout_at, s.keys, s.timeout_reply), (1, 3..5, Reply::NilArray));
        // A key count past the words, a missing key and other commands have no shape.
        assert_eq!(shape(&words("BLMPOP 0 5 x LEFT")), None);
        assert_eq!(shape(&words("BLPOP 0")), None);
        assert_eq!(shape(&words("LPOP a")), None);
        assert_eq!(shape(&[]), None);
    }

    #[test]
    fn a_restarted_member_drops_only_its_earlier_runs_waiters() {
        let mut b = Blocked::default();
        for (origin, client, seq) in [(1, 5, 1), (2, 5, 1), (1, 900, 1), (1, 6, 2)] {
            b.push(Waiter { origin, client, seq, db: 0, words: words("BLPOP k 0") });
        }
        assert_eq!(b.drop_origin(1, 100), 2);
        let left: Vec<_> = b.iter().map(Waiter::id).collect();
        assert_eq!(left, vec![(2, 5, 1), (1, 900, 1)]);
        assert!(b.contains((1, 900, 1)));
        assert_eq!(b.remove((2, 5, 1)).map(|w| w.id()), Some((2, 5, 1)));
        assert_eq!(b.len(), 1);
    }
}

//! A request's words turned into the path it takes, or the error Redis would answer.
//!
//! Commands fall in three kinds (see [`super::cmd`] for the table that says which):
//! - [`Command::Write`]: changes data, so it goes through the Raft log and is answered once its
//!   entry is committed by a majority and applied ([`WriteOp`]);
//! - [`Command::Read`]: answered from the state machine after a read index confirms that this
//!   member has applied everything committed before the read arrived ([`ReadOp`]);
//! - [`Command::Local`]: about the connection or the server (PING, CONFIG, CLIENT, MULTI, ...),
//!   answered by the member ([`LocalOp`]).
//!
//! What the log carries is the command's words and the database, not a typed operation: every
//! member runs the same handler on the same words at the entry's time, as Redis's replicas
//! run the command stream their primary sends. Only the name and arity are checked here; the
//! rest of a command's syntax is checked where it runs, and a syntax error costs its entry
//! nothing but the answer.
//!
//! Parsing never panics on any arguments and its error texts are Redis 7's, so clients that
//! match on them (redis-cli, redis-benchmark, client libraries) behave as against Redis.

use super::cmd::{self, Handler, Spec};
use super::reply::Reply;

pub use super::cmd::args::{parse_i64, wrong_arity};

/// A request's command, checked and typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A command that changes data.
    Write(WriteOp),
    /// A command that only reads data.
    Read(ReadOp),
    /// A command about the connection or server.
    Local(LocalOp),
}

/// A key WATCH saw: its version then (0: absent) and the store's modification count then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The database.
    pub db: u8,
    /// The key.
    pub key: Vec<u8>,
    /// The key's version when watched.
    pub seen: u64,
    /// The store's modification count when watched.
    pub mark: u64,
}

/// What the log carries: a change to data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// One command's words (the name first), run in database `db`.
    Exec {
        /// The database.
        db: u8,
        /// The words.
        args: Vec<Vec<u8>>,
    },
    /// MULTI ... EXEC: the commands run together, with no other between them on any member,
    /// unless a watched key changed (then none runs, and EXEC answers nil).
    Transaction {
        /// Each command with the database it runs in (SELECT may come between them).
        commands: Vec<(u8, Vec<Vec<u8>>)>,
        /// The keys WATCH saw.
        watched: Vec<Watched>,
    },
    /// Keys the leader saw expire: removed if still expired at the entry's time (Redis's
    /// primary sends DELs to its replicas the same way).
    Expire {
        /// The database.
        db: u8,
        /// The keys.
        keys: Vec<Vec<u8>>,
    },
    /// The request's own blocking pop (same client and slot) stops waiting: its timeout
    /// passed, CLIENT UNBLOCK named it, or its connection closed. Answered with the pop's
    /// answer if it was served first, else with its timeout answer (or the UNBLOCKED error).
    Unblock {
        /// The blocking command's words (its answer at the timeout follows from them).
        args: Vec<Vec<u8>>,
        /// Whether it answers CLIENT UNBLOCK's error rather than its timeout answer.
        error: bool,
    },
    /// The proposing member started: the waiters of its earlier runs (clients numbered below
    /// `below`) are gone with their connections.
    DropWaiters {
        /// The member's first client number in this run.
        below: u64,
    },
}

/// A read: one command's words and its database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOp {
    /// The database.
    pub db: u8,
    /// The words, the name first.
    pub args: Vec<Vec<u8>>,
}

/// A command about the connection or the server: its words, for the member to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOp {
    /// The command's name in the table (lower case).
    pub name: &'static str,
    /// The words, the name first.
    pub args: Vec<Vec<u8>>,
}

fn words(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

impl WriteOp {
    /// `SET key value` in database 0.
    pub fn set(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        WriteOp::Exec { db: 0, args: vec![b"SET".to_vec(), key.into(), value.into()] }
    }

    /// `INCRBY key by` in database 0.
    pub fn incr_by(key: impl Into<Vec<u8>>, by: i64) -> Self {
        WriteOp::Exec { db: 0, args: vec![b"INCRBY".to_vec(), key.into(), by.to_string().into_bytes()] }
    }

    /// `APPEND key value` in database 0.
    pub fn append(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        WriteOp::Exec { db: 0, args: vec![b"APPEND".to_vec(), key.into(), value.into()] }
    }

    /// Any command in database 0, from its words.
    pub fn words(args: &[&str]) -> Self {
        WriteOp::Exec { db: 0, args: words(args) }
    }

    /// Whether this is one SET (the simulator's broken mode acknowledges those early).
    pub fn is_set(&self) -> bool {
        matches!(self, WriteOp::Exec { args, .. } if args[0].eq_ignore_ascii_case(b"set"))
    }
}

impl ReadOp {
    /// `GET key` in database 0.
    pub fn get(key: impl Into<Vec<u8>>) -> Self {
        ReadOp { db: 0, args: vec![b"GET".to_vec(), key.into()] }
    }

    /// Any read in database 0, from its words.
    pub fn words(args: &[&str]) -> Self {
        ReadOp { db: 0, args: words(args) }
    }
}

/// Turns a request's words into a command for database `db`, or the error reply Redis gives
/// for them. `args` is never empty (an empty request is skipped before this).
pub fn parse_command(args: Vec<Vec<u8>>, db: u8) -> Result<Command, Reply> {
    let spec = args.first().and_then(|name| cmd::lookup(name));
    typed(spec, args, db)
}

/// [`parse_command`] for a caller that has looked the name up already (`spec`: its entry in
/// the table, `None` when there is none).
pub fn typed(spec: Option<&'static Spec>, args: Vec<Vec<u8>>, db: u8) -> Result<Command, Reply> {
    let Some(name) = args.first() else {
        return Err(Reply::Error("ERR empty command".into()));
    };
    let Some(spec) = spec else {
        return Err(unknown_command(name, &args[1..]));
    };
    if !spec.arity_fits(args.len()) {
        return Err(wrong_arity(spec.name));
    }
    Ok(match spec.handler {
        Handler::Write(_) | Handler::Store => Command::Write(WriteOp::Exec { db, args }),
        Handler::Read(_) => Command::Read(ReadOp { db, args }),
        Handler::Local => Command::Local(LocalOp { name: spec.name, args }),
    })
}

fn quoted_prefix(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned();
    text.replace(['\r', '\n'], " ")
}

/// Redis's error for an unknown command.
pub fn unknown_command(name: &[u8], rest: &[Vec<u8>]) -> Reply {
    let mut args = String::new();
    for a in rest.iter().take(8) {
        args.push_str(&format!("'{}' ", quoted_prefix(a)));
    }
    Reply::Error(format!("ERR unknown command '{}', with args beginning with: {args}", quoted_prefix(name)))
}

/// Redis's error for an unknown subcommand of `command`.
pub fn unknown_subcommand(sub: &[u8], command: &str) -> Reply {
    Reply::Error(format!("ERR unknown subcommand '{}'. Try {command} HELP.", quoted_prefix(sub)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Command, Reply> {
        parse_command(line.split(' ').map(|w| w.as_bytes().to_vec()).collect(), 0)
    }

    fn error(line: &str) -> String {
        match parse(line) {
            Err(Reply::Error(e)) => e,
            other => panic!("{line}: expected an error, got {other:?}"),
        }
    }

    #[test]
    fn kinds_and_errors() {
        assert!(matches!(parse("GET k"), Ok(Command::Read(_))));
        assert!(matches!(parse("INCR k"), Ok(Command::Write(WriteOp::Exec { db: 0, .. }))));
        assert!(matches!(parse("hset h f v"), Ok(Command::Write(_))));
        assert!(matches!(parse("PING"), Ok(Command::Local(_))));
        assert!(matches!(parse("FLUSHALL"), Ok(Command::Write(_))));
        assert_eq!(error("SET k"), "ERR wrong number of arguments for 'set' command");
        assert_eq!(error("FOO l a"), "ERR unknown command 'FOO', with args beginning with: 'l' 'a' ");
        assert_eq!(parse_command(Vec::new(), 0), Err(Reply::Error("ERR empty command".into())));
    }

    #[test]
    fn integers_are_parsed_as_redis_does() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in ["", "-", "+1", "01", "-0", " 1", "1 ", "9223372036854775808", "1e3", "１"] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?}");
        }
    }
}

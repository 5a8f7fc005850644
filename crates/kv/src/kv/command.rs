//! The store's commands: a request's arguments turned into a typed command, or the error Redis
//! would answer.
//!
//! Commands fall in three kinds, and the kind decides the path a request takes:
//! - [`Command::Write`]: changes data, so it goes through the Raft log and is answered once its
//!   entry is committed by a majority and applied ([`WriteOp`]);
//! - [`Command::Read`]: answered from the state machine after a read index confirms that this
//!   member has applied everything committed before the read arrived ([`ReadOp`]);
//! - [`Command::Local`]: about the connection or the server (PING, CONFIG GET, ...), answered
//!   on the spot ([`LocalOp`]).
//!
//! Parsing never panics on any arguments and its error texts are Redis 7's, so clients that
//! match on them (redis-cli, redis-benchmark, client libraries) behave as against Redis.

use super::reply::Reply;

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

/// How SET treats a key that exists (or does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCondition {
    /// Always set.
    Always,
    /// NX: only if the key does not exist.
    IfAbsent,
    /// XX: only if the key exists.
    IfPresent,
}

/// A command that changes data; what the log carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// SET key value [EX s | PX ms] [NX | XX].
    Set {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// Time to live in milliseconds from the entry's time, if any.
        ttl_ms: Option<u64>,
        /// NX / XX.
        condition: SetCondition,
    },
    /// DEL key [key ...]: answers how many existed.
    Del {
        /// The keys.
        keys: Vec<Vec<u8>>,
    },
    /// INCR, DECR, INCRBY, DECRBY: add `by` to the integer the key holds (0 if absent).
    IncrBy {
        /// The key.
        key: Vec<u8>,
        /// The increment.
        by: i64,
    },
    /// APPEND key value: answers the new length.
    Append {
        /// The key.
        key: Vec<u8>,
        /// What to append.
        value: Vec<u8>,
    },
    /// MSET key value [key value ...].
    MSet {
        /// The pairs, in order (a later pair wins).
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// FLUSHALL: removes every key.
    FlushAll,
}

/// A command that only reads data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    /// GET key.
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// EXISTS key [key ...]: counts repeats, as Redis does.
    Exists {
        /// The keys.
        keys: Vec<Vec<u8>>,
    },
    /// MGET key [key ...].
    MGet {
        /// The keys.
        keys: Vec<Vec<u8>>,
    },
    /// STRLEN key.
    StrLen {
        /// The key.
        key: Vec<u8>,
    },
    /// DBSIZE.
    DbSize,
}

/// A command about the connection or the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalOp {
    /// PING [message].
    Ping(Option<Vec<u8>>),
    /// ECHO message.
    Echo(Vec<u8>),
    /// INFO [section].
    Info(Option<Vec<u8>>),
    /// CONFIG GET parameter.
    ConfigGet(Vec<u8>),
    /// COMMAND [subcommand ...]: what redis-cli asks when it starts.
    Command,
    /// CLIENT SETNAME name.
    ClientSetName(Vec<u8>),
    /// CLIENT GETNAME.
    ClientGetName,
    /// SELECT 0 (the only database).
    Select,
    /// QUIT: answer OK, then close.
    Quit,
}

fn wrong_arity(name: &str) -> Reply {
    Reply::Error(format!("ERR wrong number of arguments for '{name}' command"))
}

fn syntax_error() -> Reply {
    Reply::Error("ERR syntax error".into())
}

/// Redis's `string2ll`: an optional '-', then digits without a leading zero (except "0"), and
/// the value fits an `i64`. No '+', no spaces.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    if digits.is_empty() || digits.len() > 20 || (digits[0] == b'0' && (digits.len() > 1 || negative)) {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(d - b'0');
        value = if negative {
            value.checked_mul(10)?.checked_sub(digit)?
        } else {
            value.checked_mul(10)?.checked_add(digit)?
        };
    }
    Some(value)
}

fn integer_arg(bytes: &[u8]) -> Result<i64, Reply> {
    parse_i64(bytes).ok_or_else(|| Reply::Error("ERR value is not an integer or out of range".into()))
}

/// Turns a request's arguments into a command, or the error reply Redis gives for them.
/// `args` is never empty (an empty request is skipped before this).
pub fn parse_command<A: AsRef<[u8]>>(args: &[A]) -> Result<Command, Reply> {
    let Some((name, rest)) = args.split_first() else {
        return Err(Reply::Error("ERR empty command".into()));
    };
    let name = name.as_ref();
    let lower: String = String::from_utf8_lossy(name).to_ascii_lowercase();
    let arg = |i: usize| rest[i].as_ref().to_vec();
    let all = |from: usize| rest[from..].iter().map(|a| a.as_ref().to_vec()).collect::<Vec<_>>();
    let n = rest.len();
    let exact = |want: usize| if n == want { Ok(()) } else { Err(wrong_arity(&lower)) };
    let at_least = |want: usize| if n >= want { Ok(()) } else { Err(wrong_arity(&lower)) };
    let command = match lower.as_str() {
        "get" => {
            exact(1)?;
            Command::Read(ReadOp::Get { key: arg(0) })
        }
        "set" => {
            at_least(2)?;
            parse_set(rest)?
        }
        "del" => {
            at_least(1)?;
            Command::Write(WriteOp::Del { keys: all(0) })
        }
        "exists" => {
            at_least(1)?;
            Command::Read(ReadOp::Exists { keys: all(0) })
        }
        "incr" | "decr" => {
            exact(1)?;
            let by = if lower == "incr" { 1 } else { -1 };
            Command::Write(WriteOp::IncrBy { key: arg(0), by })
        }
        "incrby" | "decrby" => {
            exact(2)?;
            let by = integer_arg(rest[1].as_ref())?;
            let by = if lower == "incrby" {
                by
            } else {
                by.checked_neg().ok_or_else(|| Reply::Error("ERR decrement would overflow".into()))?
            };
            Command::Write(WriteOp::IncrBy { key: arg(0), by })
        }
        "mget" => {
            at_least(1)?;
            Command::Read(ReadOp::MGet { keys: all(0) })
        }
        "mset" => {
            if n == 0 || n % 2 != 0 {
                return Err(wrong_arity(&lower));
            }
            let pairs =
                rest.chunks_exact(2).map(|p| (p[0].as_ref().to_vec(), p[1].as_ref().to_vec())).collect();
            Command::Write(WriteOp::MSet { pairs })
        }
        "append" => {
            exact(2)?;
            Command::Write(WriteOp::Append { key: arg(0), value: arg(1) })
        }
        "strlen" => {
            exact(1)?;
            Command::Read(ReadOp::StrLen { key: arg(0) })
        }
        "dbsize" => {
            exact(0)?;
            Command::Read(ReadOp::DbSize)
        }
        "flushall" => {
            // FLUSHALL [ASYNC|SYNC]: both are the same here.
            match rest {
                [] => {}
                [mode] if matches!(mode.as_ref().to_ascii_lowercase().as_slice(), b"async" | b"sync") => {}
                _ => return Err(syntax_error()),
            }
            Command::Write(WriteOp::FlushAll)
        }
        "ping" => match n {
            0 => Command::Local(LocalOp::Ping(None)),
            1 => Command::Local(LocalOp::Ping(Some(arg(0)))),
            _ => return Err(wrong_arity(&lower)),
        },
        "echo" => {
            exact(1)?;
            Command::Local(LocalOp::Echo(arg(0)))
        }
        "info" => Command::Local(LocalOp::Info(rest.first().map(|a| a.as_ref().to_vec()))),
        "config" => {
            at_least(1)?;
            let sub = rest[0].as_ref().to_ascii_lowercase();
            match sub.as_slice() {
                b"get" if n == 2 => Command::Local(LocalOp::ConfigGet(arg(1))),
                b"get" => return Err(wrong_arity("config|get")),
                _ => return Err(unknown_subcommand(rest[0].as_ref(), "CONFIG")),
            }
        }
        "command" => Command::Local(LocalOp::Command),
        "client" => {
            at_least(1)?;
            let sub = rest[0].as_ref().to_ascii_lowercase();
            match sub.as_slice() {
                b"setname" if n == 2 => {
                    if rest[1].as_ref().iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                        return Err(Reply::Error(
                            "ERR Client names cannot contain spaces, newlines or special characters.".into(),
                        ));
                    }
                    Command::Local(LocalOp::ClientSetName(arg(1)))
                }
                b"setname" => return Err(wrong_arity("client|setname")),
                b"getname" if n == 1 => Command::Local(LocalOp::ClientGetName),
                b"getname" => return Err(wrong_arity("client|getname")),
                _ => return Err(unknown_subcommand(rest[0].as_ref(), "CLIENT")),
            }
        }
        "select" => {
            exact(1)?;
            match parse_i64(rest[0].as_ref()) {
                Some(0) => Command::Local(LocalOp::Select),
                Some(_) => return Err(Reply::Error("ERR DB index is out of range".into())),
                None => return Err(Reply::Error("ERR value is not an integer or out of range".into())),
            }
        }
        "quit" => Command::Local(LocalOp::Quit),
        _ => return Err(unknown_command(name, rest)),
    };
    Ok(command)
}

fn parse_set<A: AsRef<[u8]>>(rest: &[A]) -> Result<Command, Reply> {
    let key = rest[0].as_ref().to_vec();
    let value = rest[1].as_ref().to_vec();
    let mut ttl_ms = None;
    let mut condition = SetCondition::Always;
    let mut i = 2;
    while i < rest.len() {
        let option = rest[i].as_ref().to_ascii_lowercase();
        match option.as_slice() {
            b"nx" if condition != SetCondition::IfPresent => condition = SetCondition::IfAbsent,
            b"xx" if condition != SetCondition::IfAbsent => condition = SetCondition::IfPresent,
            b"ex" | b"px" if ttl_ms.is_none() && i + 1 < rest.len() => {
                let amount = integer_arg(rest[i + 1].as_ref())?;
                let invalid = || Reply::Error("ERR invalid expire time in 'set' command".into());
                if amount <= 0 {
                    return Err(invalid());
                }
                let ms = if option == b"ex" { amount.checked_mul(1000).ok_or_else(invalid)? } else { amount };
                ttl_ms = Some(ms as u64);
                i += 1;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    Ok(Command::Write(WriteOp::Set { key, value, ttl_ms, condition }))
}

fn quoted_prefix(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned();
    text.replace(['\r', '\n'], " ")
}

fn unknown_command<A: AsRef<[u8]>>(name: &[u8], rest: &[A]) -> Reply {
    let mut args = String::new();
    for a in rest.iter().take(8) {
        args.push_str(&format!("'{}' ", quoted_prefix(a.as_ref())));
    }
    Reply::Error(format!("ERR unknown command '{}', with args beginning with: {args}", quoted_prefix(name)))
}

fn unknown_subcommand(sub: &[u8], command: &str) -> Reply {
    Reply::Error(format!("ERR unknown subcommand '{}'. Try {command} HELP.", quoted_prefix(sub)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Command, Reply> {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_command(&args)
    }

    fn error(line: &str) -> String {
        match parse(line) {
            Err(Reply::Error(e)) => e,
            other => panic!("{line}: expected an error, got {other:?}"),
        }
    }

    #[test]
    fn set_options_follow_redis() {
        let Ok(Command::Write(WriteOp::Set { ttl_ms, condition, .. })) = parse("SET k v EX 10 NX") else {
            panic!("SET k v EX 10 NX did not parse")
        };
        assert_eq!((ttl_ms, condition), (Some(10_000), SetCondition::IfAbsent));
        let Ok(Command::Write(WriteOp::Set { ttl_ms, condition, .. })) = parse("set k v xx px 5") else {
            panic!("set k v xx px 5 did not parse")
        };
        assert_eq!((ttl_ms, condition), (Some(5), SetCondition::IfPresent));
        assert_eq!(error("SET k v NX XX"), "ERR syntax error");
        assert_eq!(error("SET k v EX 1 PX 1"), "ERR syntax error");
        assert_eq!(error("SET k v EX"), "ERR syntax error");
        assert_eq!(error("SET k v EX 0"), "ERR invalid expire time in 'set' command");
        assert_eq!(error("SET k v EX x"), "ERR value is not an integer or out of range");
        assert_eq!(error("SET k"), "ERR wrong number of arguments for 'set' command");
    }

    #[test]
    fn integers_are_parsed_as_redis_does() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in ["", "-", "+1", "01", "-0", " 1", "1 ", "9223372036854775808", "1e3", "１"] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(error("DECRBY k -9223372036854775808"), "ERR decrement would overflow");
    }

    #[test]
    fn kinds_and_errors() {
        assert!(matches!(parse("GET k"), Ok(Command::Read(ReadOp::Get { .. }))));
        assert!(matches!(parse("INCR k"), Ok(Command::Write(WriteOp::IncrBy { by: 1, .. }))));
        assert!(matches!(parse("DECR k"), Ok(Command::Write(WriteOp::IncrBy { by: -1, .. }))));
        assert!(matches!(parse("PING"), Ok(Command::Local(LocalOp::Ping(None)))));
        assert!(matches!(parse("CONFIG GET save"), Ok(Command::Local(LocalOp::ConfigGet(_)))));
        assert!(matches!(parse("SELECT 0"), Ok(Command::Local(LocalOp::Select))));
        assert_eq!(error("SELECT 1"), "ERR DB index is out of range");
        assert_eq!(error("MSET a"), "ERR wrong number of arguments for 'mset' command");
        assert_eq!(error("LPUSH l a"), "ERR unknown command 'LPUSH', with args beginning with: 'l' 'a' ");
        assert_eq!(error("CONFIG SET a b"), "ERR unknown subcommand 'SET'. Try CONFIG HELP.");
        assert_eq!(parse_command::<&[u8]>(&[]), Err(Reply::Error("ERR empty command".into())));
    }
}

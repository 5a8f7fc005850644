//! The client's side of RESP2: requests written as multibulk arrays, replies read back into
//! [`Reply`] values, [`Connection`] (one blocking TCP connection), and the fields of INFO's
//! text, for the checks, benchmarks and tests that talk to a server (a Kairos member, Redis) as
//! a client does. It is the workspace's one RESP client.
//!
//! # Mechanism
//!
//! [`parse_reply`] reads one reply from the start of a buffer and returns it with the bytes it
//! took, or `Ok(None)` when the buffer holds only part of one: a pure function, so a reply cut
//! anywhere by the network reads the same. [`read_reply`] is the framing loop over a reader: it
//! reads onto a buffer until [`parse_reply`] has a whole reply, takes the reply's bytes out and
//! leaves the rest for the next call (pipelined replies). Every reply kind of RESP2 is read:
//! status (`+OK`), error (`-ERR ...`), integer, bulk string, array, and both nulls, the null
//! bulk string `$-1` and the null array `*-1`, kept apart.
//!
//! # Contract
//!
//! - **No panics** on any input.
//! - **Bounded by the client, not the server**: a bulk string longer than [`MAX_BULK_LEN`], an
//!   array of more than [`MAX_ARRAY_LEN`] items, arrays nested deeper than [`MAX_DEPTH`], a line
//!   (status, error, length) longer than [`MAX_LINE_LEN`], or a reply longer than
//!   [`MAX_REPLY_LEN`] in all is refused as soon as the bytes say so, so a hostile or broken
//!   server cannot make a client buffer or allocate without bound. A bulk's length is checked
//!   before its bytes are awaited, and nothing is allocated in proportion to a length the server
//!   claims.
//! - **Partial input is never an error that the whole input would not give**: every prefix of a
//!   reply parses as `Ok(None)` or as the same error.
//! - Work: a call reads each byte of the reply at most a fixed number of times (a bulk's payload
//!   is checked by its length, not scanned). [`read_reply`] parses again from the reply's start
//!   after each read, so a reply of many small items that arrives in many reads costs work
//!   quadratic in its item count; the replies the workspace reads are one line, one bulk, or a
//!   short array.
//!
//! # Source
//!
//! The RESP2 specification (redis.io, "Redis serialization protocol specification") and Redis's
//! `networking.c` (`addReplyStatus`, `addReplyNull...`); replies are what [`super::reply`]
//! writes.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Deepest array nesting read (the replies of the workspace's commands nest at most once).
pub const MAX_DEPTH: usize = 8;
/// The longest bulk string read, in bytes (INFO's text is a few kilobytes).
pub const MAX_BULK_LEN: usize = 16 << 20;
/// The most items an array may announce.
pub const MAX_ARRAY_LEN: usize = 1 << 20;
/// The longest line (a status, an error, a number), in bytes, before its `\r\n`.
pub const MAX_LINE_LEN: usize = 64 * 1024;
/// The longest reply in all, in bytes (an array of bulk strings included).
pub const MAX_REPLY_LEN: usize = 64 << 20;

/// The limits a reply is read within ([`ReplyLimits::DEFAULT`]: the constants above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyLimits {
    /// Deepest array nesting.
    pub max_depth: usize,
    /// Longest bulk string, bytes.
    pub max_bulk_len: usize,
    /// Most items of an array.
    pub max_array_len: usize,
    /// Longest line before its `\r\n`, bytes.
    pub max_line_len: usize,
    /// Longest reply in all, bytes.
    pub max_reply_len: usize,
}

impl ReplyLimits {
    /// [`MAX_DEPTH`], [`MAX_BULK_LEN`], [`MAX_ARRAY_LEN`], [`MAX_LINE_LEN`], [`MAX_REPLY_LEN`].
    pub const DEFAULT: Self = Self {
        max_depth: MAX_DEPTH,
        max_bulk_len: MAX_BULK_LEN,
        max_array_len: MAX_ARRAY_LEN,
        max_line_len: MAX_LINE_LEN,
        max_reply_len: MAX_REPLY_LEN,
    };
}

impl Default for ReplyLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A status reply (`+OK`, `+PONG`): its text.
    Status(String),
    /// An error reply: the whole line after `-` (`ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// `:42`.
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// The null bulk string `$-1` (GET of a missing key).
    NullBulk,
    /// An array.
    Array(Vec<Reply>),
    /// The null array `*-1` (a WAIT-less timeout of a blocking command, an aborted EXEC).
    NullArray,
}

impl Reply {
    /// Whether the reply is `+OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Status(s) if s == "OK")
    }

    /// The text of an error reply.
    pub fn error(&self) -> Option<&str> {
        match self {
            Reply::Error(text) => Some(text),
            _ => None,
        }
    }
}

/// Bytes that are not a reply this client reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The first byte names no RESP2 reply type.
    #[error("unknown reply type byte 0x{0:02x}")]
    UnknownType(u8),
    /// An integer, length or count that is not a decimal `i64` (its first bytes, lossily).
    #[error("invalid number {0:?}")]
    InvalidNumber(String),
    /// A negative length or count other than -1 (the nulls).
    #[error("invalid length {0}")]
    InvalidLength(i64),
    /// A bulk string longer than [`ReplyLimits::max_bulk_len`].
    #[error("bulk string of {len} bytes, past the limit of {limit}")]
    BulkTooLong {
        /// The length announced.
        len: i64,
        /// The limit.
        limit: usize,
    },
    /// An array of more than [`ReplyLimits::max_array_len`] items.
    #[error("array of {len} items, past the limit of {limit}")]
    ArrayTooLong {
        /// The count announced.
        len: i64,
        /// The limit.
        limit: usize,
    },
    /// Arrays nested deeper than [`ReplyLimits::max_depth`].
    #[error("arrays nested deeper than {0}")]
    TooDeep(usize),
    /// A line with no `\r\n` within [`ReplyLimits::max_line_len`] bytes.
    #[error("a line longer than {0} bytes")]
    LineTooLong(usize),
    /// A reply longer than [`ReplyLimits::max_reply_len`] bytes.
    #[error("a reply longer than {0} bytes")]
    ReplyTooLong(usize),
    /// A bulk string not followed by `\r\n`.
    #[error("a bulk string not followed by CRLF")]
    MissingCrlf,
}

/// Writes `args` as one multibulk request.
pub fn write_request<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// The line at the start of `buf` (without its `\r\n`) and the bytes it takes with them.
fn line(buf: &[u8], max_len: usize) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let window = &buf[..buf.len().min(max_len.saturating_add(2))];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok(Some((&buf[..end], end + 2))),
        None if window.len() >= max_len.saturating_add(2) => Err(ReplyError::LineTooLong(max_len)),
        None => Ok(None),
    }
}

fn number(bytes: &[u8]) -> Result<i64, ReplyError> {
    std::str::from_utf8(bytes).ok().and_then(|s| s.parse().ok()).ok_or_else(|| {
        ReplyError::InvalidNumber(String::from_utf8_lossy(&bytes[..bytes.len().min(32)]).into_owned())
    })
}

/// A length or count, and whether it is a null (-1); other negatives are errors.
fn length(bytes: &[u8]) -> Result<(i64, bool), ReplyError> {
    match number(bytes)? {
        -1 => Ok((-1, true)),
        n if n < 0 => Err(ReplyError::InvalidLength(n)),
        n => Ok((n, false)),
    }
}

/// Reads one reply at the start of `buf` within [`ReplyLimits::DEFAULT`]:
/// `Ok(Some((reply, consumed)))`, `Ok(None)` when more bytes are needed, an error for bytes that
/// are not a reply within the limits.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, ReplyError> {
    parse_reply_with(buf, &ReplyLimits::DEFAULT)
}

/// [`parse_reply`] within `limits`.
pub fn parse_reply_with(buf: &[u8], limits: &ReplyLimits) -> Result<Option<(Reply, usize)>, ReplyError> {
    match parse_at(buf, 0, 0, limits)? {
        None if buf.len() > limits.max_reply_len => Err(ReplyError::ReplyTooLong(limits.max_reply_len)),
        parsed => Ok(parsed),
    }
}

/// The reply at the start of `buf`, which lies `offset` bytes into the whole reply.
fn parse_at(
    buf: &[u8],
    offset: usize,
    depth: usize,
    limits: &ReplyLimits,
) -> Result<Option<(Reply, usize)>, ReplyError> {
    let Some((&kind, rest)) = buf.split_first() else { return Ok(None) };
    if !matches!(kind, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(ReplyError::UnknownType(kind));
    }
    let Some((head, used)) = line(rest, limits.max_line_len)? else { return Ok(None) };
    let used = used + 1;
    let too_long = |end: usize| offset.saturating_add(end) > limits.max_reply_len;
    if too_long(used) {
        return Err(ReplyError::ReplyTooLong(limits.max_reply_len));
    }
    let text = || String::from_utf8_lossy(head).into_owned();
    let reply = match kind {
        b'+' => Reply::Status(text()),
        b'-' => Reply::Error(text()),
        b':' => Reply::Integer(number(head)?),
        b'$' => {
            let (len, null) = length(head)?;
            if null {
                return Ok(Some((Reply::NullBulk, used)));
            }
            if len as u64 > limits.max_bulk_len as u64 {
                return Err(ReplyError::BulkTooLong { len, limit: limits.max_bulk_len });
            }
            let len = len as usize;
            let end = used + len + 2;
            if too_long(end) {
                return Err(ReplyError::ReplyTooLong(limits.max_reply_len));
            }
            let Some(body) = buf.get(used..end) else { return Ok(None) };
            if &body[len..] != b"\r\n" {
                return Err(ReplyError::MissingCrlf);
            }
            return Ok(Some((Reply::Bulk(body[..len].to_vec()), end)));
        }
        _ => {
            let (count, null) = length(head)?;
            if null {
                return Ok(Some((Reply::NullArray, used)));
            }
            if count as u64 > limits.max_array_len as u64 {
                return Err(ReplyError::ArrayTooLong { len: count, limit: limits.max_array_len });
            }
            if depth >= limits.max_depth {
                return Err(ReplyError::TooDeep(limits.max_depth));
            }
            // Grown item by item: each takes at least three bytes of `buf`, so the vector is
            // bounded by the bytes there, not by the count announced.
            let mut items = Vec::new();
            let mut at = used;
            for _ in 0..count {
                match parse_at(&buf[at..], offset + at, depth + 1, limits)? {
                    Some((item, n)) => {
                        items.push(item);
                        at += n;
                    }
                    None => return Ok(None),
                }
            }
            return Ok(Some((Reply::Array(items), at)));
        }
    };
    Ok(Some((reply, used)))
}

/// Reads from `reader` onto `buf` until a whole reply is at its start, and takes that reply's
/// bytes out of `buf` (bytes after it stay for the next call). End of stream before a whole
/// reply is [`io::ErrorKind::UnexpectedEof`]; bytes that are not a reply within the limits are
/// [`io::ErrorKind::InvalidData`].
pub fn read_reply(reader: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Reply> {
    read_framed(reader, buf, parse_reply)
}

/// The framing loop [`read_reply`] and the peers' HTTP client share: in `kairos-services`.
pub use kairos_services::stream::read_framed;

/// One blocking connection to a RESP server: requests written whole, replies read in order.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Connection {
    /// Connects within `timeout` (`TCP_NODELAY` set); each write and each reply must take no
    /// longer than `timeout` too.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Self { stream, buf: Vec::with_capacity(16 * 1024), out: Vec::with_capacity(256) })
    }

    /// Sends one command and reads its reply (an error reply is a reply: `Ok(Reply::Error)`).
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.out.clear();
        write_request(&mut self.out, args);
        self.stream.write_all(&self.out)?;
        read_reply(&mut self.stream, &mut self.buf)
    }

    /// Sends the commands in one write (a pipeline) and reads one reply per command.
    pub fn pipeline(&mut self, commands: &[&[&[u8]]]) -> io::Result<Vec<Reply>> {
        self.out.clear();
        for args in commands {
            write_request(&mut self.out, args);
        }
        self.stream.write_all(&self.out)?;
        commands.iter().map(|_| read_reply(&mut self.stream, &mut self.buf)).collect()
    }

    /// Sets how long a reply may take.
    pub fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))
    }

    /// The text of `INFO section`; any other reply is an error naming it.
    pub fn info(&mut self, section: &str) -> io::Result<String> {
        match self.call(&[b"INFO", section.as_bytes()])? {
            Reply::Bulk(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            other => Err(io::Error::other(format!("INFO answered {other:?}"))),
        }
    }
}

/// The value of `field` in an INFO text (its `field:value` line), trimmed.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')).map(str::trim)
}

/// The INFO field in which a Kairos member names the leader it knows (0: none).
pub const LEADER_FIELD: &str = "raft_leader_id";

/// The leader a Kairos member's INFO text names ([`LEADER_FIELD`] of its replication section):
/// `None` when it knows none (0), or the field is missing or not a number.
pub fn leader_from_info(info: &str) -> Option<u64> {
    info_field(info, LEADER_FIELD).and_then(|v| v.parse().ok()).filter(|&id| id > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv;
    use kairos_testkit::Trickle;

    #[test]
    fn the_stores_replies_read_back_and_partial_input_waits() {
        let mut out = Vec::new();
        for (sent, read) in [
            (kv::Reply::Ok, Reply::Status("OK".into())),
            (kv::Reply::Simple("PONG"), Reply::Status("PONG".into())),
            (kv::Reply::Integer(-42), Reply::Integer(-42)),
            (kv::Reply::Bulk(b"a\r\nb".to_vec()), Reply::Bulk(b"a\r\nb".to_vec())),
            (kv::Reply::Nil, Reply::NullBulk),
            (kv::Reply::Error("ERR x".into()), Reply::Error("ERR x".into())),
            (
                kv::Reply::Array(vec![kv::Reply::Bulk(b"k".to_vec()), kv::Reply::Nil, kv::Reply::Integer(3)]),
                Reply::Array(vec![Reply::Bulk(b"k".to_vec()), Reply::NullBulk, Reply::Integer(3)]),
            ),
        ] {
            out.clear();
            sent.encode(&mut out);
            assert_eq!(parse_reply(&out).unwrap(), Some((read.clone(), out.len())), "{sent:?}");
            for cut in 0..out.len() {
                assert_eq!(parse_reply(&out[..cut]).unwrap(), None, "{sent:?} cut at {cut}");
            }
        }
        out.clear();
        crate::resp::reply::null_array(&mut out);
        assert_eq!(parse_reply(&out).unwrap(), Some((Reply::NullArray, out.len())));
    }

    #[test]
    fn every_reply_type_reads_the_same_whatever_the_reads_cut() {
        let canned: &[u8] =
            b"+OK\r\n-ERR wrong\r\n:2\r\n$5\r\nhe\r\no\r\n$-1\r\n*2\r\n:1\r\n*1\r\n$0\r\n\r\n*-1\r\n*0\r\n";
        let want = vec![
            Reply::Status("OK".into()),
            Reply::Error("ERR wrong".into()),
            Reply::Integer(2),
            Reply::Bulk(b"he\r\no".to_vec()),
            Reply::NullBulk,
            Reply::Array(vec![Reply::Integer(1), Reply::Array(vec![Reply::Bulk(vec![])])]),
            Reply::NullArray,
            Reply::Array(vec![]),
        ];
        for step in [1, 2, 3, 7, 1000] {
            let mut reader = Trickle::new(canned, step);
            let mut buf = Vec::new();
            let got: Vec<Reply> =
                (0..want.len()).map(|_| read_reply(&mut reader, &mut buf).unwrap()).collect();
            assert_eq!(got, want, "reads of {step} bytes");
            assert!(buf.is_empty());
            let eof = read_reply(&mut reader, &mut buf).unwrap_err();
            assert_eq!(eof.kind(), io::ErrorKind::UnexpectedEof);
        }
        assert!(Reply::Status("OK".into()).is_ok() && !Reply::Status("PONG".into()).is_ok());
        assert_eq!(Reply::Error("ERR x".into()).error(), Some("ERR x"));
        assert_eq!(Reply::Status("OK".into()).error(), None);
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(parse_reply(b"?x\r\n"), Err(ReplyError::UnknownType(b'?')));
        assert_eq!(parse_reply(b":12a\r\n"), Err(ReplyError::InvalidNumber("12a".into())));
        assert_eq!(parse_reply(b"$3\r\nabcde"), Err(ReplyError::MissingCrlf));
        assert_eq!(parse_reply(b"$-2\r\n"), Err(ReplyError::InvalidLength(-2)));
        assert_eq!(parse_reply(b"*-5\r\n"), Err(ReplyError::InvalidLength(-5)));
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert_eq!(parse_reply(deep.as_bytes()), Err(ReplyError::TooDeep(MAX_DEPTH)));
        let mut buf = Vec::new();
        let err = read_reply(&mut Trickle::new(b"!bad\r\n", 4), &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_hostile_server_cannot_make_the_client_wait_for_or_hold_unbounded_bytes() {
        // Lengths past the limits are refused at their header, before any payload is awaited.
        let huge = |len: i64| ReplyError::BulkTooLong { len, limit: MAX_BULK_LEN };
        assert_eq!(parse_reply(b"$999999999999\r\n"), Err(huge(999_999_999_999)));
        assert_eq!(parse_reply(format!("${}\r\n", i64::MAX).as_bytes()), Err(huge(i64::MAX)));
        assert_eq!(parse_reply(format!("${MAX_BULK_LEN}\r\n").as_bytes()), Ok(None), "the limit itself");
        assert_eq!(
            parse_reply(b"*99999999\r\n"),
            Err(ReplyError::ArrayTooLong { len: 99_999_999, limit: MAX_ARRAY_LEN })
        );
        // A line that never ends is refused once it is past the limit.
        let mut endless = vec![b'+'; 1 + MAX_LINE_LEN + 2];
        assert_eq!(parse_reply(&endless[..MAX_LINE_LEN + 2]), Ok(None));
        assert_eq!(parse_reply(&endless), Err(ReplyError::LineTooLong(MAX_LINE_LEN)));
        endless.extend_from_slice(b"\r\n");
        assert_eq!(parse_reply(&endless), Err(ReplyError::LineTooLong(MAX_LINE_LEN)));
        // Bulks each within the limit that add up past the reply's limit: refused, whole or in
        // part, once the bytes (or the lengths) say so.
        let limits = ReplyLimits { max_bulk_len: 10, max_reply_len: 45, ..ReplyLimits::DEFAULT };
        let item = b"$10\r\n0123456789\r\n"; // 17 bytes
        let mut many = b"*3\r\n".to_vec();
        many.extend_from_slice(item);
        many.extend_from_slice(item);
        assert_eq!(many.len(), 38);
        assert_eq!(parse_reply_with(&many, &limits), Ok(None));
        many.extend_from_slice(b"$10\r\n");
        assert_eq!(parse_reply_with(&many, &limits), Err(ReplyError::ReplyTooLong(45)), "by its length");
        let two = [&b"*2\r\n"[..], item, item].concat();
        assert_eq!(parse_reply_with(&two, &limits).unwrap().unwrap().1, 38, "within the limit");
        let long_status = [&b"+"[..], &[b'x'; 45], b"\r\n"].concat();
        assert_eq!(parse_reply_with(&long_status, &limits), Err(ReplyError::ReplyTooLong(45)));
        assert_eq!(parse_reply_with(&long_status[..46], &limits), Err(ReplyError::ReplyTooLong(45)));
        assert_eq!(parse_reply_with(&long_status[..45], &limits), Ok(None));
        // Every prefix of a refused reply is incomplete or the same error.
        for cut in 0..=many.len() {
            let got = parse_reply_with(&many[..cut], &limits);
            assert!(matches!(got, Ok(None) | Err(ReplyError::ReplyTooLong(45))), "cut at {cut}: {got:?}");
        }
    }

    #[test]
    fn requests_are_what_the_server_parses() {
        let mut out = Vec::new();
        write_request(&mut out, &["SET", "k", "v v"]);
        let mut args = Vec::new();
        assert_eq!(crate::resp::parse_request(&out, &mut args).unwrap(), Some(out.len()));
        assert_eq!(args, vec![&b"SET"[..], b"k", b"v v"]);
        out.clear();
        write_request(&mut out, &[&b"SET"[..], b"k", b""]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn info_fields_and_the_leader_are_found_by_name() {
        let info = "# Replication\r\nrole:slave\r\nraft_member_id:2\r\nraft_leader_id:3\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,state=online\r\n";
        assert_eq!(info_field(info, "connected_slaves"), Some("1"));
        assert_eq!(info_field(info, "role"), Some("slave"));
        assert_eq!(info_field(info, "raft"), None, "a prefix of a name is not the name");
        assert_eq!(info_field(info, "raft_term"), None);
        assert_eq!(leader_from_info(info), Some(3));
        assert_eq!(leader_from_info("raft_leader_id:0\r\n"), None, "0: no leader known");
        assert_eq!(leader_from_info("raft_leader_id:x\r\n"), None);
        assert_eq!(leader_from_info("role:master\r\n"), None);
    }
}

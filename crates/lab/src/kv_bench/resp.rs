//! The client side of Redis's protocol (RESP2), as much as the bench speaks: commands encoded as
//! arrays of bulk strings, and replies read into a [`Reply`] from a byte stream.
//!
//! [`parse`] is a pure function over a buffer: it returns a whole reply and the bytes it took, or
//! `None` when the buffer holds only part of one, so a reply split across reads at any byte
//! reads the same. It refuses, with a [`RespError`], what no server of the bench sends: an
//! unknown type byte, a bad number, a length past [`MAX_BULK`] or [`MAX_ELEMENTS`], nesting past
//! [`MAX_DEPTH`]. It never panics on any input. [`RespConn`] is one TCP connection with a
//! receive buffer, reading until [`parse`] has a reply.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The largest bulk string accepted (INFO's answer is a few kilobytes).
pub const MAX_BULK: usize = 16 << 20;
/// The most elements an array may have.
pub const MAX_ELEMENTS: usize = 1 << 20;
/// The deepest nesting of arrays accepted.
pub const MAX_DEPTH: usize = 8;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Status(String),
    /// `-ERR ...`.
    Error(String),
    /// `:42`.
    Integer(i64),
    /// `$3 abc`, or `$-1` (none).
    Bulk(Option<Vec<u8>>),
    /// `*2 ...`, or `*-1` (none).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// Whether the reply is `+OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Status(s) if s == "OK")
    }
}

/// Bytes that are not a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RespError {
    /// The first byte names no reply type.
    #[error("resp: unknown reply type byte 0x{0:02x}")]
    UnknownType(u8),
    /// A length or integer is not a number, or out of range.
    #[error("resp: bad number {0:?}")]
    BadNumber(String),
    /// A bulk string longer than [`MAX_BULK`] or an array longer than [`MAX_ELEMENTS`].
    #[error("resp: length {0} past the limit")]
    TooLong(i64),
    /// Arrays nested deeper than [`MAX_DEPTH`].
    #[error("resp: arrays nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// A bulk string not followed by CRLF.
    #[error("resp: a bulk string is not followed by CRLF")]
    MissingCrlf,
}

/// Appends the command `args` as an array of bulk strings (the store's own client encoder).
pub fn encode(args: &[&[u8]], out: &mut Vec<u8>) {
    kairos_services::resp::client::write_request(out, args);
}

/// The reply at the start of `buf` and the bytes it took, or `None` when `buf` holds only part
/// of one.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    parse_at(buf, 0)
}

fn parse_at(buf: &[u8], depth: usize) -> Result<Option<(Reply, usize)>, RespError> {
    if depth > MAX_DEPTH {
        return Err(RespError::TooDeep);
    }
    let Some((&kind, _)) = buf.split_first() else { return Ok(None) };
    if !matches!(kind, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(RespError::UnknownType(kind));
    }
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
    let line = &buf[1..end];
    let after = end + 2;
    let text = || String::from_utf8_lossy(line).into_owned();
    match kind {
        b'+' => Ok(Some((Reply::Status(text()), after))),
        b'-' => Ok(Some((Reply::Error(text()), after))),
        b':' => Ok(Some((Reply::Integer(number(line)?), after))),
        b'$' => {
            let len = number(line)?;
            if len < 0 {
                return Ok(Some((Reply::Bulk(None), after)));
            }
            if len as u64 > MAX_BULK as u64 {
                return Err(RespError::TooLong(len));
            }
            let len = len as usize;
            if buf.len() < after + len + 2 {
                return Ok(None);
            }
            if &buf[after + len..after + len + 2] != b"\r\n" {
                return Err(RespError::MissingCrlf);
            }
            Ok(Some((Reply::Bulk(Some(buf[after..after + len].to_vec())), after + len + 2)))
        }
        _ => {
            let len = number(line)?;
            if len < 0 {
                return Ok(Some((Reply::Array(None), after)));
            }
            if len as u64 > MAX_ELEMENTS as u64 {
                return Err(RespError::TooLong(len));
            }
            let mut items = Vec::new();
            let mut at = after;
            for _ in 0..len {
                match parse_at(&buf[at..], depth + 1)? {
                    Some((item, used)) => {
                        items.push(item);
                        at += used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(items)), at)))
        }
    }
}

fn number(line: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| RespError::BadNumber(String::from_utf8_lossy(line).into_owned()))
}

/// Reads from `reader` into `buf` until a whole reply is there, and takes it out of `buf`
/// (bytes after it stay for the next call). End of stream before a whole reply is an error.
pub fn read_reply(reader: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Reply> {
    read_message(reader, buf, parse)
}

/// Reads from `reader` into `buf` until `parse` finds a whole message at its start (it returns
/// the message and the bytes it used), and takes those bytes out of `buf`: the framing loop of
/// every protocol the bench's clients speak (RESP here, HTTP in [`super::http`]).
pub(crate) fn read_message<T, E>(
    reader: &mut impl Read,
    buf: &mut Vec<u8>,
    parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, E>,
) -> io::Result<T>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some((message, used)) =
            parse(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
        {
            buf.drain(..used);
            return Ok(message);
        }
        let n = reader.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One connection to a RESP server.
#[derive(Debug)]
pub struct RespConn {
    stream: TcpStream,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl RespConn {
    /// Connects within `timeout`; each reply must come within `timeout` too.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Self { stream, buf: Vec::with_capacity(16 * 1024), out: Vec::with_capacity(256) })
    }

    /// Sends the commands in one write (a pipeline) and reads one reply per command.
    pub fn pipeline(&mut self, commands: &[&[&[u8]]]) -> io::Result<Vec<Reply>> {
        self.out.clear();
        for args in commands {
            encode(args, &mut self.out);
        }
        self.stream.write_all(&self.out)?;
        commands.iter().map(|_| read_reply(&mut self.stream, &mut self.buf)).collect()
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.out.clear();
        encode(args, &mut self.out);
        self.stream.write_all(&self.out)?;
        read_reply(&mut self.stream, &mut self.buf)
    }

    /// Sets how long a reply may take.
    pub fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))
    }

    /// `INFO section`'s text.
    pub fn info(&mut self, section: &str) -> io::Result<String> {
        match self.call(&[b"INFO", section.as_bytes()])? {
            Reply::Bulk(Some(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            other => Err(io::Error::other(format!("INFO answered {other:?}"))),
        }
    }
}

/// The value of `field:` in an INFO text.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')).map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its bytes `step` at a time.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(self.bytes.len()).min(out.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&[b"SET", b"k", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn every_reply_type_reads_the_same_whatever_the_reads_cut() {
        let canned: &[u8] =
            b"+OK\r\n-ERR wrong\r\n:2\r\n$5\r\nhe\r\no\r\n$-1\r\n*2\r\n:1\r\n*1\r\n$0\r\n\r\n*-1\r\n";
        let want = vec![
            Reply::Status("OK".into()),
            Reply::Error("ERR wrong".into()),
            Reply::Integer(2),
            Reply::Bulk(Some(b"he\r\no".to_vec())),
            Reply::Bulk(None),
            Reply::Array(Some(vec![Reply::Integer(1), Reply::Array(Some(vec![Reply::Bulk(Some(vec![]))]))])),
            Reply::Array(None),
        ];
        for step in [1, 2, 3, 7, 1000] {
            let mut reader = Trickle { bytes: canned, step };
            let mut buf = Vec::new();
            let got: Vec<Reply> =
                (0..want.len()).map(|_| read_reply(&mut reader, &mut buf).unwrap()).collect();
            assert_eq!(got, want, "reads of {step} bytes");
            assert!(buf.is_empty());
            let eof = read_reply(&mut reader, &mut buf).unwrap_err();
            assert_eq!(eof.kind(), io::ErrorKind::UnexpectedEof);
        }
        assert!(Reply::Status("OK".into()).is_ok() && !Reply::Status("PONG".into()).is_ok());
    }

    #[test]
    fn a_partial_reply_asks_for_more_and_garbage_is_refused() {
        for partial in [&b""[..], b"+OK", b"+OK\r", b"$5\r\nhel", b"$5\r\nhello\r", b"*2\r\n:1\r\n"] {
            assert_eq!(parse(partial), Ok(None), "{partial:?}");
        }
        assert_eq!(parse(b"?x\r\n"), Err(RespError::UnknownType(b'?')));
        assert_eq!(parse(b":x1\r\n"), Err(RespError::BadNumber("x1".into())));
        assert_eq!(parse(b"$3\r\nabcd\r\n"), Err(RespError::MissingCrlf));
        assert_eq!(parse(b"$999999999999\r\n"), Err(RespError::TooLong(999_999_999_999)));
        assert_eq!(parse(b"*99999999\r\n"), Err(RespError::TooLong(99_999_999)));
        assert_eq!(parse(&b"*1\r\n".repeat(20)), Err(RespError::TooDeep));
        let mut buf = Vec::new();
        let err = read_reply(&mut Trickle { bytes: b"!bad\r\n", step: 4 }, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn info_fields_are_found_by_name() {
        let info =
            "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,state=online\r\n";
        assert_eq!(info_field(info, "connected_slaves"), Some("1"));
        assert_eq!(info_field(info, "role"), Some("master"));
        assert_eq!(info_field(info, "raft_leader_id"), None);
    }
}

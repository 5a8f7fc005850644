//! The client's side of RESP2: requests written as multibulk arrays, and replies read back
//! into [`Reply`] values, for the checks and benchmarks that talk to a server as a client does.
//!
//! [`parse_reply`] reads one reply from the start of a buffer, or says more bytes are needed;
//! it never panics, nests at most [`MAX_DEPTH`] arrays deep, and checks every length against
//! the bytes it has before taking them.

use crate::codec::DecodeError;
use crate::kv::Reply;

/// Deepest array nesting read (replies of the store's commands nest at most once).
pub const MAX_DEPTH: usize = 8;

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

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

fn number(bytes: &[u8]) -> Result<i64, DecodeError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(DecodeError::Invalid { field: "reply number", value: bytes.len() as u64 })
}

/// Reads one reply at the start of `buf`: `Ok(Some((reply, consumed)))`, `Ok(None)` when more
/// bytes are needed, an error for bytes that are not RESP2.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, DecodeError> {
    parse_at(buf, 0)
}

fn parse_at(buf: &[u8], depth: usize) -> Result<Option<(Reply, usize)>, DecodeError> {
    let Some((&kind, rest)) = buf.split_first() else { return Ok(None) };
    let Some((head, used)) = line(rest) else { return Ok(None) };
    let used = used + 1;
    let reply = match kind {
        b'+' => match head {
            b"OK" => Reply::Ok,
            b"PONG" => Reply::Simple("PONG"),
            other => Reply::Bulk(other.to_vec()),
        },
        b'-' => Reply::Error(String::from_utf8_lossy(head).into_owned()),
        b':' => Reply::Integer(number(head)?),
        b'$' => {
            let len = number(head)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, used)));
            }
            let len = len as usize;
            let Some(body) = buf.get(used..used.saturating_add(len).saturating_add(2)) else {
                return Ok(None);
            };
            if &body[len..] != b"\r\n" {
                return Err(DecodeError::Invalid { field: "bulk terminator", value: len as u64 });
            }
            return Ok(Some((Reply::Bulk(body[..len].to_vec()), used + len + 2)));
        }
        b'*' => {
            let count = number(head)?;
            if count < 0 {
                return Ok(Some((Reply::Nil, used)));
            }
            if depth >= MAX_DEPTH {
                return Err(DecodeError::Invalid { field: "array depth", value: depth as u64 });
            }
            let mut items = Vec::new();
            let mut at = used;
            for _ in 0..count {
                match parse_at(&buf[at..], depth + 1)? {
                    Some((item, n)) => {
                        items.push(item);
                        at += n;
                    }
                    None => return Ok(None),
                }
            }
            return Ok(Some((Reply::Array(items), at)));
        }
        other => return Err(DecodeError::Invalid { field: "reply type", value: u64::from(other) }),
    };
    Ok(Some((reply, used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reply_kind_reads_back_and_partial_input_waits() {
        let mut out = Vec::new();
        for r in [
            Reply::Ok,
            Reply::Integer(-42),
            Reply::Bulk(b"a\r\nb".to_vec()),
            Reply::Nil,
            Reply::Error("ERR x".into()),
            Reply::Array(vec![Reply::Bulk(b"k".to_vec()), Reply::Nil, Reply::Integer(3)]),
        ] {
            out.clear();
            r.encode(&mut out);
            assert_eq!(parse_reply(&out).unwrap(), Some((r.clone(), out.len())), "{r:?}");
            for cut in 0..out.len() {
                assert_eq!(parse_reply(&out[..cut]).unwrap(), None, "{r:?} cut at {cut}");
            }
        }
        assert!(parse_reply(b"?x\r\n").is_err());
        assert!(parse_reply(b"$3\r\nabcde").is_err());
        assert!(parse_reply(b":12a\r\n").is_err());
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(parse_reply(deep.as_bytes()).is_err());
    }

    #[test]
    fn requests_are_what_the_server_parses() {
        let mut out = Vec::new();
        write_request(&mut out, &["SET", "k", "v v"]);
        let mut args = Vec::new();
        assert_eq!(crate::resp::parse_request(&out, &mut args).unwrap(), Some(out.len()));
        assert_eq!(args, vec![&b"SET"[..], b"k", b"v v"]);
    }
}

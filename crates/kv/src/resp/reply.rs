//! Replies: RESP2 frames appended to a caller's `Vec<u8>`.
//!
//! Each function appends one frame (an array is its header, then its elements, written by
//! further calls). Work and allocation: the frame's length, in the vector's growth. Line frames
//! (simple strings, errors) cannot carry `\r` or `\n`: those bytes are written as spaces, as
//! Redis's `addReplyError` does, so that no text can break the framing. The texts follow Redis's
//! `networking.c` (`addReplyStatus`, `addReplyError`, `addReplyBulk`, `addReplyNull`...).

use super::ProtocolError;

/// `+<text>\r\n`, a status such as `OK` or `PONG`.
pub fn simple(out: &mut Vec<u8>, text: &str) {
    line(out, b'+', text);
}

/// `-<text>\r\n`, an error such as `ERR unknown command`; by convention the text starts with an
/// upper-case code (`ERR`, `WRONGTYPE`...).
pub fn error(out: &mut Vec<u8>, text: &str) {
    line(out, b'-', text);
}

/// `-ERR Protocol error: <error>\r\n`, the reply before a connection is closed for `error`.
pub fn protocol_error(out: &mut Vec<u8>, error: &ProtocolError) {
    self::error(out, &format!("ERR Protocol error: {error}"));
}

/// `:<value>\r\n`.
pub fn integer(out: &mut Vec<u8>, value: i64) {
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `$<len>\r\n<bytes>\r\n`, binary-safe.
pub fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    length(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// `$-1\r\n`, the null bulk string (a missing key's `GET`).
pub fn null_bulk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// `*<len>\r\n`: an array of `len` elements, which the caller appends next.
pub fn array_header(out: &mut Vec<u8>, len: usize) {
    length(out, b'*', len);
}

/// `*-1\r\n`, the null array (a timed-out blocking pop, an aborted `EXEC`).
pub fn null_array(out: &mut Vec<u8>) {
    out.extend_from_slice(b"*-1\r\n");
}

fn length(out: &mut Vec<u8>, kind: u8, len: usize) {
    out.push(kind);
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut Vec<u8>, kind: u8, text: &str) {
    out.push(kind);
    out.extend(text.bytes().map(|byte| if byte == b'\r' || byte == b'\n' { b' ' } else { byte }));
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use redis_protocol::resp2::{decode::decode, types::OwnedFrame};

    fn written(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = b"before".to_vec();
        write(&mut out);
        assert!(out.starts_with(b"before"), "a reply overwrote the buffer");
        out.split_off(6)
    }

    #[test]
    fn frames() {
        assert_eq!(written(|out| simple(out, "OK")), b"+OK\r\n");
        assert_eq!(written(|out| error(out, "ERR no such key")), b"-ERR no such key\r\n");
        assert_eq!(written(|out| error(out, "ERR a\r\nb\nc")), b"-ERR a  b c\r\n");
        assert_eq!(written(|out| simple(out, "a\rb")), b"+a b\r\n");
        assert_eq!(written(|out| integer(out, 0)), b":0\r\n");
        assert_eq!(written(|out| integer(out, -42)), b":-42\r\n");
        assert_eq!(written(|out| integer(out, i64::MIN)), b":-9223372036854775808\r\n");
        assert_eq!(written(|out| bulk(out, b"")), b"$0\r\n\r\n");
        assert_eq!(written(|out| bulk(out, b"a\r\nb")), b"$4\r\na\r\nb\r\n");
        assert_eq!(written(null_bulk), b"$-1\r\n");
        assert_eq!(written(|out| array_header(out, 2)), b"*2\r\n");
        assert_eq!(written(null_array), b"*-1\r\n");
        assert_eq!(
            written(|out| protocol_error(out, &ProtocolError::ExpectedDollar { got: b'x' })),
            b"-ERR Protocol error: expected '$', got 'x'\r\n"
        );
        assert_eq!(
            written(|out| protocol_error(out, &ProtocolError::InvalidBulkLength)),
            b"-ERR Protocol error: invalid bulk length\r\n"
        );
    }

    proptest! {
        /// What the encoder writes, `redis-protocol` decodes back whole.
        #[test]
        fn replies_decode_back(values in proptest::collection::vec(any::<(u8, i64, Vec<u8>, String)>(), 0..6)) {
            let mut out = Vec::new();
            array_header(&mut out, values.len());
            let mut expected = Vec::new();
            for (kind, number, bytes, text) in values {
                match kind % 6 {
                    0 => {
                        integer(&mut out, number);
                        expected.push(OwnedFrame::Integer(number));
                    }
                    1 => {
                        bulk(&mut out, &bytes);
                        expected.push(OwnedFrame::BulkString(bytes));
                    }
                    2 => {
                        null_bulk(&mut out);
                        expected.push(OwnedFrame::Null);
                    }
                    3 => {
                        simple(&mut out, &text);
                        expected.push(OwnedFrame::SimpleString(text.replace(['\r', '\n'], " ").into_bytes()));
                    }
                    4 => {
                        error(&mut out, &text);
                        expected.push(OwnedFrame::Error(text.replace(['\r', '\n'], " ")));
                    }
                    _ => {
                        null_array(&mut out);
                        expected.push(OwnedFrame::Null);
                    }
                }
            }
            prop_assert_eq!(decode(&out).unwrap(), Some((OwnedFrame::Array(expected), out.len())));
        }
    }
}

//! A small HTTP/1.1 client for etcd's gRPC gateway (`POST /v3/kv/put` and friends with JSON
//! bodies): one keep-alive connection, one request at a time, and the response read by a pure
//! parser, as the bench's probes of etcd need and no more: whether a member answers a put and a
//! range, and its status (`/v3/maintenance/status`: the leader's id). The measured calls go
//! through etcd's gRPC API instead ([`crate::grpc`]), without the gateway's hop.
//!
//! [`parse_response`] takes a buffer and returns a whole response and the bytes it took, or
//! `None` when the buffer holds only part of one; bodies are framed by `Content-Length` or
//! `Transfer-Encoding: chunked` (1xx, 204 and 304 have none). It refuses, with an
//! [`HttpError`], what it cannot frame (a response with neither, which only the connection's end
//! would delimit), headers past [`MAX_HEADERS`] bytes and bodies past [`MAX_BODY`], and never
//! panics. A response with `Connection: close` (or HTTP/1.0 without keep-alive) makes
//! [`HttpConn`] connect again before its next request.
//!
//! [`base64`] encodes keys and values as the gateway's JSON wants them (protobuf `bytes`).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The most header bytes accepted.
pub const MAX_HEADERS: usize = 64 * 1024;
/// The largest body accepted.
pub const MAX_BODY: usize = 4 << 20;

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// Whether the server closes the connection after it.
    pub close: bool,
}

/// Bytes that are not a response the client can frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The status line is not `HTTP/1.x NNN ...`.
    #[error("http: bad status line {0:?}")]
    StatusLine(String),
    /// A header line has no colon, or a length is not a number.
    #[error("http: bad header {0:?}")]
    Header(String),
    /// Neither a length nor chunks: only the connection's end would delimit the body.
    #[error("http: a response with neither Content-Length nor chunked encoding")]
    Unframed,
    /// Headers past [`MAX_HEADERS`].
    #[error("http: headers longer than {MAX_HEADERS} bytes")]
    HeadersTooLong,
    /// A body past [`MAX_BODY`].
    #[error("http: body longer than {MAX_BODY} bytes")]
    BodyTooLong,
    /// A chunk's size line or its end is malformed.
    #[error("http: bad chunk {0:?}")]
    Chunk(String),
}

/// Appends a POST of `body` (JSON) to `path` on `host`.
pub fn encode_post(host: &str, path: &str, body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(body);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The response at the start of `buf` and the bytes it took, or `None` when `buf` holds only
/// part of one.
pub fn parse_response(buf: &[u8]) -> Result<Option<(Response, usize)>, HttpError> {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return if buf.len() > MAX_HEADERS { Err(HttpError::HeadersTooLong) } else { Ok(None) };
    };
    if head_end > MAX_HEADERS {
        return Err(HttpError::HeadersTooLong);
    }
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let status: u16 = match (version, code.parse()) {
        ("HTTP/1.1" | "HTTP/1.0", Ok(code)) if (100..1000).contains(&code) => code,
        _ => return Err(HttpError::StatusLine(status_line.to_string())),
    };
    let mut length = None;
    let mut chunked = false;
    let mut close = version == "HTTP/1.0";
    for line in lines {
        let (name, value) = line.split_once(':').ok_or_else(|| HttpError::Header(line.to_string()))?;
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                let n: usize = value.parse().map_err(|_| HttpError::Header(line.to_string()))?;
                if n > MAX_BODY {
                    return Err(HttpError::BodyTooLong);
                }
                length = Some(n);
            }
            "transfer-encoding" => chunked = value.to_ascii_lowercase().ends_with("chunked"),
            "connection" => {
                let value = value.to_ascii_lowercase();
                if value.contains("close") {
                    close = true;
                } else if value.contains("keep-alive") {
                    close = false;
                }
            }
            _ => {}
        }
    }
    let body_start = head_end + 4;
    let rest = &buf[body_start..];
    let framed = if matches!(status, 100..=199 | 204 | 304) {
        Some((Vec::new(), 0))
    } else if chunked {
        dechunk(rest)?
    } else if let Some(n) = length {
        (rest.len() >= n).then(|| (rest[..n].to_vec(), n))
    } else {
        return Err(HttpError::Unframed);
    };
    Ok(framed.map(|(body, used)| (Response { status, body, close }, body_start + used)))
}

/// A chunked body at the start of `buf` and the bytes it took (trailers included), or `None`
/// when incomplete.
fn dechunk(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, HttpError> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(line_end) = find(&buf[at..], b"\r\n") else {
            return if buf.len() - at > 1024 {
                Err(HttpError::Chunk("size line too long".into()))
            } else {
                Ok(None)
            };
        };
        let line = String::from_utf8_lossy(&buf[at..at + line_end]).into_owned();
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| HttpError::Chunk(line.clone()))?;
        at += line_end + 2;
        if size == 0 {
            // Trailers, each a line, then an empty line.
            loop {
                let Some(end) = find(&buf[at..], b"\r\n") else { return Ok(None) };
                at += end + 2;
                if end == 0 {
                    return Ok(Some((body, at)));
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(HttpError::BodyTooLong);
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        if &buf[at + size..at + size + 2] != b"\r\n" {
            return Err(HttpError::Chunk(format!("chunk of {size} bytes not followed by CRLF")));
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

/// Reads from `reader` into `buf` until a whole response is there, and takes it out of `buf`.
pub fn read_response(reader: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Response> {
    kairos_services::stream::read_framed(reader, buf, parse_response)
}

/// One keep-alive connection to an HTTP server.
#[derive(Debug)]
pub struct HttpConn {
    addr: SocketAddr,
    host: String,
    timeout: Duration,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl HttpConn {
    /// Connects to `addr` within `timeout`; each response must come within `timeout` too.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let mut conn = Self {
            addr,
            host: addr.to_string(),
            timeout,
            stream: None,
            buf: Vec::with_capacity(16 * 1024),
            out: Vec::with_capacity(512),
        };
        conn.reconnect()?;
        Ok(conn)
    }

    fn reconnect(&mut self) -> io::Result<()> {
        let stream = TcpStream::connect_timeout(&self.addr, self.timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        self.buf.clear();
        self.stream = Some(stream);
        Ok(())
    }

    /// POSTs `body` to `path` and reads the response. An error leaves the connection closed
    /// (the next request opens a new one), since a late response would answer the wrong request.
    pub fn post(&mut self, path: &str, body: &[u8]) -> io::Result<Response> {
        self.out.clear();
        encode_post(&self.host, path, body, &mut self.out);
        let result = self.exchange();
        match &result {
            Ok(r) if !r.close => {}
            _ => self.stream = None,
        }
        result
    }

    fn exchange(&mut self) -> io::Result<Response> {
        if self.stream.is_none() {
            self.reconnect()?;
        }
        let Some(stream) = self.stream.as_mut() else { unreachable!("connected just above") };
        stream.write_all(&self.out)?;
        read_response(stream, &mut self.buf)
    }
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [group[0], *group.get(1).unwrap_or(&0), *group.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kairos_testkit::Trickle;

    /// What etcd 3.4's gateway answers to a put, then a chunked answer, then an error that closes.
    const CANNED: &[u8] = b"HTTP/1.1 200 OK\r\n\
Access-Control-Allow-Origin: *\r\n\
Content-Type: application/json\r\n\
Grpc-Metadata-Content-Type: application/grpc\r\n\
Date: Thu, 26 Nov 2026 18:05:02 GMT\r\n\
Content-Length: 112\r\n\
\r\n\
{\"header\":{\"cluster_id\":\"8570459336700167655\",\"member_id\":\"3542974012341521924\",\"revision\":\"2\",\"raft_term\":\"2\"}}\
HTTP/1.1 200 OK\r\n\
Transfer-Encoding: chunked\r\n\
\r\n\
4;ext=1\r\n{\"a\"\r\n\
3\r\n:1}\r\n\
0\r\n\
X-Trailer: yes\r\n\
\r\n\
HTTP/1.1 503 Service Unavailable\r\n\
Connection: close\r\n\
Content-Length: 30\r\n\
\r\n\
{\"error\":\"etcdserver: no lea\"}";

    #[test]
    fn responses_read_the_same_whatever_the_reads_cut() {
        for step in [1, 2, 5, 64, 4096] {
            let mut reader = Trickle::new(CANNED, step);
            let mut buf = Vec::new();
            let put = read_response(&mut reader, &mut buf).unwrap();
            assert_eq!((put.status, put.close, put.body.len()), (200, false, 112), "step {step}");
            assert!(put.body.starts_with(b"{\"header\""));
            let chunked = read_response(&mut reader, &mut buf).unwrap();
            assert_eq!((chunked.status, chunked.body.as_slice()), (200, &b"{\"a\":1}"[..]));
            let error = read_response(&mut reader, &mut buf).unwrap();
            assert_eq!((error.status, error.close), (503, true));
            assert!(buf.is_empty());
            let eof = read_response(&mut reader, &mut buf).unwrap_err();
            assert_eq!(eof.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    #[test]
    fn partial_responses_ask_for_more_and_unframeable_ones_are_refused() {
        let whole = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        for cut in 0..whole.len() {
            assert_eq!(parse_response(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(parse_response(whole).unwrap().is_some());
        assert_eq!(
            parse_response(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap().map(|(r, n)| (r.status, n)),
            Some((204, 27))
        );
        assert_eq!(
            parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap().map(|(r, _)| r.close),
            Some(true)
        );
        assert!(matches!(parse_response(b"SMTP 250 ok\r\n\r\n"), Err(HttpError::StatusLine(_))));
        assert!(matches!(parse_response(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n"), Err(HttpError::Header(_))));
        assert!(matches!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
            Err(HttpError::Header(_))
        ));
        assert_eq!(parse_response(b"HTTP/1.1 200 OK\r\n\r\n{}"), Err(HttpError::Unframed));
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n"),
            Err(HttpError::BodyTooLong)
        );
        assert_eq!(parse_response(&vec![b'a'; MAX_HEADERS + 1]), Err(HttpError::HeadersTooLong));
        assert!(matches!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            Err(HttpError::Chunk(_))
        ));
        assert!(matches!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n"),
            Err(HttpError::Chunk(_))
        ));
    }

    #[test]
    fn a_post_carries_its_length_and_host() {
        let mut out = Vec::new();
        encode_post("127.0.0.1:2379", "/v3/kv/put", b"{\"key\":\"Zm9v\"}", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("POST /v3/kv/put HTTP/1.1\r\nHost: 127.0.0.1:2379\r\n"), "{text}");
        assert!(text.ends_with("Content-Length: 14\r\n\r\n{\"key\":\"Zm9v\"}"), "{text}");
    }

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }
}

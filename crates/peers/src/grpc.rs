//! etcd's gRPC API as `kv bench` speaks it: the two unary calls it makes, `etcdserverpb.KV/Put`
//! and `etcdserverpb.KV/Range`, over HTTP/2 without TLS (prior knowledge, as etcd's own clients
//! do on an `http://` URL), straight to a member's client port. The JSON gateway the bench used
//! before is a gRPC client inside etcd: each HTTP/1.1 request became a gRPC call of its own on
//! loopback, a hop and a JSON translation that etcd's real clients do not pay.
//!
//! A [`Session`] is one connection's protocol state without the socket, in the shape of the
//! bench's other wires: [`Session::request`] appends a call's bytes, [`Session::answer`] takes
//! frames from the front of what was read and says when the call has ended and how, and
//! [`Session::continue_request`] gives what a long request could not send before the server
//! opened its window. The frame parser refuses (with an [`Http2Error`]) what it cannot take,
//! frames longer than [`MAX_FRAME`] and messages longer than [`MAX_MESSAGE`] among them, and
//! never panics (the `grpc_frames` fuzz target).
//! A call the server answered but did not carry out says why with a [`GrpcError`]; the
//! connection goes on.
//!
//! What it implements: the connection preface and a SETTINGS frame (push off, a stream window
//! past the largest message, so that no answer waits on a stream's window), acknowledgements of
//! the server's SETTINGS and PINGs, a connection-level WINDOW_UPDATE for every 16 KiB received
//! (the server's send window never runs out over thousands of calls), the server's send windows
//! for DATA (a request with a 64 KiB value is longer than HTTP/2's initial window), padding,
//! CONTINUATION, RST_STREAM (the call fails with its code) and GOAWAY (the connection is done:
//! the bench's clients connect again). Requests are HPACK literals without indexing, and the
//! protobuf of the two requests is written by hand.
//!
//! What it deliberately does not: decode HPACK (the server's header blocks are skipped, so
//! `grpc-status` is not read: a call succeeded when one whole gRPC message came before the
//! stream's end, since a unary call that fails ends with trailers only), decode the answer's
//! protobuf, run more than one stream at a time (each client waits for its answer before its
//! next request), compress, prioritise, or accept pushes. The control frames it owes go out in
//! front of the next request's bytes (or of the rest of a long one), never in a write of their
//! own: requests follow each other closely, and a server does not wait for them.

use std::net::SocketAddr;

// Protobuf's varints are LEB128, as the project's own codec writes them.
use kairos_services::codec::put_u64;

/// HTTP/2's default SETTINGS_MAX_FRAME_SIZE, which this client leaves as it is: the longest
/// frame accepted, and the longest DATA frame sent (no server may accept less).
pub const MAX_FRAME: usize = 16_384;
/// The longest gRPC message accepted (gRPC's own default limit on a received message); an answer
/// to a put or to a one-key range is tens of bytes and the value.
pub const MAX_MESSAGE: usize = 4 << 20;
/// The window this client gives the server, per stream (SETTINGS_INITIAL_WINDOW_SIZE) and for
/// the connection: room for two of the longest messages, so that an answer never waits for a
/// WINDOW_UPDATE, which goes out only with a request.
const RECEIVE_WINDOW: u32 = 2 * MAX_MESSAGE as u32;
/// HTTP/2's flow-control window before SETTINGS and WINDOW_UPDATE change it.
const INITIAL_WINDOW: u32 = 65_535;
/// Connection-level DATA bytes received before a WINDOW_UPDATE gives them back to the server.
const WINDOW_UPDATE_AFTER: usize = 16 * 1024;
/// The largest stream id and window (31 bits).
const MAX_31: u32 = (1 << 31) - 1;

/// The client connection preface (RFC 9113, 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes of a frame's header: length (24 bits), type, flags, stream id (31 bits).
pub const FRAME_HEADER: usize = 9;
/// The gRPC message prefix: a compression flag and the length (32 bits, big-endian).
const MESSAGE_PREFIX: usize = 5;

/// Frame types (RFC 9113, 6).
mod frame {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
}

/// SETTINGS parameters.
mod setting {
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
}

/// Bytes from the server that end the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Http2Error {
    /// A frame longer than [`MAX_FRAME`], which this client never allowed.
    #[error("http/2: a frame of {0} bytes, past the {MAX_FRAME} this client accepts")]
    FrameTooLong(usize),
    /// A gRPC message longer than [`MAX_MESSAGE`].
    #[error("grpc: a message of {0} bytes, past the {MAX_MESSAGE} this client accepts")]
    MessageTooLong(usize),
    /// A frame that breaks HTTP/2's rules (its size, its stream, its place).
    #[error("http/2: {0}")]
    Malformed(&'static str),
    /// The server is closing the connection.
    #[error(
        "http/2: the server is closing the connection (GOAWAY, {}, last stream {last_stream}){}",
        error_code(*.code),
        if .debug.is_empty() { String::new() } else { format!(": {}", .debug) }
    )]
    GoAway {
        /// Why.
        code: u32,
        /// The last of this client's streams the server has processed or may still.
        last_stream: u32,
        /// The server's debug text, if any.
        debug: String,
    },
    /// Every client stream id of the connection was used.
    #[error("http/2: the connection's stream ids are used up")]
    StreamsExhausted,
}

/// An error code's name (RFC 9113, 7), for RST_STREAM and GOAWAY.
pub fn error_code(code: u32) -> String {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    match NAMES.get(code as usize) {
        Some(name) => format!("error code {code} {name}"),
        None => format!("error code {code}"),
    }
}

/// Why a call failed, its connection still usable: what the server answered instead of one
/// gRPC message. Each names the call's method path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrpcError {
    /// The server reset the call's stream (RST_STREAM) with this error code.
    #[error("{path}: the server reset the stream ({})", error_code(*.code))]
    Reset {
        /// The call's method path.
        path: &'static str,
        /// The RST_STREAM's error code (RFC 9113, 7).
        code: u32,
    },
    /// The stream ended with no message: a unary call that fails ends with trailers only, its
    /// gRPC status in them.
    #[error("{0} answered without a message (a gRPC error in its trailers)")]
    NoMessage(&'static str),
    /// The stream ended before the message was whole.
    #[error("{0}: the stream ended inside the message")]
    Truncated(&'static str),
    /// More bytes came than one message holds: a unary call answers one.
    #[error("{0} answered more than one message")]
    ExtraMessage(&'static str),
}

/// What a call's answer said: done, or why not.
pub type Outcome = Result<(), GrpcError>;

/// One unary call of etcd's KV service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call<'a> {
    /// `KV/Put`: `value` at `key`.
    Put {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// `KV/Range` of one key: a linearizable read (etcd's default, as the gateway's was).
    Range {
        /// The key.
        key: &'a [u8],
    },
}

impl Call<'_> {
    /// The method's HTTP/2 path.
    pub fn path(&self) -> &'static str {
        match self {
            Call::Put { .. } => "/etcdserverpb.KV/Put",
            Call::Range { .. } => "/etcdserverpb.KV/Range",
        }
    }

    /// Appends the request's protobuf: `PutRequest` `{1: key, 2: value}`, `RangeRequest`
    /// `{1: key}` (etcd's rpc.proto), the other fields at their defaults and so absent.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Call::Put { key, value } => {
                bytes_field(out, 1, key);
                bytes_field(out, 2, value);
            }
            Call::Range { key } => bytes_field(out, 1, key),
        }
    }
}

/// A length-delimited field (wire type 2); an empty one is left out, as proto3 writes it.
fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    put_u64(out, u64::from(field << 3 | 2));
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541, 5.1).
fn hpack_integer(out: &mut Vec<u8>, n: u32, first: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A header field as a literal without indexing, its name new and neither string Huffman-coded
/// (RFC 7541, 6.2.2): the server's decoder keeps nothing of it, so no table needs keeping here.
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x00);
    for s in [name, value] {
        hpack_integer(out, 7, 0x00, s.len());
        out.extend_from_slice(s.as_bytes());
    }
}

fn header_block(path: &str, authority: &str) -> Vec<u8> {
    let mut block = Vec::with_capacity(128);
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        hpack_literal(&mut block, name, value);
    }
    block
}

fn frame_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    frame_header(out, 4, frame::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// A header block that continues in CONTINUATION frames.
#[derive(Debug, Clone, Copy)]
struct OpenHeaderBlock {
    stream: u32,
    /// Its HEADERS frame had END_STREAM: the stream ends with the block.
    ends_stream: bool,
}

/// One connection's HTTP/2 and gRPC state, one call at a time.
#[derive(Debug)]
pub struct Session {
    /// HPACK blocks of the two calls, made once: the authority is the connection's.
    put_headers: Vec<u8>,
    range_headers: Vec<u8>,
    /// The preface and SETTINGS have gone out.
    started: bool,
    next_stream: u32,
    /// Every stream id was used; the connection must be replaced.
    exhausted: bool,
    /// Frames owed to the server (acknowledgements, window updates), sent before the next
    /// request's.
    control: Vec<u8>,
    /// DATA bytes received and not yet given back with a WINDOW_UPDATE.
    unreturned: usize,
    /// How much DATA the server accepts now: on the connection, on a new stream, on the call's.
    send_connection: i64,
    send_initial: i64,
    send_stream: i64,
    open_block: Option<OpenHeaderBlock>,
    /// The call in flight: its stream (0: none) and path.
    stream: u32,
    path: &'static str,
    /// The call's gRPC message (prefix and protobuf) and how much of it is sent.
    message: Vec<u8>,
    sent: usize,
    /// The answer's gRPC bytes received (prefixes included) and its message's prefix.
    received: usize,
    prefix: [u8; MESSAGE_PREFIX],
}

impl Session {
    /// A session for a new connection to `server`.
    pub fn new(server: SocketAddr) -> Self {
        let authority = server.to_string();
        Self {
            put_headers: header_block(Call::Put { key: b"", value: b"" }.path(), &authority),
            range_headers: header_block(Call::Range { key: b"" }.path(), &authority),
            started: false,
            next_stream: 1,
            exhausted: false,
            control: Vec::with_capacity(64),
            unreturned: 0,
            send_connection: i64::from(INITIAL_WINDOW),
            send_initial: i64::from(INITIAL_WINDOW),
            send_stream: 0,
            open_block: None,
            stream: 0,
            path: "",
            message: Vec::with_capacity(128),
            sent: 0,
            received: 0,
            prefix: [0; MESSAGE_PREFIX],
        }
    }

    /// Appends `call` on a new stream to `out`: the connection's preface first on a new
    /// connection, then the frames owed to the server, HEADERS, and as much of the message in
    /// DATA as the server's windows take (the rest: [`Session::continue_request`]). A call
    /// still in flight is abandoned; its stream's frames are skipped from now on.
    pub fn request(&mut self, call: Call<'_>, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            out.extend_from_slice(PREFACE);
            frame_header(out, 12, frame::SETTINGS, 0, 0);
            for (id, value) in [(setting::ENABLE_PUSH, 0), (setting::INITIAL_WINDOW_SIZE, RECEIVE_WINDOW)] {
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&value.to_be_bytes());
            }
            // SETTINGS widen only the streams' windows; the connection's takes an update.
            window_update(out, 0, RECEIVE_WINDOW - INITIAL_WINDOW);
        }
        out.append(&mut self.control);
        self.stream = 0;
        if self.next_stream > MAX_31 {
            self.exhausted = true;
            return;
        }
        self.stream = self.next_stream;
        self.next_stream += 2;
        self.path = call.path();
        self.send_stream = self.send_initial;
        self.received = 0;
        let block = match call {
            Call::Put { .. } => &self.put_headers,
            Call::Range { .. } => &self.range_headers,
        };
        frame_header(out, block.len(), frame::HEADERS, flag::END_HEADERS, self.stream);
        out.extend_from_slice(block);
        self.message.clear();
        self.message.extend_from_slice(&[0; MESSAGE_PREFIX]);
        call.encode(&mut self.message);
        let len = (self.message.len() - MESSAGE_PREFIX) as u32;
        self.message[1..MESSAGE_PREFIX].copy_from_slice(&len.to_be_bytes());
        self.sent = 0;
        self.send_data(out);
    }

    /// Appends what of the call's request the server's windows take now, behind the frames owed
    /// to the server; nothing once the request is sent whole. For a caller to send while it
    /// waits for the answer: a request longer than the server's window waits for its updates.
    pub fn continue_request(&mut self, out: &mut Vec<u8>) {
        if self.stream != 0 && self.sent < self.message.len() {
            out.append(&mut self.control);
            self.send_data(out);
        }
    }

    fn send_data(&mut self, out: &mut Vec<u8>) {
        while self.sent < self.message.len() {
            let room = self.send_connection.min(self.send_stream).min(MAX_FRAME as i64);
            if room <= 0 {
                return;
            }
            let n = (room as usize).min(self.message.len() - self.sent);
            let last = self.sent + n == self.message.len();
            frame_header(out, n, frame::DATA, if last { flag::END_STREAM } else { 0 }, self.stream);
            out.extend_from_slice(&self.message[self.sent..self.sent + n]);
            self.sent += n;
            self.send_connection -= n as i64;
            self.send_stream -= n as i64;
        }
    }

    /// Takes frames from the front of `buf` until the call in flight ends: its outcome then,
    /// `None` while `buf` holds no more whole frames (those taken are gone from `buf`).
    pub fn answer(&mut self, buf: &mut Vec<u8>) -> Result<Option<Outcome>, Http2Error> {
        if self.exhausted {
            return Err(Http2Error::StreamsExhausted);
        }
        let mut used = 0;
        let result = loop {
            let Some(header) = buf.get(used..used + FRAME_HEADER) else { break Ok(None) };
            let len = u32_at(&[0, header[0], header[1], header[2]], 0) as usize;
            if len > MAX_FRAME {
                break Err(Http2Error::FrameTooLong(len));
            }
            let Some(payload) = buf.get(used + FRAME_HEADER..used + FRAME_HEADER + len) else {
                break Ok(None);
            };
            let (kind, flags, stream) = (header[3], header[4], u32_at(header, 5) & MAX_31);
            match self.frame(kind, flags, stream, payload) {
                Ok(ended) => {
                    used += FRAME_HEADER + len;
                    if ended.is_some() {
                        break Ok(ended);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        buf.drain(..used);
        result
    }

    /// Takes one frame; the call's outcome if it ended the call.
    fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
    ) -> Result<Option<Outcome>, Http2Error> {
        if let Some(block) = self.open_block
            && (kind != frame::CONTINUATION || stream != block.stream)
        {
            return Err(Http2Error::Malformed("a header block interrupted by another frame"));
        }
        match kind {
            frame::DATA => self.data(flags, stream, payload),
            frame::HEADERS | frame::CONTINUATION => {
                if stream == 0 {
                    return Err(Http2Error::Malformed("a header block on stream 0"));
                }
                let ends_stream = match (kind, self.open_block.take()) {
                    (frame::HEADERS, _) => flags & flag::END_STREAM != 0,
                    (_, Some(block)) => block.ends_stream,
                    (_, None) => return Err(Http2Error::Malformed("a CONTINUATION without a header block")),
                };
                if flags & flag::END_HEADERS == 0 {
                    self.open_block = Some(OpenHeaderBlock { stream, ends_stream });
                    Ok(None)
                } else if ends_stream && stream == self.stream {
                    Ok(Some(self.end_call()))
                } else {
                    Ok(None)
                }
            }
            frame::RST_STREAM => {
                if stream == 0 || payload.len() != 4 {
                    return Err(Http2Error::Malformed("an RST_STREAM not 4 bytes long or on stream 0"));
                }
                if stream != self.stream {
                    return Ok(None);
                }
                let path = self.path;
                self.finish_call();
                Ok(Some(Err(GrpcError::Reset { path, code: u32_at(payload, 0) })))
            }
            frame::SETTINGS => {
                if stream != 0 {
                    return Err(Http2Error::Malformed("SETTINGS on a stream"));
                }
                if flags & flag::ACK != 0 {
                    return if payload.is_empty() {
                        Ok(None)
                    } else {
                        Err(Http2Error::Malformed("a SETTINGS acknowledgement with a payload"))
                    };
                }
                if !payload.len().is_multiple_of(6) {
                    return Err(Http2Error::Malformed("SETTINGS not a multiple of 6 bytes long"));
                }
                for entry in payload.chunks_exact(6) {
                    let id = u16::from_be_bytes([entry[0], entry[1]]);
                    if id == setting::INITIAL_WINDOW_SIZE {
                        let window = u32_at(entry, 2);
                        if window > MAX_31 {
                            return Err(Http2Error::Malformed("an initial window past 2^31 - 1"));
                        }
                        // A change of the initial window moves the open stream's by as much.
                        let delta = i64::from(window) - self.send_initial;
                        self.send_initial = i64::from(window);
                        self.send_stream = self.send_stream.saturating_add(delta);
                    }
                }
                frame_header(&mut self.control, 0, frame::SETTINGS, flag::ACK, 0);
                Ok(None)
            }
            frame::PING => {
                if stream != 0 || payload.len() != 8 {
                    return Err(Http2Error::Malformed("a PING not 8 bytes long or on a stream"));
                }
                if flags & flag::ACK == 0 {
                    frame_header(&mut self.control, 8, frame::PING, flag::ACK, 0);
                    self.control.extend_from_slice(payload);
                }
                Ok(None)
            }
            frame::GOAWAY => {
                if stream != 0 || payload.len() < 8 {
                    return Err(Http2Error::Malformed("a GOAWAY shorter than 8 bytes or on a stream"));
                }
                let debug = String::from_utf8_lossy(&payload[8..payload.len().min(8 + 200)]).into_owned();
                Err(Http2Error::GoAway {
                    code: u32_at(payload, 4),
                    last_stream: u32_at(payload, 0) & MAX_31,
                    debug,
                })
            }
            frame::WINDOW_UPDATE => {
                if payload.len() != 4 {
                    return Err(Http2Error::Malformed("a WINDOW_UPDATE not 4 bytes long"));
                }
                let increment = i64::from(u32_at(payload, 0) & MAX_31);
                if stream == 0 {
                    self.send_connection = self.send_connection.saturating_add(increment);
                } else if stream == self.stream {
                    self.send_stream = self.send_stream.saturating_add(increment);
                }
                Ok(None)
            }
            frame::PUSH_PROMISE => Err(Http2Error::Malformed("a PUSH_PROMISE, though push is off")),
            // PRIORITY and types this client does not know carry nothing it needs.
            _ => Ok(None),
        }
    }

    fn data(&mut self, flags: u8, stream: u32, payload: &[u8]) -> Result<Option<Outcome>, Http2Error> {
        if stream == 0 {
            return Err(Http2Error::Malformed("DATA on stream 0"));
        }
        let data = if flags & flag::PADDED != 0 {
            match payload.split_first() {
                Some((&pad, rest)) if usize::from(pad) <= rest.len() => {
                    &rest[..rest.len() - usize::from(pad)]
                }
                _ => return Err(Http2Error::Malformed("DATA with more padding than payload")),
            }
        } else {
            payload
        };
        // Flow control counts the whole payload, padding too, on every stream.
        self.unreturned += payload.len();
        if self.unreturned >= WINDOW_UPDATE_AFTER {
            window_update(&mut self.control, 0, self.unreturned as u32);
            self.unreturned = 0;
        }
        if stream != self.stream {
            return Ok(None);
        }
        if self.received < MESSAGE_PREFIX {
            let n = data.len().min(MESSAGE_PREFIX - self.received);
            self.prefix[self.received..self.received + n].copy_from_slice(&data[..n]);
        }
        self.received = self.received.saturating_add(data.len());
        if self.received >= MESSAGE_PREFIX {
            let len = u32_at(&self.prefix, 1) as usize;
            if len > MAX_MESSAGE {
                return Err(Http2Error::MessageTooLong(len));
            }
        }
        Ok((flags & flag::END_STREAM != 0).then(|| self.end_call()))
    }

    /// The call's outcome at its stream's end: one whole gRPC message, or why not.
    fn end_call(&mut self) -> Outcome {
        let (path, received) = (self.path, self.received);
        self.finish_call();
        if received == 0 {
            return Err(GrpcError::NoMessage(path));
        }
        let whole = if received >= MESSAGE_PREFIX {
            MESSAGE_PREFIX + u32_at(&self.prefix, 1) as usize
        } else {
            usize::MAX
        };
        match received.cmp(&whole) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(GrpcError::Truncated(path)),
            std::cmp::Ordering::Greater => Err(GrpcError::ExtraMessage(path)),
        }
    }

    fn finish_call(&mut self) {
        self.stream = 0;
        self.message.clear();
        self.sent = 0;
    }
}

#[cfg(test)]
mod tests;

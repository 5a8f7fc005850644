//! The controller's protocol on a byte stream: frames, and the messages they carry.
//!
//! A frame is a 4-byte big-endian length and that many bytes of body, at most [`MAX_FRAME`].
//! The first frame each way is the handshake ([`ToNode::Challenge`], then [`Hello`]) in plain
//! JSON; every later body is sealed by the session ([`super::auth::Session`]): a 16-byte tag,
//! then the JSON of one message. JSON because the control plane carries a few messages a second
//! and a person debugging a node reads them; the length prefix keeps a reader from scanning
//! for delimiters in bytes a stranger sent.
//!
//! Durations (periods, bounds, windows) are picoseconds, the unit of [`crate::te`], so a
//! grant's bounds cross the wire exactly. Instants (when a tunnel may send, when a change
//! takes effect) are nanoseconds of the hosts' shared wall clock (`CLOCK_REALTIME`: one clock
//! on one machine, PTP across machines): 64-bit picoseconds since 1970 would not fit.

use serde::{Deserialize, Serialize};

use super::auth::{Session, TAG_BYTES};
use crate::controller::Reason;
use crate::te::{HostDelay, Picos, Resources, TunnelId};

/// The largest frame body: ample for a welcome listing thousands of tunnels, small enough that
/// a stranger's length prefix cannot make the controller reserve much memory.
pub const MAX_FRAME: usize = 1 << 20;

/// The protocol's version, checked in the handshake.
pub const VERSION: u32 = 1;

/// A frame that breaks the framing; the stream cannot be read further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The length prefix announced more than [`MAX_FRAME`] bytes.
    #[error("a frame of {0} bytes announced, at most {MAX_FRAME} are accepted")]
    TooLarge(usize),
    /// The stream ended inside a frame.
    #[error("the stream ended {0} bytes into a frame")]
    Truncated(usize),
}

/// Appends `body` as one frame to `out`.
pub fn put_frame(body: &[u8], out: &mut Vec<u8>) {
    debug_assert!(body.len() <= MAX_FRAME, "callers build bodies far below the limit");
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
}

/// Appends `message` as one frame sealed by `session` (its tag, then its JSON) to `out`: what
/// every sender after the handshake writes.
pub fn put_sealed(session: &mut Session, message: &impl Serialize, out: &mut Vec<u8>) {
    let json = serde_json::to_vec(message).expect("messages serialise");
    debug_assert!(json.len() + TAG_BYTES <= MAX_FRAME, "callers send messages far below the limit");
    out.extend_from_slice(&((json.len() + TAG_BYTES) as u32).to_be_bytes());
    session.seal(&json, out);
}

/// Collects bytes as they arrive and cuts them into frames.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame's body, `None` until one has arrived whole. An announced length
    /// over [`MAX_FRAME`] is an error at once, before its bytes arrive.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, FrameError> {
        let rest = &self.buf[self.start..];
        let Some(prefix) = rest.first_chunk::<4>() else { return Ok(None) };
        let len = u32::from_be_bytes(*prefix) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        if rest.len() < 4 + len {
            // Compact before the buffer grows for the rest of this frame.
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            return Ok(None);
        }
        let body = self.start + 4..self.start + 4 + len;
        self.start = body.end;
        Ok(Some(&self.buf[body]))
    }

    /// Bytes of an unfinished frame (the stream ending now would cut it).
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The error for a stream that ended now, if it ended inside a frame.
    pub fn check_end(&self) -> Result<(), FrameError> {
        match self.pending() {
            0 => Ok(()),
            n => Err(FrameError::Truncated(n)),
        }
    }
}

/// What a tunnel is granted, in exact picoseconds (the wire form of [`Resources`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The largest packet, bytes.
    pub packet_bytes: u64,
    /// The approved period.
    pub period_ps: Picos,
    /// Every packet arrives at least this long after its release...
    pub min_latency_ps: Picos,
    /// ... and at most this much later than that.
    pub max_jitter_ps: Picos,
    /// Its strict priority level (0 is the highest).
    pub sublane: u8,
}

impl From<Resources> for Grant {
    fn from(r: Resources) -> Self {
        Self {
            packet_bytes: r.packet_bytes,
            period_ps: r.period,
            min_latency_ps: r.min_latency,
            max_jitter_ps: r.max_jitter,
            sublane: r.sublane,
        }
    }
}

/// A tunnel asked for by an application on the node's host (the sender is always that host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelSpec {
    /// Names the tunnel in notices and reports.
    pub name: String,
    /// The receiving hosts, by topology name.
    pub receivers: Vec<String>,
    /// The largest packet, bytes.
    pub packet_bytes: u64,
    /// The wanted period, ps.
    pub period_ps: Picos,
    /// The strict priority level wanted (0 is the highest).
    pub sublane: u8,
}

/// The node's half of the handshake: its host and its proof that it knows the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// The protocol version the node speaks.
    pub version: u32,
    /// The topology host the node runs on.
    pub host: String,
    /// The node's nonce, hex.
    pub nonce: String,
    /// HMAC of the handshake under the shared secret, hex ([`super::auth::hello_proof`]).
    pub proof: String,
}

/// What a node asks of the controller, for applications on its own host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToController {
    /// Admit a new tunnel from this host.
    Request {
        /// The node's number for the request, echoed in the answer.
        app_ref: u64,
        /// What is asked.
        tunnel: TunnelSpec,
    },
    /// Replace a tunnel of this host with new parameters.
    Change {
        /// The node's number for the request, echoed in the answer.
        app_ref: u64,
        /// The tunnel to replace.
        tunnel_id: TunnelId,
        /// Its new parameters.
        tunnel: TunnelSpec,
    },
    /// Release a tunnel of this host.
    Release {
        /// The tunnel.
        tunnel_id: TunnelId,
    },
    /// What the node's policer saw of a tunnel of this host over `window_ps`.
    Usage {
        /// The tunnel.
        tunnel_id: TunnelId,
        /// The time the report covers.
        window_ps: Picos,
        /// Packets the application offered in it.
        packets: u64,
        /// The largest of them, bytes.
        max_bytes: u64,
    },
    /// What this host adds to each packet before its first link, as its node measured it: the
    /// controller's bounds then hold it (sent after each welcome, and when a figure grows).
    HostDelay {
        /// The longest the lane core kept a release from its send, ps.
        core_jitter_ps: Picos,
        /// The longest send call of one packet to one receiver, ps.
        per_receiver_ps: Picos,
    },
}

/// A tunnel as a node learns of it when it connects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelInfo {
    /// The tunnel.
    pub tunnel_id: TunnelId,
    /// Its name.
    pub name: String,
    /// The sending host.
    pub sender: String,
    /// The receiving hosts.
    pub receivers: Vec<String>,
    /// What it is granted now.
    pub grant: Grant,
}

/// What the controller tells a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToNode {
    /// The controller's half of the handshake (plain, before the session).
    Challenge {
        /// The protocol version the controller speaks.
        version: u32,
        /// The controller's nonce, hex.
        nonce: String,
    },
    /// The handshake succeeded: every tunnel the host sends or receives on, as they are now.
    Welcome {
        /// The host the node was admitted as.
        host: String,
        /// The controller's clock when it answered, ns.
        now_ns: u64,
        /// The host's tunnels.
        tunnels: Vec<TunnelInfo>,
    },
    /// A request or change was admitted.
    Granted {
        /// The node's number for the request.
        app_ref: u64,
        /// The tunnel's name.
        name: String,
        /// The new tunnel.
        tunnel_id: TunnelId,
        /// What it is granted.
        grant: Grant,
        /// When it may start sending, ns.
        send_from_ns: u64,
    },
    /// A request, change, release or report was refused.
    Refused {
        /// The node's number for the request (0 for a release or report).
        app_ref: u64,
        /// The tunnel's name, if the input had one.
        name: String,
        /// Why.
        reason: String,
    },
    /// A tunnel this host receives on was opened.
    Opened {
        /// The tunnel.
        tunnel: TunnelInfo,
        /// When its sender may start sending, ns.
        send_from_ns: u64,
    },
    /// A tunnel's resources change at `effective_at_ns`.
    BandwidthChanged {
        /// The tunnel.
        tunnel_id: TunnelId,
        /// What it has from `effective_at_ns`.
        grant: Grant,
        /// Why.
        reason: Reason,
        /// When the change takes effect, ns.
        effective_at_ns: u64,
    },
    /// A tunnel was released.
    Released {
        /// The tunnel.
        tunnel_id: TunnelId,
    },
    /// A tunnel was ended by the controller.
    Terminated {
        /// The tunnel.
        tunnel_id: TunnelId,
    },
    /// Every bound the controller sends from here on holds this host's delay (as reported).
    HostDelayKnown {
        /// The lane core's jitter the bounds hold, ps.
        core_jitter_ps: Picos,
        /// The send call per receiver past the first the bounds hold, ps.
        per_receiver_ps: Picos,
    },
    /// A frame of this node was refused; the connection is closed after it when `closing`.
    Rejected {
        /// Why.
        reason: String,
        /// Whether the controller closes the connection.
        closing: bool,
    },
}

impl ToNode {
    /// The answer to a host whose delay the controller's bounds now hold.
    pub fn host_delay_known(delay: HostDelay) -> Self {
        Self::HostDelayKnown { core_jitter_ps: delay.core_jitter, per_receiver_ps: delay.per_receiver }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_whatever_the_reads() {
        let mut stream = Vec::new();
        for body in [&b"one"[..], b"", b"three"] {
            put_frame(body, &mut stream);
        }
        for step in 1..stream.len() {
            let mut r = FrameReader::new();
            let mut got = Vec::new();
            for piece in stream.chunks(step) {
                r.push(piece);
                while let Some(body) = r.next_frame().unwrap() {
                    got.push(body.to_vec());
                }
            }
            assert_eq!(got, [b"one".to_vec(), vec![], b"three".to_vec()], "reads of {step} bytes");
            assert_eq!(r.check_end(), Ok(()));
        }
    }

    #[test]
    fn a_huge_length_is_refused_before_its_bytes_arrive() {
        let mut r = FrameReader::new();
        r.push(&u32::MAX.to_be_bytes());
        assert_eq!(r.next_frame(), Err(FrameError::TooLarge(u32::MAX as usize)));
    }

    #[test]
    fn a_stream_ending_inside_a_frame_is_truncated() {
        let mut r = FrameReader::new();
        r.push(&[0, 0, 0, 9, 1, 2]);
        assert_eq!(r.next_frame(), Ok(None));
        assert_eq!(r.check_end(), Err(FrameError::Truncated(6)));
    }

    #[test]
    fn messages_have_stable_json() {
        let m = ToController::Release { tunnel_id: 7 };
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"type":"release","tunnel_id":7}"#);
        let bad = r#"{"type":"release","tunnel_id":7,"extra":1}"#;
        assert!(serde_json::from_str::<ToController>(bad).is_err(), "unknown fields are refused");
    }
}

//! A node's side of the controller's protocol: the handshake, sealed messages, and a link that
//! reconnects by itself.
//!
//! [`NodeConnection`] is one authenticated connection on a blocking socket. [`ControllerLink`]
//! keeps one up: when the connection is lost (the controller restarted, the network failed)
//! it reports [`LinkEvent::Lost`], retries with a doubling back-off (10 ms to 1 s), and on
//! success reports [`LinkEvent::Connected`] with the host's tunnels as the controller holds
//! them, so the node reconciles what it may have missed while away.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::auth::{self, AuthError, Role, Secret, Session};
use super::wire::{
    FrameError, FrameReader, Hello, ToController, ToNode, TunnelInfo, VERSION, put_frame, put_sealed,
};

/// Why a node's connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket failed.
    #[error("controller {addr}: {source}")]
    Io {
        /// The controller.
        addr: SocketAddr,
        /// What failed.
        source: std::io::Error,
    },
    /// The controller broke the framing.
    #[error("controller {addr}: {source}")]
    Frame {
        /// The controller.
        addr: SocketAddr,
        /// How.
        source: FrameError,
    },
    /// The controller's frames did not authenticate.
    #[error("controller {addr}: {source}")]
    Auth {
        /// The controller.
        addr: SocketAddr,
        /// How.
        source: AuthError,
    },
    /// The controller said something out of protocol.
    #[error("controller {addr}: {what}")]
    Protocol {
        /// The controller.
        addr: SocketAddr,
        /// What.
        what: String,
    },
    /// The controller refused the connection.
    #[error("controller {addr} refused this node: {reason}")]
    Rejected {
        /// The controller.
        addr: SocketAddr,
        /// Its reason.
        reason: String,
    },
    /// The controller said nothing in time.
    #[error("controller {addr} did not answer within {0:?}", .timeout)]
    Timeout {
        /// The controller.
        addr: SocketAddr,
        /// How long was waited.
        timeout: Duration,
    },
    /// No connection is up (the link is reconnecting).
    #[error("not connected to the controller (reconnecting)")]
    NotConnected,
}

/// What the controller said when the node connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The host the node was admitted as.
    pub host: String,
    /// The controller's wall clock then, ns.
    pub now_ns: u64,
    /// The host's tunnels.
    pub tunnels: Vec<TunnelInfo>,
}

/// One authenticated connection to the controller.
#[derive(Debug)]
pub struct NodeConnection {
    addr: SocketAddr,
    stream: TcpStream,
    reader: FrameReader,
    session: Session,
}

impl NodeConnection {
    /// Connects to `addr` as the node of `host`, within `timeout` for each step.
    pub fn connect(
        addr: SocketAddr,
        host: &str,
        secret: &Secret,
        timeout: Duration,
    ) -> Result<(Self, Welcome), ClientError> {
        let io = |source| ClientError::Io { addr, source };
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let mut reader = FrameReader::new();
        let mut raw = Raw { addr, stream: &stream, reader: &mut reader };
        let challenge: ToNode = parse(addr, &raw.frame(timeout)?)?;
        let controller_nonce = match challenge {
            ToNode::Challenge { version, nonce } if version == VERSION => {
                auth::parse_nonce(&nonce).map_err(|source| ClientError::Auth { addr, source })?
            }
            ToNode::Challenge { version, .. } => {
                return Err(ClientError::Protocol {
                    addr,
                    what: format!("speaks protocol {version}, this node {VERSION}"),
                });
            }
            other => {
                return Err(ClientError::Protocol {
                    addr,
                    what: format!("sent {other:?} before a challenge"),
                });
            }
        };
        let node_nonce = auth::nonce().map_err(|source| ClientError::Auth { addr, source })?;
        let hello = Hello {
            version: VERSION,
            host: host.to_string(),
            nonce: auth::hex(&node_nonce),
            proof: auth::hello_proof(secret, &controller_nonce, &node_nonce, host),
        };
        let mut out = Vec::new();
        put_frame(&serde_json::to_vec(&hello).expect("a hello serialises"), &mut out);
        (&stream).write_all(&out).map_err(io)?;
        let mut session = Session::new(secret, &controller_nonce, &node_nonce, Role::Node);
        let body = raw.frame(timeout)?;
        // A refusal comes plain (the controller did not trust this node); a welcome sealed.
        if let Ok(ToNode::Rejected { reason, .. }) = serde_json::from_slice::<ToNode>(&body) {
            return Err(ClientError::Rejected { addr, reason });
        }
        let payload = session.open(&body).map_err(|source| ClientError::Auth { addr, source })?;
        let welcome = match parse(addr, payload)? {
            ToNode::Welcome { host, now_ns, tunnels } => Welcome { host, now_ns, tunnels },
            other => {
                return Err(ClientError::Protocol {
                    addr,
                    what: format!("sent {other:?} instead of a welcome"),
                });
            }
        };
        Ok((Self { addr, stream, reader, session }, welcome))
    }

    /// The connection's parts, for an event loop that reads and writes it itself: the
    /// socket, the frames read ahead, and the session that seals and opens them.
    pub fn into_parts(self) -> (TcpStream, FrameReader, Session) {
        (self.stream, self.reader, self.session)
    }

    /// The controller's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends one message.
    pub fn send(&mut self, message: &ToController) -> Result<(), ClientError> {
        let mut out = Vec::new();
        put_sealed(&mut self.session, message, &mut out);
        (&self.stream).write_all(&out).map_err(|source| ClientError::Io { addr: self.addr, source })
    }

    /// The next message, waiting up to `timeout`; `None` when none came in time.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<ToNode>, ClientError> {
        let addr = self.addr;
        let mut raw = Raw { addr, stream: &self.stream, reader: &mut self.reader };
        let body = match raw.frame(timeout) {
            Ok(body) => body,
            Err(ClientError::Timeout { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let payload = self.session.open(&body).map_err(|source| ClientError::Auth { addr, source })?;
        parse(addr, payload).map(Some)
    }
}

fn parse(addr: SocketAddr, bytes: &[u8]) -> Result<ToNode, ClientError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ClientError::Protocol { addr, what: format!("sent a malformed message: {e}") })
}

/// Reads whole frames off a blocking stream.
struct Raw<'a> {
    addr: SocketAddr,
    stream: &'a TcpStream,
    reader: &'a mut FrameReader,
}

impl Raw<'_> {
    fn frame(&mut self, timeout: Duration) -> Result<Vec<u8>, ClientError> {
        let addr = self.addr;
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 16 << 10];
        loop {
            match self.reader.next_frame() {
                Ok(Some(body)) => return Ok(body.to_vec()),
                Ok(None) => {}
                Err(source) => return Err(ClientError::Frame { addr, source }),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout { addr, timeout });
            }
            self.stream.set_read_timeout(Some(left)).map_err(|source| ClientError::Io { addr, source })?;
            match (&mut &*self.stream).read(&mut buf) {
                Ok(0) => {
                    let source =
                        std::io::Error::new(ErrorKind::UnexpectedEof, "the controller closed the connection");
                    return Err(ClientError::Io { addr, source });
                }
                Ok(n) => self.reader.push(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(ClientError::Timeout { addr, timeout });
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => return Err(ClientError::Io { addr, source }),
            }
        }
    }
}

/// What a [`ControllerLink`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// Connected (again): the host's tunnels as the controller holds them.
    Connected(Welcome),
    /// A message from the controller.
    Message(ToNode),
    /// The connection was lost or refused; the link retries.
    Lost(String),
}

/// The shortest wait before a reconnection.
pub const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// The longest.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A node's connection to the controller that comes back by itself; see the module docs.
#[derive(Debug)]
pub struct ControllerLink {
    addr: SocketAddr,
    host: String,
    secret: Secret,
    conn: Option<NodeConnection>,
    backoff: Duration,
    retry_at: Instant,
    next_ref: u64,
}

impl ControllerLink {
    /// A link to `addr` for the node of `host`; it connects on the first [`ControllerLink::poll`].
    pub fn new(addr: SocketAddr, host: &str, secret: Secret) -> Self {
        Self {
            addr,
            host: host.to_string(),
            secret,
            conn: None,
            backoff: MIN_BACKOFF,
            retry_at: Instant::now(),
            next_ref: 1,
        }
    }

    /// Whether a connection is up.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Connects if it is time to, then waits up to `timeout` for a message.
    pub fn poll(&mut self, timeout: Duration) -> Option<LinkEvent> {
        let Some(conn) = self.conn.as_mut() else {
            let wait = self.retry_at.saturating_duration_since(Instant::now());
            if wait > timeout {
                std::thread::sleep(timeout);
                return None;
            }
            std::thread::sleep(wait);
            return match NodeConnection::connect(
                self.addr,
                &self.host,
                &self.secret,
                timeout.max(MIN_BACKOFF * 10),
            ) {
                Ok((conn, welcome)) => {
                    self.conn = Some(conn);
                    self.backoff = MIN_BACKOFF;
                    Some(LinkEvent::Connected(welcome))
                }
                Err(e) => Some(self.lost(e)),
            };
        };
        match conn.recv(timeout) {
            Ok(None) => None,
            Ok(Some(ToNode::Rejected { reason, closing: true })) => {
                Some(self.lost(ClientError::Rejected { addr: self.addr, reason }))
            }
            Ok(Some(m)) => Some(LinkEvent::Message(m)),
            Err(e) => Some(self.lost(e)),
        }
    }

    fn lost(&mut self, e: ClientError) -> LinkEvent {
        self.conn = None;
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        LinkEvent::Lost(e.to_string())
    }

    /// Sends a message; an error when no connection is up (the caller retries after
    /// [`LinkEvent::Connected`], whose tunnels say what the controller kept).
    pub fn send(&mut self, message: &ToController) -> Result<(), ClientError> {
        let conn = self.conn.as_mut().ok_or(ClientError::NotConnected)?;
        let result = conn.send(message);
        if let Err(e) = result {
            let why = e.to_string();
            self.lost(e);
            return Err(ClientError::Protocol { addr: self.addr, what: why });
        }
        Ok(())
    }

    /// A fresh number for a request, echoed in its answer.
    pub fn next_ref(&mut self) -> u64 {
        let r = self.next_ref;
        self.next_ref += 1;
        r
    }
}

//! How an application talks to its host's node: the control messages on a Unix socket, and the
//! client library ([`LaneApp`]) that wraps them and the bridges, the Rust form of the source's
//! Listing 1 (request, change, release; bandwidth changed and terminated as events; send and
//! receive on a granted tunnel).
//!
//! Control goes over the node's Unix stream socket (`DIR/node.sock`), in the controller's
//! frames ([`crate::service::wire`]) of JSON: rare, and a system call each is fine. Data never
//! does: each granted tunnel has an outbox bridge (the source's `R-X`: application to lane)
//! that the application fills and the node's lane loop empties at the tunnel's releases, and
//! each application has one inbox bridge (`X-R`: lane to application) that the lane loop fills
//! with every message of the tunnels it listens to. Both are shared-memory rings
//! (`kairos_io::bridge`) the node creates and the application joins, so sending and receiving
//! a message is no system call, and the node never waits for an application: a full inbox
//! refuses the newest message (counted in the bridge, which both sides read).
//!
//! An inbox message is `tunnel id (u64 LE) | the sender's time stamp, ns (u64 LE) | the
//! message`, and its bridge time stamp is the kernel's receive time stamp of the packet that
//! carried it: both on the hosts' shared wall clock, so their difference is the one-way latency.
//! The socket is the node's user's (mode 0600 bridges): applications of that user are trusted
//! as the host's, as the source's services are.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kairos_io::bridge::{self, BridgeFileError};
use kairos_ring::bridge::{Consumer, Mapped, Producer, SendError};
use kairos_sys::bell::Bell;
use kairos_sys::shm::SharedRegion;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd};

use crate::controller::Reason;
use crate::service::wire::{FrameError, FrameReader, Grant, TunnelSpec, put_frame};
use crate::te::TunnelId;

/// Bytes before an inbox message's own: the tunnel and the sender's time stamp.
pub const INBOX_HEADER_BYTES: usize = 16;

/// The socket's file name in the node's directory.
pub const SOCKET_NAME: &str = "node.sock";

/// What an application asks its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum AppToNode {
    /// The first message: who the application is.
    Hello {
        /// Its name: 1 to 32 letters, digits, `-` or `_`.
        app: String,
    },
    /// A tunnel from this host.
    Request {
        /// The application's number for the request, echoed in the answer.
        app_ref: u64,
        /// What is asked.
        tunnel: TunnelSpec,
    },
    /// New parameters for a tunnel of this application.
    Change {
        /// The application's number for the request.
        app_ref: u64,
        /// The tunnel.
        tunnel_id: TunnelId,
        /// Its new parameters.
        tunnel: TunnelSpec,
    },
    /// Release a tunnel of this application.
    Release {
        /// The tunnel.
        tunnel_id: TunnelId,
    },
    /// Deliver the messages of tunnels named `name` that reach this host to this application.
    Listen {
        /// The tunnels' name.
        name: String,
    },
}

/// What a node tells an application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum NodeToApp {
    /// The answer to the hello.
    Welcome {
        /// The node's host.
        host: String,
        /// The application's inbox bridge file.
        inbox: PathBuf,
        /// A named pipe the node rings after delivering to the inbox
        /// ([`kairos_sys::bell`]), for an application that sleeps in `ppoll`.
        #[serde(default)]
        doorbell: Option<PathBuf>,
    },
    /// A request or change was granted.
    Granted {
        /// The application's number for it.
        app_ref: u64,
        /// The tunnel.
        tunnel_id: TunnelId,
        /// What it is granted.
        grant: Grant,
        /// When it may start sending, wall-clock ns.
        send_from_ns: u64,
        /// The tunnel's outbox bridge file.
        outbox: PathBuf,
    },
    /// A request or change was refused.
    Refused {
        /// The application's number for it.
        app_ref: u64,
        /// Why.
        reason: String,
    },
    /// A tunnel's grant changes at `effective_at_ns` (the source's `bandwidthChanged`).
    Changed {
        /// The tunnel.
        tunnel_id: TunnelId,
        /// The grant from then on.
        grant: Grant,
        /// Why.
        reason: Reason,
        /// When, wall-clock ns.
        effective_at_ns: u64,
    },
    /// A tunnel ended: released, or terminated by the controller (`bandwidthTerminated`).
    Ended {
        /// The tunnel.
        tunnel_id: TunnelId,
        /// Whether the controller ended it (else it was released).
        terminated: bool,
    },
    /// The node could not do what was asked (not a refusal of the controller).
    Error {
        /// Why.
        reason: String,
    },
}

/// Whether `name` may name an application (it becomes part of file names).
pub fn valid_app_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Why the application's side failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The node's socket failed.
    #[error("node socket {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The node broke the framing.
    #[error("node socket: {0}")]
    Frame(#[from] FrameError),
    /// The node said something out of protocol.
    #[error("the node sent {0}")]
    Protocol(String),
    /// A bridge could not be joined.
    #[error(transparent)]
    Bridge(#[from] BridgeFileError),
    /// The controller refused.
    #[error("refused: {0}")]
    Refused(String),
    /// The node could not do it.
    #[error("the node: {0}")]
    Node(String),
    /// No answer in time.
    #[error("the node did not answer within {0:?}")]
    Timeout(Duration),
    /// An application name that cannot be one.
    #[error("'{0}' is not an application name: 1 to 32 letters, digits, '-' or '_'")]
    BadName(String),
}

/// A tunnel the application may send on.
#[derive(Debug)]
pub struct Tunnel {
    /// Its id.
    pub id: TunnelId,
    /// What it is granted (updated by [`LaneApp::events`]' `Changed` as it takes effect).
    pub grant: Grant,
    /// When it may start sending, wall-clock ns.
    pub send_from_ns: u64,
    outbox: Producer<Mapped<SharedRegion>>,
}

impl Tunnel {
    /// Queues `message` for the tunnel's next release, stamped `now_ns`. A full outbox or a
    /// message larger than a slot is refused; what the node cannot fit in the period is
    /// dropped there as excess and reported.
    pub fn send(&mut self, message: &[u8], now_ns: u64) -> Result<(), SendError> {
        self.outbox.try_send(message, now_ns)
    }

    /// Messages in the outbox that the node has not taken yet: it takes them all at each
    /// release, so 0 means the last release came after the last send.
    pub fn queued(&self) -> u64 {
        self.outbox.stats().queued()
    }
}

/// A message delivered to the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The tunnel it came on.
    pub tunnel_id: TunnelId,
    /// The sender's time stamp, wall-clock ns.
    pub sent_ns: u64,
    /// The kernel's receive time stamp of its packet, wall-clock ns.
    pub received_ns: u64,
    /// The message's bytes in the caller's buffer.
    pub len: usize,
}

/// An application's connection to its node; see the module docs.
#[derive(Debug)]
pub struct LaneApp {
    path: PathBuf,
    stream: UnixStream,
    reader: FrameReader,
    host: String,
    inbox: Consumer<Mapped<SharedRegion>>,
    doorbell: Option<Bell>,
    next_ref: u64,
    /// Events read while waiting for an answer, handed out by [`LaneApp::events`].
    pending: Vec<NodeToApp>,
    scratch: Vec<u8>,
}

/// Reads the next message off a blocking Unix stream, waiting until `deadline`.
fn read_message(
    stream: &UnixStream,
    reader: &mut FrameReader,
    path: &Path,
    deadline: Instant,
) -> Result<Option<NodeToApp>, AppError> {
    let mut buf = [0u8; 4096];
    let mut read_once = false;
    loop {
        if let Some(body) = reader.next_frame()? {
            let m = serde_json::from_slice(body)
                .map_err(|e| AppError::Protocol(format!("a malformed message: {e}")))?;
            return Ok(Some(m));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() && read_once {
            return Ok(None);
        }
        read_once = true;
        let io = |source| AppError::Io { path: path.to_path_buf(), source };
        // A wait of zero still looks once at what has arrived, without blocking (a socket
        // timeout is rounded up to a clock tick, milliseconds).
        stream.set_nonblocking(left.is_zero()).map_err(io)?;
        if !left.is_zero() {
            stream.set_read_timeout(Some(left)).map_err(io)?;
        }
        match (&mut &*stream).read(&mut buf) {
            Ok(0) => {
                let source = std::io::Error::new(ErrorKind::UnexpectedEof, "the node closed the connection");
                return Err(AppError::Io { path: path.to_path_buf(), source });
            }
            Ok(n) => reader.push(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(source) => return Err(AppError::Io { path: path.to_path_buf(), source }),
        }
    }
}

fn write_message(stream: &UnixStream, path: &Path, message: &AppToNode) -> Result<(), AppError> {
    let mut out = Vec::new();
    put_frame(&serde_json::to_vec(message).expect("messages serialise"), &mut out);
    (&mut &*stream).write_all(&out).map_err(|source| AppError::Io { path: path.to_path_buf(), source })
}

impl LaneApp {
    /// Connects to the node whose directory is `dir`, as application `app`.
    pub fn connect(dir: &Path, app: &str, timeout: Duration) -> Result<Self, AppError> {
        if !valid_app_name(app) {
            return Err(AppError::BadName(app.to_string()));
        }
        let path = dir.join(SOCKET_NAME);
        let stream =
            UnixStream::connect(&path).map_err(|source| AppError::Io { path: path.clone(), source })?;
        let mut reader = FrameReader::new();
        write_message(&stream, &path, &AppToNode::Hello { app: app.to_string() })?;
        let deadline = Instant::now() + timeout;
        let (host, inbox, doorbell) = match read_message(&stream, &mut reader, &path, deadline)? {
            Some(NodeToApp::Welcome { host, inbox, doorbell }) => (host, inbox, doorbell),
            Some(NodeToApp::Error { reason }) => return Err(AppError::Node(reason)),
            Some(other) => return Err(AppError::Protocol(format!("{other:?} instead of a welcome"))),
            None => return Err(AppError::Timeout(timeout)),
        };
        let inbox = bridge::attach(&inbox)?.into_consumer();
        let doorbell = match doorbell {
            Some(p) => Some(Bell::listener(&p).map_err(|source| AppError::Io { path: p, source })?),
            None => None,
        };
        Ok(Self {
            path,
            stream,
            reader,
            host,
            inbox,
            doorbell,
            next_ref: 1,
            pending: Vec::new(),
            scratch: vec![0; 1 << 16],
        })
    }

    /// The node's host.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The doorbell the node rings after each delivery to the inbox (readable while rings are
    /// unread), if it gave one: poll it beside your sockets, and [`LaneApp::clear_doorbell`]
    /// before reading the inbox.
    pub fn doorbell(&self) -> Option<BorrowedFd<'_>> {
        self.doorbell.as_ref().map(AsFd::as_fd)
    }

    /// Reads the rings waiting on the doorbell: deliveries after this ring it again.
    pub fn clear_doorbell(&self) {
        if let Some(b) = &self.doorbell {
            b.clear();
        }
    }

    fn send(&mut self, message: &AppToNode) -> Result<(), AppError> {
        write_message(&self.stream, &self.path, message)
    }

    /// Waits for the answer to `app_ref`, keeping other messages for [`LaneApp::events`].
    fn answer(&mut self, app_ref: u64, timeout: Duration) -> Result<NodeToApp, AppError> {
        let deadline = Instant::now() + timeout;
        loop {
            match read_message(&self.stream, &mut self.reader, &self.path, deadline)? {
                None => return Err(AppError::Timeout(timeout)),
                Some(m @ (NodeToApp::Granted { app_ref: r, .. } | NodeToApp::Refused { app_ref: r, .. }))
                    if r == app_ref =>
                {
                    return Ok(m);
                }
                Some(NodeToApp::Error { reason }) => return Err(AppError::Node(reason)),
                Some(other) => self.pending.push(other),
            }
        }
    }

    fn granted(&mut self, answer: NodeToApp) -> Result<Tunnel, AppError> {
        match answer {
            NodeToApp::Granted { tunnel_id, grant, send_from_ns, outbox, .. } => {
                let outbox = bridge::attach(&outbox)?.into_producer();
                Ok(Tunnel { id: tunnel_id, grant, send_from_ns, outbox })
            }
            NodeToApp::Refused { reason, .. } => Err(AppError::Refused(reason)),
            other => Err(AppError::Protocol(format!("{other:?} as an answer"))),
        }
    }

    /// Asks for a tunnel from this host (the source's `requestBandwidth`).
    pub fn request(&mut self, tunnel: TunnelSpec, timeout: Duration) -> Result<Tunnel, AppError> {
        let app_ref = self.next_ref;
        self.next_ref += 1;
        self.send(&AppToNode::Request { app_ref, tunnel })?;
        let answer = self.answer(app_ref, timeout)?;
        self.granted(answer)
    }

    /// Asks for new parameters for `old` (`changeBandwidth`): a new tunnel, sending from its
    /// `send_from_ns`; `old` keeps its grant until then and ends after it.
    pub fn change(
        &mut self,
        old: &Tunnel,
        tunnel: TunnelSpec,
        timeout: Duration,
    ) -> Result<Tunnel, AppError> {
        let app_ref = self.next_ref;
        self.next_ref += 1;
        self.send(&AppToNode::Change { app_ref, tunnel_id: old.id, tunnel })?;
        let answer = self.answer(app_ref, timeout)?;
        self.granted(answer)
    }

    /// Asks for new parameters for `old` as [`LaneApp::change`] does, without waiting: the
    /// answer comes among [`LaneApp::events`] as `Granted` or `Refused` with the returned
    /// reference; [`LaneApp::answered`] turns it into the tunnel.
    pub fn change_later(&mut self, old: &Tunnel, tunnel: TunnelSpec) -> Result<u64, AppError> {
        let app_ref = self.next_ref;
        self.next_ref += 1;
        self.send(&AppToNode::Change { app_ref, tunnel_id: old.id, tunnel })?;
        Ok(app_ref)
    }

    /// The tunnel a `Granted` answer gives, or why the node refused.
    pub fn answered(&mut self, answer: NodeToApp) -> Result<Tunnel, AppError> {
        self.granted(answer)
    }

    /// Releases a tunnel (`releaseBandwidth`); its `Ended` event follows.
    pub fn release(&mut self, tunnel: Tunnel) -> Result<(), AppError> {
        self.send(&AppToNode::Release { tunnel_id: tunnel.id })
    }

    /// Receives the messages of tunnels named `name` that reach this host.
    pub fn listen(&mut self, name: &str) -> Result<(), AppError> {
        self.send(&AppToNode::Listen { name: name.to_string() })
    }

    /// The events the node sent (grant changes, ends), waiting up to `timeout` for the first.
    pub fn events(&mut self, timeout: Duration) -> Result<Vec<NodeToApp>, AppError> {
        if self.pending.is_empty() {
            let deadline = Instant::now() + timeout;
            if let Some(m) = read_message(&self.stream, &mut self.reader, &self.path, deadline)? {
                self.pending.push(m);
            }
        }
        Ok(std::mem::take(&mut self.pending))
    }

    /// The next message delivered to this application, its bytes copied into `buf`; `None`
    /// when none is waiting. No system call.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Option<Delivery>, AppError> {
        let got = self
            .inbox
            .try_recv(&mut self.scratch)
            .map_err(|e| AppError::Protocol(format!("an inbox error: {e}")))?;
        let Some(got) = got else { return Ok(None) };
        let Some(header) = self.scratch[..got.len].first_chunk::<INBOX_HEADER_BYTES>() else {
            return Err(AppError::Protocol(format!("an inbox message of {} bytes", got.len)));
        };
        let tunnel_id = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let sent_ns = u64::from_le_bytes(header[8..].try_into().expect("8 bytes"));
        let body = &self.scratch[INBOX_HEADER_BYTES..got.len];
        let len = body.len().min(buf.len());
        buf[..len].copy_from_slice(&body[..len]);
        Ok(Some(Delivery { tunnel_id, sent_ns, received_ns: got.stamp_ns, len }))
    }

    /// Messages the inbox refused because this application did not read fast enough.
    pub fn inbox_refused(&self) -> u64 {
        self.inbox.stats().dropped_full
    }
}

//! The controller service's event loop: one thread, non-blocking sockets (`mio`), the node
//! connections, the metrics endpoint, and the controller's deadlines.
//!
//! One thread because the controller is one state machine: inputs are handled one at a time in
//! arrival order, with no lock and no hand-off, and replay sees them in the same order. The
//! loop wakes for socket events, for the controller's next deadline, and at least every
//! [`LOOP_CHECK`] to see its stop flag.
//!
//! A connection is refused, counted and closed when it breaks the framing (a length over the
//! limit, a stream cut inside a frame), fails the handshake (wrong secret, unknown host, wrong
//! version) or a tag, says nothing for [`HELLO_TIMEOUT`], or reads its notices too slowly
//! ([`MAX_OUTBOX`] unsent). A well-framed, authenticated message that does not parse, or asks
//! what its host may not, is refused with a reason and the connection stays. No stranger can
//! slow the others: nothing here blocks, and every buffer has a bound.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use super::auth::{self, NONCE_BYTES, Role, Secret, Session};
use super::core::{Core, Outgoing, ReplayError};
use super::journal::{Header, Journal, JournalError};
use super::metrics;
use super::wire::{FrameReader, Hello, ToController, ToNode, VERSION, put_frame, put_sealed};
use crate::controller::Controller;
use crate::te::{Allocation, Picos, Topology};
use kairos_sys::clock::realtime_ns;
use kairos_sys::stoppable_thread::StoppableThread;

/// The longest the loop sleeps before looking at its stop flag.
pub const LOOP_CHECK: Duration = Duration::from_millis(50);
/// How long a new connection has to complete the handshake.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Unsent bytes a connection may hold before it is dropped as too slow.
pub const MAX_OUTBOX: usize = 4 << 20;
/// Connections (nodes, strangers and metrics readers) open at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// The largest metrics request read.
const MAX_HTTP_REQUEST: usize = 8 << 10;

const LISTENER: Token = Token(0);
const METRICS: Token = Token(1);

/// The controller's in-memory event log entries the service keeps (the latest; at most twice).
const LOG_ENTRIES_KEPT: usize = 4_096;

/// What the service is started with.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The network the controller allocates.
    pub topology: Topology,
    /// The controller's grace period.
    pub grace: Picos,
    /// Where nodes connect.
    pub listen: SocketAddr,
    /// Where the Prometheus text endpoint listens, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// The directory of the journal.
    pub state: PathBuf,
    /// The secret nodes must know.
    pub secret: Secret,
}

/// Why the service could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A socket could not be opened or polled.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// What failed.
        source: std::io::Error,
    },
    /// The journal could not be opened or written.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The journal does not replay.
    #[error(transparent)]
    Replay(#[from] ReplayError),
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let what = what.into();
    move |source| ServiceError::Io { what, source }
}

enum State {
    Handshake { nonce: [u8; NONCE_BYTES], since: Instant },
    Open { host: String, session: Session },
    Metrics,
}

struct Conn {
    stream: TcpStream,
    reader: FrameReader,
    /// A metrics reader's request, as far as it came.
    http: Vec<u8>,
    out: Vec<u8>,
    state: State,
    /// Close once `out` is sent (or cannot be).
    closing: bool,
}

impl Conn {
    fn send(&mut self, message: &ToNode) {
        match &mut self.state {
            State::Open { session, .. } => put_sealed(session, message, &mut self.out),
            // Before the session: the challenge, and a refusal of a node it did not trust.
            _ => put_frame(&serde_json::to_vec(message).expect("messages serialise"), &mut self.out),
        }
    }

    /// Writes what it can; `false` when the peer is gone.
    fn flush(&mut self) -> bool {
        while !self.out.is_empty() {
            match self.stream.write(&self.out) {
                Ok(0) => return false,
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }
}

/// The controller service; see the module docs.
pub struct ControllerService {
    poll: Poll,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    conns: HashMap<Token, Conn>,
    next_token: usize,
    core: Core,
    secret: Secret,
    replayed: usize,
    torn_bytes: u64,
}

impl std::fmt::Debug for ControllerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerService").field("connections", &self.conns.len()).finish_non_exhaustive()
    }
}

impl ControllerService {
    /// Opens the journal, replays it, and binds the sockets; nothing is served until
    /// [`ControllerService::run`].
    pub fn start(config: ServiceConfig) -> Result<Self, ServiceError> {
        let header = Header::new(&config.topology, config.grace, realtime_ns());
        let opened = Journal::open(&config.state, &header)?;
        // Usage reports arrive every interval from every node for as long as the service runs:
        // the in-memory log keeps only the latest; the journal is the record.
        let controller =
            Controller::new(Allocation::new(config.topology), config.grace).with_log_limit(LOG_ENTRIES_KEPT);
        let replayed = opened.records.len();
        let core = Core::replay(controller, opened.journal, opened.header.epoch_ns, &opened.records)?;
        let poll = Poll::new().map_err(io_error("cannot create the event loop"))?;
        let mut listener = TcpListener::bind(config.listen)
            .map_err(io_error(format!("cannot listen on {} (--listen)", config.listen)))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(io_error("cannot poll the listener"))?;
        let metrics = match config.metrics {
            None => None,
            Some(addr) => {
                let mut l = TcpListener::bind(addr)
                    .map_err(io_error(format!("cannot listen on {addr} (--metrics)")))?;
                poll.registry()
                    .register(&mut l, METRICS, Interest::READABLE)
                    .map_err(io_error("cannot poll the metrics listener"))?;
                Some(l)
            }
        };
        Ok(Self {
            poll,
            listener,
            metrics,
            conns: HashMap::new(),
            next_token: 2,
            core,
            secret: config.secret,
            replayed,
            torn_bytes: opened.torn_bytes,
        })
    }

    /// Where nodes connect (the bound port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// Where the metrics endpoint listens.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|l| l.local_addr().expect("a bound listener has an address"))
    }

    /// Inputs replayed from the journal at start.
    pub fn replayed(&self) -> usize {
        self.replayed
    }

    /// Bytes of a torn last journal line cut off at start.
    pub fn torn_bytes(&self) -> u64 {
        self.torn_bytes
    }

    /// The controller's clock now: picoseconds since its journal's epoch.
    fn now_ps(&self) -> Picos {
        self.core.controller_time(realtime_ns())
    }

    /// The controller and its counters.
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// Serves until `stop` is raised; returns early only when the journal cannot be written
    /// (the controller must not acknowledge what it cannot keep) or polling fails.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), ServiceError> {
        let mut events = Events::with_capacity(256);
        // Work that became due while the controller was down.
        let due = self.core.tick(self.now_ps());
        self.deliver(due);
        while !stop.load(Ordering::Relaxed) {
            let now = self.now_ps();
            let mut timeout = LOOP_CHECK;
            if let Some(deadline) = self.core.controller().next_deadline() {
                timeout = timeout.min(Duration::from_nanos(deadline.saturating_sub(now) / 1_000));
            }
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error("cannot poll")(e)),
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(false),
                    METRICS => self.accept(true),
                    token => self.serve(token)?,
                }
            }
            let due = self.core.tick(self.now_ps());
            self.deliver(due);
            self.expire_handshakes();
        }
        Ok(())
    }

    fn accept(&mut self, metrics: bool) {
        loop {
            let listener = if metrics { self.metrics.as_ref() } else { Some(&self.listener) };
            let Some(listener) = listener else { return };
            let (mut stream, _) = match listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // Out of descriptors or the like: the connection is lost, the service goes on.
                Err(_) => return,
            };
            if self.conns.len() >= MAX_CONNECTIONS {
                self.core.counters.refuse_frame("too_many_connections");
                continue;
            }
            // Notices are small frames that must not wait for the last one's acknowledgement.
            let _ = stream.set_nodelay(true);
            let token = Token(self.next_token);
            self.next_token += 1;
            let interest = Interest::READABLE | Interest::WRITABLE;
            if self.poll.registry().register(&mut stream, token, interest).is_err() {
                continue;
            }
            let state = if metrics {
                State::Metrics
            } else {
                match auth::nonce() {
                    Ok(nonce) => State::Handshake { nonce, since: Instant::now() },
                    Err(_) => continue,
                }
            };
            let mut conn = Conn {
                stream,
                reader: FrameReader::new(),
                http: Vec::new(),
                out: Vec::new(),
                state,
                closing: false,
            };
            if let State::Handshake { nonce, .. } = &conn.state {
                let challenge = ToNode::Challenge { version: VERSION, nonce: auth::hex(nonce) };
                conn.send(&challenge);
            }
            self.conns.insert(token, conn);
            self.flush(token);
        }
    }

    /// Reads what a connection sent and handles every whole frame in it.
    fn serve(&mut self, token: Token) -> Result<(), ServiceError> {
        let mut buf = [0u8; 16 << 10];
        let mut ended = false;
        loop {
            let Some(conn) = self.conns.get_mut(&token) else { return Ok(()) };
            let n = match conn.stream.read(&mut buf) {
                Ok(0) => {
                    ended = true;
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    ended = true;
                    break;
                }
            };
            if matches!(conn.state, State::Metrics) {
                let room = MAX_HTTP_REQUEST.saturating_sub(conn.http.len());
                conn.http.extend_from_slice(&buf[..n.min(room)]);
                continue;
            }
            conn.reader.push(&buf[..n]);
            self.frames(token)?;
        }
        let Some(conn) = self.conns.get_mut(&token) else { return Ok(()) };
        if matches!(conn.state, State::Metrics) {
            self.answer_metrics(token, ended);
        } else if ended {
            if conn.reader.check_end().is_err() {
                self.core.counters.refuse_frame("truncated");
            }
            self.close(token);
            return Ok(());
        }
        self.flush(token);
        Ok(())
    }

    fn frames(&mut self, token: Token) -> Result<(), ServiceError> {
        loop {
            let Some(conn) = self.conns.get_mut(&token) else { return Ok(()) };
            if conn.closing {
                return Ok(());
            }
            let body = match conn.reader.next_frame() {
                Ok(Some(body)) => body.to_vec(),
                Ok(None) => return Ok(()),
                Err(e) => {
                    self.reject(token, "too_large", e.to_string(), true);
                    return Ok(());
                }
            };
            self.frame(token, &body)?;
        }
    }

    fn frame(&mut self, token: Token, body: &[u8]) -> Result<(), ServiceError> {
        let conn = self.conns.get_mut(&token).expect("served connections exist");
        match &mut conn.state {
            State::Metrics => Ok(()),
            State::Handshake { nonce, .. } => {
                let nonce = *nonce;
                self.hello(token, nonce, body);
                Ok(())
            }
            State::Open { host, session } => {
                let payload = match session.open(body) {
                    Ok(p) => p,
                    Err(e) => {
                        self.reject(token, "bad_tag", e.to_string(), true);
                        return Ok(());
                    }
                };
                let input: ToController = match serde_json::from_slice(payload) {
                    Ok(i) => i,
                    Err(e) => {
                        self.reject(token, "malformed", format!("not a message: {e}"), false);
                        return Ok(());
                    }
                };
                let host = host.clone();
                let now = self.now_ps();
                let out = self.core.handle(&host, input, now)?;
                self.deliver(out);
                Ok(())
            }
        }
    }

    fn hello(&mut self, token: Token, nonce: [u8; NONCE_BYTES], body: &[u8]) {
        let hello: Hello = match serde_json::from_slice(body) {
            Ok(h) => h,
            Err(e) => return self.reject(token, "malformed", format!("not a hello: {e}"), true),
        };
        if hello.version != VERSION {
            let why = format!("protocol version {} is not spoken here ({VERSION} is)", hello.version);
            return self.reject(token, "bad_version", why, true);
        }
        let node_nonce = match auth::parse_nonce(&hello.nonce) {
            Ok(n) => n,
            Err(e) => return self.reject(token, "malformed", e.to_string(), true),
        };
        if let Err(e) = auth::check_proof(&self.secret, &nonce, &node_nonce, &hello.host, &hello.proof) {
            return self.reject(token, "bad_proof", e.to_string(), true);
        }
        if self.core.host(&hello.host).is_none() {
            let why = format!("'{}' is not a host of the topology", hello.host);
            return self.reject(token, "unknown_host", why, true);
        }
        // A node that reconnects before its old connection timed out replaces it.
        let old: Vec<Token> = self
            .conns
            .iter()
            .filter(|(t, c)| {
                **t != token && matches!(&c.state, State::Open { host, .. } if *host == hello.host)
            })
            .map(|(t, _)| *t)
            .collect();
        for t in old {
            self.close(t);
        }
        let conn = self.conns.get_mut(&token).expect("served connections exist");
        let session = Session::new(&self.secret, &nonce, &node_nonce, Role::Controller);
        conn.state = State::Open { host: hello.host.clone(), session };
        let welcome = ToNode::Welcome {
            host: hello.host.clone(),
            now_ns: realtime_ns(),
            tunnels: self.core.tunnels_of(&hello.host),
        };
        conn.send(&welcome);
    }

    /// Tells a connection why its frame was refused, counts it, and closes it when the stream
    /// can no longer be trusted.
    fn reject(&mut self, token: Token, counter: &'static str, reason: String, closing: bool) {
        self.core.counters.refuse_frame(counter);
        let Some(conn) = self.conns.get_mut(&token) else { return };
        conn.send(&ToNode::Rejected { reason, closing });
        conn.closing |= closing;
    }

    fn deliver(&mut self, out: Vec<Outgoing>) {
        let mut touched = Vec::new();
        for o in out {
            // A node not connected now learns the state from its welcome when it reconnects.
            let target = self
                .conns
                .iter_mut()
                .find(|(_, c)| matches!(&c.state, State::Open { host, .. } if *host == o.host));
            if let Some((token, conn)) = target {
                conn.send(&o.message);
                touched.push(*token);
            }
        }
        touched.sort();
        touched.dedup();
        for t in touched {
            self.flush(t);
        }
    }

    /// Answers a metrics reader once its request is whole (or it stopped sending).
    fn answer_metrics(&mut self, token: Token, ended: bool) {
        let Some(conn) = self.conns.get_mut(&token) else { return };
        if conn.closing {
            return;
        }
        let whole = conn.http.windows(4).any(|w| w == b"\r\n\r\n");
        if !whole && !ended && conn.http.len() < MAX_HTTP_REQUEST {
            return;
        }
        let path_ok = conn.http.starts_with(b"GET /metrics ") || conn.http.starts_with(b"GET / ");
        let (status, body) = if path_ok {
            ("200 OK", metrics::render(&self.core, self.conns_open()))
        } else {
            ("404 Not Found", "only GET /metrics is served here\n".to_string())
        };
        let conn = self.conns.get_mut(&token).expect("looked up above");
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        conn.out.extend_from_slice(head.as_bytes());
        conn.out.extend_from_slice(body.as_bytes());
        conn.closing = true;
    }

    fn conns_open(&self) -> usize {
        self.conns.values().filter(|c| matches!(c.state, State::Open { .. })).count()
    }

    fn flush(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else { return };
        let alive = conn.flush();
        let too_slow = conn.out.len() > MAX_OUTBOX;
        if too_slow {
            self.core.counters.refuse_frame("too_slow");
        }
        if !alive || too_slow || (conn.closing && conn.out.is_empty()) {
            self.close(token);
        }
    }

    fn close(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }

    fn expire_handshakes(&mut self) {
        let late: Vec<Token> = self
            .conns
            .iter()
            .filter(
                |(_, c)| matches!(c.state, State::Handshake { since, .. } if since.elapsed() > HELLO_TIMEOUT),
            )
            .map(|(t, _)| *t)
            .collect();
        for t in late {
            self.core.counters.refuse_frame("hello_timeout");
            self.close(t);
        }
    }
}

/// A service serving on a thread of its own, stopped and joined by its owner (on drop too).
#[derive(Debug)]
pub struct RunningService {
    thread: StoppableThread<(ControllerService, Result<(), ServiceError>)>,
    addr: SocketAddr,
    metrics: Option<SocketAddr>,
}

impl ControllerService {
    /// Serves on a thread named `lane-controller` until the returned owner stops it.
    pub fn spawn(mut self) -> Result<RunningService, ServiceError> {
        let (addr, metrics) = (self.local_addr(), self.metrics_addr());
        let thread = StoppableThread::spawn("lane-controller", move |stop| {
            let result = self.run(stop);
            (self, result)
        })
        .map_err(io_error("cannot start the controller's thread"))?;
        Ok(RunningService { thread, addr, metrics })
    }
}

impl RunningService {
    /// Where nodes connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the metrics endpoint listens.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// Whether the loop has ended by itself (an error it will return from [`RunningService::stop`]).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops serving and hands the service back (its sockets still bound), or the error that
    /// ended it.
    pub fn stop(self) -> Result<ControllerService, ServiceError> {
        let (service, result) = self.thread.stop().map_err(|e| ServiceError::Io {
            what: "the controller's thread".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        result.map(|()| service)
    }
}

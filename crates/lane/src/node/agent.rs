//! The node agent (`kairos lane node`): the controller's client for its host, the
//! applications' broker, and the owner of the lane loop.
//!
//! Two threads, each owned: the lane loop ([`super::lane`]), pinned to the lane core, and this
//! control thread, one `mio` event loop over the controller's connection, the applications'
//! Unix socket and a waker the lane loop rings when it has a usage report. The control thread
//! forwards each application's request to the controller under a number of its own, creates
//! the bridges of what is granted (`DIR/` names are the socket; bridge files live in
//! `/dev/shm`, named after the host, the process and the application or tunnel), hands the
//! bridges' lane ends to the lane loop, and tells each application what concerns it. When the
//! controller's connection is lost it reconnects with a doubling back-off and reconciles with
//! the controller's list; applications keep their tunnels meanwhile (the lane goes on sending
//! on its last grants). A request whose answer the lost connection took is refused to its
//! application at once, and a tunnel of this host that no application here owns (granted
//! while its answer was lost, or to an earlier node process) is released on reconnection. An
//! application that disconnects has its tunnels released.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use kairos_io::bridge;
use kairos_ring::bridge::BridgeLayout;
use kairos_sys::shm::shm_path;
use kairos_sys::stoppable_thread::StoppableThread;
use mio::net::{TcpStream, UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token, Waker};

use super::app::{AppToNode, NodeToApp, SOCKET_NAME, valid_app_name};
use super::chunk::Schema;
use super::lane::{LaneCommand, LaneCounts, LaneLoop, LaneSettings, LaneSocket, ReceiveMode};
use super::promise::{self, HostJitter};
use crate::service::auth::{Secret, Session};
use crate::service::client::{MAX_BACKOFF, MIN_BACKOFF, NodeConnection, Welcome};
use crate::service::wire::{FrameReader, ToController, ToNode, TunnelSpec, put_frame, put_sealed};
use crate::te::TunnelId;

const CONTROLLER: Token = Token(0);
const LISTENER: Token = Token(1);
const WAKER: Token = Token(2);
const FIRST_APP: usize = 16;

/// Slots of a tunnel's outbox: what an application may queue ahead of its releases.
const OUTBOX_SLOTS: usize = 64;
/// Slots of an application's inbox.
const INBOX_SLOTS: usize = 1024;
/// The largest message a bridge slot carries (a whole packet's message bytes, and room).
const MAX_MESSAGE: usize = 1_400;

/// What the lane loop sends and receives lane packets on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LaneTransport {
    /// The kernel's UDP socket bound at the lane address.
    #[default]
    Udp,
    /// A memory-mapped `AF_PACKET` ring on `interface` (root; the lane address must be the
    /// interface's, and every peer on its link).
    Packet {
        /// The interface the lane address is on.
        interface: String,
    },
}

/// What the node is started with.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The controller.
    pub controller: SocketAddr,
    /// This node's host in the topology.
    pub host: String,
    /// The lane's shared secret.
    pub secret: Secret,
    /// The directory of the applications' socket (created if missing).
    pub dir: PathBuf,
    /// Where the lane socket binds.
    pub lane_bind: SocketAddr,
    /// The lane sockets of the other hosts' nodes.
    pub peers: HashMap<String, SocketAddr>,
    /// The core the lane loop is pinned to, if any.
    pub core: Option<usize>,
    /// The lane loop's `SCHED_FIFO` priority, 0 for none.
    pub fifo_priority: i32,
    /// How the lane loop waits for packets.
    pub receive: ReceiveMode,
    /// The chunk schema of sent packets.
    pub schema: Schema,
    /// How often tunnels' use is reported.
    pub report_every: Duration,
    /// What the lane loop sends and receives on.
    pub transport: LaneTransport,
}

/// What the node's owner measured of the host before starting it, and where the node logs.
#[derive(Debug, Clone, Default)]
pub struct HostMeasure {
    /// The lane core's jitter, ns, and how it was measured (e.g. `kairos doctor --core 1`, a
    /// 300 ms probe); `None`: not measured (the node promises no more than the fan-out then).
    pub core_jitter: Option<(u64, String)>,
    /// Where the node writes its lines (the promise it makes of each tunnel); `None`: nowhere.
    pub log: Option<fn(&str)>,
}

/// Empty datagrams timed to each peer at start; the first [`SEND_WARMUP`] are not counted (they
/// wait for ARP). The longest of 128 is about the 99th percentile of send calls: with 16 the
/// promise missed the tail a tunnel's second receiver then met (6 of 1,000 messages of the
/// end-to-end test 20-30 us late, no stall seen).
const SEND_SAMPLES: usize = 128;
/// Datagrams sent to each peer before the timed ones.
const SEND_WARMUP: usize = 2;

/// The longest of [`SEND_SAMPLES`] send calls of an empty datagram from `socket` to each of
/// `peers`, ns: what one more receiver of a tunnel costs its last one (the lane loop sends a
/// packet to each receiver in turn). Empty datagrams are dropped by the peers' lane loops (not
/// a lane packet); a peer not running yet answers with an ICMP error the socket does not read.
fn longest_send_ns(socket: &UdpSocket, peers: &[SocketAddr]) -> u64 {
    let mut longest = 0;
    for &peer in peers {
        for i in 0..SEND_WARMUP + SEND_SAMPLES {
            let started = Instant::now();
            let _ = socket.send_to(&[], peer);
            let took = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
            if i >= SEND_WARMUP {
                longest = longest.max(took);
            }
            // Apart, as releases are: not one burst the receiver's stack batches.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    longest
}

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A socket, a directory or a thread.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// What failed.
        source: std::io::Error,
    },
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
    let what = what.into();
    move |source| NodeError::Io { what, source }
}

/// What the node did, when it stops.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NodeReport {
    /// The lane loop's counts.
    pub lane: LaneCounts,
    /// Why the lane loop did not run at `SCHED_FIFO`; `None` when it did.
    pub not_realtime: Option<String>,
    /// Times the controller's connection was (re)established.
    pub connections: u64,
}

/// A running node; stopping (or dropping) it stops both threads and removes its socket and
/// bridge files.
#[derive(Debug)]
pub struct RunningNode {
    control: Option<StoppableThread<u64>>,
    /// The lane loop: its counts, and why it did not run real-time (`None`: it did).
    lane: Option<StoppableThread<(LaneCounts, Option<String>)>>,
    socket: PathBuf,
    connected: Arc<AtomicBool>,
    bridge_prefix: String,
    /// Removes the socket and the bridge files should a signal end the process first.
    _removal: kairos_sys::cleanup::Registration,
}

/// Removes the node's socket and every bridge file whose name starts with `prefix` (the lane
/// loop's ends of them are not dropped when a signal ends the process).
fn remove_files(socket: &std::path::Path, prefix: &str) {
    let _ = std::fs::remove_file(socket);
    if let Ok(entries) = std::fs::read_dir(kairos_sys::shm::SHM_DIR) {
        for e in entries.flatten() {
            if e.file_name().to_str().is_some_and(|n| n.starts_with(prefix)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl RunningNode {
    /// Whether the node is connected to the controller now.
    pub fn is_connected(&self) -> bool {
        self.connected.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What the names of this node's bridge files in `/dev/shm` start with.
    pub fn bridge_prefix(&self) -> &str {
        &self.bridge_prefix
    }

    /// The applications' socket.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Stops the node and returns what it did.
    pub fn stop(mut self) -> NodeReport {
        let mut report = NodeReport::default();
        if let Some(c) = self.control.take() {
            report.connections = c.stop().unwrap_or(0);
        }
        if let Some(l) = self.lane.take() {
            match l.stop() {
                Ok((lane, not_realtime)) => (report.lane, report.not_realtime) = (lane, not_realtime),
                Err(e) => report.not_realtime = Some(e.to_string()),
            }
        }
        let _ = std::fs::remove_file(&self.socket);
        report
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        // The control thread first: it owns the bridges' creators' ends it has not handed over.
        if let Some(c) = self.control.take() {
            let _ = c.stop();
        }
        if let Some(l) = self.lane.take() {
            let _ = l.stop();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Starts a node: binds its sockets (errors before any thread starts), then the lane loop and
/// the control thread, which connects to the controller (and keeps reconnecting). The core's
/// jitter is not measured: [`start_measured`] with it.
pub fn start(config: NodeConfig) -> Result<RunningNode, NodeError> {
    start_measured(config, HostMeasure::default())
}

/// [`start`], with what the owner measured of the host and where the node logs.
pub fn start_measured(config: NodeConfig, measure: HostMeasure) -> Result<RunningNode, NodeError> {
    std::fs::create_dir_all(&config.dir)
        .map_err(io_error(format!("cannot create {}", config.dir.display())))?;
    let socket_path = config.dir.join(SOCKET_NAME);
    // A socket file left by a node that was killed: nothing listens on it any more.
    if std::os::unix::net::UnixStream::connect(&socket_path).is_err() {
        let _ = std::fs::remove_file(&socket_path);
    }
    let listener = UnixListener::bind(&socket_path).map_err(io_error(format!(
        "cannot listen on {} (is another node running there?)",
        socket_path.display()
    )))?;
    let lane_socket = UdpSocket::bind(config.lane_bind)
        .map_err(io_error(format!("cannot bind the lane socket {}", config.lane_bind)))?;
    // Lane packets are DSCP EF: every egress that gives the lane strict priority (the
    // testbed's HTB classes, a switch's priority queue) knows them by that byte.
    kairos_io::lane_testbed::mark_lane_socket(&lane_socket).map_err(io_error("lane socket IP_TOS"))?;
    let others: Vec<SocketAddr> =
        config.peers.iter().filter(|(h, _)| **h != config.host).map(|(_, a)| *a).collect();
    let (core_ns, how) = measure.core_jitter.clone().unwrap_or((0, "not measured".into()));
    let host = HostJitter { core_ns, how, send_ns: longest_send_ns(&lane_socket, &others) };
    lane_socket.set_nonblocking(true).map_err(io_error("lane socket"))?;
    // After the timed sends above: they made the kernel resolve every peer's hardware address,
    // which the ring reads from the neighbour table.
    let lane_socket = lane_socket_for(&config, lane_socket, &others)?;
    let poll = Poll::new().map_err(io_error("cannot create the event loop"))?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(io_error("cannot create the waker"))?);

    let (commands_tx, commands_rx) = channel();
    let (reports_tx, reports_rx) = channel();
    let settings = LaneSettings { schema: config.schema, receive: config.receive, spin_ns: 20_000 };
    let ring = Arc::clone(&waker);
    let lane_loop = LaneLoop::new(
        &config.host,
        settings,
        lane_socket,
        config.report_every,
        commands_rx,
        reports_tx,
        Box::new(move || {
            let _ = ring.wake();
        }),
    );
    let (core, priority) = (config.core, config.fifo_priority);
    let lane = StoppableThread::spawn("lane-loop", move |stop| {
        if let Some(core) = core {
            let _ = kairos_sys::thread::pin_current_thread(core);
        }
        // A sleeping loop wakes for its releases: without this, a normal thread's wake-ups
        // are rounded up by 50 us, two periods of a 25 us tunnel.
        let _ = kairos_sys::thread::set_timer_slack_ns(1);
        let not_realtime = if priority > 0 {
            kairos_sys::thread::set_fifo(priority).err().map(|e| e.to_string())
        } else {
            Some("not asked (--fifo 0)".to_string())
        };
        (lane_loop.run(stop), not_realtime)
    })
    .map_err(io_error("cannot start the lane loop"))?;
    let mut control = Control::new(config, poll, listener, commands_tx, reports_rx, host, measure.log)?;
    let connected = Arc::clone(&control.connected);
    let bridge_prefix = control.bridge_prefix();
    let (socket, prefix) = (socket_path.clone(), bridge_prefix.clone());
    let _hold = kairos_sys::cleanup::hold_off();
    let removal = kairos_sys::cleanup::register(
        format!("the lane node's socket and bridges ({bridge_prefix}*)"),
        move || remove_files(&socket, &prefix),
    );
    let control = StoppableThread::spawn("lane-control", move |stop| control.run(stop))
        .map_err(io_error("cannot start the control thread"))?;
    Ok(RunningNode {
        control: Some(control),
        lane: Some(lane),
        socket: socket_path,
        connected,
        bridge_prefix,
        _removal: removal,
    })
}

/// The lane loop's socket for `config.transport`, from the node's bound UDP socket.
fn lane_socket_for(
    config: &NodeConfig,
    udp: UdpSocket,
    peers: &[SocketAddr],
) -> Result<LaneSocket, NodeError> {
    match &config.transport {
        LaneTransport::Udp => {
            kairos_sys::net::options::enable_rx_timestamps(&udp)
                .map_err(io_error("lane socket time stamps"))?;
            Ok(LaneSocket::Udp(udp))
        }
        LaneTransport::Packet { interface } => {
            let ring_error = |e: kairos_io::af_packet::AfPacketError| NodeError::Io {
                what: format!("cannot open the lane's packet ring on {interface}"),
                source: std::io::Error::other(e.to_string()),
            };
            // The bound address: the port the kernel chose when the configuration said 0.
            let local = match udp.local_addr().map_err(io_error("lane socket address"))? {
                SocketAddr::V4(a) if !a.ip().is_unspecified() => a,
                other => {
                    return Err(NodeError::Io {
                        what: format!("the packet transport on {interface}"),
                        source: std::io::Error::other(format!(
                            "the lane address must be the interface's own IPv4 address, got {other}"
                        )),
                    });
                }
            };
            // The kernel's stack sees every lane datagram as well as the ring: the socket stays
            // bound (no ICMP port unreachable goes back) and a filter drops them before they are
            // queued. A filter rather than a minimal receive buffer: that would still lock the
            // socket, charge each datagram and count each as a receive error once full.
            kairos_sys::net::options::drop_all_received(&udp).map_err(io_error("lane socket filter"))?;
            let config = kairos_sys::net::packet_ring::RingConfig {
                rx: kairos_sys::net::packet_ring::RxLayout::Frames { count: 1024 },
                tx_frames: 256,
                // IPv4 only, handed over after the stack's receive (which the UDP socket's
                // filter above ends); not measured against a tap here.
                ethertype: kairos_sys::net::packet_ring::ETH_P_IP,
                ..Default::default()
            };
            let mut ring =
                kairos_io::af_packet::AfPacketSocket::open(interface, local, config).map_err(ring_error)?;
            ring.set_tos(kairos_io::lane_testbed::LANE_TOS);
            // Found now where the start-up's sends resolved them; a peer not found yet is looked
            // up again at each send (and its failures counted), not an error.
            for peer in peers {
                if let SocketAddr::V4(p) = peer {
                    let _ = ring.neighbour(*p.ip());
                }
            }
            Ok(LaneSocket::Packet { ring: Box::new(ring), udp })
        }
    }
}

struct App {
    stream: UnixStream,
    reader: FrameReader,
    out: Vec<u8>,
    name: Option<String>,
    closed: bool,
}

/// A request forwarded to the controller, under the node's number.
struct Pending {
    app: Token,
    app_ref: u64,
    spec: TunnelSpec,
}

struct Link {
    stream: TcpStream,
    reader: FrameReader,
    session: Session,
}

struct Control {
    config: NodeConfig,
    poll: Poll,
    listener: UnixListener,
    apps: HashMap<Token, App>,
    next_token: usize,
    link: Option<Link>,
    retry_at: Instant,
    backoff: Duration,
    connections: u64,
    next_ref: u64,
    pending: HashMap<u64, Pending>,
    /// Sending tunnel -> the application that owns it.
    owners: HashMap<TunnelId, Token>,
    /// Sending tunnel -> its name and the receivers its packets are sent to.
    fan_out: HashMap<TunnelId, (String, usize)>,
    /// What this host adds to the controller's bounds.
    host: HostJitter,
    /// Where the node's lines go.
    log: Option<fn(&str)>,
    commands: Sender<LaneCommand>,
    reports: Receiver<ToController>,
    /// This node's number in the process, in its bridge files' names (tests run several).
    instance: u64,
    /// Whether the controller's connection is up, for the node's owner.
    connected: Arc<AtomicBool>,
}

/// Nodes started by this process, numbering their bridge files.
static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Control {
    fn new(
        config: NodeConfig,
        poll: Poll,
        mut listener: UnixListener,
        commands: Sender<LaneCommand>,
        reports: Receiver<ToController>,
        host: HostJitter,
        log: Option<fn(&str)>,
    ) -> Result<Self, NodeError> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(io_error("cannot poll the applications' socket"))?;
        Ok(Self {
            config,
            poll,
            listener,
            apps: HashMap::new(),
            next_token: FIRST_APP,
            link: None,
            retry_at: Instant::now(),
            backoff: MIN_BACKOFF,
            connections: 0,
            next_ref: 1,
            pending: HashMap::new(),
            owners: HashMap::new(),
            fan_out: HashMap::new(),
            host,
            log,
            commands,
            reports,
            instance: INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            connected: Arc::new(AtomicBool::new(false)),
        })
    }

    fn bridge_prefix(&self) -> String {
        format!("kairos-lane-{}-{}-{}-", self.config.host, std::process::id(), self.instance)
    }

    fn run(&mut self, stop: &AtomicBool) -> u64 {
        let mut events = Events::with_capacity(64);
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if self.link.is_none() && Instant::now() >= self.retry_at {
                self.connect();
            }
            let _ = self.poll.poll(&mut events, Some(Duration::from_millis(20)));
            for event in events.iter() {
                match event.token() {
                    CONTROLLER => self.read_controller(),
                    LISTENER => self.accept(),
                    WAKER => {}
                    token => self.read_app(token),
                }
            }
            while let Ok(report) = self.reports.try_recv() {
                self.send_controller(&report);
            }
            self.flush_apps();
        }
        self.connections
    }

    fn connect(&mut self) {
        let c = &self.config;
        match NodeConnection::connect(c.controller, &c.host, &c.secret, Duration::from_secs(1)) {
            Ok((conn, welcome)) => {
                let (stream, reader, session) = conn.into_parts();
                if stream.set_nonblocking(true).is_err() {
                    return self.lost();
                }
                let mut stream = TcpStream::from_std(stream);
                if self.poll.registry().register(&mut stream, CONTROLLER, Interest::READABLE).is_err() {
                    return self.lost();
                }
                self.link = Some(Link { stream, reader, session });
                self.connected.store(true, std::sync::atomic::Ordering::Relaxed);
                self.backoff = MIN_BACKOFF;
                self.connections += 1;
                self.welcome(welcome);
                // Frames that came with the welcome.
                self.read_controller();
            }
            Err(_) => self.lost(),
        }
    }

    fn lost(&mut self) {
        self.connected.store(false, std::sync::atomic::Ordering::Relaxed);
        if let Some(mut link) = self.link.take() {
            let _ = self.poll.registry().deregister(&mut link.stream);
        }
        // Requests in flight will get no answer on this connection: their applications hear
        // so now (a tunnel granted meanwhile is released when the node reconnects).
        let pending: Vec<Pending> = self.pending.drain().map(|(_, p)| p).collect();
        for p in pending {
            let reason = "the controller's connection was lost before it answered; ask again".to_string();
            self.tell_app(p.app, &NodeToApp::Refused { app_ref: p.app_ref, reason });
        }
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    fn welcome(&mut self, welcome: Welcome) {
        // Tunnels the controller no longer holds end for their applications.
        let held: Vec<TunnelId> = welcome.tunnels.iter().map(|t| t.tunnel_id).collect();
        let gone: Vec<TunnelId> = self.owners.keys().copied().filter(|t| !held.contains(t)).collect();
        for t in gone {
            if let Some(app) = self.owners.remove(&t) {
                self.tell_app(app, &NodeToApp::Ended { tunnel_id: t, terminated: true });
            }
        }
        // Tunnels of this host that no application here owns were granted while their answer
        // was lost (or to a node process before this one): nobody can send on them.
        let orphans: Vec<TunnelId> = welcome
            .tunnels
            .iter()
            .filter(|t| t.sender == self.config.host && !self.owners.contains_key(&t.tunnel_id))
            .map(|t| t.tunnel_id)
            .collect();
        let _ = self.commands.send(LaneCommand::Welcome(welcome));
        for tunnel_id in orphans {
            self.send_controller(&ToController::Release { tunnel_id });
        }
    }

    fn send_controller(&mut self, message: &ToController) {
        let Some(link) = self.link.as_mut() else { return };
        let mut out = Vec::new();
        put_sealed(&mut link.session, message, &mut out);
        if write_all_nonblocking(&mut link.stream, &out).is_err() {
            self.lost();
        }
    }

    fn read_controller(&mut self) {
        let mut messages = Vec::new();
        let mut failed = false;
        if let Some(link) = self.link.as_mut() {
            let mut buf = [0u8; 16 << 10];
            loop {
                match link.stream.read(&mut buf) {
                    Ok(0) => {
                        failed = true;
                        break;
                    }
                    Ok(n) => link.reader.push(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            loop {
                match link.reader.next_frame() {
                    Ok(Some(body)) => {
                        match link.session.open(body).ok().and_then(|p| serde_json::from_slice(p).ok()) {
                            Some(m) => messages.push(m),
                            None => {
                                failed = true;
                                break;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
        }
        for m in messages {
            self.notice(m);
        }
        if failed {
            self.lost();
        }
    }

    /// A notice of the controller: to the lane loop, and to the application it concerns.
    fn notice(&mut self, m: ToNode) {
        match &m {
            ToNode::Granted { app_ref, tunnel_id, grant, send_from_ns, .. } => {
                let Some(p) = self.pending.remove(app_ref) else { return };
                let path = match shm_path(&format!("{}t{tunnel_id}-out", self.bridge_prefix())) {
                    Ok(p) => p,
                    Err(e) => return self.tell_app(p.app, &NodeToApp::Error { reason: e.to_string() }),
                };
                let layout = BridgeLayout::for_messages(OUTBOX_SLOTS, MAX_MESSAGE).expect("a valid layout");
                let outbox = match bridge::create(&path, layout) {
                    Ok(b) => b.into_consumer(),
                    Err(e) => return self.tell_app(p.app, &NodeToApp::Error { reason: e.to_string() }),
                };
                let destinations: Vec<SocketAddr> =
                    p.spec.receivers.iter().filter_map(|r| self.config.peers.get(r).copied()).collect();
                let receivers = destinations.len();
                self.fan_out.insert(*tunnel_id, (p.spec.name.clone(), receivers));
                let grant = self.promise(*tunnel_id, grant);
                let _ =
                    self.commands.send(LaneCommand::Outbox { tunnel_id: *tunnel_id, outbox, destinations });
                let _ = self.commands.send(LaneCommand::Notice(m.clone()));
                self.owners.insert(*tunnel_id, p.app);
                let answer = NodeToApp::Granted {
                    app_ref: p.app_ref,
                    tunnel_id: *tunnel_id,
                    grant,
                    send_from_ns: *send_from_ns,
                    outbox: path,
                };
                self.tell_app(p.app, &answer);
            }
            ToNode::Refused { app_ref, reason, .. } => {
                if let Some(p) = self.pending.remove(app_ref) {
                    self.tell_app(p.app, &NodeToApp::Refused { app_ref: p.app_ref, reason: reason.clone() });
                }
            }
            ToNode::BandwidthChanged { tunnel_id, grant, reason, effective_at_ns } => {
                let _ = self.commands.send(LaneCommand::Notice(m.clone()));
                if let Some(&app) = self.owners.get(tunnel_id) {
                    let grant = self.promise(*tunnel_id, grant);
                    let changed = NodeToApp::Changed {
                        tunnel_id: *tunnel_id,
                        grant,
                        reason: *reason,
                        effective_at_ns: *effective_at_ns,
                    };
                    self.tell_app(app, &changed);
                }
            }
            ToNode::Released { tunnel_id } | ToNode::Terminated { tunnel_id } => {
                let terminated = matches!(m, ToNode::Terminated { .. });
                self.fan_out.remove(tunnel_id);
                let _ = self.commands.send(LaneCommand::Notice(m.clone()));
                if let Some(app) = self.owners.remove(tunnel_id) {
                    self.tell_app(app, &NodeToApp::Ended { tunnel_id: *tunnel_id, terminated });
                }
            }
            ToNode::Opened { .. } => {
                let _ = self.commands.send(LaneCommand::Notice(m));
            }
            ToNode::Welcome { .. } | ToNode::Challenge { .. } | ToNode::Rejected { .. } => {}
        }
    }

    /// The grant an application hears for a tunnel of this host: the controller's widened by
    /// what the host adds, said in the log.
    fn promise(
        &self,
        tunnel_id: TunnelId,
        granted: &crate::service::wire::Grant,
    ) -> crate::service::wire::Grant {
        let Some((name, receivers)) = self.fan_out.get(&tunnel_id) else { return *granted };
        let promised = promise::promise(granted, *receivers, &self.host);
        if let Some(log) = self.log.filter(|_| promised != *granted) {
            log(&promise::describe(name, granted, *receivers, &self.host));
        }
        promised
    }

    fn accept(&mut self) {
        loop {
            let (mut stream, _) = match self.listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let token = Token(self.next_token);
            self.next_token += 1;
            if self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                .is_err()
            {
                continue;
            }
            self.apps.insert(
                token,
                App { stream, reader: FrameReader::new(), out: Vec::new(), name: None, closed: false },
            );
        }
    }

    fn read_app(&mut self, token: Token) {
        let mut messages = Vec::new();
        let Some(app) = self.apps.get_mut(&token) else { return };
        let mut buf = [0u8; 16 << 10];
        loop {
            match app.stream.read(&mut buf) {
                Ok(0) => {
                    app.closed = true;
                    break;
                }
                Ok(n) => app.reader.push(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    app.closed = true;
                    break;
                }
            }
        }
        loop {
            match app.reader.next_frame() {
                Ok(Some(body)) => match serde_json::from_slice::<AppToNode>(body) {
                    Ok(m) => messages.push(m),
                    Err(e) => {
                        let reason = format!("not a message: {e}");
                        messages.clear();
                        self.tell_app(token, &NodeToApp::Error { reason });
                        return self.app_gone(token);
                    }
                },
                Ok(None) => break,
                Err(_) => {
                    app.closed = true;
                    break;
                }
            }
        }
        let closed = app.closed;
        for m in messages {
            self.app_message(token, m);
        }
        if closed {
            self.app_gone(token);
        }
    }

    fn app_message(&mut self, token: Token, m: AppToNode) {
        let named = self.apps.get(&token).is_some_and(|a| a.name.is_some());
        match m {
            AppToNode::Hello { app } if !named => {
                if !valid_app_name(&app) {
                    let reason =
                        format!("'{app}' is not an application name: 1 to 32 letters, digits, '-' or '_'");
                    return self.tell_app(token, &NodeToApp::Error { reason });
                }
                let path = shm_path(&format!("{}{app}-{}-in", self.bridge_prefix(), token.0));
                let layout =
                    BridgeLayout::for_messages(INBOX_SLOTS, MAX_MESSAGE + 16).expect("a valid layout");
                let inbox = path.map_err(|e| e.to_string()).and_then(|p| {
                    bridge::create(&p, layout).map(|b| (p, b.into_producer())).map_err(|e| e.to_string())
                });
                // The inbox's doorbell, beside it (removed with the node's bridges). Without
                // one the application looks at its inbox on its own clock.
                let bell_path = shm_path(&format!("{}{app}-{}-bell", self.bridge_prefix(), token.0)).ok();
                let bell = bell_path.as_ref().and_then(|p| kairos_sys::bell::Bell::create_ringer(p).ok());
                let doorbell = bell.as_ref().and(bell_path);
                match inbox {
                    Ok((path, inbox)) => {
                        let _ = self.commands.send(LaneCommand::Inbox { app: token.0 as u64, inbox, bell });
                        if let Some(a) = self.apps.get_mut(&token) {
                            a.name = Some(app);
                        }
                        let welcome =
                            NodeToApp::Welcome { host: self.config.host.clone(), inbox: path, doorbell };
                        self.tell_app(token, &welcome);
                    }
                    Err(reason) => self.tell_app(token, &NodeToApp::Error { reason }),
                }
            }
            _ if !named => self.tell_app(token, &NodeToApp::Error { reason: "say hello first".into() }),
            AppToNode::Hello { .. } => {
                self.tell_app(token, &NodeToApp::Error { reason: "hello again".into() })
            }
            AppToNode::Request { app_ref, tunnel } => self.forward(token, app_ref, None, tunnel),
            AppToNode::Change { app_ref, tunnel_id, tunnel } => {
                if self.owners.get(&tunnel_id) != Some(&token) {
                    let reason = format!("tunnel {tunnel_id} is not this application's");
                    return self.tell_app(token, &NodeToApp::Refused { app_ref, reason });
                }
                self.forward(token, app_ref, Some(tunnel_id), tunnel)
            }
            AppToNode::Release { tunnel_id } => {
                if self.owners.get(&tunnel_id) == Some(&token) {
                    self.send_controller(&ToController::Release { tunnel_id });
                }
            }
            AppToNode::Listen { name } => {
                let _ = self.commands.send(LaneCommand::Listen { app: token.0 as u64, name });
            }
        }
    }

    fn forward(&mut self, token: Token, app_ref: u64, change: Option<TunnelId>, tunnel: TunnelSpec) {
        if self.link.is_none() {
            let reason = "the controller is not reachable now (the node is reconnecting)".to_string();
            return self.tell_app(token, &NodeToApp::Refused { app_ref, reason });
        }
        let node_ref = self.next_ref;
        self.next_ref += 1;
        self.pending.insert(node_ref, Pending { app: token, app_ref, spec: tunnel.clone() });
        let message = match change {
            None => ToController::Request { app_ref: node_ref, tunnel },
            Some(tunnel_id) => ToController::Change { app_ref: node_ref, tunnel_id, tunnel },
        };
        self.send_controller(&message);
    }

    fn app_gone(&mut self, token: Token) {
        if let Some(mut app) = self.apps.remove(&token) {
            let _ = self.poll.registry().deregister(&mut app.stream);
        }
        let _ = self.commands.send(LaneCommand::AppGone { app: token.0 as u64 });
        let owned: Vec<TunnelId> =
            self.owners.iter().filter(|(_, a)| **a == token).map(|(t, _)| *t).collect();
        for tunnel_id in owned {
            self.send_controller(&ToController::Release { tunnel_id });
        }
        self.pending.retain(|_, p| p.app != token);
    }

    fn tell_app(&mut self, token: Token, m: &NodeToApp) {
        let Some(app) = self.apps.get_mut(&token) else { return };
        put_frame(&serde_json::to_vec(m).expect("messages serialise"), &mut app.out);
    }

    fn flush_apps(&mut self) {
        let mut gone = Vec::new();
        for (token, app) in self.apps.iter_mut() {
            while !app.out.is_empty() {
                match app.stream.write(&app.out) {
                    Ok(0) => {
                        gone.push(*token);
                        break;
                    }
                    Ok(n) => {
                        app.out.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        gone.push(*token);
                        break;
                    }
                }
            }
            // An application that does not read its events loses its connection, not the node.
            if app.out.len() > 1 << 20 {
                gone.push(*token);
            }
        }
        for t in gone {
            self.app_gone(t);
        }
    }
}

/// Writes `bytes` whole to a non-blocking stream (control messages are small: a full socket
/// buffer is a stuck peer, given up on after a second).
fn write_all_nonblocking(stream: &mut TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                if Instant::now() > deadline {
                    return Err(ErrorKind::TimedOut.into());
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_calls_are_timed_to_every_peer() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let peers: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
        let addresses: Vec<SocketAddr> = peers.iter().map(|p| p.local_addr().unwrap()).collect();
        assert_eq!(longest_send_ns(&socket, &[]), 0, "no peer, nothing to fan out to");
        assert!(longest_send_ns(&socket, &addresses) > 0);
        // Every peer got the warm-up and the timed datagrams, each empty.
        for p in &peers {
            p.set_nonblocking(true).unwrap();
            let mut got = 0;
            while let Ok(n) = p.recv(&mut [0u8; 16]) {
                assert_eq!(n, 0);
                got += 1;
            }
            assert_eq!(got, SEND_WARMUP + SEND_SAMPLES);
        }
    }
}

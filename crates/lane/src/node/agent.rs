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

mod apps;
mod control;
mod peer_sends;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::channel;
use std::time::Duration;

use kairos_sys::stoppable_thread::StoppableThread;
use mio::net::UnixListener;
use mio::{Poll, Token, Waker};

use self::control::Control;
use self::peer_sends::PeerSends;
use super::app::SOCKET_NAME;
use super::chunk::Schema;
use super::lane::{LaneCounts, LaneLoop, LaneSettings, LaneSocket, ReceiveMode};
use super::promise::HostJitter;
use crate::service::auth::Secret;

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
    let local = lane_socket.local_addr().map_err(io_error("the lane socket's address"))?.ip();
    let peer_sends = PeerSends::measure(local, &others);
    let host = HostJitter { core_ns, how, send_ns: peer_sends.longest_ns() };
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
    let mut control =
        Control::new(config, poll, listener, commands_tx, reports_rx, (host, peer_sends), measure.log)?;
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

#[cfg(test)]
mod tests;

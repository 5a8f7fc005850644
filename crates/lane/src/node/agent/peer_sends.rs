//! How long one send call to each peer's node takes (the promise's fan-out share,
//! [`crate::node::promise`]), timed only once that node is up.
//!
//! On the testbed a send call carries its datagram through the veths into the receiving host,
//! in the sender's call, and into the receiving node's socket, waking its loop; to a host whose
//! node is not running yet it ends at an ICMP "port unreachable" instead, a shorter path (13 us
//! a call against 44-54 us measured here). A node started before its receivers used to time that
//! shorter path and promise too little. Now each peer is first asked whether it is up: a UDP
//! socket of its own, connected to the peer's lane address, sends it an empty datagram (a lane
//! loop drops it: not a lane packet), and the kernel reports the ICMP refusal on that socket
//! (`ECONNREFUSED` from `take_error`). A peer that refused is asked again each
//! [`ASK_EVERY`]; the first time it does not refuse, its send calls are timed, and the node's
//! promises are made again with the longer figure ([`Control`](super::control::Control)).
//! The calls are timed on the peer's own socket, from the lane address: the path a lane packet
//! takes, from another port.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Empty datagrams timed to each peer; the first [`SEND_WARMUP`] are not counted (they wait for
/// ARP). The longest of 128 is about the 99th percentile of send calls: with 16 the promise
/// missed the tail a tunnel's second receiver then met (6 of 1,000 messages of the end-to-end
/// test 20-30 us late, no stall seen).
const SEND_SAMPLES: usize = 128;
/// Datagrams sent to each peer before the timed ones.
const SEND_WARMUP: usize = 2;
/// The gap between timed sends: apart, as releases are, not one burst the receiver's stack
/// batches.
const SEND_GAP: Duration = Duration::from_micros(200);
/// How long a refusal takes to come back on loopback-like paths, waited for once at start.
const REFUSAL_WAIT: Duration = Duration::from_millis(5);
/// How often a peer that refused is asked again.
pub(super) const ASK_EVERY: Duration = Duration::from_millis(200);

/// One peer: its socket, and its longest send call once timed.
#[derive(Debug)]
struct Peer {
    socket: Option<UdpSocket>,
    /// `None` while its node has not been heard up.
    longest_ns: Option<u64>,
    /// Whether an ask is out whose refusal has not been looked for yet.
    asked: bool,
}

/// The send-call timing of every peer.
#[derive(Debug)]
pub(super) struct PeerSends {
    peers: Vec<Peer>,
    next_ask: Instant,
}

impl PeerSends {
    /// Asks every peer in `peers` whether its node is up (from `local`, the lane socket's
    /// address) and times the send calls to those that are.
    pub(super) fn measure(local: IpAddr, peers: &[SocketAddr]) -> Self {
        let mut peers: Vec<Peer> = peers
            .iter()
            .map(|&address| Peer { socket: connected(local, address).ok(), longest_ns: None, asked: false })
            .collect();
        for peer in &mut peers {
            peer.ask();
        }
        if !peers.is_empty() {
            std::thread::sleep(REFUSAL_WAIT);
        }
        for peer in &mut peers {
            peer.time_if_up();
        }
        Self { peers, next_ask: Instant::now() + ASK_EVERY }
    }

    /// The longest send call to a peer heard up, ns (0: none yet).
    pub(super) fn longest_ns(&self) -> u64 {
        self.peers.iter().filter_map(|p| p.longest_ns).max().unwrap_or(0)
    }

    /// Peers not heard up yet.
    pub(super) fn unheard(&self) -> usize {
        self.peers.iter().filter(|p| p.longest_ns.is_none()).count()
    }

    /// Asks again the peers that refused, at most every [`ASK_EVERY`], and times those that
    /// no longer do; whether the longest send call grew.
    pub(super) fn ask_again(&mut self, now: Instant) -> bool {
        if now < self.next_ask || self.unheard() == 0 {
            return false;
        }
        self.next_ask = now + ASK_EVERY;
        let before = self.longest_ns();
        for peer in self.peers.iter_mut().filter(|p| p.longest_ns.is_none()) {
            // The last ask went out an ASK_EVERY ago: its refusal, if any, is in.
            if peer.asked {
                peer.time_if_up();
            }
            if peer.longest_ns.is_none() {
                peer.ask();
            }
        }
        self.longest_ns() > before
    }
}

/// A UDP socket bound to `local` (any port) and connected to `peer`, so the kernel reports an
/// ICMP refusal from it on this socket.
fn connected(local: IpAddr, peer: SocketAddr) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(SocketAddr::new(local, 0))?;
    socket.connect(peer)?;
    Ok(socket)
}

impl Peer {
    /// Sends the peer an empty datagram, clearing an old refusal first.
    fn ask(&mut self) {
        if let Some(socket) = &self.socket {
            let _ = socket.take_error();
            self.asked = socket.send(&[]).is_ok();
        }
    }

    /// Times the send calls to the peer if its last ask was not refused.
    fn time_if_up(&mut self) {
        let Some(socket) = &self.socket else { return };
        let refused =
            matches!(socket.take_error(), Ok(Some(e)) if e.kind() == io::ErrorKind::ConnectionRefused);
        self.asked = false;
        if !refused {
            self.longest_ns = longest_send_ns(socket);
        }
    }
}

/// The longest of [`SEND_SAMPLES`] send calls of an empty datagram on `socket`, ns; `None` if
/// the peer refused meanwhile (its node stopped: asked again later).
fn longest_send_ns(socket: &UdpSocket) -> Option<u64> {
    let mut longest = 0;
    for i in 0..SEND_WARMUP + SEND_SAMPLES {
        let started = Instant::now();
        let sent = socket.send(&[]);
        let took = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        if let Err(e) = sent {
            // A refusal of an earlier send comes back on a later one.
            if e.kind() == io::ErrorKind::ConnectionRefused {
                return None;
            }
        } else if i >= SEND_WARMUP {
            longest = longest.max(took);
        }
        std::thread::sleep(SEND_GAP);
    }
    Some(longest)
}

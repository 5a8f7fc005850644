//! Where a member's datagrams travel: a UDP socket, one copy of each heartbeat to each other
//! member's address; or the express lane, as an application of its host's lane node with a
//! tunnel of its own to the other members' hosts, one packet a period carrying the heartbeat
//! for every member (the lane's multicast), SWIM's datagrams in the rest of it.
//!
//! Either way a datagram is handed to the loop with its arrival time on `CLOCK_MONOTONIC`: the
//! kernel's receive stamp of its packet (at this host's socket, or at this host's lane node),
//! so a datagram read late keeps its time. Neither wakes the loop when a datagram arrives (see
//! [`super::member`]): the loop reads what came at its deadlines.
//!
//! On the lane the loop's rounds are phased to the node's releases of the tunnel, a little
//! before each. A round hands the link the heartbeat and whatever SWIM queued since the last
//! round, and the link gives the node one packet if the node has sent the last one
//! ([`kairos_services::lane_link`]); otherwise the heartbeat waits for the next round, which
//! replaces it. Only the rounds hand packets over: a packet handed between rounds (after a
//! release) would still be in the outbox at the next round, whose heartbeat would then wait a
//! period, and so every one after it. SWIM's datagrams therefore wait up to a period more.
//! A heartbeat's `sent_ns` is when it was handed over; the wait for the release shows on the
//! receiver as time on the way.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use kairos_sys::clock::{monotonic_ns, realtime_ns, realtime_offset, stamp_to_monotonic};
use kairos_sys::net::burst::MmsgBatch;
use kairos_sys::net::options;

use super::wire::{Heartbeat, encode_heartbeat, encode_swim};
use kairos_services::lane_link::{self, Incoming, LaneLink, LaneLinkConfig, LaneLinkError, LaneLinkStats};
use kairos_services::peer::{self, PeerAddr};

/// What the lane's tunnels of the failure detector are named, before the group's mark.
pub const FD_LANE_TUNNEL: &str = "fd-lane";
/// Datagrams taken per receive call.
const BURST: usize = 16;
/// The largest datagram read whole.
const DATAGRAM_BYTES: usize = 1_500;

/// Why the transport could not be made, or failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The members are not all UDP addresses, or not all lane hosts (with a node given).
    #[error("{0}")]
    Members(String),
    /// The socket could not be made.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The reason.
        source: io::Error,
    },
    /// A socket call failed.
    #[error("socket: {0}")]
    Socket(#[from] io::Error),
    /// The lane's node refused the link.
    #[error(transparent)]
    Lane(#[from] Box<LaneLinkError>),
    /// The lane's node failed while the member ran.
    #[error("the lane node: {0}")]
    LaneNode(#[from] kairos_lane::node::app::AppError),
}

/// A member's transport; see the module doc.
#[derive(Debug)]
pub enum Transport {
    /// One socket, a copy to each member.
    Udp(Box<Udp>),
    /// The host's lane node, one packet to all.
    Lane(Box<Lane>),
}

/// The UDP transport.
pub struct Udp {
    socket: UdpSocket,
    others: Vec<(u64, SocketAddr)>,
    kernel_stamps: bool,
    batch: MmsgBatch,
    buffers: Box<[[u8; DATAGRAM_BYTES]; BURST]>,
    /// Time in the socket's system calls since [`Transport::take_syscall_ns`] last took it.
    syscall_ns: u64,
}

/// The lane transport.
#[derive(Debug)]
pub struct Lane {
    link: LaneLink,
    me: u64,
    others: Vec<u64>,
    /// Numbers SWIM's datagrams for the link's queue (each one whole message).
    message_number: u64,
    /// `CLOCK_REALTIME` less `CLOCK_MONOTONIC`, ns, as last read (each receive), for the
    /// rounds' phase: a round need not read the clocks again.
    offset_ns: u64,
}

impl std::fmt::Debug for Udp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Udp")
            .field("socket", &self.socket)
            .field("others", &self.others)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// Binds member `me`'s socket (`members` all UDP addresses, `lane` none), or joins its host's
    /// lane node (`members` all lane hosts, `lane` its node), with `type_of_service` on the
    /// socket's datagrams. `timeout_ns` is the group's `T + Lambda`: on the lane, a period
    /// granted longer than asked is taken (and said on standard error) while it is shorter.
    pub fn open(
        me: u64,
        members: &std::collections::BTreeMap<u64, PeerAddr>,
        lane: Option<&LaneLinkConfig>,
        type_of_service: Option<u8>,
        timeout_ns: u64,
    ) -> Result<Self, TransportError> {
        let own = members
            .get(&me)
            .ok_or_else(|| TransportError::Members(format!("member {me} is not a member")))?;
        match lane {
            None => {
                let addr = own.udp().ok_or_else(|| {
                    TransportError::Members(format!(
                        "member {me}'s address {own} is a lane host: give its host's lane node, or HOST:PORT"
                    ))
                })?;
                let others =
                    peer::udp_others(me, members).map_err(|e| TransportError::Members(e.to_string()))?;
                let socket = UdpSocket::bind(addr).map_err(|source| TransportError::Bind { addr, source })?;
                socket.set_nonblocking(true)?;
                let kernel_stamps = options::enable_rx_timestamps(&socket).is_ok();
                if let Some(tos) = type_of_service {
                    options::set_type_of_service(&socket, tos)?;
                }
                Ok(Self::Udp(Box::new(Udp {
                    socket,
                    others,
                    kernel_stamps,
                    batch: MmsgBatch::new(),
                    buffers: Box::new([[0; DATAGRAM_BYTES]; BURST]),
                    syscall_ns: 0,
                })))
            }
            Some(config) => {
                let name = lane_link::tunnel_name(FD_LANE_TUNNEL, members);
                let link = LaneLink::join_group(&format!("fd-{me}"), &name, me, members, config)
                    .map_err(Box::new)?;
                // The rounds follow the node's releases, so heartbeats leave once a granted
                // period. The lane grants at least the period asked, longer where its analysis
                // needs it: a period must outlast the jitter of the links (the proof needs a
                // packet to have left a queue before the next arrives), and the testbed's
                // links' jitter is what its calibration measured when the lane came up (a
                // high percentile of idle datagrams, which a slow or busy host makes longer).
                // Such a grant is taken: the receivers' rule (no fresh heartbeat within
                // T + Lambda) still holds, with T + Lambda less the granted period left for
                // lateness instead of Lambda, and a crash is still noticed T + Lambda after its
                // last heartbeat; the member says so. A grant of T + Lambda or more is refused:
                // every gap between two heartbeats would then be a suspicion.
                let granted = link.period_ns();
                let asked = config.period.as_nanos() as u64;
                if granted >= timeout_ns {
                    return Err(TransportError::Members(format!(
                        "the lane granted a period of {:.1} us for the heartbeat period {:.1} us, at or \
                         past the group's timeout T + Lambda, {:.1} us: every gap between heartbeats would \
                         be a suspicion; give a longer --threshold-us or --period-us (the lane's analysis \
                         needs that period on its links)",
                        granted as f64 / 1e3,
                        asked as f64 / 1e3,
                        timeout_ns as f64 / 1e3
                    )));
                }
                if granted != asked {
                    eprintln!(
                        "kairos fd member {me}: the lane granted a period of {:.1} us, not {:.1} us ({}): \
                         heartbeats leave every {:.1} us, which leaves {:.1} us of the timeout T + Lambda, \
                         {:.1} us, for lateness",
                        granted as f64 / 1e3,
                        asked as f64 / 1e3,
                        link.describe(),
                        granted as f64 / 1e3,
                        (timeout_ns - granted) as f64 / 1e3,
                        timeout_ns as f64 / 1e3
                    );
                }
                let others = members.keys().copied().filter(|&m| m != me).collect();
                let offset_ns = realtime_offset().1;
                Ok(Self::Lane(Box::new(Lane { link, me, others, message_number: 0, offset_ns })))
            }
        }
    }

    /// Whether arrival times are the kernel's receive stamps (always on the lane).
    pub fn kernel_stamps(&self) -> bool {
        match self {
            Self::Udp(u) => u.kernel_stamps,
            Self::Lane(_) => true,
        }
    }

    /// The lane link's counts, on the lane.
    pub fn lane_stats(&self) -> Option<LaneLinkStats> {
        match self {
            Self::Udp(_) => None,
            Self::Lane(l) => Some(l.link.stats()),
        }
    }

    /// Sends heartbeat `hb` to every other member, its `sent_ns` stamped as each copy leaves;
    /// returns the sends refused. `out` is scratch.
    pub fn send_heartbeat(&mut self, hb: &mut Heartbeat, out: &mut Vec<u8>) -> u64 {
        match self {
            Self::Udp(u) => {
                let mut refused = 0;
                for (_, addr) in &u.others {
                    hb.sent_ns = monotonic_ns();
                    out.clear();
                    encode_heartbeat(hb, out);
                    if u.socket.send_to(out, addr).is_err() {
                        refused += 1;
                    }
                    // From the stamp: the encoding between is tens of nanoseconds.
                    u.syscall_ns += monotonic_ns() - hb.sent_ns;
                }
                refused
            }
            Self::Lane(l) => {
                let wall = realtime_ns();
                hb.sent_ns = monotonic_ns();
                out.clear();
                encode_heartbeat(hb, out);
                for &m in &l.others {
                    l.link.send_beat(m, out, wall);
                }
                l.link.flush(wall);
                0
            }
        }
    }

    /// Sends SWIM instance `instance`'s datagram `payload` to member `to`; whether it went (or
    /// was queued, on the lane). `out` is scratch.
    pub fn send_swim(&mut self, to: u64, instance: u8, payload: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        encode_swim(instance, payload, out);
        match self {
            Self::Udp(u) => {
                let Some((_, addr)) = u.others.iter().find(|(m, _)| *m == to) else { return false };
                let before = monotonic_ns();
                let sent = u.socket.send_to(out, addr).is_ok();
                u.syscall_ns += monotonic_ns() - before;
                sent
            }
            Self::Lane(l) => {
                if !l.others.contains(&to) {
                    return false;
                }
                l.message_number += 1;
                // Handed to the node with the next round's heartbeat.
                l.link.queue_message(l.message_number, to, out, realtime_ns());
                true
            }
        }
    }

    /// On the lane, the node's first release of the tunnel after `now` (`CLOCK_MONOTONIC` ns).
    pub fn next_release_ns(&self, now: u64) -> Option<u64> {
        match self {
            Self::Udp(_) => None,
            Self::Lane(l) => Some(l.link.next_release_ns(now + l.offset_ns).saturating_sub(l.offset_ns)),
        }
    }

    /// Time spent in the socket's system calls (sends and receives) since the last call, ns:
    /// where kernel work done in the caller's context shows (a veth's receive work runs in its
    /// sender's `sendto`). Always 0 on the lane, whose calls are shared memory.
    pub fn take_syscall_ns(&mut self) -> u64 {
        match self {
            Self::Udp(u) => std::mem::take(&mut u.syscall_ns),
            Self::Lane(_) => 0,
        }
    }

    /// Hands `on` every datagram that arrived, with its arrival time (`CLOCK_MONOTONIC` ns): the
    /// kernel's stamp, at most the time it was read, so a datagram that arrived during the
    /// caller's pass keeps its own time, never the pass's start (which would lengthen its
    /// sender's silence by the pass). Without the kernel's stamps, the time it was read.
    pub fn receive(&mut self, mut on: impl FnMut(&[u8], u64)) -> Result<(), TransportError> {
        // The kernel stamps on CLOCK_REALTIME; its distance from CLOCK_MONOTONIC is read now
        // (the caller's pass began earlier: its heartbeat's sends came between, and a stale
        // pair would put every stamp early by their time).
        let (_, offset) = realtime_offset();
        match self {
            Self::Udp(u) => loop {
                let mut refs = u.buffers.each_mut().map(|b| &mut b[..]);
                let before = monotonic_ns();
                let received = u.batch.recv_into(&u.socket, &mut refs, true);
                let read = monotonic_ns();
                u.syscall_ns += read - before;
                let got = match received {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // An ICMP error queued by an earlier send (a peer's port closed): not ours
                    // to act on.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                    Err(e) => return Err(e.into()),
                };
                for i in 0..got {
                    let len = u.batch.lengths()[i];
                    let stamp = u.batch.rx_timestamps_ns()[i];
                    let at = stamp.map_or(read, |s| stamp_to_monotonic(s, offset, read));
                    on(&u.buffers[i][..len], at);
                }
                if got < BURST {
                    return Ok(());
                }
            },
            Self::Lane(l) => {
                l.offset_ns = offset;
                // The node delivers while the inbox is read (it runs above the members): each
                // message's time is taken as it is read.
                let received = l.link.receive(l.me, |incoming| {
                    let read = monotonic_ns();
                    match incoming {
                        Incoming::Beat(bytes, stamp) => on(bytes, stamp_to_monotonic(stamp, offset, read)),
                        Incoming::Message(bytes) => on(bytes, read),
                    }
                });
                Ok(received?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_heartbeat_keeps_its_own_arrival_time_however_late_it_is_read() {
        let ports: Vec<u16> =
            (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
        let members: BTreeMap<u64, PeerAddr> = (1..=2)
            .map(|m| (m, PeerAddr::Udp(SocketAddr::from(([127, 0, 0, 1], ports[m as usize - 1])))))
            .collect();
        let mut sender = Transport::open(1, &members, None, None, u64::MAX).unwrap();
        let mut receiver = Transport::open(2, &members, None, None, u64::MAX).unwrap();
        // The receiver's pass begins, then a heartbeat comes during it, and the pass reads it
        // 5 ms later: it arrived after the pass began and before it was read.
        let pass_began = monotonic_ns();
        std::thread::sleep(Duration::from_millis(2));
        let mut hb = Heartbeat { member: 1, incarnation: 1, seq: 0, counter: 1, sent_ns: 0 };
        assert_eq!(sender.send_heartbeat(&mut hb, &mut Vec::new()), 0);
        std::thread::sleep(Duration::from_millis(5));
        let mut arrivals = Vec::new();
        receiver.receive(|_, at| arrivals.push(at)).unwrap();
        let read = monotonic_ns();
        assert_eq!(arrivals.len(), 1);
        let at = arrivals[0];
        assert!(
            at >= pass_began + 2_000_000,
            "arrival {at} was set back towards the pass's start {pass_began}"
        );
        assert!(at >= hb.sent_ns && at <= read, "arrival {at} outside [sent {}, read {read}]", hb.sent_ns);
        if receiver.kernel_stamps() {
            assert!(read - at >= 4_000_000, "the kernel's stamp, not the time it was read");
        }
    }
}

//! UDP/IPv4 over Ethernet on a memory-mapped `AF_PACKET` ring
//! ([`kairos_sys::net::PacketRing`]): the lab's [`Port`] ([`AfPacketPort`]) and a datagram
//! socket for other users ([`AfPacketSocket`], the express lane's fast path).
//!
//! A UDP socket costs a system call per burst each way and, for a thread that sleeps, a wake-up
//! per packet; a packet ring costs neither: the kernel writes received frames straight into
//! memory the reader spins on, and a sender writes frames into memory the kernel sends from
//! with one kick per burst, past the queueing discipline. The price is doing what the kernel's
//! UDP layer did: the framing (Ethernet, IPv4 and UDP with their checksums, in
//! [`crate::udp_frame`]), the filtering of what arrives (IPv4, UDP, to our address and port;
//! anything else skipped and counted in [`SkipCounts`]), and finding the peer's hardware
//! address, which this module owns.
//!
//! # Hardware addresses
//!
//! A destination must be on the interface's link (routes are not followed). Its hardware
//! address comes from the kernel's neighbour table of the socket's namespace, read from
//! `/proc/thread-self/net/arp` through a file opened when the socket was (a namespace's `/proc`
//! file keeps showing that namespace, whichever thread reads it later), and is then cached.
//! When the kernel has no complete entry for the destination, sending fails with
//! [`AfPacketError::NeighbourUnknown`], which says so: this module sends no ARP request of its
//! own. Traffic through a kernel socket (or a ping, or `ip neigh add ... nud permanent`) fills
//! the table; [`AfPacketSocket::set_neighbour`] pins an entry by hand, for a namespace whose
//! interface has no address and so no ARP (the testbed's [`crate::ForwarderSide::Bare`] and
//! [`crate::ForwarderSide::Unclaimed`]).
//!
//! # Latency on the testbed
//!
//! One-way latency of 60-byte datagrams across the two-namespace veth testbed, one every 50 us
//! (idle), the sender on core 0 and a spinning receiver on core 1 of a 2-vCPU KVM guest (kernel
//! 6.18.44) shared with other builds, 30,000 datagrams a path in five interleaved rounds
//! (`cargo run --release -p kairos-io --example packet_latency`, root). From the sender's
//! `CLOCK_REALTIME` stamp in the payload to the receiving thread's clock when it saw the
//! datagram, min / p50 / p99 / p99.9 / max in us:
//!
//! | path | sender to user |
//! |---|---|
//! | UDP socket to UDP socket (`recvmmsg`, `MSG_DONTWAIT`) | 2.0 / 2.7 / 4.2 / 25.9 / 61.5 |
//! | transmit ring to receive ring | 1.5 / 2.0 / 4.3 / 40.0 / 140.9 |
//! | UDP socket to receive ring | 1.6 / 2.2 / 5.9 / 78.3 / 374.3 |
//! | transmit ring to UDP socket | 2.3 / 3.0 / 11.0 / 850.9 / 2080.8 |
//! | transmit ring to a `TPACKET_V3` receive ring (1 ms block timer) | 18.7 / 524.8 / 996.9 / 1100.8 / 1555.5 |
//!
//! The kernel stamped each datagram 0.7 to 1.1 us after the sender (the median, every path);
//! from that stamp a ring reader saw it after 1.1 us, a UDP socket reader after 1.6 us. Medians
//! held within 0.2 us over three runs; the tails past the 99th percentile are the shared
//! machine's and moved by an order of magnitude between runs. A receiver asleep in `ppoll` adds
//! about 30 us (its core's wake-up) on either transport.
//!
//! # In the express lane
//!
//! The lane's node runs on this socket with `kairos lane node --transport packet`. In the lane
//! (`kairos lane latency --rows lane --loads idle,flood --packets 30000 --transport ...`, the
//! tuned row, release stamp to the receiving node's kernel stamp, four alternated runs each)
//! the ring's median was 1.8-1.9 us idle and 2.0-2.1 us under the flood against the UDP
//! socket's 2.2-2.4 and 2.5-2.7 us, its flood p99.9 46-47 us against 55-58 us; the flood's p99
//! (21-23 against 24-26 us) is the veth softirq path's on the sending core, whichever
//! transport, and the idle p99.9 the shared machine's (4 to 26 us on either). The README has
//! the table.
//!

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddrV4};

use kairos_sys::clock::{monotonic_ns, realtime_ns};
use kairos_sys::net::packet_ring::{PacketRing, PacketRingError, RingConfig, RingStats};

use crate::port::{
    Capabilities, MAX_WIRE_BYTES, Message, Port, PortBase, PortError, PortStats, RxTimestamps,
};
use crate::udp_frame::{
    Endpoint, HEADERS_LEN, MacAddr, SkipCounts, UdpDatagram, parse_udp_frame, write_headers,
};

/// Most frames one receive or send call moves (the lab's ports agree on 64).
pub const MAX_BURST: usize = 64;

/// Why a datagram socket on a packet ring could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum AfPacketError {
    /// The ring refused (the error names the interface and the step).
    #[error(transparent)]
    Ring(#[from] PacketRingError),
    /// The kernel's neighbour table has no complete entry for the destination.
    #[error(
        "{interface}: no hardware address for {ip} in the kernel's neighbour table{detail}; this socket sends no ARP of its own: send to it once through a kernel socket, ping it, or pin it (ip neigh add, or set_neighbour)"
    )]
    NeighbourUnknown {
        /// The interface's name.
        interface: String,
        /// The destination.
        ip: Ipv4Addr,
        /// Why the table could not be read, if it could not (else empty).
        detail: String,
    },
    /// The payload does not fit one frame on this ring.
    #[error("{interface}: a payload of {len} bytes does not fit a frame (at most {max})")]
    PayloadTooLong {
        /// The interface's name.
        interface: String,
        /// The payload's length.
        len: usize,
        /// The longest payload sent.
        max: usize,
    },
    /// Every transmit slot is still in the kernel's hands; try again later.
    #[error("{interface}: the transmit ring is full")]
    TxRingFull {
        /// The interface's name.
        interface: String,
    },
}

/// The kernel's neighbour table as seen from one namespace, and the addresses found in it.
#[derive(Debug)]
struct Neighbours {
    /// `/proc/thread-self/net/arp`, opened in the socket's namespace, or why it could not be.
    table: io::Result<File>,
    cache: HashMap<Ipv4Addr, MacAddr>,
}

/// Where the calling thread's namespace shows its IPv4 neighbour table.
const ARP_TABLE: &str = "/proc/thread-self/net/arp";
/// `ATF_COM`: the entry is complete (its hardware address known).
const ATF_COM: u32 = 0x02;
/// The longest neighbour table read (about 10,000 entries).
const MAX_ARP_TABLE: u64 = 1 << 20;

impl Neighbours {
    fn open() -> Self {
        let table = File::open(ARP_TABLE);
        Self { table, cache: HashMap::new() }
    }

    fn resolve(&mut self, ip: Ipv4Addr, interface: &str) -> Result<MacAddr, AfPacketError> {
        if let Some(mac) = self.cache.get(&ip) {
            return Ok(*mac);
        }
        let unknown =
            |detail: String| AfPacketError::NeighbourUnknown { interface: interface.to_owned(), ip, detail };
        let file = self
            .table
            .as_mut()
            .map_err(|e| unknown(format!(" (the table could not be opened: {ARP_TABLE}: {e})")))?;
        let mut text = String::new();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.take(MAX_ARP_TABLE).read_to_string(&mut text))
            .map_err(|e| unknown(format!(" (reading {ARP_TABLE}: {e})")))?;
        let mac = arp_table_entry(&text, ip, interface).ok_or_else(|| unknown(String::new()))?;
        self.cache.insert(ip, mac);
        Ok(mac)
    }
}

/// The hardware address of `ip` on `interface` in `/proc/net/arp`'s text, if its entry is
/// complete.
pub fn arp_table_entry(table: &str, ip: Ipv4Addr, interface: &str) -> Option<MacAddr> {
    // "IP address  HW type  Flags  HW address  Mask  Device", one entry a line after the title.
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [address, _, flags, hw, _, device] = fields[..] else { return None };
        let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).ok()?;
        if address.parse::<Ipv4Addr>().ok()? != ip || device != interface || flags & ATF_COM == 0 {
            return None;
        }
        parse_mac(hw)
    })
}

/// A hardware address written `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> Option<MacAddr> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        // Two hex digits (from_str_radix alone would take a sign).
        if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// What an [`AfPacketSocket`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketStats {
    /// Datagrams handed to `recv` closures.
    pub received: u64,
    /// Datagrams queued on the transmit ring.
    pub sent: u64,
    /// Frames skipped, by reason.
    pub skipped: SkipCounts,
    /// The ring's and the kernel's counts.
    pub ring: RingStats,
}

/// A UDP endpoint on a packet ring: datagrams to and from one IPv4 address and port on one
/// interface, framed here (see the module doc).
#[derive(Debug)]
pub struct AfPacketSocket {
    ring: PacketRing,
    local: Endpoint,
    neighbours: Neighbours,
    ip_id: u16,
    tos: u8,
    received: u64,
    sent: u64,
    skipped: SkipCounts,
}

impl AfPacketSocket {
    /// Opens a ring on `interface`, receiving the frames of `config.ethertype`, for datagrams
    /// to and from `local` (the interface's address, or `0.0.0.0` for any address the
    /// frames name). Call it in the interface's network namespace: the ring and the view of the
    /// neighbour table stay there, whichever thread uses the socket later.
    ///
    /// The ethertype decides when a frame reaches the ring. Bound to every ethertype
    /// (`ETH_P_ALL`, as `dpdk-testpmd`'s `af_packet` PMD binds), the ring is one of the
    /// interface's taps: the kernel copies a frame into it before its own stack sees it. Bound
    /// to IPv4 (`ETH_P_IP`), it is handed the frame after the namespace's IPv4 receive has run
    /// (a clone, a route lookup): later, by the lab's measurement (README). `RingConfig`'s
    /// default is every ethertype, so ARP and IPv6 frames reach the ring too: frames that are
    /// not UDP to `local` are skipped and counted either way.
    pub fn open(interface: &str, local: SocketAddrV4, config: RingConfig) -> Result<Self, AfPacketError> {
        let ring = PacketRing::open(interface, config)?;
        let mac = ring.hardware_address()?;
        Ok(Self {
            ring,
            local: Endpoint { mac, addr: local },
            neighbours: Neighbours::open(),
            ip_id: 0,
            tos: 0,
            received: 0,
            sent: 0,
            skipped: SkipCounts::default(),
        })
    }

    /// This end: the interface's hardware address and the address and port given.
    pub fn local(&self) -> Endpoint {
        self.local
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        self.ring.interface()
    }

    /// The longest payload one datagram carries.
    pub fn max_payload(&self) -> usize {
        self.ring.max_tx_frame().saturating_sub(HEADERS_LEN)
    }

    /// Sets the type-of-service byte (DSCP and ECN) of the datagrams sent from now on (0 at
    /// first), as `IP_TOS` does for a kernel socket.
    pub fn set_tos(&mut self, tos: u8) {
        self.tos = tos;
    }

    /// Uses `mac` for `ip` from now on instead of the kernel's neighbour table.
    pub fn set_neighbour(&mut self, ip: Ipv4Addr, mac: MacAddr) {
        self.neighbours.cache.insert(ip, mac);
    }

    /// Forgets every hardware address found or set, so the next send to each looks again.
    pub fn forget_neighbours(&mut self) {
        self.neighbours.cache.clear();
    }

    /// The hardware address frames to `ip` go to (the cache, else the kernel's table).
    pub fn neighbour(&mut self, ip: Ipv4Addr) -> Result<MacAddr, AfPacketError> {
        self.neighbours.resolve(ip, self.ring.interface())
    }

    /// Sends one datagram to `dst` (one kick).
    pub fn send_to(&mut self, dst: SocketAddrV4, payload: &[u8]) -> Result<(), AfPacketError> {
        let max = self.max_payload();
        if payload.len() > max {
            let interface = self.ring.interface().to_owned();
            return Err(AfPacketError::PayloadTooLong { interface, len: payload.len(), max });
        }
        match self.send_burst_with(dst, 1, |_, out| {
            out[..payload.len()].copy_from_slice(payload);
            payload.len()
        })? {
            0 => Err(AfPacketError::TxRingFull { interface: self.ring.interface().to_owned() }),
            _ => Ok(()),
        }
    }

    /// Sends up to `count` datagrams to `dst` with one kick, datagram `i`'s payload written by
    /// `fill(i, room)` into `room` (at most [`Self::max_payload`] bytes), which returns its
    /// length; a length past `room` ends the burst there. Returns how many were queued (fewer
    /// when the ring is full).
    pub fn send_burst_with(
        &mut self,
        dst: SocketAddrV4,
        count: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> usize,
    ) -> Result<usize, AfPacketError> {
        let to = Endpoint { mac: self.neighbour(*dst.ip())?, addr: dst };
        let (from, tos) = (self.local, self.tos);
        let ip_id = &mut self.ip_id;
        let sent = self.ring.tx_burst_with(count, |i, slot| {
            if slot.len() < HEADERS_LEN {
                return 0;
            }
            let (headers, room) = slot.split_at_mut(HEADERS_LEN);
            let len = fill(i, room);
            let Some(payload) = room.get(..len) else { return 0 };
            *ip_id = ip_id.wrapping_add(1);
            match write_headers(&from, &to, tos, *ip_id, headers, payload) {
                Some(()) => HEADERS_LEN + len,
                None => 0,
            }
        })?;
        self.sent += sent as u64;
        Ok(sent)
    }

    /// Hands up to [`MAX_BURST`] received datagrams for this socket to `each` with their
    /// sender and the kernel's receive stamp (`CLOCK_REALTIME` ns); returns how many frames
    /// were looked at (datagrams and skipped frames). Never blocks.
    pub fn recv(&mut self, each: impl FnMut(SocketAddrV4, &[u8], u64)) -> usize {
        self.recv_burst(MAX_BURST, each)
    }

    /// As [`Self::recv`], looking at up to `max` frames.
    pub fn recv_burst(&mut self, max: usize, mut each: impl FnMut(SocketAddrV4, &[u8], u64)) -> usize {
        let local = self.local.addr;
        let (received, skipped) = (&mut self.received, &mut self.skipped);
        self.ring.rx_burst(max, |frame, rx_ns| match parse_udp_frame(frame) {
            Ok(d) if for_us(&d, local) => {
                *received += 1;
                each(d.src.addr, d.payload, rx_ns);
            }
            Ok(_) => skipped.other_flow += 1,
            Err(e) => skipped.count(e),
        })
    }

    /// Waits up to `timeout` for a frame (`ppoll`); returns whether one may be waiting.
    pub fn wait_readable(&self, timeout: std::time::Duration) -> Result<bool, AfPacketError> {
        Ok(self.ring.wait_readable(timeout)?)
    }

    /// What was counted, with the kernel's counters read now.
    pub fn stats(&mut self) -> Result<SocketStats, AfPacketError> {
        let ring = self.ring.statistics()?;
        Ok(SocketStats { received: self.received, sent: self.sent, skipped: self.skipped, ring })
    }
}

/// Whether a datagram is addressed to `local` (any address when `local`'s is unspecified).
fn for_us(datagram: &UdpDatagram<'_>, local: SocketAddrV4) -> bool {
    datagram.dst.addr.port() == local.port()
        && (local.ip().is_unspecified() || datagram.dst.addr.ip() == local.ip())
}

/// A [`Port`] on a packet ring: messages in UDP datagrams between this socket and one peer
/// (frames from others are skipped and counted), as [`crate::UdpPort`] carries them over a
/// connected UDP socket.
#[derive(Debug)]
pub struct AfPacketPort {
    socket: AfPacketSocket,
    peer: SocketAddrV4,
    stats: PortStats,
}

impl AfPacketPort {
    /// A port exchanging packets with `peer`, whose hardware address must be known now (from
    /// the neighbour table, or set on `socket` with [`AfPacketSocket::set_neighbour`]).
    pub fn new(mut socket: AfPacketSocket, peer: SocketAddrV4) -> Result<Self, AfPacketError> {
        socket.neighbour(*peer.ip())?;
        Ok(Self { socket, peer, stats: PortStats::default() })
    }

    /// The datagram socket underneath (its counters, its hardware address).
    pub fn socket_mut(&mut self) -> &mut AfPacketSocket {
        &mut self.socket
    }
}

impl From<AfPacketError> for PortError {
    fn from(err: AfPacketError) -> Self {
        PortError::Backend { backend: "af_packet", source: Box::new(err) }
    }
}

impl<M: Message> Port<M> for AfPacketPort {
    fn rx_burst(&mut self, out: &mut [M]) -> Result<usize, PortError> {
        let want = out.len().min(MAX_BURST);
        let (peer, stats) = (self.peer, &mut self.stats);
        let mut got = 0;
        let mut foreign = 0;
        // Stamps are CLOCK_REALTIME; the lab's clock is CLOCK_MONOTONIC (as for UdpPort, one
        // offset per burst, read after the frames arrived). Read at the burst's first frame, so
        // a poll of an empty ring (a spinning forwarder's most common call) reads no clock.
        let mut clocks: Option<(u64, u64)> = None;
        self.socket.recv_burst(want, |src, payload, rx_ns| {
            let (mono, offset) = *clocks.get_or_insert_with(|| {
                let mono = monotonic_ns();
                (mono, realtime_ns().saturating_sub(mono))
            });
            if src != peer {
                foreign += 1;
                return;
            }
            match M::decode(payload) {
                Some(mut message) => {
                    message.set_rx_ns(rx_ns.saturating_sub(offset).min(mono));
                    // At most `want` frames are looked at, so there is always room.
                    if let Some(slot) = out.get_mut(got) {
                        *slot = message;
                        got += 1;
                    }
                }
                None => stats.rx_invalid += 1,
            }
        });
        self.socket.skipped.other_flow += foreign;
        self.stats.rx_packets += got as u64;
        Ok(got)
    }

    fn tx_burst(&mut self, messages: &[M]) -> Result<usize, PortError> {
        let want = messages.len().min(MAX_BURST);
        if want == 0 {
            return Ok(0);
        }
        let sent = self.socket.send_burst_with(self.peer, want, |i, room| {
            // A frame has room for far more than the longest message; encoded in place.
            match room.get_mut(..MAX_WIRE_BYTES).and_then(|b| <&mut [u8; MAX_WIRE_BYTES]>::try_from(b).ok()) {
                Some(buf) => messages[i].encode(buf),
                None => usize::MAX,
            }
        })?;
        self.stats.tx_packets += sent as u64;
        self.stats.tx_refused += (messages.len() - sent) as u64;
        Ok(sent)
    }
}

impl PortBase for AfPacketPort {
    fn capabilities(&self) -> Capabilities {
        Capabilities { max_burst: MAX_BURST, rx_timestamps: RxTimestamps::Kernel }
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn name(&self) -> &'static str {
        "af_packet"
    }

    fn wait(&mut self, timeout: std::time::Duration) {
        // An error (a signal) only ends the wait early, as a timeout would.
        let _ = self.socket.wait_readable(timeout);
    }
}

#[cfg(test)]
mod tests;

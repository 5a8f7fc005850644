//! The node's lane loop: one thread, pinned to the lane core, that sends each tunnel's packet
//! at its releases and delivers the packets that arrive, with no lock, no allocation per
//! packet and no system call per message.
//!
//! At a release it empties the tunnel's outbox: messages go into one packet
//! ([`super::chunk`]) while they fit the grant's size; up to one more packet's worth waits for
//! the next release (`Carry`, counted in the chunks a packet holds), and the oldest beyond that
//! are dropped. [`NodeTunnels`] judges what was offered: beyond the grant it is excess (dropped
//! the oldest first, counted, and reported to the controller), within it a drop is the node's
//! own lateness (counted as late). The packet goes to each receiver's node (one datagram each:
//! unicast fan-out). Between releases the loop reads the lane socket: with [`ReceiveMode::Spin`]
//! it polls it without pause (the source's busy loop: the lowest latency, and a core of its own),
//! with [`ReceiveMode::Sleep`] it waits in `ppoll` until a packet or the next release, as the
//! RT shell sleeps, spinning only the last `spin_ns` before a release. Each packet's messages go
//! to the inboxes of the applications listening to its tunnel's name, stamped with the kernel's
//! receive time.
//!
//! The loop sends and receives on a [`LaneSocket`]: the kernel's UDP socket, or a
//! memory-mapped `AF_PACKET` ring on the lane's interface ([`kairos_io::af_packet`]), which
//! skips the system call per burst and the UDP layer: in `kairos lane latency` 0.4 to 0.6 us
//! off the median, idle and under a flood (the README's transport section has the runs).
//!
//! The control thread ([`super::agent`]) tells the loop what changed through a channel
//! ([`LaneCommand`]) and gets the usage reports back through another, waking its event loop.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use kairos_io::af_packet::{AfPacketError, AfPacketSocket};
use kairos_ring::bridge::{Consumer, Mapped, Producer};
use kairos_sys::bell::Bell;
use kairos_sys::clock::realtime_ns;
use kairos_sys::net::MmsgBatch;
use kairos_sys::shm::SharedRegion;

use super::app::INBOX_HEADER_BYTES;
use super::chunk::{Encoder, Header, Packet, Schema, UDP_IPV4_PAYLOAD_BYTES};
use super::tunnels::{NodeTunnels, Offered, Settled, TunnelCounts};
use crate::service::client::Welcome;
use crate::service::wire::{ToController, ToNode};
use crate::te::TunnelId;

/// An application's inbox, as the lane loop holds it.
pub type InboxProducer = Producer<Mapped<SharedRegion>>;
/// A tunnel's outbox, as the lane loop holds it.
pub type OutboxConsumer = Consumer<Mapped<SharedRegion>>;

/// How the loop waits for packets between releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveMode {
    /// Poll the socket without pause: the lowest latency, a core of its own.
    Spin,
    /// Sleep in `ppoll` until a packet or the next release, spinning only the last `spin_ns`
    /// before a release.
    Sleep,
    /// Sleep in `ppoll` until a packet or the next release, never spinning: for a host whose
    /// cores the lane shares with its applications (a release is then as late as a wake-up).
    SleepOnly,
}

/// What the lane loop sends and receives on.
#[derive(Debug)]
pub enum LaneSocket {
    /// The kernel's UDP socket (bound, non-blocking, receive time stamps on).
    Udp(UdpSocket),
    /// A packet ring on the lane's interface, for the lane's address and port, sending the
    /// lane's type of service. `udp` is the node's UDP socket on the same port, kept bound
    /// (the kernel's own stack sees every lane datagram too: without it each would draw an
    /// ICMP port unreachable) and dropping all it receives; the loop sends through it only to
    /// make the kernel resolve a destination the ring finds no hardware address for.
    Packet {
        /// The ring.
        ring: Box<AfPacketSocket>,
        /// The UDP socket bound on the lane port.
        udp: UdpSocket,
    },
}

/// Why a datagram was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendError {
    /// The ring has no hardware address for the destination (yet).
    NeighbourUnknown,
    /// Anything else.
    Other,
}

/// The loop's use of its [`LaneSocket`]; `batch` is the UDP socket's system-call batch (made
/// once per loop; the ring needs none).
impl LaneSocket {
    fn send(&mut self, batch: &mut MmsgBatch, payload: &[u8], to: SocketAddr) -> Result<(), SendError> {
        match self {
            Self::Udp(socket) => match batch.send(socket, &[payload], Some(to)) {
                Ok(1) => Ok(()),
                _ => Err(SendError::Other),
            },
            Self::Packet { ring, udp } => {
                let SocketAddr::V4(to4) = to else { return Err(SendError::Other) };
                match ring.send_to(to4, payload) {
                    Ok(()) => Ok(()),
                    Err(AfPacketError::NeighbourUnknown { .. }) => {
                        // Resolved lazily: an empty datagram through the kernel makes it ARP
                        // (a lane loop drops it, not a lane packet); a later send finds the
                        // entry.
                        let _ = udp.send_to(&[], to);
                        Err(SendError::NeighbourUnknown)
                    }
                    Err(_) => Err(SendError::Other),
                }
            }
        }
    }

    fn wait_readable(&self, timeout: Duration) {
        match self {
            Self::Udp(socket) => {
                let _ = kairos_sys::net::poll::wait_readable(socket, timeout);
            }
            Self::Packet { ring, .. } => {
                let _ = ring.wait_readable(timeout);
            }
        }
    }

    /// Reads up to [`RX_BURST`] datagrams into `rx`'s slots, their lengths and receive stamps
    /// into `lengths` and `stamps`; returns how many.
    fn receive(
        &mut self,
        batch: &mut MmsgBatch,
        rx: &mut [u8],
        lengths: &mut [usize; RX_BURST],
        stamps: &mut [u64; RX_BURST],
    ) -> usize {
        match self {
            Self::Udp(socket) => {
                let mut areas = rx.chunks_mut(RX_SLOT);
                let mut buffers: [&mut [u8]; RX_BURST] =
                    std::array::from_fn(|_| areas.next().expect("the receive area holds RX_BURST slots"));
                let got = batch.recv_into(socket, &mut buffers, true).unwrap_or(0);
                for i in 0..got {
                    lengths[i] = batch.lengths()[i];
                    stamps[i] = batch.rx_timestamps_ns()[i].unwrap_or_else(realtime_ns);
                }
                got
            }
            Self::Packet { ring, .. } => {
                let mut got = 0;
                // Up to RX_BURST frames looked at: frames of other flows leave fewer datagrams
                // and end this pass's reading early; the next pass reads on.
                ring.recv_burst(RX_BURST, |_, payload, rx_ns| {
                    // Longer than a slot is no lane packet: cut, as recvmmsg cuts it, and
                    // dropped by the parse.
                    let len = payload.len().min(RX_SLOT);
                    rx[got * RX_SLOT..got * RX_SLOT + len].copy_from_slice(&payload[..len]);
                    lengths[got] = len;
                    stamps[got] = rx_ns;
                    got += 1;
                });
                got
            }
        }
    }
}

/// What the control thread tells the lane loop.
#[derive(Debug)]
pub enum LaneCommand {
    /// A notice of the controller (grants, changes, ends).
    Notice(ToNode),
    /// The controller's view after a (re)connection.
    Welcome(Welcome),
    /// A granted tunnel's outbox and where its packets go.
    Outbox {
        /// The tunnel.
        tunnel_id: TunnelId,
        /// Its outbox.
        outbox: OutboxConsumer,
        /// The receivers' nodes.
        destinations: Vec<SocketAddr>,
    },
    /// A new application's inbox.
    Inbox {
        /// The application's number at this node.
        app: u64,
        /// Its inbox.
        inbox: InboxProducer,
        /// Its doorbell, rung after each receive pass that delivered to the inbox.
        bell: Option<Bell>,
    },
    /// An application listens to the tunnels named `name`.
    Listen {
        /// The application.
        app: u64,
        /// The tunnels' name.
        name: String,
    },
    /// An application is gone: drop its inbox and listening.
    AppGone {
        /// The application.
        app: u64,
    },
}

/// What the loop counted, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LaneCounts {
    /// Packets sent (one per destination).
    pub packets_sent: u64,
    /// Datagrams the socket did not take.
    pub send_errors: u64,
    /// Of those, datagrams the packet ring had no hardware address for (it resolves later).
    pub neighbour_unknown: u64,
    /// Messages sent.
    pub messages_sent: u64,
    /// Messages dropped at the sender as excess.
    pub excess_messages: u64,
    /// Messages dropped at the sender because the loop could not send them in time (releases
    /// missed, beyond the one period's backlog it carries): within their grant, not excess.
    pub late_messages: u64,
    /// Datagrams received.
    pub packets_received: u64,
    /// Received packets dropped whole (bad header, truncated, not a lane packet; the peers'
    /// empty datagrams are not counted).
    pub packets_dropped: u64,
    /// Messages delivered into inboxes.
    pub messages_delivered: u64,
    /// Messages for tunnels no application here listens to.
    pub messages_unclaimed: u64,
    /// Messages an inbox refused (its application reads too slowly).
    pub inbox_refused: u64,
    /// Releases the loop was late for and missed.
    pub releases_missed: u64,
    /// Each tunnel this node sent on, with what its policer counted.
    pub tunnels: Vec<TunnelCounts>,
}

/// The lane loop's fixed settings.
#[derive(Debug, Clone)]
pub struct LaneSettings {
    /// The chunk schema of sent packets.
    pub schema: Schema,
    /// How to wait for packets.
    pub receive: ReceiveMode,
    /// How long before a release the loop stops sleeping and spins, ns.
    pub spin_ns: u64,
}

struct Outbox {
    outbox: OutboxConsumer,
    destinations: Vec<SocketAddr>,
    seq: u64,
    carry: Carry,
}

/// What a tunnel's application queued beyond the packet of one release, kept for the next: an
/// application pacing itself at its grant lands two messages in one period now and then, and
/// none in the next. It holds at most `limit` chunks, what two packets carry (the release's and
/// one carried); past them the oldest go (the freshest information is what a periodic sender
/// wants through). Counted in chunks, not bytes: bytes let a carry of small messages hold
/// several periods' worth (five 12-byte readings where a 64-byte packet carries one), a backlog
/// an application at its rate never works off, so every stall of the loop or of the
/// application made each later message older, until the carry overflowed and a paced sender's
/// oldest message was dropped. Messages are stored as `length (u16 LE) | bytes`, in a buffer
/// made once.
#[derive(Debug)]
struct Carry {
    schema: Schema,
    bytes: Vec<u8>,
    used: usize,
    /// Chunks the held messages take.
    chunks: usize,
    limit: usize,
}

/// What the carry dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Dropped {
    /// Messages.
    messages: u64,
    /// The chunks they took.
    chunks: usize,
}

impl Dropped {
    fn add(&mut self, other: Dropped) {
        self.messages += other.messages;
        self.chunks += other.chunks;
    }
}

impl Carry {
    /// A carry of at most `limit` chunks of `schema`.
    fn new(schema: Schema, limit: usize) -> Self {
        // Every message takes a chunk at least: `limit` of them, each with its length.
        let capacity = limit * (schema.message_bytes_per_chunk() + 2);
        Self { schema, bytes: vec![0; capacity], used: 0, chunks: 0, limit }
    }

    /// Keeps `message`, dropping the oldest kept ones until it fits; a message over the limit
    /// alone is not kept (the caller drops what no packet can carry before this).
    fn push(&mut self, message: &[u8]) -> Dropped {
        let need = self.schema.chunks_for(message.len());
        if need > self.limit {
            return Dropped { messages: 1, chunks: need };
        }
        let dropped = self.keep_at_most(self.limit - need);
        self.bytes[self.used..self.used + 2].copy_from_slice(&(message.len() as u16).to_le_bytes());
        self.bytes[self.used + 2..self.used + 2 + message.len()].copy_from_slice(message);
        self.used += 2 + message.len();
        self.chunks += need;
        dropped
    }

    /// Drops the oldest until at most `chunks` chunks are held.
    fn keep_at_most(&mut self, chunks: usize) -> Dropped {
        let mut dropped = Dropped::default();
        while self.chunks > chunks && self.used > 0 {
            dropped.add(Dropped { messages: 1, chunks: self.pop_front() });
        }
        dropped
    }

    fn front(&self) -> Option<&[u8]> {
        let len =
            u16::from_le_bytes(self.bytes.get(..2).filter(|_| self.used > 0)?.try_into().ok()?) as usize;
        Some(&self.bytes[2..2 + len])
    }

    /// Removes the oldest message; returns the chunks it took (0: none held).
    fn pop_front(&mut self) -> usize {
        let Some(len) = self.front().map(<[u8]>::len) else { return 0 };
        self.bytes.copy_within(2 + len..self.used, 0);
        self.used -= 2 + len;
        let chunks = self.schema.chunks_for(len);
        self.chunks -= chunks;
        chunks
    }
}

/// The loop's state; [`LaneLoop::run`] drives it.
pub struct LaneLoop {
    settings: LaneSettings,
    socket: LaneSocket,
    batch: MmsgBatch,
    tunnels: NodeTunnels,
    outboxes: HashMap<TunnelId, Outbox>,
    inboxes: HashMap<u64, (InboxProducer, Option<Bell>)>,
    /// The applications delivered to in this receive pass, whose doorbells ring at its end.
    delivered_to: Vec<u64>,
    /// Tunnel name -> the applications listening to it.
    listeners: HashMap<String, Vec<u64>>,
    /// Receiving tunnel -> its name.
    names: HashMap<TunnelId, String>,
    commands: Receiver<LaneCommand>,
    reports: Sender<ToController>,
    wake_control: Box<dyn Fn() + Send>,
    counts: LaneCounts,
    packet: Vec<u8>,
    message: Vec<u8>,
    /// `RX_BURST` receive slots of `RX_SLOT` bytes.
    rx: Vec<u8>,
}

impl std::fmt::Debug for LaneLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneLoop").field("counts", &self.counts).finish_non_exhaustive()
    }
}

/// Datagrams read per receive call.
const RX_BURST: usize = 16;
/// Bytes of each datagram's receive slot (an MTU's payload fits).
const RX_SLOT: usize = 2048;

impl LaneLoop {
    /// A loop over `socket` for the node of
    /// `host`, taking commands from `commands`, sending reports to `reports` and calling
    /// `wake_control` after each.
    pub fn new(
        host: &str,
        settings: LaneSettings,
        socket: LaneSocket,
        report_every: Duration,
        commands: Receiver<LaneCommand>,
        reports: Sender<ToController>,
        wake_control: Box<dyn Fn() + Send>,
    ) -> Self {
        Self {
            settings,
            socket,
            batch: MmsgBatch::new(),
            tunnels: NodeTunnels::new(host, report_every.as_nanos().min(u64::MAX as u128) as u64),
            outboxes: HashMap::new(),
            inboxes: HashMap::new(),
            delivered_to: Vec::new(),
            listeners: HashMap::new(),
            names: HashMap::new(),
            commands,
            reports,
            wake_control,
            counts: LaneCounts::default(),
            packet: vec![0; UDP_IPV4_PAYLOAD_BYTES],
            message: vec![0; 1 << 16],
            rx: vec![0; RX_BURST * RX_SLOT],
        }
    }

    /// Runs until `stop` is raised; returns what it counted.
    pub fn run(mut self, stop: &AtomicBool) -> LaneCounts {
        while !stop.load(Ordering::Relaxed) {
            self.commands();
            let now = realtime_ns();
            while let Some(release) = self.tunnels.due(now) {
                self.counts.releases_missed += release.missed;
                self.release(release.tunnel_id, release.packet_bytes);
            }
            self.receive();
            let reports = self.tunnels.reports(now);
            if !reports.is_empty() {
                for r in reports {
                    let _ = self.reports.send(r);
                }
                (self.wake_control)();
            }
            self.wait();
        }
        self.counts.tunnels = self.tunnels.counts();
        self.counts
    }

    /// Waits for the next packet or release (or a little while, to see commands and `stop`).
    fn wait(&mut self) {
        let now = realtime_ns();
        let next = self.tunnels.next_release_ns().unwrap_or(u64::MAX).min(now + 1_000_000);
        if next <= now {
            return;
        }
        match self.settings.receive {
            ReceiveMode::Spin => std::hint::spin_loop(),
            ReceiveMode::Sleep | ReceiveMode::SleepOnly => {
                let spin =
                    if self.settings.receive == ReceiveMode::Sleep { self.settings.spin_ns } else { 0 };
                let sleep = (next - now).saturating_sub(spin);
                if sleep > 0 {
                    self.socket.wait_readable(Duration::from_nanos(sleep));
                }
            }
        }
    }

    fn commands(&mut self) {
        while let Ok(c) = self.commands.try_recv() {
            let now = realtime_ns();
            match c {
                LaneCommand::Notice(n) => {
                    match &n {
                        ToNode::Opened { tunnel, .. } => {
                            self.names.insert(tunnel.tunnel_id, tunnel.name.clone());
                        }
                        ToNode::Released { tunnel_id } | ToNode::Terminated { tunnel_id } => {
                            self.names.remove(tunnel_id);
                            self.outboxes.remove(tunnel_id);
                        }
                        _ => {}
                    }
                    self.tunnels.apply(&n, now);
                }
                LaneCommand::Welcome(w) => {
                    self.tunnels.reconcile(&w, now);
                    self.names = w
                        .tunnels
                        .iter()
                        .filter(|t| t.sender != w.host)
                        .map(|t| (t.tunnel_id, t.name.clone()))
                        .collect();
                    let sending: Vec<TunnelId> = self.tunnels.sending().map(|(t, _)| t.tunnel_id).collect();
                    self.outboxes.retain(|id, _| sending.contains(id));
                }
                LaneCommand::Outbox { tunnel_id, outbox, destinations } => {
                    self.outboxes.insert(
                        tunnel_id,
                        Outbox { outbox, destinations, seq: 0, carry: Carry::new(self.settings.schema, 0) },
                    );
                }
                LaneCommand::Inbox { app, inbox, bell } => {
                    self.inboxes.insert(app, (inbox, bell));
                }
                LaneCommand::Listen { app, name } => {
                    let apps = self.listeners.entry(name).or_default();
                    if !apps.contains(&app) {
                        apps.push(app);
                    }
                }
                LaneCommand::AppGone { app } => {
                    self.inboxes.remove(&app);
                    for apps in self.listeners.values_mut() {
                        apps.retain(|&a| a != app);
                    }
                }
            }
        }
    }

    /// Sends one packet of the tunnel's queued messages; what the policer finds beyond the
    /// grant is dropped as excess, and what the carry cannot hold beyond one more packet is
    /// dropped as late.
    fn release(&mut self, tunnel_id: TunnelId, packet_bytes: u64) {
        let Some(out) = self.outboxes.get_mut(&tunnel_id) else { return };
        let Ok(tunnel) = u32::try_from(tunnel_id) else { return };
        let room = (packet_bytes as usize).min(self.packet.len());
        let schema = self.settings.schema;
        let per_packet = schema.max_chunks(room);
        // One packet now and one carried: what a paced application can have queued.
        let keep = 2 * per_packet;
        if out.carry.limit != keep || out.carry.schema != schema {
            out.carry = Carry::new(schema, keep);
        }
        let mut offered = Offered::default();
        let (mut chunks, mut too_large, mut dropped) = (0usize, 0u64, Dropped::default());
        while let Ok(Some(got)) = out.outbox.try_recv(&mut self.message) {
            let need = schema.chunks_for(got.len);
            chunks += need;
            offered.messages += 1;
            offered.bytes += got.len as u64;
            offered.max_message = offered.max_message.max(schema.packet_bytes(need) as u64);
            if need > per_packet {
                // Larger than the granted packet holds: no release can carry it.
                too_large += 1;
                continue;
            }
            dropped.add(out.carry.push(&self.message[..got.len]));
        }
        // The time of the read is taken after it, not the pass's: every message taken was in
        // the outbox by then. A loop preempted between its clock read and this read (2.2 ms
        // once, here) otherwise charged the application the messages of that time without its
        // credit.
        let read_ns = realtime_ns();
        // Packets of the grant's size the offered messages need, at the chunks one holds.
        offered.packets = chunks.div_ceil(per_packet.max(1)) as u64;
        let beyond = self.tunnels.offered(tunnel_id, offered, read_ns);
        if beyond > 0 {
            // Beyond the grant: the policer's count goes, the oldest first, whatever the carry
            // had room for.
            let owed = (beyond as usize).saturating_mul(per_packet).saturating_sub(dropped.chunks);
            dropped.add(out.carry.keep_at_most(out.carry.chunks.saturating_sub(owed)));
        }
        // Stamped as it is built, just before its send: a packet released after others in the
        // same pass (or a receiver after others of a fan-out) is not charged their sends.
        let header = Header { schema: self.settings.schema, tunnel, seq: out.seq, sent_ns: realtime_ns() };
        let mut sent = 0u64;
        if let Ok(mut encoder) = Encoder::new(header, &mut self.packet[..room]) {
            while let Some(m) = out.carry.front() {
                if encoder.push(m).is_err() {
                    if encoder.chunks() == 0 {
                        // The packet cannot hold it after all: it would block the others behind
                        // it for good.
                        out.carry.pop_front();
                        too_large += 1;
                        continue;
                    }
                    break;
                }
                out.carry.pop_front();
                sent += 1;
            }
            if encoder.chunks() > 0 {
                let len = encoder.finish();
                out.seq += 1;
                for &to in &out.destinations {
                    match self.socket.send(&mut self.batch, &self.packet[..len], to) {
                        Ok(()) => self.counts.packets_sent += 1,
                        Err(e) => {
                            self.counts.send_errors += 1;
                            self.counts.neighbour_unknown += u64::from(e == SendError::NeighbourUnknown);
                        }
                    }
                }
            }
        }
        let settled = if beyond > 0 {
            Settled { sent, excess: too_large + dropped.messages, late: 0 }
        } else {
            Settled { sent, excess: too_large, late: dropped.messages }
        };
        self.counts.messages_sent += settled.sent;
        self.counts.excess_messages += settled.excess;
        self.counts.late_messages += settled.late;
        self.tunnels.settled(tunnel_id, settled);
    }

    /// Reads what arrived and delivers its messages.
    fn receive(&mut self) {
        let mut lengths = [0usize; RX_BURST];
        let mut stamps = [0u64; RX_BURST];
        loop {
            let got = self.socket.receive(&mut self.batch, &mut self.rx, &mut lengths, &mut stamps);
            self.counts.packets_received += got as u64;
            for i in 0..got {
                self.deliver(i, lengths[i], stamps[i]);
            }
            if got < RX_BURST {
                break;
            }
        }
        // One ring an application a pass, after everything of the pass is in its inbox.
        for app in self.delivered_to.drain(..) {
            if let Some((_, Some(bell))) = self.inboxes.get(&app) {
                bell.ring();
            }
        }
    }

    /// Delivers the intact messages of received datagram `i` to their listeners' inboxes.
    fn deliver(&mut self, i: usize, len: usize, rx_ns: u64) {
        // An empty datagram is a peer node asking whether this one is up, or timing its send
        // calls (`agent::peer_sends`): expected, not a lane packet, and not a drop.
        if len == 0 {
            return;
        }
        let Ok(packet) = Packet::parse(&self.rx[i * RX_SLOT..i * RX_SLOT + len]) else {
            self.counts.packets_dropped += 1;
            return;
        };
        let header = packet.header();
        let tunnel_id = TunnelId::from(header.tunnel);
        let listeners = self.names.get(&tunnel_id).and_then(|name| self.listeners.get(name));
        let Some(apps) = listeners.filter(|a| !a.is_empty()) else {
            // Nobody here listens: counted, not copied.
            self.counts.messages_unclaimed += packet.messages().count() as u64;
            return;
        };
        self.message[..8].copy_from_slice(&tunnel_id.to_le_bytes());
        self.message[8..INBOX_HEADER_BYTES].copy_from_slice(&header.sent_ns.to_le_bytes());
        for m in packet.messages() {
            let Ok(n) = m.copy_to(&mut self.message[INBOX_HEADER_BYTES..]) else { continue };
            for app in apps {
                let Some((inbox, _)) = self.inboxes.get_mut(app) else { continue };
                match inbox.try_send(&self.message[..INBOX_HEADER_BYTES + n], rx_ns) {
                    Ok(()) => {
                        self.counts.messages_delivered += 1;
                        if !self.delivered_to.contains(app) {
                            self.delivered_to.push(*app);
                        }
                    }
                    Err(_) => self.counts.inbox_refused += 1,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Carry, Dropped, Schema};

    #[test]
    fn the_carry_keeps_the_newest_within_its_chunks() {
        // HD-6 chunks carry 22 message bytes: 4 chunks hold two 30-byte messages, or four short.
        let mut c = Carry::new(Schema::Hd6, 4);
        assert_eq!(c.push(&[1; 30]), Dropped::default());
        assert_eq!(c.push(&[2; 30]), Dropped::default());
        assert_eq!(c.push(b"ij"), Dropped { messages: 1, chunks: 2 }, "the oldest goes");
        assert_eq!(c.front(), Some(&[2; 30][..]));
        assert_eq!(c.pop_front(), 2);
        assert_eq!(c.front(), Some(&b"ij"[..]));
        assert_eq!(
            c.push(&[0; 5 * 22]),
            Dropped { messages: 1, chunks: 5 },
            "over the limit: dropped itself"
        );
        for m in [b"k", b"l", b"m"] {
            assert_eq!(c.push(m), Dropped::default(), "short messages take a chunk each");
        }
        assert_eq!(c.push(b"n"), Dropped { messages: 1, chunks: 1 });
        assert_eq!(c.keep_at_most(1), Dropped { messages: 3, chunks: 3 });
        assert_eq!(c.front(), Some(&b"n"[..]));
        c.pop_front();
        assert_eq!((c.front(), c.chunks, c.used), (None, 0, 0));
    }
}

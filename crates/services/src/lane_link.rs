//! A member's Raft messages and heartbeats on the express lane: the member is an application
//! of its host's lane node ([`kairos_lane::node::app::LaneApp`]) with a tunnel of its own to
//! every other member's host (`kv-lane-` and a mark of the cluster's membership), and it
//! listens to the other members' tunnels of that name.
//!
//! One tunnel, released once a detector period: each release carries this member's newest
//! heartbeat to each other member (each with the commit index its receiver may take, so the
//! commit rides the heartbeats) and, in the rest of the packet, Raft's messages, cut by
//! [`crate::frame`] into fragments a packet holds. A tunnel of its own for the log, at
//! a shorter period, was tried first: on a machine whose cores the nodes share, every release
//! is a timed wake-up of a node, and the short period's releases starved the members; and a
//! log tunnel idle between bursts is re-planned by the controller to the period it used (its
//! unused room given back), which a burst then cannot use. The heartbeats keep this tunnel
//! busy every period, as the lane expects.
//!
//! A tunnel reaches every other member, so each message starts with its kind and the member it
//! is for; the others drop it. Sending is no system call (an outbox bridge), nor is receiving
//! (the inbox bridge): the node rings the inbox's doorbell (a named pipe the member polls
//! beside its clients) after each receive pass that delivered to it, so a sleeping member wakes
//! when a message lands rather than on a timer. A heartbeat's time is the kernel's receive
//! stamp of its packet.
//!
//! Pacing: the node sends one packet a release and carries at most one more; what an
//! application hands beyond that is excess, dropped, and reported to the controller, which
//! ends a tunnel that keeps exceeding its grant. So nothing goes to the outbox until the node
//! has emptied it, and then one packet's worth: the pending heartbeats first (only the newest
//! for each member is kept: an older one is no news), then Raft's fragments in order. This is
//! clocked by the node's real releases (a node that sleeps releases late, and a clock of our
//! own would overrun it), so a burst (a snapshot, a follower catching up) drains at the
//! tunnel's rate instead of being cut. Beyond [`MAX_QUEUED_BYTES`] the oldest Raft messages
//! are dropped whole, as a lossy network would; Raft sends them again (the member sizes Raft's
//! appends and their number in flight to the tunnel, so this is rare).
//!
//! The failure detector's members on the lane (`kairos_fd::member`) use the same link with a
//! tunnel name of their own: their heartbeats as heartbeats, SWIM's datagrams as queued
//! messages.
//!
//! Contract: nothing is sent before the grant takes effect; the outbox never holds more than
//! one packet's worth, so the node never drops a message as excess; the queue is bounded; a
//! change of the grant is followed, and a tunnel the controller ends is asked for again.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use kairos_lane::node::app::{AppError, LaneApp, NodeToApp, Tunnel};
use kairos_lane::service::wire::TunnelSpec;

use crate::peer::PeerAddr;

mod wire;

use wire::{KIND_BEAT, KIND_MESSAGE, LANE_HEADER_BYTES, Packing};
pub use wire::{LaneMessage, parse_lane_message};

/// What every member's tunnel name starts with; [`tunnel_name`] adds the cluster's mark.
pub const LANE_TUNNEL: &str = "kv-lane";
/// The most Raft bytes waiting for the tunnel before the oldest are dropped.
pub const MAX_QUEUED_BYTES: usize = 8 << 20;
/// The largest packet a tunnel asks for: a UDP datagram in a 1500-byte MTU.
pub const MAX_PACKET_BYTES: u64 = 1_472;
/// The longest beat the link makes room for beside Raft's fragments: the failure detector's
/// longest heartbeat (magic, kind and seven varints, a replica's, of at most 10 bytes), which
/// the detector's wire checks its own bound against.
pub const MAX_BEAT_BYTES: usize = 3 + 7 * 10;
/// How long the node may take to answer a request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the node's events (a changed or ended grant) are looked for, ns.
const EVENTS_EVERY_NS: u64 = 10_000_000;
/// How long a request for a lost tunnel may wait for the node's answer.
const RETRY_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a change of receivers may wait for the node's answer, ns.
const CHANGE_TIMEOUT_NS: u64 = 1_000_000_000;

/// What the link asks of the lane.
#[derive(Debug, Clone)]
pub struct LaneLinkConfig {
    /// The host's lane node (its directory, where its socket is).
    pub node_dir: PathBuf,
    /// The tunnel's period: the detector's (or the loop's, without one).
    pub period: Duration,
    /// The tunnel's packet, bytes (at most [`MAX_PACKET_BYTES`]).
    pub packet_bytes: u64,
}

impl LaneLinkConfig {
    /// Refuses what no lane grants, or what leaves no room for the heartbeats and a fragment.
    pub fn check(&self, members: usize) -> Result<(), LaneLinkConfigError> {
        let least = Packing::least_packet_bytes(members);
        if !(least..=MAX_PACKET_BYTES).contains(&self.packet_bytes) {
            return Err(LaneLinkConfigError::PacketBytes { packet_bytes: self.packet_bytes, least, members });
        }
        if self.period.is_zero() {
            return Err(LaneLinkConfigError::ZeroPeriod);
        }
        Ok(())
    }
}

/// What no lane grants, or what leaves no room for the heartbeats and a fragment
/// ([`LaneLinkConfig::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneLinkConfigError {
    /// The packet is smaller than the heartbeats and a fragment need, or larger than
    /// [`MAX_PACKET_BYTES`].
    #[error(
        "the lane packet of {packet_bytes} bytes is out of range: {least} (heartbeats for {} other members and a fragment) to {MAX_PACKET_BYTES}",
        .members.saturating_sub(1)
    )]
    PacketBytes {
        /// The packet asked for, bytes.
        packet_bytes: u64,
        /// The smallest packet that holds the heartbeats and a fragment, bytes.
        least: u64,
        /// The members of the group, this one included.
        members: usize,
    },
    /// A period of zero.
    #[error("a lane tunnel's period must be above zero")]
    ZeroPeriod,
}

/// Why the link could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LaneLinkError {
    /// The node refused, failed or did not answer.
    #[error("the lane node in {dir}: {source}")]
    App {
        /// The node's directory.
        dir: PathBuf,
        /// What went wrong.
        source: AppError,
    },
    /// The settings or the members do not make a link.
    #[error("{0}")]
    Config(String),
}

/// The link's counts, for INFO (and a detector member's report).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct LaneLinkStats {
    /// Packets' worth handed to the node (one per release at most).
    pub packets_out: u64,
    /// Raft fragments handed to the node.
    pub fragments_out: u64,
    /// Raft fragments received for this member.
    pub fragments_in: u64,
    /// Messages for other members, dropped on arrival.
    pub not_ours: u64,
    /// Raft messages dropped whole because the queue was full (or no longer fit the grant).
    pub queue_dropped: u64,
    /// Raft messages too large to send (see [`LaneLink::note_too_large`]).
    pub too_large: u64,
    /// Errors of the node's control socket, and requests for a lost tunnel that failed.
    pub node_errors: u64,
    /// Heartbeats replaced by a newer one before a release took them.
    pub beats_replaced: u64,
    /// Messages the outbox refused (never expected: only an empty outbox is given any).
    pub outbox_refused: u64,
    /// Lane messages that did not parse.
    pub malformed: u64,
    /// Changes of the grant followed.
    pub grant_changes: u64,
    /// Times the tunnel was lost (ended by the controller) and asked for again.
    pub tunnels_lost: u64,
    /// Times the tunnel was given new receivers (a change of membership).
    pub receiver_changes: u64,
    /// Raft messages received whose times are summed below.
    pub timed: u64,
    /// From being handed to the link at the sender to its packet's release, summed, ns.
    pub release_wait_ns: u64,
    /// From the release to the kernel's receive stamp at the receiving node, summed, ns.
    pub wire_ns: u64,
    /// From the receive stamp to this member's read of its inbox, summed, ns.
    pub inbox_wait_ns: u64,
}

/// What arrived for this member.
#[derive(Debug)]
pub enum Incoming<'a> {
    /// A queued message: a Raft fragment ([`crate::frame`]) in the store, a SWIM
    /// datagram in a detector's member.
    Message(&'a [u8]),
    /// A detector datagram and its packet's kernel receive stamp, wall-clock ns.
    Beat(&'a [u8], u64),
}

/// A member's lane transport; see the module docs.
#[derive(Debug)]
pub struct LaneLink {
    app: LaneApp,
    tunnel: Tunnel,
    spec: TunnelSpec,
    packing: Packing,
    period_ns: u64,
    /// Lane messages (header and fragment) waiting for the tunnel, oldest first, each with the
    /// number of the Raft message it is a fragment of.
    queue: VecDeque<(u64, Vec<u8>)>,
    queued_bytes: usize,
    /// The newest heartbeat for each member not yet handed to the node.
    beats: BTreeMap<u64, Vec<u8>>,
    /// When to look at the outbox again while something waits, wall-clock ns.
    next_look_ns: u64,
    /// When to look for the node's events next, wall-clock ns.
    next_events_ns: u64,
    /// Whether the tunnel is to be asked for again (the controller ended it).
    lost: bool,
    /// A changed grant and when it takes effect, wall-clock ns.
    pending_grant: Option<(kairos_lane::service::wire::Grant, u64)>,
    /// When a lost tunnel may next be asked for, wall-clock ns.
    next_request_ns: u64,
    /// Receivers a change of membership asked for that the node has not granted yet.
    wanted_receivers: Option<Vec<String>>,
    /// A change of receivers asked for: its reference, the tunnel asked for, and when to give
    /// up waiting for the answer (wall-clock ns).
    changing: Option<(u64, TunnelSpec, u64)>,
    /// A fragment's share of the encoded message, so a fragment and its headers fill a packet.
    fragment_bytes: usize,
    buf: Vec<u8>,
    stats: LaneLinkStats,
}

impl LaneLink {
    /// Joins the node as application `app`, asks for the tunnel `name` to `others` (the other
    /// members' lane hosts) and listens to everyone's of that name. Blocks until the node
    /// answers (a few milliseconds; at most 5 s).
    pub fn join(
        app: &str,
        name: &str,
        others: &[String],
        config: &LaneLinkConfig,
    ) -> Result<Self, LaneLinkError> {
        config.check(others.len() + 1).map_err(|e| LaneLinkError::Config(e.to_string()))?;
        if others.is_empty() {
            return Err(LaneLinkError::Config("a member alone needs no lane: give it peers".into()));
        }
        let app_err = |source| LaneLinkError::App { dir: config.node_dir.clone(), source };
        let mut app = LaneApp::connect(&config.node_dir, app, REQUEST_TIMEOUT).map_err(app_err)?;
        if others.iter().any(|h| h == app.host()) {
            return Err(LaneLinkError::Config(format!(
                "another member is on this member's lane host {}: the lane carries messages between hosts, so put \
                 each member on a host of its own",
                app.host()
            )));
        }
        app.listen(name).map_err(app_err)?;
        let spec = TunnelSpec {
            name: name.into(),
            receivers: others.to_vec(),
            packet_bytes: config.packet_bytes,
            period_ps: config.period.as_nanos() as u64 * 1_000,
            sublane: 0,
        };
        let tunnel = app.request(spec.clone(), REQUEST_TIMEOUT).map_err(app_err)?;
        let mut link = Self {
            app,
            packing: Packing { packet_bytes: 0 },
            period_ns: 1,
            next_look_ns: tunnel.send_from_ns,
            tunnel,
            spec,
            queue: VecDeque::new(),
            queued_bytes: 0,
            beats: BTreeMap::new(),
            next_events_ns: 0,
            pending_grant: None,
            next_request_ns: 0,
            wanted_receivers: None,
            changing: None,
            lost: false,
            fragment_bytes: 0,
            buf: vec![0; 1 << 16],
            stats: LaneLinkStats::default(),
        };
        link.follow_grant();
        if link.fragment_bytes == 0 {
            return Err(LaneLinkError::Config(format!(
                "the lane granted packets of {} bytes: too small for the heartbeats and a fragment",
                link.tunnel.grant.packet_bytes
            )));
        }
        Ok(link)
    }

    /// Joins as application `app` for member `me` of the group `peers` (all lane hosts, one
    /// member a host): the tunnel `name` to the other members' hosts, from the node in
    /// `config`, which must be on `me`'s host.
    pub fn join_group(
        app: &str,
        name: &str,
        me: u64,
        peers: &BTreeMap<u64, PeerAddr>,
        config: &LaneLinkConfig,
    ) -> Result<Self, LaneLinkError> {
        let others = other_hosts(me, peers).map_err(|e| LaneLinkError::Config(e.to_string()))?;
        let link = Self::join(app, name, &others, config)?;
        let own = peers.get(&me).and_then(PeerAddr::lane_host);
        if own != Some(link.host()) {
            return Err(LaneLinkError::Config(format!(
                "member {me} is on lane host {}, but the node in {} is on {}",
                own.unwrap_or("?"),
                config.node_dir.display(),
                link.host()
            )));
        }
        Ok(link)
    }

    /// Takes the tunnel's grant as it stands: a fragment is cut to what a packet holds beside
    /// a heartbeat for every other member.
    fn follow_grant(&mut self) {
        let g = self.tunnel.grant;
        self.packing = Packing { packet_bytes: g.packet_bytes as usize };
        self.fragment_bytes = self.packing.fragment_bytes(self.spec.receivers.len());
        self.period_ns = g.period_ps.div_ceil(1_000).max(1);
    }

    /// The granted period, ns.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// The tunnels' name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether the grant's packet holds heartbeats for a group of `members` and a fragment.
    pub fn carries(&self, members: usize) -> bool {
        self.packing.fragment_bytes(members.saturating_sub(1)) > 0
    }

    /// Sends to `hosts` from now on (the members' hosts after a change of membership): the
    /// node is asked for the tunnel with the new receivers in place of the old one, which
    /// keeps sending until the new one's first release, and the loop goes on: the answer is
    /// taken with the node's events. If the node refuses or does not answer within
    /// `CHANGE_TIMEOUT_NS`, the old tunnel goes on as it was and the change is asked for
    /// again, at most once a second, until it is granted or another change replaces it. No
    /// receivers (a member alone) keeps the tunnel as it is.
    pub fn set_receivers(&mut self, hosts: Vec<String>) {
        if self.changing.is_some() {
            // After the change under way is answered.
            self.wanted_receivers = Some(hosts);
            return;
        }
        self.wanted_receivers = None;
        let Some(spec) = self.spec_to(hosts) else { return };
        let now = kairos_sys::clock::realtime_ns();
        match self.app.change_later(&self.tunnel, spec.clone()) {
            Ok(app_ref) => self.changing = Some((app_ref, spec, now + CHANGE_TIMEOUT_NS)),
            Err(_) => self.change_failed(spec.receivers, now),
        }
    }

    /// The tunnel to `hosts` in place of this one, unless there is nothing to change.
    fn spec_to(&self, hosts: Vec<String>) -> Option<TunnelSpec> {
        (!hosts.is_empty() && hosts != self.spec.receivers)
            .then(|| TunnelSpec { receivers: hosts, ..self.spec.clone() })
    }

    /// Sends on `tunnel`, granted for `spec`, from now on.
    fn take_receivers(&mut self, tunnel: Tunnel, spec: TunnelSpec) {
        self.tunnel = tunnel;
        self.spec = spec;
        self.pending_grant = None;
        self.stats.receiver_changes += 1;
        self.follow_grant();
    }

    /// Whether a change of receivers waits for the node's answer.
    pub fn changing_receivers(&self) -> bool {
        self.changing.is_some()
    }

    fn change_failed(&mut self, hosts: Vec<String>, now_ns: u64) {
        self.stats.node_errors += 1;
        if self.wanted_receivers.is_none() {
            self.wanted_receivers = Some(hosts);
        }
        self.next_request_ns = self.next_request_ns.max(now_ns + 1_000_000_000);
    }

    /// Asks the node once for the tunnel with receivers `hosts` in place of the old one, as
    /// [`LaneLink::set_receivers`] does, but waits at most `RETRY_TIMEOUT` for the answer
    /// (for a command that must say whether the lane takes a host). A refusal (a host the
    /// lane does not have) or no answer leaves the old tunnel as it was, and is returned.
    pub fn try_receivers(&mut self, hosts: Vec<String>) -> Result<(), AppError> {
        let Some(spec) = self.spec_to(hosts) else { return Ok(()) };
        match self.app.change(&self.tunnel, spec.clone(), RETRY_TIMEOUT) {
            Ok(tunnel) => {
                self.take_receivers(tunnel, spec);
                Ok(())
            }
            Err(e) => {
                self.stats.node_errors += 1;
                Err(e)
            }
        }
    }

    /// The encoded message's bytes one fragment carries.
    pub fn fragment_bytes(&self) -> usize {
        self.fragment_bytes
    }

    /// The node's host.
    pub fn host(&self) -> &str {
        self.app.host()
    }

    /// The tunnel's grant in words.
    pub fn describe(&self) -> String {
        let g = self.tunnel.grant;
        format!(
            "on the lane from {}: a tunnel to {} every {} us, {} bytes, latency {:.1}-{:.1} us",
            self.app.host(),
            self.spec.receivers.join(","),
            g.period_ps as f64 / 1e6,
            g.packet_bytes,
            g.min_latency_ps as f64 / 1e6,
            (g.min_latency_ps + g.max_jitter_ps) as f64 / 1e6
        )
    }

    /// The counts so far.
    pub fn stats(&self) -> LaneLinkStats {
        self.stats
    }

    fn framed(kind: u8, to: u64, handed_ns: u64, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(LANE_HEADER_BYTES + payload.len());
        m.push(kind);
        m.extend_from_slice(&to.to_le_bytes());
        m.extend_from_slice(&handed_ns.to_le_bytes());
        m.extend_from_slice(payload);
        m
    }

    /// Queues a message for member `to` (one of Raft's fragments, of message `number`; or a
    /// detector's datagram that is not a heartbeat), handed over at `now_ns` (wall-clock);
    /// [`LaneLink::flush`] hands it on, in order.
    pub fn queue_message(&mut self, number: u64, to: u64, fragment: &[u8], now_ns: u64) {
        let m = Self::framed(KIND_MESSAGE, to, now_ns, fragment);
        self.queued_bytes += m.len();
        self.queue.push_back((number, m));
        while self.queued_bytes > MAX_QUEUED_BYTES {
            self.drop_front_message();
        }
    }

    /// Drops the oldest Raft message's fragments that wait (the rest of a message whose first
    /// fragments went could never be put back together).
    fn drop_front_message(&mut self) {
        let Some(&(number, _)) = self.queue.front() else { return };
        while self.queue.front().is_some_and(|(n, _)| *n == number) {
            if let Some((_, m)) = self.queue.pop_front() {
                self.queued_bytes -= m.len();
            }
        }
        self.stats.queue_dropped += 1;
    }

    /// Counts a Raft message too large to cut into fragments (more than
    /// [`crate::frame::MAX_FRAGMENTS`] of them, or [`crate::frame::MAX_MESSAGE_BYTES`]): not sent.
    pub fn note_too_large(&mut self) {
        self.stats.too_large += 1;
    }

    /// Keeps a detector datagram for member `to`, made at `now_ns` (wall-clock), for the next
    /// packet, in place of an older one.
    pub fn send_beat(&mut self, to: u64, datagram: &[u8], now_ns: u64) {
        let m = Self::framed(KIND_BEAT, to, now_ns, datagram);
        if self.beats.insert(to, m).is_some() {
            self.stats.beats_replaced += 1;
        }
    }

    /// Hands the outbox the next packet's worth, if the node has taken everything handed
    /// before (`now_ns` wall-clock); follows the node's events now and then. Never fails: the
    /// node's errors are counted, and a lost tunnel is asked for again later.
    pub fn flush(&mut self, now_ns: u64) {
        if now_ns >= self.next_events_ns {
            self.next_events_ns = now_ns + EVENTS_EVERY_NS;
            self.events(now_ns);
        }
        if let Some((grant, at)) = self.pending_grant
            && now_ns >= at
        {
            self.pending_grant = None;
            self.tunnel.grant = grant;
            self.follow_grant();
        }
        if self.queue.is_empty() && self.beats.is_empty() {
            return;
        }
        if self.lost || now_ns < self.tunnel.send_from_ns || self.tunnel.queued() > 0 {
            // A quarter period: the release is seen at most that late.
            self.next_look_ns = now_ns.max(self.tunnel.send_from_ns) + self.period_ns / 4;
            return;
        }
        // The heartbeats, then the longest run of the queue that shares their packet.
        let mut room = self.packing.room();
        for m in self.beats.values() {
            room.take(m.len());
        }
        // A message that does not fit beside the heartbeats (a fragment cut for a larger
        // grant, or for fewer members, than now) would block the queue for good: dropped, as
        // a lossy network would, and counted.
        while let Some((_, m)) = self.queue.front()
            && !room.holds(m.len())
        {
            self.drop_front_message();
        }
        let n = self.queue.iter().take_while(|(_, m)| room.take(m.len())).count();
        for m in self.beats.values().chain(self.queue.iter().take(n).map(|(_, m)| m)) {
            if self.tunnel.send(m, now_ns).is_err() {
                self.stats.outbox_refused += 1;
            }
        }
        self.beats.clear();
        for (_, m) in self.queue.drain(..n) {
            self.queued_bytes -= m.len();
        }
        self.stats.fragments_out += n as u64;
        self.stats.packets_out += 1;
        self.next_look_ns = now_ns + self.period_ns / 4;
    }

    /// The node's first release of the tunnel at or after `now_ns` (wall-clock): releases
    /// keep the phase of the grant's first, a period apart.
    pub fn next_release_ns(&self, now_ns: u64) -> u64 {
        release_at_or_after(self.tunnel.send_from_ns, self.period_ns, now_ns)
    }

    /// When [`LaneLink::flush`] should look again (wall-clock ns), if anything waits.
    pub fn next_flush_ns(&self) -> Option<u64> {
        (!self.queue.is_empty() || !self.beats.is_empty()).then_some(self.next_look_ns)
    }

    /// A changed grant is followed from its effective time (packing for the smaller of the two
    /// until then); an ended tunnel is asked for again, at most once a second and waiting at
    /// most `RETRY_TIMEOUT` for the answer (with [`LaneLink::try_receivers`], the loop's
    /// only blocking calls, and rare ones).
    fn events(&mut self, now_ns: u64) {
        match self.app.events(Duration::ZERO) {
            Ok(events) => {
                for event in events {
                    match event {
                        NodeToApp::Changed { tunnel_id, grant, effective_at_ns, .. }
                            if tunnel_id == self.tunnel.id =>
                        {
                            self.stats.grant_changes += 1;
                            let old = self.tunnel.grant;
                            self.pending_grant = Some((grant, effective_at_ns));
                            // Until then, packets as small as the smaller of the two.
                            self.tunnel.grant.packet_bytes = old.packet_bytes.min(grant.packet_bytes);
                            self.follow_grant();
                            self.tunnel.grant = old;
                        }
                        NodeToApp::Ended { tunnel_id, .. } if tunnel_id == self.tunnel.id => {
                            self.lost = true;
                            self.pending_grant = None;
                            self.stats.tunnels_lost += 1;
                        }
                        answer
                        @ (NodeToApp::Granted { app_ref, .. } | NodeToApp::Refused { app_ref, .. })
                            if self.changing.as_ref().is_some_and(|c| c.0 == app_ref) =>
                        {
                            let Some((_, spec, _)) = self.changing.take() else { continue };
                            match self.app.answered(answer) {
                                Ok(tunnel) => self.take_receivers(tunnel, spec),
                                Err(_) => self.change_failed(spec.receivers, now_ns),
                            }
                        }
                        _ => {}
                    }
                }
            }
            Err(_) => self.stats.node_errors += 1,
        }
        if let Some((_, spec, deadline)) = &self.changing
            && now_ns >= *deadline
        {
            // A grant that comes later is not followed: it stays with the node until this
            // member's application ends.
            let hosts = spec.receivers.clone();
            self.changing = None;
            self.change_failed(hosts, now_ns);
        }
        if !self.lost
            && now_ns >= self.next_request_ns
            && let Some(hosts) = self.wanted_receivers.take()
        {
            // A failure is counted, and the change kept for a second from now.
            self.set_receivers(hosts);
        }
        if self.lost && now_ns >= self.next_request_ns {
            self.next_request_ns = now_ns + 1_000_000_000;
            match self.app.request(self.spec.clone(), RETRY_TIMEOUT) {
                Ok(tunnel) => {
                    self.tunnel = tunnel;
                    self.lost = false;
                    self.follow_grant();
                }
                Err(_) => self.stats.node_errors += 1,
            }
        }
    }

    /// The node's doorbell for the inbox, to poll beside the member's sockets.
    pub fn doorbell(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.app.doorbell()
    }

    /// Every message waiting in the inbox for this member, in arrival order.
    pub fn receive(&mut self, me: u64, mut on: impl FnMut(Incoming<'_>)) -> Result<(), AppError> {
        // Before the look: a delivery after it rings again.
        self.app.clear_doorbell();
        let mut read_ns = 0;
        while let Some(d) = self.app.recv(&mut self.buf)? {
            let Some(LaneMessage { kind, to, handed_ns: handed, payload }) =
                parse_lane_message(&self.buf[..d.len])
            else {
                self.stats.malformed += 1;
                continue;
            };
            if to != me {
                self.stats.not_ours += 1;
                continue;
            }
            match kind {
                KIND_MESSAGE => {
                    if read_ns == 0 {
                        read_ns = kairos_sys::clock::realtime_ns();
                    }
                    // One clock for every host here; a stamp out of order is not counted.
                    if handed <= d.sent_ns && d.sent_ns <= d.received_ns && d.received_ns <= read_ns {
                        self.stats.timed += 1;
                        self.stats.release_wait_ns += d.sent_ns - handed;
                        self.stats.wire_ns += d.received_ns - d.sent_ns;
                        self.stats.inbox_wait_ns += read_ns - d.received_ns;
                    }
                    self.stats.fragments_in += 1;
                    on(Incoming::Message(payload));
                }
                KIND_BEAT => on(Incoming::Beat(payload, d.received_ns)),
                _ => self.stats.malformed += 1,
            }
        }
        Ok(())
    }
}

/// The first of the releases `first_ns + k * period_ns` at or after `now_ns`.
fn release_at_or_after(first_ns: u64, period_ns: u64, now_ns: u64) -> u64 {
    if now_ns <= first_ns {
        return first_ns;
    }
    first_ns + (now_ns - first_ns).div_ceil(period_ns.max(1)) * period_ns.max(1)
}

/// The tunnels' name for a group of `peers`: `prefix` ([`LANE_TUNNEL`] for the store) and a
/// mark of the membership (FNV-1a of `id=host` in order), so two groups on one lane never read
/// each other's messages (a member reads the tunnels of its own name only).
pub fn tunnel_name<'a>(prefix: &str, peers: impl IntoIterator<Item = (&'a u64, &'a PeerAddr)>) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for (id, addr) in peers {
        for b in format!("{id}={addr};").bytes() {
            hash ^= u32::from(b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    format!("{prefix}-{hash:08x}")
}

/// Why the peers do not make a lane cluster ([`other_hosts`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneClusterError {
    /// A member's address is a UDP address.
    #[error("member {member}'s address {addr} is not a lane host: a cluster is on the lane or off it")]
    NotLaneHost {
        /// The member.
        member: u64,
        /// Its address.
        addr: PeerAddr,
    },
    /// Two members on one lane host.
    #[error("members {first} and {second} are both on lane host {host}: one member a host")]
    SharedHost {
        /// The member met first.
        first: u64,
        /// The member met second.
        second: u64,
        /// The host they share.
        host: String,
    },
}

/// The other members' lane hosts, or why the peers do not make a lane cluster.
pub fn other_hosts<'a>(
    me: u64,
    peers: impl IntoIterator<Item = (&'a u64, &'a PeerAddr)>,
) -> Result<Vec<String>, LaneClusterError> {
    let mut hosts = BTreeMap::new();
    for (&id, addr) in peers {
        let host = addr
            .lane_host()
            .ok_or_else(|| LaneClusterError::NotLaneHost { member: id, addr: addr.clone() })?;
        if let Some(other) = hosts.insert(host.to_string(), id) {
            return Err(LaneClusterError::SharedHost { first: other, second: id, host: host.to_string() });
        }
    }
    Ok(hosts.into_iter().filter(|&(_, id)| id != me).map(|(h, _)| h).collect())
}

#[cfg(test)]
mod tests;

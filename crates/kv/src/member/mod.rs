//! A member of the replicated store as a process: the [`Replica`] behind a Redis-compatible
//! TCP front end, its Raft messages on a UDP socket, all on one thread driven by events and
//! deadlines.
//!
//! The loop sleeps in `epoll` on the Raft socket, the listening socket and every client until
//! one is readable or the earliest deadline comes: Raft's next tick that has work (its clock
//! is coarse, 1 ms by default, and [`Replica::ticks_until_due`] says which tick matters next:
//! an idle follower sleeps until its election timeout or its detector's next verdict), the
//! detector's next heartbeat round. The deadline is kept on a timer in the `epoll` set that is
//! armed again only when a deadline comes earlier ([`Epoll::wait_until`]): a timeout at every
//! wait costs two exits to the hypervisor on a virtual machine, and a write's path has three
//! waits. For a while after a pass that took a client's request ([`MemberConfig::busy_poll`])
//! the loop looks at its sockets without sleeping, yielding its core between looks, so the
//! client's next request finds it awake rather than a halted CPU the hypervisor must run
//! again. A pass steps every message and takes every request that came, proposes the pass's writes at once (as one entry; while one is in flight, the next
//! gather behind it: adaptive batching), and handles Raft's Ready once for all of it, sending a
//! leader's appends before it persists its own entries. Raft messages are cut into datagrams
//! by [`kairos_services::frame`]. Any member takes any command: a follower's writes are
//! forwarded to the leader by Raft and answered when applied here (the leader tells it of the
//! commit at once), its reads answered after a read index from the leader, so a client never
//! hears "wrong member".
//!
//! A failure detector ([`watch`]) rides the same socket: the leader's heartbeats to each
//! follower that heard nothing else from it within half a period (any Raft message is a
//! heartbeat), the leader's commit index on them, and an election as soon as the leader is
//! suspected rather than after Raft's timeout.
//!
//! Or the member runs on the express lane ([`kairos_services::lane_link`]): its peers are lane
//! hosts, and its Raft messages and heartbeats go through its host's lane node on a tunnel of
//! its own, read from the node's inbox each pass (no socket: the node's doorbell wakes the
//! loop, and the loop looks at least every `LaneConfig::poll` in case none was given).
//!
//! The loop is here; its parts each have a file: opening the member (`open`), clients and their
//! requests (`clients`, `session`), what travels between members (`transport`), the detector's
//! part of a pass (`liveness`), changes of membership (`membership`), `KAIROS.FAULT`
//! (`faults`), and what INFO and the Prometheus endpoint report (`report`).
//!
//! Contract: every answer to a write follows the write's commit by a majority and its apply
//! here; answers on a connection come in request order; a client's id is unique across this
//! member's restarts (its start time is in it), so the store's sessions never mistake a new
//! client for an old one.

pub mod acl;
mod clients;
pub mod conn;
mod faults;
pub mod info;
mod liveness;
mod membership;
pub mod metrics;
mod open;
mod report;
mod session;
pub mod tls;
mod transport;
pub mod watch;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kairos_sys::clock::{monotonic_ns, realtime_ns};
use kairos_sys::net::MmsgBatch;
use kairos_sys::net::poll::Epoll;

use crate::kv::Reply;
use crate::replica::{FileDisk, ReadMode, Replica, ReplicaError, Sync};
use conn::Conn;
use faults::Faults;
use kairos_services::frame::Reassembler;
use kairos_services::lane_link::{self, LaneLink, LaneLinkConfig};
pub use kairos_services::peer::PeerAddr;
use kairos_services::seal::{ClusterSecret, Opener, SEAL_BYTES, Sealer};
use membership::MembershipWait;
use watch::{Watch, WatchConfig};

/// One tick of Raft's clock a member uses unless told otherwise, us.
pub const DEFAULT_TICK_US: u64 = 1_000;

/// The failure detector's period a member uses unless told otherwise, us: 3,000 on UDP, where
/// each heartbeat round wakes the leader and a wake-up costs tens of microseconds of CPU on a
/// virtual machine (`scripts/kv-detector-tradeoff`: three idle members took 9% of a core at
/// 1 ms, 4-5% at 3 ms, with failover in 6-8 ms at the median either way), 100 on the lane,
/// where it is also the tunnel's period and so its rate.
pub fn default_period_us(on_lane: bool) -> u64 {
    if on_lane { 100 } else { 3_000 }
}

/// How long a leader may hold a write's append back from a follower its quorum does not need
/// ([`crate::replica::thrift`]) unless told otherwise, us: 1,000 on UDP (a dead follower
/// delays a write by that much once; a third member's run per write is off the write's path),
/// 0 (off) on the lane, where an append already waits for its tunnel's next release and goes
/// with whatever else the period made.
pub fn default_thrifty_us(on_lane: bool) -> u64 {
    if on_lane { 0 } else { 1_000 }
}

/// How long a member looks at its sockets without sleeping after it took a client's request
/// ([`MemberConfig::busy_poll`]) unless told otherwise, us: 200 on UDP, 0 (off) on the lane.
/// On a virtual machine a CPU with nothing to run halts, and a request that comes for a member
/// asleep on it waits for the hypervisor to run that CPU again: on this project's 2-vCPU guest
/// about 35 us of a write's 95 at one client (`perf sched timehist`). A client that waits for
/// its answer and sends again comes back within that window; a member with no clients never
/// polls, so an idle cluster's CPU is untouched. On the lane the node's own core polls.
pub fn default_busy_poll_us(on_lane: bool) -> u64 {
    if on_lane { 0 } else { 200 }
}

/// The longest busy-poll window a member takes, us: past a few milliseconds a client is not
/// coming straight back, and the core is better given up.
pub const MAX_BUSY_POLL_US: u64 = 10_000;

/// Why `--busy-poll-us` `us` is refused (past [`MAX_BUSY_POLL_US`]), in one line; `None` if
/// it is taken. `kairos kv serve` and the bench, which passes it on to its members, say the same.
pub fn busy_poll_us_refusal(us: u64) -> Option<String> {
    (us > MAX_BUSY_POLL_US).then(|| format!("--busy-poll-us {us} is out of range: 0 to {MAX_BUSY_POLL_US}"))
}

/// Raft's election timeout a member uses unless told otherwise, ticks: 100 with the failure
/// detector (Raft's timeout is then only its backstop, and the leader's Raft heartbeats, half
/// of it apart, wake no one often), 10 without it (10-20 ms at the default tick).
pub fn default_election_ticks(detector: bool) -> usize {
    if detector { 100 } else { 10 }
}

/// One member's settings.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// This member's id (one of `peers`).
    pub id: u64,
    /// Every member's Raft address, this one's included: all UDP addresses, or all lane hosts
    /// (then `lane` says how to reach this host's node).
    pub peers: BTreeMap<u64, PeerAddr>,
    /// Where clients connect (RESP over TCP).
    pub listen: SocketAddr,
    /// The member's log directory.
    pub data_dir: PathBuf,
    /// Whether the log is synced before votes and acknowledgements go out.
    pub sync: Sync,
    /// One tick of Raft's logical clock: a coarse clock for elections, Raft's own heartbeats and
    /// retries, decoupled from message handling (the loop wakes for a tick only when one has
    /// work: [`Replica::ticks_until_due`]).
    pub tick: Duration,
    /// The failure detector's heartbeat period, and on the lane its tunnel's.
    pub period: Duration,
    /// Ticks between heartbeats.
    pub heartbeat_ticks: usize,
    /// Ticks before a follower that heard no leader campaigns.
    pub election_ticks: usize,
    /// How reads are answered.
    pub read_mode: ReadMode,
    /// Start knowing no membership, to be added to a running cluster (`KAIROS.MEMBER ADD`)
    /// rather than found it.
    pub join: bool,
    /// Take `KAIROS.FAULT` commands (partitions and loss at this member's Raft transport, for
    /// checks); off by default.
    pub allow_faults: bool,
    /// When a pass's requests are proposed.
    pub batching: Batching,
    /// Thrifty replication: how long a leader may hold a write's append back from a follower
    /// its quorum does not need, or `None` to send every append at once.
    pub thrifty: Option<Duration>,
    /// How long the loop keeps looking at its sockets without sleeping after a pass that took
    /// a client's request (yielding the core to any other runnable thread between looks), or
    /// `None` to sleep at once: the client's next request then finds the member awake, where
    /// waking a halted virtual CPU costs tens of microseconds ([`default_busy_poll_us`]).
    pub busy_poll: Option<Duration>,
    /// The type-of-service byte of the Raft socket's datagrams (the lane's testbed puts DSCP
    /// EF in its strict-priority lane class), or `None` to leave the default.
    pub raft_tos: Option<u8>,
    /// The failure detector's period and threshold, or `None` to leave leader failures to
    /// Raft's election timeout alone.
    pub detector: Option<WatchConfig>,
    /// The lane node and tunnels, when the peers are lane hosts.
    pub lane: Option<LaneConfig>,
    /// The cluster's secret: every datagram to another member is sealed under it, and one
    /// from another member is taken only when its seal opens ([`kairos_services::seal`]).
    /// `None` leaves the UDP transport open to anyone who reaches it (the lane's tunnels are
    /// admitted by the lane's controller instead); `kairos kv serve` requires one on UDP.
    pub secret: Option<ClusterSecret>,
    /// Who may run what ([`acl`]): by default everyone, everything, as Redis without
    /// `requirepass`.
    pub acl: acl::Acl,
    /// The most clients connected at once ([`DEFAULT_MAX_CLIENTS`] unless told otherwise).
    pub max_clients: usize,
    /// TLS on the client port ([`tls::server_config`]), or plain TCP.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// Where the Prometheus endpoint listens ([`metrics`]), if anywhere.
    pub metrics: Option<SocketAddr>,
}

/// The most clients a member serves at once unless told otherwise: Redis's maxclients default.
pub const DEFAULT_MAX_CLIENTS: usize = 10_000;

/// A member on the lane.
#[derive(Debug, Clone)]
pub struct LaneConfig {
    /// The tunnel (its period is replaced by the detector's, or the loop's when the detector
    /// is off).
    pub link: LaneLinkConfig,
    /// The name every member's tunnel has (`None`: the one this member's data directory keeps,
    /// else one made from the peers): a member added later must be given it.
    pub cluster: Option<String>,
    /// The longest the loop sleeps without looking at the inbox.
    pub poll: Duration,
}

/// When the requests a member takes are proposed (writes) or read-indexed (reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batching {
    /// At the end of each pass of the loop over the ready clients: every request read in
    /// that pass shares one entry (or one read index), and a lone request waits for nothing.
    Pass,
    /// At the next period's tick: every request of the period shares one entry.
    Period,
}

/// Why a member could not start.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// A socket could not be bound.
    #[error("cannot bind the {what} socket to {addr}")]
    Bind {
        /// Which socket.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS's reason.
        source: io::Error,
    },
    /// The log could not be opened or read.
    #[error("cannot use the log in {dir}")]
    Log {
        /// The directory.
        dir: PathBuf,
        /// The reason.
        source: io::Error,
    },
    /// Raft refused to start.
    #[error("{0}")]
    Replica(#[from] ReplicaError),
    /// The lane's node or tunnels could not be had.
    #[error(transparent)]
    Lane(Box<lane_link::LaneLinkError>),
    /// The configuration is inconsistent.
    #[error("{0}")]
    Config(String),
    /// The loop's poller could not be made.
    #[error("cannot make the loop's epoll set")]
    Poller(#[source] io::Error),
}

/// Counters for INFO.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemberStats {
    /// Client connections accepted.
    pub connections: u64,
    /// Commands taken.
    pub commands: u64,
    /// Raft datagrams received.
    pub datagrams_in: u64,
    /// Raft datagrams sent.
    pub datagrams_out: u64,
    /// Datagrams that did not decode.
    pub malformed: u64,
    /// Datagrams refused by their seal: from an id that is not a member's.
    pub refused_strangers: u64,
    /// Datagrams refused by their seal: a tag that did not match (forged, altered, another
    /// cluster's secret), or too short to hold a seal.
    pub refused_forged: u64,
    /// Datagrams refused by their seal: a counter taken already or too old.
    pub refused_replayed: u64,
    /// Sealed datagrams whose body's sender is not the member its seal names (one whose
    /// address is not that member's is refused as a stranger's).
    pub refused_address: u64,
    /// AUTHs that failed (WRONGPASS).
    pub denied_auth: u64,
    /// Commands refused for want of authentication (NOAUTH).
    pub denied_noauth: u64,
    /// Commands refused by the user's rules (NOPERM).
    pub denied_command: u64,
    /// Connections refused at --maxclients.
    pub rejected_connections: u64,
    /// Clients closed past the query buffer limit.
    pub query_limit_closes: u64,
    /// Clients closed past the output buffer limit.
    pub output_limit_closes: u64,
    /// Clients closed for a request the protocol does not allow (or past its limits).
    pub protocol_errors: u64,
    /// Periods the loop started late by more than one period.
    pub late_periods: u64,
    /// Waits that a socket ended while the loop busy-polled, before it would have slept.
    pub busy_poll_hits: u64,
}

/// What the loop waits on a client's socket for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interest {
    input: bool,
    output: bool,
}

impl Interest {
    const NONE: Interest = Interest { input: false, output: false };
}

/// A member's seals: one per stream it sends, and the opener of what it receives.
#[derive(Debug)]
struct Seals {
    messages: Sealer,
    heartbeats: Sealer,
    opener: Opener,
}

/// Heartbeats taken per receive call.
const BEAT_BURST: usize = 16;

/// Raft datagrams taken per receive call. A call that takes fewer found the socket empty, so
/// a pass learns that without a further call that ends in `EAGAIN` (one system call more for
/// every wake-up of a write's path: the leader's for the acknowledgement, the follower's for
/// the append).
const RAFT_BURST: usize = 4;

/// The largest datagram: UDP's payload limit.
const RAFT_DATAGRAM_BYTES: usize = 65_536;

/// The buffers and headers of one `recvmmsg` on Raft's socket, made once.
struct RaftReceive {
    batch: MmsgBatch,
    buffers: [Vec<u8>; RAFT_BURST],
}

impl RaftReceive {
    fn new() -> Self {
        Self { batch: MmsgBatch::new(), buffers: std::array::from_fn(|_| vec![0; RAFT_DATAGRAM_BYTES]) }
    }
}

/// The largest heartbeat datagram: a heartbeat and its seal.
const BEAT_DATAGRAM_BYTES: usize = kairos_fd::wire::MAX_HEARTBEAT_BYTES + SEAL_BYTES;

/// The most sockets one wait of the loop reports; more ready are reported at the next.
const POLL_BATCH: usize = 256;

/// A running member.
pub struct Member {
    config: MemberConfig,
    replica: Replica<FileDisk>,
    /// Raft's socket; `None` on the lane.
    udp: Option<UdpSocket>,
    /// The detector's heartbeats, on the Raft address but not polled (see [`Member::open`]).
    beats: Option<UdpSocket>,
    /// The lane's tunnels, instead of the sockets.
    lane: Option<LaneLink>,
    beat_batch: MmsgBatch,
    beat_buffers: [[u8; BEAT_DATAGRAM_BYTES]; BEAT_BURST],
    /// The Prometheus endpoint, when asked for.
    metrics: Option<metrics::MetricsServer>,
    /// Replicated commands' time from arrival to answer.
    latency: metrics::Histogram,
    /// Commands taken: writes, reads, local.
    command_kinds: [u64; 3],
    /// The seals on what this member sends (Raft's messages, heartbeats) and its opening of
    /// what it receives, on UDP with a secret.
    seal: Option<Seals>,
    listener: TcpListener,
    conns: BTreeMap<u64, Conn>,
    client_base: u64,
    next_client: u64,
    reassembler: Reassembler,
    message_number: u64,
    stats: MemberStats,
    started_ns: u64,
    /// Membership changes proposed here and not yet applied.
    membership_waiting: Vec<MembershipWait>,
    faults: Faults,
    /// Raft's datagrams as one receive call takes them; out of the member while they are
    /// handled.
    raft_rx: Option<RaftReceive>,
    /// The buffer clients' bytes are read through, made once.
    client_input: Vec<u8>,
    /// The failure detector, when on.
    watch: Option<Watch>,
    /// The send buffer for heartbeats, made once.
    heartbeat: Vec<u8>,
    /// The buffer Raft's messages are encoded into, made once (and a heartbeat sealed into).
    raft_out: Vec<u8>,
    /// A socket connected to the leader's Raft address, for the detector's probes of its port
    /// ([`Watch::probe_due`]), and which member it is connected to.
    probe: Option<(u64, UdpSocket)>,
    /// The sockets the loop sleeps on, joined once: Raft's, the listener's, the probe's (when
    /// made), the lane's doorbell, and each client's while it takes input.
    poller: Epoll,
    /// The clients in `poller`, by their socket's descriptor.
    polled: std::collections::HashMap<RawFd, (u64, Interest)>,
    /// The lane's doorbell's descriptor, once in `poller`.
    doorbell_polled: Option<RawFd>,
    /// CONFIG SET's parameters (they change what CONFIG GET and OBJECT ENCODING report).
    settings: info::Settings,
    /// When the leader next looks for expired keys (monotonic ns).
    next_expiry_ns: u64,
    /// Per command: calls and refusals (INFO commandstats).
    command_stats: BTreeMap<&'static str, [u64; 2]>,
    /// Sequence numbers of the leader's expiry proposals.
    expiry_seq: u64,
    /// The earliest timeout of a blocked client (monotonic ns).
    blocked_until: Option<u64>,
    /// Clients that (may) wait in a blocking pop: those the store found nothing for.
    blocked: std::collections::BTreeSet<u64>,
    /// Until when the loop looks at its sockets without sleeping (monotonic ns): a busy-poll
    /// window after the last pass that took a client's request ([`MemberConfig::busy_poll`]).
    busy_poll_until: u64,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.config.id)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl Member {
    /// The lane's grants in words, when on the lane.
    pub fn lane_description(&self) -> Option<String> {
        self.lane.as_ref().map(LaneLink::describe)
    }

    /// Where clients connect.
    pub fn client_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Runs the loop until `stop` is set.
    ///
    /// Each pass sleeps until a socket speaks or the earliest deadline: Raft's next tick that
    /// has work, the detector's next heartbeat round or verdict, on the lane a look at the
    /// inbox. Then Raft's clock catches up (one tick for each that passed), every message and
    /// request of the pass is stepped and taken, the pass's writes are proposed, and Raft's
    /// Ready is handled once for all of it (`Member::drain`).
    pub fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let tick_ns = (self.config.tick.as_nanos() as u64).max(1);
        // Deadlines on time: a normal thread's timed wake-ups are otherwise rounded up by 50 us.
        let _ = kairos_sys::thread::set_timer_slack_ns(1);
        let mut last_tick = monotonic_ns();
        // A stalled member catches up on this many ticks at most: enough for every timeout.
        let most_ticks = 2 * self.config.election_ticks.max(self.config.heartbeat_ticks) as u64 + 1;
        let lane_poll_ns = self.config.lane.as_ref().map(|l| l.poll.as_nanos() as u64);
        while !stop.load(Ordering::Relaxed) {
            // Raft's next tick that has work, or appends held back that are due to go.
            let raft_due = (last_tick + self.replica.ticks_until_due() * tick_ns)
                .min(self.replica.next_release_ns().unwrap_or(u64::MAX));
            let wake = self.watch.as_ref().map_or(raft_due, |w| w.next_wake_ns().min(raft_due));
            let wake = wake.min(self.blocked_until.unwrap_or(u64::MAX));
            let started = monotonic_ns();
            // On the lane nothing wakes the loop when a message arrives: it looks at the inbox
            // at least every `poll`, and when the log tunnel can take more of what waits.
            let mut until = wake;
            if let Some(poll) = lane_poll_ns {
                until = until.min(started + poll);
            }
            if let Some(at) = self.lane.as_ref().and_then(LaneLink::next_flush_ns) {
                until = until.min(at.saturating_sub(realtime_ns()) + started);
            }
            let (udp_ready, listen_ready, ready_conns, probe_ready) = self.wait(until, started)?;
            // Raft's clock first: ticks that passed while the loop slept count before any
            // message of this pass restarts an election clock.
            let now = monotonic_ns();
            // Woken late (the machine took this member's core away): the members it watches
            // may have been stopped with it, so their silence is not counted against them
            // until they could have spoken.
            if let Some(watch) = self.watch.as_mut() {
                watch.woke_late(now, now.saturating_sub(until));
            }
            self.replica.observe_clock(now);
            let passed = now.saturating_sub(last_tick) / tick_ns;
            if passed > 0 {
                let now_ms = realtime_ns() / 1_000_000;
                for _ in 0..passed.min(most_ticks) {
                    self.replica.tick(now_ms);
                }
                last_tick += passed * tick_ns;
                if passed > most_ticks {
                    self.stats.late_periods += 1;
                }
            }
            if probe_ready {
                self.take_probe_answer(now);
            }
            if udp_ready {
                self.receive_raft()?;
            }
            if listen_ready {
                self.accept();
            }
            let took_requests = !ready_conns.is_empty();
            if took_requests && let Some(poll) = self.config.busy_poll {
                self.busy_poll_until = now + poll.as_nanos() as u64;
            }
            for (_, client) in self.read_in_arrival_order(ready_conns) {
                self.serve(client);
            }
            if took_requests && self.config.batching == Batching::Pass {
                // After the requests were read: a read answered under the lease is linearized
                // at this clock reading, which follows its arrival.
                self.replica.observe_clock(monotonic_ns());
                self.replica.flush(realtime_ns() / 1_000_000);
            }
            // Heartbeats matter only when a round or a detector deadline is due (no suspicion
            // can start before its deadline), so a pass that ends before one spends no system
            // call on them; they are read just before the detector judges, so one that came
            // during the pass is never left unread behind a suspicion.
            let now = monotonic_ns();
            if self
                .watch
                .as_ref()
                .is_some_and(|w| w.watches_anyone() && (now >= wake || w.deadline_passed(now)))
            {
                self.receive_beats(now)?;
            }
            self.watch_pass(now)?;
            self.drain()?;
            // Blocked clients whose keys were fed, or whose timeout passed; the leader's
            // removal of expired keys. Their proposals go out with the next pass's.
            let now = monotonic_ns();
            self.blocked_until = self.wake_blocked(now);
            self.propose_expiry(now);
        }
        Ok(())
    }

    /// Sleeps until a socket speaks or `CLOCK_MONOTONIC` reaches `until` (or a little before:
    /// the loop looks and waits again), `now` being the clock's reading: whether Raft's socket,
    /// the listener, which clients, and the probe socket did. The deadline stays armed across
    /// waits ([`Epoll::wait_until`]): a wait's own timeout would reprogram the timer device
    /// twice a wait, which a virtual machine pays as two exits to its hypervisor (three waits
    /// on a write's path; `scripts/kv-write-cost` measures a write before and after).
    fn wait(&mut self, until: u64, now: u64) -> io::Result<(bool, bool, Vec<u64>, bool)> {
        // On the lane there is no Raft socket: the node's doorbell wakes the loop, and the inbox
        // is looked at every pass.
        if let Some(bell) = self.lane.as_ref().and_then(LaneLink::doorbell)
            && self.doorbell_polled != Some(bell.as_raw_fd())
        {
            self.poller.add(&bell)?;
            self.doorbell_polled = Some(bell.as_raw_fd());
        }
        // A client is waited on for input only while it takes more: one owed many answers is
        // held back until they are written (its socket's buffer holds the rest); and for room
        // to write while answers wait for it, so they go as soon as it reads.
        // Requests parked for room that has come: no event will say so, so no sleep.
        let mut parked = Vec::new();
        for (&id, conn) in &self.conns {
            if conn.parked_ready() {
                parked.push(id);
            }
            let fd = conn.stream.as_raw_fd();
            let want = Interest { input: conn.wants_input(), output: conn.has_output() };
            let had = self.polled.get(&fd).filter(|(client, _)| *client == id).map(|(_, i)| *i);
            if had != Some(want) && !(had.is_none() && want == Interest::NONE) {
                self.poller.watch(&conn.stream, want.input, want.output)?;
                if want == Interest::NONE {
                    self.polled.remove(&fd);
                } else {
                    self.polled.insert(fd, (id, want));
                }
            }
        }
        let until = if parked.is_empty() { until } else { now };
        match self.poll_then_wait(until, now) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok((false, false, Vec::new(), false)),
            Err(e) => return Err(e),
        }
        let udp = self.udp.as_ref().map(AsRawFd::as_raw_fd);
        let listener = self.listener.as_raw_fd();
        let probe = self.probe.as_ref().map(|(_, socket)| socket.as_raw_fd());
        let (mut raft_ready, mut listen_ready, mut probe_ready) = (self.lane.is_some(), false, false);
        // A wait names each descriptor once and a client has one, so a client can only be
        // both parked and reported: those few are all a client is looked for among.
        let parked_count = parked.len();
        let mut ready = parked;
        let mut metrics_ready = Vec::new();
        for r in self.poller.ready() {
            if self.metrics.as_ref().is_some_and(|m| m.owns(r.fd)) {
                metrics_ready.push(r.fd);
                continue;
            }
            if Some(r.fd) == udp {
                raft_ready |= r.readable;
            } else if r.fd == listener {
                listen_ready |= r.readable;
            } else if Some(r.fd) == probe {
                // A refused probe is an error pending on its socket, not a datagram.
                probe_ready = true;
            } else if let Some(&(client, _)) = self.polled.get(&r.fd)
                && !ready[..parked_count].contains(&client)
            {
                // A failed connection is served too: its read finds the error and drops it.
                ready.push(client);
            }
        }
        // Only when a reader spoke or waits (to be dropped past its deadline): no clock read
        // on a pass that has neither.
        if self.metrics.as_ref().is_some_and(|m| !metrics_ready.is_empty() || m.readers().next().is_some()) {
            self.metrics_pass(&metrics_ready)?;
        }
        Ok((raft_ready, listen_ready, ready, probe_ready))
    }

    /// Waits as [`Epoll::wait_until`] does, first looking without sleeping until the busy-poll
    /// window closes (or `until`, if earlier), yielding the core between looks so the other
    /// members on it run as they would while this one slept.
    fn poll_then_wait(&mut self, until: u64, now: u64) -> io::Result<usize> {
        let poll_end = self.busy_poll_until.min(until);
        let mut at = now;
        while at < poll_end {
            let ready = self.poller.wait(Duration::ZERO)?;
            if ready > 0 {
                self.stats.busy_poll_hits += 1;
                return Ok(ready);
            }
            std::thread::yield_now();
            at = monotonic_ns();
        }
        self.poller.wait_until(Some(until), at)
    }

    /// The end of a pass: Raft's Ready (its ordinary messages sent before this member
    /// persists, the rest after), the answers it made, the clients' output.
    fn drain(&mut self) -> io::Result<()> {
        // What the pass's steps sent outside a Ready (the leader's word of a commit).
        self.send_raft();
        loop {
            while self.replica.begin_ready() {
                self.send_raft();
                // Acknowledgements go before the apply of what their append committed.
                self.replica.persist_ready()?;
                self.send_raft();
                self.replica.finish_ready()?;
                self.send_raft();
            }
            // Changes of membership applied (their clients answered), or proposed again.
            self.membership_applied()?;
            // Answers release a connection's requests held behind them (answers come in
            // request order): proposed now, not at the next pass.
            let completions = self.replica.take_completions();
            if completions.is_empty() {
                if self.replica.has_ready() {
                    continue;
                }
                break;
            }
            for (ticket, reply) in completions {
                if reply == Reply::WouldBlock {
                    self.would_block(ticket);
                    continue;
                }
                let reply = self.answer_exec_locals(ticket, reply);
                if let Some(conn) = self.conns.get_mut(&ticket.client) {
                    if let Some(waited) = conn.complete(ticket.seq, &reply) {
                        self.latency.record(waited);
                    }
                    self.release(ticket.client);
                }
            }
            self.replica.flush(realtime_ns() / 1_000_000);
        }
        if let Some(lane) = self.lane.as_mut() {
            lane.flush(realtime_ns());
        }
        let mut dead = Vec::new();
        for (id, conn) in &mut self.conns {
            conn.flush();
            if conn.dead {
                dead.push(*id);
                match conn.limited.take() {
                    Some(conn::Limit::Query) => self.stats.query_limit_closes += 1,
                    Some(conn::Limit::Output) => self.stats.output_limit_closes += 1,
                    Some(conn::Limit::Protocol) => self.stats.protocol_errors += 1,
                    None => {}
                }
            }
        }
        for id in dead {
            self.replica.forget_client(id);
            if let Some(conn) = self.conns.remove(&id) {
                self.polled.remove(&conn.stream.as_raw_fd());
                // Its pops that wait in the store (or may: one in flight) would take elements
                // no one receives. An unblock of a pop never applied is answered and forgotten.
                for b in conn.blocking {
                    self.unblock(id, b.seq, b.args, false);
                }
            }
        }
        Ok(())
    }
}

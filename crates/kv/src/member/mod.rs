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
//! waits. A pass steps every message and takes every request that came, proposes the pass's writes at once (as one entry; while one is in flight, the next
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
//! Contract: every answer to a write follows the write's commit by a majority and its apply
//! here; answers on a connection come in request order; a client's id is unique across this
//! member's restarts (its start time is in it), so the store's sessions never mistake a new
//! client for an old one.

pub mod acl;
pub mod conn;
pub mod info;
pub mod metrics;
mod session;
pub mod tls;
pub mod watch;

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kairos_sys::clock::{monotonic_ns, realtime_ns, realtime_offset, stamp_to_monotonic};
use kairos_sys::net::poll::Epoll;
use kairos_sys::net::{MmsgBatch, split};

use crate::kv::cmd;
use crate::kv::command::typed;
use crate::kv::{Command, Reply, WriteOp};
use crate::replica::wire::{decode_message, encode_message};
use crate::replica::{FileDisk, LogStore, ReadMode, Replica, ReplicaConfig, ReplicaError, Sync, Ticket};
use conn::Conn;
use kairos_services::frame::{Reassembler, fragments, fragments_of};
use kairos_services::lane_link::{self, Incoming, LaneLink, LaneLinkConfig};
use kairos_services::peer;
pub use kairos_services::peer::PeerAddr;
use kairos_services::seal::{ClusterSecret, Opener, Refusal, SEAL_BYTES, Sealer, Stream};
use raft::eraftpb::MessageType;
use watch::{Act, Watch, WatchConfig};

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

/// Faults made at this member's Raft transport on request (`KAIROS.FAULT`).
#[derive(Debug, Default)]
struct Faults {
    /// Peers whose datagrams are dropped both ways, until when (monotonic ns).
    cut: BTreeMap<u64, u64>,
    /// Probability of dropping any datagram, and until when.
    loss: (f64, u64),
    /// A xorshift state for the loss draws.
    rng: u64,
}

impl Faults {
    fn drops(&mut self, peer: u64, now: u64) -> bool {
        if self.cut.get(&peer).is_some_and(|&until| until > now) {
            return true;
        }
        if self.loss.1 > now && self.loss.0 > 0.0 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            return (self.rng >> 11) as f64 / (1u64 << 53) as f64 <= self.loss.0;
        }
        false
    }
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

/// The largest heartbeat datagram: a heartbeat and its seal.
const BEAT_DATAGRAM_BYTES: usize = kairos_fd::wire::MAX_HEARTBEAT_BYTES + SEAL_BYTES;

/// The most sockets one wait of the loop reports; more ready are reported at the next.
const POLL_BATCH: usize = 256;

/// A member's heartbeat as a replica sends it: the leader's term and the commit index the
/// receiver may take (0, 0 from a follower).
#[derive(Debug, Clone, Copy)]
struct ReplicaBeat {
    heartbeat: kairos_fd::wire::Heartbeat,
    term: u64,
    commit: u64,
}

/// The replica heartbeat in a detector datagram; other kinds are none of a member's business,
/// and bytes that do not decode are counted.
fn replica_beat(bytes: &[u8], stats: &mut MemberStats) -> Option<ReplicaBeat> {
    use kairos_fd::wire::{Datagram, decode};
    match decode(bytes) {
        Ok(Datagram::Replica { heartbeat, term, commit }) => Some(ReplicaBeat { heartbeat, term, commit }),
        Ok(_) => None,
        Err(_) => {
            stats.malformed += 1;
            None
        }
    }
}

/// The file that records which boot of the machine last wrote the log.
const BOOT_FILE: &str = "boot_id";

/// A log written without `fsync` is whole after the process's crash (the page cache kept it)
/// but not after the machine's: a member whose log was left unsynced by an earlier boot may
/// have forgotten a vote or an entry it acknowledged, and returning as the voter it was could
/// elect two leaders in one term or lose a committed write. So it refuses, and says what to do.
/// Then records this boot as the log's.
fn check_boot(config: &MemberConfig, exists: bool) -> io::Result<Result<(), MemberError>> {
    let path = config.data_dir.join(BOOT_FILE);
    let now = kairos_sys::proc::boot_id().unwrap_or_default();
    if exists && config.sync == Sync::Never {
        let before = std::fs::read_to_string(&path).map(|s| s.trim().to_string()).unwrap_or_default();
        if before.is_empty() || before != now {
            return Ok(Err(MemberError::Config(format!(
                "member {}'s log in {} was written with --fsync never before this machine restarted: it may have \
                 lost votes or entries it acknowledged, so it cannot return as the voter it was; move the directory \
                 away and add the member anew (or run with --fsync always)",
                config.id,
                config.data_dir.display()
            ))));
        }
    }
    std::fs::write(&path, format!("{now}\n"))?;
    Ok(Ok(()))
}

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
    /// The receive buffer for Raft's datagrams, made once.
    datagram: Vec<u8>,
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
}

/// A membership change proposed at this member, waiting to be applied here.
#[derive(Debug, Clone)]
struct MembershipWait {
    change: raft::eraftpb::ConfChangeType,
    node: u64,
    context: Vec<u8>,
    client: u64,
    seq: u64,
    /// When the client hears it did not happen (monotonic ns).
    deadline_ns: u64,
    /// When it was last proposed (monotonic ns).
    proposed_ns: u64,
}

/// How long a proposed membership change may be missing from this member's log before it is
/// taken as lost (or emptied by a busy leader) and proposed again.
const MEMBERSHIP_RETRY_NS: u64 = 300_000_000;

/// The file of members' addresses as this member last knew them (`id=addr` lines).
const PEERS_FILE: &str = "peers";
/// How long a membership change may take before its client hears it did not happen.
const MEMBERSHIP_TIMEOUT_NS: u64 = 5_000_000_000;

/// A membership change refused for now ([`crate::replica::Replica::membership_busy`]).
const BUSY: &str = "ERR membership change refused: proposal dropped (no leader now, or the leader has an earlier change, or its first entry of the term, unapplied): try again shortly";

fn load_peers(path: &std::path::Path) -> Option<BTreeMap<u64, PeerAddr>> {
    let text = std::fs::read_to_string(path).ok()?;
    let peers: BTreeMap<u64, PeerAddr> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(id, addr)| Some((id.trim().parse().ok()?, addr.trim().parse().ok()?)))
        .collect();
    (!peers.is_empty()).then_some(peers)
}

/// The file keeping the name of the lane tunnels of this member's cluster.
const LANE_CLUSTER_FILE: &str = "lane-cluster";

/// The name of the cluster's lane tunnels: the one given, else the one the data directory
/// keeps, else one made from the peers (a new cluster; a member that joins must be given it).
/// [`keep_lane_cluster`] keeps it once the node took the member, so a restart after
/// membership changes still finds its cluster's tunnels.
fn lane_cluster_name(config: &MemberConfig, lane: &LaneConfig) -> Result<String, MemberError> {
    let path = config.data_dir.join(LANE_CLUSTER_FILE);
    let kept = std::fs::read_to_string(&path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    match (&lane.cluster, kept) {
        (Some(given), Some(kept)) if *given != kept => Err(MemberError::Config(format!(
            "the data in {} belongs to the lane cluster {kept}, not {given}: give --lane-cluster {kept}, or another --data",
            config.data_dir.display()
        ))),
        (Some(given), _) => Ok(given.clone()),
        (None, Some(kept)) => Ok(kept),
        (None, None) if config.join => Err(MemberError::Config(
            "a member that joins a cluster on the lane needs its tunnels' name: give --lane-cluster NAME (INFO's lane_tunnel at any member)"
                .into(),
        )),
        (None, None) => Ok(lane_link::tunnel_name(lane_link::LANE_TUNNEL, &config.peers)),
    }
}

/// Keeps the cluster's tunnel name in the data directory.
fn keep_lane_cluster(config: &MemberConfig, name: &str) -> Result<(), MemberError> {
    kairos_sys::fs::write_atomic(&config.data_dir.join(LANE_CLUSTER_FILE), format!("{name}\n").as_bytes())
        .map_err(|e| MemberError::Config(format!("cannot keep the lane cluster's name: {e}")))
}

fn save_peers(path: &std::path::Path, peers: &BTreeMap<u64, PeerAddr>) -> io::Result<()> {
    let text: String = peers.iter().map(|(id, addr)| format!("{id}={addr}\n")).collect();
    let fresh = path.with_extension("new");
    std::fs::write(&fresh, text)?;
    std::fs::rename(fresh, path)
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
    /// Binds the sockets and opens (or creates) the log.
    pub fn open(config: MemberConfig) -> Result<Self, MemberError> {
        let mut config = config;
        if !config.peers.contains_key(&config.id) {
            return Err(MemberError::Config(format!("member {} is not among the peers", config.id)));
        }
        // This member's address is the command line's; the others' are those of members added
        // or removed since it was written.
        let own = config.peers[&config.id].clone();
        if let Some(peers) = load_peers(&config.data_dir.join(PEERS_FILE)) {
            config.peers = peers;
            config.peers.entry(config.id).or_insert(own.clone());
        }
        let (udp, beats, lane) = match (&own, &config.lane) {
            (PeerAddr::Udp(addr), None) => {
                peer::udp_others(config.id, &config.peers).map_err(|e| MemberError::Config(e.to_string()))?;
                let (udp, beats) = Self::bind_udp(&config, *addr)?;
                (Some(udp), beats, None)
            }
            (PeerAddr::Lane(_), Some(lc)) => {
                let mut link = lc.link.clone();
                link.period = config.detector.map_or(config.period, |d| Duration::from_nanos(d.period_ns));
                let name = lane_cluster_name(&config, lc)?;
                let joined = LaneLink::join_group(
                    &format!("kv-{}", config.id),
                    &name,
                    config.id,
                    &config.peers,
                    &link,
                )
                .map_err(|e| MemberError::Lane(Box::new(e)))?;
                keep_lane_cluster(&config, &name)?;
                (None, None, Some(joined))
            }
            (PeerAddr::Udp(_), Some(_)) => {
                return Err(MemberError::Config(
                    "a lane node was given, but the peers are UDP addresses".into(),
                ));
            }
            (PeerAddr::Lane(h), None) => {
                return Err(MemberError::Config(format!(
                    "member {} is on lane host {h}: give the directory of that host's lane node",
                    config.id
                )));
            }
        };
        let listener = TcpListener::bind(config.listen).map_err(|source| MemberError::Bind {
            what: "client",
            addr: config.listen,
            source,
        })?;
        listener.set_nonblocking(true).map_err(|source| MemberError::Bind {
            what: "client",
            addr: config.listen,
            source,
        })?;
        let log_err = |source| MemberError::Log { dir: config.data_dir.clone(), source };
        let exists = config.data_dir.join("raft.log").exists();
        let disk = FileDisk::open(&config.data_dir).map_err(log_err)?;
        check_boot(&config, exists).map_err(log_err)??;
        let log = if exists {
            LogStore::load(disk, config.sync).map_err(log_err)?.0
        } else {
            let voters: Vec<u64> =
                if config.join { Vec::new() } else { config.peers.keys().copied().collect() };
            LogStore::create(disk, config.sync, &voters).map_err(log_err)?
        };
        let mut rc = ReplicaConfig::new(config.id);
        // With the detector on, its heartbeats carry the commit index and restart followers'
        // election clocks every period, so Raft's own are only a backstop (and the answers
        // that keep the leader's quorum check content): half the election timeout apart rather
        // than every few ticks (each costs a datagram to every follower and one back).
        rc.heartbeat_ticks = match config.detector {
            Some(_) => config.heartbeat_ticks.max(config.election_ticks / 2),
            None => config.heartbeat_ticks,
        };
        rc.commit_by_heartbeats = config.detector.is_some();
        // A proposal or read index lost on the way is asked again after about 3 ms, whatever
        // the tick (a new leader gets them at once: `Replica`'s leader change).
        let tick_us = (config.tick.as_micros() as u64).max(1);
        rc.retry_ticks = (3_000 / tick_us).max(2);
        // The leader's lease: a follower votes for another only once it suspects its leader
        // (`T + Lambda` after its last word) or Raft's election timeout passed, so a leader a
        // quorum heard at time t is the only one until t plus the shorter of the two; a tenth
        // less, for clock rates and the time a tick is counted late. Sooner only when the
        // leader's port refused a probe: its process is gone, and with it every read it could
        // answer under its lease.
        if let Some(d) = config.detector {
            let election_ns = config.election_ticks as u64 * config.tick.as_nanos() as u64;
            let follower_waits = (d.period_ns + d.lambda_ns).min(election_ns);
            rc.lease_ns = Some(follower_waits - follower_waits / 10);
        }
        if let Some(lane) = &lane {
            // A few packets an append, a few appends in flight: what the log tunnel carries
            // in a few periods, so nothing waits long behind Raft's own backlog.
            rc.max_append_bytes = 4 * lane.fragment_bytes() as u64;
            rc.max_inflight_appends = 8;
            // A write not committed in 2 ms is normal here, not lost: proposing it again
            // only adds to the tunnel's load.
            rc.retry_ticks = rc.retry_ticks.max(config.election_ticks as u64);
        }
        rc.election_ticks = config.election_ticks;
        rc.read_mode = config.read_mode;
        rc.thrifty_ns = config.thrifty.map(|d| d.as_nanos() as u64);
        let replica = Replica::new(rc, log)?;
        // Client ids: the start time in microseconds, shifted, plus a counter, so no id repeats
        // across this member's restarts.
        let client_base = (realtime_ns() / 1_000) << 16;
        let poller = Epoll::new(POLL_BATCH).map_err(MemberError::Poller)?;
        let metrics = match config.metrics {
            Some(addr) => Some(metrics::MetricsServer::bind(addr).map_err(|source| MemberError::Bind {
                what: "metrics",
                addr,
                source,
            })?),
            None => None,
        };
        for socket in udp
            .iter()
            .map(AsFd::as_fd)
            .chain([listener.as_fd()])
            .chain(metrics.iter().map(|m| m.listener().as_fd()))
        {
            poller.add(&socket).map_err(MemberError::Poller)?;
        }
        // The incarnation is the start time, so it grows with every start.
        let seal = match (&config.secret, &udp) {
            (Some(secret), Some(_)) => Some(Seals {
                messages: Sealer::new(secret.clone(), config.id, Stream::Messages),
                heartbeats: Sealer::new(secret.clone(), config.id, Stream::Heartbeats),
                opener: Opener::new(secret.clone()),
            }),
            _ => None,
        };
        let watch = config
            .detector
            .map(|wc| Watch::new(wc, config.id, config.peers.keys().copied(), realtime_ns(), monotonic_ns()));
        Ok(Self {
            config,
            replica,
            udp,
            beats,
            lane,
            beat_batch: MmsgBatch::new(),
            beat_buffers: [[0; BEAT_DATAGRAM_BYTES]; BEAT_BURST],
            seal,
            metrics,
            latency: metrics::Histogram::default(),
            command_kinds: [0; 3],
            listener,
            conns: BTreeMap::new(),
            client_base,
            next_client: 0,
            settings: info::Settings::default(),
            next_expiry_ns: 0,
            command_stats: BTreeMap::new(),
            expiry_seq: 0,
            blocked_until: None,
            blocked: Default::default(),
            reassembler: Reassembler::new(),
            message_number: 0,
            stats: MemberStats::default(),
            started_ns: monotonic_ns(),
            membership_waiting: Vec::new(),
            faults: Faults { rng: realtime_ns() | 1, ..Faults::default() },
            datagram: vec![0; 65_536],
            client_input: vec![0; 64 * 1024],
            watch,
            heartbeat: Vec::with_capacity(kairos_fd::wire::MAX_HEARTBEAT_BYTES),
            raft_out: Vec::new(),
            probe: None,
            poller,
            polled: std::collections::HashMap::new(),
            doorbell_polled: None,
        })
    }

    /// Raft's socket (and the detector's, split from it where the kernel can) at `addr`.
    fn bind_udp(
        config: &MemberConfig,
        addr: SocketAddr,
    ) -> Result<(UdpSocket, Option<UdpSocket>), MemberError> {
        let bind_err = |source| MemberError::Bind { what: "raft", addr, source };
        // With the detector on, its heartbeats go to a second socket on the same address that
        // the loop reads each pass without sleeping on it: they wake no member (three members
        // would otherwise be woken 60,000 times a second), and their kernel receive stamps keep
        // the detector's times exact. Where the kernel cannot split the address, one socket.
        let (udp, beats) = match config.detector {
            Some(_) => match split::bind_split(addr, kairos_fd::wire::MAGIC) {
                Ok(s) => (s.main, Some(s.side)),
                Err(_) => (UdpSocket::bind(addr).map_err(bind_err)?, None),
            },
            None => (UdpSocket::bind(addr).map_err(bind_err)?, None),
        };
        udp.set_nonblocking(true).map_err(bind_err)?;
        let beats = beats.and_then(|b| kairos_sys::net::options::enable_rx_timestamps(&b).ok().map(|_| b));
        let _ = kairos_sys::net::options::set_receive_buffer(&udp, 8 << 20);
        if let Some(tos) = config.raft_tos {
            kairos_sys::net::options::set_type_of_service(&udp, tos).map_err(bind_err)?;
        }
        Ok((udp, beats))
    }

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
    /// Ready is handled once for all of it ([`Member::drain`]).
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
            for client in ready_conns {
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
        match self.poller.wait_until(Some(until), now) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok((false, false, Vec::new(), false)),
            Err(e) => return Err(e),
        }
        let udp = self.udp.as_ref().map(AsRawFd::as_raw_fd);
        let listener = self.listener.as_raw_fd();
        let probe = self.probe.as_ref().map(|(_, socket)| socket.as_raw_fd());
        let (mut raft_ready, mut listen_ready, mut probe_ready) = (self.lane.is_some(), false, false);
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
                && !ready.contains(&client)
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

    /// The Prometheus endpoint's part of a pass: new readers taken and waited on, a reader's
    /// whole request answered, readers past their deadline dropped.
    fn metrics_pass(&mut self, ready: &[RawFd]) -> io::Result<()> {
        let now = monotonic_ns();
        let Some(mut server) = self.metrics.take() else { return Ok(()) };
        let listener = server.listener().as_raw_fd();
        if ready.contains(&listener) {
            for stream in server.accept(now) {
                self.poller.add(stream)?;
            }
        }
        for &fd in ready.iter().filter(|&&fd| fd != listener) {
            server.serve(Some(fd), now, || metrics::render(&self.figures()));
        }
        // Expired readers: closing a socket takes it out of the epoll set.
        server.serve(None, now, String::new);
        self.metrics = Some(server);
        Ok(())
    }

    /// What the Prometheus endpoint reports.
    fn figures(&self) -> metrics::Figures {
        let s = &self.stats;
        metrics::Figures {
            id: self.config.id,
            term: self.replica.term(),
            leader: self.replica.leader(),
            commit: self.replica.commit_index(),
            applied: self.replica.applied(),
            lag: self.replica.follower_lag(),
            commands: [
                ("write", self.command_kinds[0]),
                ("read", self.command_kinds[1]),
                ("local", self.command_kinds[2]),
            ],
            latency: self.latency.clone(),
            clients: self.conns.len(),
            clients_refused: vec![
                ("maxclients", s.rejected_connections),
                ("query_buffer_limit", s.query_limit_closes),
                ("output_buffer_limit", s.output_limit_closes),
                ("protocol_error", s.protocol_errors),
                ("noauth", s.denied_noauth),
                ("wrongpass", s.denied_auth),
                ("noperm", s.denied_command),
            ],
            datagrams_in: s.datagrams_in,
            datagrams_out: s.datagrams_out,
            datagrams_refused: vec![
                ("stranger", s.refused_strangers),
                ("forged", s.refused_forged),
                ("replayed", s.refused_replayed),
                ("address", s.refused_address),
            ],
        }
    }

    /// Sends a probe to `leader`'s Raft address on a socket connected to it (made when the
    /// leader changes): an empty datagram, which a live member drops unread (only the answer
    /// matters). If no process holds the port, the host answers
    /// with ICMP port unreachable, which the connected socket reports as an error
    /// ([`Member::take_probe_answer`]). Not on the lane, where no such answer comes.
    fn send_probe(&mut self, leader: u64, now: u64) {
        if self.lane.is_some() || self.faults.drops(leader, now) {
            return;
        }
        let Some(addr) = self.config.peers.get(&leader).and_then(PeerAddr::udp) else { return };
        if self.probe.as_ref().is_none_or(|(to, _)| *to != leader) {
            self.probe = None;
            // This member's address from its settings: its Raft socket is out of `self` while
            // a datagram (a vote asked) is handled.
            let Some(own) = self.config.peers.get(&self.config.id).and_then(PeerAddr::udp) else { return };
            let made = UdpSocket::bind(SocketAddr::new(own.ip(), 0)).and_then(|socket| {
                socket.set_nonblocking(true)?;
                socket.connect(addr)?;
                Ok(socket)
            });
            let Ok(socket) = made else { return };
            // Closed, the last probe's socket left the poller by itself.
            if self.poller.add(&socket).is_err() {
                return;
            }
            self.probe = Some((leader, socket));
        }
        // Empty: only the answer matters (an ICMP error when the port is closed), and a member
        // takes nothing from an unsealed datagram anyway.
        let Some((_, socket)) = self.probe.as_ref() else { return };
        let _ = socket.send(&[]);
    }

    /// What the probe socket holds: an error of a refused probe makes its member suspected.
    fn take_probe_answer(&mut self, now: u64) {
        let Some((peer, socket)) = self.probe.as_ref() else { return };
        let mut refused = false;
        let mut buf = [0u8; 64];
        loop {
            match socket.recv(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => refused = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Nothing answers a probe with a datagram; anything else ends the look.
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if refused && let Some(watch) = self.watch.as_mut() {
            watch.refused(*peer, now);
        }
    }

    fn receive_raft(&mut self) -> io::Result<()> {
        if self.lane.is_some() {
            return self.receive_lane();
        }
        // Out of `self` while its datagrams are handled, which borrows `self` whole.
        let Some(udp) = self.udp.take() else { return Ok(()) };
        let received = self.receive_udp(&udp);
        self.udp = Some(udp);
        received
    }

    fn receive_udp(&mut self, udp: &UdpSocket) -> io::Result<()> {
        loop {
            let (n, source) = match udp.recv_from(&mut self.datagram) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ICMP errors from a peer that is down surface here: not ours to act on.
                Err(_) => return Ok(()),
            };
            // A probe of this port (see `send_probe`): nothing to take.
            if n == 0 {
                continue;
            }
            let datagram = std::mem::take(&mut self.datagram);
            let taken = match self.unseal(&datagram[..n], Some(source)) {
                Some((sender, body)) if body.starts_with(&kairos_fd::wire::MAGIC) => {
                    match replica_beat(body, &mut self.stats) {
                        Some(beat) if sender.is_none_or(|s| s == beat.heartbeat.member) => {
                            let now = monotonic_ns();
                            self.heard(beat, now, now)
                        }
                        Some(_) => {
                            self.stats.refused_address += 1;
                            Ok(())
                        }
                        None => Ok(()),
                    }
                }
                Some((sender, body)) => {
                    self.stats.datagrams_in += 1;
                    self.fragment(body, sender)
                }
                None => Ok(()),
            };
            self.datagram = datagram;
            taken?;
        }
    }

    /// The body of a datagram from another member and, when sealed, the member its seal
    /// names; `None` (counted) when the seal does not open or the datagram came from an
    /// address that is not that member's. Without a secret, every datagram as it came.
    fn unseal<'a>(
        &mut self,
        datagram: &'a [u8],
        source: Option<SocketAddr>,
    ) -> Option<(Option<u64>, &'a [u8])> {
        let Some(Seals { opener, .. }) = self.seal.as_mut() else { return Some((None, datagram)) };
        let peers = &self.config.peers;
        // The sender's address is checked with its id, before the seal's counter is taken: a
        // copy sent from elsewhere must not use up the counter of the real one.
        let member = |id: u64| {
            id != self.config.id && peers.get(&id).is_some_and(|p| source.is_none() || p.udp() == source)
        };
        match opener.open(datagram, member) {
            Ok((id, body)) => Some((Some(id), body)),
            Err(refusal) => {
                let count = match refusal {
                    Refusal::Stranger(_) => &mut self.stats.refused_strangers,
                    Refusal::Forged | Refusal::Short => &mut self.stats.refused_forged,
                    Refusal::Replayed => &mut self.stats.refused_replayed,
                };
                *count += 1;
                None
            }
        }
    }

    /// One fragment of a Raft message, from the member `sealed_by` when its seal named one; a
    /// message it completes is stepped.
    fn fragment(&mut self, bytes: &[u8], sealed_by: Option<u64>) -> io::Result<()> {
        // Sealed by one member, a fragment that says it is another's is kept by no one: the
        // reassembler holds messages only of the members that sealed them.
        if sealed_by.is_some_and(|s| kairos_services::frame::sender(bytes) != Some(s)) {
            self.stats.refused_address += 1;
            return Ok(());
        }
        match self.reassembler.push(bytes) {
            Ok(Some((from, _))) if self.faults.drops(from, monotonic_ns()) => {}
            Ok(Some((_, bytes))) => match decode_message(&bytes) {
                Ok(msg) => {
                    let now = monotonic_ns();
                    // Any word from a member is a heartbeat: its loop ran to send it.
                    if let Some(watch) = self.watch.as_mut() {
                        watch.heard_from(msg.from, now, now);
                    }
                    // A vote asked: the leader is judged first, on the heartbeats as they are now
                    // (a backup watcher has not looked since its last wake-up), so a member that
                    // no longer hears it grants the vote at once.
                    if matches!(
                        msg.get_msg_type(),
                        MessageType::MsgRequestPreVote | MessageType::MsgRequestVote
                    ) && self.watch.as_ref().is_some_and(|w| w.watches_anyone() && w.deadline_passed(now))
                    {
                        self.receive_beats(now)?;
                        self.judge(now);
                    }
                    // Still trusted: its port is asked, so that a leader whose process is gone
                    // is suspected before the candidate asks again.
                    if matches!(
                        msg.get_msg_type(),
                        MessageType::MsgRequestPreVote | MessageType::MsgRequestVote
                    ) && let Some(leader) = self.watch.as_mut().and_then(|w| w.probe_now(now))
                    {
                        self.send_probe(leader, now);
                    }
                    self.replica.step(msg);
                }
                Err(_) => self.stats.malformed += 1,
            },
            Ok(None) => {}
            Err(_) => self.stats.malformed += 1,
        }
        Ok(())
    }

    /// Everything the lane node delivered: fragments stepped, heartbeats at their packets'
    /// kernel receive stamps.
    fn receive_lane(&mut self) -> io::Result<()> {
        let Some(mut lane) = self.lane.take() else { return Ok(()) };
        let (_, offset) = realtime_offset();
        let mut result = Ok(());
        let me = self.config.id;
        let received = lane.receive(me, |incoming| {
            if result.is_err() {
                return;
            }
            result = match incoming {
                Incoming::Message(bytes) => {
                    self.stats.datagrams_in += 1;
                    self.fragment(bytes, None)
                }
                Incoming::Beat(bytes, stamp) => match replica_beat(bytes, &mut self.stats) {
                    // Read now: the node delivers while the inbox is read (and fragments are
                    // stepped between beats), so a time read before could precede the stamp.
                    Some(beat) => {
                        let now = monotonic_ns();
                        self.heard(beat, stamp_to_monotonic(stamp, offset, now), now)
                    }
                    None => Ok(()),
                },
            };
        });
        self.lane = Some(lane);
        received.map_err(io::Error::other)?;
        result
    }

    /// Every heartbeat waiting on the detector's own socket, each at its kernel receive stamp,
    /// handled at `now` (or at the stamp, for one that arrived after `now`).
    fn receive_beats(&mut self, now: u64) -> io::Result<()> {
        // Out of `self` while its heartbeats are handled, which borrows `self` whole.
        let Some(beats) = self.beats.take() else { return Ok(()) };
        let taken = self.take_beats(&beats, now);
        self.beats = Some(beats);
        taken
    }

    fn take_beats(&mut self, beats: &UdpSocket, now: u64) -> io::Result<()> {
        // The stamps are CLOCK_REALTIME.
        let (_, offset) = realtime_offset();
        loop {
            let mut refs = self.beat_buffers.each_mut().map(|b| &mut b[..]);
            let got = match self.beat_batch.recv_into(beats, &mut refs, true) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Nothing waiting, or an ICMP error from a peer that is down: not ours to act on.
                Err(_) => return Ok(()),
            };
            // A heartbeat that arrived after `now` (during this read) keeps its own time: set
            // back to `now`, its sender's silence would seem longer by the difference.
            let read = monotonic_ns();
            for i in 0..got {
                let len = self.beat_batch.lengths()[i];
                let at = self.beat_batch.rx_timestamps_ns()[i]
                    .map_or(read, |s| stamp_to_monotonic(s, offset, read));
                let buffer = self.beat_buffers[i];
                let source = self.beat_batch.sources()[i];
                let Some((sender, body)) = self.unseal(&buffer[..len], source) else { continue };
                match replica_beat(body, &mut self.stats) {
                    Some(beat) if sender.is_none_or(|s| s == beat.heartbeat.member) => {
                        self.heard(beat, at, now.max(at))?
                    }
                    Some(_) => self.stats.refused_address += 1,
                    None => {}
                }
            }
            if got < BEAT_BURST {
                return Ok(());
            }
        }
    }

    /// A member's heartbeat, received at `at` and handled at `now` (monotonic ns).
    fn heard(&mut self, beat: ReplicaBeat, at: u64, now: u64) -> io::Result<()> {
        let Some(watch) = self.watch.as_mut() else { return Ok(()) };
        let ReplicaBeat { heartbeat, term, commit } = beat;
        if self.faults.drops(heartbeat.member, now) {
            return Ok(());
        }
        watch.heard(&heartbeat, at, now);
        if term != 0 {
            self.replica.leader_commit(heartbeat.member, term, commit);
        }
        Ok(())
    }

    /// The detector's part of a pass: the liveness counter, heartbeats when due, and what a
    /// suspicion of the leader asks of the replica.
    fn watch_pass(&mut self, now: u64) -> io::Result<()> {
        let Some(watch) = self.watch.as_mut() else { return Ok(()) };
        watch.bump();
        let replica = &self.replica;
        watch.follow(replica.leader(), now, || replica.voters());
        let (udp, lane, peers, faults) = (&self.udp, &mut self.lane, &self.config.peers, &mut self.faults);
        let (seal, sealed) = (&mut self.seal, &mut self.raft_out);
        // One wall-clock read a round that sends, for the lane's hand-over stamps.
        let mut wall = None;
        watch.send_due(
            now,
            peers.keys().copied(),
            |peer| replica.commit_for(peer),
            &mut self.heartbeat,
            |peer, bytes| {
                if faults.drops(peer, now) {
                    return;
                }
                // A full buffer or a peer that is down loses one heartbeat; the next follows.
                match (udp, lane.as_mut(), peers[&peer].udp()) {
                    (Some(udp), _, Some(addr)) => match seal.as_mut() {
                        Some(Seals { heartbeats: sealer, .. }) => {
                            sealed.clear();
                            sealed.extend_from_slice(bytes);
                            sealer.seal(sealed);
                            let _ = udp.send_to(sealed, addr);
                        }
                        None => {
                            let _ = udp.send_to(bytes, addr);
                        }
                    },
                    (_, Some(lane), _) => lane.send_beat(peer, bytes, *wall.get_or_insert_with(realtime_ns)),
                    _ => {}
                }
            },
        );
        if let Some(leader) = self.watch.as_mut().and_then(|w| w.probe_due(now)) {
            self.send_probe(leader, now);
        }
        self.judge(now);
        Ok(())
    }

    /// The detector's verdict at `now` on the leader, and what a suspicion asks of the replica.
    fn judge(&mut self, now: u64) {
        let Some(watch) = self.watch.as_mut() else { return };
        watch.observe_term(self.replica.term());
        let replica = &self.replica;
        if let Some(Act::Suspect { leader, campaign }) =
            watch.poll(now, replica.leader(), || replica.voters())
        {
            self.replica.leader_suspected(leader, campaign);
        }
    }

    fn accept(&mut self) {
        while let Ok((mut stream, _)) = self.listener.accept() {
            if self.conns.len() >= self.config.max_clients {
                // Best effort, as Redis: the error if the socket takes it now, then closed.
                let _ = stream.set_nonblocking(true);
                let _ = std::io::Write::write(&mut stream, b"-ERR max number of clients reached\r\n");
                self.stats.rejected_connections += 1;
                continue;
            }
            self.next_client += 1;
            let client = self.client_base + self.next_client;
            if let Ok(mut conn) = Conn::new(stream, client, self.config.tls.clone()) {
                conn.user = self.config.acl.initial_user();
                self.conns.insert(client, conn);
                self.stats.connections += 1;
            }
        }
    }

    fn serve(&mut self, client: u64) {
        let Some(conn) = self.conns.get_mut(&client) else { return };
        conn.read(&mut self.client_input);
        while let Some(conn) = self.conns.get_mut(&client) {
            let Some(args) = conn.next_request() else { break };
            self.stats.commands += 1;
            self.route(client, args);
        }
    }

    fn route(&mut self, client: u64, args: Vec<Vec<u8>>) {
        if args[0].eq_ignore_ascii_case(b"auth") {
            let reply = self.auth(client, &args[1..]);
            if let Some(conn) = self.conns.get_mut(&client) {
                conn.answer(&reply);
            }
            return;
        }
        let spec = cmd::lookup(&args[0]);
        let store = match spec.map(|s| s.handler) {
            Some(cmd::Handler::Write(_) | cmd::Handler::Store) => Some(acl::Category::Write),
            Some(cmd::Handler::Read(_)) => Some(acl::Category::Read),
            _ => None,
        };
        let refusal = self.refusal(client, &args, store);
        if let Some(spec) = spec {
            let counts = self.command_stats.entry(spec.name).or_default();
            counts[usize::from(refusal.is_some() || !spec.arity_fits(args.len()))] += 1;
        }
        if let Some(refusal) = refusal {
            if let Some(conn) = self.conns.get_mut(&client) {
                if conn.multi.is_some() {
                    conn.multi_failed = true;
                }
                conn.answer(&Reply::Error(refusal));
            }
            return;
        }
        self.command_kinds[match store {
            Some(acl::Category::Write) => 0,
            Some(acl::Category::Read) => 1,
            _ => 2,
        }] += 1;
        if self.queue_in_multi(client, &args, spec)
            || self.session_command(client, &args, spec.map_or("", |s| s.name))
        {
            return;
        }
        if args[0].eq_ignore_ascii_case(b"acl")
            && args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"whoami"))
        {
            if let Some(conn) = self.conns.get_mut(&client) {
                let user = conn.user.clone().unwrap_or_default();
                conn.answer(&Reply::Bulk(user.into_bytes()));
            }
            return;
        }
        if args[0].eq_ignore_ascii_case(b"kairos.fault") {
            let reply = self.fault_command(&args[1..]);
            if let Some(conn) = self.conns.get_mut(&client) {
                conn.answer(&reply);
            }
            return;
        }
        if args[0].eq_ignore_ascii_case(b"kairos.member") {
            let reply = self.member_command(client, &args[1..]);
            if let (Some(reply), Some(conn)) = (reply, self.conns.get_mut(&client)) {
                conn.answer(&reply);
            }
            return;
        }
        let Some(db) = self.conns.get(&client).map(|c| c.db) else { return };
        match typed(spec, args, db) {
            Err(reply) => {
                if let Some(conn) = self.conns.get_mut(&client) {
                    conn.answer(&reply);
                }
            }
            Ok(Command::Local(op)) => {
                if op.name == "quit" {
                    if let Some(conn) = self.conns.get_mut(&client) {
                        conn.answer_and_close(&Reply::Ok);
                    }
                    return;
                }
                let reply = self.answer_local(&op);
                if let Some(conn) = self.conns.get_mut(&client) {
                    conn.answer(&reply);
                }
            }
            Ok(command) => {
                let Some(conn) = self.conns.get_mut(&client) else { return };
                let seq = conn.await_answer();
                // A blocking pop keeps its words to be proposed again (only those: a clone per
                // write would cost every SET).
                let blocking = match &command {
                    Command::Write(op @ WriteOp::Exec { args, .. }) if session::is_blocking(&args[0]) => {
                        Some(op.clone())
                    }
                    _ => None,
                };
                conn.hold(seq, command);
                if let Some(op) = blocking {
                    self.note_blocking(client, seq, &op);
                }
                self.release(client);
            }
        }
    }

    /// Answers a member command; what INFO reports is gathered only if the command reports it.
    fn answer_local(&mut self, op: &crate::kv::LocalOp) -> Reply {
        // The settings are lent out while the member is read for its facts.
        let mut settings = std::mem::replace(&mut self.settings, info::Settings::empty());
        let reply = info::local(op, &|| self.info(), &mut settings);
        self.settings = settings;
        reply
    }

    /// `AUTH [user] password`: the connection becomes the user if the password is its.
    fn auth(&mut self, client: u64, args: &[Vec<u8>]) -> Reply {
        let (user, password) = match args {
            [password] if !self.config.acl.default_needs_password() => {
                return Reply::Error(
                    "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".into(),
                );
            }
            [password] => ("default".to_string(), password),
            [user, password] => (String::from_utf8_lossy(user).into_owned(), password),
            _ => return Reply::Error("ERR syntax error".into()),
        };
        if !self.config.acl.authenticate(&user, password) {
            self.stats.denied_auth += 1;
            return Reply::Error(acl::WRONGPASS.into());
        }
        if let Some(conn) = self.conns.get_mut(&client) {
            conn.user = Some(user);
        }
        Reply::Ok
    }

    /// Why a connection may not run `args` (a store command of category `store`, if one), in
    /// Redis's words: not authenticated (only QUIT and HELLO are), or not permitted.
    fn refusal(&mut self, client: u64, args: &[Vec<u8>], store: Option<acl::Category>) -> Option<String> {
        let conn = self.conns.get(&client)?;
        match &conn.user {
            None if args[0].eq_ignore_ascii_case(b"quit") || args[0].eq_ignore_ascii_case(b"hello") => None,
            None => {
                self.stats.denied_noauth += 1;
                Some(acl::NOAUTH.to_string())
            }
            Some(user) => {
                let category = acl::Category::of(args, store);
                if self.config.acl.permits(user, &args[0], category) {
                    return None;
                }
                self.stats.denied_command += 1;
                Some(acl::noperm(&args[0]))
            }
        }
    }

    /// Hands a connection's held requests to the replica as far as their order allows.
    fn release(&mut self, client: u64) {
        let Some(conn) = self.conns.get_mut(&client) else { return };
        while let Some((seq, completed_below, command)) = conn.release() {
            let ticket = Ticket { client, seq };
            match command {
                Command::Write(op) => self.replica.submit_write(ticket, completed_below, op),
                Command::Read(op) => self.replica.submit_read(ticket, op),
                Command::Local(_) => {}
            }
        }
    }

    /// `KAIROS.MEMBER LIST | ADD id host:port [LEARNER] | REMOVE id`: the membership, and
    /// changes to it (answered once applied here, or with an error after 5 s). Returns the
    /// answer to give now, if any.
    fn member_command(&mut self, client: u64, args: &[Vec<u8>]) -> Option<Reply> {
        use raft::eraftpb::ConfChangeType;
        let usage = || {
            Reply::Error(
                "ERR usage: KAIROS.MEMBER LIST | ADD id host:port|lane-host [LEARNER] | REMOVE id".into(),
            )
        };
        let word = |i: usize| args.get(i).map(|a| String::from_utf8_lossy(a).to_ascii_lowercase());
        let (change, node, context) = match (word(0).as_deref(), args.len()) {
            (Some("list"), 1) => {
                let voters = self.replica.voters();
                let learners = self.replica.learners();
                let mut ids: Vec<u64> = voters.iter().chain(&learners).copied().collect();
                ids.sort_unstable();
                ids.dedup();
                let rows = ids
                    .iter()
                    .map(|id| {
                        let addr = self.config.peers.get(id).map_or("?".to_string(), |a| a.to_string());
                        let role = if voters.contains(id) { "voter" } else { "learner" };
                        let leader = if *id == self.replica.leader() { " leader" } else { "" };
                        Reply::Bulk(format!("{id} {addr} {role}{leader}").into_bytes())
                    })
                    .collect();
                return Some(Reply::Array(rows));
            }
            (Some("add"), 3 | 4) => {
                let id = word(1).and_then(|w| w.parse::<u64>().ok()).filter(|&i| i > 0);
                // Not lower-cased: a lane host's name is the topology's, as written.
                let addr = std::str::from_utf8(&args[2]).ok().and_then(|w| w.parse::<PeerAddr>().ok());
                let learner = match word(3).as_deref() {
                    None => false,
                    Some("learner") => true,
                    Some(_) => return Some(usage()),
                };
                let (Some(id), Some(addr)) = (id, addr) else { return Some(usage()) };
                // Before `can_add`, which gives the lane's tunnel the new host: not for a
                // change that would be refused.
                if self.replica.membership_busy() {
                    return Some(Reply::Error(BUSY.to_string()));
                }
                if let Err(e) = self.can_add(id, &addr) {
                    return Some(Reply::Error(format!("ERR {e}")));
                }
                // As it parses back: `lane:h3` or HOST:PORT.
                let change = if learner { ConfChangeType::AddLearnerNode } else { ConfChangeType::AddNode };
                (change, id, addr.to_string().into_bytes())
            }
            (Some("remove"), 2) => {
                let Some(id) = word(1).and_then(|w| w.parse::<u64>().ok()).filter(|&i| i > 0) else {
                    return Some(usage());
                };
                (ConfChangeType::RemoveNode, id, Vec::new())
            }
            _ => return Some(usage()),
        };
        match self.replica.propose_membership(change, node, context.clone()) {
            Ok(()) => {
                let conn = self.conns.get_mut(&client)?;
                let seq = conn.await_answer();
                let now = monotonic_ns();
                self.membership_waiting.push(MembershipWait {
                    change,
                    node,
                    context,
                    client,
                    seq,
                    deadline_ns: now + MEMBERSHIP_TIMEOUT_NS,
                    proposed_ns: now,
                });
                None
            }
            Err(raft::Error::ProposalDropped) => Some(Reply::Error(BUSY.to_string())),
            Err(e) => Some(Reply::Error(format!("ERR membership change refused: {e}"))),
        }
    }

    /// Whether member `id` at `addr` can join: an address of the cluster's kind, and on the
    /// lane a host the lane has (this member's tunnel is given it now, which the node refuses
    /// for a host not in the lane's topology), no host shared, and room in a packet for the
    /// heartbeats.
    fn can_add(&mut self, id: u64, addr: &PeerAddr) -> Result<(), JoinRefusal> {
        let Some(lane) = self.lane.as_mut() else {
            return match addr {
                PeerAddr::Udp(_) => Ok(()),
                PeerAddr::Lane(h) => Err(JoinRefusal::LaneHostOffLane(h.to_string())),
            };
        };
        let PeerAddr::Lane(_) = addr else {
            return Err(JoinRefusal::NotLaneHost(addr.clone()));
        };
        let mut peers = self.config.peers.clone();
        peers.insert(id, addr.clone());
        let hosts = lane_link::other_hosts(self.config.id, &peers)?;
        if !lane.carries(peers.len()) {
            return Err(JoinRefusal::PacketTooSmall(peers.len()));
        }
        if lane.changing_receivers() {
            return Err(JoinRefusal::Changing);
        }
        lane.try_receivers(hosts)
            .map_err(|e| JoinRefusal::LaneRefused { addr: addr.clone(), reason: e.to_string() })
    }

    /// `KAIROS.FAULT PARTITION ms [peer ...] | LOSS percent ms | HEAL`: drops this member's
    /// Raft datagrams to and from the peers named (all others when none) for `ms`
    /// milliseconds, or any of them with a probability; only with `allow_faults`.
    fn fault_command(&mut self, args: &[Vec<u8>]) -> Reply {
        if !self.config.allow_faults {
            return Reply::Error(
                "ERR faults are not allowed on this member (start it with --allow-faults)".into(),
            );
        }
        let usage = || {
            Reply::Error("ERR usage: KAIROS.FAULT PARTITION ms [peer ...] | LOSS percent ms | HEAL".into())
        };
        let number = |i: usize| {
            args.get(i).and_then(|a| std::str::from_utf8(a).ok()).and_then(|s| s.parse::<u64>().ok())
        };
        let word = args.first().map(|a| a.to_ascii_lowercase());
        let now = monotonic_ns();
        match word.as_deref() {
            Some(b"partition") => {
                let Some(ms) = number(1).filter(|&ms| ms <= 3_600_000) else { return usage() };
                let mut peers: Vec<u64> = (2..args.len()).filter_map(number).collect();
                if peers.len() != args.len().saturating_sub(2) {
                    return usage();
                }
                if peers.is_empty() {
                    peers = self.config.peers.keys().copied().filter(|&p| p != self.config.id).collect();
                }
                for p in peers {
                    self.faults.cut.insert(p, now + ms * 1_000_000);
                }
                Reply::Ok
            }
            Some(b"loss") if args.len() == 3 => {
                let (Some(percent), Some(ms)) =
                    (number(1).filter(|&p| p <= 100), number(2).filter(|&ms| ms <= 3_600_000))
                else {
                    return usage();
                };
                self.faults.loss = (percent as f64 / 100.0, now + ms * 1_000_000);
                Reply::Ok
            }
            Some(b"heal") if args.len() == 1 => {
                self.faults.cut.clear();
                self.faults.loss = (0.0, 0);
                Reply::Ok
            }
            _ => usage(),
        }
    }

    fn membership_applied(&mut self) -> io::Result<()> {
        use raft::eraftpb::ConfChangeType;
        let events = self.replica.take_membership_events();
        for event in &events {
            match event.change {
                ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                    if let Some(addr) =
                        std::str::from_utf8(&event.context).ok().and_then(|a| a.parse::<PeerAddr>().ok())
                    {
                        self.config.peers.insert(event.node, addr);
                    }
                }
                ConfChangeType::RemoveNode if event.node != self.config.id => {
                    self.config.peers.remove(&event.node);
                }
                ConfChangeType::RemoveNode => {}
            }
            let (done, rest): (Vec<_>, Vec<_>) = self
                .membership_waiting
                .drain(..)
                .partition(|w| w.node == event.node && w.change == event.change);
            self.membership_waiting = rest;
            for w in done {
                if let Some(conn) = self.conns.get_mut(&w.client) {
                    conn.complete(w.seq, &Reply::Ok);
                }
            }
        }
        if !events.is_empty() {
            save_peers(&self.config.data_dir.join(PEERS_FILE), &self.config.peers)?;
            if let Some(watch) = self.watch.as_mut() {
                watch.set_peers(self.config.peers.keys().copied(), monotonic_ns());
            }
            // The tunnel to the members' hosts as they are now.
            if let Some(lane) = self.lane.as_mut()
                && let Ok(hosts) = lane_link::other_hosts(self.config.id, &self.config.peers)
            {
                // A refusal is counted and asked again; the old tunnel goes on meanwhile.
                lane.set_receivers(hosts);
            }
        }
        if self.membership_waiting.is_empty() {
            return Ok(());
        }
        let now = monotonic_ns();
        // A change missing from the log a while after it was proposed was lost or emptied on
        // the way: proposed again (when the leader would take it), so the client hears of it
        // when it is applied rather than never.
        for w in &mut self.membership_waiting {
            if now >= w.proposed_ns + MEMBERSHIP_RETRY_NS
                && !self.replica.membership_busy()
                && !self.replica.membership_change_in_log(w.node)
                && self.replica.propose_membership(w.change, w.node, w.context.clone()).is_ok()
            {
                w.proposed_ns = now;
            }
        }
        let (late, rest): (Vec<_>, Vec<_>) =
            self.membership_waiting.drain(..).partition(|w| w.deadline_ns <= now);
        self.membership_waiting = rest;
        for w in late {
            if let Some(conn) = self.conns.get_mut(&w.client) {
                let error = format!(
                    "ERR the change of member {} was not applied within 5 s (no leader all that time, or changes ahead of it that did not apply): check KAIROS.MEMBER LIST and try again",
                    w.node
                );
                conn.complete(w.seq, &Reply::Error(error));
            }
        }
        Ok(())
    }

    fn info(&self) -> info::Facts {
        info::Facts {
            id: self.config.id,
            leader: self.replica.leader(),
            term: self.replica.term(),
            applied: self.replica.applied(),
            voters: self.replica.voters(),
            peers: self.config.peers.clone(),
            read_mode: self.config.read_mode,
            sync: self.config.sync,
            tick: self.config.tick,
            keys: self.replica.store().len(realtime_ns() / 1_000_000),
            keyspace: self.replica.store().keyspace(realtime_ns() / 1_000_000),
            command_stats: self.command_stats.clone(),
            clients: self.conns.len(),
            blocked_clients: self
                .blocked
                .iter()
                .filter(|id| self.conns.get(id).is_some_and(|c| c.blocking.iter().any(|b| b.waiting)))
                .count(),
            uptime_s: (monotonic_ns() - self.started_ns) / 1_000_000_000,
            stats: self.stats,
            replica: self.replica.stats(),
            listen: self.config.listen,
            lane: self.lane.as_ref().map(|l| (l.name().to_string(), l.stats())),
            max_clients: self.config.max_clients,
            watch: self.watch.as_ref().map(|w| (w.config(), w.stats(), w.suspected().collect())),
        }
    }

    /// The end of a pass: Raft's Ready (its ordinary messages sent before this member
    /// persists, the rest after), the answers it made, the clients' output.
    fn drain(&mut self) -> io::Result<()> {
        // What the pass's steps sent outside a Ready (the leader's word of a commit).
        self.send_raft();
        loop {
            while self.replica.begin_ready() {
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
            if let Some(conn) = self.conns.remove(&id) {
                self.polled.remove(&conn.stream.as_raw_fd());
            }
            self.replica.forget_client(id);
        }
        Ok(())
    }

    /// Sends the replica's messages: datagrams on UDP, fragments queued on the lane.
    fn send_raft(&mut self) {
        let messages = self.replica.take_messages();
        if messages.is_empty() {
            return;
        }
        let now = monotonic_ns();
        // One wall-clock read for the lane's hand-over stamps.
        let wall = if self.lane.is_some() { realtime_ns() } else { 0 };
        for msg in messages {
            let Some(addr) = self.config.peers.get(&msg.to) else { continue };
            if self.faults.drops(msg.to, now) {
                continue;
            }
            if let Some(watch) = self.watch.as_mut() {
                watch.sent_to(msg.to, now);
            }
            self.raft_out.clear();
            encode_message(&msg, &mut self.raft_out);
            self.message_number += 1;
            if let Some(lane) = self.lane.as_mut() {
                let Some(parts) =
                    fragments_of(self.config.id, self.message_number, &self.raft_out, lane.fragment_bytes())
                else {
                    lane.note_too_large();
                    continue;
                };
                for fragment in parts {
                    lane.queue_message(self.message_number, msg.to, &fragment, wall);
                    self.stats.datagrams_out += 1;
                }
                continue;
            }
            let (Some(udp), Some(addr)) = (self.udp.as_ref(), addr.udp()) else { continue };
            for mut datagram in
                fragments(self.config.id, self.message_number, &self.raft_out).unwrap_or_default()
            {
                if let Some(seals) = self.seal.as_mut() {
                    seals.messages.seal(&mut datagram);
                }
                // A full socket buffer or a peer that is down loses the message; Raft resends.
                if udp.send_to(&datagram, addr).is_ok() {
                    self.stats.datagrams_out += 1;
                }
            }
        }
    }
}

/// Why a new member cannot join: the text after `ERR` in the reply to `KAIROS.MEMBER ADD`.
#[derive(Debug, thiserror::Error)]
enum JoinRefusal {
    /// A lane host named for a cluster on UDP.
    #[error("{0} is a lane host, but this cluster is not on the lane: give HOST:PORT")]
    LaneHostOffLane(String),
    /// A UDP address named for a cluster on the lane.
    #[error("this cluster is on the lane: give the new member's lane host (h3), not {0}")]
    NotLaneHost(PeerAddr),
    /// The members with the newcomer do not make a lane cluster (a host shared).
    #[error(transparent)]
    LaneCluster(#[from] lane_link::LaneClusterError),
    /// The tunnel's packet cannot carry a fragment beside the heartbeats of this many members.
    #[error(
        "the lane tunnel's packet holds no fragment beside heartbeats for {0} members: start the members with a larger --lane-packet-bytes"
    )]
    PacketTooSmall(usize),
    /// The tunnels are still following the last change.
    #[error(
        "the last change of membership is still being applied to the lane's tunnels: try again in a second"
    )]
    Changing,
    /// The lane's node refused the tunnel to the newcomer's host.
    #[error("the lane refused a tunnel to {addr}: {reason}")]
    LaneRefused {
        /// The newcomer's address.
        addr: PeerAddr,
        /// The node's answer.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, sync: Sync) -> MemberConfig {
        MemberConfig {
            id: 1,
            peers: BTreeMap::from([(1, "127.0.0.1:0".parse().unwrap())]),
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.to_path_buf(),
            sync,
            tick: Duration::from_millis(1),
            period: Duration::from_micros(100),
            heartbeat_ticks: 2,
            election_ticks: 20,
            read_mode: ReadMode::ReadIndex,
            join: false,
            allow_faults: false,
            batching: Batching::Pass,
            thrifty: None,
            raft_tos: None,
            detector: None,
            lane: None,
            secret: None,
            acl: acl::Acl::default(),
            max_clients: DEFAULT_MAX_CLIENTS,
            tls: None,
            metrics: None,
        }
    }

    #[test]
    fn an_unsynced_log_from_an_earlier_boot_is_refused_and_one_from_this_boot_taken() {
        let dir = tempfile::tempdir().unwrap();
        drop(Member::open(config(dir.path(), Sync::Never)).unwrap());
        // The same boot: the page cache kept everything; the member returns.
        drop(Member::open(config(dir.path(), Sync::Never)).unwrap());
        // Another boot wrote it: refused, with what to do.
        std::fs::write(dir.path().join(BOOT_FILE), "an-earlier-boot\n").unwrap();
        let err = Member::open(config(dir.path(), Sync::Never)).unwrap_err().to_string();
        assert!(err.contains("cannot return as the voter it was"), "{err}");
        // A synced log is whole whatever happened to the machine.
        std::fs::write(dir.path().join(BOOT_FILE), "an-earlier-boot\n").unwrap();
        drop(Member::open(config(dir.path(), Sync::Always)).unwrap());
    }

    #[test]
    fn the_lane_cluster_is_named_once_and_kept_through_membership_changes() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path(), Sync::Never);
        c.peers = (1..=3).map(|i| (i, PeerAddr::Lane(format!("h{}", i - 1)))).collect();
        let lane = |cluster: Option<&str>| LaneConfig {
            link: LaneLinkConfig {
                node_dir: dir.path().join("node"),
                period: Duration::from_micros(100),
                packet_bytes: 1_472,
            },
            poll: Duration::from_millis(1),
            cluster: cluster.map(str::to_string),
        };
        // A new cluster: named from its peers, and the name kept.
        let named = |c: &MemberConfig, l: &LaneConfig| {
            let name = lane_cluster_name(c, l)?;
            keep_lane_cluster(c, &name).map(|()| name)
        };
        let first = named(&c, &lane(None)).unwrap();
        assert_eq!(first, lane_link::tunnel_name(lane_link::LANE_TUNNEL, &c.peers));
        // After a change of membership the peers differ; the kept name holds.
        c.peers.insert(4, PeerAddr::Lane("h3".into()));
        assert_eq!(named(&c, &lane(None)).unwrap(), first);
        assert_eq!(named(&c, &lane(Some(&first))).unwrap(), first);
        // Another cluster's name for this data is refused, with what to give.
        let err = named(&c, &lane(Some("kv-lane-other"))).unwrap_err().to_string();
        assert!(err.contains(&format!("give --lane-cluster {first}")), "{err}");
        // A member joining with an empty directory takes the name it is given.
        let joiner = tempfile::tempdir().unwrap();
        let mut j = config(joiner.path(), Sync::Never);
        j.peers = c.peers.clone();
        j.join = true;
        let err = named(&j, &lane(None)).unwrap_err().to_string();
        assert!(err.contains("needs its tunnels' name: give --lane-cluster"), "{err}");
        assert!(!joiner.path().join(LANE_CLUSTER_FILE).exists(), "nothing kept from a refusal");
        assert_eq!(named(&j, &lane(Some(&first))).unwrap(), first);
        assert_eq!(named(&j, &lane(None)).unwrap(), first, "kept for its restarts");
    }
}

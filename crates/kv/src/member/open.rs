//! Opening a member: the sockets (or the lane's tunnels) bound, the log opened or created, and
//! the replica's settings derived from the member's. A log that an unsynced earlier boot may
//! have cut short is refused; the lane cluster's name is kept in the data directory for restarts.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use kairos_sys::clock::{monotonic_ns, realtime_ns};
use kairos_sys::net::poll::Epoll;
use kairos_sys::net::{MmsgBatch, split};

use super::faults::Faults;
use super::membership::{PEERS_FILE, load_peers};
use super::watch::Watch;
use super::{
    BEAT_BURST, BEAT_DATAGRAM_BYTES, LaneConfig, Member, MemberConfig, MemberError, MemberStats, POLL_BATCH,
    Seals, info, metrics,
};
use crate::replica::{FileDisk, LogStore, Replica, ReplicaConfig, Sync};
use kairos_services::frame::Reassembler;
use kairos_services::lane_link::{self, LaneLink};
use kairos_services::peer::{self, PeerAddr};
use kairos_services::seal::{Opener, Sealer, Stream};

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
        // Its connections inherit the kernel's receive stamps, the order the loop serves them in
        // (`Member::read_in_arrival_order`). Without them (a kernel that refuses) clients are
        // served oldest connection first, which the store's answers do not depend on.
        let _ = kairos_sys::net::options::enable_rx_timestamps(&listener);
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
        let mut member = Self {
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
            busy_poll_until: 0,
            blocked: Default::default(),
            reassembler: Reassembler::new(),
            message_number: 0,
            stats: MemberStats::default(),
            started_ns: monotonic_ns(),
            membership_waiting: Vec::new(),
            faults: Faults::new(realtime_ns() | 1),
            raft_rx: Some(super::RaftReceive::new()),
            client_input: vec![0; 64 * 1024],
            watch,
            heartbeat: Vec::with_capacity(kairos_fd::wire::MAX_HEARTBEAT_BYTES),
            raft_out: Vec::new(),
            probe: None,
            poller,
            polled: std::collections::HashMap::new(),
            doorbell_polled: None,
        };
        member.drop_earlier_waiters();
        Ok(member)
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
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::member::{Batching, DEFAULT_MAX_CLIENTS, acl};
    use crate::replica::ReadMode;
    use kairos_services::lane_link::LaneLinkConfig;

    pub(crate) fn config(dir: &std::path::Path, sync: Sync) -> MemberConfig {
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
            busy_poll: None,
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

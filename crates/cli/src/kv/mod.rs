//! `kairos kv`: the replicated key-value store from the command line. The flags only parse
//! here: they land in the experiment's configuration, whose `plan` checks each against its
//! limits before anything starts (a bad value is a usage error, exit code 2).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use kairos_kv::member::{Member, MemberConfig, PeerAddr};
use kairos_kv::replica::{ReadMode, Sync};
use kairos_lab::experiments::kv_check;
use kairos_services::seal::ClusterSecret;

use crate::exit;
use cluster::ClusterArgs;

mod cluster;
pub(crate) mod config_file;

#[derive(Args)]
pub struct KvArgs {
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(Subcommand)]
enum KvCommand {
    /// Correctness under faults: simulated clusters (crashes of the leader and followers, power
    /// loss, partitions, packet loss, pauses) with clients doing SET/GET/INCR/APPEND; every
    /// history checked for linearizability and every acknowledged write looked for at the end;
    /// then broken replicas the checker must catch; then a run of real member processes under
    /// kill -9 and SIGSTOP. Full: 10,000 histories and 60 s of real processes (about 5 min on
    /// two cores); --quick: 1,000 and 10 s (under a minute).
    Check(CheckArgs),
    /// One member of a cluster: Raft over UDP to its peers, Redis's protocol over TCP for
    /// clients (any member takes any command). Runs until SIGINT/SIGTERM; its log in --data
    /// lets it restart where it stopped.
    Serve(ServeArgs),
    /// A cluster on this machine, the embedded default: starts N members on loopback, prints
    /// where to connect (redis-cli -p PORT), and stops them all on Ctrl-C.
    Cluster(ClusterArgs),
    /// Latency, throughput and failover beside Redis, Redis with WAIT and etcd. Full: 10 s a
    /// point, 20 failover trials, etcd on tmpfs and on the disk (about 35 minutes on two cores
    /// with 3 runs); --quick: 2 s a point, 5 trials, etcd on tmpfs only (about 7 minutes).
    /// Servers' data that goes to the disk goes under --results while they run.
    Bench(crate::kv_bench::KvBenchArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum Fsync {
    /// Sync the log before votes and acknowledgements leave: survives a machine crash.
    Always,
    /// Leave the log in the page cache: survives the process's crash, not the machine's.
    Never,
}

/// The Raft loop's flags, shared by serve and cluster.
#[derive(Args, Clone)]
struct RaftArgs {
    /// The failure detector's heartbeat period (and on the lane its tunnel's), microseconds,
    /// 10-1000000; default 3000 on UDP (a leader sends one only to a follower that had no
    /// other word from it within half a period), 100 on the lane. See docs/store.md's trade-off
    /// of this period against idle CPU and failover time (scripts/kv-detector-tradeoff).
    #[arg(long, value_name = "US")]
    period_us: Option<u64>,
    /// One tick of Raft's logical clock (elections, Raft's own heartbeats, retries),
    /// microseconds, 100-100000. The loop wakes for a tick only when one has work.
    #[arg(long, value_name = "US", default_value_t = kairos_kv::member::DEFAULT_TICK_US)]
    tick_us: u64,
    /// Ticks between the leader's Raft heartbeats, 1-1000 (with the failure detector on, at
    /// least half of --election-ticks: the detector's heartbeats do their work).
    #[arg(long, value_name = "N", default_value_t = 2)]
    heartbeat_ticks: usize,
    /// Ticks a follower waits for the leader before it campaigns (drawn in [N, 2N)), more than
    /// the heartbeat's, at most 100000. Default 100 with the failure detector on (Raft's
    /// timeout is then only its backstop, and the leader's Raft heartbeats, half of it apart,
    /// wake no one often), 10 with --no-fd.
    #[arg(long, value_name = "N")]
    election_ticks: Option<usize>,
    /// Whether the log is synced before votes and acknowledgements go out.
    #[arg(long, value_enum, default_value_t = Fsync::Always)]
    fsync: Fsync,
    /// Answer reads from local state at once (not linearizable; INFO says so).
    #[arg(long)]
    stale_reads: bool,
    /// When requests are proposed: `pass` (after each pass of the loop over the clients that
    /// spoke: a lone request waits for nothing, a busy pass's share one entry) or `period` (at
    /// the next tick: a period's share one entry).
    #[arg(long, value_enum, default_value_t = BatchingArg::Pass)]
    batching: BatchingArg,
    /// The failure detector's threshold Lambda, microseconds: a member is suspected when no
    /// heartbeat with news came for a period (--period-us) plus this; a suspected leader is
    /// replaced at once. 0-10000000; default 100000 on UDP (longer than a busy machine's stalls
    /// of a live leader; a leader whose process died is found within milliseconds by the probe
    /// of its port: --fd-probe-us), 2000 on the lane (a heartbeat
    /// waits for its tunnel's release and the receiver's look at its inbox).
    #[arg(long, value_name = "US")]
    fd_lambda_us: Option<u64>,
    /// Thrifty replication: the leader sends a write's append at once only to the followers
    /// its quorum needs (those furthest along) and holds the others' up to this long,
    /// microseconds, so they go several at a time, off the write's path. 0-100000, 0 to send
    /// every append at once; default 1000 on UDP, 0 on the lane (an append waits for its
    /// tunnel's release anyway).
    #[arg(long, value_name = "US")]
    thrifty_us: Option<u64>,
    /// After a pass that took a client's request, the member looks at its sockets without
    /// sleeping for this long, microseconds, yielding its core to anything else that would run
    /// (0-10000, 0 to sleep at once): the client's next request finds it awake instead of
    /// waiting for a halted CPU to be woken, tens of microseconds on a virtual machine. A
    /// member with no client costs nothing. Default 200 on UDP, 0 on the lane.
    #[arg(long, value_name = "US")]
    busy_poll_us: Option<u64>,
    /// After the period plus this long without a word from its leader, a follower asks the
    /// leader's port, microseconds, 0-10000000 (0: never): a host whose member's process is
    /// gone answers at once that the port is closed, and the leader is replaced then rather
    /// than after --fd-lambda-us. On UDP only (the lane carries no such answer).
    #[arg(long, value_name = "US", default_value_t = kairos_kv::member::watch::DEFAULT_PROBE_US)]
    fd_probe_us: u64,
    /// No failure detector: a lost leader is noticed by Raft's election timeout alone.
    #[arg(long)]
    no_fd: bool,
    /// Who sends the detector's heartbeats: `leader` (the leader to each follower, which
    /// watches only it: all a store needs to replace a lost leader) or `all` (every member to
    /// every other, each watching all: three times the datagrams with three members).
    /// Default: `leader` on UDP; `all` on the lane, where a member's heartbeats to all are one
    /// packet a period, and a follower that sent none would leave its tunnel idle, which the
    /// lane's controller then gives a longer period (its unused room given back), too slow
    /// for the member's votes when it must campaign.
    #[arg(long, value_enum)]
    fd_fanout: Option<FanoutArg>,
}

#[derive(Clone, Copy, ValueEnum)]
enum FanoutArg {
    /// The leader to its followers.
    Leader,
    /// Every member to every other.
    All,
}

/// The lane's tunnel, for members on the lane (shared by serve and cluster). Its period is the
/// detector's (--period-us): each release carries the heartbeats and, in the rest of the
/// packet, Raft's messages.
#[derive(Args, Clone)]
struct LaneArgs {
    /// The tunnel's packet, bytes, up to 1472: with the period, the tunnel's rate (1472 bytes
    /// every 100 us is 118 Mbit/s, to each other member).
    #[arg(long, value_name = "BYTES", default_value_t = 1472)]
    lane_packet_bytes: u64,
    /// The longest the member's loop sleeps without looking at its inbox, microseconds,
    /// 1-100000: the node rings a doorbell after each delivery, so this is only a safety net.
    #[arg(long, value_name = "US", default_value_t = 1000)]
    lane_poll_us: u64,
}

impl LaneArgs {
    fn config(&self, node_dir: PathBuf, members: usize) -> Result<kairos_kv::member::LaneConfig> {
        if !(1..=100_000).contains(&self.lane_poll_us) {
            return Err(exit::usage(format!(
                "--lane-poll-us {} is out of range: 1 to 100000",
                self.lane_poll_us
            )));
        }
        let link = kairos_services::lane_link::LaneLinkConfig {
            node_dir,
            // The detector's, set by the member.
            period: Duration::from_micros(100),
            packet_bytes: self.lane_packet_bytes,
        };
        link.check(members).map_err(|e| exit::usage(format!("--lane-packet-bytes: {e}")))?;
        Ok(kairos_kv::member::LaneConfig {
            link,
            poll: Duration::from_micros(self.lane_poll_us),
            cluster: None,
        })
    }

    fn to_flags(&self) -> Vec<String> {
        vec![
            format!("--lane-packet-bytes={}", self.lane_packet_bytes),
            format!("--lane-poll-us={}", self.lane_poll_us),
        ]
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum BatchingArg {
    /// After each pass of the loop.
    Pass,
    /// At each period's tick.
    Period,
}

impl RaftArgs {
    /// Raft's election timeout in ticks: the one given, else the default with or without the
    /// detector.
    fn election_ticks(&self) -> usize {
        self.election_ticks.unwrap_or(kairos_kv::member::default_election_ticks(!self.no_fd))
    }

    /// The detector's period, us: the one given, else the default for the network.
    fn period_us(&self, on_lane: bool) -> u64 {
        self.period_us.unwrap_or(kairos_kv::member::default_period_us(on_lane))
    }

    fn check(&self) -> Result<()> {
        if let Some(us) = self.period_us.filter(|us| !(10..=1_000_000).contains(us)) {
            return Err(exit::usage(format!("--period-us {us} is out of range: 10 to 1000000")));
        }
        if !(100..=100_000).contains(&self.tick_us) {
            return Err(exit::usage(format!("--tick-us {} is out of range: 100 to 100000", self.tick_us)));
        }
        if !(1..=1000).contains(&self.heartbeat_ticks) {
            return Err(exit::usage(format!(
                "--heartbeat-ticks {} is out of range: 1 to 1000",
                self.heartbeat_ticks
            )));
        }
        if let Some(us) = self.thrifty_us.filter(|&us| us > 100_000) {
            return Err(exit::usage(format!("--thrifty-us {us} is out of range: 0 to 100000")));
        }
        if let Some(why) = self.busy_poll_us.and_then(kairos_kv::member::busy_poll_us_refusal) {
            return Err(exit::usage(why));
        }
        if self.fd_probe_us > 10_000_000 {
            return Err(exit::usage(format!(
                "--fd-probe-us {} is out of range: 0 to 10000000",
                self.fd_probe_us
            )));
        }
        if let Some(us) = self.fd_lambda_us.filter(|&us| us > 10_000_000) {
            return Err(exit::usage(format!(
                "--fd-lambda-us {us} is out of range: 0 to 10000000 (or --no-fd)"
            )));
        }
        let election_ticks = self.election_ticks();
        if election_ticks <= self.heartbeat_ticks || election_ticks > 100_000 {
            return Err(exit::usage(format!(
                "--election-ticks {election_ticks} must be more than --heartbeat-ticks ({}) and at most 100000",
                self.heartbeat_ticks
            )));
        }
        Ok(())
    }

    fn to_flags(&self) -> Vec<String> {
        let mut flags = vec![
            format!("--tick-us={}", self.tick_us),
            format!("--heartbeat-ticks={}", self.heartbeat_ticks),
            format!("--election-ticks={}", self.election_ticks()),
            format!(
                "--fsync={}",
                match self.fsync {
                    Fsync::Always => "always",
                    Fsync::Never => "never",
                }
            ),
        ];
        if let Some(us) = self.period_us {
            flags.push(format!("--period-us={us}"));
        }
        if self.stale_reads {
            flags.push("--stale-reads".into());
        }
        if let Some(us) = self.thrifty_us {
            flags.push(format!("--thrifty-us={us}"));
        }
        if let Some(us) = self.busy_poll_us {
            flags.push(format!("--busy-poll-us={us}"));
        }
        flags.push(format!("--fd-probe-us={}", self.fd_probe_us));
        if let Some(us) = self.fd_lambda_us {
            flags.push(format!("--fd-lambda-us={us}"));
        }
        if self.no_fd {
            flags.push("--no-fd".into());
        }
        match self.fd_fanout {
            Some(FanoutArg::All) => flags.push("--fd-fanout=all".into()),
            Some(FanoutArg::Leader) => flags.push("--fd-fanout=leader".into()),
            None => {}
        }
        flags.push(format!(
            "--batching={}",
            match self.batching {
                BatchingArg::Pass => "pass",
                BatchingArg::Period => "period",
            }
        ));
        flags
    }
}

#[derive(Args)]
struct ServeArgs {
    /// This member's id, one of --peers.
    #[arg(long)]
    id: u64,
    /// Every member's Raft address, this one's included, comma-separated: ID=HOST:PORT for
    /// Raft over UDP, or ID=LANE-HOST (e.g. 1=h0) with --lane-node.
    #[arg(long, value_delimiter = ',', required = true)]
    peers: Vec<String>,
    /// Where clients connect (RESP over TCP).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6380")]
    listen: SocketAddr,
    /// The member's log directory (created when missing).
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// Join a running cluster: start knowing no membership and wait to be added
    /// (`redis-cli -p PORT KAIROS.MEMBER ADD ID HOST:PORT` at any member). Only for a new, empty
    /// --data directory.
    #[arg(long)]
    join: bool,
    /// Take KAIROS.FAULT commands: partitions and message loss at this member's Raft
    /// transport, for checks such as kv check (never on a member that serves real data).
    #[arg(long)]
    allow_faults: bool,
    /// Mark Raft's datagrams as lane traffic (DSCP EF), which the lane's testbed and a host
    /// set up by the lane's doctor serve first.
    #[arg(long)]
    lane_class: bool,
    /// Run on the express lane: the directory of this host's lane node (`kairos lane node
    /// --dir`). Raft and the detector's heartbeats then travel on tunnels this member asks
    /// for, to the lane hosts --peers names.
    #[arg(long, value_name = "DIR")]
    lane_node: Option<PathBuf>,
    /// On the lane, the name of the cluster's tunnels (INFO's lane_tunnel at any member): a
    /// member added with --join must be given it. Default: the one the data directory keeps,
    /// else one made from --peers (a new cluster).
    #[arg(long, value_name = "NAME")]
    lane_cluster: Option<String>,
    /// The cluster's secret, the same file at every member (16 to 4096 bytes; e.g. `head -c 32
    /// /dev/urandom > FILE`, mode 0600): every Raft and heartbeat datagram between members is
    /// sealed under it, and one whose seal does not open is dropped and counted (INFO
    /// raft_refused_*). Required on UDP; on the lane the lane's controller admits the tunnels.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    #[command(flatten)]
    clients: ClientArgs,
    /// Serve clients over TLS with this certificate chain (PEM, leaf first); with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Settings from a TOML file whose keys are these flags without the dashes (e.g. `id = 1`,
    /// `peers = ["1=10.0.0.1:7380", ...]`, `secret-file = "..."`); a flag on the command line
    /// wins over the file's key. See examples/kv/.
    #[arg(long, value_name = "FILE")]
    #[allow(dead_code)] // Read before the parse (`config_file::expand`); declared for --help.
    config: Option<PathBuf>,
    /// Serve Prometheus's text format at http://ADDR/metrics: commands by kind, a latency
    /// histogram, Raft's term, commit and applied index and leader, followers' lag, refused
    /// clients and datagrams (no data of the store; bind it where only your scraper reaches).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Ask every client for a certificate signed by this authority (PEM), and refuse one
    /// without, as Redis's tls-auth-clients.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_ca_cert: Option<PathBuf>,
    #[command(flatten)]
    lane: LaneArgs,
    #[command(flatten)]
    raft: RaftArgs,
}

/// Who may be a client, and how many at once (serve and cluster).
#[derive(Args, Clone)]
struct ClientArgs {
    /// The most clients connected at once; one more is told "max number of clients reached"
    /// and closed (INFO rejected_connections), as Redis's maxclients.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    maxclients: usize,
    /// A file holding the password clients must give (AUTH password) before any other
    /// command, as Redis's requirepass (one line; a trailing newline is not part of it).
    #[arg(long, value_name = "FILE")]
    requirepass_file: Option<PathBuf>,
    /// A file of users in Redis's ACL syntax, e.g. `user app on >PASSWORD ~* +@read +@write`
    /// (rules: on, off, nopass, >pw, #sha256, ~*, +@/-@ all|read|write|admin|connection,
    /// +/-command); the default user is then off unless the file or --requirepass-file turns it
    /// on. Clients give AUTH user password.
    #[arg(long, value_name = "FILE")]
    users_file: Option<PathBuf>,
}

/// The largest password or users file read.
const MAX_AUTH_FILE_BYTES: u64 = 1 << 20;

impl ClientArgs {
    /// The default user's password from --requirepass-file, if given.
    fn password(&self) -> Result<Option<Vec<u8>>> {
        let Some(path) = &self.requirepass_file else { return Ok(None) };
        let mut bytes = kairos_sys::fs::read_bytes(path, MAX_AUTH_FILE_BYTES)
            .map_err(|e| exit::usage(format!("--requirepass-file {e}")))?;
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        if bytes.is_empty() {
            return Err(exit::usage(format!("--requirepass-file {} is empty", path.display())));
        }
        Ok(Some(bytes))
    }

    fn acl(&self) -> Result<kairos_kv::member::acl::Acl> {
        if self.maxclients == 0 {
            return Err(exit::usage("--maxclients must be at least 1"));
        }
        let password = self.password()?;
        let users = match &self.users_file {
            Some(path) => {
                let bytes = kairos_sys::fs::read_bytes(path, MAX_AUTH_FILE_BYTES)
                    .map_err(|e| exit::usage(format!("--users-file {e}")))?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| exit::usage(format!("--users-file {} is not UTF-8 text", path.display())))?;
                Some((path, text))
            }
            None => None,
        };
        kairos_kv::member::acl::Acl::new(users.as_ref().map(|(_, t)| t.as_str()), password.as_deref())
            .map_err(|e| {
                let path = users.as_ref().map_or_else(String::new, |(p, _)| p.display().to_string());
                exit::usage(format!("--users-file {path}: {e}"))
            })
    }

    fn to_flags(&self) -> Vec<String> {
        let mut flags = vec![format!("--maxclients={}", self.maxclients)];
        if let Some(p) = &self.requirepass_file {
            flags.push(format!("--requirepass-file={}", p.display()));
        }
        if let Some(p) = &self.users_file {
            flags.push(format!("--users-file={}", p.display()));
        }
        flags
    }
}

/// The largest secret file read: a secret is a few dozen bytes.
const MAX_SECRET_BYTES: u64 = 4096;

/// The cluster's secret from `--secret-file`, required on UDP.
fn cluster_secret(path: Option<&std::path::Path>, on_lane: bool) -> Result<Option<ClusterSecret>> {
    let Some(path) = path else {
        if on_lane {
            return Ok(None);
        }
        return Err(exit::usage(
            "--secret-file is required: give every member the same file of 16 to 4096 random bytes (head -c 32 /dev/urandom > FILE); kairos kv cluster makes one in its data directory",
        ));
    };
    let bytes = kairos_sys::fs::read_bytes(path, MAX_SECRET_BYTES)
        .map_err(|e| exit::usage(format!("--secret-file {e}")))?;
    let secret = ClusterSecret::new(&bytes)
        .map_err(|e| exit::usage(format!("--secret-file {}: {e}", path.display())))?;
    Ok(Some(secret))
}

fn parse_peers(peers: &[String]) -> Result<BTreeMap<u64, PeerAddr>> {
    let mut out = BTreeMap::new();
    for peer in peers {
        let (id, addr) = peer.split_once('=').ok_or_else(|| {
            exit::usage(format!("--peers entry '{peer}' is not ID=HOST:PORT (e.g. 1=127.0.0.1:7380)"))
        })?;
        let id: u64 = id.parse().ok().filter(|&i| i > 0).ok_or_else(|| {
            exit::usage(format!("--peers entry '{peer}': the id must be a whole number from 1"))
        })?;
        let addr: PeerAddr = addr.parse().map_err(|e| exit::usage(format!("--peers entry '{peer}': {e}")))?;
        if out.insert(id, addr).is_some() {
            return Err(exit::usage(format!("--peers names member {id} twice")));
        }
    }
    Ok(out)
}

fn serve(a: &ServeArgs) -> Result<i32> {
    a.raft.check()?;
    let peers = parse_peers(&a.peers)?;
    if !peers.contains_key(&a.id) {
        return Err(exit::usage(format!(
            "--id {} is not among --peers (members {:?})",
            a.id,
            peers.keys().collect::<Vec<_>>()
        )));
    }
    let lane = match &a.lane_node {
        Some(dir) => {
            if let Some((id, addr)) = peers.iter().find(|(_, p)| p.lane_host().is_none()) {
                return Err(exit::usage(format!(
                    "--lane-node needs every --peers entry to be a lane host (ID=h0), but member {id}'s is {addr}"
                )));
            }
            let mut lane = a.lane.config(dir.clone(), peers.len())?;
            if let Some(name) = &a.lane_cluster {
                let valid = (1..=64).contains(&name.len())
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
                if !valid {
                    return Err(exit::usage(format!(
                        "--lane-cluster '{name}' is not a tunnel name: 1 to 64 letters, digits, '-', '_' or '.' (INFO's lane_tunnel)"
                    )));
                }
            }
            lane.cluster = a.lane_cluster.clone();
            Some(lane)
        }
        None => {
            if a.lane_cluster.is_some() {
                return Err(exit::usage(
                    "--lane-cluster is for members on the lane: give --lane-node DIR too".to_string(),
                ));
            }
            if let Some((id, addr)) = peers.iter().find(|(_, p)| p.udp().is_none()) {
                return Err(exit::usage(format!(
                    "member {id}'s address {addr} is a lane host: give --lane-node DIR (this host's lane node), or HOST:PORT"
                )));
            }
            None
        }
    };
    let secret = cluster_secret(a.secret_file.as_deref(), a.lane_node.is_some())?;
    let acl = a.clients.acl()?;
    // No transparent huge pages, as Redis turns them off for itself: a fault that zeroes 2 MB
    // holds every client of the member (kairos_sys::memory says how long). Best effort.
    if let Err(e) = kairos_sys::memory::disable_transparent_huge_pages() {
        eprintln!("kairos kv serve: transparent huge pages stay on ({e}): a fault may take milliseconds");
    }
    // Room for every client and the member's own files and sockets, as Redis makes it: a
    // member out of descriptors would find its listener ready at every wait and spin.
    const OWN_FILES: u64 = 64;
    let files = kairos_sys::proc::raise_open_files(a.clients.maxclients as u64 + OWN_FILES)
        .context("cannot read the limit on open files")?;
    let max_clients = (a.clients.maxclients as u64).min(files.saturating_sub(OWN_FILES)).max(1) as usize;
    if max_clients < a.clients.maxclients {
        eprintln!(
            "kairos kv serve: --maxclients {} lowered to {max_clients}: this process may open only {files} files (ulimit -n)",
            a.clients.maxclients
        );
    }
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => Some(
            kairos_kv::member::tls::server_config(&kairos_kv::member::tls::TlsFiles {
                cert,
                key,
                client_ca: a.tls_ca_cert.as_deref(),
            })
            .map_err(|e| exit::usage(e.to_string()))?,
        ),
        _ => None,
    };
    let config = MemberConfig {
        id: a.id,
        peers,
        listen: a.listen,
        data_dir: a.data.clone(),
        sync: match a.raft.fsync {
            Fsync::Always => Sync::Always,
            Fsync::Never => Sync::Never,
        },
        tick: Duration::from_micros(a.raft.tick_us),
        period: Duration::from_micros(a.raft.period_us(a.lane_node.is_some())),
        heartbeat_ticks: a.raft.heartbeat_ticks,
        election_ticks: a.raft.election_ticks(),
        read_mode: if a.raft.stale_reads { ReadMode::Stale } else { ReadMode::ReadIndex },
        join: a.join,
        allow_faults: a.allow_faults,
        batching: match a.raft.batching {
            BatchingArg::Pass => kairos_kv::member::Batching::Pass,
            BatchingArg::Period => kairos_kv::member::Batching::Period,
        },
        thrifty: unless_zero(
            a.raft.thrifty_us.unwrap_or(kairos_kv::member::default_thrifty_us(a.lane_node.is_some())),
        ),
        busy_poll: unless_zero(
            a.raft.busy_poll_us.unwrap_or(kairos_kv::member::default_busy_poll_us(a.lane_node.is_some())),
        ),
        raft_tos: a.lane_class.then_some(kairos_io::lane_testbed::LANE_TOS),
        detector: (!a.raft.no_fd).then_some(kairos_kv::member::watch::WatchConfig {
            period_ns: a.raft.period_us(a.lane_node.is_some()) * 1_000,
            lambda_ns: a.raft.fd_lambda_us.unwrap_or(kairos_kv::member::watch::default_lambda_us(
                matches!(a.raft.fsync, Fsync::Always),
                a.lane_node.is_some(),
            )) * 1_000,
            probe_ns: (a.lane_node.is_none() && a.raft.fd_probe_us != 0)
                .then_some(a.raft.fd_probe_us * 1_000),
            fanout: match (a.raft.fd_fanout, a.lane_node.is_some()) {
                (Some(FanoutArg::Leader), _) | (None, false) => kairos_kv::member::watch::Fanout::Leader,
                (Some(FanoutArg::All), _) | (None, true) => kairos_kv::member::watch::Fanout::All,
            },
        }),
        lane,
        secret,
        acl,
        max_clients,
        tls,
        metrics: a.metrics,
    };
    let mut member = Member::open(config).with_context(|| format!("member {}", a.id))?;
    eprintln!("kairos kv serve: member {} takes clients on {}", a.id, member.client_addr()?);
    if let Some(lane) = member.lane_description() {
        eprintln!("kairos kv serve: member {} is {lane}", a.id);
    }
    // SIGINT/SIGTERM end the process through the cleanup handler; the log is already on disk
    // as far as --fsync promises, so there is nothing to finish.
    member.run(&AtomicBool::new(false))?;
    Ok(exit::OK)
}

/// A flag's microseconds as a duration, where 0 means the mechanism is off.
fn unless_zero(us: u64) -> Option<Duration> {
    (us > 0).then(|| Duration::from_micros(us))
}

#[derive(Args)]
struct CheckArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Histories (seeds) to check, 1-1000000; default: 1000 with --quick, else 10000.
    #[arg(long, value_name = "N")]
    seeds: Option<u64>,
    /// The first seed; a failing seed N replays with --first-seed N --seeds 1.
    #[arg(long, value_name = "N", default_value_t = 0)]
    first_seed: u64,
    /// Seeds per broken mode in the checker's self-test, 0-100000 (0: no self-test); default:
    /// 40 with --quick, else 200.
    #[arg(long, value_name = "N")]
    self_test_seeds: Option<u64>,
    /// Members of each cluster, 3-7.
    #[arg(long, value_name = "N", default_value_t = 3)]
    members: usize,
    /// Simulated time per history, milliseconds, 50-60000.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    duration_ms: u64,
    /// Seconds of the run on real processes (kairos kv serve members, kill -9, SIGSTOP), 0
    /// (none) or 3-3600; default: 10 with --quick, else 60.
    #[arg(long, value_name = "S")]
    real_seconds: Option<f64>,
    /// Run the real processes each in a network namespace of the lane's testbed (needs root),
    /// cut off by the kernel: their link down, or nftables dropping their Raft port (in turn;
    /// the link alone where `nft` is missing). Default: on loopback, cut off at their transport.
    #[arg(long)]
    testbed: bool,
    /// What the simulated clients do: `register` (GET, SET, INCR, APPEND, judged linearizable)
    /// or `list-append` (MULTI/EXEC of RPUSH and LRANGE on three keys, under every fault and
    /// membership changes during partitions, judged strictly serializable; its self-test
    /// splits each transaction into two entries). The real-process run is register's.
    #[arg(long, value_name = "KIND", default_value = "register", value_parser = ["register", "list-append"])]
    workload: String,
}

/// Runs a `kairos kv` command (`check`, `serve`, `cluster` or `bench`); the exit code on
/// success.
pub fn run(args: &KvArgs) -> Result<i32> {
    match &args.command {
        KvCommand::Check(a) => {
            let mut config = kv_check::CheckConfig::preset(a.common.quick);
            config.seeds = a.seeds.unwrap_or(config.seeds);
            config.first_seed = a.first_seed;
            config.self_test_seeds = a.self_test_seeds.unwrap_or(config.self_test_seeds);
            config.members = a.members;
            config.duration_ms = a.duration_ms;
            config.real_seconds = a.real_seconds.unwrap_or(config.real_seconds);
            config.testbed = a.testbed;
            config.workload = if a.workload == "list-append" {
                kairos_kv::sim::Workload::ListAppend
            } else {
                kairos_kv::sim::Workload::Register
            };
            config.kairos = Some(std::env::current_exe().context("cannot find the kairos executable")?);
            let common = a.common.clone();
            crate::experiment(&common, &config, kv_check::report)
        }
        KvCommand::Serve(a) => serve(a),
        KvCommand::Cluster(a) => cluster::cluster(a),
        KvCommand::Bench(a) => crate::kv_bench::run(a),
    }
}

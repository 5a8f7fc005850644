//! The real-process half of `kv check`: a cluster of `kairos kv serve` processes on loopback,
//! or each in a network namespace of the lane's testbed (`--testbed`, root), clients on threads
//! speaking RESP over TCP, and faults: `kill -9` of the leader or a follower (restarted from its
//! log after a while), SIGSTOP/SIGCONT of one, a member cut off, and message loss everywhere
//! (made at the members' Raft transport with `KAIROS.FAULT`, which `--allow-faults` enables).
//! On the testbed a member is cut off by the kernel instead, in turn: its link taken down (the
//! bridge's port to it: clients lose it too), and nftables in its namespace dropping the Raft
//! port both ways (clients still reach it: a cut-off leader keeps taking requests). The clients
//! then run in a host of their own on the testbed.
//! Every request's invocation and answer are timed on `CLOCK_MONOTONIC` at the client; a
//! request with no answer within a second, or whose connection broke, has an unknown outcome
//! and its client reconnects under a new id. The history goes to the same checker as the
//! simulation's.
//!
//! Owners: the members are [`OwnedChild`]ren (ended on every path, Ctrl-C included); the
//! clients are scoped threads stopped by a flag that a guard sets on every way out.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use kairos_io::lane_testbed::{LaneTestbed, LaneTestbedConfig, host_address, nftables_available};
use kairos_kv::kv::Reply;
use kairos_kv::resp::client::{self, Connection, leader_from_info};
use kairos_kv::sim::{FaultKind, OpKind, SimOp, lost_writes};
use kairos_sys::child::OwnedChild;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What the real-process run does.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RealConfig {
    /// The `kairos` executable the members run.
    pub kairos: PathBuf,
    /// Members.
    pub members: usize,
    /// Client threads.
    pub clients: usize,
    /// Keys.
    pub keys: usize,
    /// Seconds of requests under faults.
    pub seconds: f64,
    /// The seed of the clients' and the faults' choices.
    pub seed: u64,
    /// Members in network namespaces of the lane's testbed (root), cut off by the kernel.
    pub testbed: bool,
}

/// What it found (the history is checked by the caller).
#[derive(Debug, Clone)]
pub struct RealRun {
    /// Every request.
    pub history: Vec<SimOp>,
    /// Faults made, by kind.
    pub faults: Vec<FaultKind>,
    /// Acknowledged appends missing at the end (`None`: the final reads failed).
    pub lost_acknowledged_writes: Option<u64>,
    /// How members were cut off: `transport` (`KAIROS.FAULT`), `link` or `nftables`, counted.
    pub partitions: BTreeMap<&'static str, u64>,
}

struct Member {
    child: Option<OwnedChild>,
    client: SocketAddr,
}

struct Cluster<'a> {
    config: &'a RealConfig,
    data: PathBuf,
    peers: String,
    members: Vec<Member>,
    /// The testbed the members run on, if any.
    bed: Option<&'a LaneTestbed>,
}

impl Cluster<'_> {
    fn start(&mut self, i: usize) -> Result<()> {
        let mut command = match self.bed {
            Some(bed) => bed.host_command(i, &self.config.kairos.to_string_lossy())?,
            None => Command::new(&self.config.kairos),
        };
        command
            .args(["kv", "serve", "--id", &(i + 1).to_string(), "--peers", &self.peers])
            .arg(format!("--listen={}", self.members[i].client))
            .arg(format!("--data={}", self.data.join(format!("m{}", i + 1)).display()))
            .arg(format!("--secret-file={}", self.data.join("secret").display()))
            .args(["--period-us", "200", "--election-ticks", "50", "--allow-faults"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = OwnedChild::spawn_named(&mut command, format!("kv member {}", i + 1))
            .context("start a member")?;
        self.members[i].child = Some(child);
        Ok(())
    }

    fn leader(&self) -> Option<usize> {
        self.members.iter().filter(|m| m.child.is_some()).find_map(|m| {
            let mut conn = Connection::connect(m.client, Duration::from_millis(300)).ok()?;
            let info = conn.info("replication").ok()?;
            usize::try_from(leader_from_info(&info)? - 1).ok()
        })
    }
}

/// One request on a fresh connection (for INFO and the final reads).
fn request(addr: SocketAddr, args: &[&str], timeout: Duration) -> Result<Reply> {
    let mut conn = Connection::connect(addr, timeout)?;
    call(&mut conn, args)
}

/// One request, its reply in the store's terms (the history's).
fn call<A: AsRef<[u8]>>(conn: &mut Connection, args: &[A]) -> Result<Reply> {
    let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
    Ok(store_reply(conn.call(&args)?))
}

/// A reply in the store's terms, which the history and its checker speak. A status other than
/// OK and PONG, and a null array, which a member never sends, become errors.
fn store_reply(reply: client::Reply) -> Reply {
    match reply {
        client::Reply::Status(s) if s == "OK" => Reply::Ok,
        client::Reply::Status(s) if s == "PONG" => Reply::Simple("PONG"),
        client::Reply::Status(s) => Reply::Error(format!("unexpected status {s}")),
        client::Reply::Error(e) => Reply::Error(e),
        client::Reply::Integer(n) => Reply::Integer(n),
        client::Reply::Bulk(b) => Reply::Bulk(b),
        client::Reply::NullBulk => Reply::Nil,
        client::Reply::Array(items) => Reply::Array(items.into_iter().map(store_reply).collect()),
        client::Reply::NullArray => Reply::Error("unexpected null array".into()),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(0, |a| a.port())
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map_or(0, |a| a.port())
}

/// Sets the stop flag on every way out of the run, so the client threads end.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The ports of every member on the testbed (each has an address of its own).
const TESTBED_CLIENT_PORT: u16 = 6379;
const TESTBED_RAFT_PORT: u16 = 7379;
/// How the kernel cuts a member off on the testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// The bridge's port to it down: clients lose it too.
    Link,
    /// nftables in its namespace drops its Raft port both ways: clients still reach it.
    Nftables,
}

impl Cut {
    fn name(self) -> &'static str {
        match self {
            Cut::Link => "link",
            Cut::Nftables => "nftables",
        }
    }

    /// Cuts member `i` off (`cut`) or restores it.
    fn apply(self, bed: &LaneTestbed, i: usize, cut: bool) -> Result<()> {
        let done = match self {
            Cut::Link => bed.set_host_link(i, !cut),
            Cut::Nftables => bed.block_udp_port(i, TESTBED_RAFT_PORT, cut),
        };
        done.with_context(|| format!("cutting member {} off by {}", i + 1, self.name()))
    }
}

/// Runs the cluster under faults, then reads every key.
pub fn run(config: &RealConfig, data: &Path) -> Result<RealRun> {
    if !config.testbed {
        return run_on(config, data, None);
    }
    // A host per member and one for the clients; removed on every way out (drop, signal).
    let bed = LaneTestbed::create(LaneTestbedConfig { hosts: config.members + 1, ..Default::default() })
        .context("cannot make the lane testbed for the real-process run")?;
    // The clients, and every request of this thread, from the last host; threads made there
    // stay in its namespace.
    bed.in_host(config.members, || run_on(config, data, Some(&bed)))?
}

fn run_on(config: &RealConfig, data: &Path, bed: Option<&LaneTestbed>) -> Result<RealRun> {
    let (clients, rafts): (Vec<SocketAddr>, Vec<SocketAddr>) = match bed {
        Some(_) => (0..config.members)
            .map(|i| {
                let ip = host_address(i);
                (SocketAddr::from((ip, TESTBED_CLIENT_PORT)), SocketAddr::from((ip, TESTBED_RAFT_PORT)))
            })
            .unzip(),
        None => (0..config.members).map(|_| (loopback(free_port()), loopback(free_udp_port()))).unzip(),
    };
    let peers = rafts.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect::<Vec<_>>().join(",");
    let members = clients.iter().map(|&client| Member { child: None, client }).collect();
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    kairos_services::seal::write_new_secret(&data.join("secret")).context("the cluster's secret")?;
    let mut cluster = Cluster { config, data: data.to_path_buf(), peers, members, bed };
    let nft = bed.is_some() && nftables_available();
    let mut partitions: BTreeMap<&'static str, u64> = BTreeMap::new();
    for i in 0..config.members {
        cluster.start(i)?;
    }
    let start = Instant::now();
    while cluster.leader().is_none() {
        if start.elapsed() > Duration::from_secs(10) {
            bail!("the real cluster elected no leader in 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let epoch = Instant::now();
    let now_us = || epoch.elapsed().as_micros() as u64;
    let history = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let next_client = AtomicU64::new(1);
    let mut faults = Vec::new();
    let ports = clients.clone();
    std::thread::scope(|scope| -> Result<()> {
        let _stop = StopOnDrop(&stop);
        for c in 0..config.clients {
            let (history, stop, next_client, ports) = (&history, &stop, &next_client, &ports);
            let mut rng = StdRng::seed_from_u64(config.seed.wrapping_mul(1000).wrapping_add(c as u64));
            scope.spawn(move || {
                let mut conn: Option<(Connection, u64, u64)> = None;
                while !stop.load(Ordering::Relaxed) {
                    if conn.is_none() {
                        let port = ports[rng.random_range(0..ports.len())];
                        match Connection::connect(port, Duration::from_secs(1)) {
                            Ok(c) => conn = Some((c, next_client.fetch_add(1, Ordering::Relaxed), 0)),
                            Err(_) => {
                                std::thread::sleep(Duration::from_millis(20));
                                continue;
                            }
                        }
                    }
                    let Some((c, id_ref, seq_ref)) = conn.as_mut() else { continue };
                    *seq_ref += 1;
                    let (id, seq) = (*id_ref, *seq_ref);
                    let key = format!("k{}", rng.random_range(0..config.keys));
                    let unique = format!("{id}.{seq};");
                    let (kind, args): (OpKind, Vec<String>) = match rng.random_range(0..100) {
                        0..40 => (OpKind::Get, vec!["GET".into(), key.clone()]),
                        40..70 => (
                            OpKind::Set(unique.clone().into_bytes()),
                            vec!["SET".into(), key.clone(), unique],
                        ),
                        70..85 => (OpKind::Incr, vec!["INCR".into(), key.clone()]),
                        _ => (
                            OpKind::Append(unique.clone().into_bytes()),
                            vec!["APPEND".into(), key.clone(), unique],
                        ),
                    };
                    let call_us = now_us();
                    let answer = call(c, &args);
                    let return_us = now_us();
                    let (output, return_us) = match answer {
                        Ok(reply) => (Some(reply), Some(return_us)),
                        Err(_) => (None, None),
                    };
                    if output.is_none() {
                        // The outcome is unknown: this client retires; a new one reconnects.
                        conn = None;
                    }
                    history.lock().unwrap_or_else(|p| p.into_inner()).push(SimOp {
                        client: id,
                        key: key.into_bytes(),
                        kind,
                        output,
                        call_us,
                        return_us,
                    });
                    std::thread::sleep(Duration::from_micros(rng.random_range(0..2_000)));
                }
            });
        }
        // Faults, one at a time, from this thread.
        let mut rng = StdRng::seed_from_u64(config.seed);
        let end = Instant::now() + Duration::from_secs_f64(config.seconds);
        while Instant::now() + Duration::from_millis(1_500) < end {
            std::thread::sleep(Duration::from_millis(rng.random_range(300..900)));
            // The kinds in turn, so a short run meets each: the leader killed, paused, cut
            // off; a follower killed, paused, cut off; loss everywhere.
            let leader = cluster.leader();
            let round = faults.len() % 7;
            let kind = [
                FaultKind::CrashLeader,
                FaultKind::Pause,
                FaultKind::Partition,
                FaultKind::CrashFollower,
                FaultKind::Pause,
                FaultKind::Partition,
                FaultKind::Loss,
            ][round];
            let follower = (0..config.members)
                .filter(|&i| Some(i) != leader)
                .nth(rng.random_range(0..config.members - 1))
                .unwrap_or(0);
            let target = if round < 3 { leader.unwrap_or(follower) } else { follower };
            let outage = Duration::from_millis(rng.random_range(200..800));
            match kind {
                FaultKind::Partition if let Some(bed) = bed => {
                    // Link and nftables in turn (the link alone where nft is missing).
                    let cut = if nft && partitions.values().sum::<u64>() % 2 == 1 {
                        Cut::Nftables
                    } else {
                        Cut::Link
                    };
                    *partitions.entry(cut.name()).or_insert(0) += 1;
                    cut.apply(bed, target, true)?;
                    std::thread::sleep(outage);
                    cut.apply(bed, target, false)?;
                }
                FaultKind::Partition | FaultKind::Loss => {
                    if kind == FaultKind::Partition {
                        *partitions.entry("transport").or_insert(0) += 1;
                    }
                    let ms = outage.as_millis().to_string();
                    let percent = rng.random_range(5..30).to_string();
                    let targets: Vec<usize> =
                        if kind == FaultKind::Loss { (0..config.members).collect() } else { vec![target] };
                    for t in targets {
                        let args: Vec<&str> = if kind == FaultKind::Loss {
                            vec!["KAIROS.FAULT", "LOSS", &percent, &ms]
                        } else {
                            vec!["KAIROS.FAULT", "PARTITION", &ms]
                        };
                        // The cut member drops its side; the others drop theirs to it.
                        request(cluster.members[t].client, &args, Duration::from_secs(1))?;
                        if kind == FaultKind::Partition {
                            let id = (t + 1).to_string();
                            for other in (0..config.members).filter(|&o| o != t) {
                                let args = ["KAIROS.FAULT", "PARTITION", &ms, &id];
                                request(cluster.members[other].client, &args, Duration::from_secs(1))?;
                            }
                        }
                    }
                    std::thread::sleep(outage);
                }
                FaultKind::Pause => {
                    let child = cluster.members[target].child.as_ref().context("a member to pause")?;
                    child.signal(libc::SIGSTOP)?;
                    std::thread::sleep(outage);
                    child.signal(libc::SIGCONT)?;
                }
                _ => {
                    let mut child = cluster.members[target].child.take().context("a member to kill")?;
                    child.signal(libc::SIGKILL)?;
                    let _ = child.wait();
                    std::thread::sleep(outage);
                    cluster.start(target)?;
                }
            }
            faults.push(kind);
        }
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    })?;
    // Every member up; let them settle, then read every key at member 1.
    std::thread::sleep(Duration::from_millis(500));
    let mut finals = BTreeMap::new();
    let mut history = history.into_inner().unwrap_or_else(|p| p.into_inner());
    let final_client = next_client.fetch_add(1, Ordering::Relaxed);
    let mut complete = true;
    for k in 0..config.keys {
        let key = format!("k{k}");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let call_us = now_us();
            match request(clients[0], &["GET", &key], Duration::from_secs(1)) {
                Ok(reply @ (Reply::Bulk(_) | Reply::Nil)) => {
                    let value = match &reply {
                        Reply::Bulk(v) => Some(v.clone()),
                        _ => None,
                    };
                    history.push(SimOp {
                        client: final_client + k as u64,
                        key: key.clone().into_bytes(),
                        kind: OpKind::Get,
                        output: Some(reply),
                        call_us,
                        return_us: Some(now_us()),
                    });
                    finals.insert(key.into_bytes(), value);
                    break;
                }
                _ if Instant::now() > deadline => {
                    complete = false;
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    history.sort_by_key(|op| op.call_us);
    let lost = complete.then(|| lost_writes(&history, &finals));
    Ok(RealRun { history, faults, lost_acknowledged_writes: lost, partitions })
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

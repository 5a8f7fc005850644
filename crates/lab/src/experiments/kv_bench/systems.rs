//! Starting, finding the leader of, killing, restarting and stopping each system the bench
//! measures, every process an [`OwnedChild`] of this one (ended with its process group on every
//! path out, a signal included) and pinned to the servers' cores.
//!
//! - `redis`: `redis-server --save "" --appendonly no` on a free port, its own directory;
//! - `redis+wait`: the same, and a second `redis-server --replicaof` the first; ready once the
//!   primary's `INFO replication` shows the replica online;
//! - `redis-aof+wait`: `redis+wait` with `--appendonly yes --appendfsync always` on both, the
//!   data on the disk: the primary answers a SET once it is in its AOF and fsynced; ready as
//!   redis+wait is, and once neither server has an AOF rewrite under way or scheduled (the
//!   replica rewrites its AOF after the first sync);
//! - `etcd`: three `etcd` members (3.4, the Debian package) on loopback, client and peer URLs on
//!   free ports, data on tmpfs (`/dev/shm`) or on the disk; ready once every member's
//!   `/v3/maintenance/status` names a leader and a put is answered;
//! - `kairos`: N `kairos kv serve` members (the processes `kairos kv cluster` starts, started
//!   here one by one so that the bench owns each member's process id and can SIGKILL the
//!   leader, which `kv cluster` would start again), logs on the disk, `--fsync` always
//!   or never; ready once a member's INFO names a leader and a SET through it is answered.
//!
//! Pinning: each server is started from a thread pinned (`sched_setaffinity`) to the servers'
//! cores, and a child inherits its parent thread's affinity, so every server process and all of
//! its threads run on those cores only; [`Running::affinity`] reads it back from `/proc`.
//! Stopping is SIGKILL (nothing a server would finish on SIGTERM matters here: its data is
//! removed), which also spares etcd's leadership hand-over on SIGTERM.

use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kairos_sys::child::OwnedChild;
use serde::Serialize;

use super::client::Protocol;
use super::http::{HttpConn, base64};
use kairos_kv::resp::client::{Connection, Reply, info_field, leader_from_info};

/// How long a system has to become ready.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// How long one answer may take while a system starts or is probed.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// A system the bench measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum SystemKind {
    /// A standalone redis-server.
    #[serde(rename = "redis")]
    Redis,
    /// redis-server with a replica, every SET followed by `WAIT 1 0`.
    #[serde(rename = "redis+wait")]
    RedisWait,
    /// redis+wait with the append-only file fsynced before every answer (`appendfsync
    /// always`).
    #[serde(rename = "redis-aof+wait")]
    RedisAofWait,
    /// An etcd cluster.
    #[serde(rename = "etcd")]
    Etcd,
    /// A Kairos store cluster.
    #[serde(rename = "kairos")]
    Kairos,
}

impl SystemKind {
    /// Every system, in the table's order.
    pub const ALL: [SystemKind; 5] = [
        SystemKind::Redis,
        SystemKind::RedisWait,
        SystemKind::RedisAofWait,
        SystemKind::Etcd,
        SystemKind::Kairos,
    ];

    /// Its name in the rows and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SystemKind::Redis => "redis",
            SystemKind::RedisWait => "redis+wait",
            SystemKind::RedisAofWait => "redis-aof+wait",
            SystemKind::Etcd => "etcd",
            SystemKind::Kairos => "kairos",
        }
    }

    /// The system named `name`, or a one-line error listing the names.
    pub fn from_name(name: &str) -> Result<Self, UnknownSystem> {
        Self::ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| UnknownSystem(name.to_string()))
    }

    /// The programs it needs and the Debian package of each.
    pub fn programs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            SystemKind::Redis | SystemKind::RedisWait | SystemKind::RedisAofWait => {
                &[("redis-server", "redis-server")]
            }
            SystemKind::Etcd => &[("etcd", "etcd-server")],
            SystemKind::Kairos => &[],
        }
    }

    /// How clients speak to it.
    pub fn protocol(self) -> Protocol {
        match self {
            SystemKind::Redis | SystemKind::Kairos => Protocol::Resp,
            SystemKind::RedisWait | SystemKind::RedisAofWait => Protocol::RespWait,
            SystemKind::Etcd => Protocol::Etcd,
        }
    }

    /// Whether redis-benchmark can measure it (one command per request: not SET + WAIT).
    pub fn speaks_plain_resp(self) -> bool {
        self.protocol() == Protocol::Resp
    }
}

/// A system named on the command line that `kv bench` does not know; the message lists the
/// names it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no system {0:?}: the systems are {names}", names = SystemKind::ALL.map(SystemKind::name).join(", "))]
pub struct UnknownSystem(pub String);

/// Whether an acknowledged write is on a disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    /// Synced to the disk before the answer.
    Always,
    /// In memory, the page cache or tmpfs.
    Never,
}

impl Fsync {
    /// Its name in the rows (and kairos's `--fsync`).
    pub fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::Never => "never",
        }
    }
}

/// Where a system's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// Nowhere but the process (redis without persistence).
    Memory,
    /// tmpfs (`/dev/shm`): syncs return at once.
    Tmpfs,
    /// The disk the results go to.
    Disk,
}

impl Storage {
    /// Its name in the rows.
    pub fn name(self) -> &'static str {
        match self {
            Storage::Memory => "memory",
            Storage::Tmpfs => "tmpfs",
            Storage::Disk => "disk",
        }
    }
}

/// One system as run: which, how many members, and where its writes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Setup {
    /// The system.
    pub system: SystemKind,
    /// Its server processes (redis+wait: primary and replica).
    pub members: usize,
    /// Whether an acknowledged write is on a disk.
    pub fsync: Fsync,
    /// Where its data lives.
    pub storage: Storage,
}

impl Setup {
    /// `kairos, 3 members, fsync always` and the like.
    pub fn label(&self) -> String {
        match self.system {
            SystemKind::Redis => "redis".into(),
            SystemKind::RedisWait => "redis+wait (1 replica)".into(),
            SystemKind::RedisAofWait => "redis-aof+wait (1 replica, fsync always)".into(),
            SystemKind::Etcd => format!("etcd, {} members, {}", self.members, self.storage.name()),
            SystemKind::Kairos => format!("kairos, {} members, fsync {}", self.members, self.fsync.name()),
        }
    }

    /// A name for files: `kairos-3-always`.
    pub fn slug(&self) -> String {
        match self.system {
            SystemKind::Redis | SystemKind::RedisWait | SystemKind::RedisAofWait => {
                self.system.name().replace('+', "-")
            }
            SystemKind::Etcd => format!("etcd-{}-{}", self.members, self.storage.name()),
            SystemKind::Kairos => format!("kairos-{}-{}", self.members, self.fsync.name()),
        }
    }
}

/// What starting a system needs from the run.
#[derive(Debug, Clone)]
pub struct Env {
    /// The `kairos` executable whose `kv serve` the members run.
    pub kairos_exe: PathBuf,
    /// The members' loop period, us.
    pub kairos_period_us: Option<u64>,
    /// The members' election timeout, ticks.
    pub kairos_election_ticks: Option<usize>,
    /// The members' failure-detector threshold, us (`None`: their default).
    pub kairos_fd_lambda_us: Option<u64>,
    /// The members run without their failure detector.
    pub kairos_no_fd: bool,
    /// The servers' cores.
    pub server_cores: Vec<usize>,
    /// Where the servers' output goes.
    pub logs: PathBuf,
    /// A directory on tmpfs.
    pub tmpfs: PathBuf,
    /// A directory on the disk.
    pub disk: PathBuf,
}

/// A directory of this run's, removed on drop and on a signal.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    _registration: kairos_sys::cleanup::Registration,
}

impl DataDir {
    /// Creates `path` (removing what an earlier process left there).
    pub fn create(path: PathBuf) -> Result<Self> {
        let _hold = kairos_sys::cleanup::hold_off();
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let undo = path.clone();
        let registration =
            kairos_sys::cleanup::register(format!("directory {}", path.display()), move || {
                let _ = std::fs::remove_dir_all(&undo);
            });
        Ok(Self { path, _registration: registration })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One server process: how to start it again, and where clients reach it.
#[derive(Debug)]
struct Member {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    log: PathBuf,
    client: SocketAddr,
    child: Option<OwnedChild>,
    /// etcd's member id (from its status), to find the leader by.
    etcd_id: Option<String>,
}

/// A system running.
#[derive(Debug)]
pub struct Running {
    setup: Setup,
    members: Vec<Member>,
    server_cores: Vec<usize>,
    // Dropped after the members (fields drop in order): their data goes once they are gone.
    _data: DataDir,
}

/// Free ports on loopback, `tcp` TCP ones and `udp` UDP ones, all different: each is held
/// until all are found, so none is handed out twice.
fn free_ports(tcp: usize, udp: usize) -> Result<(Vec<u16>, Vec<u16>)> {
    let listeners: Vec<TcpListener> =
        (0..tcp).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<std::io::Result<_>>()?;
    let sockets: Vec<UdpSocket> =
        (0..udp).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<std::io::Result<_>>()?;
    let tcp = listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<std::io::Result<_>>()?;
    let udp = sockets.iter().map(|s| s.local_addr().map(|a| a.port())).collect::<std::io::Result<_>>()?;
    Ok((tcp, udp))
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Starts `command` from a thread pinned to `cores`, so the child and every thread it makes
/// inherit that affinity.
pub fn spawn_pinned(command: &mut Command, name: &str, cores: &[usize]) -> Result<OwnedChild> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                kairos_sys::thread::pin_current_thread_to(cores)
                    .with_context(|| format!("cannot pin {name}'s starter to cores {cores:?}"))?;
                OwnedChild::spawn_named(command, name).with_context(|| format!("cannot start {name}"))
            })
            .join()
            .map_err(|_| anyhow!("the thread starting {name} panicked"))?
    })
}

/// The last non-empty line of a log, for an error.
fn last_line(log: &Path) -> String {
    let text = kairos_sys::fs::read_text(log, 1 << 20).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_string()
}

impl Member {
    fn start(&mut self, cores: &[usize]) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        let mut command = Command::new(&self.program);
        command.args(&self.args).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        self.child = Some(spawn_pinned(&mut command, &self.name, cores)?);
        Ok(())
    }

    /// An error if the member has exited, with its log's last line.
    fn check(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            self.child = None;
            bail!("{} exited ({status}): {}", self.name, last_line(&self.log));
        }
        Ok(())
    }
}

impl Running {
    /// Starts `setup` and returns once it answers writes.
    pub fn start(setup: Setup, env: &Env) -> Result<Self> {
        let base = match setup.storage {
            Storage::Memory | Storage::Tmpfs => &env.tmpfs,
            Storage::Disk => &env.disk,
        };
        let data = DataDir::create(base.join(setup.slug()))?;
        let log = |name: &str| env.logs.join(format!("{}-{name}.log", setup.slug()));
        let members = match setup.system {
            SystemKind::Redis | SystemKind::RedisWait | SystemKind::RedisAofWait => {
                let aof: &[&str] = if setup.system == SystemKind::RedisAofWait {
                    &["--appendonly", "yes", "--appendfsync", "always"]
                } else {
                    &["--appendonly", "no"]
                };
                let (ports, _) = free_ports(setup.members, 0)?;
                (0..setup.members)
                    .map(|i| {
                        let dir = data.path().join(format!("redis{i}"));
                        std::fs::create_dir_all(&dir)?;
                        let mut args: Vec<OsString> =
                            ["--port", &ports[i].to_string(), "--bind", "127.0.0.1"]
                                .into_iter()
                                .chain(["--save", "", "--protected-mode", "no"])
                                .chain(aof.iter().copied())
                                .chain(["--repl-diskless-sync-delay", "0", "--logfile", ""])
                                .map(OsString::from)
                                .collect();
                        args.push("--dir".into());
                        args.push(dir.into_os_string());
                        if i > 0 {
                            args.extend(
                                ["--replicaof", "127.0.0.1", &ports[0].to_string()].map(OsString::from),
                            );
                        }
                        let name =
                            if i == 0 { "redis primary".to_string() } else { format!("redis replica {i}") };
                        Ok(Member {
                            log: log(if i == 0 { "primary" } else { "replica" }),
                            name,
                            program: "redis-server".into(),
                            args,
                            client: loopback(ports[i]),
                            child: None,
                            etcd_id: None,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            SystemKind::Etcd => {
                let (ports, _) = free_ports(2 * setup.members, 0)?;
                let (client, peer) = ports.split_at(setup.members);
                let cluster: Vec<String> =
                    (0..setup.members).map(|i| format!("e{i}=http://127.0.0.1:{}", peer[i])).collect();
                (0..setup.members)
                    .map(|i| {
                        let client_url = format!("http://127.0.0.1:{}", client[i]);
                        let peer_url = format!("http://127.0.0.1:{}", peer[i]);
                        let mut args: Vec<OsString> = [
                            "--name",
                            &format!("e{i}"),
                            "--listen-client-urls",
                            &client_url,
                            "--advertise-client-urls",
                            &client_url,
                            "--listen-peer-urls",
                            &peer_url,
                            "--initial-advertise-peer-urls",
                            &peer_url,
                            "--initial-cluster",
                            &cluster.join(","),
                            "--initial-cluster-state",
                            "new",
                            "--initial-cluster-token",
                            "kairos-kv-bench",
                            "--logger",
                            "zap",
                            "--log-level",
                            "error",
                        ]
                        .into_iter()
                        .map(OsString::from)
                        .collect();
                        args.push("--data-dir".into());
                        args.push(data.path().join(format!("e{i}")).into_os_string());
                        Ok(Member {
                            name: format!("etcd member {i}"),
                            program: "etcd".into(),
                            args,
                            log: log(&format!("e{i}")),
                            client: loopback(client[i]),
                            child: None,
                            etcd_id: None,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            SystemKind::Kairos => {
                let (client, raft) = free_ports(setup.members, setup.members)?;
                let peers: Vec<String> =
                    (0..setup.members).map(|i| format!("{}=127.0.0.1:{}", i + 1, raft[i])).collect();
                let secret = data.path().join("secret");
                kairos_services::seal::write_new_secret(&secret).context("the cluster's secret")?;
                (0..setup.members)
                    .map(|i| {
                        let mut args: Vec<OsString> =
                            ["kv", "serve", "--id", &(i + 1).to_string(), "--peers"]
                                .into_iter()
                                .map(OsString::from)
                                .collect();
                        args.push(peers.join(",").into());
                        args.push(format!("--listen=127.0.0.1:{}", client[i]).into());
                        let mut dir = OsString::from("--data=");
                        dir.push(data.path().join(format!("member{}", i + 1)));
                        args.push(dir);
                        let mut secret_file = OsString::from("--secret-file=");
                        secret_file.push(&secret);
                        args.push(secret_file);
                        if let Some(us) = env.kairos_period_us {
                            args.push(format!("--period-us={us}").into());
                        }
                        if let Some(ticks) = env.kairos_election_ticks {
                            args.push(format!("--election-ticks={ticks}").into());
                        }
                        if env.kairos_no_fd {
                            args.push("--no-fd".into());
                        } else if let Some(us) = env.kairos_fd_lambda_us {
                            args.push(format!("--fd-lambda-us={us}").into());
                        }
                        args.push(format!("--fsync={}", setup.fsync.name()).into());
                        Ok(Member {
                            name: format!("kairos member {}", i + 1),
                            program: env.kairos_exe.clone(),
                            args,
                            log: log(&format!("member{}", i + 1)),
                            client: loopback(client[i]),
                            child: None,
                            etcd_id: None,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        let mut running = Self { setup, members, server_cores: env.server_cores.clone(), _data: data };
        for m in &mut running.members {
            m.start(&running.server_cores)?;
        }
        running.wait_ready(None)?;
        Ok(running)
    }

    /// The setup running.
    pub fn setup(&self) -> Setup {
        self.setup
    }

    /// Where clients reach member `i`.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        self.members[i].client
    }

    /// The members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are no members (never, once started).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The live members' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().filter_map(|m| m.child.as_ref().map(OwnedChild::id)).collect()
    }

    /// The cores the first member may run on, as the kernel says (`Cpus_allowed_list`).
    pub fn affinity(&self) -> Option<String> {
        let pid = *self.pids().first()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string())
    }

    /// CPU time the live members have used, clock ticks (user and system, every thread).
    pub fn cpu_ticks(&self) -> u64 {
        self.pids()
            .into_iter()
            .filter_map(kairos_sys::proc::ProcStat::of_process)
            .map(|s| {
                let field = |n| s.field(n).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                field(14) + field(15)
            })
            .sum()
    }

    /// An error if a member that should run has exited.
    pub fn check(&mut self) -> Result<()> {
        self.members.iter_mut().try_for_each(Member::check)
    }

    /// Waits until the system answers writes (through member `through`, or the leader).
    fn wait_ready(&mut self, through: Option<usize>) -> Result<()> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            self.check()?;
            let last = match self.probe(through) {
                Ok(()) => return Ok(()),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() > deadline {
                bail!("{} was not ready within {} s: {last}", self.setup.label(), READY_WITHIN.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One readiness probe: the leader known, a write (and, through a given member, a read)
    /// answered.
    fn probe(&mut self, through: Option<usize>) -> Result<()> {
        match self.setup.system {
            SystemKind::Redis | SystemKind::RedisWait | SystemKind::RedisAofWait => {
                let mut conn = Connection::connect(self.members[0].client, PROBE_TIMEOUT)?;
                let replicated = self.setup.system != SystemKind::Redis;
                if replicated {
                    let info = conn.info("replication")?;
                    let online = info_field(&info, "slave0").is_some_and(|v| v.contains("state=online"));
                    if !online {
                        bail!("the replica is not online yet");
                    }
                }
                if self.setup.system == SystemKind::RedisAofWait {
                    for m in &self.members {
                        let info = Connection::connect(m.client, PROBE_TIMEOUT)?.info("persistence")?;
                        let busy = ["aof_rewrite_in_progress", "aof_rewrite_scheduled"]
                            .iter()
                            .any(|field| info_field(&info, field) != Some("0"));
                        if busy {
                            bail!("{} is rewriting its AOF", m.name);
                        }
                    }
                }
                if replicated {
                    // The replication path works end to end: the write is on the replica.
                    let replies = conn.pipeline(&[&[b"SET", b"ready", b"1"], &[b"WAIT", b"1", b"100"]])?;
                    if !matches!(replies.as_slice(), [ok, Reply::Integer(1..)] if ok.is_ok()) {
                        bail!("SET + WAIT 1 100 answered {replies:?}");
                    }
                } else if !conn.call(&[b"SET", b"ready", b"1"])?.is_ok() {
                    bail!("SET was not answered OK");
                }
                Ok(())
            }
            SystemKind::Etcd => {
                let leader = self.leader()?;
                let at = through.unwrap_or(leader);
                let mut conn = HttpConn::connect(self.members[at].client, PROBE_TIMEOUT)?;
                let put = format!("{{\"key\":\"{}\",\"value\":\"{}\"}}", base64(b"ready"), base64(b"1"));
                let r = conn.post("/v3/kv/put", put.as_bytes())?;
                if r.status != 200 {
                    bail!("put answered {}: {}", r.status, String::from_utf8_lossy(&r.body));
                }
                let r =
                    conn.post("/v3/kv/range", format!("{{\"key\":\"{}\"}}", base64(b"ready")).as_bytes())?;
                if r.status != 200 {
                    bail!("range answered {}", r.status);
                }
                Ok(())
            }
            SystemKind::Kairos => {
                let leader = self.leader()?;
                let at = through.unwrap_or(leader);
                let mut conn = Connection::connect(self.members[at].client, PROBE_TIMEOUT)?;
                if !conn.call(&[b"SET", b"ready", b"1"])?.is_ok() {
                    bail!("SET was not answered OK");
                }
                conn.call(&[b"GET", b"ready"])?;
                Ok(())
            }
        }
    }

    /// The leader's index among the members, as a live member reports it (redis: the
    /// primary).
    pub fn leader(&mut self) -> Result<usize> {
        match self.setup.system {
            SystemKind::Redis | SystemKind::RedisWait | SystemKind::RedisAofWait => Ok(0),
            SystemKind::Kairos => {
                for i in self.live() {
                    let Ok(mut conn) = Connection::connect(self.members[i].client, PROBE_TIMEOUT) else {
                        continue;
                    };
                    let Ok(info) = conn.info("replication") else { continue };
                    if let Some(at) = leader_from_info(&info).and_then(|id| usize::try_from(id - 1).ok())
                        && self.members.get(at).is_some_and(|m| m.child.is_some())
                    {
                        return Ok(at);
                    }
                }
                bail!("no live member names a live leader")
            }
            SystemKind::Etcd => {
                let mut leader_id = None;
                for i in self.live() {
                    let Ok((member, leader)) = etcd_status(self.members[i].client) else { continue };
                    self.members[i].etcd_id = Some(member);
                    if leader != "0" {
                        leader_id = Some(leader);
                    }
                }
                let leader_id = leader_id.ok_or_else(|| anyhow!("no etcd member names a leader"))?;
                self.members
                    .iter()
                    .position(|m| m.child.is_some() && m.etcd_id.as_deref() == Some(leader_id.as_str()))
                    .ok_or_else(|| anyhow!("the leader etcd names ({leader_id}) is not a live member yet"))
            }
        }
    }

    /// The leader, once a live member names one: an election under way (a leader suspected
    /// while the cluster sat idle) is waited out, for as long as a system has to become ready.
    pub fn wait_leader(&mut self) -> Result<usize> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            self.check()?;
            match self.leader() {
                Ok(leader) => return Ok(leader),
                Err(e) if Instant::now() > deadline => {
                    return Err(e.context(format!("no leader within {} s", READY_WITHIN.as_secs())));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// A watch on member `at` for a leader other than member `old`, which needs no borrow of
    /// the system (so the old leader can be killed while it runs).
    pub fn leader_watch(&self, at: usize, old: usize) -> LeaderWatch {
        LeaderWatch {
            system: self.setup.system,
            addr: self.members[at].client,
            old_member: old,
            old_etcd_id: self.members[old].etcd_id.clone(),
        }
    }

    fn live(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&i| self.members[i].child.is_some()).collect()
    }

    /// SIGKILLs member `i` (a crash: no warning, no hand-over) and reaps it.
    pub fn kill(&mut self, i: usize) -> Result<()> {
        if let Some(mut child) = self.members[i].child.take() {
            child.kill().with_context(|| format!("cannot kill {}", self.members[i].name))?;
        }
        Ok(())
    }

    /// Starts member `i` again on its data and waits until it answers a read (it has caught
    /// up with a leader).
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.members[i].start(&self.server_cores)?;
        self.wait_ready(Some(i))
    }

    /// Ends every member at once (SIGKILL) and reaps it, then removes the data.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = child.kill();
            }
        }
    }
}

/// Asks one member which leader it knows; see [`Running::leader_watch`].
#[derive(Debug, Clone)]
pub struct LeaderWatch {
    system: SystemKind,
    addr: SocketAddr,
    old_member: usize,
    old_etcd_id: Option<String>,
}

impl LeaderWatch {
    /// Whether the member, asked now, names a leader other than the old one.
    pub fn sees_new_leader(&self) -> bool {
        match self.system {
            SystemKind::Redis | SystemKind::RedisWait | SystemKind::RedisAofWait => false,
            SystemKind::Kairos => Connection::connect(self.addr, PROBE_TIMEOUT)
                .and_then(|mut c| c.info("replication"))
                .ok()
                .and_then(|info| leader_from_info(&info))
                .is_some_and(|id| usize::try_from(id - 1).is_ok_and(|at| at != self.old_member)),
            SystemKind::Etcd => etcd_status(self.addr).is_ok_and(|(_, leader)| {
                leader != "0" && Some(leader.as_str()) != self.old_etcd_id.as_deref()
            }),
        }
    }
}

/// An etcd member's status: its own id and the leader's (`"0"` for none).
pub fn etcd_status(addr: SocketAddr) -> Result<(String, String)> {
    let mut conn = HttpConn::connect(addr, PROBE_TIMEOUT)?;
    let r = conn.post("/v3/maintenance/status", b"{}")?;
    if r.status != 200 {
        bail!("status answered {}", r.status);
    }
    let v: serde_json::Value = serde_json::from_slice(&r.body).context("status is not JSON")?;
    let member = v["header"]["member_id"].as_str().ok_or_else(|| anyhow!("status without member_id"))?;
    let leader = v["leader"].as_str().unwrap_or("0");
    Ok((member.to_string(), leader.to_string()))
}

#[cfg(test)]
mod tests;

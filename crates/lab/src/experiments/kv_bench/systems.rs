//! The systems the bench measures ([`SystemKind`]), how each is set up ([`Setup`]), and
//! [`Running`]: starting, finding the leader of, killing, restarting and stopping one, every
//! process a [`Member`] (an owned child, ended with its process group on every path out, a
//! signal included, and pinned to the servers' cores; see [`crate::peers::kv`]).
//!
//! - `redis`, `redis+wait` and `redis-aof+wait`: Redis standalone, with a replica and `WAIT`,
//!   and with its append-only file fsynced too ([`crate::peers::kv::redis`]);
//! - `etcd`: a three-member etcd cluster ([`crate::peers::kv::etcd`]);
//! - `kairos`: N `kairos kv serve` members (the processes `kairos kv cluster` starts, started
//!   here one by one so that the bench owns each member's process id and can SIGKILL the
//!   leader, which `kv cluster` would start again), logs on the disk, `--fsync` always
//!   or never; ready once a member's INFO names a leader and a SET through it is answered.
//!
//! Kairos's members are started here, the bench's own; the peers' processes in
//! [`crate::peers::kv`]. [`Running::affinity`] reads the servers' cores back from `/proc`.
//! Stopping is SIGKILL (nothing a server would finish on SIGTERM matters here: its data is
//! removed).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kairos_kv::resp::client::{Connection, leader_from_info};
use serde::Serialize;

use super::client::Protocol;
use crate::peers::kv::redis::{self, Mode};
use crate::peers::kv::{Member, PROBE_TIMEOUT, etcd, free_ports, loopback};
use crate::peers::process::OwnedDir;

/// How long a system has to become ready.
const READY_WITHIN: Duration = Duration::from_secs(30);

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
            SystemKind::Redis | SystemKind::RedisWait | SystemKind::RedisAofWait => redis::PROGRAMS,
            SystemKind::Etcd => etcd::PROGRAMS,
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
    /// How long the members busy-poll after a client's request, us (`None`: their default).
    pub kairos_busy_poll_us: Option<u64>,
    /// The servers' cores.
    pub server_cores: Vec<usize>,
    /// Where the servers' output goes.
    pub logs: PathBuf,
    /// A directory on tmpfs.
    pub tmpfs: PathBuf,
    /// A directory on the disk.
    pub disk: PathBuf,
}

/// A system running.
#[derive(Debug)]
pub struct Running {
    setup: Setup,
    members: Vec<Member>,
    server_cores: Vec<usize>,
    // Dropped after the members (fields drop in order): their data goes once they are gone.
    _data: OwnedDir,
}

impl Running {
    /// Starts `setup` and returns once it answers writes.
    pub fn start(setup: Setup, env: &Env) -> Result<Self> {
        let base = match setup.storage {
            Storage::Memory | Storage::Tmpfs => &env.tmpfs,
            Storage::Disk => &env.disk,
        };
        let data = OwnedDir::create(base.join(setup.slug()))?;
        let log = |name: &str| env.logs.join(format!("{}-{name}.log", setup.slug()));
        let members = match setup.system {
            SystemKind::Redis => redis::members(Mode::Standalone, setup.members, data.path(), log)?,
            SystemKind::RedisWait => redis::members(Mode::Replicated, setup.members, data.path(), log)?,
            SystemKind::RedisAofWait => redis::members(Mode::ReplicatedAof, setup.members, data.path(), log)?,
            SystemKind::Etcd => etcd::members(setup.members, data.path(), log)?,
            SystemKind::Kairos => kairos_members(setup, env, &data, log)?,
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
        self.members[i].client()
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
        self.members.iter().filter_map(Member::pid).collect()
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
            SystemKind::Redis => redis::probe(Mode::Standalone, &self.members),
            SystemKind::RedisWait => redis::probe(Mode::Replicated, &self.members),
            SystemKind::RedisAofWait => redis::probe(Mode::ReplicatedAof, &self.members),
            SystemKind::Etcd => {
                let leader = self.leader()?;
                let at = through.unwrap_or(leader);
                etcd::probe(self.members[at].client())
            }
            SystemKind::Kairos => {
                let leader = self.leader()?;
                let at = through.unwrap_or(leader);
                let mut conn = Connection::connect(self.members[at].client(), PROBE_TIMEOUT)?;
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
                    let Ok(mut conn) = Connection::connect(self.members[i].client(), PROBE_TIMEOUT) else {
                        continue;
                    };
                    let Ok(info) = conn.info("replication") else { continue };
                    if let Some(at) = leader_from_info(&info).and_then(|id| usize::try_from(id - 1).ok())
                        && self.members.get(at).is_some_and(Member::is_live)
                    {
                        return Ok(at);
                    }
                }
                bail!("no live member names a live leader")
            }
            SystemKind::Etcd => etcd::leader(&mut self.members),
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
            addr: self.members[at].client(),
            old_member: old,
            old_etcd_id: self.members[old].etcd_id().map(str::to_string),
        }
    }

    fn live(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&i| self.members[i].is_live()).collect()
    }

    /// SIGKILLs member `i` (a crash: no warning, no hand-over) and reaps it.
    pub fn kill(&mut self, i: usize) -> Result<()> {
        self.members[i].kill()
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
            let _ = m.kill();
        }
    }
}

/// Kairos's members for `setup`: `kairos kv serve` processes, not started, each with its data
/// under `data`; `log` gives a member's log from its name (`member1`, ...).
fn kairos_members(
    setup: Setup,
    env: &Env,
    data: &OwnedDir,
    log: impl Fn(&str) -> PathBuf,
) -> Result<Vec<Member>> {
    let (client, raft) = free_ports(setup.members, setup.members)?;
    let peers: Vec<String> = (0..setup.members).map(|i| format!("{}=127.0.0.1:{}", i + 1, raft[i])).collect();
    let secret = data.path().join("secret");
    kairos_services::seal::write_new_secret(&secret).context("the cluster's secret")?;
    (0..setup.members)
        .map(|i| {
            let mut args: Vec<OsString> = ["kv", "serve", "--id", &(i + 1).to_string(), "--peers"]
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
            if let Some(us) = env.kairos_busy_poll_us {
                args.push(format!("--busy-poll-us={us}").into());
            }
            args.push(format!("--fsync={}", setup.fsync.name()).into());
            Ok(Member::new(
                format!("kairos member {}", i + 1),
                env.kairos_exe.clone(),
                args,
                log(&format!("member{}", i + 1)),
                loopback(client[i]),
            ))
        })
        .collect::<Result<Vec<_>>>()
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
            SystemKind::Etcd => etcd::sees_new_leader(self.addr, self.old_etcd_id.as_deref()),
        }
    }
}

#[cfg(test)]
mod tests;

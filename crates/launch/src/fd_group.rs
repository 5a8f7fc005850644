//! A failure detector's member group, as the lab's `fd` experiments run it: `kairos fd member`
//! processes, each with its alive table in a `/dev/shm` file this process made (so a member
//! killed with SIGKILL leaves nothing behind), on loopback or, as root, one per host of the
//! lane's testbed (network namespaces on a bridge, heartbeats in the lane class), or on the
//! express lane itself ([`Network::Lane`]: a controller and a node per host in this process,
//! [`crate::lane`], each member an application of its host's node).
//!
//! It owns what it starts: the members ([`OwnedChild`], ended on drop and on signals), the
//! tables' files (removed on drop), the lane (members end before it, it before the testbed),
//! the testbed, and one `ip -batch` process per host that takes a link down or up with one line
//! on its standard input (so a cut is microseconds after its time stamp, not an `ip` start
//! later).
//!
//! While it runs, `/dev/cpu_dma_latency` is held at 0 (root; as the lane's tuned rows), so an
//! idle core polls instead of halting and a loop's wake-up is not late by a halted vCPU.
//!
//! Failures it makes, each returning its time (`CLOCK_MONOTONIC` ns, taken just before the
//! act): [`Cluster::kill`] (SIGKILL to the member's process), [`Cluster::link_down`] (its
//! host's veth down), [`Cluster::pause_app`] (its application stops bumping the counter).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lane::{LaneUp, LaneUpError};
use kairos_fd::member::MemberReport;
use kairos_fd::table::bytes_for;
use kairos_fd::{AliveTable, Row};
use kairos_io::bridge::{BridgeFileError, SharedWords, create_words};
use kairos_io::lane_testbed::{
    HOST_DEVICE, LANE_TOS, LaneTestbed, LaneTestbedConfig, LaneTestbedError, host_address,
};
use kairos_services::peer::PeerAddr;
use kairos_sys::child::OwnedChild;
use kairos_sys::clock::{monotonic_ns, realtime_ns};
use kairos_sys::fs::FileError;
use kairos_sys::memory::NoIdleStates;
use kairos_sys::shm::{ShmError, shm_path};
use serde::{Deserialize, Serialize};

/// Why the group did not start, or a failure or a read could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Fewer than two members: a detector needs another member to watch.
    #[error("a failure detector group needs at least 2 members, got {0}")]
    TooFewMembers(usize),
    /// A file, a process or a link's `ip -batch` failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        source: io::Error,
    },
    /// The testbed could not be made, or a host's namespace used.
    #[error("the failure detector's testbed: {0}")]
    Testbed(#[from] LaneTestbedError),
    /// The lane did not come up.
    #[error("cannot bring the lane up: {0}")]
    Lane(#[from] LaneUpError),
    /// An alive table's file could not be named or made.
    #[error("member {member}'s alive table: {source}")]
    Table {
        /// The member's id.
        member: u64,
        /// The shared file's error.
        source: BridgeFileError,
    },
    /// An alive table's file name was refused.
    #[error(transparent)]
    TableName(#[from] ShmError),
    /// A member ended before its loop ran.
    #[error("member {member} ended before it ran ({status}): {last_line}")]
    EndedEarly {
        /// The member's id.
        member: u64,
        /// How it ended.
        status: ExitStatus,
        /// The last line of its log.
        last_line: String,
    },
    /// A member's loop did not run within the start-up time.
    #[error("member {member} did not start within {} s", .within.as_secs())]
    StartTimeout {
        /// The member's id.
        member: u64,
        /// The time it had.
        within: Duration,
    },
    /// The member asked for is not running (killed and not restarted).
    #[error("member {0} is not running")]
    NotRunning(u64),
    /// A link was to be cut on loopback.
    #[error("links are cut only on the testbed")]
    NoLinks,
    /// A member's table is being rewritten.
    #[error("member {0}'s table is not readable")]
    TableUnreadable(u64),
    /// A member ended while the group ran.
    #[error("member {member} ended ({status})")]
    Ended {
        /// The member's id.
        member: u64,
        /// How it ended.
        status: ExitStatus,
    },
    /// A member's run failed; its log is in the group's directory.
    #[error("member {member} failed ({status}); see {}", .dir.display())]
    Failed {
        /// The member's id.
        member: u64,
        /// How it ended.
        status: ExitStatus,
        /// The group's directory.
        dir: PathBuf,
    },
    /// A member did not end its run in time.
    #[error("member {0} ran past its time")]
    Overran(u64),
    /// A member's report could not be read.
    #[error(transparent)]
    Report(#[from] FileError),
    /// A member's report is not one.
    #[error("read {}: {source}", .path.display())]
    ReportFormat {
        /// The report's path.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
}

/// An [`io::Error`] of `what` as a [`ClusterError`].
/// The error of a failed step, its description made only if it failed (some steps run in
/// polling loops, and a link's cut is timed).
fn io_error(what: impl FnOnce() -> String) -> impl FnOnce(io::Error) -> ClusterError {
    move |source| ClusterError::Io { what: what(), source }
}

/// Where the members run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Processes on loopback (any user).
    Loopback,
    /// One network namespace per member on the lane's testbed (root).
    Namespaces,
    /// The testbed's namespaces with the lane up: heartbeats on each member's lane tunnel,
    /// one packet a period to all, through its host's node (root).
    Lane,
}

impl Network {
    /// Namespaces as root, loopback otherwise.
    pub fn best() -> Self {
        if kairos_sys::user::is_root() { Network::Namespaces } else { Network::Loopback }
    }

    /// Whether the members run in the testbed's namespaces (links to cut; root needed).
    pub fn testbed(self) -> bool {
        self != Network::Loopback
    }
}

/// The demonstration application's bump period the experiments use, us: a third of the period
/// (the contract) on loopback; the period itself on the testbed, where three members whose
/// applications wake every third of a period, beside the testbed's sends through veth, HTB and
/// the bridge, took 1.9 of the two cores of the machine Kairos is measured on, and a saturated
/// machine measures itself, not the detector. A heartbeat still carries a new counter every
/// period; a hang is then seen up to a period later.
pub fn default_app_bump_us(network: Network, period_us: u64) -> u64 {
    match network {
        Network::Loopback => (period_us / 3).max(1),
        Network::Namespaces | Network::Lane => period_us.max(1),
    }
}

/// How the group runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterSettings {
    /// The `kairos` executable the members run.
    pub exe: PathBuf,
    /// Members.
    pub members: usize,
    /// Heartbeat period, us.
    pub period_us: u64,
    /// The table's threshold Lambda, us.
    pub threshold_us: u64,
    /// More thresholds recorded, us.
    pub sweep_us: Vec<u64>,
    /// Where.
    pub network: Network,
    /// The first member's UDP port (member `i` on loopback: this plus `i`).
    pub base_port: u16,
    /// The loop's `SCHED_FIFO` priority, 0 for none (asked only as root).
    pub fifo_priority: i32,
    /// Pin member `i` to core `i` modulo the cores (else the scheduler places them).
    pub pin: bool,
    /// The application's bump period, us.
    pub app_bump_us: u64,
    /// How long members run, ms (`None`: until ended).
    pub run_for_ms: Option<u64>,
    /// When suspicions start to count, ms after the start.
    pub measure_after_ms: u64,
    /// The members' loops time the interrupt handlers run in them.
    pub time_interrupts: bool,
}

/// A host's `ip -batch` process, with its standard input.
struct LinkControl {
    stdin: ChildStdin,
    _process: OwnedChild,
}

/// The running group; see the module doc.
pub struct Cluster {
    settings: ClusterSettings,
    dir: PathBuf,
    addrs: BTreeMap<u64, PeerAddr>,
    words: Vec<Arc<SharedWords>>,
    members: Vec<Option<OwnedChild>>,
    links: Vec<LinkControl>,
    lane: Option<LaneUp>,
    testbed: Option<LaneTestbed>,
    started_ns: u64,
    measure_from_ns: u64,
    idle: Option<NoIdleStates>,
    _removal: kairos_sys::cleanup::Registration,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("dir", &self.dir).field("addrs", &self.addrs).finish_non_exhaustive()
    }
}

/// How long a member has to start and write its table.
const START: Duration = Duration::from_secs(10);

fn member_id(i: usize) -> u64 {
    i as u64 + 1
}

impl Cluster {
    /// Starts the group, its logs and reports in `dir`; returns once every member runs.
    pub fn start(settings: ClusterSettings, dir: &Path) -> Result<Self, ClusterError> {
        let n = settings.members;
        if n < 2 {
            return Err(ClusterError::TooFewMembers(n));
        }
        std::fs::create_dir_all(dir).map_err(io_error(|| format!("cannot create {}", dir.display())))?;
        let testbed = match settings.network {
            Network::Loopback => None,
            Network::Namespaces | Network::Lane => Some(LaneTestbed::create(LaneTestbedConfig {
                hosts: n,
                prefix: "kairos-fd".into(),
                ..Default::default()
            })?),
        };
        let lane = match (&testbed, settings.network) {
            (Some(bed), Network::Lane) => {
                // The nodes above the members' loops and applications.
                let fifo = if settings.fifo_priority > 0 { (settings.fifo_priority + 2).min(98) } else { 0 };
                Some(crate::lane::start(bed, &dir.join("lane"), fifo)?)
            }
            _ => None,
        };
        let addrs: BTreeMap<u64, PeerAddr> = (0..n)
            .map(|i| {
                let addr = match settings.network {
                    Network::Loopback => {
                        PeerAddr::Udp(SocketAddr::from(([127, 0, 0, 1], settings.base_port + i as u16)))
                    }
                    Network::Namespaces => {
                        PeerAddr::Udp(SocketAddr::V4(SocketAddrV4::new(host_address(i), settings.base_port)))
                    }
                    Network::Lane => PeerAddr::Lane(crate::lane::host_name(i)),
                };
                (member_id(i), addr)
            })
            .collect();
        let paths = (0..n)
            .map(|i| shm_path(&format!("kairos-fd-{}-{}", std::process::id(), member_id(i))))
            .collect::<Result<Vec<_>, _>>()?;
        // The files are removed when their words drop, and on SIGINT/SIGTERM/SIGHUP by the
        // handler (registered before the first exists).
        let removal = {
            let _hold = kairos_sys::cleanup::hold_off();
            let undo = paths.clone();
            kairos_sys::cleanup::register("the failure detector's alive tables", move || {
                for p in &undo {
                    let _ = std::fs::remove_file(p);
                }
            })
        };
        let words = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                create_words(p, bytes_for(n - 1))
                    .map(Arc::new)
                    .map_err(|source| ClusterError::Table { member: member_id(i), source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut links = Vec::new();
        if let Some(bed) = &testbed {
            for i in 0..n {
                // Above the members (chrt), so it acts on a line as soon as it is written.
                let mut ip = Command::new("chrt");
                ip.args(["-f", &(settings.fifo_priority + 10).clamp(1, 98).to_string(), "ip"]);
                ip.args(["-n", &bed.host(i)?.namespace, "-batch", "-"]).stdin(Stdio::piped());
                ip.stdout(Stdio::null()).stderr(Stdio::null());
                let name = format!("ip -batch of h{i}");
                let mut process = OwnedChild::spawn_named(&mut ip, name.clone())
                    .map_err(io_error(|| format!("start {name}")))?;
                let stdin = process.take_stdin().ok_or_else(|| ClusterError::Io {
                    what: name,
                    source: io::Error::other("no standard input"),
                })?;
                links.push(LinkControl { stdin, _process: process });
            }
        }
        // As the lane's tuned rows: cores do not enter idle states while the group runs (a
        // halted vCPU wakes a loop late).
        let idle = NoIdleStates::request().ok();
        let started_ns = monotonic_ns();
        let measure_from_ns = started_ns + settings.measure_after_ms * 1_000_000;
        let mut cluster = Self {
            settings,
            dir: dir.to_path_buf(),
            addrs,
            words,
            members: (0..n).map(|_| None).collect(),
            links,
            lane,
            testbed,
            started_ns,
            measure_from_ns,
            idle,
            _removal: removal,
        };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        for i in 0..n {
            cluster.wait_running(i)?;
        }
        Ok(cluster)
    }

    /// Members in the group.
    pub fn len(&self) -> usize {
        self.settings.members
    }

    /// Always false: a group has members.
    pub fn is_empty(&self) -> bool {
        self.settings.members == 0
    }

    /// Whether `/dev/cpu_dma_latency` is held at 0 while the group runs (root).
    pub fn idle_states_held(&self) -> bool {
        self.idle.is_some()
    }

    /// When the group started, ns.
    pub fn started_ns(&self) -> u64 {
        self.started_ns
    }

    /// When suspicions start to count, ns.
    pub fn measure_from_ns(&self) -> u64 {
        self.measure_from_ns
    }

    /// Member `i`'s id.
    pub fn id(&self, i: usize) -> u64 {
        member_id(i)
    }

    fn report_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("member-{}.json", member_id(i)))
    }

    fn spawn(&mut self, i: usize) -> Result<(), ClusterError> {
        let s = &self.settings;
        let members: Vec<String> = self.addrs.iter().map(|(m, a)| format!("{m}={a}")).collect();
        let mut command = match &self.testbed {
            Some(bed) => {
                let mut c = bed.host_command(i, &s.exe.display().to_string())?;
                c.arg("fd");
                c
            }
            None => {
                let mut c = Command::new(&s.exe);
                c.arg("fd");
                c
            }
        };
        command.args(["member", "--id", &member_id(i).to_string(), "--members", &members.join(",")]);
        command.arg(format!("--period-us={}", s.period_us));
        command.arg(format!("--threshold-us={}", s.threshold_us));
        if !s.sweep_us.is_empty() {
            let sweep: Vec<String> = s.sweep_us.iter().map(u64::to_string).collect();
            command.arg(format!("--sweep-us={}", sweep.join(",")));
        }
        command.arg("--peers");
        command.arg(format!("--app-bump-us={}", s.app_bump_us));
        command.arg(format!("--table={}", self.words[i].owner().path().display()));
        command.arg(format!("--incarnation={}", realtime_ns()));
        command.arg(format!("--seed={}", i));
        if s.pin {
            command.arg(format!("--core={}", i % kairos_sys::proc::online_cores().max(1)));
        }
        if s.fifo_priority > 0 && kairos_sys::user::is_root() {
            command.arg(format!("--fifo={}", s.fifo_priority));
        }
        if let Some(lane) = &self.lane {
            command.arg(format!("--lane-node={}", lane.node_dir(i).display()));
        } else if self.testbed.is_some() {
            command.arg(format!("--tos={LANE_TOS}"));
        }
        if let Some(run_for) = s.run_for_ms {
            command.arg(format!("--run-for-ms={run_for}"));
            command.arg(format!("--measure-from-ns={}", self.measure_from_ns));
            // The window ends when the first member could end (every member starts after
            // `started_ns`), so no member counts the silence of one that stopped first.
            let until = self.started_ns + run_for * 1_000_000;
            command.arg(format!("--measure-until-ns={until}"));
            command.arg(format!("--report={}", self.report_path(i).display()));
        }
        if s.time_interrupts {
            command.arg("--interrupt-clock");
        }
        let log = self.dir.join(format!("member-{}.log", member_id(i)));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io_error(|| format!("create {}", log.display())))?;
        let out = file.try_clone().map_err(io_error(|| format!("create {}", log.display())))?;
        command.stdin(Stdio::null()).stdout(out).stderr(file);
        let child = OwnedChild::spawn_named(&mut command, format!("fd member {}", member_id(i)))
            .map_err(io_error(|| format!("start member {} ({})", member_id(i), s.exe.display())))?;
        self.members[i] = Some(child);
        Ok(())
    }

    /// Waits until member `i` has written its table and its loop runs.
    fn wait_running(&mut self, i: usize) -> Result<(), ClusterError> {
        let deadline = Instant::now() + START;
        loop {
            if let Ok(table) = AliveTable::attach(Arc::clone(&self.words[i]))
                && table.node_beat_ns() > 0
                && table.heartbeats_sent() > 0
            {
                return Ok(());
            }
            if let Some(child) = self.members[i].as_mut()
                && let Some(status) =
                    child.try_wait().map_err(io_error(|| format!("wait for member {}", member_id(i))))?
            {
                let log = self.dir.join(format!("member-{}.log", member_id(i)));
                let text = kairos_sys::fs::read_text(&log, 1 << 20).unwrap_or_default();
                let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
                return Err(ClusterError::EndedEarly {
                    member: member_id(i),
                    status,
                    last_line: last.trim().into(),
                });
            }
            if Instant::now() > deadline {
                return Err(ClusterError::StartTimeout { member: member_id(i), within: START });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A command running `program` in member `i`'s host (`None` on loopback).
    pub fn host_command(&self, i: usize, program: &str) -> Option<Command> {
        self.testbed.as_ref()?.host_command(i, program).ok()
    }

    /// Member `observer`'s table (`None` while it is being rewritten).
    pub fn table(&self, observer: usize) -> Option<AliveTable<Arc<SharedWords>>> {
        AliveTable::attach(Arc::clone(&self.words[observer])).ok()
    }

    /// What member `observer`'s table says of member `subject`.
    pub fn row(&self, observer: usize, subject: usize) -> Option<Row> {
        self.table(observer)?.find(member_id(subject))
    }

    /// Kills member `i` with SIGKILL; returns the time just before.
    pub fn kill(&mut self, i: usize) -> Result<u64, ClusterError> {
        let child = self.members[i].as_ref().ok_or(ClusterError::NotRunning(member_id(i)))?;
        self.urgently(|| {
            let at = monotonic_ns();
            child.signal(libc::SIGKILL).map(|()| at)
        })
        .map_err(io_error(|| format!("kill member {}", member_id(i))))
    }

    /// Runs `act` on a thread above the members' priority (root), so that no member runs
    /// between the failure's time stamp and the act (this process is otherwise a normal one,
    /// and the members' loops and applications keep the cores busy).
    fn urgently<T: Send>(&self, act: impl FnOnce() -> T + Send) -> T {
        let priority = (self.settings.fifo_priority + 10).min(98);
        std::thread::scope(|s| {
            s.spawn(|| {
                if self.settings.fifo_priority > 0 {
                    let _ = kairos_sys::thread::set_fifo(priority);
                }
                act()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Starts member `i` again after [`Self::kill`] (a new incarnation); returns once it runs.
    pub fn restart(&mut self, i: usize) -> Result<(), ClusterError> {
        if let Some(mut old) = self.members[i].take() {
            old.wait().map_err(io_error(|| format!("wait for member {}", member_id(i))))?;
        }
        // The new member rewrites the table: readers see no table until it has.
        self.spawn(i)?;
        self.wait_running(i)
    }

    fn link(&mut self, i: usize, state: &str) -> Result<u64, ClusterError> {
        let mut links = std::mem::take(&mut self.links);
        let result = match links.get_mut(i) {
            None => Err(ClusterError::NoLinks),
            Some(link) => {
                let line = format!("link set dev {HOST_DEVICE} {state}\n");
                self.urgently(|| {
                    let at = monotonic_ns();
                    link.stdin.write_all(line.as_bytes()).and_then(|()| link.stdin.flush()).map(|()| at)
                })
                .map_err(io_error(|| format!("set h{i}'s link {state}")))
            }
        };
        self.links = links;
        result
    }

    /// Takes member `i`'s link down; returns the time just before.
    pub fn link_down(&mut self, i: usize) -> Result<u64, ClusterError> {
        self.link(i, "down")
    }

    /// Brings member `i`'s link back.
    pub fn link_up(&mut self, i: usize) -> Result<u64, ClusterError> {
        self.link(i, "up")
    }

    /// Makes member `i`'s application stop bumping (`true`) or go on; returns the time just
    /// before.
    pub fn pause_app(&mut self, i: usize, paused: bool) -> Result<u64, ClusterError> {
        let table = self.table(i).ok_or(ClusterError::TableUnreadable(member_id(i)))?;
        Ok(self.urgently(|| {
            let at = monotonic_ns();
            table.set_app_paused(paused);
            at
        }))
    }

    /// Whether every member still runs (the name of one that ended, otherwise).
    pub fn check_running(&mut self) -> Result<(), ClusterError> {
        for (i, m) in self.members.iter_mut().enumerate() {
            if let Some(child) = m
                && let Some(status) =
                    child.try_wait().map_err(io_error(|| format!("wait for member {}", member_id(i))))?
            {
                return Err(ClusterError::Ended { member: member_id(i), status });
            }
        }
        Ok(())
    }

    /// Waits for every member to end its run (`run_for_ms`) and reads their reports.
    pub fn wait_reports(&mut self, timeout: Duration) -> Result<Vec<MemberReport>, ClusterError> {
        let deadline = Instant::now() + timeout;
        let mut reports = Vec::new();
        for i in 0..self.len() {
            let Some(child) = self.members[i].as_mut() else { continue };
            loop {
                if let Some(status) =
                    child.try_wait().map_err(io_error(|| format!("wait for member {}", member_id(i))))?
                {
                    if !status.success() {
                        return Err(ClusterError::Failed {
                            member: member_id(i),
                            status,
                            dir: self.dir.clone(),
                        });
                    }
                    break;
                }
                if Instant::now() > deadline {
                    return Err(ClusterError::Overran(member_id(i)));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let path = self.report_path(i);
            let text = kairos_sys::fs::read_text(&path, 1 << 30)?;
            reports.push(
                serde_json::from_str(&text).map_err(|source| ClusterError::ReportFormat { path, source })?,
            );
        }
        Ok(reports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_application_bumps_a_third_of_a_period_on_loopback_and_every_period_on_the_testbed() {
        assert_eq!(default_app_bump_us(Network::Loopback, 1_000), 333);
        assert_eq!(default_app_bump_us(Network::Loopback, 2), 1, "never a zero period");
        assert_eq!(default_app_bump_us(Network::Namespaces, 1_000), 1_000);
        assert_eq!(default_app_bump_us(Network::Lane, 0), 1);
    }

    #[test]
    fn a_group_of_fewer_than_two_is_refused_before_anything_is_made() {
        let dir = std::env::temp_dir().join(format!("kairos-fd-group-test-{}", std::process::id()));
        for members in [0, 1] {
            let settings = ClusterSettings {
                exe: PathBuf::from("/nonexistent/kairos"),
                members,
                period_us: 100,
                threshold_us: 200,
                sweep_us: Vec::new(),
                network: Network::Loopback,
                base_port: 1,
                fifo_priority: 0,
                pin: false,
                app_bump_us: 33,
                run_for_ms: Some(1),
                measure_after_ms: 0,
                time_interrupts: false,
            };
            let Err(error) = Cluster::start(settings, &dir) else { panic!("a group of {members} started") };
            assert!(matches!(error, ClusterError::TooFewMembers(m) if m == members), "{error}");
            assert!(!dir.exists(), "a refused group made {}", dir.display());
        }
    }

    #[test]
    fn networks_keep_the_names_the_results_record() {
        // Summaries and configs already written name the network this way.
        for (network, name) in
            [(Network::Loopback, "loopback"), (Network::Namespaces, "namespaces"), (Network::Lane, "lane")]
        {
            assert_eq!(serde_json::to_string(&network).unwrap(), format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Network>(&format!("\"{name}\"")).unwrap(), network);
            assert_eq!(network.testbed(), network != Network::Loopback);
        }
    }
}

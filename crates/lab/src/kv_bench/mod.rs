//! `kairos kv bench`: the replicated store measured against what its users run today, all in
//! one run on one machine: a standalone Redis, Redis with a replica and `WAIT 1 0` after every
//! SET, the same with its append-only file fsynced before every answer (`redis-aof+wait`, the
//! peer of the fsync-always rows), a three-member etcd, and Kairos clusters of 3 and 5 members
//! with fsync on and off.
//!
//! For each system ([`systems`]): write and read latency and throughput with 1, 10 and 50
//! closed-loop clients, each its own connection, a fixed time per point ([`client`]; etcd
//! through its gRPC API, [`grpc`]); for the systems that speak plain RESP, one
//! `redis-benchmark -t set,get -n N -c 50 -q` run read into rows of its own
//! ([`redis_benchmark`]); for kairos and etcd, the failover time: the leader
//! SIGKILLed and the time until a write through another member is answered, several trials
//! ([`failover`]), beside Redis Sentinel's default detection time (a constant); and each
//! cluster's CPU at rest: its members' processes' user and system time (`/proc/PID/stat`) over
//! a few idle seconds after it starts and before any load, as a percent of one core.
//!
//! Runs ([`rounds`]): every point (and redis-benchmark run) is run `runs` times (at least 3),
//! in rounds: a round starts, measures and stops every setup once, each round beginning one
//! setup further along the table's order, so the runs of all systems interleave. A row is the
//! median of its runs, with their number (`runs`) and range (`range`, `[min, max]` of each
//! figure) beside it. Failover trials and the idle CPU are measured in the first round.
//!
//! Placement: the servers' processes are started from a thread pinned to the servers' cores and
//! inherit that affinity; the client threads (and redis-benchmark) are pinned to the load
//! generator's cores; by default the first half of the cores serve and the rest load (on two
//! cores: the servers on core 0, the clients on core 1), and the report states the rule.
//! Members beyond the servers' cores share them: the report says which setups are
//! oversubscribed.
//!
//! Clients speak to the leader (redis: the primary), every system's best case. A system whose
//! programs are missing is skipped, with the reason in `skipped`; one that fails while it runs
//! is skipped from there on, with its error.
//!
//! # Summary fields (stable)
//! `rows` (`system`, `members`, `fsync`, `storage`, `clients`, `op`, `latency_us` {`p50`,
//! `p99`, `p999`, `max`}, `ops_per_s`, `runs`, `range` {`latency_us` {`p50`, ...},
//! `ops_per_s`, `server_cpu`}, `tool`, ...), `failover_ms` (`rows` of `system`, `members`,
//! `fsync`, `trials`, `write` {`p50`, `p99`, `max`}, `elected`, `samples`; and
//! `redis_sentinel_down_after`), `clusters` (`system`, `members`, `fsync`, `storage`, `label`,
//! `idle_cpu_percent`, `idle_seconds`), `rounds`, `goals`, `placement` (`rule`, ...),
//! `fsync_probe_us`, `skipped`, `notes`, `config`, `machine`, `noise`, `plots`, `results_dir`.
//! Files: `summary.json`, `rows.csv`, `logs/` (every server's output), the plots.

pub mod client;
pub mod failover;
pub mod redis_benchmark;
pub mod report;
pub mod rounds;

/// The peers' protocol clients, which live in `kairos-peers` (etcd's gRPC API over HTTP/2, and
/// its JSON gateway over HTTP/1.1).
pub use kairos_peers::{grpc, http};
pub mod systems;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kairos_metrics::latency::LatencyRecorder;
use serde::Serialize;

use self::client::{Op, PointSettings};
use self::failover::{Quantiles, Trial};
use self::rounds::{Ranges, RunFigures};
use self::systems::{DataDir, Env, Fsync, Running, Setup, Storage, SystemKind};
use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// Clients of the redis-benchmark run (its default).
pub const BENCHMARK_CLIENTS: usize = 50;
/// How long one answer may take during a point.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the redis-benchmark run may take, beyond its requests at 1,000 a second.
const BENCHMARK_SLACK: Duration = Duration::from_secs(30);
/// Writes the fsync probe times.
const FSYNC_PROBE_WRITES: usize = 200;
/// The fewest runs of a point: a median and a range need three.
pub const MIN_RUNS: usize = 3;

/// What `kv bench` runs.
#[derive(Debug, Clone, Serialize)]
pub struct BenchConfig {
    /// The systems, in order (at least one).
    pub systems: Vec<SystemKind>,
    /// Kairos cluster sizes, members (each 1 to 7).
    pub kairos_members: Vec<usize>,
    /// Kairos fsync settings (at least one when kairos runs).
    pub kairos_fsync: Vec<Fsync>,
    /// Where etcd's data goes (tmpfs; the full run adds the disk).
    pub etcd_storage: Vec<Storage>,
    /// Clients per point: one point per count, each 1 to 1000.
    pub clients: Vec<usize>,
    /// Runs of every point, one a round, the rounds interleaving the setups (at least
    /// [`MIN_RUNS`], at most 100).
    pub runs: usize,
    /// How long each cluster is left idle, before any load, while its CPU time is counted,
    /// seconds (0.1 to 60).
    pub idle_seconds: f64,
    /// Each point's counted window, seconds (0.1 to 3600).
    pub seconds: f64,
    /// Each point's warm-up before the window, seconds (0 to 60).
    pub warmup_seconds: f64,
    /// Failover trials per kairos and etcd setup (0: none; at most 1000).
    pub failover_trials: usize,
    /// redis-benchmark's `-n` (0: no redis-benchmark run; else 100 to 10000000).
    pub benchmark_requests: u64,
    /// Bytes of each value written (1 to 65536).
    pub value_bytes: usize,
    /// The servers' cores (at least one; each one that exists here).
    pub server_cores: Vec<usize>,
    /// The load generator's cores (at least one; each one that exists here).
    pub client_cores: Vec<usize>,
    /// The kairos members' failure-detector period, us (`--period-us`, 10 to 1000000; `None`:
    /// theirs).
    pub kairos_period_us: Option<u64>,
    /// The kairos members' election timeout, ticks (`--election-ticks`, 3 to 100000; `None`:
    /// theirs).
    pub kairos_election_ticks: Option<usize>,
    /// The kairos members' failure-detector threshold, us (`--fd-lambda-us`, at most 10000000;
    /// `None`: the members' default for their fsync setting).
    pub kairos_fd_lambda_us: Option<u64>,
    /// The kairos members run without their failure detector (`--no-fd`).
    pub kairos_no_fd: bool,
    /// The `kairos` executable the members run.
    pub kairos_exe: PathBuf,
}

impl BenchConfig {
    /// The full run (3 runs of 10 s a point, 20 failover trials, etcd on tmpfs and on the disk)
    /// or the quick one (3 runs of 2 s, 5 trials, etcd on tmpfs), the members run by
    /// `kairos_exe`; 5 s of idle CPU before each cluster's load.
    pub fn preset(quick: bool, kairos_exe: PathBuf) -> Self {
        let cores = kairos_sys::proc::online_cores().max(1);
        let (server_cores, client_cores) = default_cores(cores);
        Self {
            systems: SystemKind::ALL.to_vec(),
            kairos_members: vec![3, 5],
            kairos_fsync: vec![Fsync::Always, Fsync::Never],
            etcd_storage: if quick { vec![Storage::Tmpfs] } else { vec![Storage::Tmpfs, Storage::Disk] },
            clients: vec![1, 10, 50],
            runs: MIN_RUNS,
            idle_seconds: 5.0,
            seconds: if quick { 2.0 } else { 10.0 },
            warmup_seconds: if quick { 0.25 } else { 1.0 },
            failover_trials: if quick { 5 } else { 20 },
            benchmark_requests: if quick { 20_000 } else { 100_000 },
            value_bytes: 16,
            server_cores,
            client_cores,
            kairos_period_us: None,
            kairos_election_ticks: None,
            kairos_fd_lambda_us: None,
            kairos_no_fd: false,
            kairos_exe,
        }
    }

    /// Every setup, in the table's order.
    pub fn setups(&self) -> Vec<Setup> {
        let mut setups = Vec::new();
        for &system in &self.systems {
            match system {
                SystemKind::Redis => {
                    setups.push(Setup { system, members: 1, fsync: Fsync::Never, storage: Storage::Memory })
                }
                SystemKind::RedisWait => {
                    setups.push(Setup { system, members: 2, fsync: Fsync::Never, storage: Storage::Memory })
                }
                SystemKind::RedisAofWait => {
                    setups.push(Setup { system, members: 2, fsync: Fsync::Always, storage: Storage::Disk })
                }
                SystemKind::Etcd => {
                    for &storage in &self.etcd_storage {
                        let fsync = if storage == Storage::Disk { Fsync::Always } else { Fsync::Never };
                        setups.push(Setup { system, members: 3, fsync, storage });
                    }
                }
                SystemKind::Kairos => {
                    for &members in &self.kairos_members {
                        for &fsync in &self.kairos_fsync {
                            setups.push(Setup { system, members, fsync, storage: Storage::Disk });
                        }
                    }
                }
            }
        }
        setups
    }

    /// The systems that cannot run here, with why.
    pub fn skipped(&self) -> BTreeMap<String, String> {
        let mut skipped = BTreeMap::new();
        for &system in &self.systems {
            let missing: Vec<String> = system
                .programs()
                .iter()
                .filter(|(program, _)| !crate::lane_latency::load::on_path(program))
                .map(|(program, package)| {
                    format!("{program} is not installed (Debian: apt-get install {package})")
                })
                .collect();
            if !missing.is_empty() {
                skipped.insert(system.name().to_string(), missing.join("; "));
            }
        }
        skipped
    }

    /// Whether failover is measured on `setup`.
    fn fails_over(&self, setup: &Setup) -> bool {
        self.failover_trials > 0
            && matches!(setup.system, SystemKind::Kairos | SystemKind::Etcd)
            && setup.members >= 3
    }

    /// Whether redis-benchmark runs against `setup`.
    fn benchmarks(&self, setup: &Setup) -> bool {
        self.benchmark_requests > 0 && setup.system.speaks_plain_resp()
    }
}

/// The servers' and the load generator's cores on a machine of `cores`: the first half and
/// the rest; one core is shared.
fn default_cores(cores: usize) -> (Vec<usize>, Vec<usize>) {
    if cores < 2 {
        return (vec![0], vec![0]);
    }
    let serving = cores.div_ceil(2);
    ((0..serving).collect(), (serving..cores).collect())
}

/// A latency's figures, us.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencyUs {
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// 99.9th percentile.
    pub p999: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
}

impl LatencyUs {
    fn of(recorder: &LatencyRecorder) -> Self {
        if recorder.count() == 0 {
            return Self::default();
        }
        let s = recorder.summary();
        let us = |ns: u64| Some(ns as f64 / 1e3);
        Self { p50: us(s.p50), p99: us(s.p99), p999: us(s.p999), max: us(s.max) }
    }
}

/// One row of the table: a point, the median of its runs.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `redis`, `redis+wait`, `redis-aof+wait`, `etcd` or `kairos`.
    pub system: SystemKind,
    /// Server processes (redis+wait and redis-aof+wait: primary and replica).
    pub members: usize,
    /// `always` (an answered write is on the disk) or `never`.
    pub fsync: Fsync,
    /// `memory`, `tmpfs` or `disk`.
    pub storage: Storage,
    /// Closed-loop clients.
    pub clients: usize,
    /// `write` or `read`.
    pub op: Op,
    /// Latency of the answers, us, each figure the median of the runs' (redis-benchmark rows:
    /// its p50 only).
    pub latency_us: LatencyUs,
    /// Answers per second, the median of the runs'.
    pub ops_per_s: f64,
    /// The runs behind the medians.
    pub runs: usize,
    /// Each figure's `[min, max]` over the runs.
    pub range: Ranges,
    /// `kairos kv bench` (this bench's clients) or the redis-benchmark command line.
    pub tool: String,
    /// Answers counted, all runs together.
    pub ops: u64,
    /// Failed requests, all runs together.
    pub errors: u64,
    /// The servers' CPU time over the point's time, cores, the median of the runs' (absent for
    /// redis-benchmark rows).
    pub server_cpu: Option<f64>,
    /// What the row could not have as asked.
    pub notes: Vec<String>,
}

impl Row {
    fn setup(&self) -> Setup {
        Setup { system: self.system, members: self.members, fsync: self.fsync, storage: self.storage }
    }

    fn is_bench(&self) -> bool {
        self.tool == TOOL
    }
}

/// The `tool` of this bench's own rows.
pub const TOOL: &str = "kairos kv bench";

/// One setup's failover trials.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverRow {
    /// `kairos` or `etcd`.
    pub system: SystemKind,
    /// Members.
    pub members: usize,
    /// fsync setting.
    pub fsync: Fsync,
    /// Where the data is.
    pub storage: Storage,
    /// Trials run to the end.
    pub trials: usize,
    /// Kill to the first answered write, ms.
    pub write: Option<Quantiles>,
    /// Kill to a new leader known by a third member, ms.
    pub elected: Option<Quantiles>,
    /// Every trial.
    pub samples: Vec<Trial>,
    /// The election timeout configured.
    pub election_timeout: String,
    /// What went wrong, if a trial failed.
    pub notes: Vec<String>,
}

/// The failover figures.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverSummary {
    /// Per setup.
    pub rows: Vec<FailoverRow>,
    /// Redis Sentinel's default `down-after-milliseconds`, ms: a constant from its
    /// configuration, not measured.
    pub redis_sentinel_down_after: f64,
    /// What that constant is.
    pub redis_sentinel_note: String,
    /// How long a write attempt waited before it was sent again, ms.
    pub attempt_timeout: f64,
}

/// A ratio or figure the store's goals ask for.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    /// What it is.
    pub name: String,
    /// The kairos setup.
    pub kairos: String,
    /// The setup it is compared with.
    pub peer: Option<String>,
    /// Kairos's figure.
    pub kairos_value: f64,
    /// The peer's.
    pub peer_value: Option<f64>,
    /// Their unit.
    pub unit: String,
    /// Kairos's over the peer's.
    pub ratio: Option<f64>,
    /// The goal, where one is set.
    pub goal: Option<String>,
    /// Whether it is met.
    pub met: Option<bool>,
}

/// Where the processes ran.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    /// The rule, in words, and the cores it gave here.
    pub rule: String,
    /// The servers' cores.
    pub server_cores: Vec<usize>,
    /// The load generator's cores (client threads and redis-benchmark).
    pub client_cores: Vec<usize>,
    /// How they were pinned.
    pub how: String,
    /// Each setup's servers' allowed cores, as the kernel reports them.
    pub observed: BTreeMap<String, String>,
    /// Setups with more server processes than server cores.
    pub oversubscribed: Vec<String>,
}

/// Where the data went, and what one sync costs there.
#[derive(Debug, Clone, Serialize)]
pub struct StorageInfo {
    /// The disk directory (under the results) and its file system.
    pub disk: String,
    /// The tmpfs directory.
    pub tmpfs: String,
}

/// One cluster (setup) as it ran, and its CPU at rest.
#[derive(Debug, Clone, Serialize)]
pub struct Cluster {
    /// The system.
    pub system: SystemKind,
    /// Its server processes.
    pub members: usize,
    /// Whether an acknowledged write is on a disk.
    pub fsync: Fsync,
    /// Where its data lives.
    pub storage: Storage,
    /// `kairos, 3 members, fsync always` and the like, as the rows' setups are labelled.
    pub label: String,
    /// CPU time of all its members' processes together (user and system, every thread, from
    /// `/proc/PID/stat`) over [`Cluster::idle_seconds`] with no client, once it answered
    /// writes and before any load, as a percent of one core; counted in clock ticks (1/100 s:
    /// 0.2 % over 5 s).
    pub idle_cpu_percent: f64,
    /// The idle window, seconds.
    pub idle_seconds: f64,
}

/// What `kv bench` found.
#[derive(Debug, Clone, Serialize)]
pub struct BenchSummary {
    /// Machine, noise, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: BenchConfig,
    /// Every point of a setup, then its redis-benchmark rows, setup by setup in the table's
    /// order.
    pub rows: Vec<Row>,
    /// Each cluster measured, with its CPU at rest.
    pub clusters: Vec<Cluster>,
    /// The setups each round visited, in the order it visited them.
    pub rounds: Vec<Vec<String>>,
    /// Failover.
    pub failover_ms: FailoverSummary,
    /// The ratios the goals ask for.
    pub goals: Vec<Goal>,
    /// Where the processes ran.
    pub placement: Placement,
    /// Where the data went.
    pub storage: StorageInfo,
    /// One 4 KiB write and fdatasync on the disk directory, us (when a setup syncs to it).
    pub fsync_probe_us: Option<LatencyUs>,
    /// Systems not measured, and why.
    pub skipped: BTreeMap<String, String>,
    /// What a reader should know.
    pub notes: Vec<String>,
}

impl Experiment for BenchConfig {
    const NAME: &'static str = "kv-bench";
    type Summary = BenchSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        if self.systems.is_empty() {
            return Err(InvalidConfig::new("give at least one system (--systems)"));
        }
        if self.clients.is_empty() || self.clients.iter().any(|c| !(1..=1000).contains(c)) {
            return Err(InvalidConfig::new(format!(
                "--clients must be one or more counts from 1 to 1000, got {:?}",
                self.clients
            )));
        }
        crate::harness::check_seconds(self.seconds, 0.1, 3_600.0, "--seconds", "a point's window")?;
        crate::harness::check_seconds(
            self.warmup_seconds,
            0.0,
            60.0,
            "the warm-up",
            "connections and caches settle in well under a second",
        )?;
        if !(MIN_RUNS..=100).contains(&self.runs) {
            return Err(InvalidConfig::new(format!(
                "--runs {} is out of range: {MIN_RUNS} (a median and a range need three) to 100",
                self.runs
            )));
        }
        crate::harness::check_seconds(
            self.idle_seconds,
            0.1,
            60.0,
            "the idle window",
            "a cluster's CPU at rest, counted in clock ticks",
        )?;
        if self.failover_trials > 1000 {
            return Err(InvalidConfig::new(format!(
                "--failover-trials {} is out of range: 0 to 1000",
                self.failover_trials
            )));
        }
        if self.benchmark_requests != 0 && !(100..=10_000_000).contains(&self.benchmark_requests) {
            return Err(InvalidConfig::new(format!(
                "--benchmark-requests {} is out of range: 0 (no redis-benchmark run) or 100 to 10000000",
                self.benchmark_requests
            )));
        }
        if !(1..=65_536).contains(&self.value_bytes) {
            return Err(InvalidConfig::new(format!(
                "value bytes {} out of range: 1 to 65536",
                self.value_bytes
            )));
        }
        if self.systems.contains(&SystemKind::Kairos) {
            if self.kairos_members.is_empty() || self.kairos_members.iter().any(|m| !(1..=7).contains(m)) {
                return Err(InvalidConfig::new(format!(
                    "--members must be one or more of 1 to 7, got {:?}",
                    self.kairos_members
                )));
            }
            if self.kairos_fsync.is_empty() {
                return Err(InvalidConfig::new("give at least one kairos fsync setting (--fsync)"));
            }
        }
        if self.systems.contains(&SystemKind::Etcd) && self.etcd_storage.is_empty() {
            return Err(InvalidConfig::new("give etcd at least one place for its data"));
        }
        if let Some(us) = self.kairos_period_us.filter(|us| !(10..=1_000_000).contains(us)) {
            return Err(InvalidConfig::new(format!("--period-us {us} is out of range: 10 to 1000000")));
        }
        if let Some(ticks) = self.kairos_election_ticks.filter(|t| !(3..=100_000).contains(t)) {
            return Err(InvalidConfig::new(format!(
                "--election-ticks {ticks} is out of range: 3 (more than the 2 heartbeat ticks) to 100000"
            )));
        }
        if self.kairos_fd_lambda_us.is_some_and(|us| us > 10_000_000) {
            return Err(InvalidConfig::new(format!(
                "--fd-lambda-us {} is out of range: 0 to 10000000 (or --no-fd)",
                self.kairos_fd_lambda_us.unwrap_or_default()
            )));
        }
        for (cores, flag) in [(&self.server_cores, "--server-cores"), (&self.client_cores, "--client-cores")]
        {
            if cores.is_empty() {
                return Err(InvalidConfig::new(format!("{flag} needs at least one core")));
            }
            for &core in cores {
                crate::harness::check_core(core).map_err(|e| InvalidConfig::new(format!("{flag}: {e}")))?;
            }
        }
        if self.systems.contains(&SystemKind::Kairos) && !self.kairos_exe.is_file() {
            return Err(InvalidConfig::new(format!(
                "the kairos executable {} does not exist",
                self.kairos_exe.display()
            )));
        }
        let skipped = self.skipped();
        let setups: Vec<Setup> =
            self.setups().into_iter().filter(|s| !skipped.contains_key(s.system.name())).collect();
        if setups.is_empty() {
            return Err(InvalidConfig::new(format!(
                "nothing to run: {}",
                skipped.iter().map(|(s, why)| format!("{s}: {why}")).collect::<Vec<_>>().join("; ")
            )));
        }
        let point_s = self.seconds + self.warmup_seconds;
        let mut steps = 0usize;
        let mut total_s = 0.0;
        for s in &setups {
            let runs = self.runs as f64;
            steps += self.runs * self.clients.len() * Op::ALL.len() + 1;
            total_s += runs * (self.clients.len() as f64 * Op::ALL.len() as f64 * point_s + 1.0);
            total_s += self.idle_seconds;
            if self.benchmarks(s) && crate::lane_latency::load::on_path("redis-benchmark") {
                steps += self.runs;
                total_s += runs * 2.0 * self.benchmark_requests as f64 / 30_000.0;
            }
            if self.fails_over(s) {
                steps += self.failover_trials;
                total_s += self.failover_trials as f64 * if s.system == SystemKind::Etcd { 2.5 } else { 0.3 };
            }
        }
        Ok(Plan::new(steps, total_s / steps.max(1) as f64))
    }

    fn run(&self, run: &mut Run<'_>) -> Result<BenchSummary> {
        bench(self, run)
    }
}

/// The file system `path` is on, from `/proc/self/mounts`: `ext4 on /dev/vda`.
fn file_system(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (device, at, kind) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(at).then(|| (at.len(), format!("{kind} on {device}")))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".into(), |(_, fs)| fs)
}

/// Times `writes` appends of 4 KiB, each followed by fdatasync, in `dir`.
fn fsync_probe(dir: &Path, writes: usize) -> Result<LatencyUs> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let block = [0x5au8; 4096];
    let mut recorder = LatencyRecorder::new();
    for _ in 0..writes {
        let started = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        recorder.record(started.elapsed().as_nanos() as u64);
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(LatencyUs::of(&recorder))
}

/// The 1-client latency histograms the plots draw, per setup and op.
pub(crate) type Histograms = Vec<(Setup, Op, LatencyRecorder)>;

/// A point's runs so far, and what its row carries besides the medians.
#[derive(Debug)]
struct PointRuns {
    setup: Setup,
    clients: usize,
    op: Op,
    tool: String,
    runs: Vec<RunFigures>,
    ops: u64,
    errors: u64,
    notes: Vec<String>,
}

impl PointRuns {
    /// The row: each figure's median over the runs, and the ranges.
    fn row(&self) -> Row {
        let summary = rounds::summarise(&self.runs);
        Row {
            system: self.setup.system,
            members: self.setup.members,
            fsync: self.setup.fsync,
            storage: self.setup.storage,
            clients: self.clients,
            op: self.op,
            latency_us: summary.latency,
            ops_per_s: summary.ops_per_s,
            runs: self.runs.len(),
            range: summary.range,
            tool: self.tool.clone(),
            ops: self.ops,
            errors: self.errors,
            server_cpu: summary.server_cpu,
            notes: self.notes.clone(),
        }
    }
}

/// What the rounds gather.
struct Gathered {
    /// Every point's runs, in the order first measured (round 0 visits the table's order).
    points: Vec<PointRuns>,
    /// The 1-client histograms, every run's merged.
    histograms: Histograms,
    failover_rows: Vec<FailoverRow>,
    clusters: Vec<Cluster>,
    placement: Placement,
}

impl Gathered {
    /// Adds one run of a point.
    fn record(&mut self, setup: Setup, clients: usize, op: Op, tool: &str, one: PointRun) {
        let at = match self
            .points
            .iter()
            .position(|p| p.setup == setup && p.clients == clients && p.op == op && p.tool == tool)
        {
            Some(at) => at,
            None => {
                self.points.push(PointRuns {
                    setup,
                    clients,
                    op,
                    tool: tool.to_string(),
                    runs: Vec::new(),
                    ops: 0,
                    errors: 0,
                    notes: Vec::new(),
                });
                self.points.len() - 1
            }
        };
        let point = &mut self.points[at];
        point.runs.push(one.figures);
        point.ops += one.ops;
        point.errors += one.errors;
        for note in one.notes {
            if !point.notes.contains(&note) {
                point.notes.push(note);
            }
        }
    }
}

/// One run of a point, as measured.
struct PointRun {
    figures: RunFigures,
    ops: u64,
    errors: u64,
    notes: Vec<String>,
}

/// The placement rule in words, with the cores it gave.
fn placement_rule(config: &BenchConfig) -> String {
    let cores = |c: &[usize]| {
        let list: Vec<String> = c.iter().map(usize::to_string).collect();
        format!("core{} {}", if c.len() == 1 { "" } else { "s" }, list.join(","))
    };
    let (servers, clients) = (cores(&config.server_cores), cores(&config.client_cores));
    let online = kairos_sys::proc::online_cores().max(1);
    if (config.server_cores.clone(), config.client_cores.clone()) == default_cores(online) {
        format!(
            "servers on one half of the cores, clients on the other: every server process on {servers}, every client thread and redis-benchmark on {clients}"
        )
    } else {
        format!(
            "cores as given (--server-cores, --client-cores): every server process on {servers}, every client thread and redis-benchmark on {clients}"
        )
    }
}

fn bench(config: &BenchConfig, run: &mut Run<'_>) -> Result<BenchSummary> {
    let mut skipped = config.skipped();
    let mut notes = Vec::new();
    let logs = run.dir().path().join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let disk = DataDir::create(run.dir().path().join("data"))?;
    let shm = Path::new("/dev/shm");
    let tmpfs_base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let tmpfs = DataDir::create(tmpfs_base.join(format!("kairos-kv-bench-{}", std::process::id())))?;
    let storage = StorageInfo {
        disk: format!("{} ({})", disk.path().display(), file_system(disk.path())),
        tmpfs: format!("{} ({})", tmpfs.path().display(), file_system(tmpfs.path())),
    };
    if !file_system(tmpfs.path()).starts_with("tmpfs") {
        notes.push(format!("no tmpfs at /dev/shm: \"tmpfs\" data went to {}", storage.tmpfs));
    }
    let env = Env {
        kairos_exe: config.kairos_exe.clone(),
        kairos_period_us: config.kairos_period_us,
        kairos_election_ticks: config.kairos_election_ticks,
        kairos_fd_lambda_us: config.kairos_fd_lambda_us,
        kairos_no_fd: config.kairos_no_fd,
        server_cores: config.server_cores.clone(),
        logs,
        tmpfs: tmpfs.path().to_path_buf(),
        disk: disk.path().to_path_buf(),
    };
    let setups: Vec<Setup> =
        config.setups().into_iter().filter(|s| !skipped.contains_key(s.system.name())).collect();
    let has_benchmark = crate::lane_latency::load::on_path("redis-benchmark");
    if config.benchmark_requests > 0 && !has_benchmark && setups.iter().any(|s| config.benchmarks(s)) {
        skipped.insert(
            "redis-benchmark".into(),
            "redis-benchmark is not installed (Debian: apt-get install redis-tools)".into(),
        );
    }
    let fsync_probe_us = if setups.iter().any(|s| s.storage == Storage::Disk && s.fsync == Fsync::Always) {
        run.doing("timing fdatasync on the disk");
        Some(fsync_probe(disk.path(), FSYNC_PROBE_WRITES)?)
    } else {
        None
    };

    let mut gathered = Gathered {
        points: Vec::new(),
        histograms: Vec::new(),
        failover_rows: Vec::new(),
        clusters: Vec::new(),
        placement: Placement {
            rule: placement_rule(config),
            server_cores: config.server_cores.clone(),
            client_cores: config.client_cores.clone(),
            how: "sched_setaffinity: each server started from a thread pinned to the server cores (a child inherits its parent thread's affinity, and its threads inherit the process's); each client thread, and the thread starting redis-benchmark, pinned to the client cores".into(),
            observed: BTreeMap::new(),
            oversubscribed: Vec::new(),
        },
    };
    let shared: Vec<usize> =
        config.server_cores.iter().copied().filter(|c| config.client_cores.contains(c)).collect();
    if !shared.is_empty() {
        notes.push(format!(
            "servers and clients share cores {shared:?}: the load generator takes CPU from the servers"
        ));
    }
    notes.push(format!(
        "every row is the median of {} runs of its point (\"runs\", fewer where a setup failed), with \"range\" [min, max] beside it; one run a round, each round starting, measuring and stopping every setup, beginning one setup further along the table's order than the round before; failover trials and idle CPU in the first round",
        config.runs
    ));
    if setups.iter().any(|s| s.system == SystemKind::RedisAofWait) {
        notes.push("redis-aof+wait: appendonly yes, appendfsync always on primary and replica (a SET is answered once it is fsynced in the primary's AOF); WAIT 1 0 returns once the replica has received the write, not once it is on the replica's disk".into());
    }
    for setup in &setups {
        if setup.members > config.server_cores.len() {
            gathered.placement.oversubscribed.push(format!(
                "{}: {} server processes share {} core{} (oversubscribed)",
                setup.label(),
                setup.members,
                config.server_cores.len(),
                if config.server_cores.len() == 1 { "" } else { "s" }
            ));
        }
    }
    let mut failed = vec![false; setups.len()];
    let mut round_orders = Vec::new();
    for round in 0..config.runs {
        let mut visited = Vec::new();
        for i in rounds::order(setups.len(), round) {
            if failed[i] {
                continue;
            }
            let setup = &setups[i];
            let label = setup.label();
            visited.push(label.clone());
            run.doing(&format!("round {} of {}: starting {label}", round + 1, config.runs));
            if let Err(e) = visit(config, setup, &env, run, round, has_benchmark, &mut gathered) {
                let why = format!("{e:#}");
                run.log(&format!("{label}: round {}: {why}", round + 1));
                skipped.insert(label, format!("failed in round {}: {why}", round + 1));
                failed[i] = true;
            }
        }
        round_orders.push(visited);
    }
    drop(disk);
    drop(tmpfs);
    let rows: Vec<Row> = gathered.points.iter().map(PointRuns::row).collect();
    run.dir().write_csv("rows.csv", &rows.iter().map(report::CsvRow::of).collect::<Vec<_>>())?;
    report::plots(run, &rows, &gathered.histograms)?;
    let failover = FailoverSummary {
        rows: gathered.failover_rows,
        redis_sentinel_down_after: failover::SENTINEL_DOWN_AFTER_MS,
        redis_sentinel_note: "Redis Sentinel's down-after-milliseconds in Redis 7.0's default sentinel.conf: the time before Sentinel deems a primary down, before any failover starts (a constant from its configuration, not measured)".into(),
        attempt_timeout: failover::ATTEMPT_TIMEOUT.as_secs_f64() * 1e3,
    };
    let goals = goals(&rows, &failover.rows);
    Ok(BenchSummary {
        run: run.finish(),
        config: config.clone(),
        rows,
        clusters: gathered.clusters,
        rounds: round_orders,
        failover_ms: failover,
        goals,
        placement: gathered.placement,
        storage,
        fsync_probe_us,
        skipped,
        notes,
    })
}

/// CPU time of `running`'s members over `seconds` with no load, as a percent of one core.
fn idle_cpu_percent(running: &mut Running, seconds: f64) -> Result<f64> {
    let ticks_per_s = kairos_sys::proc::clock_ticks_per_second() as f64;
    let before = running.cpu_ticks();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    // A member that died in the window would take its ticks with it.
    running.check()?;
    let ticks = running.cpu_ticks().saturating_sub(before);
    Ok(100.0 * ticks as f64 / ticks_per_s / started.elapsed().as_secs_f64())
}

/// One round's visit to `setup`: starts it, (in the first round) counts its CPU at rest, runs
/// every point once and redis-benchmark once, (in the first round) the failover trials, and
/// stops it.
fn visit(
    config: &BenchConfig,
    setup: &Setup,
    env: &Env,
    run: &Run<'_>,
    round: usize,
    has_benchmark: bool,
    gathered: &mut Gathered,
) -> Result<()> {
    let label = setup.label();
    let mut running = Running::start(*setup, env)?;
    if round == 0 {
        if let Some(cores) = running.affinity() {
            gathered.placement.observed.insert(label.clone(), cores);
        }
        run.doing(&format!("{label}: {} s idle", config.idle_seconds));
        let idle = idle_cpu_percent(&mut running, config.idle_seconds)?;
        run.log(&format!("{label}: {idle:.1} % of a core at rest ({} s, no clients)", config.idle_seconds));
        gathered.clusters.push(Cluster {
            system: setup.system,
            members: setup.members,
            fsync: setup.fsync,
            storage: setup.storage,
            label: label.clone(),
            idle_cpu_percent: idle,
            idle_seconds: config.idle_seconds,
        });
        run.step("");
    }
    let leader = running.wait_leader()?;
    let ticks_per_s = kairos_sys::proc::clock_ticks_per_second() as f64;
    for &clients in &config.clients {
        for op in Op::ALL {
            run.doing(&format!(
                "round {} of {}: {label}: {clients} clients, {}",
                round + 1,
                config.runs,
                op.name()
            ));
            running.check()?;
            let settings = PointSettings {
                protocol: setup.system.protocol(),
                addr: running.client_addr(leader),
                clients,
                op,
                warmup: Duration::from_secs_f64(config.warmup_seconds),
                window: Duration::from_secs_f64(config.seconds),
                cores: config.client_cores.clone(),
                value_bytes: config.value_bytes,
                timeout: ANSWER_TIMEOUT,
            };
            let cpu_before = running.cpu_ticks();
            let started = Instant::now();
            let point = client::run_point(&settings)?;
            let cpu = (running.cpu_ticks().saturating_sub(cpu_before)) as f64
                / ticks_per_s
                / started.elapsed().as_secs_f64();
            let mut notes = Vec::new();
            if point.errors > 0 {
                notes.push(format!(
                    "round {}: {} requests failed; the first: {}",
                    round + 1,
                    point.errors,
                    point.first_error.as_deref().unwrap_or("?")
                ));
            }
            if point.unconnected > 0 {
                notes.push(format!("{} clients could not connect at the start", point.unconnected));
            }
            if point.unpinned > 0 {
                notes.push(format!("{} client threads could not be pinned", point.unpinned));
            }
            let figures = RunFigures {
                latency: LatencyUs::of(&point.latency),
                ops_per_s: point.ops_per_s(),
                server_cpu: Some(cpu),
            };
            run.log(&format!(
                "round {}: {label}: {clients} clients {}: p50 {:.1} us, p99 {:.1} us, {:.0} ops/s, server cpu {:.2}",
                round + 1,
                op.name(),
                figures.latency.p50.unwrap_or(0.0),
                figures.latency.p99.unwrap_or(0.0),
                figures.ops_per_s,
                cpu
            ));
            if clients == 1 {
                match gathered.histograms.iter_mut().find(|(s, o, _)| s == setup && *o == op) {
                    Some((_, _, merged)) => merged.merge(&point.latency),
                    None => gathered.histograms.push((*setup, op, point.latency.clone())),
                }
            }
            let one = PointRun { figures, ops: point.ops, errors: point.errors, notes };
            gathered.record(*setup, clients, op, TOOL, one);
            run.step("");
        }
    }
    if config.benchmarks(setup) && has_benchmark {
        run.doing(&format!("round {} of {}: {label}: redis-benchmark", round + 1, config.runs));
        let out = env.logs.join(format!("{}-redis-benchmark-{}.out", setup.slug(), round + 1));
        let deadline = BENCHMARK_SLACK + Duration::from_secs(2 * config.benchmark_requests / 1_000);
        let command = redis_benchmark::command_line(config.benchmark_requests, BENCHMARK_CLIENTS);
        match redis_benchmark::run(
            running.client_addr(leader),
            config.benchmark_requests,
            BENCHMARK_CLIENTS,
            &config.client_cores,
            &out,
            deadline,
        ) {
            Ok(lines) => {
                for line in lines {
                    let op = match line.test.as_str() {
                        "SET" => Op::Write,
                        "GET" => Op::Read,
                        _ => continue,
                    };
                    let figures = RunFigures {
                        latency: LatencyUs { p50: line.p50_ms.map(|ms| ms * 1e3), ..LatencyUs::default() },
                        ops_per_s: line.requests_per_s,
                        server_cpu: None,
                    };
                    let one = PointRun {
                        figures,
                        ops: config.benchmark_requests,
                        errors: 0,
                        notes: vec!["one key (no -r), 3-byte values: redis-benchmark's defaults".into()],
                    };
                    gathered.record(*setup, BENCHMARK_CLIENTS, op, &command, one);
                }
            }
            Err(e) => run.log(&format!("{label}: round {}: {e:#}", round + 1)),
        }
        run.step("");
    }
    if round == 0 && config.fails_over(setup) {
        let mut samples = Vec::new();
        let mut notes = Vec::new();
        for t in 0..config.failover_trials {
            run.doing(&format!("{label}: failover trial {}", t + 1));
            match failover::trial(&mut running, config.value_bytes) {
                Ok(trial) => {
                    run.log(&format!(
                        "{label}: failover trial {}: a write after {:.1} ms (new leader seen after {})",
                        t + 1,
                        trial.write_ms,
                        trial.elected_ms.map_or("-".into(), |ms| format!("{ms:.1} ms"))
                    ));
                    samples.push(trial);
                }
                Err(e) => {
                    notes.push(format!("trial {} failed: {e:#}", t + 1));
                    run.log(&format!("{label}: failover trial {} failed: {e:#}", t + 1));
                    break;
                }
            }
            run.step("");
        }
        let writes: Vec<f64> = samples.iter().map(|s| s.write_ms).collect();
        let elected: Vec<f64> = samples.iter().filter_map(|s| s.elected_ms).collect();
        gathered.failover_rows.push(FailoverRow {
            system: setup.system,
            members: setup.members,
            fsync: setup.fsync,
            storage: setup.storage,
            trials: samples.len(),
            write: Quantiles::of(&writes),
            elected: Quantiles::of(&elected),
            samples,
            election_timeout: election_timeout(config, setup.system, setup.fsync),
            notes,
        });
    }
    running.stop();
    Ok(())
}

/// The election timeout a system was run with, in words.
fn election_timeout(config: &BenchConfig, system: SystemKind, fsync: Fsync) -> String {
    match system {
        SystemKind::Kairos => {
            use kairos_kv::member::{DEFAULT_TICK_US, default_election_ticks, default_period_us};
            let ticks = config.kairos_election_ticks.unwrap_or(default_election_ticks(!config.kairos_no_fd));
            let period_us = config.kairos_period_us.unwrap_or(default_period_us(false));
            let lo = ticks as f64 * DEFAULT_TICK_US as f64 / 1e3;
            let raft = format!(
                "{ticks}-{} ticks of {DEFAULT_TICK_US} us: {lo}-{} ms (--election-ticks {ticks})",
                2 * ticks,
                2.0 * lo,
            );
            if config.kairos_no_fd {
                return format!("{raft}; no failure detector (--no-fd)");
            }
            let lambda = config
                .kairos_fd_lambda_us
                .unwrap_or(kairos_kv::member::watch::default_lambda_us(fsync == Fsync::Always, false));
            format!(
                "the failure detector's suspicion after T {period_us} us + Lambda {lambda} us, or at once when the leader's port, probed T + {} us after its last word, is closed; then an election at once (--period-us, --fd-lambda-us, --fd-probe-us); Raft's timeout behind it: {raft}",
                kairos_kv::member::watch::DEFAULT_PROBE_US
            )
        }
        SystemKind::Etcd => "1000 ms, heartbeat 100 ms (etcd's defaults)".into(),
        _ => "-".into(),
    }
}

/// The ratios and figures the store's goals ask for, from the rows.
pub fn goals(rows: &[Row], failover: &[FailoverRow]) -> Vec<Goal> {
    let find = |system: SystemKind,
                members: Option<usize>,
                fsync: Option<Fsync>,
                storage: Option<Storage>,
                clients: usize,
                op: Op| {
        rows.iter().find(|r| {
            r.is_bench()
                && r.system == system
                && members.is_none_or(|m| r.members == m)
                && fsync.is_none_or(|f| r.fsync == f)
                && storage.is_none_or(|s| r.storage == s)
                && r.clients == clients
                && r.op == op
        })
    };
    let most_clients = rows.iter().filter(|r| r.is_bench()).map(|r| r.clients).max().unwrap_or(1);
    let many = if rows.iter().any(|r| r.is_bench() && r.clients == 50) { 50 } else { most_clients };
    let mut counts: Vec<usize> = rows.iter().filter(|r| r.is_bench()).map(|r| r.clients).collect();
    counts.sort_unstable();
    counts.dedup();
    // Kairos's figure over the peer's, against the most (or, `at_least`, the least) it may be.
    let compare =
        |name: String, k: &Row, p: &Row, kv: f64, pv: f64, unit: &str, bound: Option<(f64, bool)>| {
            let ratio = (pv > 0.0).then(|| kv / pv);
            Goal {
                name,
                kairos: k.setup().label(),
                peer: Some(p.setup().label()),
                kairos_value: kv,
                peer_value: Some(pv),
                unit: unit.into(),
                ratio,
                goal: bound.map(|(b, at_least)| format!("{} {b}x", if at_least { ">=" } else { "<=" })),
                met: bound.and_then(|(b, at_least)| ratio.map(|r| if at_least { r >= b } else { r <= b })),
            }
        };
    let p50 = |r: &Row| r.latency_us.p50.unwrap_or(0.0);
    let p99 = |r: &Row| r.latency_us.p99.unwrap_or(0.0);
    let mut goals = Vec::new();
    for fsync in [Fsync::Never, Fsync::Always] {
        // Like with like: the fsync-always rows beside the Redis and etcd that sync too.
        let (etcd_storage, redis, throughput_goal) = match fsync {
            Fsync::Always => (Storage::Disk, SystemKind::RedisAofWait, 1.0),
            Fsync::Never => (Storage::Tmpfs, SystemKind::RedisWait, 1.5),
        };
        let kairos = |clients, op| find(SystemKind::Kairos, Some(3), Some(fsync), None, clients, op);
        if let (Some(k), Some(p)) = (kairos(1, Op::Write), find(redis, None, None, None, 1, Op::Write)) {
            let name = format!("kairos write p50 at 1 client over {}'s", redis.name());
            goals.push(compare(name, k, p, p50(k), p50(p), "us", Some((1.0, false))));
        }
        if let (Some(k), Some(p)) = (kairos(many, Op::Write), find(redis, None, None, None, many, Op::Write))
        {
            let name = format!("kairos write throughput at {many} clients over {}'s", redis.name());
            goals.push(compare(name, k, p, k.ops_per_s, p.ops_per_s, "ops/s", Some((throughput_goal, true))));
            if fsync == Fsync::Never {
                let name = format!("kairos write p99 at {many} clients over {}'s", redis.name());
                goals.push(compare(name, k, p, p99(k), p99(p), "us", Some((1.0, false))));
            }
        }
        // Linearizable reads against Redis alone's, which reads its memory.
        if fsync == Fsync::Never
            && let (Some(k), Some(p)) =
                (kairos(1, Op::Read), find(SystemKind::Redis, None, None, None, 1, Op::Read))
        {
            let name = "kairos read p50 at 1 client over redis's".to_string();
            goals.push(compare(name, k, p, p50(k), p50(p), "us", Some((1.3, false))));
        }
        // Below etcd at every client count, writes and reads.
        for &clients in &counts {
            for op in Op::ALL {
                let etcd = find(SystemKind::Etcd, Some(3), None, Some(etcd_storage), clients, op);
                if let (Some(k), Some(p)) = (kairos(clients, op), etcd) {
                    let who =
                        if clients == 1 { "1 client".to_string() } else { format!("{clients} clients") };
                    let name = format!("kairos {} p50 at {who} over etcd's", op.name());
                    goals.push(compare(name, k, p, p50(k), p50(p), "us", Some((1.0, false))));
                }
            }
        }
    }
    for f in failover.iter().filter(|f| f.system == SystemKind::Kairos) {
        let Some(write) = f.write else { continue };
        goals.push(Goal {
            name: "kairos failover p99 (SIGKILL of the leader to a write answered through another member)"
                .into(),
            kairos: Setup { system: f.system, members: f.members, fsync: f.fsync, storage: f.storage }
                .label(),
            peer: None,
            kairos_value: write.p99,
            peer_value: None,
            unit: "ms".into(),
            ratio: None,
            goal: Some("< 10 ms".into()),
            met: Some(write.p99 < 10.0),
        });
    }
    goals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BenchConfig {
        BenchConfig::preset(true, std::env::current_exe().unwrap())
    }

    #[test]
    fn the_quick_run_has_every_system_and_both_fsyncs() {
        let labels: Vec<String> = config().setups().iter().map(Setup::label).collect();
        assert_eq!(
            labels,
            [
                "redis",
                "redis+wait (1 replica)",
                "redis-aof+wait (1 replica, fsync always)",
                "etcd, 3 members, tmpfs",
                "kairos, 3 members, fsync always",
                "kairos, 3 members, fsync never",
                "kairos, 5 members, fsync always",
                "kairos, 5 members, fsync never",
            ]
        );
        let full = BenchConfig::preset(false, std::env::current_exe().unwrap());
        assert!(full.setups().iter().any(|s| s.system == SystemKind::Etcd && s.storage == Storage::Disk));
    }

    #[test]
    fn bad_settings_are_refused_before_anything_starts() {
        let refused = |change: fn(&mut BenchConfig)| {
            let mut c = config();
            change(&mut c);
            let e = c.plan().unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            e
        };
        assert!(refused(|c| c.systems.clear()).contains("--systems"));
        assert!(refused(|c| c.clients = vec![0]).contains("--clients"));
        assert!(refused(|c| c.seconds = 0.0).contains("--seconds"));
        assert!(refused(|c| c.failover_trials = 5000).contains("--failover-trials"));
        assert!(refused(|c| c.runs = 2).contains("--runs"));
        assert!(refused(|c| c.runs = 101).contains("--runs"));
        assert!(refused(|c| c.idle_seconds = 0.0).contains("idle"));
        assert!(refused(|c| c.benchmark_requests = 5).contains("--benchmark-requests"));
        assert!(refused(|c| c.kairos_members = vec![9]).contains("--members"));
        assert!(refused(|c| c.kairos_period_us = Some(1)).contains("--period-us"));
        assert!(refused(|c| c.kairos_fd_lambda_us = Some(20_000_000)).contains("--fd-lambda-us"));
        assert!(refused(|c| c.kairos_election_ticks = Some(2)).contains("--election-ticks"));
        assert!(refused(|c| c.server_cores = vec![4096]).contains("--server-cores"));
        assert!(refused(|c| c.client_cores.clear()).contains("--client-cores"));
        assert!(refused(|c| c.kairos_exe = "/nonexistent/kairos".into()).contains("does not exist"));
        let mut ok = config();
        ok.systems = vec![SystemKind::Kairos];
        let plan = ok.plan().unwrap();
        let benchmark_runs = if crate::lane_latency::load::on_path("redis-benchmark") { 3 * 4 } else { 0 };
        assert_eq!(
            plan.steps,
            3 * 4 * 6 + benchmark_runs + 4 * 5 + 4,
            "3 runs of the points and redis-benchmark, the trials, an idle window per setup"
        );
    }

    #[test]
    fn cores_split_into_servers_and_load() {
        assert_eq!(default_cores(1), (vec![0], vec![0]));
        assert_eq!(default_cores(2), (vec![0], vec![1]));
        assert_eq!(default_cores(5), (vec![0, 1, 2], vec![3, 4]));
    }

    fn row(
        system: SystemKind,
        members: usize,
        fsync: Fsync,
        storage: Storage,
        clients: usize,
        p50: f64,
        ops: f64,
    ) -> Row {
        Row {
            system,
            members,
            fsync,
            storage,
            clients,
            op: Op::Write,
            latency_us: LatencyUs { p50: Some(p50), p99: Some(p50), p999: Some(p50), max: Some(p50) },
            ops_per_s: ops,
            runs: 3,
            range: Ranges::default(),
            tool: TOOL.into(),
            ops: 1,
            errors: 0,
            server_cpu: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn the_goals_compare_like_with_like() {
        let rows = vec![
            row(SystemKind::RedisWait, 2, Fsync::Never, Storage::Memory, 1, 50.0, 20_000.0),
            row(SystemKind::RedisWait, 2, Fsync::Never, Storage::Memory, 50, 400.0, 100_000.0),
            row(SystemKind::Etcd, 3, Fsync::Never, Storage::Tmpfs, 1, 1000.0, 1000.0),
            row(SystemKind::Kairos, 3, Fsync::Never, Storage::Disk, 1, 150.0, 6_000.0),
            row(SystemKind::Kairos, 3, Fsync::Never, Storage::Disk, 50, 500.0, 50_000.0),
            row(SystemKind::Kairos, 3, Fsync::Always, Storage::Disk, 1, 2000.0, 500.0),
            row(SystemKind::RedisAofWait, 2, Fsync::Always, Storage::Disk, 1, 1000.0, 1000.0),
        ];
        let failover = vec![FailoverRow {
            system: SystemKind::Kairos,
            members: 3,
            fsync: Fsync::Always,
            storage: Storage::Disk,
            trials: 2,
            write: Some(Quantiles { p50: 12.0, p99: 15.0, max: 15.0 }),
            elected: None,
            samples: Vec::new(),
            election_timeout: String::new(),
            notes: Vec::new(),
        }];
        let goals = goals(&rows, &failover);
        let ratio = |name: &str, kairos: &str| {
            goals.iter().find(|g| g.name.contains(name) && g.kairos.contains(kairos)).and_then(|g| g.ratio)
        };
        assert_eq!(ratio("over redis+wait's", "fsync never"), Some(3.0));
        assert_eq!(ratio("write p50 at 1 client over etcd's", "fsync never"), Some(0.15));
        assert_eq!(ratio("write p50 at 50 clients over etcd's", "fsync never"), None, "no etcd row at 50");
        let met = |name: &str, kairos: &str| {
            goals.iter().find(|g| g.name.contains(name) && g.kairos.contains(kairos)).and_then(|g| g.met)
        };
        assert_eq!(met("write p50 at 1 client over redis+wait's", "fsync never"), Some(false));
        assert_eq!(met("write p50 at 1 client over etcd's", "fsync never"), Some(true));
        assert_eq!(met("throughput at 50 clients", "fsync never"), Some(false), "0.5x, not 1.5x");
        assert_eq!(met("write p99 at 50 clients", "fsync never"), Some(false), "500 against 400 us");
        assert_eq!(ratio("throughput at 50 clients", "fsync never"), Some(0.5));
        assert_eq!(ratio("over etcd's", "fsync always"), None, "no etcd on the disk to compare with");
        assert_eq!(met("throughput at 50 clients", "fsync always"), None, "no fsync-always row at 50");
        assert_eq!(ratio("over redis+wait's", "fsync always"), None, "fsync always is compared with the AOF");
        assert_eq!(ratio("over redis-aof+wait's", "fsync always"), Some(2.0));
        assert_eq!(ratio("over redis-aof+wait's", "fsync never"), None);
        let f = goals.iter().find(|g| g.name.contains("failover")).unwrap();
        assert_eq!((f.kairos_value, f.met), (15.0, Some(false)));
    }
}

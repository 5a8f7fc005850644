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
//! The configuration and its plan are in `config`, the measurement (the rounds, each visiting
//! every setup once) in `measure`, and the ratios the store's goals ask for in `goals`.
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
mod config;
pub mod failover;
mod goals;
mod measure;
pub mod redis_benchmark;
pub mod report;
pub mod rounds;

/// The peers' protocol clients, which live in `kairos-peers` (etcd's gRPC API over HTTP/2, and
/// its JSON gateway over HTTP/1.1).
pub use kairos_peers::{grpc, http};
pub mod systems;

pub use self::config::BenchConfig;
pub use self::goals::goals;

use std::collections::BTreeMap;

use kairos_metrics::latency::LatencyRecorder;
use serde::Serialize;

use self::client::Op;
use self::failover::{Quantiles, Trial};
use self::rounds::Ranges;
use self::systems::{Fsync, Setup, Storage, SystemKind};
use crate::harness::RunInfo;

/// Clients of the redis-benchmark run (its default).
pub const BENCHMARK_CLIENTS: usize = 50;
/// The fewest runs of a point: a median and a range need three.
pub const MIN_RUNS: usize = 3;

/// The 1-client latency histograms the plots draw, per setup and op.
pub(crate) type Histograms = Vec<(Setup, Op, LatencyRecorder)>;

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

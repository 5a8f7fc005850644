//! `kairos kv bench`: the replicated store against Redis, Redis with `WAIT` (its append-only
//! file off, and fsynced on every write), and etcd, in one run on this machine. The flags only parse here: they land in the experiment's configuration,
//! whose `plan` checks each against its limits before anything starts (exit code 2).

use anyhow::{Context as _, Result};
use kairos_lab::experiments::kv_bench::systems::{Fsync, SystemKind};
use kairos_lab::experiments::kv_bench::{self, BenchConfig};

use crate::exit;

/// The flags of `kairos kv bench`: latency, throughput and failover of the store beside what
/// its users run today (redis, redis+wait, redis-aof+wait, etcd through its gRPC API), every
/// system started and stopped by the bench on this machine, servers on one half of the cores
/// and the load generator on the other. Every point is run `--runs` times, the runs of all
/// systems interleaved, and reported as the median with its range. Systems whose programs are
/// missing are skipped (`skipped` says why).
#[derive(clap::Args)]
pub struct KvBenchArgs {
    #[command(flatten)]
    common: crate::Common,
    /// The systems (comma-separated: redis, redis+wait, redis-aof+wait, etcd, kairos); default:
    /// all.
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Closed-loop clients per point, 1-1000 each (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 10, 50])]
    clients: Vec<usize>,
    /// Each point's counted window, seconds, 0.1-3600 (default: 2 with --quick, else 10).
    #[arg(long)]
    seconds: Option<f64>,
    /// Runs of every point, 3-100, one a round, each round visiting every system once (the
    /// rows are the medians, with each figure's range).
    #[arg(long, value_name = "N", default_value_t = kv_bench::MIN_RUNS)]
    runs: usize,
    /// Failover trials per kairos and etcd setup, 0-1000 (default: 5 with --quick, else 20).
    #[arg(long, value_name = "N")]
    failover_trials: Option<usize>,
    /// redis-benchmark's -n, 100-10000000, 0 for no redis-benchmark run (default: 20000 with
    /// --quick, else 100000).
    #[arg(long, value_name = "N")]
    benchmark_requests: Option<u64>,
    /// Kairos cluster sizes, 1-7 each (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [3usize, 5])]
    members: Vec<usize>,
    /// Kairos fsync settings (comma-separated: always, never).
    #[arg(long, value_delimiter = ',', default_values = ["always", "never"])]
    fsync: Vec<String>,
    /// Also run etcd with its data on the disk (the full run does).
    #[arg(long)]
    etcd_disk: bool,
    /// Cores the servers run on (comma-separated; default: the first half).
    #[arg(long, value_delimiter = ',', value_name = "CORES")]
    server_cores: Vec<usize>,
    /// Cores the load generator runs on (comma-separated; default: the rest).
    #[arg(long, value_delimiter = ',', value_name = "CORES")]
    client_cores: Vec<usize>,
    /// The kairos members' failure-detector period, microseconds, 10-1000000; default: the
    /// members' own (3000).
    #[arg(long, value_name = "US")]
    period_us: Option<u64>,
    /// The kairos members' election timeout in ticks of 1 ms (drawn in [N, 2N)), 3-100000;
    /// default: the members' own (100 with the failure detector, 10 with --no-fd).
    #[arg(long, value_name = "N")]
    election_ticks: Option<usize>,
    /// The kairos members' failure-detector threshold Lambda, microseconds (a suspected leader
    /// is replaced at once), 0-10000000; default: the members' own (100000 on UDP).
    #[arg(long, value_name = "US")]
    fd_lambda_us: Option<u64>,
    /// Run the kairos members without their failure detector (failover by Raft's timeout).
    #[arg(long)]
    no_fd: bool,
    /// How long the kairos members look at their sockets without sleeping after a client's
    /// request, microseconds, 0-10000 (0: they sleep at once); default: the members' own (200).
    #[arg(long, value_name = "US")]
    busy_poll_us: Option<u64>,
}

/// The configuration the flags ask for.
pub fn config(a: &KvBenchArgs) -> Result<BenchConfig> {
    let exe = std::env::current_exe().context("cannot find the kairos executable")?;
    let mut c = BenchConfig::preset(a.common.quick, exe);
    if !a.systems.is_empty() {
        c.systems = a
            .systems
            .iter()
            .map(|s| SystemKind::from_name(s.trim()))
            .collect::<Result<_, _>>()
            .map_err(|e| exit::usage(e.to_string()))?;
        c.systems.sort();
        c.systems.dedup();
    }
    c.clients = a.clients.clone();
    c.seconds = a.seconds.unwrap_or(c.seconds);
    c.runs = a.runs;
    c.failover_trials = a.failover_trials.unwrap_or(c.failover_trials);
    c.benchmark_requests = a.benchmark_requests.unwrap_or(c.benchmark_requests);
    c.kairos_members = a.members.clone();
    c.kairos_fsync = a
        .fsync
        .iter()
        .map(|f| match f.trim() {
            "always" => Ok(Fsync::Always),
            "never" => Ok(Fsync::Never),
            other => Err(exit::usage(format!("--fsync {other:?}: always or never"))),
        })
        .collect::<Result<_>>()?;
    if a.etcd_disk && !c.etcd_storage.contains(&kv_bench::systems::Storage::Disk) {
        c.etcd_storage.push(kv_bench::systems::Storage::Disk);
    }
    if !a.server_cores.is_empty() {
        c.server_cores = a.server_cores.clone();
    }
    if !a.client_cores.is_empty() {
        c.client_cores = a.client_cores.clone();
    }
    c.kairos_period_us = a.period_us;
    c.kairos_election_ticks = a.election_ticks;
    c.kairos_fd_lambda_us = a.fd_lambda_us;
    c.kairos_no_fd = a.no_fd;
    c.kairos_busy_poll_us = a.busy_poll_us;
    Ok(c)
}

/// Runs `kairos kv bench`.
pub fn run(args: &KvBenchArgs) -> Result<i32> {
    let config = config(args)?;
    let common = args.common.clone();
    crate::experiment(&common, &config, kv_bench::report::table)
}

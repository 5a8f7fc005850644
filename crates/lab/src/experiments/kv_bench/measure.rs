//! The measurement: the data directories and the fsync probe, then the rounds, each visiting
//! every setup once (start it, count its CPU at rest, run its points and redis-benchmark, its
//! failover trials, stop it), gathered into one row per point, the median of its runs.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kairos_metrics::latency::LatencyRecorder;

use super::client::{self, Op, PointSettings};
use super::config::default_cores;
use super::failover::{self, Quantiles};
use super::goals::goals;
use super::rounds::{self, RunFigures};
use super::systems::{Env, Fsync, Running, Setup, Storage, SystemKind};
use super::{
    BENCHMARK_CLIENTS, BenchConfig, BenchSummary, Cluster, FailoverRow, FailoverSummary, Histograms,
    LatencyUs, Placement, Row, StorageInfo, TOOL, redis_benchmark, report,
};
use crate::harness::Run;
use crate::peers::process::OwnedDir;

/// How long one answer may take during a point.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the redis-benchmark run may take, beyond its requests at 1,000 a second.
const BENCHMARK_SLACK: Duration = Duration::from_secs(30);
/// Writes the fsync probe times.
const FSYNC_PROBE_WRITES: usize = 200;

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

pub(super) fn bench(config: &BenchConfig, run: &mut Run<'_>) -> Result<BenchSummary> {
    let mut skipped = config.skipped();
    let mut notes = Vec::new();
    let logs = run.dir().path().join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let disk = OwnedDir::create(run.dir().path().join("data"))?;
    let shm = Path::new("/dev/shm");
    let tmpfs_base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let tmpfs = OwnedDir::create(tmpfs_base.join(format!("kairos-kv-bench-{}", std::process::id())))?;
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
        kairos_busy_poll_us: config.kairos_busy_poll_us,
        server_cores: config.server_cores.clone(),
        logs,
        tmpfs: tmpfs.path().to_path_buf(),
        disk: disk.path().to_path_buf(),
    };
    let setups: Vec<Setup> =
        config.setups().into_iter().filter(|s| !skipped.contains_key(s.system.name())).collect();
    let has_benchmark = crate::peers::process::on_path("redis-benchmark");
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

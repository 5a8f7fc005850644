//! What `kv bench` runs: the configuration and its presets, the setups it expands into (in the
//! table's order), the systems whose programs are missing here, and the plan, which refuses a
//! bad setting before anything starts and sizes the run for the progress bar.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use super::client::Op;
use super::measure::bench;
use super::systems::{Fsync, Setup, Storage, SystemKind};
use super::{BenchSummary, MIN_RUNS};
use crate::harness::{Experiment, InvalidConfig, Plan, Run};

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
    /// How long the kairos members busy-poll after a client's request, us (`--busy-poll-us`,
    /// at most 10000; `None`: theirs).
    pub kairos_busy_poll_us: Option<u64>,
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
            kairos_busy_poll_us: None,
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
                .filter(|(program, _)| !crate::peers::process::on_path(program))
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
    pub(super) fn fails_over(&self, setup: &Setup) -> bool {
        self.failover_trials > 0
            && matches!(setup.system, SystemKind::Kairos | SystemKind::Etcd)
            && setup.members >= 3
    }

    /// Whether redis-benchmark runs against `setup`.
    pub(super) fn benchmarks(&self, setup: &Setup) -> bool {
        self.benchmark_requests > 0 && setup.system.speaks_plain_resp()
    }
}

/// The servers' and the load generator's cores on a machine of `cores`: the first half and
/// the rest; one core is shared.
pub(super) fn default_cores(cores: usize) -> (Vec<usize>, Vec<usize>) {
    if cores < 2 {
        return (vec![0], vec![0]);
    }
    let serving = cores.div_ceil(2);
    ((0..serving).collect(), (serving..cores).collect())
}

impl Experiment for BenchConfig {
    const NAME: &'static str = "kv-bench";
    type Summary = BenchSummary;

    /// The windows around the run only ([`kairos_metrics::NoiseConfig::around_only`]): the
    /// sampler's 1 ms burst every 100 ms on the servers' core stalled every system's 50
    /// clients at once, about 0.4% of their writes, and took every system's p99 at 50 clients
    /// from 0.7-1.0 ms to 1.3-1.4 ms (docs/store.md).
    fn noise(&self) -> Option<kairos_metrics::NoiseConfig> {
        Some(kairos_metrics::NoiseConfig::around_only())
    }

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
        if let Some(why) = self.kairos_busy_poll_us.and_then(kairos_kv::member::busy_poll_us_refusal) {
            return Err(InvalidConfig::new(why));
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
            if self.benchmarks(s) && crate::peers::process::on_path("redis-benchmark") {
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
    fn no_noise_sampler_takes_the_servers_core_while_a_point_runs() {
        let noise = config().noise().expect("the windows around the run are measured");
        assert!(noise.sample_for.is_zero(), "a sampler runs during the points: {noise:?}");
        assert!(!noise.window.is_zero());
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
        assert!(refused(|c| c.kairos_busy_poll_us = Some(10_001)).contains("--busy-poll-us"));
        assert!(refused(|c| c.kairos_election_ticks = Some(2)).contains("--election-ticks"));
        assert!(refused(|c| c.server_cores = vec![4096]).contains("--server-cores"));
        assert!(refused(|c| c.client_cores.clear()).contains("--client-cores"));
        assert!(refused(|c| c.kairos_exe = "/nonexistent/kairos".into()).contains("does not exist"));
        let mut ok = config();
        ok.systems = vec![SystemKind::Kairos];
        let plan = ok.plan().unwrap();
        let benchmark_runs = if crate::peers::process::on_path("redis-benchmark") { 3 * 4 } else { 0 };
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
}

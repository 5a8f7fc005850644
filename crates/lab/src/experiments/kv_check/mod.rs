//! `kairos kv check`: the replicated store's correctness under faults. Each seed runs the
//! sans-I/O replicas ([`kairos_kv::replica`]) on a simulated network with crashes
//! (leader and followers), power loss, partitions, packet loss and pauses, with clients doing
//! SET, GET, INCR and APPEND on a few keys with a unique value per write; the in-repo checker
//! (`kairos-lincheck`) judges every history, and the final state is searched for
//! every acknowledged write. The self-test runs broken replicas (stale reads, acknowledgement
//! before commit), which the checker must catch.
//!
//! Seeds run on every core at once; each seed's run is deterministic, so a failing seed is
//! replayed with `--first-seed N --seeds 1`. Then a smaller run on real processes ([`real`]):
//! `kairos kv serve` members on loopback, clients over TCP, `kill -9` and SIGSTOP/SIGCONT.
//!
//! # Summary fields (stable)
//! `histories`, `operations`, `faults` (injected, by kind), `linearizable`, `illegal`,
//! `unknown` (histories), `panicked` (seeds whose run panicked), `lost_acknowledged_writes`, `self_test_caught` (every broken mode
//! caught), `self_test` (per mode: seeds, caught), `failures` (the seeds that were not
//! linearizable or lost writes, with the checker's account), `real` (the real-process run:
//! operations, unknown outcomes, faults, verdict, lost writes; absent when not run), `config`,
//! `machine`, `results_dir`. The totals count the real run's history with the simulated ones.
//! Files: `summary.json`, `seeds.csv`, `real_history.jsonl`.

pub mod real;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use kairos_kv::sim::check::{BrokenMode, SeedResult, caught, check_seed};
use kairos_kv::sim::{FaultKind, SimConfig, Workload};
use serde::Serialize;

use crate::harness::{Experiment, InvalidConfig, Plan, Run, RunInfo};

/// What `kv check` runs.
#[derive(Debug, Clone, Serialize)]
pub struct CheckConfig {
    /// The first seed.
    pub first_seed: u64,
    /// Seeds (histories) of the correct store, 1 to 1000000.
    pub seeds: u64,
    /// Seeds per broken mode in the self-test (0 to 100000).
    pub self_test_seeds: u64,
    /// Members of each simulated cluster, 3 to 7 (the presets: 3 or 5).
    pub members: usize,
    /// Simulated time per history, milliseconds (50 to 60000).
    pub duration_ms: u64,
    /// The checker's time budget per history, milliseconds (then: unknown).
    pub budget_ms: u64,
    /// Seconds of the real-process run (0: none; else 3 to 3600).
    pub real_seconds: f64,
    /// The `kairos` executable for the real-process run's members (none: no real run).
    pub kairos: Option<PathBuf>,
    /// The real-process run's members on the lane's testbed (root, and a real-process run):
    /// partitions by the kernel.
    pub testbed: bool,
    /// What the simulated clients do.
    pub workload: Workload,
}

impl CheckConfig {
    /// 1,000 seeds of 500 ms with --quick, else 10,000.
    pub fn preset(quick: bool) -> Self {
        Self {
            first_seed: 0,
            seeds: if quick { 1_000 } else { 10_000 },
            self_test_seeds: if quick { 40 } else { 200 },
            members: 3,
            duration_ms: 500,
            budget_ms: 10_000,
            real_seconds: if quick { 10.0 } else { 60.0 },
            kairos: None,
            testbed: false,
            workload: Workload::Register,
        }
    }

    fn sim(&self, seed: u64) -> SimConfig {
        let mut config = match self.workload {
            Workload::Register => SimConfig::new(seed),
            Workload::ListAppend => SimConfig::list_append(seed),
        };
        config.members = self.members;
        config.duration_us = self.duration_ms * 1000;
        config
    }
}

/// One broken mode's self-test.
#[derive(Debug, Clone, Serialize)]
pub struct SelfTest {
    /// The mode.
    pub mode: BrokenMode,
    /// Seeds run.
    pub seeds: u64,
    /// Seeds whose history was illegal or lost an acknowledged write.
    pub caught: u64,
}

/// What `kv check` found.
#[derive(Debug, Clone, Serialize)]
pub struct CheckSummary {
    /// Machine, plots and results directory.
    #[serde(flatten)]
    pub run: RunInfo,
    /// The configuration run.
    pub config: CheckConfig,
    /// Histories checked.
    pub histories: u64,
    /// Operations in them.
    pub operations: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Histories found linearizable.
    pub linearizable: u64,
    /// Histories found not linearizable.
    pub illegal: u64,
    /// Histories the checker could not decide in its budget.
    pub unknown: u64,
    /// Seeds whose run panicked (each is in `failures`).
    pub panicked: u64,
    /// Acknowledged writes missing at the end, over all histories.
    pub lost_acknowledged_writes: u64,
    /// Every broken mode was caught.
    pub self_test_caught: bool,
    /// The self-test per broken mode.
    pub self_test: Vec<SelfTest>,
    /// Seeds that were not linearizable or lost writes.
    pub failures: Vec<SeedResult>,
    /// The real-process run, when there was one.
    pub real: Option<RealSummary>,
}

/// The real-process run's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct RealSummary {
    /// Members.
    pub members: usize,
    /// Seconds under faults.
    pub seconds: f64,
    /// Requests in the history.
    pub operations: usize,
    /// Requests whose outcome is unknown.
    pub unknown_outcomes: usize,
    /// Faults made, by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Where the members ran: `loopback` or `testbed` (network namespaces on a bridge).
    pub network: &'static str,
    /// How members were cut off: `transport` (dropped by the member, `KAIROS.FAULT`), `link`
    /// (the bridge's port to it down) or `nftables` (its Raft port dropped both ways).
    pub partitions: BTreeMap<&'static str, u64>,
    /// `linearizable`, `illegal` or `unknown`.
    pub verdict: &'static str,
    /// The checker's account when illegal.
    pub detail: Option<String>,
    /// Acknowledged writes lost (`None`: the final reads failed).
    pub lost_acknowledged_writes: Option<u64>,
}

#[derive(Serialize)]
struct SeedRow {
    seed: u64,
    operations: usize,
    unknown_outcomes: usize,
    faults: usize,
    verdict: &'static str,
    lost_acknowledged_writes: Option<u64>,
    terms: u64,
}

/// Runs the seeds on every core; this thread counts them on the progress bar.
fn run_seeds(seeds: Vec<SimConfig>, budget: Duration, run: &Run<'_>) -> Vec<SeedResult> {
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let results = Mutex::new(Vec::with_capacity(seeds.len()));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(seeds.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(config) = seeds.get(i) else { break };
                    // A panic inside a replica or the simulator is a finding about that seed,
                    // not the end of the run (and the counter below must still reach the end).
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        check_seed(config.clone(), budget)
                    }))
                    .unwrap_or_else(|panic| SeedResult {
                        seed: config.seed,
                        operations: 0,
                        unknown_outcomes: 0,
                        faults: Vec::new(),
                        verdict: "panicked",
                        detail: panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned()),
                        lost_acknowledged_writes: None,
                        terms: 0,
                    });
                    results.lock().unwrap_or_else(|p| p.into_inner()).push((i, result));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let mut counted = 0;
        while counted < seeds.len() as u64 {
            std::thread::sleep(Duration::from_millis(50));
            let now = done.load(Ordering::Relaxed);
            for _ in counted..now {
                run.step("kv check");
            }
            counted = now;
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

impl Experiment for CheckConfig {
    const NAME: &'static str = "kv-check";
    type Summary = CheckSummary;

    fn plan(&self) -> Result<Plan, InvalidConfig> {
        if !(1..=1_000_000).contains(&self.seeds) {
            return Err(InvalidConfig::new(format!("--seeds {} is out of range: 1 to 1000000", self.seeds)));
        }
        if self.self_test_seeds > 100_000 {
            return Err(InvalidConfig::new(format!(
                "--self-test-seeds {} is out of range: 0 to 100000",
                self.self_test_seeds
            )));
        }
        if !(3..=7).contains(&self.members) {
            return Err(InvalidConfig::new(format!(
                "--members {} is out of range: 3 to 7 (a majority must survive one member's fault)",
                self.members
            )));
        }
        if !(0.0..=3600.0).contains(&self.real_seconds)
            || (self.real_seconds > 0.0 && self.real_seconds < 3.0)
        {
            return Err(InvalidConfig::new(format!(
                "--real-seconds {} is out of range: 0 (none) or 3 to 3600",
                self.real_seconds
            )));
        }
        if self.testbed && self.real_seconds == 0.0 {
            return Err(InvalidConfig::new(
                "--testbed places the real-process run, which --real-seconds 0 turns off: give it seconds or drop --testbed",
            ));
        }
        if self.testbed && !kairos_sys::user::is_root() {
            return Err(InvalidConfig::new(
                "--testbed makes network namespaces, which needs root: run as root or drop --testbed",
            ));
        }
        if !(50..=60_000).contains(&self.duration_ms) {
            return Err(InvalidConfig::new(format!(
                "--duration-ms {} is out of range: 50 to 60000",
                self.duration_ms
            )));
        }
        let histories = self.seeds + self.self_test_seeds * BrokenMode::of(self.workload).len() as u64;
        let steps = histories + u64::from(self.real_seconds > 0.0);
        // Seconds a history of 500 simulated ms takes on two cores (measured: 1,080 register
        // histories in 22 s; 540 list-append histories of 200 ms in 20 s, each transaction's
        // LRANGE copying its lists on every member), then the real run and its start and stop.
        let per_history = match self.workload {
            Workload::Register => 0.02,
            Workload::ListAppend => 0.1,
        } * self.duration_ms as f64
            / 500.0;
        let real = if self.real_seconds > 0.0 { self.real_seconds + 5.0 } else { 0.0 };
        let total = histories as f64 * per_history + real;
        Ok(Plan::new(steps as usize, total / steps.max(1) as f64))
    }

    fn noise(&self) -> Option<kairos_metrics::NoiseConfig> {
        None
    }

    fn run(&self, run: &mut Run<'_>) -> Result<CheckSummary> {
        let budget = Duration::from_millis(self.budget_ms);
        let seeds: Vec<SimConfig> =
            (self.first_seed..self.first_seed + self.seeds).map(|s| self.sim(s)).collect();
        let results = run_seeds(seeds, budget, run);
        let mut self_test = Vec::new();
        for &mode in BrokenMode::of(self.workload) {
            let seeds: Vec<SimConfig> = (self.first_seed..self.first_seed + self.self_test_seeds)
                .map(|s| mode.apply(self.sim(s)))
                .collect();
            let broken = run_seeds(seeds, budget, run);
            self_test.push(SelfTest {
                mode,
                seeds: self.self_test_seeds,
                caught: broken.iter().filter(|r| caught(r)).count() as u64,
            });
        }
        let mut faults = BTreeMap::new();
        for r in &results {
            for f in &r.faults {
                *faults.entry(*f).or_insert(0) += 1;
            }
        }
        let rows: Vec<SeedRow> = results
            .iter()
            .map(|r| SeedRow {
                seed: r.seed,
                operations: r.operations,
                unknown_outcomes: r.unknown_outcomes,
                faults: r.faults.len(),
                verdict: r.verdict,
                lost_acknowledged_writes: r.lost_acknowledged_writes,
                terms: r.terms,
            })
            .collect();
        run.dir().write_csv("seeds.csv", &rows)?;
        let count = |v: &str| results.iter().filter(|r| r.verdict == v).count() as u64;
        let failures: Vec<SeedResult> = results
            .iter()
            .filter(|r| r.verdict != "linearizable" || r.lost_acknowledged_writes != Some(0))
            .cloned()
            .collect();
        let real = match (&self.kairos, self.real_seconds > 0.0) {
            (Some(kairos), true) => {
                run.doing("kv check: real processes");
                let data = run.dir().path().join("real-data");
                let config = real::RealConfig {
                    kairos: kairos.clone(),
                    members: self.members,
                    clients: 6,
                    keys: 8,
                    seconds: self.real_seconds,
                    seed: self.first_seed,
                    testbed: self.testbed,
                };
                let outcome = real::run(&config, &data);
                let _ = std::fs::remove_dir_all(&data);
                let outcome = outcome?;
                let lines: String = outcome
                    .history
                    .iter()
                    .filter_map(|op| serde_json::to_string(op).ok())
                    .map(|l| l + "\n")
                    .collect();
                run.dir().write_text("real_history.jsonl", &lines)?;
                let (verdict, detail) = kairos_kv::sim::check::judge(&outcome.history, budget);
                run.step("kv check");
                let mut faults = BTreeMap::new();
                for f in &outcome.faults {
                    *faults.entry(*f).or_insert(0) += 1;
                }
                Some(RealSummary {
                    members: self.members,
                    seconds: self.real_seconds,
                    operations: outcome.history.len(),
                    unknown_outcomes: outcome.history.iter().filter(|o| o.output.is_none()).count(),
                    faults,
                    network: if self.testbed { "testbed" } else { "loopback" },
                    partitions: outcome.partitions,
                    verdict,
                    detail,
                    lost_acknowledged_writes: outcome.lost_acknowledged_writes,
                })
            }
            _ => None,
        };
        let real_count = |v: &str| u64::from(real.as_ref().is_some_and(|r| r.verdict == v));
        if let Some(r) = &real {
            for (k, n) in &r.faults {
                *faults.entry(*k).or_insert(0) += n;
            }
        }
        let info = run.finish();
        Ok(CheckSummary {
            run: info,
            config: self.clone(),
            histories: results.len() as u64 + u64::from(real.is_some()),
            operations: results.iter().map(|r| r.operations as u64).sum::<u64>()
                + real.as_ref().map_or(0, |r| r.operations as u64),
            faults,
            linearizable: count("linearizable") + real_count("linearizable"),
            illegal: count("illegal") + real_count("illegal"),
            unknown: count("unknown") + real_count("unknown"),
            panicked: count("panicked"),
            lost_acknowledged_writes: results.iter().filter_map(|r| r.lost_acknowledged_writes).sum::<u64>()
                + real.as_ref().and_then(|r| r.lost_acknowledged_writes).unwrap_or(0),
            self_test_caught: self.self_test_seeds > 0 && self_test.iter().all(|t| t.caught > 0),
            self_test,
            failures,
            real,
        })
    }
}

/// The table printed without `--json`.
pub fn report(s: &CheckSummary) -> String {
    let mut out = format!("machine: {}\n", s.run.machine.one_line());
    out.push_str(&format!(
        "{} histories of {} members ({} simulated), {} operations; faults: {}\n",
        s.histories,
        s.config.members,
        s.config.seeds,
        s.operations,
        s.faults.iter().map(|(k, n)| format!("{k:?} {n}")).collect::<Vec<_>>().join(", ")
    ));
    // A list-append history that passes is strictly serializable (counted as `linearizable`
    // in the JSON: the transactional form of the same guarantee).
    let passed = match s.config.workload {
        Workload::Register => "linearizable",
        Workload::ListAppend => "strictly serializable",
    };
    out.push_str(&format!(
        "{passed} {}, illegal {}, unknown {}, panicked {}; acknowledged writes lost: {}\n",
        s.linearizable, s.illegal, s.unknown, s.panicked, s.lost_acknowledged_writes
    ));
    for t in &s.self_test {
        out.push_str(&format!("self-test {:?}: caught in {} of {} seeds\n", t.mode, t.caught, t.seeds));
    }
    match &s.real {
        Some(r) => out.push_str(&format!(
            "real processes: {} members on {}, {:.0} s, {} operations ({} unknown), faults {} (cut off by {}): {}, acknowledged writes lost: {}{}\n",
            r.members,
            r.network,
            r.seconds,
            r.operations,
            r.unknown_outcomes,
            r.faults.iter().map(|(k, n)| format!("{k:?} {n}")).collect::<Vec<_>>().join(", "),
            r.partitions.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "),
            r.verdict,
            r.lost_acknowledged_writes.map_or("unknown (final reads failed)".to_string(), |n| n.to_string()),
            r.detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
        )),
        None => out.push_str("real processes: not run (--real-seconds 0)\n"),
    }
    for f in s.failures.iter().take(10) {
        out.push_str(&format!(
            "seed {} {} (lost {:?}): {}  (replay: kairos kv check --first-seed {} --seeds 1)\n",
            f.seed,
            f.verdict,
            f.lost_acknowledged_writes,
            f.detail.as_deref().unwrap_or("-"),
            f.seed
        ));
    }
    out.push_str(&format!("results: {}\n", s.run.results_dir.display()));
    out
}

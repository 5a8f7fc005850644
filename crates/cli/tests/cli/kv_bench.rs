//! `kairos kv bench` in miniature: the experiment run through the harness with this build's
//! `kairos` as the members' program, a few tenths of a second a point, three runs of each. The kairos-only run
//! needs nothing installed; the run of every system needs redis-server, redis-benchmark and
//! etcd (Debian: redis-server, redis-tools, etcd-server), so it is ignored by default and
//! `scripts/test` runs it where they are installed.

use kairos_lab::experiments::kv_bench::systems::{Fsync, SystemKind};
use kairos_lab::experiments::kv_bench::{BenchConfig, BenchSummary, TOOL};
use kairos_lab::harness;
use kairos_testkit::host::{children_in_own_groups, own_groups_lock};
use kairos_testkit::{scratch_dir, stderr, usage_error};

use crate::{KAIROS, kairos};

fn tiny(systems: Vec<SystemKind>) -> BenchConfig {
    let mut c = BenchConfig::preset(true, KAIROS.path().into());
    c.systems = systems;
    c.kairos_members = vec![3];
    c.kairos_fsync = vec![Fsync::Never];
    c.clients = vec![1, 4];
    c.seconds = 0.3;
    c.warmup_seconds = 0.1;
    c.failover_trials = 2;
    c.benchmark_requests = 1_000;
    c.idle_seconds = 0.5;
    c
}

/// The bench's processes left running: every process it starts is an `OwnedChild` of this
/// one, in a process group of its own, where the children other tests of this binary start
/// with a plain `Command` are not.
fn left_behind() -> Vec<String> {
    children_in_own_groups().iter().map(|c| format!("{} ({})", c.name, c.pid)).collect()
}

/// Runs the bench; one test at a time starts children in groups of their own, as each checks
/// that none outlives it.
fn run(config: &BenchConfig) -> (BenchSummary, tempfile::TempDir) {
    let _alone = own_groups_lock();
    let results = scratch_dir("cli-kv-bench");
    let summary = harness::run(config, results.path(), &|line| eprintln!("{line}")).unwrap();
    assert!(left_behind().is_empty(), "processes left behind: {:?}", left_behind());
    assert!(!summary.run.results_dir.join("data").exists(), "the servers' data was not removed");
    for plot in ["write_latency_1_client.png", "write_throughput.png", "read_throughput.png"] {
        assert!(summary.run.plots.iter().any(|p| p.ends_with(plot) && p.exists()), "no {plot}");
    }
    (summary, results)
}

fn check_rows(summary: &BenchSummary, system: SystemKind, points: usize) {
    let rows: Vec<_> = summary.rows.iter().filter(|r| r.system == system && r.tool == TOOL).collect();
    assert_eq!(rows.len(), points, "{} rows of {}: {rows:?}", rows.len(), system.name());
    for r in rows {
        assert!(r.ops_per_s > 0.0 && r.latency_us.p50.is_some_and(|p| p > 0.0), "{r:?}");
        assert_eq!(r.errors, 0, "{r:?}");
        assert_eq!(r.runs, 3, "{r:?}");
        let [min, max] = r.range.ops_per_s;
        assert!(min <= r.ops_per_s && r.ops_per_s <= max, "the median within its range: {r:?}");
        let [min, max] = r.range.latency_us.p50.unwrap();
        assert!((min..=max).contains(&r.latency_us.p50.unwrap()), "{r:?}");
    }
    let cluster = summary.clusters.iter().find(|c| c.system == system);
    assert!(cluster.is_some_and(|c| c.idle_cpu_percent >= 0.0 && c.idle_seconds == 0.5), "{cluster:?}");
}

/// Every round visited every setup, each round starting one further along.
fn check_rounds(summary: &BenchSummary, setups: usize) {
    assert_eq!(summary.rounds.len(), 3, "{:?}", summary.rounds);
    for (r, round) in summary.rounds.iter().enumerate() {
        assert_eq!(round.len(), setups, "round {r}: {round:?}");
        assert_eq!(round[0], summary.rounds[0][r % setups], "round {r} starts one further: {round:?}");
    }
}

#[test]
fn a_tiny_bench_of_kairos_measures_points_and_failover_and_leaves_nothing() {
    let (summary, _results) = run(&tiny(vec![SystemKind::Kairos]));
    check_rows(&summary, SystemKind::Kairos, 4);
    check_rounds(&summary, 1);
    let failover = &summary.failover_ms.rows;
    assert_eq!(failover.len(), 1);
    assert_eq!(failover[0].trials, 2, "{:?}", failover[0].notes);
    assert!(failover[0].write.is_some_and(|w| w.p50 > 0.0 && w.max < 30_000.0));
    assert!(summary.goals.iter().any(|g| g.name.contains("failover") && g.met.is_some()));
    assert_eq!(summary.failover_ms.redis_sentinel_down_after, 30_000.0);
    let json = serde_json::to_value(&summary).unwrap();
    for field in
        ["rows", "failover_ms", "machine", "noise", "placement", "skipped", "goals", "clusters", "rounds"]
    {
        assert!(json.get(field).is_some(), "no {field} in the summary");
    }
    let row = &json["rows"][0];
    for field in ["system", "members", "fsync", "clients", "op", "ops_per_s", "runs", "range"] {
        assert!(row.get(field).is_some(), "no {field} in a row: {row}");
    }
    for field in ["p50", "p99", "p999", "max"] {
        assert!(row["latency_us"].get(field).is_some(), "no latency_us.{field}: {row}");
        let range = &row["range"]["latency_us"][field];
        assert!(range.as_array().is_some_and(|r| r.len() == 2), "range.latency_us.{field}: {row}");
    }
    assert!(row["range"]["ops_per_s"].as_array().is_some_and(|r| r.len() == 2), "range.ops_per_s: {row}");
    assert_eq!(row["system"], "kairos");
    assert_eq!(row["runs"], 3);
    let cluster = &json["clusters"][0];
    assert_eq!(cluster["system"], "kairos");
    assert!(cluster["idle_cpu_percent"].as_f64().is_some_and(|p| p >= 0.0), "{cluster}");
    let rule = json["placement"]["rule"].as_str().unwrap();
    assert!(rule.contains("servers on") && rule.contains("client"), "{rule}");
}

#[test]
#[ignore = "needs redis-server, redis-benchmark and etcd installed"]
fn a_tiny_bench_of_every_system() {
    let mut config = tiny(SystemKind::ALL.to_vec());
    config.kairos_fsync = vec![Fsync::Always, Fsync::Never];
    let (summary, _results) = run(&config);
    assert!(summary.skipped.is_empty(), "skipped: {:?}", summary.skipped);
    for system in SystemKind::ALL {
        check_rows(&summary, system, if system == SystemKind::Kairos { 8 } else { 4 });
    }
    check_rounds(&summary, SystemKind::ALL.len() + 1);
    let aof = summary.rows.iter().find(|r| r.system == SystemKind::RedisAofWait).unwrap();
    assert_eq!((aof.members, aof.fsync), (2, Fsync::Always), "{aof:?}");
    let benchmark: Vec<_> = summary.rows.iter().filter(|r| r.tool.starts_with("redis-benchmark")).collect();
    assert_eq!(benchmark.len(), 6, "SET and GET against redis and both kairos setups");
    assert!(benchmark.iter().all(|r| r.runs == 3), "{benchmark:?}");
    let etcd = summary.failover_ms.rows.iter().find(|f| f.system == SystemKind::Etcd).unwrap();
    assert_eq!(etcd.trials, 2, "{:?}", etcd.notes);
    let names: Vec<&str> = summary.goals.iter().map(|g| g.name.as_str()).collect();
    assert!(names.iter().any(|n| n.contains("over redis+wait's")), "{names:?}");
    assert!(names.iter().any(|n| n.contains("over redis-aof+wait's")), "{names:?}");
    assert!(names.iter().any(|n| n.contains("over etcd's")), "{names:?}");
}

#[test]
fn bad_runs_and_systems_are_one_line_usage_errors() {
    let results = scratch_dir("cli-kv-bench-usage");
    for (args, says) in [
        (&["--runs", "2"][..], "--runs 2"),
        (&["--runs", "101"], "--runs 101"),
        (&["--systems", "redis-aof"], "redis-aof+wait"),
    ] {
        let mut all = vec!["kv", "bench", "--quick", "--json", "--results", results.path().to_str().unwrap()];
        all.extend(args);
        let out = kairos(&all);
        let error = usage_error(&out);
        assert!(error.contains(says), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

//! Every command that writes a results directory fails at once, before measuring, when it
//! cannot write there: one line naming the directory and the flag, exit code 1.

use std::time::{Duration, Instant};

use kairos_testkit::{is_root, on_path, stderr};

use crate::kairos;

/// Every command that writes results, with flags that keep it short if it did run.
const COMMANDS: &[&[&str]] = &[
    &["rcu-latency", "--quick", "--runs", "1"],
    &["rcu-grace", "--quick"],
    &["lab", "--quick"],
    &["aoi-model", "--arrivals", "1000"],
    &["forward", "--packets", "20000"],
    &["sweep", "--quick"],
    &["lane", "tightness", "--quick"],
    &["lane", "police", "--quick"],
    &["rtu", "deadlines", "--quick"],
    &["rtu", "switches", "--quick"],
    &["rtu", "sched-deadline", "--quick"],
    &["rtu", "throughput", "--quick"],
    &["rtu", "partition", "--quick"],
];

/// Commands whose configuration needs root and installed tools: checked where they are present
/// (as `scripts/test` runs as root, having installed them), since without them the
/// configuration is refused first.
const ROOT_COMMANDS: &[&[&str]] = &[&["lane", "latency", "--quick"]];
const ROOT_TOOLS: &[&str] = &["iperf3", "sockperf", "stress-ng"];

#[test]
fn an_unwritable_results_directory_fails_in_under_a_second_before_measuring() {
    let root = is_root() && ROOT_TOOLS.iter().all(|t| on_path(t));
    if !root {
        eprintln!("not root or {ROOT_TOOLS:?} missing: {ROOT_COMMANDS:?} not checked");
    }
    let commands = COMMANDS.iter().chain(ROOT_COMMANDS.iter().filter(|_| root));
    for args in commands {
        let started = Instant::now();
        let out = kairos(&[*args, &["--results", "/proc/kairos-results"]].concat());
        let took = started.elapsed();
        let stderr = stderr(&out);
        let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("kairos: error:")).collect();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(error.len(), 1, "{args:?}: one error line expected: {stderr}");
        assert!(
            error[0].contains("/proc/kairos-results") && error[0].contains("--results"),
            "{args:?}: {stderr}"
        );
        // Generous for a loaded machine: the refusal is one mkdir after parsing the flags; a
        // command that measured first takes seconds at least.
        assert!(took < Duration::from_secs(1), "{args:?} took {took:?} to fail");
    }
}

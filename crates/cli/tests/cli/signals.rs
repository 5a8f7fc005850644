//! SIGINT, SIGTERM and SIGHUP in the middle of a run end it cleanly: exit status 128 + the
//! signal, no process it started left running, no network namespace or cpuset of it left, and
//! the root cpuset's load balancing as it was. Each case starts the release binary, waits (by
//! polling /proc, `ip netns` and the cpuset hierarchy) until the run has made what the signal
//! must undo, records its descendants, signals it and checks.
//!
//! Needs root (namespaces, real-time threads, cpusets) and whole experiments: ignored by the
//! debug test run, `scripts/test` runs it in release as root (about a minute and a half).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kairos_sys::proc::ProcStat;
use kairos_testkit::child::send_signal;
use kairos_testkit::host::namespaces;
use kairos_testkit::{Guarded, on_path, skip_unless_root};

use crate::KAIROS;

const CPUSET: &str = "/sys/fs/cgroup/cpuset";

/// The cases share the machine's cpusets and real-time cores: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Every live descendant of `root`, with its start time and name.
fn descendants(root: u32) -> BTreeMap<u32, (u64, String)> {
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    let parents: BTreeMap<u32, u32> =
        pids.iter().filter_map(|&p| Some((p, ProcStat::of_process(p)?.parent()?))).collect();
    let mut found = BTreeMap::new();
    for &pid in &pids {
        let mut up = pid;
        while let Some(&parent) = parents.get(&up) {
            if parent == root {
                if let Some(start) = ProcStat::of_process(pid).and_then(|s| s.start_ticks()) {
                    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                    found.insert(pid, (start, name.trim().to_string()));
                }
                break;
            }
            up = parent;
        }
    }
    found
}

/// Whether the process recorded as `pid` started at `start` (clock ticks since boot) has ended
/// (gone, a zombie, or its id now another process's).
fn ended(pid: u32, start: u64) -> bool {
    ProcStat::of_process(pid).is_none_or(|s| s.is_zombie() || s.start_ticks() != Some(start))
}

/// The run's network namespaces (named `kairos-...-<pid>`, or `kairos-<pid>-<role>` for a lane
/// testbed).
fn namespaces_of(pid: u32) -> Vec<String> {
    namespaces()
        .into_iter()
        .filter(|n| {
            n.starts_with("kairos-")
                && (n.ends_with(&format!("-{pid}")) || n.starts_with(&format!("kairos-{pid}-")))
        })
        .collect()
}

/// The run's cpusets (`kairos-dl-<pid>` and `kairos-dl-<pid>-rest`).
fn cpusets_of(pid: u32) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(CPUSET) else { return Vec::new() };
    let prefix = format!("kairos-dl-{pid}");
    entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n == &prefix || n.starts_with(&format!("{prefix}-")))
        .collect()
}

/// RT throttling's setting, which the lane latency experiment's tuned row switches off (through
/// the doctor) and must put back.
fn rt_runtime() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").ok()
}

fn load_balance() -> Option<String> {
    std::fs::read_to_string(Path::new(CPUSET).join("cpuset.sched_load_balance")).ok()
}

/// Whether a thread of `pid` other than the signal thread is real-time (FIFO, RR or DEADLINE).
fn has_realtime_thread(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let policy = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(38)).unwrap_or("0");
        comm.trim() != "kairos-cleanup" && matches!(policy, "1" | "2" | "6")
    })
}

fn has_descendant(pid: u32, name: &str) -> bool {
    descendants(pid).values().any(|(_, n)| n == name)
}

/// How many descendants of `pid` have a name that starts with `prefix`.
fn descendants_named(pid: u32, prefix: &str) -> usize {
    descendants(pid).values().filter(|(_, n)| n.starts_with(prefix)).count()
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => unreachable!("only the three signals are sent"),
    }
}

struct Case {
    args: &'static [&'static str],
    signal: i32,
    /// What the run must have made before it is signalled.
    waits_for: &'static str,
    ready: fn(u32) -> bool,
}

/// Starts the run, waits until `ready`, signals it and checks that it cleaned up.
fn interrupt(case: Case) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let balance_before = load_balance();
    let rt_runtime_before = rt_runtime();
    let results = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("signals");
    // Killed on every path out of the case, a failed wait for it to be ready included.
    let mut run = Guarded::spawn(
        KAIROS
            .command()
            .args(case.args)
            .arg("--results")
            .arg(&results)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let pid = run.id();
    let mut stderr_pipe = run.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let what = format!("kairos {} ({})", case.args.join(" "), signal_name(case.signal));

    // Descendants come and go (`ip` commands): everything seen until the signal must be gone.
    let mut seen = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        seen.extend(descendants(pid));
        if (case.ready)(pid) {
            break;
        }
        if let Some(status) = run.try_wait().unwrap() {
            panic!(
                "{what} ended ({status}) before it had {}: {}",
                case.waits_for,
                stderr_reader.join().unwrap()
            );
        }
        assert!(Instant::now() < deadline, "{what} had no {} after 90 s", case.waits_for);
        std::thread::sleep(Duration::from_millis(20));
    }
    seen.extend(descendants(pid));
    let made_namespaces = namespaces_of(pid);
    let made_cpusets = cpusets_of(pid);

    assert!(send_signal(pid, case.signal), "could not signal {what}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = run.kill();
            panic!("{what} was still running 30 s after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = stderr_reader.join().unwrap();

    assert_eq!(status.code(), Some(128 + case.signal), "{what}: {stderr}");
    let line = format!("kairos: interrupted by {}; ", signal_name(case.signal));
    assert!(stderr.contains(&line), "{what}: no {line:?} on stderr: {stderr}");
    let left: Vec<String> = seen
        .iter()
        .filter(|(pid, (start, _))| !ended(**pid, *start))
        .map(|(pid, (_, name))| format!("{name} ({pid})"))
        .collect();
    assert!(left.is_empty(), "{what} left processes running: {left:?}");
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "{what} left network namespaces");
    assert_eq!(cpusets_of(pid), Vec::<String>::new(), "{what} left cpusets");
    assert_eq!(load_balance(), balance_before, "{what} left the root cpuset's load balancing changed");
    assert_eq!(rt_runtime(), rt_runtime_before, "{what} left RT throttling changed");
    eprintln!(
        "{what}: exit {}, {} descendants ended ({}), namespaces removed {:?}, cpusets removed {:?}",
        128 + case.signal,
        seen.len(),
        seen.values().map(|(_, n)| n.as_str()).collect::<Vec<_>>().join(" "),
        made_namespaces,
        made_cpusets
    );
}

/// The run made its testbed.
fn has_namespaces(pid: u32) -> bool {
    namespaces_of(pid).len() == 2
}

/// The run made its testbed and started its peer forwarder (when installed).
fn has_namespaces_and_testpmd(pid: u32) -> bool {
    has_namespaces(pid) && (!on_path("dpdk-testpmd") || has_descendant(pid, "dpdk-testpmd"))
}

/// The run's real-time threads run, and its background load (when installed): `stress-ng` and
/// the CPU and I/O workers it forks, so grandchildren are checked too.
fn has_realtime_threads_and_stress_ng(pid: u32) -> bool {
    has_realtime_thread(pid) && (!on_path("stress-ng") || descendants_named(pid, "stress-ng") >= 3)
}

/// A thread of the run is in its one-core cpuset.
fn has_cpuset_member(pid: u32) -> bool {
    let tasks = std::fs::read_to_string(Path::new(CPUSET).join(format!("kairos-dl-{pid}")).join("tasks"));
    tasks.is_ok_and(|t| !t.trim().is_empty())
}

/// The lane testbed (switch and two hosts) is up, and the lane's nodes run.
fn has_lane_testbed_and_nodes(pid: u32) -> bool {
    namespaces_of(pid).len() == 3 && thread_named(pid, "lane-loop")
}

/// The lane testbed is up and the flood (iperf3, when installed) runs across it.
fn has_lane_testbed_and_flood(pid: u32) -> bool {
    namespaces_of(pid).len() == 3 && (!on_path("iperf3") || has_descendant(pid, "iperf3"))
}

fn thread_named(pid: u32, name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
}

/// The tuned lane row (the doctor's changes applied) for ten seconds.
const LATENCY_TUNED: &[&str] =
    &["lane", "latency", "--rows", "lane", "--loads", "idle", "--packets", "100000"];
/// A peer row under the flood, for ten seconds.
const LATENCY_FLOOD: &[&str] =
    &["lane", "latency", "--rows", "udp-blocking", "--loads", "flood", "--packets", "100000"];
const SWEEP: &[&str] = &["sweep", "--quick", "--backend", "udp", "--packets", "40000"];
/// Shorter traces, so that the runs before dpdk-testpmd's go by in a few seconds.
const SWEEP_TO_TESTPMD: &[&str] = &["sweep", "--quick", "--backend", "udp", "--packets", "10000"];
// Points of 0.5 s, so that the loaded half (stress-ng) begins within seconds: the moment the
// signal comes is what is tested, not the figures.
const DEADLINES: &[&str] = &["rtu", "deadlines", "--quick", "--utilisation", "0.3,0.7", "--seconds", "0.5"];

macro_rules! case {
    ($name:ident, $args:expr, $signal:expr, $waits_for:expr, $ready:expr) => {
        #[test]
        #[ignore = "runs whole experiments as root: scripts/test runs it in release"]
        fn $name() {
            if skip_unless_root("needs root") {
                return;
            }
            interrupt(Case { args: $args, signal: $signal, waits_for: $waits_for, ready: $ready });
        }
    };
}

case!(sigint_mid_sweep, SWEEP, 2, "its namespaces", has_namespaces);
case!(sigterm_mid_sweep, SWEEP, 15, "its namespaces", has_namespaces);
case!(
    sighup_mid_sweep_with_testpmd,
    SWEEP_TO_TESTPMD,
    1,
    "its namespaces and dpdk-testpmd",
    has_namespaces_and_testpmd
);
case!(sigint_mid_rtu_deadlines, DEADLINES, 2, "real-time threads", has_realtime_thread);
case!(
    sigterm_mid_rtu_deadlines_with_stress_ng,
    DEADLINES,
    15,
    "real-time threads and stress-ng",
    has_realtime_threads_and_stress_ng
);
case!(sighup_mid_rtu_deadlines, DEADLINES, 1, "real-time threads", has_realtime_thread);
case!(
    sigterm_mid_lane_latency_with_the_doctor_applied,
    LATENCY_TUNED,
    15,
    "its lane testbed and nodes",
    has_lane_testbed_and_nodes
);
case!(
    sigint_mid_lane_latency_under_the_flood,
    LATENCY_FLOOD,
    2,
    "its lane testbed and flood",
    has_lane_testbed_and_flood
);

#[test]
#[ignore = "runs whole experiments as root: scripts/test runs it in release"]
fn sigterm_mid_rtu_sched_deadline_one_core() {
    if skip_unless_root("needs root") {
        return;
    }
    if load_balance().is_none() {
        eprintln!("skipped: no v1 cpuset hierarchy at {CPUSET}, so no one-core domain to undo");
        return;
    }
    interrupt(Case {
        // One point of 0.5 s: its one-core run begins after RMDP's and global EDF's.
        args: &["rtu", "sched-deadline", "--quick", "--utilisation", "0.5", "--seconds", "0.5"],
        signal: 15,
        waits_for: "threads in its one-core cpuset",
        ready: has_cpuset_member,
    });
}

//! `kairos lane testbed`: bad flags are one line and exit 2 before anything is made; without
//! root, exit 1 with the reason; as root, a run writes a topology over which `lane plan` admits a
//! tunnel and leaves no namespace, and a held testbed is removed by SIGTERM (exit 143).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn kairos(args: &[&str]) -> Output {
    kairos_with_pid(args).1
}

/// Runs kairos to its end; its process id (which its namespaces would be named after) and output.
fn kairos_with_pid(args: &[&str]) -> (u32, Output) {
    let child = Command::new(env!("CARGO_BIN_EXE_kairos"))
        .args(args)
        .env("CI", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kairos runs");
    (child.id(), child.wait_with_output().unwrap())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The single `kairos: error:` line of a failed run; panics unless stderr is exactly that line.
fn one_line_error(out: &Output) -> String {
    let text = stderr(out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected on stderr: {text}");
    assert!(lines[0].starts_with("kairos: error: "), "{text}");
    lines[0].to_string()
}

/// A directory of its own for one test (tests run in parallel), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kairos-cli-lane-testbed-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The network namespaces named after process `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let mine = format!("kairos-{pid}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&mine))
        .map(str::to_string)
        .collect()
}

fn is_root() -> bool {
    kairos_sys::user::is_root()
}

#[test]
fn bad_flags_are_one_line_and_exit_2_before_anything_is_made() {
    let scratch = Scratch::new("bad");
    let topology = scratch.file("t.toml");
    let t = topology.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&["--hosts", "1", "--write-topology", t], "--hosts must be from 2 to 16, got 1"),
        (&["--hosts", "17", "--write-topology", t], "--hosts must be from 2 to 16, got 17"),
        (
            &["--hosts", "2", "--rate-mbps", "0", "--write-topology", t],
            "--rate-mbps must be from 1 to 100000, got 0",
        ),
        (
            &["--hosts", "2", "--lane-limit", "0", "--write-topology", t],
            "--lane-limit must be from 1 to 100000",
        ),
        (
            &["--hosts", "2", "--samples", "10", "--write-topology", t],
            "--samples must be from 1000 to 1000000, got 10",
        ),
        (&["--hosts", "2", "--write-topology", "/no/such/dir/t.toml"], "no directory /no/such/dir"),
        (&["--hosts", "2", "--write-topology", "/tmp"], "/tmp: is a directory"),
    ];
    for (flags, expected) in cases {
        let mut args = vec!["lane", "testbed"];
        args.extend_from_slice(flags);
        let (pid, out) = kairos_with_pid(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let line = one_line_error(&out);
        assert!(line.contains(expected), "{args:?}: {line}");
        assert_eq!(namespaces_of(pid), Vec::<String>::new());
    }
    assert!(!topology.exists(), "a refused run wrote the topology");
    // The topology's path is required (clap's own usage error, also exit 2).
    assert_eq!(kairos(&["lane", "testbed", "--hosts", "2"]).status.code(), Some(2));
}

#[test]
fn without_root_it_says_so_and_exits_1() {
    if is_root() {
        eprintln!("skipped: running as root (the refusal is for everyone else)");
        return;
    }
    let scratch = Scratch::new("not-root");
    let topology = scratch.file("t.toml");
    let out = kairos(&["lane", "testbed", "--hosts", "2", "--write-topology", topology.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(one_line_error(&out).contains("need root"));
}

#[test]
fn as_root_it_writes_a_topology_lane_plan_reads_and_leaves_nothing() {
    if !is_root() {
        eprintln!("skipped: not root (the testbed needs network namespaces)");
        return;
    }
    let scratch = Scratch::new("rack");
    let path = scratch.file("rack.toml");
    let (pid, out) = kairos_with_pid(&[
        "lane",
        "testbed",
        "--hosts",
        "3",
        "--samples",
        "1000",
        "--write-topology",
        path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", stderr(&out));
    for expected in [
        format!("kairos-{pid}-sw"),
        format!("kairos-{pid}-h2"),
        "10.212.0.3/24".into(),
        "1:10  lane  prio 0".into(),
        "1:20  bulk  prio 1".into(),
        "calibration h0 -> h1".into(),
        "6 links of 1000 Mbit/s".into(),
        "testbed removed".into(),
    ] {
        assert!(stdout.contains(&expected), "{expected} not in:\n{stdout}");
    }
    let topology = kairos_te::Topology::load(&path).unwrap();
    assert_eq!((topology.nodes().len(), topology.links().len()), (4, 6));
    // The minimum delay is a hop's measured minimum less a frame's transmission (12 us at
    // 1 Gbit/s, more than a hop takes here, so often 0); the jitter holds the rest.
    assert!(topology.links().iter().all(|l| l.bandwidth_bps == 1_000_000_000 && l.max_jitter > 0));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# The express lane's testbed") && text.contains("no hard bound"), "{text}");
    assert!(text.contains("less a 1500-byte frame's transmission"), "{text}");
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "namespaces left behind");
    // The lane plans over it: a heartbeat multicast from h0 is admitted with its bounds.
    let requests = scratch.file("requests.toml");
    std::fs::write(
        &requests,
        "[[request]]\nname = \"heartbeat\"\nsender = \"h0\"\nreceivers = [\"h1\", \"h2\"]\npacket_bytes = 64\nperiod_ns = 100000\n",
    )
    .unwrap();
    let plan = kairos(&[
        "lane",
        "plan",
        "--topology",
        path.to_str().unwrap(),
        "--requests",
        requests.to_str().unwrap(),
    ]);
    assert_eq!(plan.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&plan.stdout), stderr(&plan));
}

#[test]
fn a_held_testbed_is_removed_by_sigterm() {
    if !is_root() {
        eprintln!("skipped: not root (the testbed needs network namespaces)");
        return;
    }
    let scratch = Scratch::new("held");
    let path = scratch.file("held.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kairos"))
        .args(["lane", "testbed", "--hosts", "2", "--samples", "1000", "--hold", "--write-topology"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let holding = lines.by_ref().map_while(Result::ok).find(|l| l.starts_with("holding the testbed"));
    assert!(holding.is_some_and(|l| l.contains(&format!("ip netns exec kairos-{pid}-h0"))));
    assert_eq!(namespaces_of(pid).len(), 3, "the held testbed's namespaces");
    // The child is ours: signalled by its own process id.
    let killed = Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(stderr(&out).contains("interrupted by SIGTERM; removed network namespaces"), "{}", stderr(&out));
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "namespaces left behind");
}

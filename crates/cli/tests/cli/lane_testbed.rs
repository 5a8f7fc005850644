//! `kairos lane testbed`: bad flags are one line and exit 2 before anything is made; without
//! root, exit 1 with the reason; as root, a run with the lane's own path writes a topology over
//! which `lane plan` admits a tunnel and leaves no namespace, and a held testbed is removed by SIGTERM (exit 143).

use std::process::Stdio;
use std::time::Duration;

use kairos_testkit::host::namespaces_starting_with;
use kairos_testkit::{Guarded, Lines, one_line_error, scratch_path, skip_if_root, skip_unless_root, stderr};

use crate::{KAIROS, kairos};

/// The network namespaces named after process `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    namespaces_starting_with(&format!("kairos-{pid}-"))
}

#[test]
fn bad_flags_are_one_line_and_exit_2_before_anything_is_made() {
    let topology = scratch_path("t.toml");
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
        let (pid, out) = KAIROS.output_with_pid(&args);
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
    if skip_if_root("running as root (the refusal is for everyone else)") {
        return;
    }
    let topology = scratch_path("t.toml");
    let out = kairos(&["lane", "testbed", "--hosts", "2", "--write-topology", topology.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(one_line_error(&out).contains("need root"));
}

#[test]
fn as_root_it_writes_a_topology_lane_plan_reads_and_leaves_nothing() {
    if skip_unless_root("not root (the testbed needs network namespaces)") {
        return;
    }
    let path = scratch_path("rack.toml");
    let (pid, out) = KAIROS.output_with_pid([
        "lane",
        "testbed",
        "--hosts",
        "3",
        "--samples",
        "1000",
        "--lane-path",
        "--write-topology",
        path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", stderr(&out));
    for expected in [
        format!("kairos-{pid}-sw"),
        format!("kairos-{pid}-h2"),
        "10.212.0.3/24".into(),
        "10.213.0.3/24".into(),
        "lane path: bridge br-lane (ports lane-h0 lane-h1 lane-h2)".into(),
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
    assert!(text.contains("a path of its own: each host's lane (10.213.0.1..10.213.0.3/24)"), "{text}");
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "namespaces left behind");
    // The lane plans over it: a heartbeat multicast from h0 is admitted with its bounds.
    let requests = scratch_path("requests.toml");
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
    if skip_unless_root("not root (the testbed needs network namespaces)") {
        return;
    }
    let path = scratch_path("held.toml");
    let mut child = Guarded::spawn(
        KAIROS
            .command()
            .args(["lane", "testbed", "--hosts", "2", "--samples", "1000", "--hold", "--write-topology"])
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let pid = child.id();
    // Generous: the testbed is up in about a second here; the limit only ends a test that would
    // otherwise wait for a testbed that never holds.
    let holding = Lines::new(child.stdout.take().unwrap())
        .wait_for(Duration::from_secs(120), |l| l.starts_with("holding the testbed"));
    assert!(holding.is_some_and(|l| l.contains(&format!("ip netns exec kairos-{pid}-h0"))));
    assert_eq!(namespaces_of(pid).len(), 3, "the held testbed's namespaces");
    // The child is ours, not yet reaped: signalled by its own process id.
    assert!(kairos_testkit::child::send_signal(pid, libc::SIGTERM));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(stderr(&out).contains("interrupted by SIGTERM; removed network namespaces"), "{}", stderr(&out));
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "namespaces left behind");
}

//! `kairos lane controller` as a process: a node's requests through `kairos lane request`, a
//! `kill -9` in the middle of its life, and a restart from the same `--state` that holds the
//! same tunnels with the same periods and bounds (read from its metrics page). Bad flags fail
//! at once with one line.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use kairos_testkit::net::connect;
use kairos_testkit::{Guarded, free_tcp_port, scratch_dir, stderr};

use crate::{KAIROS, kairos};

fn free_port() -> SocketAddr {
    (Ipv4Addr::LOCALHOST, free_tcp_port()).into()
}

/// A controller listening on `listen` with its metrics page on `metrics`, once that answers
/// (within 10 s); killed (SIGKILL) and reaped when dropped.
fn start(dir: &Path, listen: SocketAddr, metrics: SocketAddr) -> Guarded {
    let controller = Guarded::spawn(
        KAIROS
            .command()
            .args(["lane", "controller", "--topology"])
            .arg(dir.join("topo.toml"))
            .args(["--listen", &listen.to_string(), "--metrics", &metrics.to_string(), "--state"])
            .arg(dir.join("state"))
            .arg("--secret-file")
            .arg(dir.join("secret"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    connect(metrics, Duration::from_secs(10));
    controller
}

/// The metrics page's tunnel lines (grants), sorted.
fn tunnels(metrics: SocketAddr) -> Vec<String> {
    let mut s = TcpStream::connect(metrics).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    let mut lines: Vec<String> = page
        .lines()
        .filter(|l| l.starts_with("kairos_lane_tunnel") || l.starts_with("kairos_lane_link"))
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

fn request(dir: &Path, addr: SocketAddr, host: &str, name: &str, to: &str, period_us: &str) -> Output {
    let secret = dir.join("secret");
    kairos(&[
        "lane",
        "request",
        "--controller",
        &addr.to_string(),
        "--host",
        host,
        "--secret-file",
        secret.to_str().unwrap(),
        "--name",
        name,
        "--to",
        to,
        "--period-us",
        period_us,
    ])
}

#[test]
fn a_killed_controller_restarts_with_the_same_tunnels() {
    let scratch = scratch_dir("cli-controller");
    let dir = scratch.path();
    let topo = kairos(&["lane", "generate", "rack", "--hosts", "3"]);
    assert!(topo.status.success());
    std::fs::write(dir.join("topo.toml"), &topo.stdout).unwrap();
    std::fs::write(dir.join("secret"), b"0123456789abcdef0123456789abcdef").unwrap();
    let (listen, metrics) = (free_port(), free_port());

    let controller = start(dir, listen, metrics);
    for (host, name, to, period) in
        [("h0", "a", "h1", "100"), ("h0", "b", "h1,h2", "50"), ("h2", "c", "h0", "250")]
    {
        let out = request(dir, listen, host, name, to, period);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.starts_with("granted tunnel "), "{stdout}");
    }
    let refused = request(dir, listen, "h0", "d", "h9", "100");
    assert_eq!(refused.status.code(), Some(3), "a refusal exits 3");
    let secret = dir.join("secret");
    let foreign = kairos(&[
        "lane",
        "release",
        "--controller",
        &listen.to_string(),
        "--host",
        "h1",
        "--secret-file",
        secret.to_str().unwrap(),
        "--tunnel",
        "1",
    ]);
    assert_eq!(foreign.status.code(), Some(3), "h1 may not release h0's tunnel");
    let held = tunnels(metrics);
    assert_eq!(held.iter().filter(|l| l.starts_with("kairos_lane_tunnel_period_ps")).count(), 3, "{held:#?}");
    drop(controller); // SIGKILL

    let _again = start(dir, listen, metrics);
    assert_eq!(tunnels(metrics), held, "the same tunnels, periods, bounds and link loads");
}

#[test]
fn bad_controller_flags_fail_at_once_with_one_line() {
    let scratch = scratch_dir("cli-controller");
    let dir = scratch.path();
    std::fs::write(dir.join("short"), b"too short").unwrap();
    std::fs::write(dir.join("topo.toml"), "[[node]]\nname = \"h\"\nkind = \"host\"\n").unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&["--secret-file", "short"], "at least 16 are needed"),
        (&["--secret-file", "missing"], "missing"),
        (&["--secret-file", "short", "--grace-us", "99999999999"], "--grace-us must be at most"),
    ];
    for (extra, expect) in cases {
        let mut args: Vec<String> = ["lane", "controller", "--topology"].map(String::from).to_vec();
        args.push(dir.join("topo.toml").display().to_string());
        args.extend(["--listen", "127.0.0.1:0", "--state"].map(String::from));
        args.push(dir.join("state").display().to_string());
        for (i, e) in extra.iter().enumerate() {
            let previous_is_file_flag = i > 0 && extra[i - 1] == "--secret-file";
            args.push(if previous_is_file_flag { dir.join(e).display().to_string() } else { e.to_string() });
        }
        let started = Instant::now();
        let out = KAIROS.output(&args);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert!(stderr(&out).contains(expect), "{expect}: {}", stderr(&out));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

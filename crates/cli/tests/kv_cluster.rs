//! `kairos kv cluster` as a user runs it: it keeps serving when a member dies, starts that
//! member again on its data directory, where it catches up, loses no acknowledged write, and
//! keeps the data when it stops; a port another program holds is an error before any banner.

mod common;
use common::connect;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use kairos_kv::resp::client::{info_field, leader_from_info};

/// A running `kairos kv cluster`: interrupted (it then stops its members) and reaped on every
/// path out of the test; killed only if it does not stop within 15 s.
struct Cluster {
    child: Child,
    lines: Receiver<String>,
    port: u16,
}

impl Cluster {
    /// Starts a cluster of three on ports from `port`, or `None` when one of them is taken.
    fn start(port: u16, data: &Path, extra: &[&str]) -> Option<Self> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kairos"))
            .args(["kv", "cluster", "--nodes", "3", "--port", &port.to_string()])
            .arg(format!("--data={}", data.display()))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kairos kv cluster starts");
        let (tx, lines) = channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut cluster = Self { child, lines, port };
        match cluster.wait_for_line("leader: member", Duration::from_secs(30)) {
            Some(_) => Some(cluster),
            None => {
                let status = cluster.child.wait().unwrap();
                let mut err = String::new();
                std::io::Read::read_to_string(&mut cluster.child.stderr.take().unwrap(), &mut err).unwrap();
                assert!(err.contains("is in use"), "the cluster did not come up ({status}): {err}");
                None
            }
        }
    }

    /// The next line of its output that contains `text`, within `limit`.
    fn wait_for_line(&mut self, text: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    fn member_port(&self, id: u64) -> u16 {
        self.port + id as u16 - 1
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A base port with room for three members' client ports and Raft ports (PORT + 1000 + i),
/// below the kernel's ephemeral ports (32768 up), which any connection may take.
fn some_port(attempt: u16) -> u16 {
    10_000 + (std::process::id() % 200) as u16 * 60 + attempt * 7
}

fn start_cluster(data: &Path, extra: &[&str]) -> Cluster {
    (0..5)
        .find_map(|attempt| Cluster::start(some_port(attempt), data, extra))
        .expect("five tries at free ports")
}

fn info(port: u16, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(&mut connect(port)).unwrap()
}

#[test]
fn a_cluster_serves_through_its_leaders_death_and_starts_it_again_where_it_catches_up() {
    let data = tempfile::tempdir().unwrap();
    let mut cluster = start_cluster(data.path(), &[]);
    let leader = leader_from_info(&info(cluster.member_port(1), "replication")).unwrap();
    let follower = if leader == 1 { 2 } else { 1 };
    let leader_pid: i32 = info_field(&info(cluster.member_port(leader), "server"), "process_id")
        .and_then(|p| p.parse().ok())
        .expect("INFO names the member's process");

    // Writes through a follower, one after another; only an answered OK counts as
    // acknowledged. The leader dies after the first 100.
    let mut con = connect(cluster.member_port(follower));
    let (mut acknowledged, mut after_kill) = (Vec::new(), 0);
    let mut killed_at = None;
    for i in 0..400 {
        if i == 100 {
            // SAFETY: kill(2) on the pid the member reported; it is the cluster's child, which
            // the cluster reaps only after it exits.
            assert_eq!(unsafe { libc::kill(leader_pid, libc::SIGKILL) }, 0);
            killed_at = Some(Instant::now());
        }
        let (key, value) = (format!("key:{i}"), format!("value:{i}"));
        match redis::cmd("SET").arg(&key).arg(&value).query::<String>(&mut con) {
            Ok(ok) if ok == "OK" => {
                acknowledged.push((key, value));
                after_kill += usize::from(killed_at.is_some());
            }
            // Not acknowledged: it may or may not have been applied. A timed-out connection
            // is out of step with its answers, so a new one.
            _ => {
                std::thread::sleep(Duration::from_millis(20));
                con = connect(cluster.member_port(follower));
            }
        }
    }
    assert!(after_kill >= 250, "the cluster took only {after_kill} of 300 writes after its leader died");

    let exited = cluster.wait_for_line(&format!("member {leader} exited"), Duration::from_secs(10));
    assert!(exited.is_some(), "the cluster did not say that member {leader} exited");
    let again = cluster.wait_for_line(&format!("member {leader} started again"), Duration::from_secs(10));
    assert!(again.is_some(), "the cluster did not start member {leader} again");
    assert!(cluster.child.try_wait().unwrap().is_none(), "the cluster stopped when a member died");

    // The member is back on its log and has every acknowledged write (its reads wait for the
    // leader's commit index), and so has the follower.
    let new_pid: i32 =
        info_field(&info(cluster.member_port(leader), "server"), "process_id").unwrap().parse().unwrap();
    assert_ne!(new_pid, leader_pid);
    for id in [leader, follower] {
        let mut con = connect(cluster.member_port(id));
        let lost: Vec<&String> = acknowledged
            .iter()
            .filter(|(k, v)| {
                redis::cmd("GET").arg(k).query::<Option<String>>(&mut con).unwrap().as_ref() != Some(v)
            })
            .map(|(k, _)| k)
            .collect();
        assert!(lost.is_empty(), "member {id} lacks acknowledged writes: {lost:?}");
    }
    eprintln!(
        "{} of 400 writes acknowledged ({after_kill} after the leader died); member {leader} started again and holds them all",
        acknowledged.len()
    );

    // Stopped, the cluster keeps its data, and started again on it, serves it.
    drop(cluster);
    assert!(data.path().join("member1").is_dir(), "the data went with the cluster");
    let cluster = start_cluster(data.path(), &[]);
    let mut con = connect(cluster.member_port(3));
    let (k, v) = acknowledged.last().unwrap();
    assert_eq!(redis::cmd("GET").arg(k).query::<Option<String>>(&mut con).unwrap().as_ref(), Some(v));
}

#[test]
fn a_taken_port_is_an_error_before_any_banner_and_a_data_directory_keeps_its_shape() {
    let data = tempfile::tempdir().unwrap();
    let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = held.local_addr().unwrap().port();
    // Member 1's client port is taken.
    let out = Command::new(env!("CARGO_BIN_EXE_kairos"))
        .args(["kv", "cluster", "--port", &port.to_string()])
        .arg(format!("--data={}", data.path().display()))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty(), "a banner before the error: {stdout}");
    assert!(stderr.contains(&format!("port {port} (member 1's client port) is in use")), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");

    std::fs::write(data.path().join("cluster"), "members 5\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kairos"))
        .args(["kv", "cluster", "--nodes", "3", "--port", &some_port(9).to_string()])
        .arg(format!("--data={}", data.path().display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds a cluster of 5 members"), "{stderr}");
}

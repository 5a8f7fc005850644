//! `kairos kv cluster` as a user runs it: it keeps serving when a member dies, starts that
//! member again on its data directory, where it catches up, loses no acknowledged write, and
//! keeps the data when it stops; a port another program holds is an error before any banner.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kairos_kv::resp::client::{info_field, leader_from_info};
use kairos_testkit::child::send_signal;
use kairos_testkit::resp::{connect, info};
use kairos_testkit::{Guarded, Lines, free_block, scratch_dir, stderr, usage_error};

use crate::KAIROS;

/// A running `kairos kv cluster`: interrupted (it then stops its members) and reaped on every
/// path out of the test; killed only if it does not stop within 15 s.
struct Cluster {
    child: Guarded,
    lines: Lines,
    port: u16,
}

impl Cluster {
    /// Starts a cluster of three on ports from `port`, or `None` when one of them is taken.
    fn start(port: u16, data: &Path, extra: &[&str]) -> Option<Self> {
        let mut child = Guarded::spawn(
            KAIROS
                .command()
                .args(["kv", "cluster", "--nodes", "3", "--port", &port.to_string()])
                .arg(format!("--data={}", data.display()))
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .stopped_with(libc::SIGINT, Duration::from_secs(15));
        let lines = Lines::new(child.stdout.take().unwrap());
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
        self.lines.wait_for(limit, |line| line.contains(text))
    }

    fn member_port(&self, id: u64) -> u16 {
        self.port + id as u16 - 1
    }
}

/// A base port for three members: their client ports (PORT + i - 1) and Raft ports
/// (PORT + 1000 + i - 1), none of them given to another test of this binary.
fn cluster_port() -> u16 {
    free_block(&[0, 1, 2, 1000, 1001, 1002])
}

/// A cluster on ports free when picked; started again on others when a program took one of
/// them before the cluster bound it (the cluster refuses a taken port before it starts).
fn start_cluster(data: &Path, extra: &[&str]) -> Cluster {
    (0..5).find_map(|_| Cluster::start(cluster_port(), data, extra)).expect("five tries at free ports")
}

#[test]
fn a_cluster_serves_through_its_leaders_death_and_starts_it_again_where_it_catches_up() {
    let data = scratch_dir("cli-kv-cluster");
    let mut cluster = start_cluster(data.path(), &[]);
    let leader = leader_from_info(&info(cluster.member_port(1), "replication")).unwrap();
    let follower = if leader == 1 { 2 } else { 1 };
    let leader_pid: u32 = info_field(&info(cluster.member_port(leader), "server"), "process_id")
        .and_then(|p| p.parse().ok())
        .expect("INFO names the member's process");

    // Writes through a follower, one after another; only an answered OK counts as
    // acknowledged. The leader dies after the first 100.
    let mut con = connect(cluster.member_port(follower));
    let (mut acknowledged, mut after_kill) = (Vec::new(), 0);
    let mut killed_at = None;
    for i in 0..400 {
        if i == 100 {
            // The pid the member reported: the cluster's child, which the cluster reaps only
            // after it exits.
            assert!(send_signal(leader_pid, libc::SIGKILL));
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
    let new_pid: u32 =
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
    let data = scratch_dir("cli-kv-cluster");
    let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = held.local_addr().unwrap().port();
    // Member 1's client port is taken.
    let data_flag = format!("--data={}", data.path().display());
    let out = KAIROS.output(["kv", "cluster", "--port", &port.to_string(), &data_flag]);
    let error = usage_error(&out);
    assert!(out.stdout.is_empty(), "a banner before the error: {}", String::from_utf8_lossy(&out.stdout));
    assert!(error.contains(&format!("port {port} (member 1's client port) is in use")), "{error}");

    std::fs::write(data.path().join("cluster"), "members 5\n").unwrap();
    let out =
        KAIROS.output(["kv", "cluster", "--nodes", "3", "--port", &cluster_port().to_string(), &data_flag]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("holds a cluster of 5 members"), "{}", stderr(&out));
}

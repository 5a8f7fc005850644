//! `kairos kv serve`: clusters of real member processes on loopback, spoken to with the `redis`
//! crate as any Redis client would (and with `redis-cli`, raw sockets and a scrape of the
//! metrics page where a client library would hide what is checked).
//!
//! By topic: [`replication`] (a leader killed, a member restarted from its log, members joining
//! and leaving, a leader cut off), [`commands`] (every type, transactions with WATCH, SCAN,
//! blocking pops), [`limits`] (clients, output and pipelines past the server's limits),
//! [`security`] (forged datagrams, users and passwords, TLS, strangers' requests) and
//! [`operations`] (flags, a config file, the metrics page). What starts and reads the members
//! is here.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kairos_kv::resp::client::{info_field, leader_from_info};
use kairos_testkit::resp::{connect, info};
use kairos_testkit::{Guarded, free_tcp_port, free_udp_port, wait_for, wait_until};

use crate::KAIROS;

mod commands;
mod limits;
mod operations;
mod replication;
mod security;

/// The members a test started, each stopped and reaped on every path out of the test (its
/// guard); a member taken out of the list has been killed by the test.
struct Members(Vec<Option<Guarded>>);

fn start(id: usize, peers: &str, port: u16, data: &Path) -> Guarded {
    start_with(id, peers, port, data, &[])
}

fn start_with(id: usize, peers: &str, port: u16, data: &Path, extra: &[&str]) -> Guarded {
    Guarded::spawn(
        KAIROS
            .command()
            .args(["kv", "serve", "--id", &id.to_string(), "--peers", peers])
            .args(extra)
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg(format!("--data={}", data.join(format!("m{id}")).display()))
            .arg(format!("--secret-file={}", secret_in(data).display()))
            .args(["--period-us", "200", "--election-ticks", "50"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

/// Three members on free loopback ports, member i with `extra(i)`'s flags: the members, their
/// client ports and Raft ports (member i's at i - 1), and the `--peers` list (to start one
/// again).
fn three_members<'a>(
    data: &Path,
    extra: impl Fn(usize) -> &'a [&'a str],
) -> (Members, Vec<u16>, Vec<u16>, String) {
    let client_ports: Vec<u16> = (0..3).map(|_| free_tcp_port()).collect();
    let raft_ports: Vec<u16> = (0..3).map(|_| free_udp_port()).collect();
    let peers = (1..=3).map(|i| format!("{i}=127.0.0.1:{}", raft_ports[i - 1])).collect::<Vec<_>>().join(",");
    let members =
        Members((1..=3).map(|i| Some(start_with(i, &peers, client_ports[i - 1], data, extra(i)))).collect());
    (members, client_ports, raft_ports, peers)
}

/// A one-member cluster (it elects itself) with `extra` flags, and its client port.
fn one_member(data: &Path, extra: &[&str]) -> (Members, u16) {
    let (members, client) = lone_member(1, data, extra);
    wait_for_leader(&mut connect(client), 0);
    (members, client)
}

/// Member `id` alone in its cluster, with `extra` flags, and its client port; not asked who
/// leads (a member behind TLS or a password would not answer `connect`'s client).
fn lone_member(id: usize, data: &Path, extra: &[&str]) -> (Members, u16) {
    let (client, raft) = (free_tcp_port(), free_udp_port());
    let members = Members(vec![Some(start_with(id, &format!("{id}=127.0.0.1:{raft}"), client, data, extra))]);
    (members, client)
}

/// The cluster's secret in its data directory, made by the first member started.
fn secret_in(data: &Path) -> PathBuf {
    let path = data.join("secret");
    if !path.exists() {
        kairos_services::seal::write_new_secret(&path).unwrap();
    }
    path
}

fn leader(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("replication").query(con).unwrap();
    leader_from_info(&info).unwrap_or(0)
}

/// The leader the member of `con` names, once it names one other than `not`, within 10 s.
fn wait_for_leader(con: &mut redis::Connection, not: u64) -> u64 {
    let l = wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        let l = leader(con);
        (l != 0 && l != not).then_some(l)
    });
    l.unwrap_or_else(|| panic!("no leader (other than {not}) within 10 s"))
}

/// Whether `key` reads `value` through `con` within 10 s, asked every `every`: a member that
/// catches up. A failed read counts as not yet.
fn reads_within(con: &mut redis::Connection, key: &str, value: &str, every: Duration) -> bool {
    wait_until(Duration::from_secs(10), every, || {
        redis::cmd("GET").arg(key).query::<Option<String>>(con).unwrap_or(None).as_deref() == Some(value)
    })
}

/// The number `field` of an INFO answer.
fn number(info: &str, field: &str) -> u64 {
    info_field(info, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {field} in {info}"))
}

fn stat(port: u16, field: &str) -> u64 {
    stat_in(port, "stats", field)
}

/// A number from INFO `section` of the member on `port`.
fn stat_in(port: u16, section: &str, field: &str) -> u64 {
    number(&info(port, section), field)
}

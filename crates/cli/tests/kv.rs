//! `kairos kv serve`: a three-member cluster of real processes on loopback, spoken to with the
//! `redis` crate as any Redis client would: commands against a follower, pipelining, a leader
//! killed with SIGKILL and a write through the others, and the killed member restarted from
//! its log to catch up.

mod common;
use common::connect;
use std::collections::{BTreeSet, HashMap};
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The members this test started; each is killed and reaped on every path out of the test.
struct Members(Vec<Option<Child>>);

impl Drop for Members {
    fn drop(&mut self) {
        for child in self.0.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start(id: usize, peers: &str, port: u16, data: &Path) -> Child {
    start_with(id, peers, port, data, &[])
}

fn start_with(id: usize, peers: &str, port: u16, data: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kairos"))
        .args(["kv", "serve", "--id", &id.to_string(), "--peers", peers])
        .args(extra)
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--data={}", data.join(format!("m{id}")).display()))
        .arg(format!("--secret-file={}", secret_in(data).display()))
        .args(["--period-us", "200", "--election-ticks", "50"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kairos kv serve")
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

/// The cluster's secret in its data directory, made by the first member started.
fn secret_in(data: &Path) -> std::path::PathBuf {
    let path = data.join("secret");
    if !path.exists() {
        kairos_services::seal::write_new_secret(&path).unwrap();
    }
    path
}

fn leader(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("replication").query(con).unwrap();
    kairos_kv::resp::client::leader_from_info(&info).unwrap_or(0)
}

fn wait_for_leader(con: &mut redis::Connection, not: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = leader(con);
        if l != 0 && l != not {
            return l;
        }
        assert!(Instant::now() < deadline, "no leader (other than {not}) within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_cluster_of_processes_serves_redis_clients_through_a_leader_kill_and_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let (mut members, client_ports, _, peers) = three_members(data.path(), |_| &[]);

    let mut first = connect(client_ports[0]);
    let leader_id = wait_for_leader(&mut first, 0) as usize;
    let follower = (1..=3).find(|&i| i != leader_id).unwrap();
    let mut con = connect(client_ports[follower - 1]);

    // Every command of the store, against a follower.
    let _: () = redis::cmd("SET").arg("k").arg("1").query(&mut con).unwrap();
    let n: i64 = redis::cmd("INCR").arg("k").query(&mut con).unwrap();
    assert_eq!(n, 2);
    let n: i64 = redis::cmd("INCRBY").arg("k").arg(40).query(&mut con).unwrap();
    assert_eq!(n, 42);
    let n: i64 = redis::cmd("DECR").arg("k").query(&mut con).unwrap();
    assert_eq!(n, 41);
    let len: i64 = redis::cmd("APPEND").arg("k").arg("x").query(&mut con).unwrap();
    assert_eq!(len, 3);
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v.as_deref(), Some("41x"));
    let err = redis::cmd("INCR").arg("k").query::<i64>(&mut con).unwrap_err();
    assert!(err.to_string().contains("not an integer"), "{err}");
    let set_nx: Option<String> = redis::cmd("SET").arg("k").arg("y").arg("NX").query(&mut con).unwrap();
    assert_eq!(set_nx, None);
    let _: () = redis::cmd("MSET").arg("a").arg("1").arg("b").arg("2").query(&mut con).unwrap();
    let all: Vec<Option<String>> = redis::cmd("MGET").arg("a").arg("b").arg("zz").query(&mut con).unwrap();
    assert_eq!(all, vec![Some("1".into()), Some("2".into()), None]);
    let exists: i64 = redis::cmd("EXISTS").arg("a").arg("a").arg("zz").query(&mut con).unwrap();
    assert_eq!(exists, 2);
    let removed: i64 = redis::cmd("DEL").arg("a").arg("zz").query(&mut con).unwrap();
    assert_eq!(removed, 1);
    let strlen: i64 = redis::cmd("STRLEN").arg("k").query(&mut con).unwrap();
    assert_eq!(strlen, 3);
    let _: () = redis::cmd("SET").arg("t").arg("v").arg("PX").arg(50).query(&mut con).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    let gone: Option<String> = redis::cmd("GET").arg("t").query(&mut con).unwrap();
    assert_eq!(gone, None, "a key past its PX is gone");
    let err = redis::cmd("XADD").arg("s").arg("*").arg("f").arg("v").query::<String>(&mut con).unwrap_err();
    assert!(err.to_string().contains("unknown command"), "streams are not spoken: {err}");
    let _: () = redis::cmd("CLIENT").arg("SETNAME").arg("tester").query(&mut con).unwrap();
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(&mut con).unwrap();
    assert_eq!(name, "tester");
    let size: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, 2);

    // A pipeline of writes and reads is answered in order, each read seeing the writes before it.
    let mut pipe = redis::pipe();
    for i in 0..50 {
        pipe.cmd("SET").arg("p").arg(i).ignore().cmd("GET").arg("p");
    }
    let seen: Vec<i64> = pipe.query(&mut con).unwrap();
    assert_eq!(seen, (0..50).collect::<Vec<i64>>());

    // The leader dies without a word; the others elect a new one and take writes.
    let old = members.0[leader_id - 1].as_mut().unwrap();
    old.kill().unwrap();
    old.wait().unwrap();
    members.0[leader_id - 1] = None;
    let killed_at = Instant::now();
    let new_leader = wait_for_leader(&mut con, leader_id as u64);
    let _: () = redis::cmd("SET").arg("after").arg("kill").query(&mut con).unwrap();
    eprintln!(
        "leader {leader_id} killed; member {new_leader} leads, a write answered after {:?}",
        killed_at.elapsed()
    );
    // Found by its closed port (ICMP port unreachable on a probe), not by Lambda's silence.
    let refused: u64 = (1..=3)
        .filter(|&id| id != leader_id)
        .map(|id| {
            let info: String = redis::cmd("INFO").query(&mut connect(client_ports[id - 1])).unwrap();
            kairos_kv::resp::client::info_field(&info, "fd_probes_refused")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
        .sum();
    assert!(refused >= 1, "no survivor's probe of the dead leader's port was refused");

    // The killed member comes back from its log and catches up.
    members.0[leader_id - 1] = Some(start(leader_id, &peers, client_ports[leader_id - 1], data.path()));
    let mut back = connect(client_ports[leader_id - 1]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: Option<String> = redis::cmd("GET").arg("after").query(&mut back).unwrap_or(None);
        if v.as_deref() == Some("kill") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted member never served the write made while it was down"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut back).unwrap();
    assert_eq!(v.as_deref(), Some("41x"), "the restarted member kept what was written before");
}

/// Three members, a client on a follower: every type through a pipeline, a transaction that
/// WATCH aborts when another member's client changes its key (and `redis::transaction`'s
/// retries then succeed), a SCAN that returns every key once, a BLPOP woken by a push through
/// another member, and a member restarted from its log holding the same data.
#[test]
fn redis_clients_use_every_type_transactions_with_watch_scans_and_blocking_pops() {
    let data = tempfile::tempdir().unwrap();
    let (mut members, client_ports, _, peers) = three_members(data.path(), |_| &[]);
    let leader_id = wait_for_leader(&mut connect(client_ports[0]), 0) as usize;
    let follower = (1..=3).find(|&i| i != leader_id).unwrap();
    let other = (1..=3).find(|&i| i != leader_id && i != follower).unwrap();
    let mut con = connect(client_ports[follower - 1]);
    let mut elsewhere = connect(client_ports[other - 1]);

    // Every type, pipelined: each read sees the writes before it.
    type Answers = (HashMap<String, i64>, Vec<String>, BTreeSet<String>, Vec<(String, f64)>, Vec<String>);
    let (fields, list, members_of, ranked, popped): Answers = redis::pipe()
        .cmd("HSET")
        .arg("h")
        .arg("a")
        .arg(1)
        .arg("b")
        .arg(2)
        .ignore()
        .cmd("HINCRBY")
        .arg("h")
        .arg("b")
        .arg(40)
        .ignore()
        .cmd("HGETALL")
        .arg("h")
        .cmd("RPUSH")
        .arg("l")
        .arg("x")
        .arg("y")
        .arg("z")
        .ignore()
        .cmd("LRANGE")
        .arg("l")
        .arg(0)
        .arg(-1)
        .cmd("SADD")
        .arg("s")
        .arg("m")
        .arg("n")
        .arg("m")
        .ignore()
        .cmd("SMEMBERS")
        .arg("s")
        .cmd("ZADD")
        .arg("z")
        .arg(2.5)
        .arg("b")
        .arg(1)
        .arg("a")
        .ignore()
        .cmd("ZRANGE")
        .arg("z")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("LPOP")
        .arg("l")
        .arg(2)
        .query(&mut con)
        .unwrap();
    assert_eq!(fields, [("a".to_string(), 1), ("b".to_string(), 42)].into_iter().collect());
    assert_eq!(list, ["x", "y", "z"]);
    assert_eq!(members_of, ["m", "n"].iter().map(|s| s.to_string()).collect());
    assert_eq!(ranked, [("a".to_string(), 1.0), ("b".to_string(), 2.5)]);
    assert_eq!(popped, ["x", "y"]);
    let err = redis::cmd("LPUSH").arg("h").arg("x").query::<i64>(&mut con).unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");

    // WATCH: a change by a client of another member between WATCH and EXEC aborts EXEC.
    let _: () = redis::cmd("SET").arg("counter").arg(10).query(&mut con).unwrap();
    let _: () = redis::cmd("WATCH").arg("counter").query(&mut con).unwrap();
    let _: i64 = redis::cmd("INCR").arg("counter").query(&mut elsewhere).unwrap();
    let aborted: Option<(i64,)> = redis::pipe().atomic().cmd("INCR").arg("counter").query(&mut con).unwrap();
    assert_eq!(aborted, None, "EXEC after a watched key changed answers nil");
    // Two clients on two members racing with WATCH retries: every increment lands once.
    let racer_port = client_ports[other - 1];
    let racer = std::thread::spawn(move || {
        let mut c = connect(racer_port);
        for _ in 0..25 {
            let _: (i64,) = redis::transaction(&mut c, &["counter"], |c, pipe| {
                let v: i64 = redis::cmd("GET").arg("counter").query(c)?;
                pipe.cmd("SET").arg("counter").arg(v + 1).ignore().cmd("GET").arg("counter").query(c)
            })
            .unwrap();
        }
    });
    for _ in 0..25 {
        let _: (i64,) = redis::transaction(&mut con, &["counter"], |c, pipe| {
            let v: i64 = redis::cmd("GET").arg("counter").query(c)?;
            pipe.cmd("SET").arg("counter").arg(v + 1).ignore().cmd("GET").arg("counter").query(c)
        })
        .unwrap();
    }
    racer.join().unwrap();
    let counter: i64 = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
    assert_eq!(counter, 61, "10, one INCR, and 50 read-modify-write transactions, none lost");

    // SCAN returns every key once, across members (the cursor is the same everywhere).
    let mut pipe = redis::pipe();
    for i in 0..300 {
        pipe.cmd("SET").arg(format!("key:{i}")).arg(i).ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let mut seen = BTreeSet::new();
    let mut cursor = 0u64;
    for round in 0.. {
        let at = if round % 2 == 0 { &mut con } else { &mut elsewhere };
        let (next, keys): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg("key:*").arg("COUNT").arg(40).query(at).unwrap();
        for k in keys {
            assert!(seen.insert(k.clone()), "{k} returned twice");
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(seen.len(), 300);

    // BLPOP waits at its member and is woken by a push through another.
    let blocked_port = client_ports[follower - 1];
    let waiter = std::thread::spawn(move || {
        let mut c = connect(blocked_port);
        redis::cmd("BLPOP").arg("queue").arg(5).query::<Option<(String, String)>>(&mut c).unwrap()
    });
    // Pushed only once the member says the client waits: the pop must have blocked.
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat_in(blocked_port, "clients", "blocked_clients") != 1 {
        assert!(Instant::now() < deadline, "the BLPOP never blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
    let _: i64 = redis::cmd("RPUSH").arg("queue").arg("job").query(&mut elsewhere).unwrap();
    assert_eq!(waiter.join().unwrap(), Some(("queue".to_string(), "job".to_string())));
    let timed_out: Option<(String, String)> =
        redis::cmd("BLPOP").arg("empty").arg(0.2).query(&mut con).unwrap();
    assert_eq!(timed_out, None);

    // A member stopped and started again replays its log to the same data.
    let expected: HashMap<String, i64> = redis::cmd("HGETALL").arg("h").query(&mut con).unwrap();
    if let Some(mut child) = members.0[other - 1].take() {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    members.0[other - 1] = Some(start(other, &peers, client_ports[other - 1], data.path()));
    let mut back = connect(client_ports[other - 1]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got: HashMap<String, i64> = redis::cmd("HGETALL").arg("h").query(&mut back).unwrap();
        let zs: Vec<(String, f64)> =
            redis::cmd("ZRANGE").arg("z").arg(0).arg(-1).arg("WITHSCORES").query(&mut back).unwrap();
        if got == expected && zs.len() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the restarted member never caught up: {got:?} {zs:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `KAIROS.MEMBER args...` until `done(LIST)`, asked again as the refusals tell a client to:
/// while it is refused for now (no leader, or the leader busy with an earlier change or its
/// first entry of the term), and after checking the list when it was not applied in time (a
/// change proposed through a follower that the leader, busy, emptied). At most 20 s of tries.
fn member_change(con: &mut redis::Connection, args: &[&str], done: impl Fn(&[String]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let err = match redis::cmd("KAIROS.MEMBER").arg(args).query::<()>(con) {
            Ok(()) => return,
            Err(e) => e,
        };
        if err.to_string().contains("was not applied within") {
            let list: Vec<String> = redis::cmd("KAIROS.MEMBER").arg("LIST").query(con).unwrap();
            if done(&list) {
                return;
            }
        } else if !err.to_string().contains("try again shortly") {
            panic!("KAIROS.MEMBER {args:?}: {err}");
        }
        assert!(Instant::now() < deadline, "KAIROS.MEMBER {args:?} still refused after 20 s: {err}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_member_joins_a_running_cluster_and_another_leaves_it() {
    let data = tempfile::tempdir().unwrap();
    let client_ports: Vec<u16> = (0..4).map(|_| free_tcp_port()).collect();
    let raft_ports: Vec<u16> = (0..4).map(|_| free_udp_port()).collect();
    let peer = |i: usize| format!("{i}=127.0.0.1:{}", raft_ports[i - 1]);
    let founders = (1..=3).map(peer).collect::<Vec<_>>().join(",");
    let mut members =
        Members((1..=3).map(|i| Some(start(i, &founders, client_ports[i - 1], data.path()))).collect());
    let mut con = connect(client_ports[0]);
    let leader_id = wait_for_leader(&mut con, 0) as usize;
    let _: () = redis::cmd("SET").arg("before").arg("join").query(&mut con).unwrap();

    // Member 4 starts empty and is added through member 1 with its Raft address.
    let everyone = (1..=4).map(peer).collect::<Vec<_>>().join(",");
    members.0.push(Some(start_with(4, &everyone, client_ports[3], data.path(), &["--join"])));
    member_change(&mut con, &["ADD", "4", &format!("127.0.0.1:{}", raft_ports[3])], |list| list.len() == 4);
    let list: Vec<String> = redis::cmd("KAIROS.MEMBER").arg("LIST").query(&mut con).unwrap();
    assert_eq!(list.len(), 4, "{list:?}");
    assert!(list.iter().any(|m| m.starts_with(&format!("4 127.0.0.1:{} voter", raft_ports[3]))), "{list:?}");
    let mut newcomer = connect(client_ports[3]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: Option<String> = redis::cmd("GET").arg("before").query(&mut newcomer).unwrap_or(None);
        if v.as_deref() == Some("join") {
            break;
        }
        assert!(Instant::now() < deadline, "member 4 never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }

    // A follower that is not member 4 leaves; writes go on through the newcomer.
    let leaving = (1..=3).find(|&i| i != leader_id).unwrap();
    let gone =
        |list: &[String]| list.len() == 3 && !list.iter().any(|m| m.starts_with(&format!("{leaving} ")));
    member_change(&mut newcomer, &["REMOVE", &leaving.to_string()], gone);
    let child = members.0[leaving - 1].as_mut().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    members.0[leaving - 1] = None;
    let list: Vec<String> = redis::cmd("KAIROS.MEMBER").arg("LIST").query(&mut newcomer).unwrap();
    assert!(gone(&list), "{list:?}");
    let _: () = redis::cmd("SET").arg("after").arg("leave").query(&mut newcomer).unwrap();
    let err = redis::cmd("KAIROS.MEMBER").arg("ADD").arg("x").query::<()>(&mut newcomer).unwrap_err();
    assert!(err.to_string().contains("usage"), "{err}");
}

#[test]
fn a_leader_cut_off_is_replaced_and_faults_need_their_flag() {
    let data = tempfile::tempdir().unwrap();
    let (_members, client_ports, _, _) =
        three_members(data.path(), |i| if i == 3 { &[] } else { &["--allow-faults"] });
    let mut third = connect(client_ports[2]);
    let err = redis::cmd("KAIROS.FAULT").arg("HEAL").query::<()>(&mut third).unwrap_err();
    assert!(err.to_string().contains("--allow-faults"), "{err}");
    let old = wait_for_leader(&mut third, 0) as usize;
    if old == 3 {
        // Member 3 takes no faults: cut it off from the others' side instead.
        for i in [1, 2] {
            let mut c = connect(client_ports[i - 1]);
            let _: () = redis::cmd("KAIROS.FAULT").arg("PARTITION").arg(1500).arg(3).query(&mut c).unwrap();
        }
    } else {
        let mut leader = connect(client_ports[old - 1]);
        let _: () = redis::cmd("KAIROS.FAULT").arg("PARTITION").arg(1500).query(&mut leader).unwrap();
    }
    let other = (1..=3).find(|&i| i != old).unwrap();
    let mut con = connect(client_ports[other - 1]);
    let new = wait_for_leader(&mut con, old as u64);
    assert_ne!(new as usize, old);
    let _: () = redis::cmd("SET").arg("during").arg("partition").query(&mut con).unwrap();
    // After the cut heals, the old leader has the write too.
    let mut back = connect(client_ports[old - 1]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: Option<String> = redis::cmd("GET").arg("during").query(&mut back).unwrap_or(None);
        if v.as_deref() == Some("partition") {
            break;
        }
        assert!(Instant::now() < deadline, "the old leader never caught up after the partition");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn lane_hosts_and_udp_addresses_do_not_mix_and_a_lane_member_needs_its_node() {
    let kv = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kairos"))
            .args(["kv", "serve", "--data", "/nonexistent/kairos-kv-test"])
            .args(args)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = kv(&["--id", "1", "--peers", "1=h0,2=h1,3=h2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("give --lane-node DIR"), "{err}");
    let (code, err) = kv(&["--id", "1", "--peers", "1=127.0.0.1:1,2=h1", "--lane-node", "/tmp"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("member 1's is 127.0.0.1:1"), "{err}");
    let (code, err) =
        kv(&["--id", "1", "--peers", "1=h0,2=h1", "--lane-node", "/tmp", "--lane-packet-bytes", "64"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--lane-packet-bytes"), "{err}");
    let (code, err) = kv(&["--id", "1", "--peers", "1=h0,2=1.2.3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("'1.2.3' is neither"), "{err}");
}

/// Resident memory of a process, KB.
fn resident_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_flood_of_forged_fragments_is_refused_and_held_by_no_one() {
    let data = tempfile::tempdir().unwrap();
    let (members, client_ports, raft_ports, _) = three_members(data.path(), |_| &[]);
    let mut con = connect(client_ports[0]);
    wait_for_leader(&mut con, 0);
    let _: () = redis::cmd("SET").arg("before").arg("flood").query(&mut con).unwrap();
    let pids: Vec<u32> = members.0.iter().map(|m| m.as_ref().unwrap().id()).collect();
    let before: Vec<u64> = pids.iter().map(|&p| resident_kb(p)).collect();

    // 100 MB of fragments of 60 KB, each the first of a 1,000-fragment message (which an
    // unauthenticated member would begin to assemble, up to 60 MB per sender id), under
    // random sender ids (a quarter naming real members) and seals made up.
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (fragment, total) = (60_000usize, 100_000_000usize);
    for k in 0..total / fragment {
        let from = if k % 4 == 0 { 1 + next() % 3 } else { next() };
        // The first of 1,000 one-byte fragments, grown to the size of a real one.
        let mut d =
            kairos_services::frame::fragments_of(from, next(), &[0x5a; 1_000], 1).unwrap().swap_remove(0);
        d.resize(kairos_services::frame::HEADER_BYTES + fragment, 0x5a);
        d.extend_from_slice(&from.to_le_bytes());
        d.extend_from_slice(&next().to_le_bytes());
        d.extend_from_slice(&[0xa5; 16]);
        let _ = socket.send_to(&d, ("127.0.0.1", raft_ports[k % 3]));
        if k % 30 == 29 {
            // Room for the members to read: a flood the kernel drops tests nothing.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(200));

    let mut refused = 0;
    for (i, &pid) in pids.iter().enumerate() {
        let grown = resident_kb(pid).saturating_sub(before[i]);
        assert!(grown < 20_000, "member {} grew by {grown} KB under the flood", i + 1);
        let info: String = redis::cmd("INFO").arg("stats").query(&mut connect(client_ports[i])).unwrap();
        let count =
            |f| kairos_kv::resp::client::info_field(&info, f).and_then(|v| v.parse::<u64>().ok()).unwrap();
        refused += count("raft_refused_strangers") + count("raft_refused_forged");
        assert_eq!(count("raft_malformed"), 0, "a forged datagram reached the decoder");
    }
    // Most of the 1,666 datagrams reached a member and were refused there.
    assert!(refused > 1_000, "only {refused} datagrams were refused");
    // The cluster still answers, and took no forged word.
    let _: () = redis::cmd("SET").arg("after").arg("flood").query(&mut con).unwrap();
    let v: Option<String> = redis::cmd("GET").arg("before").query(&mut connect(client_ports[2])).unwrap();
    assert_eq!(v.as_deref(), Some("flood"));
    eprintln!("{refused} forged datagrams refused; resident memory before {before:?} KB");
}

#[test]
fn clients_authenticate_and_run_only_what_their_user_may() {
    let data = tempfile::tempdir().unwrap();
    let (pass, users) = (data.path().join("pass"), data.path().join("users"));
    std::fs::write(&pass, "admin-pw\n").unwrap();
    std::fs::write(
        &users,
        "user reader on >r-pw ~* +@read +@connection\nuser app on >a-pw ~* +@all -@admin\n",
    )
    .unwrap();
    let auth =
        [format!("--requirepass-file={}", pass.display()), format!("--users-file={}", users.display())];
    let auth: Vec<&str> = auth.iter().map(String::as_str).collect();
    let (_members, client_ports, _, _) = three_members(data.path(), |_| &auth);
    let mut admin = connect(client_ports[0]);
    let _: () = redis::cmd("AUTH").arg("admin-pw").query(&mut admin).unwrap();
    wait_for_leader(&mut admin, 0);

    let error = |con: &mut redis::Connection, cmd: &[&str]| {
        let mut c = redis::cmd(cmd[0]);
        for a in &cmd[1..] {
            c.arg(*a);
        }
        c.query::<redis::Value>(con).map(|v| format!("{v:?}")).unwrap_or_else(|e| e.to_string())
    };
    let mut con = connect(client_ports[1]);
    assert!(
        error(&mut con, &["GET", "k"]).contains("Authentication required"),
        "a stranger is asked to AUTH"
    );
    assert!(error(&mut con, &["AUTH", "reader", "wrong"]).contains("invalid username-password pair"));
    let _: () = redis::cmd("AUTH").arg("reader").arg("r-pw").query(&mut con).unwrap();
    let got: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(got, None);
    assert!(error(&mut con, &["SET", "k", "v"]).contains("no permissions to run the 'set' command"));
    let who: String = redis::cmd("ACL").arg("WHOAMI").query(&mut con).unwrap();
    assert_eq!(who, "reader");
    let _: () = redis::cmd("AUTH").arg("app").arg("a-pw").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    assert!(error(&mut con, &["KAIROS.MEMBER", "LIST"]).contains("no permissions"), "app is not @admin");
    let members: Vec<String> = redis::cmd("KAIROS.MEMBER").arg("LIST").query(&mut admin).unwrap();
    assert_eq!(members.len(), 3);

    let info: String = redis::cmd("INFO").arg("stats").query(&mut admin).unwrap();
    let count =
        |f| kairos_kv::resp::client::info_field(&info, f).and_then(|v| v.parse::<u64>().ok()).unwrap();
    let info2: String =
        redis::cmd("INFO").arg("stats").query(&mut connect_as(client_ports[1], "admin-pw")).unwrap();
    let count2 =
        |f| kairos_kv::resp::client::info_field(&info2, f).and_then(|v| v.parse::<u64>().ok()).unwrap();
    // One wrong password, two commands refused; the commands a stranger ran are counted apart
    // (with whatever the client library sent on connecting).
    assert_eq!(count("acl_access_denied_auth") + count2("acl_access_denied_auth"), 1);
    assert_eq!(count("acl_access_denied_cmd") + count2("acl_access_denied_cmd"), 2);
    assert!(count("acl_access_denied_noauth") + count2("acl_access_denied_noauth") >= 1);
}

fn connect_as(port: u16, password: &str) -> redis::Connection {
    let mut con = connect(port);
    let _: () = redis::cmd("AUTH").arg(password).query(&mut con).unwrap();
    con
}

/// A one-member cluster (it elects itself) with `extra` flags, and its client port.
fn one_member(data: &Path, extra: &[&str]) -> (Members, u16) {
    let (client, raft) = (free_tcp_port(), free_udp_port());
    let members = Members(vec![Some(start_with(1, &format!("1=127.0.0.1:{raft}"), client, data, extra))]);
    wait_for_leader(&mut connect(client), 0);
    (members, client)
}

fn stat(port: u16, field: &str) -> u64 {
    stat_in(port, "stats", field)
}

/// A number from INFO `section` of the member on `port`.
fn stat_in(port: u16, section: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(&mut connect(port)).unwrap();
    kairos_kv::resp::client::info_field(&info, field).and_then(|v| v.parse().ok()).unwrap()
}

#[test]
fn a_client_past_maxclients_is_told_and_closed() {
    use std::io::Read;
    let data = tempfile::tempdir().unwrap();
    let (_members, port) = one_member(data.path(), &["--maxclients", "2"]);
    let _a = connect(port);
    let _b = connect(port);
    let mut third = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = String::new();
    third.read_to_string(&mut got).unwrap();
    assert_eq!(got, "-ERR max number of clients reached\r\n");
    drop(_b);
    // A place is free again (the member sees the close on its next pass).
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat(port, "rejected_connections") < 1 || std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    {
        assert!(Instant::now() < deadline);
    }
}

#[test]
fn a_client_that_does_not_read_is_held_back_and_closed_past_the_output_limit() {
    use std::io::{Read, Write};
    let data = tempfile::tempdir().unwrap();
    let (_members, port) = one_member(data.path(), &[]);
    let mut con = connect(port);
    let value = vec![b'v'; 100_000];
    let _: () = redis::cmd("SET").arg("big").arg(&value).query(&mut con).unwrap();
    let get = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n";

    // 300 GETs of 100 KB pipelined and not read for a while: 30 MB of answers, held until the
    // client reads, then every one comes, in full and in order.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(&get.repeat(300)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let answer = [format!("${}\r\n", value.len()).into_bytes(), value.clone(), b"\r\n".to_vec()].concat();
    let mut got = vec![0u8; answer.len() * 300];
    raw.read_exact(&mut got).unwrap();
    assert!(got.chunks(answer.len()).all(|c| c == answer.as_slice()));
    assert_eq!(stat(port, "client_output_buffer_limit_disconnections"), 0);

    // 1,000 of them, 100 MB, past the output limit (64 MB): the client is closed.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(&get.repeat(1_000)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat(port, "client_output_buffer_limit_disconnections") < 1 {
        assert!(Instant::now() < deadline, "a client owed 100 MB was not closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    let _ = raw.read_to_end(&mut rest);
    assert!(
        rest.len() < 1_000 * answer.len(),
        "every answer came ({} bytes) though the client was closed",
        rest.len()
    );

    // A request larger than the query buffer limit (64 MB) is refused and its client closed.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let header = format!("*2\r\n$3\r\nSET\r\n${}\r\n", 100 << 20);
    raw.write_all(header.as_bytes()).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let _ = (0..80).try_for_each(|_| raw.write_all(&chunk));
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = String::new();
    let _ = raw.read_to_string(&mut reply);
    assert!(reply.contains("request larger than the server takes"), "{reply:?}");
    assert_eq!(stat(port, "client_query_buffer_limit_disconnections"), 1);
    let _: () = redis::cmd("SET").arg("still").arg("here").query(&mut connect(port)).unwrap();
}

/// `redis-cli ARGS...` and what it printed, or `None` when it is not installed.
fn redis_cli(args: &[&str]) -> Option<(bool, String)> {
    let out = Command::new("redis-cli").args(args).stdin(Stdio::null()).output().ok()?;
    Some((out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_string()))
}

#[test]
fn redis_cli_speaks_tls_to_a_member_with_a_certificate() {
    let data = tempfile::tempdir().unwrap();
    let (cert, key) = (data.path().join("cert.pem"), data.path().join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status();
    if !made.is_ok_and(|s| s.success()) || redis_cli(&["--version"]).is_none() {
        eprintln!("skipped: needs openssl and redis-cli (Debian's redis-tools)");
        return;
    }
    let (client, raft) = (free_tcp_port(), free_udp_port());
    let flags = [format!("--tls-cert={}", cert.display()), format!("--tls-key={}", key.display())];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _members =
        Members(vec![Some(start_with(1, &format!("1=127.0.0.1:{raft}"), client, data.path(), &flags))]);
    let port = client.to_string();
    let tls = |args: &[&str]| {
        let mut all = vec!["--tls", "--cacert", cert.to_str().unwrap(), "-h", "127.0.0.1", "-p", &port];
        all.extend_from_slice(args);
        redis_cli(&all).unwrap()
    };
    // Until the member has elected itself and taken the write.
    let deadline = Instant::now() + Duration::from_secs(10);
    while tls(&["SET", "k", "over tls"]) != (true, "OK".to_string()) {
        assert!(Instant::now() < deadline, "redis-cli --tls never got OK");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(tls(&["GET", "k"]), (true, "over tls".to_string()));
    // A large value crosses many records both ways.
    // (One argument of a program may not pass 128 KB.)
    let big = "x".repeat(100_000);
    assert_eq!(tls(&["SET", "big", &big]).1, "OK");
    assert_eq!(tls(&["STRLEN", "big"]).1, "100000");
    assert_eq!(tls(&["GET", "big"]).1, big);
    // Plain text on the TLS port is no request: nothing is answered.
    let (_, plain) = redis_cli(&["-p", &port, "PING"]).unwrap();
    assert_ne!(plain, "PONG");
    // A client that does not trust the member's certificate gets nowhere.
    let other = data.path().join("other.pem");
    Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "1", "-subj", "/CN=other", "-keyout", "/dev/null", "-out"])
        .arg(&other)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let (_, refused) =
        redis_cli(&["--tls", "--cacert", other.to_str().unwrap(), "-h", "127.0.0.1", "-p", &port, "PING"])
            .unwrap();
    assert_ne!(refused, "PONG");

    // With --tls-ca-cert, a member takes only clients whose certificate that authority signed.
    let openssl = |args: &[&str]| {
        let ok = Command::new("openssl").args(args).current_dir(data.path()).stderr(Stdio::null()).status();
        assert!(ok.unwrap().success(), "openssl {args:?}");
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-days", "1", "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat(),
    );
    openssl(
        &[&["req"][..], &ec, &["-subj", "/CN=client", "-keyout", "client.key", "-out", "client.csr"]]
            .concat(),
    );
    // A version 3 certificate for client authentication (webpki takes no other).
    std::fs::write(
        data.path().join("client.ext"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-days",
        "1",
        "-extfile",
        "client.ext",
        "-out",
        "client.pem",
    ]);
    let (client2, raft2) = (free_tcp_port(), free_udp_port());
    let mut flags = flags.clone();
    let ca = format!("--tls-ca-cert={}", data.path().join("ca.pem").display());
    flags.push(&ca);
    let _second =
        Members(vec![Some(start_with(2, &format!("2=127.0.0.1:{raft2}"), client2, data.path(), &flags))]);
    let port2 = client2.to_string();
    let (client_cert, client_key) = (data.path().join("client.pem"), data.path().join("client.key"));
    let with_cert = |args: &[&str]| {
        let mut all =
            vec!["--tls", "--cacert", cert.to_str().unwrap(), "--cert", client_cert.to_str().unwrap()];
        all.extend_from_slice(&["--key", client_key.to_str().unwrap(), "-h", "127.0.0.1", "-p", &port2]);
        all.extend_from_slice(args);
        redis_cli(&all).unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while with_cert(&["PING"]) != (true, "PONG".to_string()) {
        assert!(Instant::now() < deadline, "a client with a certificate from the authority was not served");
        std::thread::sleep(Duration::from_millis(50));
    }
    let without =
        redis_cli(&["--tls", "--cacert", cert.to_str().unwrap(), "-h", "127.0.0.1", "-p", &port2, "PING"]);
    assert_ne!(without.unwrap().1, "PONG", "a client without a certificate was served");
}

#[test]
fn a_member_serves_its_figures_to_prometheus() {
    use std::io::{Read, Write};
    let data = tempfile::tempdir().unwrap();
    let metrics = free_tcp_port();
    let flag = format!("--metrics=127.0.0.1:{metrics}");
    let (_members, port) = one_member(data.path(), &[&flag]);
    let mut con = connect(port);
    for i in 0..10 {
        let _: () = redis::cmd("SET").arg("k").arg(i).query(&mut con).unwrap();
    }
    let scrape = |request: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let text = scrape("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    let value = |name: &str| -> f64 {
        let line =
            text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("kairos_kv_commands_total{member=\"1\",kind=\"write\"}") >= 10.0);
    assert!(value("kairos_kv_command_duration_seconds_count") >= 10.0);
    assert_eq!(value("kairos_kv_raft_leader{member=\"1\"}"), 1.0);
    assert!(value("kairos_kv_raft_applied_index{member=\"1\"}") >= 10.0);
    assert!(scrape("GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    // A reader that sends nothing holds nothing for long, and others are served meanwhile.
    let idle: Vec<_> =
        (0..20).map(|_| std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap()).collect();
    assert!(scrape("GET / HTTP/1.0\r\n\r\n").contains("kairos_kv_raft_term"));
    drop(idle);
}

#[test]
fn a_member_takes_its_settings_from_a_config_file_and_its_flags_win() {
    let data = tempfile::tempdir().unwrap();
    let (client, raft) = (free_tcp_port(), free_udp_port());
    let config = data.path().join("kv.toml");
    std::fs::write(
        &config,
        format!(
            "id = 1\npeers = [\"1=127.0.0.1:{raft}\"]\nlisten = \"127.0.0.1:1\"\ndata = \"{}\"\nsecret-file = \"{}\"\nfsync = \"never\"\nno-fd = false\n",
            data.path().join("m1").display(),
            secret_in(data.path()).display()
        ),
    )
    .unwrap();
    // The file's listen port (1) is overridden by the command line's.
    let child = Command::new(env!("CARGO_BIN_EXE_kairos"))
        .args(["kv", "serve", "--config"])
        .arg(&config)
        .arg(format!("--listen=127.0.0.1:{client}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _members = Members(vec![Some(child)]);
    let mut con = connect(client);
    wait_for_leader(&mut con, 0);
    let _: () = redis::cmd("SET").arg("from").arg("config").query(&mut con).unwrap();

    std::fs::write(&config, "id = 1\nlisen = \"x\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kairos"))
        .args(["kv", "serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("'lisen' is no flag of kairos kv serve"), "{err}");
}

#[test]
fn a_pipeline_longer_than_the_pending_limit_is_answered_whole() {
    use std::io::{Read, Write};
    let data = tempfile::tempdir().unwrap();
    let (_members, port) = one_member(data.path(), &[]);
    // 3,000 requests in one write, three times the 1,024 a connection may have in flight: the
    // rest wait in the member's input, where no socket event announces them.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(&b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".repeat(3_000)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = vec![0u8; 5 * 3_000];
    raw.read_exact(&mut got).unwrap();
    assert!(got.chunks(5).all(|c| c == b"$-1\r\n"));
}

#[test]
fn a_stranger_may_send_only_short_requests_before_it_authenticates() {
    use std::io::{Read, Write};
    let data = tempfile::tempdir().unwrap();
    let pass = data.path().join("pass");
    std::fs::write(&pass, "pw").unwrap();
    let flag = format!("--requirepass-file={}", pass.display());
    let (client, raft) = (free_tcp_port(), free_udp_port());
    let _members =
        Members(vec![Some(start_with(1, &format!("1=127.0.0.1:{raft}"), client, data.path(), &[&flag]))]);
    let mut admin = connect(client);
    let _: () = redis::cmd("AUTH").arg("pw").query(&mut admin).unwrap();
    wait_for_leader(&mut admin, 0);
    // A 100 KB argument from a client that has not authenticated: refused at its length line.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", client)).unwrap();
    raw.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n").unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = String::new();
    let _ = raw.read_to_string(&mut reply);
    assert!(reply.contains("Protocol error"), "{reply:?}");
    // After AUTH, the same request is taken.
    let big = "v".repeat(100_000);
    let _: () = redis::cmd("SET").arg("k").arg(&big).query(&mut admin).unwrap();
}

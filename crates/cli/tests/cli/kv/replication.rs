//! The store's replication as clients see it: a leader killed and a write through the others,
//! the killed member restarted from its log to catch up, members joining and leaving a running
//! cluster, and a leader cut off by a partition.

use std::time::{Duration, Instant};

use kairos_kv::resp::client::info_field;
use kairos_testkit::resp::connect;
use kairos_testkit::{free_tcp_port, free_udp_port, scratch_dir};

use super::{Members, reads_within, start, start_with, three_members, wait_for_leader};

#[test]
fn a_cluster_of_processes_serves_redis_clients_through_a_leader_kill_and_a_restart() {
    let data = scratch_dir("cli-kv");
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
            info_field(&info, "fd_probes_refused").and_then(|v| v.parse().ok()).unwrap_or(0)
        })
        .sum();
    assert!(refused >= 1, "no survivor's probe of the dead leader's port was refused");

    // The killed member comes back from its log and catches up.
    members.0[leader_id - 1] = Some(start(leader_id, &peers, client_ports[leader_id - 1], data.path()));
    let mut back = connect(client_ports[leader_id - 1]);
    assert!(
        reads_within(&mut back, "after", "kill", Duration::from_millis(20)),
        "the restarted member never served the write made while it was down"
    );
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut back).unwrap();
    assert_eq!(v.as_deref(), Some("41x"), "the restarted member kept what was written before");
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
    let data = scratch_dir("cli-kv");
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
    assert!(
        reads_within(&mut newcomer, "before", "join", Duration::from_millis(20)),
        "member 4 never caught up"
    );

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
    let data = scratch_dir("cli-kv");
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
    assert!(
        reads_within(&mut back, "during", "partition", Duration::from_millis(50)),
        "the old leader never caught up after the partition"
    );
}

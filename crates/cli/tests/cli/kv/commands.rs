//! Commands as a client library uses them, across members: every type through a pipeline,
//! transactions that WATCH aborts and retries, a SCAN that returns every key once, a BLPOP woken
//! by a push through another member, and a member restarted from its log with the same data.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use kairos_testkit::resp::connect;
use kairos_testkit::{scratch_dir, wait_until};

use super::{start, stat_in, three_members, wait_for_leader};

/// Three members, a client on a follower: every type through a pipeline, a transaction that
/// WATCH aborts when another member's client changes its key (and `redis::transaction`'s
/// retries then succeed), a SCAN that returns every key once, a BLPOP woken by a push through
/// another member, and a member restarted from its log holding the same data.
#[test]
fn redis_clients_use_every_type_transactions_with_watch_scans_and_blocking_pops() {
    let data = scratch_dir("cli-kv");
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
    let blocked = wait_until(Duration::from_secs(10), Duration::from_millis(5), || {
        stat_in(blocked_port, "clients", "blocked_clients") == 1
    });
    assert!(blocked, "the BLPOP never blocked");
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
    let mut seen = None;
    let caught_up = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        let got: HashMap<String, i64> = redis::cmd("HGETALL").arg("h").query(&mut back).unwrap();
        let zs: Vec<(String, f64)> =
            redis::cmd("ZRANGE").arg("z").arg(0).arg(-1).arg("WITHSCORES").query(&mut back).unwrap();
        let done = got == expected && zs.len() == 2;
        seen = Some((got, zs));
        done
    });
    assert!(caught_up, "the restarted member never caught up: {seen:?}");
}

/// Redis's "BRPOPLPUSH with multiple blocked clients", many times over against a follower: the
/// client that blocked first is served first (its error leaves the element for the second),
/// with nothing between the push and the service; and a client that closed while blocked takes
/// nothing.
#[test]
fn blocked_clients_are_served_in_the_order_they_blocked_and_a_closed_one_takes_nothing() {
    let data = scratch_dir("cli-kv-blocked");
    let (_members, client_ports, _, _) = three_members(data.path(), |_| &[]);
    let leader_id = wait_for_leader(&mut connect(client_ports[0]), 0) as usize;
    let port = client_ports[(1..=3).find(|&i| i != leader_id).unwrap() - 1];
    let mut con = connect(port);
    let deferred = || {
        let c = connect(port);
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c
    };
    for round in 0..100 {
        let (mut rd1, mut rd2) = (deferred(), deferred());
        let _: () = redis::cmd("DEL").arg("blist").arg("target1").arg("target2").query(&mut con).unwrap();
        let _: () = redis::cmd("SET").arg("target1").arg("nolist").query(&mut con).unwrap();
        send(&mut rd1, &["BRPOPLPUSH", "blist", "target1", "0"]);
        send(&mut rd2, &["BRPOPLPUSH", "blist", "target2", "0"]);
        let _: i64 = redis::cmd("LPUSH").arg("blist").arg("foo").query(&mut con).unwrap();
        let first = rd1.recv_response();
        assert!(
            matches!(&first, Ok(redis::Value::ServerError(e)) if e.code() == "WRONGTYPE"),
            "round {round}: the first to block is served first, with its error: {first:?}; the second got {:?}; members: {}",
            rd2.recv_response(),
            members_state(&client_ports)
        );
        let second = rd2.recv_response().unwrap();
        assert_eq!(second, redis::Value::BulkString(b"foo".to_vec()), "round {round}");
    }
    // A client closed while blocked: a later push stays in the list.
    let mut gone = deferred();
    send(&mut gone, &["BLPOP", "orphan", "0"]);
    let blocked = wait_until(Duration::from_secs(10), Duration::from_millis(5), || {
        stat_in(port, "clients", "blocked_clients") == 1
    });
    assert!(blocked, "the BLPOP never blocked");
    drop(gone);
    let unblocked = wait_until(Duration::from_secs(10), Duration::from_millis(5), || {
        stat_in(port, "clients", "blocked_clients") == 0
    });
    assert!(unblocked, "the closed client still counts as blocked");
    // Its unblock was taken before this push at the same member, so it applies first.
    let _: i64 = redis::cmd("RPUSH").arg("orphan").arg("x").query(&mut con).unwrap();
    let len: i64 = redis::cmd("LLEN").arg("orphan").query(&mut con).unwrap();
    assert_eq!(len, 1, "a closed client took the element");
}

/// Redis's "BRPOPLPUSH does not affect WATCH while still blocked", many times over against a
/// follower: a younger connection's EXEC sent just before an older connection's LPUSH (which
/// feeds a blocked BRPOPLPUSH into the watched key) runs first, so its transaction is not
/// aborted. Both reach the member in one pass; served by connection age the LPUSH went first.
#[test]
fn a_transaction_sent_before_a_write_that_breaks_its_watch_runs_first() {
    let data = scratch_dir("cli-kv-watch-order");
    let (_members, client_ports, _, _) = three_members(data.path(), |_| &[]);
    let leader_id = wait_for_leader(&mut connect(client_ports[0]), 0) as usize;
    let port = client_ports[(1..=3).find(|&i| i != leader_id).unwrap() - 1];
    // The oldest connection: the one that pushes.
    let mut con = connect(port);
    for round in 0..100 {
        let mut blocked = connect(port);
        let mut watching = connect(port);
        watching.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _: () = redis::cmd("DEL").arg("src").arg("dst").arg("somekey").query(&mut con).unwrap();
        let _: () = redis::cmd("SET").arg("somekey").arg("somevalue").query(&mut con).unwrap();
        send(&mut blocked, &["BRPOPLPUSH", "src", "dst", "0"]);
        let is_blocked = wait_until(Duration::from_secs(10), Duration::from_millis(2), || {
            stat_in(port, "clients", "blocked_clients") == 1
        });
        assert!(is_blocked, "round {round}: the BRPOPLPUSH never blocked");
        let _: () = redis::cmd("WATCH").arg("dst").query(&mut watching).unwrap();
        let _: () = redis::cmd("MULTI").query(&mut watching).unwrap();
        let queued: String = redis::cmd("GET").arg("somekey").query(&mut watching).unwrap();
        assert_eq!(queued, "QUEUED");
        send(&mut watching, &["EXEC"]);
        let _: i64 = redis::cmd("LPUSH").arg("src").arg("element").query(&mut con).unwrap();
        let exec = watching.recv_response();
        assert_eq!(
            exec.as_ref().ok(),
            Some(&redis::Value::Array(vec![redis::Value::BulkString(b"somevalue".to_vec())])),
            "round {round}: the EXEC sent first was aborted by the push after it ({exec:?}); members: {}",
            members_state(&client_ports)
        );
        let moved = blocked.recv_response().unwrap();
        assert_eq!(moved, redis::Value::BulkString(b"element".to_vec()), "round {round}");
    }
}

/// Sends the command of `words` on `c` without reading its answer (a client that blocks, or
/// whose answer is read later).
fn send(c: &mut redis::Connection, words: &[&str]) {
    c.send_packed_command(&redis::cmd(words[0]).arg(&words[1..]).get_packed_command()).unwrap();
}

/// What each member says of its Raft state and its clients, for a failure's message.
fn members_state(ports: &[u16]) -> String {
    let wanted = [
        "role",
        "raft_leader_id",
        "raft_term",
        "raft_applied_index",
        "raft_proposal_retries",
        "raft_snapshots_installed",
        "raft_late_periods",
        "blocked_clients",
        "connected_clients",
    ];
    ports
        .iter()
        .map(|&port| {
            let mut text = String::new();
            for section in ["replication", "stats", "clients"] {
                let mut c = connect(port);
                let info: String = redis::cmd("INFO").arg(section).query(&mut c).unwrap_or_default();
                for line in info.lines() {
                    if wanted.iter().any(|w| line.split(':').next() == Some(*w)) {
                        text.push_str(line.trim());
                        text.push(' ');
                    }
                }
            }
            format!("[port {port}: {}]", text.trim_end())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

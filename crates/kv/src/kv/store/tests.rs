use super::*;

fn w(line: &str) -> WriteOp {
    WriteOp::words(&line.split(' ').collect::<Vec<_>>())
}

fn r(line: &str) -> ReadOp {
    ReadOp::words(&line.split(' ').collect::<Vec<_>>())
}

fn request(client: u64, seq: u64, completed_below: u64, op: WriteOp) -> Request {
    Request { origin: 1, client, seq, completed_below, op }
}

#[test]
fn commands_answer_as_redis() {
    let mut s = Store::new();
    assert_eq!(s.apply_write(&w("SET a 1"), 0), Reply::Ok);
    assert_eq!(s.apply_write(&w("INCRBY a 41"), 0), Reply::Integer(42));
    assert_eq!(s.apply_write(&w("APPEND a x"), 0), Reply::Integer(3));
    assert_eq!(
        s.apply_write(&w("INCR a"), 0),
        Reply::Error("ERR value is not an integer or out of range".into())
    );
    assert_eq!(s.apply_write(&w("SET a z NX"), 0), Reply::Nil);
    assert_eq!(s.read(&r("GET a"), 0), Reply::Bulk(b"42x".to_vec()));
    assert_eq!(s.read(&r("EXISTS a a b"), 0), Reply::Integer(2));
    assert_eq!(s.apply_write(&w("DEL a b"), 0), Reply::Integer(1));
    assert_eq!(s.apply_write(&w("NOSUCH a"), 0), Reply::Error("ERR unknown command in the log".into()));
}

#[test]
fn expiry_uses_the_entry_time_for_writes_and_the_reader_time_for_reads() {
    let mut s = Store::new();
    s.apply_write(&w("SET k v PX 100"), 1_000);
    assert_eq!(s.read(&r("GET k"), 1_099), Reply::Bulk(b"v".to_vec()));
    assert_eq!(s.read(&r("GET k"), 1_100), Reply::Nil);
    assert_eq!(s.read(&r("DBSIZE"), 1_100), Reply::Integer(0));
    assert_eq!(s.apply_write(&w("SET k w XX"), 1_100), Reply::Nil);
    assert_eq!(s.apply_write(&w("INCRBY k 2"), 1_200), Reply::Integer(2));
    // The leader's expiry entries remove only what has expired at the entry's time.
    s.apply_write(&w("SET e v PX 10"), 2_000);
    assert_eq!(s.expired_keys(0, 2_010, 10), vec![b"e".to_vec()]);
    let expire = WriteOp::Expire { db: 0, keys: vec![b"e".to_vec(), b"k".to_vec()] };
    assert_eq!(s.apply_write(&expire, 2_010), Reply::Integer(1));
    assert_eq!(s.db(0).stored(), 1);
}

#[test]
fn databases_are_apart_and_commands_span_them() {
    let mut s = Store::new();
    s.apply_write(&WriteOp::Exec { db: 3, args: vec![b"SET".to_vec(), b"k".to_vec(), b"three".to_vec()] }, 0);
    assert_eq!(s.read(&r("GET k"), 0), Reply::Nil);
    assert_eq!(
        s.read(&ReadOp { db: 3, args: vec![b"GET".to_vec(), b"k".to_vec()] }, 0),
        Reply::Bulk(b"three".to_vec())
    );
    let moved = WriteOp::Exec { db: 3, args: vec![b"MOVE".to_vec(), b"k".to_vec(), b"0".to_vec()] };
    assert_eq!(s.apply_write(&moved, 0), Reply::Integer(1));
    assert_eq!(s.read(&r("GET k"), 0), Reply::Bulk(b"three".to_vec()));
    assert_eq!(s.apply_write(&w("COPY k k2 DB 5"), 0), Reply::Integer(1));
    assert_eq!(s.apply_write(&w("SWAPDB 5 0"), 0), Reply::Ok);
    assert_eq!(s.read(&r("GET k2"), 0), Reply::Bulk(b"three".to_vec()));
    assert_eq!(s.apply_write(&w("FLUSHALL"), 0), Reply::Ok);
    assert!(s.keyspace(0).is_empty());
}

#[test]
fn a_transaction_applies_whole_or_not_at_all_when_a_watched_key_changed() {
    let mut s = Store::new();
    s.apply_write(&w("SET x 1"), 0);
    let Reply::Array(v) = s.read(&r("WATCH x y"), 0) else { panic!("WATCH answers versions") };
    let version = |i: usize| match v[i] {
        Reply::Integer(n) => n as u64,
        _ => panic!("a version"),
    };
    let watched = |key: &str, seen| Watched { db: 0, key: key.into(), seen, mark: version(0) };
    let tx = WriteOp::Transaction {
        commands: vec![(0, vec![b"INCR".to_vec(), b"x".to_vec()]), (0, vec![b"GET".to_vec(), b"x".to_vec()])],
        watched: vec![watched("x", version(1)), watched("y", version(2))],
    };
    assert_eq!(s.apply_write(&tx, 0), Reply::Array(vec![Reply::Integer(2), Reply::Bulk(b"2".to_vec())]));
    // x changed since the watch (by the transaction itself): a second run aborts.
    assert_eq!(s.apply_write(&tx, 0), Reply::NilArray);
    // y created and deleted after the watch counts as changed too.
    let only_y = WriteOp::Transaction { commands: Vec::new(), watched: vec![watched("y", 0)] };
    assert_eq!(s.apply_write(&only_y, 0), Reply::Array(Vec::new()));
    s.apply_write(&w("SET y 1"), 0);
    s.apply_write(&w("DEL y"), 0);
    assert_eq!(s.apply_write(&only_y, 0), Reply::NilArray);
}

#[test]
fn watch_sees_keys_created_after_it_and_then_flushed_or_expired_but_not_stale_ones() {
    let mut s = Store::new();
    let watch = |s: &Store, key: &str, now: u64| {
        let Reply::Array(v) = s.read(&r(&format!("WATCH {key}")), now) else { panic!("WATCH") };
        let n = |i: usize| if let Reply::Integer(n) = v[i] { n as u64 } else { 0 };
        WriteOp::Transaction {
            commands: vec![(0, vec![b"PING".to_vec()])],
            watched: vec![Watched { db: 0, key: key.into(), seen: n(1), mark: n(0) }],
        }
    };
    let pong = Reply::Array(vec![Reply::Simple("PONG")]);
    // Created after the watch, then flushed: changed.
    let tx = watch(&s, "k", 0);
    s.apply_write(&w("SET k v"), 0);
    s.apply_write(&w("FLUSHDB"), 0);
    assert_eq!(s.apply_write(&tx, 0), Reply::NilArray);
    // Created after the watch, then expired (and removed): changed.
    let tx = watch(&s, "e", 100);
    s.apply_write(&w("SET e v PX 5"), 100);
    s.apply_write(&WriteOp::Expire { db: 0, keys: vec![b"e".to_vec()] }, 200);
    assert_eq!(s.apply_write(&tx, 200), Reply::NilArray);
    // Already expired when watched, removed after: not changed (nor by a FLUSHDB).
    s.apply_write(&w("SET x v PX 1"), 300);
    let tx = watch(&s, "x", 400);
    s.apply_write(&WriteOp::Expire { db: 0, keys: vec![b"x".to_vec()] }, 400);
    assert_eq!(s.apply_write(&tx, 400), pong);
    let tx = watch(&s, "absent", 400);
    s.apply_write(&w("FLUSHALL"), 400);
    assert_eq!(s.apply_write(&tx, 400), pong, "a flush does not touch a key that did not exist");
}

#[test]
fn a_retried_request_applies_once_and_answers_the_same() {
    let mut s = Store::new();
    let incr = request(7, 0, 0, w("INCR n"));
    assert_eq!(s.apply(&incr, 0, 1), Applied::Fresh(Reply::Integer(1)));
    assert_eq!(s.apply(&incr, 0, 2), Applied::Repeat(Reply::Integer(1)));
    let two = request(7, 2, 0, w("INCRBY n 10"));
    let one = request(7, 1, 0, w("INCRBY n 100"));
    assert_eq!(s.apply(&two, 0, 3), Applied::Fresh(Reply::Integer(11)));
    assert_eq!(s.apply(&one, 0, 4), Applied::Fresh(Reply::Integer(111)));
    assert_eq!(s.apply(&one, 0, 5), Applied::Repeat(Reply::Integer(111)));
    let three = request(7, 3, 3, w("INCRBY n 1000"));
    assert_eq!(s.apply(&three, 0, 6), Applied::Fresh(Reply::Integer(1111)));
    assert_eq!(s.apply(&one, 0, 7), Applied::Stale);
    assert_eq!(s.sessions[&(1, 7)].replies.len(), 1);
    let other = request(8, 0, 0, w("INCR n"));
    assert_eq!(s.apply(&other, 0, 8), Applied::Fresh(Reply::Integer(1112)));
}

#[test]
fn random_picks_are_the_same_on_every_member() {
    let (mut a, mut b) = (Store::new(), Store::new());
    for s in [&mut a, &mut b] {
        s.apply(&request(1, 0, 0, w("SADD s a b c d e f g h")), 0, 1);
    }
    // b is restored from a snapshot of a: its internal layout differs, its picks do not.
    let mut bytes = Vec::new();
    a.encode(&mut bytes);
    let mut restored = Store::decode(&bytes).unwrap();
    let pop = request(1, 1, 0, w("SPOP s 3"));
    let picks = a.apply(&pop, 0, 2);
    assert_eq!(b.apply(&pop, 0, 2), picks);
    assert_eq!(restored.apply(&pop, 0, 2), picks);
}

#[test]
fn sets_leave_replayed_and_restored_members_alike() {
    let lines = [
        "SET k v",
        "SET k w",
        "HSET h f v",
        "SET h x NX",
        "SET h x GET",
        "SET h x",
        "SET k y GET",
        "SET e v PX 5",
        "SET e w KEEPTTL GET",
        "SET n v XX",
        "SET n v NX GET",
        "SET e z XX",
        "SET k z EX 1 GET",
        "SET k q KEEPTTL",
    ];
    let (mut a, mut b) = (Store::new(), Store::new());
    let mut restored: Option<Store> = None;
    for (i, line) in lines.iter().enumerate() {
        let (seq, index, now) = (i as u64, i as u64 + 1, 100 + i as u64);
        let reply = a.apply(&request(1, seq, 0, w(line)), now, index);
        assert_eq!(b.apply(&request(1, seq, 0, w(line)), now, index), reply, "{line}");
        if let Some(r) = restored.as_mut() {
            assert_eq!(r.apply(&request(1, seq, 0, w(line)), now, index), reply, "restored: {line}");
        }
        if i == lines.len() / 2 {
            let mut bytes = Vec::new();
            a.encode(&mut bytes);
            restored = Some(Store::decode(&bytes).unwrap());
        }
    }
    assert_eq!(a.read(&r("GET k"), 200), Reply::Bulk(b"q".to_vec()));
    assert_eq!(a.read(&r("GET h"), 200), Reply::Bulk(b"x".to_vec()));
    let snapshot = |s: &Store| {
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        bytes
    };
    let restored = restored.unwrap();
    assert_eq!(snapshot(&b), snapshot(&a));
    assert_eq!(snapshot(&restored), snapshot(&a));
    assert_eq!(restored, a);
}

#[test]
fn sessions_are_bounded() {
    let mut s = Store::new();
    for client in 0..(MAX_SESSIONS as u64 + 10) {
        s.apply(&request(client, 0, 0, w("SET k v")), 0, client + 1);
    }
    assert!(s.sessions.len() <= MAX_SESSIONS);
    assert!(s.sessions.contains_key(&(1, MAX_SESSIONS as u64 + 9)), "the newest session is kept");
    for seq in 0..(MAX_REPLIES_PER_SESSION as u64 + 5) {
        s.apply(&request(u64::MAX, seq, 0, w("SET k v")), 0, 1 << 40);
    }
    assert_eq!(s.sessions[&(1, u64::MAX)].replies.len(), MAX_REPLIES_PER_SESSION);
}

#[test]
fn snapshot_round_trips_every_type_and_rejects_garbage() {
    let mut s = Store::new();
    s.apply(&request(1, 0, 0, w("SET a 1")), 5, 1);
    s.apply(&request(1, 1, 0, w("RPUSH l x y z")), 5, 2);
    s.apply(&request(1, 2, 0, w("HSET h f v g w")), 5, 3);
    s.apply(&request(1, 3, 0, w("SADD s m n")), 5, 4);
    s.apply(&request(1, 4, 0, w("ZADD z 1.5 m -2 n")), 5, 5);
    s.apply(&request(1, 5, 0, w("LRANGE l 0 -1")), 5, 6);
    s.apply_write(&w("SET t v PX 1"), 0);
    s.apply_write(&w("DEL a"), 0);
    let mut bytes = Vec::new();
    s.encode(&mut bytes);
    let restored = Store::decode(&bytes).unwrap();
    assert_eq!(restored, s);
    let mut again = Vec::new();
    restored.encode(&mut again);
    assert_eq!(again, bytes, "equal stores give equal bytes");
    for cut in 0..bytes.len() {
        assert!(Store::decode(&bytes[..cut]).is_err(), "a snapshot cut at {cut} must not decode");
    }
}

#[test]
fn a_format_1_snapshot_still_restores() {
    let mut bytes = Vec::new();
    put_u64(&mut bytes, 1);
    put_bytes(&mut bytes, b"k");
    put_bytes(&mut bytes, b"v");
    put_u64(&mut bytes, 0);
    put_u64(&mut bytes, 0);
    let s = Store::decode(&bytes).unwrap();
    assert_eq!(s.read(&r("GET k"), 0), Reply::Bulk(b"v".to_vec()));
}

/// Applies `line` as request `seq` of `client` (origin 1) at log position `index`, returning
/// its answer and the waiters it served.
fn step(s: &mut Store, client: u64, seq: u64, line: &str, index: u64) -> (Applied, Vec<(u64, Reply)>) {
    let applied = s.apply(&request(client, seq, 0, w(line)), 1_000, index);
    let woken = s.take_woken().into_iter().map(|x| (x.client, x.reply)).collect();
    (applied, woken)
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

#[test]
fn a_blocked_client_is_served_by_the_write_that_feeds_its_key_before_the_next_request() {
    // Redis's "BRPOPLPUSH with multiple blocked clients": the first to block is served first,
    // even with its error, and a pop right after the push finds what that left.
    let mut s = Store::new();
    step(&mut s, 9, 1, "SET target1 nolist", 1);
    assert_eq!(step(&mut s, 1, 1, "BRPOPLPUSH blist target1 0", 2).0, Applied::Fresh(Reply::WouldBlock));
    assert_eq!(step(&mut s, 2, 1, "BRPOPLPUSH blist target2 0", 3).0, Applied::Fresh(Reply::WouldBlock));
    assert_eq!(s.waiters(), 2);
    let (pushed, woken) = step(&mut s, 9, 2, "LPUSH blist foo", 4);
    assert_eq!(pushed, Applied::Fresh(Reply::Integer(1)));
    assert_eq!(
        woken,
        vec![
            (1, Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())),
            (2, bulk("foo")),
        ]
    );
    assert_eq!(s.read(&r("LRANGE target2 0 -1"), 1_000), Reply::Array(vec![bulk("foo")]));
    assert_eq!(s.waiters(), 0);
    // Each served answer is its request's: a retry of it repeats it.
    assert_eq!(step(&mut s, 2, 1, "BRPOPLPUSH blist target2 0", 5).0, Applied::Repeat(bulk("foo")));
}

#[test]
fn a_move_that_feeds_another_waiter_serves_it_in_the_same_write() {
    // "Linked LMOVEs" and "Circular BRPOPLPUSH".
    let mut s = Store::new();
    step(&mut s, 1, 1, "BLMOVE list1 list2 RIGHT LEFT 0", 1);
    step(&mut s, 2, 1, "BLMOVE list2 list3 LEFT RIGHT 0", 2);
    let (_, woken) = step(&mut s, 9, 1, "RPUSH list1 foo", 3);
    assert_eq!(woken, vec![(1, bulk("foo")), (2, bulk("foo"))]);
    assert_eq!(s.read(&r("LRANGE list3 0 -1"), 1_000), Reply::Array(vec![bulk("foo")]));
    assert_eq!(s.read(&r("EXISTS list1 list2"), 1_000), Reply::Integer(0));

    step(&mut s, 3, 1, "BRPOPLPUSH c1 c2 0", 4);
    step(&mut s, 4, 1, "BRPOPLPUSH c2 c1 0", 5);
    let (_, woken) = step(&mut s, 9, 2, "RPUSH c1 bar", 6);
    assert_eq!(woken.len(), 2);
    assert_eq!(s.read(&r("LRANGE c1 0 -1"), 1_000), Reply::Array(vec![bulk("bar")]));
    assert_eq!(s.waiters(), 0);
}

#[test]
fn a_count_pop_takes_what_it_asks_and_leaves_the_rest_to_the_next_waiter() {
    // "BLMPOP with multiple blocked clients", in one transaction's push.
    let mut s = Store::new();
    step(&mut s, 1, 1, "BLMPOP 0 2 blist blist2 LEFT COUNT 1", 1);
    step(&mut s, 2, 1, "BLMPOP 0 2 blist blist2 RIGHT COUNT 10", 2);
    step(&mut s, 3, 1, "BLMPOP 0 2 blist blist2 LEFT COUNT 10", 3);
    step(&mut s, 4, 1, "BLMPOP 0 2 blist blist2 RIGHT COUNT 1", 4);
    let push = |line: &str| (0, line.split(' ').map(|x| x.as_bytes().to_vec()).collect::<Vec<_>>());
    let exec = WriteOp::Transaction {
        commands: vec![push("LPUSH blist a b c d e"), push("LPUSH blist2 1 2 3 4 5")],
        watched: vec![],
    };
    s.apply(&request(9, 1, 0, exec), 1_000, 5);
    let woken: Vec<_> = s.take_woken().into_iter().map(|x| (x.client, x.reply)).collect();
    let popped = |key: &str, items: &[&str]| {
        Reply::Array(vec![bulk(key), Reply::Array(items.iter().map(|i| bulk(i)).collect())])
    };
    assert_eq!(
        woken,
        vec![
            (1, popped("blist", &["e"])),
            (2, popped("blist", &["a", "b", "c", "d"])),
            (3, popped("blist2", &["5", "4", "3", "2", "1"])),
        ]
    );
    assert_eq!(s.waiters(), 1, "the fourth still waits");
}

#[test]
fn an_unblock_answers_the_timeout_unless_the_pop_was_served_first() {
    let mut s = Store::new();
    let unblock =
        |error| WriteOp::Unblock { args: vec![b"BLPOP".to_vec(), b"q".to_vec(), b"1".to_vec()], error };
    step(&mut s, 1, 1, "BLPOP q 1", 1);
    step(&mut s, 2, 1, "BLPOP q 1", 2);
    assert_eq!(s.apply(&request(1, 1, 0, unblock(false)), 1_000, 3), Applied::Fresh(Reply::NilArray));
    // A retry of the timed-out pop repeats its answer; it does not wait again.
    assert_eq!(step(&mut s, 1, 1, "BLPOP q 1", 4).0, Applied::Repeat(Reply::NilArray));
    assert_eq!(s.waiters(), 1);
    let (_, woken) = step(&mut s, 9, 1, "RPUSH q x", 5);
    assert_eq!(woken, vec![(2, Reply::Array(vec![bulk("q"), bulk("x")]))]);
    // Its timeout came too late: the unblock answers what the pop got.
    let served = Reply::Array(vec![bulk("q"), bulk("x")]);
    assert_eq!(s.apply(&request(2, 1, 0, unblock(false)), 1_000, 6), Applied::Repeat(served));
    // CLIENT UNBLOCK ... ERROR.
    step(&mut s, 3, 1, "BLPOP q 0", 7);
    let Applied::Fresh(Reply::Error(e)) = s.apply(&request(3, 1, 0, unblock(true)), 1_000, 8) else {
        panic!("an unblock with the error answers it")
    };
    assert!(e.starts_with("UNBLOCKED"), "{e}");
    assert_eq!(s.waiters(), 0);
}

#[test]
fn waiters_survive_a_snapshot_and_a_retry_does_not_wait_twice() {
    let mut s = Store::new();
    step(&mut s, 1, 1, "BLPOP a b 0", 1);
    assert_eq!(step(&mut s, 1, 1, "BLPOP a b 0", 2).0, Applied::Stale, "a retry of a waiting pop");
    step(&mut s, 2, 1, "BZPOPMIN z 0", 3);
    assert_eq!(s.waiters(), 2);
    let mut bytes = Vec::new();
    s.encode(&mut bytes);
    let mut restored = Store::decode(&bytes).expect("decodes");
    assert_eq!(restored, s);
    let (_, woken) = step(&mut restored, 9, 1, "ZADD z 1 m", 4);
    assert_eq!(woken, vec![(2, Reply::Array(vec![bulk("z"), bulk("m"), Reply::Double(b"1".to_vec())]))]);
    // A restarted member drops its earlier run's waiters.
    let drop =
        Request { origin: 1, client: 50, seq: 1, completed_below: 1, op: WriteOp::DropWaiters { below: 50 } };
    restored.apply(&drop, 1_000, 5);
    assert_eq!(restored.waiters(), 0);
    step(&mut restored, 9, 2, "RPUSH a x", 6);
    assert_eq!(restored.read(&r("LLEN a"), 1_000), Reply::Integer(1), "no one took it");
}

#[test]
fn a_plain_set_over_a_string_is_seen_by_watch_and_one_over_an_expiry_or_a_list_replaces_it() {
    let mut s = Store::new();
    s.apply_write(&w("SET a 1"), 0);
    let Reply::Array(v) = s.read(&r("WATCH a"), 0) else { panic!("WATCH answers versions") };
    let (Reply::Integer(mark), Reply::Integer(seen)) = (&v[0], &v[1]) else { panic!("versions") };
    let tx = WriteOp::Transaction {
        commands: vec![(0, vec![b"GET".to_vec(), b"a".to_vec()])],
        watched: vec![Watched { db: 0, key: "a".into(), seen: *seen as u64, mark: *mark as u64 }],
    };
    // Written in place: the key's version still moves, so the watch sees the change.
    assert_eq!(s.apply_write(&w("SET a 2"), 0), Reply::Ok);
    assert_eq!(s.read(&r("GET a"), 0), Reply::Bulk(b"2".to_vec()));
    assert_eq!(s.apply_write(&tx, 0), Reply::NilArray);
    // A long value, then a short one over it: the short one alone is read back.
    let long = "x".repeat(5_000);
    s.apply_write(&w(&format!("SET a {long}")), 0);
    s.apply_write(&w("SET a 3"), 0);
    assert_eq!(s.read(&r("GET a"), 0), Reply::Bulk(b"3".to_vec()));
    // Over a key with an expiry a plain SET drops the expiry, as Redis's does.
    s.apply_write(&w("SET k v PX 100"), 1_000);
    s.apply_write(&w("SET k u"), 1_010);
    assert_eq!(s.read(&r("GET k"), 5_000), Reply::Bulk(b"u".to_vec()));
    assert_eq!(s.read(&r("TTL k"), 5_000), Reply::Integer(-1));
    // Over another type it replaces the value.
    s.apply_write(&w("LPUSH l x"), 0);
    assert_eq!(s.apply_write(&w("SET l v"), 0), Reply::Ok);
    assert_eq!(s.read(&r("GET l"), 0), Reply::Bulk(b"v".to_vec()));
}

use crate::kv::cmd::testing::{self, arr, b, err, exists, flat, int, set_string};
use crate::kv::db::Db;
use crate::kv::reply::Reply;
use crate::kv::value::WRONGTYPE;

/// Runs a command; its reply in the shape a RESP2 client sees.
fn exec(db: &mut Db, line: &str) -> Reply {
    flat(testing::exec(db, line))
}

#[test]
fn zadd_options_and_errors() {
    let mut db = Db::default();
    assert_eq!(exec(&mut db, "ZADD z 10 x 20 y 30 z"), int(3));
    assert_eq!(exec(&mut db, "ZADD z gt ch 5 foo 11 x 21 y 29 z"), int(3));
    assert_eq!(
        exec(&mut db, "ZRANGE z 0 -1 WITHSCORES"),
        arr(&["foo", "5", "x", "11", "y", "21", "z", "30"])
    );
    assert_eq!(exec(&mut db, "ZADD z lt xx ch 1 x 100 y 1 nope"), int(1));
    assert_eq!(exec(&mut db, "ZADD z nx 50 x 60 new"), int(1));
    assert_eq!(exec(&mut db, "ZSCORE z x"), b("1"));
    assert_eq!(exec(&mut db, "ZADD z 1.5 x"), int(0));
    assert_eq!(exec(&mut db, "ZADD z INCR 2 x"), b("3.5"));
    assert_eq!(exec(&mut db, "ZADD z lt INCR 1 x"), Reply::Nil);
    assert_eq!(exec(&mut db, "ZADD nokey xx 1 a"), int(0));
    assert!(!exists(&db, "nokey"));
    assert_eq!(
        exec(&mut db, "ZADD z xx nx 1 a"),
        err("ERR XX and NX options at the same time are not compatible")
    );
    assert_eq!(
        exec(&mut db, "ZADD z gt lt 1 a"),
        err("ERR GT, LT, and/or NX options at the same time are not compatible")
    );
    assert_eq!(
        exec(&mut db, "ZADD z INCR 1 a 2 b"),
        err("ERR INCR option supports a single increment-element pair")
    );
    assert_eq!(exec(&mut db, "ZADD z 1 a 2"), err("ERR syntax error"));
    assert_eq!(exec(&mut db, "ZADD fresh 1 a nan b"), err("ERR value is not a valid float"));
    assert!(!exists(&db, "fresh"));
    assert_eq!(exec(&mut db, "ZINCRBY inf +inf a"), b("inf"));
    assert_eq!(exec(&mut db, "ZINCRBY inf -inf a"), err("ERR resulting score is not a number (NaN)"));
    set_string(&mut db, "str");
    assert_eq!(exec(&mut db, "ZADD str 1 a"), err(WRONGTYPE));
}

#[test]
fn reads_members_scores_ranks() {
    let mut db = Db::default();
    exec(&mut db, "ZADD z 1 a 2 b 3 c");
    assert_eq!(exec(&mut db, "ZCARD z"), int(3));
    assert_eq!(exec(&mut db, "ZCARD nokey"), int(0));
    assert_eq!(exec(&mut db, "ZMSCORE z a x c"), Reply::Array(vec![b("1"), Reply::Nil, b("3")]));
    assert_eq!(exec(&mut db, "ZRANK z c"), int(2));
    assert_eq!(exec(&mut db, "ZREVRANK z c"), int(0));
    assert_eq!(exec(&mut db, "ZRANK z x"), Reply::Nil);
    assert_eq!(exec(&mut db, "ZREM z a x b"), int(2));
    assert_eq!(exec(&mut db, "ZREM z c"), int(1));
    assert!(!exists(&db, "z"));
}

#[test]
fn ranges_by_rank_score_and_lex() {
    let mut db = Db::default();
    exec(&mut db, "ZADD z -inf a 1 b 2 c 3 d 4 e 5 f +inf g");
    assert_eq!(exec(&mut db, "ZRANGE z -3 -2"), arr(&["e", "f"]));
    assert_eq!(exec(&mut db, "ZREVRANGE z 0 1 WITHSCORES"), arr(&["g", "inf", "f", "5"]));
    assert_eq!(exec(&mut db, "ZRANGEBYSCORE z (-inf (2"), arr(&["b"]));
    assert_eq!(exec(&mut db, "ZREVRANGEBYSCORE z (6 (3"), arr(&["f", "e"]));
    assert_eq!(exec(&mut db, "ZRANGEBYSCORE z 0 10 LIMIT 2 3"), arr(&["d", "e", "f"]));
    assert_eq!(exec(&mut db, "ZRANGE z 10 0 BYSCORE REV LIMIT 0 2 WITHSCORES"), arr(&["f", "5", "e", "4"]));
    assert_eq!(exec(&mut db, "ZRANGEBYSCORE z 2 (2"), arr(&[]));
    assert_eq!(exec(&mut db, "ZCOUNT z (0 (3"), int(2));
    assert_eq!(exec(&mut db, "ZRANGEBYSCORE z str 1"), err("ERR min or max is not a float"));
    assert_eq!(
        exec(&mut db, "ZRANGE z 0 -1 LIMIT 1 2"),
        err("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    );
    assert_eq!(exec(&mut db, "ZREVRANGE z 0 -1 BYSCORE"), err("ERR syntax error"));
    assert_eq!(exec(&mut db, "ZRANGEBYSCORE z 0 1 REV"), err("ERR syntax error"));

    exec(&mut db, "ZADD l 0 alpha 0 bar 0 cool 0 down 0 elephant 0 foo");
    assert_eq!(exec(&mut db, "ZRANGEBYLEX l - [cool"), arr(&["alpha", "bar", "cool"]));
    assert_eq!(exec(&mut db, "ZREVRANGEBYLEX l [down (bar"), arr(&["down", "cool"]));
    assert_eq!(exec(&mut db, "ZRANGE l (bar + BYLEX LIMIT 1 2"), arr(&["down", "elephant"]));
    assert_eq!(exec(&mut db, "ZLEXCOUNT l - +"), int(6));
    assert_eq!(exec(&mut db, "ZLEXCOUNT l + -"), int(0));
    assert_eq!(exec(&mut db, "ZRANGEBYLEX l foo [bar"), err("ERR min or max not valid string range item"));
    assert_eq!(
        exec(&mut db, "ZRANGE l - + BYLEX WITHSCORES"),
        err("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    );
}

#[test]
fn removes_and_stores_ranges() {
    let mut db = Db::default();
    exec(&mut db, "ZADD z 1 a 2 b 3 c 4 d 5 e");
    assert_eq!(exec(&mut db, "ZRANGESTORE dst z 1 3"), int(3));
    assert_eq!(exec(&mut db, "ZRANGE dst 0 -1"), arr(&["b", "c", "d"]));
    assert_eq!(exec(&mut db, "ZRANGESTORE dst z 5 6"), int(0));
    assert!(!exists(&db, "dst"));
    assert_eq!(exec(&mut db, "ZRANGESTORE dst z 0 -1 WITHSCORES"), err("ERR syntax error"));
    assert_eq!(exec(&mut db, "ZREMRANGEBYSCORE z (1 (4"), int(2));
    assert_eq!(exec(&mut db, "ZREMRANGEBYRANK z 0 0"), int(1));
    assert_eq!(exec(&mut db, "ZRANGE z 0 -1"), arr(&["d", "e"]));
    assert_eq!(exec(&mut db, "ZREMRANGEBYLEX z - +"), int(2));
    assert!(!exists(&db, "z"));
}

#[test]
fn pops() {
    let mut db = Db::default();
    exec(&mut db, "ZADD z 0 a 1 b 2 c 3 d");
    assert_eq!(exec(&mut db, "ZPOPMIN z"), arr(&["a", "0"]));
    assert_eq!(exec(&mut db, "ZPOPMAX z 2"), arr(&["d", "3", "c", "2"]));
    assert_eq!(exec(&mut db, "ZPOPMIN z 0"), arr(&[]));
    assert_eq!(exec(&mut db, "ZPOPMIN z -1"), err("ERR value is out of range, must be positive"));
    assert_eq!(exec(&mut db, "ZPOPMIN nokey"), arr(&[]));
    assert_eq!(
        exec(&mut db, "ZMPOP 2 nokey z MIN COUNT 10"),
        Reply::Array(vec![b("z"), Reply::Array(vec![arr(&["b", "1"])])])
    );
    assert!(!exists(&db, "z"));
    assert_eq!(exec(&mut db, "ZMPOP 1 z MAX"), Reply::NilArray);
    assert_eq!(exec(&mut db, "ZMPOP 0 z MIN"), err("ERR numkeys should be greater than 0"));
    assert_eq!(exec(&mut db, "ZMPOP 1 z MIN COUNT 0"), err("ERR count should be greater than 0"));
    assert_eq!(exec(&mut db, "ZMPOP 1 z MAX MIN"), err("ERR syntax error"));
    assert_eq!(exec(&mut db, "BZPOPMIN z 0"), Reply::WouldBlock);
    assert_eq!(exec(&mut db, "BZPOPMIN z -1"), err("ERR timeout is negative"));
    assert_eq!(exec(&mut db, "BZPOPMIN z x"), err("ERR timeout is not a float or out of range"));
    assert_eq!(exec(&mut db, "BZMPOP 0.5 1 z MIN"), Reply::WouldBlock);
    exec(&mut db, "ZADD z2 1 a 2 b");
    assert_eq!(exec(&mut db, "BZPOPMAX z z2 1"), arr(&["z2", "b", "2"]));
    assert_eq!(
        exec(&mut db, "BZMPOP 1 2 z z2 MIN"),
        Reply::Array(vec![b("z2"), Reply::Array(vec![arr(&["a", "1"])])])
    );
    set_string(&mut db, "str");
    assert_eq!(exec(&mut db, "ZMPOP 2 nokey str MIN"), err(WRONGTYPE));
    assert_eq!(exec(&mut db, "BZPOPMIN str 1"), err(WRONGTYPE));
}

#[test]
fn union_inter_diff() {
    let mut db = Db::default();
    exec(&mut db, "ZADD a 1 a 2 b 3 c");
    exec(&mut db, "ZADD b 1 b 2 c 3 d");
    exec(&mut db, "SADD s a b c");
    assert_eq!(exec(&mut db, "ZUNION 2 a b WITHSCORES"), arr(&["a", "1", "b", "3", "d", "3", "c", "5"]));
    assert_eq!(exec(&mut db, "ZUNIONSTORE out 2 a b WEIGHTS 2 3"), int(4));
    assert_eq!(exec(&mut db, "ZRANGE out 0 -1 WITHSCORES"), arr(&["a", "2", "b", "7", "d", "9", "c", "12"]));
    assert_eq!(exec(&mut db, "ZINTER 2 a b AGGREGATE MAX WITHSCORES"), arr(&["b", "2", "c", "3"]));
    assert_eq!(exec(&mut db, "ZINTERSTORE out 2 s b WEIGHTS 2 3"), int(2));
    assert_eq!(exec(&mut db, "ZRANGE out 0 -1 WITHSCORES"), arr(&["b", "5", "c", "8"]));
    assert_eq!(exec(&mut db, "ZDIFF 2 a b WITHSCORES"), arr(&["a", "1"]));
    assert_eq!(exec(&mut db, "ZDIFFSTORE out 2 a a"), int(0));
    assert!(!exists(&db, "out"));
    assert_eq!(exec(&mut db, "ZINTERCARD 2 a b"), int(2));
    assert_eq!(exec(&mut db, "ZINTERCARD 2 a b LIMIT 1"), int(1));
    assert_eq!(exec(&mut db, "ZINTERCARD 1 a LIMIT -1"), err("ERR LIMIT can't be negative"));
    assert_eq!(exec(&mut db, "ZUNION 0 a"), err("ERR at least 1 input key is needed for 'zunion' command"));
    assert_eq!(exec(&mut db, "ZUNIONSTORE out 3 a b"), err("ERR syntax error"));
    assert_eq!(exec(&mut db, "ZUNIONSTORE out 2 a b WITHSCORES"), err("ERR syntax error"));
    assert_eq!(exec(&mut db, "ZUNION 2 a b WEIGHTS nan 1"), err("ERR weight value is not a float"));
    exec(&mut db, "ZADD n -inf x");
    assert_eq!(exec(&mut db, "ZUNION 1 n WEIGHTS 0 WITHSCORES"), arr(&["x", "0"]));
    set_string(&mut db, "str");
    assert_eq!(exec(&mut db, "ZUNION 2 a str WEIGHTS x"), err(WRONGTYPE));
}

#[test]
fn random_members_and_scan() {
    let mut db = Db::default();
    exec(&mut db, "ZADD z 1 a 2 b 3 c");
    let Reply::Array(all) = exec(&mut db, "ZRANDMEMBER z 10 WITHSCORES") else { panic!("not an array") };
    assert_eq!(all.len(), 6);
    let Reply::Array(some) = exec(&mut db, "ZRANDMEMBER z -7") else { panic!("not an array") };
    assert_eq!(some.len(), 7);
    assert!(matches!(exec(&mut db, "ZRANDMEMBER z"), Reply::Bulk(_)));
    assert_eq!(exec(&mut db, "ZRANDMEMBER nokey"), Reply::Nil);
    assert_eq!(exec(&mut db, "ZRANDMEMBER nokey 3"), arr(&[]));
    assert_eq!(
        exec(&mut db, "ZRANDMEMBER z -9223372036854770000 WITHSCORES"),
        err("ERR value is out of range")
    );
    assert_eq!(exec(&mut db, "ZRANDMEMBER z 1 2"), err("ERR syntax error"));
    let Reply::Array(page) = exec(&mut db, "ZSCAN z 0 MATCH b") else { panic!("not an array") };
    assert_eq!(page, vec![b("0"), arr(&["b", "2"])]);
}

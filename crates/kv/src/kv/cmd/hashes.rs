//! The hash commands of Redis 7.0: HSET, HSETNX, HMSET, HGET, HMGET, HDEL, HLEN, HSTRLEN,
//! HEXISTS, HINCRBY, HINCRBYFLOAT, HKEYS, HVALS, HGETALL, HRANDFIELD and HSCAN.
//!
//! A hash is an [`IndexMap`] from field to value: fields come back in insertion order (a
//! deletion moves the last field into the hole, `swap_remove`), which is a pure function of
//! the commands applied, so every member answers HKEYS or HRANDFIELD alike. Random picks use
//! the seeded [`crate::kv::cmd::Rng`] only. A hash left empty is removed, as Redis does.

use indexmap::IndexMap;

use crate::kv::reply::Reply;

use super::args::{
    bulk, bulks, either, empty, err, float, format_f64_plain, int, integer, is, parse_f64, parse_i64, syntax,
    wrong_arity,
};
use super::sets::{sample, signed_count};
use super::{Ctx, Spec, View, scan};

/// A hash's contents.
type Hash = IndexMap<Vec<u8>, Vec<u8>>;

/// The hash commands, with Redis 7.0's arities and key positions.
pub const COMMANDS: &[Spec] = &[
    Spec::write("hset", -4, (1, 1, 1), hset),
    Spec::write("hsetnx", 4, (1, 1, 1), hsetnx),
    Spec::write("hmset", -4, (1, 1, 1), hmset),
    Spec::read("hget", 3, (1, 1, 1), hget),
    Spec::read("hmget", -3, (1, 1, 1), hmget),
    Spec::write("hdel", -3, (1, 1, 1), hdel),
    Spec::read("hlen", 2, (1, 1, 1), hlen),
    Spec::read("hstrlen", 3, (1, 1, 1), hstrlen),
    Spec::read("hexists", 3, (1, 1, 1), hexists),
    Spec::write("hincrby", 4, (1, 1, 1), hincrby),
    Spec::write("hincrbyfloat", 4, (1, 1, 1), hincrbyfloat),
    Spec::read("hkeys", 2, (1, 1, 1), hkeys),
    Spec::read("hvals", 2, (1, 1, 1), hvals),
    Spec::read("hgetall", 2, (1, 1, 1), hgetall),
    Spec::read("hrandfield", -2, (1, 1, 1), hrandfield),
    Spec::read("hscan", -3, (1, 1, 1), hscan),
];

/// The hash at `key` to change, created empty if absent: only for a caller that will put a
/// field in it.
fn hash_to_fill<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<&'a mut Hash, Reply> {
    let now = ctx.now_ms;
    ctx.db.hash_mut(key, now, true)?.ok_or_else(|| err("ERR no such key"))
}

/// The hash at `key` to read (`None` when absent).
fn hash_to_read<'a>(view: &'a View<'_>, key: &[u8]) -> Result<Option<&'a Hash>, Reply> {
    view.db.hash(key, view.now_ms)
}

/// HSET and HMSET: sets field/value pairs; the number of fields that were new. `name` is
/// the command's, for the arity error a dangling field gets.
fn set_fields(ctx: &mut Ctx<'_>, args: &[Vec<u8>], name: &str) -> Result<usize, Reply> {
    if !args.len().is_multiple_of(2) {
        return Err(wrong_arity(name));
    }
    let hash = hash_to_fill(ctx, &args[1])?;
    let mut created = 0;
    for pair in args[2..].chunks_exact(2) {
        if hash.insert(pair[0].clone(), pair[1].clone()).is_none() {
            created += 1;
        }
    }
    Ok(created)
}

/// `HSET key field value [field value ...]`: the number of fields added.
fn hset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(set_fields(ctx, args, "hset").map(integer))
}

/// `HMSET key field value [field value ...]`: OK.
fn hmset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(set_fields(ctx, args, "hmset").map(|_| Reply::Ok))
}

/// `HSETNX key field value`: 1 if the field was set, 0 if it existed.
fn hsetnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(hash_to_fill(ctx, &args[1]).map(|hash| {
        if hash.contains_key(&args[2]) {
            Reply::Integer(0)
        } else {
            hash.insert(args[2].clone(), args[3].clone());
            Reply::Integer(1)
        }
    }))
}

/// `HGET key field`: the value, or nil.
fn hget(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        hash_to_read(view, &args[1])
            .map(|hash| hash.and_then(|h| h.get(&args[2])).map(Vec::as_slice).map_or(Reply::Nil, bulk)),
    )
}

/// `HMGET key field [field ...]`: each field's value or nil.
fn hmget(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(hash_to_read(view, &args[1]).map(|hash| {
        Reply::Array(
            args[2..]
                .iter()
                .map(|field| hash.and_then(|h| h.get(field)).map(Vec::as_slice).map_or(Reply::Nil, bulk))
                .collect(),
        )
    }))
}

/// `HDEL key field [field ...]`: the number of fields removed.
fn hdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(delete_fields(ctx, args))
}

fn delete_fields(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (key, fields, now) = (&args[1], &args[2..], ctx.now_ms);
    // Nothing to remove: the key (and its version, which WATCH compares) stays as it is.
    if !ctx.db.hash(key, now)?.is_some_and(|h| fields.iter().any(|f| h.contains_key(f))) {
        return Ok(Reply::Integer(0));
    }
    let mut removed = 0;
    if let Some(hash) = ctx.db.hash_mut(key, now, false)? {
        for field in fields {
            if hash.swap_remove(field.as_slice()).is_some() {
                removed += 1;
            }
        }
    }
    ctx.db.drop_if_empty(key, now);
    Ok(integer(removed))
}

/// `HLEN key`: the number of fields.
fn hlen(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(hash_to_read(view, &args[1]).map(|hash| integer(hash.map_or(0, IndexMap::len))))
}

/// `HSTRLEN key field`: the length of the field's value, 0 when absent.
fn hstrlen(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        hash_to_read(view, &args[1])
            .map(|hash| integer(hash.and_then(|h| h.get(&args[2])).map_or(0, Vec::len))),
    )
}

/// `HEXISTS key field`: 1 or 0.
fn hexists(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        hash_to_read(view, &args[1])
            .map(|hash| Reply::Integer(i64::from(hash.is_some_and(|h| h.contains_key(&args[2]))))),
    )
}

/// `HINCRBY key field increment`: the new value.
fn hincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(increment_int(ctx, args))
}

fn increment_int(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let by = int(&args[3])?;
    let current = match ctx.db.hash(&args[1], ctx.now_ms)?.and_then(|h| h.get(&args[2])) {
        Some(text) => parse_i64(text).ok_or_else(|| err("ERR hash value is not an integer"))?,
        None => 0,
    };
    let value = current.checked_add(by).ok_or_else(|| err("ERR increment or decrement would overflow"))?;
    hash_to_fill(ctx, &args[1])?.insert(args[2].clone(), value.to_string().into_bytes());
    Ok(Reply::Integer(value))
}

/// `HINCRBYFLOAT key field increment`: the new value, as text.
fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(increment_float(ctx, args))
}

fn increment_float(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let by = float(&args[3])?;
    if !by.is_finite() {
        return Err(err("ERR value is NaN or Infinity"));
    }
    let current = match ctx.db.hash(&args[1], ctx.now_ms)?.and_then(|h| h.get(&args[2])) {
        Some(text) => parse_f64(text).ok_or_else(|| err("ERR hash value is not a float"))?,
        None => 0.0,
    };
    let value = current + by;
    if !value.is_finite() {
        return Err(err("ERR increment would produce NaN or Infinity"));
    }
    let text = format_f64_plain(value);
    let reply = bulk(&text);
    hash_to_fill(ctx, &args[1])?.insert(args[2].clone(), text);
    Ok(reply)
}

/// `HKEYS key`: every field.
fn hkeys(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        hash_to_read(view, &args[1])
            .map(|hash| bulks(hash.into_iter().flat_map(|h| h.keys()).map(Vec::as_slice))),
    )
}

/// `HVALS key`: every value.
fn hvals(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        hash_to_read(view, &args[1])
            .map(|hash| bulks(hash.into_iter().flat_map(|h| h.values()).map(Vec::as_slice))),
    )
}

/// `HGETALL key`: field, value, field, value...
fn hgetall(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(hash_to_read(view, &args[1]).map(|hash| {
        Reply::Map(hash.into_iter().flat_map(|h| h.iter()).map(|(f, v)| (bulk(f), bulk(v))).collect())
    }))
}

/// `HRANDFIELD key [count [WITHVALUES]]`: one random field (nil when there is no key); with a
/// count, that many distinct fields (all of them when the count passes the size), or with a
/// negative count, that many picks that may repeat.
fn hrandfield(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(random_fields(view, args))
}

fn random_fields(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    if args.len() == 2 {
        return Ok(match hash_to_read(view, &args[1])? {
            Some(hash) if !hash.is_empty() => {
                hash.get_index(view.rng.below(hash.len())).map_or(Reply::Nil, |(field, _)| bulk(field))
            }
            _ => Reply::Nil,
        });
    }
    let count = signed_count(&args[2])?;
    if args.len() > 4 || (args.len() == 4 && !is(&args[3], "withvalues")) {
        return Err(syntax());
    }
    let with_values = args.len() == 4;
    // With values the reply is twice as long: Redis bounds the count to half the range.
    if with_values && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
        return Err(err("ERR value is out of range"));
    }
    let Some(hash) = hash_to_read(view, &args[1])? else { return Ok(empty()) };
    let picks = sample(hash.len(), count, view.rng);
    let picked = picks.into_iter().filter_map(|i| hash.get_index(i));
    if with_values {
        return Ok(Reply::Pairs(picked.map(|(f, v)| (bulk(f), bulk(v))).collect()));
    }
    Ok(Reply::Array(picked.map(|(f, _)| bulk(f)).collect()))
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count]`: field, value pairs, flattened.
fn hscan(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(scan_hash(view, args))
}

fn scan_hash(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    // As Redis: the cursor is checked before the key, the options only for a hash.
    scan::parse(&args[2], &[], false)?;
    let Some(hash) = hash_to_read(view, &args[1])? else { return Ok(scan::reply(0, Vec::new())) };
    let (cursor, options) = scan::parse(&args[2], &args[3..], false)?;
    let (next, pairs) = scan::page(hash.iter().map(|(f, v)| (f.as_slice(), (f, v))), cursor, &options);
    Ok(scan::reply(next, pairs.into_iter().flat_map(|(f, v)| [bulk(f), bulk(v)]).collect()))
}

#[cfg(test)]
mod tests {
    use crate::kv::cmd::testing::{b, err, exec};
    use crate::kv::db::Db;
    use crate::kv::reply::Reply;
    use crate::kv::value::WRONGTYPE;

    #[test]
    fn set_get_and_delete() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "HSET h a 1 b 2"), Reply::Integer(2));
        assert_eq!(exec(&mut db, "HSET h a 3 c 4"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "HMSET h d 5"), Reply::Ok);
        assert_eq!(exec(&mut db, "HSET h a 1 b"), err("ERR wrong number of arguments for 'hset' command"));
        assert_eq!(exec(&mut db, "HGET h a"), b("3"));
        assert_eq!(exec(&mut db, "HGET h zz"), Reply::Nil);
        assert_eq!(exec(&mut db, "HMGET h a zz"), Reply::Array(vec![b("3"), Reply::Nil]));
        assert_eq!(exec(&mut db, "HMGET nokey a"), Reply::Array(vec![Reply::Nil]));
        assert_eq!(exec(&mut db, "HSETNX h a 9"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "HSETNX h e 9"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "HLEN h"), Reply::Integer(5));
        assert_eq!(exec(&mut db, "HSTRLEN h e"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "HEXISTS h e"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "HEXISTS h zz"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "HDEL h a b zz"), Reply::Integer(2));
        assert_eq!(exec(&mut db, "HDEL h c d e"), Reply::Integer(3));
        assert!(!db.contains(b"h", 1_000), "an emptied hash is removed");
        assert_eq!(exec(&mut db, "HDEL h a"), Reply::Integer(0));
    }

    #[test]
    fn listings_keep_insertion_order() {
        let mut db = Db::default();
        exec(&mut db, "HSET h a 1 b 2");
        assert_eq!(exec(&mut db, "HKEYS h"), Reply::Array(vec![b("a"), b("b")]));
        assert_eq!(exec(&mut db, "HVALS h"), Reply::Array(vec![b("1"), b("2")]));
        assert_eq!(exec(&mut db, "HGETALL h"), Reply::Map(vec![(b("a"), b("1")), (b("b"), b("2"))]));
        assert_eq!(exec(&mut db, "HGETALL nokey"), Reply::Map(vec![]));
    }

    #[test]
    fn increments() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "HINCRBY h n 5"), Reply::Integer(5));
        assert_eq!(exec(&mut db, "HINCRBY h n -7"), Reply::Integer(-2));
        assert_eq!(exec(&mut db, "HINCRBY h n x"), err("ERR value is not an integer or out of range"));
        exec(&mut db, "HSET h s foo");
        assert_eq!(exec(&mut db, "HINCRBY h s 1"), err("ERR hash value is not an integer"));
        exec(&mut db, "HSET h big 9223372036854775800");
        assert_eq!(exec(&mut db, "HINCRBY h big 100"), err("ERR increment or decrement would overflow"));
        assert_eq!(exec(&mut db, "HINCRBYFLOAT h f 1.23"), b("1.23"));
        assert_eq!(exec(&mut db, "HINCRBYFLOAT h f 0.77"), b("2"));
        assert_eq!(exec(&mut db, "HINCRBYFLOAT h f -0.1"), b("1.9"));
        assert_eq!(exec(&mut db, "HINCRBYFLOAT h s 1"), err("ERR hash value is not a float"));
        assert_eq!(exec(&mut db, "HINCRBYFLOAT x f +inf"), err("ERR value is NaN or Infinity"));
        assert!(!db.contains(b"x", 1_000));
        exec(&mut db, "HSET h i inf");
        assert_eq!(exec(&mut db, "HINCRBYFLOAT h i 1"), err("ERR increment would produce NaN or Infinity"));
    }

    #[test]
    fn random_fields() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "HRANDFIELD nokey"), Reply::Nil);
        assert_eq!(exec(&mut db, "HRANDFIELD nokey 5"), Reply::Array(vec![]));
        exec(&mut db, "HSET h a 1 b 2 c 3 d 4 e 5 f 6 g 7 h 8 i 9 j 10");
        assert!(matches!(exec(&mut db, "HRANDFIELD h"), Reply::Bulk(_)));
        assert_eq!(exec(&mut db, "HRANDFIELD h 0"), Reply::Array(vec![]));
        let Reply::Array(all) = exec(&mut db, "HRANDFIELD h 20") else { panic!() };
        assert_eq!(all.len(), 10);
        for n in [2, 8] {
            let Reply::Array(some) = exec(&mut db, &format!("HRANDFIELD h {n}")) else { panic!() };
            let mut unique = some;
            unique.sort_by_key(|r| format!("{r:?}"));
            unique.dedup();
            assert_eq!(unique.len(), n, "distinct fields");
        }
        let Reply::Pairs(repeats) = exec(&mut db, "HRANDFIELD h -30 WITHVALUES") else { panic!() };
        assert_eq!(repeats.len(), 30);
        assert_eq!(exec(&mut db, "HRANDFIELD h 1 foo"), err("ERR syntax error"));
        assert!(matches!(
            exec(&mut db, "HRANDFIELD h -9223372036854775808"),
            Reply::Error(e) if e.starts_with("ERR value is out of range")
        ));
        assert_eq!(
            exec(&mut db, "HRANDFIELD h -9223372036854770000 WITHVALUES"),
            err("ERR value is out of range")
        );
    }

    #[test]
    fn scan_returns_every_pair() {
        let mut db = Db::default();
        exec(&mut db, "HSET h a 1 b 2 c 3");
        let Reply::Array(parts) = exec(&mut db, "HSCAN h 0 COUNT 100") else { panic!() };
        assert_eq!(parts[0], b("0"));
        let Reply::Array(items) = &parts[1] else { panic!() };
        assert_eq!(items.len(), 6);
        assert_eq!(exec(&mut db, "HSCAN nokey 0"), Reply::Array(vec![b("0"), Reply::Array(vec![])]));
        assert_eq!(exec(&mut db, "HSCAN h x"), err("ERR invalid cursor"));
    }

    #[test]
    fn wrong_type() {
        let mut db = Db::default();
        exec(&mut db, "RPUSH l x");
        for cmd in [
            "HSET l a 1",
            "HGET l a",
            "HMGET l a",
            "HDEL l a",
            "HLEN l",
            "HINCRBY l a 1",
            "HGETALL l",
            "HRANDFIELD l 2",
            "HSCAN l 0",
        ] {
            assert_eq!(exec(&mut db, cmd), err(WRONGTYPE), "{cmd}");
        }
    }
}

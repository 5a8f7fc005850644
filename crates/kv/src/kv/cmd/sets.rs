//! Redis 7.0's set commands (SADD ... SSCAN) over [`Value::Set`].
//!
//! A set is an [`IndexSet`]: members keep the order of their insertion (with swap-removal),
//! so SMEMBERS answers alike on every member and a random pick is an index drawn from the
//! command's [`super::Rng`]: SPOP from the write's seed (every member pops the same
//! members), SRANDMEMBER from the reader's. The random sampling and the count and LIMIT
//! arguments are shared with the sorted-set commands ([`super::zsets`]).
//!
//! The *STORE commands replace the destination whatever it held (and its expiry) and delete
//! it when the result is empty, as Redis does.

use std::collections::HashSet;

use indexmap::IndexSet;

use super::args::{bulk, bulks, either, empty, err, integer, is, parse_i64, positive, syntax, to_usize};
use super::{Ctx, Rng, Spec, View, scan};
use crate::kv::db::Db;
use crate::kv::reply::Reply;
use crate::kv::value::Value;

/// The set commands.
pub const COMMANDS: &[Spec] = &[
    Spec::write("sadd", -3, (1, 1, 1), sadd),
    Spec::write("srem", -3, (1, 1, 1), srem),
    Spec::read("scard", 2, (1, 1, 1), scard),
    Spec::read("sismember", 3, (1, 1, 1), sismember),
    Spec::read("smismember", -3, (1, 1, 1), smismember),
    Spec::read("smembers", 2, (1, 1, 1), smembers),
    Spec::read("srandmember", -2, (1, 1, 1), srandmember),
    Spec::write("spop", -2, (1, 1, 1), spop),
    Spec::write("smove", 4, (1, 2, 1), smove),
    Spec::read("sinter", -2, (1, -1, 1), sinter),
    Spec::read("sintercard", -3, (0, 0, 0), sintercard),
    Spec::write("sinterstore", -3, (1, -1, 1), sinterstore),
    Spec::read("sunion", -2, (1, -1, 1), sunion),
    Spec::write("sunionstore", -3, (1, -1, 1), sunionstore),
    Spec::read("sdiff", -2, (1, -1, 1), sdiff),
    Spec::write("sdiffstore", -3, (1, -1, 1), sdiffstore),
    Spec::read("sscan", -3, (1, 1, 1), sscan),
];

type Set = IndexSet<Vec<u8>>;

/// SRANDMEMBER's and ZRANDMEMBER's count: any `i64` but the least (its negation would not
/// fit), with Redis's error for that one.
pub fn signed_count(arg: &[u8]) -> Result<i64, Reply> {
    match super::args::int(arg)? {
        i64::MIN => {
            Err(err(format!("ERR value is out of range, value must between {} and {}", -i64::MAX, i64::MAX)))
        }
        // A reply of picks with repeats is built whole: its length is bounded, as
        // HRANDFIELD's, so one request cannot make a member (inside MULTI, every member)
        // allocate without limit.
        n if n < 0 && n.unsigned_abs() > MAX_REPEATED_PICKS => Err(err("ERR value is out of range")),
        n => Ok(n),
    }
}

/// The most picks with repeats one SRANDMEMBER or ZRANDMEMBER may ask for.
pub const MAX_REPEATED_PICKS: u64 = 1 << 22;

/// SINTERCARD's and ZINTERCARD's `LIMIT n` value (0: no limit).
pub fn card_limit(arg: &[u8]) -> Result<usize, Reply> {
    parse_i64(arg).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| err("ERR LIMIT can't be negative"))
}

/// Indices into a collection of `len` elements for a random pick of `count` of them, as
/// SRANDMEMBER and ZRANDMEMBER take them: a negative count picks `-count` times with
/// repeats; a positive one picks distinct elements, all of them (in order) when it is at
/// least `len`.
pub fn sample(len: usize, count: i64, rng: &Rng) -> Vec<usize> {
    if len == 0 || count == 0 {
        return Vec::new();
    }
    if count < 0 {
        return (0..count.unsigned_abs()).map(|_| rng.below(len)).collect();
    }
    let count = to_usize(count);
    if count >= len {
        return (0..len).collect();
    }
    if count.saturating_mul(3) > len {
        // Most of them: a partial Fisher-Yates shuffle of every index.
        let mut indices: Vec<usize> = (0..len).collect();
        for i in 0..count {
            let j = i + rng.below(len - i);
            indices.swap(i, j);
        }
        indices.truncate(count);
        return indices;
    }
    // Few of them: draw until enough distinct ones came (the set is only asked, never
    // iterated, so the picks do not depend on its hashing).
    let mut seen = HashSet::with_capacity(count);
    let mut picked = Vec::with_capacity(count);
    while picked.len() < count {
        let i = rng.below(len);
        if seen.insert(i) {
            picked.push(i);
        }
    }
    picked
}

fn sadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(add_members(ctx, &args[1], &args[2..]))
}

fn add_members(ctx: &mut Ctx<'_>, key: &[u8], members: &[Vec<u8>]) -> Result<Reply, Reply> {
    let now = ctx.now_ms;
    // Only an addition touches the key (and what WATCH sees of it).
    if ctx.db.set(key, now)?.is_some_and(|set| members.iter().all(|m| set.contains(m.as_slice()))) {
        return Ok(integer(0));
    }
    let added = match ctx.db.set_mut(key, now, true)? {
        Some(set) => members.iter().filter(|m| set.insert((*m).clone())).count(),
        None => 0,
    };
    Ok(integer(added))
}

fn srem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(remove_members(ctx, &args[1], &args[2..]))
}

fn remove_members(ctx: &mut Ctx<'_>, key: &[u8], members: &[Vec<u8>]) -> Result<Reply, Reply> {
    let now = ctx.now_ms;
    // Only a removal touches the key (and what WATCH sees of it).
    let Some(set) = ctx.db.set(key, now)? else { return Ok(integer(0)) };
    if !members.iter().any(|m| set.contains(m.as_slice())) {
        return Ok(integer(0));
    }
    let removed = match ctx.db.set_mut(key, now, false)? {
        Some(set) => members.iter().filter(|m| set.swap_remove(m.as_slice())).count(),
        None => 0,
    };
    ctx.db.drop_if_empty(key, now);
    Ok(integer(removed))
}

fn scard(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(view.db.set(&args[1], view.now_ms).map(|set| integer(set.map_or(0, IndexSet::len))))
}

fn sismember(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        view.db
            .set(&args[1], view.now_ms)
            .map(|set| integer(usize::from(set.is_some_and(|s| s.contains(args[2].as_slice()))))),
    )
}

fn smismember(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(view.db.set(&args[1], view.now_ms).map(|set| {
        Reply::Array(
            args[2..]
                .iter()
                .map(|m| integer(usize::from(set.is_some_and(|s| s.contains(m.as_slice())))))
                .collect(),
        )
    }))
}

fn smembers(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        view.db
            .set(&args[1], view.now_ms)
            .map(|set| set.map_or_else(empty, |s| bulks(s.iter().map(Vec::as_slice)))),
    )
}

fn srandmember(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(random_members(view, args))
}

fn random_members(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    if args.len() > 3 {
        return Err(syntax());
    }
    let count = args.get(2).map(|c| signed_count(c)).transpose()?;
    let set = view.db.set(&args[1], view.now_ms)?;
    match (set, count) {
        (None, Some(_)) => Ok(empty()),
        (None, None) => Ok(Reply::Nil),
        (Some(set), Some(count)) => Ok(bulks(
            sample(set.len(), count, view.rng)
                .into_iter()
                .filter_map(|i| set.get_index(i))
                .map(Vec::as_slice),
        )),
        (Some(set), None) if set.is_empty() => Ok(Reply::Nil),
        (Some(set), None) => Ok(set.get_index(view.rng.below(set.len())).map_or(Reply::Nil, |m| bulk(m))),
    }
}

fn spop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop_members(ctx, args))
}

fn pop_members(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    if args.len() > 3 {
        return Err(syntax());
    }
    let count = args.get(2).map(|c| positive(c, "value")).transpose()?;
    let (key, now) = (&args[1], ctx.now_ms);
    let Some(set) = ctx.db.set(key, now)? else {
        return Ok(if count.is_some() { empty() } else { Reply::Nil });
    };
    let wanted = count.map_or(1, to_usize).min(set.len());
    let mut popped = Vec::with_capacity(wanted);
    if wanted > 0
        && let Some(set) = ctx.db.set_mut(key, now, false)?
    {
        while popped.len() < wanted && !set.is_empty() {
            if let Some(member) = set.swap_remove_index(ctx.rng.below(set.len())) {
                popped.push(member);
            }
        }
        ctx.db.drop_if_empty(key, now);
    }
    Ok(match count {
        Some(_) => Reply::Array(popped.into_iter().map(Reply::Bulk).collect()),
        None => popped.pop().map_or(Reply::Nil, Reply::Bulk),
    })
}

fn smove(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(move_member(ctx, &args[1], &args[2], &args[3]))
}

fn move_member(ctx: &mut Ctx<'_>, src: &[u8], dst: &[u8], member: &[u8]) -> Result<Reply, Reply> {
    let now = ctx.now_ms;
    let Some(source) = ctx.db.set(src, now)? else { return Ok(integer(0)) };
    let present = source.contains(member);
    // The destination must be a set (or absent) even when nothing moves.
    let already = ctx.db.set(dst, now)?.is_some_and(|d| d.contains(member));
    if src == dst || !present {
        return Ok(integer(usize::from(present)));
    }
    if let Some(source) = ctx.db.set_mut(src, now, false)? {
        source.swap_remove(member);
    }
    ctx.db.drop_if_empty(src, now);
    // A destination that has the member already is not touched (a WATCH of it holds).
    if !already && let Some(dest) = ctx.db.set_mut(dst, now, true)? {
        dest.insert(member.to_vec());
    }
    Ok(integer(1))
}

/// The algebra of SINTER, SUNION and SDIFF (and their STORE and CARD forms).
#[derive(Clone, Copy)]
enum SetOp {
    Inter,
    Union,
    Diff,
}

/// The result of `op` over the sets at `keys` (a missing key is an empty set); WRONGTYPE
/// if any key holds another type.
fn combine<'a>(db: &'a Db, now: u64, keys: &[Vec<u8>], op: SetOp) -> Result<Vec<&'a [u8]>, Reply> {
    let sets = keys.iter().map(|k| db.set(k, now)).collect::<Result<Vec<_>, _>>()?;
    Ok(match op {
        SetOp::Inter => intersection(&sets),
        SetOp::Union => union(&sets),
        SetOp::Diff => difference(&sets),
    })
}

/// Members of every set, in the order of the smallest; nothing when one is missing.
fn intersection<'a>(sets: &[Option<&'a Set>]) -> Vec<&'a [u8]> {
    let Some(mut sets) = sets.iter().copied().collect::<Option<Vec<&'a Set>>>() else {
        return Vec::new();
    };
    sets.sort_by_key(|s| s.len());
    let Some((&first, rest)) = sets.split_first() else { return Vec::new() };
    first.iter().filter(|m| rest.iter().all(|s| s.contains(m.as_slice()))).map(Vec::as_slice).collect()
}

/// Members of any set, each once, in the order first seen.
fn union<'a>(sets: &[Option<&'a Set>]) -> Vec<&'a [u8]> {
    let mut all: IndexSet<&'a [u8]> = IndexSet::new();
    for set in sets.iter().copied().flatten() {
        all.extend(set.iter().map(Vec::as_slice));
    }
    all.into_iter().collect()
}

/// Members of the first set in none of the others.
fn difference<'a>(sets: &[Option<&'a Set>]) -> Vec<&'a [u8]> {
    let Some((Some(first), rest)) = sets.split_first().map(|(f, r)| (*f, r)) else {
        return Vec::new();
    };
    first
        .iter()
        .filter(|m| !rest.iter().copied().flatten().any(|s| s.contains(m.as_slice())))
        .map(Vec::as_slice)
        .collect()
}

/// SINTER, SUNION, SDIFF: the members of `op` over `keys`.
fn read_op(view: &View<'_>, keys: &[Vec<u8>], op: SetOp) -> Reply {
    either(combine(view.db, view.now_ms, keys, op).map(bulks))
}

/// SINTERSTORE, SUNIONSTORE, SDIFFSTORE: `op` over `args[2..]` stored at `args[1]`.
fn store_op(ctx: &mut Ctx<'_>, args: &[Vec<u8>], op: SetOp) -> Reply {
    let result: Set = match combine(ctx.db, ctx.now_ms, &args[2..], op) {
        Ok(members) => members.into_iter().map(<[u8]>::to_vec).collect(),
        Err(e) => return e,
    };
    let count = result.len();
    ctx.db.store(&args[1], Value::Set(Box::new(result)), ctx.now_ms);
    integer(count)
}

fn sinter(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_op(view, &args[1..], SetOp::Inter)
}

fn sunion(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_op(view, &args[1..], SetOp::Union)
}

fn sdiff(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_op(view, &args[1..], SetOp::Diff)
}

fn sinterstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    store_op(ctx, args, SetOp::Inter)
}

fn sunionstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    store_op(ctx, args, SetOp::Union)
}

fn sdiffstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    store_op(ctx, args, SetOp::Diff)
}

fn sintercard(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(intersection_card(view, args))
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`.
fn intersection_card(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let numkeys = parse_i64(&args[1])
        .filter(|&n| n > 0)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| err("ERR numkeys should be greater than 0"))?;
    if numkeys > args.len() - 2 {
        return Err(err("ERR Number of keys can't be greater than number of args"));
    }
    let mut limit = 0;
    let mut j = 2 + numkeys;
    while j < args.len() {
        if is(&args[j], "limit") && j + 1 < args.len() {
            limit = card_limit(&args[j + 1])?;
            j += 2;
        } else {
            return Err(syntax());
        }
    }
    let count = combine(view.db, view.now_ms, &args[2..2 + numkeys], SetOp::Inter)?.len();
    Ok(integer(if limit > 0 { count.min(limit) } else { count }))
}

fn sscan(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(scan_members(view, args))
}

fn scan_members(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (cursor, options) = scan::parse(&args[2], &args[3..], false)?;
    let Some(set) = view.db.set(&args[1], view.now_ms)? else { return Ok(scan::reply(0, Vec::new())) };
    let (next, members) = scan::page(set.iter().map(|m| (m.as_slice(), m)), cursor, &options);
    Ok(scan::reply(next, members.into_iter().map(|m| bulk(m)).collect()))
}

#[cfg(test)]
mod tests {
    use crate::kv::cmd::testing::{NOW, err, exec, exists, int, set_string};
    use crate::kv::db::Db;
    use crate::kv::reply::Reply;
    use crate::kv::value::{Value, WRONGTYPE};

    /// An array reply's bulk strings, sorted (sets have no order to assert).
    fn sorted(reply: Reply) -> Vec<String> {
        let Reply::Array(items) = reply else { panic!("not an array: {reply:?}") };
        let mut out: Vec<String> = items
            .into_iter()
            .map(|i| match i {
                Reply::Bulk(b) => String::from_utf8(b).expect("utf-8"),
                other => panic!("not a bulk: {other:?}"),
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn add_remove_and_membership() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "SADD s a b c"), int(3));
        assert_eq!(exec(&mut db, "SADD s A a b c B"), int(2));
        assert_eq!(exec(&mut db, "SCARD s"), int(5));
        assert_eq!(exec(&mut db, "SISMEMBER s a"), int(1));
        assert_eq!(exec(&mut db, "SMISMEMBER s a x"), Reply::Array(vec![int(1), int(0)]));
        assert_eq!(exec(&mut db, "SMISMEMBER nokey a x"), Reply::Array(vec![int(0), int(0)]));
        assert_eq!(exec(&mut db, "SREM s k k k"), int(0));
        assert_eq!(exec(&mut db, "SREM s A B a x"), int(3));
        assert_eq!(sorted(exec(&mut db, "SMEMBERS s")), ["b", "c"]);
        assert_eq!(exec(&mut db, "SREM s b c d"), int(2));
        assert!(!exists(&db, "s"));
    }

    #[test]
    fn wrong_type_is_refused() {
        let mut db = Db::default();
        set_string(&mut db, "str");
        let wrongtype = err(WRONGTYPE);
        assert_eq!(exec(&mut db, "SADD str a"), wrongtype);
        assert_eq!(exec(&mut db, "SMISMEMBER str a"), wrongtype);
        assert_eq!(exec(&mut db, "SINTER nokey str"), wrongtype);
        assert_eq!(exec(&mut db, "SDIFFSTORE dst nokey str"), wrongtype);
        assert!(!exists(&db, "dst"));
        exec(&mut db, "SADD s a");
        assert_eq!(exec(&mut db, "SMOVE s str a"), wrongtype);
        assert_eq!(exec(&mut db, "SMOVE str s a"), wrongtype);
    }

    #[test]
    fn pop_and_random_members() {
        let mut db = Db::default();
        exec(&mut db, "SADD s a b c d e");
        assert_eq!(sorted(exec(&mut db, "SRANDMEMBER s 10")), ["a", "b", "c", "d", "e"]);
        assert_eq!(sorted(exec(&mut db, "SRANDMEMBER s 3")).len(), 3);
        let mut distinct = sorted(exec(&mut db, "SRANDMEMBER s 4"));
        distinct.dedup();
        assert_eq!(distinct.len(), 4);
        assert_eq!(sorted(exec(&mut db, "SRANDMEMBER s -20")).len(), 20);
        assert_eq!(exec(&mut db, "SRANDMEMBER s 0"), Reply::Array(vec![]));
        assert_eq!(exec(&mut db, "SRANDMEMBER nokey 5"), Reply::Array(vec![]));
        assert_eq!(exec(&mut db, "SRANDMEMBER nokey"), Reply::Nil);
        assert!(matches!(
            exec(&mut db, "SRANDMEMBER s -9223372036854775808"),
            Reply::Error(e) if e.starts_with("ERR value is out of range")
        ));
        assert_eq!(exec(&mut db, "SPOP s -1"), err("ERR value is out of range, must be positive"));
        assert_eq!(exec(&mut db, "SPOP s 1 2"), err("ERR syntax error"));
        assert_eq!(sorted(exec(&mut db, "SPOP s 3")).len(), 3);
        assert_eq!(exec(&mut db, "SCARD s"), int(2));
        assert!(matches!(exec(&mut db, "SPOP s"), Reply::Bulk(_)));
        assert_eq!(sorted(exec(&mut db, "SPOP s 10")).len(), 1);
        assert!(!exists(&db, "s"));
        assert_eq!(exec(&mut db, "SPOP s"), Reply::Nil);
        assert_eq!(exec(&mut db, "SPOP s 5"), Reply::Array(vec![]));
    }

    #[test]
    fn moves_between_sets() {
        let mut db = Db::default();
        exec(&mut db, "SADD a 1 x");
        exec(&mut db, "SADD b 2");
        assert_eq!(exec(&mut db, "SMOVE a b x"), int(1));
        assert_eq!(sorted(exec(&mut db, "SMEMBERS b")), ["2", "x"]);
        assert_eq!(exec(&mut db, "SMOVE a b nope"), int(0));
        assert_eq!(exec(&mut db, "SMOVE a a 1"), int(1));
        assert_eq!(exec(&mut db, "SMOVE nokey b 1"), int(0));
        assert_eq!(exec(&mut db, "SMOVE a c 1"), int(1));
        assert!(!exists(&db, "a"));
        assert_eq!(sorted(exec(&mut db, "SMEMBERS c")), ["1"]);
    }

    #[test]
    fn algebra_and_stores() {
        let mut db = Db::default();
        exec(&mut db, "SADD s1 a b c");
        exec(&mut db, "SADD s2 b c d");
        assert_eq!(sorted(exec(&mut db, "SINTER s1 s2")), ["b", "c"]);
        assert_eq!(sorted(exec(&mut db, "SINTER s1 s2 nokey")), Vec::<String>::new());
        assert_eq!(sorted(exec(&mut db, "SUNION s1 nokey s2")), ["a", "b", "c", "d"]);
        assert_eq!(sorted(exec(&mut db, "SDIFF s1 s2 nokey")), ["a"]);
        assert_eq!(sorted(exec(&mut db, "SDIFF s1 s1")), Vec::<String>::new());
        set_string(&mut db, "dst");
        assert_eq!(exec(&mut db, "SUNIONSTORE dst s1 s2"), int(4));
        assert!(matches!(db.value(b"dst", NOW), Some(Value::Set(s)) if s.len() == 4));
        assert_eq!(exec(&mut db, "SINTERSTORE dst s1 nokey"), int(0));
        assert!(!exists(&db, "dst"));
        assert_eq!(exec(&mut db, "SDIFFSTORE dst s1 s2"), int(1));
        assert_eq!(sorted(exec(&mut db, "SMEMBERS dst")), ["a"]);
    }

    #[test]
    fn intersection_cardinality() {
        let mut db = Db::default();
        exec(&mut db, "SADD s1 a b c d");
        exec(&mut db, "SADD s2 b c d e");
        assert_eq!(exec(&mut db, "SINTERCARD 2 s1 s2"), int(3));
        assert_eq!(exec(&mut db, "SINTERCARD 2 s1 s2 LIMIT 2"), int(2));
        assert_eq!(exec(&mut db, "SINTERCARD 2 s1 s2 limit 0"), int(3));
        assert_eq!(exec(&mut db, "SINTERCARD 1 nokey"), int(0));
        assert_eq!(exec(&mut db, "SINTERCARD 0 s1"), err("ERR numkeys should be greater than 0"));
        assert_eq!(exec(&mut db, "SINTERCARD a s1"), err("ERR numkeys should be greater than 0"));
        assert_eq!(
            exec(&mut db, "SINTERCARD 3 s1 s2"),
            err("ERR Number of keys can't be greater than number of args")
        );
        assert_eq!(exec(&mut db, "SINTERCARD 1 s1 s2"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "SINTERCARD 1 s1 LIMIT"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "SINTERCARD 1 s1 LIMIT -1"), err("ERR LIMIT can't be negative"));
    }

    #[test]
    fn scans_every_member() {
        let mut db = Db::default();
        exec(&mut db, "SADD s a b c");
        let Reply::Array(parts) = exec(&mut db, "SSCAN s 0 COUNT 100") else { panic!("not an array") };
        assert_eq!(parts[0], Reply::Bulk(b"0".to_vec()));
        assert_eq!(sorted(parts[1].clone()), ["a", "b", "c"]);
        assert_eq!(
            exec(&mut db, "SSCAN nokey 0"),
            Reply::Array(vec![Reply::Bulk(b"0".to_vec()), Reply::Array(vec![])])
        );
    }
}

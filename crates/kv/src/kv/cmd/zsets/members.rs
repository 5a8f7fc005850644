//! The commands on single members: ZADD (and ZINCRBY, its INCR form) and ZREM, and the reads
//! ZCARD, ZSCORE, ZMSCORE, ZRANK, ZREVRANK, ZRANDMEMBER and ZSCAN.

use super::{members_reply, score_reply};
use crate::kv::cmd::args::{bulk, either, empty, err, float, integer, is, syntax};
use crate::kv::cmd::sets::{sample, signed_count};
use crate::kv::cmd::{Ctx, View, scan};
use crate::kv::reply::Reply;
use crate::kv::zset::ZSet;

/// ZADD's options (ZINCRBY is ZADD INCR).
#[derive(Debug, Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What one score-member pair of ZADD did.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// A new member, with this score.
    Added(f64),
    /// An existing member's score changed to this one.
    Changed(f64),
    /// An existing member kept its score, this one.
    Kept(f64),
    /// Not applied: NX, XX, GT or LT said no.
    Skipped,
}

pub(super) fn zadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(add(ctx, args, false))
}

pub(super) fn zincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(add(ctx, args, true))
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`, and ZINCRBY.
fn add(ctx: &mut Ctx<'_>, args: &[Vec<u8>], incr: bool) -> Result<Reply, Reply> {
    let mut flags = AddFlags { incr, ..AddFlags::default() };
    let mut at = 2;
    while let Some(arg) = args.get(at) {
        let flag = if is(arg, "nx") {
            &mut flags.nx
        } else if is(arg, "xx") {
            &mut flags.xx
        } else if is(arg, "gt") {
            &mut flags.gt
        } else if is(arg, "lt") {
            &mut flags.lt
        } else if is(arg, "ch") {
            &mut flags.ch
        } else if is(arg, "incr") {
            &mut flags.incr
        } else {
            break;
        };
        *flag = true;
        at += 1;
    }
    let pairs = &args[at..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(syntax());
    }
    if flags.nx && flags.xx {
        return Err(err("ERR XX and NX options at the same time are not compatible"));
    }
    if (flags.nx && (flags.gt || flags.lt)) || (flags.gt && flags.lt) {
        return Err(err("ERR GT, LT, and/or NX options at the same time are not compatible"));
    }
    if flags.incr && pairs.len() > 2 {
        return Err(err("ERR INCR option supports a single increment-element pair"));
    }
    // Every score is read before anything changes: a bad one changes nothing.
    let scores = pairs.chunks_exact(2).map(|pair| float(&pair[0])).collect::<Result<Vec<f64>, Reply>>()?;
    let (key, now) = (&args[1], ctx.now_ms);
    if flags.xx && ctx.db.zset(key, now)?.is_none() {
        return Ok(if flags.incr { Reply::Nil } else { integer(0) });
    }
    let Some(zset) = ctx.db.zset_mut(key, now, true)? else { return Ok(integer(0)) };
    let outcomes = pairs
        .chunks_exact(2)
        .zip(scores)
        .map(|(pair, score)| add_one(zset, &pair[1], score, flags))
        .collect::<Result<Vec<Outcome>, Reply>>();
    ctx.db.drop_if_empty(key, now);
    let outcomes = outcomes?;
    if flags.incr {
        return Ok(match outcomes.last() {
            Some(Outcome::Added(score) | Outcome::Changed(score) | Outcome::Kept(score)) => {
                score_reply(*score)
            }
            _ => Reply::Nil,
        });
    }
    let added = outcomes.iter().filter(|o| matches!(o, Outcome::Added(_))).count();
    let changed = outcomes.iter().filter(|o| matches!(o, Outcome::Changed(_))).count();
    Ok(integer(if flags.ch { added + changed } else { added }))
}

/// Applies one score-member pair under `flags`.
fn add_one(zset: &mut ZSet, member: &[u8], score: f64, flags: AddFlags) -> Result<Outcome, Reply> {
    let Some(current) = zset.score(member) else {
        if flags.xx {
            return Ok(Outcome::Skipped);
        }
        zset.insert(member.to_vec(), score);
        return Ok(Outcome::Added(score));
    };
    if flags.nx {
        return Ok(Outcome::Skipped);
    }
    let new = if flags.incr { current + score } else { score };
    if new.is_nan() {
        return Err(err("ERR resulting score is not a number (NaN)"));
    }
    if (flags.lt && new >= current) || (flags.gt && new <= current) {
        return Ok(Outcome::Skipped);
    }
    if new == current {
        return Ok(Outcome::Kept(new));
    }
    zset.insert(member.to_vec(), new);
    Ok(Outcome::Changed(new))
}

pub(super) fn zrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(remove_members(ctx, &args[1], &args[2..]))
}

fn remove_members(ctx: &mut Ctx<'_>, key: &[u8], members: &[Vec<u8>]) -> Result<Reply, Reply> {
    let now = ctx.now_ms;
    // Only a removal touches the key (and what WATCH sees of it).
    let Some(zset) = ctx.db.zset(key, now)? else { return Ok(integer(0)) };
    if !members.iter().any(|m| zset.score(m).is_some()) {
        return Ok(integer(0));
    }
    let removed = match ctx.db.zset_mut(key, now, false)? {
        Some(zset) => members.iter().filter(|m| zset.remove(m).is_some()).count(),
        None => 0,
    };
    ctx.db.drop_if_empty(key, now);
    Ok(integer(removed))
}

pub(super) fn zcard(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(view.db.zset(&args[1], view.now_ms).map(|z| integer(z.map_or(0, ZSet::len))))
}

pub(super) fn zscore(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        view.db
            .zset(&args[1], view.now_ms)
            .map(|z| z.and_then(|z| z.score(&args[2])).map_or(Reply::Nil, score_reply)),
    )
}

pub(super) fn zmscore(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(view.db.zset(&args[1], view.now_ms).map(|z| {
        Reply::Array(
            args[2..].iter().map(|m| z.and_then(|z| z.score(m)).map_or(Reply::Nil, score_reply)).collect(),
        )
    }))
}

pub(super) fn zrank(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    rank(view, args, false)
}

pub(super) fn zrevrank(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    rank(view, args, true)
}

/// ZRANK and ZREVRANK.
fn rank(view: &View<'_>, args: &[Vec<u8>], rev: bool) -> Reply {
    either(view.db.zset(&args[1], view.now_ms).map(|z| {
        z.and_then(|z| z.rank(&args[2]).map(|r| if rev { z.len() - 1 - r } else { r }))
            .map_or(Reply::Nil, integer)
    }))
}

pub(super) fn zrandmember(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(random_members(view, args))
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`.
fn random_members(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let Some(count) = args.get(2) else {
        return Ok(match view.db.zset(&args[1], view.now_ms)? {
            Some(z) if !z.is_empty() => {
                z.by_index(view.rng.below(z.len())).map_or(Reply::Nil, |(m, _)| bulk(m))
            }
            _ => Reply::Nil,
        });
    };
    let count = signed_count(count)?;
    let withscores = match args.len() {
        3 => false,
        4 if is(&args[3], "withscores") => true,
        _ => return Err(syntax()),
    };
    // With scores the reply is twice as long: Redis bounds the count to half the range.
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(err("ERR value is out of range"));
    }
    let Some(zset) = view.db.zset(&args[1], view.now_ms)? else { return Ok(empty()) };
    let picks = sample(zset.len(), count, view.rng).into_iter().filter_map(|i| zset.by_index(i));
    Ok(members_reply(picks, withscores))
}

pub(super) fn zscan(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(scan_members(view, args))
}

fn scan_members(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (cursor, options) = scan::parse(&args[2], &args[3..], false)?;
    let Some(zset) = view.db.zset(&args[1], view.now_ms)? else { return Ok(scan::reply(0, Vec::new())) };
    let (next, found) = scan::page(zset.iter().map(|(m, s)| (m, (m, s))), cursor, &options);
    Ok(scan::reply(next, found.into_iter().flat_map(|(m, s)| [bulk(m), score_reply(s)]).collect()))
}

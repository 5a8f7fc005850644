//! The pops: ZPOPMIN, ZPOPMAX and ZMPOP, and the blocking BZPOPMIN, BZPOPMAX and BZMPOP, which
//! answer [`Reply::WouldBlock`] when every key is empty, for the member to retry them.

use super::score_reply;
use crate::kv::cmd::Ctx;
use crate::kv::cmd::args::{bulk, check_timeout, either, err, is, parse_i64, positive, syntax, to_usize};
use crate::kv::reply::Reply;

/// Popped members with their scores, in pop order.
type Popped = Vec<(Vec<u8>, f64)>;

/// Pops up to `count` members from the low end (or the high end when `highest`) of the
/// sorted set at `key`, in pop order; None when there is no such key.
fn pop_from(ctx: &mut Ctx<'_>, key: &[u8], highest: bool, count: usize) -> Result<Option<Popped>, Reply> {
    let now = ctx.now_ms;
    if ctx.db.zset(key, now)?.is_none() {
        return Ok(None);
    }
    let mut popped = Vec::new();
    if count > 0
        && let Some(zset) = ctx.db.zset_mut(key, now, false)?
    {
        while popped.len() < count
            && let Some(pair) = zset.pop(highest)
        {
            popped.push(pair);
        }
        ctx.db.drop_if_empty(key, now);
    }
    Ok(Some(popped))
}

/// Popped members as `[[member, score], ...]` (ZMPOP, BZMPOP).
fn nested_pairs(popped: Popped) -> Reply {
    Reply::Array(
        popped.into_iter().map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), score_reply(s)])).collect(),
    )
}

pub(super) fn zpopmin(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop(ctx, args, false))
}

pub(super) fn zpopmax(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop(ctx, args, true))
}

/// `ZPOPMIN|ZPOPMAX key [count]`: `[member, score, ...]`, empty for a missing key.
fn pop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], highest: bool) -> Result<Reply, Reply> {
    if args.len() > 3 {
        return Err(syntax());
    }
    let count = args.get(2).map(|c| positive(c, "value")).transpose()?.map_or(1, to_usize);
    let popped = pop_from(ctx, &args[1], highest, count)?.unwrap_or_default();
    if args.len() == 3 {
        // With a count: pairs in RESP3 (a flat array in RESP2), as Redis 7.
        return Ok(Reply::Pairs(popped.into_iter().map(|(m, s)| (Reply::Bulk(m), score_reply(s))).collect()));
    }
    Ok(Reply::Array(popped.into_iter().flat_map(|(m, s)| [Reply::Bulk(m), score_reply(s)]).collect()))
}

/// ZMPOP's and BZMPOP's `numkeys key [key ...] MIN|MAX [COUNT count]`.
struct MultiPop<'a> {
    keys: &'a [Vec<u8>],
    highest: bool,
    count: usize,
}

/// Reads a multi-key pop with `numkeys` at `args[at]`.
fn parse_multi_pop(args: &[Vec<u8>], at: usize) -> Result<MultiPop<'_>, Reply> {
    let numkeys = parse_i64(&args[at])
        .filter(|&n| n > 0)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| err("ERR numkeys should be greater than 0"))?;
    let end = (at + 1).checked_add(numkeys).filter(|&end| end < args.len()).ok_or_else(syntax)?;
    let highest = match &args[end] {
        w if is(w, "min") => false,
        w if is(w, "max") => true,
        _ => return Err(syntax()),
    };
    let mut count = None;
    let mut j = end + 1;
    while j < args.len() {
        if count.is_none() && is(&args[j], "count") && j + 1 < args.len() {
            let n = parse_i64(&args[j + 1])
                .filter(|&n| n > 0)
                .ok_or_else(|| err("ERR count should be greater than 0"))?;
            count = Some(to_usize(n));
            j += 2;
        } else {
            return Err(syntax());
        }
    }
    Ok(MultiPop { keys: &args[at + 1..end], highest, count: count.unwrap_or(1) })
}

/// Pops from the first of the keys that holds a sorted set: `[key, [[member, score], ...]]`;
/// None when none does.
fn multi_pop(ctx: &mut Ctx<'_>, pops: &MultiPop<'_>) -> Result<Option<Reply>, Reply> {
    for key in pops.keys {
        if let Some(popped) = pop_from(ctx, key, pops.highest, pops.count)? {
            return Ok(Some(Reply::Array(vec![bulk(key), nested_pairs(popped)])));
        }
    }
    Ok(None)
}

pub(super) fn zmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop_any(ctx, args, false))
}

pub(super) fn bzmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop_any(ctx, args, true))
}

/// `ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]`, and BZMPOP with the timeout first.
fn pop_any(ctx: &mut Ctx<'_>, args: &[Vec<u8>], blocking: bool) -> Result<Reply, Reply> {
    let pops = parse_multi_pop(args, if blocking { 2 } else { 1 })?;
    if blocking {
        check_timeout(&args[1])?;
    }
    Ok(multi_pop(ctx, &pops)?.unwrap_or(if blocking { Reply::WouldBlock } else { Reply::NilArray }))
}

pub(super) fn bzpopmin(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(blocking_pop(ctx, args, false))
}

pub(super) fn bzpopmax(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(blocking_pop(ctx, args, true))
}

/// `BZPOPMIN|BZPOPMAX key [key ...] timeout`: `[key, member, score]` from the first key
/// that holds a sorted set, or [`Reply::WouldBlock`].
fn blocking_pop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], highest: bool) -> Result<Reply, Reply> {
    let last = args.len() - 1;
    check_timeout(&args[last])?;
    for key in &args[1..last] {
        if let Some((member, score)) = pop_from(ctx, key, highest, 1)?.and_then(|mut p| p.pop()) {
            return Ok(Reply::Array(vec![bulk(key), Reply::Bulk(member), score_reply(score)]));
        }
    }
    Ok(Reply::WouldBlock)
}

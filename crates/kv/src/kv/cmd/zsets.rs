//! Redis 7.0's sorted-set commands (ZADD ... ZSCAN, BZPOPMIN, BZPOPMAX, BZMPOP) over
//! [`Value::ZSet`].
//!
//! Ranges come in three kinds, as in Redis: by rank (0-based, negative from the end), by
//! score (`1.5`, `(1.5` excluded, `-inf`, `+inf`) and by member (`[a`, `(a`, `-`, `+`; meant
//! for members of one score). ZRANGE reads all three with `BYSCORE`/`BYLEX`/`REV`/`LIMIT`,
//! and the older commands (ZREVRANGE, ZRANGEBYSCORE, ...) are ZRANGE with the kind and
//! direction fixed, so one parser and one selection serve them all.
//!
//! ZUNION, ZINTER and ZDIFF take plain sets too, each member with score 1. Scores are
//! written with [`format_f64`]. Random picks (ZRANDMEMBER) index the sorted set's insertion
//! order with the reader's [`super::Rng`]. The blocking pops answer [`Reply::WouldBlock`]
//! when every key is empty, and the member retries them.
//!
//! Here are the table and the replies the commands share; the commands are in `members` (ZADD,
//! ZREM and the reads of single members), `ranges`, `pops` and `combine` (ZUNION, ZINTER,
//! ZDIFF and their *STORE forms).

mod combine;
mod members;
mod pops;
mod ranges;

use super::args::{bulk, format_f64, integer};
use super::{Ctx, Spec};
use crate::kv::reply::Reply;
use crate::kv::value::Value;
use crate::kv::zset::ZSet;

/// The sorted-set commands.
pub const COMMANDS: &[Spec] = &[
    Spec::write("zadd", -4, (1, 1, 1), members::zadd),
    Spec::write("zincrby", 4, (1, 1, 1), members::zincrby),
    Spec::write("zrem", -3, (1, 1, 1), members::zrem),
    Spec::read("zcard", 2, (1, 1, 1), members::zcard),
    Spec::read("zscore", 3, (1, 1, 1), members::zscore),
    Spec::read("zmscore", -3, (1, 1, 1), members::zmscore),
    Spec::read("zrank", 3, (1, 1, 1), members::zrank),
    Spec::read("zrevrank", 3, (1, 1, 1), members::zrevrank),
    Spec::read("zcount", 4, (1, 1, 1), ranges::zcount),
    Spec::read("zlexcount", 4, (1, 1, 1), ranges::zlexcount),
    Spec::read("zrange", -4, (1, 1, 1), ranges::zrange),
    Spec::write("zrangestore", -5, (1, 2, 1), ranges::zrangestore),
    Spec::read("zrevrange", -4, (1, 1, 1), ranges::zrevrange),
    Spec::read("zrangebyscore", -4, (1, 1, 1), ranges::zrangebyscore),
    Spec::read("zrevrangebyscore", -4, (1, 1, 1), ranges::zrevrangebyscore),
    Spec::read("zrangebylex", -4, (1, 1, 1), ranges::zrangebylex),
    Spec::read("zrevrangebylex", -4, (1, 1, 1), ranges::zrevrangebylex),
    Spec::write("zremrangebyrank", 4, (1, 1, 1), ranges::zremrangebyrank),
    Spec::write("zremrangebyscore", 4, (1, 1, 1), ranges::zremrangebyscore),
    Spec::write("zremrangebylex", 4, (1, 1, 1), ranges::zremrangebylex),
    Spec::write("zpopmin", -2, (1, 1, 1), pops::zpopmin),
    Spec::write("zpopmax", -2, (1, 1, 1), pops::zpopmax),
    Spec::write("zmpop", -4, (0, 0, 0), pops::zmpop),
    Spec::read("zrandmember", -2, (1, 1, 1), members::zrandmember),
    Spec::read("zunion", -3, (0, 0, 0), combine::zunion),
    Spec::read("zinter", -3, (0, 0, 0), combine::zinter),
    Spec::read("zdiff", -3, (0, 0, 0), combine::zdiff),
    Spec::write("zunionstore", -4, (0, 0, 0), combine::zunionstore),
    Spec::write("zinterstore", -4, (0, 0, 0), combine::zinterstore),
    Spec::write("zdiffstore", -4, (0, 0, 0), combine::zdiffstore),
    Spec::read("zintercard", -3, (0, 0, 0), combine::zintercard),
    Spec::read("zscan", -3, (1, 1, 1), members::zscan),
    Spec::write("bzpopmin", -3, (1, -2, 1), pops::bzpopmin),
    Spec::write("bzpopmax", -3, (1, -2, 1), pops::bzpopmax),
    Spec::write("bzmpop", -5, (0, 0, 0), pops::bzmpop),
];

/// Members in order, with their scores.
type Members<'a> = Box<dyn Iterator<Item = (&'a [u8], f64)> + 'a>;

/// A score as Redis writes it (a double in RESP3, a bulk string in RESP2).
fn score_reply(score: f64) -> Reply {
    Reply::Double(format_f64(score))
}

/// Members, with their scores when `withscores` (pairs in RESP3, one flat array in RESP2).
fn members_reply<'a>(items: impl IntoIterator<Item = (&'a [u8], f64)>, withscores: bool) -> Reply {
    if withscores {
        return Reply::Pairs(items.into_iter().map(|(m, s)| (bulk(m), score_reply(s))).collect());
    }
    Reply::Array(items.into_iter().map(|(m, _)| bulk(m)).collect())
}

/// A sorted set of `items`.
fn to_zset<'a>(items: impl IntoIterator<Item = (&'a [u8], f64)>) -> ZSet {
    let mut zset = ZSet::new();
    for (member, score) in items {
        zset.insert(member.to_vec(), score);
    }
    zset
}

/// Puts `result` at `dst` whatever was there (deleting `dst` when it is empty); the reply
/// of every *STORE command: the result's size.
fn store(ctx: &mut Ctx<'_>, dst: &[u8], result: ZSet) -> Reply {
    let count = result.len();
    ctx.db.store(dst, Value::ZSet(Box::new(result)), ctx.now_ms);
    integer(count)
}

#[cfg(test)]
mod tests;

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

use indexmap::{IndexMap, IndexSet};

use super::args::{
    bulk, check_timeout, either, empty, err, float, format_f64, int, integer, is, parse_f64, parse_i64,
    positive, span, syntax, to_usize,
};
use super::sets::{card_limit, sample, signed_count};
use super::{Ctx, Spec, View, scan};
use crate::kv::db::Db;
use crate::kv::reply::Reply;
use crate::kv::value::{Value, WRONGTYPE};
use crate::kv::zset::ZSet;

/// The sorted-set commands.
pub const COMMANDS: &[Spec] = &[
    Spec::write("zadd", -4, (1, 1, 1), zadd),
    Spec::write("zincrby", 4, (1, 1, 1), zincrby),
    Spec::write("zrem", -3, (1, 1, 1), zrem),
    Spec::read("zcard", 2, (1, 1, 1), zcard),
    Spec::read("zscore", 3, (1, 1, 1), zscore),
    Spec::read("zmscore", -3, (1, 1, 1), zmscore),
    Spec::read("zrank", 3, (1, 1, 1), zrank),
    Spec::read("zrevrank", 3, (1, 1, 1), zrevrank),
    Spec::read("zcount", 4, (1, 1, 1), zcount),
    Spec::read("zlexcount", 4, (1, 1, 1), zlexcount),
    Spec::read("zrange", -4, (1, 1, 1), zrange),
    Spec::write("zrangestore", -5, (1, 2, 1), zrangestore),
    Spec::read("zrevrange", -4, (1, 1, 1), zrevrange),
    Spec::read("zrangebyscore", -4, (1, 1, 1), zrangebyscore),
    Spec::read("zrevrangebyscore", -4, (1, 1, 1), zrevrangebyscore),
    Spec::read("zrangebylex", -4, (1, 1, 1), zrangebylex),
    Spec::read("zrevrangebylex", -4, (1, 1, 1), zrevrangebylex),
    Spec::write("zremrangebyrank", 4, (1, 1, 1), zremrangebyrank),
    Spec::write("zremrangebyscore", 4, (1, 1, 1), zremrangebyscore),
    Spec::write("zremrangebylex", 4, (1, 1, 1), zremrangebylex),
    Spec::write("zpopmin", -2, (1, 1, 1), zpopmin),
    Spec::write("zpopmax", -2, (1, 1, 1), zpopmax),
    Spec::write("zmpop", -4, (0, 0, 0), zmpop),
    Spec::read("zrandmember", -2, (1, 1, 1), zrandmember),
    Spec::read("zunion", -3, (0, 0, 0), zunion),
    Spec::read("zinter", -3, (0, 0, 0), zinter),
    Spec::read("zdiff", -3, (0, 0, 0), zdiff),
    Spec::write("zunionstore", -4, (0, 0, 0), zunionstore),
    Spec::write("zinterstore", -4, (0, 0, 0), zinterstore),
    Spec::write("zdiffstore", -4, (0, 0, 0), zdiffstore),
    Spec::read("zintercard", -3, (0, 0, 0), zintercard),
    Spec::read("zscan", -3, (1, 1, 1), zscan),
    Spec::write("bzpopmin", -3, (1, -2, 1), bzpopmin),
    Spec::write("bzpopmax", -3, (1, -2, 1), bzpopmax),
    Spec::write("bzmpop", -5, (0, 0, 0), bzmpop),
];

/// Members in order, with their scores.
type Members<'a> = Box<dyn Iterator<Item = (&'a [u8], f64)> + 'a>;

/// Popped members with their scores, in pop order.
type Popped = Vec<(Vec<u8>, f64)>;

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
    ctx.db.store(dst, Value::ZSet(result), ctx.now_ms);
    integer(count)
}

// ---------------------------------------------------------------------------------------
// Ranges.

/// A score range, each end included or not.
#[derive(Debug, Clone, Copy)]
struct ScoreRange {
    min: f64,
    min_exclusive: bool,
    max: f64,
    max_exclusive: bool,
}

impl ScoreRange {
    /// Reads `min` and `max` (`(` excludes an end).
    fn parse(min: &[u8], max: &[u8]) -> Result<Self, Reply> {
        fn end(arg: &[u8]) -> Option<(f64, bool)> {
            match arg {
                [b'(', rest @ ..] => parse_f64(rest).map(|v| (v, true)),
                _ => parse_f64(arg).map(|v| (v, false)),
            }
        }
        match (end(min), end(max)) {
            (Some((min, min_exclusive)), Some((max, max_exclusive))) => {
                Ok(ScoreRange { min, min_exclusive, max, max_exclusive })
            }
            _ => Err(err("ERR min or max is not a float")),
        }
    }

    /// The members in the range, lowest first.
    fn members(self, zset: &ZSet) -> impl DoubleEndedIterator<Item = (&[u8], f64)> {
        zset.between(self.min, self.min_exclusive, self.max, self.max_exclusive)
    }
}

/// One end of a member (lex) range.
#[derive(Debug, Clone, Copy)]
enum LexEnd<'a> {
    /// `-`: below every member.
    Least,
    /// `+`: above every member.
    Greatest,
    /// `[m`.
    Included(&'a [u8]),
    /// `(m`.
    Excluded(&'a [u8]),
}

/// A member range, for members that share one score (Redis leaves other cases unspecified;
/// here the walk is in score order).
#[derive(Debug, Clone, Copy)]
struct LexRange<'a> {
    min: LexEnd<'a>,
    max: LexEnd<'a>,
}

impl<'a> LexRange<'a> {
    /// Reads `min` and `max`.
    fn parse(min: &'a [u8], max: &'a [u8]) -> Result<Self, Reply> {
        fn end(arg: &[u8]) -> Option<LexEnd<'_>> {
            match arg {
                b"-" => Some(LexEnd::Least),
                b"+" => Some(LexEnd::Greatest),
                [b'[', rest @ ..] => Some(LexEnd::Included(rest)),
                [b'(', rest @ ..] => Some(LexEnd::Excluded(rest)),
                _ => None,
            }
        }
        match (end(min), end(max)) {
            (Some(min), Some(max)) => Ok(LexRange { min, max }),
            _ => Err(err("ERR min or max not valid string range item")),
        }
    }

    /// Whether `member` is not below the range.
    fn above_min(&self, member: &[u8]) -> bool {
        match self.min {
            LexEnd::Least => true,
            LexEnd::Greatest => false,
            LexEnd::Included(m) => member >= m,
            LexEnd::Excluded(m) => member > m,
        }
    }

    /// Whether `member` is not above the range.
    fn below_max(&self, member: &[u8]) -> bool {
        match self.max {
            LexEnd::Least => false,
            LexEnd::Greatest => true,
            LexEnd::Included(m) => member <= m,
            LexEnd::Excluded(m) => member < m,
        }
    }

    /// The members in the range, lowest first or, when `rev`, highest first.
    fn members(self, zset: &'a ZSet, rev: bool) -> Members<'a> {
        if rev {
            Box::new(
                zset.iter()
                    .rev()
                    .skip_while(move |(m, _)| !self.below_max(m))
                    .take_while(move |(m, _)| self.above_min(m)),
            )
        } else {
            Box::new(
                zset.iter()
                    .skip_while(move |(m, _)| !self.above_min(m))
                    .take_while(move |(m, _)| self.below_max(m)),
            )
        }
    }
}

/// The kind of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A range of one kind.
#[derive(Debug, Clone, Copy)]
enum Span<'a> {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange<'a>),
}

impl<'a> Span<'a> {
    /// Reads a range of kind `by` from its two ends (lower end first).
    fn parse(by: By, min: &'a [u8], max: &'a [u8]) -> Result<Self, Reply> {
        Ok(match by {
            By::Rank => Span::Rank(int(min)?, int(max)?),
            By::Score => Span::Score(ScoreRange::parse(min, max)?),
            By::Lex => Span::Lex(LexRange::parse(min, max)?),
        })
    }
}

/// What a ZRANGE-family command selects and how it answers.
#[derive(Debug, Clone, Copy)]
struct RangeQuery<'a> {
    span: Span<'a>,
    rev: bool,
    /// LIMIT's offset (negative: nothing) and count (negative: no limit).
    offset: i64,
    count: i64,
    withscores: bool,
}

impl<'a> RangeQuery<'a> {
    /// A whole range, lowest first, as ZREMRANGEBY* remove it.
    fn whole(span: Span<'a>) -> Self {
        RangeQuery { span, rev: false, offset: 0, count: -1, withscores: false }
    }

    /// The selected members in reply order.
    fn select(self, zset: &'a ZSet) -> Vec<(&'a [u8], f64)> {
        let members: Members<'a> = match self.span {
            Span::Rank(start, end) => {
                let Some((start, end)) = span(zset.len(), start, end) else { return Vec::new() };
                let taken = end - start + 1;
                return if self.rev {
                    zset.iter().rev().skip(start).take(taken).collect()
                } else {
                    zset.iter().skip(start).take(taken).collect()
                };
            }
            Span::Score(range) if self.rev => Box::new(range.members(zset).rev()),
            Span::Score(range) => Box::new(range.members(zset)),
            Span::Lex(range) => range.members(zset, self.rev),
        };
        let Ok(offset) = usize::try_from(self.offset) else { return Vec::new() };
        let count = to_usize(self.count);
        members.skip(offset).take(count).collect()
    }
}

/// Reads `<key> <min> <max> [BYSCORE|BYLEX] [REV] [WITHSCORES] [LIMIT offset count]` with
/// the key at `args[at]`, as ZRANGE does. The older commands preset `by` and `rev` (and
/// then refuse those options); ZRANGESTORE (`store`) refuses WITHSCORES.
fn parse_range(
    args: &[Vec<u8>],
    at: usize,
    by: Option<By>,
    rev: Option<bool>,
    store: bool,
) -> Result<RangeQuery<'_>, Reply> {
    let (mut by, mut rev) = (by, rev);
    let (mut withscores, mut offset, mut count) = (false, 0, -1);
    let mut j = at + 3;
    while j < args.len() {
        let arg = &args[j];
        if !store && is(arg, "withscores") {
            withscores = true;
        } else if is(arg, "limit") && j + 2 < args.len() {
            offset = int(&args[j + 1])?;
            count = int(&args[j + 2])?;
            j += 2;
        } else if rev.is_none() && is(arg, "rev") {
            rev = Some(true);
        } else if by.is_none() && is(arg, "bylex") {
            by = Some(By::Lex);
        } else if by.is_none() && is(arg, "byscore") {
            by = Some(By::Score);
        } else {
            return Err(syntax());
        }
        j += 1;
    }
    let by = by.unwrap_or(By::Rank);
    let rev = rev.unwrap_or(false);
    if count != -1 && by == By::Rank {
        return Err(err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && by == By::Lex {
        return Err(err("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    // A reversed score or lex range is written high end first.
    let (min, max) =
        if rev && by != By::Rank { (&args[at + 2], &args[at + 1]) } else { (&args[at + 1], &args[at + 2]) };
    Ok(RangeQuery { span: Span::parse(by, min, max)?, rev, offset, count, withscores })
}

/// ZRANGE and the older read forms.
fn read_range(view: &View<'_>, args: &[Vec<u8>], by: Option<By>, rev: Option<bool>) -> Reply {
    either(select_range(view, args, by, rev))
}

fn select_range(
    view: &View<'_>,
    args: &[Vec<u8>],
    by: Option<By>,
    rev: Option<bool>,
) -> Result<Reply, Reply> {
    let query = parse_range(args, 1, by, rev, false)?;
    Ok(match view.db.zset(&args[1], view.now_ms)? {
        Some(zset) => members_reply(query.select(zset), query.withscores),
        None => empty(),
    })
}

fn zrange(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, None, None)
}

fn zrevrange(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Rank), Some(true))
}

fn zrangebyscore(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Score), Some(false))
}

fn zrevrangebyscore(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Score), Some(true))
}

fn zrangebylex(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Lex), Some(false))
}

fn zrevrangebylex(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Lex), Some(true))
}

fn zrangestore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(store_range(ctx, args))
}

/// `ZRANGESTORE dst src min max ...`.
fn store_range(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let query = parse_range(args, 2, None, None, true)?;
    let result = match ctx.db.zset(&args[2], ctx.now_ms)? {
        Some(zset) => to_zset(query.select(zset)),
        None => ZSet::new(),
    };
    Ok(store(ctx, &args[1], result))
}

fn zcount(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(count_range(view, args, By::Score))
}

fn zlexcount(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(count_range(view, args, By::Lex))
}

/// `ZCOUNT|ZLEXCOUNT key min max`.
fn count_range(view: &View<'_>, args: &[Vec<u8>], by: By) -> Result<Reply, Reply> {
    let query = RangeQuery::whole(Span::parse(by, &args[2], &args[3])?);
    Ok(integer(view.db.zset(&args[1], view.now_ms)?.map_or(0, |zset| query.select(zset).len())))
}

fn zremrangebyrank(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(remove_range(ctx, args, By::Rank))
}

fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(remove_range(ctx, args, By::Score))
}

fn zremrangebylex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(remove_range(ctx, args, By::Lex))
}

/// `ZREMRANGEBY{RANK,SCORE,LEX} key min max`.
fn remove_range(ctx: &mut Ctx<'_>, args: &[Vec<u8>], by: By) -> Result<Reply, Reply> {
    let query = RangeQuery::whole(Span::parse(by, &args[2], &args[3])?);
    let (key, now) = (&args[1], ctx.now_ms);
    let doomed: Vec<Vec<u8>> = match ctx.db.zset(key, now)? {
        Some(zset) => query.select(zset).into_iter().map(|(m, _)| m.to_vec()).collect(),
        None => return Ok(integer(0)),
    };
    if doomed.is_empty() {
        return Ok(integer(0));
    }
    if let Some(zset) = ctx.db.zset_mut(key, now, false)? {
        for member in &doomed {
            zset.remove(member);
        }
    }
    ctx.db.drop_if_empty(key, now);
    Ok(integer(doomed.len()))
}

// ---------------------------------------------------------------------------------------
// Adding, removing, reading members.

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

fn zadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(add(ctx, args, false))
}

fn zincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
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

fn zrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
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

fn zcard(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(view.db.zset(&args[1], view.now_ms).map(|z| integer(z.map_or(0, ZSet::len))))
}

fn zscore(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        view.db
            .zset(&args[1], view.now_ms)
            .map(|z| z.and_then(|z| z.score(&args[2])).map_or(Reply::Nil, score_reply)),
    )
}

fn zmscore(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(view.db.zset(&args[1], view.now_ms).map(|z| {
        Reply::Array(
            args[2..].iter().map(|m| z.and_then(|z| z.score(m)).map_or(Reply::Nil, score_reply)).collect(),
        )
    }))
}

fn zrank(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    rank(view, args, false)
}

fn zrevrank(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    rank(view, args, true)
}

/// ZRANK and ZREVRANK.
fn rank(view: &View<'_>, args: &[Vec<u8>], rev: bool) -> Reply {
    either(view.db.zset(&args[1], view.now_ms).map(|z| {
        z.and_then(|z| z.rank(&args[2]).map(|r| if rev { z.len() - 1 - r } else { r }))
            .map_or(Reply::Nil, integer)
    }))
}

fn zrandmember(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
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

fn zscan(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(scan_members(view, args))
}

fn scan_members(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (cursor, options) = scan::parse(&args[2], &args[3..], false)?;
    let Some(zset) = view.db.zset(&args[1], view.now_ms)? else { return Ok(scan::reply(0, Vec::new())) };
    let (next, found) = scan::page(zset.iter().map(|(m, s)| (m, (m, s))), cursor, &options);
    Ok(scan::reply(next, found.into_iter().flat_map(|(m, s)| [bulk(m), score_reply(s)]).collect()))
}

// ---------------------------------------------------------------------------------------
// Pops.

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

fn zpopmin(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop(ctx, args, false))
}

fn zpopmax(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
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

fn zmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop_any(ctx, args, false))
}

fn bzmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
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

fn bzpopmin(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(blocking_pop(ctx, args, false))
}

fn bzpopmax(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
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

// ---------------------------------------------------------------------------------------
// Union, intersection, difference.

/// The algebra of ZUNION, ZINTER and ZDIFF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

/// What a combining command does with its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    /// ZUNION, ZINTER, ZDIFF: answers it (WITHSCORES allowed).
    Reply,
    /// The *STORE forms.
    Store,
    /// ZINTERCARD: counts it (LIMIT allowed).
    Card,
}

/// How scores of one member in several inputs combine.
#[derive(Debug, Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// `acc` combined with `value` (a sum that is NaN, from inf - inf, is 0, as in Redis).
    fn fold(self, acc: f64, value: f64) -> f64 {
        match self {
            Aggregate::Sum => zero_nan(acc + value),
            Aggregate::Min => acc.min(value),
            Aggregate::Max => acc.max(value),
        }
    }
}

/// `value`, or 0 where it is NaN.
fn zero_nan(value: f64) -> f64 {
    if value.is_nan() { 0.0 } else { value }
}

/// `score * weight`, 0 where that is NaN (an infinite score weighted 0).
fn weighted(score: f64, weight: f64) -> f64 {
    zero_nan(score * weight)
}

/// An input of ZUNION and the like: a sorted set, a set (scores 1) or nothing.
#[derive(Clone, Copy)]
enum Source<'a> {
    Missing,
    Set(&'a IndexSet<Vec<u8>>),
    Sorted(&'a ZSet),
}

impl<'a> Source<'a> {
    /// The input at `key`; WRONGTYPE for a key that is neither a set nor a sorted set.
    fn load(db: &'a Db, key: &[u8], now: u64) -> Result<Self, Reply> {
        Ok(match db.value(key, now) {
            None => Source::Missing,
            Some(Value::Set(set)) => Source::Set(set),
            Some(Value::ZSet(zset)) => Source::Sorted(zset),
            Some(_) => return Err(err(WRONGTYPE)),
        })
    }

    fn len(self) -> usize {
        match self {
            Source::Missing => 0,
            Source::Set(set) => set.len(),
            Source::Sorted(zset) => zset.len(),
        }
    }

    fn score(self, member: &[u8]) -> Option<f64> {
        match self {
            Source::Missing => None,
            Source::Set(set) => set.contains(member).then_some(1.0),
            Source::Sorted(zset) => zset.score(member),
        }
    }

    fn members(self) -> Members<'a> {
        match self {
            Source::Missing => Box::new(std::iter::empty()),
            Source::Set(set) => Box::new(set.iter().map(|m| (m.as_slice(), 1.0))),
            Source::Sorted(zset) => Box::new(zset.iter()),
        }
    }
}

/// A parsed combining command: its inputs and options.
struct Combine<'a> {
    sources: Vec<Source<'a>>,
    weights: Vec<f64>,
    aggregate: Aggregate,
    withscores: bool,
    /// ZINTERCARD's LIMIT (0: none).
    limit: usize,
}

impl<'a> Combine<'a> {
    /// Reads `numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]`
    /// (or `[LIMIT n]` for ZINTERCARD) with `numkeys` at `args[at]`, loading the inputs
    /// before the options as Redis does (so WRONGTYPE comes first).
    fn parse(
        db: &'a Db,
        now: u64,
        args: &[Vec<u8>],
        at: usize,
        op: SetOp,
        output: Output,
    ) -> Result<Self, Reply> {
        let numkeys = int(&args[at])?;
        if numkeys < 1 {
            let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
            return Err(err(format!("ERR at least 1 input key is needed for '{name}' command")));
        }
        let first = at + 1;
        let numkeys =
            usize::try_from(numkeys).ok().filter(|&n| n <= args.len() - first).ok_or_else(syntax)?;
        let sources = args[first..first + numkeys]
            .iter()
            .map(|key| Source::load(db, key, now))
            .collect::<Result<Vec<_>, _>>()?;
        let mut combine = Combine {
            sources,
            weights: vec![1.0; numkeys],
            aggregate: Aggregate::Sum,
            withscores: false,
            limit: 0,
        };
        let scored = op != SetOp::Diff && output != Output::Card;
        let mut j = first + numkeys;
        while j < args.len() {
            let (arg, remaining) = (&args[j], args.len() - j);
            if scored && remaining > numkeys && is(arg, "weights") {
                for (weight, text) in combine.weights.iter_mut().zip(&args[j + 1..]) {
                    *weight = parse_f64(text).ok_or_else(|| err("ERR weight value is not a float"))?;
                }
                j += 1 + numkeys;
            } else if scored && remaining >= 2 && is(arg, "aggregate") {
                combine.aggregate = match &args[j + 1] {
                    a if is(a, "sum") => Aggregate::Sum,
                    a if is(a, "min") => Aggregate::Min,
                    a if is(a, "max") => Aggregate::Max,
                    _ => return Err(syntax()),
                };
                j += 2;
            } else if output == Output::Reply && is(arg, "withscores") {
                combine.withscores = true;
                j += 1;
            } else if output == Output::Card && remaining >= 2 && is(arg, "limit") {
                combine.limit = card_limit(&args[j + 1])?;
                j += 2;
            } else {
                return Err(syntax());
            }
        }
        Ok(combine)
    }

    /// The result of `op`.
    fn result(&self, op: SetOp) -> ZSet {
        match op {
            SetOp::Union => self.union(),
            SetOp::Inter => {
                let mut result = ZSet::new();
                self.intersect(|member, score| {
                    result.insert(member.to_vec(), score);
                    true
                });
                result
            }
            SetOp::Diff => self.difference(),
        }
    }

    /// The inputs with their weights, smallest first (the order Redis folds scores in).
    fn by_size(&self) -> Vec<(Source<'a>, f64)> {
        let mut sources: Vec<(Source<'a>, f64)> =
            self.sources.iter().copied().zip(self.weights.iter().copied()).collect();
        sources.sort_by_key(|(source, _)| source.len());
        sources
    }

    fn union(&self) -> ZSet {
        let mut scores: IndexMap<&'a [u8], f64> = IndexMap::new();
        for (source, weight) in self.by_size() {
            for (member, score) in source.members() {
                let value = weighted(score, weight);
                scores
                    .entry(member)
                    .and_modify(|acc| *acc = self.aggregate.fold(*acc, value))
                    .or_insert(value);
            }
        }
        to_zset(scores)
    }

    /// Calls `visit` with each member of every input and its combined score, until it
    /// answers false.
    fn intersect(&self, mut visit: impl FnMut(&'a [u8], f64) -> bool) {
        let sources = self.by_size();
        let Some((&(smallest, weight), rest)) = sources.split_first() else { return };
        for (member, score) in smallest.members() {
            let combined = rest.iter().try_fold(weighted(score, weight), |acc, &(source, weight)| {
                source.score(member).map(|s| self.aggregate.fold(acc, s * weight))
            });
            if let Some(combined) = combined
                && !visit(member, combined)
            {
                return;
            }
        }
    }

    fn difference(&self) -> ZSet {
        let Some((&first, rest)) = self.sources.split_first() else { return ZSet::new() };
        to_zset(
            first.members().filter(|(member, _)| rest.iter().all(|source| source.score(member).is_none())),
        )
    }
}

/// ZUNION, ZINTER, ZDIFF.
fn combine_read(view: &View<'_>, args: &[Vec<u8>], op: SetOp) -> Reply {
    either(Combine::parse(view.db, view.now_ms, args, 1, op, Output::Reply).map(|combine| {
        let result = combine.result(op);
        members_reply(result.iter(), combine.withscores)
    }))
}

/// ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE.
fn combine_store(ctx: &mut Ctx<'_>, args: &[Vec<u8>], op: SetOp) -> Reply {
    let result = match Combine::parse(ctx.db, ctx.now_ms, args, 2, op, Output::Store) {
        Ok(combine) => combine.result(op),
        Err(e) => return e,
    };
    store(ctx, &args[1], result)
}

fn zunion(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    combine_read(view, args, SetOp::Union)
}

fn zinter(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    combine_read(view, args, SetOp::Inter)
}

fn zdiff(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    combine_read(view, args, SetOp::Diff)
}

fn zunionstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    combine_store(ctx, args, SetOp::Union)
}

fn zinterstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    combine_store(ctx, args, SetOp::Inter)
}

fn zdiffstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    combine_store(ctx, args, SetOp::Diff)
}

fn zintercard(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(Combine::parse(view.db, view.now_ms, args, 1, SetOp::Inter, Output::Card).map(|combine| {
        let mut count = 0;
        combine.intersect(|_, _| {
            count += 1;
            combine.limit == 0 || count < combine.limit
        });
        integer(count)
    }))
}

#[cfg(test)]
mod tests {
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
        assert_eq!(
            exec(&mut db, "ZRANGE z 10 0 BYSCORE REV LIMIT 0 2 WITHSCORES"),
            arr(&["f", "5", "e", "4"])
        );
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
        assert_eq!(
            exec(&mut db, "ZRANGEBYLEX l foo [bar"),
            err("ERR min or max not valid string range item")
        );
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
        assert_eq!(
            exec(&mut db, "ZRANGE out 0 -1 WITHSCORES"),
            arr(&["a", "2", "b", "7", "d", "9", "c", "12"])
        );
        assert_eq!(exec(&mut db, "ZINTER 2 a b AGGREGATE MAX WITHSCORES"), arr(&["b", "2", "c", "3"]));
        assert_eq!(exec(&mut db, "ZINTERSTORE out 2 s b WEIGHTS 2 3"), int(2));
        assert_eq!(exec(&mut db, "ZRANGE out 0 -1 WITHSCORES"), arr(&["b", "5", "c", "8"]));
        assert_eq!(exec(&mut db, "ZDIFF 2 a b WITHSCORES"), arr(&["a", "1"]));
        assert_eq!(exec(&mut db, "ZDIFFSTORE out 2 a a"), int(0));
        assert!(!exists(&db, "out"));
        assert_eq!(exec(&mut db, "ZINTERCARD 2 a b"), int(2));
        assert_eq!(exec(&mut db, "ZINTERCARD 2 a b LIMIT 1"), int(1));
        assert_eq!(exec(&mut db, "ZINTERCARD 1 a LIMIT -1"), err("ERR LIMIT can't be negative"));
        assert_eq!(
            exec(&mut db, "ZUNION 0 a"),
            err("ERR at least 1 input key is needed for 'zunion' command")
        );
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
}

//! Ranges of a sorted set, by rank, by score or by member, as Redis reads them: one parser
//! (ZRANGE's, whose options the older ZREVRANGE, ZRANGEBYSCORE, ... preset) and one selection,
//! which ZRANGESTORE, ZCOUNT, ZLEXCOUNT and the ZREMRANGEBY* commands share.

use super::{Members, members_reply, store, to_zset};
use crate::kv::cmd::args::{either, empty, err, int, integer, is, parse_f64, span, syntax, to_usize};
use crate::kv::cmd::{Ctx, View};
use crate::kv::reply::Reply;
use crate::kv::zset::ZSet;

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

pub(super) fn zrange(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, None, None)
}

pub(super) fn zrevrange(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Rank), Some(true))
}

pub(super) fn zrangebyscore(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Score), Some(false))
}

pub(super) fn zrevrangebyscore(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Score), Some(true))
}

pub(super) fn zrangebylex(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Lex), Some(false))
}

pub(super) fn zrevrangebylex(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    read_range(view, args, Some(By::Lex), Some(true))
}

pub(super) fn zrangestore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
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

pub(super) fn zcount(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(count_range(view, args, By::Score))
}

pub(super) fn zlexcount(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(count_range(view, args, By::Lex))
}

/// `ZCOUNT|ZLEXCOUNT key min max`.
fn count_range(view: &View<'_>, args: &[Vec<u8>], by: By) -> Result<Reply, Reply> {
    let query = RangeQuery::whole(Span::parse(by, &args[2], &args[3])?);
    Ok(integer(view.db.zset(&args[1], view.now_ms)?.map_or(0, |zset| query.select(zset).len())))
}

pub(super) fn zremrangebyrank(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(remove_range(ctx, args, By::Rank))
}

pub(super) fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(remove_range(ctx, args, By::Score))
}

pub(super) fn zremrangebylex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
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

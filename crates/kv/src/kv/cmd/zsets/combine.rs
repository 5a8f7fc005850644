//! ZUNION, ZINTER and ZDIFF, their *STORE forms and ZINTERCARD: inputs that are sorted sets or
//! plain sets (each member scored 1), weighted and aggregated as Redis folds them, smallest
//! input first.

use indexmap::{IndexMap, IndexSet};

use super::{Members, members_reply, store, to_zset};
use crate::kv::cmd::args::{either, err, int, integer, is, parse_f64, syntax};
use crate::kv::cmd::sets::card_limit;
use crate::kv::cmd::{Ctx, View};
use crate::kv::db::Db;
use crate::kv::reply::Reply;
use crate::kv::value::{Value, WRONGTYPE};
use crate::kv::zset::ZSet;

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

pub(super) fn zunion(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    combine_read(view, args, SetOp::Union)
}

pub(super) fn zinter(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    combine_read(view, args, SetOp::Inter)
}

pub(super) fn zdiff(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    combine_read(view, args, SetOp::Diff)
}

pub(super) fn zunionstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    combine_store(ctx, args, SetOp::Union)
}

pub(super) fn zinterstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    combine_store(ctx, args, SetOp::Inter)
}

pub(super) fn zdiffstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    combine_store(ctx, args, SetOp::Diff)
}

pub(super) fn zintercard(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(Combine::parse(view.db, view.now_ms, args, 1, SetOp::Inter, Output::Card).map(|combine| {
        let mut count = 0;
        combine.intersect(|_, _| {
            count += 1;
            combine.limit == 0 || count < combine.limit
        });
        integer(count)
    }))
}

//! The list commands of Redis 7.0: pushes (LPUSH, RPUSH, LPUSHX, RPUSHX), pops (LPOP, RPOP,
//! LMPOP), moves (RPOPLPUSH, LMOVE), reads (LLEN, LINDEX, LRANGE, LPOS), edits (LSET, LTRIM,
//! LREM, LINSERT) and the blocking forms (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP).
//!
//! A list is a [`VecDeque`], so both ends are cheap. A list left empty is removed, as Redis
//! does. The blocking forms do here only what their non-blocking forms do when there is
//! something to take; when there is not, they answer [`Reply::WouldBlock`] and the store keeps
//! the client waiting ([`crate::kv::blocked`]), runs the command again when a write gives its
//! keys data, and its member proposes the timeout. They check the timeout's text, so a bad one
//! is refused at once.

use std::collections::VecDeque;

use crate::kv::reply::Reply;

use super::args::{
    bulk, bulks, check_timeout, either, empty, err, int, int_in, integer, is, span, syntax, to_usize,
    wrong_arity,
};
use super::{Ctx, Spec, View};

/// A list's contents.
type List = VecDeque<Vec<u8>>;

/// The list commands, with Redis 7.0's arities and key positions.
pub const COMMANDS: &[Spec] = &[
    Spec::write("lpush", -3, (1, 1, 1), lpush),
    Spec::write("rpush", -3, (1, 1, 1), rpush),
    Spec::write("lpushx", -3, (1, 1, 1), lpushx),
    Spec::write("rpushx", -3, (1, 1, 1), rpushx),
    Spec::write("lpop", -2, (1, 1, 1), lpop),
    Spec::write("rpop", -2, (1, 1, 1), rpop),
    Spec::read("llen", 2, (1, 1, 1), llen),
    Spec::read("lindex", 3, (1, 1, 1), lindex),
    Spec::write("lset", 4, (1, 1, 1), lset),
    Spec::read("lrange", 4, (1, 1, 1), lrange),
    Spec::write("ltrim", 4, (1, 1, 1), ltrim),
    Spec::write("lrem", 4, (1, 1, 1), lrem),
    Spec::write("linsert", 5, (1, 1, 1), linsert),
    Spec::read("lpos", -3, (1, 1, 1), lpos),
    Spec::write("rpoplpush", 3, (1, 2, 1), rpoplpush),
    Spec::write("lmove", 5, (1, 2, 1), lmove),
    Spec::write("lmpop", -4, (0, 0, 0), lmpop),
    Spec::write("blpop", -3, (1, -2, 1), blpop),
    Spec::write("brpop", -3, (1, -2, 1), brpop),
    Spec::write("brpoplpush", 4, (1, 2, 1), brpoplpush),
    Spec::write("blmove", 6, (1, 2, 1), blmove),
    Spec::write("blmpop", -5, (0, 0, 0), blmpop),
];

/// One end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The head (LEFT, index 0).
    Left,
    /// The tail (RIGHT, index -1).
    Right,
}

impl End {
    /// `LEFT` or `RIGHT` (any case); a syntax error otherwise.
    fn parse(arg: &[u8]) -> Result<End, Reply> {
        if is(arg, "left") {
            Ok(End::Left)
        } else if is(arg, "right") {
            Ok(End::Right)
        } else {
            Err(syntax())
        }
    }

    fn pop(self, list: &mut List) -> Option<Vec<u8>> {
        match self {
            End::Left => list.pop_front(),
            End::Right => list.pop_back(),
        }
    }

    fn push(self, list: &mut List, value: Vec<u8>) {
        match self {
            End::Left => list.push_front(value),
            End::Right => list.push_back(value),
        }
    }
}

/// The position `index` (negative from the end) names in a list of `len`, if inside it.
fn position(len: usize, index: i64) -> Option<usize> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let index = if index < 0 { index.saturating_add(len) } else { index };
    (0..len).contains(&index).then_some(index as usize)
}

/// The list at `key` to change, created empty if absent: only for a caller that will put an
/// element in it.
fn list_to_fill<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<&'a mut List, Reply> {
    let now = ctx.now_ms;
    ctx.db.list_mut(key, now, true)?.ok_or_else(|| err("ERR no such key"))
}

/// Whether `key` holds a list with something in it; WRONGTYPE for another type.
fn has_elements(ctx: &Ctx<'_>, key: &[u8]) -> Result<bool, Reply> {
    Ok(ctx.db.list(key, ctx.now_ms)?.is_some_and(|l| !l.is_empty()))
}

/// Pops up to `count` elements from `end` of the list at `key`, in the order popped, and
/// removes the key if that empties it.
fn pop_some(ctx: &mut Ctx<'_>, key: &[u8], end: End, count: usize) -> Result<Vec<Vec<u8>>, Reply> {
    let now = ctx.now_ms;
    let popped = match ctx.db.list_mut(key, now, false)? {
        Some(list) => {
            let n = count.min(list.len());
            (0..n).filter_map(|_| end.pop(list)).collect()
        }
        None => Vec::new(),
    };
    ctx.db.drop_if_empty(key, now);
    Ok(popped)
}

// ----- pushes -----

/// LPUSH, RPUSH, LPUSHX and RPUSHX: the list's length after, 0 for an X form on no key.
fn push(ctx: &mut Ctx<'_>, args: &[Vec<u8>], end: End, only_existing: bool) -> Result<Reply, Reply> {
    if ctx.db.list(&args[1], ctx.now_ms)?.is_none() && only_existing {
        return Ok(Reply::Integer(0));
    }
    let list = list_to_fill(ctx, &args[1])?;
    for value in &args[2..] {
        end.push(list, value.clone());
    }
    Ok(integer(list.len()))
}

/// `LPUSH key element [element ...]`.
fn lpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(push(ctx, args, End::Left, false))
}

/// `RPUSH key element [element ...]`.
fn rpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(push(ctx, args, End::Right, false))
}

/// `LPUSHX key element [element ...]`.
fn lpushx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(push(ctx, args, End::Left, true))
}

/// `RPUSHX key element [element ...]`.
fn rpushx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(push(ctx, args, End::Right, true))
}

// ----- pops -----

/// LPOP and RPOP: without a count, one element or nil; with one, an array (nil array when
/// there is no key, empty for a count of 0).
fn pop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], end: End, name: &str) -> Result<Reply, Reply> {
    if args.len() > 3 {
        return Err(wrong_arity(name));
    }
    let count = args
        .get(2)
        .map(|arg| int_in(arg, 0, i64::MAX, "value is out of range, must be positive"))
        .transpose()?;
    if !has_elements(ctx, &args[1])? {
        return Ok(if count.is_some() { Reply::NilArray } else { Reply::Nil });
    }
    Ok(match count {
        None => pop_some(ctx, &args[1], end, 1)?.pop().map_or(Reply::Nil, Reply::Bulk),
        Some(0) => empty(),
        Some(n) => {
            let popped = pop_some(ctx, &args[1], end, to_usize(n))?;
            Reply::Array(popped.into_iter().map(Reply::Bulk).collect())
        }
    })
}

/// `LPOP key [count]`.
fn lpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop(ctx, args, End::Left, "lpop"))
}

/// `RPOP key [count]`.
fn rpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(pop(ctx, args, End::Right, "rpop"))
}

/// The arguments of LMPOP and BLMPOP after the command's own: `numkeys key [key ...]
/// LEFT|RIGHT [COUNT count]`, from `args[at]`.
struct MultiPop<'a> {
    keys: &'a [Vec<u8>],
    end: End,
    count: usize,
}

impl<'a> MultiPop<'a> {
    fn parse(args: &'a [Vec<u8>], at: usize) -> Result<Self, Reply> {
        let numkeys = int_in(&args[at], 1, i64::MAX, "numkeys should be greater than 0")?;
        let where_at = usize::try_from(numkeys)
            .ok()
            .and_then(|n| n.checked_add(at + 1))
            .filter(|&i| i < args.len())
            .ok_or_else(syntax)?;
        let end = End::parse(&args[where_at])?;
        let mut count = None;
        let mut i = where_at + 1;
        while i < args.len() {
            match args.get(i + 1) {
                Some(value) if count.is_none() && is(&args[i], "count") => {
                    count = Some(int_in(value, 1, i64::MAX, "count should be greater than 0")?);
                }
                _ => return Err(syntax()),
            }
            i += 2;
        }
        let count = count.map_or(1, to_usize);
        Ok(MultiPop { keys: &args[at + 1..where_at], end, count })
    }

    /// Pops from the first key holding a non-empty list: `[key, [elements]]`, or `None` when
    /// none does. A key of another type met before that one is an error.
    fn run(&self, ctx: &mut Ctx<'_>) -> Result<Option<Reply>, Reply> {
        for key in self.keys {
            if has_elements(ctx, key)? {
                let popped = pop_some(ctx, key, self.end, self.count)?;
                return Ok(Some(Reply::Array(vec![
                    bulk(key),
                    Reply::Array(popped.into_iter().map(Reply::Bulk).collect()),
                ])));
            }
        }
        Ok(None)
    }
}

/// `LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]`.
fn lmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(MultiPop::parse(args, 1).and_then(|m| m.run(ctx)).map(|r| r.unwrap_or(Reply::NilArray)))
}

/// `BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]`.
fn blmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(blocking_multi_pop(ctx, args))
}

fn blocking_multi_pop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    // As Redis: the options are read before the timeout.
    let multi = MultiPop::parse(args, 2)?;
    check_timeout(&args[1])?;
    Ok(multi.run(ctx)?.unwrap_or(Reply::WouldBlock))
}

/// BLPOP and BRPOP: `[key, element]` from the first key holding a list.
fn blocking_pop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], end: End) -> Result<Reply, Reply> {
    let (timeout, keys) = args[1..].split_last().ok_or_else(syntax)?;
    check_timeout(timeout)?;
    for key in keys {
        if has_elements(ctx, key)? {
            let popped = pop_some(ctx, key, end, 1)?.pop();
            return Ok(
                popped.map_or(Reply::WouldBlock, |value| Reply::Array(vec![bulk(key), Reply::Bulk(value)]))
            );
        }
    }
    Ok(Reply::WouldBlock)
}

/// `BLPOP key [key ...] timeout`.
fn blpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(blocking_pop(ctx, args, End::Left))
}

/// `BRPOP key [key ...] timeout`.
fn brpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(blocking_pop(ctx, args, End::Right))
}

// ----- moves -----

/// Moves one element from `from` of the list at `source` to `to` of the list at
/// `destination` (the same list rotates); the element, or `None` when there is no source.
/// A destination of another type is refused before anything changes.
fn move_one(
    ctx: &mut Ctx<'_>,
    source: &[u8],
    destination: &[u8],
    from: End,
    to: End,
) -> Result<Option<Vec<u8>>, Reply> {
    let now = ctx.now_ms;
    if !has_elements(ctx, source)? {
        return Ok(None);
    }
    ctx.db.list(destination, now)?;
    let Some(value) = ctx.db.list_mut(source, now, false)?.and_then(|list| from.pop(list)) else {
        return Ok(None);
    };
    // The source stays until the push, even emptied, so a one-element rotation keeps it.
    to.push(list_to_fill(ctx, destination)?, value.clone());
    ctx.db.drop_if_empty(source, now);
    Ok(Some(value))
}

/// `LMOVE source destination LEFT|RIGHT LEFT|RIGHT`: the element moved, or nil.
fn lmove(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(move_between(ctx, args, &args[3], &args[4], None))
}

/// `RPOPLPUSH source destination`: LMOVE from the right to the left.
fn rpoplpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(move_between(ctx, args, b"right", b"left", None))
}

/// `BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout`.
fn blmove(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(move_between(ctx, args, &args[3], &args[4], Some(args[5].as_slice())))
}

/// `BRPOPLPUSH source destination timeout`.
fn brpoplpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(move_between(ctx, args, b"right", b"left", Some(args[3].as_slice())))
}

/// The four moves: `args[1]` to `args[2]`, `from` and `to` naming the ends; a blocking
/// form has a `timeout` and answers [`Reply::WouldBlock`] instead of nil.
fn move_between(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    from: &[u8],
    to: &[u8],
    timeout: Option<&[u8]>,
) -> Result<Reply, Reply> {
    let (from, to) = (End::parse(from)?, End::parse(to)?);
    if let Some(timeout) = timeout {
        check_timeout(timeout)?;
    }
    let nothing = if timeout.is_some() { Reply::WouldBlock } else { Reply::Nil };
    Ok(move_one(ctx, &args[1], &args[2], from, to)?.map_or(nothing, Reply::Bulk))
}

// ----- reads -----

/// `LLEN key`.
fn llen(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(view.db.list(&args[1], view.now_ms).map(|l| integer(l.map_or(0, VecDeque::len))))
}

/// `LINDEX key index`: the element, or nil (no key, or outside the list).
fn lindex(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(element_at(view, args))
}

fn element_at(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    // As Redis: no key answers nil before the index is read.
    let Some(list) = view.db.list(&args[1], view.now_ms)? else { return Ok(Reply::Nil) };
    let index = int(&args[2])?;
    Ok(position(list.len(), index).and_then(|i| list.get(i)).map(Vec::as_slice).map_or(Reply::Nil, bulk))
}

/// `LRANGE key start stop`.
fn lrange(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(elements_between(view, args))
}

fn elements_between(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (start, stop) = (int(&args[2])?, int(&args[3])?);
    let Some(list) = view.db.list(&args[1], view.now_ms)? else { return Ok(empty()) };
    Ok(match span(list.len(), start, stop) {
        Some((first, last)) => bulks(list.range(first..=last).map(Vec::as_slice)),
        None => empty(),
    })
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`: the index of the
/// rank-th match (nil when none), or with COUNT an array of up to that many (0: all).
fn lpos(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(find_positions(view, args))
}

fn find_positions(view: &View<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
    let mut i = 3;
    while i < args.len() {
        let value = args.get(i + 1).ok_or_else(syntax)?;
        if is(&args[i], "rank") {
            rank = int(value)?;
            if rank == 0 {
                return Err(err(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... \
                     or use negative to start from the end of the list",
                ));
            }
        } else if is(&args[i], "count") {
            count = Some(int_in(value, 0, i64::MAX, "COUNT can't be negative")?);
        } else if is(&args[i], "maxlen") {
            maxlen = int_in(value, 0, i64::MAX, "MAXLEN can't be negative")?;
        } else {
            return Err(syntax());
        }
        i += 2;
    }
    let Some(list) = view.db.list(&args[1], view.now_ms)? else {
        return Ok(if count.is_some() { empty() } else { Reply::Nil });
    };
    let element = &args[2];
    let skip = to_usize(rank.unsigned_abs() - 1);
    let scan = usize::try_from(maxlen).ok().filter(|&m| m > 0).unwrap_or(list.len());
    let indexed: Box<dyn Iterator<Item = (usize, &Vec<u8>)> + '_> =
        if rank > 0 { Box::new(list.iter().enumerate()) } else { Box::new(list.iter().enumerate().rev()) };
    let mut matches = indexed.take(scan).filter(|(_, e)| *e == element).map(|(i, _)| i).skip(skip);
    Ok(match count {
        None => matches.next().map_or(Reply::Nil, integer),
        Some(0) => Reply::Array(matches.map(integer).collect()),
        Some(n) => Reply::Array(matches.take(to_usize(n)).map(integer).collect()),
    })
}

// ----- edits -----

/// `LSET key index element`: OK; errors for no key or an index outside the list.
fn lset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(set_element(ctx, args))
}

fn set_element(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let now = ctx.now_ms;
    let Some(list) = ctx.db.list(&args[1], now)? else { return Err(err("ERR no such key")) };
    let index = int(&args[2])?;
    let at = position(list.len(), index).ok_or_else(|| err("ERR index out of range"))?;
    if let Some(slot) = ctx.db.list_mut(&args[1], now, false)?.and_then(|l| l.get_mut(at)) {
        slot.clone_from(&args[3]);
    }
    Ok(Reply::Ok)
}

/// `LTRIM key start stop`: keeps only that range (none: the key goes).
fn ltrim(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(trim(ctx, args))
}

fn trim(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (start, stop) = (int(&args[2])?, int(&args[3])?);
    let now = ctx.now_ms;
    // As Redis, a trim that keeps everything still counts as a change (WATCH sees it).
    if let Some(list) = ctx.db.list_mut(&args[1], now, false)? {
        match span(list.len(), start, stop) {
            Some((first, last)) => {
                list.truncate(last + 1);
                list.drain(..first);
            }
            None => list.clear(),
        }
    }
    ctx.db.drop_if_empty(&args[1], now);
    Ok(Reply::Ok)
}

/// `LREM key count element`: removes the first `count` matches (from the tail when
/// negative, all when 0); the number removed.
fn lrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(remove_matches(ctx, args))
}

fn remove_matches(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let count = int(&args[2])?;
    let now = ctx.now_ms;
    let element = &args[3];
    let found = ctx.db.list(&args[1], now)?.map_or(0, |l| l.iter().filter(|e| *e == element).count());
    let limit = to_usize(count.unsigned_abs());
    let remove = if limit == 0 { found } else { found.min(limit) };
    if remove == 0 {
        return Ok(Reply::Integer(0));
    }
    // From the head: the first `remove` matches; from the tail: all but the first
    // `found - remove`.
    let mut keep_first = if count < 0 { found - remove } else { 0 };
    let mut left = remove;
    if let Some(list) = ctx.db.list_mut(&args[1], now, false)? {
        list.retain(|e| {
            if e != element || left == 0 {
                return true;
            }
            if keep_first > 0 {
                keep_first -= 1;
                return true;
            }
            left -= 1;
            false
        });
    }
    ctx.db.drop_if_empty(&args[1], now);
    Ok(integer(remove))
}

/// `LINSERT key BEFORE|AFTER pivot element`: the length after, -1 when the pivot is not
/// there, 0 when the key is not.
fn linsert(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(insert_by_pivot(ctx, args))
}

fn insert_by_pivot(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let after = if is(&args[2], "after") {
        true
    } else if is(&args[2], "before") {
        false
    } else {
        return Err(syntax());
    };
    let Some(list) = ctx.db.list(&args[1], ctx.now_ms)? else { return Ok(Reply::Integer(0)) };
    let Some(at) = list.iter().position(|e| *e == args[3]) else { return Ok(Reply::Integer(-1)) };
    let list = list_to_fill(ctx, &args[1])?;
    list.insert(at + usize::from(after), args[4].clone());
    Ok(integer(list.len()))
}

#[cfg(test)]
mod tests {
    use crate::kv::cmd::testing::{arr, b, err, exec};
    use crate::kv::db::Db;
    use crate::kv::reply::Reply;
    use crate::kv::value::WRONGTYPE;

    #[test]
    fn push_pop_and_read() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "LPUSHX l a"), Reply::Integer(0));
        assert!(!db.contains(b"l", 1_000));
        assert_eq!(exec(&mut db, "RPUSH l a b c"), Reply::Integer(3));
        assert_eq!(exec(&mut db, "LPUSH l z"), Reply::Integer(4));
        assert_eq!(exec(&mut db, "RPUSHX l d"), Reply::Integer(5));
        assert_eq!(exec(&mut db, "LRANGE l 0 -1"), arr(&["z", "a", "b", "c", "d"]));
        assert_eq!(exec(&mut db, "LRANGE l -100 1"), arr(&["z", "a"]));
        assert_eq!(exec(&mut db, "LRANGE l 3 1"), arr(&[]));
        assert_eq!(exec(&mut db, "LLEN l"), Reply::Integer(5));
        assert_eq!(exec(&mut db, "LINDEX l -1"), b("d"));
        assert_eq!(exec(&mut db, "LINDEX l 5"), Reply::Nil);
        assert_eq!(exec(&mut db, "LINDEX nokey x"), Reply::Nil);
        assert_eq!(exec(&mut db, "LPOP l"), b("z"));
        assert_eq!(exec(&mut db, "RPOP l 2"), arr(&["d", "c"]));
        assert_eq!(exec(&mut db, "LPOP l 0"), arr(&[]));
        assert_eq!(exec(&mut db, "LPOP nokey 0"), Reply::NilArray);
        assert_eq!(exec(&mut db, "LPOP nokey"), Reply::Nil);
        assert_eq!(exec(&mut db, "LPOP l -1"), err("ERR value is out of range, must be positive"));
        assert_eq!(exec(&mut db, "LPOP l 1 1"), err("ERR wrong number of arguments for 'lpop' command"));
        assert_eq!(exec(&mut db, "LPOP l 10"), arr(&["a", "b"]));
        assert!(!db.contains(b"l", 1_000), "an emptied list is removed");
    }

    #[test]
    fn set_trim_remove_insert() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "LSET nokey 0 x"), err("ERR no such key"));
        exec(&mut db, "RPUSH l a b a c a");
        assert_eq!(exec(&mut db, "LSET l 9 x"), err("ERR index out of range"));
        assert_eq!(exec(&mut db, "LSET l -1 e"), Reply::Ok);
        assert_eq!(exec(&mut db, "LREM l -1 a"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "LRANGE l 0 -1"), arr(&["a", "b", "c", "e"]));
        exec(&mut db, "RPUSH l a a");
        assert_eq!(exec(&mut db, "LREM l 0 a"), Reply::Integer(3));
        assert_eq!(exec(&mut db, "LINSERT l BEFORE c x"), Reply::Integer(4));
        assert_eq!(exec(&mut db, "LINSERT l AFTER e y"), Reply::Integer(5));
        assert_eq!(exec(&mut db, "LINSERT l AFTER nope y"), Reply::Integer(-1));
        assert_eq!(exec(&mut db, "LINSERT l aft3r c y"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "LRANGE l 0 -1"), arr(&["b", "x", "c", "e", "y"]));
        assert_eq!(exec(&mut db, "LTRIM l 1 -2"), Reply::Ok);
        assert_eq!(exec(&mut db, "LRANGE l 0 -1"), arr(&["x", "c", "e"]));
        assert_eq!(exec(&mut db, "LTRIM l 5 10"), Reply::Ok);
        assert!(!db.contains(b"l", 1_000));
    }

    #[test]
    fn positions() {
        let mut db = Db::default();
        exec(&mut db, "RPUSH l a b c 1 2 3 c c");
        assert_eq!(exec(&mut db, "LPOS l c"), Reply::Integer(2));
        assert_eq!(exec(&mut db, "LPOS l c RANK 2"), Reply::Integer(6));
        assert_eq!(exec(&mut db, "LPOS l c RANK 4"), Reply::Nil);
        assert_eq!(exec(&mut db, "LPOS l c RANK -2"), Reply::Integer(6));
        assert_eq!(
            exec(&mut db, "LPOS l c COUNT 0"),
            Reply::Array(vec![Reply::Integer(2), Reply::Integer(6), Reply::Integer(7)])
        );
        assert_eq!(
            exec(&mut db, "LPOS l c COUNT 2 RANK -1"),
            Reply::Array(vec![Reply::Integer(7), Reply::Integer(6)])
        );
        assert_eq!(
            exec(&mut db, "LPOS l c COUNT 0 MAXLEN 3 RANK -1"),
            Reply::Array(vec![Reply::Integer(7), Reply::Integer(6)])
        );
        assert_eq!(exec(&mut db, "LPOS l c COUNT 0 MAXLEN 7 RANK 2"), Reply::Array(vec![Reply::Integer(6)]));
        assert_eq!(exec(&mut db, "LPOS nokey c COUNT 0"), Reply::Array(vec![]));
        assert!(
            matches!(exec(&mut db, "LPOS l c RANK 0"), Reply::Error(e) if e.starts_with("ERR RANK can't be zero"))
        );
        assert_eq!(exec(&mut db, "LPOS l c COUNT -1"), err("ERR COUNT can't be negative"));
        assert_eq!(exec(&mut db, "LPOS l c MAXLEN x"), err("ERR MAXLEN can't be negative"));
    }

    #[test]
    fn moves_and_rotations() {
        let mut db = Db::default();
        exec(&mut db, "RPUSH s a b c");
        assert_eq!(exec(&mut db, "RPOPLPUSH s s"), b("c"));
        assert_eq!(exec(&mut db, "LRANGE s 0 -1"), arr(&["c", "a", "b"]));
        assert_eq!(exec(&mut db, "LMOVE s d LEFT RIGHT"), b("c"));
        assert_eq!(exec(&mut db, "LMOVE s d up RIGHT"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "LMOVE nokey d LEFT RIGHT"), Reply::Nil);
        exec(&mut db, "HSET str f x");
        assert_eq!(exec(&mut db, "RPOPLPUSH s str"), err(WRONGTYPE));
        assert_eq!(exec(&mut db, "LRANGE s 0 -1"), arr(&["a", "b"]), "nothing popped");
        exec(&mut db, "RPUSH one x");
        assert_eq!(exec(&mut db, "LMOVE one one LEFT LEFT"), b("x"));
        assert_eq!(exec(&mut db, "LRANGE one 0 -1"), arr(&["x"]));
    }

    #[test]
    fn multi_pops() {
        let mut db = Db::default();
        exec(&mut db, "RPUSH l a b c d e f");
        assert_eq!(
            exec(&mut db, "LMPOP 2 nokey l LEFT COUNT 2"),
            Reply::Array(vec![b("l"), arr(&["a", "b"])])
        );
        assert_eq!(exec(&mut db, "LMPOP 1 l RIGHT"), Reply::Array(vec![b("l"), arr(&["f"])]));
        assert_eq!(exec(&mut db, "LMPOP 1 nokey LEFT"), Reply::NilArray);
        assert_eq!(exec(&mut db, "LMPOP 0 l LEFT"), err("ERR numkeys should be greater than 0"));
        assert_eq!(exec(&mut db, "LMPOP a l LEFT"), err("ERR numkeys should be greater than 0"));
        assert_eq!(exec(&mut db, "LMPOP 1 l bad"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "LMPOP 1 l COUNT"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "LMPOP 5 l LEFT"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "LMPOP 1 l LEFT COUNT 1 COUNT 2"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "LMPOP 1 l LEFT COUNT 0"), err("ERR count should be greater than 0"));
        exec(&mut db, "HSET s f x");
        assert_eq!(exec(&mut db, "LMPOP 2 s l LEFT"), err(WRONGTYPE));
    }

    #[test]
    fn blocking_forms() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "BLPOP a b 0"), Reply::WouldBlock);
        assert_eq!(exec(&mut db, "BLPOP a -1"), err("ERR timeout is negative"));
        assert_eq!(exec(&mut db, "BLPOP a x"), err("ERR timeout is not a float or out of range"));
        exec(&mut db, "RPUSH b 1 2");
        assert_eq!(exec(&mut db, "BRPOP a b 0.1"), arr(&["b", "2"]));
        assert_eq!(exec(&mut db, "BLMPOP 0 2 a b LEFT COUNT 5"), Reply::Array(vec![b("b"), arr(&["1"])]));
        assert_eq!(exec(&mut db, "BLMPOP 0 1 b LEFT"), Reply::WouldBlock);
        assert_eq!(exec(&mut db, "BRPOPLPUSH b c 0"), Reply::WouldBlock);
        exec(&mut db, "RPUSH b x");
        assert_eq!(exec(&mut db, "BLMOVE b c RIGHT LEFT 0"), b("x"));
        assert_eq!(exec(&mut db, "LRANGE c 0 -1"), arr(&["x"]));
        exec(&mut db, "HSET s f x");
        assert_eq!(exec(&mut db, "BLPOP a s 0"), err(WRONGTYPE));
    }

    #[test]
    fn wrong_type() {
        let mut db = Db::default();
        exec(&mut db, "HSET s f x");
        for cmd in [
            "LPUSH s a",
            "LLEN s",
            "LINDEX s 0",
            "LRANGE s 0 -1",
            "LPOP s",
            "LSET s 0 a",
            "LREM s 0 a",
            "LTRIM s 0 1",
            "LPOS s a",
        ] {
            assert_eq!(exec(&mut db, cmd), err(WRONGTYPE), "{cmd}");
        }
    }
}

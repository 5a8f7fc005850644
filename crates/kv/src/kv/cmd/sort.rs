//! Redis 7.0's SORT and SORT_RO: the elements of a list, set or sorted set, sorted by their
//! own value or by weights read from other keys, cut by LIMIT, mapped through GET patterns,
//! answered or stored in a list (STORE, SORT only).
//!
//! Patterns name other keys by putting the element in place of the first `*`; a `->field`
//! after it reads that hash field instead of a string; `#` (GET only) is the element itself.
//! A BY pattern without `*` turns sorting off: lists and sorted sets keep their own order
//! (DESC walks it backwards) and sets keep theirs, except under STORE, where a set is sorted
//! ALPHA so the stored list does not depend on how the set happens to be laid out.
//!
//! Sorting is a pure function of the database: numeric sorting breaks ties on the element's
//! bytes as Redis does, and ALPHA BY (where Redis leaves ties to its unstable sort) uses a
//! stable sort over the value's own order, which is itself the same on every member.
//! ALPHA compares bytes (Redis's `strcoll` in the C locale).

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::ops::Range;

use super::args::{bulk, either, err, int, integer, is, parse_f64, syntax, to_usize};
use super::{Ctx, Spec, View};
use crate::kv::db::Db;
use crate::kv::reply::Reply;
use crate::kv::value::{Value, WRONGTYPE};

/// The sort commands. SORT is a write because of STORE.
pub const COMMANDS: &[Spec] =
    &[Spec::write("sort", -2, (1, 1, 1), sort), Spec::read("sort_ro", -2, (1, 1, 1), sort_ro)];

/// A parsed `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
/// [STORE destination]`.
#[derive(Debug)]
struct Request<'a> {
    /// The BY pattern, if any.
    by: Option<&'a [u8]>,
    /// A BY pattern without `*` was given: keep the value's own order.
    dont_sort: bool,
    /// LIMIT's offset (0 without LIMIT).
    offset: i64,
    /// LIMIT's count (negative: all).
    count: i64,
    /// The GET patterns, in order.
    gets: Vec<&'a [u8]>,
    /// DESC.
    desc: bool,
    /// ALPHA.
    alpha: bool,
    /// STORE's destination.
    store: Option<&'a [u8]>,
}

impl<'a> Request<'a> {
    /// Reads the options after the key; `readonly` (SORT_RO) does not know STORE.
    fn parse(args: &'a [Vec<u8>], readonly: bool) -> Result<Self, Reply> {
        let mut request = Request {
            by: None,
            dont_sort: false,
            offset: 0,
            count: -1,
            gets: Vec::new(),
            desc: false,
            alpha: false,
            store: None,
        };
        let mut i = 2;
        while i < args.len() {
            let word = &args[i];
            let left = args.len() - i - 1;
            if is(word, "asc") {
                request.desc = false;
            } else if is(word, "desc") {
                request.desc = true;
            } else if is(word, "alpha") {
                request.alpha = true;
            } else if is(word, "limit") && left >= 2 {
                request.offset = int(&args[i + 1])?;
                request.count = int(&args[i + 2])?;
                i += 2;
            } else if !readonly && is(word, "store") && left >= 1 {
                request.store = Some(&args[i + 1]);
                i += 1;
            } else if is(word, "by") && left >= 1 {
                let pattern = args[i + 1].as_slice();
                // Once a constant BY is seen, Redis does not sort, whatever BY follows.
                request.dont_sort |= !pattern.contains(&b'*');
                request.by = Some(pattern);
                i += 1;
            } else if is(word, "get") && left >= 1 {
                request.gets.push(&args[i + 1]);
                i += 1;
            } else {
                return Err(syntax());
            }
            i += 1;
        }
        Ok(request)
    }
}

/// `SORT key ...`: answers the rows, or stores them as a list and answers their count.
fn sort(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(sort_or_store(ctx, args))
}

fn sort_or_store(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let request = Request::parse(args, false)?;
    let Some(destination) = request.store else {
        return Ok(answer(evaluate(ctx.db, ctx.now_ms, &args[1], &request)?));
    };
    // A GET that finds nothing stores an empty string.
    let list: VecDeque<Vec<u8>> = evaluate(ctx.db, ctx.now_ms, &args[1], &request)?
        .into_iter()
        .map(|row| row.map(<[u8]>::to_vec).unwrap_or_default())
        .collect();
    let stored = list.len();
    ctx.db.store(destination, Value::List(Box::new(list)), ctx.now_ms);
    Ok(integer(stored))
}

/// `SORT_RO key ...`: SORT without STORE.
fn sort_ro(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    either(
        Request::parse(args, true)
            .and_then(|request| evaluate(view.db, view.now_ms, &args[1], &request).map(answer)),
    )
}

/// The rows as an array: bulk strings, nil where a GET found nothing.
fn answer(rows: Vec<Option<&[u8]>>) -> Reply {
    Reply::Array(rows.into_iter().map(|row| row.map_or(Reply::Nil, bulk)).collect())
}

/// The rows SORT answers for `key`: the selected elements in order, or for each of them
/// what each GET pattern finds.
fn evaluate<'d>(
    db: &'d Db,
    now_ms: u64,
    key: &[u8],
    request: &Request<'_>,
) -> Result<Vec<Option<&'d [u8]>>, Reply> {
    let (mut elements, is_set) = elements(db, key, now_ms)?;
    let mut dont_sort = request.dont_sort;
    let mut by = request.by;
    let mut alpha = request.alpha;
    if dont_sort && is_set && request.store.is_some() {
        // A stored result must not depend on the set's layout: sort it as strings.
        dont_sort = false;
        by = None;
        alpha = true;
    }
    if dont_sort {
        if request.desc && !is_set {
            elements.reverse();
        }
    } else {
        let weight = |element: &'d [u8]| match by {
            Some(pattern) => lookup(db, now_ms, pattern, element),
            None => Some(element),
        };
        elements = sorted(elements, weight, alpha, by.is_some(), request.desc)?;
    }
    let picked = &elements[window(elements.len(), request.offset, request.count)];
    Ok(if request.gets.is_empty() {
        picked.iter().map(|&element| Some(element)).collect()
    } else {
        picked
            .iter()
            .flat_map(|&element| request.gets.iter().map(move |pattern| lookup(db, now_ms, pattern, element)))
            .collect()
    })
}

/// The elements of the value at `key` in its own order (a sorted set's by score), and
/// whether it is a set; none for a missing key; WRONGTYPE for a string or a hash.
fn elements<'d>(db: &'d Db, key: &[u8], now_ms: u64) -> Result<(Vec<&'d [u8]>, bool), Reply> {
    Ok(match db.value(key, now_ms) {
        None => (Vec::new(), false),
        Some(Value::List(list)) => (list.iter().map(Vec::as_slice).collect(), false),
        Some(Value::Set(set)) => (set.iter().map(Vec::as_slice).collect(), true),
        Some(Value::ZSet(zset)) => (zset.iter().map(|(member, _)| member).collect(), false),
        Some(Value::Str(_) | Value::Hash(_)) => return Err(err(WRONGTYPE)),
    })
}

/// `elements` sorted by their weights (`weight`: the element itself without BY, what the BY
/// pattern finds with it). Numeric sorting reads weights as floats (a missing one is 0) and
/// breaks ties on the element; ALPHA compares bytes, a missing BY weight first.
fn sorted<'d>(
    elements: Vec<&'d [u8]>,
    weight: impl Fn(&'d [u8]) -> Option<&'d [u8]>,
    alpha: bool,
    by_pattern: bool,
    desc: bool,
) -> Result<Vec<&'d [u8]>, Reply> {
    let direct = |order: Ordering| if desc { order.reverse() } else { order };
    if alpha && !by_pattern {
        let mut elements = elements;
        elements.sort_by(|a, b| direct(a.cmp(b)));
        return Ok(elements);
    }
    if alpha {
        let mut keyed: Vec<(Option<&[u8]>, &[u8])> = elements.into_iter().map(|e| (weight(e), e)).collect();
        keyed.sort_by(|a, b| direct(a.0.cmp(&b.0)));
        return Ok(keyed.into_iter().map(|(_, e)| e).collect());
    }
    let mut keyed = elements
        .into_iter()
        .map(|e| Ok((weight(e).map_or(Ok(0.0), score)?, e)))
        .collect::<Result<Vec<(f64, &[u8])>, Reply>>()?;
    keyed.sort_by(|a, b| direct(a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal).then_with(|| a.1.cmp(b.1))));
    Ok(keyed.into_iter().map(|(_, e)| e).collect())
}

/// A numeric weight as Redis reads one with `strtod`: leading white space allowed, nothing
/// after the number, no NaN, no overflow to infinity; the empty string reads as 0.
fn score(text: &[u8]) -> Result<f64, Reply> {
    if text.is_empty() {
        return Ok(0.0);
    }
    let start = text.iter().position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r'));
    let number = &text[start.unwrap_or(text.len())..];
    parse_f64(number)
        .filter(|value| value.is_finite() || number.to_ascii_lowercase().windows(3).any(|w| w == b"inf"))
        .ok_or_else(|| err("ERR One or more scores can't be converted into double"))
}

/// The indexes LIMIT `offset` `count` selects among `len` (a negative count: to the end).
fn window(len: usize, offset: i64, count: i64) -> Range<usize> {
    let start = to_usize(offset.max(0)).min(len);
    let end = match usize::try_from(count) {
        Ok(count) => start.saturating_add(count).min(len),
        Err(_) => len,
    };
    start..end
}

/// What `pattern` finds for `element`: the element for `#`; else the key named by the
/// pattern with the element in place of its first `*`, a string, or with `->field` after
/// the `*`, that field of a hash. Nothing without a `*`, for a missing key, a key of another
/// type or a missing field.
fn lookup<'d>(db: &'d Db, now_ms: u64, pattern: &[u8], element: &'d [u8]) -> Option<&'d [u8]> {
    if pattern == b"#" {
        return Some(element);
    }
    let star = pattern.iter().position(|&b| b == b'*')?;
    let (prefix, rest) = (&pattern[..star], &pattern[star + 1..]);
    let (suffix, field) = match rest.windows(2).position(|w| w == b"->") {
        Some(arrow) if arrow + 2 < rest.len() => (&rest[..arrow], Some(&rest[arrow + 2..])),
        _ => (rest, None),
    };
    let key = [prefix, element, suffix].concat();
    match (db.value(&key, now_ms)?, field) {
        (Value::Str(text), None) => Some(text),
        (Value::Hash(hash), Some(field)) => hash.get(field).map(Vec::as_slice),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::window;
    use crate::kv::cmd::testing::{arr, err, exec};
    use crate::kv::db::Db;
    use crate::kv::reply::Reply;
    use crate::kv::value::WRONGTYPE;

    const NOT_DOUBLE: &str = "ERR One or more scores can't be converted into double";

    #[test]
    fn sorts_numbers_and_strings() {
        let mut db = Db::default();
        exec(&mut db, "RPUSH l 3 1.5 -2 10 inf");
        assert_eq!(exec(&mut db, "SORT l"), arr(&["-2", "1.5", "3", "10", "inf"]));
        assert_eq!(exec(&mut db, "SORT l DESC"), arr(&["inf", "10", "3", "1.5", "-2"]));
        assert_eq!(exec(&mut db, "SORT l ALPHA"), arr(&["-2", "1.5", "10", "3", "inf"]));
        assert_eq!(exec(&mut db, "SORT l LIMIT 1 2"), arr(&["1.5", "3"]));
        assert_eq!(exec(&mut db, "SORT_RO l desc limit 0 1 asc"), arr(&["-2"]));
        assert_eq!(exec(&mut db, "SORT l LIMIT 4 10"), arr(&["inf"]));
        assert_eq!(exec(&mut db, "SORT l LIMIT 5 1"), arr(&[]));
        assert_eq!(exec(&mut db, "SORT l LIMIT -3 2"), arr(&["-2", "1.5"]));
        assert_eq!(exec(&mut db, "SORT l LIMIT 1 0"), arr(&[]));
        assert_eq!(exec(&mut db, "SORT nokey"), arr(&[]));
        exec(&mut db, "SADD s 3 1 2");
        assert_eq!(exec(&mut db, "SORT s"), arr(&["1", "2", "3"]));
        exec(&mut db, "ZADD z 1 c 2 a 3 b");
        assert_eq!(exec(&mut db, "SORT z ALPHA DESC"), arr(&["c", "b", "a"]));
    }

    #[test]
    fn sorts_by_weights_and_gets() {
        let mut db = Db::default();
        exec(&mut db, "RPUSH l a b c");
        exec(&mut db, "MSET w_a 3 w_b 1 w_c 2");
        exec(&mut db, "HSET o_a f 20 g x");
        exec(&mut db, "HSET o_b f 30");
        exec(&mut db, "HSET o_c f 10");
        assert_eq!(exec(&mut db, "SORT l BY w_*"), arr(&["b", "c", "a"]));
        assert_eq!(exec(&mut db, "SORT l BY o_*->f DESC"), arr(&["b", "a", "c"]));
        assert_eq!(exec(&mut db, "SORT l BY o_*->f ALPHA"), arr(&["c", "a", "b"]));
        assert_eq!(
            exec(&mut db, "SORT l BY w_* GET # GET w_* GET o_*->g"),
            Reply::Array(vec![
                Reply::Bulk(b"b".to_vec()),
                Reply::Bulk(b"1".to_vec()),
                Reply::Nil,
                Reply::Bulk(b"c".to_vec()),
                Reply::Bulk(b"2".to_vec()),
                Reply::Nil,
                Reply::Bulk(b"a".to_vec()),
                Reply::Bulk(b"3".to_vec()),
                Reply::Bulk(b"x".to_vec()),
            ])
        );
        // A constant GET finds nothing; a hash read as a string finds nothing.
        assert_eq!(exec(&mut db, "SORT l BY nosort GET const LIMIT 0 1"), Reply::Array(vec![Reply::Nil]));
        assert_eq!(exec(&mut db, "SORT l BY nosort GET o_* LIMIT 0 1"), Reply::Array(vec![Reply::Nil]));
        // A pattern ending in "->" names a string key.
        exec(&mut db, "SET x:a-> 100");
        assert_eq!(exec(&mut db, "SORT l BY nosort GET x:*-> LIMIT 0 1"), arr(&["100"]));
        // Missing weights are 0 and ties fall back on the element.
        exec(&mut db, "SADD s c b a");
        assert_eq!(exec(&mut db, "SORT s BY nothing_*"), arr(&["a", "b", "c"]));
        assert_eq!(exec(&mut db, "SORT s BY nothing_* DESC"), arr(&["c", "b", "a"]));
        // ALPHA BY: missing weights first.
        exec(&mut db, "SET v_b zz");
        assert_eq!(exec(&mut db, "SORT l BY v_* ALPHA DESC LIMIT 0 1"), arr(&["b"]));
        assert_eq!(exec(&mut db, "SORT l BY v_* ALPHA LIMIT 2 1"), arr(&["b"]));
    }

    #[test]
    fn nosort_keeps_native_order() {
        let mut db = Db::default();
        exec(&mut db, "LPUSH l 2 1 4 3 5");
        assert_eq!(exec(&mut db, "SORT l BY nosort"), arr(&["5", "3", "4", "1", "2"]));
        assert_eq!(exec(&mut db, "SORT l BY nosort DESC LIMIT 1 2"), arr(&["1", "4"]));
        exec(&mut db, "ZADD z 1 a 5 b 2 c 10 d 3 e");
        assert_eq!(exec(&mut db, "SORT z BY nosort"), arr(&["a", "c", "e", "b", "d"]));
        assert_eq!(exec(&mut db, "SORT z BY nosort DESC"), arr(&["d", "b", "e", "c", "a"]));
        assert_eq!(exec(&mut db, "SORT z BY nosort DESC LIMIT 0 2"), arr(&["d", "b"]));
        assert_eq!(exec(&mut db, "SORT z BY nosort LIMIT 5 10"), arr(&[]));
        assert_eq!(exec(&mut db, "SORT z BY nosort LIMIT -10 100"), arr(&["a", "c", "e", "b", "d"]));
        // Sorting a sorted set by its members: they must be numbers unless ALPHA.
        assert_eq!(exec(&mut db, "SORT z"), err(NOT_DOUBLE));
        exec(&mut db, "SADD s b c a");
        assert_eq!(exec(&mut db, "SORT s BY nosort"), arr(&["b", "c", "a"]));
    }

    #[test]
    fn stores_a_list() {
        let mut db = Db::default();
        exec(&mut db, "RPUSH l 3 1 2");
        exec(&mut db, "SET dst old");
        exec(&mut db, "EXPIRE dst 100");
        assert_eq!(exec(&mut db, "SORT l STORE dst"), Reply::Integer(3));
        assert_eq!(exec(&mut db, "LRANGE dst 0 -1"), arr(&["1", "2", "3"]));
        assert_eq!(exec(&mut db, "TTL dst"), Reply::Integer(-1));
        assert_eq!(exec(&mut db, "SORT l GET # GET none_* STORE dst"), Reply::Integer(6));
        assert_eq!(exec(&mut db, "LRANGE dst 0 -1"), arr(&["1", "", "2", "", "3", ""]));
        assert_eq!(exec(&mut db, "SORT l LIMIT 10 10 STORE dst"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "EXISTS dst"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "SORT nokey STORE l"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "EXISTS l"), Reply::Integer(0));
        // A set stored without sorting is sorted as strings all the same.
        exec(&mut db, "SADD s b aa a c");
        assert_eq!(exec(&mut db, "SORT s BY _ STORE dst"), Reply::Integer(4));
        assert_eq!(exec(&mut db, "LRANGE dst 0 -1"), arr(&["a", "aa", "b", "c"]));
    }

    #[test]
    fn refuses_bad_input() {
        let mut db = Db::default();
        exec(&mut db, "SADD s 1 2 not-a-double");
        assert_eq!(exec(&mut db, "SORT s"), err(NOT_DOUBLE));
        assert_eq!(exec(&mut db, "SORT s ALPHA"), arr(&["1", "2", "not-a-double"]));
        exec(&mut db, "SADD n 1 2");
        exec(&mut db, "MSET score:1 10 score:2 nope big:1 1e400 big:2 1");
        assert_eq!(exec(&mut db, "SORT n BY score:*"), err(NOT_DOUBLE));
        assert_eq!(exec(&mut db, "SORT n BY big:*"), err(NOT_DOUBLE));
        assert_eq!(exec(&mut db, "SORT n BY score:* ALPHA"), arr(&["1", "2"]));
        assert_eq!(exec(&mut db, "SORT n LIMIT 0"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "SORT n LIMIT 0 x"), err("ERR value is not an integer or out of range"));
        assert_eq!(exec(&mut db, "SORT n BOGUS"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "SORT n GET"), err("ERR syntax error"));
        assert_eq!(exec(&mut db, "SORT_RO n STORE dst"), err("ERR syntax error"));
        exec(&mut db, "SET str x");
        exec(&mut db, "HSET h f v");
        assert_eq!(exec(&mut db, "SORT str"), err(WRONGTYPE));
        assert_eq!(exec(&mut db, "SORT_RO h"), err(WRONGTYPE));
        // Options are read before the key.
        assert_eq!(exec(&mut db, "SORT str BOGUS"), err("ERR syntax error"));
    }

    #[test]
    fn limits_clamp() {
        assert_eq!(window(5, 0, -1), 0..5);
        assert_eq!(window(5, 2, 2), 2..4);
        assert_eq!(window(5, 7, 2), 5..5);
        assert_eq!(window(5, i64::MAX, i64::MAX), 5..5);
        assert_eq!(window(5, i64::MIN, i64::MIN), 0..5);
        assert_eq!(window(0, 0, 3), 0..0);
    }
}

//! The cursor of SCAN, HSCAN, SSCAN and ZSCAN: elements in the order of a fixed hash of their
//! name, the cursor being the next hash to return.
//!
//! Redis's guarantees hold: an element present from the first call to the last is returned
//! (the order does not depend on what else is added or removed), one returned may come
//! again only if removed and re-added, and a cursor taken from one member works on another
//! (the hash has no per-process seed). Elements that share a hash come back in one page.
//! A call costs a pass over the collection (Redis's costs what it returns).

use crate::kv::reply::Reply;

use super::args::{err, glob_match, int, is, syntax};

/// FNV-1a, 64 bits: fixed, so every member orders alike.
pub fn order(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A scan's options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// MATCH pattern.
    pub pattern: Option<Vec<u8>>,
    /// COUNT (default 10).
    pub count: usize,
    /// TYPE (SCAN only).
    pub type_name: Option<Vec<u8>>,
}

/// Reads `cursor [MATCH p] [COUNT n] [TYPE t]` (TYPE only when `allow_type`).
pub fn parse(cursor: &[u8], rest: &[Vec<u8>], allow_type: bool) -> Result<(u64, Options), Reply> {
    let cursor = std::str::from_utf8(cursor)
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
        .ok_or_else(|| err("ERR invalid cursor"))?;
    let mut options = Options { count: 10, ..Options::default() };
    let mut i = 0;
    while i < rest.len() {
        let value = rest.get(i + 1).ok_or_else(syntax)?;
        if is(&rest[i], "match") {
            options.pattern = Some(value.clone());
        } else if is(&rest[i], "count") {
            let n = int(value)?;
            if n < 1 {
                return Err(syntax());
            }
            options.count = n as usize;
        } else if allow_type && is(&rest[i], "type") {
            options.type_name = Some(value.to_ascii_lowercase());
        } else {
            return Err(syntax());
        }
        i += 2;
    }
    Ok((cursor, options))
}

/// One page from `cursor`: the elements (whole, for the caller to write out) whose name
/// matches, and the next cursor (0 when done). `items` yields (name, element).
pub fn page<'a, T>(
    items: impl Iterator<Item = (&'a [u8], T)>,
    cursor: u64,
    options: &Options,
) -> (u64, Vec<T>) {
    let mut ahead: Vec<(u64, &'a [u8], T)> =
        items.filter_map(|(name, t)| (order(name) >= cursor).then(|| (order(name), name, t))).collect();
    let count = options.count.max(1);
    let next = if ahead.len() > count {
        ahead.select_nth_unstable_by_key(count - 1, |(h, _, _)| *h);
        let last = ahead[count - 1].0;
        ahead.retain(|(h, _, _)| *h <= last);
        last.checked_add(1).unwrap_or(0)
    } else {
        0
    };
    // In the hash's order (then the name's): the same on every member, whatever order the
    // collection was walked in (a scan inside MULTI is recorded by every member).
    ahead.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let matched = ahead
        .into_iter()
        .filter(|(_, name, _)| options.pattern.as_ref().is_none_or(|p| glob_match(p, name, false)))
        .map(|(_, _, t)| t)
        .collect();
    (next, matched)
}

/// The reply of a scan: `[cursor, [elements...]]`.
pub fn reply(next: u64, elements: Vec<Reply>) -> Reply {
    Reply::Array(vec![Reply::Bulk(next.to_string().into_bytes()), Reply::Array(elements)])
}

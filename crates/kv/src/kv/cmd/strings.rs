//! String commands: values that are bytes, integers or floats (kept as their text, as Redis
//! keeps them), with SET's and GETEX's expiry options.
//!
//! Expiry options are turned into an absolute time against the entry's clock ([`Ctx::now_ms`]),
//! so every member stores the same instant.

use super::args::{
    bulk, either, err, float, format_f64_plain, int, integer, is, not_integer, parse_i64, syntax,
};
use super::{Ctx, Spec, View};
use crate::kv::reply::Reply;
use crate::kv::value::{Value, WRONGTYPE};

/// Largest string a command may build (Redis's proto-max-bulk-len default).
pub const MAX_STRING: usize = 512 << 20;

/// The string commands.
pub const COMMANDS: &[Spec] = &[
    Spec::read("get", 2, (1, 1, 1), get),
    Spec::write("set", -3, (1, 1, 1), set),
    Spec::write("setnx", 3, (1, 1, 1), setnx),
    Spec::write("setex", 4, (1, 1, 1), setex),
    Spec::write("psetex", 4, (1, 1, 1), setex),
    Spec::write("getset", 3, (1, 1, 1), getset),
    Spec::write("getdel", 2, (1, 1, 1), getdel),
    Spec::write("getex", -2, (1, 1, 1), getex),
    Spec::read("mget", -2, (1, -1, 1), mget),
    Spec::write("mset", -3, (1, -1, 2), mset),
    Spec::write("msetnx", -3, (1, -1, 2), mset),
    Spec::write("append", 3, (1, 1, 1), append),
    Spec::read("strlen", 2, (1, 1, 1), strlen),
    Spec::read("getrange", 4, (1, 1, 1), getrange),
    Spec::read("substr", 4, (1, 1, 1), getrange),
    Spec::write("setrange", 4, (1, 1, 1), setrange),
    Spec::write("incr", 2, (1, 1, 1), incr),
    Spec::write("decr", 2, (1, 1, 1), incr),
    Spec::write("incrby", 3, (1, 1, 1), incr),
    Spec::write("decrby", 3, (1, 1, 1), incr),
    Spec::write("incrbyfloat", 3, (1, 1, 1), incrbyfloat),
    Spec::write("setbit", 4, (1, 1, 1), setbit),
    Spec::read("getbit", 3, (1, 1, 1), getbit),
    Spec::read("bitcount", -2, (1, 1, 1), bitcount),
    Spec::read("lcs", -3, (1, 2, 1), lcs),
];

fn get(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    match view.db.string(&args[1], view.now_ms) {
        Ok(Some(v)) => bulk(v),
        Ok(None) => Reply::Nil,
        Err(e) => e,
    }
}

/// An expiry option's amount turned into an absolute time, or Redis's error for `command`.
fn expiry_at(unit: &[u8], amount: &[u8], now_ms: u64, command: &str) -> Result<u64, Reply> {
    let n = int(amount)?;
    let invalid = || err(format!("ERR invalid expire time in '{command}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    let n = n as u64;
    let at = if is(unit, "ex") {
        n.checked_mul(1000).and_then(|ms| ms.checked_add(now_ms))
    } else if is(unit, "px") {
        n.checked_add(now_ms)
    } else if is(unit, "exat") {
        n.checked_mul(1000)
    } else {
        Some(n)
    };
    at.filter(|&t| t <= i64::MAX as u64).ok_or_else(invalid)
}

fn is_expiry_word(w: &[u8]) -> bool {
    ["ex", "px", "exat", "pxat"].iter().any(|u| is(w, u))
}

fn set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(set_inner(ctx, args))
}

fn set_inner(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (key, value) = (&args[1], &args[2]);
    let (mut nx, mut xx, mut get, mut keep_ttl) = (false, false, false, false);
    let mut expires: Option<u64> = None;
    let mut i = 3;
    while i < args.len() {
        let w = &args[i];
        if is(w, "nx") && !xx {
            nx = true;
        } else if is(w, "xx") && !nx {
            xx = true;
        } else if is(w, "get") {
            get = true;
        } else if is(w, "keepttl") && expires.is_none() {
            keep_ttl = true;
        } else if is_expiry_word(w) && expires.is_none() && !keep_ttl && i + 1 < args.len() {
            expires = Some(expiry_at(w, &args[i + 1], ctx.now_ms, "set")?);
            i += 1;
        } else {
            return Err(syntax());
        }
        i += 1;
    }
    // A plain SET over a string without expiry, the common write, changes it in place.
    if !(nx || xx || get || keep_ttl) && expires.is_none() && ctx.db.overwrite_string(key, value) {
        return Ok(Reply::Ok);
    }
    // One lookup answers everything asked of the old item; its value is copied only for GET,
    // and a value of another type is an error only for GET (plain SET overwrites it).
    let current = ctx.db.get(key, ctx.now_ms);
    let exists = current.is_some();
    let old = match current.map(|i| &i.value) {
        Some(Value::Str(v)) if get => Some(v.clone()),
        Some(_) if get => return Err(Reply::Error(WRONGTYPE.into())),
        _ => None,
    };
    if (nx && exists) || (xx && !exists) {
        return Ok(if get { old.map_or(Reply::Nil, Reply::Bulk) } else { Reply::Nil });
    }
    let expires = if keep_ttl { current.and_then(|i| i.expires_at_ms()) } else { expires };
    ctx.db.insert(key.clone(), Value::Str(value.clone()), expires);
    Ok(if get { old.map_or(Reply::Nil, Reply::Bulk) } else { Reply::Ok })
}

fn setnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if ctx.db.contains(&args[1], ctx.now_ms) {
        return Reply::Integer(0);
    }
    ctx.db.insert(args[1].clone(), Value::Str(args[2].clone()), None);
    Reply::Integer(1)
}

fn setex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let (unit, name) = if is(&args[0], "setex") { ("ex", "setex") } else { ("px", "psetex") };
    match expiry_at(unit.as_bytes(), &args[2], ctx.now_ms, name) {
        Ok(at) => {
            ctx.db.insert(args[1].clone(), Value::Str(args[3].clone()), Some(at));
            Reply::Ok
        }
        Err(e) => e,
    }
}

fn getset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let old = match ctx.db.string(&args[1], ctx.now_ms) {
        Ok(old) => old.cloned(),
        Err(e) => return e,
    };
    ctx.db.insert(args[1].clone(), Value::Str(args[2].clone()), None);
    old.map_or(Reply::Nil, Reply::Bulk)
}

fn getdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match ctx.db.string(&args[1], ctx.now_ms) {
        Ok(Some(v)) => {
            let v = v.clone();
            ctx.db.remove(&args[1], ctx.now_ms);
            Reply::Bulk(v)
        }
        Ok(None) => Reply::Nil,
        Err(e) => e,
    }
}

fn getex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(getex_inner(ctx, args))
}

fn getex_inner(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let key = &args[1];
    // None: leave the expiry; Some(None): PERSIST; Some(Some(t)): expire at t.
    let mut change: Option<Option<u64>> = None;
    let mut i = 2;
    while i < args.len() {
        let w = &args[i];
        if is(w, "persist") && change.is_none() {
            change = Some(None);
        } else if is_expiry_word(w) && change.is_none() && i + 1 < args.len() {
            change = Some(Some(expiry_at(w, &args[i + 1], ctx.now_ms, "getex")?));
            i += 1;
        } else {
            return Err(syntax());
        }
        i += 1;
    }
    let Some(value) = ctx.db.string(key, ctx.now_ms)?.cloned() else { return Ok(Reply::Nil) };
    if let Some(expiry) = change {
        ctx.db.set_expiry(key, ctx.now_ms, expiry);
    }
    Ok(Reply::Bulk(value))
}

fn mget(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Array(
        args[1..]
            .iter()
            .map(|k| match view.db.string(k, view.now_ms) {
                Ok(Some(v)) => bulk(v),
                _ => Reply::Nil,
            })
            .collect(),
    )
}

fn mset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let name = if is(&args[0], "mset") { "mset" } else { "msetnx" };
    if args.len().is_multiple_of(2) {
        return super::args::wrong_arity(name);
    }
    let pairs = args[1..].chunks_exact(2);
    if name == "msetnx" && pairs.clone().any(|p| ctx.db.contains(&p[0], ctx.now_ms)) {
        return Reply::Integer(0);
    }
    for p in pairs {
        ctx.db.insert(p[0].clone(), Value::Str(p[1].clone()), None);
    }
    if name == "msetnx" { Reply::Integer(1) } else { Reply::Ok }
}

fn too_big() -> Reply {
    err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
}

fn append(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    match ctx.db.string(&args[1], now) {
        Err(e) => return e,
        Ok(Some(v)) if v.len() + args[2].len() > MAX_STRING => return too_big(),
        Ok(_) => {}
    }
    match ctx.db.string_mut(&args[1], now, true) {
        Ok(Some(v)) => {
            v.extend_from_slice(&args[2]);
            integer(v.len())
        }
        Ok(None) => Reply::Integer(0),
        Err(e) => e,
    }
}

fn strlen(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    match view.db.string(&args[1], view.now_ms) {
        Ok(v) => integer(v.map_or(0, Vec::len)),
        Err(e) => e,
    }
}

fn getrange(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    let (start, end) = match (int(&args[2]), int(&args[3])) {
        (Ok(s), Ok(e)) => (s, e),
        _ => return not_integer(),
    };
    let value = match view.db.string(&args[1], view.now_ms) {
        Ok(v) => v.map_or(&[][..], Vec::as_slice),
        Err(e) => return e,
    };
    let len = value.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return bulk(b"");
    }
    let clamp = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (clamp(start), clamp(end).min(len - 1));
    if start > end || start >= len {
        return bulk(b"");
    }
    bulk(&value[start as usize..=end as usize])
}

fn setrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Ok(offset) = int(&args[2]) else { return not_integer() };
    if offset < 0 {
        return err("ERR offset is out of range");
    }
    let offset = offset as usize;
    let patch = &args[3];
    let now = ctx.now_ms;
    let current = match ctx.db.string(&args[1], now) {
        Ok(v) => v.map(Vec::len),
        Err(e) => return e,
    };
    if patch.is_empty() {
        return integer(current.unwrap_or(0));
    }
    if offset.saturating_add(patch.len()) > MAX_STRING {
        return too_big();
    }
    match ctx.db.string_mut(&args[1], now, true) {
        Ok(Some(v)) => {
            if v.len() < offset + patch.len() {
                v.resize(offset + patch.len(), 0);
            }
            v[offset..offset + patch.len()].copy_from_slice(patch);
            integer(v.len())
        }
        Ok(None) => Reply::Integer(0),
        Err(e) => e,
    }
}

fn incr(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let by = if args.len() == 3 {
        match int(&args[2]) {
            Ok(n) => n,
            Err(e) => return e,
        }
    } else {
        1
    };
    let by = if is(&args[0], "decr") || is(&args[0], "decrby") {
        match by.checked_neg() {
            Some(n) => n,
            None => return err("ERR decrement would overflow"),
        }
    } else {
        by
    };
    let now = ctx.now_ms;
    let current = match ctx.db.string(&args[1], now) {
        Ok(None) => 0,
        Ok(Some(v)) => match parse_i64(v) {
            Some(n) => n,
            None => return not_integer(),
        },
        Err(e) => return e,
    };
    let Some(next) = current.checked_add(by) else {
        return err("ERR increment or decrement would overflow");
    };
    if let Ok(Some(v)) = ctx.db.string_mut(&args[1], now, true) {
        *v = next.to_string().into_bytes();
    }
    Reply::Integer(next)
}

fn incrbyfloat(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Ok(by) = float(&args[2]) else { return err("ERR value is not a valid float") };
    let now = ctx.now_ms;
    let current = match ctx.db.string(&args[1], now) {
        Ok(None) => 0.0,
        Ok(Some(v)) => match super::args::parse_f64(v) {
            Some(n) => n,
            None => return err("ERR value is not a valid float"),
        },
        Err(e) => return e,
    };
    let next = current + by;
    if next.is_nan() || next.is_infinite() {
        return err("ERR increment would produce NaN or Infinity");
    }
    let text = format_f64_plain(next);
    if let Ok(Some(v)) = ctx.db.string_mut(&args[1], now, true) {
        v.clone_from(&text);
    }
    Reply::Bulk(text)
}

fn bit_offset(arg: &[u8]) -> Result<usize, Reply> {
    match parse_i64(arg) {
        Some(n) if (0..(MAX_STRING as i64) * 8).contains(&n) => Ok(n as usize),
        _ => Err(err("ERR bit offset is not an integer or out of range")),
    }
}

fn setbit(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let offset = match bit_offset(&args[2]) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let on = match args[3].as_slice() {
        b"1" => true,
        b"0" => false,
        _ => return err("ERR bit is not an integer or out of range"),
    };
    let now = ctx.now_ms;
    if let Err(e) = ctx.db.string(&args[1], now) {
        return e;
    }
    let Ok(Some(v)) = ctx.db.string_mut(&args[1], now, true) else { return Reply::Integer(0) };
    let (byte, mask) = (offset / 8, 0x80u8 >> (offset % 8));
    if v.len() <= byte {
        v.resize(byte + 1, 0);
    }
    let was = v[byte] & mask != 0;
    if on {
        v[byte] |= mask;
    } else {
        v[byte] &= !mask;
    }
    Reply::Integer(i64::from(was))
}

fn getbit(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    let offset = match bit_offset(&args[2]) {
        Ok(o) => o,
        Err(e) => return e,
    };
    match view.db.string(&args[1], view.now_ms) {
        Ok(v) => {
            let bit = v.and_then(|v| v.get(offset / 8)).is_some_and(|b| b & (0x80 >> (offset % 8)) != 0);
            Reply::Integer(i64::from(bit))
        }
        Err(e) => e,
    }
}

fn bitcount(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    let value = match view.db.string(&args[1], view.now_ms) {
        Ok(v) => v.map_or(&[][..], Vec::as_slice),
        Err(e) => return e,
    };
    let slice = match &args[2..] {
        [] => value,
        [start, end] | [start, end, _] => {
            let bits = args.len() == 5 && is(&args[4], "bit");
            if args.len() == 5 && !bits && !is(&args[4], "byte") {
                return syntax();
            }
            let (Ok(s), Ok(e)) = (int(start), int(end)) else { return not_integer() };
            let len = if bits { value.len() as i64 * 8 } else { value.len() as i64 };
            let clamp = |i: i64| if i < 0 { (len + i).max(0) } else { i };
            let (s, e) = (clamp(s), clamp(e).min(len - 1));
            if s > e || len == 0 {
                return Reply::Integer(0);
            }
            if bits {
                let count = (s..=e).filter(|&i| value[(i / 8) as usize] & (0x80 >> (i % 8)) != 0).count();
                return integer(count);
            }
            &value[s as usize..=e as usize]
        }
        _ => return syntax(),
    };
    integer(slice.iter().map(|b| b.count_ones() as usize).sum())
}

/// LCS a b [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]: the longest common subsequence.
fn lcs(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    let a = match view.db.string(&args[1], view.now_ms) {
        Ok(v) => v.cloned().unwrap_or_default(),
        Err(_) => return err("ERR The specified keys must contain string values"),
    };
    let b = match view.db.string(&args[2], view.now_ms) {
        Ok(v) => v.cloned().unwrap_or_default(),
        Err(_) => return err("ERR The specified keys must contain string values"),
    };
    let (mut len_only, mut idx, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut i = 3;
    while i < args.len() {
        if is(&args[i], "len") {
            len_only = true;
        } else if is(&args[i], "idx") {
            idx = true;
        } else if is(&args[i], "withmatchlen") {
            with_len = true;
        } else if is(&args[i], "minmatchlen") && i + 1 < args.len() {
            min_len = match int(&args[i + 1]) {
                Ok(n) => n.max(0),
                Err(e) => return e,
            };
            i += 1;
        } else {
            return syntax();
        }
        i += 1;
    }
    if len_only && idx {
        return err("ERR If you want both the length and indexes, please just use IDX.");
    }
    if a.len().saturating_mul(b.len()) > 64 << 20 {
        return err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    let (n, m) = (a.len(), b.len());
    let mut table = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in 1..=n {
        for j in 1..=m {
            table[at(i, j)] = if a[i - 1] == b[j - 1] {
                table[at(i - 1, j - 1)] + 1
            } else {
                table[at(i - 1, j)].max(table[at(i, j - 1)])
            };
        }
    }
    let total = table[at(n, m)];
    if len_only {
        return Reply::Integer(i64::from(total));
    }
    // Walk back from the end, collecting the subsequence and, for IDX, its matching runs.
    let (mut i, mut j) = (n, m);
    let mut common = Vec::with_capacity(total as usize);
    let mut matches = Vec::new();
    let mut run: Option<(usize, usize, usize, usize)> = None; // a_start, a_end, b_start, b_end
    let flush = |run: &mut Option<(usize, usize, usize, usize)>, matches: &mut Vec<Reply>| {
        if let Some((a0, a1, b0, b1)) = run.take() {
            let len = a1 - a0 + 1;
            if len as i64 >= min_len {
                let range = |x: usize, y: usize| {
                    Reply::Array(vec![Reply::Integer(x as i64), Reply::Integer(y as i64)])
                };
                let mut m = vec![range(a0, a1), range(b0, b1)];
                if with_len {
                    m.push(Reply::Integer(len as i64));
                }
                matches.push(Reply::Array(m));
            }
        }
    };
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            common.push(a[i - 1]);
            match &mut run {
                Some((a0, _, b0, _)) if *a0 == i && *b0 == j => {
                    *a0 = i - 1;
                    *b0 = j - 1;
                }
                _ => {
                    flush(&mut run, &mut matches);
                    run = Some((i - 1, i - 1, j - 1, j - 1));
                }
            }
            i -= 1;
            j -= 1;
        } else if table[at(i - 1, j)] > table[at(i, j - 1)] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    flush(&mut run, &mut matches);
    if idx {
        return Reply::Array(vec![
            bulk(b"matches"),
            Reply::Array(matches),
            bulk(b"len"),
            Reply::Integer(i64::from(total)),
        ]);
    }
    common.reverse();
    Reply::Bulk(common)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{NOW, exec};
    use crate::kv::cmd::testing::b as bulk;
    use crate::kv::db::Db;
    use crate::kv::reply::Reply;
    use crate::kv::value::{Value, WRONGTYPE};

    #[test]
    fn set_and_its_options() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "SET k v"), Reply::Ok);
        assert_eq!(exec(&mut db, "SET k w NX"), Reply::Nil);
        assert_eq!(exec(&mut db, "SET k w XX GET"), bulk("v"));
        assert_eq!(exec(&mut db, "SET k x PX 100 GET"), bulk("w"));
        assert_eq!(db.get(b"k", 1_000).and_then(|i| i.expires_at_ms()), Some(1_100));
        assert_eq!(exec(&mut db, "SET k y KEEPTTL"), Reply::Ok);
        assert_eq!(db.get(b"k", 1_000).and_then(|i| i.expires_at_ms()), Some(1_100));
        assert_eq!(
            exec(&mut db, "SET k v EX 0"),
            Reply::Error("ERR invalid expire time in 'set' command".into())
        );
        assert_eq!(exec(&mut db, "SET k v NX XX"), Reply::Error("ERR syntax error".into()));
        assert_eq!(exec(&mut db, "SET k v KEEPTTL EX 1"), Reply::Error("ERR syntax error".into()));
    }

    #[test]
    fn set_over_a_key_of_another_type_or_an_expired_one() {
        let mut db = Db::default();
        exec(&mut db, "HSET h f v");
        // GET refuses another type and leaves it; plain SET overwrites it; NX sees it.
        assert_eq!(exec(&mut db, "SET h x GET"), Reply::Error(WRONGTYPE.into()));
        assert_eq!(exec(&mut db, "HGET h f"), bulk("v"));
        assert_eq!(exec(&mut db, "SET h x NX"), Reply::Nil);
        assert_eq!(exec(&mut db, "SET h x XX"), Reply::Ok);
        assert_eq!(exec(&mut db, "GET h"), bulk("x"));
        exec(&mut db, "HSET g f v");
        assert_eq!(exec(&mut db, "SET g y"), Reply::Ok);
        assert_eq!(exec(&mut db, "SET g z GET"), bulk("y"));
        // A missing key: GET answers nil and sets, XX sets nothing.
        assert_eq!(exec(&mut db, "SET m v XX GET"), Reply::Nil);
        assert!(db.get(b"m", NOW).is_none());
        assert_eq!(exec(&mut db, "SET m v GET"), Reply::Nil);
        assert_eq!(exec(&mut db, "SET m w NX GET"), bulk("v"));
        assert_eq!(exec(&mut db, "GET m"), bulk("v"));
        // An expired key counts as missing, its expiry included.
        db.insert(b"e".to_vec(), Value::Str(b"old".to_vec()), Some(NOW));
        assert_eq!(exec(&mut db, "SET e v XX GET"), Reply::Nil);
        assert_eq!(exec(&mut db, "SET e v NX GET KEEPTTL"), Reply::Nil);
        assert_eq!(
            db.get(b"e", NOW).map(|i| (i.value.clone(), i.expires_at_ms())),
            Some((Value::Str(b"v".to_vec()), None))
        );
        // KEEPTTL keeps a live key's expiry whatever the key held.
        exec(&mut db, "HSET t f v");
        db.set_expiry(b"t", NOW, Some(NOW + 50));
        assert_eq!(exec(&mut db, "SET t v KEEPTTL"), Reply::Ok);
        assert_eq!(db.get(b"t", NOW).and_then(|i| i.expires_at_ms()), Some(NOW + 50));
    }

    #[test]
    fn numbers_and_ranges() {
        let mut db = Db::default();
        assert_eq!(exec(&mut db, "INCR n"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "DECRBY n 5"), Reply::Integer(-4));
        assert_eq!(exec(&mut db, "INCRBYFLOAT n 1.5"), bulk("-2.5"));
        assert_eq!(
            exec(&mut db, "INCR n"),
            Reply::Error("ERR value is not an integer or out of range".into())
        );
        assert_eq!(exec(&mut db, "SET s Hello"), Reply::Ok);
        assert_eq!(exec(&mut db, "GETRANGE s 1 -2"), bulk("ell"));
        assert_eq!(exec(&mut db, "SETRANGE s 7 x"), Reply::Integer(8));
        assert_eq!(exec(&mut db, "GET s"), Reply::Bulk(b"Hello\0\0x".to_vec()));
        assert_eq!(exec(&mut db, "SETBIT b 7 1"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "GET b"), bulk("\u{1}"));
        assert_eq!(exec(&mut db, "LCS s b"), bulk(""));
    }

    #[test]
    fn lcs_finds_the_common_subsequence() {
        let mut db = Db::default();
        exec(&mut db, "MSET a ohmytext b mynewtext");
        assert_eq!(exec(&mut db, "LCS a b"), bulk("mytext"));
        assert_eq!(exec(&mut db, "LCS a b LEN"), Reply::Integer(6));
    }
}

//! Commands on keys whatever they hold: deletion, existence, type, listing and scanning,
//! renaming, and expiry (EXPIRE's family, TTL's family, PERSIST).
//!
//! An expiry is stored as an absolute time computed against the entry's clock, so members
//! agree on it; a time already past deletes the key at once, as Redis does.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::args::{bulk, either, err, glob_match, int, integer, is, syntax};
use super::{Ctx, Spec, View, scan};
use crate::kv::reply::Reply;
use crate::kv::value::Value;

/// The key commands.
pub const COMMANDS: &[Spec] = &[
    Spec::write("del", -2, (1, -1, 1), del),
    Spec::write("unlink", -2, (1, -1, 1), del),
    Spec::read("exists", -2, (1, -1, 1), exists),
    Spec::read("touch", -2, (1, -1, 1), exists),
    Spec::read("type", 2, (1, 1, 1), type_of),
    Spec::read("keys", 2, (0, 0, 0), keys),
    Spec::read("scan", -2, (0, 0, 0), scan_keys),
    Spec::read("randomkey", 1, (0, 0, 0), randomkey),
    Spec::read("dbsize", 1, (0, 0, 0), dbsize),
    Spec::write("rename", 3, (1, 2, 1), rename),
    Spec::write("renamenx", 3, (1, 2, 1), rename),
    Spec::write("expire", -3, (1, 1, 1), expire),
    Spec::write("pexpire", -3, (1, 1, 1), expire),
    Spec::write("expireat", -3, (1, 1, 1), expire),
    Spec::write("pexpireat", -3, (1, 1, 1), expire),
    Spec::write("persist", 2, (1, 1, 1), persist),
    Spec::read("ttl", 2, (1, 1, 1), ttl),
    Spec::read("pttl", 2, (1, 1, 1), ttl),
    Spec::read("expiretime", 2, (1, 1, 1), ttl),
    Spec::read("pexpiretime", 2, (1, 1, 1), ttl),
    Spec::write("flushdb", -1, (0, 0, 0), flushdb),
    Spec::read("object", -2, (2, 2, 1), object),
];

fn del(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    integer(args[1..].iter().filter(|k| ctx.db.remove(k, ctx.now_ms).is_some()).count())
}

fn exists(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    integer(args[1..].iter().filter(|k| view.db.contains(k, view.now_ms)).count())
}

fn type_of(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Simple(view.db.value(&args[1], view.now_ms).map_or("none", Value::type_name))
}

fn keys(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    let pattern = &args[1];
    let all = pattern.as_slice() == b"*";
    let mut found: Vec<&Vec<u8>> =
        view.db.iter(view.now_ms).map(|(k, _)| k).filter(|k| all || glob_match(pattern, k, false)).collect();
    // Sorted: the same answer on every member (KEYS inside MULTI is recorded by each).
    found.sort_unstable();
    Reply::Array(found.into_iter().map(|k| bulk(k)).collect())
}

fn scan_keys(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    let (cursor, options) = match scan::parse(&args[1], &args[2..], true) {
        Ok(parsed) => parsed,
        Err(e) => return e,
    };
    let items = view.db.iter(view.now_ms).map(|(k, item)| (k.as_slice(), (k, item)));
    let (next, found) = scan::page(items, cursor, &options);
    let replies = found
        .into_iter()
        .filter(|(_, item)| {
            options.type_name.as_ref().is_none_or(|t| t.as_slice() == item.value.type_name().as_bytes())
        })
        .map(|(k, _)| bulk(k))
        .collect();
    scan::reply(next, replies)
}

fn randomkey(view: &View<'_>, _args: &[Vec<u8>]) -> Reply {
    let live = view.db.len(view.now_ms);
    if live == 0 {
        return Reply::Nil;
    }
    // Picked from the keys in sorted order: inside MULTI every member picks the same one.
    let mut keys: Vec<&Vec<u8>> = view.db.iter(view.now_ms).map(|(k, _)| k).collect();
    keys.sort_unstable();
    keys.get(view.rng.below(live)).map_or(Reply::Nil, |k| bulk(k))
}

fn dbsize(view: &View<'_>, _args: &[Vec<u8>]) -> Reply {
    integer(view.db.len(view.now_ms))
}

fn rename(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let nx = is(&args[0], "renamenx");
    let (from, to) = (&args[1], &args[2]);
    let now = ctx.now_ms;
    if !ctx.db.contains(from, now) {
        return err("ERR no such key");
    }
    if from == to {
        return if nx { Reply::Integer(0) } else { Reply::Ok };
    }
    if nx && ctx.db.contains(to, now) {
        return Reply::Integer(0);
    }
    let Some(item) = ctx.db.remove(from, now) else { return err("ERR no such key") };
    let expires = item.expires_at_ms();
    ctx.db.remove(to, now);
    ctx.db.insert(to.clone(), item.value, expires);
    if nx { Reply::Integer(1) } else { Reply::Ok }
}

fn expire(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(expire_inner(ctx, args))
}

fn expire_inner(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let name = args[0].to_ascii_lowercase();
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[3..] {
        if is(option, "nx") {
            nx = true;
        } else if is(option, "xx") {
            xx = true;
        } else if is(option, "gt") {
            gt = true;
        } else if is(option, "lt") {
            lt = true;
        } else {
            return Err(err(format!("ERR Unsupported option {}", String::from_utf8_lossy(option))));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(err("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if gt && lt {
        return Err(err("ERR GT and LT options at the same time are not compatible"));
    }
    let amount = int(&args[2])?;
    let invalid = || err(format!("ERR invalid expire time in '{}' command", String::from_utf8_lossy(&name)));
    let (unit, relative) = match name.as_slice() {
        b"expire" => (1000, true),
        b"pexpire" => (1, true),
        b"expireat" => (1000, false),
        _ => (1, false),
    };
    let ms = amount.checked_mul(unit).ok_or_else(invalid)?;
    let at = if relative { ms.checked_add(ctx.now_ms as i64).ok_or_else(invalid)? } else { ms };
    let now = ctx.now_ms;
    let Some(item) = ctx.db.get(&args[1], now) else { return Ok(Reply::Integer(0)) };
    let current = item.expires_at_ms();
    let allowed = match current {
        None => !xx && !gt,
        Some(t) => !nx && (!gt || at > t as i64) && (!lt || at < t as i64),
    };
    if !allowed {
        return Ok(Reply::Integer(0));
    }
    if at <= now as i64 {
        ctx.db.remove(&args[1], now);
    } else {
        ctx.db.set_expiry(&args[1], now, Some(at as u64));
    }
    Ok(Reply::Integer(1))
}

fn persist(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms;
    match ctx.db.get(&args[1], now).map(|i| i.expires_at_ms()) {
        Some(Some(_)) => {
            ctx.db.set_expiry(&args[1], now, None);
            Reply::Integer(1)
        }
        _ => Reply::Integer(0),
    }
}

fn ttl(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    let name = args[0].to_ascii_lowercase();
    let Some(item) = view.db.get(&args[1], view.now_ms) else { return Reply::Integer(-2) };
    let Some(at) = item.expires_at_ms() else { return Reply::Integer(-1) };
    let left = at.saturating_sub(view.now_ms);
    Reply::Integer(match name.as_slice() {
        b"ttl" => left.div_ceil(1000).min(i64::MAX as u64) as i64,
        b"pttl" => left as i64,
        b"expiretime" => (at / 1000) as i64,
        _ => at as i64,
    })
}

fn flushdb(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match &args[1..] {
        [] => {}
        [mode] if is(mode, "async") || is(mode, "sync") => {}
        _ => return syntax(),
    }
    ctx.db.clear();
    Reply::Ok
}

/// The thresholds OBJECT ENCODING reports against, set by CONFIG SET on this member (they
/// change no data, only the encoding named).
#[derive(Debug)]
pub struct Thresholds {
    /// hash-max-listpack-entries.
    pub hash_entries: AtomicUsize,
    /// hash-max-listpack-value.
    pub hash_value: AtomicUsize,
    /// set-max-intset-entries.
    pub set_intset_entries: AtomicUsize,
    /// zset-max-listpack-entries.
    pub zset_entries: AtomicUsize,
    /// zset-max-listpack-value.
    pub zset_value: AtomicUsize,
}

/// This process's thresholds, Redis 7.0's defaults until CONFIG SET.
pub static THRESHOLDS: Thresholds = Thresholds {
    hash_entries: AtomicUsize::new(128),
    hash_value: AtomicUsize::new(64),
    set_intset_entries: AtomicUsize::new(512),
    zset_entries: AtomicUsize::new(128),
    zset_value: AtomicUsize::new(64),
};

/// The encoding Redis 7.0 would use for `value`.
pub fn encoding(value: &Value) -> &'static str {
    let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let t = &THRESHOLDS;
    match value {
        Value::Str(s) if s.len() <= 20 && super::args::parse_i64(s).is_some() => "int",
        Value::Str(s) if s.len() <= 44 => "embstr",
        Value::Str(_) => "raw",
        Value::List(_) => "quicklist",
        Value::Hash(h) => {
            let small = h.len() <= load(&t.hash_entries)
                && h.iter().all(|(f, v)| f.len() <= load(&t.hash_value) && v.len() <= load(&t.hash_value));
            if small { "listpack" } else { "hashtable" }
        }
        Value::Set(s) => {
            let ints = s.len() <= load(&t.set_intset_entries)
                && s.iter().all(|m| super::args::parse_i64(m).is_some());
            if ints { "intset" } else { "hashtable" }
        }
        Value::ZSet(z) => {
            let small =
                z.len() <= load(&t.zset_entries) && z.iter().all(|(m, _)| m.len() <= load(&t.zset_value));
            if small { "listpack" } else { "skiplist" }
        }
    }
}

fn object(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    let sub = &args[1];
    if is(sub, "help") {
        return Reply::Array(
            ["OBJECT <subcommand>", "ENCODING <key>", "FREQ <key>", "IDLETIME <key>", "REFCOUNT <key>"]
                .iter()
                .map(|s| bulk(s.as_bytes()))
                .collect(),
        );
    }
    if args.len() != 3 {
        return super::args::wrong_arity(&format!(
            "object|{}",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        ));
    }
    let Some(value) = view.db.value(&args[2], view.now_ms) else { return Reply::Nil };
    if is(sub, "encoding") {
        bulk(encoding(value).as_bytes())
    } else if is(sub, "refcount") {
        Reply::Integer(1)
    } else if is(sub, "idletime") || is(sub, "freq") {
        Reply::Integer(0)
    } else {
        err(format!("ERR unknown subcommand '{}'. Try OBJECT HELP.", String::from_utf8_lossy(sub)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{exec, exec_args};
    use crate::kv::db::Db;
    use crate::kv::reply::Reply;

    #[test]
    fn expiry_follows_redis() {
        let mut db = Db::default();
        exec(&mut db, "SET k v");
        assert_eq!(exec(&mut db, "TTL k"), Reply::Integer(-1));
        assert_eq!(exec(&mut db, "EXPIRE k 10 XX"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "EXPIRE k 10 NX"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "EXPIRE k 5 GT"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "EXPIRE k 5 LT"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "TTL k"), Reply::Integer(5));
        assert_eq!(exec(&mut db, "PEXPIRETIME k"), Reply::Integer(6_000));
        assert_eq!(exec(&mut db, "PERSIST k"), Reply::Integer(1));
        assert_eq!(
            exec(&mut db, "EXPIRE k 1 NX XX"),
            Reply::Error("ERR NX and XX, GT or LT options at the same time are not compatible".into())
        );
        assert_eq!(exec(&mut db, "EXPIRE k -1"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "EXISTS k"), Reply::Integer(0));
        assert_eq!(exec(&mut db, "TTL k"), Reply::Integer(-2));
    }

    #[test]
    fn keys_rename_and_scan() {
        let mut db = Db::default();
        for i in 0..25 {
            exec(&mut db, &format!("SET key:{i} {i}"));
        }
        exec(&mut db, "EXPIRE key:0 1");
        assert_eq!(exec(&mut db, "RENAME key:0 other"), Reply::Ok);
        assert_eq!(exec(&mut db, "TTL other"), Reply::Integer(1));
        assert_eq!(exec(&mut db, "RENAME nope x"), Reply::Error("ERR no such key".into()));
        assert_eq!(exec(&mut db, "RENAMENX other key:1"), Reply::Integer(0));
        let Reply::Array(all) = exec(&mut db, "KEYS key:*") else { panic!("KEYS") };
        assert_eq!(all.len(), 24);
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = b"0".to_vec();
        loop {
            let args = [b"SCAN".to_vec(), cursor.clone(), b"COUNT".to_vec(), b"5".to_vec()];
            let Reply::Array(page) = exec_args(&mut db, &args, 1_000) else { panic!("SCAN") };
            let (Reply::Bulk(next), Reply::Array(keys)) = (&page[0], &page[1]) else { panic!("page") };
            seen.extend(keys.iter().map(|k| format!("{k:?}")));
            cursor = next.clone();
            if cursor == b"0" {
                break;
            }
        }
        assert_eq!(seen.len(), 25, "SCAN returns every key once");
        assert_eq!(exec(&mut db, "TYPE other"), Reply::Simple("string"));
        assert_eq!(exec(&mut db, "OBJECT ENCODING other"), Reply::Bulk(b"int".to_vec()));
    }
}

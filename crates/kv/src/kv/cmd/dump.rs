//! DUMP and RESTORE: a key's value as an opaque payload, and a key made from one.
//!
//! The payload is this store's own format, not Redis's RDB: the value as a snapshot writes it
//! ([`encode_value`]), then a two-byte format version and the CRC-64 (XZ) of everything
//! before it, little-endian, in the layout Redis uses for its own payloads. RESTORE checks
//! the version and the checksum and decodes the whole body; any fault (a bad version or
//! checksum, a body that does not decode or leaves bytes over, an empty aggregate, which
//! the store never holds) is refused with Redis's payload error. Decoding never panics and
//! never allocates more than the payload holds.
//!
//! RESTORE's IDLETIME and FREQ are checked as Redis checks them and otherwise ignored: the
//! store keeps no access times or counters.

use kairos_services::codec::Reader;

use super::args::{either, err, int, is, syntax};
use super::{Ctx, Spec, View};
use crate::kv::reply::Reply;
use crate::kv::value::{Value, decode_value, encode_value};

/// The dump commands.
pub const COMMANDS: &[Spec] =
    &[Spec::read("dump", 2, (1, 1, 1), dump), Spec::write("restore", -4, (1, 1, 1), restore)];

/// The payload format's version, written after the value.
const VERSION: [u8; 2] = [0x4B, 0x01];

/// The checksum over the value and the version.
const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_XZ);

/// Bytes after the value: the version and the checksum.
const TRAILER: usize = VERSION.len() + 8;

/// The error for any payload RESTORE cannot use.
const BAD_PAYLOAD: &str = "ERR DUMP payload version or checksum are wrong";

/// The payload DUMP answers for `value`.
pub fn payload(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, value);
    out.extend_from_slice(&VERSION);
    let sum = CRC64.checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The value in a payload written by [`payload`]; `None` for any other bytes.
pub fn parse_payload(bytes: &[u8]) -> Option<Value> {
    if bytes.len() < TRAILER {
        return None;
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if CRC64.checksum(body).to_le_bytes() != sum {
        return None;
    }
    let encoded = body.strip_suffix(&VERSION)?;
    let mut reader = Reader::new(encoded);
    let value = decode_value(&mut reader).ok()?;
    reader.finish().ok()?;
    (!value.is_empty_aggregate()).then_some(value)
}

/// `DUMP key`: the payload, or nil for a missing key.
fn dump(view: &View<'_>, args: &[Vec<u8>]) -> Reply {
    view.db.value(&args[1], view.now_ms).map_or(Reply::Nil, |value| Reply::Bulk(payload(value)))
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]`.
fn restore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    either(restore_key(ctx, args))
}

fn restore_key(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (mut replace, mut absolute, mut idle, mut freq) = (false, false, false, false);
    let mut i = 4;
    while i < args.len() {
        let word = &args[i];
        let has_value = i + 1 < args.len();
        if is(word, "replace") {
            replace = true;
        } else if is(word, "absttl") {
            absolute = true;
        } else if is(word, "idletime") && has_value && !freq {
            if int(&args[i + 1])? < 0 {
                return Err(err("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idle = true;
            i += 1;
        } else if is(word, "freq") && has_value && !idle {
            if !(0..=255).contains(&int(&args[i + 1])?) {
                return Err(err("ERR Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = true;
            i += 1;
        } else {
            return Err(syntax());
        }
        i += 1;
    }
    let key = &args[1];
    if !replace && ctx.db.contains(key, ctx.now_ms) {
        return Err(err("BUSYKEY Target key name already exists."));
    }
    let ttl = int(&args[2])?;
    if ttl < 0 {
        return Err(err("ERR Invalid TTL value, must be >= 0"));
    }
    let value = parse_payload(&args[3]).ok_or_else(|| err(BAD_PAYLOAD))?;
    let expires_at_ms = match ttl.unsigned_abs() {
        0 => None,
        at if absolute => Some(at),
        after => Some(ctx.now_ms.saturating_add(after)),
    };
    if expires_at_ms.is_some_and(|at| at <= ctx.now_ms) {
        // Already expired: the key is not made, and REPLACE still removes the old one.
        if replace {
            ctx.db.remove(key, ctx.now_ms);
        }
        return Ok(Reply::Ok);
    }
    ctx.db.insert(key.clone(), value, expires_at_ms);
    Ok(Reply::Ok)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{CRC64, VERSION, parse_payload, payload};
    use crate::kv::cmd::testing::{NOW, err, exec, exec_args};
    use crate::kv::db::Db;
    use crate::kv::reply::Reply;
    use crate::kv::value::Value;

    fn words(items: &[&[u8]]) -> Vec<Vec<u8>> {
        items.iter().map(|w| w.to_vec()).collect()
    }

    fn dump(db: &mut Db, key: &str) -> Reply {
        exec_args(db, &words(&[b"DUMP", key.as_bytes()]), NOW)
    }

    fn dumped(db: &mut Db, key: &str) -> Vec<u8> {
        match dump(db, key) {
            Reply::Bulk(bytes) => bytes,
            other => panic!("DUMP {key}: {other:?}"),
        }
    }

    fn restore(db: &mut Db, key: &str, ttl: &str, bytes: &[u8], options: &[&str]) -> Reply {
        let mut args = words(&[b"RESTORE", key.as_bytes(), ttl.as_bytes(), bytes]);
        args.extend(options.iter().map(|o| o.as_bytes().to_vec()));
        exec_args(db, &args, NOW)
    }

    /// `body` with a valid version and checksum after it.
    fn seal(body: &[u8]) -> Vec<u8> {
        let mut out = body.to_vec();
        out.extend_from_slice(&VERSION);
        let sum = CRC64.checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    const BAD: &str = "ERR DUMP payload version or checksum are wrong";

    #[test]
    fn every_type_round_trips() {
        let mut db = Db::default();
        exec(&mut db, "SET s hello");
        exec(&mut db, "RPUSH l a b c");
        exec(&mut db, "HSET h f1 v1 f2 v2");
        exec(&mut db, "SADD set x y z");
        exec(&mut db, "ZADD z 1.5 a -2 b inf c");
        for key in ["s", "l", "h", "set", "z"] {
            let bytes = dumped(&mut db, key);
            let copy = format!("{key}-copy");
            assert_eq!(restore(&mut db, &copy, "0", &bytes, &[]), Reply::Ok, "{key}");
            assert_eq!(db.value(copy.as_bytes(), NOW), db.value(key.as_bytes(), NOW), "{key}");
            assert_eq!(exec(&mut db, &format!("TTL {copy}")), Reply::Integer(-1));
        }
        assert_eq!(dump(&mut db, "missing"), Reply::Nil);
    }

    #[test]
    fn restore_options_and_ttl() {
        let mut db = Db::default();
        exec(&mut db, "SET k v");
        let bytes = dumped(&mut db, "k");
        assert_eq!(restore(&mut db, "k", "0", &bytes, &[]), err("BUSYKEY Target key name already exists."));
        assert_eq!(restore(&mut db, "k", "-1", &bytes, &[]), err("BUSYKEY Target key name already exists."));
        assert_eq!(restore(&mut db, "n", "-1", &bytes, &[]), err("ERR Invalid TTL value, must be >= 0"));
        assert_eq!(
            restore(&mut db, "n", "x", &bytes, &[]),
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(restore(&mut db, "n", "0", &bytes, &["BOGUS"]), err("ERR syntax error"));
        assert_eq!(
            restore(&mut db, "n", "0", &bytes, &["IDLETIME", "-1"]),
            err("ERR Invalid IDLETIME value, must be >= 0")
        );
        assert_eq!(
            restore(&mut db, "n", "0", &bytes, &["FREQ", "256"]),
            err("ERR Invalid FREQ value, must be >= 0 and <= 255")
        );
        assert_eq!(
            restore(&mut db, "n", "0", &bytes, &["FREQ", "1", "IDLETIME", "1"]),
            err("ERR syntax error")
        );
        assert_eq!(restore(&mut db, "n", "0", &bytes, &["IDLETIME"]), err("ERR syntax error"));
        assert!(!db.contains(b"n", NOW));

        assert_eq!(restore(&mut db, "n", "5000", &bytes, &["IDLETIME", "10"]), Reply::Ok);
        assert_eq!(exec(&mut db, "PTTL n"), Reply::Integer(5000));
        assert_eq!(restore(&mut db, "a", "9000", &bytes, &["ABSTTL", "FREQ", "3"]), Reply::Ok);
        assert_eq!(exec(&mut db, "PTTL a"), Reply::Integer(8000));

        // REPLACE overwrites, type and expiry included.
        exec(&mut db, "RPUSH l x");
        let list = dumped(&mut db, "l");
        assert_eq!(restore(&mut db, "n", "0", &list, &["replace"]), Reply::Ok);
        assert_eq!(exec(&mut db, "TYPE n"), Reply::Simple("list"));
        assert_eq!(exec(&mut db, "PTTL n"), Reply::Integer(-1));

        // A time already past makes nothing, and REPLACE still removes the old key.
        assert_eq!(restore(&mut db, "gone", "500", &bytes, &["ABSTTL"]), Reply::Ok);
        assert!(!db.contains(b"gone", NOW));
        assert_eq!(restore(&mut db, "n", "1000", &bytes, &["ABSTTL", "REPLACE"]), Reply::Ok);
        assert!(!db.contains(b"n", NOW));
    }

    #[test]
    fn refuses_damaged_payloads() {
        let mut db = Db::default();
        exec(&mut db, "HSET h f v g w");
        let bytes = dumped(&mut db, "h");
        for cut in 0..bytes.len() {
            assert_eq!(restore(&mut db, "t", "0", &bytes[..cut], &[]), err(BAD), "cut at {cut}");
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x20;
            assert_eq!(restore(&mut db, "t", "0", &flipped, &[]), err(BAD), "flip at {at}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(restore(&mut db, "t", "0", &longer, &[]), err(BAD));
        // A valid checksum over a wrong body: another version, trailing bytes, an unknown
        // type, an empty list.
        let body = &bytes[..bytes.len() - 10];
        let mut other_version = body.to_vec();
        other_version.extend_from_slice(&[0x4B, 0x02]);
        let sum = CRC64.checksum(&other_version);
        other_version.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(restore(&mut db, "t", "0", &other_version, &[]), err(BAD));
        assert_eq!(restore(&mut db, "t", "0", &seal(&[body, &[0]].concat()), &[]), err(BAD));
        assert_eq!(restore(&mut db, "t", "0", &seal(&[9]), &[]), err(BAD));
        assert_eq!(restore(&mut db, "t", "0", &seal(&[1, 0]), &[]), err(BAD));
        assert_eq!(restore(&mut db, "t", "0", &seal(&[]), &[]), err(BAD));
        assert!(!db.contains(b"t", NOW));
        assert_eq!(parse_payload(&seal(&[0, 2, b'h', b'i'])), Some(Value::Str(b"hi".to_vec())));
    }

    proptest! {
        #[test]
        fn any_bytes_are_safe(body in proptest::collection::vec(any::<u8>(), 0..64), raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            // Never panics; whatever decodes dumps to a payload that restores it.
            if let Some(value) = parse_payload(&seal(&body)) {
                prop_assert_eq!(parse_payload(&payload(&value)), Some(value));
            }
            let _ = parse_payload(&raw);
        }
    }
}

//! The parser against an oracle: the `redis-protocol` crate's RESP2 decoder, on random and on
//! mutated multibulk requests.
//!
//! The two must agree on every multibulk request whose count and lengths are written the way
//! Redis writes integers: whenever the oracle decodes an array of bulk strings, this parser gives
//! the same arguments and length; and whenever this parser has a whole request, the oracle does
//! not call it invalid. They differ by design in two places, both where this parser follows
//! Redis: the oracle reads integers with Rust's `str::parse` (so it takes `+1`, `01`, `-0`), and
//! refuses a count below -1 (which Redis, and this parser, consume as no command). The fuzz
//! target `resp_request` runs the same check on arbitrary bytes.

use std::borrow::Cow;

use proptest::prelude::*;
use redis_protocol::resp2::{decode::decode, types::OwnedFrame};

use super::{ProtocolError, parse::decimal, parse_request};

/// The arguments of an array of bulk strings, or `None` for any other frame.
fn bulk_strings(frame: &OwnedFrame) -> Option<Vec<Vec<u8>>> {
    let OwnedFrame::Array(frames) = frame else { return None };
    frames
        .iter()
        .map(|frame| match frame {
            OwnedFrame::BulkString(bytes) => Some(bytes.clone()),
            _ => None,
        })
        .collect()
}

/// Whether the count and length lines of the request `args` came from are written as Redis
/// writes integers, so that both decoders must read them alike.
fn canonical(buf: &[u8], args: &[Vec<u8>]) -> bool {
    let mut pos = 0;
    let mut line = |text: String, skip: usize| {
        let fits = buf.get(pos..).is_some_and(|rest| rest.starts_with(text.as_bytes()));
        pos += text.len() + skip;
        fits
    };
    line(format!("*{}\r\n", args.len()), 0)
        && args.iter().all(|arg| line(format!("${}\r\n", arg.len()), arg.len() + 2))
}

/// Checks the parser against the oracle on `buf`, a request starting with `*`.
pub(super) fn check(buf: &[u8]) {
    if buf.first() != Some(&b'*') {
        return;
    }
    let mut args = Vec::new();
    let ours = parse_request(buf, &mut args);
    let ours_args = args.iter().map(|arg| arg.to_vec()).collect::<Vec<_>>();
    let theirs = decode(buf);
    let shown = buf.escape_ascii().to_string();
    if let Ok(Some(consumed)) = ours {
        assert!(consumed > 0 && consumed <= buf.len());
        let count = consumed.checked_sub(2).and_then(|end| buf.get(1..end)).and_then(decimal);
        match &theirs {
            Ok(Some((frame, theirs_consumed))) if !ours_args.is_empty() => {
                assert_eq!(bulk_strings(frame).as_ref(), Some(&ours_args), "{shown}");
                assert_eq!(*theirs_consumed, consumed, "{shown}");
            }
            Ok(Some((OwnedFrame::Array(frames), theirs_consumed))) => {
                assert!(frames.is_empty() && *theirs_consumed == consumed, "{shown}");
            }
            Ok(Some((OwnedFrame::Null, theirs_consumed))) => {
                assert!(count == Some(-1) && *theirs_consumed == consumed, "{shown}");
            }
            Err(_) => {
                assert!(ours_args.is_empty() && count.is_some_and(|count| count < -1), "{shown}: {theirs:?}")
            }
            _ => panic!("{shown}: ours {ours:?} {ours_args:?}, theirs {theirs:?}"),
        }
    }
    if let Ok(Some((frame, theirs_consumed))) = &theirs
        && let Some(theirs_args) = bulk_strings(frame)
    {
        match ours {
            Ok(Some(_)) => {} // Compared above.
            Ok(None) => panic!("{shown}: incomplete, but the oracle decodes {theirs_args:?}"),
            Err(error) => {
                assert!(
                    !canonical(&buf[..*theirs_consumed], &theirs_args),
                    "{shown}: {error}, but the oracle decodes {theirs_args:?}"
                );
                assert!(
                    matches!(
                        error,
                        ProtocolError::InvalidMultibulkLength
                            | ProtocolError::InvalidBulkLength
                            | ProtocolError::TooBigMultibulkCount
                            | ProtocolError::TooBigBulkCount
                    ),
                    "{shown}: {error}"
                );
            }
        }
    }
}

/// `check` on `buf` and on every prefix of it.
fn check_with_prefixes(buf: &[u8]) {
    for cut in 0..=buf.len() {
        check(&buf[..cut]);
    }
}

fn multibulk(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[test]
fn the_documented_differences() {
    let mut args: Vec<Cow<'_, [u8]>> = Vec::new();
    for buf in [&b"*01\r\n$1\r\na\r\n"[..], b"*+1\r\n$1\r\na\r\n", b"*1\r\n$-0\r\n\r\n"] {
        assert!(matches!(decode(buf), Ok(Some(_))));
        assert!(parse_request(buf, &mut args).is_err());
        check(buf);
    }
    assert!(decode(b"*-2\r\n").is_err());
    assert_eq!(parse_request(b"*-2\r\n", &mut args), Ok(Some(5)));
    check(b"*-2\r\n");
}

/// A byte that a mutation puts in: one that matters to the framing, usually.
fn framing_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        Just(b'\r'),
        Just(b'\n'),
        Just(b'$'),
        Just(b'*'),
        Just(b'-'),
        Just(b'+'),
        b'0'..=b'9',
        any::<u8>(),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), framing_byte()).prop_map(|(at, byte)| Mutation::Replace(at, byte)),
        (any::<usize>(), framing_byte()).prop_map(|(at, byte)| Mutation::Insert(at, byte)),
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(buf: &mut Vec<u8>, mutation: &Mutation) {
    let len = buf.len().max(1);
    match *mutation {
        Mutation::Replace(at, byte) => {
            if let Some(slot) = buf.get_mut(at % len) {
                *slot = byte;
            }
        }
        Mutation::Insert(at, byte) => buf.insert(at % (buf.len() + 1), byte),
        Mutation::Delete(at) => {
            if !buf.is_empty() {
                buf.remove(at % len);
            }
        }
        Mutation::Truncate(at) => buf.truncate(at % len),
    }
}

fn arg() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![framing_byte(), any::<u8>()], 0..12)
}

proptest! {
    #[test]
    fn valid_requests_agree(args in proptest::collection::vec(arg(), 0..6), tail in proptest::collection::vec(framing_byte(), 0..6)) {
        let mut buf = multibulk(&args);
        buf.extend_from_slice(&tail);
        check_with_prefixes(&buf);
    }

    #[test]
    fn mutated_requests_agree(args in proptest::collection::vec(arg(), 0..6), mutations in proptest::collection::vec(mutation(), 1..4)) {
        let mut buf = multibulk(&args);
        for mutation in &mutations {
            apply(&mut buf, mutation);
        }
        check_with_prefixes(&buf);
    }

    #[test]
    fn random_requests_agree(body in proptest::collection::vec(framing_byte(), 0..40)) {
        let mut buf = vec![b'*'];
        buf.extend_from_slice(&body);
        check(&buf);
    }
}

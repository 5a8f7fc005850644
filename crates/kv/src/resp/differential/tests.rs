use std::borrow::Cow;

use proptest::prelude::*;
use redis_protocol::resp2::decode::decode;

use super::assert_agrees;
use crate::resp::parse_request;

/// `assert_agrees` on `buf` and on every prefix of it.
fn check_with_prefixes(buf: &[u8]) {
    for cut in 0..=buf.len() {
        assert_agrees(&buf[..cut]);
    }
}

/// `args` as a client writes them.
fn multibulk(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::resp::client::write_request(&mut out, args);
    out
}

#[test]
fn the_documented_differences() {
    let mut args: Vec<Cow<'_, [u8]>> = Vec::new();
    for buf in [&b"*01\r\n$1\r\na\r\n"[..], b"*+1\r\n$1\r\na\r\n", b"*1\r\n$-0\r\n\r\n"] {
        assert!(matches!(decode(buf), Ok(Some(_))));
        assert!(parse_request(buf, &mut args).is_err());
        assert_agrees(buf);
    }
    assert!(decode(b"*-2\r\n").is_err());
    assert_eq!(parse_request(b"*-2\r\n", &mut args), Ok(Some(5)));
    assert_agrees(b"*-2\r\n");
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
        assert_agrees(&buf);
    }
}

//! `cargo fuzz run resp_request`: any bytes a client can send are parsed request after request
//! until one is incomplete or refused, never with a panic. Each complete request takes at least
//! one byte and no more than there are, and its borrowed arguments lie inside what it took;
//! prefixes of the rest parse as incomplete or exactly as the whole; and each multibulk request
//! agrees with the `redis-protocol` crate's decoder, as in `kairos_kv::resp`'s differential
//! tests: whenever the decoder reads an array of bulk strings, the parser reads the same, unless
//! its count or lengths are not written as Redis writes integers (the decoder takes `+1`, `01`,
//! `-0`, Redis does not); and whenever the parser has a whole request, the decoder does not call
//! it invalid, unless its count is below -1 (Redis takes it as no command).
#![no_main]

use std::borrow::Cow;

use kairos_kv::resp::{ProtocolError, parse_request};
use libfuzzer_sys::fuzz_target;
use redis_protocol::resp2::{decode::decode, types::OwnedFrame};

type Parsed = Result<Option<(usize, Vec<Vec<u8>>)>, ProtocolError>;

fn parse(buf: &[u8]) -> Parsed {
    let mut args = Vec::new();
    let parsed = parse_request(buf, &mut args)?;
    let Some(consumed) = parsed else {
        assert!(args.is_empty(), "arguments left behind by an incomplete request");
        return Ok(None);
    };
    assert!(consumed > 0 && consumed <= buf.len(), "consumed {consumed} of {}", buf.len());
    for arg in &args {
        if let Cow::Borrowed(slice) = arg {
            let (start, at) = (buf.as_ptr() as usize, slice.as_ptr() as usize);
            assert!(at >= start && at + slice.len() <= start + consumed, "an argument outside its request");
        }
    }
    Ok(Some((consumed, args.iter().map(|arg| arg.to_vec()).collect())))
}

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
/// writes integers.
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

/// The parser's answer `ours` on `buf` against the decoder's.
fn compare(buf: &[u8], ours: &Parsed) {
    if buf.first() != Some(&b'*') {
        return;
    }
    let theirs = decode(buf);
    let shown = buf.escape_ascii().to_string();
    if let Ok(Some((consumed, args))) = ours {
        let count = std::str::from_utf8(&buf[1..consumed - 2]).ok().and_then(|text| text.parse::<i64>().ok());
        match &theirs {
            Ok(Some((frame, theirs_consumed))) if !args.is_empty() => {
                assert_eq!(bulk_strings(frame).as_ref(), Some(args), "{shown}");
                assert_eq!(theirs_consumed, consumed, "{shown}");
            }
            Ok(Some((OwnedFrame::Array(frames), theirs_consumed))) => {
                assert!(frames.is_empty() && theirs_consumed == consumed, "{shown}");
            }
            Ok(Some((OwnedFrame::Null, theirs_consumed))) => {
                assert!(count == Some(-1) && theirs_consumed == consumed, "{shown}");
            }
            Err(_) => {
                assert!(args.is_empty() && count.is_some_and(|count| count < -1), "{shown}: {theirs:?}")
            }
            _ => panic!("{shown}: ours {ours:?}, theirs {theirs:?}"),
        }
    }
    if let Ok(Some((frame, theirs_consumed))) = &theirs
        && let Some(theirs_args) = bulk_strings(frame)
    {
        match ours {
            Ok(Some(_)) => {} // Compared above.
            Ok(None) => panic!("{shown}: incomplete, but the decoder reads {theirs_args:?}"),
            Err(error) => {
                assert!(
                    !canonical(&buf[..*theirs_consumed], &theirs_args),
                    "{shown}: {error}, but the decoder reads {theirs_args:?}"
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

/// Prefixes of `buf` parse as incomplete or as `buf` does: all of them for a short `buf`, about
/// 64 spread over it and the last few for a long one.
fn check_prefixes(buf: &[u8], whole: &Parsed) {
    let step = (buf.len() / 64).max(1);
    let cuts = (0..buf.len()).step_by(step).chain(buf.len().saturating_sub(3)..buf.len());
    for cut in cuts {
        let part = parse(&buf[..cut]);
        assert!(part == Ok(None) || part == *whole, "cut {cut}: {part:?}, whole {whole:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    loop {
        let parsed = parse(rest);
        compare(rest, &parsed);
        check_prefixes(rest, &parsed);
        match parsed {
            Ok(Some((consumed, _))) => rest = &rest[consumed..],
            Ok(None) | Err(_) => break,
        }
    }
});

//! `cargo fuzz run resp_request`: any bytes a client can send are parsed request after request
//! until one is incomplete or refused, never with a panic. Each complete request takes at least
//! one byte and no more than there are, and its borrowed arguments lie inside what it took;
//! prefixes of the rest parse as incomplete or exactly as the whole; and each multibulk request
//! agrees with the `redis-protocol` crate's decoder, except where the parser follows Redis by
//! design (`kairos_kv::resp::differential`, the check the crate's own tests run).
#![no_main]

use std::borrow::Cow;

use kairos_fuzz as _;
use kairos_kv::resp::differential::assert_agrees_with;
use kairos_kv::resp::{ProtocolError, parse_request};
use libfuzzer_sys::fuzz_target;

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
        let (ours, args) = match &parsed {
            Ok(Some((consumed, args))) => (Ok(Some(*consumed)), args.as_slice()),
            Ok(None) => (Ok(None), &[][..]),
            Err(error) => (Err(*error), &[][..]),
        };
        assert_agrees_with(rest, ours, args);
        check_prefixes(rest, &parsed);
        match parsed {
            Ok(Some((consumed, _))) => rest = &rest[consumed..],
            Ok(None) | Err(_) => break,
        }
    }
});

//! The parser against an oracle: the `redis-protocol` crate's RESP2 decoder, on random and on
//! mutated multibulk requests.
//!
//! The two must agree on every multibulk request whose count and lengths are written the way
//! Redis writes integers: whenever the oracle decodes an array of bulk strings, this parser gives
//! the same arguments and length; and whenever this parser has a whole request, the oracle does
//! not call it invalid. They differ by design in two places, both where this parser follows
//! Redis: the oracle reads integers with Rust's `str::parse` (so it takes `+1`, `01`, `-0`), and
//! refuses a count below -1 (which Redis, and this parser, consume as no command).
//!
//! [`assert_agrees`] is the check; the crate's tests run it on random and mutated requests
//! and the fuzz target `resp_request` on arbitrary bytes (feature `differential`, which brings
//! in the oracle).

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

/// Checks the parser against the oracle on `buf` (bytes from anywhere; only a request starting
/// with `*` is compared) and panics, naming the bytes, where they disagree other than by design.
pub fn assert_agrees(buf: &[u8]) {
    let mut args = Vec::new();
    let ours = parse_request(buf, &mut args);
    let ours_args = args.iter().map(|arg| arg.to_vec()).collect::<Vec<_>>();
    assert_agrees_with(buf, ours, &ours_args);
}

/// [`assert_agrees`] for a caller that has parsed `buf` already: `ours` is what
/// [`parse_request`] returned for it and `ours_args` the arguments it read.
pub fn assert_agrees_with(buf: &[u8], ours: Result<Option<usize>, ProtocolError>, ours_args: &[Vec<u8>]) {
    if buf.first() != Some(&b'*') {
        return;
    }
    let theirs = decode(buf);
    let shown = buf.escape_ascii().to_string();
    if let Ok(Some(consumed)) = ours {
        assert!(consumed > 0 && consumed <= buf.len());
        let count = consumed.checked_sub(2).and_then(|end| buf.get(1..end)).and_then(decimal);
        match &theirs {
            Ok(Some((frame, theirs_consumed))) if !ours_args.is_empty() => {
                assert_eq!(bulk_strings(frame).as_deref(), Some(ours_args), "{shown}");
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

#[cfg(test)]
mod tests;

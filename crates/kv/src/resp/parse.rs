//! Requests: the dispatch on the first byte, and the multibulk form.

use std::borrow::Cow;

use super::{MAX_BULK_LEN, MAX_INLINE_LEN, MAX_MULTIBULK_LEN, ProtocolError, inline};

/// One argument of a request: a slice of the buffer it was parsed from, or, for an inline
/// argument rewritten by its quotes or escapes, its own bytes.
pub type Arg<'a> = Cow<'a, [u8]>;

/// The bytes the smallest argument takes: `$0\r\n` and the two bytes after its payload.
const MIN_ARG_BYTES: usize = 6;

/// The limits a request is held to; [`Limits::default`] gives Redis's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most arguments a multibulk request may announce ([`MAX_MULTIBULK_LEN`]).
    pub max_multibulk_len: usize,
    /// The longest bulk argument, in bytes ([`MAX_BULK_LEN`]).
    pub max_bulk_len: usize,
    /// The longest line, in bytes, not counting its `\r\n` or `\n`: an inline request, or a
    /// count or length line counted from its `*` or `$` ([`MAX_INLINE_LEN`]).
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_multibulk_len: MAX_MULTIBULK_LEN,
            max_bulk_len: MAX_BULK_LEN,
            max_inline_len: MAX_INLINE_LEN,
        }
    }
}

/// Parses one request at the start of `buf`, under Redis's [`Limits`].
///
/// - `Ok(Some(consumed))`: the request took `buf[..consumed]` (`consumed > 0`) and `args` holds
///   its arguments. `args` is empty for a request that is no command (`*0\r\n`, `*-1\r\n`, a
///   blank inline line): the caller drops the bytes and goes on.
/// - `Ok(None)`: the request is not complete; call again once more bytes are in `buf`.
/// - `Err`: the stream is not RESP; reply with the error and close the connection.
///
/// `args` is cleared first, and left empty unless the result is `Ok(Some(_))`. See the
/// [module documentation](super) for the forms, the work bound and the differences from Redis.
pub fn parse_request<'a>(
    buf: &'a [u8],
    args: &mut Vec<Cow<'a, [u8]>>,
) -> Result<Option<usize>, ProtocolError> {
    parse_request_with(buf, args, &Limits::default())
}

/// [`parse_request`] under the given limits.
pub fn parse_request_with<'a>(
    buf: &'a [u8],
    args: &mut Vec<Cow<'a, [u8]>>,
    limits: &Limits,
) -> Result<Option<usize>, ProtocolError> {
    args.clear();
    let parsed = match buf.first() {
        None => Ok(None),
        Some(b'*') => multibulk(buf, args, limits),
        Some(_) => inline::parse(buf, args, limits.max_inline_len),
    };
    if !matches!(parsed, Ok(Some(_))) {
        args.clear();
    }
    parsed
}

/// A multibulk request; `buf` starts with `*`.
fn multibulk<'a>(
    buf: &'a [u8],
    args: &mut Vec<Arg<'a>>,
    limits: &Limits,
) -> Result<Option<usize>, ProtocolError> {
    let Some(cr) = header_line(buf, 0, limits.max_inline_len, ProtocolError::TooBigMultibulkCount)? else {
        return Ok(None);
    };
    // `header_line` found `buf[0]` (the `*`) before `cr`, and a byte after `cr`.
    let count = line_number(buf, 1, cr).ok_or(ProtocolError::InvalidMultibulkLength)?;
    let mut pos = cr + 2;
    if count <= 0 {
        return Ok(Some(pos));
    }
    let count = usize::try_from(count)
        .ok()
        .filter(|&count| count <= limits.max_multibulk_len)
        .ok_or(ProtocolError::InvalidMultibulkLength)?;
    // Reserve what the bytes at hand can hold, not what the client claims.
    args.reserve(count.min((buf.len() - pos) / MIN_ARG_BYTES));
    for _ in 0..count {
        let Some(cr) = header_line(buf, pos, limits.max_inline_len, ProtocolError::TooBigBulkCount)? else {
            return Ok(None);
        };
        // `pos <= cr < buf.len()`.
        if buf[pos] != b'$' {
            return Err(ProtocolError::ExpectedDollar { got: buf[pos] });
        }
        let len = line_number(buf, pos + 1, cr)
            .and_then(|len| usize::try_from(len).ok())
            .filter(|&len| len <= limits.max_bulk_len)
            .ok_or(ProtocolError::InvalidBulkLength)?;
        let start = cr + 2;
        // The payload and the two bytes after it, which Redis skips unchecked.
        if buf.len() - start < len.saturating_add(2) {
            return Ok(None);
        }
        args.push(Cow::Borrowed(&buf[start..start + len]));
        pos = start + len + 2;
    }
    Ok(Some(pos))
}

/// Finds the `\r` that ends the count or length line starting at `buf[start]`, searching at
/// most `max_len + 1` bytes. `Ok(Some(cr))` once the byte after it is in `buf` too (so
/// `start <= cr` and `cr + 2 <= buf.len()`); `Ok(None)` while the line may still end within the
/// limit; `too_long` once it cannot. A line whose `\r` lies past the limit is refused even when
/// the `\r` is already in `buf`, so that the answer does not depend on how much has arrived.
fn header_line(
    buf: &[u8],
    start: usize,
    max_len: usize,
    too_long: ProtocolError,
) -> Result<Option<usize>, ProtocolError> {
    let rest = buf.get(start..).unwrap_or_default();
    let window = &rest[..rest.len().min(max_len.saturating_add(1))];
    match window.iter().position(|&byte| byte == b'\r') {
        Some(cr) if cr + 2 <= rest.len() => Ok(Some(start + cr)),
        Some(_) => Ok(None),
        None if rest.len() > max_len => Err(too_long),
        None => Ok(None),
    }
}

/// The integer written in `buf[from..cr]`, when that is one in Redis's strict form and the `\r`
/// at `cr` is followed by `\n`. Needs `from <= cr + 1` and `cr + 2 <= buf.len()`.
fn line_number(buf: &[u8], from: usize, cr: usize) -> Option<i64> {
    if buf[cr + 1] != b'\n' {
        return None;
    }
    decimal(buf.get(from..cr)?)
}

/// Redis's `string2ll`: an `i64` in decimal, with an optional `-`, no `+`, no leading zeros, no
/// `-0`, no blanks, at most 20 bytes.
pub(super) fn decimal(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > 20 {
        return None;
    }
    if text == b"0" {
        return Some(0);
    }
    let (negative, digits) = match text {
        [b'-', digits @ ..] => (true, digits),
        digits => (false, digits),
    };
    if !matches!(digits.first(), Some(b'1'..=b'9')) {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
    }
    let magnitude = i128::from(magnitude);
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a parse gives, with the arguments owned, for comparisons.
    type Parsed = Result<Option<(usize, Vec<Vec<u8>>)>, ProtocolError>;

    /// Parses `buf` and turns the arguments into owned vectors.
    fn parse(buf: &[u8]) -> Parsed {
        parse_with(buf, &Limits::default())
    }

    fn parse_with(buf: &[u8], limits: &Limits) -> Parsed {
        let mut args = vec![Cow::Borrowed(&b"stale"[..])];
        let parsed = parse_request_with(buf, &mut args, limits)?;
        if parsed.is_none() {
            assert!(args.is_empty(), "arguments left behind by an incomplete request");
        }
        Ok(parsed.map(|consumed| (consumed, args.iter().map(|arg| arg.to_vec()).collect())))
    }

    fn complete(buf: &[u8], args: &[&[u8]]) {
        let expected = args.iter().map(|arg| arg.to_vec()).collect::<Vec<_>>();
        assert_eq!(parse(buf), Ok(Some((buf.len(), expected))), "{:?}", buf.escape_ascii().to_string());
    }

    fn refused(buf: &[u8], error: ProtocolError) {
        assert_eq!(parse(buf), Err(error), "{:?}", buf.escape_ascii().to_string());
    }

    /// `args` as a client writes them.
    fn multibulk(args: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        crate::resp::client::write_request(&mut out, args);
        out
    }

    /// Every proper prefix of `buf` is incomplete.
    fn every_prefix_incomplete(buf: &[u8]) {
        for cut in 0..buf.len() {
            assert_eq!(parse(&buf[..cut]), Ok(None), "cut at {cut} of {:?}", buf.escape_ascii().to_string());
        }
    }

    #[test]
    fn multibulk_frames() {
        complete(b"*1\r\n$4\r\nPING\r\n", &[b"PING"]);
        complete(b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$0\r\n\r\n", &[b"SET", b"a", b""]);
        complete(b"*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n", &[b"GET", b"a\r\nb"]);
        complete(b"*1\r\n$3\r\n\x00\xff*\r\n", &[b"\x00\xff*"]);
    }

    #[test]
    fn multibulk_arguments_borrow_the_buffer() {
        let buf = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
        let mut args = Vec::new();
        assert_eq!(parse_request(buf, &mut args), Ok(Some(buf.len())));
        assert!(args.iter().all(|arg| matches!(arg, Cow::Borrowed(_))));
        assert_eq!(args[1].as_ptr(), buf[17..].as_ptr());
    }

    #[test]
    fn empty_requests_are_consumed_as_no_command() {
        for buf in [&b"*0\r\n"[..], b"*-1\r\n", b"*-9223372036854775808\r\n", b"\r\n", b"\n", b" \t \r\n"] {
            complete(buf, &[]);
        }
    }

    #[test]
    fn the_bytes_after_a_payload_are_skipped_unchecked_as_redis_does() {
        complete(b"*2\r\n$1\r\naXY$1\r\nb\r\n", &[b"a", b"b"]);
    }

    #[test]
    fn pipelined_requests_parse_one_after_another() {
        let mut buf = multibulk(&[b"SET", b"k", b"v"]);
        buf.extend_from_slice(b"PING\r\n*0\r\nECHO \"a b\"\n");
        buf.extend_from_slice(&multibulk(&[b"GET", b"k"]));
        buf.extend_from_slice(b"*2\r\n$3\r\nGET");
        let expected: [&[&[u8]]; 5] =
            [&[b"SET", b"k", b"v"], &[b"PING"], &[], &[b"ECHO", b"a b"], &[b"GET", b"k"]];
        let mut rest = &buf[..];
        for want in expected {
            let (consumed, args) = parse(rest).unwrap().expect("a complete request");
            assert_eq!(args, want.iter().map(|arg| arg.to_vec()).collect::<Vec<_>>());
            rest = &rest[consumed..];
        }
        assert_eq!(parse(rest), Ok(None));
    }

    #[test]
    fn every_split_point_is_incomplete_then_whole() {
        let requests: [&[u8]; 9] = [
            &multibulk(&[b"SET", b"key", b"value"]),
            &multibulk(&[b""]),
            &multibulk(&[b"\r\n", b"$1\r\n"]),
            b"*0\r\n",
            b"*-1\r\n",
            b"PING\r\n",
            b"SET a b\n",
            b"ECHO \"x\\x41\\n\" 'it\\'s'\r\n",
            b"\r\n",
        ];
        for request in requests {
            every_prefix_incomplete(request);
            assert!(matches!(parse(request), Ok(Some((n, _))) if n == request.len()));
        }
    }

    #[test]
    fn multibulk_count_errors() {
        let bad_counts: [&[u8]; 10] = [
            b"*x\r\n",
            b"*\r\n",
            b"*+1\r\n",
            b"*01\r\n",
            b"*-0\r\n",
            b"*1 \r\n",
            b"*9223372036854775808\r\n",
            b"*1048577\r\n",
            // Redis takes the byte after `\r` on trust; this parser wants the `\n`.
            b"*1\rx$1\r\na\r\n",
            b"*1\r\r\n",
        ];
        for request in bad_counts {
            refused(request, ProtocolError::InvalidMultibulkLength);
        }
        assert_eq!(parse(b"*1048576\r\n"), Ok(None));
    }

    #[test]
    fn bulk_errors() {
        for request in [
            &b"*1\r\n$x\r\n"[..],
            b"*1\r\n$-1\r\n",
            b"*1\r\n$01\r\n",
            b"*1\r\n$\r\n",
            b"*1\r\n$1\rx",
            b"*1\r\n$536870913\r\n",
        ] {
            refused(request, ProtocolError::InvalidBulkLength);
        }
        assert_eq!(parse(b"*1\r\n$536870912\r\n"), Ok(None));
        let small = Limits { max_bulk_len: 3, ..Limits::default() };
        assert_eq!(parse_with(b"*1\r\n$3\r\nabc\r\n", &small), Ok(Some((13, vec![b"abc".to_vec()]))));
        assert_eq!(parse_with(b"*1\r\n$4\r\n", &small), Err(ProtocolError::InvalidBulkLength));
        refused(b"*2\r\n$1\r\na\r\n+OK\r\n", ProtocolError::ExpectedDollar { got: b'+' });
        refused(b"*1\r\n\r\n", ProtocolError::ExpectedDollar { got: b'\r' });
        // Redis looks at the first byte only once the line is whole.
        assert_eq!(parse(b"*1\r\n:1"), Ok(None));
    }

    #[test]
    fn error_texts_are_redis_texts() {
        let texts = [
            (ProtocolError::TooBigInlineRequest, "too big inline request"),
            (ProtocolError::UnbalancedQuotes, "unbalanced quotes in request"),
            (ProtocolError::TooBigMultibulkCount, "too big mbulk count string"),
            (ProtocolError::InvalidMultibulkLength, "invalid multibulk length"),
            (ProtocolError::TooBigBulkCount, "too big bulk count string"),
            (ProtocolError::ExpectedDollar { got: b'X' }, "expected '$', got 'X'"),
            (ProtocolError::ExpectedDollar { got: b'\r' }, "expected '$', got '\\x0d'"),
            (ProtocolError::InvalidBulkLength, "invalid bulk length"),
        ];
        for (error, text) in texts {
            assert_eq!(error.to_string(), text);
        }
    }

    #[test]
    fn line_limits_are_redis_limits_whatever_has_arrived() {
        for (prefix, error) in
            [(&b"*"[..], ProtocolError::TooBigMultibulkCount), (b"*1\r\n$", ProtocolError::TooBigBulkCount)]
        {
            // The line counts from its `*` or `$`: 65,536 bytes may still end; one more cannot.
            let mut line = prefix.to_vec();
            line.resize(prefix.len() - 1 + MAX_INLINE_LEN, b'0');
            assert_eq!(parse(&line), Ok(None));
            let mut with_cr = line.clone();
            with_cr.push(b'\r');
            assert_eq!(parse(&with_cr), Ok(None));
            with_cr.push(b'\n');
            assert!(matches!(
                parse(&with_cr),
                Err(ProtocolError::InvalidMultibulkLength | ProtocolError::InvalidBulkLength)
            ));
            line.push(b'0');
            refused(&line, error);
            line.extend_from_slice(b"\r\n");
            refused(&line, error);
        }
        let mut inline = vec![b'x'; MAX_INLINE_LEN];
        assert_eq!(parse(&inline), Ok(None));
        inline.push(b'\n');
        assert!(matches!(parse(&inline), Ok(Some((n, _))) if n == MAX_INLINE_LEN + 1));
        inline.pop();
        inline.push(b'x');
        refused(&inline, ProtocolError::TooBigInlineRequest);
        inline.push(b'\n');
        refused(&inline, ProtocolError::TooBigInlineRequest);
    }

    #[test]
    fn decimal_is_string2ll() {
        for (text, value) in [
            (&b"0"[..], Some(0)),
            (b"7", Some(7)),
            (b"-7", Some(-7)),
            (b"9223372036854775807", Some(i64::MAX)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
            (b"-9223372036854775809", None),
            (b"99999999999999999999", None),
            (b"-", None),
            (b"-0", None),
            (b"00", None),
            (b"+1", None),
            (b" 1", None),
            (b"1a", None),
            (b"", None),
        ] {
            assert_eq!(decimal(text), value, "{:?}", text.escape_ascii().to_string());
        }
    }

    fn plain_token() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            any::<u8>().prop_filter("a plain byte", |&b| !b" \t\r\n\x0b\x0c\"'".contains(&b)),
            1..12,
        )
    }

    proptest! {
        #[test]
        fn multibulk_round_trip(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let refs = args.iter().map(Vec::as_slice).collect::<Vec<_>>();
            let mut buf = multibulk(&refs);
            let len = buf.len();
            buf.extend_from_slice(&tail);
            prop_assert_eq!(parse(&buf), Ok(Some((len, args))));
        }

        #[test]
        fn inline_round_trip(args in proptest::collection::vec(plain_token(), 1..8), gaps in proptest::collection::vec("[ \t]{1,3}", 8), crlf in any::<bool>()) {
            let mut buf = Vec::new();
            for (arg, gap) in args.iter().zip(&gaps) {
                buf.extend_from_slice(gap.as_bytes());
                buf.extend_from_slice(arg);
            }
            buf.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            prop_assert_eq!(parse(&buf), Ok(Some((buf.len(), args))));
        }

        #[test]
        fn a_prefix_parses_as_incomplete_or_as_the_whole(buf in proptest::collection::vec(prop_oneof![Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), Just(b'"'), Just(b' '), b'0'..=b'3', any::<u8>()], 0..48)) {
            let whole = parse(&buf);
            for cut in 0..buf.len() {
                let part = parse(&buf[..cut]);
                prop_assert!(part == Ok(None) || part == whole, "cut {}: {:?} then {:?}", cut, part, whole);
            }
        }
    }
}

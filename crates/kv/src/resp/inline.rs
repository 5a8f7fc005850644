//! Inline requests: one line, split into arguments as Redis's `sdssplitargs` does.
//!
//! Blanks (C's `isspace`: space, `\t`, `\n`, `\v`, `\f`, `\r`) separate arguments; outside
//! quotes only space, `\t`, `\n` and `\r` end one, so `\v` and `\f` inside a word belong to it.
//! A quote may open anywhere in a word (`a"b c"` is `ab c`), and its closing quote must be
//! followed by a blank or the end of the line, which also ends the argument (`'it''s'` is
//! unbalanced). In double quotes, `\xHH` (two hex digits) is that byte, `\n`, `\r`, `\t`, `\b`,
//! `\a` are the control characters, and `\` before any other byte is that byte (`\"`, `\\`,
//! `\x4g` is `x4g`). In single quotes, `\'` is a quote and every other byte is itself.

use std::borrow::Cow;

use super::{ProtocolError, parse::Arg};

/// An inline request at the start of `buf`: its line ends at the first `\n` (a `\r` before it is
/// not part of it), which must come within `max_len` bytes.
pub(super) fn parse<'a>(
    buf: &'a [u8],
    args: &mut Vec<Arg<'a>>,
    max_len: usize,
) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[..buf.len().min(max_len.saturating_add(1))];
    let Some(newline) = window.iter().position(|&byte| byte == b'\n') else {
        return if buf.len() > max_len { Err(ProtocolError::TooBigInlineRequest) } else { Ok(None) };
    };
    let line = &buf[..newline];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    split(line, args)?;
    Ok(Some(newline + 1))
}

/// C's `isspace` in the C locale.
fn is_blank(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

fn hex_value(byte: u8) -> Option<u8> {
    char::from(byte).to_digit(16).and_then(|digit| u8::try_from(digit).ok())
}

/// Inside which quotes the scan is.
#[derive(Clone, Copy)]
enum Quote {
    None,
    Double,
    Single,
}

/// Splits `line` into `args`, as `sdssplitargs`. Work: one pass over `line`, plus one copy of an
/// argument's bytes when its quotes or escapes make it differ from what the line holds.
fn split<'a>(line: &'a [u8], args: &mut Vec<Arg<'a>>) -> Result<(), ProtocolError> {
    let at = |i: usize| line.get(i).copied();
    let mut p = 0;
    loop {
        while at(p).is_some_and(is_blank) {
            p += 1;
        }
        if p >= line.len() {
            return Ok(());
        }
        let mut arg = ArgBuilder::default();
        let mut quote = Quote::None;
        loop {
            match (quote, at(p)) {
                (Quote::Double, Some(b'\\')) => {
                    let hex = (at(p + 1) == Some(b'x'))
                        .then(|| Some((hex_value(at(p + 2)?)? << 4) | hex_value(at(p + 3)?)?))
                        .flatten();
                    if let Some(byte) = hex {
                        arg.push(line, byte);
                        p += 3;
                    } else if let Some(escaped) = at(p + 1) {
                        p += 1;
                        match escaped {
                            b'n' => arg.push(line, b'\n'),
                            b'r' => arg.push(line, b'\r'),
                            b't' => arg.push(line, b'\t'),
                            b'b' => arg.push(line, b'\x08'),
                            b'a' => arg.push(line, b'\x07'),
                            _ => arg.copy(line, p),
                        }
                    } else {
                        // A `\` that ends the line leaves the quotes open.
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                }
                (Quote::Single, Some(b'\\')) if at(p + 1) == Some(b'\'') => {
                    p += 1;
                    arg.copy(line, p);
                }
                (Quote::Double, Some(b'"')) | (Quote::Single, Some(b'\'')) => {
                    if at(p + 1).is_some_and(|next| !is_blank(next)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    p += 1;
                    break;
                }
                (Quote::Double | Quote::Single, None) => return Err(ProtocolError::UnbalancedQuotes),
                (Quote::None, None) => break,
                (Quote::None, Some(b' ' | b'\t' | b'\n' | b'\r')) => {
                    p += 1;
                    break;
                }
                (Quote::None, Some(b'"')) => quote = Quote::Double,
                (Quote::None, Some(b'\'')) => quote = Quote::Single,
                (_, Some(_)) => arg.copy(line, p),
            }
            p += 1;
        }
        args.push(arg.finish(line));
    }
}

/// An argument being read: a range of the line while it is a verbatim run of it, its own bytes
/// from the first byte that breaks the run.
#[derive(Default)]
struct ArgBuilder {
    start: usize,
    end: usize,
    owned: Option<Vec<u8>>,
}

impl ArgBuilder {
    /// Appends `line[i]` as it stands.
    fn copy(&mut self, line: &[u8], i: usize) {
        match &mut self.owned {
            Some(bytes) => bytes.push(line[i]),
            None if self.start == self.end => (self.start, self.end) = (i, i + 1),
            None if self.end == i => self.end += 1,
            None => self.push(line, line[i]),
        }
    }

    /// Appends a byte that the line holds in another form (an escape, or after a quote).
    fn push(&mut self, line: &[u8], byte: u8) {
        self.owned.get_or_insert_with(|| line[self.start..self.end].to_vec()).push(byte);
    }

    fn finish(self, line: &[u8]) -> Arg<'_> {
        match self.owned {
            Some(bytes) => Cow::Owned(bytes),
            None => Cow::Borrowed(&line[self.start..self.end]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::parse_request;
    use proptest::prelude::*;

    fn split_line(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        let mut args = Vec::new();
        split(line, &mut args)?;
        Ok(args.iter().map(|arg| arg.to_vec()).collect())
    }

    fn splits_to(line: &[u8], expected: &[&[u8]]) {
        let expected = expected.iter().map(|arg| arg.to_vec()).collect::<Vec<_>>();
        assert_eq!(split_line(line), Ok(expected), "{:?}", line.escape_ascii().to_string());
    }

    fn unbalanced(line: &[u8]) {
        assert_eq!(
            split_line(line),
            Err(ProtocolError::UnbalancedQuotes),
            "{:?}",
            line.escape_ascii().to_string()
        );
    }

    #[test]
    fn blanks_separate_arguments() {
        splits_to(b"SET a b", &[b"SET", b"a", b"b"]);
        splits_to(b"  SET\t\ta \r b  ", &[b"SET", b"a", b"b"]);
        splits_to(b"", &[]);
        splits_to(b" \t\x0b\x0c ", &[]);
        // `\v` and `\f` are skipped before a word but do not end one.
        splits_to(b"\x0ba\x0bb\x0c c", &[b"a\x0bb\x0c", b"c"]);
        splits_to(b"a\0b", &[b"a\0b"]);
    }

    #[test]
    fn double_quotes_take_escapes() {
        splits_to(br#""a\x41\n""#, &[b"aA\n"]);
        splits_to(br#""\x4a\x4B\xff\x00""#, &[b"JK\xff\x00"]);
        splits_to(br#""\x4g" "\x" "\x4""#, &[b"x4g", b"x", b"x4"]);
        splits_to(br#""\r\t\b\a\"\\\q""#, &[b"\r\t\x08\x07\"\\q"]);
        splits_to(br#""a b" "" c"#, &[b"a b", b"", b"c"]);
        splits_to(b"\"a\rb\"", &[b"a\rb"]);
    }

    #[test]
    fn single_quotes_take_only_an_escaped_quote() {
        splits_to(br"'it\'s'", &[b"it's"]);
        splits_to(br"'a\nb\\c' x", &[b"a\\nb\\\\c", b"x"]);
        splits_to(br#"'say "hi"'"#, &[b"say \"hi\""]);
    }

    #[test]
    fn quotes_open_within_a_word_and_end_it() {
        splits_to(br#"a"b c""#, &[b"ab c"]);
        splits_to(br#"key"x y" z"#, &[b"keyx y", b"z"]);
        splits_to(b"a'b'\x0bc", &[b"ab", b"c"]);
    }

    #[test]
    fn unbalanced_quotes() {
        unbalanced(br#"ECHO "a"#);
        unbalanced(b"ECHO 'a");
        unbalanced(br#""a"x"#);
        unbalanced(b"'a'x");
        unbalanced(br"'it''s'");
        unbalanced(br#""a\"#);
        unbalanced(br#""a\""#);
        unbalanced(br"'a\'");
        let mut args = Vec::new();
        assert_eq!(parse_request(b"ECHO \"a\r\n", &mut args), Err(ProtocolError::UnbalancedQuotes));
    }

    #[test]
    fn verbatim_arguments_borrow_the_line() {
        let line = br#"GET "key" 'val' "a\nb" a"b""#;
        let mut args = Vec::new();
        split(line, &mut args).unwrap();
        let borrowed = args.iter().map(|arg| matches!(arg, Cow::Borrowed(_))).collect::<Vec<_>>();
        assert_eq!(borrowed, [true, true, true, false, false]);
        assert_eq!(args[1].as_ptr(), line[5..].as_ptr());
    }

    #[test]
    fn a_line_ends_at_newline_with_or_without_return() {
        let mut args = Vec::new();
        assert_eq!(parse(b"PING\nrest", &mut args, 64), Ok(Some(5)));
        assert_eq!(args, [&b"PING"[..]]);
        args.clear();
        assert_eq!(parse(b"PING\r\r\n", &mut args, 64), Ok(Some(7)));
        assert_eq!(args, [&b"PING"[..]]);
        args.clear();
        assert_eq!(parse(b"PING\r", &mut args, 64), Ok(None));
    }

    /// Writes `bytes` as a double-quoted argument, escaping what must be.
    fn double_quoted(bytes: &[u8], hex_everything: bool) -> Vec<u8> {
        let mut out = vec![b'"'];
        for &byte in bytes {
            match byte {
                b'"' | b'\\' => out.extend_from_slice(&[b'\\', byte]),
                b'\n' => out.extend_from_slice(b"\\n"),
                _ if hex_everything || !byte.is_ascii_graphic() => {
                    out.extend_from_slice(format!("\\x{byte:02X}").as_bytes())
                }
                _ => out.push(byte),
            }
        }
        out.push(b'"');
        out
    }

    proptest! {
        #[test]
        fn double_quoted_round_trip(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..6), hex in any::<bool>()) {
            let mut line = b"ECHO".to_vec();
            for arg in &args {
                line.push(b' ');
                line.extend_from_slice(&double_quoted(arg, hex));
            }
            let mut expected = vec![b"ECHO".to_vec()];
            expected.extend(args);
            prop_assert_eq!(split_line(&line), Ok(expected));
        }

        #[test]
        fn split_never_panics(line in proptest::collection::vec(prop_oneof![Just(b'"'), Just(b'\''), Just(b'\\'), Just(b'x'), Just(b' '), b'0'..=b'9', any::<u8>()], 0..40)) {
            let _ = split_line(&line);
        }
    }
}

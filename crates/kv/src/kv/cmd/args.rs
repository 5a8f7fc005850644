//! Argument parsing and error replies in Redis 7's words, shared by every command.

use crate::kv::reply::Reply;

/// An error reply.
pub fn err(text: impl Into<String>) -> Reply {
    Reply::Error(text.into())
}

/// `ERR syntax error`.
pub fn syntax() -> Reply {
    err("ERR syntax error")
}

/// The wrong-arity error for `name` (lower case, `config|get` for a subcommand).
pub fn wrong_arity(name: &str) -> Reply {
    err(format!("ERR wrong number of arguments for '{name}' command"))
}

/// `ERR value is not an integer or out of range`.
pub fn not_integer() -> Reply {
    err("ERR value is not an integer or out of range")
}

/// `ERR value is not a valid float`.
pub fn not_float() -> Reply {
    err("ERR value is not a valid float")
}

/// Whether `arg` is `word`, ignoring ASCII case.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// Redis's `string2ll`: an optional '-', then digits without a leading zero (except "0"), and
/// the value fits an `i64`. No '+', no spaces.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    if digits.is_empty() || digits.len() > 20 || (digits[0] == b'0' && (digits.len() > 1 || negative)) {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(d - b'0');
        value = if negative {
            value.checked_mul(10)?.checked_sub(digit)?
        } else {
            value.checked_mul(10)?.checked_add(digit)?
        };
    }
    Some(value)
}

/// An integer argument, or Redis's error for one that is not.
pub fn int(arg: &[u8]) -> Result<i64, Reply> {
    parse_i64(arg).ok_or_else(not_integer)
}

/// A non-negative integer argument, or `ERR {what} is out of range, must be positive`.
pub fn positive(arg: &[u8], what: &str) -> Result<i64, Reply> {
    let n = int(arg)?;
    if n < 0 {
        return Err(err(format!("ERR {what} is out of range, must be positive")));
    }
    Ok(n)
}

/// Redis's `string2ld`/`strtold` acceptance: a decimal or exponent float, `inf`, `-inf`,
/// `+inf`; no spaces, no NaN. `None` for anything else.
pub fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty() || text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace) {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    let value = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ if lower.contains("inf") || lower.contains("nan") => return None,
        _ => text.parse::<f64>().ok()?,
    };
    (!value.is_nan()).then_some(value)
}

/// A float argument, or `ERR value is not a valid float`.
pub fn float(arg: &[u8]) -> Result<f64, Reply> {
    parse_f64(arg).ok_or_else(not_float)
}

/// A float as Redis writes a score: the shortest text that reads back the same, `inf`/`-inf`,
/// integers without a fraction, and printf's `%g` scientific form far from 1 (`1e+20`).
pub fn format_f64(value: f64) -> Vec<u8> {
    if value.is_infinite() {
        return if value > 0.0 { b"inf".to_vec() } else { b"-inf".to_vec() };
    }
    if value == 0.0 {
        return b"0".to_vec();
    }
    let exponent = value.abs().log10().floor();
    if (-5.0..17.0).contains(&exponent) {
        return format!("{value}").into_bytes();
    }
    let sci = format!("{value:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs()).into_bytes()
}

/// A float as INCRBYFLOAT writes its result: plain decimal, never an exponent.
pub fn format_f64_plain(value: f64) -> Vec<u8> {
    if value == 0.0 {
        return b"0".to_vec();
    }
    format!("{value}").into_bytes()
}

/// An integer in `min..=max`, or `ERR {message}` for anything else (non-numbers included),
/// as Redis words the options that name their own error.
pub fn int_in(arg: &[u8], min: i64, max: i64, message: &str) -> Result<i64, Reply> {
    parse_i64(arg).filter(|n| (min..=max).contains(n)).ok_or_else(|| err(format!("ERR {message}")))
}

/// A blocking command's timeout in seconds: a float, not negative. Only checked here; the
/// member applies it.
pub fn check_timeout(arg: &[u8]) -> Result<(), Reply> {
    let out_of_range = || err("ERR timeout is not a float or out of range");
    let seconds = parse_f64(arg).ok_or_else(out_of_range)?;
    let ms = (seconds * 1000.0).ceil();
    if ms < 0.0 {
        return Err(err("ERR timeout is negative"));
    }
    if !ms.is_finite() || ms >= i64::MAX as f64 {
        return Err(out_of_range());
    }
    Ok(())
}

/// Redis's range of a list of `len`: `start` and `stop` inclusive, negative ones from the
/// end; `None` when the range is empty.
pub fn span(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 { start.saturating_add(len).max(0) } else { start };
    let stop = if stop < 0 { stop.saturating_add(len) } else { stop };
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    Some((start as usize, stop as usize))
}

/// A database number (SELECT, MOVE, COPY's DB, SWAPDB), with Redis's errors.
pub fn db_index(arg: &[u8]) -> Result<u8, Reply> {
    match parse_i64(arg) {
        Some(n) if (0..crate::kv::store::DATABASES as i64).contains(&n) => Ok(n as u8),
        Some(_) => Err(err("ERR DB index is out of range")),
        None => Err(not_integer()),
    }
}

/// An empty array reply.
pub fn empty() -> Reply {
    Reply::Array(Vec::new())
}

/// A count as a `usize`, saturating (a negative one is the caller's to have refused).
pub fn to_usize(n: impl TryInto<usize>) -> usize {
    n.try_into().unwrap_or(usize::MAX)
}

/// An integer reply.
pub fn integer(n: usize) -> Reply {
    Reply::Integer(n as i64)
}

/// A bulk reply.
pub fn bulk(bytes: &[u8]) -> Reply {
    Reply::Bulk(bytes.to_vec())
}

/// An array of bulk strings.
pub fn bulks<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Reply {
    Reply::Array(items.into_iter().map(bulk).collect())
}

/// Turns `Result<Reply, Reply>` into the reply (errors are replies too).
pub fn either(result: Result<Reply, Reply>) -> Reply {
    result.unwrap_or_else(|e| e)
}

/// Redis's glob matching (`*`, `?`, `[...]` with ranges and `^`, `\` escapes), as KEYS,
/// SCAN's MATCH and the like use it. `nocase` folds ASCII case.
pub fn glob_match(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    fn eq(a: u8, b: u8, nocase: bool) -> bool {
        if nocase { a.eq_ignore_ascii_case(&b) } else { a == b }
    }
    let (mut p, mut t) = (0usize, 0usize);
    let (mut star_p, mut star_t) = (usize::MAX, 0usize);
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star_p = p;
                    star_t = t;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    let mut q = p + 1;
                    let negate = q < pattern.len() && pattern[q] == b'^';
                    if negate {
                        q += 1;
                    }
                    let mut matched = false;
                    while q < pattern.len() && pattern[q] != b']' {
                        if pattern[q] == b'\\' && q + 1 < pattern.len() {
                            q += 1;
                            matched |= eq(pattern[q], text[t], nocase);
                            q += 1;
                        } else if q + 2 < pattern.len() && pattern[q + 1] == b'-' && pattern[q + 2] != b']' {
                            let (mut lo, mut hi) = (pattern[q], pattern[q + 2]);
                            if lo > hi {
                                std::mem::swap(&mut lo, &mut hi);
                            }
                            let c = text[t];
                            matched |= if nocase {
                                let c = c.to_ascii_lowercase();
                                (lo.to_ascii_lowercase()..=hi.to_ascii_lowercase()).contains(&c)
                            } else {
                                (lo..=hi).contains(&c)
                            };
                            q += 3;
                        } else {
                            matched |= eq(pattern[q], text[t], nocase);
                            q += 1;
                        }
                    }
                    if matched != negate {
                        p = (q + 1).min(pattern.len());
                        t += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if eq(pattern[p + 1], text[t], nocase) {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                c => {
                    if eq(c, text[t], nocase) {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        if star_p == usize::MAX {
            return false;
        }
        star_t += 1;
        t = star_t;
        p = star_p;
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis() {
        for (p, t, want) in [
            ("*", "", true),
            ("a*", "abc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("h[ae]llo", "hello", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h\\*llo", "h*llo", true),
            ("*b*", "aaa", false),
            ("key:*:x", "key:1:x", true),
        ] {
            assert_eq!(glob_match(p.as_bytes(), t.as_bytes(), false), want, "{p} {t}");
        }
    }

    #[test]
    fn floats_read_and_write_as_redis() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(format_f64(3.0), b"3");
        assert_eq!(format_f64(10.5), b"10.5");
        assert_eq!(format_f64(f64::INFINITY), b"inf");
        assert_eq!(format_f64(1e20), b"1e+20");
    }
}

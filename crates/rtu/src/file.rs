//! The handler file of `kairos rtu admit`: `[[handler]]` tables with `name`, `period_us`,
//! `batch`, `iteration` and `unit_cost_us` (fractions of a microsecond allowed).
//!
//! [`handlers_from_toml`] parses text (no file access: the caller reads the file, bounded), so
//! it can be fed anything: it never panics, and each error is one line naming the file, the
//! line, the handler and the limit. Values the analysis cannot represent (a period past
//! [`MAX_PERIOD_NS`], a cost past 64-bit nanoseconds or [`MAX_COST_PERIODS`] periods) are
//! refused here, before any analysis runs.

use std::collections::HashSet;

use serde::Deserialize;
use toml::Spanned;

use crate::analysis::{HandlerSpec, MAX_COST_PERIODS, MAX_PERIOD_NS};

/// The most handlers a file may hold: one shell thread runs them all, and the analysis' work
/// grows with the square of their number.
pub const MAX_HANDLERS: usize = 1_024;

/// The longest handler name, characters (names are printed in one-line reports and tables).
pub const MAX_NAME_CHARS: usize = 64;

/// What is wrong with a handler file ([`handlers_from_toml`]), in one line that names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerFileError {
    /// A value or table is wrong at a line: not TOML, a bad or duplicate name, a value past its
    /// limit, a job the analysis cannot take.
    #[error("{file}: line {line}: {what}")]
    At {
        /// The file, as given.
        file: String,
        /// 1-based line.
        line: usize,
        /// What is wrong (naming the handler and the limit where there is one).
        what: String,
    },
    /// The file holds no `[[handler]]` table.
    #[error("{file}: no [[handler]] tables")]
    NoHandlers {
        /// The file, as given.
        file: String,
    },
    /// More than [`MAX_HANDLERS`] handlers.
    #[error("{file}: {handlers} handlers, more than the {MAX_HANDLERS} one shell can run; split the set")]
    TooManyHandlers {
        /// The file, as given.
        file: String,
        /// How many the file holds.
        handlers: usize,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    handler: Vec<Spanned<RawHandler>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHandler {
    name: Spanned<String>,
    period_us: Spanned<f64>,
    batch: Spanned<i64>,
    iteration: Spanned<i64>,
    unit_cost_us: Spanned<f64>,
}

/// The 1-based line of byte `offset` (clamped to the text; bytes, so an offset inside a
/// multi-byte character cannot panic).
fn line_of(text: &str, offset: usize) -> usize {
    let bytes = text.as_bytes();
    bytes[..offset.min(bytes.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Reads the handlers of a handler file's `text`; `file` names it in errors (it is not opened).
///
/// Errors are one line: `FILE: line N: handler 'NAME': what is wrong (the limit), got VALUE`.
pub fn handlers_from_toml(text: &str, file: &str) -> Result<Vec<HandlerSpec>, HandlerFileError> {
    let at = |offset: usize, what: String| HandlerFileError::At {
        file: file.to_string(),
        line: line_of(text, offset),
        what,
    };
    let raw: Raw = toml::from_str(text).map_err(|e| {
        // toml's messages may span lines; the first says what is wrong.
        let message = e.message().lines().next().unwrap_or("not valid TOML").trim().to_string();
        at(e.span().map_or(0, |s| s.start), message)
    })?;
    if raw.handler.is_empty() {
        return Err(HandlerFileError::NoHandlers { file: file.to_string() });
    }
    if raw.handler.len() > MAX_HANDLERS {
        return Err(HandlerFileError::TooManyHandlers {
            file: file.to_string(),
            handlers: raw.handler.len(),
        });
    }
    let mut names: HashSet<&str> = HashSet::new();
    let mut out: Vec<HandlerSpec> = Vec::with_capacity(raw.handler.len());
    for h in &raw.handler {
        let r = h.get_ref();
        let name = r.name.get_ref();
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
            return Err(at(
                r.name.span().start,
                format!(
                    "handler names are 1-{MAX_NAME_CHARS} characters without control characters, got {name:?}"
                ),
            ));
        }
        if !names.insert(name) {
            return Err(at(h.span().start, format!("duplicate handler name '{name}'")));
        }
        let field = |offset: usize, what: String| at(offset, format!("handler '{name}': {what}"));
        // A time in microseconds as whole nanoseconds, 1 ns to `max_ns`: checked before the
        // conversion, which would saturate silently.
        let ns = |v: &Spanned<f64>, key: &str, max_ns: u64, why: &str| -> Result<u64, HandlerFileError> {
            let us = *v.get_ref();
            let max_us = max_ns / 1_000;
            if !(us.is_finite() && us * 1e3 >= 1.0) {
                Err(field(v.span().start, format!("{key} must be at least 0.001 (one nanosecond), got {us}")))
            } else if us > max_us as f64 {
                Err(field(v.span().start, format!("{key} must be at most {max_us} ({why}), got {us}")))
            } else {
                Ok((us * 1e3).round() as u64)
            }
        };
        let count = |v: &Spanned<i64>, key: &str| -> Result<u64, HandlerFileError> {
            u64::try_from(*v.get_ref()).ok().filter(|&n| n >= 1).ok_or_else(|| {
                field(
                    v.span().start,
                    format!("{key} must be a whole number of at least 1, got {}", v.get_ref()),
                )
            })
        };
        let spec = HandlerSpec {
            name: name.clone(),
            period_ns: ns(
                &r.period_us,
                "period_us",
                MAX_PERIOD_NS,
                "100000 s: the analysis follows a busy period of up to 100000 periods in 64-bit nanoseconds",
            )?,
            batch: count(&r.batch, "batch")?,
            iteration: count(&r.iteration, "iteration")?,
            unit_cost_ns: ns(
                &r.unit_cost_us,
                "unit_cost_us",
                MAX_PERIOD_NS * MAX_COST_PERIODS,
                "1000 of the longest period",
            )?,
        };
        // What is left is the job's cost against its period; the error names the handler.
        spec.validate().map_err(|e| at(r.batch.span().start, e.to_string()))?;
        out.push(spec);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str =
        "[[handler]]\nname = \"tx\"\nperiod_us = 1000\nbatch = 8\niteration = 2\nunit_cost_us = 2.5\n";

    #[test]
    fn reads_handlers_and_names_bad_lines() {
        let h = handlers_from_toml(OK, "h.toml").unwrap();
        assert_eq!((h[0].period_ns, h[0].batch, h[0].iteration, h[0].unit_cost_ns), (1_000_000, 8, 2, 2_500));
        let e = handlers_from_toml(&OK.replace("batch = 8", "batch = -1"), "h.toml").unwrap_err().to_string();
        assert_eq!(e, "h.toml: line 4: handler 'tx': batch must be a whole number of at least 1, got -1");
        let e = handlers_from_toml(&OK.replace("= 1000", "= 0"), "h.toml").unwrap_err().to_string();
        assert!(e.starts_with("h.toml: line 3: handler 'tx': period_us must be at least 0.001"), "{e}");
        let e = handlers_from_toml(&format!("{OK}{OK}"), "h.toml").unwrap_err().to_string();
        assert!(e.starts_with("h.toml: line 7: duplicate handler name 'tx'"), "{e}");
        let e = handlers_from_toml("[[handler]]\nname = \"x\"\n", "h.toml").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("missing field"), "{e}");
        assert!(handlers_from_toml("", "h.toml").unwrap_err().to_string().contains("no [[handler]]"));
    }

    #[test]
    fn unrepresentable_times_are_refused_naming_the_handler_and_the_limit() {
        // 10^16 us is 10^19 ns: it fits in 64 bits, but a busy period of 100000 such periods
        // does not; the analysis wrapped it into an admission.
        let e = handlers_from_toml(&OK.replace("= 1000", "= 10000000000000000"), "h.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "h.toml: line 3: handler 'tx': period_us must be at most 100000000000 (100000 s: the \
             analysis follows a busy period of up to 100000 periods in 64-bit nanoseconds), got 10000000000000000"
        );
        // Past 64-bit nanoseconds, the conversion saturated silently.
        let e = handlers_from_toml(&OK.replace("= 2.5", "= 1e300"), "h.toml").unwrap_err().to_string();
        assert!(
            e.starts_with("h.toml: line 6: handler 'tx': unit_cost_us must be at most 100000000000000"),
            "{e}"
        );
        // A job longer than 1000 periods.
        let e = handlers_from_toml(&OK.replace("batch = 8", "batch = 9223372036854775807"), "h.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("h.toml: line 4: handler 'tx': batch x unit cost is more than 1000 periods"),
            "{e}"
        );
    }

    #[test]
    fn odd_input_is_a_one_line_error_never_a_panic() {
        let cases: &[(&str, &str)] = &[
            ("period_us = 1000", "period_us = -5"),
            ("period_us = 1000", "period_us = nan"),
            ("period_us = 1000", "period_us = inf"),
            ("period_us = 1000", "period_us = -0.0"),
            ("period_us = 1000", "period_us = 0.0004"),
            ("period_us = 1000", "period_us = \"1000\""),
            ("batch = 8", "batch = 1.5"),
            ("batch = 8", "batch = 0"),
            ("batch = 8", "batch = 99999999999999999999"),
            ("iteration = 2", "iteration = -9223372036854775808"),
            ("unit_cost_us = 2.5", "unit_cost_us = -1e-300"),
            ("name = \"tx\"", "name = \"\""),
            ("name = \"tx\"", "name = \"a\\nb\""),
            ("name = \"tx\"", "name = 7"),
            ("name = \"tx\"", "name = \"tx\"\nextra = 1"),
            ("[[handler]]", "handler = 5\n[[x]]"),
            ("name = \"tx\"", "name = \"\u{e9}\u{e9}\" é"),
        ];
        for (from, to) in cases {
            let text = OK.replace(from, to);
            let e = handlers_from_toml(&text, "h.toml").unwrap_err().to_string();
            assert!(e.starts_with("h.toml: ") && !e.contains('\n'), "{to:?}: {e}");
        }
        let long = format!("name = \"{}\"", "n".repeat(65));
        let e = handlers_from_toml(&OK.replace("name = \"tx\"", &long), "h.toml").unwrap_err().to_string();
        assert!(e.contains("1-64 characters"), "{e}");
        // Deep nesting and huge arrays.
        let deep = format!("x = {}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(!handlers_from_toml(&deep, "h.toml").unwrap_err().to_string().contains('\n'));
        let wide = format!("x = [{}]", "1,".repeat(200_000));
        assert!(!handlers_from_toml(&wide, "h.toml").unwrap_err().to_string().contains('\n'));
        let many: String = (0..=MAX_HANDLERS).map(|i| OK.replace("\"tx\"", &format!("\"h{i}\""))).collect();
        let e = handlers_from_toml(&many, "h.toml").unwrap_err().to_string();
        assert_eq!(e, "h.toml: 1025 handlers, more than the 1024 one shell can run; split the set");
        // Not even the start of a table.
        for text in ["\u{0}", "[[", "[[handler]]\n[[handler]]", "\u{feff}", "\"\u{e9}"] {
            let e = handlers_from_toml(text, "h.toml").unwrap_err().to_string();
            assert!(e.starts_with("h.toml: ") && !e.contains('\n'), "{text:?}: {e}");
        }
    }
}

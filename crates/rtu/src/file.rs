//! The handler file of `kairos rtu admit`: `[[handler]]` tables with `name`, `period_us`,
//! `batch`, `iteration` and `unit_cost_us` (fractions of a microsecond allowed). Errors name the
//! file, the line and what is wrong.

use serde::Deserialize;
use toml::Spanned;

use crate::analysis::HandlerSpec;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    handler: Vec<Spanned<RawHandler>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHandler {
    name: String,
    period_us: Spanned<f64>,
    batch: Spanned<i64>,
    iteration: Spanned<i64>,
    unit_cost_us: Spanned<f64>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Reads the handlers of a file's text; `file` names it in errors.
pub fn handlers_from_toml(text: &str, file: &str) -> Result<Vec<HandlerSpec>, String> {
    let at = |offset: usize, what: String| format!("{file}: line {}: {what}", line_of(text, offset));
    let raw: Raw = toml::from_str(text)
        .map_err(|e| at(e.span().map_or(0, |s| s.start), e.message().trim().to_string()))?;
    if raw.handler.is_empty() {
        return Err(format!("{file}: no [[handler]] tables"));
    }
    let mut out: Vec<HandlerSpec> = Vec::new();
    for h in &raw.handler {
        let r = h.get_ref();
        if out.iter().any(|o| o.name == r.name) {
            return Err(at(h.span().start, format!("duplicate handler name '{}'", r.name)));
        }
        let us = |v: &Spanned<f64>, field: &str| -> Result<u64, String> {
            let x = *v.get_ref();
            if x.is_finite() && x > 0.0 && x * 1e3 >= 1.0 {
                Ok((x * 1e3).round() as u64)
            } else {
                Err(at(v.span().start, format!("{field} must be at least 0.001 (one nanosecond), got {x}")))
            }
        };
        let count = |v: &Spanned<i64>, field: &str| -> Result<u64, String> {
            u64::try_from(*v.get_ref()).ok().filter(|&n| n >= 1).ok_or_else(|| {
                at(
                    v.span().start,
                    format!("{field} must be a whole number of at least 1, got {}", v.get_ref()),
                )
            })
        };
        out.push(HandlerSpec {
            name: r.name.clone(),
            period_ns: us(&r.period_us, "period_us")?,
            batch: count(&r.batch, "batch")?,
            iteration: count(&r.iteration, "iteration")?,
            unit_cost_ns: us(&r.unit_cost_us, "unit_cost_us")?,
        });
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
        let e = handlers_from_toml(&OK.replace("batch = 8", "batch = -1"), "h.toml").unwrap_err();
        assert_eq!(e, "h.toml: line 4: batch must be a whole number of at least 1, got -1");
        let e = handlers_from_toml(&OK.replace("= 1000", "= 0"), "h.toml").unwrap_err();
        assert!(e.starts_with("h.toml: line 3: period_us must be at least 0.001"), "{e}");
        let e = handlers_from_toml(&format!("{OK}{OK}"), "h.toml").unwrap_err();
        assert!(e.starts_with("h.toml: line 7: duplicate handler name 'tx'"), "{e}");
        let e = handlers_from_toml("[[handler]]\nname = \"x\"\n", "h.toml").unwrap_err();
        assert!(e.contains("line 1") && e.contains("missing field"), "{e}");
        assert!(handlers_from_toml("", "h.toml").unwrap_err().contains("no [[handler]]"));
    }
}

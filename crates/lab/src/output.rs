//! Where experiment results go and how long runs show progress.
//!
//! Every run writes `results/<experiment>/<run-id>/` (run id: UTC time, `YYYYMMDD-HHMMSS`, with a
//! suffix if taken) holding the resolved config, `summary.json`, CSV series and plots. Progress
//! bars appear only on a terminal and never under `CI`.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The directory of one run.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates `<root>/<experiment>/<run-id>/`.
    pub fn create(root: &Path, experiment: &str) -> Result<Self> {
        let base = root.join(experiment);
        let stamp = utc_stamp(SystemTime::now());
        let mut path = base.join(&stamp);
        let mut n = 1;
        while path.exists() {
            n += 1;
            path = base.join(format!("{stamp}-{n}"));
        }
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create results directory {}", path.display()))?;
        Ok(Self { path })
    }

    /// The run's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `value` as pretty JSON to `name`.
    pub fn write_json(&self, name: &str, value: &impl Serialize) -> Result<PathBuf> {
        let path = self.path.join(name);
        let text = serde_json::to_string_pretty(value)?;
        std::fs::write(&path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Writes `rows` as CSV to `name`, a header from the field names.
    pub fn write_csv<T: Serialize>(&self, name: &str, rows: &[T]) -> Result<PathBuf> {
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in rows {
            w.serialize(r)?;
        }
        let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?;
        let path = self.path.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Writes `text` to `name`.
    pub fn write_text(&self, name: &str, text: &str) -> Result<PathBuf> {
        let path = self.path.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }
}

/// `YYYYMMDD-HHMMSS` in UTC.
pub fn utc_stamp(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The last lines of an experiment's report: its plots, the longest stall the noise probe saw
/// (when it ran), and where the run's files are.
pub fn report_footer(
    plots: &[PathBuf],
    noise: Option<&kairos_metrics::NoiseReport>,
    results_dir: &Path,
) -> String {
    let mut out = String::new();
    for p in plots {
        out.push_str(&format!("plot: {}\n", p.display()));
    }
    if let Some(n) = noise {
        out.push_str(&format!("noise: longest stall the probe saw {:.1} us\n", n.max_gap_ns as f64 / 1e3));
    }
    out.push_str(&format!("results: {}\n", results_dir.display()));
    out
}

/// A progress bar over `steps`, drawn only when stderr is a terminal and `CI` is unset.
pub fn progress(steps: u64, what: &str) -> ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || std::env::var_os("CI").is_some() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stamps_are_utc_calendar_times() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101-000000");
        // 2026-11-22 11:19:07 UTC
        assert_eq!(utc_stamp(UNIX_EPOCH + Duration::from_secs(1_795_346_347)), "20261122-111907");
        // A leap day.
        assert_eq!(utc_stamp(UNIX_EPOCH + Duration::from_secs(951_782_400)), "20000229-000000");
    }

    #[test]
    fn run_dirs_never_collide() {
        let root = std::env::temp_dir().join(format!("kairos-output-test-{}", std::process::id()));
        let a = RunDir::create(&root, "x").unwrap();
        let b = RunDir::create(&root, "x").unwrap();
        assert_ne!(a.path(), b.path());
        a.write_json("s.json", &serde_json::json!({"k": 1})).unwrap();
        assert!(std::fs::read_to_string(a.path().join("s.json")).unwrap().contains("\"k\": 1"));
        std::fs::remove_dir_all(root).unwrap();
    }
}

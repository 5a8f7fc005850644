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
    /// Creates `<root>/<experiment>/<run-id>/`, a directory no other run has: the last step is
    /// an atomic `mkdir` that fails if the name is taken, so two runs started in the same second
    /// (in two processes) take `<stamp>` and `<stamp>-2`.
    pub fn create(root: &Path, experiment: &str) -> Result<Self> {
        let base = root.join(experiment);
        std::fs::create_dir_all(&base).with_context(|| {
            format!("cannot create results directory {} (choose another with --results)", base.display())
        })?;
        let stamp = utc_stamp(SystemTime::now());
        for n in 1..=10_000 {
            let path = if n == 1 { base.join(&stamp) } else { base.join(format!("{stamp}-{n}")) };
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot create results directory {} (choose another with --results)",
                            path.display()
                        )
                    });
                }
            }
        }
        anyhow::bail!("{}: 10,000 runs started in the same second; remove some", base.display())
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
pub fn report_footer(run: &crate::harness::RunInfo) -> String {
    let mut out = String::new();
    for p in &run.plots {
        out.push_str(&format!("plot: {}\n", p.display()));
    }
    if let Some(n) = &run.noise {
        out.push_str(&format!("noise: longest stall the probe saw {:.1} us\n", n.max_gap_ns as f64 / 1e3));
    }
    out.push_str(&format!("results: {}\n", run.results_dir.display()));
    out
}

/// Whether progress is drawn: on a terminal, and not under `CI`.
pub fn interactive() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
}

/// A progress bar over `steps`, with the time left, drawn only when [`interactive`]. Log through
/// [`ProgressBar::suspend`] (as [`crate::harness::Run::log`] does) so no frozen copy of the bar
/// stays on the screen above a log line.
pub fn progress(steps: u64, what: &str) -> ProgressBar {
    if !interactive() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, {eta} left)")
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
        // Many at once, from threads racing for the same second's name.
        let dirs: Vec<PathBuf> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| RunDir::create(&root, "y").unwrap().path().to_path_buf()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let unique: std::collections::BTreeSet<_> = dirs.iter().collect();
        assert_eq!(unique.len(), dirs.len(), "{dirs:?}");
        a.write_json("s.json", &serde_json::json!({"k": 1})).unwrap();
        assert!(std::fs::read_to_string(a.path().join("s.json")).unwrap().contains("\"k\": 1"));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn an_unwritable_root_fails_at_once_with_the_path_and_the_flag() {
        let err = RunDir::create(Path::new("/proc/kairos-results"), "x").unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("/proc/kairos-results/x") && text.contains("--results"), "{text}");
    }
}

//! Cross-check with `cyclictest` (Debian `rt-tests`) on the realtime core during a row.
//!
//! It runs at one priority below the experiment's task, so reclamation the task is made to do at
//! its priority delays cyclictest's wake-ups too: an outside observer of the same stall. The
//! running cyclictest is an [`OwnedChild`]: a row that ends early (an error, a signal) ends it.

use std::process::{Command, Stdio};
use std::time::Duration;

use kairos_sys::child::OwnedChild;

/// A running cyclictest, or why none runs.
#[derive(Debug)]
pub enum Cyclictest {
    /// Running; collect with [`Cyclictest::finish`].
    Running(OwnedChild),
    /// Could not run; the reason is reported.
    Skipped(CyclictestError),
}

/// Why a row has no cyclictest figure (reported as the row's `cyclictest_skipped`).
#[derive(Debug, thiserror::Error)]
pub enum CyclictestError {
    /// The experiment's task has no real-time priority, so there is none below it to give.
    #[error("SCHED_FIFO not granted (run as root)")]
    NotRealtime,
    /// cyclictest could not be started (most often: not installed).
    #[error("cyclictest did not start ({0}); install Debian's rt-tests")]
    NotStarted(std::io::Error),
    /// Waiting for cyclictest or reading its output failed.
    #[error("cyclictest: {0}")]
    Wait(std::io::Error),
    /// cyclictest ended without its summary line; what it wrote on stderr.
    #[error("cyclictest printed no result: {0}")]
    NoResult(String),
}

impl Cyclictest {
    /// Starts cyclictest for `duration` on `core` at `priority` with `interval`.
    pub fn start(core: usize, priority: i32, interval: Duration, duration: Duration) -> Self {
        if priority <= 0 {
            return Self::Skipped(CyclictestError::NotRealtime);
        }
        let secs = duration.as_secs().max(1);
        let spawned = OwnedChild::spawn(
            Command::new("cyclictest")
                .args(["-m", "-q", "--policy=fifo"])
                .arg(format!("-p{priority}"))
                .arg(format!("-i{}", interval.as_micros().max(100)))
                .arg(format!("-a{core}"))
                .args(["-t1", "-D"])
                .arg(format!("{secs}"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        match spawned {
            Ok(child) => Self::Running(child),
            Err(e) => Self::Skipped(CyclictestError::NotStarted(e)),
        }
    }

    /// Waits for cyclictest to finish; its maximum latency in microseconds, or why there is none.
    pub fn finish(self) -> Result<u64, CyclictestError> {
        match self {
            Self::Skipped(why) => Err(why),
            Self::Running(child) => {
                let output = child.wait_with_output().map_err(CyclictestError::Wait)?;
                let text = String::from_utf8_lossy(&output.stdout);
                parse_max_us(&text).ok_or_else(|| {
                    CyclictestError::NoResult(String::from_utf8_lossy(&output.stderr).trim().to_string())
                })
            }
        }
    }
}

/// The `Max:` figure of cyclictest's summary line.
pub fn parse_max_us(output: &str) -> Option<u64> {
    output
        .lines()
        .filter_map(|line| line.split("Max:").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_is_parsed() {
        let out = "T: 0 ( 4242) P:79 I:1000 C:   4999 Min:      3 Act:    5 Avg:    6 Max:     217\n";
        assert_eq!(parse_max_us(out), Some(217));
        assert_eq!(parse_max_us("no numbers here"), None);
    }
}

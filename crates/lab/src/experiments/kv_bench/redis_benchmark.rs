//! `redis-benchmark -t set,get -n N -c 50 -q` against a RESP system, as its users would measure
//! it, read into rows beside the bench's own.
//!
//! With `-q`, redis-benchmark 7.0 prints, per test, progress lines ended by carriage returns and
//! then one result line:
//!
//! ```text
//! SET: 54054.05 requests per second, p50=0.583 msec
//! ```
//!
//! [`parse`] takes the text and returns every result line it finds (progress lines, which say
//! `rps=`, are not results), and never panics. redis-benchmark retries a refused connection for
//! ever, spinning, so [`run`] ends it after a deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::peers::process::spawn_pinned;

/// One result line.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchmarkLine {
    /// `SET` or `GET`.
    pub test: String,
    /// Requests per second.
    pub requests_per_s: f64,
    /// The median latency, ms (printed since redis 7.0).
    pub p50_ms: Option<f64>,
}

/// Every result line in redis-benchmark's `-q` output.
pub fn parse(text: &str) -> Vec<BenchmarkLine> {
    text.split(['\r', '\n'])
        .filter_map(|line| {
            let (test, rest) = line.trim().split_once(": ")?;
            if test.is_empty() || !test.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                return None;
            }
            let (rate, rest) = rest.split_once(" requests per second")?;
            let requests_per_s: f64 = rate.trim().parse().ok().filter(|r: &f64| r.is_finite())?;
            let p50_ms = rest
                .split_once("p50=")
                .and_then(|(_, v)| v.trim().strip_suffix("msec"))
                .and_then(|v| v.trim().parse().ok());
            Some(BenchmarkLine { test: test.to_string(), requests_per_s, p50_ms })
        })
        .collect()
}

/// The command line run against `addr`, as the report prints it.
pub fn command_line(requests: u64, clients: usize) -> String {
    format!("redis-benchmark -t set,get -n {requests} -c {clients} -q")
}

/// Runs redis-benchmark against `addr` from `cores`, its output in `out`; ends it after
/// `deadline`.
pub fn run(
    addr: SocketAddr,
    requests: u64,
    clients: usize,
    cores: &[usize],
    out: &Path,
    deadline: Duration,
) -> Result<Vec<BenchmarkLine>> {
    let file = std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut command = Command::new("redis-benchmark");
    command
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-t", "set,get", "-n", &requests.to_string(), "-c", &clients.to_string(), "-q"])
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    let mut child = spawn_pinned(&mut command, "redis-benchmark", cores)?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > deadline {
            child.kill()?;
            bail!("redis-benchmark ran past {} s and was ended", deadline.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = kairos_sys::fs::read_text(out, 1 << 20).unwrap_or_default();
    if !status.success() {
        let last = text.split(['\r', '\n']).rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        bail!("redis-benchmark failed ({status}): {}", last.trim());
    }
    Ok(parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// redis-benchmark 7.0.15's `-q` output against a local redis-server (progress lines
    /// shortened).
    const CANNED: &str = " \rSET: rps=0.0 (overall: 0.0) avg_msec=-nan (overall: -nan)\r            \
\rSET: rps=52916.0 (overall: 52705.2) avg_msec=0.623 (overall: 0.623)\r      \rSET: 54054.05 requests per second, p50=0.583 msec\n\
 \rGET: rps=18079.7 (overall: 34641.2) avg_msec=0.976 (overall: 0.976)\r     \rGET: 49261.09 requests per second, p50=0.551 msec\n\n";

    #[test]
    fn the_result_lines_are_read_and_the_progress_is_not() {
        let lines = parse(CANNED);
        assert_eq!(
            lines,
            [
                BenchmarkLine { test: "SET".into(), requests_per_s: 54054.05, p50_ms: Some(0.583) },
                BenchmarkLine { test: "GET".into(), requests_per_s: 49261.09, p50_ms: Some(0.551) },
            ]
        );
    }

    #[test]
    fn older_lines_without_p50_and_garbage_are_handled() {
        assert_eq!(
            parse("SET: 1000.00 requests per second\n"),
            [BenchmarkLine { test: "SET".into(), requests_per_s: 1000.0, p50_ms: None }]
        );
        for junk in [
            "",
            "WARNING: Could not fetch server CONFIG",
            "SET: many requests per second",
            ": 1 requests per second",
            "SET: NaN requests per second",
            "\u{0}\u{ff}\r\r",
        ] {
            assert!(parse(junk).is_empty(), "{junk:?}");
        }
        assert_eq!(command_line(100_000, 50), "redis-benchmark -t set,get -n 100000 -c 50 -q");
    }
}

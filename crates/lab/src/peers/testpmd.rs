//! Peer forwarders: other programs put in the forwarder namespace in place of Kairos's forwarder
//! and measured by the same source and receiver.
//!
//! The one peer is DPDK's `dpdk-testpmd` (Debian `dpdk-dev`), run without huge pages
//! (`--no-huge`) on an `af_packet` virtual device bound to the forwarder's veth end, in
//! `5tswap` mode: each frame goes back out with its MAC and IP addresses and UDP ports swapped,
//! so it reaches the socket that sent it. Its RX ring is the source's 4096 frames (Table I) and
//! its burst 64; its forwarding lcore busy-polls one core, as DPDK does. The forwarder's veth end
//! has no address and the source sends to a hardware address it does not carry (so its
//! namespace's kernel drops the frames on sight, after the packet sockets took them, as for
//! Kairos's forwarder; see [`kairos_io::ForwarderSide::Unclaimed`]), and the source sends
//! without UDP checksums (a veth leaves them to an offload; a frame read off the interface and
//! sent back would arrive with a bad one).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kairos_io::Testbed;
use kairos_sys::child::OwnedChild;

/// The name rows give this peer in their `fib` field.
pub const TESTPMD: &str = "dpdk-testpmd";

/// A running `dpdk-testpmd`.
#[derive(Debug)]
pub struct Testpmd {
    /// `ip netns exec` execs `stdbuf`, which execs testpmd, so this process id is testpmd's;
    /// were a wrapper to fork instead, ending the owner's process group would still reach it.
    child: OwnedChild,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    log: Vec<String>,
}

/// What testpmd counted, from the statistics it prints on exit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestpmdStats {
    /// Packets its ports received (`RX-packets`, all ports).
    pub rx_packets: u64,
    /// Packets its ports dropped on receive, for want of a descriptor or a buffer (`RX-dropped`).
    pub rx_dropped: u64,
    /// Packets its ports sent (`TX-packets`).
    pub tx_packets: u64,
    /// Packets it could not send (`TX-dropped`: the transmit ring was full).
    pub tx_dropped: u64,
}

/// Where `dpdk-testpmd` is, if installed.
pub fn find_testpmd() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(TESTPMD)).find(|p| p.is_file())
}

impl Testpmd {
    /// Starts testpmd in `bed`'s forwarder namespace on its veth end and waits until it
    /// forwards (it prints "Press enter to exit"), at most 60 s.
    pub fn start(bed: &Testbed) -> Result<Self> {
        let binary = find_testpmd()
            .context("dpdk-testpmd is not installed (Debian: apt install dpdk-dev); the peer needs it")?;
        let pid = std::process::id();
        // The main lcore on CPU 0 (it sleeps in a read), the forwarding lcore on the last CPU.
        let last_cpu = kairos_sys::proc::last_core();
        let mut child = OwnedChild::spawn_named(
            Command::new("ip")
                .args(["netns", "exec", &bed.forwarder_ns])
                // Line-buffered: testpmd prints "Press enter to exit" with printf into a pipe.
                .args(["stdbuf", "-oL"])
                .arg(binary)
                .args(["--no-huge", "-m", "256", "--no-pci", "--no-shconf"])
                .arg(format!("--lcores=0@0,1@{last_cpu}"))
                .arg(format!("--file-prefix=kairos-{pid}"))
                .arg(format!("--vdev=net_af_packet0,iface={},framecnt=4096", bed.forwarder_dev))
                .args([
                    "--",
                    "--forward-mode=5tswap",
                    "--auto-start",
                    "--burst=64",
                    "--total-num-mbufs=16384",
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
            TESTPMD,
        )
        .context("cannot start dpdk-testpmd")?;
        let (send, lines) = channel();
        for stream in [
            child.take_stdout().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child.take_stderr().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let send = send.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if send.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.take_stdin();
        let mut pmd = Testpmd { child, stdin, lines, log: Vec::new() };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match pmd.lines.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.contains("Press enter to exit");
                    pmd.log.push(line);
                    if ready {
                        return Ok(pmd);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    bail!("dpdk-testpmd did not start within 60 s: {}", pmd.tail())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = pmd.child.wait();
                    bail!("dpdk-testpmd exited before forwarding: {}", pmd.tail());
                }
            }
        }
    }

    /// The CPU time its process has used so far, ns (every thread: the polling lcore's is most
    /// of it).
    pub fn cpu_time_ns(&self) -> Result<u64> {
        kairos_sys::proc::process_cpu_time_ns(self.child.id()).context("dpdk-testpmd's CPU clock")
    }

    /// The last lines it printed, for an error message.
    fn tail(&self) -> String {
        let n = self.log.len();
        self.log[n.saturating_sub(4)..].join(" | ")
    }

    /// Stops it (a newline on its standard input) and reads its counters.
    pub fn stop(mut self) -> Result<TestpmdStats> {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.log.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => bail!("dpdk-testpmd did not exit within 20 s"),
            }
        }
        let _ = self.child.wait();
        parse_stats(&self.log)
            .with_context(|| format!("no statistics in dpdk-testpmd's output: {}", self.tail()))
    }
}

/// The totals of testpmd's exit report: the `RX-packets: a RX-dropped: b RX-total: c` and
/// `TX-packets: ...` lines after "Accumulated forward statistics".
pub fn parse_stats(log: &[String]) -> Option<TestpmdStats> {
    let start = log.iter().rposition(|l| l.contains("Accumulated forward statistics"))?;
    let field = |line: &str, name: &str| -> Option<u64> {
        let mut words = line.split_whitespace();
        words.find(|w| *w == name)?;
        words.next()?.parse().ok()
    };
    let mut stats = TestpmdStats::default();
    let (mut rx, mut tx) = (false, false);
    for line in &log[start..] {
        if let (Some(p), Some(d)) = (field(line, "RX-packets:"), field(line, "RX-dropped:")) {
            (stats.rx_packets, stats.rx_dropped, rx) = (p, d, true);
        }
        if let (Some(p), Some(d)) = (field(line, "TX-packets:"), field(line, "TX-dropped:")) {
            (stats.tx_packets, stats.tx_dropped, tx) = (p, d, true);
        }
        if rx && tx {
            return Some(stats);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_exit_report() {
        let log: Vec<String> = "
  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 9              RX-dropped: 0             RX-total: 9
  TX-packets: 9              TX-dropped: 0             TX-total: 9
  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 7              RX-dropped: 2             RX-total: 9
  TX-packets: 6              TX-dropped: 1             TX-total: 7
  ++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++"
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(
            parse_stats(&log),
            Some(TestpmdStats { rx_packets: 7, rx_dropped: 2, tx_packets: 6, tx_dropped: 1 })
        );
        assert_eq!(parse_stats(&log[..4]), None, "per-port lines alone are not the totals");
    }
}

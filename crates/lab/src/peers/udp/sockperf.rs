//! The sockperf row beside the lane ([`super::Peer::Sockperf`]): `sockperf server` in host `to`
//! ([`Server`], started before any load and ready once its socket is bound in its namespace) and
//! `sockperf ping-pong` in host `from` (owned children through `ip netns exec`), at the same
//! size and rate as the other rows, a tool others know; its one-way latency is half a round
//! trip, read from the client's full log by [`kairos_peers::sockperf`].
//!
//! The server starts before the load because a server started under the flood (iperf3 at line
//! rate and stress-ng on every core of a two-core machine) once took more than 5 s to bind;
//! the row measures the path, not how fast a process starts on a loaded machine.
//!
//! Two ways it is not the other rows' kind of row. It is a closed loop: the client sends its
//! next request only once the last reply is in, so `--mps` is a ceiling, and when a round
//! trip takes longer than the period (under a flood, milliseconds) it sends fewer messages
//! (measured here: 5,503 in its window idle, 321 flooded) and never queues behind its own.
//! And it runs whole seconds and keeps only its valid window (after 400 ms, before the last
//! 50 ms), so it runs for enough seconds to hold `packets` messages there, and `sent` is the
//! requests of that window, usually more than `packets`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kairos_io::lane_testbed::LaneTestbed;
use kairos_sys::child::OwnedChild;
use kairos_sys::clock::realtime_ns;

use super::{PeerRun, PeerSettings};
use crate::peers::process::{OwnedDir, last_line, require_tool, spawn_logged, wait_bound};

/// sockperf's server port in the receiving host (its own namespace: nothing else binds there).
const SOCKPERF_PORT: u16 = 11111;
/// What sockperf leaves out of its valid window: the first 400 ms and the last 50 ms.
const SOCKPERF_SKIPPED_NS: u64 = 450_000_000;
/// How long past its `-t` seconds the client has to start, warm up, write its log and exit: a
/// client sleeps 2 s after its warm-up, and it starts and writes under the flood rows' load,
/// where a process once took more than 5 s to bind a socket and 10 s past `-t` once ran out
/// (stress-ng's `--io` worker syncs the disk the log is written to without a pause).
const CLIENT_SLACK: Duration = Duration::from_secs(30);
/// The most of the client's log read: far more than ten million rows.
const LOG_LIMIT: u64 = 1 << 30;

/// `sockperf server` bound in one host of the testbed, ended on drop.
#[derive(Debug)]
pub struct Server {
    child: OwnedChild,
    host: usize,
    address: String,
    dir: OwnedDir,
}

impl Server {
    /// Starts `sockperf server` in host `to` and waits until its socket is bound.
    pub fn start(testbed: &LaneTestbed, to: usize) -> Result<Self> {
        require_tool("sockperf", "sockperf", "the sockperf row")?;
        let dir = OwnedDir::scratch("sockperf")?;
        let address = testbed.host(to)?.address.to_string();
        let mut command = testbed.host_command(to, "sockperf")?;
        command.args(["server", "-i", &address, "-p", &SOCKPERF_PORT.to_string()]);
        let out = dir.path().join("server.out");
        let mut child = spawn_logged(&mut command, &out, "sockperf server")?;
        wait_bound(testbed, to, SOCKPERF_PORT, "udp", &mut child, &out)?;
        Ok(Self { child, host: to, address, dir })
    }

    /// An error if the server has ended.
    fn check_running(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            bail!("sockperf server ended: {}", last_line(&self.dir.path().join("server.out")));
        }
        Ok(())
    }
}

/// `sockperf ping-pong` in host `from` against `server` (in host `to`) with a full log, read.
pub(super) fn run(testbed: &LaneTestbed, settings: &PeerSettings, server: &mut Server) -> Result<PeerRun> {
    if server.host != settings.to {
        bail!("the sockperf server runs in h{}, the row asks for h{}", server.host, settings.to);
    }
    server.check_running()?;
    let dir = OwnedDir::scratch("sockperf-client")?;
    let address = &server.address;
    let port = SOCKPERF_PORT.to_string();

    // sockperf runs whole seconds and keeps what it sent after its warm-up and before its
    // cool-down: enough seconds for `packets` messages in between. Its rate is whole messages a
    // second: the period's, rounded.
    let period_ns = settings.period_ns();
    let seconds = (settings.packets * period_ns + SOCKPERF_SKIPPED_NS).div_ceil(1_000_000_000).max(1);
    let mps = ((1_000_000_000 + period_ns / 2) / period_ns).max(1);
    let log = dir.path().join("full.csv");
    let mut client = testbed.host_command(settings.from, "sockperf")?;
    client.args(["ping-pong", "-i", address, "-p", &port, "-m", &settings.message_bytes.to_string()]);
    client.args(["--mps", &mps.to_string(), "-t", &seconds.to_string()]);
    client.arg("--full-log").arg(&log);
    let origin_ns = realtime_ns();
    let client_out = dir.path().join("client.out");
    let mut client = spawn_logged(&mut client, &client_out, "sockperf ping-pong")?;
    let deadline = Instant::now() + Duration::from_secs(seconds) + CLIENT_SLACK;
    let status = loop {
        if let Some(status) = client.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            bail!(
                "sockperf ping-pong ran past {} s (killed); its last line: {}",
                seconds + CLIENT_SLACK.as_secs(),
                last_line(&client_out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !status.success() {
        bail!("sockperf ping-pong failed ({status}): {}", last_line(&client_out));
    }
    server.check_running().context("during the run")?;
    let text = kairos_sys::fs::read_text(&log, LOG_LIMIT)?;
    Ok(kairos_peers::sockperf::parse(&text, origin_ns)?)
}

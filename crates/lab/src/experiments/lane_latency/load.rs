//! The load of the experiment's "flood" rows: a bulk TCP flood with `iperf3` across the same
//! bridge, from host `from` to host `to` (so it queues at the egresses the measured messages
//! cross: `from`'s veth and the bridge port toward `to`; its acknowledgements take the way
//! back), and `stress-ng` CPU load ([`crate::harness::background::stress_ng`]) pinned to one core, so
//! the hosts' stacks and the receivers' wake-ups compete for CPU as well as the link.
//!
//! [`Load`] owns the three processes (`iperf3 -s` in `to`, `iperf3 -c` in `from`, each through
//! `ip netns exec`, which execs it in place, and `stress-ng`), each an
//! [`kairos_sys::child::OwnedChild`] ended with its process group when the load is dropped, on
//! every path. The server is started first and the client only once the server's socket
//! listens (read from the namespace's `/proc/thread-self/net/tcp`, so no probe connection
//! reaches iperf3); the client runs for a day (`-t 86400`) and is killed on drop, and
//! [`start`] returns once the flood has moved its first megabyte through the bulk class.
//!
//! The flood's rate is read from the testbed's own counters, not iperf3's report (which a
//! killed client never prints): the bulk class's bytes at `from`'s egress between [`start`]
//! and [`Load::stop`], Ethernet headers included. Anything else unmarked that `from` sends
//! meanwhile (a bulk row's messages: some hundred kbit/s) is counted with it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kairos_io::lane_testbed::{ClassCount, Egress, LaneTestbed};
use kairos_sys::child::OwnedChild;

use crate::peers::process::{OwnedDir, last_line, require_tool, spawn_logged, wait_bound};

/// iperf3's port in the receiving host (its own namespace: nothing else listens there).
pub const IPERF_PORT: u16 = 5201;
/// How long the client runs if nothing ends it first: longer than any run of the experiment.
const CLIENT_SECONDS: u64 = 86_400;
/// The bulk bytes after which the flood counts as started.
const STARTED_BYTES: u64 = 1 << 20;
/// How long the flood has to start.
const START_WITHIN: Duration = Duration::from_secs(10);

/// The flood and the CPU load, running; ended when dropped.
#[derive(Debug)]
pub struct Load<'a> {
    testbed: &'a LaneTestbed,
    from: usize,
    // Dropped in this order: the client first, so the server never sees it fail.
    client: OwnedChild,
    server: OwnedChild,
    stress: OwnedChild,
    /// The children's output files, removed after them.
    dir: OwnedDir,
    started: Instant,
    bulk_before: ClassCount,
}

/// What the flood did while it ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadReport {
    /// From [`start`]'s return to [`Load::stop`].
    pub seconds: f64,
    /// Bytes the bulk class sent at `from`'s egress meanwhile (Ethernet headers included).
    pub bulk_bytes: u64,
    /// Their rate, bits per second.
    pub bulk_bits_per_second: f64,
    /// Packets the bulk queue at `from`'s egress dropped meanwhile.
    pub bulk_dropped: u64,
}

/// Starts the flood from host `from` to host `to` and `stress-ng` CPU load on core
/// `stress_core`, and returns once the flood is moving bytes.
pub fn start(testbed: &LaneTestbed, from: usize, to: usize, stress_core: usize) -> Result<Load<'_>> {
    if from == to {
        bail!("the flood's hosts must differ, both are h{from}");
    }
    let (sender, receiver) = (testbed.host(from)?, testbed.host(to)?);
    let cores = kairos_sys::proc::online_cores();
    if stress_core >= cores {
        bail!("the CPU load's core {stress_core} does not exist: the machine has cores 0 to {}", cores - 1);
    }
    require_tool("iperf3", "iperf3", "the flood rows")?;
    require_tool("stress-ng", "stress-ng", "the flood rows")?;
    let dir = OwnedDir::scratch("iperf3")?;
    let (to_address, from_address) = (receiver.address.to_string(), sender.address.to_string());
    let port = IPERF_PORT.to_string();

    let server_out = dir.path().join("server.out");
    let mut server = testbed.host_command(to, "iperf3")?;
    // Off the lane core, as `isolcpus` keeps a host's regular processes: left to the scheduler,
    // iperf3 moves to the lane core (the other carries stress-ng), and the flood's TCP work,
    // done in the softirq of the core that sends it, follows it there.
    kairos_sys::thread::pin_command_to(&mut server, &[stress_core])?;
    server.args(["-s", "-B", &to_address, "-p", &port, "-i", "0"]);
    let mut server = spawn_logged(&mut server, &server_out, "iperf3 server")?;
    wait_bound(testbed, to, IPERF_PORT, "tcp", &mut server, &server_out)?;

    let egress = Egress::Host(from);
    let before = testbed.class_counters(egress)?.bulk;
    let client_out = dir.path().join("client.out");
    let mut client = testbed.host_command(from, "iperf3")?;
    kairos_sys::thread::pin_command_to(&mut client, &[stress_core])?;
    client.args(["-c", &to_address, "-B", &from_address, "-p", &port, "-i", "0"]);
    client.args(["-t", &CLIENT_SECONDS.to_string()]);
    let client = spawn_logged(&mut client, &client_out, "iperf3 client")?;
    let stress = crate::harness::background::stress_ng(1, Some(stress_core))?;
    let mut load =
        Load { testbed, from, client, server, stress, dir, started: Instant::now(), bulk_before: before };

    let deadline = Instant::now() + START_WITHIN;
    loop {
        load.check()?;
        let now = testbed.class_counters(egress)?.bulk;
        if now.bytes.saturating_sub(before.bytes) >= STARTED_BYTES {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the flood moved {} bytes in {} s: {}",
                now.bytes.saturating_sub(before.bytes),
                START_WITHIN.as_secs(),
                last_line(&client_out)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    load.started = Instant::now();
    load.bulk_before = testbed.class_counters(egress)?.bulk;
    Ok(load)
}

impl Load<'_> {
    /// An error if a process of the load has ended (iperf3's last line with it).
    pub fn check(&mut self) -> Result<()> {
        for (child, out) in [
            (&mut self.client, Some(self.dir.path().join("client.out"))),
            (&mut self.server, Some(self.dir.path().join("server.out"))),
            (&mut self.stress, None::<PathBuf>),
        ] {
            if let Some(status) = child.try_wait().with_context(|| format!("wait for {}", child.name()))? {
                let said = out.map(|out| format!(": {}", last_line(&out))).unwrap_or_default();
                bail!("{} ended during the load ({status}){said}", child.name());
            }
        }
        Ok(())
    }

    /// Ends the load and says what the flood moved; an error if a process had ended before.
    pub fn stop(mut self) -> Result<LoadReport> {
        self.check()?;
        let after = self.testbed.class_counters(Egress::Host(self.from))?.bulk;
        let seconds = self.started.elapsed().as_secs_f64();
        let before = self.bulk_before;
        drop(self);
        let bulk_bytes = after.bytes.saturating_sub(before.bytes);
        Ok(LoadReport {
            seconds,
            bulk_bytes,
            bulk_bits_per_second: if seconds > 0.0 { bulk_bytes as f64 * 8.0 / seconds } else { 0.0 },
            bulk_dropped: after.dropped.saturating_sub(before.dropped),
        })
    }
}

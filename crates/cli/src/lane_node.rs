//! `kairos lane node`: the express lane's node agent for one host, from the command line.
//!
//! Before the node starts, its lane core is measured with the host doctor's probe
//! (`kairos_metrics::core_probe`, what `kairos doctor` runs), briefly and at the lane loop's own
//! priority: the longest time the probe's thread lost (spinning, and in `--receive sleep` also
//! waking from a sleep) is the jitter this host adds to every tunnel it sends, and the node
//! promises applications no tighter bound than the controller's widened by it
//! (`kairos_lane::node::promise`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use kairos_lane::node::agent::{self, HostMeasure, LaneTransport, NodeConfig};
use kairos_lane::node::chunk::Schema;
use kairos_lane::node::lane::ReceiveMode;

use crate::exit::usage;

#[derive(Clone, Copy, ValueEnum)]
enum Receive {
    /// Poll the lane socket without pause (lowest latency; give the node a core of its own).
    Spin,
    /// Sleep in ppoll until a packet or the next release, spinning the last 20 us before it.
    Sleep,
    /// Sleep in ppoll until a packet or the next release, never spinning (cores shared with
    /// the applications; a release is as late as a wake-up).
    SleepOnly,
}

#[derive(Clone, Copy, ValueEnum)]
enum Transport {
    /// The kernel's UDP socket.
    Udp,
    /// A memory-mapped AF_PACKET ring on --interface (root; --lane must be its address).
    Packet,
}

#[derive(Clone, Copy, ValueEnum)]
enum ChunkSchema {
    /// 26-byte chunks, 24-bit CRC, Hamming distance 6 (55 chunks per packet).
    Hd6,
    /// 36-byte chunks, 32-bit CRC, Hamming distance 8 (40 chunks per packet).
    Hd8,
}

#[derive(Args)]
pub struct NodeArgs {
    #[command(flatten)]
    who: crate::lane_service::ControllerFlags,
    /// Directory of the applications' socket (node.sock), created if missing
    /// [default: /tmp/kairos-lane-HOST].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Address the lane socket binds, e.g. 10.212.0.1:7500.
    #[arg(long)]
    lane: SocketAddr,
    /// Another host's node, as NAME=ADDR (repeat for every host this one sends to).
    #[arg(long = "peer", value_name = "NAME=ADDR")]
    peers: Vec<String>,
    /// The core the lane loop is pinned to [default: not pinned].
    #[arg(long)]
    core: Option<usize>,
    /// The lane loop's SCHED_FIFO priority, 1-99; 0 leaves it a normal thread. A spinning
    /// SCHED_FIFO thread is throttled unless RT throttling is off (`kairos doctor --apply`).
    #[arg(long, default_value_t = 0)]
    fifo: i32,
    /// How the lane loop waits for packets between releases.
    #[arg(long, value_enum, default_value_t = Receive::Sleep)]
    receive: Receive,
    /// The chunk schema of the packets this node sends.
    #[arg(long, value_enum, default_value_t = ChunkSchema::Hd6)]
    schema: ChunkSchema,
    /// How often each tunnel's use is reported to the controller, ms (1 to 60000).
    #[arg(long, default_value_t = 100)]
    report_ms: u64,
    /// What the lane loop sends and receives on.
    #[arg(long, value_enum, default_value_t = Transport::Udp)]
    transport: Transport,
    /// The interface the lane address is on (with --transport packet).
    #[arg(long, value_name = "NAME")]
    interface: Option<String>,
    /// How long the lane core is measured before the node starts, ms (0 to 1000; 0: not
    /// measured, and the node promises the controller's bounds with only the fan-out added).
    #[arg(long, default_value_t = 300)]
    probe_ms: u64,
}

fn peers(list: &[String]) -> Result<HashMap<String, SocketAddr>> {
    let mut out = HashMap::new();
    for p in list {
        let Some((name, addr)) = p.split_once('=') else {
            return Err(usage(format!("--peer takes NAME=ADDR (e.g. h1=10.212.0.2:7500), got '{p}'")));
        };
        let addr: SocketAddr = addr.parse().map_err(|_| {
            usage(format!("--peer {name}: '{addr}' is not an address such as 10.212.0.2:7500"))
        })?;
        if out.insert(name.to_string(), addr).is_some() {
            return Err(usage(format!("--peer {name} is given twice")));
        }
    }
    Ok(out)
}

/// The node's transport from `--transport` and `--interface`, or a one-line usage error.
fn lane_transport(transport: Transport, interface: Option<&str>) -> Result<LaneTransport, String> {
    match (transport, interface) {
        (Transport::Udp, None) => Ok(LaneTransport::Udp),
        (Transport::Udp, Some(_)) => Err("--interface is for --transport packet".into()),
        (Transport::Packet, None | Some("")) => {
            Err("--transport packet needs --interface NAME (the interface the --lane address is on)".into())
        }
        (Transport::Packet, Some(i)) => Ok(LaneTransport::Packet { interface: i.to_string() }),
    }
}

/// Runs the node until a signal ends the process.
pub fn node(a: &NodeArgs) -> Result<i32> {
    if !(1..=60_000).contains(&a.report_ms) {
        return Err(usage(format!("--report-ms must be from 1 to 60000, got {}", a.report_ms)));
    }
    if !(0..=99).contains(&a.fifo) {
        return Err(usage(format!("--fifo must be from 0 to 99, got {}", a.fifo)));
    }
    let cores = kairos_sys::proc::online_cores();
    if let Some(core) = a.core.filter(|&c| c >= cores) {
        return Err(usage(format!(
            "--core {core} is not a core here (cores 0 to {})",
            cores.saturating_sub(1)
        )));
    }
    if a.probe_ms > 1_000 {
        return Err(usage(format!("--probe-ms must be from 0 to 1000, got {}", a.probe_ms)));
    }
    let transport = lane_transport(a.transport, a.interface.as_deref()).map_err(usage)?;
    let who = &a.who;
    // Unpinned, the loop runs where the scheduler puts it: the doctor's core stands for it.
    let probed = match a.core {
        Some(core) => core,
        None => kairos_doctor::lane_core(&kairos_sys::host::HostFs::real(), None)?,
    };
    let core_jitter = if a.probe_ms == 0 {
        None
    } else {
        let (ns, how) = kairos_metrics::core_probe::loop_loss(
            probed,
            a.fifo,
            matches!(a.receive, Receive::Sleep | Receive::SleepOnly),
            Duration::from_millis(a.probe_ms),
        )?;
        crate::log(&format!("lane core cpu{probed}: up to {:.1} us lost ({how})", ns as f64 / 1e3));
        Some((ns, how))
    };
    let config = NodeConfig {
        controller: who.controller,
        host: who.host.clone(),
        secret: crate::lane_service::secret(&who.secret_file)?,
        dir: a.dir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("kairos-lane-{}", who.host))),
        lane_bind: a.lane,
        peers: peers(&a.peers)?,
        core: a.core,
        fifo_priority: a.fifo,
        receive: match a.receive {
            Receive::Spin => ReceiveMode::Spin,
            Receive::Sleep => ReceiveMode::Sleep,
            Receive::SleepOnly => ReceiveMode::SleepOnly,
        },
        schema: match a.schema {
            ChunkSchema::Hd6 => Schema::Hd6,
            ChunkSchema::Hd8 => Schema::Hd8,
        },
        report_every: Duration::from_millis(a.report_ms),
        transport,
    };
    let node = agent::start_measured(config, HostMeasure { core_jitter, log: Some(crate::log) })?;
    crate::log(&format!(
        "lane node for {} on {}: applications connect to {}; controller {} ({})",
        who.host,
        a.lane,
        node.socket().display(),
        who.controller,
        if node.is_connected() { "connected" } else { "connecting" }
    ));
    // The signal handler ends the process and removes the socket and bridges; the threads
    // run until then.
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packet_transport_needs_an_interface() {
        assert_eq!(lane_transport(Transport::Udp, None), Ok(LaneTransport::Udp));
        assert_eq!(
            lane_transport(Transport::Packet, Some("to-sw")),
            Ok(LaneTransport::Packet { interface: "to-sw".into() })
        );
        for (t, i) in
            [(Transport::Packet, None), (Transport::Packet, Some("")), (Transport::Udp, Some("eth0"))]
        {
            let e = lane_transport(t, i).unwrap_err();
            assert!(!e.contains('\n') && e.contains("--"), "{e}");
        }
    }
}

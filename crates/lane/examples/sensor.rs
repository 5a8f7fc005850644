//! A periodic sensor on the express lane: asks its host's node for a tunnel to the receivers
//! and sends one reading a period, paced by the grant.
//!
//! It keeps its period as a periodic application should: when a reading went out a period late
//! or more (its thread was not run, asleep or just before the send), the next one goes a period
//! after it, rather than the readings it missed back to back, or the next one at once on the
//! old schedule. The node sends one packet a period and carries one more; three readings within
//! a period are beyond that, excess by the lane's rules (and stale readings besides). It prints
//! what its node tells it, and at the end how many readings it sent.
//!
//! ```text
//! cargo run --release -p kairos-lane --example sensor -- NODE_DIR RECEIVER[,RECEIVER] [PERIOD_US] [COUNT]
//! ```
//! `NODE_DIR` is the node's `--dir` (where `node.sock` is); the tunnel is named `sensor`, so a
//! `monitor` on a receiving host listening to `sensor` gets the readings.

use std::path::PathBuf;
use std::time::Duration;

use kairos_lane::controller::Reason;
use kairos_lane::node::app::{LaneApp, NodeToApp};
use kairos_lane::service::wire::TunnelSpec;
use kairos_sys::clock::{realtime_ns, sleep_until_ns};

fn main() {
    if let Err(e) = run() {
        eprintln!("sensor: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, receivers, rest @ ..] = args.as_slice() else {
        return Err("usage: sensor NODE_DIR RECEIVER[,RECEIVER] [PERIOD_US] [COUNT]".into());
    };
    let period_us: u64 = rest.first().map_or(Ok(1_000), |p| p.parse())?;
    let count: u64 = rest.get(1).map_or(Ok(u64::MAX), |c| c.parse())?;
    let mut app = LaneApp::connect(&PathBuf::from(dir), "sensor", Duration::from_secs(5))?;
    let spec = TunnelSpec {
        name: "sensor".into(),
        receivers: receivers.split(',').map(String::from).collect(),
        packet_bytes: 64,
        period_ps: period_us * 1_000_000,
        sublane: 0,
    };
    let mut tunnel = app.request(spec, Duration::from_secs(5))?;
    let g = tunnel.grant;
    println!(
        "tunnel {}: a packet of {} bytes every {} us, latency {:.3} to {:.3} us",
        tunnel.id,
        g.packet_bytes,
        g.period_ps / 1_000_000,
        g.min_latency_ps as f64 / 1e6,
        (g.min_latency_ps + g.max_jitter_ps) as f64 / 1e6
    );
    let mut next = tunnel.send_from_ns.max(realtime_ns());
    for i in 0..count {
        sleep_until_ns_realtime(next);
        let reading = format!("reading {i}");
        if let Err(e) = tunnel.send(reading.as_bytes(), realtime_ns()) {
            eprintln!("sensor: reading {i} not queued: {e}");
        }
        // Read after the send, not before: a thread can lose the core between reading the
        // clock and sending as well as in its sleep, and a reading that went out a period late
        // or more must not be followed at once by the next one on the old schedule.
        let sent = realtime_ns();
        let period_ns = tunnel.grant.period_ps.div_ceil(1_000);
        if sent >= next + period_ns {
            next = sent;
        }
        for event in app.events(Duration::ZERO)? {
            println!("{}", describe(&event));
            if matches!(event, NodeToApp::Ended { .. }) {
                return Ok(());
            }
        }
        next += period_ns;
    }
    app.release(tunnel)?;
    println!("sent {count} readings; tunnel released");
    Ok(())
}

/// What the node told the application, as a line a person reads.
fn describe(event: &NodeToApp) -> String {
    match event {
        NodeToApp::Welcome { host, .. } => format!("node on {host}: connected"),
        NodeToApp::Granted { tunnel_id, grant, .. } => format!(
            "tunnel {tunnel_id} granted: {} bytes every {} us",
            grant.packet_bytes,
            grant.period_ps / 1_000_000
        ),
        NodeToApp::Refused { reason, .. } => format!("refused: {reason}"),
        NodeToApp::Changed { tunnel_id, grant, reason, .. } => {
            let why = match reason {
                Reason::Te => "the controller made room for another tunnel",
                Reason::BwExceeded => "BW_EXCEEDED: this sensor sent more than its grant",
                Reason::BwUnused => "BW_UNUSED: this sensor used much less than its grant",
                Reason::Host => "its node timed a receiver's node that came up after it",
            };
            format!(
                "tunnel {tunnel_id} changed ({why}): now {} bytes every {} us",
                grant.packet_bytes,
                grant.period_ps / 1_000_000
            )
        }
        NodeToApp::Ended { tunnel_id, terminated: true } => {
            format!("tunnel {tunnel_id} ended by the controller")
        }
        NodeToApp::Ended { tunnel_id, terminated: false } => format!("tunnel {tunnel_id} released"),
        NodeToApp::Error { reason } => format!("the node could not do it: {reason}"),
    }
}

/// Sleeps until the wall clock reads `deadline_ns` (the lane's clock is the wall clock).
fn sleep_until_ns_realtime(deadline_ns: u64) {
    let now = realtime_ns();
    if deadline_ns > now {
        sleep_until_ns(kairos_sys::clock::monotonic_ns() + (deadline_ns - now));
    }
}

//! The lane's own rows of `kairos lane latency`: the whole express lane on the testbed, as a
//! user runs it. A controller in the sender's host (its topology measured from the testbed), a
//! node in each of the two hosts, a sensor application on the sender's node that hands one
//! message a period to its tunnel, and a monitor application on the receiver's node.
//!
//! The nodes run in this process, each started from a thread inside its host's network
//! namespace (the threads it starts, and the sockets they make, stay there); the applications
//! need no namespace (a node's socket is a path, its bridges files).
//!
//! - `kairos lane`: the doctor's run-time fixes applied to the lane core (and undone after the
//!   row, on every path: a signal included), idle states held off, both nodes' lane loops pinned
//!   to that core at `SCHED_FIFO` (the sender's above the receiver's, which spins on its
//!   socket). Both nodes on UDP sockets, or on packet rings on the hosts' interface
//!   ([`super::Transport`], `--transport packet`).
//! - `kairos lane, no host tuning` (the source's X-Lane_0): the same nodes, the receiver still
//!   spinning, but not pinned, not real-time, no doctor.
//! - `kairos lane, shared receive path`: as `kairos lane`, but on the hosts' shared devices
//!   instead of the lane's own path ([`kairos_io::lane_testbed`]'s "The lane's own path"):
//!   what the separate path is worth, measured in the same run.
//!
//! On the lane's own path, a tuned row also has the doctor place the kernel threads that
//! receive on the lane's devices (threaded NAPI, `--lane-interface lane`): on the lane core at
//! `SCHED_FIFO` [`kairos_doctor::receive::RECEIVE_PRIORITY`], above both nodes, so a packet that
//! arrives is taken in at once, even from a spinning receiver's core; its revert after the row
//! gives them back as they were.
//!
//! Each message's latency runs from its packet's release stamp (the sending node's clock read
//! as it sends, carried in the lane header) to the kernel's software receive stamp of the
//! receiving node's socket: the section 4.3.3 definition of the lane's one-way latency.

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use kairos_doctor::apply;
use kairos_io::lane_testbed::{HOST_DEVICE, LaneTestbed, host_address};
use kairos_lane::node::agent::{self, HostMeasure, LaneTransport, NodeConfig, NodeReport, RunningNode};
use kairos_lane::node::app::{LaneApp, NodeToApp};
use kairos_lane::node::chunk::Schema;
use kairos_lane::node::lane::ReceiveMode;
use kairos_lane::service::wire::TunnelSpec;
use kairos_lane::service::{ControllerService, RunningService, Secret, ServiceConfig};
use kairos_metrics::core_probe::loop_loss;
use kairos_sys::cleanup;
use kairos_sys::clock::realtime_ns;
use kairos_sys::host::{HostFs, InterfaceName};
use kairos_sys::memory::NoIdleStates;
use kairos_te::Topology;

use super::samples::Sample;

/// The lane's port in every host.
const LANE_PORT: u16 = 7_500;
/// The sending node's lane loop priority: above the receiver's spinning loop on the same core,
/// so a release is never held up by the spin.
const SENDER_FIFO: i32 = 60;
/// The receiving node's.
const RECEIVER_FIFO: i32 = 50;
/// How long the last messages may take to arrive.
const DRAIN: Duration = Duration::from_millis(100);
/// How long the sensor's tunnel may refuse every message (its outbox full: the node takes
/// nothing from it) before the row ends with an error instead of waiting for ever.
const STOPPED_TAKING: Duration = Duration::from_secs(2);
/// How long each node's probe of its core lasts (`kairos lane node`'s default).
const PROBE: Duration = Duration::from_millis(300);
/// How long the nodes may take to reach the controller.
const CONNECT: Duration = Duration::from_secs(10);

/// What one lane row does.
#[derive(Debug, Clone)]
pub struct LaneRowSettings {
    /// With the host tuned (`kairos lane`) or not (`kairos lane, no host tuning`).
    pub tuned: bool,
    /// The core the tuned row's nodes are pinned to.
    pub lane_core: usize,
    /// The sending host.
    pub from: usize,
    /// The receiving host.
    pub to: usize,
    /// The tunnel's period.
    pub period: Duration,
    /// Messages to send.
    pub packets: u64,
    /// Each message's bytes (the first eight carry its sequence number).
    pub message_bytes: usize,
    /// What both nodes send and receive on.
    pub transport: super::Transport,
    /// Whether the nodes use the testbed's lane path (its own devices) rather than the shared
    /// ones.
    pub own_path: bool,
}

/// What one lane row measured.
#[derive(Debug)]
pub struct LaneRowRun {
    /// Every message that arrived, in arrival order.
    pub samples: Vec<Sample>,
    /// Messages the sensor handed to its tunnel.
    pub sent: u64,
    /// The bound on latency the sending node promised the sensor (the controller's, holding
    /// what the node measured of its core and its fan-out): `[min, min + jitter]`, ns.
    pub bound_ns: (u64, u64),
    /// What the row could not have as asked (no real-time priority, a doctor fix the kernel
    /// refused), for the report.
    pub notes: Vec<String>,
    /// The two nodes' counts at the end (sender, receiver).
    pub nodes: (NodeReport, NodeReport),
}

fn secret() -> Secret {
    Secret::new(b"kairos lane latency: this run's secret".to_vec()).expect("long enough")
}

/// The packet a tunnel needs to carry one message of `message_bytes` in the HD6 schema.
pub fn packet_bytes(message_bytes: usize) -> u64 {
    let schema = Schema::Hd6;
    schema.packet_bytes(schema.chunks_for(message_bytes)) as u64
}

/// The doctor's fixes, undone when dropped (and by the signal handler before that).
struct Tuned {
    state: PathBuf,
    _idle: Option<NoIdleStates>,
    _undo: cleanup::Registration,
}

impl Tuned {
    fn apply(
        core: usize,
        lane_interfaces: &[InterfaceName],
        dir: &Path,
        notes: &mut Vec<String>,
    ) -> Result<Self> {
        let state = dir.join("doctor.json");
        let hold = cleanup::hold_off();
        let applied = apply::apply(&HostFs::real(), core, lane_interfaces, &state)
            .map_err(|e| anyhow!("the doctor could not tune core {core}: {e}"))?;
        let undo_state = state.clone();
        let undo = cleanup::register("the doctor's changes to the lane core", move || {
            let _ = apply::revert(&HostFs::real(), &undo_state);
        });
        drop(hold);
        for r in &applied.refused {
            notes.push(format!("doctor: {} not changed: {}", r.setting, r.why));
        }
        let idle = match NoIdleStates::request() {
            Ok(held) => Some(held),
            Err(e) => {
                notes.push(format!("idle states not held off (/dev/cpu_dma_latency: {e})"));
                None
            }
        };
        Ok(Self { state, _idle: idle, _undo: undo })
    }
}

impl Drop for Tuned {
    fn drop(&mut self) {
        let _hold = cleanup::hold_off();
        let _ = apply::revert(&HostFs::real(), &self.state);
    }
}

/// The controller and the two nodes of a row, stopped on drop (nodes first).
struct Lane {
    sender: Option<RunningNode>,
    receiver: Option<RunningNode>,
    _controller: RunningService,
}

impl Lane {
    fn stop(mut self) -> (NodeReport, NodeReport) {
        let sender = self.sender.take().map(RunningNode::stop).unwrap_or_default();
        let receiver = self.receiver.take().map(RunningNode::stop).unwrap_or_default();
        (sender, receiver)
    }
}

/// Where host `host`'s node takes lane packets: on the lane's own path or the shared one.
fn lane_addr(testbed: &LaneTestbed, s: &LaneRowSettings, host: usize) -> Result<SocketAddr> {
    let ip = if s.own_path { testbed.lane_address(host)? } else { host_address(host) };
    Ok(SocketAddr::V4(SocketAddrV4::new(ip, LANE_PORT)))
}

fn start_lane(testbed: &LaneTestbed, topology: &Topology, dir: &Path, s: &LaneRowSettings) -> Result<Lane> {
    let controller = testbed
        .in_host(s.from, || {
            ControllerService::start(ServiceConfig {
                topology: topology.clone(),
                grace: 0,
                listen: SocketAddr::V4(SocketAddrV4::new(host_address(s.from), 0)),
                metrics: None,
                state: dir.join("controller"),
                secret: secret(),
            })
            .and_then(ControllerService::spawn)
        })?
        .context("the lane controller")?;
    let hosts = [s.from, s.to];
    let peers: HashMap<String, SocketAddr> =
        hosts.iter().map(|&h| Ok((format!("h{h}"), lane_addr(testbed, s, h)?))).collect::<Result<_>>()?;
    let node = |host: usize, sending: bool| -> Result<RunningNode> {
        let config = NodeConfig {
            controller: controller.local_addr(),
            host: format!("h{host}"),
            secret: secret(),
            dir: dir.join(format!("node-h{host}")),
            lane_bind: lane_addr(testbed, s, host)?,
            peers: peers.clone(),
            core: s.tuned.then_some(s.lane_core),
            fifo_priority: match (s.tuned, sending) {
                (false, _) => 0,
                (true, true) => SENDER_FIFO,
                (true, false) => RECEIVER_FIFO,
            },
            receive: if sending { ReceiveMode::Sleep } else { ReceiveMode::Spin },
            schema: Schema::Hd6,
            report_every: Duration::from_secs(1),
            transport: match s.transport {
                super::Transport::Udp => LaneTransport::Udp,
                super::Transport::Packet => LaneTransport::Packet {
                    interface: if s.own_path { testbed.lane_device() } else { HOST_DEVICE }.into(),
                },
            },
        };
        // Each node measures its core as `kairos lane node` does, one after the other (two
        // probes at once would measure each other), and promises no tighter than that.
        let (loss, how) = loop_loss(s.lane_core, config.fifo_priority, sending, PROBE)
            .with_context(|| format!("the probe of h{host}'s lane core"))?;
        let measure = HostMeasure { core_jitter: Some((loss, how)), log: None };
        testbed
            .in_host(host, || agent::start_measured(config, measure))?
            .with_context(|| format!("the node of h{host}"))
    };
    let lane = Lane {
        sender: Some(node(s.from, true)?),
        receiver: Some(node(s.to, false)?),
        _controller: controller,
    };
    let deadline = Instant::now() + CONNECT;
    while !lane.sender.iter().chain(&lane.receiver).all(RunningNode::is_connected) {
        if Instant::now() > deadline {
            return Err(anyhow!("the nodes did not reach the controller within {CONNECT:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(lane)
}

/// Why the sensor's tunnel stopped taking messages, as the node's events to the sensor say.
fn stopped_taking(sensor: &mut LaneApp, sent: u64, packets: u64) -> anyhow::Error {
    let events = sensor.events(Duration::from_millis(100)).unwrap_or_default();
    let ended = events.iter().any(|e| matches!(e, NodeToApp::Ended { terminated: true, .. }));
    let why = if ended {
        "the controller ended it (an application over its grant loses its tunnel at the third report)"
    } else {
        "its node took nothing from the outbox"
    };
    anyhow!(
        "the sensor's tunnel took no message for {STOPPED_TAKING:?} after {sent} of {packets}: {why}; the node's events: {}",
        if events.is_empty() { "none".into() } else { format!("{events:?}") }
    )
}

/// Runs one lane row; `dir` is the row's own directory (controller journal, node sockets, the
/// doctor's record).
pub fn run(
    testbed: &LaneTestbed,
    topology: &Topology,
    dir: &Path,
    s: &LaneRowSettings,
) -> Result<LaneRowRun> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut notes = Vec::new();
    // On the lane's own path the doctor places its devices' receive threads too.
    let own_path = s.own_path && testbed.has_lane_path();
    let lane_interfaces: Vec<InterfaceName> = own_path
        .then(|| InterfaceName::new(testbed.lane_device()).expect("the testbed's device name"))
        .into_iter()
        .collect();
    let tuned =
        if s.tuned { Some(Tuned::apply(s.lane_core, &lane_interfaces, dir, &mut notes)?) } else { None };
    let lane = start_lane(testbed, topology, dir, s)?;
    let connect = |host: usize, name: &str| {
        LaneApp::connect(&dir.join(format!("node-h{host}")), name, Duration::from_secs(5))
            .with_context(|| format!("application {name} on h{host}"))
    };
    let mut monitor = connect(s.to, "monitor")?;
    monitor.listen("sensor")?;
    let mut sensor = connect(s.from, "sensor")?;
    let spec = TunnelSpec {
        name: "sensor".into(),
        receivers: vec![format!("h{}", s.to)],
        packet_bytes: packet_bytes(s.message_bytes),
        period_ps: s.period.as_nanos() as u64 * 1_000,
        sublane: 0,
    };
    let mut tunnel = sensor.request(spec, Duration::from_secs(5)).context("the sensor's tunnel")?;
    let g = tunnel.grant;
    let bound_ns = (g.min_latency_ps / 1_000, (g.min_latency_ps + g.max_jitter_ps).div_ceil(1_000));
    let period_ns = g.period_ps.div_ceil(1_000).max(s.period.as_nanos() as u64);
    while realtime_ns() < tunnel.send_from_ns {
        std::thread::sleep(Duration::from_millis(1));
    }

    let mut samples = Vec::with_capacity(s.packets as usize);
    let mut message = vec![0u8; s.message_bytes];
    let mut buf = vec![0u8; s.message_bytes.max(64)];
    let mut receive = |monitor: &mut LaneApp, samples: &mut Vec<Sample>| -> Result<()> {
        while let Some(d) = monitor.recv(&mut buf)? {
            let Some(seq) = buf[..d.len.min(buf.len())].first_chunk::<8>().map(|b| u64::from_le_bytes(*b))
            else {
                continue;
            };
            samples.push(Sample {
                seq,
                sent_ns: d.sent_ns,
                received_ns: d.received_ns,
                kernel_ns: Some(d.received_ns),
            });
        }
        Ok(())
    };
    let mut sent = 0;
    let mut next = realtime_ns();
    // The send's own stamp times how long the tunnel has refused: no second clock read a message.
    let mut last_taken_ns = next;
    while sent < s.packets {
        message[..8].copy_from_slice(&sent.to_le_bytes());
        let stamp = realtime_ns();
        if tunnel.send(&message, stamp).is_ok() {
            sent += 1;
            last_taken_ns = stamp;
        } else if stamp.saturating_sub(last_taken_ns) > STOPPED_TAKING.as_nanos() as u64 {
            return Err(stopped_taking(&mut sensor, sent, s.packets));
        }
        next += period_ns;
        // A sensor late by a whole period sends its freshest reading once and goes on from
        // now, as the node does with a missed release: a burst of stale ones would only fill
        // the tunnel's carry and be dropped as excess.
        let now = realtime_ns();
        if now > next {
            next = now + period_ns;
        }
        loop {
            receive(&mut monitor, &mut samples)?;
            let now = realtime_ns();
            if now >= next {
                break;
            }
            std::thread::sleep(Duration::from_nanos((next - now).min(200_000)));
        }
    }
    let drain_end = Instant::now() + DRAIN;
    while Instant::now() < drain_end && (samples.len() as u64) < sent {
        receive(&mut monitor, &mut samples)?;
        std::thread::sleep(Duration::from_micros(200));
    }
    drop(sensor);
    drop(monitor);
    let nodes = lane.stop();
    if let Some(why) = nodes.0.not_realtime.as_ref().or(nodes.1.not_realtime.as_ref()) {
        notes.push(format!("a lane loop ran without real-time priority: {why}"));
    }
    // The nodes' own counts, for a reader who wants to know where a message went.
    let counts = serde_json::json!({ "sender": &nodes.0, "receiver": &nodes.1 });
    std::fs::write(dir.join("nodes.json"), counts.to_string())
        .with_context(|| format!("cannot write {}", dir.join("nodes.json").display()))?;
    let (tx, rx) = (&nodes.0.lane, &nodes.1.lane);
    for (what, n) in [
        (
            "messages the sending node dropped as excess (the sensor handed more than its carry holds)",
            tx.excess_messages,
        ),
        ("releases the sending node missed", tx.releases_missed),
        ("datagrams the socket did not take", tx.send_errors),
        ("of those, datagrams the packet ring had no hardware address for", tx.neighbour_unknown),
        ("packets the receiving node dropped whole", rx.packets_dropped),
        ("messages the monitor's inbox refused", rx.inbox_refused),
    ] {
        if n > 0 {
            notes.push(format!("{n} {what}"));
        }
    }
    drop(tuned);
    Ok(LaneRowRun { samples, sent, bound_ns, notes, nodes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_64_byte_message_takes_three_hd6_chunks() {
        assert_eq!(packet_bytes(64), 30 + 3 * 26);
        assert_eq!(packet_bytes(22), 30 + 26);
    }
}

//! Node agents end to end on loopback: a controller, two nodes (each a host of the topology,
//! their lane sockets on 127.0.0.1), a sending application on one and a listening application
//! on the other. Messages cross in packets of chunks at the tunnel's period and arrive with
//! their send and receive time stamps; an application that offers more than its grant has the
//! excess dropped at its node and hears `BW_EXCEEDED`; bridges and sockets are removed after.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use kairos_lane::controller::Reason;
use kairos_lane::node::agent::{LaneTransport, NodeConfig, RunningNode, start};
use kairos_lane::node::app::{LaneApp, NodeToApp};
use kairos_lane::node::chunk::Schema;
use kairos_lane::node::lane::ReceiveMode;
use kairos_lane::service::wire::{ToController, ToNode, TunnelSpec};
use kairos_lane::service::{ControllerService, NodeConnection, RunningService, Secret, ServiceConfig};
use kairos_lane::te::LinkSpec;
use kairos_lane::te::generate::rack;
use kairos_sys::clock::realtime_ns;

const WAIT: Duration = Duration::from_secs(5);

fn secret() -> Secret {
    Secret::new(b"the node test's secret, 32 bytes".to_vec()).unwrap()
}

fn free_udp() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

struct Lane {
    _state: tempfile::TempDir,
    dirs: tempfile::TempDir,
    controller: Option<RunningService>,
    nodes: Vec<RunningNode>,
}

/// A controller over a two-host rack and a node for each host.
fn lane() -> Lane {
    lane_after(|_| {})
}

/// As [`lane`], running `before_nodes` with the controller's address before the nodes start.
fn lane_after(before_nodes: impl FnOnce(SocketAddr)) -> Lane {
    let (state, controller) = controller(2);
    before_nodes(controller.local_addr());
    let lanes: HashMap<String, SocketAddr> =
        ["h0", "h1"].map(|h| (h.to_string(), free_udp())).into_iter().collect();
    let dirs = tempfile::tempdir().unwrap();
    let nodes =
        ["h0", "h1"].map(|h| node(controller.local_addr(), h, &lanes, dirs.path())).into_iter().collect();
    Lane { _state: state, dirs, controller: Some(controller), nodes }
}

/// A controller over a rack of `hosts` hosts (1 Gbit/s links), and its journal's directory.
fn controller(hosts: usize) -> (tempfile::TempDir, RunningService) {
    let state = tempfile::tempdir().unwrap();
    let spec = LinkSpec {
        bandwidth_bps: 1_000_000_000,
        queue_bytes: 64_000,
        min_delay: 10_000_000,
        max_jitter: 100_000_000,
    };
    let config = ServiceConfig {
        topology: rack(hosts, spec).unwrap(),
        grace: 0,
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics: None,
        state: state.path().to_path_buf(),
        secret: secret(),
    };
    (state, ControllerService::start(config).unwrap().spawn().unwrap())
}

/// The node of host `h` (its lane socket `lanes[h]`, its directory under `dirs`), once it is
/// connected to the controller.
fn node(
    controller: SocketAddr,
    h: &str,
    lanes: &HashMap<String, SocketAddr>,
    dirs: &std::path::Path,
) -> RunningNode {
    let node = start(NodeConfig {
        controller,
        host: h.into(),
        secret: secret(),
        dir: dirs.join(h),
        lane_bind: lanes[h],
        peers: lanes.clone(),
        core: None,
        fifo_priority: 0,
        receive: ReceiveMode::Sleep,
        schema: Schema::Hd6,
        report_every: Duration::from_millis(200),
        transport: LaneTransport::Udp,
    })
    .unwrap();
    let deadline = Instant::now() + WAIT;
    while !node.is_connected() {
        assert!(Instant::now() < deadline, "node {h} connects to the controller");
        std::thread::sleep(Duration::from_millis(5));
    }
    node
}

fn connect(lane: &Lane, host: &str, app: &str) -> LaneApp {
    let deadline = Instant::now() + WAIT;
    loop {
        match LaneApp::connect(&lane.dirs.path().join(host), app, WAIT) {
            Ok(a) => return a,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn spec(name: &str, period_us: u64, bytes: u64) -> TunnelSpec {
    TunnelSpec {
        name: name.into(),
        receivers: vec!["h1".into()],
        packet_bytes: bytes,
        period_ps: period_us * 1_000_000,
        sublane: 0,
    }
}

/// Requests until the node is connected to the controller (it connects as it starts).
fn request(app: &mut LaneApp, spec: &TunnelSpec) -> kairos_lane::node::app::Tunnel {
    let deadline = Instant::now() + WAIT;
    loop {
        match app.request(spec.clone(), WAIT) {
            Ok(t) => return t,
            Err(e) if e.to_string().contains("not reachable") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn messages_cross_the_lane_with_their_time_stamps() {
    let mut lane = lane();
    let mut monitor = connect(&lane, "h1", "monitor");
    monitor.listen("sensor").unwrap();
    let mut sensor = connect(&lane, "h0", "sensor");
    let mut tunnel = request(&mut sensor, &spec("sensor", 2_000, 200));
    assert!(tunnel.grant.period_ps >= 2_000_000_000);
    while realtime_ns() < tunnel.send_from_ns {
        std::thread::sleep(Duration::from_millis(1));
    }
    let period = Duration::from_nanos(tunnel.grant.period_ps / 1_000);
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    for i in 0u32..50 {
        tunnel.send(format!("reading {i}").as_bytes(), realtime_ns()).unwrap();
        let until = Instant::now() + period;
        while Instant::now() < until {
            while let Some(d) = monitor.recv(&mut buf).unwrap() {
                got.push((String::from_utf8_lossy(&buf[..d.len]).into_owned(), d));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        while let Some(d) = monitor.recv(&mut buf).unwrap() {
            got.push((String::from_utf8_lossy(&buf[..d.len]).into_owned(), d));
        }
    }
    if got.len() < 45 {
        let reports: Vec<_> = lane.nodes.drain(..).map(RunningNode::stop).collect();
        panic!("{} of 50 arrived: {reports:?}", got.len());
    }
    let mut last = None;
    for (text, d) in &got {
        let i: u32 = text.strip_prefix("reading ").and_then(|n| n.parse().ok()).expect("the text sent");
        assert!(last.is_none_or(|l| i > l), "in order, never twice");
        last = Some(i);
        assert_eq!(d.tunnel_id, tunnel.id);
        assert!(d.received_ns > d.sent_ns && d.received_ns - d.sent_ns < 1_000_000_000, "{d:?}");
    }
    sensor.release(tunnel).unwrap();
    let ended = sensor.events(WAIT).unwrap();
    assert!(ended.iter().any(|e| matches!(e, NodeToApp::Ended { terminated: false, .. })), "{ended:?}");
    let reports: Vec<_> = lane.nodes.drain(..).map(RunningNode::stop).collect();
    // Messages, not packets: a release the sending node missed leaves its message to the next
    // release's packet (see node_packet.rs).
    let (tx, rx) = (&reports[0].lane, &reports[1].lane);
    assert!(tx.messages_sent >= 45 && tx.packets_sent > 0 && rx.messages_delivered >= 45, "{reports:?}");
    lane.controller.take().unwrap().stop().unwrap();
}

#[test]
fn an_application_sending_past_its_grant_loses_the_excess_and_hears_of_it() {
    let mut lane = lane();
    let mut greedy = connect(&lane, "h0", "greedy");
    let mut tunnel = request(&mut greedy, &spec("greedy", 5_000, 100));
    while realtime_ns() < tunnel.send_from_ns {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Three 60-byte messages a period: one fits a 100-byte packet, two are excess.
    let deadline = Instant::now() + WAIT;
    let mut exceeded = None;
    while exceeded.is_none() && Instant::now() < deadline {
        for _ in 0..3 {
            let _ = tunnel.send(&[7u8; 60], realtime_ns());
        }
        for e in greedy.events(Duration::from_millis(5)).unwrap() {
            if let NodeToApp::Changed { reason: Reason::BwExceeded, .. } = e {
                exceeded = Some(e);
            }
        }
    }
    assert!(exceeded.is_some(), "BW_EXCEEDED arrived");
    let report = lane.nodes.remove(0).stop();
    assert!(report.lane.excess_messages > 0, "{report:?}");
    drop(lane);
}

#[test]
fn a_stopped_node_leaves_no_bridge_or_socket() {
    let lane = lane();
    let mut app = connect(&lane, "h0", "lonely");
    let _tunnel = request(&mut app, &spec("lonely", 1_000, 64));
    let socket = lane.dirs.path().join("h0").join("node.sock");
    assert!(socket.exists());
    let prefix = lane.nodes[0].bridge_prefix().to_string();
    let ours = || {
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .count()
    };
    assert!(ours() >= 2, "an inbox and an outbox");
    drop(app);
    let Lane { nodes, .. } = lane;
    for n in nodes {
        n.stop();
    }
    assert!(!socket.exists());
    assert_eq!(ours(), 0, "every bridge file removed");
}

#[test]
fn a_tunnel_no_application_owns_is_released_when_the_node_connects() {
    // An earlier node process of h0 got a tunnel and died with its application.
    let mut lane = lane_after(|controller| {
        let (mut earlier, _) = NodeConnection::connect(controller, "h0", &secret(), WAIT).unwrap();
        earlier.send(&ToController::Request { app_ref: 1, tunnel: spec("ghost", 1_000, 64) }).unwrap();
        let deadline = Instant::now() + WAIT;
        while !matches!(earlier.recv(Duration::from_millis(100)).unwrap(), Some(ToNode::Granted { .. })) {
            assert!(Instant::now() < deadline, "granted");
        }
    });
    // The new node finds it in its welcome, owned by none of its applications, and releases it
    // (the nodes are connected when `lane_after` returns; the release follows the welcome).
    std::thread::sleep(Duration::from_millis(200));
    let service = lane.controller.take().unwrap().stop().unwrap();
    assert!(service.core().controller().allocation().is_empty(), "the orphan tunnel was released");
}

/// A node started before its receivers' nodes promises their fan-out once it has timed them:
/// the sender's node of a tunnel to h1 and h2 starts alone (its send calls to them end at an
/// ICMP refusal, the shorter path, not timed), and when their nodes come up it times them and
/// tells the application the wider promise (`Changed`, reason `HOST`), and the controller,
/// whose bound then holds it.
#[test]
fn a_sender_started_before_its_receivers_promises_their_fan_out_once_they_are_up() {
    let (state, controller) = controller(3);
    let lanes: HashMap<String, SocketAddr> =
        ["h0", "h1", "h2"].map(|h| (h.to_string(), free_udp())).into_iter().collect();
    let dirs = tempfile::tempdir().unwrap();
    let sender = node(controller.local_addr(), "h0", &lanes, dirs.path());
    let lane = Lane { _state: state, dirs, controller: Some(controller), nodes: vec![sender] };
    let mut app = connect(&lane, "h0", "sensor");
    let two = TunnelSpec { receivers: vec!["h1".into(), "h2".into()], ..spec("sensor", 1_000, 64) };
    let tunnel = request(&mut app, &two);
    let first = tunnel.grant;

    let mut lane = lane;
    for h in ["h1", "h2"] {
        lane.nodes.push(node(lane.controller.as_ref().unwrap().local_addr(), h, &lanes, lane.dirs.path()));
    }
    let deadline = Instant::now() + WAIT;
    let mut wider = None;
    while wider.is_none() && Instant::now() < deadline {
        for e in app.events(Duration::from_millis(20)).unwrap() {
            if let NodeToApp::Changed { reason: Reason::Host, grant, tunnel_id, .. } = e {
                assert_eq!(tunnel_id, tunnel.id);
                wider = Some(grant);
            }
        }
    }
    let mut wider = wider.expect("the application heard the wider promise once its receivers' nodes were up");
    assert_eq!(wider.min_latency_ps, first.min_latency_ps, "the host only ever delays a packet");
    assert!(wider.max_jitter_ps > first.max_jitter_ps, "{first:?} then {wider:?}");
    // The node told the controller too. Its new grant holds the send call; the node promises
    // it widened again until the controller says it holds the figure (so the promise is never
    // narrower than the truth), and then the grant alone: the promise narrows once.
    let deadline = Instant::now() + WAIT;
    let mut narrowed = false;
    while !narrowed && Instant::now() < deadline {
        for e in app.events(Duration::from_millis(20)).unwrap() {
            if let NodeToApp::Changed { grant, .. } = e {
                narrowed = grant.max_jitter_ps < wider.max_jitter_ps;
                wider = grant;
            }
        }
    }
    assert!(narrowed, "the promise came back to the controller's grant once it held the send call");
    let service = lane.controller.take().unwrap().stop().unwrap();
    let alloc = service.core().controller().allocation();
    let h0 = alloc.topology().find("h0").unwrap();
    assert!(alloc.host_delay(h0).per_receiver > 0, "{:?}", alloc.host_delay(h0));
    let held = alloc.tunnel(tunnel.id).unwrap().resources;
    assert_eq!(wider.max_jitter_ps, held.max_jitter, "the promise is the controller's bound");
    drop(lane);
}

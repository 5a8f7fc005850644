//! The controller service over real sockets on loopback: nodes that know the secret get
//! tunnels and hear of every change that concerns them; strangers, garbage, cut frames and a
//! node acting for another host are refused and counted while the others are served; a
//! controller stopped without warning comes back from its journal with the same allocation,
//! and the nodes reconnect by themselves.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use kairos_lane::controller::Reason;
use kairos_lane::service::auth::{self, Role, Session};
use kairos_lane::service::wire::{FrameReader, Hello, ToController, ToNode, TunnelSpec, VERSION, put_frame};
use kairos_lane::service::{
    ClientError, ControllerLink, ControllerService, LinkEvent, NodeConnection, RunningService, Secret,
    ServiceConfig,
};
use kairos_lane::te::{LinkSpec, NodeKind, Topology};

const WAIT: Duration = Duration::from_secs(5);

fn topology() -> Topology {
    let mut t = Topology::new();
    let sw = t.add_node("sw", NodeKind::Switch).unwrap();
    let spec = LinkSpec {
        bandwidth_bps: 1_000_000_000,
        queue_bytes: 64_000,
        min_delay: 2_000_000,
        max_jitter: 1_000_000,
    };
    for h in ["h1", "h2", "h3"] {
        let n = t.add_node(h, NodeKind::Host).unwrap();
        t.add_duplex(n, sw, spec).unwrap();
    }
    t
}

fn secret() -> Secret {
    Secret::new(b"a lane secret of enough bytes".to_vec()).unwrap()
}

fn config(state: &std::path::Path, listen: SocketAddr) -> ServiceConfig {
    ServiceConfig {
        topology: topology(),
        grace: 1_000_000, // 1 us
        listen,
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        state: state.to_path_buf(),
        secret: secret(),
    }
}

fn spec(name: &str, to: &[&str], period_us: u64) -> TunnelSpec {
    TunnelSpec {
        name: name.into(),
        receivers: to.iter().map(|s| s.to_string()).collect(),
        packet_bytes: 64,
        period_ps: period_us * 1_000_000,
        sublane: 0,
    }
}

/// A controller serving on loopback from a fresh state directory.
fn serve() -> (tempfile::TempDir, RunningService) {
    let dir = tempfile::tempdir().unwrap();
    let service = ControllerService::start(config(dir.path(), "127.0.0.1:0".parse().unwrap())).unwrap();
    (dir, service.spawn().unwrap())
}

/// The next message that is not `skip`-ped, within [`WAIT`].
fn next(conn: &mut NodeConnection) -> ToNode {
    conn.recv(WAIT).unwrap().expect("a message within the wait")
}

/// Sends a request and returns its answer (notices about other tunnels that come first are
/// passed over).
fn request(conn: &mut NodeConnection, app_ref: u64, tunnel: TunnelSpec) -> ToNode {
    conn.send(&ToController::Request { app_ref, tunnel }).unwrap();
    answer(conn, app_ref)
}

fn answer(conn: &mut NodeConnection, app_ref: u64) -> ToNode {
    loop {
        match next(conn) {
            m @ (ToNode::Granted { app_ref: r, .. } | ToNode::Refused { app_ref: r, .. }) if r == app_ref => {
                return m;
            }
            _ => {}
        }
    }
}

fn metrics(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    page
}

fn metric(page: &str, line_start: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(line_start).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or(0)
}

#[test]
fn a_node_gets_a_tunnel_and_every_node_concerned_is_told() {
    let (_dir, service) = serve();
    let addr = service.local_addr();
    let (mut h1, w1) = NodeConnection::connect(addr, "h1", &secret(), WAIT).unwrap();
    let (mut h2, _) = NodeConnection::connect(addr, "h2", &secret(), WAIT).unwrap();
    let (mut h3, _) = NodeConnection::connect(addr, "h3", &secret(), WAIT).unwrap();
    assert!(w1.tunnels.is_empty());

    let ToNode::Granted { app_ref: 7, tunnel_id, grant, .. } =
        request(&mut h1, 7, spec("s", &["h2", "h3"], 100))
    else {
        panic!("not granted")
    };
    assert!(
        grant.period_ps >= 100_000_000 && grant.min_latency_ps > 0 && grant.max_jitter_ps > 0,
        "{grant:?}"
    );
    for receiver in [&mut h2, &mut h3] {
        match next(receiver) {
            ToNode::Opened { tunnel, .. } => {
                assert_eq!(
                    (tunnel.tunnel_id, tunnel.sender.as_str(), tunnel.grant),
                    (tunnel_id, "h1", grant)
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // A second tunnel on the same links moves the first one's bounds: both ends hear of it.
    let ToNode::Granted { .. } = request(&mut h1, 8, spec("t", &["h2"], 50)) else { panic!("not granted") };
    let mut changed_at_h2 = false;
    while let Some(m) = h2.recv(Duration::from_millis(200)).unwrap() {
        changed_at_h2 |= matches!(m, ToNode::BandwidthChanged { tunnel_id: t, .. } if t == tunnel_id);
    }
    assert!(changed_at_h2, "the receiver of the first tunnel heard of its new bounds");

    let refused = request(&mut h1, 9, spec("huge", &["h2"], 0));
    assert!(
        matches!(&refused, ToNode::Refused { app_ref: 9, reason, .. } if reason.contains("period")),
        "{refused:?}"
    );

    h1.send(&ToController::Release { tunnel_id }).unwrap();
    let mut released = 0;
    for conn in [&mut h1, &mut h3] {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            match conn.recv(Duration::from_millis(100)).unwrap() {
                Some(ToNode::Released { tunnel_id: t }) if t == tunnel_id => {
                    released += 1;
                    break;
                }
                _ => {}
            }
        }
    }
    assert_eq!(released, 2, "the sender and the receiver that has no other tunnel heard of the release");
    let page = metrics(service.metrics_addr().unwrap());
    assert_eq!(metric(&page, "kairos_lane_tunnels "), 1, "{page}");
    assert_eq!(metric(&page, "kairos_lane_nodes_connected "), 3, "{page}");
    assert_eq!(metric(&page, "kairos_lane_requests_admitted_total "), 2, "{page}");
    assert!(page.contains("kairos_lane_link_reserved_bps{from=\"h1\",to=\"sw\""), "{page}");
    service.stop().unwrap();
}

#[test]
fn strangers_garbage_and_foreign_requests_are_refused_while_nodes_are_served() {
    let (_dir, service) = serve();
    let addr = service.local_addr();
    let (mut h1, _) = NodeConnection::connect(addr, "h1", &secret(), WAIT).unwrap();
    let (mut h2, _) = NodeConnection::connect(addr, "h2", &secret(), WAIT).unwrap();
    let ToNode::Granted { tunnel_id, .. } = request(&mut h1, 1, spec("s", &["h2"], 100)) else { panic!() };
    let _opened = next(&mut h2);

    // No secret.
    let wrong = Secret::new(b"another secret of enough bytes".to_vec()).unwrap();
    let e = NodeConnection::connect(addr, "h3", &wrong, WAIT).unwrap_err();
    assert!(matches!(&e, ClientError::Rejected { reason, .. } if reason.contains("wrong secret")), "{e}");
    // A host the topology does not have, with the secret.
    let e = NodeConnection::connect(addr, "sw", &secret(), WAIT).unwrap_err();
    assert!(matches!(&e, ClientError::Rejected { reason, .. } if reason.contains("not a host")), "{e}");
    // Garbage instead of a hello; a length prefix of 2 GiB; a frame cut short.
    for bytes in [&b"\x00\x00\x00\x05hello"[..], &[0x80, 0, 0, 0], &[0, 0, 0, 100, 1, 2, 3]] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.read_to_end(&mut rest).unwrap();
    }
    // A node acting for another host's tunnel.
    h2.send(&ToController::Release { tunnel_id }).unwrap();
    let m = answer(&mut h2, 0);
    assert!(
        matches!(&m, ToNode::Refused { reason, .. } if reason.contains("not sent by host 'h2'")),
        "{m:?}"
    );
    // An authenticated node's frame that does not parse is refused and the node stays; a
    // frame whose tag is wrong ends that node's connection only.
    let mut raw = RawNode::handshake(addr, "h3");
    raw.send_sealed(b"{\"type\":\"launch\"}");
    let m = raw.recv_sealed();
    assert!(
        matches!(&m, ToNode::Rejected { closing: false, reason } if reason.contains("not a message")),
        "{m:?}"
    );
    let mut forged = Vec::new();
    put_frame(&[7u8; 40], &mut forged);
    raw.stream.write_all(&forged).unwrap();
    let m = raw.recv_sealed();
    assert!(matches!(&m, ToNode::Rejected { closing: true, reason } if reason.contains("tag")), "{m:?}");
    assert_eq!(raw.stream.read(&mut [0u8; 16]).unwrap(), 0, "the connection is closed after it");

    // The nodes are still served.
    let ToNode::Granted { .. } = request(&mut h1, 2, spec("after", &["h2"], 200)) else {
        panic!("not served")
    };
    let page = metrics(service.metrics_addr().unwrap());
    for (reason, at_least) in [
        ("bad_tag", 1),
        ("bad_proof", 1),
        ("unknown_host", 1),
        ("malformed", 2),
        ("too_large", 1),
        ("truncated", 1),
        ("foreign_tunnel", 1),
    ] {
        let n = metric(&page, &format!("kairos_lane_frames_refused_total{{reason=\"{reason}\"}} "));
        assert!(n >= at_least, "{reason}: {n}\n{page}");
    }
    service.stop().unwrap();
}

#[test]
fn a_restarted_controller_holds_the_same_allocation_and_nodes_reconnect() {
    let (dir, service) = serve();
    let addr = service.local_addr();
    let (mut h1, _) = NodeConnection::connect(addr, "h1", &secret(), WAIT).unwrap();
    let (mut h2, _) = NodeConnection::connect(addr, "h2", &secret(), WAIT).unwrap();
    let mut ids = Vec::new();
    for (i, (name, to, period)) in
        [("a", &["h2"][..], 100), ("b", &["h3"], 70), ("c", &["h2", "h3"], 300)].into_iter().enumerate()
    {
        let ToNode::Granted { tunnel_id, .. } = request(&mut h1, i as u64, spec(name, to, period)) else {
            panic!()
        };
        ids.push(tunnel_id);
    }
    let ToNode::Granted { .. } = request(&mut h2, 9, spec("back", &["h1"], 150)) else { panic!() };
    // h1's node reports its host's delay: its tunnels' bounds widen, and the journal keeps it.
    let (core_jitter_ps, per_receiver_ps) = (40 * 1_000_000, 15 * 1_000_000);
    h1.send(&ToController::HostDelay { core_jitter_ps, per_receiver_ps }).unwrap();
    let mut widened = Vec::new();
    loop {
        match next(&mut h1) {
            ToNode::HostDelayKnown { core_jitter_ps: c, per_receiver_ps: p } => {
                assert_eq!((c, p), (core_jitter_ps, per_receiver_ps));
                break;
            }
            ToNode::BandwidthChanged { tunnel_id, grant, reason: Reason::Host, .. } => {
                widened.push((tunnel_id, grant.max_jitter_ps));
            }
            ToNode::Opened { .. } => {} // h2's tunnel to h1, told earlier
            other => panic!("{other:?}"),
        }
    }
    // Told again, it is answered and not journaled; past an hour it is refused.
    h1.send(&ToController::HostDelay { core_jitter_ps, per_receiver_ps }).unwrap();
    assert!(matches!(next(&mut h1), ToNode::HostDelayKnown { .. }));
    h1.send(&ToController::HostDelay { core_jitter_ps: u64::MAX, per_receiver_ps }).unwrap();
    assert!(
        matches!(next(&mut h1), ToNode::Refused { ref reason, .. } if reason.starts_with("a host's delay is at most")),
    );
    widened.sort();
    assert_eq!(widened.iter().map(|w| w.0).collect::<Vec<_>>(), ids, "each of h1's tunnels: {widened:?}");
    assert!(widened.iter().all(|w| w.1 >= core_jitter_ps), "{widened:?}");
    h1.send(&ToController::Release { tunnel_id: ids[1] }).unwrap();
    h1.send(&ToController::Change { app_ref: 5, tunnel_id: ids[0], tunnel: spec("a2", &["h2"], 120) })
        .unwrap();
    // Wait for the change's grant, so that every input above was handled.
    assert!(matches!(answer(&mut h1, 5), ToNode::Granted { .. }));
    let mut link = ControllerLink::new(addr, "h2", secret());
    assert!(matches!(link.poll(WAIT), Some(LinkEvent::Connected(_))));
    std::thread::sleep(Duration::from_millis(20)); // past the grace period: the old tunnel goes
    let before = service.stop().unwrap();
    let tunnels = |s: &ControllerService| {
        s.core()
            .controller()
            .allocation()
            .tunnels()
            .into_iter()
            .map(|t| (t.id, t.request.clone(), t.resources))
            .collect::<Vec<_>>()
    };
    let held = tunnels(&before);
    assert_eq!(held.len(), 3, "c, back and a2 remain: {held:?}");
    drop(before); // the sockets close as a crash would close them

    let again = ControllerService::start(config(dir.path(), addr)).unwrap();
    assert_eq!(again.replayed(), 7);
    let again = again.spawn().unwrap();
    // The node's link notices the loss and comes back with the tunnels the controller kept.
    let deadline = Instant::now() + WAIT;
    let welcome = loop {
        assert!(Instant::now() < deadline, "the node reconnected");
        if let Some(LinkEvent::Connected(w)) = link.poll(Duration::from_millis(100)) {
            break w;
        }
    };
    let mut names: Vec<_> = welcome.tunnels.iter().map(|t| t.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["a2", "back", "c"], "h2 sends or receives on these");
    let after = again.stop().unwrap();
    assert_eq!(tunnels(&after), held, "the same tunnels, periods and bounds");
}

/// A node speaking the protocol by hand, to send what the client library never would.
struct RawNode {
    stream: TcpStream,
    reader: FrameReader,
    session: Session,
}

impl RawNode {
    fn frame(stream: &mut TcpStream, reader: &mut FrameReader) -> Vec<u8> {
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(body) = reader.next_frame().unwrap() {
                return body.to_vec();
            }
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "the controller closed the connection");
            reader.push(&buf[..n]);
        }
    }

    fn handshake(addr: SocketAddr, host: &str) -> Self {
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut reader = FrameReader::new();
        let ToNode::Challenge { nonce, .. } =
            serde_json::from_slice(&Self::frame(&mut stream, &mut reader)).unwrap()
        else {
            panic!("no challenge")
        };
        let theirs = auth::parse_nonce(&nonce).unwrap();
        let ours = auth::nonce().unwrap();
        let proof = auth::hello_proof(&secret(), &theirs, &ours, host);
        let hello = Hello { version: VERSION, host: host.into(), nonce: auth::hex(&ours), proof };
        let mut out = Vec::new();
        put_frame(&serde_json::to_vec(&hello).unwrap(), &mut out);
        stream.write_all(&out).unwrap();
        let mut node = Self { stream, reader, session: Session::new(&secret(), &theirs, &ours, Role::Node) };
        assert!(matches!(node.recv_sealed(), ToNode::Welcome { .. }));
        node
    }

    fn send_sealed(&mut self, payload: &[u8]) {
        let mut body = Vec::new();
        self.session.seal(payload, &mut body);
        let mut out = Vec::new();
        put_frame(&body, &mut out);
        self.stream.write_all(&out).unwrap();
    }

    fn recv_sealed(&mut self) -> ToNode {
        let body = Self::frame(&mut self.stream, &mut self.reader);
        serde_json::from_slice(self.session.open(&body).unwrap()).unwrap()
    }
}
